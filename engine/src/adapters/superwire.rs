//! The Superwire adapter (`seeds/superwire-executor-api.txt`).
//!
//! Forward: `POST <endpoint>/execute` with `Accept: text/event-stream` and
//! `{"input", "options": {"cache_key"}, "workflow_source_base64"}` (the listing's workflow,
//! which must still have the digest the terms pinned, else `workflow_changed`). The
//! `cache_key` is per attempt ([`cache_key`]) unless the seeker let retries reuse cached
//! agent outputs. Every upstream SSE event is relayed to the contract's event log as a
//! `worker_event` (`{run_id, upstream_event, upstream_id, data}`); `workflow_completed`'s
//! `output` is the deliverable, `workflow_failed` a reported failure.
//!
//! Resume: the run id comes in the `x-superwire-run-id` header. When the stream ends or breaks
//! before a terminal event, the adapter reconnects with `GET /execute/{run_id}/events` and
//! `Last-Event-ID: <last id seen>`; events whose id is not above the last one seen are dropped,
//! so the contract's log gets every upstream event exactly once even if an executor replays.
//! A stream without ids (the seed's example has none) is resumed without `Last-Event-ID`: the
//! executor replays it from the start, and the events already relayed are skipped by position,
//! each one checked against what was relayed (its name and data digest); a replay that differs
//! is a failed attempt (`stream_diverged`) rather than inconsistent content relayed to the
//! seeker ([`sse::EventCursor`]). A resumed stream announcing another run id is a failed
//! attempt (`contract_mismatch`).
//!
//! Cancel, from any instance: the adapter remembers the run id of each contract it is
//! streaming (in this gateway process). A cancel taken by this instance sends
//! `POST /execute/{run_id}/cancel` at once; a cancel taken by another instance is
//! [`CancelOutcome::Delegated`]: the streaming instance sees the contract `cancelled` in the
//! store ([`ForwardRequest::cancelled`], watched by the forward step) and tells the executor
//! itself, recording `worker_cancel_requested` (`by: streaming_instance`). Either way the
//! executor is told once and the attempt ends.
//!
//! Secrets: the seeker's [`SeekerSecrets`](super::secrets::SeekerSecrets) of this execute go
//! into the body's `secrets` object and nowhere else (no event, log line or error carries
//! them). They exist only in memory during the execute that brought them: a background retry
//! has none, which is fine because a Superwire run is streamed within its execute call (it
//! never goes `pending`); a seeker retry resends the header.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use futures::StreamExt as _;
use hiregate_contracts::wire::superwire::{
    WORKFLOW_COMPLETED, WORKFLOW_FAILED, WorkflowCompleted, deliverable_from_output,
};
use reqwest::{Method, Response, StatusCode, header};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    CancelOutcome, FailureKind, ForwardRequest, WorkerAnswer, WorkerProtocol, contract_mismatch,
    sse,
};
use crate::outbound::{OutboundClient, OutboundError};
use hiregate_store::listing::model::{WorkerEndpoint, WorkflowSource};
use hiregate_store::states::EventKind;

/// Response header naming the run of a streaming `/execute`.
pub const RUN_ID_HEADER: &str = "x-superwire-run-id";
/// Code of an attempt refused because the listing's workflow is not the pinned one.
pub const WORKFLOW_CHANGED: &str = "workflow_changed";
/// Largest non-streaming answer or single stream read, bytes.
const MAX_ANSWER_BYTES: usize = 10 * 1024 * 1024;
/// Reconnects after a dropped stream, at most, per forward.
const MAX_RECONNECTS: u32 = 5;
/// Pause before a reconnect.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The Superwire executor protocol. Cheap to clone; clones share the run table.
#[derive(Debug, Clone, Default)]
pub struct SuperwireProtocol {
    /// Contract id → the run this process is streaming (for cancel).
    runs: Arc<Mutex<HashMap<String, HeldRun>>>,
}

/// A run whose stream this process reads.
#[derive(Debug, Clone)]
struct HeldRun {
    run_id: String,
    /// The executor was already told to cancel it (once is enough, from whichever path).
    cancel_sent: bool,
}

