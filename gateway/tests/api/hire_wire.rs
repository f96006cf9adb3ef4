//! HIRE on the wire, from the document itself (seeds/hire-execution.txt): its execute request
//! is the task input; its success, failure and pending bodies are what the worker answers; its
//! webhook (`event: task_completed`, no `status`) is what the worker calls back with. The JSON
//! below is copied from the document and changed only where a real run must differ: the
//! contract id, the URLs (the worker serves its files on 127.0.0.1) and the checksums (real
//! `sha256:` digests of those files, which the gateway checks). Everything runs on real parts:
//! anvil with the devnet token, the embedded facilitator, a real gateway, a worker over TCP
//! (a small axum worker answering the literal bodies, with worker-sdk serving its /health and
//! /capabilities); money outcomes are read from the chain.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use alloy::primitives::U256;
use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
    routing::{get, post},
};
use chrono::Utc;
use hiregate_contracts::canonical::Digest;
use hiregate_store::states::PaymentState;
use hiregate_worker_sdk::{
    CallbackConfig, CallbackShape, GatewayKeys, TaskContext, TaskOutcome, WebhookSecret,
    WorkerBuilder,
    example_workers::{FaultyBehaviour, FaultyMode, faulty_builder, faulty_handler},
};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    helpers::{TestDatabase, eventually, spawn_app_on},
    hire_env::{
        Answer, HireEnv, PRICE, WorkerKind, chain_settings, hire_env, hire_env_on, hire_listing,
        serve_worker, start_worker,
    },
};

const WAIT: Duration = Duration::from_secs(30);
/// Polling so slow that only a callback can end pending work within a test.
const NO_POLLING: &str = "[contracts]\npoll_interval_ms = 600000\npoll_max_interval_ms = 600000\n\
                          jobs_interval_ms = 50\n";
/// Fast polling.
const FAST: &str = "[contracts]\npoll_interval_ms = 100\npoll_max_interval_ms = 400\n\
                    jobs_interval_ms = 50\njob_lease_ms = 5000\n";

const TASK_TYPE: &str = "design_logo";

/// The document's execution request body: the contract's input.
const SEED_EXECUTE_REQUEST: &str = r##"{
  "brief": "Create a minimalist logo for TechStartup Inc",
  "colors": ["#FF5733", "#333333"],
  "style_references": ["https://example.com/style1.png"]
}"##;

/// The document's success response.
const SEED_SUCCESS: &str = r#"{
  "status": "completed",
  "contract_id": "ctr_xyz789",
  "deliverables": [
    {
      "name": "logo_v1.svg",
      "url": "https://storage.example.com/logo_v1.svg",
      "checksum": "sha256:abc..."
    },
    {
      "name": "logo_v2.svg",
      "url": "https://storage.example.com/logo_v2.svg",
      "checksum": "sha256:def..."
    },
    {
      "name": "logo_v3.svg",
      "url": "https://storage.example.com/logo_v3.svg",
      "checksum": "sha256:ghi..."
    }
  ],
  "metadata": {
    "execution_time_ms": 4500,
    "model_used": "designbot-v2"
  }
}"#;

/// The document's failure response.
const SEED_FAILURE: &str = r##"{
  "status": "failed",
  "contract_id": "ctr_xyz789",
  "error": {
    "code": "INVALID_INPUT",
    "message": "Color format not recognized",
    "details": {
      "field": "colors[0]",
      "expected": "hex color",
      "received": "red"
    }
  }
}"##;

/// The document's pending response.
const SEED_PENDING: &str = r#"{
  "status": "pending",
  "task_id": "task_abc123",
  "poll_url": "https://worker.example.com/tasks/task_abc123",
  "estimated_completion": "2025-01-30T12:00:00Z"
}"#;

