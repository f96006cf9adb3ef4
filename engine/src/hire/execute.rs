//! `POST /v1/contracts/{id}/execute` (and `POST /execute` + `X-Contract-ID`): the paid hire.
//!
//! ```text
//! offered ──no PAYMENT-SIGNATURE──► 402 PAYMENT-REQUIRED
//!    │ PAYMENT-SIGNATURE: decode → accepted == our offer → payment-identifier / replay checks
//!    │   → prechecks (payTo, amount, window, network, asset) → worker hireable (retired: 409,
//!    │     unhealthy: 503 + Retry-After, full: 429; see `hireable`) → facilitator /verify
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
//! database at each step, and every final answer is what is stored (read back, or, by the
//! execute that settled it, built from what its steps committed, see [`Written`]). A second
//! execute therefore never forwards twice or settles twice: it waits (up to
//! `contracts.duplicate_wait_ms`) for the one in flight and answers the stored result with the
//! original `PAYMENT-RESPONSE`, or answers 202 with the current state. A payment header sent to a
//! contract that is no longer `offered` is never looked at.
//!
//! Answers read as HIRE's (seeds/hire-execution.txt) besides hiregate's own fields: 200 carries
//! `status` (`completed`/`partial`), `contract_id`, `output` (and `deliverables` with name, url,
//! checksum when the output is files) once the money allows showing it, and the worker's
//! `metadata`; 202 pending carries `status`, `task_id`, `poll_url` (the gateway's contract view)
//! and `estimated_completion`; 422/502/504 carry `status: failed`, `contract_id` and `error`.
//! A repeated execute (the contract was past `offered` when it came in, other than a paid
//! contract waiting for its retry) is answered with `duplicate: true`, the original attempt's
//! id and status (`original`), and `X-Duplicate: true`: SW4RM's `DUPLICATE_DETECTED`, never a
//! silent replay. Every answer carries the hire's `X-Correlation-ID`.
//!
//! The flow runs on its own task: a client that hangs up, or the request timeout, cannot stop
//! it between "worker called" and "outcome recorded".

use hiregate_store::offer::StoredOffer;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use chrono::Utc;
use hiregate_contracts::{
    id::{AttemptId, ContractId, PrincipalId, WorkerId},
    money::PaymentScheme,
    state::{ContractEvent, ContractState},
    terms::ContractTerms,
};
use hiregate_payments::SettleResponse;
use serde_json::{Value, json};

use super::{
    HireService,
    crosscheck::Proposal,
    error::{ErrorCode, HireError},
    offered::{Cached, check_body},
    outcome::{
        AcceptedWork, Execution, Failure, FailureKind, HireResult, Original, Outcome, Progress,
        Settlement, SettlementFailure, WorkerTask,
    },
};
use crate::adapters::secrets::SeekerSecrets;
use hiregate_store::states::{Actor, EventKind, PieceKind};
use hiregate_store::{
    AttemptRecord, ContractRecord, DeliverableRecord, NewContractEvent, PaymentRecord, StoreError,
    Transition, states::AttemptState,
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
    Done(HireResult),
    Again,
}

/// What every step of one execute needs.
pub(super) struct Ctx {
    pub(super) contract_id: ContractId,
    pub(super) seeker_id: PrincipalId,
    pub(super) worker_id: WorkerId,
    pub(super) terms: Arc<ContractTerms>,
    pub(super) offer: Arc<StoredOffer>,
    pub(super) contract_token: String,
    pub(super) correlation_id: String,
    /// Who drives this execution: the seeker, or the gateway for the sweep.
    pub(super) actor: Actor,
    /// The seeker's secrets of this execute call; background work has none.
    pub(super) secrets: Option<SeekerSecrets>,
    /// The `exact` payment this execute stored, as stored: what forwarding and judging read,
    /// fields a payment keeps until its settlement begins. Background work reads the store.
    pub(super) paid_with: OnceLock<Box<PaymentRecord>>,
    /// What this drive committed of the work and its settlement (see [`Written`]).
    pub(super) written: Written,
    /// Whether this drive may wait in line (a seeker's execute, or the task spawned for that
    /// wait): for a worker marked unhealthy (background rounds hand that wait to a task of its
    /// own instead of holding up their loop, see `hireable`), and for a slot of a full worker
    /// when the wait is short (background work leaves the contract queued, see `queue`).
    pub(super) waits_in_line: bool,
}

