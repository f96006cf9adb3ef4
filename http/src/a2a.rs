//! A2A (v1.0, JSON-RPC binding) with the a2a-x402 extension: `POST /a2a/workers/{worker_id}`
//! (the interface a listing's agent card names) and `POST /a2a` (the marketplace card's), served
//! by the stable x402 resource's engine ([`hiregate_engine::hire::resource`]), not by calls to our own
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
//! Here: the JSON-RPC envelope, the dispatch and the errors; [`messages`] is `SendMessage`
//! (offer and payment), [`tasks`] the `Task` JSON and `GetTask`, [`stream`] the streaming
//! methods.
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

pub mod cards;
mod messages;
mod stream;
mod tasks;

use axum::{
    Json,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, HeaderName, HeaderValue},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value, json};

use super::{
    extract::{AppPath, Party},
    routes::{Routes, post},
};
use crate::{error::ApiError, state::AppState};
use hiregate_engine::hire::error::{ErrorKind, HireError};

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
/// The message metadata keys the agent cards announce (naming the listing and the task type).
pub use cards::{TASK_TYPE_KEY, WORKER_KEY};
/// Task metadata: the contract the payment made.
pub const CONTRACT_KEY: &str = "hiregate.contractId";
/// Task metadata: the capability token that reads the task (and the contract's REST routes).
pub const ACCESS_KEY: &str = "hiregate.access";
/// Task metadata: hiregate's account of a failed hire (`code`, `details`: attempts, whether a
/// retry is allowed, the worker's error).
pub const ERROR_KEY: &str = "hiregate.error";
/// The A2A protocol version header (1.x is served).
pub const VERSION_HEADER: HeaderName = HeaderName::from_static("a2a-version");
/// The A2A extension activation header.
pub const EXTENSIONS_HEADER: HeaderName = HeaderName::from_static("a2a-extensions");
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
    with_extensions(&headers, rpc(&state, None, party, &headers, body).await)
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
    with_extensions(
        &headers,
        rpc(&state, Some(worker_id), party, &headers, body).await,
    )
}

/// `response` with `A2A-Extensions` naming the a2a-x402 extension when the request activated it
/// (`A2A-Extensions`, or the x402 transport's `X-A2A-Extensions`), as A2A's extension
/// activation answers. Activation is not required: a message carrying `x402.payment.*`
/// metadata speaks the extension whether or not its client said so.
fn with_extensions(headers: &HeaderMap, mut response: Response) -> Response {
    let activated = [EXTENSIONS_HEADER.as_str(), "x-a2a-extensions"]
        .iter()
        .any(|name| {
            headers.get_all(*name).iter().any(|value| {
                value.to_str().is_ok_and(|list| {
                    list.split(',')
                        .any(|uri| uri.trim() == cards::X402_EXTENSION)
                })
            })
        });
    if activated {
        response.headers_mut().insert(
            EXTENSIONS_HEADER,
            HeaderValue::from_static(cards::X402_EXTENSION),
        );
    }
    response
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
        "SendMessage" => {
            messages::send_message(state, worker_id.as_deref(), &params, correlation_id)
                .await
                .map(|task| json!({"task": task}))
        }
        "GetTask" => tasks::get_task(state, party.as_ref().ok(), &params).await,
        "SendStreamingMessage" => {
            return stream::stream_message(state, worker_id, params, correlation_id, id).await;
        }
        "SubscribeToTask" => return stream::subscribe(state, party, &params, id).await,
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
}
