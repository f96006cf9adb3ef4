//! `POST /v1/contracts/{id}/cancel` (seeker): call a contract off before delivery; see
//! [`hiregate_engine::hire::cancel`].

use axum::{
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use hiregate_contracts::id::ContractId;

use super::answers;
use super::extract::{AppPath, Seeker};
use super::routes::{ErrorBody, Routes, post};
use crate::{error::ApiError, state::AppState};

/// The cancel route.
pub fn router() -> Routes {
    Routes::new().route("/v1/contracts/{id}/cancel", post(cancel_contract))
}

#[utoipa::path(
    post,
    path = "/v1/contracts/{id}/cancel",
    tag = "contracts",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    security(("seeker_key" = [])),
    responses(
        (status = 200, description = "The contract, now `cancelled` (an escrow authorization is voided)", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`contract_already_delivered` / `contract_finished`; `payment_settling`: an upfront contract whose payment is being settled before the work (cancel again once it has settled)", body = ErrorBody),
    ),
)]
pub(crate) async fn cancel_contract(
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
    answers::cancellation(
        state
            .hire
            .cancel_contract(&seeker.principal_id, contract_id.as_str(), &correlation_id)
            .await,
    )
}
