//! [`AppState`]: what every handler can reach. Cloned per request (every extractor and
//! middleware that takes the state clones it), so it is one `Arc`: cloning the fields one by
//! one cost a dozen atomic increments and decrements per request, 4 % of the unpaid 402's CPU.

use std::{fmt, ops::Deref, sync::Arc};

use tokio_util::sync::CancellationToken;

use crate::a2a::cards::AgentCards;
use hiregate_engine::{
    assets::AssetDirectory, auth::ApiKeyCache, hire::HireService, metrics::Metrics,
    outbound::OutboundClient, readiness::ReadinessCheck, registry::WorkerRegistry,
    reputation::ReputationBook, settings::Config,
};
use hiregate_store::{Store, keys::ApiKeyHash};

/// Shared state of the HTTP API and the background loops: a handle on [`SharedState`].
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    /// The handle on `shared`.
    pub fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// What an [`AppState`] holds.
pub struct SharedState {
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
    /// Token metadata (symbol, decimals) by chain and address.
    pub assets: AssetDirectory,
    /// Extra `/readyz` checks (the facilitator's).
    pub readiness_checks: Arc<[Arc<dyn ReadinessCheck>]>,
    /// SHA-256 of `admin.api_key`, if configured (the key itself is not kept here).
    pub admin_key_hash: Option<ApiKeyHash>,
    /// Cancelled when the app shuts down; long-lived responses (SSE) and loops watch it.
    pub shutdown: CancellationToken,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Debug for SharedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("store", &self.store)
            .field("readiness_checks", &self.readiness_checks.len())
            .field("admin_configured", &self.admin_key_hash.is_some())
            .finish_non_exhaustive()
    }
}
