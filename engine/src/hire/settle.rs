//! `accepted` / `disputed` (decided "settle") / `settlement_unknown` / `settling` (taken over)
//! → `settled` | `settlement_failed` | `settlement_unknown`: the money moves, and the chain
//! says whether it did.
//!
//! A facilitator's answer is a claim. `settling` is persisted before `/settle`, and whatever
//! the facilitator answers (success, a refusal, `settlement_pending`, a timeout, a 5xx,
//! garbage), the outcome is decided from the token contract:
//!
//! | the chain says | outcome |
//! |---|---|
//! | the authorization was used, by a transaction whose `Transfer` is payer → payTo, amount | `settled` with that transaction (whoever broadcast it) |
//! | used, but the transfer does not match, or the transaction is not found | `settlement_unknown`, logged as an anomaly |
//! | cancelled by the payer, or unused and the latest block is past `validBefore` | `settlement_failed`: it can never move |
//! | unused and still usable, the facilitator refused, the payer's balance is short, and no transaction of ours is in flight | `settlement_failed` |
//! | unused and still usable otherwise (e.g. a transaction still in the mempool) | `settlement_unknown`: the sweep asks the chain again, then `/settle` again with the same payload |
//! | unused and not valid yet by the chain's clock (its latest block is before `validAfter`) | `settlement_unknown`, and nothing is sent again until the chain's clock passes it |
//! | the node cannot be asked | `settlement_unknown` |
//!
//! A `settlement_unknown` contract is retried in place (see [`HireService::retry_settlement`]):
//! the contract counts the retry (`settlement_retries`, shown as `settlement.retries`) and no
//! event is written until the outcome changes, so a retry that cannot succeed yet waits without
//! growing the event log.
//!
//! "Used" never depends on who broadcast: a settle that timed out after the transfer, a crashed
//! instance's transaction mined late, or another facilitator's all read the same on chain, and
//! EIP-3009 lets a nonce move money once, so a second `/settle` can never pay twice.
//!
//! A Permit2 payment (`exact` with `assetTransferMethod: "permit2"`) reads the same table with
//! Permit2's facts ([`hiregate_payments::permit2::ledger`]): "used" is the nonce's bit in the
//! payer's Permit2 bitmap, traced to the proxy settlement carrying the permit and its
//! `Transfer(payer → payTo)`; "cancelled" is the payer invalidating the nonce; `validBefore` is
//! the permit's `deadline`. Permit2 nonces, too, move money at most once. A payment carrying a
//! signed ERC-20 approval (`erc20ApprovalGasSponsoring`) has the embedded facilitator fund,
//! broadcast and await that approval first (`hiregate_payments::permit2::approval`); each step
//! reads the chain first, so a retry after a crash or a `settlement_unknown` repeats none that
//! already happened, and once the payer used the approval's nonce otherwise the allowance on
//! chain alone decides.
//!
//! An `upto` payment (metered contract) is a Permit2 one whose settlement moves only what was
//! verified: when settlement begins, the payment's stored `amount` becomes the amount of the
//! latest verdict's billable units (the signed maximum stays in the payload), the `/settle`
//! request carries it, and the chain is read against it like any Permit2 payment. Receipts,
//! reputation and reconciliation read that amount. A rejected metered contract is never
//! settled: its permit moves nothing and expires.
//!
//! A metered escrowed (`auth-capture`) contract stores its verified amount the same way; its
//! settlement captures that amount (partial acceptance pays pro rata) and then voids the rest
//! back to the payer. Both are read from the escrow's events before anything is sent, so a
//! retry sends only the step the chain does not show yet, and the contract is `settled` only
//! once nothing is left locked.

use std::str::FromStr;

use alloy::primitives::{Address, B256, TxHash, U256};
use chrono::{DateTime, SubsecRound, Utc};
use hiregate_contracts::state::{ContractEvent, ContractState, DisputeDecision};
use hiregate_payments::{
    PaymentPayload, Reason, SettleRequest, SettleResponse,
    exact::ledger::{
        AuthorizationOnChain, AuthorizationRef, authorization_on_chain, settlement_in_receipt,
        settlement_in_transaction, token_balance, transaction_pending,
    },
    permit2::{
        self, PERMIT2_ADDRESS,
        ledger::{Permit2OnChain, Permit2Ref, permit_on_chain},
    },
};
use serde_json::json;