impl Ctx {
    /// The context of `contract`'s next step. Its correlation id is the contract's own (fixed
    /// at proposal) so one id follows the hire across requests, jobs, worker calls and
    /// webhooks; `correlation_id` (the request's or job's) stands in only for contracts
    /// proposed before the contract kept one.
    pub(super) fn of(
        contract: &ContractRecord,
        correlation_id: String,
        actor: Actor,
    ) -> Result<Self, HireError> {
        let correlation_id = match (&contract.correlation_id, correlation_id.is_empty()) {
            (Some(own), _) => own.clone(),
            (None, false) => correlation_id,
            (None, true) => format!("job_{}", ulid::Ulid::new()),
        };
        let offer = contract
            .payment_offer
            .clone()
            .ok_or_else(|| internal("stored contract has no payment offer"))?;
        Ok(Self {
            contract_id: contract.contract_id.clone(),
            seeker_id: contract.seeker_id.clone(),
            worker_id: contract.worker_id.clone(),
            terms: contract.terms.clone(),
            offer,
            contract_token: contract.gateway_jws.clone(),
            correlation_id,
            actor,
            secrets: None,
            paid_with: OnceLock::new(),
            written: Written::default(),
            waits_in_line: false,
        })
    }
}

/// What one drive committed on its way to settling a hire, each part as the store now holds
/// it, set once its commit is applied. A hire settled within one drive is answered from these
/// instead of reading the contract and four of its records back: five of the seventeen
/// statements a paid `exact` hire ran. A drive that did not write every part answers from the
/// store: one that found the contract past its delivery (a repeat execute, a recovery or the
/// sweep of a delivered, judged or accepted contract), a deliverable naming evidence, an
/// upfront settlement.
#[derive(Default)]
pub(super) struct Written {
    /// The delivery's pieces and the worker's metadata, as committed with `delivered`. Left
    /// unset when the deliverable names evidence: the verdict stores that as it fetches it.
    pub(super) delivery: OnceLock<(Vec<DeliverableRecord>, Option<Value>)>,
    /// The attempt closed with `delivered`, and the proposal it makes as stored (its number,
    /// and its end as the commit wrote it), for the verdict.
    pub(super) proposal: OnceLock<(AttemptId, Proposal)>,
    /// The verdict: whether it passed, and its result as stored.
    pub(super) verification: OnceLock<(bool, Value)>,
    /// The payment as `settled` left it.
    pub(super) settled: OnceLock<Box<PaymentRecord>>,
}

/// What an accepted answer shows besides the contract's state.
#[derive(Clone, Copy)]
struct WorkParts<'a> {
    /// Whether the verdict passed, and its result.
    verification: Option<(bool, &'a Value)>,
    payment: Option<&'a PaymentRecord>,
    /// The metadata of the worker's completed attempt.
    worker_metadata: Option<&'a Value>,
    /// The latest delivery's pieces.
    pieces: &'a [DeliverableRecord],
}

/// An accepted contract may settle once its acceptance window is over (at once when it has
/// none). `deadline_at` holds the window's end.
fn acceptance_window_over(
    ctx: &Ctx,
    contract: &ContractRecord,
    now: chrono::DateTime<Utc>,
) -> bool {
    ctx.terms.acceptance_window_s() == 0 || contract.deadline_at.is_some_and(|end| end <= now)
}

fn contract_not_found() -> HireError {
    HireError::not_found("contract")
}

