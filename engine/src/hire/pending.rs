//! Pending work: a worker that answered `pending` is watched by a durable poll job and may call
//! back; whichever terminal report comes first wins, once.
//!
//! ```text
//! executing ─pending─► pending ── poll job `poll_worker` (table `job`, leased) ──────────┐
//!                         │         GET poll_url (contract token + X-Contract-ID), backoff │
//!                         │         poll_interval_ms × 2^n ≤ poll_max_interval_ms, never   │
//!                         │         past the attempt's SLA deadline                        │
//!                         └── POST /v1/callbacks/{id} (Standard Webhooks, worker secret) ──┤
//!                                                                                          ▼
//!        finish_pending (contract lock + compare-and-set from `pending`): the first report wins
//!          completed → `delivered` path of execute (store, verify) → drive → settle
//!          failed    → attempt failed → `paid` (retries left) → drive → forward again │ `failed` (void)
//!        SLA deadline (attempt start + sla.max_latency_ms + sla.poll_window_s) passed
//!          → attempt failed `sla_exceeded`
//! ```
//!
//! `sla.poll_window_s` is HIRE's long-running poll (up to 24 hours): how long pending work may
//! run past the time to answer. Its default is 0 (pending work ends within `max_latency_ms`);
//! the payment must hold for it, so an `exact` contract's authorization window includes it and
//! one that cannot is refused at proposal (`poll_window_too_long`, see `offer`).
//!
//! Retries of pending work are automatic: nobody waits on an HTTP request for it, so the job
//! (or the callback) drives the contract on — forward again under the same authorization,
//! without a new payment — exactly as the seeker's next execute would. A sync attempt that
//! fails is still retried by the seeker's next execute, who is told so (502/504).
//!
//! Restart safety: the job row outlives the process. A gateway stopped between polls leaves
//! the job queued; one stopped during a poll leaves a lease that runs out after
//! `contracts.job_lease_ms`; either way the next instance claims it and polls again. A report
//! is applied with a compare-and-set, so a poll repeated after a crash cannot deliver twice,
//! and settlement runs through the same persisted `settling` step as every other contract.

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use hiregate_contracts::webhook::{WebhookError, WebhookSecret};
use hiregate_contracts::{canonical::Digest, state::ContractState};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use url::Url;

use super::{
    HireService,
    error::{ErrorCode, ErrorKind, HireError},
    execute::{Ctx, internal},
    forward::sla_exceeded_error,
    outcome::{CallbackReceipt, unfinished},
};
use crate::adapters::{
    FailureKind, PollRequest, WorkerAnswer, hire::classify_callback, refuse_plain_http,
};
use hiregate_contracts::id::{AttemptId, ContractId, JobId};
use hiregate_store::states::{Actor, EventKind};
use hiregate_store::{
    AttemptRecord, ContractRecord, JobRecord, NewJob, StoreError, states::AttemptState,
};

/// `job.kind` of the poll jobs.
pub const POLL_JOB: &str = "poll_worker";

/// Poll jobs claimed per runner round.
const POLL_BATCH: usize = 32;

/// What a poll job remembers: which attempt of which contract it watches.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PollJob {
    contract_id: ContractId,
    attempt_id: AttemptId,
}

/// What the poll job does next.
enum PollNext {
    /// Nothing left to watch.
    Done,
    /// Poll again at this time.
    At(DateTime<Utc>, String),
}

/// How a terminal report for pending work was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Finished {
    /// This report moved the contract on.
    Applied,
    /// The contract was no longer waiting on this attempt (another report won, or it was
    /// cancelled or timed out); nothing changed.
    NotPending {
        /// The contract's state now (`None`: it is gone).
        state: Option<ContractState>,
    },
}

impl HireService {
    /// Start watching `attempt_id`, which just went `pending`: one poll job per attempt.
    pub(super) async fn watch_pending(
        &self,
        ctx: &Ctx,
        attempt_id: &AttemptId,
    ) -> Result<(), HireError> {
        let now = self.now();
        let first_poll = millis(self.inner.config.contracts.poll_interval_ms);
        let payload = serde_json::to_value(PollJob {
            contract_id: ctx.contract_id.clone(),
            attempt_id: attempt_id.clone(),
        })
        .map_err(|e| internal(format!("poll job: {e}")))?;
        self.inner
            .store
            .enqueue_job(
                &NewJob {
                    id: JobId::generate(),
                    kind: POLL_JOB.to_owned(),
                    dedupe_key: Some(format!("poll:{attempt_id}")),
                    payload,
                    run_at: now + first_poll,
                },
                now,
            )
            .await?;
        Ok(())
    }