use super::{
    HireService,
    error::HireError,
    escrow::{CaptureOrder, EscrowView, EscrowedPayment},
    execute::{Ctx, Step, internal},
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{PaymentRecord, SettlementOutcome, Transition, states::PaymentState};

/// What the gateway concluded about one settlement.
pub(super) enum Decision {
    /// The money moved in `transaction`.
    Settled {
        transaction: TxHash,
        response: SettleResponse,
        decided_by: &'static str,
        /// A metered escrowed contract's void of what it did not verify.
        remainder_released_in: Option<TxHash>,
    },
    /// It never moved and never will (or the facilitator's refusal is confirmed by the chain).
    Failed {
        reason: String,
        response: Option<SettleResponse>,
    },
    /// Not known yet: asked again later.
    Unknown {
        reason: String,
        response: Option<SettleResponse>,
    },
    /// Escrowed: the payer reclaimed the money after the capture deadline.
    Reclaimed { transaction: Option<TxHash> },
}

/// What the chain says about a contract's payment, in the gateway's terms.
pub(super) enum ChainView {
    Moved(TxHash),
    /// Can never move: cancelled, or `validBefore` passed on chain.
    Dead(&'static str),
    /// Unused and still usable as of the latest block.
    Usable {
        payer_short: bool,
    },
    /// Unused, and not valid yet by the chain's clock (its latest block is before
    /// `validAfter`): no settlement can succeed until the chain's time passes it.
    NotYetValid {
        valid_after: i64,
    },
    /// Used, but not as this payment says (or the transaction could not be found).
    Anomaly(String),
    /// The node could not be asked, or the payment is not on a chain the gateway knows.
    Unreachable(String),
}

impl HireService {
    /// Settle the contract's payment from `from` (`accepted`, `disputed`,
    /// `settlement_unknown`, or `settling` taken over after a crash), deciding the outcome
    /// from the chain.
    pub(super) async fn settle(&self, ctx: &Ctx, from: ContractState) -> Result<Step, HireError> {
        let inner = &self.inner;
        let payment = inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?
            .ok_or_else(|| internal("a contract to settle has no payment"))?;
        let escrowed = self.escrow_of(ctx, &payment)?;
        // A settlement that may already have happened: the chain first, so nothing is sent
        // again for a payment that moved or can no longer move.
        if let Some(escrowed) = &escrowed
            && matches!(
                from,
                ContractState::SettlementUnknown | ContractState::Settling
            )
        {
            match self.escrow_view(escrowed).await {
                Ok(EscrowView::Held { .. }) => {}
                Ok(view) => {
                    let decision = capture_decision(&payment, view, "not sent again");
                    return self.record_settlement(ctx, from, &payment, decision).await;
                }
                Err(why) => {
                    if from == ContractState::SettlementUnknown {
                        tracing::warn!(contract_id = %ctx.contract_id, reason = %why, "capture still unknown");
                        return Ok(Step::Done(Ok(self.in_progress(ctx, from))));
                    }
                }
            }
        } else if matches!(
            from,
            ContractState::SettlementUnknown | ContractState::Settling
        ) {
            let own_broadcast = recorded_transaction(&payment);
            match self.chain_view(ctx, &payment, own_broadcast).await {
                ChainView::Moved(transaction) => {
                    let decision = settled_on_chain(&payment, transaction, "chain");
                    return self.record_settlement(ctx, from, &payment, decision).await;
                }
                ChainView::Dead(reason) => {
                    let decision = Decision::Failed {
                        reason: reason.to_owned(),
                        response: None,
                    };
                    return self.record_settlement(ctx, from, &payment, decision).await;
                }
                ChainView::Usable { .. } => {}
                ChainView::NotYetValid { valid_after } => {
                    // No settlement can succeed before the chain's clock reaches `validAfter`:
                    // wait, sending nothing and counting nothing.
                    let reason = format!(
                        "the authorization is not valid before {valid_after} by the chain's clock"
                    );
                    if from == ContractState::SettlementUnknown {
                        tracing::info!(contract_id = %ctx.contract_id, %reason, "settlement waits for the chain's clock");
                        return Ok(Step::Done(Ok(self.in_progress(ctx, from))));
                    }
                    let decision = Decision::Unknown {
                        reason,
                        response: None,
                    };
                    return self.record_settlement(ctx, from, &payment, decision).await;
                }
                ChainView::Anomaly(why) | ChainView::Unreachable(why) => {
                    if from == ContractState::SettlementUnknown {
                        tracing::warn!(contract_id = %ctx.contract_id, reason = %why, "settlement still unknown");
                        return Ok(Step::Done(Ok(self.in_progress(ctx, from))));
                    }
                }
            }
        }
        if from == ContractState::SettlementUnknown {
            return self
                .retry_settlement(ctx, &payment, escrowed.as_ref())
                .await;
        }
        if from != ContractState::Settling {
            let event = match from {
                // A dispute decided "settle" (by replay or the arbiter) settles with the same
                // payment.
                ContractState::Disputed => ContractEvent::DisputeResolved {
                    decision: DisputeDecision::Settle,
                },
                _ => ContractEvent::AcceptanceWindowClosed,
            };
            // Persisted before /settle: whatever happens next, the contract says "settling".
            let record = self.event(
                ctx,
                &Actor::Gateway,
                EventKind::of(&event),
                json!({"payment_id": payment.payment_id}),
            );
            let metered_amount = self
                .metered_amount_to_settle(ctx, from)
                .await?
                .map(|amount| amount.to_string());
            match inner
                .store
                .begin_settlement_of_contract(
                    ctx.contract_id.as_str(),
                    from,
                    &payment.payment_id,
                    metered_amount.as_deref(),
                    &record,
                )
                .await?
            {
                Transition::Applied { .. } => {}
                Transition::StateMismatch { .. } => return Ok(Step::Again),
                Transition::NotFound => {
                    return Err(HireError::not_found("contract"));
                }
            }
            if let Some(amount) = metered_amount {
                let mut payment = payment;
                payment.amount = amount;
                return self.send_settlement(ctx, &payment, escrowed.as_ref()).await;
            }
        }
        self.send_settlement(ctx, &payment, escrowed.as_ref()).await
    }

    /// What capturing `payment` needs, for an escrowed contract; `None` for an `exact` one.
    pub(super) fn escrow_of<'a>(
        &'a self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Result<Option<EscrowedPayment<'a>>, HireError> {
        match ctx.terms.escrow() {
            Some(_) => self
                .escrowed_payment(ctx, payment)
                .map(Some)
                .map_err(internal),
            None => Ok(None),
        }
    }

    /// With `settling` just persisted for `payment`: send the settlement (`/settle`, or the
    /// escrow's capture) and record what the chain says came of it.
    pub(super) async fn send_settlement(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: Option<&EscrowedPayment<'_>>,
    ) -> Result<Step, HireError> {
        let decision = self.settlement_decision(ctx, payment, escrowed).await;
        self.record_settlement(ctx, ContractState::Settling, payment, decision)
            .await
    }

    /// One more try of a `settlement_unknown` contract's settlement, the chain having shown the
    /// money unmoved and still usable. The contract stays `settlement_unknown` while it is
    /// tried: a retry is not a state change, so it appends no event (a retry that keeps
    /// failing would otherwise grow the log by two events per round, without bound); the
    /// contract counts it instead, and the claim that counts it is what lets one instance
    /// retry at a time, at most once per `contracts.recovery_grace_ms`. Only an outcome (settled,
    /// failed) is recorded as an event. A crash meanwhile leaves `settlement_unknown`, which is
    /// exactly "`/settle` may have been called: ask the chain first".
    async fn retry_settlement(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: Option<&EscrowedPayment<'_>>,
    ) -> Result<Step, HireError> {
        let now = self.now();
        let grace = chrono::Duration::from_std(self.inner.config.contracts.recovery_grace())
            .unwrap_or(chrono::Duration::zero());
        let Some(retry) = self
            .inner
            .store
            .claim_settlement_retry(ctx.contract_id.as_str(), now - grace, now)
            .await?
        else {
            // Retried less than the grace ago (here or on another instance), or moved on.
            return Ok(Step::Done(Ok(
                self.in_progress(ctx, ContractState::SettlementUnknown)
            )));
        };
        tracing::info!(contract_id = %ctx.contract_id, retry, "settlement retried");
        let decision = self.settlement_decision(ctx, payment, escrowed).await;
        self.record_settlement(ctx, ContractState::SettlementUnknown, payment, decision)
            .await
    }

    /// Send the settlement (`/settle`, or the escrow's capture) and decide from the chain what
    /// came of it.
    pub(super) async fn settlement_decision(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: Option<&EscrowedPayment<'_>>,
    ) -> Decision {
        match escrowed {
            Some(escrowed) => self.capture(ctx, payment, escrowed).await,
            // Settled before the work (`upfront`): nothing is sent after it.
            None if ctx.terms.settles_before_work() => {
                self.upfront_settlement_decision(ctx, payment).await
            }
            None => {
                let outcome = self.call_settle(ctx, payment).await;
                self.decide(ctx, payment, outcome).await
            }
        }
    }

    /// The escrow's `capture` of the payment's amount (everything locked, or what a metered
    /// contract verified), at the terms' fee to the terms' treasury, and for a metered contract
    /// the `void` of the rest; the escrow's events decide what happened.
    async fn capture(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        escrowed: &EscrowedPayment<'_>,
    ) -> Decision {
        let order = U256::from_str(&payment.amount)
            .ok()
            .and_then(|amount| CaptureOrder::of(&ctx.terms, amount));
        let Some(order) = order else {
            return Decision::Unknown {
                reason: "escrowed contract without escrow terms or a stored amount".to_owned(),
                response: None,
            };
        };
        let escrow = escrowed.operator.escrow();
        let partial = order.amount < escrowed.payment.info.max_amount();
        // A capture of less than what is locked leaves something capturable, so sending it
        // again (a retry after a lost answer) would pay twice: the escrow's events are read
        // first, and only what they do not show yet is sent.
        let before = if partial {
            match self.escrow_view(escrowed).await {
                Ok(view) => Some(view),
                Err(why) => {
                    return Decision::Unknown {
                        reason: format!("partial capture not sent; chain: {why}"),
                        response: None,
                    };
                }
            }
        } else {
            None
        };
        let send_capture = match before {
            None => true,
            Some(EscrowView::Held { .. }) => !order.amount.is_zero(),
            Some(_) => false,
        };
        let mut said = "already captured".to_owned();
        if send_capture {
            let sent = escrow
                .capture(
                    &escrowed.payment.info,
                    order.amount,
                    order.fee_bps,
                    order.fee_receiver,
                )
                .await;
            said = match &sent {
                Ok(receipt) => {
                    tracing::info!(contract_id = %ctx.contract_id, transaction = %receipt.tx_hash, gas_used = receipt.gas_used, "escrow captured");
                    "mined".to_owned()
                }
                Err(error) => error
                    .reason()
                    .map_or_else(|| error.to_string(), |reason| reason.as_str().to_owned()),
            };
        }
        let mut view = self.escrow_view(escrowed).await;
        if partial
            && let Ok(EscrowView::Captured { held, .. }) = &view
            && !held.is_zero()
        {
            // The verified amount is paid: the rest goes back to the payer.
            match escrow.void(&escrowed.payment.info).await {
                Ok(receipt) => {
                    tracing::info!(contract_id = %ctx.contract_id, transaction = %receipt.tx_hash, "escrow remainder voided");
                }
                Err(error) => {
                    tracing::warn!(contract_id = %ctx.contract_id, error = %error, "escrow remainder void not confirmed");
                }
            }
            view = self.escrow_view(escrowed).await;
        }
        match view {
            Ok(view) => capture_decision(payment, view, &said),
            Err(why) => Decision::Unknown {
                reason: format!("capture: {said}; chain: {why}"),
                response: None,
            },
        }
    }

    /// A contract that settles the moment it is accepted, paid `exact` by this drive, whose
    /// deliverable is about to be judged: the facilitator hears of its settlement now, so the
    /// chain work the settlement needs (the relayer's gas measurement) runs while the verdict is
    /// reached and recorded instead of after (see `Facilitator::prepare_settle`). Settling is
    /// decided as before; a settlement that never comes (rejected) costs that one node call.
    pub(super) fn prepare_settlement(&self, ctx: &Ctx) {
        let (Some(facilitator), Some(payment)) = (&self.inner.facilitator, ctx.paid_with.get())
        else {
            return;
        };
        // A window, an escrow or metering each change when or how the payment settles.
        let terms = &ctx.terms;
        if terms.acceptance_window_s() != 0
            || terms.escrow().is_some()
            || terms.metering().is_some()
        {
            return;
        }
        if let Ok(request) = settle_request(ctx, payment) {
            facilitator.prepare_settle(&request);
        }
    }

    /// `/settle` with the stored payload, bounded by `facilitator.settle_timeout_ms` whatever
    /// the facilitator's own timeouts: the recovery arithmetic counts on that bound.
    pub(super) async fn call_settle(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Result<SettleResponse, String> {
        let inner = &self.inner;
        let Some(facilitator) = &inner.facilitator else {
            return Err("no facilitator is configured".to_owned());
        };
        let request = settle_request(ctx, payment)?;
        let timeout = inner.config.facilitator.settle_timeout();
        match tokio::time::timeout(timeout, facilitator.settle(&request)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }

    /// The outcome of one `/settle`, as the chain confirms it.
    pub(super) async fn decide(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        outcome: Result<SettleResponse, String>,
    ) -> Decision {
        // A success names its transaction: one receipt confirms it.
        if let Ok(settled) = &outcome
            && settled.success
        {
            if let Ok(transaction) = TxHash::from_str(&settled.transaction)
                && self
                    .transaction_settles(ctx, payment, transaction)
                    .await
                    .unwrap_or(false)
            {
                return Decision::Settled {
                    transaction,
                    response: settled.clone(),
                    decided_by: "facilitator_confirmed_on_chain",
                    remainder_released_in: None,
                };
            }
            tracing::warn!(contract_id = %ctx.contract_id, "facilitator reported success the chain does not confirm yet");
        }
        let broadcast = match &outcome {
            Ok(response) => TxHash::from_str(&response.transaction).ok(),
            Err(_) => None,
        }
        .or_else(|| recorded_transaction(payment));
        let refused = matches!(&outcome, Ok(r) if !r.success && r.error_reason != Some(Reason::SettlementPending));
        let (facilitator_said, response) = match &outcome {
            Ok(response) if response.success => ("success".to_owned(), Some(response.clone())),
            Ok(response) => (
                response
                    .error_reason
                    .as_ref()
                    .map_or("refused", |r| r.as_str())
                    .to_owned(),
                Some(response.clone()),
            ),
            Err(error) => (format!("unknown: {error}"), None),
        };
        match self.chain_view(ctx, payment, broadcast).await {
            ChainView::Moved(transaction) => settled_on_chain(payment, transaction, "chain"),
            ChainView::Dead(reason) => Decision::Failed {
                reason: reason.to_owned(),
                response,
            },
            ChainView::Usable { payer_short: true } if refused => Decision::Failed {
                reason: facilitator_said,
                response,
            },
            ChainView::Usable { .. } => Decision::Unknown {
                reason: format!(
                    "facilitator: {facilitator_said}; the authorization is unused and still usable"
                ),
                response,
            },
            ChainView::NotYetValid { valid_after } => Decision::Unknown {
                reason: format!(
                    "facilitator: {facilitator_said}; the authorization is not valid before \
                     {valid_after} by the chain's clock"
                ),
                response,
            },
            ChainView::Anomaly(why) | ChainView::Unreachable(why) => Decision::Unknown {
                reason: format!("facilitator: {facilitator_said}; chain: {why}"),
                response,
            },
        }
    }

    /// Whether `transaction` is mined and used this payment's authorization for the offer's
    /// transfer.
    async fn transaction_settles(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        transaction: TxHash,
    ) -> Result<bool, String> {
        // The embedded facilitator holds the node's receipt of its own settlement: the same
        // chain fact, without asking the node for it a second time.
        let mined = (self.inner.facilitator.as_ref())
            .and_then(|facilitator| facilitator.mined_receipt(transaction));
        if let Some(permit) = permit_ref(ctx, payment)? {
            let found = match mined {
                Some(receipt) => permit2::ledger::settlement_in_receipt(&receipt, permit),
                None => {
                    let (provider, _) = self.chain_of(payment)?;
                    permit2::ledger::settlement_in_transaction(&provider, transaction, permit)
                        .await
                        .map_err(|e| format!("chain RPC failed: {e}"))?
                }
            };
            return Ok(found.is_some_and(|transfer| permit2_amount_matches(payment, &transfer)));
        }
        let authorization = authorization_ref(payment)?;
        let found = match mined {
            Some(receipt) => settlement_in_receipt(&receipt, authorization),
            None => {
                let (provider, _) = self.chain_of(payment)?;
                settlement_in_transaction(&provider, transaction, authorization)
                    .await
                    .map_err(|e| format!("chain RPC failed: {e}"))?
            }
        };
        Ok(found.is_some_and(|(_, transfer)| self.transfer_matches(ctx, payment, transfer)))
    }

    /// What the chain says about `payment`; `own_broadcast` is a transaction the gateway's
    /// facilitator reported sending, which counts as "maybe used" while the node holds it.
    pub(super) async fn chain_view(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        own_broadcast: Option<TxHash>,
    ) -> ChainView {
        match self.ask_chain(ctx, payment, own_broadcast).await {
            Ok(view) => view,
            Err(why) => ChainView::Unreachable(why),
        }
    }

    async fn ask_chain(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        own_broadcast: Option<TxHash>,
    ) -> Result<ChainView, String> {
        let (provider, lookback) = self.chain_of(payment)?;
        if let Some(permit) = permit_ref(ctx, payment)? {
            return self
                .ask_chain_permit2(ctx, payment, own_broadcast, &provider, lookback, permit)
                .await;
        }
        let authorization = authorization_ref(payment)?;
        let rpc = |e: alloy::transports::TransportError| format!("chain RPC failed: {e}");
        match authorization_on_chain(&provider, authorization, lookback)
            .await
            .map_err(rpc)?
        {
            AuthorizationOnChain::Used {
                transaction: Some(transaction),
                transfer: Some(transfer),
                ..
            } if self.transfer_matches(ctx, payment, transfer) => Ok(ChainView::Moved(transaction)),
            AuthorizationOnChain::Used {
                transaction,
                transfer,
                ..
            } => {
                let why = format!(
                    "the authorization is used on chain but not by the expected transfer \
                     (transaction {transaction:?}, transfer {transfer:?})"
                );
                tracing::error!(contract_id = %ctx.contract_id, %why, "settlement anomaly");
                Ok(ChainView::Anomaly(why))
            }
            AuthorizationOnChain::Canceled => Ok(ChainView::Dead("authorization_canceled")),
            AuthorizationOnChain::Unused { block_timestamp } => {
                unused_view(&provider, payment, block_timestamp, own_broadcast, false).await
            }
        }
    }

    /// [`Self::ask_chain`] for a Permit2 payment: Permit2's nonce bitmap, the proxy settlement
    /// that used it and its transfer.
    async fn ask_chain_permit2(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        own_broadcast: Option<TxHash>,
        provider: &alloy::providers::DynProvider,
        lookback: Option<u64>,
        permit: Permit2Ref,
    ) -> Result<ChainView, String> {
        let on_chain = permit_on_chain(provider, permit, lookback)
            .await
            .map_err(|e| format!("chain RPC failed: {e}"))?;
        match on_chain {
            Permit2OnChain::Settled(transfer) if permit2_amount_matches(payment, &transfer) => {
                Ok(ChainView::Moved(transfer.transaction))
            }
            Permit2OnChain::Settled(_) | Permit2OnChain::UsedUntraced => {
                let why = format!(
                    "the Permit2 nonce is used on chain but not by the expected transfer \
                     ({on_chain:?})"
                );
                tracing::error!(contract_id = %ctx.contract_id, %why, "settlement anomaly");
                Ok(ChainView::Anomaly(why))
            }
            Permit2OnChain::Invalidated => Ok(ChainView::Dead("permit2_nonce_invalidated")),
            Permit2OnChain::Unused { block_timestamp } => {
                unused_view(provider, payment, block_timestamp, own_broadcast, true).await
            }
        }
    }

    fn transfer_matches(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        transfer: hiregate_payments::exact::ledger::TransferFacts,
    ) -> bool {
        let pay_to = ctx
            .offer
            .requirements()
            .and_then(|r| Address::from_str(&r.pay_to).ok());
        payment.payer == transfer.from
            && pay_to.is_some_and(|pay_to| pay_to == transfer.to)
            && U256::from_str(&payment.amount).is_ok_and(|amount| amount == transfer.value)
    }

    fn chain_of(
        &self,
        payment: &PaymentRecord,
    ) -> Result<(alloy::providers::DynProvider, Option<u64>), String> {
        payment
            .network
            .chain_id()
            .and_then(|chain_id| self.inner.assets.chain(chain_id))
            .ok_or_else(|| format!("no node configured for {}", payment.network))
    }

    /// Store the decision: `from` → `settled` | `settlement_failed` | `settlement_unknown`
    /// (escrowed: `voided` when the payer reclaimed the money).
    pub(super) async fn record_settlement(
        &self,
        ctx: &Ctx,
        from: ContractState,
        payment: &PaymentRecord,
        decision: Decision,
    ) -> Result<Step, HireError> {
        let remainder_transaction = match &decision {
            Decision::Settled {
                remainder_released_in,
                ..
            } => remainder_released_in.map(|tx| tx.to_string()),
            _ => None,
        };
        let (state, payment_state, kind, transaction, response, details) = match decision {
            Decision::Reclaimed { transaction } => {
                return self
                    .record_reclaim(ctx, from, payment, transaction)
                    .await
                    .map(|()| Step::Again);
            }
            Decision::Settled {
                transaction,
                response,
                decided_by,
                remainder_released_in,
            } => {
                let mut details = json!({
                    "transaction": transaction.to_string(),
                    "network": payment.network,
                    "payer": payment.payer.to_checksum(None),
                    "amount": payment.amount,
                    "decided_by": decided_by,
                });
                if let Some(void) = remainder_released_in {
                    details["remainder_transaction"] = json!(void.to_string());
                }
                (
                    ContractState::Settled,
                    PaymentState::Settled,
                    ContractEvent::SettlementSucceeded,
                    Some(transaction.to_string()),
                    Some(response),
                    details,
                )
            }
            Decision::Failed { reason, response } => (
                ContractState::SettlementFailed,
                PaymentState::SettlementFailed,
                ContractEvent::SettlementFailed,
                None,
                response,
                json!({"reason": reason, "decided_by": "chain"}),
            ),
            Decision::Unknown { reason, response } => (
                ContractState::SettlementUnknown,
                PaymentState::SettlementUnknown,
                ContractEvent::SettlementOutcomeUnknown,
                None,
                response,
                json!({"reason": reason}),
            ),
        };
        let broadcast = transaction.clone().or_else(|| {
            response
                .as_ref()
                .map(|r| r.transaction.clone())
                .filter(|t| !t.is_empty())
        });
        if from == ContractState::SettlementUnknown && state == ContractState::SettlementUnknown {
            // No state change, no event: what the retry learned (a transaction the facilitator
            // broadcast, which later rounds must know is in flight) is kept in place.
            tracing::warn!(contract_id = %ctx.contract_id, %details, "settlement retry decided nothing");
            let response = response.and_then(|r| serde_json::to_value(r).ok());
            self.inner
                .store
                .note_settlement_answer(
                    &payment.payment_id,
                    broadcast.as_deref(),
                    response.as_ref(),
                    self.now(),
                )
                .await?;
            return Ok(Step::Done(Ok(self.in_progress(ctx, state))));
        }
        let record = self.event(ctx, &Actor::Gateway, EventKind::of(&kind), details);
        let outcome = SettlementOutcome {
            contract_state: state,
            payment_state,
            transaction: broadcast,
            response: response.and_then(|r| serde_json::to_value(r).ok()),
            remainder_transaction,
        };
        let applied = self
            .inner
            .store
            .finish_settlement(
                ctx.contract_id.as_str(),
                from,
                &payment.payment_id,
                &outcome,
                &record,
            )
            .await?;
        if !matches!(applied, Transition::Applied { .. }) {
            return Ok(Step::Again);
        }
        // An upfront payment was settled before the work, by a record this drive never held:
        // its answer is read from the store.
        if state == ContractState::Settled && !ctx.terms.settles_before_work() {
            let _ = ctx
                .written
                .settled
                .set(Box::new(settled_record(payment, outcome, record.at)));
        }
        tracing::info!(contract_id = %ctx.contract_id, outcome = state.as_str(), "settlement");
        if state == ContractState::SettlementFailed && payment.authorize_tx.is_some() {
            // Never captured and never will be: what the escrow holds goes back to the payer.
            self.release_escrow(ctx, payment, "settlement_failed")
                .await?;
        }
        if state == ContractState::SettlementUnknown {
            // Retrying at once would most likely meet the same trouble; the settlement sweep
            // asks the chain again after `contracts.recovery_grace_ms`.
            return Ok(Step::Done(Ok(self.in_progress(ctx, state))));
        }
        Ok(Step::Again)
    }
}

/// `payment` as [`hiregate_store::Store::finish_settlement`] leaves it with `outcome` at `at`.
fn settled_record(
    payment: &PaymentRecord,
    outcome: SettlementOutcome,
    at: DateTime<Utc>,
) -> PaymentRecord {
    let mut settled = payment.clone();
    settled.state = outcome.payment_state;
    settled.settle_tx = outcome.transaction.or(settled.settle_tx);
    settled.settle_response = outcome.response.or(settled.settle_response);
    settled.remainder_tx = outcome.remainder_transaction.or(settled.remainder_tx);
    settled.updated_at = at.trunc_subsecs(3);
    settled
}

/// The `/settle` request of `payment`: its stored payload and the offer's requirements.
fn settle_request(ctx: &Ctx, payment: &PaymentRecord) -> Result<SettleRequest, String> {
    let requirements = ctx
        .offer
        .requirements()
        .ok_or_else(|| "stored offer has no requirements".to_owned())?
        .clone();
    let payload: PaymentPayload = serde_json::from_value(payment.payload.clone())
        .map_err(|e| format!("stored payment payload: {e}"))?;
    // `upto`: the amount to move (what was verified, stored as the payment's amount when
    // settlement began) rides in the settle request's requirements, the signed maximum in
    // the payload.
    if requirements.scheme == permit2::UPTO_SCHEME {
        let amount = U256::from_str(&payment.amount)
            .map_err(|_| "stored payment amount does not parse".to_owned())?;
        return permit2::upto::settle_request(payload, &requirements, amount)
            .map_err(|reason| format!("upto settle request: {}", reason.as_str()));
    }
    Ok(SettleRequest::new(payload, requirements))
}

/// What the chain says of a payment whose authorization (or Permit2 nonce) is unused as of a
/// block at `block_timestamp`: dead past `validBefore` (Permit2: `deadline`), not valid yet
/// before `validAfter`, else usable, with the payer short when its balance (and, over Permit2,
/// its allowance to Permit2, unless the payment carries an EIP-2612 permit or a signed approval
/// the chain would still take) cannot cover it.
async fn unused_view(
    provider: &alloy::providers::DynProvider,
    payment: &PaymentRecord,
    block_timestamp: u64,
    own_broadcast: Option<TxHash>,
    over_permit2: bool,
) -> Result<ChainView, String> {
    let rpc = |e: alloy::transports::TransportError| format!("chain RPC failed: {e}");
    let block_time = i64::try_from(block_timestamp).unwrap_or(i64::MAX);
    if block_time >= payment.valid_before {
        return Ok(ChainView::Dead("authorization_expired"));
    }
    if block_time < payment.valid_after {
        return Ok(ChainView::NotYetValid {
            valid_after: payment.valid_after,
        });
    }
    if let Some(transaction) = own_broadcast
        && transaction_pending(provider, transaction)
            .await
            .map_err(rpc)?
    {
        return Ok(ChainView::Usable { payer_short: false });
    }
    let authorization = authorization_ref(payment)?;
    let amount = U256::from_str(&payment.amount).unwrap_or(U256::MAX);
    let balance = token_balance(provider, authorization.asset, authorization.payer)
        .await
        .map_err(rpc)?;
    let mut payer_short = balance < amount;
    // A signed EIP-2612 permit approves Permit2 in the settlement itself; a signed approval
    // transaction does before it, while its nonce is still the payer's next one.
    let payload = over_permit2
        .then(|| serde_json::from_value::<PaymentPayload>(payment.payload.clone()).ok())
        .flatten();
    let mut permits_permit2 = payload.as_ref().is_some_and(|payload| {
        permit2::extension::Eip2612GasSponsoring::from_extensions(&payload.extensions)
            .is_ok_and(|permit| permit.is_some())
    });
    if !permits_permit2
        && let Some(approval) = payload
            .as_ref()
            .and_then(permit2::approval::SignedApproval::in_payload)
    {
        permits_permit2 = approval.still_usable(provider).await.map_err(rpc)?;
    }
    if over_permit2 && !payer_short && !permits_permit2 {
        let allowance = permit2_allowance(provider, authorization.asset, authorization.payer)
            .await
            .map_err(rpc)?;
        payer_short = allowance < amount;
    }
    Ok(ChainView::Usable { payer_short })
}

/// `owner`'s allowance to Permit2 on `asset` at the latest block.
async fn permit2_allowance(
    provider: &alloy::providers::DynProvider,
    asset: Address,
    owner: Address,
) -> Result<U256, alloy::transports::TransportError> {
    use alloy::{providers::Provider as _, sol_types::SolCall as _};
    let call = permit2::onchain::IErc20::allowanceCall {
        owner,
        spender: PERMIT2_ADDRESS,
    };
    let returned = provider
        .call(
            alloy::rpc::types::TransactionRequest::default()
                .to(asset)
                .input(alloy::rpc::types::TransactionInput::new(
                    call.abi_encode().into(),
                )),
        )
        .await?;
    permit2::onchain::IErc20::allowanceCall::abi_decode_returns(&returned)
        .map_err(|e| alloy::transports::TransportError::local_usage_str(&e.to_string()))
}

/// The Permit2 authorization of `payment` (token, payer, the offer's `payTo`, nonce) when it was
/// paid over Permit2; `None` for an EIP-3009 payment.
fn permit_ref(ctx: &Ctx, payment: &PaymentRecord) -> Result<Option<Permit2Ref>, String> {
    let shaped = payment
        .payload
        .get("payload")
        .is_some_and(permit2::is_permit2_shaped);
    if !shaped {
        return Ok(None);
    }
    let authorization = authorization_ref(payment)?;
    let to = ctx
        .offer
        .requirements()
        .and_then(|r| Address::from_str(&r.pay_to).ok())
        .ok_or_else(|| "the stored offer has no payout address".to_owned())?;
    Ok(Some(Permit2Ref {
        token: authorization.asset,
        owner: authorization.payer,
        to,
        nonce: U256::from_be_bytes(authorization.nonce.0),
    }))
}

/// Whether a Permit2 settlement (already known to move the token from the payer to `payTo`)
/// moved exactly the stored amount.
fn permit2_amount_matches(
    payment: &PaymentRecord,
    transfer: &permit2::onchain::Permit2Transfer,
) -> bool {
    U256::from_str(&payment.amount).is_ok_and(|amount| amount == transfer.amount)
}

/// A transaction a facilitator reported for this payment (a `settlement_pending` answer or an
/// earlier outcome), which may still be in flight.
pub(super) fn recorded_transaction(payment: &PaymentRecord) -> Option<TxHash> {
    payment
        .settle_tx
        .as_deref()
        .and_then(|t| TxHash::from_str(t).ok())
}

fn authorization_ref(payment: &PaymentRecord) -> Result<AuthorizationRef, String> {
    let bad = |what: &str| format!("stored payment {what} does not parse");
    Ok(AuthorizationRef {
        asset: payment.asset,
        payer: payment.payer,
        nonce: B256::from_str(&payment.nonce).map_err(|_| bad("nonce"))?,
    })
}

/// The settlement outcome of an escrowed payment as its events show it; `said` is what the
/// capture call answered, for the record.
fn capture_decision(payment: &PaymentRecord, view: EscrowView, said: &str) -> Decision {
    match view {
        // A metered contract's remainder is voided before the contract counts as settled, so
        // a crash between the two leaves it to the settlement's retry.
        EscrowView::Captured { held, .. } if !held.is_zero() => Decision::Unknown {
            reason: format!("captured; the remainder ({held}) is still held, its void is retried"),
            response: None,
        },
        EscrowView::Captured {
            transaction: Some(transaction),
            remainder_released_in,
            ..
        } => Decision::Settled {
            transaction,
            response: SettleResponse::settled(&payment.network, payment.payer, transaction),
            decided_by: "escrow_events",
            remainder_released_in,
        },
        EscrowView::Captured {
            transaction: None, ..
        } => Decision::Unknown {
            reason: "captured on chain, transaction not named by the node".to_owned(),
            response: None,
        },
        EscrowView::Reclaimed { transaction } => Decision::Reclaimed { transaction },
        EscrowView::Voided { .. } => Decision::Failed {
            reason: "escrow_voided".to_owned(),
            response: None,
        },
        EscrowView::NotAuthorized { .. } => Decision::Failed {
            reason: "escrow_not_authorized".to_owned(),
            response: None,
        },
        EscrowView::Held { chain_time, .. }
            if u64::try_from(payment.valid_before).is_ok_and(|deadline| chain_time >= deadline) =>
        {
            Decision::Failed {
                reason: "capture_deadline_expired".to_owned(),
                response: None,
            }
        }
        EscrowView::Held { .. } => Decision::Unknown {
            reason: format!("capture: {said}; the escrow still holds the money"),
            response: None,
        },
    }
}

/// `payment` settled in `transaction`, as `decided_by` found it.
pub(super) fn settled_on_chain(
    payment: &PaymentRecord,
    transaction: TxHash,
    decided_by: &'static str,
) -> Decision {
    Decision::Settled {
        transaction,
        response: SettleResponse::settled(&payment.network, payment.payer, transaction),
        decided_by,
        remainder_released_in: None,
    }
}
