//! Deadlines of held authorizations, and the runner of the long-running background work.
//!
//! Every payment authorization the gateway holds dies at its `validBefore`. The authorization
//! sweep acts on every contract whose unsettled payment has `validBefore - settlement_margin_s`
//! behind it, so nothing dies silently:
//!
//! | state | action |
//! |---|---|
//! | `accepted` | settle now (the acceptance window should already be over; the money must not be lost) |
//! | `rejected` | `void_recorded` → `voided`, payment `voided` |
//! | `paid` | `authorization_expired` → `expired`, payment `voided` |
//! | `executing` / `pending` | `sla_breached` → `failed`, payment `voided` |
//! | `disputed` | the arbiter stayed silent: decision `void` by `system` (`arbiter_silent`) → `voided`, payment `voided` (see [`super::disputes`]) |
//!
//! For an escrowed payment `validBefore` is the escrow's capture deadline: the same actions
//! then capture or void on chain before the escrow stops allowing a capture. "Now" is the later
//! of the chains' latest block time and the local clock: the chain judges these deadlines by
//! its block time, which may run ahead of the gateway's clock.
//!
//! [`run_long_running_work`] runs poll jobs, this sweep, crash recovery (see `recovery`), the
//! escrow sweep (see `release`) and the queue dispatcher (see [`super::queue`]) every
//! `contracts.jobs_interval_ms`.

use std::time::Duration;

use hiregate_contracts::state::{ContractEvent, ContractState};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::error::HireError;
use super::{HireService, execute::Ctx};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{ContractRecord, StoreError};

/// Contracts handled per sweep round.
const BATCH: u32 = 50;

impl HireService {
    /// One round of the authorization sweep; returns how many contracts it changed.
    pub async fn sweep_deadlines(&self) -> Result<usize, StoreError> {
        let inner = &self.inner;
        // An authorization dies at `validBefore` (an escrow stops capturing at its deadline) by
        // the chain's clock: when the chain runs ahead of ours, so must the sweep.
        let now = inner.assets.latest_now().await;
        let margin = i64::try_from(inner.config.contracts.settlement_margin_s).unwrap_or(i64::MAX);
        let due = inner
            .store
            .contracts_with_authorization_due(now.saturating_add(margin), BATCH)
            .await?;
        let mut changed = 0;
        for contract in &due {
            match self.resolve_expiring(contract).await {
                Ok(true) => changed += 1,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(contract_id = %contract.contract_id, code = %error.code, "authorization sweep could not resolve a contract");
                }
            }
        }
        Ok(changed)
    }

    /// Settle or void one contract whose authorization is about to lapse. Skipped (false) when
    /// an execute holds the contract's lock: the next round looks again.
    async fn resolve_expiring(&self, contract: &ContractRecord) -> Result<bool, HireError> {
        let lock = self.inner.locks.lock_of(contract.contract_id.as_str());
        let Ok(_guard) = lock.try_lock_owned() else {
            return Ok(false);
        };
        let store = &self.inner.store;
        let Some(current) = store.get_contract(contract.contract_id.as_str()).await? else {
            return Ok(false);
        };
        let state = current.state;
        let ctx = Ctx::of(
            &current,
            format!("deadline_{}", ulid::Ulid::new()),
            Actor::Gateway,
        )?;
        let Some(payment) = store.payment_of_contract(ctx.contract_id.as_str()).await? else {
            return Ok(false);
        };
        let details = json!({
            "valid_before": payment.valid_before,
            "settlement_margin_s": self.inner.config.contracts.settlement_margin_s,
        });
        let (event, void_reason) = match state {
            ContractState::Accepted => {
                store
                    .append_contract_event(
                        ctx.contract_id.as_str(),
                        &self.event(
                            &ctx,
                            &Actor::Gateway,
                            EventKind::AuthorizationDeadlineReached,
                            {
                                let mut d = details.clone();
                                d["action"] = json!("settle");
                                d
                            },
                        ),
                    )
                    .await?;
                self.settle(&ctx, ContractState::Accepted).await?;
                return Ok(true);
            }
            ContractState::Disputed => return self.dispute_deadline(&ctx, &payment).await,
            ContractState::Rejected => (ContractEvent::VoidRecorded, "rejected"),
            ContractState::Paid => (
                ContractEvent::AuthorizationExpired,
                "authorization_expiring",
            ),
            ContractState::Executing | ContractState::Pending => {
                (ContractEvent::SlaBreached, "authorization_expiring")
            }
            _ => return Ok(false),
        };
        if !self
            .transition(&ctx, state, &event, &Actor::Gateway, details, None)
            .await?
        {
            return Ok(false);
        }
        self.record_void(&ctx, &payment, void_reason).await?;
        tracing::info!(contract_id = %ctx.contract_id, from = state.as_str(), "held authorization voided before validBefore");
        Ok(true)
    }
}

/// Run the long-running background work until `shutdown`: claim due poll jobs (as `owner`,
/// unique per gateway instance) and sweep authorization and settlement deadlines, every
/// `interval`.
pub async fn run_long_running_work(
    hire: HireService,
    interval: Duration,
    owner: String,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            // A round in flight finishes before the loop stops: a report half applied (deliverable
            // stored, contract not yet moved) is what a graceful stop must not leave behind.
            _ = ticker.tick() => one_round(&hire, &owner).await,
        }
    }
}

async fn one_round(hire: &HireService, owner: &str) {
    if let Err(error) = hire.run_poll_jobs(owner).await {
        tracing::warn!(error = %error, "poll jobs failed");
    }
    if let Err(error) = hire.sweep_deadlines().await {
        tracing::warn!(error = %error, "deadline sweep failed");
    }
    if let Err(error) = hire.recover_stale().await {
        tracing::warn!(error = %error, "crash recovery round failed");
    }
    if let Err(error) = hire.sweep_escrow().await {
        tracing::warn!(error = %error, "escrow sweep failed");
    }
    if let Err(error) = hire.release_abandoned_payments().await {
        tracing::warn!(error = %error, "release of abandoned payments failed");
    }
    if let Err(error) = hire.dispatch_queued().await {
        tracing::warn!(error = %error, "queue dispatch failed");
    }
}
