//! HIRE output types and partial deliveries over real parts: anvil + the devnet token, the
//! embedded facilitator, worker-sdk workers checking the gateway's contract tokens (the
//! `outputs` example worker, and an SDK worker whose stream the test drives event by event),
//! money read on chain.
//!
//! The broken-stream tests use a small axum stub worker instead: an SDK worker never breaks
//! its stream mid-way nor omits event ids, and those are the faults under test. A stream
//! without ids can only be served again from its start: the stub's reconnect answers replay
//! what the first connection sent before it closed.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{Address, U256};
use axum::{
    Json, Router,
    body::Body,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt, channel::mpsc};
use hiregate_contracts::canonical::Digest;
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::{
    GatewayKeys, StreamEvent, TaskContext, TaskOutcome, WorkerBuilder,
    example_workers::{OUTPUT_TASK_TYPES, outputs_builder, outputs_handler, outputs_output_schema},
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, eventually, spawn_app_on},
    hire_env::{
        HireEnv, PRICE, RunningWorker, WorkerKind, answer, chain_settings, hire_env, hire_env_on,
        serve_worker,
    },
};

const WAIT: Duration = Duration::from_secs(30);
/// Fast polling of pending work, and a seeker event stream that polls the log often.
const FAST: &str = "[contracts]\npoll_interval_ms = 100\npoll_max_interval_ms = 300\n\
                    jobs_interval_ms = 50\njob_lease_ms = 5000\n\
                    [events]\nheartbeat_interval_ms = 100\npoll_interval_ms = 100\n";

fn price() -> U256 {
    U256::from(PRICE)
}

/// A listing of `endpoint` offering `tasks` (task type → output schema) at [`PRICE`].
fn listing(endpoint: &str, pay_to: Address, devnet: &Devnet, tasks: &[(&str, Value)]) -> Value {
    let tasks: serde_json::Map<String, Value> = tasks
        .iter()
        .map(|(task_type, schema)| {
            (
                (*task_type).to_owned(),
                json!({"price": PRICE.to_string(), "output_schema": schema}),
            )
        })
        .collect();
    json!({
        "endpoint": endpoint,
        "protocol": "hire",
        "pay_to": pay_to.to_checksum(None),
        "network": devnet.network(),
        "asset": devnet.token().to_checksum(None),
        "tasks": tasks,
        "max_parallel": 4,
    })
}

/// List `endpoint` with `tasks`; the env hires it from now on.
async fn list(env: &mut HireEnv, endpoint: &str, tasks: &[(&str, Value)]) {
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &listing(endpoint, env.pay_to, &env.devnet, tasks),
        )
        .await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    env.worker_id = body["id"].as_str().unwrap().to_owned();
}

