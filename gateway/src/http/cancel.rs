//! `POST /v1/contracts/{id}/cancel` (seeker): call a contract off before delivery; see
//! [`crate::hire::cancel`].

use axum::{
    Router,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
    routing::post,
};
use hiregate_contracts::id::ContractId;

use super::extract::{AppPath, Seeker};
use crate::{error::ApiError, state::AppState};

/// The cancel route.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/contracts/{id}/cancel", post(cancel_contract))
}

async fn cancel_contract(
    State(state): State<AppState>,
    seeker: Seeker,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
) -> Response {
    let Ok(contract_id) = id.trim().parse::<ContractId>() else {
        return ApiError::NotFound {
            resource: "contract",
        }
        .into_response();
    };
    let correlation_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| format!("req_{}", ulid::Ulid::new()), str::to_owned);
    state
        .hire
        .cancel_contract(&seeker.principal_id, contract_id.as_str(), &correlation_id)
        .await
        .into_response()
}
