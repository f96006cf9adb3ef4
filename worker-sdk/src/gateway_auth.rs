//! Checks the gateway's contract token on every forwarded call.
//!
//! The gateway signs a contract token (JWS, EdDSA or ES256, `kid` in the header) and sends
//! it as `Authorization: Bearer <token>`. The worker verifies it offline against the
//! gateway's JWKS — given up front ([`GatewayKeys::fixed`]) or fetched from
//! `<gateway>/.well-known/jwks.json` and cached ([`GatewayKeys::remote`]), refetched when a
//! token names a key id the cache does not know (key rotation) — and requires the token's
//! contract id to equal `X-Contract-ID` (and, when the worker knows its id, the token's
//! worker to be this worker). The token format and its verification are
//! `hiregate_contracts::token`'s.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use hiregate_contracts::time::Timestamp;
pub use hiregate_contracts::token::Jwks;
use hiregate_contracts::token::{self, ContractTokenClaims, TokenError};
use tokio::sync::{Mutex, RwLock};
use url::Url;

use crate::ids::{ContractId, WorkerId};

/// Default time between two refetches triggered by unknown key ids; bounds the load a
/// caller can cause by sending tokens with made-up `kid`s.
pub const DEFAULT_MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(30);
/// Default age after which a cached JWKS is refetched before use.
pub const DEFAULT_MAX_JWKS_AGE: Duration = Duration::from_secs(60 * 60);
/// Largest JWKS document accepted from the gateway.
const MAX_JWKS_BYTES: usize = 256 * 1024;
const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the worker gets the gateway's public keys.
#[derive(Debug, Clone)]
pub struct GatewayKeys {
    source: KeySource,
}

#[derive(Debug, Clone)]
enum KeySource {
    Fixed(Arc<Jwks>),
    Remote(RemoteSettings),
}

#[derive(Debug, Clone)]
struct RemoteSettings {
    url: Url,
    client: Option<reqwest::Client>,
    min_refresh_interval: Duration,
    max_age: Duration,
}

impl GatewayKeys {
    /// A fixed key set (configuration or tests); never refetched.
    #[must_use]
    pub fn fixed(jwks: Jwks) -> Self {
        Self {
            source: KeySource::Fixed(Arc::new(jwks)),
        }
    }

    /// Keys fetched from `jwks_url` (normally `<gateway>/.well-known/jwks.json`) on first
    /// use, cached, refetched after [`DEFAULT_MAX_JWKS_AGE`] and when a token carries an
    /// unknown key id (at most once per [`DEFAULT_MIN_REFRESH_INTERVAL`]).
    #[must_use]
    pub fn remote(jwks_url: Url) -> Self {
        Self {
            source: KeySource::Remote(RemoteSettings {
                url: jwks_url,
                client: None,
                min_refresh_interval: DEFAULT_MIN_REFRESH_INTERVAL,
                max_age: DEFAULT_MAX_JWKS_AGE,
            }),
        }
    }

    /// Sets the minimum time between refetches caused by unknown key ids (remote only).
    #[must_use]
    pub fn min_refresh_interval(mut self, interval: Duration) -> Self {
        if let KeySource::Remote(settings) = &mut self.source {
            settings.min_refresh_interval = interval;
        }
        self
    }

    /// Sets the age after which the cached key set is refetched (remote only).
    #[must_use]
    pub fn max_age(mut self, max_age: Duration) -> Self {
        if let KeySource::Remote(settings) = &mut self.source {
            settings.max_age = max_age;
        }
        self
    }

