//! WattSwarm Execute on the wire, from the document itself
//! (seeds/wattswarm-executor-contract.txt): a small axum executor serves the document's
//! `/health` and `/capabilities` bodies, checks that the gateway's `POST /execute` body is the
//! document's ExecuteRequest (its fields, their types, and its values wherever a hire keeps
//! them), and answers the document's ExecuteResponse. The JSON below is copied from the
//! document and changed only where a real run must differ:
//! - the ExecuteRequest's `task_contract` is the placeholder `{ "...full TaskContract..." }`,
//!   which is not JSON: it is read as an object (the gateway's own task contract is checked
//!   field by field);
//! - the ExecuteResponse's evidence ref points at this executor on 127.0.0.1 instead of
//!   `runtime.local` (same path), and its `digest` is the real `sha256:` of the bytes served
//!   there, which the gateway checks. Those bytes are exactly 1024 long, so the document's
//!   `size_bytes` stays true and unchanged.
//!
//! Real parts: anvil with the devnet token, the embedded facilitator, a real gateway, the
//! executor over TCP; money outcomes are read from the chain.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering},
};

use alloy::primitives::U256;
use axum::{
    Router,
    extract::State,
    http::header,
    response::IntoResponse,
    routing::{get, post},
};
use hiregate_contracts::canonical::Digest;
use hiregate_payments::encode_header;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env, hire_listing},
};

/// The document's `GET /health` body.
const SEED_HEALTH: &str = r#"{ "status": "ok" }"#;

/// The document's `GET /capabilities` body; `swarm`, which the tests hire, is already there.
const SEED_CAPABILITIES: &str = r#"{
  "task_types": ["swarm", "topic_interpretation"],
  "profiles": ["default", "careful"],
  "provider_family": "my-runtime",
  "model_id": "my-model-v1"
}"#;

/// The document's ExecuteRequest.
const SEED_EXECUTE_REQUEST: &str = r#"{
  "task_id": "task-demo-001",
  "execution_id": "exec-uuid-abc123",
  "task_type": "swarm",
  "inputs": {
    "prompt": "Summarize the key risks.",
    "agent_id": "analyst-a"
  },
  "profile": "default",
  "task_contract": { "...full TaskContract..." },
  "stage": "explore",
  "attempt_id": "attempt-1",
  "seed_bundle": null
}"#;

/// The document's ExecuteResponse.
const SEED_EXECUTE_RESPONSE: &str = r#"{
  "candidate_output": {
    "answer": "The three key risks are ...",
    "confidence": 0.92
  },
  "evidence_inline": [
    {
      "mime": "text/plain",
      "content": "trace:attempt-1"
    }
  ],
  "evidence_refs": [
    {
      "uri": "https://runtime.local/task-demo-001/exec-uuid-abc123",
      "digest": "sha256:abc123...",
      "size_bytes": 1024,
      "mime": "application/json",
      "created_at": 1710000000000,
      "producer": "my-runtime/my-model-v1"
    }
  ]
}"#;

/// The document's placeholder for the task contract, not JSON by itself.
const TASK_CONTRACT_PLACEHOLDER: &str = r#"{ "...full TaskContract..." }"#;
/// The document's evidence host; the executor serves the same path itself.
const SEED_EVIDENCE_HOST: &str = "https://runtime.local";
/// The path of the document's evidence ref.
const SEED_EVIDENCE_PATH: &str = "/task-demo-001/exec-uuid-abc123";
/// The document's placeholder digest.
const SEED_DIGEST: &str = "sha256:abc123...";
/// The document's declared evidence size, which the served bytes match.
const SEED_EVIDENCE_SIZE: usize = 1024;

const TASK_TYPE: &str = "swarm";

/// The document's ExecuteRequest as JSON (its task contract placeholder read as `{}`).
fn seed_execute_request() -> Value {
    serde_json::from_str(&SEED_EXECUTE_REQUEST.replace(TASK_CONTRACT_PLACEHOLDER, "{}"))
        .expect("the seed request parses once its placeholder is an object")
}

/// The evidence the executor serves: a JSON trace of exactly the document's `size_bytes`.
fn evidence_document() -> String {
    let head = r#"{"trace":"attempt-1","padding":""#;
    let tail = r#""}"#;
    let padding = ".".repeat(SEED_EVIDENCE_SIZE - head.len() - tail.len());
    let document = format!("{head}{padding}{tail}");
    assert_eq!(document.len(), SEED_EVIDENCE_SIZE);
    document
}