impl SuperwireProtocol {
    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, HeldRun>> {
        // Entries are written in one statement each, so a poisoned map is still consistent.
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The run id of `contract_id`'s stream being read, if any.
    #[must_use]
    pub fn run_of(&self, contract_id: &str) -> Option<String> {
        self.runs().get(contract_id).map(|run| run.run_id.clone())
    }

    /// The run of `contract_id` held here, if the executor has not been told to cancel it
    /// yet; marks it told. Both cancel paths (the cancel call on this instance, and the
    /// stream noticing the contract cancelled in the store) go through this, so the executor
    /// is told once.
    fn claim_cancel(&self, contract_id: &str) -> Option<String> {
        let mut runs = self.runs();
        let run = runs.get_mut(contract_id)?;
        (!std::mem::replace(&mut run.cancel_sent, true)).then(|| run.run_id.clone())
    }

    /// `POST /execute/{run_id}/cancel`.
    async fn cancel_run(
        client: &OutboundClient,
        endpoint: &WorkerEndpoint,
        run_id: &str,
    ) -> CancelOutcome {
        let url = endpoint.join(&format!("execute/{}/cancel", urlencoding(run_id)));
        let builder = match client.request(Method::POST, &url) {
            Ok(builder) => builder.header(header::ACCEPT, "application/json"),
            Err(error) => return CancelOutcome::Failed(error.to_string()),
        };
        match client.send(builder).await {
            Ok(response) if response.status().is_success() => CancelOutcome::Acknowledged,
            Ok(response) => CancelOutcome::Failed(format!("cancel answered {}", response.status())),
            Err(error) => CancelOutcome::Failed(error.to_string()),
        }
    }

    /// The contract was cancelled (seen in the store, possibly by another instance) while
    /// this process streams its run: tell the executor (unless already told), record it,
    /// and end the attempt.
    async fn stop_cancelled(
        &self,
        client: &OutboundClient,
        request: &ForwardRequest<'_>,
        run_id: &str,
    ) -> WorkerAnswer {
        if let Some(run_id) = self.claim_cancel(request.contract_id) {
            let outcome = Self::cancel_run(client, request.endpoint, &run_id).await;
            let mut details = json!({
                "outcome": outcome.as_str(),
                "protocol": "superwire",
                "run_id": run_id,
                "by": "streaming_instance",
            });
            if let (CancelOutcome::Failed(why), Some(fields)) = (&outcome, details.as_object_mut())
            {
                fields.insert("error".to_owned(), Value::String(why.clone()));
            }
            request
                .events
                .relay(EventKind::WorkerCancelRequested, details)
                .await;
        }
        failed(
            FailureKind::Reported,
            None,
            "cancelled",
            format!("the contract was cancelled while run {run_id} was streaming"),
        )
    }
}

/// Forgets a contract's run when its forward ends, however it ends.
struct RunGuard<'a> {
    protocol: &'a SuperwireProtocol,
    contract_id: String,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        self.protocol.runs().remove(&self.contract_id);
    }
}

fn failed(
    kind: FailureKind,
    http_status: Option<u16>,
    code: impl Into<String>,
    message: impl Into<String>,
) -> WorkerAnswer {
    WorkerAnswer::Failed {
        kind,
        http_status,
        code: code.into(),
        message: message.into(),
        details: None,
    }
}

fn transport_failure(error: &OutboundError) -> WorkerAnswer {
    match error {
        OutboundError::Timeout => WorkerAnswer::TimedOut,
        OutboundError::BlockedTarget { .. } | OutboundError::UnsupportedScheme { .. } => failed(
            FailureKind::Unreachable,
            None,
            "endpoint_not_allowed",
            error.to_string(),
        ),
        _ => failed(
            FailureKind::Unreachable,
            None,
            "worker_unreachable",
            error.to_string(),
        ),
    }
}

/// The `/execute` body. `input` must be an object (the workflow's input block); any other
/// JSON is wrapped as `{"input": …}`.
#[must_use]
pub fn execute_body(request: &ForwardRequest<'_>) -> Option<Value> {
    let source = request.protocol_options.workflow_source_base64.as_ref()?;
    let input = if request.input.is_object() {
        request.input.clone()
    } else {
        json!({"input": request.input})
    };
    let mut body = json!({
        "input": input,
        "options": {"cache_key": cache_key(request)},
        "workflow_source_base64": source.as_base64(),
    });
    if let (Some(secrets), Some(fields)) = (request.secrets, body.as_object_mut()) {
        fields.insert(
            "secrets".to_owned(),
            Value::Object(secrets.expose().clone()),
        );
    }
    Some(body)
}

/// The `cache_key` of this attempt: its own (`<contract>-attempt-<n>`), so a retry does not
/// replay the agent outputs of the attempt that failed, unless the terms let retries reuse
/// them (`reuse_cached_outputs`): then one key per contract.
#[must_use]
pub fn cache_key(request: &ForwardRequest<'_>) -> String {
    let reuse = request
        .terms
        .execution()
        .is_some_and(|execution| execution.reuse_cached_outputs);
    if reuse {
        request.contract_id.to_owned()
    } else {
        super::execution_id(request.contract_id, request.attempt)
    }
}