    /// Claim the due poll jobs (up to a batch) as `owner` and run them concurrently; returns
    /// how many ran.
    pub async fn run_poll_jobs(&self, owner: &str) -> Result<usize, StoreError> {
        let lease = self.inner.config.contracts.job_lease();
        let mut running = JoinSet::new();
        for _ in 0..POLL_BATCH {
            let Some(job) = self
                .inner
                .store
                .claim_job(POLL_JOB, owner, self.now(), lease)
                .await?
            else {
                break;
            };
            let service = self.clone();
            let owner = owner.to_owned();
            // Boxed: a poll job runs a whole attempt (forward, judge, settle), a future past
            // 16 KiB; one allocation per job keeps it off the spawning task's stack.
            running.spawn(async move { Box::pin(service.run_poll_job(job, &owner)).await });
        }
        let ran = running.len();
        while running.join_next().await.is_some() {}
        Ok(ran)
    }

    async fn run_poll_job(&self, job: JobRecord, owner: &str) {
        let store = &self.inner.store;
        let now = self.now();
        let recorded = match Box::pin(self.poll_once(&job)).await {
            Ok(PollNext::Done) => store.complete_job(&job.id, owner, now).await,
            Ok(PollNext::At(at, why)) => store.reschedule_job(&job.id, owner, now, at, &why).await,
            Err(error) => {
                tracing::warn!(job_id = %job.id, code = %error.code, "poll job failed; retrying");
                let at = now + self.poll_delay(job.attempts);
                store
                    .reschedule_job(&job.id, owner, now, at, "poll job error")
                    .await
            }
        };
        match recorded {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(job_id = %job.id, "poll job lease lost before its outcome was recorded");
            }
            Err(error) => {
                tracing::warn!(job_id = %job.id, error = %error, "poll job outcome not stored")
            }
        }
    }

    /// Delay before poll number `polls + 1`: doubling from `poll_interval_ms`, capped.
    fn poll_delay(&self, polls: u32) -> chrono::Duration {
        let settings = &self.inner.config.contracts;
        let doublings = polls.saturating_sub(1).min(20);
        let delay = settings
            .poll_interval_ms
            .saturating_mul(1_u64 << doublings)
            .min(settings.poll_max_interval_ms);
        millis(delay)
    }

    async fn poll_once(&self, job: &JobRecord) -> Result<PollNext, HireError> {
        let Ok(watch) = serde_json::from_value::<PollJob>(job.payload.clone()) else {
            tracing::warn!(job_id = %job.id, "poll job payload does not parse; dropped");
            return Ok(PollNext::Done);
        };
        let Some((contract, attempt)) = self.pending_attempt(&watch).await? else {
            return Ok(PollNext::Done);
        };
        let ctx = Ctx::of(&contract, format!("{}", job.id), Actor::Gateway)?;
        let deadline = sla_deadline(&ctx, &attempt);
        let now = self.now();
        if now >= deadline {
            self.pending_sla_exceeded(&ctx, &attempt).await?;
            return Ok(PollNext::Done);
        }
        let poll_url = attempt
            .poll_url
            .as_deref()
            .and_then(|raw| Url::parse(raw).ok());
        let Some(poll_url) = poll_url else {
            // Nothing to poll: only a callback (or the SLA) can end this attempt.
            return Ok(PollNext::At(
                deadline,
                "no poll_url; waiting for a callback".into(),
            ));
        };
        let listing = self
            .inner
            .store
            .get_worker(&ctx.worker_id)
            .await?
            .ok_or_else(|| internal("the contract's worker listing is gone"))?;
        let Some(adapter) = self.inner.adapters.get(listing.protocol).cloned() else {
            return Ok(PollNext::At(deadline, "no adapter for the protocol".into()));
        };
        let remaining = (deadline - now).to_std().unwrap_or(Duration::ZERO);
        // The poll must end well inside the lease, or another instance would poll too.
        let timeout = remaining.min(self.inner.config.contracts.job_lease() / 2);
        let answer = adapter
            .poll(
                &self.inner.outbound,
                &PollRequest {
                    poll_url: &poll_url,
                    contract_id: ctx.contract_id.as_str(),
                    contract_token: &ctx.contract_token,
                    correlation_id: &ctx.correlation_id,
                    timeout,
                },
            )
            .await;
        let answer = refuse_plain_http(answer, self.inner.outbound.requires_https());
        let why = match &answer {
            // A report naming another contract ends the attempt: polling again would only
            // read the other contract's work again.
            WorkerAnswer::Delivered { .. }
            | WorkerAnswer::Failed {
                kind:
                    FailureKind::Reported | FailureKind::ContractMismatch | FailureKind::InsecureUrl,
                ..
            } => {
                let actor = Actor::Worker(listing.id.clone());
                self.finish_pending(&ctx, &attempt, answer, &actor).await?;
                self.drive_contract(ctx.contract_id.as_str(), &ctx.correlation_id)
                    .await;
                return Ok(PollNext::Done);
            }
            WorkerAnswer::Pending { progress, .. } => {
                if let Some(progress) = progress.clone() {
                    // Every report a poll reads is relayed: polls back off, so these stay few.
                    let relay = super::relay::ContractEventRelay::new(
                        self.inner.store.clone(),
                        ctx.contract_id.as_str(),
                        &ctx.correlation_id,
                        Actor::Worker(listing.id.clone()),
                        self.inner.clock.clone(),
                    );
                    super::forward::relay_progress(&relay, attempt.attempt_no, progress).await;
                }
                "still pending".to_owned()
            }
            WorkerAnswer::TimedOut => "poll timed out".to_owned(),
            // The worker could not be read this time (down, restarting, a bad answer): the
            // attempt is not over until it says so or the SLA runs out.
            WorkerAnswer::Failed { code, .. } => format!("poll failed: {code}"),
        };
        let next = (self.now() + self.poll_delay(job.attempts)).min(deadline);
        Ok(PollNext::At(next, why))
    }

    /// The contract and attempt a poll job watches, if the contract still waits on it.
    async fn pending_attempt(
        &self,
        watch: &PollJob,
    ) -> Result<Option<(ContractRecord, AttemptRecord)>, HireError> {
        let store = &self.inner.store;
        let Some(contract) = store.get_contract(watch.contract_id.as_str()).await? else {
            return Ok(None);
        };
        if contract.state != ContractState::Pending {
            return Ok(None);
        }
        let attempt = store
            .list_attempts(contract.contract_id.as_str())
            .await?
            .into_iter()
            .find(|a| a.attempt_id == watch.attempt_id && a.state == AttemptState::Pending);
        Ok(attempt.map(|attempt| (contract, attempt)))
    }

    /// Apply a terminal report (`Delivered` or a reported `Failed`) of pending `attempt`, under
    /// the contract lock and with a compare-and-set from `pending`: the first report wins.
    pub(super) async fn finish_pending(
        &self,
        ctx: &Ctx,
        attempt: &AttemptRecord,
        answer: WorkerAnswer,
        actor: &Actor,
    ) -> Result<Finished, HireError> {
        let lock = self.inner.locks.lock_of(ctx.contract_id.as_str());
        let _guard = lock.lock_owned().await;
        let store = &self.inner.store;
        let current = store
            .get_contract(ctx.contract_id.as_str())
            .await?
            .map(|c| c.state);
        let still_waiting = current == Some(ContractState::Pending)
            && store
                .list_attempts(ctx.contract_id.as_str())
                .await?
                .iter()
                .any(|a| a.attempt_id == attempt.attempt_id && a.state == AttemptState::Pending);
        if !still_waiting {
            return Ok(Finished::NotPending { state: current });
        }
        let remaining = (sla_deadline(ctx, attempt) - self.now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        let answer = Box::pin(self.collect_stream(
            ctx,
            answer,
            attempt.attempt_no,
            actor,
            tokio::time::Instant::now() + remaining,
        ))
        .await;
        match answer {
            WorkerAnswer::Delivered {
                deliverable,
                http_status,
                metadata,
            } => {
                self.delivered(
                    ctx,
                    ContractState::Pending,
                    &attempt.attempt_id,
                    attempt.attempt_no,
                    actor,
                    deliverable,
                    http_status,
                    metadata,
                )
                .await?;
            }
            failure @ (WorkerAnswer::Failed { .. } | WorkerAnswer::TimedOut) => {
                let (http_status, error, timed_out) = match failure {
                    WorkerAnswer::Failed {
                        kind,
                        http_status,
                        code,
                        message,
                        details,
                    } => (
                        http_status,
                        json!({"kind": kind.as_str(), "code": code, "message": message, "details": details}),
                        false,
                    ),
                    // A stream output that outlived the SLA.
                    _ => (None, sla_exceeded_error(ctx), true),
                };
                let payment = store
                    .payment_of_contract(ctx.contract_id.as_str())
                    .await?
                    .ok_or_else(|| internal("a pending contract has no payment"))?;
                self.attempt_failed(
                    ctx,
                    ContractState::Pending,
                    &attempt.attempt_id,
                    attempt.attempt_no,
                    &payment,
                    actor,
                    http_status,
                    error,
                    timed_out,
                )
                .await?;
            }
            WorkerAnswer::Pending { .. } => {
                return Err(internal("not a terminal report"));
            }
        }
        let after = store
            .get_contract(ctx.contract_id.as_str())
            .await?
            .map(|c| c.state);
        if after == Some(ContractState::Pending) {
            // Someone else (another instance) moved it between our checks.
            return Ok(Finished::NotPending { state: after });
        }
        Ok(Finished::Applied)
    }

    /// The attempt outlived `sla.max_latency_ms`: it failed with `sla_exceeded`; the retry
    /// policy decides between another attempt (same payment) and `failed` (void).
    async fn pending_sla_exceeded(
        &self,
        ctx: &Ctx,
        attempt: &AttemptRecord,
    ) -> Result<(), HireError> {
        {
            let lock = self.inner.locks.lock_of(ctx.contract_id.as_str());
            let _guard = lock.lock_owned().await;
            let store = &self.inner.store;
            let Some(contract) = store.get_contract(ctx.contract_id.as_str()).await? else {
                return Ok(());
            };
            if contract.state != ContractState::Pending {
                return Ok(());
            }
            let payment = store
                .payment_of_contract(ctx.contract_id.as_str())
                .await?
                .ok_or_else(|| internal("a pending contract has no payment"))?;
            tracing::info!(contract_id = %ctx.contract_id, attempt_no = attempt.attempt_no, "pending attempt exceeded its SLA");
            self.attempt_failed(
                ctx,
                ContractState::Pending,
                &attempt.attempt_id,
                attempt.attempt_no,
                &payment,
                &Actor::Gateway,
                None,
                sla_exceeded_error(ctx),
                true,
            )
            .await?;
        }
        self.drive_contract(ctx.contract_id.as_str(), &ctx.correlation_id)
            .await;
        Ok(())
    }

    /// Take the contract on from wherever it is now (settle an accepted one, forward again a
    /// paid one), as the gateway and under its lock. Waits for the outcome; errors are logged.
    pub(super) async fn drive_contract(&self, contract_id: &str, correlation_id: &str) {
        let lock = self.inner.locks.lock_of(contract_id);
        let _guard = lock.lock_owned().await;
        let result = match self.inner.store.get_contract(contract_id).await {
            Ok(Some(contract)) => {
                match Ctx::of(&contract, correlation_id.to_owned(), Actor::Gateway) {
                    Ok(ctx) => self.drive(&ctx, None).await,
                    Err(error) => Err(error),
                }
            }
            Ok(None) => return,
            Err(error) => Err(HireError::from(error)),
        };
        if let Some(code) = unfinished(&result) {
            tracing::warn!(contract_id, %code, "background drive did not finish");
        }
    }

    /// `POST /v1/callbacks/{contract_id}`: a worker's signed completion report.
    ///
    /// Checks, in order: the contract exists (404); the Standard Webhooks signature with the
    /// worker's secret (401 `callback_unsigned` / `callback_timestamp_out_of_window` /
    /// `callback_signature_invalid`); the `webhook-id` was not accepted before (409
    /// `callback_replayed`); the body is a report for this contract and its pending task (400
    /// `invalid_callback_body`, 409 `callback_task_mismatch`). A progress report is noted (202);
    /// a terminal one is applied if the contract still waits on it (200), else 409
    /// `contract_not_pending`: the late report is recorded as a `late_result` event and
    /// nothing else changes.
    pub async fn worker_callback(
        &self,
        contract_id: &str,
        signature: Result<CallbackSignature, WebhookError>,
        body: &[u8],
        correlation_id: &str,
    ) -> Result<CallbackReceipt, HireError> {
        let store = &self.inner.store;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(HireError::not_found("contract"))?;
        let ctx = Ctx::of(&contract, correlation_id.to_owned(), Actor::Gateway)?;
        let secret = store
            .worker_callback_secret(&ctx.worker_id)
            .await?
            .ok_or_else(|| internal("the contract's worker listing is gone"))?;
        let secret = WebhookSecret::from_str(secret.reveal())
            .map_err(|e| internal(format!("stored callback secret: {e}")))?;
        let tolerance = self.inner.config.contracts.callback_tolerance();
        let verified = signature
            .and_then(|signature| {
                secret.verify_parts(
                    &signature.id,
                    &signature.timestamp,
                    &signature.signature,
                    body,
                    self.now(),
                    tolerance,
                )
            })
            .map_err(|error| refused_signature(&error))?;
        let worker_id = ctx.worker_id.as_str();
        if store.callback_seen(worker_id, &verified.id).await? {
            return Err(HireError::conflict(
                ErrorCode::CallbackReplayed,
                "a callback with this webhook-id was already accepted",
            )
            .with_details(json!({"contract_id": contract_id, "webhook_id": verified.id})));
        }
        let report: Value = serde_json::from_slice(body).map_err(|e| bad_body(&e.to_string()))?;
        if report.get("contract_id").and_then(Value::as_str) != Some(contract_id) {
            return Err(bad_body(
                "contract_id must be the contract of the callback URL",
            ));
        }
        let answer = match classify_callback(body, contract_id) {
            WorkerAnswer::Failed {
                kind: FailureKind::BadResponse,
                message,
                ..
            } => return Err(bad_body(&message)),
            answer => refuse_plain_http(answer, self.inner.outbound.requires_https()),
        };
        let attempt = store
            .list_attempts(contract_id)
            .await?
            .into_iter()
            .rev()
            .find(|a| a.state == AttemptState::Pending);
        let not_pending = |state: Option<ContractState>| {
            HireError::conflict(
                ErrorCode::ContractNotPending,
                "the contract is not waiting for this worker's report (it was already \
                 delivered, failed, timed out or cancelled); nothing changed",
            )
            .with_details(json!({"contract_id": contract_id, "state": state}))
        };
        let Some(attempt) = attempt.filter(|_| contract.state == ContractState::Pending) else {
            self.record_late_result(&ctx, Some(contract.state), &verified.id, &report, body)
                .await?;
            return Err(not_pending(Some(contract.state)));
        };
        let task_id = report.get("task_id").and_then(Value::as_str);
        if let (Some(reported), Some(expected)) = (task_id, attempt.worker_task_id.as_deref())
            && reported != expected
        {
            return Err(HireError::conflict(
                ErrorCode::CallbackTaskMismatch,
                "the callback names another task than the one the contract waits for",
            )
            .with_details(json!({"contract_id": contract_id, "task_id": reported})));
        }
        if let WorkerAnswer::Pending { progress, .. } = &answer {
            if let Some(progress) = progress.clone() {
                let relay = super::relay::ContractEventRelay::new(
                    store.clone(),
                    contract_id,
                    correlation_id,
                    Actor::Worker(ctx.worker_id.clone()),
                    self.inner.clock.clone(),
                );
                super::forward::relay_progress(&relay, attempt.attempt_no, progress).await;
            }
            return Ok(CallbackReceipt::Noted {
                contract_id: contract_id.to_owned(),
                state: contract.state,
            });
        }
        let actor = Actor::Worker(ctx.worker_id.clone());
        match self.finish_pending(&ctx, &attempt, answer, &actor).await? {
            Finished::NotPending { state } => {
                self.record_late_result(&ctx, state, &verified.id, &report, body)
                    .await?;
                return Err(not_pending(state));
            }
            Finished::Applied => {}
        }
        store
            .record_callback(worker_id, &verified.id, contract_id, self.now())
            .await?;
        let state = store.get_contract(contract_id).await?.map(|c| c.state);
        // Settlement (or the next attempt) goes on without holding up the worker's request.
        let service = self.clone();
        let (owned_id, owned_correlation) = (contract_id.to_owned(), correlation_id.to_owned());
        tokio::spawn(async move {
            service.drive_contract(&owned_id, &owned_correlation).await;
        });
        Ok(CallbackReceipt::Applied {
            contract_id: contract_id.to_owned(),
            state,
        })
    }
}

