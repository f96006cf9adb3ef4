//! `POST /v1/contracts/{id}/execute` (and `POST /execute` + `X-Contract-ID`): the paid hire.
//!
//! ```text
//! offered ──no PAYMENT-SIGNATURE──► 402 PAYMENT-REQUIRED
//!    │ PAYMENT-SIGNATURE: decode → accepted == our offer → payment-identifier / replay checks
//!    │   → prechecks (payTo, amount, window, network, asset) → worker capacity → facilitator /verify
//!    ▼ payment row + offered→paid in one transaction (the database picks one winner)
//!  paid ──forward (attempt n, Idempotency-Key = contract id)──► executing
//!    executing ─failed/timeout─► paid (retries left: 502/504, the next execute retries under the
//!                                      same authorization) │ failed (void; 502/504)
//!    executing ─pending─► pending (202; a durable poll job and the worker's signed callback
//!                                  finish it through the same `delivered` path, see `pending`)
//!    executing ─completed─► delivered ─► verifying ─passed─► accepted │ ─failed/inconclusive─► rejected (422)
//!  accepted (acceptance window 0) ─► settling (persisted first) ─/settle same payload─► settled (200 +
//!    PAYMENT-RESPONSE) │ settlement_failed (402 + PAYMENT-RESPONSE) │ settlement_unknown (202; the
//!    next execute retries /settle with the same payload, which settles at most once)
//!  accepted (acceptance window > 0): 200 with the deliverable; settlement waits for the window.
//! ```
//!
//! Duplicates: the flow runs under a per-contract lock, re-reading the contract's state from the
//! database at each step, and every final answer is rebuilt from what is stored. A second
//! execute therefore never forwards twice or settles twice: it waits (up to
//! `contracts.duplicate_wait_ms`) for the one in flight and answers the stored result with the
//! original `PAYMENT-RESPONSE`, or answers 202 with the current state. A payment header sent to a
//! contract that is no longer `offered` is never looked at.
//!
//! The flow runs on its own task: a client that hangs up, or the request timeout, cannot stop
//! it between "worker called" and "outcome recorded".

use std::{str::FromStr, time::Duration};

use alloy::primitives::U256;
use axum::body::Bytes;
use axum::http::StatusCode;
use chrono::Utc;
use hiregate_contracts::{
    canonical::{Digest, to_canonical_vec},
    deliverable::Deliverable,
    id::AttemptId,
    state::{ContractEvent, ContractState},
    terms::ContractTerms,
    verify::{VerificationRequest, VerificationStatus},
};
use hiregate_payments::{
    PaymentPayload, Reason, SettleRequest, SettleResponse, VerifyRequest, decode_header, precheck,
};
use serde_json::{Value, json};

use super::{
    HireService,
    evidence::{self, FetchedEvidence},
    offer::{AuthorizationWindow, SIGNING_SLACK_S, StoredOffer},
    reply::Reply,
};
use crate::{
    adapters::{ForwardRequest, WorkerAnswer, secrets::SeekerSecrets},
    error::ApiError,
    ids::{PrincipalId, WorkerId},
    store::{
        AttemptEnd, ContractRecord, NewAttempt, NewContractEvent, NewDeliverable, NewPayment,
        NewVerification, PayOutcome, PaymentRecord, SettlementOutcome, StartAttempt, Store,
        StoreError, Transition,
    },
};

/// Steps one execute may take (pay, forward, settle, answer) before it must have answered.
const MAX_STEPS: usize = 8;

/// An execute call, after authentication.
#[derive(Clone)]
pub struct ExecuteRequest {
    /// The contract (`ctr_…`), from the path or `X-Contract-ID`.
    pub contract_id: String,
    /// The authenticated seeker.
    pub seeker: PrincipalId,
    /// The raw body: empty, or the contract's input.
    pub body: Bytes,
    /// `PAYMENT-SIGNATURE`, if sent.
    pub payment_signature: Option<String>,
    /// The request id, recorded with every event.
    pub correlation_id: String,
    /// `X-Hiregate-Secrets`, parsed: passed to this execute's forward only, never stored.
    pub secrets: Option<SeekerSecrets>,
}

impl std::fmt::Debug for ExecuteRequest {
    // PAYMENT-SIGNATURE is a bearer instrument until settled: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecuteRequest")
            .field("contract_id", &self.contract_id)
            .field("seeker", &self.seeker)
            .field("body_bytes", &self.body.len())
            .field(
                "payment_signature",
                &self.payment_signature.as_ref().map(|_| "[REDACTED]"),
            )
            .field("correlation_id", &self.correlation_id)
            .field("secrets", &self.secrets)
            .finish()
    }
}

/// What a step did: answered, or changed the state so the next step must look again.
pub(super) enum Step {
    Done(Reply),
    Again,
}

/// What every step of one execute needs.
pub(super) struct Ctx {
    pub(super) contract_id: String,
    pub(super) worker_id: WorkerId,
    pub(super) terms: ContractTerms,
    offer: StoredOffer,
    pub(super) contract_token: String,
    pub(super) correlation_id: String,
    /// Who drives this execution: `seeker:<id>`, or `gateway` for the sweep.
    actor: String,
    /// The seeker's secrets of this execute call; background work has none.
    secrets: Option<SeekerSecrets>,
}

impl Ctx {
    pub(super) fn of(
        contract: &ContractRecord,
        correlation_id: String,
        actor: String,
    ) -> Result<Self, Reply> {
        let terms: ContractTerms = serde_json::from_value(contract.terms.clone())
            .map_err(|e| internal(format!("stored terms do not parse: {e}")))?;
        let offer: StoredOffer = contract
            .payment_offer
            .clone()
            .and_then(|v| serde_json::from_value(v).ok())
            .ok_or_else(|| internal("stored contract has no usable payment offer"))?;
        Ok(Self {
            contract_id: contract.contract_id.clone(),
            worker_id: WorkerId::from_str(&contract.worker_id)
                .map_err(|e| internal(format!("stored worker id: {e}")))?,
            terms,
            offer,
            contract_token: contract.gateway_jws.clone(),
            correlation_id,
            actor,
            secrets: None,
        })
    }
}

