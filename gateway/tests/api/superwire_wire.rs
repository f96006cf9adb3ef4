//! Superwire on the wire, from the document itself (seeds/superwire-executor-api.txt): a small
//! axum executor answers the gateway's `POST /execute` (`Accept: text/event-stream`) with the
//! document's event stream byte for byte, under an `x-superwire-run-id` header, and checks
//! that the request body is the document's. What is changed from the document, and why:
//! - the stream's last event is followed by the blank line that ends an SSE event on the wire
//!   (the document's block stops at its last `data:` line; without the blank line a reader
//!   never dispatches `workflow_completed`);
//! - the request's `workflow_source_base64` (`"..."` in the document) is the listing's
//!   workflow, and `options.cache_key` (`tenant-1:conversation-42`, client-chosen) is the
//!   gateway's per-attempt key; `secrets` is the document's, sent by the seeker in the
//!   `X-Hiregate-Secrets` header;
//! - the failing stream is the document's stream cut before `agent_completed` and ended by
//!   `event: workflow_failed`, which the document names as the terminal failure event without
//!   showing its payload: its data is the document's structured error body.
//!
//! `/validate` (the gateway's registration probe) gets the listing's workflow and answers 200
//! with no issues; the document gives its purpose, not its body.
//!
//! The document's stream has no `id:` lines, so an executor serving it can only answer a
//! reconnect (`GET /execute/{run_id}/events`, no `Last-Event-ID` to resume from) with the run's
//! stream from the start: the cut-stream tests break the first connection after two events and
//! replay the whole stream on the reconnect (or a replay whose prefix differs).
//!
//! Real parts: anvil with the devnet token, the embedded facilitator, a real gateway, the
//! executor over TCP; money outcomes are read from the chain.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::U256;
use axum::{
    Json, Router,
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use base64::Engine as _;
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use hiregate_contracts::canonical::Digest;
use hiregate_payments::encode_header;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    helpers::TestDatabase,
    hire_env::{Answer, HireEnv, PRICE, WorkerKind, answer, hire_env, hire_listing},
};

/// The document's request body.
const SEED_REQUEST: &str = r#"{
  "input": {
    "message": "Write a short welcome message."
  },
  "secrets": {
    "api_key": "sk-..."
  },
  "options": {
    "cache_key": "tenant-1:conversation-42"
  },
  "workflow_source_base64": "..."
}"#;

/// The document's streaming response, with the blank line that ends its last event.
const SEED_EVENT_STREAM: &str = r#"event: workflow_started
data: {}

event: workflow_planned
data: {"nodes":[]}

event: agent_started
data: {"agent":"reply"}

event: agent_completed
data: {"output":{"message":"Welcome to Superwire."}}

event: workflow_completed
data: {"output":{"result":{"message":"Welcome to Superwire."}}}

"#;

/// The document's structured error body (one line, as an SSE `data:` line carries it).
const SEED_ERROR: &str = r#"{"error":{"kind":"validation_error","message":"Unknown reference: agent.missing.summary","issues":[{"path":"agent.writer.instruction","message":"Unknown reference: agent.missing.summary"}]}}"#;

/// The document's successful `/execute` output.
const SEED_OUTPUT: &str = r#"{
  "result": {
    "message": "Welcome to Superwire."
  }
}"#;

/// The run id the executor announces (the document shows the header, not a value).
const RUN_ID: &str = "run-01JSEEDWIRE";

/// The listing's workflow: the document's input and secrets, its `reply` agent and output.
const WORKFLOW_SOURCE: &str = "workflow welcome {\n  input { message: string }\n  secrets { api_key: string }\n  agent reply { instruction: \"Reply to ${input.message}\" }\n  output { result: agent.reply }\n}\n";

const TASK_TYPE: &str = "welcome";

fn workflow_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(WORKFLOW_SOURCE)
}

fn seed_request() -> Value {
    serde_json::from_str(SEED_REQUEST).unwrap()
}

/// The failing stream: the document's events up to `agent_started`, then `workflow_failed`.
fn seed_failed_stream() -> String {
    let (started, _) = SEED_EVENT_STREAM
        .split_once("event: agent_completed\n")
        .unwrap();
    format!("{started}event: workflow_failed\ndata: {SEED_ERROR}\n\n")
}