impl HireService {
    /// A signed report that came after its attempt ended (timed out, failed, cancelled, or
    /// already reported): SW4RM's late acknowledgment. It is recorded as a `late_result` event
    /// (what came, for which attempt, in which contract state) and its `webhook-id` is
    /// remembered, but it changes neither the outcome nor the money.
    async fn record_late_result(
        &self,
        ctx: &Ctx,
        state: Option<ContractState>,
        webhook_id: &str,
        report: &Value,
        body: &[u8],
    ) -> Result<(), HireError> {
        let store = &self.inner.store;
        let worker_id = ctx.worker_id.as_str();
        if store.callback_seen(worker_id, webhook_id).await? {
            return Ok(());
        }
        let last = store.list_attempts(ctx.contract_id.as_str()).await?.pop();
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &Actor::Worker(ctx.worker_id.clone()),
                    EventKind::LateResult,
                    json!({
                        "webhook_id": webhook_id,
                        "reported_status": report.get("status"),
                        "task_id": report.get("task_id"),
                        "report_digest": Digest::of_bytes(body).to_string(),
                        "report_bytes": body.len(),
                        "contract_state": state,
                        "attempt_id": last.as_ref().map(|a| a.attempt_id.clone()),
                        "attempt_state": last.as_ref().map(|a| a.state),
                        "attempt_finished_at": last.and_then(|a| a.finished_at),
                        "applied": false,
                    }),
                ),
            )
            .await?;
        store
            .record_callback(worker_id, webhook_id, ctx.contract_id.as_str(), self.now())
            .await?;
        tracing::info!(contract_id = %ctx.contract_id, state = ?state, "late worker report recorded; outcome unchanged");
        Ok(())
    }
}

