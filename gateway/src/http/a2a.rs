//! A2A (v1.0, JSON-RPC binding) with the a2a-x402 extension: `POST /a2a/workers/{worker_id}`
//! (the interface a listing's agent card names) and `POST /a2a` (the marketplace card's), served
//! by the stable x402 resource's engine ([`crate::hire::resource`]), not by calls to our own
//! HTTP routes.
//!
//! ```text
//! SendMessage {message: parts = the task input}
//!   └─► unpaid hire_resource ──► Task TASK_STATE_INPUT_REQUIRED, id = the offer's contract id;
//!       status.message.metadata: x402.payment.status "payment-required",
//!       x402.payment.required = the x402 v2 PaymentRequired (its offer carries the input)
//! SendMessage {message: taskId, metadata: x402.payment.status "payment-submitted",
//!              x402.payment.payload = the signed PaymentPayload}
//!   └─► paid hire_resource (contract from the signed offer, executed, verified, settled)
//!       ──► TASK_STATE_COMPLETED: artifact = the verified deliverable,
//!           x402.payment.status "payment-completed", x402.payment.receipts = [settlement]
//!       ──► TASK_STATE_FAILED: x402.payment.status "payment-failed" (refused payment, rejected
//!           deliverable, failed worker): nothing settled, no artifact
//!       ──► TASK_STATE_WORKING: paid, the work goes on (pending, queued, a duplicate)
//! GetTask {id} with Authorization: Bearer hg_cap_… ──► the contract as a Task
//! ```
//!
//! Streaming (`SendStreamingMessage`, `SubscribeToTask`) answers Server-Sent Events whose data
//! are JSON-RPC responses holding A2A `StreamResponse`s: a payment streams the task at once
//! (`TASK_STATE_WORKING`, `payment-submitted`), then the deliverable's `artifactUpdate` and the
//! final `statusUpdate` with the receipt; the hire runs detached from the connection, so a
//! client that leaves finds its result with `GetTask`. `SubscribeToTask` (with the capability
//! token) streams the paid task now and its changes until it ends.
//!
//! Method names and JSON are the A2A v1.0 binding's as the official `a2a-sdk` (1.3) sends and
//! parses them: `SendMessage`, `GetTask`; ProtoJSON field names (`taskId`, `contextId`), enum
//! names (`ROLE_AGENT`, `TASK_STATE_INPUT_REQUIRED`), parts without `kind` (`{"data": …}`,
//! `{"text": …}`). Metadata travels as a protobuf `Struct`, whose numbers are doubles, so a
//! client echoes `2` as `2.0`: integral numbers coming in are read back as integers
//! ([`integral`]) before anything is parsed or hashed (every hiregate number that matters is an
//! integer or a string; the signed documents are canonicalized (RFC 8785), where `2.0` and `2`
//! are the same).
//!
//! **Nothing is stored for an unpaid message**: the task id is the signed offer's contract id,
//! and the offer (`accepts[0].extra.hiregate`) also carries the task input, so the payment
//! message needs nothing but the payment: the input comes back with the echoed offer, bound to
//! the signed terms by their `input_digest` (another input is refused). The edge takes it out of
//! the offer before the engine sees the payment, so the contract's stored offer is the HTTP
//! resource's. An input the client resends as a part of the payment message is used instead
//! (and must be the same). So a `GetTask` of a task still waiting for its payment finds nothing
//! (`TaskNotFoundError`): a task exists once it is paid, and `GetTask` then needs the capability
//! token the paid answer carries in `metadata["hiregate.access"]`, as the contract's REST routes
//! do (task ids are not secrets).
//!
//! Every answer is HTTP 200 with a JSON-RPC body, errors included (as the SDK's server does):
//! `-32700` unparsable, `-32600` not a request, `-32601` unknown method, `-32602` bad params or
//! a refused input (the engine's stable code in `data[0].reason`), `-32001` task not found,
//! `-32004` unsupported (cancel, listing tasks), `-32003` push notifications (the card claims
//! none), `-32009` an `A2A-Version` other than 1.x, `-32603` a transient or internal failure
//! (nothing paid; retry). A failed hire's task carries `metadata["hiregate.error"]` (its code
//! and details, `retry_allowed` among them: sending the payment again then retries).

use std::{convert::Infallible, time::Duration};

