//! [`Outcome`]: what a hire came to when a caller asks (an execute, a retry, a background
//! drive), as domain values: the payment it still needs, the accepted work and its settlement,
//! work under way (pending at the worker, in progress, queued for a slot), or a failure. With
//! [`super::HireError`] it is all the engine answers; each transport renders both (the REST API
//! in `http::answers`, byte for byte its historical answers).
//!
//! ```text
//! HireResult = Result<Outcome, HireError>
//! Outcome ─ PaymentRequired(the offer's x402 challenge, and why a payment was refused)
//!         ─ Accepted(deliverable, verification, settlement: settled | deferred)
//!         ─ SettlementFailed(the facilitator's refusal)
//!         ─ Pending(worker task) │ InProgress │ Queued(position, eta)
//!         ─ Failed(rejected │ worker failed │ timed out │ worker unavailable)
//! ```

use hiregate_store::offer::StoredOffer;
use std::{
    any::Any,
    sync::{Arc, OnceLock},
    time::Duration,
};

use chrono::{DateTime, Utc};
use hiregate_contracts::state::ContractState;
use hiregate_payments::{PaymentRequired, SettleResponse};
use serde_json::{Value, json};

use super::error::{ErrorCode, ErrorKind, HireError};

/// What an engine step answers.
pub type HireResult = Result<Outcome, HireError>;

/// What a hire came to.
#[derive(Debug)]
pub enum Outcome {
    /// The contract must be paid (first ask, or a payment that could not be used): the offer's
    /// challenge, and why when a payment was refused. Shared: the unpaid execute of an offered
    /// contract answers the same demand every time (see `offered`).
    PaymentRequired(Arc<PaymentDemand>),
    /// The deliverable passed verification: the work, and its settlement (done, or deferred to
    /// the end of the acceptance window).
    Accepted(Box<AcceptedWork>),
    /// The facilitator refused to settle; the deliverable is withheld.
    SettlementFailed(Box<SettlementFailure>),
    /// The worker took the task asynchronously and works on it.
    Pending(Progress),
    /// The contract is between steps (paying, forwarding, verifying, settling).
    InProgress(Progress),
    /// Paid and waiting in the worker's queue for a free slot.
    Queued(QueuePlace),
    /// The hire failed: rejected by verification, or the worker failed, timed out or was
    /// unavailable (with or without a retry left).
    Failed(Box<Failure>),
}

