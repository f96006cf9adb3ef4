//! `offered`: the 402 challenge and the payment that moves a contract to `paid`.

use hiregate_contracts::id::PaymentId;
use std::sync::Arc;

use alloy::primitives::U256;
use hiregate_contracts::{
    canonical::Digest,
    state::{ContractEvent, ContractState},
};
use hiregate_payments::{
    Now, PaymentPayload, Reason, VerifyRequest, decode_header,
    permit2::{self, METHOD_PERMIT2},
    precheck,
    wire::PaymentRequirements,
};
use serde_json::{Value, json};

use super::{
    HireService,
    error::{ErrorCode, HireError},
    execute::{Ctx, Step, internal},
    offer::SIGNING_SLACK_S,
    outcome::{HireResult, Outcome, PaymentDemand},
    submission::{
        AUTHORIZATION_REFUSED, EscrowedSubmission, StoredKey, facilitator_unavailable, to_i64,
    },
};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{NewPayment, PayOutcome, PaymentRecord, states::PaymentState};

/// Clock skew tolerated between the seeker's clock and ours when bounding `validBefore`.
const VALID_BEFORE_SKEW_S: u64 = 60;

/// What an `exact` payment signed, whichever way it moves the token: the amount and the window
/// the chain enforces. EIP-3009: `value`, `validAfter`, `validBefore`. Permit2: the permitted
/// amount, the witness's `validAfter`, and the permit's `deadline`, after which Permit2 refuses
/// it as EIP-3009 refuses an authorization past `validBefore`.
struct SignedWindow {
    amount: U256,
    valid_after: U256,
    valid_before: U256,
}

impl SignedWindow {
    fn of(payload: &PaymentPayload) -> Result<Self, Reason> {
        if permit2::is_permit2_shaped(&payload.payload) {
            let permit = payload.permit2_evm()?.permit2_authorization;
            return Ok(Self {
                amount: permit.permitted.amount.get(),
                valid_after: permit.witness.valid_after.get(),
                valid_before: permit.deadline.get(),
            });
        }
        let authorization = payload.exact_evm()?.authorization;
        Ok(Self {
            amount: authorization.value.get(),
            valid_after: authorization.valid_after.get(),
            valid_before: authorization.valid_before.get(),
        })
    }
}

impl HireService {
    pub(super) async fn offered(
        &self,
        ctx: &Ctx,
        payment_signature: Option<&str>,
    ) -> Result<Step, HireError> {
        if ctx.terms.offer_expired(self.now().into()) {
            self.transition(
                ctx,
                ContractState::Offered,
                &ContractEvent::OfferExpired,
                &Actor::Gateway,
                json!({"offer_expires_at": ctx.terms.offer_expires_at()}),
                None,
            )
            .await?;
            return Ok(Step::Again);
        }
        let Some(header) = payment_signature else {
            let demand = Arc::new(super::offered::payment_required(
                &ctx.offer,
                &ctx.contract_id,
            ));
            // Under the contract's lock and seen `offered`: a payment on this instance can only
            // commit after this, and its event then forgets the entry.
            self.inner.offers.remember(
                ctx.contract_id.as_str(),
                ctx.seeker_id.as_str(),
                &ctx.correlation_id,
                &ctx.terms,
                Arc::clone(&demand),
            );
            return Ok(Step::Done(Ok(Outcome::PaymentRequired(demand))));
        };
        self.accept_payment(ctx, header).await
    }

    pub(super) fn refuse_payment(
        ctx: &Ctx,
        reason: &str,
        message: String,
        mut details: Value,
    ) -> Outcome {
        if let Some(object) = details.as_object_mut() {
            object.insert("contract_id".into(), json!(ctx.contract_id));
        }
        Outcome::PaymentRequired(Arc::new(PaymentDemand::new(
            &ctx.offer,
            ErrorCode::PaymentInvalid,
            message,
            Some(reason),
            details,
        )))
    }

