//! A remote facilitator by URL.
//!
//! Facilitators disagree on status codes: the TS example answers refusals with 200, x402-rs
//! with 400, 412 for a missing Permit2 allowance and 500 when its simulation reverts (a bad
//! signature) or its node fails. So a `/verify` or `/settle` body that parses as a verdict
//! ([`VerifyResponse`] / [`SettleResponse`]) is the verdict, whatever the status; its reason is
//! read in any vocabulary [`crate::Reason`] knows.
//!
//! [`FacilitatorError::Unknown`] — nobody knows whether the payment verified or settled — is
//! kept for what carries no verdict:
//!
//! | answer | outcome |
//! |---|---|
//! | none: connection refused, reset, timeout (connect, headers or body) | [`UnknownOutcome::Transport`] / [`UnknownOutcome::Timeout`] |
//! | any status, body not a verdict (HTML, `{"error":…}`, truncated) | [`UnknownOutcome::BadBody`] |
//! | any status, body over [`MAX_BODY_BYTES`] | [`UnknownOutcome::BodyTooLarge`], read no further |
//! | `/supported` with a non-2xx status | [`UnknownOutcome::UnexpectedStatus`] |

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::TxHash;
use alloy::rpc::types::TransactionReceipt;
use async_trait::async_trait;
use reqwest::header::HeaderMap;
use serde::Serialize;
use serde::de::DeserializeOwned;
use url::Url;

use super::{Facilitator, FacilitatorError, UnknownOutcome};
use crate::wire::{
    SettleRequest, SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse,
};

/// The most body bytes read from one facilitator answer; a verdict is well under 1 KiB and a
/// `/supported` list a few KiB, so more is a broken or hostile facilitator.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Which facilitator endpoint a call goes to (auth hooks may sign per endpoint, as CDP does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FacilitatorCall {
    /// `POST /verify`.
    Verify,
    /// `POST /settle`.
    Settle,
    /// `GET /supported`.
    Supported,
}

impl FacilitatorCall {
    /// The HTTP method.
    #[must_use]
    pub fn method(self) -> &'static str {
        match self {
            Self::Verify | Self::Settle => "POST",
            Self::Supported => "GET",
        }
    }

    /// The path relative to the facilitator's base URL.
    #[must_use]
    pub fn path(self) -> &'static str {
        match self {
            Self::Verify => "verify",
            Self::Settle => "settle",
            Self::Supported => "supported",
        }
    }
}

/// An auth-header hook's failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuthHeaderError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Gives the headers to add to each facilitator call, e.g. a per-request JWT for a hosted
/// facilitator. Implementations must not print secrets in `Debug`.
#[async_trait]
pub trait AuthHeaders: Send + Sync + fmt::Debug {
    /// Headers for `call` to `url`.
    async fn headers(&self, call: FacilitatorCall, url: &Url)
    -> Result<HeaderMap, AuthHeaderError>;
}

/// The same headers on every call (e.g. a static API key). `Debug` shows only header names.
#[derive(Clone)]
pub struct StaticHeaders(pub HeaderMap);

impl fmt::Debug for StaticHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StaticHeaders")
            .field(&self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

#[async_trait]
impl AuthHeaders for StaticHeaders {
    async fn headers(
        &self,
        _call: FacilitatorCall,
        _url: &Url,
    ) -> Result<HeaderMap, AuthHeaderError> {
        Ok(self.0.clone())
    }
}

/// Headers computed by a closure per call (synchronous work such as minting a JWT).
pub struct AuthFn<F>(pub F);

impl<F> fmt::Debug for AuthFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthFn(..)")
    }
}

#[async_trait]
impl<F> AuthHeaders for AuthFn<F>
where
    F: Fn(FacilitatorCall, &Url) -> Result<HeaderMap, AuthHeaderError> + Send + Sync,
{
    async fn headers(
        &self,
        call: FacilitatorCall,
        url: &Url,
    ) -> Result<HeaderMap, AuthHeaderError> {
        (self.0)(call, url)
    }
}

/// Per-call time limits of [`HttpFacilitatorClient`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP/TLS connect.
    pub connect: Duration,
    /// Whole `/verify` call.
    pub verify: Duration,
    /// Whole `/settle` call; must exceed the facilitator's receipt wait (x402-rs waits 30 s,
    /// the TS facilitator up to 180 s).
    pub settle: Duration,
    /// Whole `/supported` call.
    pub supported: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            verify: Duration::from_secs(30),
            settle: Duration::from_secs(120),
            supported: Duration::from_secs(10),
        }
    }
}