/// The document's webhook, its `deliverables: [...]` filled with the success response's list.
const SEED_WEBHOOK_COMPLETED: &str = r#"{
  "event": "task_completed",
  "contract_id": "ctr_xyz789",
  "task_id": "task_abc123",
  "deliverables": [
    {
      "name": "logo_v1.svg",
      "url": "https://storage.example.com/logo_v1.svg",
      "checksum": "sha256:abc..."
    },
    {
      "name": "logo_v2.svg",
      "url": "https://storage.example.com/logo_v2.svg",
      "checksum": "sha256:def..."
    },
    {
      "name": "logo_v3.svg",
      "url": "https://storage.example.com/logo_v3.svg",
      "checksum": "sha256:ghi..."
    }
  ]
}"#;

/// The webhook of a failed task: the document's webhook shape with the failure's `error`.
const SEED_WEBHOOK_FAILED: &str = r##"{
  "event": "task_failed",
  "contract_id": "ctr_xyz789",
  "task_id": "task_abc123",
  "error": {
    "code": "INVALID_INPUT",
    "message": "Color format not recognized",
    "details": {
      "field": "colors[0]",
      "expected": "hex color",
      "received": "red"
    }
  }
}"##;

fn logo(n: u8) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 10 10\"><circle r=\"{n}\"/></svg>"
    )
}

/// A seed body for `contract_id`, its files hosted under `files` (`http://127.0.0.1:…/files`
/// unless a test wants otherwise), `poll_base` the worker's base URL.
fn seed_body(template: &str, contract_id: &str, files: &str, poll_base: &str) -> String {
    let mut body = template
        .replace("ctr_xyz789", contract_id)
        .replace("https://storage.example.com", files)
        .replace("https://worker.example.com", poll_base);
    for (n, placeholder) in [
        (1, "sha256:abc..."),
        (2, "sha256:def..."),
        (3, "sha256:ghi..."),
    ] {
        body = body.replace(
            placeholder,
            &Digest::of_bytes(logo(n).as_bytes()).to_string(),
        );
    }
    body
}

/// What the seed worker answers to `POST /execute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SeedAnswer {
    Success,
    Failure,
    Pending,
}

struct SeedWorkerState {
    answer: SeedAnswer,
    base: String,
    files: String,
}

/// A worker answering the document's bodies verbatim; worker-sdk serves the rest of the
/// protocol (/health, /capabilities) behind it.
struct SeedWorker {
    endpoint: String,
    shutdown: CancellationToken,
}

