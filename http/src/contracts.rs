//! Contracts: `GET /v1/contracts` (seeker, operator, admin), `POST /v1/contracts` (seeker),
//! `GET /v1/contracts/{id}` (parties), the two execute routes (seeker),
//! `GET /v1/wallet/contracts` (a wallet signed in with `SIGN-IN-WITH-X`) and
//! `GET /.well-known/jwks.json` and the same keys as a `did:web` DID document,
//! `GET /.well-known/did.json` (anyone; also at `/did.json`, where `did:web` looks under a
//! path-prefixed base URL).
//!
//! Handlers only authenticate and parse; [`hiregate_engine::hire::HireService`] does the work.

use axum::{
    Json,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use hiregate_contracts::id::ContractId;

use serde::Deserialize;

use super::{
    X_REQUEST_ID, answers,
    extract::{AppJson, AppPath, AppQuery, Caller, HeadersAndBody, Party, Seeker, Wallet},
    layers::request_id_text,
    routes::{ErrorBody, Routes, get, post},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::{CorrelationId, CorrelationIdError};
use hiregate_engine::{
    adapters::secrets::{SECRETS_HEADER, SeekerSecrets},
    hire::{
        ContractRequest,
        execute::ExecuteRequest,
        listing::{ContractPage, ListFilters, ListScope, list_contracts as list},
    },
};
use hiregate_store::keys::Role;

/// Contract and execute routes.
pub fn router() -> Routes {
    Routes::new()
        .route("/v1/contracts", post(create_contract).get(list_contracts))
        .route("/v1/contracts/{id}", get(get_contract))
        .route("/v1/contracts/{id}/execute", post(execute_by_path))
        .route(super::siwx::WALLET_CONTRACTS_PATH, get(wallet_contracts))
        .route("/execute", post(execute_by_header))
        .route("/.well-known/jwks.json", get(jwks))
        .route("/.well-known/did.json", get(did_document))
        .route("/did.json", get(did_document_at_root))
}

/// The request id (at most 128 characters of it), else a fresh one: the correlation id of
/// what a request starts.
pub(crate) fn correlation_id(headers: &HeaderMap) -> String {
    match headers.get(X_REQUEST_ID).and_then(|id| id.to_str().ok()) {
        Some(id) => request_id_text(id).to_owned(),
        None => format!("req_{}", ulid::Ulid::new()),
    }
}

/// The name of the header carrying a hire's correlation id, both ways.
pub(crate) const CORRELATION_HEADER: &str = "x-correlation-id";

/// The correlation id a proposal starts the hire with: the seeker's `X-Correlation-ID` when it
/// is well formed (400 `invalid_correlation_id` when not), else a fresh one.
fn proposal_correlation_id(headers: &HeaderMap) -> ApiResult<CorrelationId> {
    let Some(raw) = headers.get(CORRELATION_HEADER) else {
        return Ok(CorrelationId::generate());
    };
    raw.to_str()
        .ok()
        .and_then(|raw| raw.parse::<CorrelationId>().ok())
        .ok_or_else(|| ApiError::BadRequest {
            code: "invalid_correlation_id",
            message: CorrelationIdError.to_string(),
        })
}

/// A contract id from a path or header; anything malformed names no contract (404).
fn parse_contract_id(raw: &str) -> ApiResult<String> {
    raw.trim()
        .parse::<ContractId>()
        .map(String::from)
        .map_err(|_| ApiError::NotFound {
            resource: "contract",
        })
}

/// `GET /v1/contracts` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only contracts in this state (e.g. `settled`).
    #[param(
        pattern = r"^(offered|authorizing|paid|executing|pending|delivered|verifying|accepted|rejected|disputed|settling|settled|settlement_failed|settlement_unknown|expired|failed|cancelled|voided|refunded)$"
    )]
    state: Option<String>,
    /// Only contracts with this worker (`wk_…`).
    #[param(pattern = r"^wk_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    worker_id: Option<String>,
    /// Created at or after this RFC 3339 time.
    #[param(format = DateTime)]
    created_after: Option<String>,
    /// Created before this RFC 3339 time.
    #[param(format = DateTime)]
    created_before: Option<String>,
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page (opaque).
    cursor: Option<String>,
}