/// The x402 challenge of a contract, and the refusal that led to it, if any.
#[derive(Debug)]
pub struct PaymentDemand {
    /// `payment_required`, or why the payment sent was not taken (`payment_invalid`, …).
    pub code: ErrorCode,
    /// What to do, for people.
    pub message: String,
    /// The challenge: the offer's requirements, its `error` set to the refusal's reason.
    pub challenge: PaymentRequired,
    /// HIRE's informational fields (`address`, `amount`, `currency`, `network`).
    pub informational: Value,
    /// The details: the caller's (`contract_id`, …) with `payment` (the informational
    /// fields), `payment_required` (the challenge) and `reason`.
    pub details: Value,
    /// A transport's rendering of this demand, made on its first answer and reused while the
    /// demand is shared (the unpaid execute's hot path answers without building anything).
    rendered: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl PaymentDemand {
    /// The demand of `offer` with `code` and `message`; `reason` is x402's `error` (why a
    /// payment was refused), `details` an object the demand adds its payment fields to.
    pub fn new(
        offer: &StoredOffer,
        code: ErrorCode,
        message: impl Into<String>,
        reason: Option<&str>,
        mut details: Value,
    ) -> Self {
        let challenge = offer.challenge(reason.map(str::to_owned));
        let informational = super::offer::informational(offer);
        if let Some(object) = details.as_object_mut() {
            object.insert("payment".to_owned(), informational.clone());
            object.insert(
                "payment_required".to_owned(),
                serde_json::to_value(&challenge).unwrap_or(Value::Null),
            );
            if let Some(reason) = reason {
                object.insert("reason".to_owned(), Value::String(reason.to_owned()));
            }
        }
        Self {
            code,
            message: message.into(),
            challenge,
            informational,
            details,
            rendered: OnceLock::new(),
        }
    }

    /// The rendering of type `T` made by `render` on the first call, or `None` when another
    /// transport's rendering holds the slot (the caller then renders afresh).
    pub fn rendered<T: Any + Send + Sync>(&self, render: impl FnOnce(&Self) -> T) -> Option<&T> {
        self.rendered
            .get_or_init(|| Box::new(render(self)))
            .downcast_ref::<T>()
    }
}

/// Accepted work: the deliverable as the seeker may see it, its verification and settlement.
#[derive(Debug)]
pub struct AcceptedWork {
    /// The contract.
    pub contract_id: String,
    /// `settled` or `accepted`.
    pub state: ContractState,
    /// HIRE's status: `partial` when the worker said so, else `completed`.
    pub status: &'static str,
    /// The deliverable's content (`null` while the money does not allow showing it).
    pub deliverable: Option<Value>,
    /// Its digest.
    pub deliverable_digest: Option<Value>,
    /// Why its content is withheld, when it is.
    pub deliverable_withheld: Option<Value>,
    /// The verification result.
    pub verification: Option<Value>,
    /// The settlement.
    pub settlement: Settlement,
    /// The worker's metadata of the delivery.
    pub metadata: Option<Value>,
    /// HIRE's `output`, when the content is shown.
    pub output: Option<Value>,
    /// HIRE's `deliverables` (files), for an output made only of files.
    pub deliverables: Option<Value>,
    /// The facilitator's settlement response, once settled (x402's `PAYMENT-RESPONSE`).
    pub payment_response: Option<SettleResponse>,
}

/// The settlement of accepted work.
#[derive(Debug)]
pub enum Settlement {
    /// Settled on chain.
    Settled {
        /// The transaction.
        transaction: Option<String>,
        /// The facilitator's settlement response, as stored.
        response: Option<Value>,
    },
    /// Waits until the acceptance window ends.
    Deferred {
        /// When the window ends.
        settle_after: Option<DateTime<Utc>>,
    },
}

/// A settlement the facilitator refused.
#[derive(Debug)]
pub struct SettlementFailure {
    /// The contract.
    pub contract_id: String,
    /// Its state (`settlement_failed`).
    pub state: ContractState,
    /// The facilitator's reason.
    pub reason: Option<String>,
    /// The facilitator's settlement response (x402's `PAYMENT-RESPONSE`).
    pub settlement: Option<SettleResponse>,
}

/// Work under way, and where to follow it.
#[derive(Debug)]
pub struct Progress {
    /// The contract.
    pub contract_id: String,
    /// Its state now.
    pub state: ContractState,
    /// The gateway's view of the contract, to poll.
    pub poll_url: String,
    /// Its event stream.
    pub events_url: String,
    /// The worker's task, for work pending at the worker.
    pub worker_task: Option<WorkerTask>,
}

impl Progress {
    /// The outcome: [`Outcome::Pending`] for a pending contract, else
    /// [`Outcome::InProgress`].
    pub fn into_outcome(self) -> Outcome {
        if self.state == ContractState::Pending {
            Outcome::Pending(self)
        } else {
            Outcome::InProgress(self)
        }
    }
}

/// The worker's own handle on pending work.
#[derive(Debug)]
pub struct WorkerTask {
    /// The worker's task id.
    pub task_id: Option<String>,
    /// When the worker expects to finish.
    pub estimated_completion: Option<String>,
}

/// A paid contract's place in its worker's queue.
#[derive(Debug)]
pub struct QueuePlace {
    /// The contract.
    pub contract_id: String,
    /// 1 = next.
    pub position: u32,
    /// `contracts.worker_queue_depth`.
    pub queue_depth: u32,
    /// Contracts the worker has in flight.
    pub in_flight: u32,
    /// The worker's `max_parallel`.
    pub max_parallel: u32,
    /// An upper bound of the wait, in seconds.
    pub eta_s: u64,
    /// That bound as a time.
    pub eta_at: DateTime<Utc>,
    /// The gateway's view of the contract, to poll.
    pub poll_url: String,
    /// Its event stream.
    pub events_url: String,
    /// When to ask again.
    pub retry_after: Duration,
}

/// How a hire failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The deliverable did not pass verification; nothing was settled.
    Rejected,
    /// The worker failed the attempt.
    WorkerFailed,
    /// The worker did not answer within the SLA.
    WorkerTimedOut,
    /// The worker stayed unhealthy and was not called.
    WorkerUnavailable,
}

