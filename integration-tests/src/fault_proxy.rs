//! A fault-injecting HTTP proxy between the gateway and a real facilitator.
//!
//! It only injects faults a real facilitator cannot produce on demand: an answer lost after the
//! transfer went through (a timeout, a 5xx from a load balancer, a garbled body), or the same
//! faults before anything was forwarded. Everything else — verification, signatures, the
//! transfer itself — is the real facilitator's work on a real chain.
//!
//! | fault | forwards to the facilitator | answers the gateway |
//! |---|---|---|
//! | [`Fault::PASS`] | yes | the facilitator's answer |
//! | [`Fault::after_forward`]`(Answer::Hang)` | yes, and waits for its answer | nothing, until the gateway gives up |
//! | [`Fault::after_forward`]`(Answer::Empty500 / Html500 / Garbage200)` | yes, and waits | that answer instead |
//! | [`Fault::instead_of_forward`]`(…)` | no | the same answers, nothing reached the facilitator |
//!
//! Faults are scripted per path (`/verify`, `/settle`, …) as a queue: each request takes the first
//! queued fault meant for it (any request, or only one whose body contains a given text such as
//! a payment's nonce, so concurrent payments get their own faults); without one it passes
//! through. Forwarding runs on its own task, so
//! a gateway that hangs up mid-request cannot cancel a transfer the proxy already asked for.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use url::Url;

/// How long a "hanging" answer holds the connection: longer than any client timeout in the tests.
const HANG: Duration = Duration::from_secs(600);
/// Time limit of one forwarded call (the official facilitator waits for a receipt).
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);

/// What the proxy answers the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The facilitator's own answer (only meaningful when forwarded).
    Upstream,
    /// No answer at all: the connection stays open until the client gives up.
    Hang,
    /// HTTP 500 with an empty body.
    Empty500,
    /// HTTP 500 with an HTML error page, as a reverse proxy in front of a facilitator sends.
    Html500,
    /// HTTP 200 with a body that is not a facilitator verdict.
    Garbage200,
}

/// One scripted request: whether it reaches the facilitator, and what the gateway gets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// Whether the request is forwarded to the facilitator (which then really verifies/settles).
    pub forward: bool,
    /// What the gateway gets.
    pub answer: Answer,
}

impl Fault {
    /// Forward and relay the answer: no fault.
    pub const PASS: Self = Self {
        forward: true,
        answer: Answer::Upstream,
    };

    /// Forward (the facilitator acts), then answer `answer` instead of the facilitator's verdict.
    pub fn after_forward(answer: Answer) -> Self {
        Self {
            forward: true,
            answer,
        }
    }

    /// Answer `answer` without forwarding: the facilitator never hears of the request.
    pub fn instead_of_forward(answer: Answer) -> Self {
        Self {
            forward: false,
            answer,
        }
    }
}

/// What the facilitator answered one forwarded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamAnswer {
    /// HTTP status, or `None` when the facilitator could not be reached.
    pub status: Option<u16>,
    /// Body text (or the transport error).
    pub body: String,
}

#[derive(Default)]
struct Book {
    script: HashMap<String, VecDeque<(Option<String>, Fault)>>,
    received: HashMap<String, usize>,
    upstream: HashMap<String, Vec<UpstreamAnswer>>,
}

struct Shared {
    upstream: Url,
    http: reqwest::Client,
    book: Mutex<Book>,
}

impl Shared {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panicking handler cannot leave the book half-written: every update is one statement.
        self.book
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The proxy, serving on `127.0.0.1:<free port>` until dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("address", &self.address)
            .field("upstream", &self.shared.upstream.as_str())
            .finish_non_exhaustive()
    }
}

