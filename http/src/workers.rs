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
    Json,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    extract::{AppJson, AppPath, AppQuery, DeferredJson, Operator},
    routes::{ErrorBody, Routes, get},
};
use hiregate_contracts::reputation::{ReputationSnapshot, Window};

use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::{PrincipalId, WorkerId};
use hiregate_engine::registry::{NewWorker, WorkerPatch};
use hiregate_store::{
    IN_FLIGHT_STATES, PROBE_HISTORY_KEPT, StatsLimits, WorkerQuery,
    listing::{
        metadata::ListingMetadata,
        model::{
            AtomicAmount, EvmAddress, FeePolicy, HealthState, ListingPaymentFlow, MaxParallel,
            Network, PaymentSchemes, Protocol, TaskCatalog, TaskOffer, TaskType, WorkerEndpoint,
            WorkerListing,
        },
    },
};

/// Default and largest discovery page.
const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 200;

/// `/v1/workers` and `/v1/workers/{id}`.
pub fn router() -> Routes {
    Routes::new()
        .route("/v1/workers", get(list_workers).post(create_worker))
        .route(
            "/v1/workers/{id}",
            get(get_worker).patch(update_worker).delete(retire_worker),
        )
        .route("/v1/workers/{id}/stats", get(worker_stats))
        .route("/v1/operator/workers", get(own_workers))
}

/// A listing as seekers see it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PublicWorker {
    /// Listing id (`wk_…`).
    #[schema(value_type = String)]
    id: WorkerId,
    /// Name, description, input schema, examples (each absent when not set).
    #[serde(flatten)]
    metadata: ListingMetadata,
    /// Protocol the gateway speaks to the worker.
    protocol: Protocol,
    /// Payout address.
    #[schema(value_type = String)]
    pay_to: EvmAddress,
    /// Payment chain (CAIP-2).
    #[schema(value_type = String)]
    network: Network,
    /// Payment token.
    #[schema(value_type = String)]
    asset: EvmAddress,
    /// Task types offered, with price and output schema.
    #[schema(value_type = std::collections::BTreeMap<String, TaskOffer>)]
    tasks: TaskCatalog,
    /// Concurrent contracts accepted.
    #[schema(value_type = u32)]
    max_parallel: MaxParallel,
    /// Accepted x402 schemes, preferred first.
    #[schema(value_type = Vec<String>)]
    payment_schemes: PaymentSchemes,
    /// Marketplace fee of escrowed contracts, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    fee_policy: Option<FeePolicy>,
    /// When `exact` contracts are paid: `authorization` (after the work, only for a passing
    /// deliverable) or `upfront` (before the work; rejected work stays paid).
    payment_flow: ListingPaymentFlow,
    /// Current health.
    health: HealthState,
    /// Creation time.
    created_at: DateTime<Utc>,
    /// Reputation in the window discovery was asked for (discovery only).
    #[serde(skip_serializing_if = "Option::is_none")]
    reputation: Option<ReputationSummary>,
}

impl PublicWorker {
    fn with_reputation(mut self, summary: ReputationSummary) -> Self {
        self.reputation = Some(summary);
        self
    }
}

impl From<&WorkerListing> for PublicWorker {
    fn from(listing: &WorkerListing) -> Self {
        Self {
            id: listing.id.clone(),
            metadata: listing.metadata.clone(),
            protocol: listing.protocol,
            pay_to: listing.pay_to,
            network: listing.network,
            asset: listing.asset,
            tasks: listing.tasks.clone(),
            max_parallel: listing.max_parallel,
            payment_schemes: listing.payment_schemes.clone(),
            fee_policy: listing.fee_policy,
            payment_flow: listing.payment_flow,
            health: listing.health,
            created_at: listing.created_at,
            reputation: None,
        }
    }
}

/// A listing as its operator sees it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OwnerWorker {
    /// What seekers see.
    #[serde(flatten)]
    public: PublicWorker,
    /// The owning operator account.
    #[schema(value_type = String)]
    operator_id: PrincipalId,
    /// Where the worker is reached.
    #[schema(value_type = String)]
    endpoint: WorkerEndpoint,
    /// Failed probes in a row.
    consecutive_misses: u32,
    /// When the last probe ran.
    last_probe_at: Option<DateTime<Utc>>,
    /// Why the last probe failed.
    last_probe_error: Option<String>,
    /// What the worker said about the listing at registration or its last update (Superwire
    /// `/validate` diagnostics: `issues`, `warnings`, `diagnostics`); absent when nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    probe_diagnostics: Option<Value>,
    /// Last change.
    updated_at: DateTime<Utc>,
    /// Retirement time.
    retired_at: Option<DateTime<Utc>>,
    /// The worker's callback secret (`whsec_…`). Present only in the registration response.
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
            probe_diagnostics: listing.probe_diagnostics.clone(),
            updated_at: listing.updated_at,
            retired_at: listing.retired_at,
            callback_secret: None,
        }
    }
}