/// The caller's contracts, newest first: a seeker's own, an operator's workers', all for the
/// admin. 422 `invalid_filter` (with `details.field`) for a bad filter or limit, 422
/// `invalid_cursor` for a cursor this endpoint did not return.
#[utoipa::path(
    get,
    path = "/v1/contracts",
    tag = "contracts",
    params(ListQuery),
    security(("seeker_key" = []), ("operator_key" = []), ("admin_key" = [])),
    responses(
        (status = 200, description = "A page of contracts, newest first", body = ContractPage),
        (status = 400, description = "`invalid_query`: an unknown parameter or a non-numeric limit", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 422, description = "`invalid_filter` / `invalid_cursor`", body = ErrorBody),
    ),
)]
pub(crate) async fn list_contracts(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<ListQuery>,
) -> ApiResult<Json<ContractPage>> {
    let scope = match caller {
        Caller::Admin => ListScope::All,
        Caller::Key(record) if record.role == Role::Operator => {
            ListScope::Operator(record.principal_id.clone())
        }
        Caller::Key(record) => ListScope::Seeker(record.principal_id.clone()),
    };
    let filters = ListFilters {
        state: query.state,
        worker_id: query.worker_id,
        created_after: query.created_after,
        created_before: query.created_before,
        limit: query.limit,
        cursor: query.cursor,
    };
    Ok(Json(list(&state.store, scope, &filters).await?))
}

/// `POST /v1/contracts` (seeker): 201 with the signed terms, `terms_hash`, the gateway's contract
/// token (`gateway_jws`) and the x402 offer execute will ask for.
#[utoipa::path(
    post,
    path = "/v1/contracts",
    tag = "contracts",
    request_body = ContractRequest,
    security(("seeker_key" = [])),
    responses(
        (status = 201, description = "The signed contract: `contract_id`, `correlation_id`, `terms`, `terms_hash`, `gateway_jws`, `payment.x402` (the offer execute asks for), `links`", body = Object,
            headers(("Location" = String, description = "`/v1/contracts/{id}`"),
                    ("X-Correlation-ID" = String, description = "The hire's correlation id: the one sent, or a generated `cor_…`; every later answer, event, worker call and webhook of the contract carries it"))),
        (status = 400, description = "`malformed_json`; `invalid_correlation_id`: an `X-Correlation-ID` that is not 1 to 128 of `A-Za-z0-9._:-`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not a seeker key", body = ErrorBody),
        (status = 404, description = "`not_found`: no such worker", body = ErrorBody),
        (status = 409, description = "`worker_retired`", body = ErrorBody),
        (status = 422, description = "`invalid_body`, `input_schema_violation` (details.violations: `instance_path`, `schema_path`, `message`), `task_type_not_offered`, `payment_scheme_not_accepted`, `asset_not_supported`, `protocol_not_supported`, `authorization_window_too_long` / `poll_window_too_long` (details: `limit`, `requested_s`, `max_s`), `webhook_url_not_https`; WattSwarm `profile_not_declared` (details: `profile`, `declared`); `option_not_supported` (`profile` or `reuse_cached_outputs` for a worker of another protocol); a `vp.crosscheck.v1` verifier that cannot vote independently (details.verifier): `verifier_not_found`, `verifier_is_worker`, `verifier_same_operator`, `verifier_unhealthy`, `verifier_cannot_verify`", body = ErrorBody),
        (status = 503, description = "`chain_unavailable`, `worker_capabilities_unavailable` (a WattSwarm executor's `/capabilities` could not be read to pin the profile)", body = ErrorBody),
    ),
)]
pub(crate) async fn create_contract(
    State(state): State<AppState>,
    seeker: Seeker,
    headers: HeaderMap,
    AppJson(request): AppJson<ContractRequest>,
) -> ApiResult<Response> {
    let correlation = proposal_correlation_id(&headers)?;
    let created = state
        .hire
        .create_contract(&seeker.principal_id, request, correlation.as_str())
        .await?;
    let location = format!("/v1/contracts/{}", created.contract_id);
    Ok((
        StatusCode::CREATED,
        [
            (header::LOCATION, location),
            (
                header::HeaderName::from_static(CORRELATION_HEADER),
                correlation.to_string(),
            ),
        ],
        Json(created.body),
    )
        .into_response())
}