    /// A `PAYMENT-SIGNATURE` that cannot be read (not base64, not JSON, not a v2
    /// `PaymentPayload`, a malformed extension): a fresh 402 challenge whose `error` says what
    /// was wrong, as the official x402 middleware answers, so a standard client signs again; the
    /// stable `code` is in the body. Nothing is stored.
    fn unreadable_payment(ctx: &Ctx, code: ErrorCode, message: &str) -> Outcome {
        Outcome::PaymentRequired(Arc::new(PaymentDemand::new(
            &ctx.offer,
            code,
            message,
            Some(&format!("{code}: {message}")),
            json!({"contract_id": ctx.contract_id}),
        )))
    }

    /// A `PAYMENT-SIGNATURE` for an `offered` contract: read and matched against the offer, then
    /// taken as an escrowed or an exact payment. A payment already stored (same authorization or
    /// payment identifier) is answered by what it paid.
    pub(super) async fn accept_payment(&self, ctx: &Ctx, header: &str) -> Result<Step, HireError> {
        let (payload, identifier) = match Self::read_payment(ctx, header)? {
            Ok(read) => read,
            Err(refusal) => return Ok(Step::Done(Ok(refusal))),
        };
        let payload_json = serde_json::to_value(&payload)
            .map_err(|e| internal(format!("payment payload: {e}")))?;
        let payload_hash = Digest::of_canonical(&payload_json)
            .map_err(|e| internal(format!("payment payload: {e}")))?
            .to_string();
        if let Some(id) = &identifier
            && let Some(existing) = self
                .inner
                .store
                .find_payment_by_identifier(id.as_str())
                .await?
        {
            return self.known_payment(ctx, &existing, &payload_hash, true);
        }
        let submission = EscrowedSubmission {
            payload: &payload,
            payload_json,
            payload_hash,
            identifier,
        };
        if ctx.terms.escrow().is_some() {
            return self.accept_escrowed_payment(ctx, submission).await;
        }
        self.accept_exact_payment(ctx, submission).await
    }

    /// The payload of `header` and its payment identifier, or the fresh challenge answering a
    /// header that cannot be read or a payment that does not claim this contract's offer.
    fn read_payment(
        ctx: &Ctx,
        header: &str,
    ) -> Result<
        Result<(PaymentPayload, Option<hiregate_payments::PaymentIdentifier>), Outcome>,
        HireError,
    > {
        let payload: PaymentPayload = match decode_header(header) {
            Ok(payload) => payload,
            Err(error) => {
                return Ok(Err(Self::unreadable_payment(
                    ctx,
                    ErrorCode::InvalidPaymentSignature,
                    &format!("PAYMENT-SIGNATURE cannot be read: {error}"),
                )));
            }
        };
        let requirements = ctx
            .offer
            .requirements()
            .ok_or_else(|| internal("stored offer has no requirements"))?;
        let mismatched = requirements.mismatched_fields(&payload.accepted);
        if !mismatched.is_empty() {
            let fields: Vec<String> = mismatched.iter().map(|f| format!("accepted.{f}")).collect();
            let names = fields.join(", ");
            return Ok(Err(Outcome::PaymentRequired(Arc::new(PaymentDemand::new(
                &ctx.offer,
                ErrorCode::PaymentMismatch,
                format!("the payment's {names} does not match this contract's offer"),
                Some(&format!("accepted_requirements_mismatch: {names}")),
                json!({"contract_id": ctx.contract_id, "fields": fields}),
            )))));
        }
        match payload.payment_identifier() {
            Ok(identifier) => Ok(Ok((payload, identifier))),
            Err(error) => Ok(Err(Self::unreadable_payment(
                ctx,
                ErrorCode::InvalidPaymentIdentifier,
                &format!("payment-identifier extension: {error}"),
            ))),
        }
    }

    /// An `exact` payment (EIP-3009, or Permit2 when the offer says so): judged (prechecks by
    /// the chain's clock, the worker's standing, the facilitator's verdict), then stored with
    /// `offered → paid` under its replay key (the EIP-3009 or the Permit2 nonce) and forwarded.
    async fn accept_exact_payment(
        &self,
        ctx: &Ctx,
        submission: EscrowedSubmission<'_>,
    ) -> Result<Step, HireError> {
        let key = match self.judge_exact_payment(ctx, &submission).await? {
            Ok(key) => key,
            Err(step) => return Ok(step),
        };
        self.record_exact_payment(ctx, submission, &key).await
    }

