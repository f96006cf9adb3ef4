//! Extractors: JSON/query/path with rejections turned into [`ApiError`]s, and the
//! authentication extractors [`Seeker`], [`Operator`], [`Admin`], [`Party`] and [`Caller`].
//!
//! Authentication reads `Authorization: Bearer <key>`; [`Party`] also takes a wallet seeker's
//! capability token (`hg_cap_…`) or, on a contract's parties' routes, its wallet's
//! sign-in-with-x proof (`SIGN-IN-WITH-X`, see [`super::siwx`]). The admin key (from configuration) is
//! compared by hash in constant time; other keys are looked up by SHA-256. A key of the wrong
//! role is 403, never a silent downgrade.

use std::sync::Arc;

use axum::{
    body::{Bytes, HttpBody as _},
    extract::{
        FromRequest, FromRequestParts, Request,
        rejection::{BytesRejection, JsonRejection, PathRejection, QueryRejection},
    },
    http::{HeaderMap, StatusCode, header::AUTHORIZATION, request::Parts},
};

use crate::{error::ApiError, state::AppState};
use hiregate_contracts::id::{ApiKeyId, PrincipalId};
use hiregate_store::{
    ApiKeyRecord,
    keys::{ApiKey, ApiKeyHash, Role},
};

/// `axum::Json` whose rejections are [`ApiError`]s (bad JSON → 400 `malformed_json`, wrong
/// shape → 422 `invalid_body`, wrong content type → 415, too large → 413).
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct AppJson<T>(pub T);

/// A JSON body whose verdict waits for the handler: read with [`AppJson`]'s rules, but a
/// malformed body is answered only when the handler asks for it with [`DeferredJson::parse`].
///
/// Authorization before validation. Extractors run before the handler, so an [`AppJson`] next to
/// a path id answers 400/415/422 to a caller who may not act on that resource at all (another
/// seeker disputing a contract): its errors would tell a stranger about a resource it must not
/// see, and make clients fix a body that will never be accepted. Handlers of a path id with a
/// body take this instead, check that the caller may act on the resource (404/403), then parse.
#[derive(Debug)]
pub struct DeferredJson<T>(Result<T, ApiError>);

impl<T> DeferredJson<T> {
    /// The body, or why it is refused (400 `malformed_json`, 413, 415, 422 `invalid_body`).
    pub fn parse(self) -> Result<T, ApiError> {
        self.0
    }
}

impl<T, S> FromRequest<S> for DeferredJson<T>
where
    AppJson<T>: FromRequest<S, Rejection = ApiError>,
    S: Send + Sync,
{
    type Rejection = std::convert::Infallible;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            AppJson::<T>::from_request(request, state)
                .await
                .map(|AppJson(value)| value),
        ))
    }
}

/// `axum::extract::Query` whose rejection is 400 `invalid_query`.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct AppQuery<T>(pub T);

/// `axum::extract::Path` whose rejection is 404 (a malformed id names nothing).
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct AppPath<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::PayloadTooLarge;
        }
        match rejection {
            JsonRejection::JsonSyntaxError(e) => Self::MalformedJson(e.body_text()),
            JsonRejection::JsonDataError(e) => Self::InvalidBody(e.body_text()),
            JsonRejection::MissingJsonContentType(_) => Self::UnsupportedMediaType,
            other => Self::InvalidBody(other.body_text()),
        }
    }
}

/// A raw body that could not be read: 413 past the body limit, else 400.
impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::PayloadTooLarge;
        }
        Self::InvalidBody(rejection.body_text())
    }
}

/// A request's headers and raw body, taken over rather than copied: the last extractor of a
/// route that reads both (`POST …/execute`). axum's `HeaderMap` extractor clones the map, and
/// its `Bytes` boxes every body in a size limit before reading it. An unpaid execute sends no
/// body, so a body known to be empty is answered at once. Together they were 1.7 µs of an unpaid
/// 402's 36 µs of server time (perf, `--bench unpaid`).
#[derive(Debug)]
pub struct HeadersAndBody {
    /// The request's headers.
    pub headers: HeaderMap,
    /// Its body, or why it could not be read (reported by the route, after its own checks).
    pub body: Result<Bytes, BytesRejection>,
}

impl<S: Send + Sync> FromRequest<S> for HeadersAndBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let headers = std::mem::take(&mut parts.headers);
        let body = if body.is_end_stream() {
            Ok(Bytes::new())
        } else {
            Bytes::from_request(Request::from_parts(parts, body), state).await
        };
        Ok(Self { headers, body })
    }
}

