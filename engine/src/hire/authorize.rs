//! `offered` → `authorizing` → `paid` for escrowed (`auth-capture`) contracts: the money is
//! locked in the escrow before any work starts.
//!
//! ```text
//! PAYMENT-SIGNATURE ─► the spec's checks against the stored offer, whether the worker can work
//!   now (see `hireable`), then on chain (signature, escrow state, payer balance, a simulation
//!   of `authorize` from the operator)
//!   ─► payment row (`authorizing`, valid_before = the capture deadline) + offered→authorizing,
//!      one transaction: the intent is persisted before anything is sent
//!   ─► the gateway, as the escrow's operator, sends `authorize`
//!   ─► the escrow's events decide: locked → paid (`authorize_tx`) │ never locked and refused or
//!      past the payer's `validBefore` → back to offered (402, nothing held) │ not known yet →
//!      stays `authorizing` (202); crash recovery asks the chain again after the step's bound
//! ```
//!
//! An escrow authorizes a `PaymentInfo` once, ever: a second `authorize` of the same payment
//! (a retry, another instance) is refused by the chain, so the events, not the call's answer,
//! say whether the money is locked.

use alloy::primitives::U256;
use hiregate_contracts::id::PaymentId;
use hiregate_contracts::state::ContractState;
use hiregate_payments::{
    Reason,
    auth_capture::{escrow::EscrowError, precheck, verify::verify_onchain},
};
use serde_json::json;