    /// Uses this HTTP client to fetch the key set (remote only).
    #[must_use]
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        if let KeySource::Remote(settings) = &mut self.source {
            settings.client = Some(client);
        }
        self
    }

    pub(crate) fn into_verifier(
        self,
        expected_worker: Option<WorkerId>,
    ) -> Result<TokenVerifier, reqwest::Error> {
        let keys = match self.source {
            KeySource::Fixed(jwks) => Keys::Fixed(jwks),
            KeySource::Remote(settings) => {
                let client = match settings.client {
                    Some(client) => client,
                    None => reqwest::Client::builder()
                        .timeout(JWKS_FETCH_TIMEOUT)
                        .build()?,
                };
                Keys::Remote(Box::new(RemoteJwks {
                    url: settings.url,
                    client,
                    min_refresh_interval: settings.min_refresh_interval,
                    max_age: settings.max_age,
                    cache: RwLock::new(None),
                    refresh: Mutex::new(()),
                }))
            }
        };
        Ok(TokenVerifier {
            keys,
            expected_worker,
        })
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer …` header.
    #[error("missing gateway contract token (Authorization: Bearer)")]
    MissingToken,
    /// The token did not verify (shape, signature, algorithm, expiry or claims).
    #[error("invalid gateway contract token: {0}")]
    InvalidToken(String),
    /// The token is valid for another contract than `X-Contract-ID`.
    #[error("contract token is for another contract than X-Contract-ID")]
    ContractMismatch,
    /// The token was issued for another worker.
    #[error("contract token is for another worker")]
    WrongWorker,
    /// The gateway's keys could not be fetched, so no token can be checked right now.
    #[error("gateway keys unavailable: {0}")]
    KeysUnavailable(String),
}

/// Verifies contract tokens against the configured keys.
#[derive(Debug)]
pub(crate) struct TokenVerifier {
    keys: Keys,
    expected_worker: Option<WorkerId>,
}

#[derive(Debug)]
enum Keys {
    Fixed(Arc<Jwks>),
    Remote(Box<RemoteJwks>),
}

impl TokenVerifier {
    /// Verifies `token` and checks it is for `contract_id` (and this worker).
    pub(crate) async fn verify(
        &self,
        token: &str,
        contract_id: &ContractId,
    ) -> Result<ContractTokenClaims, AuthError> {
        let claims = match &self.keys {
            Keys::Fixed(jwks) => verify_now(token, jwks).map_err(|e| invalid(&e))?,
            Keys::Remote(remote) => remote.verify(token).await?,
        };
        if claims.contract_id != *contract_id {
            return Err(AuthError::ContractMismatch);
        }
        if let Some(worker) = &self.expected_worker
            && claims.worker != *worker
        {
            return Err(AuthError::WrongWorker);
        }
        Ok(claims)
    }
}

fn verify_now(token: &str, jwks: &Jwks) -> Result<ContractTokenClaims, TokenError> {
    token::verify_contract_token(token, jwks, Timestamp::from(Utc::now()))
}

fn invalid(error: &TokenError) -> AuthError {
    AuthError::InvalidToken(error.to_string())
}

struct CachedJwks {
    jwks: Arc<Jwks>,
    fetched_at: Instant,
}

struct RemoteJwks {
    url: Url,
    client: reqwest::Client,
    min_refresh_interval: Duration,
    max_age: Duration,
    cache: RwLock<Option<CachedJwks>>,
    /// Serialises fetches so a burst of requests causes one fetch, not one each.
    refresh: Mutex<()>,
}

impl fmt::Debug for RemoteJwks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteJwks")
            .field("url", &self.url.as_str())
            .field("min_refresh_interval", &self.min_refresh_interval)
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

impl RemoteJwks {
    async fn verify(&self, token: &str) -> Result<ContractTokenClaims, AuthError> {
        let (jwks, fetched_at) = self.current().await?;
        match verify_now(token, &jwks) {
            Err(TokenError::UnknownKeyId(_))
                if fetched_at.elapsed() >= self.min_refresh_interval =>
            {
                let (jwks, _) = self.fetch_unless_newer_than(fetched_at).await?;
                verify_now(token, &jwks).map_err(|e| invalid(&e))
            }
            other => other.map_err(|e| invalid(&e)),
        }
    }

    async fn current(&self) -> Result<(Arc<Jwks>, Instant), AuthError> {
        if let Some(cached) = &*self.cache.read().await
            && cached.fetched_at.elapsed() < self.max_age
        {
            return Ok((Arc::clone(&cached.jwks), cached.fetched_at));
        }
        let stale = self
            .cache
            .read()
            .await
            .as_ref()
            .map(|c| c.fetched_at)
            .unwrap_or_else(Instant::now);
        match self.fetch_unless_newer_than(stale).await {
            Ok(fresh) => Ok(fresh),
            // An expired cache beats no keys at all while the gateway is unreachable.
            Err(error) => match &*self.cache.read().await {
                Some(cached) => {
                    tracing::warn!(%error, "using expired gateway JWKS; refetch failed");
                    Ok((Arc::clone(&cached.jwks), cached.fetched_at))
                }
                None => Err(error),
            },
        }
    }

    /// Fetches the key set unless another caller already did so after `seen`.
    async fn fetch_unless_newer_than(
        &self,
        seen: Instant,
    ) -> Result<(Arc<Jwks>, Instant), AuthError> {
        let _one_fetch_at_a_time = self.refresh.lock().await;
        if let Some(cached) = &*self.cache.read().await
            && cached.fetched_at > seen
        {
            return Ok((Arc::clone(&cached.jwks), cached.fetched_at));
        }
        let jwks = Arc::new(self.fetch().await?);
        let fetched_at = Instant::now();
        *self.cache.write().await = Some(CachedJwks {
            jwks: Arc::clone(&jwks),
            fetched_at,
        });
        tracing::debug!(url = %self.url, "fetched gateway JWKS");
        Ok((jwks, fetched_at))
    }

    async fn fetch(&self) -> Result<Jwks, AuthError> {
        let unavailable = |e: &dyn fmt::Display| AuthError::KeysUnavailable(e.to_string());
        let response = self
            .client
            .get(self.url.clone())
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| unavailable(&e))?;
        if response
            .content_length()
            .is_some_and(|len| len > MAX_JWKS_BYTES as u64)
        {
            return Err(unavailable(&"JWKS document too large"));
        }
        let body = response.bytes().await.map_err(|e| unavailable(&e))?;
        if body.len() > MAX_JWKS_BYTES {
            return Err(unavailable(&"JWKS document too large"));
        }
        serde_json::from_slice::<Jwks>(&body).map_err(|e| unavailable(&e))
    }
}