/// `GET /v1/workers` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DiscoveryQuery {
    /// Only workers offering this task type.
    #[param(value_type = Option<String>, pattern = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")]
    task_type: Option<TaskType>,
    /// Only workers charging at most this (atomic units; for `task_type` when given).
    #[param(value_type = Option<String>, pattern = r"^(0|[1-9][0-9]{0,77})$")]
    max_price: Option<AtomicAmount>,
    /// Only healthy (true) or unhealthy (false) workers.
    healthy: Option<bool>,
    /// `next_after` of the previous page.
    #[param(value_type = Option<String>, pattern = r"^wk_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    after: Option<WorkerId>,
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<u32>,
    /// `created` (default: oldest first) or `reputation` (best first: the lower bound of the
    /// 95 % Wilson interval of the pass rate in `window`, so a rate backed by more hires ranks
    /// higher; ties by settled hires, then oldest).
    sort: Option<DiscoverySort>,
    /// Window of the reputation figures shown, sorted and filtered by: `7d`, `30d` (default) or
    /// `all`.
    #[param(value_type = Option<String>, pattern = r"^(7d|30d|all)$")]
    window: Option<Window>,
    /// Only workers whose verification pass rate in `window` is at least this (0–1); workers
    /// with no judged hire in the window are left out.
    #[param(minimum = 0.0, maximum = 1.0)]
    min_pass_rate: Option<f64>,
    /// Only workers whose p95 latency from payment to verdict in `window` is at most this many
    /// milliseconds; workers with no judged hire in the window are left out.
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    max_p95_latency_ms: Option<u64>,
}

/// Discovery order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DiscoverySort {
    /// Oldest listing first.
    Created,
    /// Best reputation first.
    Reputation,
}

/// A listing's reputation in one window, as discovery shows it (for the `task_type` asked, else
/// over every task type). The full, signed figures are at `/v1/workers/{id}/reputation`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct ReputationSummary {
    /// `7d`, `30d` or `all`.
    #[schema(value_type = String)]
    window: Window,
    /// Paid hires that ended (self-dealt ones excluded).
    hires: u64,
    /// Of which settled.
    hires_settled: u64,
    /// First verdicts passed over hires judged; `null` when none was judged.
    pass_rate: Option<f64>,
    /// Hires judged.
    judged: u64,
    /// p95 latency from payment to verdict, milliseconds.
    p95_latency_ms: Option<u64>,
    /// Distinct seekers behind `hires`.
    distinct_seekers: u64,
    /// What `sort=reputation` orders by.
    score: f64,
}

impl ReputationSummary {
    fn of(snapshot: &ReputationSnapshot, window: Window, task_type: Option<&TaskType>) -> Self {
        let figures = snapshot.figures(window, task_type.map(TaskType::as_str));
        Self {
            window,
            hires: figures.map_or(0, |f| f.hires.value),
            hires_settled: figures.map_or(0, |f| f.hires_settled.value),
            pass_rate: figures.and_then(|f| f.pass_rate.value),
            judged: figures.map_or(0, |f| f.pass_rate.sample),
            p95_latency_ms: figures.and_then(|f| f.latency.p95_ms),
            distinct_seekers: figures.map_or(0, |f| f.hires.distinct_seekers),
            score: figures.map_or(0.0, |f| f.pass_rate.wilson_lower_bound()),
        }
    }

    fn passes(&self, query: &DiscoveryQuery) -> bool {
        let rate_ok = query
            .min_pass_rate
            .is_none_or(|min| self.pass_rate.is_some_and(|rate| rate >= min));
        let latency_ok = query
            .max_p95_latency_ms
            .is_none_or(|max| self.p95_latency_ms.is_some_and(|p95| p95 <= max));
        rate_ok && latency_ok
    }
}

/// Most listings a reputation-ordered or -filtered discovery ranks.
const MAX_RANKED: usize = 2_000;

