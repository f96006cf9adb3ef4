//! `/v1/workers`: registration and management (operators, own listings only) and discovery
//! (anyone).
//!
//! `GET /v1/operator/workers` lists an operator's own listings (retired included) and
//! `GET /v1/workers/{id}/stats` reports one listing's work: in-flight load against
//! `max_parallel`, contracts by state, settled earnings per asset, recent failed attempts and
//! verification rejections, and the health probe history.
//!
//! Discovery shows what a seeker needs to choose and pay (task types, prices, output schemas,
//! payment network/asset/payee, health) and hides the endpoint, which seekers never call
//! directly. An operator's view of its own listing adds the endpoint and probe details.

use axum::{
    Json, Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::extract::{AppJson, AppPath, AppQuery, Operator};
use crate::{
    error::{ApiError, ApiResult},
    ids::{PrincipalId, WorkerId},
    registry::{
        NewWorker, WorkerPatch,
        model::{
            AtomicAmount, EvmAddress, FeePolicy, HealthState, MaxParallel, Network, PaymentSchemes,
            Protocol, TaskCatalog, TaskType, WorkerEndpoint, WorkerListing,
        },
    },
    state::AppState,
    store::{IN_FLIGHT_STATES, PROBE_HISTORY_KEPT, StatsLimits, WorkerQuery},
};

/// Default and largest discovery page.
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;

/// `/v1/workers` and `/v1/workers/{id}`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/workers", get(list_workers).post(create_worker))
        .route(
            "/v1/workers/{id}",
            get(get_worker).patch(update_worker).delete(retire_worker),
        )
        .route("/v1/workers/{id}/stats", get(worker_stats))
        .route("/v1/operator/workers", get(own_workers))
}

/// A listing as seekers see it.
#[derive(Debug, Serialize)]
pub struct PublicWorker {
    id: WorkerId,
    protocol: Protocol,
    pay_to: EvmAddress,
    network: Network,
    asset: EvmAddress,
    tasks: TaskCatalog,
    max_parallel: MaxParallel,
    payment_schemes: PaymentSchemes,
    #[serde(skip_serializing_if = "Option::is_none")]
    fee_policy: Option<FeePolicy>,
    health: HealthState,
    created_at: DateTime<Utc>,
}

impl From<&WorkerListing> for PublicWorker {
    fn from(listing: &WorkerListing) -> Self {
        Self {
            id: listing.id.clone(),
            protocol: listing.protocol,
            pay_to: listing.pay_to,
            network: listing.network,
            asset: listing.asset,
            tasks: listing.tasks.clone(),
            max_parallel: listing.max_parallel,
            payment_schemes: listing.payment_schemes.clone(),
            fee_policy: listing.fee_policy,
            health: listing.health,
            created_at: listing.created_at,
        }
    }
}

/// A listing as its operator sees it.
#[derive(Debug, Serialize)]
pub struct OwnerWorker {
    #[serde(flatten)]
    public: PublicWorker,
    operator_id: PrincipalId,
    endpoint: WorkerEndpoint,
    consecutive_misses: u32,
    last_probe_at: Option<DateTime<Utc>>,
    last_probe_error: Option<String>,
    updated_at: DateTime<Utc>,
    retired_at: Option<DateTime<Utc>>,
    /// Present only in the registration response.
    #[serde(skip_serializing_if = "Option::is_none")]
    callback_secret: Option<String>,
}

