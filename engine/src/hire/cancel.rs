//! `POST /v1/contracts/{id}/cancel`: the seeker calls a contract off before delivery.
//!
//! `offered` / `paid` / `executing` / `pending` → `cancelled` with a compare-and-set (an execute,
//! a poll or a callback racing it either lands first — then the cancel meets the new state —
//! or finds `cancelled` and stops). A held authorization is marked `voided` and never settled.
//! The worker is told through its protocol adapter's `cancel`, best effort, and the outcome is
//! the `worker_cancel_requested` event. Superwire has `POST /execute/{run_id}/cancel`; the
//! hire and WattSwarm seeds have no cancel route, so workers of those protocols are told only
//! when their `/capabilities` declare `"cancel": true` (the worker-sdk does), with
//! `POST /tasks/{contract_id}/cancel`. Otherwise the event records `not_supported` and a late
//! result is simply refused (`contract_not_pending`).
//!
//! An upfront contract (paid before the work) is cancelled while `paid` only by first voiding
//! its payment before its settlement begins, a claim on the payment's row that the settlement's
//! own claim excludes: exactly one of the two wins, on both stores and across instances. Once
//! the settlement began, the cancel is a 409 `payment_settling` until the chain answers.
//!
//! Already `cancelled` → 200 again (idempotent). Delivered or later → 409
//! `contract_already_delivered`; `failed` / `expired` → 409 `contract_finished`.

use hiregate_contracts::state::{ContractEvent, ContractState};
use serde_json::json;

use super::{
    HireService,
    error::{ErrorCode, HireError},
    execute::{Ctx, internal},
    outcome::Cancellation,
};
use hiregate_contracts::id::PrincipalId;
use hiregate_store::states::{Actor, EventKind, PaymentState};

/// Compare-and-set rounds before giving up on a contract whose state keeps moving.
const MAX_ROUNDS: usize = 4;

impl HireService {
    /// Cancel `contract_id` for its seeker.
    pub async fn cancel_contract(
        &self,
        seeker: &PrincipalId,
        contract_id: &str,
        correlation_id: &str,
    ) -> Result<Cancellation, HireError> {
        let store = &self.inner.store;
        let not_found = || HireError::not_found("contract");
        let actor = Actor::Seeker(seeker.clone());
        for _ in 0..MAX_ROUNDS {
            let contract = store
                .get_contract(contract_id)
                .await?
                .ok_or_else(not_found)?;
            if &contract.seeker_id != seeker {
                return Err(not_found());
            }
            let state = contract.state;
            let ctx = Ctx::of(&contract, correlation_id.to_owned(), actor.clone())?;
            match state {
                ContractState::Cancelled => return self.cancelled_answer(&ctx).await,
                ContractState::Offered
                | ContractState::Paid
                | ContractState::Executing
                | ContractState::Pending => {
                    if state == ContractState::Paid && ctx.terms.settles_before_work() {
                        self.claim_upfront_payment(contract_id).await?;
                    }
                    let applied = self
                        .transition(
                            &ctx,
                            state,
                            &ContractEvent::SeekerCancelled,
                            &actor,
                            json!({"previous_state": state.as_str()}),
                            None,
                        )
                        .await?;
                    if !applied {
                        continue;
                    }
                    if let Some(payment) = store.payment_of_contract(contract_id).await? {
                        self.record_void(&ctx, &payment, "cancelled").await?;
                    }
                    if matches!(state, ContractState::Executing | ContractState::Pending) {
                        self.tell_worker_cancelled(&ctx).await?;
                    }
                    tracing::info!(
                        contract_id,
                        from = state.as_str(),
                        "contract cancelled by its seeker"
                    );
                    return self.cancelled_answer(&ctx).await;
                }
                ContractState::Failed | ContractState::Expired => {
                    return Err(HireError::conflict(
                        ErrorCode::ContractFinished,
                        format!(
                            "the contract already ended ({}); there is nothing to cancel",
                            state.as_str()
                        ),
                    ));
                }
                _ => {
                    return Err(HireError::conflict(
                        ErrorCode::ContractAlreadyDelivered,
                        format!(
                            "the worker already delivered (state {}); a delivered contract \
                             cannot be cancelled, dispute it instead",
                            state.as_str()
                        ),
                    ));
                }
            }
        }
        Err(internal(
            "the contract's state kept changing under this cancel",
        ))
    }

    /// Before a `paid` upfront contract is cancelled: its payment is voided while its
    /// settlement has not begun, so it never will be (the settlement's own claim on the payment
    /// then fails). Once the settlement began the cancel waits for its outcome: a 409 while the
    /// chain has not answered; once the money moved, the cancel goes ahead and the payment stays
    /// as the chain has it.
    async fn claim_upfront_payment(&self, contract_id: &str) -> Result<(), HireError> {
        let store = &self.inner.store;
        let Some(payment) = store.payment_of_contract(contract_id).await? else {
            return Ok(());
        };
        if store
            .void_unsent_payment(&payment.payment_id, self.now())
            .await?
        {
            return Ok(());
        }
        let current = store
            .payment_of_contract(contract_id)
            .await?
            .unwrap_or(payment);
        if matches!(
            current.state,
            PaymentState::Settling | PaymentState::SettlementUnknown
        ) {
            return Err(HireError::conflict(
                ErrorCode::PaymentSettling,
                "this contract is paid before the work and its payment is being settled; \
                 cancel again once it has settled (the payment then stays paid)",
            )
            .with_details(json!({
                "payment_id": current.payment_id,
                "payment_state": current.state.as_str(),
            })));
        }
        Ok(())
    }

    /// Completes a seeker's cancel whose upfront payment was voided but whose contract is still
    /// `paid` (the cancel stopped in between: a crash, or a cancel racing this execute).
    pub(super) async fn finish_cancel(&self, ctx: &Ctx) -> Result<(), HireError> {
        let applied = self
            .transition(
                ctx,
                ContractState::Paid,
                &ContractEvent::SeekerCancelled,
                &Actor::Gateway,
                json!({"previous_state": "paid", "reason": "the seeker's cancel voided the payment"}),
                None,
            )
            .await?;
        if applied {
            tracing::info!(contract_id = %ctx.contract_id, "a seeker's cancel of an upfront contract completed");
        }
        Ok(())
    }

    /// Forward the cancel through the worker's protocol, where it has one, and log the outcome.
    async fn tell_worker_cancelled(&self, ctx: &Ctx) -> Result<(), HireError> {
        let store = &self.inner.store;
        let Some(listing) = store.get_worker(&ctx.worker_id).await? else {
            return Ok(());
        };
        let Some(adapter) = self.inner.adapters.get(listing.protocol).cloned() else {
            return Ok(());
        };
        let outcome = adapter
            .cancel(
                &self.inner.outbound,
                &listing.endpoint,
                ctx.contract_id.as_str(),
                &ctx.contract_token,
            )
            .await;
        let details = match &outcome {
            crate::adapters::CancelOutcome::Failed(why) => {
                json!({"outcome": outcome.as_str(), "error": why, "protocol": listing.protocol.as_str()})
            }
            _ => json!({"outcome": outcome.as_str(), "protocol": listing.protocol.as_str()}),
        };
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &Actor::Gateway,
                    EventKind::WorkerCancelRequested,
                    details,
                ),
            )
            .await?;
        Ok(())
    }

    async fn cancelled_answer(&self, ctx: &Ctx) -> Result<Cancellation, HireError> {
        let payment = self
            .inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?;
        Ok(Cancellation {
            contract_id: ctx.contract_id.to_string(),
            payment: payment.map(|p| (p.payment_id, p.state)),
        })
    }
}