/// A failed hire: HIRE's failure answer.
#[derive(Debug)]
pub struct Failure {
    /// How it failed.
    pub kind: FailureKind,
    /// The contract.
    pub contract_id: String,
    /// The stable code.
    pub code: ErrorCode,
    /// What happened, for people.
    pub message: String,
    /// Attempts, retries left, the worker's error, the verification.
    pub details: Value,
    /// When to try again, when a retry may succeed later.
    pub retry_after: Option<Duration>,
}

/// The original answer a repeated execute is linked to (SW4RM's `DUPLICATE_DETECTED`).
#[derive(Debug)]
pub struct Original {
    /// The contract's latest attempt when the repeat came in.
    pub attempt_id: Option<String>,
    /// The contract's state then.
    pub status: ContractState,
    /// When that state was recorded.
    pub cached_at: DateTime<Utc>,
}

impl Original {
    /// `{status: "DUPLICATE_DETECTED", original_attempt_id, original_status, cached_at}`.
    pub fn to_json(&self) -> Value {
        json!({
            "status": "DUPLICATE_DETECTED",
            "original_attempt_id": self.attempt_id,
            "original_status": self.status,
            "cached_at": self.cached_at,
        })
    }
}

/// An execute's answer: the result, whether it repeats an earlier execute, and the hire's
/// correlation id (absent when the call was refused before its hire was found: a stranger's,
/// an unreadable body, another input).
#[derive(Debug)]
pub struct Execution {
    /// What the hire came to.
    pub result: HireResult,
    /// Set when the execute repeated one answered before: nothing ran again.
    pub duplicate_of: Option<Original>,
    /// The hire's correlation id.
    pub correlation_id: Option<String>,
}

/// A seeker's cancel, done.
#[derive(Debug)]
pub struct Cancellation {
    /// The contract.
    pub contract_id: String,
    /// Its payment, voided, if it had one: `(payment_id, state)`.
    pub payment: Option<(
        hiregate_contracts::id::PaymentId,
        hiregate_store::states::PaymentState,
    )>,
}

/// A worker's signed report, taken.
#[derive(Debug)]
pub enum CallbackReceipt {
    /// A progress report, noted.
    Noted {
        /// The contract.
        contract_id: String,
        /// Its state.
        state: ContractState,
    },
    /// A terminal report, applied.
    Applied {
        /// The contract.
        contract_id: String,
        /// Its state after the report.
        state: Option<ContractState>,
    },
}

/// For background work's logs: the code of a result that left the hire unfinished on the
/// gateway's or the worker's side (an internal fault, something unavailable, a worker that
/// failed or timed out), if it did. Refusals and answers by state are not problems of the
/// background work.
pub fn unfinished(result: &HireResult) -> Option<ErrorCode> {
    match result {
        Err(error) if matches!(error.kind, ErrorKind::Internal | ErrorKind::Unavailable) => {
            Some(error.code)
        }
        Ok(Outcome::Failed(failure)) if failure.kind != FailureKind::Rejected => Some(failure.code),
        _ => None,
    }
}
