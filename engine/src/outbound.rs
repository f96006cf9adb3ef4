//! The one HTTP client for everything the gateway calls out to: worker endpoints, poll URLs,
//! seeker webhooks, deliverable files.
//!
//! SSRF defence: host names resolve through `FilteringResolver`, which drops private,
//! loopback, link-local and other non-public addresses *after* DNS resolution, so the address
//! checked is the address connected to (no rebinding window); IP-literal URLs are checked
//! before the request is built. Redirects are not followed (a redirect could point anywhere)
//! and system proxies are ignored (a proxy would resolve names where we cannot check them).
//! `outbound.allow_private_targets = true` lifts the address filter for local development
//! and tests.
//!
//! A connection can end before the server answers anything: a keep-alive connection the server
//! closed while idle (many close idle connections after a second) is taken from the pool just
//! as the close arrives, the request is written into it and the connection is reset. hyper
//! resends by itself only a request it never began to write; one it wrote surfaces as an error
//! ([`OutboundError::ConnectionLost`]), because the server may have read it. [`OutboundClient::send`]
//! sends once more, at once and on a new connection (never a pooled one), what is safe to send
//! again: any request whose connection could not even be opened (nothing was sent), and a
//! request with an idempotent method (RFC 9110 §9.2.2) whose connection was lost before any
//! answer. Other requests are sent again only by [`OutboundClient::send_keyed`], for callers
//! whose request carries a key the receiver deduplicates by (a hire's `Idempotency-Key`, a
//! WattSwarm `execution_id`): the receiver then sees the repetition as the same request, so the
//! worst case is a repeated request answered from its first run, never a second run. Nothing
//! else resends: besides hyper's unwritten requests, reqwest's default policy resends only what
//! an HTTP/2 server says it refused unprocessed (`REFUSED_STREAM`, a graceful `GOAWAY`).
//!
//! HIRE's Security section asks for HTTPS everywhere: with `outbound.require_https` (on by
//! default) a plain `http` URL is refused before anything is sent ([`OutboundError::InsecureScheme`]),
//! whichever caller built it (worker endpoint, poll URL, deliverable file, webhook). Local
//! development and the tests turn it off next to `allow_private_targets`.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, LazyLock},
    time::{Duration, Instant},
};

use ipnet::{Ipv4Net, Ipv6Net};
use reqwest::{
    Method, RequestBuilder, Response,
    dns::{Addrs, Name, Resolve, Resolving},
    redirect,
};
use url::{Host, Url};

use crate::settings::OutboundSettings;

/// An outbound call failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum OutboundError {
    /// The target resolves only to addresses the gateway must not reach.
    #[error(
        "target `{host}` is not allowed: it is a private, loopback or otherwise non-public address"
    )]
    BlockedTarget {
        /// Host as written in the URL.
        host: String,
    },
    /// Only http and https are spoken.
    #[error("URL scheme `{scheme}` is not allowed (http or https only)")]
    UnsupportedScheme {
        /// The scheme found.
        scheme: String,
    },
    /// Plain `http` while `outbound.require_https` is on.
    #[error("`{url}` is plain http; this gateway only calls https URLs (outbound.require_https)")]
    InsecureScheme {
        /// The refused URL (scheme, host and path; never a query, which may carry a token).
        url: String,
    },
    /// No response within the time limit.
    #[error("request timed out")]
    Timeout,
    /// Name resolution or connection failed.
    #[error("cannot connect: {0}")]
    Connect(#[source] reqwest::Error),
    /// The response body is larger than allowed.
    #[error("response body exceeds {limit} bytes")]
    ResponseTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The connection was closed or reset after the request was handed to it and before any
    /// answer came back: the server may or may not have read the request.
    #[error("the connection was lost before any answer: {0}")]
    ConnectionLost(#[source] reqwest::Error),
    /// Any other transport failure.
    #[error("HTTP request failed: {0}")]
    Http(#[source] reqwest::Error),
    /// The client could not be constructed (TLS backend initialisation).
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
}

impl OutboundError {
    fn from_reqwest(error: reqwest::Error) -> Self {
        if let Some(host) = blocked_host_in_chain(&error) {
            return Self::BlockedTarget { host };
        }
        if error.is_timeout() {
            Self::Timeout
        } else if error.is_connect() {
            Self::Connect(error)
        } else {
            Self::Http(error)
        }
    }

    /// A failed send (no response head yet): [`Self::from_reqwest`], with a connection lost
    /// before any answer told apart from other failures.
    fn from_send(error: reqwest::Error) -> Self {
        match Self::from_reqwest(error) {
            Self::Http(error) if lost_before_answer(&error) => Self::ConnectionLost(error),
            other => other,
        }
    }

    /// Whether the request may be sent again at once: its connection could not be opened
    /// (nothing was sent), or, when `repeatable` (the receiver takes a repetition for the same
    /// request), it was lost before any answer.
    fn worth_resending(&self, repeatable: bool) -> bool {
        match self {
            Self::Connect(_) => true,
            Self::ConnectionLost(_) => repeatable,
            _ => false,
        }
    }
}

/// hyper's word for a connection that ended before the response head: closed before the
/// message completed, a request cancelled or a connection task gone before it was answered,
/// or the socket reset, aborted or broken.
fn lost_before_answer(error: &reqwest::Error) -> bool {
    use std::io::ErrorKind;

    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(hyper) = current.downcast_ref::<hyper::Error>()
            && (hyper.is_incomplete_message() || hyper.is_canceled() || hyper.is_closed())
        {
            return true;
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        source = current.source();
    }
    false
}

/// Error the resolver returns when every address of a name is filtered out.
#[derive(Debug, thiserror::Error)]
#[error("`{host}` resolves only to non-public addresses")]
struct BlockedResolution {
    host: String,
}

fn blocked_host_in_chain(error: &reqwest::Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(blocked) = current.downcast_ref::<BlockedResolution>() {
            return Some(blocked.host.clone());
        }
        source = current.source();
    }
    None
}

/// The SSRF-filtering HTTP client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct OutboundClient {
    client: reqwest::Client,
    /// The same client without a connection pool: every request on a connection of its own.
    /// What a request is sent again on, so it cannot meet another stale pooled connection.
    fresh: reqwest::Client,
    /// The client's time limit for a request that sets none.
    request_timeout: Duration,
    allow_private_targets: bool,
    require_https: bool,
    max_response_bytes: usize,
}

