//! `POST /v1/callbacks/{contract_id}` (worker): a signed completion report for pending work.
//! Authentication is the Standard Webhooks signature under the worker's callback secret, not an
//! API key; [`hiregate_engine::hire::HireService::worker_callback`] checks it and applies the report.

use axum::{
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use hiregate_contracts::id::ContractId;
use hiregate_contracts::webhook::{HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, WebhookError};

use super::answers;
use super::extract::AppPath;
use super::routes::{ErrorBody, Routes, post};
use crate::{error::ApiError, state::AppState};
use hiregate_engine::hire::pending::CallbackSignature;

/// The worker callback route.
pub fn router() -> Routes {
    Routes::new().route("/v1/callbacks/{contract_id}", post(worker_callback))
}

#[utoipa::path(
    post,
    path = "/v1/callbacks/{contract_id}",
    tag = "contracts",
    params(("contract_id" = String, Path, description = "Contract id (`ctr_…`)"), ("webhook-id" = String, Header, description = "Unique message id"), ("webhook-timestamp" = String, Header, description = "Unix seconds; stale messages are refused")),
    request_body(content = Object, description = "A HIRE report for the pending task: the document's webhook (`{\"event\":\"task_completed\",\"contract_id\",\"task_id\",\"deliverables\":[…]}` or `output`; `task_failed` with `error`), or a status-tagged task report (progress, the deliverable, or a failure)"),
    security(("worker_callback_signature" = [])),
    responses(
        (status = 200, description = "A terminal report, applied", body = Object),
        (status = 202, description = "A progress report, noted", body = Object),
        (status = 400, description = "`invalid_callback_body`: not a report for this contract", body = ErrorBody),
        (status = 401, description = "`callback_unsigned` / `callback_timestamp_out_of_window` / `callback_signature_invalid`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`callback_replayed` / `callback_task_mismatch` / `contract_not_pending`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
    ),
)]
pub(crate) async fn worker_callback(
    State(state): State<AppState>,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Ok(contract_id) = id.trim().parse::<ContractId>() else {
        return ApiError::NotFound {
            resource: "contract",
        }
        .into_response();
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return ApiError::from(rejection).into_response(),
    };
    let correlation_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("req_{}", ulid::Ulid::new()), str::to_owned);
    let signature = callback_signature(&headers);
    answers::callback_receipt(
        state
            .hire
            .worker_callback(contract_id.as_str(), signature, &body, &correlation_id)
            .await,
    )
}

/// The Standard Webhooks headers of a callback, or the first one missing or unreadable (in
/// the order the standard checks them).
fn callback_signature(headers: &HeaderMap) -> Result<CallbackSignature, WebhookError> {
    let header = |name: &'static str| -> Result<String, WebhookError> {
        headers
            .get(name)
            .ok_or(WebhookError::MissingHeader(name))?
            .to_str()
            .map(str::to_owned)
            .map_err(|_| WebhookError::InvalidHeader(name))
    };
    Ok(CallbackSignature {
        id: header(HEADER_ID)?,
        timestamp: header(HEADER_TIMESTAMP)?,
        signature: header(HEADER_SIGNATURE)?,
    })
}
