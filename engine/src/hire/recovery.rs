//! Crash recovery: every working state resumes on any instance, within a bounded time and
//! before the payment's deadline.
//!
//! Each working state has a time bound: the step that moves a contract out of it is limited by
//! a timeout. A contract still in the state after its bound plus `contracts.recovery_grace_ms`
//! (counted from `updated_at`, which every transition sets) was left by an instance that died or
//! hung. One instance takes it over: a compare-and-set on `(state, updated_at)` that also
//! restarts the clock, so the takeover is a lease and exactly one instance resumes it.
//!
//! | state | bound | resumed by |
//! |---|---|---|
//! | `authorizing` | `facilitator.settle_timeout_ms` (the operator's receipt timeout) | asking the escrow's events, then sending `authorize` again only if nothing is locked and the payer's `validBefore` has not passed |
//! | `paid` | none (the forward starts at once) | forwarding the next attempt under the held authorization |
//! | `executing` | the contract's SLA | asking the worker again for the same attempt under the same idempotency key (the hire protocol answers with the stored result or the status, never a second run) |
//! | `delivered`, `verifying` | `verification_budget_s` | judging the stored deliverable bytes again (digest-checked; verification is deterministic) |
//! | `settling` | `facilitator.settle_timeout_ms` | asking the chain, then `/settle` again with the same payload only if the authorization is unused and still usable (see [`super::settle`]) |
//!
//! Elsewhere: `pending` through its leased poll job ([`super::pending`]), `accepted` and
//! `settlement_unknown` through the settlement sweep ([`super::sweep`]), and every held
//! authorization is settled or voided before `validBefore` by the deadline sweep
//! ([`super::deadlines`]). After a takeover the contract goes on as any execute would take it
//! (verified → settled, failed → voided), so the seeker finds the outcome on its next call.

use std::time::Duration;

use hiregate_contracts::state::ContractState;
use serde_json::json;

use super::{
    HireService,
    error::{ErrorKind, HireError},
    execute::{Ctx, Step, internal},
    judge::stored_deliverable,
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{ContractRecord, StoreError};

/// Contracts examined per state and round.
const BATCH: u32 = 100;

/// The working states a takeover resumes.
const RESUMABLE: [ContractState; 6] = [
    ContractState::Authorizing,
    ContractState::Paid,
    ContractState::Executing,
    ContractState::Delivered,
    ContractState::Verifying,
    ContractState::Settling,
];

impl HireService {
    /// One recovery round: take over and resume every contract left in a working state past
    /// its bound. Returns how many were resumed.
    pub async fn recover_stale(&self) -> Result<usize, StoreError> {
        let grace = self.inner.config.contracts.recovery_grace();
        let mut resumed = 0;
        for state in RESUMABLE {
            let untouched_since = self.now() - to_chrono(grace);
            let candidates = self
                .inner
                .store
                .stale_contracts(state.as_str(), untouched_since, BATCH)
                .await?;
            for contract in candidates {
                match self.resume(&contract, state).await {
                    Ok(true) => resumed += 1,
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(contract_id = %contract.contract_id, state = state.as_str(), code = %error.code, "stale contract not resumed");
                    }
                }
            }
        }
        Ok(resumed)
    }

    /// The longest a step out of `state` may take for this contract.
    fn step_bound(&self, ctx: &Ctx, state: ContractState) -> Duration {
        let settings = &self.inner.config;
        match state {
            ContractState::Executing => Duration::from_millis(ctx.terms.sla().max_latency_ms()),
            ContractState::Delivered | ContractState::Verifying => {
                settings.contracts.verification_budget()
            }
            // Both wait for a transaction within the settle timeout (the escrow operator's
            // receipt timeout is the same figure).
            ContractState::Settling | ContractState::Authorizing => {
                settings.facilitator.settle_timeout()
            }
            // An upfront contract is settled while `paid`, before its worker is called.
            ContractState::Paid if ctx.terms.settles_before_work() => {
                settings.facilitator.settle_timeout()
            }
            _ => Duration::ZERO,
        }
    }

    /// Take `contract` over if it is really stale and nobody beat us to it, then resume it.
    async fn resume(
        &self,
        contract: &ContractRecord,
        state: ContractState,
    ) -> Result<bool, HireError> {
        let lock = self.inner.locks.lock_of(contract.contract_id.as_str());
        // An execute (or another loop) of this instance is working on it: not stale.
        let Ok(_guard) = lock.try_lock_owned() else {
            return Ok(false);
        };
        let ctx = Ctx::of(
            contract,
            format!("recovery_{}", ulid::Ulid::new()),
            Actor::Gateway,
        )?;
        let bound = self.step_bound(&ctx, state);
        let stale_at =
            contract.updated_at + to_chrono(bound + self.inner.config.contracts.recovery_grace());
        if self.now() < stale_at {
            return Ok(false);
        }
        let event = self.event(
            &ctx,
            &Actor::Gateway,
            EventKind::RecoveryTakeover,
            json!({
                "state": state.as_str(),
                "untouched_since": contract.updated_at,
                "step_bound_ms": u64::try_from(bound.as_millis()).unwrap_or(u64::MAX),
            }),
        );
        if !self
            .inner
            .store
            .take_over_contract(ctx.contract_id.as_str(), state, contract.updated_at, &event)
            .await?
        {
            return Ok(false);
        }
        tracing::info!(contract_id = %ctx.contract_id, state = state.as_str(), "taking over a stale contract");
        let step = match state {
            ContractState::Executing => self.resume_attempt(&ctx).await?,
            ContractState::Delivered | ContractState::Verifying => {
                match stored_deliverable(&self.inner.store, ctx.contract_id.as_str()).await? {
                    Ok((attempt_id, deliverable, digest)) if state == ContractState::Delivered => {
                        self.verify_delivery(&ctx, &attempt_id, &deliverable, digest)
                            .await?
                    }
                    Ok((attempt_id, deliverable, digest)) => {
                        self.judge(&ctx, &attempt_id, &deliverable, digest).await?
                    }
                    Err(why) => {
                        return Err(internal(format!(
                            "a delivered contract cannot be judged again: {why}"
                        )));
                    }
                }
            }
            ContractState::Settling => self.settle(&ctx, ContractState::Settling).await?,
            ContractState::Authorizing => self.resume_authorization(&ctx).await?,
            _ => Step::Again,
        };
        if let Step::Again = step {
            // Carry on as an execute would: forward a paid contract, settle an accepted one.
            // What it answers (a refusal, work under way) is the execute's to show; only a
            // fault of the gateway means the contract was not resumed.
            if let Err(error) = self.drive(&ctx, None).await
                && error.kind == ErrorKind::Internal
            {
                return Err(error);
            }
        }
        Ok(true)
    }

    /// `executing` left behind: ask the worker again for the contract's latest attempt.
    async fn resume_attempt(&self, ctx: &Ctx) -> Result<Step, HireError> {
        let store = &self.inner.store;
        let attempt = store
            .list_attempts(ctx.contract_id.as_str())
            .await?
            .into_iter()
            .max_by_key(|a| a.attempt_no)
            .ok_or_else(|| internal("an executing contract has no attempt"))?;
        let payment = store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?
            .ok_or_else(|| internal("an executing contract has no payment"))?;
        let listing = store
            .get_worker(&ctx.worker_id)
            .await?
            .ok_or_else(|| internal("the contract's worker listing is gone"))?;
        self.run_attempt(
            ctx,
            &listing,
            &payment,
            &attempt.attempt_id,
            attempt.attempt_no,
        )
        .await
    }
}

fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}