use axum::{
    Json,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, HeaderValue, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use base64::Engine as _;
use chrono::{SecondsFormat, Utc};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{
    extract::{AppPath, Party},
    routes::{Routes, post},
};
use crate::{
    error::ApiError,
    hire::{
        error::{ErrorKind, HireError},
        outcome::{Outcome, Settlement},
        resource::{OFFER_EXTRA_KEY, ResourceExecution, ResourceRequest},
    },
    state::AppState,
};
use hiregate_contracts::state::ContractState;
use hiregate_store::ids::WorkerId;

/// `x402.payment.status`: where the payment is.
pub const X402_STATUS: &str = "x402.payment.status";
/// `x402.payment.required`: the x402 v2 `PaymentRequired`.
pub const X402_REQUIRED: &str = "x402.payment.required";
/// `x402.payment.payload`: the client's signed `PaymentPayload`.
pub const X402_PAYLOAD: &str = "x402.payment.payload";
/// `x402.payment.receipts`: the settlement responses of the task.
pub const X402_RECEIPTS: &str = "x402.payment.receipts";
/// `x402.payment.error`: why a payment failed, a short code.
pub const X402_ERROR: &str = "x402.payment.error";
/// Message metadata naming the listing, on the marketplace interface.
pub const WORKER_KEY: &str = "hiregate.workerId";
/// Message metadata naming the task type (the skill), when the listing offers several.
pub const TASK_TYPE_KEY: &str = "hiregate.taskType";
/// Task metadata: the contract the payment made.
pub const CONTRACT_KEY: &str = "hiregate.contractId";
/// Task metadata: the capability token that reads the task (and the contract's REST routes).
pub const ACCESS_KEY: &str = "hiregate.access";
/// Task metadata: hiregate's account of a failed hire (`code`, `details`: attempts, whether a
/// retry is allowed, the worker's error).
pub const ERROR_KEY: &str = "hiregate.error";
/// The A2A protocol version header, and the one version served.
const VERSION_HEADER: &str = "a2a-version";
/// The key of the signed offer (`accepts[0].extra.hiregate`) that carries the task input.
pub const OFFER_INPUT_KEY: &str = "input";

/// JSON-RPC and A2A error codes (A2A v1.0 §9, as the SDK maps them).
mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED: i64 = -32004;
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// The A2A interfaces.
pub fn router() -> Routes {
    Routes::new()
        .route("/a2a", post(marketplace_rpc))
        .route("/a2a/workers/{worker_id}", post(listing_rpc))
}

/// `POST /a2a`: the marketplace's A2A interface (JSON-RPC 2.0, A2A v1.0). `SendMessage` names
/// the listing in `message.metadata["hiregate.workerId"]` (and the task type in
/// `"hiregate.taskType"` when it offers several); a payment message needs neither (its offer
/// names them). `GetTask` as on a listing's interface.
#[utoipa::path(
    post,
    path = "/a2a",
    tag = "a2a",
    request_body(content = Object, description = "A JSON-RPC 2.0 request: `SendMessage` (params: A2A `SendMessageRequest`) or `GetTask` (params: `{id}`, with `Authorization: Bearer hg_cap_…`)"),
    responses((status = 200, description = "A JSON-RPC 2.0 response, errors included: `result` is a `SendMessageResponse` (`{task}`) or a `Task`; `error` has the JSON-RPC / A2A code and `data[0]` a `google.rpc.ErrorInfo` with hiregate's stable code. `SendStreamingMessage` and `SubscribeToTask` answer Server-Sent Events whose data are such responses (`result`: a `StreamResponse`)", content(
        (Object = "application/json"),
        (String = "text/event-stream"),
    ))),
)]
pub(crate) async fn marketplace_rpc(
    State(state): State<AppState>,
    party: Result<Party, ApiError>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    rpc(&state, None, party, &headers, body).await
}

/// `POST /a2a/workers/{worker_id}`: a listing's A2A interface (JSON-RPC 2.0, A2A v1.0, the
/// a2a-x402 extension). `SendMessage` with the task input (a `data` part, or a `text` part
/// holding JSON) answers a task in `TASK_STATE_INPUT_REQUIRED` whose status message carries the
/// x402 requirements; the same task's payment message (`x402.payment.payload`) answers the
/// verified deliverable as an artifact with the settlement receipt, or a failed task, unpaid.
#[utoipa::path(
    post,
    path = "/a2a/workers/{worker_id}",
    tag = "a2a",
    params(("worker_id" = String, Path, description = "Listing id (`wk_…`)")),
    request_body(content = Object, description = "A JSON-RPC 2.0 request: `SendMessage` (params: A2A `SendMessageRequest`) or `GetTask` (params: `{id}`, with `Authorization: Bearer hg_cap_…`)"),
    responses((status = 200, description = "A JSON-RPC 2.0 response, errors included: `result` is a `SendMessageResponse` (`{task}`) or a `Task`; `error` has the JSON-RPC / A2A code and `data[0]` a `google.rpc.ErrorInfo` with hiregate's stable code. `SendStreamingMessage` and `SubscribeToTask` answer Server-Sent Events whose data are such responses (`result`: a `StreamResponse`)", content(
        (Object = "application/json"),
        (String = "text/event-stream"),
    ))),
)]
pub(crate) async fn listing_rpc(
    State(state): State<AppState>,
    AppPath(worker_id): AppPath<String>,
    party: Result<Party, ApiError>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    rpc(&state, Some(worker_id), party, &headers, body).await
}

/// A JSON-RPC error: code, message, hiregate's stable code (`ErrorInfo.reason`) and details.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
    reason: String,
    details: Value,
}