/// An accepted contract may settle once its acceptance window is over (at once when it has
/// none). `deadline_at` holds the window's end.
fn acceptance_window_over(ctx: &Ctx, contract: &ContractRecord) -> bool {
    ctx.terms.acceptance_window_s() == 0
        || contract.deadline_at.is_some_and(|end| end <= Utc::now())
}

impl From<StoreError> for Reply {
    fn from(error: StoreError) -> Self {
        Reply::from(ApiError::Store(error))
    }
}

pub(super) fn internal(message: impl Into<String>) -> Reply {
    Reply::from(ApiError::internal(anyhow::anyhow!(message.into())))
}

impl HireService {
    /// Run an execute call to its answer.
    pub async fn execute(&self, request: ExecuteRequest) -> Reply {
        let service = self.clone();
        match tokio::spawn(async move { service.execute_detached(request).await }).await {
            Ok(reply) => reply,
            Err(error) => internal(format!("execute task ended abnormally: {error}")),
        }
    }

    async fn execute_detached(&self, request: ExecuteRequest) -> Reply {
        match self.execute_checked(request).await {
            Ok(reply) | Err(reply) => reply,
        }
    }

    async fn execute_checked(&self, request: ExecuteRequest) -> Result<Reply, Reply> {
        let store = &self.inner.store;
        let not_found = || {
            Reply::from(ApiError::NotFound {
                resource: "contract",
            })
        };
        let contract = store
            .get_contract(&request.contract_id)
            .await?
            .ok_or_else(not_found)?;
        if contract.seeker_id != request.seeker.as_str() {
            return Err(not_found());
        }
        let mut ctx = Ctx::of(
            &contract,
            request.correlation_id.clone(),
            format!("seeker:{}", request.seeker),
        )?;
        ctx.secrets = request.secrets;
        check_body(&ctx.terms, &request.body)?;

        let lock = self.inner.locks.lock_of(&ctx.contract_id);
        let wait = self.inner.config.contracts.duplicate_wait();
        let Ok(_guard) = tokio::time::timeout(wait, lock.lock_owned()).await else {
            let current = store
                .get_contract(&ctx.contract_id)
                .await?
                .ok_or_else(not_found)?;
            return Ok(self.in_progress(&ctx, &current.state));
        };

        self.drive(&ctx, request.payment_signature.as_deref()).await
    }

    /// Take the contract through every step it can take now (pay, forward, settle) until one
    /// answers. Callers hold the contract's lock. Shared by execute and the background work
    /// (pending completions, automatic retries of pending work), which passes no payment.
    pub(super) async fn drive(
        &self,
        ctx: &Ctx,
        payment_signature: Option<&str>,
    ) -> Result<Reply, Reply> {
        let store = &self.inner.store;
        let not_found = || {
            Reply::from(ApiError::NotFound {
                resource: "contract",
            })
        };
        for _ in 0..MAX_STEPS {
            let contract = store
                .get_contract(&ctx.contract_id)
                .await?
                .ok_or_else(not_found)?;
            let state = ContractState::from_str(&contract.state)
                .map_err(|e| internal(format!("stored state: {e}")))?;
            let step = match state {
                ContractState::Offered => self.offered(ctx, payment_signature).await?,
                ContractState::Paid => self.forward(ctx).await?,
                ContractState::Accepted if acceptance_window_over(ctx, &contract) => {
                    self.settle(ctx, ContractState::Accepted).await?
                }
                ContractState::SettlementUnknown => {
                    self.settle(ctx, ContractState::SettlementUnknown).await?
                }
                other => Step::Done(self.stored_answer(ctx, &contract, other).await?),
            };
            if let Step::Done(reply) = step {
                return Ok(reply);
            }
        }
        Err(internal(
            "the contract's state kept changing under this execute",
        ))
    }

    /// Settle `contract` if it is due (acceptance window over, or a settlement outcome to
    /// reconcile), under its lock; skipped when an execute holds the lock. Returns the state
    /// it is in afterwards.
    pub(super) async fn settle_if_due(
        &self,
        contract: &ContractRecord,
        correlation_id: String,
    ) -> Result<Option<String>, Reply> {
        let lock = self.inner.locks.lock_of(&contract.contract_id);
        let Ok(_guard) = lock.try_lock_owned() else {
            return Ok(None);
        };
        let Some(current) = self.inner.store.get_contract(&contract.contract_id).await? else {
            return Ok(None);
        };
        let ctx = Ctx::of(&current, correlation_id, "gateway".to_owned())?;
        let from = match current.state.as_str() {
            "accepted" if acceptance_window_over(&ctx, &current) => ContractState::Accepted,
            "settlement_unknown" => ContractState::SettlementUnknown,
            _ => return Ok(None),
        };
        self.settle(&ctx, from).await?;
        let after = self.inner.store.get_contract(&ctx.contract_id).await?;
        Ok(after.map(|c| c.state))
    }