pub(super) fn internal(message: impl Into<String>) -> HireError {
    HireError::internal_msg(message)
}

/// An execute answered before it reached the contract's hire (the caller, the body, the
/// store): neither a duplicate nor correlated.
fn unlinked(result: HireResult) -> Execution {
    Execution {
        result,
        duplicate_of: None,
        correlation_id: None,
    }
}

impl HireService {
    /// Run an execute call to its answer.
    pub async fn execute(&self, request: ExecuteRequest) -> Execution {
        // The unpaid call of an offered contract is answered from memory (see `offered`);
        // nothing it does can be cut short, so it needs no task of its own.
        if request.payment_signature.is_none()
            && let Cached::Answer(result, correlation_id) = self.inner.offers.answer(
                &request.contract_id,
                request.seeker.as_str(),
                &request.body,
            )
        {
            return Execution {
                result,
                duplicate_of: None,
                correlation_id,
            };
        }
        let service = self.clone();
        match tokio::spawn(async move { service.execute_detached(request).await }).await {
            Ok(execution) => execution,
            Err(error) => unlinked(Err(internal(format!(
                "execute task ended abnormally: {error}"
            )))),
        }
    }

    async fn execute_detached(&self, request: ExecuteRequest) -> Execution {
        match self.execute_checked(request).await {
            Ok(execution) => execution,
            Err(error) => unlinked(Err(error)),
        }
    }

    async fn execute_checked(&self, request: ExecuteRequest) -> Result<Execution, HireError> {
        let store = &self.inner.store;
        let lock = self.inner.locks.lock_of(&request.contract_id);
        // Uncontended (the common case), one read under the lock serves the caller's checks
        // and the first step. Otherwise the caller is checked before waiting, so a stranger's
        // call never queues behind the contract's owner.
        let (_guard, ctx, current) = if let Ok(guard) = Arc::clone(&lock).try_lock_owned() {
            let current = self.contract_of_caller(&request).await?;
            let ctx = Self::execute_ctx(&request, &current)?;
            (guard, ctx, current)
        } else {
            let contract = self.contract_of_caller(&request).await?;
            let ctx = Self::execute_ctx(&request, &contract)?;
            let wait = self.inner.config.contracts.duplicate_wait();
            let Ok(guard) = tokio::time::timeout(wait, lock.lock_owned()).await else {
                let current = store
                    .get_contract(ctx.contract_id.as_str())
                    .await?
                    .ok_or_else(contract_not_found)?;
                let progress = self.in_progress_now(&ctx, current.state).await?;
                return Ok(Execution {
                    result: Ok(progress),
                    duplicate_of: Some(self.original_of(&current).await?),
                    correlation_id: Some(ctx.correlation_id),
                });
            };
            let current = store
                .get_contract(ctx.contract_id.as_str())
                .await?
                .ok_or_else(contract_not_found)?;
            (guard, ctx, current)
        };
        let result = self
            .drive_from(
                &ctx,
                request.payment_signature.as_deref(),
                Some(current.clone()),
            )
            .await;
        let duplicate_of = if is_repeat(&current) {
            Some(self.original_of(&current).await?)
        } else {
            None
        };
        Ok(Execution {
            result,
            duplicate_of,
            correlation_id: Some(ctx.correlation_id),
        })
    }

    /// The contract `request` names, if its seeker is the caller; 404 otherwise.
    async fn contract_of_caller(
        &self,
        request: &ExecuteRequest,
    ) -> Result<ContractRecord, HireError> {
        self.inner
            .store
            .get_contract(&request.contract_id)
            .await?
            .filter(|contract| contract.seeker_id == request.seeker)
            .ok_or_else(contract_not_found)
    }

