//! A worker's queue: paid contracts waiting for a free slot beyond its `max_parallel`.
//!
//! ```text
//! execute (payment) ── worker full, queue full (contracts.worker_queue_depth) ──► 429 before anyone pays
//!        │ worker full, room in the queue: paid + queued_at (the wait survives a restart)
//!        ▼
//!  expected wait (queue ahead × the worker's slot time, see `slots`) within the contract's
//!  budget for waiting ──► the request is held; the first held in queue order is woken when a
//!        │                slot frees and starts (200 with the result, as an unqueued hire)
//!        │ longer (or it grew past the budget while held), or background work
//!        ▼
//!  202 {status: "queued", queued: {position, eta_s, …}} + Location (the contract to poll)
//!        │ a slot frees: this instance's dispatcher runs at once, every instance's at each
//!        │ job round; it forwards the longest-waiting contracts of each worker with free
//!        ▼ slots, in queue order
//!  executing (queued_at cleared) … the hire goes on as any other
//! ```
//!
//! The queue lives in the store (`contract.queued_at`), never in memory: every instance counts
//! the same queue, and one restarted after a crash finds it as it was (a held request that
//! dies with its instance leaves a queued contract the dispatcher forwards). A queued contract
//! is an ordinary `paid` one, so the seeker's cancel and the authorization deadline release it
//! as they release any unforwarded contract: nothing is charged. A slot goes to the contract
//! queued first (see [`hiregate_store::Store::start_attempt`]): a later execute cannot jump the
//! queue, held or not.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::{DateTime, Utc};
use hiregate_contracts::{id::WorkerId, state::ContractState};
use serde_json::json;
use tokio::sync::Notify;

use super::{
    HireService,
    error::{ErrorCode, ErrorKind, HireError},
    execute::Ctx,
    outcome::{HireResult, Outcome, QueuePlace, unfinished},
    slots::{Place, RECHECK, WorkerLine},
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{StoreError, WorkerLoad};

/// Queued contracts the dispatcher looks at per round.
const DISPATCH_BATCH: u32 = 64;

/// How a held execute's look for a slot ended.
pub(super) enum Held {
    /// A slot may be free (woken, or time to ask the store again): start the attempt again.
    TryAgain,
    /// Answered: 202 `queued` (the wait would be long), 429 (no queue), or the contract moved.
    Answer(HireResult),
}

/// An execute holding its request for a slot of its worker (see [`super::slots`]); leaves the
/// line when dropped.
pub(super) struct Hold {
    line: Arc<WorkerLine>,
    place: Place,
    /// Notified when a freed slot reaches this place in line.
    woken: Arc<Notify>,
    /// Past this the execute answers 202 `queued` instead of waiting on.
    until: Instant,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.line.leave(&self.place);
    }
}

impl HireService {
    /// The forward found no free slot. A seeker's execute whose wait fits the contract's
    /// budget for waiting (see [`Self::hold_budget`]) holds its request for the slot and is
    /// woken when one frees ([`Held::TryAgain`]); otherwise the paid contract waits in the
    /// queue (keeping its place when it waits already) and the answer is 202 with its
    /// position, or 429 when there is no queue. `hold` carries the wait across looks.
    pub(super) async fn queue_for_slot(
        &self,
        ctx: &Ctx,
        hold: &mut Option<Hold>,
        in_flight: u32,
        ahead: u32,
        max_parallel: u32,
    ) -> Result<Held, HireError> {
        let depth = self.inner.config.contracts.worker_queue_depth;
        if depth == 0 {
            let load = WorkerLoad {
                in_flight,
                max_parallel,
                queued: ahead,
            };
            return Ok(Held::Answer(Err(worker_full(load, depth))));
        }
        let line = self.inner.slots.line(ctx.worker_id.as_str());
        let first_look = hold.is_none();
        if first_look {
            let Some((position, queued_at)) = self.enqueue(ctx, in_flight, max_parallel).await?
            else {
                // No longer paid (cancelled, expired): the caller looks at the state again.
                return Ok(Held::Answer(Ok(self.in_progress(ctx, ContractState::Paid))));
            };
            if !ctx.waits_in_line {
                line.park();
                return Ok(Held::Answer(Ok(self.queued_answer(
                    ctx,
                    position,
                    in_flight,
                    max_parallel,
                ))));
            }
            let place = (queued_at.timestamp_millis(), ctx.contract_id.to_string());
            let woken = Arc::new(Notify::new());
            line.hold(&place, &woken);
            *hold = Some(Hold {
                line: Arc::clone(&line),
                woken,
                until: Instant::now() + self.hold_budget(ctx, &line),
                place,
            });
        }
        let Some(held) = hold.as_ref() else {
            return Err(super::execute::internal("a held execute without its hold"));
        };
        // Slots to free before this contract's turn, turning over `max_parallel` at a time.
        let needed = (in_flight + ahead + 1).saturating_sub(max_parallel).max(1);
        let rounds = needed.div_ceil(max_parallel.max(1));
        let expected = line.slot_time().saturating_mul(rounds);
        let now = Instant::now();
        if now + expected > held.until {
            *hold = None;
            line.park();
            tracing::info!(contract_id = %ctx.contract_id, ahead, ?expected, "worker full, long wait: answered queued");
            return Ok(Held::Answer(Ok(self.queued_answer(
                ctx,
                ahead + 1,
                in_flight,
                max_parallel,
            ))));
        }
        if first_look {
            // A slot freed while the contract was being queued woke nobody: look once more.
            return Ok(Held::TryAgain);
        }
        line.hold(&held.place, &held.woken);
        let look_again = RECHECK.min(held.until.saturating_duration_since(now));
        // Woken or not, the store is asked again: a timeout here is the fallback look.
        let _ = tokio::time::timeout(look_again, held.woken.notified()).await;
        Ok(Held::TryAgain)
    }