impl RpcError {
    fn new(code: i64, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            reason: reason.to_owned(),
            details: Value::Null,
        }
    }

    fn params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, "invalid_params", message)
    }

    /// The engine's refusal: the caller's mistakes are invalid params, a task of nobody's is
    /// not found, transient and internal faults are internal errors (nothing was paid).
    fn of(error: HireError) -> Self {
        let code = match error.kind {
            ErrorKind::BadRequest
            | ErrorKind::Conflict
            | ErrorKind::Gone
            | ErrorKind::Unprocessable
            | ErrorKind::NotFound => code::INVALID_PARAMS,
            ErrorKind::Unauthenticated
            | ErrorKind::NotAParty
            | ErrorKind::Busy
            | ErrorKind::Unavailable
            | ErrorKind::Internal => code::INTERNAL,
        };
        if error.kind == ErrorKind::Internal {
            tracing::error!(error = ?error.cause, "A2A request failed");
        }
        let mut details = error.details.unwrap_or(Value::Null);
        if let Some(retry) = error.retry_after {
            if !details.is_object() {
                details = json!({});
            }
            details["retry_after_s"] = json!(retry.as_secs().max(1));
        }
        Self {
            code,
            message: error.message,
            reason: error.code.as_str().to_owned(),
            details,
        }
    }

    fn into_json(self) -> Value {
        let mut metadata = json!({"code": self.reason});
        if !self.details.is_null() {
            metadata["details"] = self.details;
        }
        json!({
            "code": self.code,
            "message": self.message,
            "data": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason.to_uppercase(),
                "domain": "hiregate",
                "metadata": metadata,
            }],
        })
    }
}

fn answer(id: Value, outcome: Result<Value, RpcError>) -> Response {
    let mut body = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "error": error.into_json()}),
    };
    body["id"] = id;
    Json(body).into_response()
}

async fn rpc(
    state: &AppState,
    worker_id: Option<String>,
    party: Result<Party, ApiError>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => {
            let message = rejection.body_text();
            return answer(
                Value::Null,
                Err(RpcError::new(
                    code::INVALID_REQUEST,
                    "invalid_request",
                    message,
                )),
            );
        }
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(error) => {
            return answer(
                Value::Null,
                Err(RpcError::new(
                    code::PARSE_ERROR,
                    "malformed_json",
                    format!("the body is not JSON: {error}"),
                )),
            );
        }
    };
    let Some(request) = request.as_object() else {
        return answer(
            Value::Null,
            Err(RpcError::new(
                code::INVALID_REQUEST,
                "invalid_request",
                "a JSON-RPC request is an object (batches are not served)",
            )),
        );
    };
    let id = match request.get("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return answer(
                Value::Null,
                Err(RpcError::new(
                    code::INVALID_REQUEST,
                    "invalid_request",
                    "`id` must be a string, a number or null",
                )),
            );
        }
    };
    let (Some("2.0"), Some(method)) = (
        request.get("jsonrpc").and_then(Value::as_str),
        request.get("method").and_then(Value::as_str),
    ) else {
        return answer(
            id,
            Err(RpcError::new(
                code::INVALID_REQUEST,
                "invalid_request",
                "a JSON-RPC 2.0 request has `jsonrpc: \"2.0\"` and a `method`",
            )),
        );
    };
    let params = match request.get("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(params @ Value::Object(_)) => integral(params.clone()),
        Some(_) => {
            return answer(id, Err(RpcError::params("`params` must be an object")));
        }
    };
    // A client names the protocol version it speaks; only 1.x is served (a 0.3 client's
    // methods would not be found anyway). No header: taken as 1.0, the version of the card.
    if let Some(version) = headers.get(VERSION_HEADER) {
        let version = version.to_str().unwrap_or_default().trim();
        if version != "1" && !version.starts_with("1.") {
            return answer(
                id,
                Err(RpcError::new(
                    code::VERSION_NOT_SUPPORTED,
                    "version_not_supported",
                    format!("A2A-Version {version:?} is not served: this interface speaks 1.0"),
                )),
            );
        }
    }
    let correlation_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(128).collect())
        .unwrap_or_else(|| format!("req_{}", ulid::Ulid::new()));
    let outcome = match method {
        "SendMessage" => send_message(state, worker_id.as_deref(), &params, correlation_id)
            .await
            .map(|task| json!({"task": task})),
        "GetTask" => get_task(state, party.as_ref().ok(), &params).await,
        "SendStreamingMessage" => {
            return stream_message(state, worker_id, params, correlation_id, id).await;
        }
        "SubscribeToTask" => return subscribe(state, party, &params, id).await,
        "CancelTask" => Err(RpcError::new(
            code::UNSUPPORTED,
            "unsupported_operation",
            "a paid task cannot be cancelled here; an unpaid one needs no cancelling (nothing \
             was stored)",
        )),
        "ListTasks" | "GetExtendedAgentCard" => Err(RpcError::new(
            code::UNSUPPORTED,
            "unsupported_operation",
            format!("{method} is not offered"),
        )),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::new(
            code::PUSH_NOT_SUPPORTED,
            "push_notification_not_supported",
            "push notifications are not offered (capabilities.pushNotifications: false)",
        )),
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            "method_not_found",
            format!(
                "unknown method {other:?}: this interface speaks A2A v1.0 (SendMessage, GetTask)"
            ),
        )),
    };
    answer(id, outcome)
}

/// How often `SubscribeToTask` looks at the contract, and for how long at most.
const SUBSCRIBE_POLL: Duration = Duration::from_millis(500);
const SUBSCRIBE_MAX: Duration = Duration::from_secs(15 * 60);

/// An SSE answer whose events are JSON-RPC responses (`result`: an A2A `StreamResponse`) that
/// `produce` sends, for as long as it runs.
fn event_stream<F, Fut>(id: Value, produce: F) -> Response
where
    F: FnOnce(StreamSink) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = mpsc::channel::<Event>(16);
    // Detached: a paid hire runs to its end even when the client goes away (its result stays
    // readable with GetTask).
    tokio::spawn(produce(StreamSink { id, sender }));
    let stream = futures::StreamExt::map(ReceiverStream::new(receiver), Ok::<_, Infallible>);
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Where a stream's events go.
struct StreamSink {
    id: Value,
    sender: mpsc::Sender<Event>,
}