/// Serve an SDK worker built from `builder` + `handler`, trusting the env's gateway.
async fn sdk_worker(
    env: &HireEnv,
    builder: WorkerBuilder,
    handler: impl hiregate_worker_sdk::TaskHandler,
) -> RunningWorker {
    let jwks = format!("{}/.well-known/jwks.json", env.app.address)
        .parse()
        .unwrap();
    let worker = builder
        .gateway_keys(GatewayKeys::remote(jwks))
        .build(handler)
        .unwrap();
    serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// Serve the outputs example worker (short sync wait, so slow work goes pending) and list it.
async fn outputs_worker(env: &mut HireEnv) -> RunningWorker {
    let worker = sdk_worker(
        env,
        outputs_builder().sync_wait(Duration::from_millis(200)),
        outputs_handler(),
    )
    .await;
    let tasks: Vec<(&str, Value)> = OUTPUT_TASK_TYPES
        .iter()
        .map(|task_type| (*task_type, outputs_output_schema(task_type)))
        .collect();
    list(env, &worker.endpoint, &tasks).await;
    worker
}

/// A contract for `task_type` with `input` and `extra` proposal fields, paid; returns its id
/// and the execute's task (the execute of a stream blocks until the stream is judged).
async fn pay_in_background(
    env: &HireEnv,
    task_type: &str,
    input: Value,
    extra: Value,
) -> (String, tokio::task::JoinHandle<(u16, Value)>) {
    let mut fields = json!({"task_type": task_type});
    if let (Some(target), Some(extra)) = (fields.as_object_mut(), extra.as_object()) {
        target.extend(extra.clone());
    }
    let contract_id = env.contract(input, fields).await;
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let client = env.app.client.clone();
    let url = format!("{}/v1/contracts/{contract_id}/execute", env.app.address);
    let key = env.seeker_key.clone();
    let execute = tokio::spawn(async move {
        let response = client
            .post(url)
            .bearer_auth(key)
            .header("PAYMENT-SIGNATURE", payment)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    });
    (contract_id, execute)
}

async fn wait_for_state(env: &HireEnv, contract_id: &str, wanted: &str) {
    eventually(WAIT, &format!("contract {wanted}"), || async {
        (env.state(contract_id).await == wanted).then_some(())
    })
    .await;
}

async fn view(env: &HireEnv, contract_id: &str) -> Value {
    env.app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap()
}

type Events = std::pin::Pin<Box<dyn Stream<Item = Event> + Send>>;

/// The seeker's event stream of `contract_id`.
async fn seeker_events(env: &HireEnv, contract_id: &str) -> Events {
    let response = env
        .app
        .client
        .get(format!(
            "{}/v1/contracts/{contract_id}/events",
            env.app.address
        ))
        .bearer_auth(&env.seeker_key)
        .send()
        .await
        .expect("stream opens");
    assert_eq!(response.status(), 200);
    Box::pin(
        response
            .bytes_stream()
            .eventsource()
            .map(|item| item.expect("well-formed SSE")),
    )
}

/// The next seeker event of `kind`, failing the test after 15 s.
async fn next_of_kind(events: &mut Events, kind: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let event = events.next().await.expect("the stream stays open");
            if event.event == kind {
                return serde_json::from_str::<Value>(&event.data).unwrap();
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a {kind} event within 15 s"))
}

/// An SDK worker whose `summarize` answers a stream the test feeds, one channel per task.
async fn driven_stream_worker(
    env: &mut HireEnv,
    schema: Value,
) -> (
    RunningWorker,
    Arc<Mutex<VecDeque<mpsc::UnboundedReceiver<StreamEvent>>>>,
) {
    let feeds: Arc<Mutex<VecDeque<mpsc::UnboundedReceiver<StreamEvent>>>> = Arc::default();
    let handler_feeds = Arc::clone(&feeds);
    let handler = move |_ctx: TaskContext, _input: Value| {
        let feed = handler_feeds.lock().unwrap().pop_front();
        async move {
            match feed {
                Some(feed) => TaskOutcome::stream(feed),
                None => TaskOutcome::failed("NO_FEED", "the test gave no stream"),
            }
        }
    };
    let worker = sdk_worker(
        env,
        WorkerBuilder::new("driven-stream", "1").task_type("summarize"),
        handler,
    )
    .await;
    list(env, &worker.endpoint, &[("summarize", schema)]).await;
    (worker, feeds)
}

async fn a_stream_is_relayed_live_and_settled_after_its_verdict(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, FAST).await;
    let (_worker, feeds) =
        driven_stream_worker(&mut env, json!({"type": "string", "minLength": 1})).await;
    let (tx, rx) = mpsc::unbounded();
    feeds.lock().unwrap().push_back(rx);
    let before = env.balances().await;
    let (contract_id, execute) =
        pay_in_background(&env, "summarize", HireEnv::input("x"), json!({})).await;
    let mut events = seeker_events(&env, &contract_id).await;

    // The worker emits event k only after the seeker saw event k-1; meanwhile nothing settles.
    for (k, word) in ["three ", "small ", "risks"].into_iter().enumerate() {
        tx.unbounded_send(StreamEvent::data(word)).unwrap();
        let relayed = next_of_kind(&mut events, "worker_stream_event").await;
        assert_eq!(relayed["details"]["upstream_id"], (k + 1).to_string());
        assert_eq!(
            relayed["details"]["data"]["withheld"], true,
            "nothing unpaid is shown"
        );
        assert_eq!(relayed["details"]["data"]["bytes"], word.len());
        assert_eq!(env.state(&contract_id).await, "executing");
        assert_eq!(
            env.balances().await,
            before,
            "no settlement before the stream ended"
        );
    }
    drop(tx);
    let closing = next_of_kind(&mut events, "worker_stream_event").await;
    assert_eq!(closing["details"]["upstream_event"], "done");

    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "settled");
    assert_eq!(body["deliverable"]["output"]["type"], "text");
    assert_eq!(
        body["deliverable"]["output"]["content"],
        "three small risks"
    );
    assert_eq!(body["verification"]["verification_status"], "passed");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
    let kinds = env.event_kinds(&contract_id).await;
    let last_stream_event = kinds
        .iter()
        .rposition(|k| k == "worker_stream_event")
        .unwrap();
    let received = kinds
        .iter()
        .position(|k| k == "deliverable_received")
        .unwrap();
    assert!(
        last_stream_event < received,
        "delivered only after the stream ended: {kinds:?}"
    );
}