    /// The context of `request` on `contract`, once its body is checked against the terms.
    fn execute_ctx(request: &ExecuteRequest, contract: &ContractRecord) -> Result<Ctx, HireError> {
        let mut ctx = Ctx::of(
            contract,
            request.correlation_id.clone(),
            Actor::Seeker(request.seeker.clone()),
        )?;
        ctx.secrets = request.secrets.clone();
        // The seeker's request waits for the answer anyway, as it would for a slow worker.
        ctx.waits_in_line = true;
        check_body(&ctx.terms, &request.body)?;
        Ok(ctx)
    }

    /// What a repeated execute is linked to (SW4RM's `DUPLICATE_DETECTED`): the original
    /// attempt and the state stored when this call came in.
    async fn original_of(&self, found: &ContractRecord) -> Result<Original, HireError> {
        let attempts = self
            .inner
            .store
            .list_attempts(found.contract_id.as_str())
            .await?;
        let original = attempts.last();
        tracing::info!(
            contract_id = %found.contract_id,
            state = %found.state,
            original_attempt_id = original.map(|a| a.attempt_id.as_str()),
            "duplicate execute: answered from the stored state, nothing run again"
        );
        Ok(Original {
            attempt_id: original.map(|a| a.attempt_id.to_string()),
            status: found.state,
            cached_at: found.updated_at,
        })
    }

    /// Take the contract through every step it can take now (pay, forward, settle) until one
    /// answers. Callers hold the contract's lock. Shared by execute and the background work
    /// (pending completions, automatic retries of pending work), which passes no payment.
    pub(super) async fn drive(&self, ctx: &Ctx, payment_signature: Option<&str>) -> HireResult {
        self.drive_from(ctx, payment_signature, None).await
    }

    /// [`Self::drive`], starting from `known`: the contract as read under its lock, which saves
    /// the first step's read.
    async fn drive_from(
        &self,
        ctx: &Ctx,
        payment_signature: Option<&str>,
        mut known: Option<ContractRecord>,
    ) -> HireResult {
        let store = &self.inner.store;
        for _ in 0..MAX_STEPS {
            if let Some(work) = self.settled_here(ctx) {
                // As below: paid perhaps on another instance (a recovery's drive).
                self.inner.offers.forget(ctx.contract_id.as_str());
                return Ok(Outcome::Accepted(Box::new(work)));
            }
            let contract = match known.take() {
                Some(contract) => contract,
                None => store
                    .get_contract(ctx.contract_id.as_str())
                    .await?
                    .ok_or_else(contract_not_found)?,
            };
            let state = contract.state;
            if state != ContractState::Offered {
                // Moved on, perhaps on another instance: its 402 must not be served from here.
                self.inner.offers.forget(ctx.contract_id.as_str());
            }
            let step = match state {
                ContractState::Offered => self.offered(ctx, payment_signature).await?,
                ContractState::Paid => self.forward(ctx).await?,
                ContractState::Accepted if acceptance_window_over(ctx, &contract, self.now()) => {
                    self.settle(ctx, ContractState::Accepted).await?
                }
                ContractState::SettlementUnknown => {
                    self.settle(ctx, ContractState::SettlementUnknown).await?
                }
                _ => Step::Done(self.stored_answer(ctx, &contract).await),
            };
            if let Step::Done(result) = step {
                return result;
            }
        }
        Err(internal(
            "the contract's state kept changing under this execute",
        ))
    }

    /// The payment of `ctx`'s contract: the one this execute stored, else the store's.
    pub(super) async fn payment_of(&self, ctx: &Ctx) -> Result<Option<PaymentRecord>, StoreError> {
        match ctx.paid_with.get() {
            Some(payment) => Ok(Some(PaymentRecord::clone(payment))),
            None => {
                self.inner
                    .store
                    .payment_of_contract(ctx.contract_id.as_str())
                    .await
            }
        }
    }