/// A page of listings.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct DiscoveryPage {
    /// Oldest first.
    workers: Vec<PublicWorker>,
    /// Pass as `after` for the next page; `null` on the last page.
    #[schema(value_type = Option<String>)]
    next_after: Option<WorkerId>,
}

/// `GET /v1/workers?task_type=&max_price=&healthy=&after=&limit=&sort=&window=&min_pass_rate=&max_p95_latency_ms=`:
/// live listings, oldest first or best reputation first, each with its reputation in `window`.
/// `max_price` applies to `task_type` when given, else to any task type; so do the reputation
/// figures. 400 `invalid_query` for malformed filters.
#[utoipa::path(
    get,
    path = "/v1/workers",
    tag = "workers",
    params(DiscoveryQuery),
    responses(
        (status = 200, description = "Live listings, oldest first", body = DiscoveryPage),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
    ),
)]
pub(crate) async fn list_workers(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<DiscoveryQuery>,
) -> ApiResult<Json<DiscoveryPage>> {
    Ok(Json(discovery_page(&state, query).await?))
}

/// The discovery page `query` asks for (what `GET /v1/workers` answers; the MCP server's
/// `find_workers` asks the same).
pub(crate) async fn discovery_page(
    state: &AppState,
    query: DiscoveryQuery,
) -> ApiResult<DiscoveryPage> {
    let limit = query.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::InvalidQuery(format!(
            "limit must be between 1 and {MAX_PAGE}"
        )));
    }
    if query
        .min_pass_rate
        .is_some_and(|rate| !(0.0..=1.0).contains(&rate))
    {
        return Err(ApiError::InvalidQuery(
            "min_pass_rate must be between 0 and 1".to_owned(),
        ));
    }
    let window = query.window.unwrap_or(Window::Month);
    let ranked = query.sort == Some(DiscoverySort::Reputation)
        || query.min_pass_rate.is_some()
        || query.max_p95_latency_ms.is_some();
    let mut filter = WorkerQuery {
        task_type: query.task_type.clone(),
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
        after: query.after.clone(),
        limit,
    };
    if !ranked {
        let listings = state.registry.discover(&filter).await?;
        let next_after = (listings.len() == limit as usize)
            .then(|| listings.last().map(|l| l.id.clone()))
            .flatten();
        let mut workers = Vec::with_capacity(listings.len());
        for listing in &listings {
            let reputation = state.reputation.of(&listing.id).await?;
            let summary =
                ReputationSummary::of(&reputation.snapshot, window, query.task_type.as_ref());
            workers.push(PublicWorker::from(listing).with_reputation(summary));
        }
        return Ok(DiscoveryPage {
            workers,
            next_after,
        });
    }

    // Reputation changes what comes first, so every candidate is ranked before a page is cut;
    // `after` is then a position in that order.
    filter.after = None;
    filter.limit = MAX_PAGE;
    let mut ranked_workers: Vec<(PublicWorker, ReputationSummary)> = Vec::new();
    loop {
        let listings = state.registry.discover(&filter).await?;
        for listing in &listings {
            let reputation = state.reputation.of(&listing.id).await?;
            let summary =
                ReputationSummary::of(&reputation.snapshot, window, query.task_type.as_ref());
            if summary.passes(&query) {
                ranked_workers.push((PublicWorker::from(listing), summary));
            }
        }
        if listings.len() < MAX_PAGE as usize || ranked_workers.len() >= MAX_RANKED {
            break;
        }
        filter.after = listings.last().map(|l| l.id.clone());
    }
    if query.sort == Some(DiscoverySort::Reputation) {
        ranked_workers.sort_by(|(a, ra), (b, rb)| {
            rb.score
                .total_cmp(&ra.score)
                .then(rb.hires_settled.cmp(&ra.hires_settled))
                .then(a.id.cmp(&b.id))
        });
    }
    let start = query.after.as_ref().map_or(0, |after| {
        ranked_workers
            .iter()
            .position(|(worker, _)| &worker.id == after)
            .map_or(ranked_workers.len(), |at| at + 1)
    });
    let page: Vec<PublicWorker> = ranked_workers
        .into_iter()
        .skip(start)
        .take(limit as usize + 1)
        .map(|(worker, summary)| worker.with_reputation(summary))
        .collect();
    let mut workers = page;
    let next_after = if workers.len() > limit as usize {
        workers.truncate(limit as usize);
        workers.last().map(|w| w.id.clone())
    } else {
        None
    };
    Ok(DiscoveryPage {
        workers,
        next_after,
    })
}