use super::{
    HireService,
    error::{ErrorCode, HireError},
    escrow::{EscrowView, EscrowedPayment},
    execute::{Ctx, Step, internal},
    submission::{EscrowedSubmission, StoredKey, facilitator_unavailable, to_i64},
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{
    AuthorizationOutcome, NewPayment, PaymentRecord, Transition, states::PaymentState,
};

impl HireService {
    /// An `auth-capture` payment for an `offered` contract: checked, stored as `authorizing`,
    /// then authorized on chain.
    pub(super) async fn accept_escrowed_payment(
        &self,
        ctx: &Ctx,
        submission: EscrowedSubmission<'_>,
    ) -> Result<Step, HireError> {
        let inner = &self.inner;
        let requirements = ctx
            .offer
            .requirements()
            .ok_or_else(|| internal("stored offer has no requirements"))?;
        let chain_id = ctx.terms.price().chain_id();
        let Some(operator) = inner.escrow.get(chain_id) else {
            return Err(HireError::unavailable(
                ErrorCode::EscrowNotAvailable,
                format!(
                    "this gateway has no escrow operator for chain {chain_id} any more; nothing \
                     was charged"
                ),
                60,
            ));
        };
        // The spec's times (validAfter, validBefore, captureDeadline) by the chain's clock.
        let now = match self.chain_now(ctx).await {
            Ok(now) => now,
            Err(unavailable) => return Ok(Step::Done(Err(unavailable))),
        };
        let payment = match precheck(
            submission.payload,
            requirements,
            operator.escrow().addresses(),
            now,
        ) {
            Ok(payment) => payment,
            Err(refusal) => {
                return Ok(Step::Done(Ok(Self::refuse_payment(
                    ctx,
                    refusal.reason.as_str(),
                    format!("the payment was refused: {}", refusal.reason.as_str()),
                    json!({"message": refusal.message}),
                ))));
            }
        };
        let key = StoredKey::of(&payment.key());
        if let Some(existing) = inner
            .store
            .find_payment_by_authorization(&key.network, &key.asset, &key.payer, &key.nonce)
            .await?
        {
            return self.known_payment(ctx, &existing, &submission.payload_hash, false);
        }
        // Before anything is simulated or locked on chain: a worker that cannot work now.
        if let Some(refusal) = self.worker_refusal(ctx).await? {
            return Ok(Step::Done(Err(refusal)));
        }
        let Some((provider, _)) = inner.assets.chain(chain_id) else {
            return Ok(Step::Done(Err(facilitator_unavailable(&format!(
                "no node is configured for chain {chain_id}"
            )))));
        };
        // The simulation runs `authorize` as the operator: what the gateway itself will send.
        match verify_onchain(&provider, operator.escrow().operator(), &payment).await {
            Ok(Ok(())) => {}
            Ok(Err(refusal)) => {
                return Ok(Step::Done(Ok(Self::refuse_payment(
                    ctx,
                    refusal.reason.as_str(),
                    format!("the payment was refused: {}", refusal.reason.as_str()),
                    json!({"message": refusal.message}),
                ))));
            }
            Err(error) => {
                tracing::warn!(contract_id = %ctx.contract_id, error = %error, "escrowed payment not verifiable now");
                return Ok(Step::Done(Err(facilitator_unavailable(
                    "the chain cannot be asked",
                ))));
            }
        }
        let stored = NewPayment {
            payment_id: PaymentId::generate(),
            contract_id: ctx.contract_id.clone(),
            network: key.network,
            asset: key.asset,
            payer: key.payer,
            nonce: key.nonce.clone(),
            amount: payment.payload.authorization.value.to_string(),
            valid_after: to_i64(payment.payload.authorization.valid_after.get()),
            // Once locked, what matters is when the escrow stops allowing a capture.
            valid_before: to_i64(U256::from(payment.extra.capture_deadline)),
            payload: submission.payload_json,
            payload_hash: submission.payload_hash.clone(),
            payment_identifier: submission
                .identifier
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            state: PaymentState::Authorizing,
            created_at: self.now(),
        };
        let event = self.event(
            ctx,
            &ctx.actor,
            EventKind::AuthorizationSent,
            json!({
                "payment_id": stored.payment_id,
                "scheme": "auth-capture",
                "network": stored.network,
                "asset": stored.asset.to_checksum(None),
                "payer": stored.payer.to_checksum(None),
                "amount": stored.amount,
                "payment_hash": payment.payment_hash().to_string(),
                "capture_deadline": payment.extra.capture_deadline,
                "payment_identifier": stored.payment_identifier,
            }),
        );
        if let Some(step) = self
            .store_payment(
                ctx,
                &stored,
                ContractState::Authorizing,
                &event,
                submission.identifier.as_ref(),
                &key,
            )
            .await?
        {
            return Ok(step);
        }
        let record = inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?
            .ok_or_else(|| internal("the stored escrowed payment is gone"))?;
        let escrowed = EscrowedPayment { operator, payment };
        self.authorize(ctx, &record, &escrowed).await
    }

    /// Send `authorize` for a contract in `authorizing` (first time, or resumed after a crash)
    /// and record what the escrow says.
    pub(super) async fn authorize(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: &EscrowedPayment<'_>,
    ) -> Result<Step, HireError> {
        // The chain first: a retry must not send what is already mined.
        match self.escrow_view(escrowed).await {
            Ok(EscrowView::NotAuthorized { chain_time }) => {
                let valid_before: u64 = escrowed
                    .payment
                    .payload
                    .authorization
                    .valid_before
                    .get()
                    .try_into()
                    .unwrap_or(u64::MAX);
                if chain_time >= valid_before {
                    return self
                        .authorization_refused(ctx, payment, "authorization_expired")
                        .await;
                }
            }
            Ok(EscrowView::Held { authorized_in, .. }) => {
                return self.authorized(ctx, payment, authorized_in, None).await;
            }
            Ok(other) => {
                // Locked and already released or captured while this contract never became
                // `paid`: not something the gateway does; leave it for an operator to look at.
                tracing::error!(contract_id = %ctx.contract_id, view = ?other, "escrowed payment moved on chain before the contract was paid");
                return Ok(Step::Done(Ok(
                    self.in_progress(ctx, ContractState::Authorizing)
                )));
            }
            Err(why) => {
                tracing::warn!(contract_id = %ctx.contract_id, reason = %why, "escrow state unknown; authorize waits");
                return Ok(Step::Done(Ok(
                    self.in_progress(ctx, ContractState::Authorizing)
                )));
            }
        }
        let info = &escrowed.payment.info;
        let operator = escrowed.operator.escrow();
        let sent = operator
            .authorize(
                info,
                escrowed.payment.payload.authorization.value.get(),
                operator.addresses().erc3009_collector,
                escrowed.payment.payload.signature.clone(),
            )
            .await;
        match sent {
            Ok(receipt) => {
                self.authorized(ctx, payment, Some(receipt.tx_hash), Some(receipt.gas_used))
                    .await
            }
            Err(error) => {
                // "Already collected" names an `authorize` of this very payment, and only the
                // gateway can send one: its own earlier one, still in the mempool (the
                // simulation sees pending state; a resumed instance meets it after a crash) or
                // mined after the events were read. Taking it for a refusal would send the
                // contract back to `offered` while that transaction locks the money; the events
                // decide on a later round instead.
                let refused = match &error {
                    EscrowError::Refused(refusal) => {
                        refusal.reason != Reason::PaymentAlreadyCollected
                    }
                    EscrowError::Reverted { .. } => true,
                    EscrowError::Pending(_) | EscrowError::Rpc(_) => false,
                };
                let reason = error
                    .reason()
                    .map_or("unknown", |reason| reason.as_str())
                    .to_owned();
                // Whatever the call said, the events decide (another instance may have won).
                match self.escrow_view(escrowed).await {
                    Ok(EscrowView::Held { authorized_in, .. }) => {
                        self.authorized(ctx, payment, authorized_in, None).await
                    }
                    Ok(EscrowView::NotAuthorized { .. }) if refused => {
                        self.authorization_refused(ctx, payment, &reason).await
                    }
                    _ => {
                        tracing::warn!(contract_id = %ctx.contract_id, error = %error, "authorize outcome unknown; recovery asks the chain again");
                        Ok(Step::Done(Ok(
                            self.in_progress(ctx, ContractState::Authorizing)
                        )))
                    }
                }
            }
        }
    }

    /// The escrow holds the money: `authorizing → paid`.
    async fn authorized(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        transaction: Option<alloy::primitives::TxHash>,
        gas_used: Option<u64>,
    ) -> Result<Step, HireError> {
        let transaction = transaction.map(|tx| tx.to_string());
        let event = self.event(
            ctx,
            &Actor::Gateway,
            EventKind::PaymentAuthorized,
            json!({
                "payment_id": payment.payment_id,
                "transaction": transaction,
                "amount": payment.amount,
                "gas_used": gas_used,
            }),
        );
        let outcome = AuthorizationOutcome {
            contract_state: ContractState::Paid,
            payment_state: PaymentState::Authorized,
            transaction: Some(transaction.as_deref().unwrap_or("unknown")),
        };
        match self
            .inner
            .store
            .finish_authorization(
                ctx.contract_id.as_str(),
                &payment.payment_id,
                &outcome,
                &event,
            )
            .await?
        {
            Transition::Applied { .. } => {
                tracing::info!(contract_id = %ctx.contract_id, payment_id = %payment.payment_id, "escrow authorized; contract paid");
                Ok(Step::Again)
            }
            Transition::StateMismatch { .. } => Ok(Step::Again),
            Transition::NotFound => Err(HireError::not_found("contract")),
        }
    }

    /// Nothing was locked and nothing can be: `authorizing → offered`, answered with a 402.
    async fn authorization_refused(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        reason: &str,
    ) -> Result<Step, HireError> {
        let event = self.event(
            ctx,
            &Actor::Gateway,
            EventKind::AuthorizationRefused,
            json!({"payment_id": payment.payment_id, "reason": reason}),
        );
        let outcome = AuthorizationOutcome {
            contract_state: ContractState::Offered,
            payment_state: PaymentState::AuthorizationRefused,
            transaction: None,
        };
        match self
            .inner
            .store
            .finish_authorization(
                ctx.contract_id.as_str(),
                &payment.payment_id,
                &outcome,
                &event,
            )
            .await?
        {
            Transition::Applied { .. } => {
                tracing::info!(contract_id = %ctx.contract_id, reason, "escrow refused the authorization; nothing held");
                Ok(Step::Done(Ok(Self::refuse_payment(
                    ctx,
                    reason,
                    format!(
                        "the escrow refused to lock the payment: {reason}; nothing was charged"
                    ),
                    json!({"payment_id": payment.payment_id}),
                ))))
            }
            Transition::StateMismatch { .. } => Ok(Step::Again),
            Transition::NotFound => Err(HireError::not_found("contract")),
        }
    }

    /// Crash recovery of a contract left in `authorizing`.
    pub(super) async fn resume_authorization(&self, ctx: &Ctx) -> Result<Step, HireError> {
        let payment = self
            .inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?
            .ok_or_else(|| internal("an authorizing contract has no payment"))?;
        let escrowed = self.escrowed_payment(ctx, &payment).map_err(internal)?;
        self.authorize(ctx, &payment, &escrowed).await
    }
}
