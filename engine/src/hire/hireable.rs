//! Whether a listing can work on a paid contract now. Asked twice: when the payment arrives
//! (before it is verified, stored or locked on chain) and before each new attempt is forwarded.
//!
//! | the listing | payment arrives (nothing held yet) | new attempt (the payment is held) |
//! |---|---|---|
//! | retired, or its catalog no longer offers the contract's task type | 409 `worker_retired` / `task_type_not_offered`: the operator withdrew it | forwarded: contracts already paid finish |
//! | marked unhealthy by the health loop (`health.miss_threshold` failed probes in a row: the worker is down, or its `/capabilities` no longer lists a task type of the listing) | 503 `worker_unavailable` with `Retry-After` (until its next probe, the earliest it can pass) | the contract stays `paid` and waits for the worker, at most the contract's SLA; if it is still unhealthy the attempt ends `worker_unavailable` without the worker being called, and the retry policy decides: another attempt under the same payment, or `failed` with the payment released |
//! | at `max_parallel` with a full queue | 429 `too_many_requests` (see [`super::queue`]) | queued |
//!
//! An unhealthy listing may recover at its next probe, so the refusal is transient (503, as
//! `facilitator_unavailable`): the payment was valid, the worker is not available. A retired
//! listing or a withdrawn task type is the operator's decision, so it is a conflict with no
//! `Retry-After`. Neither changes anything: the contract stays `offered`, no payment is stored.
//!
//! While an attempt waits, the contract is `paid`: a seeker's cancel voids it as usual, and a
//! crash leaves it to crash recovery, which forwards it again (and waits again) until the
//! authorization's deadline, where it is voided as any unforwarded contract. A seeker's execute
//! waits in line (its request waits for the answer anyway); background rounds (crash recovery,
//! the queue's dispatcher, retries of pending work) hand the wait to a task of its own, so one
//! unhealthy worker does not hold up the rest of their round.
//! Health is the health loop's verdict, read from the store, so every instance agrees on it.
//! A retired listing is no longer probed: its last verdict is stale, so it does not hold up
//! the contracts it still owes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hiregate_contracts::state::ContractState;
use serde_json::json;

use super::{
    HireService,
    error::{ErrorCode, ErrorKind, HireError},
    execute::{Ctx, internal},
    outcome::{FailureKind, Outcome, unfinished},
    queue::worker_full,
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{
    WorkerStanding,
    listing::model::{HealthState, WorkerListing},
};

/// Longest pause between two looks at a waited-for listing's health.
const HEALTH_WATCH_MAX_TICK: Duration = Duration::from_secs(1);

/// What the wait for a listing's health before an attempt found.
pub(super) enum WorkerReadiness {
    /// Hireable (at once, or it recovered): forward the attempt to it.
    Ready(WorkerListing),
    /// Still unhealthy when the wait ran out: end the attempt without calling it.
    Unavailable(WorkerListing),
    /// The contract left `paid` meanwhile (a cancel, another instance): look at it again.
    ContractMoved,
    /// A background round found the worker unhealthy: a task of its own waits for it (see
    /// [`HireService::wait_apart`]); the contract stays `paid` meanwhile.
    WaitsApart,
}

impl HireService {
    /// Why the contract's worker cannot take its payment now, if it cannot: retired or task
    /// type withdrawn (409), unhealthy (503 + `Retry-After`), no free slot and a full queue
    /// (429). One store read, asked before the payment is verified, stored or locked.
    pub(super) async fn worker_refusal(&self, ctx: &Ctx) -> Result<Option<HireError>, HireError> {
        let standing = self
            .inner
            .store
            .worker_standing(
                ctx.worker_id.as_str(),
                ctx.terms.task().task_type().as_str(),
            )
            .await?
            .ok_or_else(|| internal("the contract's worker listing is gone"))?;
        let details = json!({"contract_id": ctx.contract_id, "worker_id": ctx.worker_id});
        if standing.retired {
            return Ok(Some(
                HireError::conflict(
                    ErrorCode::WorkerRetired,
                    "the worker was retired since this contract was offered and takes no new \
                     contracts; nothing was charged",
                )
                .with_details(details),
            ));
        }
        if !standing.offers_task {
            return Ok(Some(
                HireError::conflict(
                    ErrorCode::TaskTypeNotOffered,
                    format!(
                        "the worker no longer offers task type `{}`; nothing was charged",
                        ctx.terms.task().task_type().as_str()
                    ),
                )
                .with_details(details),
            ));
        }
        if standing.health == HealthState::Unhealthy {
            return Ok(Some(self.worker_unavailable(ctx, &standing)));
        }
        let depth = self.inner.config.contracts.worker_queue_depth;
        let load = standing.load;
        let full = load.in_flight >= load.max_parallel && load.queued >= depth;
        Ok(full.then(|| worker_full(load, depth)))
    }

    /// 503 `worker_unavailable`: the listing is marked unhealthy; retry once it may have passed
    /// its next probe.
    fn worker_unavailable(&self, ctx: &Ctx, standing: &WorkerStanding) -> HireError {
        let retry_after_s = self.health_retry_after_s(standing.next_probe_at);
        HireError::new(
            ErrorKind::Unavailable,
            ErrorCode::WorkerUnavailable,
            "the worker is failing its health checks (it is down, or no longer lists this task \
             type); the payment was not taken, retry after Retry-After",
        )
        .with_details(json!({
            "contract_id": ctx.contract_id,
            "worker_id": ctx.worker_id,
            "health": HealthState::Unhealthy,
            "retry_after_s": retry_after_s,
        }))
        .with_retry_after(Duration::from_secs(retry_after_s))
    }

    /// Seconds until a listing probed next at `next_probe_at` may be healthy again: its next
    /// probe has run (at least 1).
    pub(super) fn health_retry_after_s(&self, next_probe_at: DateTime<Utc>) -> u64 {
        let until_probe = (next_probe_at - self.now()).to_std().unwrap_or_default();
        let probe = self.inner.config.health.probe_timeout();
        (until_probe + probe).as_secs_f64().ceil().max(1.0) as u64
    }

    /// Before a new attempt: wait for the listing to be hireable, up to `wait_until`, with the
    /// contract `paid` (see the module docs). Returns at once for a healthy or retired listing;
    /// the wait is recorded once as `waiting_for_worker`.
    pub(super) async fn await_worker(
        &self,
        ctx: &Ctx,
        mut listing: WorkerListing,
        wait_until: DateTime<Utc>,
    ) -> Result<WorkerReadiness, HireError> {
        if !waits_for_health(&listing) {
            return Ok(WorkerReadiness::Ready(listing));
        }
        if !ctx.waits_in_line {
            self.wait_apart(ctx.contract_id.as_str());
            return Ok(WorkerReadiness::WaitsApart);
        }
        let store = &self.inner.store;
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &Actor::Gateway,
                    EventKind::WaitingForWorker,
                    json!({
                        "worker_id": listing.id,
                        "health": listing.health,
                        "wait_until": wait_until,
                    }),
                ),
            )
            .await?;
        tracing::info!(contract_id = %ctx.contract_id, worker_id = %listing.id, %wait_until, "worker unhealthy: the paid attempt waits for it");
        let tick = (self.inner.config.health.interval() / 4)
            .clamp(Duration::from_millis(50), HEALTH_WATCH_MAX_TICK);
        loop {
            let left = (wait_until - self.now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Ok(WorkerReadiness::Unavailable(listing));
            }
            tokio::time::sleep(tick.min(left)).await;
            let (contract, current) = tokio::try_join!(
                store.get_contract(ctx.contract_id.as_str()),
                store.get_worker(&ctx.worker_id)
            )?;
            if contract.is_none_or(|c| c.state != ContractState::Paid) {
                return Ok(WorkerReadiness::ContractMoved);
            }
            listing = current.ok_or_else(|| internal("the contract's worker listing is gone"))?;
            if !waits_for_health(&listing) {
                tracing::info!(contract_id = %ctx.contract_id, worker_id = %listing.id, "worker healthy again: forwarding");
                return Ok(WorkerReadiness::Ready(listing));
            }
        }
    }
}