/// `(event name, data)` of each event of an SSE text, read line by line.
fn events_of(stream: &str) -> Vec<(String, String)> {
    stream
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .unwrap()
                    .to_owned()
            };
            (field("event: "), field("data: "))
        })
        .collect()
}

fn welcome_schema() -> Value {
    json!({
        "type": "object",
        "required": ["result"],
        "properties": {
            "result": {
                "type": "object",
                "required": ["message"],
                "properties": {"message": {"type": "string"}}
            }
        }
    })
}

/// What the executor received on one `/execute`.
#[derive(Debug, Clone)]
struct Received {
    accept: String,
    body: Value,
}

/// How the executor serves the stream: `stream` on `/execute`, unless `cut` is set: then the
/// `/execute` connection breaks after `cut.after_events` events and a reconnect gets
/// `cut.replay`.
struct SeedExecutorState {
    stream: String,
    cut: Option<Cut>,
    executions: Mutex<Vec<Received>>,
    validations: Mutex<Vec<Value>>,
    /// `(run id in the path, Last-Event-ID)` of each reconnect.
    reconnects: Mutex<Vec<(String, Option<String>)>>,
}

struct Cut {
    after_events: usize,
    replay: String,
}

struct SeedExecutor {
    endpoint: String,
    state: Arc<SeedExecutorState>,
    shutdown: CancellationToken,
}

impl Drop for SeedExecutor {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl SeedExecutor {
    fn executions(&self) -> Vec<Received> {
        self.state.executions.lock().unwrap().clone()
    }

    fn validations(&self) -> Vec<Value> {
        self.state.validations.lock().unwrap().clone()
    }

    fn reconnects(&self) -> Vec<(String, Option<String>)> {
        self.state.reconnects.lock().unwrap().clone()
    }
}

/// An event-stream response with the run id header: `text`, then, when `broken`, a transport
/// error in place of the body's end (to the gateway, an unintended disconnect).
fn event_stream(text: String, broken: bool) -> Response {
    let body = if broken {
        let chunks = futures::stream::iter([Ok::<_, std::io::Error>(text)]).chain(
            futures::stream::once(async {
                // Lets hyper flush the events before the error drops the connection.
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "cut",
                ))
            }),
        );
        Body::from_stream(chunks)
    } else {
        Body::from(text)
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header("x-superwire-run-id", RUN_ID)
        .body(body)
        .unwrap()
}

/// The first `n` events of an SSE text.
fn first_events(stream: &str, n: usize) -> String {
    stream
        .split_inclusive("\n\n")
        .take(n)
        .collect::<Vec<_>>()
        .concat()
}

async fn seed_execute(
    State(state): State<Arc<SeedExecutorState>>,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    state.executions.lock().unwrap().push(Received {
        accept: accept.clone(),
        body: serde_json::from_str(&body).unwrap_or(Value::String(body)),
    });
    if accept.contains("text/event-stream") {
        match &state.cut {
            Some(cut) => event_stream(first_events(&state.stream, cut.after_events), true),
            None => event_stream(state.stream.clone(), false),
        }
    } else {
        // The document's default: the output block as JSON.
        (
            [(header::CONTENT_TYPE, "application/json")],
            SEED_OUTPUT.to_owned(),
        )
            .into_response()
    }
}

/// `GET /execute/{run_id}/events`: the replay, from the start (the stream has no ids).
async fn seed_reconnect(
    State(state): State<Arc<SeedExecutorState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let last_event_id = headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    state
        .reconnects
        .lock()
        .unwrap()
        .push((run_id.clone(), last_event_id));
    match &state.cut {
        Some(cut) if run_id == RUN_ID => event_stream(cut.replay.clone(), false),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn seed_validate(
    State(state): State<Arc<SeedExecutorState>>,
    Json(body): Json<Value>,
) -> impl IntoResponse {
    state.validations.lock().unwrap().push(body);
    Json(json!({"valid": true, "issues": []}))
}

async fn start_seed_executor(stream: String) -> SeedExecutor {
    start_executor(stream, None).await
}

async fn start_executor(stream: String, cut: Option<Cut>) -> SeedExecutor {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(SeedExecutorState {
        stream,
        cut,
        executions: Mutex::new(Vec::new()),
        validations: Mutex::new(Vec::new()),
        reconnects: Mutex::new(Vec::new()),
    });
    let router = Router::new()
        .route("/execute", post(seed_execute))
        .route("/execute/{run_id}/events", get(seed_reconnect))
        .route("/validate", post(seed_validate))
        .with_state(Arc::clone(&state));
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
    });
    SeedExecutor {
        endpoint,
        state,
        shutdown,
    }
}