/// The document's ExecuteResponse, its evidence served by the executor at `base`.
fn seed_execute_response(base: &str) -> String {
    SEED_EXECUTE_RESPONSE
        .replace(SEED_EVIDENCE_HOST, base)
        .replace(
            SEED_DIGEST,
            &Digest::of_bytes(evidence_document().as_bytes()).to_string(),
        )
}

/// The listing's output schema: what the document's `candidate_output` satisfies.
fn answer_schema() -> Value {
    json!({
        "type": "object",
        "required": ["answer", "confidence"],
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}
        }
    })
}

/// A schema the document's answer fails: its confidence (0.92) is below the minimum.
fn demanding_schema() -> Value {
    json!({
        "type": "object",
        "required": ["answer", "confidence"],
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0.95}
        }
    })
}

struct SeedExecutorState {
    base: String,
    /// Every `POST /execute` body, as sent.
    requests: Mutex<Vec<String>>,
    evidence_fetches: AtomicUsize,
}

/// An executor answering the document's bodies verbatim.
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
    fn requests(&self) -> Vec<Value> {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|body| serde_json::from_str(body).expect("the gateway sent JSON"))
            .collect()
    }
}

fn json_body(body: String) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], body)
}

async fn seed_health() -> impl IntoResponse {
    json_body(SEED_HEALTH.to_owned())
}

async fn seed_capabilities() -> impl IntoResponse {
    json_body(SEED_CAPABILITIES.to_owned())
}

async fn seed_execute(
    State(state): State<Arc<SeedExecutorState>>,
    body: String,
) -> impl IntoResponse {
    state.requests.lock().unwrap().push(body);
    json_body(seed_execute_response(&state.base))
}

async fn seed_evidence(State(state): State<Arc<SeedExecutorState>>) -> impl IntoResponse {
    state.evidence_fetches.fetch_add(1, Ordering::SeqCst);
    json_body(evidence_document())
}

async fn start_seed_executor() -> SeedExecutor {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(SeedExecutorState {
        base: base.clone(),
        requests: Mutex::new(Vec::new()),
        evidence_fetches: AtomicUsize::new(0),
    });
    let router = Router::new()
        .route("/health", get(seed_health))
        .route("/capabilities", get(seed_capabilities))
        .route("/execute", post(seed_execute))
        .route(SEED_EVIDENCE_PATH, get(seed_evidence))
        .with_state(Arc::clone(&state));
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
    });
    SeedExecutor {
        endpoint: base,
        state,
        shutdown,
    }
}

