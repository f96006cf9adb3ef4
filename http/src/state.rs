//! [`AppState`]: what every handler can reach. Cloned per request (every extractor and
//! middleware that takes the state clones it), so it is one `Arc`: cloning the fields one by
//! one cost a dozen atomic increments and decrements per request, 4 % of the unpaid 402's CPU.

use std::{fmt, ops::Deref, sync::Arc};

use tokio_util::sync::CancellationToken;

use crate::a2a::cards::AgentCards;
use hiregate_engine::services::Engine;
use url::Url;

/// Shared state of the HTTP API and the background loops: a handle on [`SharedState`].
#[derive(Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    /// The HTTP edge over `engine`, its agent cards naming `base_url`.
    pub fn over(engine: Engine, base_url: &Url) -> Self {
        let agent_cards = AgentCards::new(engine.keys.clone(), base_url);
        Self::new(SharedState {
            engine,
            agent_cards,
            shutdown: CancellationToken::new(),
        })
    }

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
    /// The engine's services (see [`Engine`]); its fields read through this state.
    pub engine: Engine,
    /// Signed A2A Agent Cards.
    pub agent_cards: AgentCards,
    /// Cancelled when the app shuts down; long-lived responses (SSE) and loops watch it.
    pub shutdown: CancellationToken,
}

impl Deref for SharedState {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Debug for SharedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}