impl StreamSink {
    /// Sends one `StreamResponse` (or an error); `false` once the client is gone.
    async fn send(&self, outcome: Result<Value, RpcError>) -> bool {
        let mut body = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "error": error.into_json()}),
        };
        body["id"] = self.id.clone();
        self.sender
            .send(Event::default().data(body.to_string()))
            .await
            .is_ok()
    }

    /// The events that take a client from a task it has to the final `task`: its artifacts,
    /// then its status (A2A's `TaskArtifactUpdateEvent`s and final `TaskStatusUpdateEvent`).
    async fn finish(&self, task: &Value) {
        let task_id = task["id"].clone();
        let context_id = task["contextId"].clone();
        for artifact in task["artifacts"].as_array().into_iter().flatten() {
            let update = json!({"artifactUpdate": {
                "taskId": task_id,
                "contextId": context_id,
                "artifact": artifact,
                "lastChunk": true,
            }});
            if !self.send(Ok(update)).await {
                return;
            }
        }
        let update = json!({"statusUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "status": task["status"],
        }});
        self.send(Ok(update)).await;
    }
}

/// `SendStreamingMessage`: `SendMessage`'s exchange as a stream. An unpaid message streams its
/// one input-required task; a payment streams the task at once (`TASK_STATE_WORKING`,
/// `payment-submitted`), then, when the hire ends, the deliverable's artifact and the final
/// status with the receipt.
async fn stream_message(
    state: &AppState,
    worker_id: Option<String>,
    params: Value,
    correlation_id: String,
    id: Value,
) -> Response {
    let message = params.get("message").and_then(Value::as_object);
    let metadata = message
        .and_then(|m| m.get("metadata"))
        .and_then(Value::as_object);
    let payment = metadata.and_then(|m| m.get(X402_PAYLOAD));
    let first = message.zip(payment).and_then(|(message, payment)| {
        let task_id = non_empty(message, "taskId")
            .map(str::to_owned)
            .or_else(|| offered(payment, "/contract_id"))?;
        let context_id =
            non_empty(message, "contextId").map_or_else(|| task_id.clone(), str::to_owned);
        Some(task(
            &task_id,
            &context_id,
            "TASK_STATE_WORKING",
            "Payment received: verifying it, then running the task.",
            json!({X402_STATUS: "payment-submitted", X402_RECEIPTS: []}),
            None,
        ))
    });
    let state = state.clone();
    event_stream(id, move |sink| async move {
        let Some(first) = first else {
            // Unpaid (or declined): one task, or one error.
            let outcome = send_message(&state, worker_id.as_deref(), &params, correlation_id)
                .await
                .map(|task| json!({"task": task}));
            sink.send(outcome).await;
            return;
        };
        if !sink.send(Ok(json!({"task": first}))).await {
            // The client left: the hire still runs, its answer is GetTask's.
            let _ = send_message(&state, worker_id.as_deref(), &params, correlation_id).await;
            return;
        }
        match send_message(&state, worker_id.as_deref(), &params, correlation_id).await {
            Ok(task) => sink.finish(&task).await,
            Err(error) => {
                sink.send(Err(error)).await;
            }
        }
    })
}

/// `SubscribeToTask`: the paid task now, then its changes until it ends (polled from the
/// contract), for the holder of its capability token.
async fn subscribe(
    state: &AppState,
    party: Result<Party, ApiError>,
    params: &Value,
    id: Value,
) -> Response {
    let Ok(party) = party else {
        return answer(id, Err(task_not_found()));
    };
    let first = match get_task(state, Some(&party), params).await {
        Ok(task) => task,
        Err(error) => return answer(id, Err(error)),
    };
    let state = state.clone();
    let task_id = first["id"].as_str().unwrap_or_default().to_owned();
    event_stream(id, move |sink| async move {
        let mut last = first;
        if !sink.send(Ok(json!({"task": last.clone()}))).await {
            return;
        }
        let started = tokio::time::Instant::now();
        while !is_terminal(&last) && started.elapsed() < SUBSCRIBE_MAX {
            tokio::time::sleep(SUBSCRIBE_POLL).await;
            let Ok(view) = state
                .hire
                .view_contract(&party.principal_id, &task_id)
                .await
            else {
                continue;
            };
            let now = task_of_view(&task_id, &view);
            if now["status"]["state"] == last["status"]["state"] {
                continue;
            }
            if is_terminal(&now) {
                sink.finish(&now).await;
                return;
            }
            let update = json!({"statusUpdate": {
                "taskId": task_id,
                "contextId": now["contextId"],
                "status": now["status"],
            }});
            if !sink.send(Ok(update)).await {
                return;
            }
            last = now;
        }
    })
}

fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"]["state"].as_str(),
        Some(
            "TASK_STATE_COMPLETED"
                | "TASK_STATE_FAILED"
                | "TASK_STATE_CANCELED"
                | "TASK_STATE_REJECTED"
        )
    )
}