/// List `executor` as a Superwire worker running [`WORKFLOW_SOURCE`] for `welcome`, paid to
/// `env.pay_to`; returns its id.
async fn list_seed_executor(env: &HireEnv, executor: &SeedExecutor) -> String {
    let mut listing = hire_listing(&executor.endpoint, env.pay_to, &env.devnet, 4);
    listing["protocol"] = json!("superwire");
    listing["tasks"] = json!({
        TASK_TYPE: {"price": PRICE.to_string(), "output_schema": welcome_schema()}
    });
    listing["protocol_options"] = json!({"workflow_source_base64": workflow_base64()});
    let response = env.app.register_worker(&env.operator_key, &listing).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Propose `welcome` with the document's `input`.
async fn contract(env: &HireEnv, worker_id: &str) -> String {
    let body = json!({
        "worker_id": worker_id,
        "task_type": TASK_TYPE,
        "input": seed_request()["input"].clone(),
        "sla": {"max_latency_ms": 5000},
        "retry_policy": {"max_attempts": 1},
    });
    let response = env
        .app
        .send_json(Method::POST, "/v1/contracts", Some(&env.seeker_key), &body)
        .await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    body["contract_id"].as_str().unwrap().to_owned()
}

/// `POST /v1/contracts/{id}/execute` as the seeker with the document's `secrets` in the
/// secrets header, and `payment` if given.
async fn execute(env: &HireEnv, contract_id: &str, payment: Option<&str>) -> Answer {
    let secrets =
        base64::engine::general_purpose::STANDARD.encode(seed_request()["secrets"].to_string());
    let mut request = env
        .app
        .client
        .post(format!(
            "{}/v1/contracts/{contract_id}/execute",
            env.app.address
        ))
        .bearer_auth(&env.seeker_key)
        .header("X-Hiregate-Secrets", secrets)
        .timeout(Duration::from_secs(60));
    if let Some(payment) = payment {
        request = request.header("PAYMENT-SIGNATURE", payment);
    }
    answer(request.send().await.expect("execute sent")).await
}

/// The seeker's event stream of a terminal contract, replayed to its end, as `(kind, data)`.
async fn seeker_events(env: &HireEnv, contract_id: &str) -> Vec<(String, Value)> {
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/events"),
            Some(&env.seeker_key),
        )
        .await;
    assert_eq!(response.status(), 200);
    let mut events = response.bytes_stream().eventsource();
    let mut all = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), events.next())
            .await
            .expect("the stream of a terminal contract ends");
        let Some(event) = next else {
            return all;
        };
        let event = event.expect("well-formed SSE");
        all.push((event.event, serde_json::from_str(&event.data).unwrap()));
    }
}

