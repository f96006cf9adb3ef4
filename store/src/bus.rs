//! The in-process event bus: [`LiveEvent`] is the public shape of a `contract_event` row (SSE
//! `data:` and the webhook `data` field): no correlation id, nothing about payments beyond what
//! the hire flow put in `details`. [`EventBus`] is an in-process broadcast the
//! [`Store`](super::Store) publishes to after each event commits; SSE streams and the webhook
//! delivery loop subscribe to it so they react at once instead of polling. It only ever speeds
//! things up: a receiver that lags, or an event written by another gateway instance, is caught by
//! the database poll the readers keep running anyway.
//!
//! It knows nothing of the store's rows: the store builds the [`LiveEvent`] it publishes.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use hiregate_contracts::{id::ContractId, state::ContractState};

use crate::states::{Actor, EventKind};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

/// Buffered notices per subscriber before it lags (and falls back to the database). Every
/// notice stays alive until this many newer ones push it out of the ring, whether or not anyone
/// still needs it: 4,096 kept about 9 MiB of a gateway holding 10,000 pending contracts. 1,024 is
/// still half a second of events at 200 hires a second.
const BUS_CAPACITY: usize = 1024;

/// One contract event, public view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveEvent {
    /// Contract.
    pub contract_id: ContractId,
    /// 1, 2, 3… per contract; the SSE event id.
    pub seq: i64,
    /// What happened (`contract_offered`, `payment_verified`, …).
    pub kind: EventKind,
    /// When it happened (UTC).
    pub at: DateTime<Utc>,
    /// Who caused it (`seeker:<id>`, `gateway`, `worker:<id>`, …).
    pub actor: Actor,
    /// State before, for transitions.
    pub from_state: Option<ContractState>,
    /// State after, for transitions.
    pub to_state: Option<ContractState>,
    /// Structured details.
    pub details: Value,
}

impl LiveEvent {
    /// Whether this event moved the contract into a terminal state.
    pub fn is_terminal(&self) -> bool {
        self.to_state.is_some_and(|state| state.is_terminal())
    }
}

/// In-process fan-out of committed events. Cheap to clone; clones share the channel.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<LiveEvent>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(BUS_CAPACITY).0,
        }
    }
}

impl EventBus {
    /// Announce a committed event. Nobody listening is fine.
    pub fn publish(&self, event: LiveEvent) {
        let _no_subscribers_is_fine = self.sender.send(Arc::new(event));
    }

    /// Receive events committed from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<LiveEvent>> {
        self.sender.subscribe()
    }
}
