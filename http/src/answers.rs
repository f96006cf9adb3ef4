//! The REST rendering of the engine's answers: [`Outcome`]s, [`HireError`]s and what execute,
//! cancel and callbacks return, mapped to status codes, x402 and HIRE headers and JSON bodies.
//! The engine speaks hires; this is the one place that knows how a hire looks over HTTP, and it
//! answers byte for byte what the API always answered (`tests/api/wire_snapshot.rs` holds it to
//! that).
//!
//! | engine | REST |
//! |---|---|
//! | `PaymentRequired` | 402, `PAYMENT-REQUIRED`, `Cache-Control: no-store`, `X-Payment-*`, `{"error":…}` |
//! | `Accepted` | 200 with the deliverable (`PAYMENT-RESPONSE` once settled) |
//! | `SettlementFailed` | 402 `settlement_failed` with `PAYMENT-RESPONSE` |
//! | `Pending` / `InProgress` / `Queued` | 202 with where to look, `Retry-After` (`Queued`: `Location`, the contract to poll) |
//! | `Failed` | 422 / 502 / 503 / 504, HIRE's `{"status":"failed","contract_id","error"}` |
//! | `HireError` | the kind's status, `{"error":{"code","message","details"}}`, `Retry-After` |
//!
//! A repeated execute (SW4RM's `DUPLICATE_DETECTED`) adds `X-Duplicate: true` to any answer
//! and, to an outcome's body, `duplicate: true` with the `original` attempt; every execute
//! answer about a hire its caller may see carries the hire's `X-Correlation-ID` (a 402 from
//! memory too).

