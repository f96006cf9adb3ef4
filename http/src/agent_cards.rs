//! A2A Agent Cards (anyone, like discovery): `GET /.well-known/agent-card.json` for the
//! marketplace and `GET /v1/workers/{id}/agent-card.json` for each healthy listing. What they
//! hold and how they are signed is in [`crate::a2a::cards`].

use axum::{Json, extract::State};
use serde_json::Value;

use super::{
    extract::AppPath,
    routes::{ErrorBody, Routes, get},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::WorkerId;
use hiregate_store::{WorkerQuery, listing::model::HealthState};

/// Healthy listings the marketplace card reads at most.
const MAX_LISTINGS: u32 = 1_000;
/// Listings read per store query.
const PAGE: u32 = 200;

/// The agent-card routes.
pub fn router() -> Routes {
    Routes::new()
        .route("/.well-known/agent-card.json", get(gateway_card))
        .route("/v1/workers/{id}/agent-card.json", get(listing_card))
}

/// `GET /.well-known/agent-card.json`: the marketplace's signed A2A Agent Card, one skill per
/// task type the healthy listings offer.
#[utoipa::path(
    get,
    path = "/.well-known/agent-card.json",
    tag = "workers",
    responses((status = 200, description = "A2A v1.0 Agent Card, signed as A2A §8.4 defines (`signatures[0]`: detached JWS, `typ` `JOSE`, over the RFC 8785 card without `signatures` and default values; verifiable with the JWKS)", body = Object)),
)]
pub(crate) async fn gateway_card(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let mut query = WorkerQuery {
        task_type: None,
        max_price: None,
        health: Some(HealthState::Healthy),
        operator_id: None,
        include_retired: false,
        after: None,
        limit: PAGE,
    };
    let mut listings = Vec::new();
    loop {
        let page = state.registry.discover(&query).await?;
        let full = page.len() == PAGE as usize;
        query.after = page.last().map(|listing| listing.id.clone());
        listings.extend(page);
        if !full || listings.len() >= MAX_LISTINGS as usize {
            break;
        }
    }
    Ok(Json(state.agent_cards.gateway_card(&listings)?))
}

/// `GET /v1/workers/{id}/agent-card.json`: a healthy listing's signed A2A Agent Card: skills
/// from its task types, its input and output schemas, prices and the x402 payment requirement.
/// 404 for unknown, retired or unhealthy listings.
#[utoipa::path(
    get,
    path = "/v1/workers/{id}/agent-card.json",
    tag = "workers",
    params(("id" = String, Path, description = "Listing id (`wk_…`)")),
    responses(
        (status = 200, description = "A2A v1.0 Agent Card, signed by the gateway", body = Object),
        (status = 404, description = "`not_found`: unknown, retired or unhealthy", body = ErrorBody),
    ),
)]
pub(crate) async fn listing_card(
    State(state): State<AppState>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<Value>> {
    let not_found = || ApiError::NotFound { resource: "worker" };
    let worker_id: WorkerId = id.parse().map_err(|_| not_found())?;
    let listing = state
        .store
        .get_worker(&worker_id)
        .await?
        .filter(|listing| listing.retired_at.is_none() && listing.health == HealthState::Healthy)
        .ok_or_else(not_found)?;
    Ok(Json(state.agent_cards.listing_card(&listing)?))
}
