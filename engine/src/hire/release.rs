//! Escrowed money back to the payer: the operator's `void` when a contract ends without paying,
//! the payer's own `reclaim` noticed, and an arbiter's refund after a capture.
//!
//! | what | when | intent stored first | decided by |
//! |---|---|---|---|
//! | `void` | rejected (after the operator's dispute window), failed, cancelled, expired, a dispute decided `void`, a capture that can no longer happen | payment `voiding` | the escrow's events: `voided` (or `reclaimed` if the payer was first) |
//! | reclaim | the payer's own call after the capture deadline | — (the chain moved the money) | `PaymentReclaimed`: the contract ends `voided` by actor `payer` |
//! | refund | an arbiter decides for the seeker after a capture, before the refund deadline | payment `refunding` with the amount | `PaymentRefunded` of that amount (all or part of what was captured): `settled → refunded` |
//!
//! Refunds are paid from the gateway operator's own wallet through the escrow's operator refund
//! collector (the worker is never clawed back): the operator approves the collector for the
//! amount before each refund, and a wallet too poor to pay is a 409 `refund_not_funded` with
//! nothing changed. The void of a contract in a terminal state, a crash between intent and
//! void, or a refund whose answer was lost are all resumed by [`HireService::sweep_escrow`].
//! A plain (`exact`) payment left `verified` under such a contract by a crash is released by
//! [`HireService::release_abandoned_payments`].

use alloy::primitives::U256;
use hiregate_contracts::state::{ContractEvent, ContractState};
use serde_json::json;

use hiregate_payments::{EscrowError, Reason, auth_capture::Refusal};

