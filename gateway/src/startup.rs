//! [`App`]: everything wired, the listener bound, ready to run.
//!
//! `App::build` opens the store (migrating if `database.migrate_on_start`), builds the outbound
//! client, the registry, the signing key, the facilitator (wrapped for metrics) and the hire
//! service, then the router, and binds the listener, so the port is known before serving (port 0
//! works). `run_until_stopped` serves and runs the background loops (health checks, settlement
//! sweep, webhook delivery, long-running work, settlement metrics) until the given token is
//! cancelled, then drains them. [`runtime`] is the async runtime the binary runs it on.

use std::{net::SocketAddr, sync::Arc};

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use url::Url;

use hiregate_engine::settings::Settings;
use hiregate_engine::{
    key_turns::GatewayKeyTurns,
    registry::health::run_health_checks,
    services::{AssemblyError, Engine},
};
use hiregate_http::state::AppState;
use hiregate_store::Store;

/// The gateway's async runtime: tokio's multi-thread runtime with every driver, whose workers
/// write the access lines they held back whenever they go idle
/// ([`crate::telemetry::write_deferred_access_lines`]).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(crate::telemetry::write_deferred_access_lines)
        .build()
}

/// The app could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The engine could not be assembled (store, outbound client, keys, facilitator, escrow).
    #[error(transparent)]
    Engine(#[from] AssemblyError),
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

/// Optional parts the caller may supply (the execute flow, tests): the engine's.
pub use hiregate_engine::services::EngineOptions as AppOptions;

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
        let store = Engine::connect_store(&settings).await?;
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

/// Everything but the listener, on a connected `store`: the engine and the HTTP edge's own
/// parts; with the chain keys' turns, whose loop [`App::run_until_stopped`] runs.
async fn assemble(
    settings: Settings,
    options: AppOptions,
    store: Store,
    base_url: Url,
) -> Result<(AppState, Arc<GatewayKeyTurns>), StartupError> {
    let (engine, key_turns) = Engine::assemble(settings, options, store, base_url.clone()).await?;
    Ok((AppState::over(engine, &base_url), key_turns))
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