/// `value` with every integral number that a protobuf `Struct` made a double (`2.0`) an integer
/// again, at any depth.
fn integral(value: Value) -> Value {
    /// Largest integer a double holds exactly.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Number(number) if number.is_f64() => match number.as_f64() {
            #[allow(clippy::cast_possible_truncation)]
            Some(float) if float.fract() == 0.0 && float.abs() <= EXACT => {
                Value::from(float as i64)
            }
            _ => Value::Number(number),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key, integral(value)))
                .collect(),
        ),
        other => other,
    }
}

/// The task input a message carries: its first `data` part, else its first `text` part (the
/// JSON it holds, or the text as a JSON string).
fn input_of(message: &Map<String, Value>) -> Option<Value> {
    let parts = message.get("parts")?.as_array()?;
    if let Some(data) = parts.iter().find_map(|part| part.get("data")) {
        return Some(data.clone());
    }
    let text = parts
        .iter()
        .find_map(|part| part.get("text").and_then(Value::as_str))?;
    Some(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
}

fn non_empty<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

async fn send_message(
    state: &AppState,
    path_worker: Option<&str>,
    params: &Value,
    correlation_id: String,
) -> Result<Value, RpcError> {
    let message = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::params("params.message is required"))?;
    let metadata = message
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let task_id = non_empty(message, "taskId").map(str::to_owned);
    let context_id = non_empty(message, "contextId").map(str::to_owned);
    if metadata.get(X402_STATUS).and_then(Value::as_str) == Some("payment-rejected") {
        // The client declined the offer: the task ends; nothing was stored for it.
        let task_id = task_id.ok_or_else(|| {
            RpcError::params("a payment-rejected message names the task it declines (taskId)")
        })?;
        let context_id = context_id.unwrap_or_else(|| task_id.clone());
        return Ok(task(
            &task_id,
            &context_id,
            "TASK_STATE_FAILED",
            "The payment requirements were declined; nothing was paid or run.",
            json!({X402_STATUS: "payment-rejected", X402_RECEIPTS: []}),
            None,
        ));
    }
    match metadata.get(X402_PAYLOAD) {
        Some(payload) => {
            // A payment message's text is talk ("here is the payment"); only a data part can
            // be the input sent again.
            let input = message
                .get("parts")
                .and_then(Value::as_array)
                .and_then(|parts| parts.iter().find_map(|part| part.get("data")))
                .cloned();
            paid(
                state,
                path_worker,
                &metadata,
                payload,
                input,
                task_id,
                context_id,
                correlation_id,
            )
            .await
        }
        None if task_id.is_some() => Err(RpcError::params(format!(
            "a message to a task waiting for its payment carries the signed payment in \
             metadata[{X402_PAYLOAD:?}] ({X402_STATUS}: payment-submitted), or declines it \
             ({X402_STATUS}: payment-rejected)"
        ))),
        None => {
            unpaid(
                state,
                path_worker,
                &metadata,
                input_of(message),
                context_id,
                correlation_id,
            )
            .await
        }
    }
}