use axum::{
    Json,
    body::Bytes,
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use hiregate_payments::{SettleResponse, encode_header};
use serde_json::{Value, json};

use hiregate_engine::hire::{
    error::{ErrorKind, HireError},
    outcome::{
        AcceptedWork, CallbackReceipt, Cancellation, Execution, Failure, FailureKind, Outcome,
        PaymentDemand, Progress, QueuePlace, Settlement, SettlementFailure,
    },
};

const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
const X_PAYMENT_ADDRESS: HeaderName = HeaderName::from_static("x-payment-address");
const X_PAYMENT_AMOUNT: HeaderName = HeaderName::from_static("x-payment-amount");
const X_PAYMENT_CURRENCY: HeaderName = HeaderName::from_static("x-payment-currency");
const X_PAYMENT_NETWORK: HeaderName = HeaderName::from_static("x-payment-network");

/// HIRE informational headers exposed to browsers with the x402 ones.
pub const INFORMATIONAL_HEADERS: [HeaderName; 4] = [
    X_PAYMENT_ADDRESS,
    X_PAYMENT_AMOUNT,
    X_PAYMENT_CURRENCY,
    X_PAYMENT_NETWORK,
];

/// The hire's correlation id on every execute answer (see [`hiregate_contracts::id::CorrelationId`]).
pub const X_CORRELATION_ID: HeaderName = HeaderName::from_static("x-correlation-id");
/// `true` on the answer to a repeated execute.
pub const X_DUPLICATE: HeaderName = HeaderName::from_static("x-duplicate");

/// Headers of the hire's tracking, exposed to browsers.
pub const HIRE_TRACKING_HEADERS: [HeaderName; 2] = [X_CORRELATION_ID, X_DUPLICATE];

/// An answer being built: status, headers in order, and a JSON body or an error.
struct Answer {
    status: StatusCode,
    body: Body,
    headers: Vec<(HeaderName, HeaderValue)>,
}

enum Body {
    Json(Value),
    /// An error rendered the way every API error is.
    Error(HireError),
}

/// A payment demand's 402, made once per demand (see [`PaymentDemand::rendered`]): its body
/// and its whole header map, which each answer clones. Building the map per answer (copying
/// the header list, hashing every name into a fresh map) was about a tenth of the unpaid 402's
/// own work in its profile (`--bench unpaid`).
struct PreparedDemand {
    body: Bytes,
    headers: HeaderMap,
}

impl PreparedDemand {
    fn new(demand: &PaymentDemand) -> Self {
        let Answer { body, headers, .. } = demand_answer(demand);
        let body = match body {
            Body::Json(value) => Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
            Body::Error(_) => Bytes::new(),
        };
        Self {
            body,
            headers: json_headers(headers),
        }
    }

    fn response(&self) -> Response {
        let mut response = Response::new(axum::body::Body::from(self.body.clone()));
        *response.status_mut() = StatusCode::PAYMENT_REQUIRED;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

/// `Content-Type: application/json` and `headers` in order, in a map whose table has room for
/// what the layers add on the way out (request id, CORS `Vary`, correlation id), so adding them
/// never rebuilds it: that showed in the 402's profile.
fn json_headers(headers: Vec<(HeaderName, HeaderValue)>) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(1 + headers.len() + RESERVED_HEADERS);
    map.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in headers {
        map.append(name, value);
    }
    map
}

impl Answer {
    fn json(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            body: Body::Json(body),
            headers: Vec::new(),
        }
    }

    fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    fn retry_after(self, seconds: u64) -> Self {
        self.header(header::RETRY_AFTER, HeaderValue::from(seconds))
    }

    /// `Location`: where a client that cannot wait finds the result.
    fn location(self, url: &str) -> Self {
        match HeaderValue::from_str(url) {
            Ok(value) => self.header(header::LOCATION, value),
            Err(_) => self,
        }
    }

    fn payment_response(self, settlement: Option<&SettleResponse>) -> Self {
        match settlement.and_then(|s| HeaderValue::from_str(&encode_header(s)).ok()) {
            Some(value) => self.header(PAYMENT_RESPONSE, value),
            None => self,
        }
    }

    fn into_response(self) -> Response {
        let mut response = match self.body {
            Body::Error(error) => hire_error(&error),
            Body::Json(body) => (self.status, Json(body)).into_response(),
        };
        let headers = response.headers_mut();
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        response
    }
}

/// Room left in an answer's header map for what the layers add on the way out.
const RESERVED_HEADERS: usize = 6;

/// The answer to an execute.
pub fn execution(execution: Execution) -> Response {
    let Execution {
        result,
        duplicate_of,
        correlation_id,
    } = execution;
    let correlation = correlation_id.and_then(|id| HeaderValue::from_str(id.as_str()).ok());
    // The one answer that may be served from memory: its bytes and headers are made once.
    if let (Ok(Outcome::PaymentRequired(demand)), None) = (&result, &duplicate_of)
        && let Some(prepared) = demand.rendered(PreparedDemand::new)
    {
        let mut response = prepared.response();
        if let Some(value) = correlation {
            response.headers_mut().append(X_CORRELATION_ID, value);
        }
        return response;
    }
    let mut answer = match (result, &duplicate_of) {
        (Ok(outcome), _) => outcome_answer(outcome),
        (Err(error), _) => Answer {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            body: Body::Error(error),
            headers: Vec::new(),
        },
    };
    if let Some(original) = duplicate_of {
        if let Body::Json(Value::Object(body)) = &mut answer.body {
            body.insert("duplicate".to_owned(), Value::Bool(true));
            body.insert("original".to_owned(), original.to_json());
        }
        answer = answer.header(X_DUPLICATE, HeaderValue::from_static("true"));
    }
    if let Some(value) = correlation {
        answer = answer.header(X_CORRELATION_ID, value);
    }
    answer.into_response()
}

/// The answer to an outcome outside an execute (no duplicate, no correlation header).
pub fn outcome(outcome: Outcome) -> Response {
    outcome_answer(outcome).into_response()
}

/// An outcome's status and JSON body as the API answers it (for callers that report an
/// answer in the API's terms, as the MCP server's tool errors do).
pub fn status_and_body(outcome: Outcome) -> (StatusCode, Value) {
    let answer = outcome_answer(outcome);
    let body = match answer.body {
        Body::Json(value) => value,
        Body::Error(error) => json!({"error": {
            "code": error.code.as_str(),
            "message": error.message,
            "details": error.details_or_empty(),
        }}),
    };
    (answer.status, body)
}

fn outcome_answer(outcome: Outcome) -> Answer {
    match outcome {
        Outcome::PaymentRequired(demand) => demand_answer(&demand),
        Outcome::Accepted(work) => accepted(*work),
        Outcome::SettlementFailed(failure) => settlement_failed(&failure),
        Outcome::Pending(progress) => work_under_way(progress, "pending"),
        Outcome::InProgress(progress) => work_under_way(progress, "in_progress"),
        Outcome::Queued(place) => queued(&place),
        Outcome::Failed(failure) => failed(&failure),
    }
}

/// 402 with `PAYMENT-REQUIRED` (the challenge, its `error` set to the refusal's reason),
/// `Cache-Control: no-store`, the HIRE informational headers and a JSON body saying the same.
fn demand_answer(demand: &PaymentDemand) -> Answer {
    let body = json!({"error": {
        "code": demand.code.as_str(),
        "message": demand.message,
        "details": demand.details,
    }});
    Answer {
        status: StatusCode::PAYMENT_REQUIRED,
        body: Body::Json(body),
        headers: demand_headers(demand),
    }
}

fn demand_headers(demand: &PaymentDemand) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = vec![(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))];
    if let Ok(value) = HeaderValue::from_str(&encode_header(&demand.challenge)) {
        headers.push((PAYMENT_REQUIRED, value));
    }
    for (name, key) in [
        (X_PAYMENT_ADDRESS, "address"),
        (X_PAYMENT_AMOUNT, "amount"),
        (X_PAYMENT_CURRENCY, "currency"),
        (X_PAYMENT_NETWORK, "network"),
    ] {
        if let Some(value) = demand
            .informational
            .get(key)
            .and_then(Value::as_str)
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            headers.push((name, value));
        }
    }
    headers
}