/// Why an [`HttpFacilitatorClient`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpClientBuildError {
    /// The base URL cannot have paths appended (e.g. `mailto:`), or is not http(s).
    #[error("facilitator URL must be an http(s) URL")]
    BadUrl,
    /// reqwest could not build its client.
    #[error("could not build HTTP client")]
    Client(#[source] reqwest::Error),
}

/// A facilitator reached over HTTP.
#[derive(Clone)]
pub struct HttpFacilitatorClient {
    base: Url,
    verify_url: Url,
    settle_url: Url,
    supported_url: Url,
    http: reqwest::Client,
    timeouts: Timeouts,
    auth: Option<Arc<dyn AuthHeaders>>,
}

impl fmt::Debug for HttpFacilitatorClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpFacilitatorClient")
            .field("host", &self.base.host_str())
            .field("timeouts", &self.timeouts)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

impl HttpFacilitatorClient {
    /// A client for the facilitator at `base_url` (`/verify` etc. are appended to its path).
    pub fn new(
        base_url: Url,
        timeouts: Timeouts,
        auth: Option<Arc<dyn AuthHeaders>>,
    ) -> Result<Self, HttpClientBuildError> {
        if !matches!(base_url.scheme(), "http" | "https") || base_url.cannot_be_a_base() {
            return Err(HttpClientBuildError::BadUrl);
        }
        let mut base = base_url;
        // `Url::join` replaces the last path segment unless the path ends with '/'.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(timeouts.connect)
            .build()
            .map_err(HttpClientBuildError::Client)?;
        let endpoint = |call: FacilitatorCall| {
            base.join(call.path())
                .map_err(|_| HttpClientBuildError::BadUrl)
        };
        Ok(Self {
            verify_url: endpoint(FacilitatorCall::Verify)?,
            settle_url: endpoint(FacilitatorCall::Settle)?,
            supported_url: endpoint(FacilitatorCall::Supported)?,
            base,
            http,
            timeouts,
            auth,
        })
    }

    async fn call<B: Serialize + Sync, T: DeserializeOwned>(
        &self,
        call: FacilitatorCall,
        body: Option<&B>,
        timeout: Duration,
    ) -> Result<T, FacilitatorError> {
        let url = match call {
            FacilitatorCall::Verify => &self.verify_url,
            FacilitatorCall::Settle => &self.settle_url,
            FacilitatorCall::Supported => &self.supported_url,
        };
        let mut request = match body {
            Some(body) => self.http.post(url.clone()).json(body),
            None => self.http.get(url.clone()),
        };
        if let Some(auth) = &self.auth {
            let headers = auth
                .headers(call, url)
                .await
                .map_err(UnknownOutcome::AuthHeaders)?;
            request = request.headers(headers);
        }
        let transport = |error: reqwest::Error| -> FacilitatorError {
            if error.is_timeout() {
                UnknownOutcome::Timeout(timeout).into()
            } else {
                UnknownOutcome::Transport(error).into()
            }
        };
        // The request timeout also bounds reading the body.
        let mut response = request.timeout(timeout).send().await.map_err(transport)?;
        let status = response.status().as_u16();
        if call == FacilitatorCall::Supported && !response.status().is_success() {
            return Err(UnknownOutcome::UnexpectedStatus { status }.into());
        }
        let too_large = || UnknownOutcome::BodyTooLarge {
            status,
            limit: MAX_BODY_BYTES,
        };
        if response
            .content_length()
            .is_some_and(|length| length > MAX_BODY_BYTES as u64)
        {
            return Err(too_large().into());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(too_large().into());
            }
            body.extend_from_slice(&chunk);
        }
        let verdict = serde_json::from_slice(&body)
            .map_err(|source| UnknownOutcome::BadBody { status, source })?;
        if !(200..300).contains(&status) {
            tracing::debug!(
                status,
                call = call.path(),
                "facilitator verdict with a non-2xx status"
            );
        }
        Ok(verdict)
    }
}

#[async_trait]
impl Facilitator for HttpFacilitatorClient {
    async fn verify(&self, request: &VerifyRequest) -> Result<VerifyResponse, FacilitatorError> {
        self.call(FacilitatorCall::Verify, Some(request), self.timeouts.verify)
            .await
    }

    async fn settle(&self, request: &SettleRequest) -> Result<SettleResponse, FacilitatorError> {
        self.call(FacilitatorCall::Settle, Some(request), self.timeouts.settle)
            .await
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.call::<(), _>(FacilitatorCall::Supported, None, self.timeouts.supported)
            .await
    }

    /// x402's facilitator API has no such call: the settle does all its work.
    fn prepare_settle(&self, _request: &SettleRequest) {}

    /// A remote facilitator's word is a claim: its caller asks the node.
    fn mined_receipt(&self, _transaction: TxHash) -> Option<Arc<TransactionReceipt>> {
        None
    }
}