use super::{
    HireService,
    error::{ErrorCode, HireError},
    escrow::{EscrowView, EscrowedPayment},
    execute::{Ctx, internal},
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{NewContractEvent, PaymentRecord, StoreError, states::PaymentState};

/// Payments handled per sweep round.
const BATCH: u32 = 50;

impl HireService {
    /// Return what the escrow holds for `payment` to its payer (the contract has already moved
    /// to a state that never pays). Idempotent: the events say whether it was voided (or
    /// reclaimed) already; what is not confirmed stays `voiding` for the sweep.
    pub(super) async fn release_escrow(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        reason: &str,
    ) -> Result<(), HireError> {
        let store = &self.inner.store;
        store
            .set_payment_release(&payment.payment_id, PaymentState::Voiding, None, self.now())
            .await?;
        let escrowed = match self.escrowed_payment(ctx, payment) {
            Ok(escrowed) => escrowed,
            Err(why) => {
                tracing::error!(contract_id = %ctx.contract_id, reason = %why, "escrowed payment cannot be voided");
                return Ok(());
            }
        };
        let view = match self.escrow_view(&escrowed).await {
            Ok(EscrowView::Held { .. }) => {
                let sent = escrowed
                    .operator
                    .escrow()
                    .void(&escrowed.payment.info)
                    .await;
                match &sent {
                    Ok(receipt) => {
                        tracing::info!(contract_id = %ctx.contract_id, transaction = %receipt.tx_hash, gas_used = receipt.gas_used, "escrow voided");
                    }
                    Err(error) => {
                        tracing::warn!(contract_id = %ctx.contract_id, error = %error, "escrow void not confirmed");
                    }
                }
                self.escrow_view(&escrowed).await
            }
            other => other,
        };
        match view {
            Ok(view) => {
                self.record_release(ctx, payment, &escrowed, view, reason)
                    .await
            }
            Err(why) => {
                tracing::warn!(contract_id = %ctx.contract_id, reason = %why, "escrow state unknown; the void is retried");
                Ok(())
            }
        }
    }

    async fn record_release(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: &EscrowedPayment<'_>,
        view: EscrowView,
        reason: &str,
    ) -> Result<(), HireError> {
        let (state, transaction, kind, actor) = match view {
            EscrowView::Voided { transaction } => (
                PaymentState::Voided,
                transaction,
                EventKind::PaymentVoided,
                Actor::Gateway,
            ),
            EscrowView::Reclaimed { transaction } => (
                PaymentState::Reclaimed,
                transaction,
                EventKind::PaymentReclaimed,
                Actor::Payer,
            ),
            // Nothing was ever locked: nothing to return.
            EscrowView::NotAuthorized { .. } => (
                PaymentState::Voided,
                None,
                EventKind::PaymentVoided,
                Actor::Gateway,
            ),
            EscrowView::Held { .. } => return Ok(()),
            EscrowView::Captured { .. } => {
                // Capture happens only from `settling`; a contract that never pays cannot have
                // been captured. Never void (or record) around it: an operator must look.
                tracing::error!(contract_id = %ctx.contract_id, "escrow shows a capture for a contract that never pays");
                return Ok(());
            }
        };
        let transaction = transaction.map(|tx| tx.to_string());
        let store = &self.inner.store;
        if !store
            .set_payment_release(
                &payment.payment_id,
                state,
                transaction.as_deref(),
                self.now(),
            )
            .await?
        {
            // Another instance recorded the same outcome first.
            return Ok(());
        }
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &actor,
                    kind,
                    json!({
                        "payment_id": payment.payment_id,
                        "reason": reason,
                        "transaction": transaction,
                        "amount": payment.amount,
                        "payment_hash": escrowed.hash().to_string(),
                    }),
                ),
            )
            .await?;
        Ok(())
    }

    /// An escrowed rejection whose dispute window is over (or that had none): `rejected →
    /// voided`, and the escrow's void.
    pub(super) async fn void_rejected(&self, ctx: &Ctx) -> Result<(), HireError> {
        let Some(payment) = self
            .inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?
        else {
            return Ok(());
        };
        if self
            .transition(
                ctx,
                ContractState::Rejected,
                &ContractEvent::VoidRecorded,
                &Actor::Gateway,
                json!({"payment_id": payment.payment_id, "reason": "rejected"}),
                None,
            )
            .await?
        {
            self.record_void(ctx, &payment, "rejected").await?;
        }
        Ok(())
    }

    /// The payer reclaimed the escrowed money (after the capture deadline): the contract ends
    /// `voided` by actor `payer`, whatever it was doing.
    pub(super) async fn record_reclaim(
        &self,
        ctx: &Ctx,
        from: ContractState,
        payment: &PaymentRecord,
        transaction: Option<alloy::primitives::TxHash>,
    ) -> Result<(), HireError> {
        let transaction = transaction.map(|tx| tx.to_string());
        if from.holds_authorization() {
            self.transition(
                ctx,
                from,
                &ContractEvent::PaymentReclaimed,
                &Actor::Payer,
                json!({"payment_id": payment.payment_id, "transaction": transaction}),
                None,
            )
            .await?;
        }
        self.inner
            .store
            .set_payment_release(
                &payment.payment_id,
                PaymentState::Reclaimed,
                transaction.as_deref(),
                self.now(),
            )
            .await?;
        tracing::info!(contract_id = %ctx.contract_id, "payer reclaimed the escrowed payment");
        Ok(())
    }

    /// `POST /v1/contracts/{id}/refund` (arbiter): after an escrowed capture and before the
    /// refund deadline, `amount` of what was captured (all of it when `None`) goes back to the
    /// payer from the operator's wallet; `settled → refunded`. One refund per contract.
    pub async fn refund(
        &self,
        contract_id: &str,
        reason: &str,
        amount: Option<U256>,
        correlation_id: String,
    ) -> Result<serde_json::Value, HireError> {
        let store = &self.inner.store;
        let lock = self.inner.locks.lock_of(contract_id);
        let _guard = lock.lock_owned().await;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(HireError::not_found("contract"))?;
        let ctx = Ctx::of(&contract, correlation_id, Actor::Arbiter)
            .map_err(|_| HireError::internal(anyhow::anyhow!("stored contract does not parse")))?;
        let Some(escrow_terms) = ctx.terms.escrow() else {
            return Err(HireError::conflict(
                ErrorCode::RefundNotPossible,
                "only escrowed (auth-capture) contracts can be refunded".to_owned(),
            )
            .with_details(json!({"scheme": "exact"})));
        };
        let payment = store
            .payment_of_contract(contract_id)
            .await?
            .ok_or_else(|| HireError::internal(anyhow::anyhow!("settled contract, no payment")))?;
        if contract.state == ContractState::Refunded {
            return Ok(json!({
                "contract_id": contract_id,
                "state": contract.state,
                "refund_transaction": payment.release_tx,
                "amount": payment.refunded_amount.as_deref().unwrap_or(&payment.amount),
            }));
        }
        if contract.state != ContractState::Settled {
            return Err(HireError::conflict(
                ErrorCode::RefundNotPossible,
                "only a settled (captured) contract can be refunded; void applies \
                          before"
                    .to_owned(),
            )
            .with_details(json!({"state": contract.state})));
        }
        // The escrow judges the deadline by its block time, which may run ahead of ours.
        let refund_deadline = escrow_terms.refund_deadline_unix();
        let now = self
            .chain_now(&ctx)
            .await
            .map_err(|_| chain_unavailable())?;
        if now.latest() >= refund_deadline {
            return Err(refund_window_closed(refund_deadline));
        }
        let captured = captured_amount(&payment)?;
        let amount = amount.unwrap_or(captured);
        if amount.is_zero() || amount > captured {
            return Err(HireError::validation(
                "amount".to_owned(),
                format!("a refund is of 1 to {captured} atomic units (what was captured)"),
            ));
        }
        let escrowed = self
            .escrowed_payment(&ctx, &payment)
            .map_err(|why| HireError::internal(anyhow::anyhow!(why)))?;
        self.send_refund(&ctx, &payment, &escrowed, refund_deadline, amount)
            .await?;
        match self
            .finish_refund(&ctx, &payment, &escrowed, reason, amount)
            .await?
        {
            Some(transaction) => Ok(json!({
                "contract_id": contract_id,
                "state": ContractState::Refunded.as_str(),
                "refund_transaction": transaction,
                "amount": amount.to_string(),
            })),
            None => Err(HireError::unavailable(
                ErrorCode::RefundPending,
                "the refund was sent but is not confirmed on chain yet; it is \
                          reconciled in the background"
                    .to_owned(),
                5,
            )),
        }
    }

    /// Simulate the refund of `amount`, then approve and send it, unless the events show it
    /// already happened. Nothing is stored or sent for a refund the escrow would refuse.
    async fn send_refund(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: &EscrowedPayment<'_>,
        refund_deadline: u64,
        amount: U256,
    ) -> Result<(), HireError> {
        match self.escrow_view(escrowed).await {
            Ok(EscrowView::Captured { refunded, .. }) if refunded >= amount => return Ok(()),
            Ok(EscrowView::Captured { .. }) => {}
            Ok(other) => {
                tracing::error!(contract_id = %ctx.contract_id, view = ?other, "settled contract whose escrow shows no capture");
                return Err(HireError::internal(anyhow::anyhow!(
                    "the escrow shows no capture for a settled contract"
                )));
            }
            Err(why) => {
                tracing::warn!(contract_id = %ctx.contract_id, reason = %why, "escrow unreadable; refund not sent");
                return Err(chain_unavailable());
            }
        }
        let (_turn, operator) = escrowed.operator.refund_turn().await;
        let amount_text = amount.to_string();
        let refused = |refusal: &Refusal| {
            refund_refusal(refusal, operator.operator(), &amount_text, refund_deadline)
        };
        // The approval below is a transaction: it is sent only for a refund that would pass.
        match operator
            .simulate_refund(&escrowed.payment.info, amount)
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(refusal)) => {
                tracing::info!(contract_id = %ctx.contract_id, reason = %refusal.reason, "the escrow would refuse the refund; nothing sent");
                return Err(refused(&refusal));
            }
            Err(error) => {
                tracing::warn!(contract_id = %ctx.contract_id, error = %error, "refund not simulated; nothing sent");
                return Err(chain_unavailable());
            }
        }
        self.inner
            .store
            .begin_refund(&payment.payment_id, &amount_text, self.now())
            .await?;
        let back_to_settled = || async {
            // Nothing moved: settled as it was.
            self.inner
                .store
                .set_payment_release(&payment.payment_id, PaymentState::Settled, None, self.now())
                .await
        };
        match operator
            .ensure_refund_allowance(escrowed.payment.info.token, amount)
            .await
        {
            Ok(_) => {}
            Err(EscrowError::Refused(refusal)) => {
                back_to_settled().await?;
                return Err(refused(&refusal));
            }
            Err(error) => {
                tracing::warn!(contract_id = %ctx.contract_id, error = %error, "refund allowance not confirmed");
                back_to_settled().await?;
                return Err(chain_unavailable());
            }
        }
        let collector = operator.addresses().operator_refund_collector;
        match operator
            .refund(
                &escrowed.payment.info,
                amount,
                collector,
                alloy::primitives::Bytes::new(),
            )
            .await
        {
            Ok(receipt) => {
                tracing::info!(contract_id = %ctx.contract_id, transaction = %receipt.tx_hash, "escrow refunded");
                Ok(())
            }
            Err(EscrowError::Refused(refusal)) => {
                back_to_settled().await?;
                Err(refused(&refusal))
            }
            Err(error) => {
                tracing::warn!(contract_id = %ctx.contract_id, error = %error, "refund outcome unknown");
                Ok(())
            }
        }
    }

    /// Record a refund of `amount` the events show: `settled → refunded`, payment
    /// `refunded`. `None` when the chain does not show it (yet).
    async fn finish_refund(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: &EscrowedPayment<'_>,
        reason: &str,
        amount: U256,
    ) -> Result<Option<String>, HireError> {
        let Ok(EscrowView::Captured {
            refunded,
            refund_transaction,
            ..
        }) = self.escrow_view(escrowed).await
        else {
            return Ok(None);
        };
        if refunded < amount {
            return Ok(None);
        }
        let transaction = refund_transaction.map(|tx| tx.to_string());
        self.transition(
            ctx,
            ContractState::Settled,
            &ContractEvent::RefundIssued,
            &Actor::Arbiter,
            json!({
                "payment_id": payment.payment_id,
                "transaction": transaction,
                "amount": amount.to_string(),
                "reason": reason,
                "funded_by": "operator",
            }),
            None,
        )
        .await
        .map_err(|_| HireError::internal(anyhow::anyhow!("refund transition failed")))?;
        self.inner
            .store
            .set_payment_release(
                &payment.payment_id,
                PaymentState::Refunded,
                transaction.as_deref(),
                self.now(),
            )
            .await?;
        Ok(Some(transaction.unwrap_or_default()))
    }

    /// One round of escrow reconciliation: voids whose intent is stored but not confirmed
    /// (or never stored before a crash), refunds whose answer was lost, and reclaims by payers
    /// after the capture deadline. Returns how many payments it looked at.
    pub async fn sweep_escrow(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let mut looked = 0;
        for payment in store
            .escrow_payments_to_release(self.past_the_grace(), BATCH)
            .await?
        {
            looked += 1;
            if let Err(error) = self.resume_release(&payment).await {
                tracing::warn!(payment_id = %payment.payment_id, code = %error.code, "escrow release not resumed");
            }
        }
        for payment in store
            // Now as the escrow judges deadlines: the chains' block time, or the local clock
            // when it is later.
            .escrow_payments_past_deadline(self.inner.assets.latest_now().await, BATCH)
            .await?
        {
            looked += 1;
            if let Err(error) = self.notice_reclaim(&payment).await {
                tracing::warn!(payment_id = %payment.payment_id, code = %error.code, "reclaim check failed");
            }
        }
        Ok(looked)
    }

    /// Release the plain payments an instance left `verified` when it died between a
    /// contract's move into a state that never pays (`failed`, `cancelled`, `voided`,
    /// `expired`) and the payment's release, once the contract has not moved for
    /// `contracts.recovery_grace_ms`: the payment becomes `voided` with its `payment_voided`
    /// event, as the path that died would have left it. No money moves either way (the
    /// authorization is never sent and lapses at `validBefore`). Returns how many it released.
    pub async fn release_abandoned_payments(&self) -> Result<usize, StoreError> {
        let store = &self.inner.store;
        let mut released = 0;
        for payment in store
            .unreleased_plain_payments(self.past_the_grace(), BATCH)
            .await?
        {
            let event = NewContractEvent {
                at: self.now(),
                actor: Actor::Gateway,
                correlation_id: format!("recovery_{}", ulid::Ulid::new()),
                kind: EventKind::PaymentVoided,
                details: json!({
                    "payment_id": payment.payment_id,
                    "reason": "released_after_crash",
                }),
            };
            if store
                .release_verified_payment(payment.contract_id.as_str(), &payment.payment_id, &event)
                .await?
            {
                tracing::warn!(contract_id = %payment.contract_id, payment_id = %payment.payment_id, "a payment left held by a crash was released");
                released += 1;
            }
        }
        Ok(released)
    }

    /// Now less `contracts.recovery_grace_ms`: what the sweeps leave alone was touched since,
    /// and may still be finished by the path that touched it.
    fn past_the_grace(&self) -> chrono::DateTime<chrono::Utc> {
        let grace = chrono::Duration::from_std(self.inner.config.contracts.recovery_grace())
            .unwrap_or(chrono::Duration::zero());
        self.now() - grace
    }

    async fn locked_ctx(
        &self,
        payment: &PaymentRecord,
        prefix: &str,
    ) -> Result<Option<(Ctx, ContractState)>, HireError> {
        let Some(contract) = self
            .inner
            .store
            .get_contract(payment.contract_id.as_str())
            .await?
        else {
            return Ok(None);
        };
        let state = contract.state;
        let ctx = Ctx::of(
            &contract,
            format!("{prefix}_{}", ulid::Ulid::new()),
            Actor::Gateway,
        )?;
        Ok(Some((ctx, state)))
    }

    async fn resume_release(&self, payment: &PaymentRecord) -> Result<(), HireError> {
        let lock = self.inner.locks.lock_of(payment.contract_id.as_str());
        let Ok(_guard) = lock.try_lock_owned() else {
            return Ok(());
        };
        let Some((ctx, state)) = self.locked_ctx(payment, "escrow").await? else {
            return Ok(());
        };
        if payment.state == PaymentState::Refunding {
            let escrowed = self.escrowed_payment(&ctx, payment).map_err(internal)?;
            let amount = match payment.refunded_amount.as_deref() {
                Some(refunded) => {
                    U256::from_str_radix(refunded, 10).map_err(|e| internal(e.to_string()))?
                }
                None => captured_amount(payment)?,
            };
            // Not on chain yet: it stays `refunding` (a transaction may still be mined); the
            // arbiter's next call resends only what the events do not show.
            self.finish_refund(&ctx, payment, &escrowed, "resumed", amount)
                .await?;
            return Ok(());
        }
        if state.holds_authorization() {
            // Still working (e.g. `rejected` inside the operator's dispute window): not ours.
            return Ok(());
        }
        self.release_escrow(&ctx, payment, "resumed").await
    }

    async fn notice_reclaim(&self, payment: &PaymentRecord) -> Result<(), HireError> {
        let lock = self.inner.locks.lock_of(payment.contract_id.as_str());
        let Ok(_guard) = lock.try_lock_owned() else {
            return Ok(());
        };
        let Some((ctx, state)) = self.locked_ctx(payment, "reclaim").await? else {
            return Ok(());
        };
        let escrowed = self.escrowed_payment(&ctx, payment).map_err(internal)?;
        match self.escrow_view(&escrowed).await {
            Ok(EscrowView::Reclaimed { transaction }) => {
                self.record_reclaim(&ctx, state, payment, transaction).await
            }
            Ok(_) => Ok(()),
            Err(why) => {
                tracing::warn!(contract_id = %ctx.contract_id, reason = %why, "reclaim check: chain unavailable");
                Ok(())
            }
        }
    }
}