#[tokio::test]
async fn a_stream_is_relayed_live_and_settled_after_its_verdict_on_sqlite() {
    a_stream_is_relayed_live_and_settled_after_its_verdict(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_stream_is_relayed_live_and_settled_after_its_verdict_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_stream_is_relayed_live_and_settled_after_its_verdict(database).await;
}

#[tokio::test]
async fn a_stream_whose_assembled_output_fails_the_schema_is_rejected_and_nothing_moves() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    // The schema asks for a JSON object: the stream's data must concatenate to one.
    let (_worker, feeds) = driven_stream_worker(
        &mut env,
        hiregate_worker_sdk::example_workers::summary_output_schema(),
    )
    .await;
    let (tx, rx) = mpsc::unbounded();
    feeds.lock().unwrap().push_back(rx);
    tx.unbounded_send(StreamEvent::data("{\"summary\": "))
        .unwrap();
    tx.unbounded_send(StreamEvent::data("42}")).unwrap();
    drop(tx);
    let before = env.balances().await;
    let (contract_id, execute) =
        pay_in_background(&env, "summarize", HireEnv::input("x"), json!({})).await;
    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "verification_failed");
    assert_eq!(env.state(&contract_id).await, "rejected");
    assert_eq!(env.balances().await, before, "nothing moved");
    let stored = view(&env, &contract_id).await;
    assert!(stored["settlement"].is_null(), "{stored}");
}

/// What the stub's stream connections send, in order (one entry per connection), and what it
/// saw of them.
#[derive(Clone)]
struct StreamStub {
    connections: Arc<Vec<&'static str>>,
    opened: Arc<AtomicUsize>,
    last_event_ids: Arc<Mutex<Vec<Option<String>>>>,
    address: Arc<Mutex<String>>,
}

async fn stub_execute(State(stub): State<StreamStub>) -> impl IntoResponse {
    let address = stub.address.lock().unwrap().clone();
    Json(json!({
        "status": "completed",
        "task_id": "task_123",
        "output": {"type": "stream", "url": format!("{address}/stream/task_123"), "format": "sse"},
    }))
}

async fn stub_stream(State(stub): State<StreamStub>, headers: HeaderMap) -> Response {
    let n = stub.opened.fetch_add(1, Ordering::SeqCst);
    stub.last_event_ids.lock().unwrap().push(
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    );
    // Past the script: the last connection's body again.
    let body = stub
        .connections
        .get(n)
        .or(stub.connections.last())
        .copied()
        .unwrap_or_default();
    // The body ends after these bytes: the connection closes, mid-stream unless `done` came.
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

async fn use_stream_stub(env: &mut HireEnv, connections: Vec<&'static str>) -> StreamStub {
    let stub = StreamStub {
        connections: Arc::new(connections),
        opened: Arc::default(),
        last_event_ids: Arc::default(),
        address: Arc::default(),
    };
    let router = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/capabilities",
            get(|| async { Json(json!({"task_types": ["summarize"]})) }),
        )
        .route("/execute", post(stub_execute))
        .route("/stream/task_123", get(stub_stream))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    *stub.address.lock().unwrap() = endpoint.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    list(env, &endpoint, &[("summarize", json!({"type": "string"}))]).await;
    stub
}