/// Refuses to run a workflow other than the one the terms pinned by digest: the listing's
/// source may have changed since the contract was signed.
fn workflow_changed(request: &ForwardRequest<'_>) -> Option<WorkerAnswer> {
    let pinned = request.terms.execution()?.workflow_digest.as_ref()?;
    let current = request
        .protocol_options
        .workflow_source_base64
        .as_ref()
        .map(WorkflowSource::digest);
    if current.as_ref() == Some(pinned) {
        return None;
    }
    Some(WorkerAnswer::Failed {
        kind: FailureKind::ContractMismatch,
        http_status: None,
        code: WORKFLOW_CHANGED.to_owned(),
        message: "the listing's workflow source is not the one the contract pinned; the \
                  signed contract cannot run another workflow"
            .to_owned(),
        details: Some(json!({
            "pinned_digest": pinned.to_string(),
            "current_digest": current.map(|d| d.to_string()),
        })),
    })
}

/// The seed's error body `{"error": {kind, message, issues}}`, read leniently.
fn error_of(body: &[u8]) -> (String, String, Option<Value>) {
    let error = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").cloned());
    error_fields(error.as_ref())
}

fn error_fields(error: Option<&Value>) -> (String, String, Option<Value>) {
    let kind = error
        .and_then(|e| e.get("kind"))
        .and_then(Value::as_str)
        .map(|k| k.chars().take(64).collect())
        .unwrap_or_else(|| "workflow_failed".to_owned());
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .map(|m| m.chars().take(500).collect())
        .unwrap_or_default();
    let issues = error.and_then(|e| e.get("issues")).cloned();
    (
        kind,
        message,
        issues.map(|issues| json!({"issues": issues})),
    )
}

/// A non-streaming answer (an executor that ignored `Accept`, or an error before the stream).
fn classify_plain(status: StatusCode, body: &[u8]) -> WorkerAnswer {
    let http_status = Some(status.as_u16());
    if status.is_success() {
        return match serde_json::from_slice::<Value>(body) {
            Ok(output) => match deliverable_from_output(output) {
                Ok(deliverable) => WorkerAnswer::Delivered {
                    deliverable,
                    http_status: status.as_u16(),
                    metadata: None,
                },
                Err(error) => failed(
                    FailureKind::BadResponse,
                    http_status,
                    "invalid_deliverable",
                    error.to_string(),
                ),
            },
            Err(error) => failed(
                FailureKind::BadResponse,
                http_status,
                "malformed_answer",
                format!("the executor's answer is not JSON: {error}"),
            ),
        };
    }
    let (code, message, details) = error_of(body);
    let kind = if status.is_server_error() {
        // The seed answers 500 for a failed run: the workflow ran and failed.
        if code == "workflow_failed" && message.is_empty() {
            FailureKind::Unreachable
        } else {
            FailureKind::Reported
        }
    } else if status.is_client_error() {
        FailureKind::Refused
    } else {
        FailureKind::BadResponse
    };
    WorkerAnswer::Failed {
        kind,
        http_status,
        code,
        message,
        details,
    }
}

/// What reading one stream connection ended in.
enum StreamEnd {
    /// A terminal event: the forward's answer.
    Terminal(Box<WorkerAnswer>),
    /// The stream ended or broke before a terminal event.
    Dropped(String),
}

/// The relay state of one forward: the run, and where its stream is across reconnects.
struct Relay<'a> {
    request: &'a ForwardRequest<'a>,
    run_id: String,
    cursor: sse::EventCursor,
    http_status: u16,
}

