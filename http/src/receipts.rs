//! `GET /v1/contracts/{id}/receipt` and `GET /v1/contracts/{id}/events.jsonl` (parties); see
//! [`hiregate_engine::hire::receipts`].

use axum::{
    Json,
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};
use hiregate_contracts::id::ContractId;
use serde_json::json;

use super::extract::{AppPath, Party};
use super::routes::{ErrorBody, Routes, get};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};

/// The receipt and audit-export routes.
pub fn router() -> Routes {
    Routes::new()
        .route("/v1/contracts/{id}/receipt", get(receipt))
        .route("/v1/contracts/{id}/events.jsonl", get(events_jsonl))
}

fn parse_contract_id(raw: &str) -> ApiResult<ContractId> {
    raw.trim().parse().map_err(|_| ApiError::NotFound {
        resource: "contract",
    })
}

/// 200 `{contract_id, kid, issued_at, receipt}` where `receipt` is the compact JWS (and, once
/// settled, `x402_receipt`: the x402 `offer-receipt` receipt of the settlement); 409
/// `contract_not_terminal` while the contract can still change.
#[utoipa::path(
    get,
    path = "/v1/contracts/{id}/receipt",
    tag = "receipts",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    security(("seeker_key" = []), ("operator_key" = []), ("wallet_sign_in" = [])),
    responses(
        (status = 200, description = "`{contract_id, kid, issued_at, receipt, x402_receipt?}`: `receipt` is a compact JWS verifiable offline with `/.well-known/jwks.json`; a settled contract adds `x402_receipt`, the x402 `offer-receipt` extension's signed receipt its paid answer carried (JWS, `kid` a DID URL resolved by `/.well-known/did.json`)", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`; a refused `SIGN-IN-WITH-X`: `invalid_siwx_header`, `invalid_siwx_domain_mismatch`, `invalid_siwx_uri_mismatch`, `invalid_siwx_version`, `invalid_siwx_chain_id`, `invalid_siwx_unsupported_chain`, `invalid_siwx_nonce` (malformed or already used), `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future`, `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid`, `invalid_siwx_malformed_signature`, `invalid_siwx_signature`. `PAYMENT-REQUIRED` carries the `sign-in-with-x` challenge", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`contract_not_terminal`", body = ErrorBody),
    ),
)]
pub(crate) async fn receipt(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = parse_contract_id(&id)?;
    let stored = state
        .hire
        .contract_receipt(&party.principal_id, id.as_str())
        .await?;
    let mut body = json!({
        "contract_id": stored.contract_id,
        "kid": stored.kid,
        "issued_at": stored.issued_at,
        "receipt": stored.token,
    });
    if let Some(x402) = state.hire.x402_receipt_of_contract(id.as_str()).await? {
        body["x402_receipt"] = json!(x402);
    }
    Ok(Json(body))
}

/// The event log as `application/jsonl`, oldest first.
#[utoipa::path(
    get,
    path = "/v1/contracts/{id}/events.jsonl",
    tag = "receipts",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    security(("seeker_key" = []), ("operator_key" = []), ("wallet_sign_in" = [])),
    responses(
        (status = 200, description = "The event log, one JSON event per line, oldest first", content_type = "application/jsonl", body = String),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`; a refused `SIGN-IN-WITH-X`: `invalid_siwx_header`, `invalid_siwx_domain_mismatch`, `invalid_siwx_uri_mismatch`, `invalid_siwx_version`, `invalid_siwx_chain_id`, `invalid_siwx_unsupported_chain`, `invalid_siwx_nonce` (malformed or already used), `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future`, `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid`, `invalid_siwx_malformed_signature`, `invalid_siwx_signature`. `PAYMENT-REQUIRED` carries the `sign-in-with-x` challenge", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn events_jsonl(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Response> {
    let id = parse_contract_id(&id)?;
    let body = state
        .hire
        .export_events_jsonl(&party.principal_id, id.as_str())
        .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/jsonl"),
        )],
        body,
    )
        .into_response())
}
