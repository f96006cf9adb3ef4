//! `GET /v1/workers/{id}/reputation` (anyone, like discovery): the listing's signed reputation
//! snapshot, computed only from its verified, paid outcomes (see [`hiregate_engine::reputation`]).

use axum::{Json, extract::State};
use serde::Serialize;

use super::{
    extract::AppPath,
    routes::{ErrorBody, Routes, get},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::WorkerId;

/// The reputation route.
pub fn router() -> Routes {
    Routes::new().route("/v1/workers/{id}/reputation", get(worker_reputation))
}

/// A listing's reputation.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct ReputationView {
    /// Listing id (`wk_…`).
    #[schema(value_type = String)]
    worker_id: WorkerId,
    /// The snapshot as a compact JWS (EdDSA, `typ` = `hiregate-reputation+jwt`), verifiable
    /// offline with `/.well-known/jwks.json`; its payload is `reputation`.
    snapshot: String,
    /// What the snapshot states: per window (`7d`, `30d`, `all`) the figures over all task types
    /// and per task type, each with its sample size, its distinct seekers and the contracts it
    /// was computed from (their receipts are at `/v1/contracts/{id}/receipt`).
    #[schema(value_type = Object)]
    reputation: hiregate_contracts::reputation::ReputationSnapshot,
}

/// `GET /v1/workers/{id}/reputation`: hires settled, verification pass rate, failure and
/// timeout rates, disputes opened and lost, p50/p95 latency from the payment to the verdict and
/// the volume settled per asset, over 7 days, 30 days and all time. Hires paid from a payout
/// address of the listing's own operator count nowhere. At most 30 s old.
#[utoipa::path(
    get,
    path = "/v1/workers/{id}/reputation",
    tag = "workers",
    params(("id" = String, Path, description = "Listing id (`wk_…`)")),
    responses(
        (status = 200, description = "The signed reputation snapshot", body = ReputationView),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn worker_reputation(
    State(state): State<AppState>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<ReputationView>> {
    Ok(Json(reputation_view(&state, &id).await?))
}

/// The signed reputation of listing `id` (what `GET /v1/workers/{id}/reputation` answers; the
/// MCP server's `describe_worker` shows the same).
pub(crate) async fn reputation_view(state: &AppState, id: &str) -> ApiResult<ReputationView> {
    let not_found = || ApiError::NotFound { resource: "worker" };
    let worker_id: WorkerId = id.parse().map_err(|_| not_found())?;
    state
        .store
        .get_worker(&worker_id)
        .await?
        .ok_or_else(not_found)?;
    let signed = state.reputation.of(&worker_id).await?;
    Ok(ReputationView {
        worker_id,
        snapshot: signed.token.clone(),
        reputation: signed.snapshot.clone(),
    })
}