impl Relay<'_> {
    /// Reads `response`'s SSE events until a terminal one or the end of the stream.
    async fn read(&mut self, response: Response) -> StreamEnd {
        let mut events = sse::bounded_events(response, MAX_ANSWER_BYTES);
        while let Some(next) = events.next().await {
            let event = match next {
                Ok(event) => event,
                Err(error) => return StreamEnd::Dropped(error),
            };
            if let Some(end) = self.accept(event).await {
                return StreamEnd::Terminal(Box::new(end));
            }
        }
        StreamEnd::Dropped("the stream ended before a terminal event".to_owned())
    }

    /// Relays one event (unless already seen) and says whether it ends the run.
    async fn accept(&mut self, event: sse::SseEvent) -> Option<WorkerAnswer> {
        match self.cursor.admit(&event) {
            sse::Admission::New => {}
            sse::Admission::Skip => return None,
            sse::Admission::Diverged(why) => {
                return Some(failed(
                    FailureKind::BadResponse,
                    Some(self.http_status),
                    sse::STREAM_DIVERGED,
                    format!("run {}: {why}", self.run_id),
                ));
            }
        }
        // The event's own id only: an id-less event has none, whatever came before it.
        let id = event
            .id
            .as_deref()
            .and_then(|id| id.trim().parse::<u64>().ok());
        let name = sse::event_name(&event);
        // Upstream events carry the work itself (node outputs, tokens, the final output), and
        // nothing unpaid is shown: the seeker's stream learns that the run progressed, and how
        // much, not what it produced. The deliverable is released once settled.
        let data = sse::withheld(&event.data);
        self.request
            .events
            .relay(
                EventKind::WorkerEvent,
                json!({
                    "run_id": self.run_id,
                    "upstream_event": name,
                    "upstream_id": id,
                    "data": data,
                }),
            )
            .await;
        let http_status = Some(self.http_status);
        match name.as_str() {
            WORKFLOW_COMPLETED => Some(
                match serde_json::from_str::<WorkflowCompleted>(&event.data)
                    .map_err(|e| e.to_string())
                    .and_then(|done| done.to_deliverable().map_err(|e| e.to_string()))
                {
                    Ok(deliverable) => WorkerAnswer::Delivered {
                        deliverable,
                        http_status: self.http_status,
                        metadata: None,
                    },
                    Err(error) => failed(
                        FailureKind::BadResponse,
                        http_status,
                        "invalid_deliverable",
                        format!("workflow_completed carries no usable output: {error}"),
                    ),
                },
            ),
            WORKFLOW_FAILED => {
                let data = serde_json::from_str::<Value>(&event.data).unwrap_or(Value::Null);
                let (code, message, details) = error_fields(data.get("error"));
                Some(WorkerAnswer::Failed {
                    kind: FailureKind::Reported,
                    http_status,
                    code,
                    message,
                    details,
                })
            }
            _ => None,
        }
    }
}

impl SuperwireProtocol {
    async fn forward(&self, client: &OutboundClient, request: &ForwardRequest<'_>) -> WorkerAnswer {
        if let Some(refused) = workflow_changed(request) {
            return refused;
        }
        let Some(body) = execute_body(request) else {
            return failed(
                FailureKind::BadResponse,
                None,
                "missing_workflow_source",
                "the superwire listing has no protocol_options.workflow_source_base64",
            );
        };
        let builder = match client.request(Method::POST, &request.endpoint.join("execute")) {
            Ok(builder) => builder,
            Err(error) => return transport_failure(&error),
        };
        let builder = builder
            .header(super::CORRELATION_HEADER, request.correlation_id)
            .header(header::ACCEPT, "text/event-stream")
            .json(&body);
        let response = match client.send(builder).await {
            Ok(response) => response,
            Err(error) => return transport_failure(&error),
        };
        let status = response.status();
        let streaming = sse::is_event_stream(&response);
        if !status.is_success() || !streaming {
            return match client.read_body(response, MAX_ANSWER_BYTES).await {
                Ok(bytes) => classify_plain(status, &bytes),
                Err(error) => transport_failure(&error),
            };
        }
        let run_id = response
            .headers()
            .get(RUN_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.chars().take(128).collect::<String>());
        let Some(run_id) = run_id else {
            return failed(
                FailureKind::BadResponse,
                Some(status.as_u16()),
                "missing_run_id",
                format!("the executor's stream has no {RUN_ID_HEADER} header"),
            );
        };
        self.runs().insert(
            request.contract_id.to_owned(),
            HeldRun {
                run_id: run_id.clone(),
                cancel_sent: false,
            },
        );
        let _forget = RunGuard {
            protocol: self,
            contract_id: request.contract_id.to_owned(),
        };
        request
            .events
            .relay(EventKind::WorkerRunStarted, json!({"run_id": run_id}))
            .await;
        let mut relay = Relay {
            request,
            run_id,
            cursor: sse::EventCursor::default(),
            http_status: status.as_u16(),
        };
        let held_run = relay.run_id.clone();
        let mut end = tokio::select! {
            end = relay.read(response) => end,
            () = request.cancelled.cancelled() => {
                return self.stop_cancelled(client, request, &held_run).await;
            }
        };
        let mut reconnects = 0;
        loop {
            let reason = match end {
                StreamEnd::Terminal(answer) => return *answer,
                StreamEnd::Dropped(reason) => reason,
            };
            if reconnects >= MAX_RECONNECTS {
                return failed(
                    FailureKind::Unreachable,
                    None,
                    "stream_lost",
                    format!("the executor's stream dropped {reconnects} times: {reason}"),
                );
            }
            reconnects += 1;
            tracing::info!(
                contract_id = request.contract_id,
                run_id = %relay.run_id,
                last_event_id = ?relay.cursor.last_id(),
                relayed = relay.cursor.relayed(),
                reconnects,
                reason,
                "Superwire stream dropped; resuming"
            );
            tokio::time::sleep(RECONNECT_PAUSE).await;
            let last_id = relay.cursor.resume().map(str::to_owned);
            end = match resume(client, request.endpoint, &relay.run_id, last_id.as_deref()).await {
                Ok(response) => match other_run(&response, &relay.run_id) {
                    // The resumed stream is another run's: its events are not this contract's.
                    Some(answered) => {
                        return contract_mismatch(
                            Some(response.status().as_u16()),
                            RUN_ID_HEADER,
                            &relay.run_id,
                            &answered,
                        );
                    }
                    None => tokio::select! {
                        end = relay.read(response) => end,
                        () = request.cancelled.cancelled() => {
                            return self.stop_cancelled(client, request, &held_run).await;
                        }
                    },
                },
                Err(reason) => StreamEnd::Dropped(reason),
            };
        }
    }
}