/// `POST /v1/workers` (operator): probe the endpoint, then list it. 201 with the listing and
/// its `callback_secret` (shown once). 422 `worker_probe_failed` /
/// `worker_capabilities_mismatch` / `endpoint_not_allowed` / `protocol_not_supported` when the
/// endpoint cannot be listed; 422 `invalid_body` for malformed fields (an `input_schema` that
/// is not a JSON Schema among them), 422 `validation_failed` for an example that does not
/// satisfy `input_schema` or an over-long name or description.
#[utoipa::path(
    post,
    path = "/v1/workers",
    tag = "workers",
    request_body = NewWorker,
    security(("operator_key" = [])),
    responses(
        (status = 201, description = "The listing with its `callback_secret`, shown once", body = OwnerWorker,
            headers(("Location" = String, description = "`/v1/workers/{id}`"))),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an operator key", body = ErrorBody),
        (status = 422, description = "`invalid_body`, `validation_failed`, `worker_probe_failed`, `worker_capabilities_mismatch`, `endpoint_not_allowed`, `endpoint_not_https` (plain http while `outbound.require_https`), `protocol_not_supported`", body = ErrorBody),
    ),
)]
pub(crate) async fn create_worker(
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
#[utoipa::path(
    get,
    path = "/v1/workers/{id}",
    tag = "workers",
    params(("id" = String, Path, description = "Listing id (`wk_…`)")),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "The listing", body = OwnerWorker),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn get_worker(
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
#[utoipa::path(
    patch,
    path = "/v1/workers/{id}",
    tag = "workers",
    params(("id" = String, Path, description = "Listing id (`wk_…`)")),
    request_body = WorkerPatch,
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "The updated listing", body = OwnerWorker),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`worker_retired` / `concurrent_update`", body = ErrorBody),
        (status = 422, description = "`invalid_body`, `validation_failed`, `endpoint_not_https`, probe failures as at registration", body = ErrorBody),
    ),
)]
pub(crate) async fn update_worker(
    State(state): State<AppState>,
    operator: Operator,
    AppPath(id): AppPath<String>,
    body: DeferredJson<WorkerPatch>,
) -> ApiResult<Json<OwnerWorker>> {
    let id = parse_worker_id(&id)?;
    // Another operator's listing is 404 whatever the body.
    state
        .registry
        .get_owned(&operator.principal_id, &id)
        .await?;
    let patch = body.parse()?;
    let listing = state
        .registry
        .update(&operator.principal_id, &id, patch)
        .await?;
    Ok(Json(OwnerWorker::from(&listing)))
}

/// `DELETE /v1/workers/{id}` (owning operator): retire the listing (never a hard delete;
/// idempotent). 200 with the retired listing.
#[utoipa::path(
    delete,
    path = "/v1/workers/{id}",
    tag = "workers",
    params(("id" = String, Path, description = "Listing id (`wk_…`)")),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "The retired listing", body = OwnerWorker),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn retire_worker(
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
#[utoipa::path(
    get,
    path = "/v1/operator/workers",
    tag = "workers",
    params(
        ("after" = Option<String>, Query, description = "`next_after` of the previous page", pattern = r"^wk_[0-7][0-9A-HJKMNP-TV-Z]{25}$"),
        ("limit" = Option<u32>, Query, description = "Page size, 1–200 (default 50)", minimum = 1, maximum = 200),
    ),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "The operator's own listings, retired included, oldest first", body = Object),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an operator key", body = ErrorBody),
    ),
)]
pub(crate) async fn own_workers(
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
pub(crate) struct OwnPage {
    after: Option<WorkerId>,
    limit: Option<u32>,
}

/// Newest failures and rejections a stats answer lists.
const STATS_RECENT: u32 = 20;

/// `GET /v1/workers/{id}/stats` (owning operator; 404 for anyone else's listing).
#[utoipa::path(
    get,
    path = "/v1/workers/{id}/stats",
    tag = "workers",
    params(("id" = String, Path, description = "Worker id (`wk_…`)")),
    security(("operator_key" = [])),
    responses(
        (status = 200, description = "In-flight load against `max_parallel`, contracts by state, settled earnings per asset, recent failed attempts and verification rejections, health history", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not an operator key", body = ErrorBody),
        (status = 404, description = "`not_found`: no such listing of this operator", body = ErrorBody),
    ),
)]
pub(crate) async fn worker_stats(
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
