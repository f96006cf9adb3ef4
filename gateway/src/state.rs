//! [`AppState`]: what every handler can reach. Cloned per request, so every field is a cheap
//! handle (an `Arc` or a pool).

use std::{fmt, sync::Arc};

use tokio_util::sync::CancellationToken;

use crate::{
    agent_cards::AgentCards,
    auth::{ApiKeyCache, ApiKeyHash},
    config::Config,
    hire::HireService,
    metrics::Metrics,
    outbound::OutboundClient,
    readiness::ReadinessCheck,
    registry::WorkerRegistry,
    reputation::ReputationBook,
    store::Store,
};

/// Shared state of the HTTP API and the background loops.
#[derive(Clone)]
pub struct AppState {
    /// Validated settings.
    pub config: Config,
    /// API keys recently found valid (see [`ApiKeyCache`]).
    pub api_keys: ApiKeyCache,
    /// All persistence.
    pub store: Store,
    /// The SSRF-filtering client for every outbound call.
    pub outbound: OutboundClient,
    /// Worker listings and health.
    pub registry: WorkerRegistry,
    /// Contracts, payments, forwarding, verification, settlement.
    pub hire: HireService,
    /// Signed reputation snapshots of worker listings.
    pub reputation: ReputationBook,
    /// Signed A2A Agent Cards.
    pub agent_cards: AgentCards,
    /// Prometheus registry of this app.
    pub metrics: Arc<Metrics>,
    /// Extra `/readyz` checks (the facilitator's).
    pub readiness_checks: Arc<[Arc<dyn ReadinessCheck>]>,
    /// SHA-256 of `admin.api_key`, if configured (the key itself is not kept here).
    pub admin_key_hash: Option<ApiKeyHash>,
    /// Cancelled when the app shuts down; long-lived responses (SSE) and loops watch it.
    pub shutdown: CancellationToken,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store)
            .field("readiness_checks", &self.readiness_checks.len())
            .field("admin_configured", &self.admin_key_hash.is_some())
            .finish_non_exhaustive()
    }
}