/// List `executor` as a WattSwarm worker offering `swarm` with `schema`, paid to
/// `env.pay_to`; returns its id.
async fn list_seed_executor(env: &HireEnv, executor: &SeedExecutor, schema: Value) -> String {
    let mut listing = hire_listing(&executor.endpoint, env.pay_to, &env.devnet, 4);
    listing["protocol"] = json!("wattswarm");
    listing["tasks"] = json!({TASK_TYPE: {"price": PRICE.to_string(), "output_schema": schema}});
    let response = env.app.register_worker(&env.operator_key, &listing).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Propose `swarm` with the document's `inputs` as the hire's input.
async fn contract(env: &HireEnv, worker_id: &str) -> String {
    let body = json!({
        "worker_id": worker_id,
        "task_type": TASK_TYPE,
        "input": seed_execute_request()["inputs"].clone(),
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

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `sent` is the document's ExecuteRequest for `contract_id` with `schema`: the same fields
/// with the same types, the document's values wherever a hire keeps them, and a task contract
/// carrying the output schema and budget.
fn assert_seed_execute_request(sent: &Value, contract_id: &str, schema: &Value) {
    let seed = seed_execute_request();
    let fields = |value: &Value| {
        let mut fields: Vec<(String, &'static str)> = value
            .as_object()
            .unwrap()
            .iter()
            .map(|(key, value)| (key.clone(), json_type(value)))
            .collect();
        fields.sort();
        fields
    };
    assert_eq!(
        fields(sent),
        fields(&seed),
        "the seed's fields and types: {sent}"
    );

    // The task and execution are this contract's; everything else is the document's value.
    assert_eq!(sent["task_id"], contract_id);
    let execution_id = sent["execution_id"].as_str().unwrap();
    assert!(execution_id.contains(contract_id), "{execution_id}");
    let mut expected = seed;
    expected["task_id"] = json!(contract_id);
    expected["execution_id"] = json!(execution_id);
    expected["task_contract"] = sent["task_contract"].clone();
    assert_eq!(sent, &expected);

    // "Full TaskContract including output_schema and budget".
    let task_contract = &sent["task_contract"];
    assert_eq!(&task_contract["output_schema"], schema);
    assert_eq!(task_contract["task_id"], contract_id);
    assert_eq!(task_contract["task_type"], TASK_TYPE);
    assert_eq!(task_contract["inputs"], sent["inputs"]);
    assert_eq!(task_contract["budget"]["max_latency_ms"], 5000);
    assert_eq!(task_contract["budget"]["max_attempts"], 1);
    assert_eq!(
        task_contract["budget"]["price"]["amount"],
        PRICE.to_string()
    );
    assert_eq!(
        task_contract["policy"]["policy_id"], "vp.schema_only.v1",
        "{task_contract}"
    );
}

async fn seed_answer_settles(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let executor = start_seed_executor().await;
    let worker_id = list_seed_executor(&env, &executor, answer_schema()).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    assert_eq!(answer.body["state"], "settled");

    let requests = executor.requests();
    assert_eq!(requests.len(), 1, "one execution");
    assert_seed_execute_request(&requests[0], &contract_id, &answer_schema());
    assert_eq!(
        executor.state.evidence_fetches.load(Ordering::SeqCst),
        1,
        "the evidence ref was fetched (and its digest checked)"
    );

    // The deliverable is the document's answer with its evidence, inline and referenced.
    let seed_answer: Value =
        serde_json::from_str(&seed_execute_response(&executor.endpoint)).unwrap();
    let view = view(&env, &contract_id).await;
    assert_eq!(view["state"], "settled", "{view}");
    let content = &view["deliverable"]["content"];
    assert_eq!(
        content["output"],
        json!({"type": "json", "content": seed_answer["candidate_output"]}),
        "{view}"
    );
    assert_eq!(
        content["evidence_inline"],
        json!([{"mime": "text/plain", "content": "trace:attempt-1"}]),
        "{view}"
    );
    assert_eq!(content["evidence_refs"], seed_answer["evidence_refs"]);
    let evidence = view["deliverable"]["evidence"].as_array().unwrap();
    assert_eq!(evidence.len(), 1, "{view}");
    assert_eq!(
        evidence[0]["url"],
        format!("{}{SEED_EVIDENCE_PATH}", executor.endpoint)
    );
    assert_eq!(
        evidence[0]["digest"],
        seed_answer["evidence_refs"][0]["digest"]
    );
    assert_eq!(evidence[0]["size_bytes"], SEED_EVIDENCE_SIZE);
    // The runtime that answered, from the evidence `producer`.
    let runtime: Vec<Value> = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|event| event.kind.as_str() == "worker_runtime")
        .map(|event| event.details)
        .collect();
    assert_eq!(runtime.len(), 1, "{runtime:?}");
    assert_eq!(runtime[0]["provider_family"], "my-runtime");
    assert_eq!(runtime[0]["model_id"], "my-model-v1");

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
async fn the_seed_execute_response_is_verified_and_settled_on_chain() {
    seed_answer_settles(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_seed_execute_response_is_verified_and_settled_on_chain_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    seed_answer_settles(database).await;
}

#[tokio::test]
async fn a_seed_answer_violating_the_output_schema_is_rejected_and_nothing_settles() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let executor = start_seed_executor().await;
    let worker_id = list_seed_executor(&env, &executor, demanding_schema()).await;
    env.worker_id = worker_id.clone();
    let contract_id = contract(&env, &worker_id).await;
    let before = env.balances().await;

    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(answer.code(), "verification_failed", "{:?}", answer.body);
    assert_eq!(
        answer.body["error"]["details"]["verification"]["verification_status"],
        "failed"
    );
    assert!(answer.headers.get("payment-response").is_none());

    // The executor got the document's request and answered the document's response.
    let requests = executor.requests();
    assert_eq!(requests.len(), 1);
    assert_seed_execute_request(&requests[0], &contract_id, &demanding_schema());
    assert_eq!(env.state(&contract_id).await, "rejected");
    let view = view(&env, &contract_id).await;
    assert!(
        view["deliverable"]["content"].is_null(),
        "a rejected answer is not released: {view}"
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

// ---------------------------------------------------------------------------------------------
// Cross-check votes on the wire (seeds/wattswarm-verify-endpoint.txt)

/// The document's example VerifyRequest: the shape the gateway's must have.
const SEED_VERIFY_REQUEST: &str = r#"{
  "candidate": {
    "candidate_id": "cand-7a3f",
    "execution_id": "exec-4f2a9c",
    "output_ref": {
      "uri": "https://runtime.local/task-abc-001/exec-4f2a9c",
      "digest": "sha256:a3f1d8c2...",
      "size_bytes": 512,
      "mime": "application/json",
      "created_at": 1718000000000,
      "producer": "my-agent/gpt-4o"
    },
    "output": {
      "answer": "The proposal carries three material risks.",
      "confidence": 0.91
    },
    "evidence_inline": [
      { "mime": "text/plain", "content": "trace:attempt-001" }
    ],
    "evidence_refs": []
  },
  "output_schema": {
    "type": "object",
    "required": ["answer", "confidence"],
    "properties": {
      "answer":     { "type": "string" },
      "confidence": { "type": "number" }
    }
  },
  "policy": {
    "policy_id": "vp.schema_only.v1",
    "policy_version": "1",
    "policy_hash": "sha256:b9e2c1...",
    "policy_params": {}
  }
}"#;

/// The document's example VerifyResponse (its hash replaced by each verifier's own).
const SEED_VERIFY_RESPONSE: &str = r#"{
  "passed": true,
  "score": 1.0,
  "reason_codes": [],
  "verification_status": "passed",
  "verifier_result_hash": "sha256:d4e9f2a1...",
  "provider_family": "swarm-runtime",
  "model_id": "swarm-model-v1"
}"#;

/// How a [`SeedVerifier`] writes its vote's `verifier_result_hash`, and whose vote it is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum VoteHashing {
    /// The document's handler, transcribed: `sha256_hex(serde_json::to_vec(&json!({...})))`,
    /// bare lowercase hex, `score` 1.0 written `1.0`.
    SeedHandler,
    /// RFC 8785 with the `sha256:` prefix, as hiregate's own verifiers write it (`1`).
    Rfc8785,
    /// RFC 8785, but the vote names another `model_id` than `/capabilities` declare, and its
    /// hash binds the model it names (self-consistent, only the declaration gives it away).
    ImpersonatesAnotherModel,
}

struct SeedVerifierState {
    hashing: VoteHashing,
    /// Every `POST /verify` body, as sent.
    requests: Mutex<Vec<String>>,
}

/// A WattSwarm runtime answering `/verify` with the document's example vote.
struct SeedVerifier {
    endpoint: String,
    state: Arc<SeedVerifierState>,
    shutdown: CancellationToken,
}

impl Drop for SeedVerifier {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl SeedVerifier {
    fn requests(&self) -> Vec<Value> {
        self.state
            .requests
            .lock()
            .unwrap()
            .iter()
            .map(|body| serde_json::from_str(body).expect("the gateway sent JSON"))
            .collect()
    }
}

/// The verifier's `/capabilities`: the document's runtime names.
fn seed_verifier_capabilities() -> Value {
    let vote: Value = serde_json::from_str(SEED_VERIFY_RESPONSE).unwrap();
    json!({
        "task_types": [TASK_TYPE],
        "profiles": ["default"],
        "provider_family": vote["provider_family"],
        "model_id": vote["model_id"],
    })
}

async fn seed_verifier_capabilities_route() -> impl IntoResponse {
    json_body(seed_verifier_capabilities().to_string())
}

async fn seed_verify(
    State(state): State<Arc<SeedVerifierState>>,
    body: String,
) -> impl IntoResponse {
    use sha2::Digest as _;
    state.requests.lock().unwrap().push(body.clone());
    let req: Value = serde_json::from_str(&body).unwrap();
    let mut vote: Value = serde_json::from_str(SEED_VERIFY_RESPONSE).unwrap();
    if state.hashing == VoteHashing::ImpersonatesAnotherModel {
        vote["model_id"] = json!("swarm-model-v2");
    }
    let (passed, score) = (true, 1.0_f64);
    let reason_codes: Vec<u16> = Vec::new();
    let (provider_family, model_id) = (vote["provider_family"].clone(), vote["model_id"].clone());
    vote["verifier_result_hash"] = json!(match state.hashing {
        // The document's handler, as written there.
        VoteHashing::SeedHandler => hex::encode(sha2::Sha256::digest(
            serde_json::to_vec(&json!({
                "candidate_id":   req["candidate"]["candidate_id"],
                "execution_id":   req["candidate"]["execution_id"],
                "passed":         passed,
                "score":          score,
                "reason_codes":   reason_codes,
                "provider_family": provider_family,
                "model_id":       model_id,
                "policy_hash":    req["policy"]["policy_hash"],
            }))
            .unwrap()
            .as_slice(),
        )),
        VoteHashing::Rfc8785 | VoteHashing::ImpersonatesAnotherModel =>
            Digest::of_canonical(&json!({
                "candidate_id": req["candidate"]["candidate_id"],
                "execution_id": req["candidate"]["execution_id"],
                "passed": passed,
                "score": score,
                "reason_codes": reason_codes,
                "provider_family": provider_family,
                "model_id": model_id,
                "policy_hash": req["policy"]["policy_hash"],
            }),)
            .unwrap()
            .to_string(),
    });
    json_body(vote.to_string())
}

async fn start_seed_verifier(hashing: VoteHashing) -> SeedVerifier {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(SeedVerifierState {
        hashing,
        requests: Mutex::new(Vec::new()),
    });
    let router = Router::new()
        .route("/health", get(seed_health))
        .route("/capabilities", get(seed_verifier_capabilities_route))
        .route("/verify", post(seed_verify))
        .with_state(Arc::clone(&state));
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await;
    });
    SeedVerifier {
        endpoint,
        state,
        shutdown,
    }
}

/// Lists `verifier` as a WattSwarm worker of `operator_key` (not the hired worker's operator:
/// a vote must be independent); returns its id.
async fn list_seed_verifier(env: &HireEnv, operator_key: &str, verifier: &SeedVerifier) -> String {
    let mut listing = hire_listing(&verifier.endpoint, env.pay_to, &env.devnet, 4);
    listing["protocol"] = json!("wattswarm");
    listing["tasks"] =
        json!({TASK_TYPE: {"price": PRICE.to_string(), "output_schema": answer_schema()}});
    let response = env.app.register_worker(operator_key, &listing).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// Proposes `swarm` of `worker_id` under `vp.crosscheck.v1`, every one of `verifiers` needed.
async fn crosscheck_contract(env: &HireEnv, worker_id: &str, verifiers: &[&str]) -> String {
    let body = json!({
        "worker_id": worker_id,
        "task_type": TASK_TYPE,
        "input": seed_execute_request()["inputs"].clone(),
        "sla": {"max_latency_ms": 5000},
        "retry_policy": {"max_attempts": 1},
        "acceptance_window_s": 0,
        "verification": {"policy_id": "vp.crosscheck.v1", "policy_params": {"quorum": {
            "verifiers": verifiers,
            "min_verifiers": verifiers.len(),
            "min_pass_ratio": 1.0,
            "min_score": 0.5,
            "aggregation": "count",
        }}},
    });
    let response = env
        .app
        .send_json(Method::POST, "/v1/contracts", Some(&env.seeker_key), &body)
        .await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    body["contract_id"].as_str().unwrap().to_owned()
}

fn unix_ms_now() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap()
}

/// `sent` is the document's VerifyRequest for the candidate the executor proposed in `execute`
/// (the ExecuteRequest it got): the document's fields and types, the proposer's execution id,
/// and an `output_ref` naming the output's bytes, made between `from_ms` and `until_ms`.
fn assert_seed_verify_request(sent: &Value, execute: &Value, from_ms: u64, until_ms: u64) {
    let seed: Value = serde_json::from_str(SEED_VERIFY_REQUEST).unwrap();
    let fields = |value: &Value| {
        let mut fields: Vec<(String, &'static str)> = value
            .as_object()
            .unwrap()
            .iter()
            .map(|(key, value)| (key.clone(), json_type(value)))
            .collect();
        fields.sort();
        fields
    };
    for part in ["", "/candidate", "/candidate/output_ref", "/policy"] {
        assert_eq!(
            fields(sent.pointer(part).unwrap()),
            fields(seed.pointer(part).unwrap()),
            "the seed's fields and types at `{part}`: {sent}"
        );
    }
    let candidate = &sent["candidate"];
    // "The execution ID from the proposer's /execute call."
    assert_eq!(candidate["execution_id"], execute["execution_id"], "{sent}");
    // The proposer's answer, as it gave it.
    let answer: Value = serde_json::from_str(SEED_EXECUTE_RESPONSE).unwrap();
    assert_eq!(candidate["output"], answer["candidate_output"]);
    assert_eq!(candidate["evidence_inline"], answer["evidence_inline"]);
    assert_eq!(sent["output_schema"], answer_schema());
    assert_eq!(sent["policy"]["policy_id"], "vp.crosscheck.v1");
    // The stored output: digest and size of its serde_json bytes (what WattSwarm's kernel
    // checks an output_ref against), named inline by digest, made by the pinned runtime.
    let output_ref = &candidate["output_ref"];
    let bytes = serde_json::to_vec(&candidate["output"]).unwrap();
    let digest = Digest::of_bytes(&bytes).to_string();
    assert_eq!(output_ref["digest"], digest, "{output_ref}");
    assert_eq!(output_ref["size_bytes"], bytes.len(), "{output_ref}");
    assert_eq!(
        output_ref["uri"],
        format!("inline://candidate-output/{digest}"),
        "{output_ref}"
    );
    assert_eq!(output_ref["mime"], "application/json");
    assert_eq!(output_ref["producer"], "my-runtime/my-model-v1");
    let created_at = output_ref["created_at"]
        .as_u64()
        .expect("Unix milliseconds");
    assert!(
        (from_ms..=until_ms).contains(&created_at),
        "{created_at} not within the hire ({from_ms}..={until_ms})"
    );
}

/// A vote hashed exactly as the document's handler hashes it (serde_json, `1.0`, bare hex) and
/// one hashed with RFC 8785 (`1`, `sha256:`) both count, and the worker is paid; a vote whose
/// runtime is not the one its verifier declares in `/capabilities` does not, and nothing is
/// paid. Every verifier got the document's VerifyRequest naming the proposer's execution.
#[tokio::test]
async fn seed_hashed_and_rfc8785_votes_count_and_a_vote_by_an_undeclared_runtime_does_not() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let executor = start_seed_executor().await;
    let worker_id = list_seed_executor(&env, &executor, answer_schema()).await;
    env.worker_id = worker_id.clone();
    let (verifier_operator, _) = env.app.create_key("operator").await;
    let seed_hashing = start_seed_verifier(VoteHashing::SeedHandler).await;
    let rfc8785 = start_seed_verifier(VoteHashing::Rfc8785).await;
    let impostor = start_seed_verifier(VoteHashing::ImpersonatesAnotherModel).await;
    let seed_hashing_id = list_seed_verifier(&env, &verifier_operator, &seed_hashing).await;
    let rfc8785_id = list_seed_verifier(&env, &verifier_operator, &rfc8785).await;
    let impostor_id = list_seed_verifier(&env, &verifier_operator, &impostor).await;
    let before = env.balances().await;

    // Both ways of hashing count: the quorum of two is met and the worker is paid.
    let contract_id = crosscheck_contract(&env, &worker_id, &[&seed_hashing_id, &rfc8785_id]).await;
    let from_ms = unix_ms_now();
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    let until_ms = unix_ms_now();
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    let record = view(&env, &contract_id).await;
    assert_eq!(record["state"], "settled", "{record}");
    let quorum = &record["verification"]["details"]["quorum"];
    assert_eq!(quorum["hash_verified"], 2, "{record}");
    assert_eq!(quorum["passing"], 2, "{record}");
    assert_eq!(quorum["identity_mismatch"], 0, "{record}");
    let execute = executor
        .requests()
        .into_iter()
        .find(|request| request["task_id"] == contract_id)
        .expect("the proposer's ExecuteRequest");
    for verifier in [&seed_hashing, &rfc8785] {
        let requests = verifier.requests();
        assert_eq!(requests.len(), 1, "each verifier is asked once");
        assert_seed_verify_request(&requests[0], &execute, from_ms, until_ms);
        // The gateway's own verdict binds the same execution.
        assert_eq!(
            record["verification"]["execution_id"],
            requests[0]["candidate"]["execution_id"]
        );
    }
    assert_eq!(
        env.balances().await.1,
        before.1 + U256::from(PRICE),
        "the worker got the price"
    );

    // A vote by another model than its verifier declares does not count, though its hash
    // binds what it names: one decisive vote of two, nothing paid.
    let contract_id = crosscheck_contract(&env, &worker_id, &[&rfc8785_id, &impostor_id]).await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(answer.code(), "verification_failed", "{:?}", answer.body);
    assert!(answer.headers.get("payment-response").is_none());
    let record = view(&env, &contract_id).await;
    assert_eq!(record["state"], "rejected", "{record}");
    let quorum = &record["verification"]["details"]["quorum"];
    assert_eq!(quorum["identity_mismatch"], 1, "{record}");
    assert_eq!(quorum["decisive"], 1, "{record}");
    assert_eq!(impostor.requests().len(), 1, "the impostor was asked");
    assert_eq!(
        env.balances().await.1,
        before.1 + U256::from(PRICE),
        "nothing more paid"
    );
}