/// `?state=&worker_id=&limit=&cursor=` of `GET /v1/contracts`.
/// `GET /v1/contracts/{id}` (its seeker or its worker's operator).
#[utoipa::path(
    get,
    path = "/v1/contracts/{id}",
    tag = "contracts",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    security(("seeker_key" = []), ("operator_key" = []), ("wallet_sign_in" = [])),
    responses(
        (status = 200, description = "The contract: state, terms, attempts, payment, verification (with failing paths), deliverable (once released to the seeker), dispute, receipt", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`; a refused `SIGN-IN-WITH-X`: `invalid_siwx_header`, `invalid_siwx_domain_mismatch`, `invalid_siwx_uri_mismatch`, `invalid_siwx_version`, `invalid_siwx_chain_id`, `invalid_siwx_unsupported_chain`, `invalid_siwx_nonce` (malformed or already used), `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future`, `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid`, `invalid_siwx_malformed_signature`, `invalid_siwx_signature`. `PAYMENT-REQUIRED` carries the `sign-in-with-x` challenge", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such contract of the caller", body = ErrorBody),
    ),
)]
pub(crate) async fn get_contract(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = parse_contract_id(&id)?;
    Ok(Json(
        state.hire.view_contract(&party.principal_id, &id).await?,
    ))
}

/// The newest contracts a wallet paid for over the stable x402 resource (at most 100), for a
/// wallet signed in with `SIGN-IN-WITH-X`; each opens to a fresh proof of the same wallet.
#[utoipa::path(
    get,
    path = "/v1/wallet/contracts",
    tag = "contracts",
    security(("wallet_sign_in" = [])),
    responses(
        (status = 200, description = "`wallet` and its `contracts` (`contract_id`, `state`, `created_at`, `links.contract`), newest first", body = Object),
        (status = 401, description = "`missing_api_key` (no proof; `PAYMENT-REQUIRED` carries the `sign-in-with-x` challenge) or a refused proof: `invalid_siwx_header`, `invalid_siwx_domain_mismatch`, `invalid_siwx_uri_mismatch`, `invalid_siwx_version`, `invalid_siwx_chain_id`, `invalid_siwx_unsupported_chain`, `invalid_siwx_nonce`, `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future`, `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid`, `invalid_siwx_malformed_signature`, `invalid_siwx_signature`", body = ErrorBody),
        (status = 503, description = "`chain_unavailable`: a contract wallet's `isValidSignature` could not be asked", body = ErrorBody),
    ),
)]
pub(crate) async fn wallet_contracts(
    State(state): State<AppState>,
    wallet: Wallet,
) -> ApiResult<Json<serde_json::Value>> {
    let address = wallet.address.to_checksum(None);
    let contracts = state.store.wallet_contracts(&address, 100).await?;
    let base = state.hire.base_url().as_str().trim_end_matches('/');
    Ok(Json(serde_json::json!({
        "wallet": address,
        "contracts": contracts.iter().map(|(id, contract_state, created_at)| serde_json::json!({
            "contract_id": id,
            "state": contract_state,
            "created_at": created_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "links": { "contract": format!("{base}/v1/contracts/{id}") },
        })).collect::<Vec<_>>(),
    })))
}

/// `POST /v1/contracts/{id}/execute` (seeker).
///
/// Optional `X-Hiregate-Secrets: base64(JSON object)`: runtime secrets for a Superwire worker
/// (its `/execute` body's `secrets`). They are not part of the signed terms, are sent to the
/// executor of this call only and are never stored, logged or sent in events or webhooks; a
/// seeker retry must resend them. Other protocols ignore them. A malformed value → 400
/// `invalid_secrets_header`, nothing changes.
#[utoipa::path(
    post,
    path = "/v1/contracts/{id}/execute",
    tag = "contracts",
    params(
        ("id" = String, Path, description = "Contract id (`ctr_…`)"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2: base64 JSON `PaymentPayload` answering the 402's `PAYMENT-REQUIRED`"),
        ("X-Hiregate-Secrets" = Option<String>, Header, description = "Superwire workers only: base64 of a JSON object of runtime secrets (`e30=` is `{}`); never stored or logged. Anything else is 400 `invalid_secrets_header`", pattern = r"^[A-Za-z0-9+/]*={0,2}$"),
    ),
    request_body(content = Option<Object>, description = "Empty, or the contract's input unchanged (any content type: the bytes are compared with the input as JSON)"),
    security(("seeker_key" = [])),
    responses(
        (status = 200, description = "Paid, executed, verified: the deliverable and the verification result. A repeated execute gets the stored answer with `duplicate: true` and `original` (`status: DUPLICATE_DETECTED`, `original_attempt_id`, `original_status`, `cached_at`)", body = Object,
            headers(("PAYMENT-RESPONSE" = String, description = "x402 v2: base64 JSON settlement response (transaction, network, payer)"),
                    ("X-Correlation-ID" = String, description = "The hire's correlation id, fixed at proposal"),
                    ("X-Duplicate" = String, description = "`true` on the answer to a repeated execute: nothing ran again"))),
        (status = 202, description = "Paid; the worker accepted the task and works on it (`pending`): follow `GET /v1/contracts/{id}/events`. Or `status: queued`: the worker is at `max_parallel`, the paid contract waits in its queue (`queued.position`, `queued.eta_s`) and is forwarded when a slot frees", body = Object),
        (status = 400, description = "`invalid_secrets_header`, `malformed_json`, `missing_contract_id`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 402, description = "Payment required: no `PAYMENT-SIGNATURE` (`payment_required`), one that cannot be read (`invalid_payment_signature`: not base64, not JSON, not a v2 `PaymentPayload`; `invalid_payment_identifier`), or one refused (`payment_invalid`, `payment_mismatch`). Always a fresh challenge whose `error` says why, as the official x402 middleware answers", body = ErrorBody,
            headers(("PAYMENT-REQUIRED" = String, description = "x402 v2: base64 JSON `PaymentRequired` (accepted schemes, amount, asset, payTo, network)"))),
        (status = 403, description = "`forbidden` / `not_a_party`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`input_mismatch`, `payment_already_used`, `contract_cancelled`, state conflicts; `worker_retired` / `task_type_not_offered`: the listing was retired or stopped offering the task type, nothing was taken", body = ErrorBody),
        (status = 410, description = "`contract_expired`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 422, description = "`verification_failed`: the deliverable did not pass the pinned policy, nothing settled (`details.verification`); `status: failed` in the body as HIRE's failure answer", body = ErrorBody),
        (status = 429, description = "`too_many_requests`: the worker is at `max_parallel` and its queue (`contracts.worker_queue_depth`) is full; nothing was paid", body = ErrorBody),
        (status = 502, description = "`worker_failed`: the attempt failed (HIRE's failure answer, `status: failed`). The worker's own error (its `error` {`code`, `message`, `details`}) is in `details.worker_error`, on the first answer and on a repeated execute alike; `details.retry_allowed` says whether executing again retries under the same payment", body = ErrorBody),
        (status = 504, description = "`worker_timeout`: the worker did not answer within the SLA; `details` as for 502", body = ErrorBody),
        (status = 503, description = "`facilitator_unavailable` and other transient failures; `worker_unavailable`: the listing is marked unhealthy, the payment was not taken (or a paid attempt waited its SLA for the worker and ended without calling it); retry after `Retry-After`", body = ErrorBody),
    ),
)]
pub(crate) async fn execute_by_path(
    State(state): State<AppState>,
    seeker: Seeker,
    AppPath(id): AppPath<String>,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let id = match parse_contract_id(&id) {
        Ok(id) => id,
        Err(error) => return error.into_response(),
    };
    execute(state, seeker, id, headers, body).await
}

/// `POST /execute` with `X-Contract-ID` (seeker): the HIRE document's endpoint shape. Takes
/// `X-Hiregate-Secrets` as [`execute_by_path`] does.
#[utoipa::path(
    post,
    path = "/execute",
    tag = "contracts",
    params(
        ("X-Contract-ID" = String, Header, description = "Contract id (`ctr_…`)"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2: base64 JSON `PaymentPayload` answering the 402's `PAYMENT-REQUIRED`"),
        ("X-Hiregate-Secrets" = Option<String>, Header, description = "Superwire workers only: base64 of a JSON object of runtime secrets (`e30=` is `{}`); never stored or logged. Anything else is 400 `invalid_secrets_header`", pattern = r"^[A-Za-z0-9+/]*={0,2}$"),
    ),
    request_body(content = Option<Object>, description = "Empty, or the contract's input unchanged (any content type: the bytes are compared with the input as JSON)"),
    security(("seeker_key" = [])),
    responses(
        (status = 200, description = "Paid, executed, verified: the deliverable and the verification result. A repeated execute gets the stored answer with `duplicate: true` and `original` (`status: DUPLICATE_DETECTED`, `original_attempt_id`, `original_status`, `cached_at`)", body = Object,
            headers(("PAYMENT-RESPONSE" = String, description = "x402 v2: base64 JSON settlement response (transaction, network, payer)"),
                    ("X-Correlation-ID" = String, description = "The hire's correlation id, fixed at proposal"),
                    ("X-Duplicate" = String, description = "`true` on the answer to a repeated execute: nothing ran again"))),
        (status = 202, description = "Paid; the worker accepted the task and works on it (`pending`): follow `GET /v1/contracts/{id}/events`. Or `status: queued`: the worker is at `max_parallel`, the paid contract waits in its queue (`queued.position`, `queued.eta_s`) and is forwarded when a slot frees", body = Object),
        (status = 400, description = "`invalid_secrets_header`, `malformed_json`, `missing_contract_id`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 402, description = "Payment required: no `PAYMENT-SIGNATURE` (`payment_required`), one that cannot be read (`invalid_payment_signature`: not base64, not JSON, not a v2 `PaymentPayload`; `invalid_payment_identifier`), or one refused (`payment_invalid`, `payment_mismatch`). Always a fresh challenge whose `error` says why, as the official x402 middleware answers", body = ErrorBody,
            headers(("PAYMENT-REQUIRED" = String, description = "x402 v2: base64 JSON `PaymentRequired` (accepted schemes, amount, asset, payTo, network)"))),
        (status = 403, description = "`forbidden` / `not_a_party`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`input_mismatch`, `payment_already_used`, `contract_cancelled`, state conflicts; `worker_retired` / `task_type_not_offered`: the listing was retired or stopped offering the task type, nothing was taken", body = ErrorBody),
        (status = 410, description = "`contract_expired`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 422, description = "`verification_failed`: the deliverable did not pass the pinned policy, nothing settled (`details.verification`); `status: failed` in the body as HIRE's failure answer", body = ErrorBody),
        (status = 429, description = "`too_many_requests`: the worker is at `max_parallel` and its queue (`contracts.worker_queue_depth`) is full; nothing was paid", body = ErrorBody),
        (status = 502, description = "`worker_failed`: the attempt failed (HIRE's failure answer, `status: failed`). The worker's own error (its `error` {`code`, `message`, `details`}) is in `details.worker_error`, on the first answer and on a repeated execute alike; `details.retry_allowed` says whether executing again retries under the same payment", body = ErrorBody),
        (status = 504, description = "`worker_timeout`: the worker did not answer within the SLA; `details` as for 502", body = ErrorBody),
        (status = 503, description = "`facilitator_unavailable` and other transient failures; `worker_unavailable`: the listing is marked unhealthy, the payment was not taken (or a paid attempt waited its SLA for the worker and ended without calling it); retry after `Retry-After`", body = ErrorBody),
    ),
)]
pub(crate) async fn execute_by_header(
    State(state): State<AppState>,
    seeker: Seeker,
    HeadersAndBody { headers, body }: HeadersAndBody,
) -> Response {
    let Some(raw) = headers.get("x-contract-id") else {
        return ApiError::BadRequest {
            code: "missing_contract_id",
            message: "send the contract id in X-Contract-ID (or use /v1/contracts/{id}/execute)"
                .to_owned(),
        }
        .into_response();
    };
    let id = match raw.to_str().map_err(|_| ApiError::NotFound {
        resource: "contract",
    }) {
        Ok(raw) => match parse_contract_id(raw) {
            Ok(id) => id,
            Err(error) => return error.into_response(),
        },
        Err(error) => return error.into_response(),
    };
    execute(state, seeker, id, headers, body).await
}

async fn execute(
    state: AppState,
    seeker: Seeker,
    contract_id: String,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return ApiError::from(rejection).into_response(),
    };
    let payment_signature = super::extract::payment_signature(&headers);
    let secrets = match headers
        .get(SECRETS_HEADER)
        .map(|v| SeekerSecrets::from_header(v.as_bytes()))
        .transpose()
    {
        Ok(secrets) => secrets,
        Err(error) => {
            return ApiError::BadRequest {
                code: "invalid_secrets_header",
                message: format!("{error}; send X-Hiregate-Secrets as base64 of a JSON object"),
            }
            .into_response();
        }
    };
    let execution = state
        .hire
        .execute(ExecuteRequest {
            contract_id,
            seeker: seeker.principal_id,
            body,
            payment_signature,
            correlation_id: correlation_id(&headers),
            secrets,
        })
        .await;
    answers::execution(execution)
}

/// `GET /.well-known/jwks.json`: the keys that verify contract tokens.
#[utoipa::path(
    get,
    path = "/.well-known/jwks.json",
    tag = "contracts",
    responses((status = 200, description = "JWKS (Ed25519 `OKP` keys) verifying `gateway_jws` contract tokens and receipts", body = Object)),
)]
pub(crate) async fn jwks(State(state): State<AppState>) -> Response {
    let mut response = Json(state.hire.jwks()).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// `GET /did.json`: the same DID document where `did:web` looks for a base URL with a path
/// (`did:web:host:prefix` resolves to `https://host/prefix/did.json`).
#[utoipa::path(
    get,
    path = "/did.json",
    tag = "contracts",
    responses(
        (status = 200, description = "The DID document of `/.well-known/did.json`", body = Object, content_type = "application/did+json"),
        (status = 404, description = "the public base URL has no host", body = ErrorBody),
    ),
)]
pub(crate) async fn did_document_at_root(state: State<AppState>) -> Response {
    did_document(state).await
}

/// `GET /.well-known/did.json`: the gateway's `did:web` DID document, its JWKS keys as
/// verification methods: what resolves the `kid` of its signed x402 offers and receipts.
#[utoipa::path(
    get,
    path = "/.well-known/did.json",
    tag = "contracts",
    responses(
        (status = 200, description = "DID document (`did:web`): every gateway key as a `JsonWebKey2020` verification method `<did>#<kid>`; the keys that verify the `offer-receipt` extension's signed offers and receipts", body = Object, content_type = "application/did+json"),
        (status = 404, description = "the public base URL has no host", body = ErrorBody),
    ),
)]
pub(crate) async fn did_document(State(state): State<AppState>) -> Response {
    let Some(document) = state.hire.did_document() else {
        return ApiError::NotFound {
            resource: "did document",
        }
        .into_response();
    };
    let mut response = Json(document).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/did+json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