    /// Whether an `exact` payment may be taken: its stored key when it may, else the step that
    /// answers it (a known payment, a refusal, a worker that cannot work, no verdict).
    async fn judge_exact_payment(
        &self,
        ctx: &Ctx,
        submission: &EscrowedSubmission<'_>,
    ) -> Result<Result<StoredKey, Step>, HireError> {
        let inner = &self.inner;
        let payload = submission.payload;
        let payload_hash = &submission.payload_hash;
        let requirements = ctx
            .offer
            .requirements()
            .ok_or_else(|| internal("stored offer has no requirements"))?;
        let key = match payload.payment_key() {
            Ok(key) => key,
            Err(reason) => {
                return Ok(Err(Step::Done(Ok(Self::refuse_payment(
                    ctx,
                    reason.as_str(),
                    "the payment payload is not an exact payment (EIP-3009 or Permit2)".to_owned(),
                    json!({}),
                )))));
            }
        };
        let key = StoredKey::of(&key);
        let now = match self.chain_now(ctx).await {
            Ok(now) => now,
            Err(unavailable) => return Ok(Err(Step::Done(Err(unavailable)))),
        };
        let refusal = self.authorization_refusal(ctx, payload, requirements, now);
        // The facilitator's verdict is read-only, so it is asked alongside the store's two
        // reads: one wait instead of three. It is used only when neither read answers first.
        let verify = async {
            match (&refusal, &inner.facilitator) {
                (None, Some(facilitator)) => Some(
                    facilitator
                        .verify(&VerifyRequest::new(payload.clone(), requirements.clone()))
                        .await,
                ),
                _ => None,
            }
        };
        let (existing, unavailable, verdict) = tokio::join!(
            inner.store.find_payment_by_authorization(
                &key.network,
                &key.asset,
                &key.payer,
                &key.nonce
            ),
            // Before paying: a worker that cannot work now (retired, unhealthy, busy) should
            // not make the seeker hold a paid contract.
            self.worker_refusal(ctx),
            verify,
        );
        if let Some(existing) = existing? {
            return self
                .known_payment(ctx, &existing, payload_hash, false)
                .map(Err);
        }
        if let Some(refusal) = refusal {
            return Ok(Err(Step::Done(refusal)));
        }
        if let Some(refusal) = unavailable? {
            return Ok(Err(Step::Done(Err(refusal))));
        }
        let verdict = match verdict {
            None => {
                return Ok(Err(Step::Done(Err(facilitator_unavailable(
                    "no facilitator is configured",
                )))));
            }
            Some(Ok(verdict)) => verdict,
            Some(Err(error)) => {
                tracing::warn!(contract_id = %ctx.contract_id, error = %error, "facilitator /verify outcome unknown");
                return Ok(Err(Step::Done(Err(facilitator_unavailable(
                    &error.to_string(),
                )))));
            }
        };
        if !verdict.is_valid {
            let reason = verdict
                .invalid_reason
                .as_ref()
                .map_or("invalid_payment", |r| r.as_str())
                .to_owned();
            return Ok(Err(Step::Done(Ok(Self::refuse_payment(
                ctx,
                &reason,
                format!("the facilitator refused the payment: {reason}"),
                json!({"facilitator_message": verdict.invalid_message}),
            )))));
        }
        Ok(Ok(key))
    }

