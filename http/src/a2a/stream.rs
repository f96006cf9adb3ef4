//! The streaming methods, `SendStreamingMessage` and `SubscribeToTask`: Server-Sent Events whose
//! data are JSON-RPC responses holding A2A `StreamResponse`s.

use std::{convert::Infallible, time::Duration};

use axum::{
    http::{HeaderValue, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{
    RpcError, X402_PAYLOAD, X402_RECEIPTS, X402_STATUS, answer,
    messages::{non_empty, offered, send_message},
    tasks::{get_task, task, task_not_found, task_of_view},
};
use crate::{error::ApiError, extract::Party, state::AppState};

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
pub(super) async fn stream_message(
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
pub(super) async fn subscribe(
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
            // A shutting-down gateway ends its subscriptions rather than wait for them.
            tokio::select! {
                () = tokio::time::sleep(SUBSCRIBE_POLL) => {}
                () = state.shutdown.cancelled() => return,
            }
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