impl Drop for SeedWorker {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn seed_execute(
    State(state): State<Arc<SeedWorkerState>>,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    let contract_id = headers
        .get("x-contract-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    // The gateway sends the contract's input: the document's execution request.
    let sent: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let expected: Value = serde_json::from_str(SEED_EXECUTE_REQUEST).unwrap();
    if sent != expected {
        return (StatusCode::BAD_REQUEST, String::from("not the seed input")).into_response();
    }
    let (status, template) = match state.answer {
        SeedAnswer::Success => (StatusCode::OK, SEED_SUCCESS),
        SeedAnswer::Failure => (StatusCode::OK, SEED_FAILURE),
        SeedAnswer::Pending => (StatusCode::ACCEPTED, SEED_PENDING),
    };
    let body = seed_body(template, &contract_id, &state.files, &state.base);
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// `GET /tasks/task_abc123`: still pending (only a callback ends the work).
async fn seed_poll(State(state): State<Arc<SeedWorkerState>>) -> impl IntoResponse {
    let body = seed_body(SEED_PENDING, "", &state.files, &state.base);
    ([(header::CONTENT_TYPE, "application/json")], body)
}

fn logo_number(name: &str) -> Option<u8> {
    match name {
        "logo_v1.svg" => Some(1),
        "logo_v2.svg" => Some(2),
        "logo_v3.svg" => Some(3),
        _ => None,
    }
}

async fn seed_file(Path(name): Path<String>) -> impl IntoResponse {
    match logo_number(&name) {
        Some(n) => ([(header::CONTENT_TYPE, "image/svg+xml")], logo(n)).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The same names with other bytes: what the answer's checksums do not describe.
async fn altered_file(Path(name): Path<String>) -> impl IntoResponse {
    match logo_number(&name) {
        Some(n) => ([(header::CONTENT_TYPE, "image/svg+xml")], logo(n + 10)).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Start a seed worker answering `answer`; its deliverables point at its `/files` unless
/// `files_path` names another of its routes (`altered-files`).
async fn start_seed_worker(
    answer: SeedAnswer,
    gateway: &str,
    files_path: Option<&str>,
) -> SeedWorker {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address: SocketAddr = listener.local_addr().unwrap();
    let base = format!("http://{address}");
    let jwks = format!("{gateway}/.well-known/jwks.json").parse().unwrap();
    let sdk = WorkerBuilder::new("seed-worker", "1.0.0")
        .task_type(TASK_TYPE)
        .gateway_keys(GatewayKeys::remote(jwks))
        .build(|_ctx: TaskContext, _input: Value| async move {
            TaskOutcome::failed("UNUSED", "the seed routes answer /execute")
        })
        .unwrap();
    let state = Arc::new(SeedWorkerState {
        answer,
        files: format!("{base}/{}", files_path.unwrap_or("files")),
        base: base.clone(),
    });
    let router = Router::new()
        .route("/execute", post(seed_execute))
        .route("/tasks/task_abc123", get(seed_poll))
        .route("/files/{name}", get(seed_file))
        .route("/altered-files/{name}", get(altered_file))
        .with_state(state)
        .fallback_service(sdk.router());
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
    });
    SeedWorker {
        endpoint: base,
        shutdown,
    }
}

/// List `worker` for `design_logo` (three files expected) paying `env.pay_to`; returns its id
/// and callback secret.
async fn list_seed_worker(env: &HireEnv, worker: &SeedWorker) -> (String, WebhookSecret) {
    let mut listing = hire_listing(&worker.endpoint, env.pay_to, &env.devnet, 4);
    listing["tasks"] = json!({
        TASK_TYPE: {
            "price": PRICE.to_string(),
            "output_schema": {"type": "array", "minItems": 3},
        }
    });
    let response = env.app.register_worker(&env.operator_key, &listing).await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    (
        body["id"].as_str().unwrap().to_owned(),
        body["callback_secret"].as_str().unwrap().parse().unwrap(),
    )
}

/// Propose `design_logo` with the document's execution request as input.
async fn propose(env: &HireEnv, worker_id: &str, extra: Value) -> reqwest::Response {
    let mut body = json!({
        "worker_id": worker_id,
        "task_type": TASK_TYPE,
        "input": serde_json::from_str::<Value>(SEED_EXECUTE_REQUEST).unwrap(),
        "sla": {"max_latency_ms": 5000},
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    env.app
        .send_json(Method::POST, "/v1/contracts", Some(&env.seeker_key), &body)
        .await
}

async fn contract(env: &HireEnv, worker_id: &str, extra: Value) -> String {
    let response = propose(env, worker_id, extra).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    body["contract_id"].as_str().unwrap().to_owned()
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

/// POST `body` to the gateway's callback route for `contract_id`, signed with `secret`.
async fn call_back(
    env: &HireEnv,
    secret: &WebhookSecret,
    contract_id: &str,
    body: &str,
) -> reqwest::Response {
    let headers = secret
        .sign_headers(
            &format!("msg_{}", ulid::Ulid::new()),
            Utc::now(),
            body.as_bytes(),
        )
        .unwrap();
    env.app
        .client
        .post(format!("{}/v1/callbacks/{contract_id}", env.app.address))
        .headers(headers)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

/// The three files of the success body as HIRE `deliverables`, hosted by `worker`.
fn expected_deliverables(files: &str) -> Value {
    let body: Value = serde_json::from_str(&seed_body(SEED_SUCCESS, "", files, "")).unwrap();
    body["deliverables"].clone()
}

async fn completed_answer_settles(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let worker = start_seed_worker(SeedAnswer::Success, &env.app.address, None).await;
    let (worker_id, _) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id, json!({})).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    // HIRE's success body, as the document shows it...
    assert_eq!(answer.body["status"], "completed");
    assert_eq!(answer.body["contract_id"], contract_id);
    let files = format!("{}/files", worker.endpoint);
    assert_eq!(answer.body["deliverables"], expected_deliverables(&files));
    assert_eq!(
        answer.body["metadata"],
        json!({"execution_time_ms": 4500, "model_used": "designbot-v2"})
    );
    assert_eq!(answer.body["output"]["type"], "multiple");
    // ...beside hiregate's own fields.
    assert_eq!(answer.body["state"], "settled");
    assert_eq!(answer.body["verification"]["verification_status"], "passed");
    // Every file was fetched and its checksum checked before settling.
    assert_eq!(
        answer.body["deliverable"]["output"]["items"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let view = view(&env, &contract_id).await;
    assert_eq!(view["deliverable"]["evidence"].as_array().unwrap().len(), 3);
    assert_eq!(view["metadata"]["model_used"], "designbot-v2");
    assert_eq!(view["attempts"][0]["metadata"]["execution_time_ms"], 4500);

    let after = env.balances().await;
    assert_eq!(
        after.0,
        before.0 - U256::from(PRICE),
        "the seeker paid once"
    );
    assert_eq!(after.1, before.1 + U256::from(PRICE), "the worker was paid");
}

#[tokio::test]
async fn the_seed_success_answer_is_verified_settled_and_read_back_as_hire() {
    completed_answer_settles(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_seed_success_answer_is_verified_settled_and_read_back_as_hire_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    completed_answer_settles(database).await;
}

#[tokio::test]
async fn a_deliverable_whose_checksum_does_not_match_its_file_is_rejected_and_nothing_moves() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    // The files the worker names hold other bytes than its checksums say.
    let worker =
        start_seed_worker(SeedAnswer::Success, &env.app.address, Some("altered-files")).await;
    let (worker_id, _) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id, json!({})).await;
    let before = env.balances().await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(answer.body["status"], "failed");
    assert_eq!(answer.body["contract_id"], contract_id);
    assert_eq!(answer.body["error"]["code"], "verification_failed");
    assert_eq!(env.balances().await, before, "nothing moved");
}

/// `env`'s seeker pays a contract of a seed worker that answers HIRE's failure, with one
/// attempt allowed: (the worker, the contract, the balances before, the paid execute's answer).
async fn failed_hire(env: &mut HireEnv) -> (SeedWorker, String, (U256, U256), Answer) {
    let worker = start_seed_worker(SeedAnswer::Failure, &env.app.address, None).await;
    let (worker_id, _) = list_seed_worker(env, &worker).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(
        env,
        &worker_id,
        json!({"retry_policy": {"max_attempts": 1}}),
    )
    .await;
    let before = env.balances().await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    (worker, contract_id, before, answer)
}

async fn failure_answer_moves_nothing(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let (_worker, contract_id, before, answer) = failed_hire(&mut env).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    // HIRE's failure body: status, contract_id, error {code, message, details}.
    assert_eq!(answer.body["status"], "failed");
    assert_eq!(answer.body["contract_id"], contract_id);
    assert_eq!(answer.body["error"]["code"], "worker_failed");
    let worker_error = &answer.body["error"]["details"]["worker_error"];
    assert_eq!(worker_error["code"], "INVALID_INPUT");
    assert_eq!(worker_error["message"], "Color format not recognized");
    assert_eq!(
        worker_error["details"],
        json!({"field": "colors[0]", "expected": "hex color", "received": "red"})
    );
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(env.balances().await, before, "nothing moved");

    // A repeated execute answers the same failure, the worker's own error in the same place.
    let again = env.execute(&contract_id, None, None).await;
    assert_eq!(again.status, 502, "{:?}", again.body);
    assert_eq!(again.body["error"]["code"], "worker_failed");
    assert_eq!(
        again.body["error"]["details"]["worker_error"], *worker_error,
        "{:?}",
        again.body
    );
    assert!(again.body["error"]["details"].get("last_error").is_none());
}

#[tokio::test]
async fn the_seed_failure_answer_fails_the_contract_and_nothing_moves() {
    failure_answer_moves_nothing(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_seed_failure_answer_fails_the_contract_and_nothing_moves_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    failure_answer_moves_nothing(database).await;
}

/// A crash between a contract's `failed` and its payment's release (two commits) leaves the
/// plain payment `verified`. The background round releases it once the contract has not moved
/// for `contracts.recovery_grace_ms`, exactly once, with its `payment_voided` event; nothing
/// moves on chain. The crash is simulated by putting the payment back to `verified` after the
/// normal path released it: a kill -9 cannot be timed between two commits on demand.
async fn a_payment_left_held_by_a_crash_is_released(database: TestDatabase) {
    let mut env = hire_env(
        database,
        WorkerKind::Echo,
        4,
        "[contracts]\nrecovery_grace_ms = 10000\njobs_interval_ms = 50",
    )
    .await;
    let (_worker, contract_id, before, answer) = failed_hire(&mut env).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "failed");
    let payment = env.payment(&contract_id).await;
    assert_eq!(payment.state, PaymentState::Voided);
    let store = &env.app.store;
    store
        .set_payment_state(&payment.payment_id, PaymentState::Verified, Utc::now())
        .await
        .unwrap();
    let voids = |kinds: Vec<String>| kinds.iter().filter(|k| *k == "payment_voided").count();
    let voided_before = voids(env.event_kinds(&contract_id).await);

    // Within the grace the path that failed it may still be about to release it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        env.payment(&contract_id).await.state,
        PaymentState::Verified,
        "released within the grace"
    );

    env.app.clock.advance(Duration::from_secs(11));
    eventually(
        Duration::from_secs(10),
        "the payment left held is released",
        || async { (env.payment(&contract_id).await.state == PaymentState::Voided).then_some(()) },
    )
    .await;
    // More rounds change nothing: one release, one event.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let events = store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    let released: Vec<_> = events
        .iter()
        .filter(|e| e.details["reason"] == "released_after_crash")
        .collect();
    assert_eq!(released.len(), 1, "{events:?}");
    assert_eq!(
        voids(env.event_kinds(&contract_id).await),
        voided_before + 1
    );
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(env.balances().await, before, "nothing moved");
}

#[tokio::test]
async fn a_payment_left_held_by_a_crash_after_failing_is_released() {
    a_payment_left_held_by_a_crash_is_released(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_payment_left_held_by_a_crash_after_failing_is_released_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_payment_left_held_by_a_crash_is_released(database).await;
}

/// Pay a pending contract and check the HIRE pending answer.
async fn pay_expecting_seed_pending(env: &HireEnv, contract_id: &str) {
    let challenge = env.challenge(contract_id).await;
    let answer = env
        .execute(contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    assert_eq!(answer.body["status"], "pending");
    assert_eq!(answer.body["task_id"], "task_abc123");
    assert_eq!(answer.body["estimated_completion"], "2025-01-30T12:00:00Z");
    // The seeker polls the gateway, never the worker.
    assert!(
        answer.body["poll_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/contracts/{contract_id}")),
        "{:?}",
        answer.body
    );
    // A later execute answers the same.
    let again = env.execute(contract_id, None, None).await;
    assert_eq!(again.status, 202);
    assert_eq!(again.body["task_id"], "task_abc123");
}

async fn pending_then_seed_webhook_settles(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, NO_POLLING).await;
    let worker = start_seed_worker(SeedAnswer::Pending, &env.app.address, None).await;
    let (worker_id, secret) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(
        &env,
        &worker_id,
        json!({"sla": {"max_latency_ms": 5000, "poll_window_s": 600}}),
    )
    .await;
    let before = env.balances().await;
    pay_expecting_seed_pending(&env, &contract_id).await;

    let files = format!("{}/files", worker.endpoint);
    let webhook = seed_body(SEED_WEBHOOK_COMPLETED, &contract_id, &files, "");
    assert!(!webhook.contains("\"status\""), "the document's shape");
    let response = call_back(&env, &secret, &contract_id, &webhook).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    wait_for_state(&env, &contract_id, "settled").await;

    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    let result = env.execute(&contract_id, None, None).await;
    assert_eq!(result.status, 200);
    assert_eq!(result.body["status"], "completed");
    assert_eq!(result.body["deliverables"], expected_deliverables(&files));
}

#[tokio::test]
async fn the_seed_pending_answer_then_the_seed_webhook_settles() {
    pending_then_seed_webhook_settles(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_seed_pending_answer_then_the_seed_webhook_settles_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    pending_then_seed_webhook_settles(database).await;
}

#[tokio::test]
async fn a_task_failed_webhook_fails_the_contract_and_nothing_moves() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, NO_POLLING).await;
    let worker = start_seed_worker(SeedAnswer::Pending, &env.app.address, None).await;
    let (worker_id, secret) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(
        &env,
        &worker_id,
        json!({"retry_policy": {"max_attempts": 1},
               "sla": {"max_latency_ms": 5000, "poll_window_s": 600}}),
    )
    .await;
    let before = env.balances().await;
    pay_expecting_seed_pending(&env, &contract_id).await;
    let webhook = seed_body(SEED_WEBHOOK_FAILED, &contract_id, "", "");
    let response = call_back(&env, &secret, &contract_id, &webhook).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    wait_for_state(&env, &contract_id, "failed").await;
    let view = view(&env, &contract_id).await;
    assert_eq!(view["attempts"][0]["error"]["code"], "INVALID_INPUT");
    assert_eq!(env.balances().await, before, "nothing moved");

    // A webhook whose event contradicts its status, or names no known event, changes nothing.
    for body in [
        json!({"event": "task_completed", "status": "failed", "contract_id": contract_id,
               "error": {"code": "X", "message": "x"}}),
        json!({"event": "task_exploded", "contract_id": contract_id}),
    ] {
        let response = call_back(&env, &secret, &contract_id, &body.to_string()).await;
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "invalid_callback_body");
    }
}

#[tokio::test]
async fn the_worker_sdk_sends_the_seed_webhook_shape_and_the_contract_settles() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, NO_POLLING).await;
    // A placeholder is listed to learn the callback secret; the callback worker takes its port.
    let placeholder = start_worker(WorkerKind::Faulty, &env.app.address).await;
    let endpoint = placeholder.endpoint.clone();
    let address: SocketAddr = endpoint.trim_start_matches("http://").parse().unwrap();
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&endpoint, env.pay_to, &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    let secret: WebhookSecret = body["callback_secret"].as_str().unwrap().parse().unwrap();
    placeholder.shut_down().await;
    let jwks = format!("{}/.well-known/jwks.json", env.app.address)
        .parse()
        .unwrap();
    let worker = faulty_builder()
        .gateway_keys(GatewayKeys::remote(jwks))
        .completion_callback(
            CallbackConfig::new(env.app.address.parse().unwrap(), secret)
                .shape(CallbackShape::HireWebhook)
                .first_retry_delay(Duration::from_millis(100)),
        )
        .build(faulty_handler(FaultyBehaviour::new(FaultyMode::Ok)))
        .unwrap();
    env.worker = serve_worker(worker, address).await;
    env.worker_id = body["id"].as_str().unwrap().to_owned();

    let contract_id = env
        .contract(
            json!({"text": "called back", "mode": "pending", "delay_ms": 300}),
            json!({"sla": {"max_latency_ms": 5000, "poll_window_s": 60}}),
        )
        .await;
    let before = env.balances().await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    wait_for_state(&env, &contract_id, "settled").await;
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
}

#[tokio::test]
async fn pending_work_waits_for_its_poll_window_not_just_its_latency() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST).await;
    let worker = start_seed_worker(SeedAnswer::Pending, &env.app.address, None).await;
    let (worker_id, secret) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    // 1 s to answer, 600 s of poll window: the work is still awaited well past the second.
    let contract_id = contract(
        &env,
        &worker_id,
        json!({"sla": {"max_latency_ms": 1000, "poll_window_s": 600}}),
    )
    .await;
    pay_expecting_seed_pending(&env, &contract_id).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(env.state(&contract_id).await, "pending");
    let files = format!("{}/files", worker.endpoint);
    let webhook = seed_body(SEED_WEBHOOK_COMPLETED, &contract_id, &files, "");
    let response = call_back(&env, &secret, &contract_id, &webhook).await;
    assert_eq!(response.status(), 200);
    wait_for_state(&env, &contract_id, "settled").await;

    // Without a poll window, the same work fails once its latency is spent, and nothing moves.
    let quick = contract(
        &env,
        &worker_id,
        json!({"sla": {"max_latency_ms": 1000}, "retry_policy": {"max_attempts": 1}}),
    )
    .await;
    let before = env.balances().await;
    pay_expecting_seed_pending(&env, &quick).await;
    wait_for_state(&env, &quick, "failed").await;
    let view = view(&env, &quick).await;
    assert_eq!(view["attempts"][0]["error"]["code"], "sla_exceeded");
    assert_eq!(env.balances().await, before);
}

#[tokio::test]
async fn a_poll_window_longer_than_an_exact_authorization_is_refused_naming_the_limit() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let worker = start_seed_worker(SeedAnswer::Pending, &env.app.address, None).await;
    let (worker_id, _) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    // HIRE's 24 hours of polling cannot be held by an exact (EIP-3009) authorization here.
    let response = propose(
        &env,
        &worker_id,
        json!({"sla": {"max_latency_ms": 5000, "poll_window_s": 86400}}),
    )
    .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "poll_window_too_long");
    let details = &body["error"]["details"];
    assert_eq!(details["limit"], "contracts.max_authorization_window_s");
    assert_eq!(details["requested_s"], 86400);
    assert_eq!(details["max_s"], 3600);
    // One that fits is signed, and its 402 asks for an authorization that outlives it.
    let contract_id = contract(
        &env,
        &worker_id,
        json!({"sla": {"max_latency_ms": 5000, "poll_window_s": 1200},
               "retry_policy": {"max_attempts": 2}}),
    )
    .await;
    let challenge = env.challenge(&contract_id).await;
    let window = challenge.accepts[0].max_timeout_seconds;
    assert!(window >= 2 * (5 + 1200), "{window}");
}