/// `GET /execute/{run_id}/events` with `Last-Event-ID` (none: the stream had no ids, and the
/// executor replays it from the start, which the relay's cursor skips by position).
async fn resume(
    client: &OutboundClient,
    endpoint: &WorkerEndpoint,
    run_id: &str,
    last_id: Option<&str>,
) -> Result<Response, String> {
    let url = endpoint.join(&format!("execute/{}/events", urlencoding(run_id)));
    sse::reconnect(client, &url, last_id, None, &[]).await
}

/// The run id a resumed stream announces, when it announces one other than `run_id`. Superwire
/// answers never echo the contract (its `cache_key` is not sent back), so the run id the first
/// answer gave is what binds later streams to this contract.
fn other_run(response: &Response, run_id: &str) -> Option<String> {
    let announced = response.headers().get(RUN_ID_HEADER)?;
    let announced = String::from_utf8_lossy(announced.as_bytes());
    let announced: String = announced.chars().take(128).collect();
    (announced != run_id).then_some(announced)
}

/// Keeps a run id to one path segment.
fn urlencoding(segment: &str) -> String {
    segment
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'))
        .collect()
}

#[async_trait]
impl WorkerProtocol for SuperwireProtocol {
    async fn execute(&self, client: &OutboundClient, request: &ForwardRequest<'_>) -> WorkerAnswer {
        let deadline = Instant::now() + request.timeout;
        tokio::time::timeout_at(deadline, self.forward(client, request))
            .await
            .unwrap_or(WorkerAnswer::TimedOut)
    }

    async fn cancel(
        &self,
        client: &OutboundClient,
        endpoint: &WorkerEndpoint,
        contract_id: &str,
        _contract_token: &str,
    ) -> CancelOutcome {
        match self.run_of(contract_id) {
            Some(_) => match self.claim_cancel(contract_id) {
                Some(run_id) => Self::cancel_run(client, endpoint, &run_id).await,
                // The stream already noticed the cancel and told the executor.
                None => CancelOutcome::Acknowledged,
            },
            // Another instance (or none) streams the run: it watches the contract's state
            // in the store and tells the executor itself.
            None => CancelOutcome::Delegated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_answers_are_classified() {
        assert!(matches!(
            classify_plain(StatusCode::OK, br#"{"result": {"message": "hi"}}"#),
            WorkerAnswer::Delivered { .. }
        ));
        assert!(matches!(
            classify_plain(
                StatusCode::BAD_REQUEST,
                br#"{"error": {"kind": "validation_error", "message": "bad", "issues": []}}"#
            ),
            WorkerAnswer::Failed { kind: FailureKind::Refused, ref code, .. } if code == "validation_error"
        ));
        assert!(matches!(
            classify_plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error": {"kind": "runtime_error", "message": "boom"}}"#
            ),
            WorkerAnswer::Failed {
                kind: FailureKind::Reported,
                ..
            }
        ));
        assert!(matches!(
            classify_plain(StatusCode::BAD_GATEWAY, b""),
            WorkerAnswer::Failed {
                kind: FailureKind::Unreachable,
                ..
            }
        ));
        assert!(matches!(
            classify_plain(StatusCode::OK, b"not json"),
            WorkerAnswer::Failed {
                kind: FailureKind::BadResponse,
                ..
            }
        ));
    }

    #[test]
    fn run_ids_stay_one_path_segment() {
        assert_eq!(urlencoding("run-01J/../x?y"), "run-01J..xy");
    }
}