    /// The answer for a contract whose state needs no action from this execute.
    async fn stored_answer(
        &self,
        ctx: &Ctx,
        contract: &ContractRecord,
        state: ContractState,
    ) -> Result<Reply, Reply> {
        let store = &self.inner.store;
        let id = ctx.contract_id.as_str();
        Ok(match state {
            ContractState::Settled | ContractState::Accepted => {
                let body = self.result_body(ctx, contract).await?;
                let reply = Reply::json(StatusCode::OK, body);
                let settlement = store
                    .payment_of_contract(id)
                    .await?
                    .and_then(|p| p.settle_response)
                    .and_then(|r| serde_json::from_value::<SettleResponse>(r).ok());
                match settlement {
                    Some(settlement) if state == ContractState::Settled => {
                        reply.with_payment_response(&settlement)
                    }
                    _ => reply,
                }
            }
            ContractState::Rejected | ContractState::Voided => {
                let verification = store.latest_verification(id).await?;
                Reply::error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "verification_failed",
                    "the deliverable did not pass the contract's verification policy; nothing \
                     was settled",
                    json!({
                        "contract_id": id,
                        "state": contract.state,
                        "verification": verification.map(|v| v.result),
                    }),
                )
            }
            ContractState::SettlementFailed => {
                let settlement = store
                    .payment_of_contract(id)
                    .await?
                    .and_then(|p| p.settle_response)
                    .and_then(|r| serde_json::from_value::<SettleResponse>(r).ok());
                let reason = settlement
                    .as_ref()
                    .and_then(|s| s.error_reason.as_ref())
                    .map(|r| r.as_str().to_owned());
                let reply = Reply::error(
                    StatusCode::PAYMENT_REQUIRED,
                    "settlement_failed",
                    "the facilitator refused to settle the payment; the deliverable is withheld",
                    json!({"contract_id": id, "state": contract.state, "reason": reason}),
                );
                match settlement {
                    Some(settlement) => reply.with_payment_response(&settlement),
                    None => reply,
                }
            }
            ContractState::Failed => {
                let attempts = store.list_attempts(id).await?;
                let last = attempts.last();
                Reply::error(
                    StatusCode::BAD_GATEWAY,
                    "worker_failed",
                    "the worker failed every attempt the contract allows; the payment was voided \
                     and nothing was settled",
                    json!({
                        "contract_id": id,
                        "state": contract.state,
                        "attempts_used": contract.attempts_used,
                        "retry_allowed": false,
                        "last_error": last.and_then(|a| a.error.clone()),
                    }),
                )
            }
            ContractState::Expired => Reply::from(ApiError::Gone {
                code: "contract_expired",
                message: "the contract's offer or payment authorization expired; propose a new \
                          contract"
                    .to_owned(),
            }),
            ContractState::Cancelled => Reply::from(ApiError::Conflict {
                code: "contract_cancelled",
                message: "the contract was cancelled".to_owned(),
            }),
            _ => self.in_progress(ctx, &contract.state),
        })
    }

    pub(super) fn in_progress(&self, ctx: &Ctx, state: &str) -> Reply {
        let id = ctx.contract_id.as_str();
        Reply::json(
            StatusCode::ACCEPTED,
            json!({
                "contract_id": id,
                "state": state,
                "status": if state == "pending" { "pending" } else { "in_progress" },
                "message": "the contract is being worked on; poll it or follow its events",
                "poll_url": self.contract_url(id),
                "events_url": self.events_url(id),
            }),
        )
        .retry_after(1)
    }

    /// The 200 body: the deliverable, its verification and the settlement.
    async fn result_body(&self, ctx: &Ctx, contract: &ContractRecord) -> Result<Value, Reply> {
        let store = &self.inner.store;
        let id = ctx.contract_id.as_str();
        let delivery = stored_delivery(store, id).await?;
        let verification = store.latest_verification(id).await?;
        let payment = store.payment_of_contract(id).await?;
        let settlement = match contract.state.as_str() {
            "settled" => {
                let response = payment.as_ref().and_then(|p| p.settle_response.clone());
                json!({
                    "status": "settled",
                    "transaction": payment.as_ref().and_then(|p| p.settle_tx.clone()),
                    "response": response,
                })
            }
            _ => json!({
                "status": "deferred",
                "settle_after": contract.deadline_at,
                "message": "settlement waits until the acceptance window ends",
            }),
        };
        Ok(json!({
            "contract_id": id,
            "state": contract.state,
            "deliverable": delivery.as_ref().map(|d| d["content"].clone()),
            "deliverable_digest": delivery.as_ref().map(|d| d["digest"].clone()),
            "verification": verification.map(|v| v.result),
            "settlement": settlement,
        }))
    }

    pub(super) fn event(
        &self,
        ctx: &Ctx,
        actor: &str,
        kind: &str,
        details: Value,
    ) -> NewContractEvent {
        NewContractEvent {
            at: Utc::now(),
            actor: actor.to_owned(),
            correlation_id: ctx.correlation_id.clone(),
            kind: kind.to_owned(),
            details,
        }
    }

    /// Apply `event` (checked against the lifecycle) with a compare-and-set from `from`.
    /// `Ok(false)` when the contract was not in `from` any more.
    pub(super) async fn transition(
        &self,
        ctx: &Ctx,
        from: ContractState,
        event: &ContractEvent,
        actor: &str,
        details: Value,
        deadline: Option<chrono::DateTime<Utc>>,
    ) -> Result<bool, Reply> {
        let to = from
            .transition(event)
            .map_err(|e| internal(e.to_string()))?;
        let record = self.event(ctx, actor, event.name(), details);
        match self
            .inner
            .store
            .transition_contract(
                &ctx.contract_id,
                from.as_str(),
                to.as_str(),
                deadline,
                &record,
            )
            .await?
        {
            Transition::Applied { .. } => Ok(true),
            Transition::StateMismatch { .. } => Ok(false),
            Transition::NotFound => Err(Reply::from(ApiError::NotFound {
                resource: "contract",
            })),
        }
    }

    // ---------------------------------------------------------------------------------------
    // offered: the 402 challenge and the payment

    async fn offered(&self, ctx: &Ctx, payment_signature: Option<&str>) -> Result<Step, Reply> {
        if ctx.terms.offer_expired(Utc::now().into()) {
            self.transition(
                ctx,
                ContractState::Offered,
                &ContractEvent::OfferExpired,
                "gateway",
                json!({"offer_expires_at": ctx.terms.offer_expires_at()}),
                None,
            )
            .await?;
            return Ok(Step::Again);
        }
        let Some(header) = payment_signature else {
            return Ok(Step::Done(Reply::payment_required(
                &ctx.offer,
                "payment_required",
                "this contract must be paid: send PAYMENT-SIGNATURE as PAYMENT-REQUIRED describes",
                None,
                json!({"contract_id": ctx.contract_id}),
            )));
        };
        self.accept_payment(ctx, header).await
    }

    fn refuse_payment(ctx: &Ctx, reason: &str, message: String, mut details: Value) -> Reply {
        if let Some(object) = details.as_object_mut() {
            object.insert("contract_id".into(), json!(ctx.contract_id));
        }
        Reply::payment_required(
            &ctx.offer,
            "payment_invalid",
            message,
            Some(reason),
            details,
        )
    }

    async fn accept_payment(&self, ctx: &Ctx, header: &str) -> Result<Step, Reply> {
        let inner = &self.inner;
        let payload: PaymentPayload = decode_header(header).map_err(|error| {
            Reply::from(ApiError::BadRequest {
                code: "invalid_payment_signature",
                message: format!("PAYMENT-SIGNATURE cannot be read: {error}"),
            })
        })?;
        let requirements = ctx
            .offer
            .requirements()
            .ok_or_else(|| internal("stored offer has no requirements"))?;
        let mismatched = requirements.mismatched_fields(&payload.accepted);
        if !mismatched.is_empty() {
            let fields: Vec<String> = mismatched.iter().map(|f| format!("accepted.{f}")).collect();
            let names = fields.join(", ");
            return Ok(Step::Done(Reply::payment_required(
                &ctx.offer,
                "payment_mismatch",
                format!("the payment's {names} does not match this contract's offer"),
                Some(&format!("accepted_requirements_mismatch: {names}")),
                json!({"contract_id": ctx.contract_id, "fields": fields}),
            )));
        }
        let identifier = payload.payment_identifier().map_err(|error| {
            Reply::from(ApiError::BadRequest {
                code: "invalid_payment_identifier",
                message: format!("payment-identifier extension: {error}"),
            })
        })?;
        let payload_json = serde_json::to_value(&payload)
            .map_err(|e| internal(format!("payment payload: {e}")))?;
        let payload_hash = Digest::of_canonical(&payload_json)
            .map_err(|e| internal(format!("payment payload: {e}")))?
            .to_string();
        if let Some(id) = &identifier
            && let Some(existing) = inner.store.find_payment_by_identifier(id.as_str()).await?
        {
            return self.known_payment(ctx, &existing, &payload_hash, true);
        }
        let key = match payload.payment_key() {
            Ok(key) => key,
            Err(reason) => {
                return Ok(Step::Done(Self::refuse_payment(
                    ctx,
                    reason.as_str(),
                    "the payment payload is not an EIP-3009 exact payment".to_owned(),
                    json!({}),
                )));
            }
        };
        let key = StoredKey::of(&key);
        if let Some(existing) = inner
            .store
            .find_payment_by_authorization(&key.network, &key.asset, &key.payer, &key.nonce)
            .await?
        {
            return self.known_payment(ctx, &existing, &payload_hash, false);
        }
        let now = u64::try_from(Utc::now().timestamp()).unwrap_or(0);
        if let Err(reason) = precheck(&payload, requirements, now) {
            return Ok(Step::Done(Self::refuse_payment(
                ctx,
                reason.as_str(),
                format!("the payment was refused: {}", reason.as_str()),
                json!({}),
            )));
        }
        let exact = payload
            .exact_evm()
            .map_err(|r| internal(r.as_str().to_owned()))?;
        let authorization = &exact.authorization;
        let earliest_valid_before = now
            .saturating_add(requirements.max_timeout_seconds)
            .saturating_sub(SIGNING_SLACK_S);
        if authorization.valid_before.get() < U256::from(earliest_valid_before) {
            return Ok(Step::Done(Self::refuse_payment(
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
        // Before verifying: a busy worker should not make the seeker hold a paid contract.
        let listing = inner
            .store
            .get_worker(&ctx.worker_id)
            .await?
            .ok_or_else(|| internal("the contract's worker listing is gone"))?;
        let in_flight = inner.store.in_flight_count(ctx.worker_id.as_str()).await?;
        if in_flight >= listing.max_parallel.get() {
            return Ok(Step::Done(worker_busy(in_flight)));
        }
        let Some(facilitator) = &inner.facilitator else {
            return Ok(Step::Done(facilitator_unavailable(
                "no facilitator is configured",
            )));
        };
        let verdict = match facilitator
            .verify(&VerifyRequest::new(payload.clone(), requirements.clone()))
            .await
        {
            Ok(verdict) => verdict,
            Err(error) => {
                tracing::warn!(contract_id = %ctx.contract_id, error = %error, "facilitator /verify outcome unknown");
                return Ok(Step::Done(facilitator_unavailable(&error.to_string())));
            }
        };
        if !verdict.is_valid {
            let reason = verdict
                .invalid_reason
                .as_ref()
                .map_or("invalid_payment", |r| r.as_str())
                .to_owned();
            return Ok(Step::Done(Self::refuse_payment(
                ctx,
                &reason,
                format!("the facilitator refused the payment: {reason}"),
                json!({"facilitator_message": verdict.invalid_message}),
            )));
        }
        let payment = NewPayment {
            payment_id: format!("pay_{}", ulid::Ulid::new()),
            contract_id: ctx.contract_id.clone(),
            network: key.network.clone(),
            asset: key.asset.clone(),
            payer: key.payer.clone(),
            nonce: key.nonce.clone(),
            amount: authorization.value.to_string(),
            valid_after: to_i64(authorization.valid_after.get()),
            valid_before: to_i64(authorization.valid_before.get()),
            payload: payload_json,
            payload_hash: payload_hash.clone(),
            payment_identifier: identifier.as_ref().map(|id| id.as_str().to_owned()),
            state: "verified".to_owned(),
            created_at: Utc::now(),
        };
        let event = self.event(
            ctx,
            &ctx.actor,
            ContractEvent::PaymentVerified.name(),
            json!({
                "payment_id": payment.payment_id,
                "network": payment.network,
                "asset": payment.asset,
                "payer": payment.payer,
                "amount": payment.amount,
                "valid_before": payment.valid_before,
                "payment_identifier": payment.payment_identifier,
            }),
        );
        match inner.store.pay_contract(&payment, &event).await? {
            PayOutcome::Paid { .. } => {
                tracing::info!(contract_id = %ctx.contract_id, payment_id = %payment.payment_id, payer = %payment.payer, "contract paid");
                Ok(Step::Again)
            }
            PayOutcome::DuplicatePayment => {
                // A concurrent request stored this authorization (or identifier) first.
                if let Some(id) = &identifier
                    && let Some(existing) =
                        inner.store.find_payment_by_identifier(id.as_str()).await?
                {
                    return self.known_payment(ctx, &existing, &payload_hash, true);
                }
                match inner
                    .store
                    .find_payment_by_authorization(&key.network, &key.asset, &key.payer, &key.nonce)
                    .await?
                {
                    Some(existing) => self.known_payment(ctx, &existing, &payload_hash, false),
                    None => Ok(Step::Again),
                }
            }
            // Another payment won the race; this one was not stored and is never settled.
            PayOutcome::StateMismatch { .. } => Ok(Step::Again),
            PayOutcome::NotFound => Err(Reply::from(ApiError::NotFound {
                resource: "contract",
            })),
        }
    }

    /// A payment that is already stored: this contract's own (answer by state), another
    /// contract's (refused), or a payment identifier reused for another payload (409).
    fn known_payment(
        &self,
        ctx: &Ctx,
        existing: &PaymentRecord,
        payload_hash: &str,
        by_identifier: bool,
    ) -> Result<Step, Reply> {
        if by_identifier && existing.payload_hash != payload_hash {
            return Err(Reply::from(ApiError::Conflict {
                code: "payment_identifier_conflict",
                message: "this payment identifier was already used with a different payment"
                    .to_owned(),
            }));
        }
        if existing.contract_id != ctx.contract_id {
            return Err(Reply::from(ApiError::Conflict {
                code: "payment_already_used",
                message: "this payment authorization already paid another contract".to_owned(),
            }));
        }
        Ok(Step::Again)
    }

    // ---------------------------------------------------------------------------------------
    // paid: forward to the worker

    async fn forward(&self, ctx: &Ctx) -> Result<Step, Reply> {
        let inner = &self.inner;
        let settings = &inner.config.contracts;
        let payment = inner
            .store
            .payment_of_contract(&ctx.contract_id)
            .await?
            .ok_or_else(|| internal("a paid contract has no payment"))?;
        let needed = AuthorizationWindow::needed_for_one_attempt(&ctx.terms, settings);
        let now_s = Utc::now().timestamp();
        if payment.valid_before < now_s.saturating_add(i64::try_from(needed).unwrap_or(i64::MAX)) {
            // Too late to work, judge and settle before validBefore: release it instead.
            if self
                .transition(
                    ctx,
                    ContractState::Paid,
                    &ContractEvent::AuthorizationExpired,
                    "gateway",
                    json!({"valid_before": payment.valid_before, "needed_s": needed}),
                    None,
                )
                .await?
            {
                self.record_void(ctx, &payment, "authorization_expiring")
                    .await?;
            }
            return Ok(Step::Again);
        }
        let listing = inner
            .store
            .get_worker(&ctx.worker_id)
            .await?
            .ok_or_else(|| internal("the contract's worker listing is gone"))?;
        let Some(adapter) = inner.adapters.get(listing.protocol).cloned() else {
            return Ok(Step::Done(Reply::from(ApiError::ProtocolNotSupported(
                format!("no adapter for protocol `{}`", listing.protocol.as_str()),
            ))));
        };
        let attempt_id = AttemptId::generate().to_string();
        let started = inner
            .store
            .start_attempt(
                &ctx.contract_id,
                ctx.worker_id.as_str(),
                listing.max_parallel.get(),
                &NewAttempt {
                    attempt_id: attempt_id.clone(),
                    payment_id: payment.payment_id.clone(),
                    started_at: Utc::now(),
                },
                &self.event(
                    ctx,
                    "gateway",
                    ContractEvent::Forwarded.name(),
                    json!({"attempt_id": attempt_id, "worker_id": listing.id}),
                ),
            )
            .await?;
        let attempt_no = match started {
            StartAttempt::Started { attempt_no } => attempt_no,
            StartAttempt::WorkerBusy { in_flight } => {
                return Ok(Step::Done(worker_busy(in_flight)));
            }
            StartAttempt::StateMismatch { .. } => return Ok(Step::Again),
            StartAttempt::NotFound => {
                return Err(Reply::from(ApiError::NotFound {
                    resource: "contract",
                }));
            }
        };
        tracing::info!(contract_id = %ctx.contract_id, attempt_no, worker_id = %listing.id, "forwarding to worker");
        let timeout = Duration::from_millis(ctx.terms.sla().max_latency_ms());
        let relay = super::relay::ContractEventRelay::new(
            inner.store.clone(),
            &ctx.contract_id,
            &ctx.correlation_id,
            format!("worker:{}", listing.id),
        );
        let answer = adapter
            .execute(
                &inner.outbound,
                &ForwardRequest {
                    endpoint: &listing.endpoint,
                    contract_id: &ctx.contract_id,
                    attempt: attempt_no,
                    contract_token: &ctx.contract_token,
                    task_type: ctx.terms.task().task_type().as_str(),
                    input: ctx.terms.task().input(),
                    output_schemas: ctx.terms.task().output_schemas(),
                    protocol_options: &listing.protocol_options,
                    events: &relay,
                    timeout,
                    secrets: ctx.secrets.as_ref(),
                },
            )
            .await;
        let worker_actor = format!("worker:{}", listing.id);
        match answer {
            WorkerAnswer::Delivered {
                deliverable,
                http_status,
            } => {
                self.delivered(
                    ctx,
                    ContractState::Executing,
                    &attempt_id,
                    attempt_no,
                    &worker_actor,
                    deliverable,
                    http_status,
                )
                .await
            }
            WorkerAnswer::Pending {
                task_id,
                poll_url,
                http_status,
            } => {
                inner
                    .store
                    .finish_attempt(
                        &attempt_id,
                        &AttemptEnd {
                            state: "pending".to_owned(),
                            http_status: Some(http_status),
                            error: None,
                            worker_task_id: task_id.clone(),
                            poll_url: poll_url.as_ref().map(|u| u.to_string()),
                            finished_at: None,
                        },
                    )
                    .await?;
                // Polling `poll_url` (a durable job, see `pending`) and the worker's signed
                // callback move the contract from `pending` to `delivered`; until then executes
                // answer 202.
                if self
                    .transition(
                        ctx,
                        ContractState::Executing,
                        &ContractEvent::WorkerPending,
                        &worker_actor,
                        json!({"attempt_no": attempt_no, "worker_task_id": task_id,
                               "poll_url": poll_url.as_ref().map(url::Url::as_str)}),
                        None,
                    )
                    .await?
                {
                    self.watch_pending(ctx, &attempt_id).await?;
                }
                Ok(Step::Done(self.in_progress(ctx, "pending")))
            }
            WorkerAnswer::TimedOut => {
                self.attempt_failed(
                    ctx,
                    ContractState::Executing,
                    &attempt_id,
                    attempt_no,
                    &payment,
                    &worker_actor,
                    None,
                    sla_exceeded_error(ctx),
                    true,
                )
                .await
            }
            WorkerAnswer::Failed {
                kind,
                http_status,
                code,
                message,
                details,
            } => {
                self.attempt_failed(
                    ctx,
                    ContractState::Executing,
                    &attempt_id,
                    attempt_no,
                    &payment,
                    &worker_actor,
                    http_status,
                    json!({"kind": kind.as_str(), "code": code, "message": message, "details": details}),
                    false,
                )
                .await
            }
        }
    }

    /// Record a failed attempt (`from` = `executing` or `pending`): back to `paid` when the
    /// retry policy allows another attempt under the same payment, else `failed` with the
    /// authorization voided.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempt_failed(
        &self,
        ctx: &Ctx,
        from: ContractState,
        attempt_id: &str,
        attempt_no: u32,
        payment: &PaymentRecord,
        worker_actor: &str,
        http_status: Option<u16>,
        error: Value,
        timed_out: bool,
    ) -> Result<Step, Reply> {
        let retry_policy = ctx.terms.retry_policy();
        let retry_allowed = retry_policy.allows_retry_after(attempt_no);
        self.inner
            .store
            .finish_attempt(
                attempt_id,
                &AttemptEnd {
                    state: if timed_out { "timed_out" } else { "failed" }.to_owned(),
                    http_status,
                    error: Some(error.clone()),
                    worker_task_id: None,
                    poll_url: None,
                    finished_at: Some(Utc::now()),
                },
            )
            .await?;
        let event = ContractEvent::WorkerFailed {
            attempts_made: attempt_no,
            retry_policy,
        };
        let applied = self
            .transition(
                ctx,
                from,
                &event,
                worker_actor,
                json!({"attempt_no": attempt_no, "error": error, "retry_allowed": retry_allowed}),
                None,
            )
            .await?;
        if applied && !retry_allowed {
            self.record_void(ctx, payment, "retries_exhausted").await?;
        }
        tracing::info!(contract_id = %ctx.contract_id, attempt_no, retry_allowed, timed_out, "worker attempt failed");
        let (status, code, message) = if timed_out {
            (
                StatusCode::GATEWAY_TIMEOUT,
                "worker_timeout",
                "the worker did not answer within the contract's SLA",
            )
        } else {
            (
                StatusCode::BAD_GATEWAY,
                "worker_failed",
                "the worker failed this attempt",
            )
        };
        let max_attempts = retry_policy.max_attempts();
        Ok(Step::Done(Reply::error(
            status,
            code,
            if retry_allowed {
                format!("{message}; execute again to retry under the same payment")
            } else {
                format!(
                    "{message}; no attempts are left, the payment was voided and nothing was settled"
                )
            },
            json!({
                "contract_id": ctx.contract_id,
                "state": if retry_allowed { "paid" } else { "failed" },
                "attempt": attempt_no,
                "max_attempts": max_attempts,
                "attempts_left": max_attempts.saturating_sub(attempt_no),
                "retry_allowed": retry_allowed,
                "worker_error": error,
            }),
        )))
    }

    /// Mark the held authorization as released (never to be settled) and log it.
    pub(super) async fn record_void(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        reason: &str,
    ) -> Result<(), Reply> {
        let store = &self.inner.store;
        store
            .set_payment_state(&payment.payment_id, "voided", Utc::now())
            .await?;
        store
            .append_contract_event(
                &ctx.contract_id,
                &self.event(
                    ctx,
                    "gateway",
                    "payment_voided",
                    json!({"payment_id": payment.payment_id, "reason": reason}),
                ),
            )
            .await?;
        Ok(())
    }

    /// The one "finish delivery" path, for sync answers, polls and callbacks alike: store the
    /// deliverable, close the attempt, move `from` (`executing` or `pending`) to `delivered`
    /// with a compare-and-set, and verify. Whoever loses the compare-and-set (a poll racing a
    /// callback, another instance) gets `Step::Again` and judges nothing.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn delivered(
        &self,
        ctx: &Ctx,
        from: ContractState,
        attempt_id: &str,
        attempt_no: u32,
        worker_actor: &str,
        deliverable: Deliverable,
        http_status: u16,
    ) -> Result<Step, Reply> {
        let inner = &self.inner;
        let store = &inner.store;
        let digest = deliverable
            .digest()
            .map_err(|e| internal(format!("deliverable digest: {e}")))?;
        let bytes =
            to_canonical_vec(&deliverable).map_err(|e| internal(format!("deliverable: {e}")))?;
        let now = Utc::now();
        let stored = store
            .insert_deliverables(&[NewDeliverable {
                deliverable_id: format!("dlv_{}", ulid::Ulid::new()),
                contract_id: ctx.contract_id.clone(),
                attempt_id: attempt_id.to_owned(),
                position: 0,
                name: None,
                kind: "deliverable".to_owned(),
                media_type: Some("application/json".to_owned()),
                digest: digest.to_string(),
                content: bytes,
                source_url: None,
                created_at: now,
            }])
            .await;
        match stored {
            // Already stored: a concurrent report of the same attempt (poll and callback), or
            // this report redone after a crash. The compare-and-set below picks the winner.
            Ok(()) | Err(StoreError::Duplicate { .. }) => {}
            Err(other) => return Err(other.into()),
        }
        store
            .finish_attempt(
                attempt_id,
                &AttemptEnd {
                    state: "completed".to_owned(),
                    http_status: Some(http_status),
                    error: None,
                    worker_task_id: None,
                    poll_url: None,
                    finished_at: Some(now),
                },
            )
            .await?;
        if !self
            .transition(
                ctx,
                from,
                &ContractEvent::DeliverableReceived,
                worker_actor,
                json!({"attempt_no": attempt_no, "deliverable_digest": digest}),
                None,
            )
            .await?
        {
            return Ok(Step::Again);
        }
        self.verify_delivery(ctx, attempt_id, &deliverable, digest)
            .await
    }

    async fn verify_delivery(
        &self,
        ctx: &Ctx,
        attempt_id: &str,
        deliverable: &Deliverable,
        digest: Digest,
    ) -> Result<Step, Reply> {
        let inner = &self.inner;
        let policy = ctx.terms.verification();
        if !self
            .transition(
                ctx,
                ContractState::Delivered,
                &ContractEvent::VerificationStarted,
                "gateway",
                json!({"policy_id": policy.policy_id(), "policy_hash": policy.policy_hash()}),
                None,
            )
            .await?
        {
            return Ok(Step::Again);
        }
        let requests = deliverable.evidence_requests();
        let (evidence, fetched) = evidence::fetch_all(
            &inner.outbound,
            &requests,
            Duration::from_secs(inner.config.contracts.verification_budget_s.max(1)),
            inner.config.outbound.max_response_bytes,
        )
        .await;
        if !fetched.is_empty() {
            inner
                .store
                .insert_deliverables(&evidence_pieces(ctx, attempt_id, &fetched))
                .await?;
        }
        let candidate_id = digest.to_string();
        // vp.crosscheck.v1 quorums: the named verifier workers vote (fail-closed), bounded by
        // half the verification budget (the other half is for evidence fetches).
        let votes = super::crosscheck::collect_votes(
            &inner.store,
            &inner.outbound,
            &super::crosscheck::VoteRequest {
                candidate_id: &candidate_id,
                execution_id: attempt_id,
                deliverable,
                output_schemas: ctx.terms.task().output_schemas(),
                policy,
                timeout: Duration::from_millis(
                    inner.config.contracts.verification_budget_s.max(1) * 500,
                ),
            },
        )
        .await;
        let result = inner
            .verifier
            .verify(&VerificationRequest {
                candidate_id: &candidate_id,
                execution_id: attempt_id,
                deliverable,
                output_schemas: ctx.terms.task().output_schemas(),
                policy,
                evidence: &evidence,
                votes: votes.as_ref(),
            })
            .map_err(|e| internal(format!("verification could not run: {e}")))?;
        let mut result_json =
            serde_json::to_value(&result).map_err(|e| internal(format!("verification: {e}")))?;
        // Each vote with its verifier_result_hash, for the audit trail and dispute replay.
        if let (Some(votes), Some(object)) = (&votes, result_json.as_object_mut()) {
            object.insert(
                "votes".to_owned(),
                serde_json::to_value(votes).map_err(|e| internal(format!("votes: {e}")))?,
            );
        }
        inner
            .store
            .insert_verification(&NewVerification {
                verification_id: format!("vrf_{}", ulid::Ulid::new()),
                contract_id: ctx.contract_id.clone(),
                attempt_id: attempt_id.to_owned(),
                policy_id: policy.policy_id().as_str().to_owned(),
                policy_version: policy.policy_version().to_owned(),
                policy_hash: policy.policy_hash().to_string(),
                passed: result.passed,
                score: result.score,
                reason_codes: result.reason_codes.clone(),
                status: status_name(result.verification_status).to_owned(),
                verifier_result_hash: result.verifier_result_hash.to_string(),
                result: result_json,
                created_at: Utc::now(),
            })
            .await?;
        let event = match result.verification_status {
            VerificationStatus::Passed => ContractEvent::VerificationPassed,
            VerificationStatus::Failed => ContractEvent::VerificationFailed,
            VerificationStatus::Inconclusive => ContractEvent::VerificationInconclusive,
        };
        let window = ctx.terms.acceptance_window_s();
        let deadline = (result.passed && window > 0).then(|| {
            Utc::now() + chrono::Duration::seconds(i64::try_from(window).unwrap_or(i64::MAX))
        });
        self.transition(
            ctx,
            ContractState::Verifying,
            &event,
            "gateway",
            json!({
                "passed": result.passed,
                "score": result.score,
                "reason_codes": result.reason_codes,
                "verifier_result_hash": result.verifier_result_hash,
                "votes": super::crosscheck::vote_summaries(votes.as_ref()),
            }),
            deadline,
        )
        .await?;
        tracing::info!(contract_id = %ctx.contract_id, passed = result.passed, "deliverable verified");
        Ok(Step::Again)
    }

    // ---------------------------------------------------------------------------------------
    // accepted / settlement_unknown: settle

    pub(super) async fn settle(&self, ctx: &Ctx, from: ContractState) -> Result<Step, Reply> {
        let inner = &self.inner;
        let payment = inner
            .store
            .payment_of_contract(&ctx.contract_id)
            .await?
            .ok_or_else(|| internal("an accepted contract has no payment"))?;
        let event = match from {
            ContractState::SettlementUnknown => ContractEvent::SettlementRetried,
            // A dispute decided "settle" (by replay or the arbiter) settles with the same payment.
            ContractState::Disputed => ContractEvent::DisputeResolved {
                decision: hiregate_contracts::state::DisputeDecision::Settle,
            },
            _ => ContractEvent::AcceptanceWindowClosed,
        };
        // Persisted before /settle: whatever happens next, the contract says "settling".
        let record = self.event(
            ctx,
            "gateway",
            event.name(),
            json!({"payment_id": payment.payment_id}),
        );
        match inner
            .store
            .begin_settlement_of_contract(
                &ctx.contract_id,
                from.as_str(),
                &payment.payment_id,
                &record,
            )
            .await?
        {
            Transition::Applied { .. } => {}
            Transition::StateMismatch { .. } => return Ok(Step::Again),
            Transition::NotFound => {
                return Err(Reply::from(ApiError::NotFound {
                    resource: "contract",
                }));
            }
        }
        let requirements = ctx
            .offer
            .requirements()
            .ok_or_else(|| internal("stored offer has no requirements"))?
            .clone();
        let payload: PaymentPayload = serde_json::from_value(payment.payload.clone())
            .map_err(|e| internal(format!("stored payment payload: {e}")))?;
        let outcome = match &inner.facilitator {
            Some(facilitator) => facilitator
                .settle(&SettleRequest::new(payload, requirements))
                .await
                .map_err(|e| e.to_string()),
            None => Err("no facilitator is configured".to_owned()),
        };
        let (contract_state, kind, transaction, response, details) = match &outcome {
            Ok(settled) if settled.success => (
                ContractState::Settled,
                ContractEvent::SettlementSucceeded,
                Some(settled.transaction.clone()),
                Some(settled),
                json!({"transaction": settled.transaction, "network": settled.network, "payer": settled.payer}),
            ),
            Ok(pending) if pending.error_reason == Some(Reason::SettlementPending) => (
                ContractState::SettlementUnknown,
                ContractEvent::SettlementOutcomeUnknown,
                Some(pending.transaction.clone()).filter(|t| !t.is_empty()),
                Some(pending),
                json!({"reason": "settlement_pending", "transaction": pending.transaction}),
            ),
            Ok(refused) => (
                ContractState::SettlementFailed,
                ContractEvent::SettlementFailed,
                Some(refused.transaction.clone()).filter(|t| !t.is_empty()),
                Some(refused),
                json!({
                    "reason": refused.error_reason.as_ref().map(|r| r.as_str().to_owned()),
                    "message": refused.error_message,
                }),
            ),
            Err(error) => (
                ContractState::SettlementUnknown,
                ContractEvent::SettlementOutcomeUnknown,
                None,
                None,
                json!({"error": error}),
            ),
        };
        let record = self.event(ctx, "facilitator", kind.name(), details);
        inner
            .store
            .finish_settlement(
                &ctx.contract_id,
                &payment.payment_id,
                &SettlementOutcome {
                    contract_state: contract_state.as_str().to_owned(),
                    payment_state: contract_state.as_str().to_owned(),
                    transaction,
                    response: response.and_then(|r| serde_json::to_value(r).ok()),
                },
                &record,
            )
            .await?;
        tracing::info!(contract_id = %ctx.contract_id, outcome = contract_state.as_str(), "settlement");
        if contract_state == ContractState::SettlementUnknown {
            // Retrying right away would most likely meet the same trouble; the next execute
            // (or the reconcile sweep) retries /settle with the same payload.
            return Ok(Step::Done(self.in_progress(ctx, contract_state.as_str())));
        }
        Ok(Step::Again)
    }
}

/// An execute body must be empty or the contract's input (in any JSON spelling).
fn check_body(terms: &ContractTerms, body: &Bytes) -> Result<(), Reply> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Reply::from(ApiError::MalformedJson(e.to_string())))?;
    let same = terms
        .task()
        .matches_input(&value)
        .map_err(|e| internal(format!("input digest: {e}")))?;
    if !same {
        return Err(Reply::from(ApiError::Conflict {
            code: "input_mismatch",
            message: "the body is not this contract's input; send it unchanged or send no body"
                .to_owned(),
        }));
    }
    Ok(())
}

