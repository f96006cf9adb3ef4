//! [`Engine`]: the engine's services assembled from settings on a connected store, with no
//! transport: the outbound client, the signing keys, the facilitator (metered), the worker
//! registry, the hire service, reputation, the API key cache and the readiness checks. The HTTP
//! edge serves an `Engine`; tests and in-process callers (`hiregate mcp`) drive it directly.
//! Background loops are started by whoever runs it (the binary's `App::run_until_stopped`).

use std::sync::Arc;

use url::Url;

use hiregate_contracts::token::KeyRing;
use hiregate_payments::Facilitator;
use hiregate_store::{Store, StoreError, keys::ApiKeyHash};

use crate::{
    adapters::ProtocolAdapters,
    assets::AssetDirectory,
    auth::ApiKeyCache,
    clock::Clock,
    facilitator::{
        FacilitatorReadiness, FacilitatorSetupError, MeteredFacilitator, build_facilitator,
    },
    hire::{HireParts, HireService},
    key_turns::GatewayKeyTurns,
    metrics::Metrics,
    outbound::{OutboundClient, OutboundError},
    readiness::ReadinessCheck,
    registry::{WorkerRegistry, probe::ProbeRegistry},
    reputation::ReputationBook,
    settings::{Config, FacilitatorMode, Settings},
    signing::{SigningKeyError, load_key_ring},
};

/// Parts a caller may supply instead of the ones the settings describe.
#[derive(Default)]
pub struct EngineOptions {
    /// Extra `/readyz` checks, e.g. the facilitator.
    pub readiness_checks: Vec<Arc<dyn ReadinessCheck>>,
    /// Worker probes by protocol; defaults to [`ProbeRegistry::default`].
    pub probes: Option<ProbeRegistry>,
    /// Use this facilitator instead of the one `facilitator.mode` describes (tests, the demo).
    pub facilitator: Option<Arc<dyn Facilitator>>,
    /// Worker protocol adapters; defaults to [`ProtocolAdapters::default`] (hire).
    pub adapters: Option<ProtocolAdapters>,
    /// The engine's wall clock; defaults to the system clock. Tests give a
    /// [`crate::clock::TestClock`]'s and move it instead of sleeping.
    pub clock: Option<Clock>,
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("readiness_checks", &self.readiness_checks.len())
            .field("probes", &self.probes.is_some())
            .field("facilitator", &self.facilitator.is_some())
            .field("adapters", &self.adapters.is_some())
            .finish_non_exhaustive()
    }
}