#[tokio::test]
async fn an_http_endpoint_is_refused_at_registration_when_https_is_required() {
    let devnet = hiregate_payments::devnet::Devnet::start()
        .await
        .expect("anvil devnet starts");
    let app = spawn_app_on(
        TestDatabase::sqlite(),
        // Lands in chain_settings' [outbound] table.
        &chain_settings(&devnet, "require_https = true\n"),
    )
    .await;
    let (operator_key, _) = app.create_key("operator").await;
    let worker = start_worker(WorkerKind::Echo, &app.address).await;
    let pay_to = alloy::signers::local::PrivateKeySigner::random().address();
    let response = app
        .register_worker(
            &operator_key,
            &hire_listing(&worker.endpoint, pay_to, &devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "endpoint_not_https");
    assert_eq!(body["error"]["details"]["required_scheme"], "https");
    assert!(
        body["error"]["details"]["endpoint"]
            .as_str()
            .unwrap()
            .starts_with(&worker.endpoint)
    );
    assert_eq!(worker.executions(), 0);
    let listed: Value = app.get("/v1/workers", None).await.json().await.unwrap();
    assert_eq!(listed["workers"], json!([]), "nothing was listed");
}

/// A contract of the seed worker left `pending` by a gateway that allowed plain http, then the
/// same database and key served by a gateway requiring https with `after` settings. Returns
/// the new environment, the seed worker, its callback secret, the contract and the balances
/// before payment.
async fn pending_when_https_becomes_required(
    dir: &tempfile::TempDir,
    after: &str,
) -> (HireEnv, SeedWorker, WebhookSecret, String, (U256, U256)) {
    let url = format!("sqlite://{}/hiregate.db", dir.path().display());
    let key = format!(
        "[signing_key]\npath = \"{}\"\n",
        dir.path().join("gateway-key.json").display()
    );
    let devnet = hiregate_payments::devnet::Devnet::start()
        .await
        .expect("anvil devnet starts");
    let mut env = hire_env_on(
        devnet,
        TestDatabase::Shared(url.clone()),
        WorkerKind::Echo,
        4,
        &format!("{key}{after}"),
    )
    .await;
    let worker = start_seed_worker(SeedAnswer::Pending, &env.app.address, None).await;
    let (worker_id, secret) = list_seed_worker(&env, &worker).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(
        &env,
        &worker_id,
        json!({"retry_policy": {"max_attempts": 1},
               "sla": {"max_latency_ms": 5000, "poll_window_s": 600}}),
    )
    .await;
    let before = env.balances().await;
    pay_expecting_seed_pending(&env, &contract_id).await;

    let HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker: sdk_worker,
        pay_to,
        wallet,
        ..
    } = env;
    drop(app);
    let app = spawn_app_on(
        TestDatabase::Shared(url),
        &chain_settings(
            &devnet,
            // Lands in chain_settings' [outbound] table.
            &format!("require_https = true\n{key}{after}"),
        ),
    )
    .await;
    let env = HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker: sdk_worker,
        worker_id,
        pay_to,
        wallet,
    };
    (env, worker, secret, contract_id, before)
}

