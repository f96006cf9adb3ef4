//! The in-process event bus: [`LiveEvent`] is the public shape of a `contract_event` row (SSE
//! `data:` and the webhook `data` field): no correlation id, nothing about payments beyond what
//! the hire flow put in `details`. [`EventBus`] is an in-process broadcast the
//! [`Store`](super::Store) publishes to after each event commits; SSE streams and the webhook
//! delivery loop subscribe to it so they react at once instead of polling. It only ever speeds
//! things up: a receiver that lags, or an event written by another gateway instance, is caught by
//! the database poll the readers keep running anyway.
//!
//! It knows nothing of the store's rows: the store builds the [`LiveEvent`] it publishes, and
//! tells it one fact of each contract it proposes, whether the terms name a `webhook_url`, so
//! that the webhook loop wakes only for events that can have queued a delivery.

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

/// Contracts whose webhook URL the bus remembers: about the contracts in flight at a few
/// hundred hires a second; one entry is a contract id and a flag.
const WEBHOOK_FLAGS: usize = 4096;

/// In-process fan-out of committed events. Cheap to clone; clones share the channel.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<Arc<LiveEvent>>,
    /// Whether a contract proposed through this bus's store names a `webhook_url`. The URL is
    /// fixed at proposal, so an entry never goes stale; a contract not in it (proposed by
    /// another instance or before a restart, or pushed out by newer ones) counts as having one.
    webhook_flags: Arc<quick_cache::sync::Cache<ContractId, bool>>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self {
            sender: broadcast::channel(BUS_CAPACITY).0,
            webhook_flags: Arc::new(quick_cache::sync::Cache::new(WEBHOOK_FLAGS)),
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

    /// Remember whether the contract just proposed names a webhook URL.
    pub(crate) fn note_webhook(&self, contract_id: &ContractId, has_webhook: bool) {
        self.webhook_flags.insert(contract_id.clone(), has_webhook);
    }

    /// Whether an event of `contract_id` may have queued a webhook delivery: `false` only for a
    /// contract known to name no webhook URL. What the delivery loop wakes for.
    pub fn may_queue_webhook(&self, contract_id: &ContractId) -> bool {
        self.webhook_flags.get(contract_id).unwrap_or(true)
    }
}