/// What can stop the engine from being assembled.
#[derive(Debug, thiserror::Error)]
pub enum AssemblyError {
    /// The store could not be reached or migrated.
    #[error("database unavailable")]
    Store(#[from] StoreError),
    /// The outbound client could not be built.
    #[error("cannot build the outbound HTTP client")]
    Outbound(#[from] OutboundError),
    /// The signing key could not be loaded.
    #[error("cannot load the gateway signing key")]
    SigningKey(#[from] SigningKeyError),
    /// The facilitator could not be set up.
    #[error("cannot set up the facilitator")]
    Facilitator(#[from] FacilitatorSetupError),
}

/// The engine's services, shared by every transport.
pub struct Engine {
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
    /// The gateway's signing keys (terms, receipts, cards).
    pub keys: KeyRing,
    /// Prometheus registry of this app.
    pub metrics: Arc<Metrics>,
    /// Token metadata (symbol, decimals) by chain and address.
    pub assets: AssetDirectory,
    /// Extra `/readyz` checks (the facilitator's).
    pub readiness_checks: Arc<[Arc<dyn ReadinessCheck>]>,
    /// SHA-256 of `admin.api_key`, if configured (the key itself is not kept here).
    pub admin_key_hash: Option<ApiKeyHash>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("readiness_checks", &self.readiness_checks.len())
            .field("admin_configured", &self.admin_key_hash.is_some())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Connect the store (migrating it when `database.migrate_on_start`) and assemble the
    /// engine on it, with `base_url` as the gateway's public URL.
    pub async fn build(
        settings: Settings,
        options: EngineOptions,
        base_url: Url,
    ) -> Result<Self, AssemblyError> {
        let store = Self::connect_store(&settings).await?;
        Ok(Self::assemble(settings, options, store, base_url).await?.0)
    }

    /// The store of `settings`, migrated when `database.migrate_on_start`.
    pub async fn connect_store(settings: &Settings) -> Result<Store, AssemblyError> {
        let store = Store::connect(&settings.database).await?;
        if settings.database.migrate_on_start {
            store.migrate().await?;
        }
        Ok(store)
    }

    /// The engine on a connected `store`; with the chain keys' turns, whose loop the runner
    /// starts.
    pub async fn assemble(
        settings: Settings,
        options: EngineOptions,
        store: Store,
        base_url: Url,
    ) -> Result<(Self, Arc<GatewayKeyTurns>), AssemblyError> {
        let outbound = OutboundClient::new(&settings.outbound)?;
        if settings.outbound.allow_private_targets {
            tracing::warn!(
                "outbound.allow_private_targets is on: private and loopback targets are reachable (development only)"
            );
        }
        if settings.facilitator.mode == FacilitatorMode::Embedded && settings.chains.is_empty() {
            tracing::warn!(
                "no [chains] configured: the embedded facilitator cannot verify or settle \
                 payments (for a local chain and a configuration for it: `hiregate devnet up`)"
            );
        }
        if settings.signing_key.path.is_none() {
            tracing::warn!(
                "signing_key.path is empty: a new gateway key is generated at each start"
            );
        }

        let clock = options.clock.unwrap_or_default();
        let keys = load_key_ring(&settings.signing_key)?;
        let assets = AssetDirectory::from_settings(settings.chains.values());
        let metrics = Arc::new(Metrics::new());
        for chain in settings.chains.values() {
            for token in &chain.tokens {
                metrics.track_asset(chain.network.as_str(), &token.address.to_string());
            }
        }
        // Before anything that sends from a chain key: the relayers and the operator join it.
        let key_turns = Arc::new(GatewayKeyTurns::new(&store));
        let facilitator = match options.facilitator {
            Some(facilitator) => Some(facilitator),
            None => build_facilitator(&settings, Some(&*key_turns)).await?,
        }
        .map(|facilitator| MeteredFacilitator::wrap(facilitator, metrics.clone()));
        let mut readiness_checks = options.readiness_checks;
        readiness_checks.push(Arc::new(FacilitatorReadiness::new(
            &settings,
            facilitator.clone(),
            assets.clone(),
        )));

        let registry = WorkerRegistry::new(
            store.clone(),
            outbound.clone(),
            Arc::new(options.probes.unwrap_or_default()),
            settings.health.clone(),
            metrics.clone(),
            clock.clone(),
        )
        .with_max_fee_bps(settings.escrow.max_fee_bps);
        let admin_key_hash = settings
            .admin
            .api_key
            .as_ref()
            .map(|key| ApiKeyHash::of(secrecy::ExposeSecret::expose_secret(key)));
        let config = Arc::new(settings);
        let reputation = ReputationBook::new(store.clone(), keys.clone(), clock.clone());
        let hire = HireService::new(HireParts {
            config: config.clone(),
            store: store.clone(),
            outbound: outbound.clone(),
            adapters: options.adapters.unwrap_or_default(),
            facilitator,
            keys: keys.clone(),
            assets: assets.clone(),
            escrow: crate::hire::escrow::EscrowOperators::from_settings(&config, Some(&*key_turns)),
            base_url: base_url.clone(),
            metrics: metrics.clone(),
            clock: clock.clone(),
        });
        // Who else sends from this gateway's keys, known before the first send.
        key_turns.refresh().await;
        let api_keys = ApiKeyCache::new(config.http.api_key_cache_ttl(), clock);
        let engine = Self {
            config,
            api_keys,
            store,
            outbound,
            registry,
            hire,
            reputation,
            keys,
            metrics,
            assets,
            readiness_checks: readiness_checks.into(),
            admin_key_hash,
        };
        Ok((engine, key_turns))
    }
}