/// A callback's Standard Webhooks signature (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature`), as the transport received it. A transport that cannot read one of
/// them passes the [`WebhookError`] naming it instead.
#[derive(Debug, Clone)]
pub struct CallbackSignature {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`.
    pub timestamp: String,
    /// `webhook-signature`.
    pub signature: String,
}

/// When pending `attempt` must have ended: its start plus the contract's `sla.max_latency_ms`
/// (the time to answer) plus `sla.poll_window_s` (HIRE's long-running wait).
pub(super) fn sla_deadline(ctx: &Ctx, attempt: &AttemptRecord) -> DateTime<Utc> {
    let sla = ctx.terms.sla();
    let window_ms = sla
        .max_latency_ms()
        .saturating_add(sla.poll_window_s().saturating_mul(1000));
    attempt.started_at + millis(window_ms)
}

fn millis(ms: u64) -> chrono::Duration {
    chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
}

fn bad_body(why: &str) -> HireError {
    HireError::bad_request(
        ErrorCode::InvalidCallbackBody,
        format!("the callback body is not a hire task report: {why}"),
    )
}

fn refused_signature(error: &WebhookError) -> HireError {
    let (code, message) = match error {
        WebhookError::MissingHeader(_) | WebhookError::InvalidHeader(_) => (
            ErrorCode::CallbackUnsigned,
            "send webhook-id, webhook-timestamp and webhook-signature (Standard Webhooks)",
        ),
        WebhookError::TimestampTooOld | WebhookError::TimestampTooNew => (
            ErrorCode::CallbackTimestampOutOfWindow,
            "webhook-timestamp is too far from the gateway's clock",
        ),
        WebhookError::NoMatchingSignature => (
            ErrorCode::CallbackSignatureInvalid,
            "webhook-signature does not match the body under the worker's callback secret",
        ),
    };
    HireError::new(ErrorKind::Unauthenticated, code, message)
        .with_details(json!({"reason": error.to_string()}))
}