fn chain_unavailable() -> HireError {
    HireError::unavailable(
        ErrorCode::ChainUnavailable,
        "the chain cannot be asked now; nothing was sent".to_owned(),
        5,
    )
}

fn refund_window_closed(refund_deadline: u64) -> HireError {
    HireError::conflict(
        ErrorCode::RefundWindowClosed,
        "the escrow's refund deadline has passed by the chain's clock".to_owned(),
    )
    .with_details(json!({"refund_deadline": refund_deadline}))
}

/// The answer to a refund the escrow refused (in simulation, or its approval's), by the
/// escrow's reason: a closed window and an operator wallet that cannot fund it have their own
/// codes; every other revert is a 409 named by its stable escrow reason (e.g.
/// `refund_exceeds_capture`, `invalid_capture_authorizer`, `invalid_auth_capture_extra` for an
/// escrow address without code). Nothing was refunded in any case.
/// What `payment` captured (its stored amount: the price, or a metered contract's verified
/// amount).
fn captured_amount(payment: &PaymentRecord) -> Result<U256, HireError> {
    U256::from_str_radix(&payment.amount, 10).map_err(|_| {
        internal(format!(
            "stored amount of {} is not a number",
            payment.payment_id
        ))
    })
}

fn refund_refusal(
    refusal: &Refusal,
    operator: alloy::primitives::Address,
    amount: &str,
    refund_deadline: u64,
) -> HireError {
    let message = refusal.message.clone();
    match refusal.reason {
        Reason::RefundDeadlineExpired => refund_window_closed(refund_deadline),
        Reason::RefundNotFunded | Reason::InsufficientBalance => HireError::conflict(
            ErrorCode::RefundNotFunded,
            "the operator's wallet cannot fund the refund; nothing was refunded".to_owned(),
        )
        .with_details(json!({
            "operator": operator.to_checksum(None),
            "amount": amount,
            "escrow_message": message,
        })),
        ref reason => HireError::conflict(
            escrow_code(reason),
            format!("the escrow refuses the refund ({reason}); nothing was refunded"),
        )
        .with_details(json!({"reason": reason.as_str(), "escrow_message": message})),
    }
}

/// The escrow's stable reason as an error code (`refund_refused` for one outside the escrow's
/// vocabulary).
fn escrow_code(reason: &Reason) -> ErrorCode {
    match reason {
        Reason::RefundExceedsCapture => ErrorCode::RefundExceedsCapture,
        Reason::InvalidCaptureAuthorizer => ErrorCode::InvalidCaptureAuthorizer,
        Reason::InvalidCollector => ErrorCode::InvalidCollector,
        Reason::TokenCollectionFailed => ErrorCode::TokenCollectionFailed,
        Reason::InvalidAuthCaptureExtra => ErrorCode::InvalidAuthCaptureExtra,
        Reason::ZeroAuthorization => ErrorCode::ZeroAuthorization,
        Reason::AmountOverflow => ErrorCode::AmountOverflow,
        _ => ErrorCode::RefundRefused,
    }
}