/// The error recorded for an attempt that outlived the contract's `sla.max_latency_ms`.
pub(super) fn sla_exceeded_error(ctx: &Ctx) -> Value {
    json!({
        "kind": "timeout",
        "code": "sla_exceeded",
        "message": format!("no result within the SLA of {} ms", ctx.terms.sla().max_latency_ms()),
    })
}

fn worker_busy(in_flight: u32) -> Reply {
    Reply::from(ApiError::TooManyRequests {
        message: format!(
            "the worker is at its max_parallel limit ({in_flight} contracts in flight); retry \
             shortly"
        ),
        retry_after_s: 1,
    })
}

fn facilitator_unavailable(why: &str) -> Reply {
    Reply::from(ApiError::Unavailable {
        code: "facilitator_unavailable",
        message: format!(
            "the payment could not be verified right now ({why}); nothing was executed or \
             charged, retry later"
        ),
        retry_after_s: 5,
    })
}

fn status_name(status: VerificationStatus) -> &'static str {
    match status {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

fn to_i64(value: U256) -> i64 {
    u64::try_from(value)
        .ok()
        .and_then(|v| i64::try_from(v).ok())
        .unwrap_or(i64::MAX)
}

fn evidence_pieces(
    ctx: &Ctx,
    attempt_id: &str,
    fetched: &[FetchedEvidence],
) -> Vec<NewDeliverable> {
    fetched
        .iter()
        .enumerate()
        .map(|(index, piece)| NewDeliverable {
            deliverable_id: format!("dlv_{}", ulid::Ulid::new()),
            contract_id: ctx.contract_id.clone(),
            attempt_id: attempt_id.to_owned(),
            position: u32::try_from(index + 1).unwrap_or(u32::MAX),
            name: None,
            kind: "evidence".to_owned(),
            media_type: piece.media_type.clone(),
            digest: piece.digest.to_string(),
            content: piece.bytes.clone(),
            source_url: Some(piece.url.to_string()),
            created_at: Utc::now(),
        })
        .collect()
}

/// The stored spelling of a payment key: CAIP-2 network, EIP-55 asset and payer, `0x` nonce.
struct StoredKey {
    network: String,
    asset: String,
    payer: String,
    nonce: String,
}

impl StoredKey {
    fn of(key: &hiregate_payments::PaymentKey) -> Self {
        Self {
            network: key.network.as_str().to_owned(),
            asset: key.asset.to_checksum(None),
            payer: key.payer.to_checksum(None),
            nonce: key.nonce.to_string(),
        }
    }
}

/// The latest delivery of a contract: `{digest, content, attempt_id, evidence: [...]}`.
pub async fn stored_delivery(
    store: &Store,
    contract_id: &str,
) -> Result<Option<Value>, StoreError> {
    let pieces = store.latest_deliverables(contract_id).await?;
    let Some(document) = pieces.iter().find(|p| p.kind == "deliverable") else {
        return Ok(None);
    };
    let content: Value = serde_json::from_slice(&document.content).unwrap_or(Value::Null);
    let evidence: Vec<Value> = pieces
        .iter()
        .filter(|p| p.kind == "evidence")
        .map(|p| {
            json!({
                "url": p.source_url,
                "digest": p.digest,
                "size_bytes": p.content.len(),
                "media_type": p.media_type,
            })
        })
        .collect();
    Ok(Some(json!({
        "digest": document.digest,
        "content": content,
        "attempt_id": document.attempt_id,
        "evidence": evidence,
    })))
}
