//! Worker answers a real worker would not produce on demand: a `contract_id` naming another
//! contract (on execute and on poll), a failure message holding U+0000, and seeker input
//! holding U+0000 — on SQLite and PostgreSQL alike.
//!
//! The chain, the token, the facilitator, the gateway and the payments are real (anvil, as in
//! `hire_env`). The worker is a small axum stub that answers whatever the test scripts: it
//! exists only to inject these faults, and it skips the contract-token check a worker-sdk
//! worker does (the gateway's side of the exchange is what is under test).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Json, Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::{get, post},
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, eventually},
    hire_env::{HireEnv, WorkerKind, hire_env, hire_listing},
};

/// What the stub answers, given the `X-Contract-ID` it was called with and its own address.
type Script = Arc<dyn Fn(&str, &str) -> (StatusCode, Value) + Send + Sync>;

#[derive(Clone)]
struct Stub {
    execute: Script,
    poll: Script,
    address: Arc<Mutex<String>>,
    executions: Arc<AtomicUsize>,
}

fn contract_of(headers: &HeaderMap) -> String {
    headers
        .get("x-contract-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn stub_execute(State(stub): State<Stub>, headers: HeaderMap) -> impl IntoResponse {
    stub.executions.fetch_add(1, Ordering::SeqCst);
    let address = stub
        .address
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let (status, body) = (stub.execute)(&contract_of(&headers), &address);
    (status, Json(body))
}

async fn stub_poll(State(stub): State<Stub>, headers: HeaderMap) -> impl IntoResponse {
    let address = stub
        .address
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let (status, body) = (stub.poll)(&contract_of(&headers), &address);
    (status, Json(body))
}

/// Serve the stub on 127.0.0.1:0 and list it for `summarize`; the env then hires it.
async fn use_stub(
    env: &mut HireEnv,
    execute: impl Fn(&str, &str) -> (StatusCode, Value) + Send + Sync + 'static,
    poll: impl Fn(&str, &str) -> (StatusCode, Value) + Send + Sync + 'static,
) -> Arc<AtomicUsize> {
    let stub = Stub {
        execute: Arc::new(execute),
        poll: Arc::new(poll),
        address: Arc::default(),
        executions: Arc::default(),
    };
    let router = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/capabilities",
            get(|| async { Json(json!({"task_types": ["summarize"]})) }),
        )
        .route("/execute", post(stub_execute))
        .route("/tasks/{id}", get(stub_poll))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    *stub.address.lock().unwrap() = endpoint.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&endpoint, env.pay_to, &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    env.worker_id = body["id"].as_str().unwrap().to_owned();
    stub.executions
}

fn another_contract() -> String {
    format!("ctr_{}", ulid::Ulid::new())
}