impl OutboundClient {
    /// Build the client from `[outbound]`.
    pub fn new(settings: &OutboundSettings) -> Result<Self, OutboundError> {
        let builder = || {
            let builder = reqwest::Client::builder()
                .user_agent(concat!("hiregate/", env!("CARGO_PKG_VERSION")))
                .connect_timeout(settings.connect_timeout())
                .timeout(settings.request_timeout())
                .redirect(redirect::Policy::none())
                .no_proxy();
            if settings.allow_private_targets {
                builder
            } else {
                builder.dns_resolver(Arc::new(FilteringResolver))
            }
        };
        Ok(Self {
            client: builder().build().map_err(OutboundError::Build)?,
            fresh: builder()
                .pool_max_idle_per_host(0)
                .build()
                .map_err(OutboundError::Build)?,
            request_timeout: settings.request_timeout(),
            allow_private_targets: settings.allow_private_targets,
            require_https: settings.require_https,
            max_response_bytes: settings.max_response_bytes,
        })
    }

    /// Whether private targets are allowed (dev/test configuration).
    pub fn allows_private_targets(&self) -> bool {
        self.allow_private_targets
    }

    /// Whether plain `http` URLs are refused (`outbound.require_https`).
    pub fn requires_https(&self) -> bool {
        self.require_https
    }