impl From<&WorkerListing> for OwnerWorker {
    fn from(listing: &WorkerListing) -> Self {
        Self {
            public: PublicWorker::from(listing),
            operator_id: listing.operator_id.clone(),
            endpoint: listing.endpoint.clone(),
            consecutive_misses: listing.consecutive_misses,
            last_probe_at: listing.last_probe_at,
            last_probe_error: listing.last_probe_error.clone(),
            updated_at: listing.updated_at,
            retired_at: listing.retired_at,
            callback_secret: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoveryQuery {
    task_type: Option<TaskType>,
    max_price: Option<AtomicAmount>,
    healthy: Option<bool>,
    after: Option<WorkerId>,
    limit: Option<u32>,
}

#[derive(Debug, Serialize)]
struct DiscoveryPage {
    workers: Vec<PublicWorker>,
    /// Pass as `after` for the next page; `null` on the last page.
    next_after: Option<WorkerId>,
}

/// `GET /v1/workers?task_type=&max_price=&healthy=&after=&limit=`: live listings, oldest first.
/// `max_price` applies to `task_type` when given, else to any task type. 400 `invalid_query`
/// for malformed filters.
async fn list_workers(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<DiscoveryQuery>,
) -> ApiResult<Json<DiscoveryPage>> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidQuery(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let listings = state
        .registry
        .discover(&WorkerQuery {
            task_type: query.task_type,
            max_price: query.max_price,
            health: query.healthy.map(|healthy| {
                if healthy {
                    HealthState::Healthy
                } else {
                    HealthState::Unhealthy
                }
            }),
            operator_id: None,
            include_retired: false,
            after: query.after,
            limit,
        })
        .await?;
    let next_after = (listings.len() == limit as usize)
        .then(|| listings.last().map(|l| l.id.clone()))
        .flatten();
    Ok(Json(DiscoveryPage {
        workers: listings.iter().map(PublicWorker::from).collect(),
        next_after,
    }))
}

/// `POST /v1/workers` (operator): probe the endpoint, then list it. 201 with the listing and
/// its `callback_secret` (shown once). 422 `worker_probe_failed` /
/// `worker_capabilities_mismatch` / `endpoint_not_allowed` / `protocol_not_supported` when the
/// endpoint cannot be listed; 422 `invalid_body` for malformed fields.
async fn create_worker(
    State(state): State<AppState>,
    operator: Operator,
    AppJson(new): AppJson<NewWorker>,
) -> ApiResult<impl IntoResponse> {
    let (listing, secret) = state.registry.register(&operator.principal_id, new).await?;
    let mut body = OwnerWorker::from(&listing);
    body.callback_secret = Some(secret.reveal().to_owned());
    let location = format!("/v1/workers/{}", listing.id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(body),
    ))
}

fn parse_worker_id(raw: &str) -> ApiResult<WorkerId> {
    raw.parse()
        .map_err(|_| ApiError::NotFound { resource: "worker" })
}

/// `GET /v1/workers/{id}` (owning operator): the listing, retired or not. 404 for anyone else's.
async fn get_worker(
    State(state): State<AppState>,
    operator: Operator,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<OwnerWorker>> {
    let id = parse_worker_id(&id)?;
    let listing = state
        .registry
        .get_owned(&operator.principal_id, &id)
        .await?;
    Ok(Json(OwnerWorker::from(&listing)))
}

/// `PATCH /v1/workers/{id}` (owning operator): change fields; a new endpoint or catalog is
/// probed first. 409 `worker_retired` on a retired listing, 409 `concurrent_update` if it
/// changed meanwhile.
async fn update_worker(
    State(state): State<AppState>,
    operator: Operator,
    AppPath(id): AppPath<String>,
    AppJson(patch): AppJson<WorkerPatch>,
) -> ApiResult<Json<OwnerWorker>> {
    let id = parse_worker_id(&id)?;
    let listing = state
        .registry
        .update(&operator.principal_id, &id, patch)
        .await?;
    Ok(Json(OwnerWorker::from(&listing)))
}

/// `DELETE /v1/workers/{id}` (owning operator): retire the listing (never a hard delete;
/// idempotent). 200 with the retired listing.
async fn retire_worker(
    State(state): State<AppState>,
    operator: Operator,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<OwnerWorker>> {
    let id = parse_worker_id(&id)?;
    let listing = state.registry.retire(&operator.principal_id, &id).await?;
    Ok(Json(OwnerWorker::from(&listing)))
}

/// `GET /v1/operator/workers?after=&limit=` (operator): its listings, retired included, oldest
/// first, as the owner sees them.
async fn own_workers(
    State(state): State<AppState>,
    operator: Operator,
    AppQuery(page): AppQuery<OwnPage>,
) -> ApiResult<Json<Value>> {
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidQuery(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    let listings = state
        .registry
        .discover(&WorkerQuery {
            operator_id: Some(operator.principal_id),
            include_retired: true,
            after: page.after,
            limit,
            ..WorkerQuery::default()
        })
        .await?;
    let next_after = (listings.len() == limit as usize)
        .then(|| listings.last().map(|l| l.id.clone()))
        .flatten();
    Ok(Json(json!({
        "workers": listings.iter().map(OwnerWorker::from).collect::<Vec<_>>(),
        "next_after": next_after,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnPage {
    after: Option<WorkerId>,
    limit: Option<u32>,
}

/// Newest failures and rejections a stats answer lists.
const STATS_RECENT: u32 = 20;

/// `GET /v1/workers/{id}/stats` (owning operator; 404 for anyone else's listing).
async fn worker_stats(
    State(state): State<AppState>,
    operator: Operator,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<Value>> {
    let id = parse_worker_id(&id)?;
    let listing = state
        .registry
        .get_owned(&operator.principal_id, &id)
        .await?;
    let stats = state
        .store
        .worker_stats(
            &id,
            StatsLimits {
                failures: STATS_RECENT,
                rejections: STATS_RECENT,
                probes: u32::try_from(PROBE_HISTORY_KEPT).unwrap_or(u32::MAX),
            },
        )
        .await?;
    let in_flight: i64 = IN_FLIGHT_STATES
        .iter()
        .filter_map(|s| stats.contracts_by_state.get(*s))
        .sum();
    Ok(Json(json!({
        "worker_id": listing.id,
        "health": listing.health,
        "max_parallel": listing.max_parallel,
        "in_flight": in_flight,
        "contracts_by_state": stats.contracts_by_state,
        "earnings": stats.settled.iter().map(|t| json!({
            "network": t.network,
            "asset": t.asset,
            "amount": t.amount.to_string(),
            "payments": t.payments,
        })).collect::<Vec<_>>(),
        "recent_failures": stats.recent_failures.iter().map(|f| json!({
            "contract_id": f.contract_id,
            "attempt_no": f.attempt_no,
            "state": f.state,
            "http_status": f.http_status,
            "error": f.error,
            "started_at": f.started_at,
        })).collect::<Vec<_>>(),
        "recent_rejections": stats.recent_rejections.iter().map(|r| json!({
            "contract_id": r.contract_id,
            "verification_status": r.status,
            "reason_codes": r.reason_codes,
            "details": r.details,
            "created_at": r.created_at,
        })).collect::<Vec<_>>(),
        "health_history": stats.probes.iter().map(|p| json!({
            "at": p.at,
            "passed": p.passed,
            "health": p.health,
            "error": p.error,
        })).collect::<Vec<_>>(),
    })))
}