    /// Settle `contract` if it is due (acceptance window over, or a settlement outcome to
    /// reconcile), under its lock; skipped when an execute holds the lock. Returns the state
    /// it is in afterwards.
    pub(super) async fn settle_if_due(
        &self,
        contract: &ContractRecord,
        correlation_id: String,
    ) -> Result<Option<ContractState>, HireError> {
        let lock = self.inner.locks.lock_of(contract.contract_id.as_str());
        let Ok(_guard) = lock.try_lock_owned() else {
            return Ok(None);
        };
        let Some(current) = self
            .inner
            .store
            .get_contract(contract.contract_id.as_str())
            .await?
        else {
            return Ok(None);
        };
        let ctx = Ctx::of(&current, correlation_id, Actor::Gateway)?;
        let from = match current.state {
            ContractState::Accepted if acceptance_window_over(&ctx, &current, self.now()) => {
                ContractState::Accepted
            }
            ContractState::SettlementUnknown => ContractState::SettlementUnknown,
            // Escrowed rejections carry the operator's dispute window in `deadline_at`.
            ContractState::Rejected if current.deadline_at.is_some_and(|end| end <= self.now()) => {
                self.void_rejected(&ctx).await?;
                let after = self
                    .inner
                    .store
                    .get_contract(ctx.contract_id.as_str())
                    .await?;
                return Ok(after.map(|c| c.state));
            }
            _ => return Ok(None),
        };
        self.settle(&ctx, from).await?;
        let after = self
            .inner
            .store
            .get_contract(ctx.contract_id.as_str())
            .await?;
        Ok(after.map(|c| c.state))
    }

