//! `paid`: forward an attempt to the worker, and record what it answered (delivered, pending, failed).

use hiregate_contracts::id::DeliverableId;
use std::time::Duration;

use chrono::Utc;
use hiregate_contracts::{
    canonical::to_canonical_vec,
    deliverable::Deliverable,
    id::AttemptId,
    state::{ContractEvent, ContractState},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    HireService,
    crosscheck::Proposal,
    error::{ErrorCode, HireError},
    execute::{Ctx, Step, internal},
    hireable::{WorkerReadiness, worker_wait_until},
    offer::AuthorizationWindow,
    outcome::{Failure, FailureKind, Outcome},
    queue::Held,
};
use crate::{
    adapters::{
        ForwardRequest, UpstreamEvents as _, WorkerAnswer, WorkerProtocol, refuse_plain_http,
    },
    metrics::WorkerLabels,
};
use hiregate_store::states::{Actor, EventKind, PieceKind};
use hiregate_store::{
    AttemptEnd, ContractStep, NewAttempt, NewDeliverable, PaymentRecord, SideWrite, StartAttempt,
    Store, StoreError, Transition,
    listing::model::{Protocol, WorkerListing},
    states::{AttemptState, PaymentState},
};

/// How often a streaming attempt looks in the store for a cancel (taken by any instance).
const CANCEL_WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// Fires `cancelled` once the store shows `contract_id` cancelled; stops when `attempt_over`
/// fires. This is how a cancel taken by one gateway instance reaches the stream another
/// instance holds.
async fn watch_cancel(
    store: Store,
    contract_id: String,
    cancelled: CancellationToken,
    attempt_over: CancellationToken,
) {
    loop {
        tokio::select! {
            () = attempt_over.cancelled() => return,
            () = tokio::time::sleep(CANCEL_WATCH_INTERVAL) => {}
        }
        match store.get_contract(&contract_id).await {
            Ok(Some(contract)) if contract.state == ContractState::Cancelled => {
                cancelled.cancel();
                return;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(contract_id, %error, "cancel watch: store read failed"),
        }
    }
}

impl HireService {
    pub(super) async fn forward(&self, ctx: &Ctx) -> Result<Step, HireError> {
        let inner = &self.inner;
        let settings = &inner.config.contracts;
        // Independent reads: on a pool they run side by side.
        let (payment, listing) =
            tokio::try_join!(self.payment_of(ctx), inner.store.get_worker(&ctx.worker_id))?;
        let payment = payment.ok_or_else(|| internal("a paid contract has no payment"))?;
        let needed = AuthorizationWindow::needed_for_one_attempt(&ctx.terms, settings);
        // `validBefore` is the chain's deadline: judged by its clock.
        let now_s = inner.assets.money_now(ctx.terms.price().chain_id()).await;
        // An upfront payment whose settlement began may have moved: it is never released here
        // (its settlement, below, asks the chain).
        let upfront_begun = ctx.terms.settles_before_work() && payment.settle_started_at.is_some();
        if !upfront_begun
            && payment.valid_before
                < now_s.saturating_add(i64::try_from(needed).unwrap_or(i64::MAX))
        {
            // Too late to work, judge and settle before validBefore: release it instead.
            if self
                .transition(
                    ctx,
                    ContractState::Paid,
                    &ContractEvent::AuthorizationExpired,
                    &Actor::Gateway,
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
        // Upfront: the money moves on chain before the worker is called.
        if let Some(step) = Box::pin(self.settle_before_work(ctx, &payment)).await? {
            return Ok(step);
        }
        let listing = listing.ok_or_else(|| internal("the contract's worker listing is gone"))?;
        if inner.adapters.get(listing.protocol).is_none() {
            return Ok(Step::Done(Err(HireError::protocol_not_supported(format!(
                "no adapter for protocol `{}`",
                listing.protocol.as_str()
            )))));
        }
        // Before each attempt: a worker the health loop marked unhealthy is waited for.
        let wait_until = worker_wait_until(ctx, payment.valid_before, needed, self.now());
        let (listing, unavailable) = match self.await_worker(ctx, listing, wait_until).await? {
            WorkerReadiness::Ready(listing) => (listing, false),
            WorkerReadiness::Unavailable(listing) => (listing, true),
            WorkerReadiness::ContractMoved => return Ok(Step::Again),
            WorkerReadiness::WaitsApart => {
                return Ok(Step::Done(Ok(self.in_progress(ctx, ContractState::Paid))));
            }
        };
        let attempt_id = AttemptId::generate();
        let mut forwarded = json!({"attempt_id": attempt_id, "worker_id": listing.id});
        if unavailable {
            // The attempt is opened only to be ended: the worker is not called.
            forwarded["worker_called"] = json!(false);
        }
        let max_parallel = listing.max_parallel.get();
        let mut hold = None;
        let attempt_no = loop {
            let started = inner
                .store
                .start_attempt(
                    ctx.contract_id.as_str(),
                    ctx.worker_id.as_str(),
                    max_parallel,
                    &NewAttempt {
                        attempt_id: attempt_id.clone(),
                        payment_id: payment.payment_id.clone(),
                        started_at: self.now(),
                    },
                    &self.event(
                        ctx,
                        &Actor::Gateway,
                        EventKind::Forwarded,
                        forwarded.clone(),
                    ),
                )
                .await?;
            match started {
                StartAttempt::Started { attempt_no } => break attempt_no,
                StartAttempt::WorkerBusy { in_flight, ahead } => {
                    match self
                        .queue_for_slot(ctx, &mut hold, in_flight, ahead, max_parallel)
                        .await?
                    {
                        Held::TryAgain => {}
                        Held::Answer(answer) => return Ok(Step::Done(answer)),
                    }
                }
                StartAttempt::StateMismatch { .. } => return Ok(Step::Again),
                StartAttempt::NotFound => {
                    return Err(HireError::not_found("contract"));
                }
            }
        };
        drop(hold);
        self.inner
            .slots
            .line(ctx.worker_id.as_str())
            .attempt_started(ctx.contract_id.as_str());
        if unavailable {
            return self
                .attempt_unavailable(ctx, &listing, &payment, &attempt_id, attempt_no)
                .await;
        }
        tracing::info!(contract_id = %ctx.contract_id, attempt_no, worker_id = %listing.id, "forwarding to worker");
        self.run_attempt(ctx, &listing, &payment, &attempt_id, attempt_no)
            .await
    }

    /// Ask the worker for attempt `attempt_no` (opened as `attempt_id`, the contract in
    /// `executing`) and record its answer. Also how a takeover resumes an attempt whose
    /// instance died: the same attempt asked again under the same idempotency key gets the
    /// worker's stored result or its status, never a second run.
    pub(super) async fn run_attempt(
        &self,
        ctx: &Ctx,
        listing: &WorkerListing,
        payment: &PaymentRecord,
        attempt_id: &AttemptId,
        attempt_no: u32,
    ) -> Result<Step, HireError> {
        let inner = &self.inner;
        let Some(adapter) = inner.adapters.get(listing.protocol).cloned() else {
            return Ok(Step::Done(Err(HireError::protocol_not_supported(format!(
                "no adapter for protocol `{}`",
                listing.protocol.as_str()
            )))));
        };
        let worker_actor = Actor::Worker(listing.id.clone());
        let relay = super::relay::ContractEventRelay::new(
            inner.store.clone(),
            ctx.contract_id.as_str(),
            &ctx.correlation_id,
            worker_actor.clone(),
            self.inner.clock.clone(),
        );
        let answer = self
            .ask_worker(ctx, listing, adapter.as_ref(), attempt_no, &relay)
            .await;
        match answer {
            WorkerAnswer::Delivered {
                deliverable,
                http_status,
                metadata,
            } => {
                self.delivered(
                    ctx,
                    ContractState::Executing,
                    attempt_id,
                    attempt_no,
                    &worker_actor,
                    deliverable,
                    http_status,
                    metadata,
                )
                .await
            }
            pending @ WorkerAnswer::Pending { .. } => {
                self.attempt_pending(ctx, attempt_id, attempt_no, &worker_actor, &relay, pending)
                    .await
            }
            WorkerAnswer::TimedOut => {
                self.attempt_failed(
                    ctx,
                    ContractState::Executing,
                    attempt_id,
                    attempt_no,
                    payment,
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
                    attempt_id,
                    attempt_no,
                    payment,
                    &worker_actor,
                    http_status,
                    json!({"kind": kind.as_str(), "code": code, "message": message, "details": details}),
                    false,
                )
                .await
            }
        }
    }

    /// Send attempt `attempt_no` to the worker through its protocol's `adapter` and wait for its
    /// answer within the SLA (a stream output read to its end within the same SLA), relaying
    /// its events to the contract's log. A Superwire run is cancelled if the contract is.
    async fn ask_worker(
        &self,
        ctx: &Ctx,
        listing: &WorkerListing,
        adapter: &dyn WorkerProtocol,
        attempt_no: u32,
        relay: &super::relay::ContractEventRelay,
    ) -> WorkerAnswer {
        let inner = &self.inner;
        let timeout = Duration::from_millis(ctx.terms.sla().max_latency_ms());
        let cancelled = CancellationToken::new();
        let attempt_over = CancellationToken::new();
        let _stop_watching = attempt_over.clone().drop_guard();
        // Only Superwire holds a run open across the call (its stream); the other protocols
        // are told of a cancel by the cancel step itself.
        if listing.protocol == Protocol::Superwire {
            tokio::spawn(watch_cancel(
                inner.store.clone(),
                ctx.contract_id.to_string(),
                cancelled.clone(),
                attempt_over,
            ));
        }
        let asked = std::time::Instant::now();
        let answer = adapter
            .execute(
                &inner.outbound,
                &ForwardRequest {
                    endpoint: &listing.endpoint,
                    contract_id: ctx.contract_id.as_str(),
                    attempt: attempt_no,
                    contract_token: &ctx.contract_token,
                    task_type: ctx.terms.task().task_type().as_str(),
                    input: ctx.terms.task().input(),
                    output_schemas: ctx.terms.task().output_schemas(),
                    protocol_options: &listing.protocol_options,
                    events: relay,
                    timeout,
                    correlation_id: &ctx.correlation_id,
                    secrets: ctx.secrets.as_ref(),
                    terms: &ctx.terms,
                    cancelled: &cancelled,
                },
            )
            .await;
        let answer = refuse_plain_http(answer, inner.outbound.requires_https());
        let worker_actor = Actor::Worker(listing.id.clone());
        let answer = Box::pin(self.collect_stream(
            ctx,
            answer,
            attempt_no,
            &worker_actor,
            tokio::time::Instant::from_std(asked) + timeout,
        ))
        .await;
        inner
            .metrics
            .worker_request_duration
            .get_or_create(&WorkerLabels {
                worker_id: listing.id.to_string(),
            })
            .observe(asked.elapsed().as_secs_f64());
        answer
    }

    /// The worker took attempt `attempt_no` asynchronously (`pending`): the attempt records its
    /// task, the contract goes `executing → pending`, a durable poll job watches it (the worker's
    /// signed callback may finish it first, see `pending`), and the answer is 202 until then.
    async fn attempt_pending(
        &self,
        ctx: &Ctx,
        attempt_id: &AttemptId,
        attempt_no: u32,
        worker_actor: &Actor,
        relay: &super::relay::ContractEventRelay,
        pending: WorkerAnswer,
    ) -> Result<Step, HireError> {
        let WorkerAnswer::Pending {
            task_id,
            poll_url,
            estimated_completion,
            http_status,
            progress,
        } = pending
        else {
            return Err(internal("attempt_pending takes a pending answer"));
        };
        let store = &self.inner.store;
        if let Some(progress) = progress {
            relay_progress(relay, attempt_no, progress).await;
        }
        store
            .finish_attempt(
                attempt_id.as_str(),
                &AttemptEnd {
                    state: AttemptState::Pending,
                    http_status: Some(http_status),
                    error: None,
                    worker_task_id: task_id.clone(),
                    poll_url: poll_url.as_ref().map(|u| u.to_string()),
                    worker_metadata: None,
                    estimated_completion: estimated_completion.clone(),
                    finished_at: None,
                },
            )
            .await?;
        if self
            .transition(
                ctx,
                ContractState::Executing,
                &ContractEvent::WorkerPending,
                worker_actor,
                json!({"attempt_no": attempt_no, "worker_task_id": task_id,
                       "poll_url": poll_url.as_ref().map(url::Url::as_str),
                       "estimated_completion": estimated_completion}),
                None,
            )
            .await?
        {
            self.watch_pending(ctx, attempt_id).await?;
        }
        let attempt = store
            .list_attempts(ctx.contract_id.as_str())
            .await?
            .into_iter()
            .find(|a| &a.attempt_id == attempt_id);
        Ok(Step::Done(Ok(self.pending_work(
            ctx,
            ContractState::Pending,
            attempt.as_ref(),
        ))))
    }

    /// Record a failed attempt (see [`Self::end_failed_attempt`]) and answer 504
    /// `worker_timeout` (`timed_out`) or 502 `worker_failed`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempt_failed(
        &self,
        ctx: &Ctx,
        from: ContractState,
        attempt_id: &AttemptId,
        attempt_no: u32,
        payment: &PaymentRecord,
        worker_actor: &Actor,
        http_status: Option<u16>,
        error: Value,
        timed_out: bool,
    ) -> Result<Step, HireError> {
        let retry_allowed = self
            .end_failed_attempt(
                ctx,
                from,
                attempt_id,
                attempt_no,
                payment,
                worker_actor,
                http_status,
                &error,
                timed_out,
            )
            .await?;
        let (kind, code, message) = if timed_out {
            (
                FailureKind::WorkerTimedOut,
                ErrorCode::WorkerTimeout,
                "the worker did not answer within the contract's SLA",
            )
        } else {
            (
                FailureKind::WorkerFailed,
                ErrorCode::WorkerFailed,
                "the worker failed this attempt",
            )
        };
        Ok(Step::Done(Ok(Outcome::Failed(Box::new(attempt_failure(
            ctx,
            kind,
            code,
            message,
            attempt_no,
            retry_allowed,
            &error,
        ))))))
    }

    /// The worker stayed unhealthy for as long as the attempt could wait for it (see
    /// `hireable`): the attempt `attempt_no`, opened but never sent, ends `worker_unavailable`
    /// through the failed-attempt path (retry or `failed` with the payment released), and the
    /// answer is 503 (with `Retry-After` when a retry is allowed).
    async fn attempt_unavailable(
        &self,
        ctx: &Ctx,
        listing: &WorkerListing,
        payment: &PaymentRecord,
        attempt_id: &AttemptId,
        attempt_no: u32,
    ) -> Result<Step, HireError> {
        let error = json!({
            "kind": "unavailable",
            "code": "worker_unavailable",
            "message": "the worker was marked unhealthy by its health checks and did not \
                        recover within the contract's SLA; it was not called",
        });
        let retry_allowed = self
            .end_failed_attempt(
                ctx,
                ContractState::Executing,
                attempt_id,
                attempt_no,
                payment,
                &Actor::Gateway,
                None,
                &error,
                false,
            )
            .await?;
        let mut failure = attempt_failure(
            ctx,
            FailureKind::WorkerUnavailable,
            ErrorCode::WorkerUnavailable,
            "the worker is failing its health checks and did not recover within the contract's \
             SLA; it was not called",
            attempt_no,
            retry_allowed,
            &error,
        );
        if !retry_allowed {
            return Ok(Step::Done(Ok(Outcome::Failed(Box::new(failure)))));
        }
        let next_probe_at = listing
            .last_probe_at
            .unwrap_or_else(Utc::now)
            .checked_add_signed(
                chrono::Duration::from_std(self.inner.config.health.interval())
                    .unwrap_or(chrono::Duration::MAX),
            )
            .unwrap_or_else(Utc::now);
        failure.retry_after = Some(Duration::from_secs(
            self.health_retry_after_s(next_probe_at),
        ));
        Ok(Step::Done(Ok(Outcome::Failed(Box::new(failure)))))
    }

    /// Record a failed attempt (`from` = `executing` or `pending`) and move the contract on:
    /// back to `paid` when the retry policy allows another attempt under the same payment, else
    /// `failed` with the authorization voided. Returns whether a retry is allowed.
    #[allow(clippy::too_many_arguments)]
    async fn end_failed_attempt(
        &self,
        ctx: &Ctx,
        from: ContractState,
        attempt_id: &AttemptId,
        attempt_no: u32,
        payment: &PaymentRecord,
        worker_actor: &Actor,
        http_status: Option<u16>,
        error: &Value,
        timed_out: bool,
    ) -> Result<bool, HireError> {
        let retry_policy = ctx.terms.retry_policy();
        let retry_allowed = retry_policy.allows_retry_after(attempt_no);
        self.inner
            .store
            .finish_attempt(
                attempt_id.as_str(),
                &AttemptEnd {
                    state: if timed_out {
                        AttemptState::TimedOut
                    } else {
                        AttemptState::Failed
                    },
                    http_status,
                    error: Some(error.clone()),
                    worker_task_id: None,
                    poll_url: None,
                    worker_metadata: None,
                    estimated_completion: None,
                    finished_at: Some(self.now()),
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
        if applied {
            self.slot_freed(ctx);
        }
        if applied && !retry_allowed {
            self.record_void(ctx, payment, "retries_exhausted").await?;
        }
        tracing::info!(contract_id = %ctx.contract_id, attempt_no, retry_allowed, timed_out, "worker attempt failed");
        Ok(retry_allowed)
    }

    /// Mark the held authorization as released (never to be settled) and log it.
    pub(super) async fn record_void(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
        reason: &str,
    ) -> Result<(), HireError> {
        if payment.authorize_tx.is_some() {
            // Escrowed: the money is locked on chain and must be sent back.
            return self.release_escrow(ctx, payment, reason).await;
        }
        if self.keeps_upfront_payment(ctx, payment).await? {
            // Settled before the work (or on its way): nothing can return it, and the terms
            // say so. The contract's end is recorded; the payment stays as the chain has it.
            tracing::info!(contract_id = %ctx.contract_id, reason, "upfront payment kept");
            return Ok(());
        }
        let store = &self.inner.store;
        store
            .set_payment_state(&payment.payment_id, PaymentState::Voided, self.now())
            .await?;
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &Actor::Gateway,
                    EventKind::PaymentVoided,
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
        attempt_id: &AttemptId,
        attempt_no: u32,
        worker_actor: &Actor,
        deliverable: Deliverable,
        http_status: u16,
        metadata: Option<Value>,
    ) -> Result<Step, HireError> {
        let inner = &self.inner;
        let store = &inner.store;
        let digest = deliverable
            .digest()
            .map_err(|e| internal(format!("deliverable digest: {e}")))?;
        let bytes =
            to_canonical_vec(&deliverable).map_err(|e| internal(format!("deliverable: {e}")))?;
        let now = self.now();
        let pieces = [NewDeliverable {
            deliverable_id: DeliverableId::generate(),
            contract_id: ctx.contract_id.clone(),
            attempt_id: attempt_id.to_owned(),
            position: 0,
            name: None,
            kind: PieceKind::Deliverable,
            media_type: Some("application/json".to_owned()),
            digest: digest.to_string(),
            content: bytes,
            source_url: None,
            created_at: now,
        }];
        let end = AttemptEnd {
            state: AttemptState::Completed,
            http_status: Some(http_status),
            error: None,
            worker_task_id: None,
            poll_url: None,
            worker_metadata: metadata,
            estimated_completion: None,
            finished_at: Some(now),
        };
        let policy = ctx.terms.verification();
        let received = self.event(
            ctx,
            worker_actor,
            EventKind::DeliverableReceived,
            json!({"attempt_no": attempt_no, "deliverable_digest": digest}),
        );
        let started = self.event(
            ctx,
            &Actor::Gateway,
            EventKind::VerificationStarted,
            json!({"policy_id": policy.policy_id(), "policy_hash": policy.policy_hash()}),
        );
        self.prepare_settlement(ctx);
        // Stored, closed, `delivered` and `verifying` in one commit: a crash after it is
        // resumed by judging the stored bytes, as one between the steps would be.
        let advanced = store
            .advance_contract(
                ctx.contract_id.as_str(),
                &[
                    ContractStep {
                        from,
                        to: ContractState::Delivered,
                        deadline_at: None,
                        event: &received,
                    },
                    ContractStep {
                        from: ContractState::Delivered,
                        to: ContractState::Verifying,
                        deadline_at: None,
                        event: &started,
                    },
                ],
                &pieces
                    .iter()
                    .map(SideWrite::Deliverable)
                    .chain([SideWrite::AttemptEnd {
                        attempt_id: attempt_id.as_str(),
                        end: &end,
                    }])
                    .collect::<Vec<_>>(),
            )
            .await?;
        if !matches!(advanced, Transition::Applied { .. }) {
            // Another report of the same attempt won (poll and callback), or the contract
            // moved on (an SLA breach): keep what the worker sent for the record.
            match store.insert_deliverables(&pieces).await {
                Ok(()) | Err(StoreError::Duplicate { .. }) => {}
                Err(other) => return Err(other.into()),
            }
            store.finish_attempt(attempt_id.as_str(), &end).await?;
            return Ok(Step::Again);
        }
        self.slot_freed(ctx);
        // The commit closed the attempt at `now`: the verdict's proposal needs no read back.
        let _ = ctx.written.proposal.set((
            attempt_id.clone(),
            Proposal::new(&ctx.terms, attempt_no, now),
        ));
        if deliverable.evidence_requests().is_empty() {
            let [piece] = pieces;
            let _ = ctx.written.delivery.set((vec![piece], end.worker_metadata));
        }
        self.judge(ctx, attempt_id, &deliverable, digest).await
    }
}

/// The answer to an attempt that ended without a deliverable: HIRE's failure shape with the
/// attempts left and the worker's error.
fn attempt_failure(
    ctx: &Ctx,
    kind: FailureKind,
    code: ErrorCode,
    message: &str,
    attempt_no: u32,
    retry_allowed: bool,
    error: &Value,
) -> Failure {
    let max_attempts = ctx.terms.retry_policy().max_attempts();
    Failure {
        kind,
        contract_id: ctx.contract_id.to_string(),
        code,
        message: if retry_allowed {
            format!("{message}; execute again to retry under the same payment")
        } else {
            format!(
                "{message}; no attempts are left, the payment was voided and nothing was settled"
            )
        },
        details: json!({
            "contract_id": ctx.contract_id,
            "state": if retry_allowed { "paid" } else { "failed" },
            "attempt": attempt_no,
            "max_attempts": max_attempts,
            "attempts_left": max_attempts.saturating_sub(attempt_no),
            "retry_allowed": retry_allowed,
            "worker_error": error,
        }),
        retry_after: None,
    }
}

/// Appends a worker's progress report (HIRE `partial` while the work goes on) to the
/// contract's event log as `worker_progress`.
pub(super) async fn relay_progress(
    relay: &super::relay::ContractEventRelay,
    attempt_no: u32,
    progress: Value,
) {
    let mut details = json!({"attempt_no": attempt_no});
    if let (Some(fields), Value::Object(reported)) = (details.as_object_mut(), progress) {
        fields.extend(reported);
    }
    relay.relay(EventKind::WorkerProgress, details).await;
}

/// The error recorded for an attempt that outlived the contract's `sla.max_latency_ms` (and,
/// pending, its `sla.poll_window_s`).
pub(super) fn sla_exceeded_error(ctx: &Ctx) -> Value {
    let sla = ctx.terms.sla();
    json!({
        "kind": "timeout",
        "code": "sla_exceeded",
        "message": format!(
            "no result within the SLA of {} ms and the poll window of {} s",
            sla.max_latency_ms(),
            sla.poll_window_s()
        ),
    })
}