#[tokio::test]
async fn a_broken_stream_is_resumed_with_last_event_id() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    let stub = use_stream_stub(
        &mut env,
        vec![
            "id: 1\ndata: three \n\nid: 2\ndata: small \n\n",
            // A worker may replay from before Last-Event-ID: the replayed event is dropped.
            "id: 2\ndata: small \n\nid: 3\ndata: risks\n\nid: 4\nevent: done\ndata: {}\n\n",
        ],
    )
    .await;
    let before = env.balances().await;
    let (contract_id, execute) =
        pay_in_background(&env, "summarize", HireEnv::input("x"), json!({})).await;
    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["deliverable"]["output"]["content"],
        "three small risks"
    );
    assert_eq!(body["state"], "settled");
    assert_eq!(stub.opened.load(Ordering::SeqCst), 2);
    assert_eq!(
        *stub.last_event_ids.lock().unwrap(),
        [None, Some("2".to_owned())]
    );
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "worker_stream_event").count(),
        4,
        "each upstream event relayed once: {kinds:?}"
    );
    assert!(kinds.contains(&"worker_stream_resumed".to_owned()));
    let after = env.balances().await;
    assert_eq!(after.1, before.1 + price(), "settled on chain");
}

/// The `worker_stream_event`s of a terminal contract as the seeker's event stream shows them,
/// to its end: `(seq, upstream event, upstream id, data bytes, data digest)`.
async fn relayed_stream(
    env: &HireEnv,
    contract_id: &str,
) -> Vec<(u64, String, Value, u64, String)> {
    let mut events = seeker_events(env, contract_id).await;
    let mut relayed = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(15), events.next())
            .await
            .expect("the stream of a terminal contract ends");
        let Some(event) = next else {
            return relayed;
        };
        if event.event != "worker_stream_event" {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data).unwrap();
        let details = &data["details"];
        assert_eq!(details["data"]["withheld"], true, "nothing unpaid is shown");
        relayed.push((
            details["seq"].as_u64().unwrap(),
            details["upstream_event"].as_str().unwrap().to_owned(),
            details["upstream_id"].clone(),
            details["data"]["bytes"].as_u64().unwrap(),
            details["data"]["digest"].as_str().unwrap().to_owned(),
        ));
    }
}

/// What relaying `(event name, data)` in order must show (no upstream ids).
fn expected_stream(events: &[(&str, &str)]) -> Vec<(u64, String, Value, u64, String)> {
    (1..)
        .zip(events)
        .map(|(seq, (name, data))| {
            (
                seq,
                (*name).to_owned(),
                Value::Null,
                data.len() as u64,
                Digest::of_bytes(data.as_bytes()).to_string(),
            )
        })
        .collect()
}

/// Five events without ids; a connection cut after the first two.
const ID_LESS_STREAM: &str =
    "data: three \n\ndata: small \n\ndata: risks\n\ndata: , noted\n\nevent: done\ndata: {}\n\n";
const ID_LESS_CUT: &str = "data: three \n\ndata: small \n\n";

async fn a_broken_stream_without_ids_is_read_again_from_its_start(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, FAST).await;
    let stub = use_stream_stub(&mut env, vec![ID_LESS_CUT, ID_LESS_STREAM]).await;
    let before = env.balances().await;
    let (contract_id, execute) = pay_in_background(
        &env,
        "summarize",
        HireEnv::input("x"),
        json!({"retry_policy": {"max_attempts": 1}}),
    )
    .await;
    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "settled");
    // Assembled once: the replayed events are not assembled again.
    assert_eq!(
        body["deliverable"]["output"]["content"],
        "three small risks, noted"
    );
    assert_eq!(stub.opened.load(Ordering::SeqCst), 2);
    assert_eq!(
        *stub.last_event_ids.lock().unwrap(),
        [None, None],
        "no id to resume from"
    );
    assert_eq!(
        relayed_stream(&env, &contract_id).await,
        expected_stream(&[
            ("message", "three "),
            ("message", "small "),
            ("message", "risks"),
            ("message", ", noted"),
            ("done", "{}"),
        ]),
        "each event once, in order"
    );
    let kinds = env.event_kinds(&contract_id).await;
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("worker_stream_resumed"), 1, "{kinds:?}");
    assert_eq!(count("deliverable_received"), 1, "{kinds:?}");
    assert_eq!(count("settlement_succeeded"), 1, "{kinds:?}");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "the seeker paid once");
    assert_eq!(after.1, before.1 + price(), "settled on chain");
}