/// 200: the deliverable, its verification and settlement; `PAYMENT-RESPONSE` once settled.
fn accepted(work: AcceptedWork) -> Answer {
    let settlement = match work.settlement {
        Settlement::Settled {
            transaction,
            response,
        } => json!({
            "status": "settled",
            "transaction": transaction,
            "response": response,
        }),
        Settlement::Deferred { settle_after } => json!({
            "status": "deferred",
            "settle_after": settle_after,
            "message": "settlement waits until the acceptance window ends",
        }),
    };
    let mut body = json!({
        "status": work.status,
        "contract_id": work.contract_id,
        "state": work.state,
        "deliverable": work.deliverable,
        "deliverable_digest": work.deliverable_digest,
        "deliverable_withheld": work.deliverable_withheld,
        "verification": work.verification,
        "settlement": settlement,
        "metadata": work.metadata,
    });
    if let Some(output) = work.output {
        body["output"] = output;
        if let Some(files) = work.deliverables {
            body["deliverables"] = files;
        }
    }
    Answer::json(StatusCode::OK, body).payment_response(work.payment_response.as_ref())
}

/// 402 `settlement_failed` with the facilitator's `PAYMENT-RESPONSE`.
fn settlement_failed(failure: &SettlementFailure) -> Answer {
    Answer::json(
        StatusCode::PAYMENT_REQUIRED,
        json!({"error": {
            "code": "settlement_failed",
            "message": "the facilitator refused to settle the payment; the deliverable is withheld",
            "details": {"contract_id": failure.contract_id, "state": failure.state, "reason": failure.reason},
        }}),
    )
    .payment_response(failure.settlement.as_ref())
}

/// 202 for work under way: HIRE's pending answer (`status`, `task_id`, `poll_url`,
/// `estimated_completion`) when the worker took the task asynchronously.
fn work_under_way(progress: Progress, status: &str) -> Answer {
    let mut body = json!({
        "contract_id": progress.contract_id,
        "state": progress.state,
        "status": status,
        "message": "the contract is being worked on; poll it or follow its events",
        "poll_url": progress.poll_url,
        "events_url": progress.events_url,
    });
    if let Some(task) = progress.worker_task {
        body["task_id"] = json!(task.task_id);
        body["estimated_completion"] = json!(task.estimated_completion);
    }
    Answer::json(StatusCode::ACCEPTED, body).retry_after(1)
}

