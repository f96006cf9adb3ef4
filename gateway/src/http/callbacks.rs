//! `POST /v1/callbacks/{contract_id}` (worker): a signed completion report for pending work.
//! Authentication is the Standard Webhooks signature under the worker's callback secret, not an
//! API key; [`crate::hire::HireService::worker_callback`] checks it and applies the report.

use axum::{
    Router,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::post,
};
use hiregate_contracts::id::ContractId;

use super::extract::AppPath;
use crate::{error::ApiError, state::AppState};

/// The worker callback route.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/callbacks/{contract_id}", post(worker_callback))
}

async fn worker_callback(
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
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::PayloadTooLarge.into_response();
        }
        Err(rejection) => return ApiError::InvalidBody(rejection.body_text()).into_response(),
    };
    let correlation_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("req_{}", ulid::Ulid::new()), str::to_owned);
    state
        .hire
        .worker_callback(contract_id.as_str(), &headers, &body, &correlation_id)
        .await
        .into_response()
}