impl HireService {
    /// Background work (crash recovery, the queue's dispatcher, retries of pending work) does
    /// not wait for an unhealthy worker in line, which would hold up every contract behind it
    /// in its round: this task waits instead, under the contract's lock once the round has let
    /// go of it, and takes the contract on as a seeker's execute would (forward once the worker
    /// is healthy, else end the attempt). While it holds the lock, the rounds skip the contract.
    fn wait_apart(&self, contract_id: &str) {
        let service = self.clone();
        let contract_id = contract_id.to_owned();
        tokio::spawn(async move {
            let lock = service.inner.locks.lock_of(&contract_id);
            let _guard = lock.lock_owned().await;
            let contract = match service.inner.store.get_contract(&contract_id).await {
                Ok(Some(contract)) if contract.state == ContractState::Paid => contract,
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(contract_id, %error, "waiting for the worker: store read failed");
                    return;
                }
            };
            let result = match Ctx::of(&contract, String::new(), Actor::Gateway) {
                Ok(mut ctx) => {
                    ctx.waits_in_line = true;
                    Box::pin(service.drive(&ctx, None)).await
                }
                Err(error) => Err(error),
            };
            // Still unavailable is what the wait may end in; anything else unfinished is news.
            let still_unavailable = match &result {
                Err(error) => error.kind == ErrorKind::Unavailable,
                Ok(Outcome::Failed(failure)) => failure.kind == FailureKind::WorkerUnavailable,
                Ok(_) => false,
            };
            if let Some(code) = unfinished(&result).filter(|_| !still_unavailable) {
                tracing::warn!(contract_id, %code, "waiting for the worker: the contract could not be taken on");
            }
        });
    }
}

/// How long a new attempt may wait for an unhealthy worker: the contract's SLA, and never past
/// the moment one attempt still fits (`needed_s`) before the authorization's `valid_before`.
pub(super) fn worker_wait_until(
    ctx: &Ctx,
    valid_before: i64,
    needed_s: u64,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let sla = chrono::Duration::milliseconds(
        i64::try_from(ctx.terms.sla().max_latency_ms()).unwrap_or(i64::MAX),
    );
    let last_start = DateTime::from_timestamp(
        valid_before.saturating_sub(i64::try_from(needed_s).unwrap_or(i64::MAX)),
        0,
    )
    .unwrap_or(now);
    now.checked_add_signed(sla)
        .unwrap_or(last_start)
        .min(last_start)
}

/// A live listing the health loop marked unhealthy (a retired one is no longer probed).
fn waits_for_health(listing: &WorkerListing) -> bool {
    listing.retired_at.is_none() && listing.health == HealthState::Unhealthy
}