/// `PAYMENT-SIGNATURE` as sent (decoded later, where a bad one is answered with a fresh 402).
pub fn payment_signature(headers: &HeaderMap) -> Option<String> {
    headers
        .get("payment-signature")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::InvalidQuery(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(_: PathRejection) -> Self {
        Self::NotFound {
            resource: "resource",
        }
    }
}

/// Anyone with a valid key: the admin or a seeker/operator key (its record).
#[derive(Debug, Clone)]
pub enum Caller {
    /// The configured admin key.
    Admin,
    /// A stored seeker or operator key (shared with the key cache).
    Key(Arc<ApiKeyRecord>),
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        authenticate(parts, state).await
    }
}

async fn authenticate(parts: &Parts, state: &AppState) -> Result<Caller, ApiError> {
    let header = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or(ApiError::MissingCredentials)?;
    let value = header.to_str().map_err(|_| ApiError::InvalidCredentials)?;
    let (scheme, token) = value.split_once(' ').ok_or(ApiError::InvalidCredentials)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::InvalidCredentials);
    }
    let token = token.trim();
    // Hashed once, for the admin comparison and the key lookup alike (every request pays it).
    let hash = ApiKeyHash::of(token);
    if let Some(admin) = &state.admin_key_hash
        && hash.constant_time_eq(admin)
    {
        return Ok(Caller::Admin);
    }
    ApiKey::check_shape(token).map_err(|_| ApiError::InvalidCredentials)?;
    let record = state
        .api_keys
        .find(&state.store, &hash)
        .await?
        .ok_or(ApiError::InvalidCredentials)?;
    Ok(Caller::Key(record))
}

async fn require_role(
    parts: &Parts,
    state: &AppState,
    role: Role,
) -> Result<Arc<ApiKeyRecord>, ApiError> {
    match authenticate(parts, state).await? {
        Caller::Key(record) if record.role == role => Ok(record),
        _ => Err(ApiError::Forbidden { required: role }),
    }
}

/// An authenticated seeker.
#[derive(Debug, Clone)]
pub struct Seeker {
    /// The seeker account.
    pub principal_id: PrincipalId,
    /// The key used.
    pub key_id: ApiKeyId,
}

impl FromRequestParts<AppState> for Seeker {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let record = require_role(parts, state, Role::Seeker).await?;
        Ok(Self {
            principal_id: record.principal_id.clone(),
            key_id: record.id.clone(),
        })
    }
}

/// An authenticated worker operator.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The operator account.
    pub principal_id: PrincipalId,
    /// The key used.
    pub key_id: ApiKeyId,
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let record = require_role(parts, state, Role::Operator).await?;
        Ok(Self {
            principal_id: record.principal_id.clone(),
            key_id: record.id.clone(),
        })
    }
}

/// The admin (arbiter, key management), authenticated with `admin.api_key`.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match authenticate(parts, state).await? {
            Caller::Admin => Ok(Self),
            Caller::Key(_) => Err(ApiError::Forbidden {
                required: Role::Admin,
            }),
        }
    }
}

/// A seeker or an operator (the parties of a contract), authenticated by API key, or the
/// seeker of one contract by its capability token (`hg_cap_…`).
#[derive(Debug, Clone)]
pub struct Party {
    /// The account.
    pub principal_id: PrincipalId,
    /// Its role.
    pub role: Role,
}

impl FromRequestParts<AppState> for Party {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // A wallet seeker's proof of its wallet, on the routes of a contract it paid for.
        if let Some(contract_id) = super::siwx::contract_of_path(parts.uri.path())
            && parts.headers.contains_key(super::siwx::HEADER)
        {
            return wallet_party(parts, state, contract_id).await;
        }
        // A wallet seeker's capability token (contracts hired over the stable x402 resource).
        if let Some(party) = capability_party(&parts.headers, state).await {
            return party;
        }
        match authenticate(parts, state).await? {
            Caller::Key(record) if matches!(record.role, Role::Seeker | Role::Operator) => {
                Ok(Self {
                    principal_id: record.principal_id.clone(),
                    role: record.role,
                })
            }
            _ => Err(ApiError::Forbidden {
                required: Role::Seeker,
            }),
        }
    }
}

