//! [`ContractEventRelay`]: the [`UpstreamEvents`] sink of a forward. It appends each event a
//! worker streams (Superwire's SSE events) to the contract's event log, which is what the
//! seeker's SSE stream and webhooks read, in the order the adapter relays them.

use async_trait::async_trait;
use serde_json::Value;

use crate::{adapters::UpstreamEvents, clock::Clock};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{NewContractEvent, Store};

/// Appends relayed worker events to one contract's event log.
#[derive(Debug, Clone)]
pub struct ContractEventRelay {
    store: Store,
    contract_id: String,
    correlation_id: String,
    actor: Actor,
    clock: Clock,
}

impl ContractEventRelay {
    /// A relay into `contract_id`'s log; events are attributed to `actor` (the worker) and
    /// dated by `clock`.
    pub fn new(
        store: Store,
        contract_id: &str,
        correlation_id: &str,
        actor: Actor,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            contract_id: contract_id.to_owned(),
            correlation_id: correlation_id.to_owned(),
            actor,
            clock,
        }
    }
}

#[async_trait]
impl UpstreamEvents for ContractEventRelay {
    async fn relay(&self, kind: EventKind, details: Value) {
        let event = NewContractEvent {
            at: self.clock.now(),
            actor: self.actor.clone(),
            correlation_id: self.correlation_id.clone(),
            kind,
            details,
        };
        // A lost progress event must not fail the hire: the deliverable is what is judged.
        if let Err(error) = self
            .store
            .append_contract_event(&self.contract_id, &event)
            .await
        {
            tracing::warn!(contract_id = %self.contract_id, %error, "worker event not recorded");
        }
    }
}