    /// Start a request to `url` after checking its scheme and, for IP literals, its address.
    /// Host names are checked when they resolve, inside the client.
    pub fn request(&self, method: Method, url: &Url) -> Result<RequestBuilder, OutboundError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(OutboundError::UnsupportedScheme {
                scheme: url.scheme().to_owned(),
            });
        }
        if self.require_https && url.scheme() == "http" {
            let mut shown = url.clone();
            shown.set_query(None);
            shown.set_fragment(None);
            return Err(OutboundError::InsecureScheme {
                url: shown.to_string(),
            });
        }
        if !self.allow_private_targets {
            let literal = match url.host() {
                Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
                Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
                Some(Host::Domain(_)) => None,
                None => {
                    return Err(OutboundError::BlockedTarget {
                        host: String::new(),
                    });
                }
            };
            if literal.is_some_and(|ip| !is_public(ip)) {
                return Err(OutboundError::BlockedTarget {
                    host: url.host_str().unwrap_or_default().to_owned(),
                });
            }
        }
        Ok(self.client.request(method, url.clone()))
    }

    /// Send a request built with [`Self::request`], classifying failures. Sent once more on a
    /// new connection when its connection could not be opened, or, for an idempotent method,
    /// was lost before any answer (see the module docs).
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, OutboundError> {
        self.send_resending(request, false).await
    }

    /// [`Self::send`] for a request that carries a key its receiver deduplicates by (a hire's
    /// `Idempotency-Key`, a WattSwarm `execution_id`), whatever its method: also sent once more
    /// when its connection was lost before any answer, since the receiver answers a repetition
    /// as the same request.
    pub async fn send_keyed(&self, request: RequestBuilder) -> Result<Response, OutboundError> {
        self.send_resending(request, true).await
    }

    async fn send_resending(
        &self,
        request: RequestBuilder,
        keyed: bool,
    ) -> Result<Response, OutboundError> {
        let request = request.build().map_err(OutboundError::from_reqwest)?;
        let repeatable = keyed || request.method().is_idempotent();
        // Bodies built from bytes (JSON, text) clone; a streamed one cannot be sent twice.
        let copy = request.try_clone();
        let sent_at = Instant::now();
        let error = match self.client.execute(request).await {
            Ok(response) => return Ok(response),
            Err(error) => OutboundError::from_send(error),
        };
        let Some(mut again) = copy.filter(|_| error.worth_resending(repeatable)) else {
            return Err(error);
        };
        // One time limit for both sends together.
        let limit = again
            .timeout()
            .copied()
            .unwrap_or(self.request_timeout)
            .saturating_sub(sent_at.elapsed());
        if limit.is_zero() {
            return Err(error);
        }
        *again.timeout_mut() = Some(limit);
        let mut shown = again.url().clone();
        shown.set_query(None);
        tracing::info!(method = %again.method(), url = %shown, error = %error, "connection lost before any answer: sending the request once more on a new connection");
        self.fresh
            .execute(again)
            .await
            .map_err(OutboundError::from_send)
    }

    /// GET `url` with a per-call time limit.
    pub async fn get(&self, url: &Url, timeout: Duration) -> Result<Response, OutboundError> {
        self.send(self.request(Method::GET, url)?.timeout(timeout))
            .await
    }

    /// Read a response body, refusing more than `min(limit, outbound.max_response_bytes)`.
    pub async fn read_body(
        &self,
        mut response: Response,
        limit: usize,
    ) -> Result<Vec<u8>, OutboundError> {
        let limit = limit.min(self.max_response_bytes);
        if response
            .content_length()
            .is_some_and(|declared| declared > limit as u64)
        {
            return Err(OutboundError::ResponseTooLarge { limit });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(OutboundError::from_reqwest)?
        {
            if body.len() + chunk.len() > limit {
                return Err(OutboundError::ResponseTooLarge { limit });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Resolves with the system resolver, then keeps only public addresses.
#[derive(Debug)]
struct FilteringResolver;

impl Resolve for FilteringResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            // Port 0: reqwest replaces it with the URL's port.
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|addr| is_public(addr.ip()))
                .collect();
            if resolved.is_empty() {
                return Err(Box::new(BlockedResolution { host })
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            let addrs: Addrs = Box::new(resolved.into_iter());
            Ok(addrs)
        })
    }
}

static BLOCKED_V4: LazyLock<Vec<Ipv4Net>> = LazyLock::new(|| {
    [
        "0.0.0.0/8",       // "this network"
        "10.0.0.0/8",      // private
        "100.64.0.0/10",   // carrier-grade NAT
        "127.0.0.0/8",     // loopback
        "169.254.0.0/16",  // link-local, cloud metadata
        "172.16.0.0/12",   // private
        "192.0.0.0/24",    // IETF protocol assignments
        "192.0.2.0/24",    // documentation
        "192.88.99.0/24",  // 6to4 relay anycast
        "192.168.0.0/16",  // private
        "198.18.0.0/15",   // benchmarking
        "198.51.100.0/24", // documentation
        "203.0.113.0/24",  // documentation
        "224.0.0.0/4",     // multicast
        "240.0.0.0/4",     // reserved, broadcast
    ]
    .iter()
    .filter_map(|net| net.parse().ok())
    .collect()
});

static BLOCKED_V6: LazyLock<Vec<Ipv6Net>> = LazyLock::new(|| {
    [
        "::/128",        // unspecified
        "::1/128",       // loopback
        "100::/64",      // discard
        "2001::/32",     // Teredo (tunnels to arbitrary IPv4)
        "2001:db8::/32", // documentation
        "fc00::/7",      // unique local
        "fe80::/10",     // link-local
        "ff00::/8",      // multicast
    ]
    .iter()
    .filter_map(|net| net.parse().ok())
    .collect()
});

/// Whether the gateway may connect to `ip` when private targets are not allowed.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            // Addresses that embed an IPv4 address are judged by that address.
            if let Some(v4) = embedded_v4(v6) {
                return is_public_v4(v4);
            }
            !BLOCKED_V6.iter().any(|net| net.contains(&v6))
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    !BLOCKED_V4.iter().any(|net| net.contains(&ip))
}

fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let segments = ip.segments();
    let tail = || {
        Ipv4Addr::new(
            (segments[6] >> 8) as u8,
            segments[6] as u8,
            (segments[7] >> 8) as u8,
            segments[7] as u8,
        )
    };
    if let Some(mapped) = ip.to_ipv4_mapped() {
        return Some(mapped);
    }
    // ::a.b.c.d (deprecated IPv4-compatible) and 64:ff9b::a.b.c.d (NAT64).
    if segments[..6] == [0, 0, 0, 0, 0, 0] && !(segments[6] == 0 && segments[7] <= 1) {
        return Some(tail());
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail());
    }
    // 2002:a.b.c.d::/48 (6to4).
    if segments[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (segments[1] >> 8) as u8,
            segments[1] as u8,
            (segments[2] >> 8) as u8,
            segments[2] as u8,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_blocked() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.20.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip} should be blocked");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip} should pass");
        }
    }
}