/// The party a capability token (`hg_cap_…`) stands for: the seeker of the one contract it was
/// issued for. `None` when the bearer credential is not a capability token; an unknown token
/// is 401 `invalid_api_key`, the same answer as an unknown key, so it tells nothing about any
/// contract.
async fn capability_party(
    headers: &HeaderMap,
    state: &AppState,
) -> Option<Result<Party, ApiError>> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer")
        || !token.starts_with(hiregate_engine::hire::resource::CAPABILITY_PREFIX)
    {
        return None;
    }
    let seeker = match state
        .store
        .seeker_of_capability(&ApiKeyHash::of(token).to_hex())
        .await
    {
        Ok(seeker) => seeker,
        Err(error) => return Some(Err(error.into())),
    };
    Some(
        seeker
            .and_then(|seeker| seeker.parse::<PrincipalId>().ok())
            .map(|principal_id| Party {
                principal_id,
                role: Role::Seeker,
            })
            .ok_or(ApiError::InvalidCredentials),
    )
}

/// A wallet proven by a sign-in-with-x proof (`SIGN-IN-WITH-X`) whose nonce was never used:
/// for routes about the wallet itself (its list of contracts), not one contract.
#[derive(Debug, Clone, Copy)]
pub struct Wallet {
    /// The wallet.
    pub address: alloy::primitives::Address,
}

impl FromRequestParts<AppState> for Wallet {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let now = chrono::Utc::now();
        let proof = wallet_proof(parts, state, now).await?;
        claim_nonce(state, &proof, now).await?;
        Ok(Self {
            address: proof.address,
        })
    }
}

/// The proof in `parts`, its signature and binding checked, its nonce not yet claimed: 401 with
/// its `invalid_siwx_*` code when bad, 401 `missing_api_key` without one, 503 when a contract
/// wallet's chain cannot be asked.
async fn wallet_proof(
    parts: &Parts,
    state: &AppState,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<super::siwx::WalletProof, ApiError> {
    let binding = super::siwx::Binding {
        base_url: state.hire.base_url(),
        assets: &state.assets,
    };
    match binding.verify(&parts.headers, now).await {
        Ok(Some(Ok(proof))) => Ok(proof),
        Ok(Some(Err(refusal))) => Err(refused(refusal)),
        Ok(None) => Err(ApiError::MissingCredentials),
        Err(error) => {
            tracing::warn!(error = %error, "a contract wallet's sign-in could not be checked on its chain");
            Err(ApiError::Unavailable {
                code: "chain_unavailable",
                message: "the chain could not be asked about the wallet's signature".into(),
                retry_after_s: 5,
            })
        }
    }
}

fn refused(refusal: super::siwx::Refusal) -> ApiError {
    ApiError::WalletProofRefused {
        code: refusal.code,
        message: refusal.message,
    }
}

/// Spend the proof's nonce: 401 `invalid_siwx_nonce` when it was spent before (a replay).
async fn claim_nonce(
    state: &AppState,
    proof: &super::siwx::WalletProof,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), ApiError> {
    if state
        .store
        .claim_siwx_nonce(&proof.nonce, proof.claim_until, now)
        .await?
    {
        Ok(())
    } else {
        Err(refused(super::siwx::Refusal {
            code: "invalid_siwx_nonce",
            message: "nonce: already used (sign a fresh message for each request)".into(),
        }))
    }
}

/// The seeker of `contract_id` when the sign-in-with-x proof in `parts` is valid, is its
/// payer's wallet and its nonce was never used: 401 with the proof's `invalid_siwx_*` code for
/// a bad or replayed proof; 404 when the wallet did not pay for this contract (or the contract
/// is an account's), the same answer a stranger's key gets, so a proof tells nothing about
/// other wallets' contracts. Only a proof that opens the contract spends its nonce.
async fn wallet_party(
    parts: &Parts,
    state: &AppState,
    contract_id: &str,
) -> Result<Party, ApiError> {
    let now = chrono::Utc::now();
    let proof = wallet_proof(parts, state, now).await?;
    let not_found = ApiError::NotFound {
        resource: "contract",
    };
    let Some((seeker, payer)) = state.store.wallet_seeker_of(contract_id).await? else {
        return Err(not_found);
    };
    if payer.parse::<alloy::primitives::Address>().ok() != Some(proof.address) {
        return Err(not_found);
    }
    let principal_id = seeker.parse::<PrincipalId>().map_err(|_| not_found)?;
    claim_nonce(state, &proof, now).await?;
    Ok(Party {
        principal_id,
        role: Role::Seeker,
    })
}