    /// How long a seeker's execute may hold its request for a slot: what the contract's SLA
    /// leaves after the worker's expected time (the result still comes within the latency
    /// the seeker signed for), at most `contracts.queue_hold_max_ms` (the request's timeout
    /// must still cover the work, verification and settlement).
    fn hold_budget(&self, ctx: &Ctx, line: &WorkerLine) -> Duration {
        let sla = Duration::from_millis(ctx.terms.sla().max_latency_ms());
        let cap = self.inner.config.contracts.queue_hold_max();
        sla.saturating_sub(line.slot_time()).min(cap)
    }

    /// Mark the paid contract queued in the store (keeping its place when it waits already),
    /// logging `queued` the first time. Its position and since when it waits; `None` when it
    /// is no longer paid.
    async fn enqueue(
        &self,
        ctx: &Ctx,
        in_flight: u32,
        max_parallel: u32,
    ) -> Result<Option<(u32, DateTime<Utc>)>, HireError> {
        let store = &self.inner.store;
        let now = self.now();
        let queued_before = store
            .get_contract(ctx.contract_id.as_str())
            .await?
            .and_then(|c| c.queued_at);
        let Some(position) = store
            .queue_contract(ctx.contract_id.as_str(), ctx.worker_id.as_str(), now)
            .await?
        else {
            return Ok(None);
        };
        if queued_before.is_none() {
            store
                .append_contract_event(
                    ctx.contract_id.as_str(),
                    &self.event(
                        ctx,
                        &Actor::Gateway,
                        EventKind::Queued,
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
        Ok(Some((position, queued_before.unwrap_or(now))))
    }

    /// 202 `queued`: the contract's place in its worker's queue.
    fn queued_answer(
        &self,
        ctx: &Ctx,
        position: u32,
        in_flight: u32,
        max_parallel: u32,
    ) -> Outcome {
        let depth = self.inner.config.contracts.worker_queue_depth;
        // Each slot turns over within the SLA: an upper bound, not a promise.
        let sla_s = ctx.terms.sla().max_latency_ms().div_ceil(1000);
        let rounds = u64::from(position).div_ceil(u64::from(max_parallel.max(1)));
        let eta_s = rounds.saturating_mul(sla_s);
        let eta_at = self.now() + chrono::Duration::seconds(i64::try_from(eta_s).unwrap_or(0));
        let id = ctx.contract_id.as_str();
        Outcome::Queued(QueuePlace {
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
        })
    }

    /// A slot of `ctx`'s worker was given back (the attempt delivered or failed): wake the
    /// first execute held for one, and start parked contracts now rather than at the
    /// dispatcher's next round.
    pub(super) fn slot_freed(&self, ctx: &Ctx) {
        let line = self.inner.slots.line(ctx.worker_id.as_str());
        if line.slot_freed(ctx.contract_id.as_str()) {
            let service = self.clone();
            tokio::spawn(async move {
                match service.dispatch_queued().await {
                    Ok(0) => {
                        if service
                            .inner
                            .store
                            .queued_contracts(1)
                            .await
                            .is_ok_and(|q| q.is_empty())
                        {
                            line.unpark();
                        }
                    }
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "dispatch after a freed slot failed"),
                }
            });
        }
    }

    /// One dispatcher round: for each worker with free slots, forward its longest-waiting
    /// queued contracts (as many as it has free slots), each on its own task. Returns how many
    /// it started. A contract whose lock is held (its seeker's execute, another round) is left
    /// to whoever holds it.
    pub async fn dispatch_queued(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let queued = store.queued_contracts(DISPATCH_BATCH).await?;
        let mut free_slots: HashMap<WorkerId, u32> = HashMap::new();
        let mut started = 0;
        for contract_id in queued {
            let Some(contract) = store.get_contract(&contract_id).await? else {
                continue;
            };
            let free = match free_slots.get(&contract.worker_id) {
                Some(free) => *free,
                None => {
                    let free = store
                        .worker_load(contract.worker_id.as_str())
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
                        match Ctx::of(&current, String::new(), Actor::Gateway) {
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
