//! [`App`]: everything wired, the listener bound, ready to run.
//!
//! `App::build` opens the store (migrating if `database.migrate_on_start`), builds the outbound
//! client, the registry, the signing key, the facilitator (wrapped for metrics) and the hire
//! service, then the router, and binds the listener, so the port is known before serving (port 0
//! works). `run_until_stopped` serves and runs the background loops (health checks, settlement
//! sweep, webhook delivery, long-running work, settlement metrics) until the given token is
//! cancelled, then drains them.

use std::{net::SocketAddr, sync::Arc};

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use url::Url;

use hiregate_payments::Facilitator;

use hiregate_engine::settings::{FacilitatorMode, Settings};
use hiregate_engine::{
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
    registry::{WorkerRegistry, health::run_health_checks, probe::ProbeRegistry},
    reputation::ReputationBook,
    signing::{SigningKeyError, load_key_ring},
};
use hiregate_http::{
    a2a::cards::AgentCards,
    state::{AppState, SharedState},
};
use hiregate_store::{Store, StoreError, keys::ApiKeyHash};

/// The app could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// Opening or migrating the database failed.
    #[error("database unavailable")]
    Store(#[from] StoreError),
    /// The outbound HTTP client could not be built.
    #[error("cannot build the outbound HTTP client")]
    Outbound(#[from] OutboundError),
    /// The signing key could not be loaded or created.
    #[error("cannot load the gateway signing key")]
    SigningKey(#[from] SigningKeyError),
    /// The facilitator could not be set up.
    #[error("cannot set up the facilitator")]
    Facilitator(#[from] FacilitatorSetupError),
    /// An escrow operator key could not be loaded.
    #[error("cannot set up the escrow operators")]
    Escrow(#[from] hiregate_engine::hire::escrow::EscrowSetupError),
    /// The listen address could not be bound.
    #[error("cannot listen on {address}")]
    Bind {
        /// Address from `http.listen_address`.
        address: SocketAddr,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("HTTP server failed")]
    Serve(#[source] std::io::Error),
}

/// Optional parts the caller may supply (the execute flow, tests).
#[derive(Default)]
pub struct AppOptions {
    /// Extra `/readyz` checks, e.g. the facilitator.
    pub readiness_checks: Vec<Arc<dyn ReadinessCheck>>,
    /// Worker probes by protocol; defaults to [`ProbeRegistry::default`].
    pub probes: Option<ProbeRegistry>,
    /// Use this facilitator instead of the one `facilitator.mode` describes (tests, the demo).
    pub facilitator: Option<Arc<dyn Facilitator>>,
    /// Worker protocol adapters; defaults to [`ProtocolAdapters::default`] (hire).
    pub adapters: Option<ProtocolAdapters>,
    /// The engine's wall clock; defaults to the system clock. Tests give a
    /// [`hiregate_engine::clock::TestClock`]'s and move it instead of sleeping.
    pub clock: Option<Clock>,
}

impl std::fmt::Debug for AppOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppOptions")
            .field("readiness_checks", &self.readiness_checks.len())
            .field("probes", &self.probes)
            .field("facilitator_override", &self.facilitator.is_some())
            .field("adapters", &self.adapters)
            .field("clock", &self.clock)
            .finish()
    }
}

/// A built gateway, bound but not yet serving.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    local_addr: SocketAddr,
    base_url: Url,
    router: Router,
    state: AppState,
    key_turns: Arc<GatewayKeyTurns>,
}

impl App {
    /// Build with default options.
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        Self::build_with(settings, AppOptions::default()).await
    }

    /// Build with `options`.
    pub async fn build_with(settings: Settings, options: AppOptions) -> Result<Self, StartupError> {
        let store = connect_store(&settings).await?;
        let address = settings.http.listen_address;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| StartupError::Bind { address, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| StartupError::Bind { address, source })?;
        let base_url = match &settings.http.public_base_url {
            Some(url) => url.clone(),
            None => derived_base_url(local_addr),
        };
        let (state, key_turns) = assemble(settings, options, store, base_url.clone()).await?;
        let router = hiregate_http::router(state.clone());
        Ok(Self {
            listener,
            local_addr,
            base_url,
            router,
            state,
            key_turns,
        })
    }

    /// The bound port.
    pub fn port(&self) -> u16 {
        self.local_addr.port()
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http.public_base_url`, or `http://<bound address>`.
    pub fn base_url(&self) -> &Url {
        &self.base_url
    }

    /// The state handlers see (store, registry, …), e.g. for tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serve and run the background loops until `shutdown` is cancelled; then stop accepting,
    /// finish in-flight requests and wait for the loops to exit.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), StartupError> {
        let Self {
            listener,
            router,
            state,
            local_addr,
            key_turns,
            ..
        } = self;
        let app_token = state.shutdown.clone();
        let forward = {
            let app_token = app_token.clone();
            async move {
                shutdown.cancelled().await;
                app_token.cancel();
            }
        };
        let tasks = TaskTracker::new();
        tasks.spawn(forward);
        // Subscribed here, before serving, so no settlement can slip past the counters.
        tasks.spawn(hiregate_engine::ledger::run_settlement_metrics(
            state.store.clone(),
            state.metrics.clone(),
            state.store.subscribe_events(),
            app_token.clone(),
        ));
        tasks.spawn(
            state
                .hire
                .offer_cache()
                .follow(state.store.subscribe_events(), app_token.clone()),
        );
        tasks.spawn(run_health_checks(
            state.registry.clone(),
            state.config.health.interval(),
            app_token.clone(),
        ));
        tasks.spawn(hiregate_engine::hire::sweep::run_settlement_sweep(
            state.hire.clone(),
            state.config.contracts.sweep_interval(),
            app_token.clone(),
        ));
        tasks.spawn(hiregate_engine::webhooks::delivery::run_webhook_delivery(
            hiregate_engine::webhooks::delivery::WebhookDelivery::new(
                state.store.clone(),
                state.outbound.clone(),
                state.config.webhooks.clone(),
                state.hire.clock().clone(),
            ),
            app_token.clone(),
        ));
        tasks.spawn(hiregate_engine::hire::deadlines::run_long_running_work(
            state.hire.clone(),
            state.config.contracts.jobs_interval(),
            format!("gw_{}", ulid::Ulid::new()),
            app_token.clone(),
        ));
        tasks.spawn(crate::allocator::release_freed_memory(app_token.clone()));
        tasks.spawn(key_turns.run(app_token.clone()));
        tasks.close();

        tracing::info!(%local_addr, "hiregate gateway listening");
        // `into_make_service` resolves the router once; served as a plain `Router`, axum
        // rebuilds every route for each connection (about 60 KiB per open connection, e.g.
        // an SSE follower).
        let served = axum::serve(listener, router.into_make_service())
            .with_graceful_shutdown(app_token.clone().cancelled_owned())
            .await;
        app_token.cancel();
        tasks.wait().await;
        tracing::info!("hiregate gateway stopped");
        served.map_err(StartupError::Serve)
    }
}

/// The gateway's services, built from `settings` without binding anything: the store
/// (connected, and migrated when `database.migrate_on_start`), the worker registry, the hire
/// engine and the rest of [`AppState`], with `base_url` as the gateway's public URL. [`App`]
/// serves them over HTTP; tests and in-process callers drive the engine directly. Background
/// loops are not started (see [`App::run_until_stopped`]).
pub async fn build_services(
    settings: Settings,
    options: AppOptions,
    base_url: Url,
) -> Result<AppState, StartupError> {
    let store = connect_store(&settings).await?;
    Ok(assemble(settings, options, store, base_url).await?.0)
}

async fn connect_store(settings: &Settings) -> Result<Store, StartupError> {
    let store = Store::connect(&settings.database).await?;
    if settings.database.migrate_on_start {
        store.migrate().await?;
    }
    Ok(store)
}

/// Everything but the listener, on a connected `store`; with the chain keys' turns, whose loop
/// [`App::run_until_stopped`] runs.
async fn assemble(
    settings: Settings,
    options: AppOptions,
    store: Store,
    base_url: Url,
) -> Result<(AppState, Arc<GatewayKeyTurns>), StartupError> {
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
        tracing::warn!("signing_key.path is empty: a new gateway key is generated at each start");
    }

    let clock = options.clock.unwrap_or_default();
    let keys = load_key_ring(&settings.signing_key)?;
    let assets = AssetDirectory::from_settings(settings.chains.values());
    let metrics = Arc::new(Metrics::new());
    for chain in settings.chains.values() {
        for token in &chain.tokens {
            metrics.track_asset(&chain.network, &token.address);
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
    let agent_cards = AgentCards::new(keys.clone(), &base_url);
    let hire = HireService::new(HireParts {
        config: config.clone(),
        store: store.clone(),
        outbound: outbound.clone(),
        adapters: options.adapters.unwrap_or_default(),
        facilitator,
        keys,
        assets: assets.clone(),
        escrow: hiregate_engine::hire::escrow::EscrowOperators::from_settings(
            &config,
            Some(&*key_turns),
        )?,
        base_url: base_url.clone(),
        metrics: metrics.clone(),
        clock: clock.clone(),
    });
    // Who else sends from this gateway's keys, known before the first send.
    key_turns.refresh().await;
    let api_keys = ApiKeyCache::new(config.http.api_key_cache_ttl(), clock);
    let state = AppState::new(SharedState {
        config,
        api_keys,
        store,
        outbound,
        registry,
        hire,
        reputation,
        agent_cards,
        metrics,
        assets,
        readiness_checks: readiness_checks.into(),
        admin_key_hash,
        shutdown: CancellationToken::new(),
    });
    Ok((state, key_turns))
}

fn derived_base_url(addr: SocketAddr) -> Url {
    let host = if addr.ip().is_unspecified() {
        // Bound to every interface; loopback is the one address known to reach it.
        match addr {
            SocketAddr::V4(_) => "127.0.0.1".to_owned(),
            SocketAddr::V6(_) => "[::1]".to_owned(),
        }
    } else if addr.is_ipv6() {
        format!("[{}]", addr.ip())
    } else {
        addr.ip().to_string()
    };
    // Built from an IP and a port, so always a valid URL.
    Url::parse(&format!("http://{host}:{}", addr.port()))
        .unwrap_or_else(|_| unreachable!("an IP and a port form a valid URL"))
}