#[tokio::test]
async fn a_broken_stream_without_ids_is_read_again_from_its_start_on_sqlite() {
    a_broken_stream_without_ids_is_read_again_from_its_start(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_broken_stream_without_ids_is_read_again_from_its_start_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_broken_stream_without_ids_is_read_again_from_its_start(database).await;
}

/// Hire the stub serving `connections` with one attempt, which must fail with nothing moved;
/// answers the env, the stub, the contract id and the attempt's `worker_error`.
async fn failing_stream(connections: Vec<&'static str>) -> (HireEnv, StreamStub, String, Value) {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    let stub = use_stream_stub(&mut env, connections).await;
    let before = env.balances().await;
    let (contract_id, execute) = pay_in_background(
        &env,
        "summarize",
        HireEnv::input("x"),
        json!({"retry_policy": {"max_attempts": 1}}),
    )
    .await;
    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "worker_failed");
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(env.balances().await, before, "nothing moved");
    let stored = view(&env, &contract_id).await;
    assert!(stored["settlement"].is_null(), "{stored}");
    let worker_error = body["error"]["details"]["worker_error"].clone();
    (env, stub, contract_id, worker_error)
}

#[tokio::test]
async fn a_replay_unlike_the_relayed_stream_fails_the_attempt_and_nothing_moves() {
    let (env, stub, contract_id, worker_error) = failing_stream(vec![
        ID_LESS_CUT,
        "data: three \n\ndata: SMALL \n\ndata: risks\n\nevent: done\ndata: {}\n\n",
    ])
    .await;
    assert_eq!(worker_error["code"], "stream_diverged", "{worker_error}");
    assert_eq!(stub.opened.load(Ordering::SeqCst), 2);
    assert_eq!(
        relayed_stream(&env, &contract_id).await,
        expected_stream(&[("message", "three "), ("message", "small ")]),
        "only the events before the cut"
    );
}

#[tokio::test]
async fn a_stream_without_ids_that_keeps_breaking_fails_after_its_reconnects_and_nothing_moves() {
    // Every connection replays the same two events and closes.
    let (env, stub, contract_id, worker_error) = failing_stream(vec![ID_LESS_CUT]).await;
    assert_eq!(worker_error["code"], "stream_lost", "{worker_error}");
    assert_eq!(stub.opened.load(Ordering::SeqCst), 6, "five reconnects");
    assert_eq!(
        relayed_stream(&env, &contract_id).await,
        expected_stream(&[("message", "three "), ("message", "small ")]),
        "the replays relayed nothing again"
    );
}

#[tokio::test]
async fn an_event_without_its_own_id_is_relayed_after_one_with_an_id_and_skipped_when_replayed() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    // "small " has no id: a reader that lets the last id (1) stand for it would take it for a
    // replay of event 1. Resumed after 1, the worker sends it again first.
    let stub = use_stream_stub(
        &mut env,
        vec![
            "id: 1\ndata: three \n\ndata: small \n\n",
            "data: small \n\nid: 2\ndata: risks\n\nevent: done\ndata: {}\n\n",
        ],
    )
    .await;
    let (contract_id, execute) =
        pay_in_background(&env, "summarize", HireEnv::input("x"), json!({})).await;
    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["deliverable"]["output"]["content"],
        "three small risks"
    );
    assert_eq!(
        *stub.last_event_ids.lock().unwrap(),
        [None, Some("1".to_owned())]
    );
    let relayed = relayed_stream(&env, &contract_id).await;
    let ids: Vec<Value> = relayed.iter().map(|event| event.2.clone()).collect();
    assert_eq!(ids, [json!("1"), Value::Null, json!("2"), Value::Null]);
    let names: Vec<&str> = relayed.iter().map(|event| event.1.as_str()).collect();
    assert_eq!(names, ["message", "message", "message", "done"]);
}

fn accept_partial(min_items: u64) -> Value {
    json!({"verification": {
        "policy_id": "vp.schema_only.v1",
        "policy_params": {"accept_partial": {"min_items": min_items}},
    }})
}