/// With https required, a plain http poll URL is never polled: the attempt fails with
/// `insecure_url` and no money moves.
#[tokio::test]
async fn an_http_poll_url_is_refused_at_runtime_when_https_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let (env, _worker, _secret, contract_id, before) =
        pending_when_https_becomes_required(&dir, FAST).await;
    wait_for_state(&env, &contract_id, "failed").await;
    let view = view(&env, &contract_id).await;
    assert_eq!(view["attempts"][0]["error"]["code"], "insecure_url");
    assert_eq!(env.balances().await, before, "nothing moved");

    // Nor is a plain http seeker webhook accepted in a new proposal.
    let response = propose(
        &env,
        &env.worker_id,
        json!({"webhook_url": "http://hooks.example.com/hiregate"}),
    )
    .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "webhook_url_not_https");
}

/// With https required, a callback naming plain http files is refused before anything is
/// fetched: the attempt fails with `insecure_url` and no money moves.
#[tokio::test]
async fn http_file_urls_in_a_callback_are_refused_at_runtime_when_https_is_required() {
    let dir = tempfile::tempdir().unwrap();
    let (env, worker, secret, contract_id, before) =
        pending_when_https_becomes_required(&dir, NO_POLLING).await;
    let files = format!("{}/files", worker.endpoint);
    let webhook = seed_body(SEED_WEBHOOK_COMPLETED, &contract_id, &files, "");
    let response = call_back(&env, &secret, &contract_id, &webhook).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    wait_for_state(&env, &contract_id, "failed").await;
    let view = view(&env, &contract_id).await;
    let error = &view["attempts"][0]["error"];
    assert_eq!(error["code"], "insecure_url");
    assert!(
        error["details"]["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1"),
        "{error}"
    );
    assert_eq!(env.balances().await, before, "nothing moved");
}