    /// Store a judged `exact` payment and move the contract `offered → paid` in one
    /// transaction, then forward at once.
    async fn record_exact_payment(
        &self,
        ctx: &Ctx,
        submission: EscrowedSubmission<'_>,
        key: &StoredKey,
    ) -> Result<Step, HireError> {
        let EscrowedSubmission {
            payload,
            payload_json,
            payload_hash,
            identifier,
        } = submission;
        let signed = SignedWindow::of(payload).map_err(|r| internal(r.as_str().to_owned()))?;
        let payment = NewPayment {
            payment_id: PaymentId::generate(),
            contract_id: ctx.contract_id.clone(),
            network: key.network,
            asset: key.asset,
            payer: key.payer,
            nonce: key.nonce.clone(),
            amount: signed.amount.to_string(),
            valid_after: to_i64(signed.valid_after),
            valid_before: to_i64(signed.valid_before),
            payload: payload_json,
            payload_hash: payload_hash.clone(),
            payment_identifier: identifier.as_ref().map(|id| id.as_str().to_owned()),
            state: PaymentState::Verified,
            created_at: self.now(),
        };
        let event = self.event(
            ctx,
            &ctx.actor,
            EventKind::PaymentVerified,
            json!({
                "payment_id": payment.payment_id,
                "network": payment.network,
                "asset": payment.asset.to_checksum(None),
                "payer": payment.payer.to_checksum(None),
                "amount": payment.amount,
                "valid_before": payment.valid_before,
                "payment_identifier": payment.payment_identifier,
            }),
        );
        if let Some(step) = self
            .store_payment(
                ctx,
                &payment,
                ContractState::Paid,
                &event,
                identifier.as_ref(),
                key,
            )
            .await?
        {
            return Ok(step);
        }
        tracing::info!(contract_id = %ctx.contract_id, payment_id = %payment.payment_id, payer = %payment.payer, "contract paid");
        // `paid` by this very commit: forward at once, without reading back the contract or
        // the payment just written. Boxed: the forward's future is large, and every offered
        // step's future would carry it.
        let _ = ctx
            .paid_with
            .set(Box::new(PaymentRecord::as_stored(&payment)));
        Box::pin(self.forward(ctx)).await
    }

    /// The present on the contract's chain, as the chain will judge the payment's window:
    /// `validAfter` by its latest block, `validBefore` by the later of that and the local
    /// clock (see [`hiregate_payments::clock`]). The chain's time is cached per chain for about
    /// a second, so a paid hire costs no node round trip of its own except the one hire a
    /// second that refreshes it. A node that cannot be asked leaves the payment unjudged: 503,
    /// nothing stored.
    pub(super) async fn chain_now(&self, ctx: &Ctx) -> Result<Now, HireError> {
        let chain_id = ctx.terms.price().chain_id();
        self.inner.assets.chain_now(chain_id).await.map_err(|error| {
            tracing::warn!(contract_id = %ctx.contract_id, error = %error, "the chain's clock cannot be read");
            facilitator_unavailable("the chain's clock cannot be read")
        })
    }

    /// Why an `exact` payment's authorization is refused before anyone verifies it (its fields
    /// against the offer, its validity window by the chain's clock), if it is.
    fn authorization_refusal(
        &self,
        ctx: &Ctx,
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
        now: Now,
    ) -> Option<HireResult> {
        // The offer names the transfer method: a payload of the other shape fails its precheck.
        let checked = if requirements.asset_transfer_method() == METHOD_PERMIT2 {
            permit2::precheck(payload, requirements, now).map(|_| ())
        } else {
            precheck(payload, requirements, now)
        };
        if let Err(reason) = checked {
            return Some(Ok(Self::refuse_payment(
                ctx,
                reason.as_str(),
                format!("the payment was refused: {}", reason.as_str()),
                json!({}),
            )));
        }
        let valid_before = match SignedWindow::of(payload) {
            Ok(signed) => signed.valid_before,
            Err(reason) => return Some(Err(internal(reason.as_str().to_owned()))),
        };
        // The chain kills the authorization at `validBefore` by its own clock: the window is
        // measured from the later of the two clocks.
        let earliest_valid_before = now
            .latest()
            .saturating_add(requirements.max_timeout_seconds)
            .saturating_sub(SIGNING_SLACK_S);
        if valid_before < U256::from(earliest_valid_before) {
            return Some(Ok(Self::refuse_payment(
                ctx,
                "authorization_window_too_short",
                format!(
                    "the authorization must stay valid for the contract's {} s \
                     (validBefore >= now + maxTimeoutSeconds)",
                    requirements.max_timeout_seconds
                ),
                json!({"min_valid_before": earliest_valid_before}),
            )));
        }
        // A far validBefore would let a contract lie in a working state for years after a
        // crash, and the authorization window is what every deadline of the hire is sized by.
        let latest_valid_before = now
            .latest()
            .saturating_add(self.inner.config.contracts.max_authorization_window_s)
            .saturating_add(VALID_BEFORE_SKEW_S);
        if valid_before > U256::from(latest_valid_before) {
            return Some(Ok(Self::refuse_payment(
                ctx,
                "authorization_window_too_long",
                format!(
                    "the authorization must expire within {} s (validBefore <= now + \
                     contracts.max_authorization_window_s)",
                    self.inner.config.contracts.max_authorization_window_s
                ),
                json!({"max_valid_before": latest_valid_before}),
            )));
        }
        None
    }