async fn partial_acceptance_settles_and_progress_is_relayed(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, FAST).await;
    let _worker = outputs_worker(&mut env).await;
    let before = env.balances().await;
    // Two of three items, 300 ms apart: the work goes pending and reports progress.
    let input = json!({"text": "part", "items": 3, "items_done": 2, "delay_ms": 300});
    let (contract_id, execute) =
        pay_in_background(&env, "output_partial", input, accept_partial(2)).await;
    let mut events = seeker_events(&env, &contract_id).await;
    let (status, body) = execute.await.unwrap();
    assert_eq!(status, 202, "{body}");
    let progress = next_of_kind(&mut events, "worker_progress").await;
    assert!(
        progress["details"]["progress"]["percent"].is_number(),
        "{progress}"
    );
    assert!(progress["details"]["items_ready"].as_u64().unwrap() >= 1);
    assert!(
        !progress.to_string().contains("\"summary\""),
        "items are not shown before payment: {progress}"
    );
    wait_for_state(&env, &contract_id, "settled").await;
    let stored = view(&env, &contract_id).await;
    assert_eq!(stored["verification"]["verification_status"], "passed");
    let after = env.balances().await;
    assert_eq!(
        after.0,
        before.0 - price(),
        "the full price, as the terms say"
    );
    assert_eq!(after.1, before.1 + price());
}

#[tokio::test]
async fn partial_acceptance_settles_and_progress_is_relayed_on_sqlite() {
    partial_acceptance_settles_and_progress_is_relayed(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn partial_acceptance_settles_and_progress_is_relayed_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    partial_acceptance_settles_and_progress_is_relayed(database).await;
}

#[tokio::test]
async fn a_final_partial_is_rejected_without_or_below_the_accepted_minimum() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    let _worker = outputs_worker(&mut env).await;
    let before = env.balances().await;
    let input = json!({"text": "part", "items": 3, "items_done": 2});
    for extra in [json!({}), accept_partial(3)] {
        let (contract_id, execute) =
            pay_in_background(&env, "output_partial", input.clone(), extra.clone()).await;
        let (status, body) = execute.await.unwrap();
        assert_eq!(status, 422, "{extra}: {body}");
        assert_eq!(body["error"]["code"], "verification_failed");
        let codes = &body["error"]["details"]["verification"]["reason_codes"];
        assert_eq!(*codes, json!([350]), "{extra}: {body}");
        assert_eq!(env.state(&contract_id).await, "rejected");
    }
    assert_eq!(env.balances().await, before, "nothing moved");
}

#[tokio::test]
async fn nonsense_partial_acceptance_is_refused_at_proposal() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let _worker = outputs_worker(&mut env).await;
    for params in [
        json!({"accept_partial": {"min_items": 0}}),
        json!({"accept_partial": {"min_items": 65}}),
        json!({"accept_partial": {"min_items": "two"}}),
        json!({"accept_partial": {"min": 2}}),
    ] {
        let response = env
            .propose(
                json!({"text": "x"}),
                json!({"task_type": "output_partial", "verification": {
                    "policy_id": "vp.schema_only.v1", "policy_params": params}}),
            )
            .await;
        assert_eq!(response.status(), 422, "{params}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "validation_failed", "{body}");
        assert_eq!(body["error"]["details"]["field"], "verification", "{body}");
    }
    // The accepted minimum is part of the signed terms.
    let with = env.propose(json!({"text": "x"}), {
        let mut extra = accept_partial(2);
        extra["task_type"] = json!("output_partial");
        extra
    });
    let with: Value = with.await.json().await.unwrap();
    let without: Value = env
        .propose(json!({"text": "x"}), json!({"task_type": "output_partial"}))
        .await
        .json()
        .await
        .unwrap();
    assert_ne!(with["terms_hash"], without["terms_hash"]);
    assert_eq!(
        with["terms"]["verification"]["policy_params"]["accept_partial"]["min_items"], 2,
        "{with}"
    );
}

#[tokio::test]
async fn every_output_type_of_the_example_worker_is_hired_end_to_end() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    let _worker = outputs_worker(&mut env).await;
    for (task_type, expected_type) in [
        ("output_text", "text"),
        ("output_json", "json"),
        ("output_file", "file"),
        ("output_multiple", "multiple"),
        ("output_stream", "text"),
    ] {
        let before = env.balances().await;
        let input = json!({"text": "three small risks", "delay_ms": 20});
        let (contract_id, execute) = pay_in_background(&env, task_type, input, json!({})).await;
        let (status, body) = execute.await.unwrap();
        assert_eq!(status, 200, "{task_type}: {body}");
        assert_eq!(body["state"], "settled", "{task_type}");
        let output = &body["deliverable"]["output"];
        assert_eq!(output["type"], expected_type, "{task_type}: {output}");
        match task_type {
            "output_text" | "output_stream" => {
                assert_eq!(output["content"], "three small risks");
            }
            "output_file" => {
                assert!(
                    output["checksum"].as_str().unwrap().starts_with("sha256:"),
                    "{output}"
                );
            }
            "output_multiple" => assert_eq!(output["items"].as_array().unwrap().len(), 3),
            _ => assert_eq!(output["content"]["summary"], "three small risks"),
        }
        let after = env.balances().await;
        assert_eq!(after.1, before.1 + price(), "{task_type} settled on chain");
        assert_eq!(env.state(&contract_id).await, "settled");
    }
}