/// 202 `queued` with the contract's place in its worker's queue.
fn queued(place: &QueuePlace) -> Answer {
    Answer::json(
        StatusCode::ACCEPTED,
        json!({
            "contract_id": place.contract_id,
            "state": "paid",
            "status": "queued",
            "message": "the worker is busy: the paid contract waits in its queue and is \
                        forwarded when a slot frees; cancelling it charges nothing",
            "queued": {
                "position": place.position,
                "queue_depth": place.queue_depth,
                "in_flight": place.in_flight,
                "max_parallel": place.max_parallel,
                "eta_s": place.eta_s,
                "eta_at": place.eta_at,
            },
            "poll_url": place.poll_url,
            "events_url": place.events_url,
        }),
    )
    .retry_after(place.retry_after.as_secs())
    .location(&place.poll_url)
}

/// HIRE's failure answer: `{"status":"failed","contract_id","error":{code,message,details}}`.
fn failed(failure: &Failure) -> Answer {
    let status = match failure.kind {
        FailureKind::Rejected => StatusCode::UNPROCESSABLE_ENTITY,
        FailureKind::WorkerFailed => StatusCode::BAD_GATEWAY,
        FailureKind::WorkerTimedOut => StatusCode::GATEWAY_TIMEOUT,
        FailureKind::WorkerUnavailable => StatusCode::SERVICE_UNAVAILABLE,
    };
    let answer = Answer::json(
        status,
        json!({
            "status": "failed",
            "contract_id": failure.contract_id,
            "error": {
                "code": failure.code.as_str(),
                "message": failure.message,
                "details": failure.details,
            },
        }),
    );
    match failure.retry_after {
        Some(wait) => answer.retry_after(wait.as_secs()),
        None => answer,
    }
}

/// The status of an error kind.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::NotAParty => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Gone => StatusCode::GONE,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Busy => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// An engine error: its kind's status, `{"error":{"code","message","details"}}` and
/// `Retry-After` when waiting helps. Internal errors are logged with their cause (in the
/// request's span) and answered opaquely.
pub fn hire_error(error: &HireError) -> Response {
    let status = status_of(error.kind);
    if error.kind == ErrorKind::Internal {
        let cause = error
            .cause
            .as_ref()
            .map_or_else(|| error.message.clone(), |cause| format!("{cause:#}"));
        tracing::error!(error.message = %error, error.cause_chain = %cause, "request failed");
    }
    let body = json!({
        "error": {
            "code": error.code.as_str(),
            "message": error.message,
            "details": error.details_or_empty(),
        }
    });
    let mut response = (status, Json(body)).into_response();
    if let Some(wait) = error.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs()));
    }
    response
}

/// The answer to a seeker's cancel.
pub fn cancellation(result: Result<Cancellation, HireError>) -> Response {
    match result {
        Ok(cancelled) => (
            StatusCode::OK,
            Json(json!({
                "contract_id": cancelled.contract_id,
                "state": "cancelled",
                "payment": cancelled.payment.map(|(payment_id, state)| json!({
                    "payment_id": payment_id,
                    "state": state,
                    "settled": false,
                })),
            })),
        )
            .into_response(),
        Err(error) => hire_error(&error),
    }
}

/// The answer to a worker's callback: 202 for a progress report, 200 for an applied one.
pub fn callback_receipt(result: Result<CallbackReceipt, HireError>) -> Response {
    match result {
        Ok(CallbackReceipt::Noted { contract_id, state }) => (
            StatusCode::ACCEPTED,
            Json(json!({"contract_id": contract_id, "status": "noted", "state": state})),
        )
            .into_response(),
        Ok(CallbackReceipt::Applied { contract_id, state }) => (
            StatusCode::OK,
            Json(json!({"contract_id": contract_id, "status": "accepted", "state": state})),
        )
            .into_response(),
        Err(error) => hire_error(&error),
    }
}