    /// Store `payment` and move the contract `offered → to`: `None` once stored; otherwise
    /// the step a lost race leads to (the payment another request stored first, answered as a
    /// known payment, or a contract that moved on).
    pub(super) async fn store_payment(
        &self,
        ctx: &Ctx,
        payment: &NewPayment,
        to: ContractState,
        event: &hiregate_store::NewContractEvent,
        identifier: Option<&hiregate_payments::PaymentIdentifier>,
        key: &StoredKey,
    ) -> Result<Option<Step>, HireError> {
        let inner = &self.inner;
        match inner.store.pay_contract(payment, to, event).await? {
            PayOutcome::Paid { .. } => {
                // At once, not only through the event listener: this instance knows it moved.
                inner.offers.forget(ctx.contract_id.as_str());
                Ok(None)
            }
            PayOutcome::DuplicatePayment => {
                // A concurrent request stored this authorization (or identifier) first.
                if let Some(id) = identifier
                    && let Some(existing) =
                        inner.store.find_payment_by_identifier(id.as_str()).await?
                {
                    return self
                        .known_payment(ctx, &existing, &payment.payload_hash, true)
                        .map(Some);
                }
                match inner
                    .store
                    .find_payment_by_authorization(&key.network, &key.asset, &key.payer, &key.nonce)
                    .await?
                {
                    Some(existing) => self
                        .known_payment(ctx, &existing, &payment.payload_hash, false)
                        .map(Some),
                    None => Ok(Some(Step::Again)),
                }
            }
            // Another payment won the race; this one was not stored and is never settled.
            PayOutcome::StateMismatch { .. } => Ok(Some(Step::Again)),
            PayOutcome::NotFound => Err(HireError::not_found("contract")),
        }
    }

    /// A payment that is already stored: this contract's own (answer by state), another
    /// contract's (refused), or a payment identifier reused for another payload (409).
    pub(super) fn known_payment(
        &self,
        ctx: &Ctx,
        existing: &PaymentRecord,
        payload_hash: &str,
        by_identifier: bool,
    ) -> Result<Step, HireError> {
        if by_identifier && existing.payload_hash != payload_hash {
            return Err(HireError::conflict(
                ErrorCode::PaymentIdentifierConflict,
                "this payment identifier was already used with a different payment".to_owned(),
            ));
        }
        if existing.contract_id != ctx.contract_id {
            return Err(HireError::conflict(
                ErrorCode::PaymentAlreadyUsed,
                "this payment authorization already paid another contract".to_owned(),
            ));
        }
        // The escrow refused to lock it once; it never will (and the contract is `offered`
        // again, so looking again would only find it again).
        if existing.state == PaymentState::AuthorizationRefused {
            return Ok(Step::Done(Ok(Self::refuse_payment(
                ctx,
                AUTHORIZATION_REFUSED,
                "the escrow refused to lock this payment; sign a new one".to_owned(),
                json!({"payment_id": existing.payment_id}),
            ))));
        }
        Ok(Step::Again)
    }
}