impl FaultProxy {
    /// Starts a proxy in front of `upstream` (the facilitator's base URL).
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(upstream: Url) -> std::io::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(UPSTREAM_TIMEOUT)
            .build()
            .map_err(std::io::Error::other)?;
        let shared = Arc::new(Shared {
            upstream,
            http,
            book: Mutex::new(Book::default()),
        });
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let address = listener.local_addr()?;
        let router = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            shared,
            address,
            task,
        })
    }

    /// Base URL (`http://127.0.0.1:<port>/`) to give the gateway as its facilitator.
    pub fn url(&self) -> Url {
        // An IP and a port always make a valid http URL.
        Url::parse(&format!("http://{}/", self.address)).unwrap_or_else(|_| unreachable!())
    }

    /// Appends `faults` to the queue of `path` (e.g. `/settle`), for any request.
    pub fn script(&self, path: &str, faults: impl IntoIterator<Item = Fault>) {
        self.shared
            .book()
            .script
            .entry(path.to_owned())
            .or_default()
            .extend(faults.into_iter().map(|fault| (None, fault)));
    }

    /// Appends `faults` to the queue of `path`, each for the next request whose body contains
    /// `needle` (compared in lower case; e.g. a payment's nonce).
    pub fn script_for(&self, path: &str, needle: &str, faults: impl IntoIterator<Item = Fault>) {
        let needle = needle.to_lowercase();
        self.shared
            .book()
            .script
            .entry(path.to_owned())
            .or_default()
            .extend(
                faults
                    .into_iter()
                    .map(|fault| (Some(needle.clone()), fault)),
            );
    }

    /// Requests the gateway sent to `path`.
    pub fn received(&self, path: &str) -> usize {
        self.shared.book().received.get(path).copied().unwrap_or(0)
    }

    /// The facilitator's answers to the requests forwarded on `path`, in order.
    pub fn upstream_answers(&self, path: &str) -> Vec<UpstreamAnswer> {
        self.shared
            .book()
            .upstream
            .get(path)
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let fault = {
        let text = String::from_utf8_lossy(&body).to_lowercase();
        let mut book = shared.book();
        *book.received.entry(path.clone()).or_default() += 1;
        book.script
            .get_mut(&path)
            .and_then(|queue| {
                let index = queue.iter().position(|(needle, _)| {
                    needle
                        .as_ref()
                        .is_none_or(|needle| text.contains(needle.as_str()))
                })?;
                queue.remove(index)
            })
            .map_or(Fault::PASS, |(_, fault)| fault)
    };
    let upstream = if fault.forward {
        let forwarded = tokio::spawn(forward(Arc::clone(&shared), method, uri, headers, body));
        let answer = forwarded.await.unwrap_or_else(|error| UpstreamAnswer {
            status: None,
            body: format!("forwarding task failed: {error}"),
        });
        shared
            .book()
            .upstream
            .entry(path)
            .or_default()
            .push(answer.clone());
        Some(answer)
    } else {
        None
    };
    match fault.answer {
        Answer::Upstream => match upstream {
            Some(UpstreamAnswer {
                status: Some(status),
                body,
            }) => json_response(
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                body,
            ),
            Some(UpstreamAnswer { status: None, body }) => {
                (StatusCode::BAD_GATEWAY, body).into_response()
            }
            None => (StatusCode::BAD_GATEWAY, "nothing forwarded").into_response(),
        },
        Answer::Hang => {
            tokio::time::sleep(HANG).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Answer::Empty500 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        Answer::Html500 => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/html")],
            "<html><head><title>500 Internal Server Error</title></head>\
             <body><h1>Internal Server Error</h1></body></html>",
        )
            .into_response(),
        Answer::Garbage200 => json_response(StatusCode::OK, "{\"ok\": tru".to_owned()),
    }
}

async fn forward(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> UpstreamAnswer {
    let target = match shared.upstream.join(
        uri.path_and_query()
            .map_or("/", |p| p.as_str())
            .trim_start_matches('/'),
    ) {
        Ok(target) => target,
        Err(error) => {
            return UpstreamAnswer {
                status: None,
                body: format!("bad upstream URL: {error}"),
            };
        }
    };
    let mut request = shared.http.request(method, target).body(body);
    for (name, value) in &headers {
        // Hop-by-hop and length headers are the client library's business.
        if name != header::HOST && name != header::CONTENT_LENGTH && name != header::CONNECTION {
            request = request.header(name, value);
        }
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let body = response
                .text()
                .await
                .unwrap_or_else(|error| format!("unreadable body: {error}"));
            UpstreamAnswer {
                status: Some(status),
                body,
            }
        }
        Err(error) => UpstreamAnswer {
            status: None,
            body: error.to_string(),
        },
    }
}

fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::routing::post;
    use serde_json::Value;

    use super::*;

    /// An upstream that counts what reached it and answers a verdict.
    async fn upstream() -> (Url, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let router = Router::new().route(
            "/settle",
            post(move || {
                let counted = Arc::clone(&counted);
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    json_response(StatusCode::OK, r#"{"success":true}"#.to_owned())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = Url::parse(&format!("http://{}/", listener.local_addr().unwrap())).unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        (url, hits, task)
    }

    #[tokio::test]
    async fn scripted_faults_reach_the_upstream_exactly_when_they_say_so() {
        let (url, hits, _server) = upstream().await;
        let proxy = FaultProxy::start(url).await.unwrap();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let settle = proxy.url().join("settle").unwrap();
        proxy.script_for(
            "/settle",
            "NONCE-B",
            [Fault::after_forward(Answer::Html500)],
        );
        proxy.script(
            "/settle",
            [
                Fault::instead_of_forward(Answer::Garbage200),
                Fault::after_forward(Answer::Hang),
            ],
        );
        let send = |body: &'static str| client.post(settle.clone()).body(body).send();

        // Body "a" takes the first fault for any request: garbage, nothing forwarded.
        let garbage = send("nonce-a").await.unwrap();
        assert_eq!(garbage.status(), 200);
        assert!(serde_json::from_str::<Value>(&garbage.text().await.unwrap()).is_err());
        assert_eq!(hits.load(Ordering::SeqCst), 0);
        // Body "b" takes its own fault (case-insensitive match), forwarded.
        let html = send("nonce-b").await.unwrap();
        assert_eq!(html.status(), 500);
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        // The hang is forwarded, then the client times out.
        assert!(send("nonce-a").await.unwrap_err().is_timeout());
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // Queue empty: the upstream's own answer.
        let passed = send("nonce-a").await.unwrap();
        assert_eq!(passed.text().await.unwrap(), r#"{"success":true}"#);
        assert_eq!(proxy.received("/settle"), 4);
        assert_eq!(proxy.upstream_answers("/settle").len(), 3);
    }
}