/// The upstream events relayed to the seeker: `(name, bytes, digest)` of each, with the run.
fn relayed(events: &[(String, Value)]) -> Vec<(String, u64, String)> {
    events
        .iter()
        .filter(|(kind, _)| kind == "worker_event")
        .map(|(_, data)| {
            let details = &data["details"];
            assert_eq!(details["run_id"], RUN_ID, "{details}");
            assert_eq!(
                details["data"]["withheld"], true,
                "unpaid work is not shown"
            );
            (
                details["upstream_event"].as_str().unwrap().to_owned(),
                details["data"]["bytes"].as_u64().unwrap(),
                details["data"]["digest"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// What relaying `stream` must show: each event's name, and the size and digest of its data.
fn expected_relay(stream: &str) -> Vec<(String, u64, String)> {
    events_of(stream)
        .into_iter()
        .map(|(name, data)| {
            (
                name,
                data.len() as u64,
                Digest::of_bytes(data.as_bytes()).to_string(),
            )
        })
        .collect()
}

/// The executor got the document's request body: its fields, the seeker's input and secrets
/// as the document has them, the listing's workflow and the gateway's cache key.
fn assert_seed_request(received: &Received, contract_id: &str) {
    assert_eq!(received.accept, "text/event-stream");
    let cache_key = received.body["options"]["cache_key"]
        .as_str()
        .expect("options.cache_key is a string");
    assert!(cache_key.contains(contract_id), "{cache_key}");
    let mut expected = seed_request();
    expected["options"]["cache_key"] = json!(cache_key);
    expected["workflow_source_base64"] = json!(workflow_base64());
    assert_eq!(received.body, expected);
}

async fn seed_stream_settles(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let executor = start_seed_executor(SEED_EVENT_STREAM.to_owned()).await;
    let worker_id = list_seed_executor(&env, &executor).await;
    env.worker_id = worker_id.clone();
    assert_eq!(
        executor.validations(),
        vec![json!({"workflow_source_base64": workflow_base64()})],
        "registration validated the listed workflow"
    );
    let contract_id = contract(&env, &worker_id).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let answer = execute(&env, &contract_id, Some(&env.pay(&challenge).await)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    assert_eq!(answer.body["state"], "settled");

    let executions = executor.executions();
    assert_eq!(executions.len(), 1, "one run");
    assert_seed_request(&executions[0], &contract_id);

    // The settled output is the document's workflow output.
    let view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "settled", "{view}");
    assert_eq!(
        view["deliverable"]["content"]["output"]["content"],
        serde_json::from_str::<Value>(SEED_OUTPUT).unwrap(),
        "{view}"
    );

    // The seeker's stream relayed the five events in order, each one's data intact (its size
    // and digest, the content itself being withheld until paid), before the settlement.
    let events = seeker_events(&env, &contract_id).await;
    assert_eq!(
        relayed(&events),
        expected_relay(SEED_EVENT_STREAM),
        "{events:?}"
    );
    let names: Vec<String> = relayed(&events)
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    assert_eq!(
        names,
        [
            "workflow_started",
            "workflow_planned",
            "agent_started",
            "agent_completed",
            "workflow_completed"
        ]
    );
    let run_started = events
        .iter()
        .position(|(kind, _)| kind == "worker_run_started")
        .expect("the run was announced");
    assert_eq!(events[run_started].1["details"]["run_id"], RUN_ID);
    let last_relayed = events
        .iter()
        .rposition(|(kind, _)| kind == "worker_event")
        .unwrap();
    let settled = events
        .iter()
        .position(|(_, data)| data["to_state"] == "settled")
        .expect("settled");
    assert!(run_started < last_relayed && last_relayed < settled);

    let after = env.balances().await;
    assert_eq!(
        after.0,
        before.0 - U256::from(PRICE),
        "the seeker paid once"
    );
    assert_eq!(
        after.1,
        before.1 + U256::from(PRICE),
        "the worker got the price"
    );
}

#[tokio::test]
async fn the_seed_event_stream_is_relayed_and_its_output_settled_on_chain() {
    seed_stream_settles(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_seed_event_stream_is_relayed_and_its_output_settled_on_chain_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    seed_stream_settles(database).await;
}

#[tokio::test]
async fn a_stream_ending_in_workflow_failed_fails_the_contract_and_nothing_settles() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let stream = seed_failed_stream();
    let executor = start_seed_executor(stream.clone()).await;
    let worker_id = list_seed_executor(&env, &executor).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let answer = execute(&env, &contract_id, Some(&encode_header(&payload))).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert!(answer.headers.get("payment-response").is_none());
    assert_eq!(env.state(&contract_id).await, "failed");

    let executions = executor.executions();
    assert_eq!(executions.len(), 1, "one run, no retry");
    assert_seed_request(&executions[0], &contract_id);

    // The failure is the document's error, relayed after the events before it.
    let view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    let error = &view["attempts"][0]["error"];
    assert_eq!(error["code"], "validation_error", "{view}");
    assert_eq!(error["message"], "Unknown reference: agent.missing.summary");
    let events = seeker_events(&env, &contract_id).await;
    let relayed = relayed(&events);
    assert_eq!(relayed, expected_relay(&stream), "{events:?}");
    assert_eq!(relayed.last().unwrap().0, "workflow_failed");

    assert_eq!(env.balances().await, before, "nothing settled");
    assert!(
        !env.devnet
            .authorization_state(env.wallet.address(), nonce)
            .await
            .unwrap(),
        "the authorization was never used on chain"
    );
}

async fn a_cut_stream_replayed_from_the_start_is_relayed_once(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let executor = start_executor(
        SEED_EVENT_STREAM.to_owned(),
        Some(Cut {
            after_events: 2,
            replay: SEED_EVENT_STREAM.to_owned(),
        }),
    )
    .await;
    let worker_id = list_seed_executor(&env, &executor).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let answer = execute(&env, &contract_id, Some(&env.pay(&challenge).await)).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    assert_eq!(answer.body["state"], "settled");
    assert_eq!(executor.executions().len(), 1, "one run");
    assert_eq!(
        executor.reconnects(),
        [(RUN_ID.to_owned(), None)],
        "one reconnect, with no event id to resume from"
    );

    // Two events came before the cut and five on the reconnect: the seeker saw each of the
    // five once, in order, and none with an upstream id.
    let events = seeker_events(&env, &contract_id).await;
    assert_eq!(
        relayed(&events),
        expected_relay(SEED_EVENT_STREAM),
        "{events:?}"
    );
    for (kind, data) in &events {
        if kind == "worker_event" {
            assert!(data["details"]["upstream_id"].is_null(), "{data}");
        }
    }
    let view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        view["deliverable"]["content"]["output"]["content"],
        serde_json::from_str::<Value>(SEED_OUTPUT).unwrap(),
        "{view}"
    );
    let kinds = env.event_kinds(&contract_id).await;
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("deliverable_received"), 1, "{kinds:?}");
    assert_eq!(count("settlement_succeeded"), 1, "{kinds:?}");

    let after = env.balances().await;
    assert_eq!(
        after.0,
        before.0 - U256::from(PRICE),
        "the seeker paid once"
    );
    assert_eq!(
        after.1,
        before.1 + U256::from(PRICE),
        "the worker got the price"
    );
}

#[tokio::test]
async fn a_cut_id_less_stream_replayed_from_the_start_is_relayed_once_and_settled() {
    a_cut_stream_replayed_from_the_start_is_relayed_once(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_cut_id_less_stream_replayed_from_the_start_is_relayed_once_and_settled_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_cut_stream_replayed_from_the_start_is_relayed_once(database).await;
}

#[tokio::test]
async fn a_replay_unlike_the_relayed_events_fails_the_contract_and_nothing_settles() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    // The second event, already relayed before the cut, comes back with other data.
    let replay =
        SEED_EVENT_STREAM.replace("data: {\"nodes\":[]}\n", "data: {\"nodes\":[\"other\"]}\n");
    assert_ne!(replay, SEED_EVENT_STREAM);
    let executor = start_executor(
        SEED_EVENT_STREAM.to_owned(),
        Some(Cut {
            after_events: 2,
            replay,
        }),
    )
    .await;
    let worker_id = list_seed_executor(&env, &executor).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let answer = execute(&env, &contract_id, Some(&encode_header(&payload))).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert!(answer.headers.get("payment-response").is_none());
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(executor.executions().len(), 1, "one run, no retry");
    assert_eq!(executor.reconnects().len(), 1);

    let view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    let error = &view["attempts"][0]["error"];
    assert_eq!(error["code"], "stream_diverged", "{view}");
    assert!(
        error["message"].as_str().unwrap().contains("event 2"),
        "{view}"
    );
    // The seeker saw the two events before the cut, and nothing of the differing replay.
    let events = seeker_events(&env, &contract_id).await;
    assert_eq!(
        relayed(&events),
        expected_relay(&first_events(SEED_EVENT_STREAM, 2)),
        "{events:?}"
    );

    assert_eq!(env.balances().await, before, "nothing settled");
    assert!(
        !env.devnet
            .authorization_state(env.wallet.address(), nonce)
            .await
            .unwrap(),
        "the authorization was never used on chain"
    );
}
