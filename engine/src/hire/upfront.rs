//! The upfront flow (`payment_flow: upfront` in the signed terms): an `exact` payment settled
//! on chain while the contract is `paid`, before the worker is called.
//!
//! ```text
//! paid, payment `verified`
//!   ─► payment `settling` (settle_started_at: the intent, persisted before /settle)
//!   ─► /settle, and the chain decides (the table of `settle`):
//!        moved   → payment `settled` with its transaction, event `payment_settled_upfront`
//!                  → forwarded to the worker
//!        dead    → `authorization_expired` → `expired`, payment `settlement_failed`: nothing
//!                  moved, nobody worked
//!        unknown → payment `settlement_unknown`; the contract stays `paid` (answered 202)
//! ```
//!
//! A crash anywhere leaves the contract `paid`, which recovery resumes; a payment whose
//! settlement began is then asked of the chain first, and `/settle` is sent again only while
//! its authorization is unused and usable. The payment's nonce moves money once whoever sends
//! it, and the worker is called only once the chain shows the transfer: the work is neither
//! lost nor paid twice. The authorization sweep leaves a payment whose settlement began alone.
//!
//! After the work nothing more is sent: an acceptance settles the contract from the chain's
//! record of the upfront transfer ([`HireService::upfront_settlement_decision`]), a rejection
//! leaves the contract `rejected` with its payment `settled`, and a failure, an SLA breach or a
//! dispute decided "void" end the contract without voiding the payment (see
//! [`HireService::keeps_upfront_payment`]): the terms say so word for word.

use hiregate_contracts::state::{ContractEvent, ContractState};
use hiregate_store::states::{Actor, EventKind, PaymentState};
use hiregate_store::{PaymentRecord, SettlementOutcome};
use serde_json::json;

use super::{
    HireService,
    error::HireError,
    execute::{Ctx, Step},
    settle::{ChainView, Decision, recorded_transaction, settled_on_chain},
};