    /// The answer for a contract whose state needs no action from this execute.
    async fn stored_answer(&self, ctx: &Ctx, contract: &ContractRecord) -> HireResult {
        let store = &self.inner.store;
        let id = ctx.contract_id.as_str();
        let state = contract.state;
        Ok(match state {
            ContractState::Settled | ContractState::Accepted => {
                Outcome::Accepted(Box::new(self.accepted_work(ctx, contract).await?))
            }
            ContractState::Rejected | ContractState::Voided => {
                let verification = store.latest_verification(id).await?;
                hire_failure(
                    FailureKind::Rejected,
                    id,
                    ErrorCode::VerificationFailed,
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
                Outcome::SettlementFailed(Box::new(SettlementFailure {
                    contract_id: id.to_owned(),
                    state: contract.state,
                    reason,
                    settlement,
                }))
            }
            ContractState::Failed => {
                let attempts = store.list_attempts(id).await?;
                let last = attempts.last();
                hire_failure(
                    FailureKind::WorkerFailed,
                    id,
                    ErrorCode::WorkerFailed,
                    "the worker failed every attempt the contract allows; the payment was voided \
                     and nothing was settled",
                    json!({
                        "contract_id": id,
                        "state": contract.state,
                        "attempts_used": contract.attempts_used,
                        "retry_allowed": false,
                        // Where the first answer put it: the worker's own error (HIRE's
                        // `error` {code, message, details}) of the last attempt.
                        "worker_error": last.and_then(|a| a.error.clone()),
                    }),
                )
            }
            ContractState::Expired => {
                return Err(HireError::gone(
                    ErrorCode::ContractExpired,
                    "the contract's offer or payment authorization expired; propose a new \
                     contract",
                ));
            }
            ContractState::Cancelled => {
                return Err(HireError::conflict(
                    ErrorCode::ContractCancelled,
                    "the contract was cancelled",
                ));
            }
            ContractState::Refunded => {
                return Err(HireError::conflict(
                    ErrorCode::ContractRefunded,
                    "the contract was settled, then refunded to the payer by an arbiter",
                ));
            }
            _ => self.in_progress_now(ctx, contract.state).await?,
        })
    }

    pub(super) fn in_progress(&self, ctx: &Ctx, state: ContractState) -> Outcome {
        self.pending_work(ctx, state, None)
    }

    /// Work under way: HIRE's pending answer (`status`, `task_id`, `poll_url`,
    /// `estimated_completion`) when the worker took the task asynchronously: `poll_url` is the
    /// gateway's contract view (the seeker never talks to the worker), `task_id` and
    /// `estimated_completion` are the worker's.
    pub(super) fn pending_work(
        &self,
        ctx: &Ctx,
        state: ContractState,
        attempt: Option<&AttemptRecord>,
    ) -> Outcome {
        let id = ctx.contract_id.as_str();
        Progress {
            contract_id: id.to_owned(),
            state,
            poll_url: self.contract_url(id),
            events_url: self.events_url(id),
            worker_task: attempt.map(|attempt| WorkerTask {
                task_id: attempt.worker_task_id.clone(),
                estimated_completion: attempt.estimated_completion.clone(),
            }),
        }
        .into_outcome()
    }

    /// [`Self::pending_work`] for a contract in `state` now: a pending one names its worker's
    /// task.
    async fn in_progress_now(&self, ctx: &Ctx, state: ContractState) -> HireResult {
        let attempt = if state == ContractState::Pending {
            self.inner
                .store
                .list_attempts(ctx.contract_id.as_str())
                .await?
                .into_iter()
                .rev()
                .find(|a| a.state == AttemptState::Pending)
        } else {
            None
        };
        Ok(self.pending_work(ctx, state, attempt.as_ref()))
    }

    /// Accepted work: the deliverable as the seeker may see it, its verification and the
    /// settlement, with the facilitator's response once settled (the caller's
    /// `PAYMENT-RESPONSE`).
    async fn accepted_work(
        &self,
        ctx: &Ctx,
        contract: &ContractRecord,
    ) -> Result<AcceptedWork, HireError> {
        let store = &self.inner.store;
        let id = ctx.contract_id.as_str();
        // Independent reads: on a pool they run side by side, one round trip's wait for all.
        let (verification, payment, attempts, pieces) = tokio::try_join!(
            store.latest_verification(id),
            store.payment_of_contract(id),
            store.list_attempts(id),
            store.latest_deliverables(id),
        )?;
        Ok(self.work_view(
            ctx,
            contract.state,
            contract.deadline_at,
            WorkParts {
                verification: verification.as_ref().map(|v| (v.passed, &v.result)),
                payment: payment.as_ref(),
                worker_metadata: worker_metadata(&attempts).as_ref(),
                pieces: &pieces,
            },
        ))
    }

    /// The answer of a hire this drive settled, from what it committed ([`Written`]); `None`
    /// when it did not write every part.
    fn settled_here(&self, ctx: &Ctx) -> Option<AcceptedWork> {
        let written = &ctx.written;
        let payment = written.settled.get()?;
        let (pieces, worker_metadata) = written.delivery.get()?;
        let (passed, result) = written.verification.get()?;
        Some(self.work_view(
            ctx,
            ContractState::Settled,
            None,
            WorkParts {
                verification: Some((*passed, result)),
                payment: Some(payment),
                worker_metadata: worker_metadata.as_ref(),
                pieces,
            },
        ))
    }

    /// Accepted work in `state` (`deadline_at`: the end of its acceptance window) from its
    /// parts.
    fn work_view(
        &self,
        ctx: &Ctx,
        state: ContractState,
        deadline_at: Option<chrono::DateTime<Utc>>,
        parts: WorkParts<'_>,
    ) -> AcceptedWork {
        let WorkParts {
            verification,
            payment,
            worker_metadata,
            pieces,
        } = parts;
        let passed = verification.is_some_and(|(passed, _)| passed);
        let delivery = delivery_view(pieces, content_released(ctx.terms.scheme(), state, passed));
        let (settlement, payment_response) = match state {
            ContractState::Settled => {
                let response = payment.and_then(|p| p.settle_response.clone());
                let payment_response = response
                    .clone()
                    .and_then(|r| serde_json::from_value::<SettleResponse>(r).ok())
                    .map(|r| {
                        let resource_url = &ctx.offer.payment_required.resource.url;
                        self.with_x402_receipt(resource_url, payment, r)
                    });
                let settled = Settlement::Settled {
                    transaction: payment.and_then(|p| p.settle_tx.clone()),
                    response,
                };
                (settled, payment_response)
            }
            _ => (
                Settlement::Deferred {
                    settle_after: deadline_at,
                },
                None,
            ),
        };
        let content = delivery.as_ref().map(|d| d["content"].clone());
        let output = content
            .as_ref()
            .map(|c| c["output"].clone())
            .filter(|o| !o.is_null());
        AcceptedWork {
            contract_id: ctx.contract_id.as_str().to_owned(),
            state,
            status: hire_status(content.as_ref()),
            deliverable_digest: delivery.as_ref().map(|d| d["digest"].clone()),
            deliverable_withheld: delivery
                .as_ref()
                .and_then(|d| d.get("content_withheld").cloned()),
            deliverable: content,
            verification: verification.map(|(_, result)| result.clone()),
            settlement,
            metadata: worker_metadata.cloned(),
            deliverables: output.as_ref().and_then(hire_deliverables),
            output,
            payment_response,
        }
    }

    pub(super) fn event(
        &self,
        ctx: &Ctx,
        actor: &Actor,
        kind: EventKind,
        details: Value,
    ) -> NewContractEvent {
        NewContractEvent {
            at: self.now(),
            actor: actor.clone(),
            correlation_id: ctx.correlation_id.clone(),
            kind,
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
        actor: &Actor,
        details: Value,
        deadline: Option<chrono::DateTime<Utc>>,
    ) -> Result<bool, HireError> {
        let to = from
            .transition(event)
            .map_err(|e| internal(e.to_string()))?;
        let record = self.event(ctx, actor, EventKind::of(event), details);
        match self
            .inner
            .store
            .transition_contract(ctx.contract_id.as_str(), from, to, deadline, &record)
            .await?
        {
            Transition::Applied { .. } => Ok(true),
            Transition::StateMismatch { .. } => Ok(false),
            Transition::NotFound => Err(contract_not_found()),
        }
    }
}

/// HIRE's `status` of a delivered contract: `partial` when the worker said so, else
/// `completed`.
fn hire_status(content: Option<&Value>) -> &'static str {
    match content
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
    {
        Some("partial") => "partial",
        _ => "completed",
    }
}

/// HIRE's `deliverables` list (`name`, `url`, `checksum`, and `mime`/`size` when known) for an
/// output made only of files; `None` for inline outputs, which HIRE shows as `output` alone.
fn hire_deliverables(output: &Value) -> Option<Value> {
    let files: Vec<&Value> = match output.get("type").and_then(Value::as_str) {
        Some("file") => vec![output],
        Some("multiple") => output.get("items")?.as_array()?.iter().collect(),
        _ => return None,
    };
    if files.is_empty()
        || files
            .iter()
            .any(|f| f.get("type").and_then(Value::as_str) != Some("file"))
    {
        return None;
    }
    Some(Value::Array(
        files
            .into_iter()
            .map(|file| {
                let mut entry = file.clone();
                if let Some(object) = entry.as_object_mut() {
                    object.remove("type");
                }
                entry
            })
            .collect(),
    ))
}

/// The worker `metadata` of the contract's delivery (its latest completed attempt).
pub fn worker_metadata(attempts: &[AttemptRecord]) -> Option<Value> {
    attempts
        .iter()
        .rev()
        .find(|a| a.state == AttemptState::Completed)
        .and_then(|a| a.worker_metadata.clone())
}

/// HIRE's failure answer (`{"status":"failed","contract_id","error":{code,message,details}}`
/// over REST).
#[allow(clippy::needless_pass_by_value)] // callers build `details` inline with json!
pub(super) fn hire_failure(
    kind: FailureKind,
    contract_id: &str,
    code: ErrorCode,
    message: impl Into<String>,
    details: Value,
) -> Outcome {
    Outcome::Failed(Box::new(Failure {
        kind,
        contract_id: contract_id.to_owned(),
        code,
        message: message.into(),
        details,
        retry_after: None,
    }))
}

/// Whether an execute finding `contract` repeats one that was answered before: anything past
/// `offered`, except a paid contract that is not queued (its attempt failed with retries left,
/// or nothing forwarded it yet), which this execute takes on.
fn is_repeat(contract: &ContractRecord) -> bool {
    match contract.state {
        ContractState::Offered => false,
        ContractState::Paid => contract.queued_at.is_some(),
        _ => true,
    }
}

/// Whether a contract in `state` may show its deliverable's content to the seeker: only once
/// the money for it moved (`exact`: settled), or is locked in escrow and the verification
/// passed (`auth-capture`: accepted, disputed by the seeker after acceptance, capturing,
/// captured). `verification_passed` is the latest verdict: what tells a seeker's dispute of an
/// accepted contract from an operator's dispute of a rejected one. Otherwise (an exact
/// acceptance window, a rejection, a failed settlement, a void) the seeker sees digests and
/// the verification result, never the work itself.
pub fn content_released(
    scheme: PaymentScheme,
    state: ContractState,
    verification_passed: bool,
) -> bool {
    use ContractState as S;
    match scheme {
        PaymentScheme::Exact | PaymentScheme::Upto => state == S::Settled,
        PaymentScheme::AuthCapture => match state {
            S::Accepted | S::Settling | S::SettlementUnknown | S::Settled => true,
            S::Disputed => verification_passed,
            _ => false,
        },
    }
}

/// Why content is missing from a view that has a delivery.
const CONTENT_WITHHELD: &str = "the deliverable's content is released once its payment has \
    settled on chain (exact) or is locked in escrow and the verification passed (auth-capture)";

/// The latest delivery of a contract from its stored `pieces` (`Store::latest_deliverables`):
/// `{digest, content, attempt_id, evidence: [...]}`, with `content` null (and
/// `content_withheld` saying why) unless `reveal`.
pub fn delivery_view(pieces: &[DeliverableRecord], reveal: bool) -> Option<Value> {
    let document = pieces.iter().find(|p| p.kind == PieceKind::Deliverable)?;
    let content: Value = if reveal {
        serde_json::from_slice(&document.content).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let evidence: Vec<Value> = pieces
        .iter()
        .filter(|p| p.kind == PieceKind::Evidence)
        .map(|p| {
            json!({
                "url": p.source_url,
                "digest": p.digest,
                "size_bytes": p.content.len(),
                "media_type": p.media_type,
            })
        })
        .collect();
    let mut delivery = json!({
        "digest": document.digest,
        "content": content,
        "attempt_id": document.attempt_id,
        "evidence": evidence,
    });
    if !reveal {
        delivery["content_withheld"] = json!(CONTENT_WITHHELD);
    }
    Some(delivery)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_releases_content_only_when_settled() {
        for state in ContractState::ALL {
            assert_eq!(
                content_released(PaymentScheme::Exact, state, true),
                state == ContractState::Settled,
                "{state}"
            );
        }
    }

    #[test]
    fn auth_capture_releases_content_once_verified_money_is_locked() {
        use ContractState as S;
        let released: Vec<_> = ContractState::ALL
            .into_iter()
            .filter(|state| content_released(PaymentScheme::AuthCapture, *state, true))
            .collect();
        assert_eq!(
            released,
            [
                S::Accepted,
                S::Disputed,
                S::Settling,
                S::Settled,
                S::SettlementUnknown
            ]
        );
        // An operator's dispute of a rejected contract shows nothing to the seeker.
        assert!(!content_released(
            PaymentScheme::AuthCapture,
            S::Disputed,
            false
        ));
        for state in [
            S::Rejected,
            S::Voided,
            S::SettlementFailed,
            S::Delivered,
            S::Verifying,
        ] {
            assert!(
                !content_released(PaymentScheme::AuthCapture, state, true),
                "{state}"
            );
        }
    }
}