/// The listing and task type a new message is for: the path's (or `hiregate.workerId`'s)
/// listing, and `hiregate.taskType` or the listing's only task type.
async fn resource_of(
    state: &AppState,
    path_worker: Option<&str>,
    metadata: &Map<String, Value>,
) -> Result<(WorkerId, String), RpcError> {
    let raw = path_worker
        .or_else(|| non_empty(metadata, WORKER_KEY))
        .ok_or_else(|| {
            RpcError::params(format!(
                "name the listing in message.metadata[{WORKER_KEY:?}] (or use its own interface, \
                 /a2a/workers/{{id}}, named by its agent card)"
            ))
        })?;
    let not_found = || RpcError::new(code::INVALID_PARAMS, "not_found", "no such listing");
    let worker_id: WorkerId = raw.parse().map_err(|_| not_found())?;
    if let Some(task_type) = non_empty(metadata, TASK_TYPE_KEY) {
        return Ok((worker_id, task_type.to_owned()));
    }
    let listing = state
        .store
        .get_worker(&worker_id)
        .await
        .map_err(|e| RpcError::of(HireError::from(e)))?
        .ok_or_else(not_found)?;
    let task_types = listing.tasks.task_types();
    match task_types.as_slice() {
        [only] => Ok((worker_id, only.as_str().to_owned())),
        several => Err(RpcError::params(format!(
            "this listing offers several task types: name one in \
             message.metadata[{TASK_TYPE_KEY:?}] ({})",
            several
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn body_of(input: &Value) -> Result<Bytes, RpcError> {
    serde_json::to_vec(input)
        .map(Bytes::from)
        .map_err(|e| RpcError::of(HireError::internal(e)))
}

/// A new task: the engine's signed offer, nothing stored.
async fn unpaid(
    state: &AppState,
    path_worker: Option<&str>,
    metadata: &Map<String, Value>,
    input: Option<Value>,
    context_id: Option<String>,
    correlation_id: String,
) -> Result<Value, RpcError> {
    let (worker_id, task_type) = resource_of(state, path_worker, metadata).await?;
    let input = input.ok_or_else(|| {
        RpcError::params("the message carries no task input: send it as a data part")
    })?;
    let hired = state
        .hire
        .hire_resource(ResourceRequest {
            worker_id,
            task_type,
            body: body_of(&input)?,
            payment_signature: None,
            correlation_id,
        })
        .await;
    let demand = match hired.execution.result {
        Ok(Outcome::PaymentRequired(demand)) => demand,
        Ok(_) => {
            return Err(RpcError::of(HireError::internal_msg(
                "an unpaid resource call answered something else than its offer",
            )));
        }
        Err(error) => return Err(RpcError::of(error)),
    };
    let mut required = serde_json::to_value(&demand.challenge)
        .map_err(|e| RpcError::of(HireError::internal(e)))?;
    let mut task_id = None;
    if let Some(accepts) = required.get_mut("accepts").and_then(Value::as_array_mut) {
        for accepted in accepts {
            if let Some(offer) = accepted
                .pointer_mut(&format!("/extra/{OFFER_EXTRA_KEY}"))
                .and_then(Value::as_object_mut)
            {
                task_id = task_id.or_else(|| {
                    offer
                        .get("terms")
                        .and_then(|t| t.get("contract_id"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
                offer.insert(OFFER_INPUT_KEY.to_owned(), input.clone());
            }
        }
    }
    let task_id = task_id.ok_or_else(|| {
        RpcError::of(HireError::internal_msg(
            "the resource offer names no contract",
        ))
    })?;
    let context_id = context_id.unwrap_or_else(|| task_id.clone());
    Ok(task(
        &task_id,
        &context_id,
        "TASK_STATE_INPUT_REQUIRED",
        &format!(
            "Payment is required: {} Sign one of x402.payment.required's accepts (x402 v2) and \
             send it in this task's next message as x402.payment.payload.",
            demand.message
        ),
        json!({X402_STATUS: "payment-required", X402_REQUIRED: required}),
        None,
    ))
}

/// The offer's signed terms field at `pointer`, if the payment echoes an offer.
fn offered(payload: &Value, pointer: &str) -> Option<String> {
    payload
        .pointer(&format!("/accepted/extra/{OFFER_EXTRA_KEY}/terms{pointer}"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A payment for a task: the engine makes the contract from the offer it echoes (once) and
/// runs it.
#[allow(clippy::too_many_arguments)]
async fn paid(
    state: &AppState,
    path_worker: Option<&str>,
    metadata: &Map<String, Value>,
    payload: &Value,
    input: Option<Value>,
    task_id: Option<String>,
    context_id: Option<String>,
    correlation_id: String,
) -> Result<Value, RpcError> {
    let mut payload = payload.clone();
    if !payload.is_object() {
        return Err(RpcError::params(format!(
            "metadata[{X402_PAYLOAD:?}] must be an x402 v2 PaymentPayload object"
        )));
    }
    let offered_input = payload
        .pointer_mut(&format!("/accepted/extra/{OFFER_EXTRA_KEY}"))
        .and_then(Value::as_object_mut)
        .and_then(|offer| offer.remove(OFFER_INPUT_KEY));
    let offered_task = offered(&payload, "/contract_id");
    if let (Some(task_id), Some(offered_task)) = (&task_id, &offered_task)
        && task_id != offered_task
    {
        return Err(RpcError::params(format!(
            "the payment answers the offer of task {offered_task}, not of task {task_id}"
        )));
    }
    let raw_worker = path_worker
        .map(str::to_owned)
        .or_else(|| offered(&payload, "/worker/id"))
        .or_else(|| non_empty(metadata, WORKER_KEY).map(str::to_owned))
        .ok_or_else(|| {
            RpcError::params("the payment echoes no hiregate offer and names no listing")
        })?;
    let worker_id: WorkerId = raw_worker
        .parse()
        .map_err(|_| RpcError::new(code::INVALID_PARAMS, "not_found", "no such listing"))?;
    let task_type = offered(&payload, "/task/task_type")
        .or_else(|| non_empty(metadata, TASK_TYPE_KEY).map(str::to_owned))
        .ok_or_else(|| {
            RpcError::params("the payment echoes no hiregate offer and names no task type")
        })?;
    let input = input.or(offered_input).ok_or_else(|| {
        RpcError::params(
            "no task input: echo the offer of x402.payment.required unchanged (it carries the \
             input), or send the input again as a data part",
        )
    })?;
    let network = payload
        .pointer("/accepted/network")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let payer = payload
        .pointer("/payload/authorization/from")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let header = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&payload).map_err(|e| RpcError::of(HireError::internal(e)))?);
    let hired = state
        .hire
        .hire_resource(ResourceRequest {
            worker_id,
            task_type,
            body: body_of(&input)?,
            payment_signature: Some(header),
            correlation_id,
        })
        .await;
    let task_id = hired
        .contract_id
        .clone()
        .or(task_id)
        .or(offered_task)
        .unwrap_or_default();
    let context_id = context_id.unwrap_or_else(|| task_id.clone());
    paid_task(
        state,
        &task_id,
        &context_id,
        hired,
        &Receipt { network, payer },
    )
}

/// What a failed receipt names.
struct Receipt {
    network: String,
    payer: Option<String>,
}

impl Receipt {
    fn failed(&self, reason: &str) -> Value {
        let mut receipt = json!({
            "success": false,
            "errorReason": reason,
            "transaction": "",
            "network": self.network,
        });
        if let Some(payer) = &self.payer {
            receipt["payer"] = json!(payer);
        }
        receipt
    }
}

/// The task a paid message came to.
fn paid_task(
    state: &AppState,
    task_id: &str,
    context_id: &str,
    hired: ResourceExecution,
    receipt: &Receipt,
) -> Result<Value, RpcError> {
    let ResourceExecution {
        execution,
        contract_id,
        capability,
    } = hired;
    let mut extra = Map::new();
    if let Some(contract_id) = &contract_id {
        extra.insert(CONTRACT_KEY.to_owned(), json!(contract_id));
        if let Some(token) = &capability {
            extra.insert(ACCESS_KEY.to_owned(), access(state, contract_id, token));
        }
    }
    let failed = |code: &str, text: &str, extra: Map<String, Value>| {
        let mut metadata = json!({
            X402_STATUS: "payment-failed",
            X402_ERROR: code.to_uppercase(),
            X402_RECEIPTS: [receipt.failed(text)],
        });
        if let Some(object) = metadata.as_object_mut() {
            object.extend(extra);
        }
        task(
            task_id,
            context_id,
            "TASK_STATE_FAILED",
            text,
            metadata,
            None,
        )
    };
    let working = |text: &str, extra: Map<String, Value>| {
        let mut metadata = json!({X402_STATUS: "payment-verified", X402_RECEIPTS: []});
        if let Some(object) = metadata.as_object_mut() {
            object.extend(extra);
        }
        task(
            task_id,
            context_id,
            "TASK_STATE_WORKING",
            text,
            metadata,
            None,
        )
    };
    let outcome = match execution.result {
        Ok(outcome) => outcome,
        // A transient failure (facilitator or chain unreachable, a full queue) charged
        // nothing and may pass: an error to retry, not a failed task.
        Err(error)
            if contract_id.is_some()
                && !matches!(error.kind, ErrorKind::Busy | ErrorKind::Unavailable) =>
        {
            return Ok(failed(error.code.as_str(), &error.message, extra));
        }
        Err(error) => return Err(RpcError::of(error)),
    };
    Ok(match outcome {
        Outcome::PaymentRequired(demand) => {
            let reason = demand
                .challenge
                .error
                .clone()
                .unwrap_or_else(|| demand.message.clone());
            failed(
                demand.code.as_str(),
                &format!(
                    "The payment was refused ({reason}); nothing was paid or run. Send a new message for a fresh offer."
                ),
                extra,
            )
        }
        Outcome::Accepted(work) => {
            let receipts: Vec<Value> = work
                .payment_response
                .as_ref()
                .and_then(|r| serde_json::to_value(r).ok())
                .into_iter()
                .collect();
            let settled = matches!(work.settlement, Settlement::Settled { .. });
            match work.deliverable {
                Some(content) if settled => {
                    let mut metadata =
                        json!({X402_STATUS: "payment-completed", X402_RECEIPTS: receipts});
                    if let Some(object) = metadata.as_object_mut() {
                        object.extend(extra);
                    }
                    task(
                        task_id,
                        context_id,
                        "TASK_STATE_COMPLETED",
                        "Paid: the deliverable passed its verification and the payment settled.",
                        metadata,
                        Some(artifact(task_id, content, work.verification)),
                    )
                }
                _ => working(
                    "The deliverable passed its verification; it is released when the payment \
                     settles (GetTask).",
                    extra,
                ),
            }
        }
        Outcome::SettlementFailed(failure) => {
            let reason = failure
                .reason
                .clone()
                .unwrap_or_else(|| "settlement_failed".to_owned());
            let mut task = failed(
                "settlement_failed",
                &format!("The settlement failed ({reason}); the deliverable is withheld."),
                extra,
            );
            if let Some(settlement) = failure
                .settlement
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
            {
                task["status"]["message"]["metadata"][X402_RECEIPTS] = json!([settlement]);
            }
            task
        }
        Outcome::Pending(_) | Outcome::InProgress(_) | Outcome::Queued(_) => working(
            "Paid; the work goes on: follow it with GetTask (Authorization: Bearer the \
             hiregate.access token).",
            extra,
        ),
        Outcome::Failed(failure) => {
            // Whether sending the payment again retries the work (HIRE's `retry_allowed`), the
            // attempts and the worker's own error.
            let mut extra = extra;
            extra.insert(
                ERROR_KEY.to_owned(),
                json!({"code": failure.code.as_str(), "details": failure.details}),
            );
            failed(failure.code.as_str(), &failure.message, extra)
        }
    })
}

/// The capability token of a paid task, and where it reads.
fn access(state: &AppState, contract_id: &str, token: &str) -> Value {
    let base = state
        .hire
        .base_url()
        .as_str()
        .trim_end_matches('/')
        .to_owned();
    let contract = format!("{base}/v1/contracts/{contract_id}");
    json!({
        "token_type": "Bearer",
        "token": token,
        "grants": ["GetTask", "contract", "events", "receipt", "disputes"],
        "contract": contract,
        "events": format!("{contract}/events"),
        "receipt": format!("{contract}/receipt"),
    })
}

fn artifact(task_id: &str, content: Value, verification: Option<Value>) -> Value {
    let mut artifact = json!({
        "artifactId": format!("{task_id}-deliverable"),
        "name": "deliverable",
        "description": "The deliverable, verified against the contract's pinned policy before \
                        the payment settled",
    });
    let mut part = json!({"mediaType": "application/json"});
    part["data"] = content;
    artifact["parts"] = json!([part]);
    if let Some(verification) = verification.filter(|v| !v.is_null()) {
        artifact["metadata"] = json!({"verification": verification});
    }
    artifact
}

/// An A2A v1.0 `Task` whose status message (from the agent) says `text` with `metadata`.
fn task(
    task_id: &str,
    context_id: &str,
    state: &str,
    text: &str,
    metadata: Value,
    artifact: Option<Value>,
) -> Value {
    let mut task = json!({
        "id": task_id,
        "contextId": context_id,
        "status": {
            "state": state,
            "message": {
                "messageId": format!("msg_{}", ulid::Ulid::new()),
                "role": "ROLE_AGENT",
                "taskId": task_id,
                "contextId": context_id,
                "parts": [{"text": text}],
            },
            "timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        },
    });
    task["status"]["message"]["metadata"] = metadata;
    if let Some(artifact) = artifact {
        task["artifacts"] = json!([artifact]);
    }
    task
}

/// `GetTask`: the paid task (the contract) for the holder of its capability token (or the key
/// of its seeker or its worker's operator).
async fn get_task(
    state: &AppState,
    party: Option<&Party>,
    params: &Value,
) -> Result<Value, RpcError> {
    let id = params
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| RpcError::params("params.id (the task id) is required"))?;
    let not_found = task_not_found;
    let party = party.ok_or_else(not_found)?;
    let view = match state.hire.view_contract(&party.principal_id, id).await {
        Ok(view) => view,
        Err(error) if error.kind == ErrorKind::NotFound => return Err(not_found()),
        Err(error) => return Err(RpcError::of(error)),
    };
    Ok(task_of_view(id, &view))
}

fn task_not_found() -> RpcError {
    RpcError::new(
        code::TASK_NOT_FOUND,
        "task_not_found",
        "no such task for this caller: a task exists once paid, and is read with the \
         capability token of its paid answer (Authorization: Bearer hg_cap_…)",
    )
}

/// A contract view (`GET /v1/contracts/{id}`) as an A2A task.
fn task_of_view(id: &str, view: &Value) -> Value {
    let contract_state = view
        .get("state")
        .cloned()
        .and_then(|s| serde_json::from_value::<ContractState>(s).ok());
    let content = view
        .pointer("/deliverable/content")
        .filter(|c| !c.is_null())
        .cloned();
    let receipts: Vec<Value> = view
        .pointer("/settlement/response")
        .filter(|r| !r.is_null())
        .cloned()
        .into_iter()
        .collect();
    let metadata =
        |status: &str| json!({X402_STATUS: status, X402_RECEIPTS: receipts, CONTRACT_KEY: id});
    use ContractState as S;
    let (state, text, metadata, artifact) = match contract_state {
        Some(S::Settled) if content.is_some() => (
            "TASK_STATE_COMPLETED",
            "Paid: the deliverable passed its verification and the payment settled.",
            metadata("payment-completed"),
            content.map(|c| artifact(id, c, view.get("verification").cloned())),
        ),
        Some(S::Offered) => (
            "TASK_STATE_INPUT_REQUIRED",
            "Waiting for its payment.",
            metadata("payment-required"),
            None,
        ),
        Some(S::Rejected | S::Voided) => (
            "TASK_STATE_FAILED",
            "The deliverable did not pass its verification; nothing was settled.",
            json!({X402_STATUS: "payment-failed", X402_ERROR: "VERIFICATION_FAILED", X402_RECEIPTS: receipts, CONTRACT_KEY: id}),
            None,
        ),
        Some(S::Failed | S::SettlementFailed | S::Expired | S::Refunded) => (
            "TASK_STATE_FAILED",
            "The hire ended without a settled deliverable.",
            json!({X402_STATUS: "payment-failed", X402_ERROR: view.get("state").and_then(Value::as_str).unwrap_or("failed").to_uppercase(), X402_RECEIPTS: receipts, CONTRACT_KEY: id}),
            None,
        ),
        Some(S::Cancelled) => (
            "TASK_STATE_CANCELED",
            "Cancelled before delivery; nothing was settled.",
            metadata("payment-failed"),
            None,
        ),
        _ => (
            "TASK_STATE_WORKING",
            "Paid; the work goes on.",
            metadata("payment-verified"),
            None,
        ),
    };
    task(id, id, state, text, metadata, artifact)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_doubles_come_back_as_integers_and_fractions_stay() {
        let value = json!({"x402Version": 2.0, "a": [600.0, 0.5, -3.0], "s": "2.0", "big": 1e300});
        assert_eq!(
            integral(value),
            json!({"x402Version": 2, "a": [600, 0.5, -3], "s": "2.0", "big": 1e300})
        );
    }

    #[test]
    fn the_input_is_the_first_data_part_else_the_text() {
        let message = json!({"parts": [{"text": "hi"}, {"data": {"a": 1}}]});
        assert_eq!(
            input_of(message.as_object().unwrap()),
            Some(json!({"a": 1}))
        );
        let message = json!({"parts": [{"text": "{\"a\": 2}"}]});
        assert_eq!(
            input_of(message.as_object().unwrap()),
            Some(json!({"a": 2}))
        );
        let message = json!({"parts": [{"text": "plain"}]});
        assert_eq!(input_of(message.as_object().unwrap()), Some(json!("plain")));
        assert_eq!(input_of(json!({"parts": []}).as_object().unwrap()), None);
    }
}