impl HireService {
    /// For a `paid` contract, before its worker is called: `None` when the work may start (the
    /// payment is not upfront, or it moved on chain), else the step answering the execute
    /// (the settlement's outcome is not known yet, or the payment can never move).
    pub(super) async fn settle_before_work(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Result<Option<Step>, HireError> {
        if !ctx.terms.settles_before_work() || payment.state == PaymentState::Settled {
            return Ok(None);
        }
        let store = &self.inner.store;
        let began_now = payment.settle_started_at.is_none()
            && store
                .begin_settlement(&payment.payment_id, self.now())
                .await?;
        if !began_now && payment.settle_started_at.is_none() {
            // The claim was lost: another instance began the settlement (the next round reads
            // its record), or a seeker's cancel voided the payment first and nothing may be sent.
            let current = store.payment_of_contract(ctx.contract_id.as_str()).await?;
            if current.is_some_and(|current| current.state == PaymentState::Voided) {
                self.finish_cancel(ctx).await?;
            }
            return Ok(Some(Step::Again));
        }
        let decision = if began_now {
            tracing::info!(contract_id = %ctx.contract_id, payment_id = %payment.payment_id, "upfront settlement sent before the work");
            let outcome = self.call_settle(ctx, payment).await;
            self.decide(ctx, payment, outcome).await
        } else {
            // Begun before (a crash, another instance, an unknown outcome): the chain first.
            match self
                .chain_view(ctx, payment, recorded_transaction(payment))
                .await
            {
                ChainView::Moved(transaction) => settled_on_chain(payment, transaction, "chain"),
                ChainView::Dead(reason) => Decision::Failed {
                    reason: reason.to_owned(),
                    response: None,
                },
                ChainView::Usable { .. } => {
                    let outcome = self.call_settle(ctx, payment).await;
                    self.decide(ctx, payment, outcome).await
                }
                ChainView::NotYetValid { valid_after } => Decision::Unknown {
                    reason: format!(
                        "the authorization is not valid before {valid_after} by the chain's clock"
                    ),
                    response: None,
                },
                ChainView::Anomaly(why) | ChainView::Unreachable(why) => Decision::Unknown {
                    reason: why,
                    response: None,
                },
            }
        };
        self.record_upfront_decision(ctx, payment, decision).await
    }

    /// Record what came of an upfront settlement on the payment (the contract stays `paid`
    /// unless the payment can never move).
    async fn record_upfront_decision(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        decision: Decision,
    ) -> Result<Option<Step>, HireError> {
        let store = &self.inner.store;
        match decision {
            Decision::Settled {
                transaction,
                response,
                decided_by,
                ..
            } => {
                let outcome = SettlementOutcome {
                    contract_state: ContractState::Paid,
                    payment_state: PaymentState::Settled,
                    transaction: Some(transaction.to_string()),
                    response: serde_json::to_value(response).ok(),
                    remainder_transaction: None,
                };
                store
                    .record_upfront_settlement(&payment.payment_id, &outcome, self.now())
                    .await?;
                store
                    .append_contract_event(
                        ctx.contract_id.as_str(),
                        &self.event(
                            ctx,
                            &Actor::Gateway,
                            EventKind::PaymentSettledUpfront,
                            json!({
                                "payment_id": payment.payment_id,
                                "transaction": transaction.to_string(),
                                "network": payment.network,
                                "payer": payment.payer.to_checksum(None),
                                "amount": payment.amount,
                                "decided_by": decided_by,
                            }),
                        ),
                    )
                    .await?;
                tracing::info!(contract_id = %ctx.contract_id, %transaction, "paid upfront; the worker is called");
                Ok(None)
            }
            Decision::Failed { reason, response } => {
                let outcome = SettlementOutcome {
                    contract_state: ContractState::Expired,
                    payment_state: PaymentState::SettlementFailed,
                    transaction: None,
                    response: response.and_then(|r| serde_json::to_value(r).ok()),
                    remainder_transaction: None,
                };
                store
                    .record_upfront_settlement(&payment.payment_id, &outcome, self.now())
                    .await?;
                // Nothing moved and nothing can: the contract ends before any work.
                self.transition(
                    ctx,
                    ContractState::Paid,
                    &ContractEvent::AuthorizationExpired,
                    &Actor::Gateway,
                    json!({
                        "payment_id": payment.payment_id,
                        "reason": format!("upfront settlement failed: {reason}"),
                    }),
                    None,
                )
                .await?;
                tracing::warn!(contract_id = %ctx.contract_id, %reason, "upfront settlement failed; the worker is not called");
                Ok(Some(Step::Again))
            }
            Decision::Unknown { reason, response } => {
                let outcome = SettlementOutcome {
                    contract_state: ContractState::Paid,
                    payment_state: PaymentState::SettlementUnknown,
                    transaction: response
                        .as_ref()
                        .map(|r| r.transaction.clone())
                        .filter(|t| !t.is_empty()),
                    response: response.and_then(|r| serde_json::to_value(r).ok()),
                    remainder_transaction: None,
                };
                store
                    .record_upfront_settlement(&payment.payment_id, &outcome, self.now())
                    .await?;
                tracing::warn!(contract_id = %ctx.contract_id, %reason, "upfront settlement outcome unknown; the worker waits");
                Ok(Some(Step::Done(Ok(
                    self.in_progress(ctx, ContractState::Paid)
                ))))
            }
            Decision::Reclaimed { .. } => Err(super::execute::internal(
                "an upfront payment is never escrowed",
            )),
        }
    }

    /// The settlement of an accepted upfront contract: nothing is sent, the chain's record of
    /// the transfer made before the work decides.
    pub(super) async fn upfront_settlement_decision(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Decision {
        match self
            .chain_view(ctx, payment, recorded_transaction(payment))
            .await
        {
            ChainView::Moved(transaction) => {
                settled_on_chain(payment, transaction, "settled_before_work")
            }
            ChainView::Anomaly(why) | ChainView::Unreachable(why) => Decision::Unknown {
                reason: format!("upfront payment: {why}"),
                response: None,
            },
            // Never settled before the work: nothing is sent after it either.
            _ => Decision::Unknown {
                reason: "an upfront payment the chain does not show as moved".to_owned(),
                response: None,
            },
        }
    }

    /// Whether `payment` of an upfront contract already moved (or may have): a void, a
    /// failure or a cancellation then leaves it as it is, since nothing can return it.
    pub(super) async fn keeps_upfront_payment(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Result<bool, HireError> {
        if !ctx.terms.settles_before_work() {
            return Ok(false);
        }
        // The record the caller holds may predate the settlement: read it again.
        let current = self
            .inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?;
        Ok(current
            .as_ref()
            .unwrap_or(payment)
            .settle_started_at
            .is_some())
    }
}
