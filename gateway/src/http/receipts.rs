//! `GET /v1/contracts/{id}/receipt` and `GET /v1/contracts/{id}/events.jsonl` (parties); see
//! [`crate::hire::receipts`].

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};
use hiregate_contracts::id::ContractId;
use serde_json::json;

use super::extract::{AppPath, Party};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};

/// The receipt and audit-export routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/contracts/{id}/receipt", get(receipt))
        .route("/v1/contracts/{id}/events.jsonl", get(events_jsonl))
}

fn parse_contract_id(raw: &str) -> ApiResult<ContractId> {
    raw.trim().parse().map_err(|_| ApiError::NotFound {
        resource: "contract",
    })
}

/// 200 `{contract_id, kid, issued_at, receipt}` where `receipt` is the compact JWS; 409
/// `contract_not_terminal` while the contract can still change.
async fn receipt(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = parse_contract_id(&id)?;
    let stored = state
        .hire
        .contract_receipt(&party.principal_id, id.as_str())
        .await?;
    Ok(Json(json!({
        "contract_id": stored.contract_id,
        "kid": stored.kid,
        "issued_at": stored.issued_at,
        "receipt": stored.token,
    })))
}

/// The event log as `application/jsonl`, oldest first.
async fn events_jsonl(
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
