//! A worker's queue: paid contracts waiting for a free slot beyond its `max_parallel`.
//!
//! ```text
//! execute (payment) ── worker full, queue full (contracts.worker_queue_depth) ──► 429 before anyone pays
//!        │ worker full, room in the queue
//!        ▼
//!  paid + queued_at ──► 202 {status: "queued", queued: {position, eta_s, …}}
//!        │ a slot frees: the dispatcher (every instance, each job round) forwards the
//!        │ longest-waiting contracts of each worker with free slots, in queue order
//!        ▼
//!  executing (queued_at cleared) … the hire goes on as any other
//! ```
//!
//! The queue lives in the store (`contract.queued_at`), never in memory: every instance counts
//! the same queue, and one restarted after a crash finds it as it was. A queued contract is an
//! ordinary `paid` one, so the seeker's cancel and the authorization deadline release it as
//! they release any unforwarded contract: nothing is charged. A slot goes to the contract queued
//! first (see [`crate::store::Store::start_attempt`]): a later execute cannot jump the queue.

use std::{collections::HashMap, time::Duration};

use chrono::Utc;
use hiregate_contracts::state::ContractState;
use serde_json::json;

use super::{
    HireService,
    error::{ErrorCode, ErrorKind, HireError},
    execute::Ctx,
    outcome::{HireResult, Outcome, QueuePlace, unfinished},
};
use crate::store::{StoreError, WorkerLoad};

/// Queued contracts the dispatcher looks at per round.
const DISPATCH_BATCH: u32 = 64;

impl HireService {
    /// The forward found no free slot: queue the paid contract (keeping its place when it
    /// waits already) and answer 202 with its position, or 429 when there is no queue.
    pub(super) async fn queue_for_slot(
        &self,
        ctx: &Ctx,
        in_flight: u32,
        ahead: u32,
        max_parallel: u32,
    ) -> HireResult {
        let depth = self.inner.config.contracts.worker_queue_depth;
        let store = &self.inner.store;
        if depth == 0 {
            let load = WorkerLoad {
                in_flight,
                max_parallel,
                queued: ahead,
            };
            return Err(worker_full(load, depth));
        }
        let was_queued = store
            .get_contract(&ctx.contract_id)
            .await?
            .is_some_and(|c| c.queued_at.is_some());
        let Some(position) = store
            .queue_contract(&ctx.contract_id, ctx.worker_id.as_str(), Utc::now())
            .await?
        else {
            // No longer paid (cancelled, expired): the caller looks at the state again.
            return Ok(self.in_progress(ctx, ContractState::Paid));
        };
        if !was_queued {
            store
                .append_contract_event(
                    &ctx.contract_id,
                    &self.event(
                        ctx,
                        "gateway",
                        "queued",
                        json!({
                            "position": position,
                            "in_flight": in_flight,
                            "max_parallel": max_parallel,
                        }),
                    ),
                )
                .await?;
            tracing::info!(contract_id = %ctx.contract_id, position, "worker full: contract queued");
        }
        // Each slot turns over within the SLA: an upper bound, not a promise.
        let sla_s = ctx.terms.sla().max_latency_ms().div_ceil(1000);
        let rounds = u64::from(position).div_ceil(u64::from(max_parallel.max(1)));
        let eta_s = rounds.saturating_mul(sla_s);
        let eta_at = Utc::now() + chrono::Duration::seconds(i64::try_from(eta_s).unwrap_or(0));
        let id = ctx.contract_id.as_str();
        Ok(Outcome::Queued(QueuePlace {
            contract_id: id.to_owned(),
            position,
            queue_depth: depth,
            in_flight,
            max_parallel,
            eta_s,
            eta_at,
            poll_url: self.contract_url(id),
            events_url: self.events_url(id),
            retry_after: Duration::from_secs(sla_s.clamp(1, 30)),
        }))
    }

    /// One dispatcher round: for each worker with free slots, forward its longest-waiting
    /// queued contracts (as many as it has free slots), each on its own task. Returns how many
    /// it started. A contract whose lock is held (its seeker's execute, another round) is left
    /// to whoever holds it.
    pub async fn dispatch_queued(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let queued = store.queued_contracts(DISPATCH_BATCH).await?;
        let mut free_slots: HashMap<String, u32> = HashMap::new();
        let mut started = 0;
        for contract_id in queued {
            let Some(contract) = store.get_contract(&contract_id).await? else {
                continue;
            };
            let free = match free_slots.get(&contract.worker_id) {
                Some(free) => *free,
                None => {
                    let free = store
                        .worker_load(&contract.worker_id)
                        .await?
                        .map_or(0, |load| load.max_parallel.saturating_sub(load.in_flight));
                    free_slots.insert(contract.worker_id.clone(), free);
                    free
                }
            };
            if free == 0 {
                continue;
            }
            free_slots.insert(contract.worker_id.clone(), free - 1);
            let lock = self.inner.locks.lock_of(&contract_id);
            let Ok(guard) = lock.try_lock_owned() else {
                continue;
            };
            started += 1;
            let service = self.clone();
            tokio::spawn(async move {
                let _guard = guard;
                let result = match service.inner.store.get_contract(&contract_id).await {
                    Ok(Some(current)) if current.state == ContractState::Paid => {
                        match Ctx::of(&current, String::new(), "gateway".to_owned()) {
                            Ok(ctx) => Box::pin(service.drive(&ctx, None)).await,
                            Err(error) => Err(error),
                        }
                    }
                    Ok(_) => return,
                    Err(error) => Err(HireError::from(error)),
                };
                if let Some(code) = unfinished(&result) {
                    tracing::warn!(contract_id = %contract_id, %code, "queued contract could not be forwarded");
                }
            });
        }
        Ok(started)
    }
}

/// 429: no free slot and no room in the queue; nothing was paid. Asked before the payment is
/// verified (see [`super::hireable`]), so nobody pays for a hire that cannot even wait.
pub(super) fn worker_full(load: WorkerLoad, depth: u32) -> HireError {
    HireError::new(
        ErrorKind::Busy,
        ErrorCode::TooManyRequests,
        format!(
            "the worker is at its max_parallel limit ({} contracts in flight) and its queue is \
             full ({} of {depth} waiting); nothing was charged, retry shortly",
            load.in_flight, load.queued
        ),
    )
    .with_details(json!({
        "in_flight": load.in_flight,
        "max_parallel": load.max_parallel,
        "queued": load.queued,
        "queue_depth": depth,
    }))
    .with_retry_after(Duration::from_secs(1))
}