#[tokio::test]
async fn an_instance_killed_mid_stream_is_taken_over_and_the_stream_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/hiregate.db", dir.path().display());
    let settings = format!(
        "[signing_key]\npath = \"{}\"\n{}",
        dir.path().join("gateway-key.json").display(),
        FAST.replace(
            "job_lease_ms = 5000",
            "job_lease_ms = 5000\nrecovery_grace_ms = 300"
        )
    );
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let chain = chain_settings(&devnet, &settings);
    // Instance B (the env's gateway) and the worker; the contract will be paid on A.
    let mut env = hire_env_on(
        devnet,
        TestDatabase::Shared(url.clone()),
        WorkerKind::Echo,
        4,
        &settings,
    )
    .await;
    let (worker, feeds) = driven_stream_worker(&mut env, json!({"type": "string"})).await;
    let (tx, rx) = mpsc::unbounded();
    feeds.lock().unwrap().push_back(rx);

    // Instance A on its own runtime and thread: shutting that runtime down ends everything A
    // was doing, as a killed process would.
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    let (kill_tx, kill_rx) = std::sync::mpsc::channel::<()>();
    let instance_a = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let app = runtime.block_on(spawn_app_on(TestDatabase::Shared(url), &chain));
        address_tx.send(app.address.clone()).unwrap();
        let _ = kill_rx.recv();
        runtime.block_on(async move { drop(app) });
        runtime.shutdown_background();
    });
    let instance_a_address = address_rx.recv().unwrap();

    let before = env.balances().await;
    let contract_id = env
        .contract(
            HireEnv::input("x"),
            json!({"sla": {"max_latency_ms": 3000}}),
        )
        .await;
    let execute_url = format!("{instance_a_address}/v1/contracts/{contract_id}/execute");
    let challenge = answer(
        env.app
            .client
            .post(&execute_url)
            .bearer_auth(&env.seeker_key)
            .send()
            .await
            .unwrap(),
    )
    .await
    .payment_required();
    let payment = env.pay(&challenge).await;
    let paid = env
        .app
        .client
        .post(&execute_url)
        .bearer_auth(&env.seeker_key)
        .header("PAYMENT-SIGNATURE", payment)
        .timeout(Duration::from_secs(60))
        .send();
    // Its answer never comes: A dies first.
    tokio::spawn(async move {
        let _ = paid.await;
    });
    let mut events = seeker_events(&env, &contract_id).await;
    for word in ["three ", "small "] {
        tx.unbounded_send(StreamEvent::data(word)).unwrap();
        next_of_kind(&mut events, "worker_stream_event").await;
    }
    kill_tx.send(()).unwrap();
    instance_a.join().unwrap();
    assert_eq!(
        env.state(&contract_id).await,
        "executing",
        "A died mid-stream"
    );

    // B takes the contract over once the SLA and the grace passed, and reads the stream again.
    next_of_kind(&mut events, "recovery_takeover").await;
    tx.unbounded_send(StreamEvent::data("risks")).unwrap();
    drop(tx);
    wait_for_state(&env, &contract_id, "settled").await;
    let stored = view(&env, &contract_id).await;
    assert_eq!(
        stored["deliverable"]["content"]["output"]["content"], "three small risks",
        "{stored}"
    );
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "one transfer");
    assert_eq!(after.1, before.1 + price());
    assert_eq!(worker.executions(), 1, "the worker ran the task once");
    let kinds = env.event_kinds(&contract_id).await;
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(
        count("worker_stream_event"),
        4,
        "each event relayed once: {kinds:?}"
    );
    assert_eq!(count("recovery_takeover"), 1);
    assert_eq!(count("deliverable_received"), 1);
    assert_eq!(count("settlement_succeeded"), 1);
}