fn valid_output() -> Value {
    json!({"type": "json", "content": {"summary": "someone else's work", "confidence": 0.99}})
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

/// The contract ended `failed` on a mismatch: the attempt's error names the field, nothing was
/// verified or settled, and no token moved.
async fn assert_failed_on_mismatch(
    env: &HireEnv,
    contract_id: &str,
    before: (alloy::primitives::U256, alloy::primitives::U256),
) {
    assert_eq!(env.state(contract_id).await, "failed");
    let view = view(env, contract_id).await;
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{view}");
    let error = &attempts[0]["error"];
    assert_eq!(error["code"], "contract_mismatch", "{view}");
    assert_eq!(error["kind"], "worker_contract_mismatch");
    assert_eq!(error["details"]["field"], "contract_id");
    assert_eq!(error["details"]["expected"], contract_id);
    let kinds = env.event_kinds(contract_id).await;
    assert!(
        !kinds
            .iter()
            .any(|k| k.starts_with("verification") || k.contains("settl") || k.contains("deliver")),
        "{kinds:?}"
    );
    assert!(view["verification"].is_null(), "{view}");
    assert_eq!(env.balances().await, before, "no token moved");
}

async fn mismatched_answer_fails_the_attempt(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let other = another_contract();
    let answered = other.clone();
    let executions = use_stub(
        &mut env,
        move |_, _| {
            (
                StatusCode::OK,
                json!({"status": "completed", "contract_id": answered, "output": valid_output()}),
            )
        },
        |_, _| (StatusCode::NOT_FOUND, json!({})),
    )
    .await;
    let contract_id = env
        .contract(
            HireEnv::input("bound"),
            json!({"retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let before = env.balances().await;

    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert_eq!(answer.code(), "worker_failed");
    let worker_error = &answer.body["error"]["details"]["worker_error"];
    assert_eq!(worker_error["code"], "contract_mismatch");
    assert_eq!(worker_error["details"]["answered"], other.as_str());
    assert!(
        answer.body.to_string().contains("contract_id"),
        "the message names the field: {}",
        answer.body
    );
    assert_eq!(executions.load(Ordering::SeqCst), 1);
    assert_failed_on_mismatch(&env, &contract_id, before).await;
}

/// Polls every 100–400 ms, job runner every 50 ms.
const FAST: &str = "[contracts]\npoll_interval_ms = 100\npoll_max_interval_ms = 400\n\
                    jobs_interval_ms = 50\njob_lease_ms = 5000\n";

async fn mismatched_poll_answer_fails_the_attempt(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, FAST).await;
    use_stub(
        &mut env,
        |contract_id, address| {
            (
                StatusCode::ACCEPTED,
                json!({"status": "pending", "contract_id": contract_id, "task_id": "t1",
                       "poll_url": format!("{address}/tasks/t1")}),
            )
        },
        |_, _| {
            (
                StatusCode::OK,
                json!({"status": "completed", "contract_id": another_contract(),
                       "output": valid_output()}),
            )
        },
    )
    .await;
    let contract_id = env
        .contract(
            HireEnv::input("bound"),
            json!({"retry_policy": {"max_attempts": 1}, "sla": {"max_latency_ms": 20000}}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let before = env.balances().await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    // The first poll ends it: a report of another contract is not retried by polling again.
    eventually(Duration::from_secs(10), "contract failed", || async {
        (env.state(&contract_id).await == "failed").then_some(())
    })
    .await;
    assert_failed_on_mismatch(&env, &contract_id, before).await;
}

async fn nul_in_input_and_failure_message_round_trips(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let message = "bad \u{0} byte \u{2028}\u{1F600}";
    use_stub(
        &mut env,
        move |contract_id, _| {
            (
                StatusCode::OK,
                json!({"status": "failed", "contract_id": contract_id,
                       "error": {"code": "E\u{0}", "message": message,
                                 "details": {"\u{0}": "\u{0}", "n": -0.0}}}),
            )
        },
        |_, _| (StatusCode::NOT_FOUND, json!({})),
    )
    .await;
    let input = json!({
        "text": "a\u{0}b",
        "\u{0}": ["\u{FFFF}", "\u{2029}", "\u{10FFFF}", -0.0, 1e16],
    });
    let response = env
        .propose(input.clone(), json!({"retry_policy": {"max_attempts": 1}}))
        .await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let created: Value = response.json().await.unwrap();
    let contract_id = created["contract_id"].as_str().unwrap().to_owned();
    let stored = view(&env, &contract_id).await;
    assert_eq!(
        serde_json::to_string(&stored["terms"]["task"]["input"]).unwrap(),
        serde_json::to_string(&input).unwrap(),
        "GET returns the input as proposed"
    );
    assert_eq!(stored["terms"], created["terms"]);

    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert_eq!(answer.code(), "worker_failed");
    assert_eq!(
        answer.body["error"]["details"]["worker_error"]["message"],
        message
    );
    let stored = view(&env, &contract_id).await;
    let error = &stored["attempts"][0]["error"];
    assert_eq!(error["message"], message, "{stored}");
    assert_eq!(error["code"], "E\u{0}");
    assert_eq!(
        serde_json::to_string(&error["details"]).unwrap(),
        r#"{"\u0000":"\u0000","n":-0.0}"#
    );
    assert_eq!(env.state(&contract_id).await, "failed");
}

/// Key labels and dispute reasons are text for people, kept in text columns that cannot hold
/// NUL on PostgreSQL: refused with the same 422 on both backends.
async fn nul_in_free_text_is_refused_alike(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let response = env
        .app
        .send_json(
            reqwest::Method::POST,
            "/v1/admin/keys",
            Some(crate::helpers::ADMIN_KEY),
            &json!({"role": "seeker", "label": "lap\u{0}top"}),
        )
        .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "validation_failed");
    assert_eq!(body["error"]["details"]["field"], "label");

    let contract_id = env.contract(HireEnv::input("dispute me"), json!({})).await;
    let response = env
        .app
        .send_json(
            reqwest::Method::POST,
            &format!("/v1/contracts/{contract_id}/disputes"),
            Some(&env.seeker_key),
            &json!({"reason": "wrong\u{0}", "claim": {"\u{0}": "the claim carries anything"}}),
        )
        .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "validation_failed");
    assert_eq!(body["error"]["details"]["field"], "reason");
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(crate::helpers::TestDatabase::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(database) = crate::helpers::TestDatabase::postgres().await else {
                        return;
                    };
                    super::$case(database).await;
                }
            )*
        }
    };
}

on_both_backends!(
    mismatched_answer_fails_the_attempt,
    mismatched_poll_answer_fails_the_attempt,
    nul_in_input_and_failure_message_round_trips,
    nul_in_free_text_is_refused_alike,
);
