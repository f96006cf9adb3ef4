//! The reference WattSwarm and Superwire servers, exercised over real HTTP with plain JSON
//! written from the seeds (not the reference servers' own structs), so these tests pin the
//! wire shapes the gateway adapters will be tested against.

use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use hiregate_integration_tests::reference::superwire::{self, RunOutcome, RunStatus, StreamCut};
use hiregate_integration_tests::reference::wattswarm::{
    self, ExecutorBehaviour, TransportFault, VerifierBehaviour, VerifierConfig,
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use url::Url;

fn client() -> Client {
    // No pooled connections: servers in these tests go down and come back, and a stale pooled
    // connection would turn "refused" into a confusing reset.
    Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("reqwest client")
}

fn join(base: &Url, path: &str) -> Url {
    base.join(path).expect("joinable path")
}

fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

// ---------------------------------------------------------------------------------------------
// WattSwarm executor
// ---------------------------------------------------------------------------------------------

fn output_schema() -> Value {
    json!({
        "type": "object",
        "required": ["answer", "confidence"],
        "properties": {
            "answer": { "type": "string" },
            "confidence": { "type": "number" }
        }
    })
}

/// An ExecuteRequest exactly as the executor-contract seed's example, with `execution_id`.
fn execute_request(execution_id: &str) -> Value {
    json!({
        "task_id": "task-demo-001",
        "execution_id": execution_id,
        "task_type": "swarm",
        "inputs": { "prompt": "Summarize the key risks.", "agent_id": "analyst-a" },
        "profile": "default",
        "task_contract": { "output_schema": output_schema(), "budget": { "max_usd": 1 } },
        "stage": "explore",
        "attempt_id": "attempt-1",
        "seed_bundle": null
    })
}

async fn post_execute(executor: &wattswarm::Executor, body: &Value) -> reqwest::Response {
    client()
        .post(join(executor.base_url(), "execute"))
        .json(body)
        .send()
        .await
        .expect("executor reachable")
}

fn is_schema_valid(schema: &Value, instance: &Value) -> bool {
    jsonschema::validator_for(schema)
        .expect("test schema compiles")
        .is_valid(instance)
}

#[tokio::test]
async fn wattswarm_health_and_capabilities_have_the_seed_shapes() {
    let executor = wattswarm::Executor::spawn(wattswarm::ExecutorConfig::default())
        .await
        .expect("spawn");
    let http = client();

    let health: Value = http
        .get(join(executor.base_url(), "health"))
        .send()
        .await
        .expect("health")
        .json()
        .await
        .expect("health json");
    assert_eq!(health, json!({ "status": "ok" }));

    let capabilities: Value = http
        .get(join(executor.base_url(), "capabilities"))
        .send()
        .await
        .expect("capabilities")
        .json()
        .await
        .expect("capabilities json");
    assert_eq!(
        capabilities,
        json!({
            "task_types": ["swarm", "topic_interpretation"],
            "profiles": ["default", "careful"],
            "provider_family": "reference-wattswarm",
            "model_id": "reference-model-v1"
        })
    );

    let counters = executor.counters();
    assert_eq!((counters.health_checks, counters.capability_checks), (1, 1));
}

#[tokio::test]
async fn wattswarm_execute_answers_the_seed_shape_with_evidence_matching_its_digest() {
    let executor = wattswarm::Executor::spawn(wattswarm::ExecutorConfig::default())
        .await
        .expect("spawn");
    let response = post_execute(&executor, &execute_request("exec-uuid-abc123")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("json body");

    let object = body.as_object().expect("response is an object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["candidate_output", "evidence_inline", "evidence_refs"]
    );
    assert_eq!(
        body["candidate_output"],
        json!({ "answer": "default::Summarize the key risks.", "confidence": 0.92 })
    );
    assert!(is_schema_valid(&output_schema(), &body["candidate_output"]));
    assert_eq!(
        body["evidence_inline"],
        json!([{ "mime": "text/plain", "content": "trace:attempt-1" }])
    );

    let evidence_ref = &body["evidence_refs"][0];
    let mut ref_keys: Vec<&str> = evidence_ref
        .as_object()
        .expect("ArtifactRef object")
        .keys()
        .map(String::as_str)
        .collect();
    ref_keys.sort_unstable();
    assert_eq!(
        ref_keys,
        [
            "created_at",
            "digest",
            "mime",
            "producer",
            "size_bytes",
            "uri"
        ]
    );
    assert_eq!(
        evidence_ref["producer"],
        "reference-wattswarm/reference-model-v1"
    );
    assert!(evidence_ref["created_at"].as_u64().expect("ms timestamp") > 1_700_000_000_000);

    let uri = evidence_ref["uri"].as_str().expect("uri string");
    let served = client()
        .get(uri)
        .send()
        .await
        .expect("evidence reachable")
        .bytes()
        .await
        .expect("evidence bytes");
    assert_eq!(evidence_ref["digest"], sha256_tagged(&served));
    assert_eq!(evidence_ref["size_bytes"], served.len());
    let document: Value = serde_json::from_slice(&served).expect("evidence is JSON");
    assert_eq!(document["execution_id"], "exec-uuid-abc123");

    let counters = executor.counters();
    assert_eq!((counters.executions, counters.evidence_fetches), (1, 1));
    let received = executor.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].task_id, "task-demo-001");
    assert_eq!(received[0].stage, wattswarm::wire::Stage::Explore);
}

#[tokio::test]
async fn wattswarm_repeated_execution_id_replays_the_stored_response_without_executing() {
    let executor = wattswarm::Executor::spawn(wattswarm::ExecutorConfig::default())
        .await
        .expect("spawn");
    let first: Value = post_execute(&executor, &execute_request("exec-1"))
        .await
        .json()
        .await
        .expect("json");
    let again: Value = post_execute(&executor, &execute_request("exec-1"))
        .await
        .json()
        .await
        .expect("json");
    // created_at is taken at execution time, so equality proves the stored response came back.
    assert_eq!(first, again);
    let counters = executor.counters();
    assert_eq!(
        (
            counters.execute_requests,
            counters.executions,
            counters.replays
        ),
        (2, 1, 1)
    );

    let other: Value = post_execute(&executor, &execute_request("exec-2"))
        .await
        .json()
        .await
        .expect("json");
    assert_ne!(
        first["evidence_refs"][0]["uri"],
        other["evidence_refs"][0]["uri"]
    );
    assert_eq!(executor.counters().executions, 2);
}

#[tokio::test]
async fn wattswarm_concurrent_duplicates_of_a_slow_execution_run_it_once() {
    let config = wattswarm::ExecutorConfig {
        behaviour: ExecutorBehaviour::Slow(Duration::from_millis(300)),
        ..wattswarm::ExecutorConfig::default()
    };
    let executor = wattswarm::Executor::spawn(config).await.expect("spawn");
    let request = execute_request("exec-slow");
    let (a, b) = tokio::join!(
        post_execute(&executor, &request),
        post_execute(&executor, &request)
    );
    let a: Value = a.json().await.expect("json");
    let b: Value = b.json().await.expect("json");
    assert_eq!(a, b);
    assert_eq!(executor.counters().executions, 1);
}

#[tokio::test]
async fn wattswarm_a_caller_timing_out_does_not_make_its_retry_execute_again() {
    let config = wattswarm::ExecutorConfig {
        behaviour: ExecutorBehaviour::Slow(Duration::from_millis(600)),
        ..wattswarm::ExecutorConfig::default()
    };
    let executor = wattswarm::Executor::spawn(config).await.expect("spawn");
    let request = execute_request("exec-timeout");
    let timed_out = client()
        .post(join(executor.base_url(), "execute"))
        .json(&request)
        .timeout(Duration::from_millis(100))
        .send()
        .await
        .expect_err("caller gives up first");
    assert!(timed_out.is_timeout());

    let retried = post_execute(&executor, &request).await;
    assert_eq!(retried.status(), StatusCode::OK);
    let counters = executor.counters();
    assert_eq!((counters.executions, counters.replays), (1, 1));
}

#[tokio::test]
async fn wattswarm_transport_fault_after_executing_then_retry_gets_the_stored_response() {
    for fault in [
        TransportFault::ServiceUnavailable,
        TransportFault::DropMidResponse,
    ] {
        let config = wattswarm::ExecutorConfig {
            behaviour: ExecutorBehaviour::FaultOnce(fault),
            ..wattswarm::ExecutorConfig::default()
        };
        let executor = wattswarm::Executor::spawn(config).await.expect("spawn");
        let request = execute_request("exec-fault");

        let faulted = post_execute(&executor, &request).await;
        match fault {
            TransportFault::ServiceUnavailable => {
                assert_eq!(faulted.status(), StatusCode::SERVICE_UNAVAILABLE);
            }
            TransportFault::DropMidResponse => {
                assert_eq!(faulted.status(), StatusCode::OK);
                let broken = faulted.json::<Value>().await;
                assert!(broken.is_err(), "{fault:?}: body must break off");
            }
        }
        assert_eq!(
            executor.counters().executions,
            1,
            "{fault:?}: ran before the fault"
        );

        let retried = post_execute(&executor, &request).await;
        assert_eq!(retried.status(), StatusCode::OK, "{fault:?}");
        let body: Value = retried.json().await.expect("json");
        let stored = executor.stored_response("exec-fault").expect("stored");
        assert_eq!(body, serde_json::to_value(stored).expect("to json"));
        let counters = executor.counters();
        assert_eq!(
            (
                counters.executions,
                counters.replays,
                counters.faults_injected
            ),
            (1, 1, 1),
            "{fault:?}"
        );
    }
}

#[tokio::test]
async fn wattswarm_schema_invalid_behaviour_breaks_the_contract_schema() {
    let config = wattswarm::ExecutorConfig {
        behaviour: ExecutorBehaviour::SchemaInvalid,
        ..wattswarm::ExecutorConfig::default()
    };
    let executor = wattswarm::Executor::spawn(config).await.expect("spawn");
    let body: Value = post_execute(&executor, &execute_request("exec-bad"))
        .await
        .json()
        .await
        .expect("json");
    assert!(!is_schema_valid(
        &output_schema(),
        &body["candidate_output"]
    ));

    // Against a schema `{}` would satisfy, the other invalid candidate is picked.
    let lenient_schema = json!({
        "type": "object",
        "properties": { "answer": { "type": "string" } }
    });
    let mut request = execute_request("exec-bad-2");
    request["task_contract"]["output_schema"] = lenient_schema.clone();
    let body: Value = post_execute(&executor, &request)
        .await
        .json()
        .await
        .expect("json");
    assert!(!is_schema_valid(&lenient_schema, &body["candidate_output"]));
}

#[tokio::test]
async fn wattswarm_evidence_digest_mismatch_and_unreachable_evidence() {
    let executor = wattswarm::Executor::spawn(wattswarm::ExecutorConfig {
        behaviour: ExecutorBehaviour::EvidenceDigestMismatch,
        ..wattswarm::ExecutorConfig::default()
    })
    .await
    .expect("spawn");
    let body: Value = post_execute(&executor, &execute_request("exec-mismatch"))
        .await
        .json()
        .await
        .expect("json");
    let evidence_ref = &body["evidence_refs"][0];
    let served = client()
        .get(evidence_ref["uri"].as_str().expect("uri"))
        .send()
        .await
        .expect("evidence served")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(evidence_ref["size_bytes"], served.len());
    assert_ne!(evidence_ref["digest"], sha256_tagged(&served));
    assert!(is_schema_valid(&output_schema(), &body["candidate_output"]));

    executor.set_behaviour(ExecutorBehaviour::EvidenceUnreachable);
    let body: Value = post_execute(&executor, &execute_request("exec-unreachable"))
        .await
        .json()
        .await
        .expect("json");
    let evidence_ref = &body["evidence_refs"][0];
    let fetch = client()
        .get(evidence_ref["uri"].as_str().expect("uri"))
        .send()
        .await
        .expect_err("nobody listens there");
    assert!(fetch.is_connect(), "{fetch}");
    // The digest is still that of the real artifact: only its location is unreachable.
    let real = executor.evidence_bytes("exec-unreachable").expect("stored");
    assert_eq!(evidence_ref["digest"], sha256_tagged(&real));
}

#[tokio::test]
async fn wattswarm_requests_off_the_seed_are_refused_without_executing() {
    let executor = wattswarm::Executor::spawn(wattswarm::ExecutorConfig::default())
        .await
        .expect("spawn");
    let mut no_schema = execute_request("exec-x");
    no_schema["task_contract"] = json!({ "budget": {} });
    let mut bad_stage = execute_request("exec-y");
    bad_stage["stage"] = json!("deliver");
    let mut unknown_type = execute_request("exec-z");
    unknown_type["task_type"] = json!("translation");
    let mut unknown_profile = execute_request("exec-w");
    unknown_profile["profile"] = json!("reckless");
    let mut no_attempt = execute_request("exec-v");
    no_attempt
        .as_object_mut()
        .expect("object")
        .remove("attempt_id");

    for body in [
        no_schema,
        bad_stage,
        unknown_type,
        unknown_profile,
        no_attempt,
    ] {
        let response = post_execute(&executor, &body).await;
        assert!(
            response.status().is_client_error(),
            "{body}: {}",
            response.status()
        );
    }
    let counters = executor.counters();
    assert_eq!((counters.execute_requests, counters.executions), (5, 0));
}

// ---------------------------------------------------------------------------------------------
// WattSwarm verifier
// ---------------------------------------------------------------------------------------------

/// `sha256(policy_id ‖ JCS(policy_params))`, computed here independently of the server.
fn policy_hash(policy_id: &str, params: &Value) -> String {
    let mut preimage = policy_id.as_bytes().to_vec();
    preimage.extend(serde_jcs::to_vec(params).expect("canonical params"));
    sha256_tagged(&preimage)
}

fn verify_request(output: &Value) -> Value {
    let params = json!({ "quorum": { "min_verifiers": 3, "min_pass_ratio": 0.66 } });
    json!({
        "candidate": {
            "candidate_id": "cand-7a3f",
            "execution_id": "exec-4f2a9c",
            "output_ref": {
                "uri": "https://runtime.local/task-abc-001/exec-4f2a9c",
                "digest": "sha256:a3f1d8c2",
                "size_bytes": 512,
                "mime": "application/json",
                "created_at": 1_718_000_000_000_u64,
                "producer": "my-agent/gpt-4o"
            },
            "output": output,
            "evidence_inline": [{ "mime": "text/plain", "content": "trace:attempt-001" }],
            "evidence_refs": []
        },
        "output_schema": output_schema(),
        "policy": {
            "policy_id": "vp.crosscheck.v1",
            "policy_version": "1",
            "policy_hash": policy_hash("vp.crosscheck.v1", &params),
            "policy_params": params
        }
    })
}

fn good_output() -> Value {
    json!({ "answer": "The proposal carries three material risks.", "confidence": 0.91 })
}

/// The verifier_result_hash a gateway expects for `response` to `request`.
fn expected_result_hash(request: &Value, response: &Value) -> String {
    let preimage = json!({
        "candidate_id": request["candidate"]["candidate_id"],
        "execution_id": request["candidate"]["execution_id"],
        "passed": response["passed"],
        "score": response["score"],
        "reason_codes": response["reason_codes"],
        "provider_family": response["provider_family"],
        "model_id": response["model_id"],
        "policy_hash": request["policy"]["policy_hash"],
    });
    sha256_tagged(&serde_jcs::to_vec(&preimage).expect("canonical"))
}

async fn post_verify(verifier: &wattswarm::Verifier, body: &Value) -> reqwest::Response {
    client()
        .post(join(verifier.base_url(), "verify"))
        .json(body)
        .send()
        .await
        .expect("verifier reachable")
}

#[tokio::test]
async fn wattswarm_verifier_votes_per_behaviour_bound_to_the_requested_policy() {
    struct Case {
        behaviour: VerifierBehaviour,
        output: Value,
        passed: bool,
        score: f64,
        reason_codes: Vec<u16>,
        status: &'static str,
    }
    let schema_breaking = json!({ "answer": 7 });
    let cases = [
        Case {
            behaviour: VerifierBehaviour::Honest,
            output: good_output(),
            passed: true,
            score: 1.0,
            reason_codes: vec![],
            status: "passed",
        },
        Case {
            behaviour: VerifierBehaviour::Honest,
            output: schema_breaking,
            passed: false,
            score: 1.0,
            reason_codes: vec![wattswarm::SCHEMA_INVALID_REASON],
            status: "failed",
        },
        Case {
            behaviour: VerifierBehaviour::VotePass,
            output: good_output(),
            passed: true,
            score: 1.0,
            reason_codes: vec![],
            status: "passed",
        },
        Case {
            behaviour: VerifierBehaviour::VoteFail,
            output: good_output(),
            passed: false,
            score: 1.0,
            reason_codes: vec![wattswarm::SCRIPTED_DISSENT_REASON],
            status: "failed",
        },
        Case {
            behaviour: VerifierBehaviour::LowScore(0.3),
            output: good_output(),
            passed: true,
            score: 0.3,
            reason_codes: vec![],
            status: "passed",
        },
        Case {
            behaviour: VerifierBehaviour::Inconclusive,
            output: good_output(),
            passed: false,
            score: 0.0,
            reason_codes: vec![wattswarm::EVIDENCE_UNREACHABLE_REASON],
            status: "inconclusive",
        },
    ];
    for (index, case) in cases.into_iter().enumerate() {
        let model_id = format!("verifier-{index}");
        let verifier = wattswarm::Verifier::spawn(VerifierConfig::named(&model_id, case.behaviour))
            .await
            .expect("spawn");
        let request = verify_request(&case.output);
        let response = post_verify(&verifier, &request).await;
        assert_eq!(response.status(), StatusCode::OK, "{:?}", case.behaviour);
        let vote: Value = response.json().await.expect("json");
        let mut keys: Vec<&str> = vote
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "model_id",
                "passed",
                "provider_family",
                "reason_codes",
                "score",
                "verification_status",
                "verifier_result_hash"
            ]
        );
        assert_eq!(vote["passed"], case.passed, "{:?}", case.behaviour);
        assert_eq!(
            vote["score"].as_f64(),
            Some(case.score),
            "{:?}",
            case.behaviour
        );
        assert_eq!(vote["reason_codes"], json!(case.reason_codes));
        assert_eq!(vote["verification_status"], case.status);
        assert_eq!(vote["provider_family"], "reference-verifier");
        assert_eq!(vote["model_id"], model_id.as_str());
        assert_eq!(
            vote["verifier_result_hash"],
            expected_result_hash(&request, &vote),
            "{:?}",
            case.behaviour
        );
        assert_eq!(verifier.counters().verify_calls, 1);
        assert_eq!(verifier.requests().len(), 1);
    }
}

#[tokio::test]
async fn wattswarm_verifier_with_wrong_policy_hash_is_caught_by_recomputing_the_result_hash() {
    let verifier = wattswarm::Verifier::spawn(VerifierConfig::named(
        "liar",
        VerifierBehaviour::WrongPolicyHash,
    ))
    .await
    .expect("spawn");
    let request = verify_request(&good_output());
    let vote: Value = post_verify(&verifier, &request)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(vote["passed"], true);
    assert_ne!(
        vote["verifier_result_hash"],
        expected_result_hash(&request, &vote)
    );
    // It binds a real, other policy: the default policy's hash.
    let mut other = request.clone();
    other["policy"]["policy_hash"] = json!(policy_hash("vp.schema_only.v1", &json!({})));
    assert_eq!(
        vote["verifier_result_hash"],
        expected_result_hash(&other, &vote)
    );
}

#[tokio::test]
async fn wattswarm_verifier_refuses_a_binding_whose_hash_does_not_match_its_params() {
    let verifier =
        wattswarm::Verifier::spawn(VerifierConfig::named("strict", VerifierBehaviour::VotePass))
            .await
            .expect("spawn");
    let mut request = verify_request(&good_output());
    request["policy"]["policy_params"] = json!({ "quorum": { "min_verifiers": 1 } });
    let response = post_verify(&verifier, &request).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        response
            .text()
            .await
            .expect("text")
            .contains("policy binding invalid")
    );
    let counters = verifier.counters();
    assert_eq!((counters.verify_calls, counters.votes_answered), (1, 0));
}

#[tokio::test]
async fn wattswarm_verifier_hashes_as_the_seed_handler_and_needs_the_output_ref() {
    let verifier = wattswarm::Verifier::spawn(
        VerifierConfig::named("seed-like", VerifierBehaviour::VotePass)
            .hashing(wattswarm::ResultHashing::SeedRuntime),
    )
    .await
    .expect("spawn");
    let request = verify_request(&good_output());
    let vote: Value = post_verify(&verifier, &request)
        .await
        .json()
        .await
        .expect("json");
    // The seed handler's preimage: serde_json, keys sorted, the score written `1.0`; bare hex.
    let preimage = format!(
        r#"{{"candidate_id":"cand-7a3f","execution_id":"exec-4f2a9c","model_id":"seed-like","passed":true,"policy_hash":"{}","provider_family":"reference-verifier","reason_codes":[],"score":1.0}}"#,
        request["policy"]["policy_hash"].as_str().unwrap()
    );
    assert_eq!(
        vote["verifier_result_hash"],
        hex::encode(Sha256::digest(preimage.as_bytes()))
    );
    assert_ne!(
        vote["verifier_result_hash"],
        expected_result_hash(&request, &vote)
    );

    // The reference runtime's Candidate requires its output_ref.
    let mut without = request.clone();
    without["candidate"]
        .as_object_mut()
        .unwrap()
        .remove("output_ref");
    let response = post_verify(&verifier, &without).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(verifier.counters().votes_answered, 1);
}

#[tokio::test]
async fn wattswarm_verifier_down_refuses_connections_and_can_come_back() {
    let verifier =
        wattswarm::Verifier::spawn(VerifierConfig::named("flaky", VerifierBehaviour::Down))
            .await
            .expect("spawn");
    let request = verify_request(&good_output());
    let refused = client()
        .post(join(verifier.base_url(), "verify"))
        .json(&request)
        .send()
        .await
        .expect_err("down");
    assert!(refused.is_connect(), "{refused}");

    verifier
        .set_behaviour(VerifierBehaviour::VotePass)
        .await
        .expect("back up");
    assert_eq!(
        post_verify(&verifier, &request).await.status(),
        StatusCode::OK
    );

    verifier
        .set_behaviour(VerifierBehaviour::Down)
        .await
        .expect("down again");
    let refused = client()
        .get(join(verifier.base_url(), "health"))
        .send()
        .await
        .expect_err("down again");
    assert!(refused.is_connect(), "{refused}");
    assert_eq!(verifier.counters().verify_calls, 1);
}

#[tokio::test]
async fn wattswarm_late_verifier_outlasts_a_caller_timeout() {
    let verifier = wattswarm::Verifier::spawn(VerifierConfig::named(
        "sleepy",
        VerifierBehaviour::Late(Duration::from_millis(800)),
    ))
    .await
    .expect("spawn");
    let late = client()
        .post(join(verifier.base_url(), "verify"))
        .json(&verify_request(&good_output()))
        .timeout(Duration::from_millis(150))
        .send()
        .await
        .expect_err("too late");
    assert!(late.is_timeout(), "{late}");
    let counters = verifier.counters();
    assert_eq!((counters.verify_calls, counters.votes_answered), (1, 0));
}

// ---------------------------------------------------------------------------------------------
// Superwire executor
// ---------------------------------------------------------------------------------------------

const WORKFLOW_SOURCE: &str = "workflow welcome {\n  input { message: string }\n  secrets { api_key: string }\n  agent reply { instruction: \"Reply to ${input.message}\" }\n  output { result: agent.reply }\n}\n";

fn workflow_base64() -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(WORKFLOW_SOURCE)
}

fn superwire_request() -> Value {
    json!({
        "input": { "message": "Write a short welcome message." },
        "secrets": { "api_key": "sk-test-secret-value" },
        "options": { "cache_key": "tenant-1:conversation-42" },
        "workflow_source_base64": workflow_base64()
    })
}

#[derive(Debug, Clone, PartialEq)]
struct SseEvent {
    id: u64,
    event: String,
    data: Value,
}

/// How a stream ended.
#[derive(Debug, PartialEq, Eq)]
enum StreamEnd {
    /// The body finished normally.
    Finished,
    /// The connection broke mid-body.
    Broken,
}

/// Reads SSE events; `stop_after` stops reading (and drops the connection) after that many.
async fn read_events(
    response: reqwest::Response,
    stop_after: Option<usize>,
) -> (Vec<SseEvent>, StreamEnd) {
    let mut stream = response.bytes_stream().eventsource();
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => {
                events.push(SseEvent {
                    id: event.id.parse().expect("numeric event id"),
                    event: event.event,
                    data: serde_json::from_str(&event.data).expect("JSON data"),
                });
                if stop_after == Some(events.len()) {
                    return (events, StreamEnd::Finished);
                }
            }
            Err(_) => return (events, StreamEnd::Broken),
        }
    }
    (events, StreamEnd::Finished)
}

async fn post_stream(executor: &superwire::Executor, body: &Value) -> reqwest::Response {
    client()
        .post(join(executor.base_url(), "execute"))
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .expect("executor reachable")
}

async fn resume_stream(
    executor: &superwire::Executor,
    run_id: &str,
    last_event_id: Option<u64>,
) -> reqwest::Response {
    let mut request = client().get(join(
        executor.base_url(),
        &format!("execute/{run_id}/events"),
    ));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    request.send().await.expect("executor reachable")
}

fn run_id_of(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-superwire-run-id")
        .expect("run id header")
        .to_str()
        .expect("ascii run id")
        .to_owned()
}

fn names(events: &[SseEvent]) -> Vec<&str> {
    events.iter().map(|event| event.event.as_str()).collect()
}

#[tokio::test]
async fn superwire_json_execute_returns_the_output_block_and_records_what_it_received() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        required_secrets: vec!["api_key".to_owned()],
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("spawn");
    let response = client()
        .post(join(executor.base_url(), "execute"))
        .json(&superwire_request())
        .send()
        .await
        .expect("reachable");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("x-superwire-run-id").is_none());
    let body: Value = response.json().await.expect("json");
    assert_eq!(
        body,
        json!({ "result": { "message": "reply to: Write a short welcome message." } })
    );

    let runs = executor.runs();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(run.status, RunStatus::Completed);
    assert!(!run.streamed);
    assert_eq!(run.workflow_source, WORKFLOW_SOURCE);
    assert_eq!(
        run.options.cache_key.as_deref(),
        Some("tenant-1:conversation-42")
    );
    assert_eq!(run.input["message"], "Write a short welcome message.");
    // The secret reached the executor…
    assert_eq!(run.secrets.expose()["api_key"], "sk-test-secret-value");
    // …and its Debug (what would end up in a log line) does not show it.
    let debugged = format!("{run:?}");
    assert!(debugged.contains("api_key"));
    assert!(!debugged.contains("sk-test-secret-value"), "{debugged}");
}

#[tokio::test]
async fn superwire_missing_secret_or_bad_source_is_a_structured_validation_error() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        required_secrets: vec!["api_key".to_owned()],
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("spawn");

    let mut no_secret = superwire_request();
    no_secret.as_object_mut().expect("object").remove("secrets");
    let response = client()
        .post(join(executor.base_url(), "execute"))
        .json(&no_secret)
        .send()
        .await
        .expect("reachable");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["kind"], "validation_error");
    assert_eq!(error["error"]["issues"][0]["path"], "secrets.api_key");

    let mut bad_source = superwire_request();
    bad_source["workflow_source_base64"] = json!("%%% not base64 %%%");
    let error: Value = client()
        .post(join(executor.base_url(), "execute"))
        .json(&bad_source)
        .send()
        .await
        .expect("reachable")
        .json()
        .await
        .expect("json");
    assert_eq!(
        error["error"]["issues"][0]["path"],
        "workflow_source_base64"
    );

    // A wrong type inside `secrets` is refused without echoing the value back.
    let mut wrong_type = superwire_request();
    wrong_type["secrets"] = json!("sk-test-secret-value");
    let text = client()
        .post(join(executor.base_url(), "execute"))
        .json(&wrong_type)
        .send()
        .await
        .expect("reachable")
        .text()
        .await
        .expect("text");
    assert!(text.contains("validation_error"), "{text}");
    assert!(!text.contains("sk-test-secret-value"), "{text}");

    let counters = executor.counters();
    assert_eq!((counters.execute_requests, counters.runs), (3, 0));
}

#[tokio::test]
async fn superwire_stream_carries_the_seed_events_with_increasing_ids() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("spawn");
    let response = post_stream(&executor, &superwire_request()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/event-stream")
    );
    let run_id = run_id_of(&response);
    let (events, end) = read_events(response, None).await;
    assert_eq!(end, StreamEnd::Finished);
    assert_eq!(
        names(&events),
        [
            "workflow_started",
            "workflow_planned",
            "agent_started",
            "agent_completed",
            "agent_started",
            "agent_completed",
            "workflow_completed"
        ]
    );
    let ids: Vec<u64> = events.iter().map(|event| event.id).collect();
    assert_eq!(ids, (1..=7).collect::<Vec<u64>>());
    assert_eq!(events[0].data, json!({}));
    assert_eq!(
        events[6].data,
        json!({ "output": { "result": { "message": "reply to: Write a short welcome message." } } })
    );

    let recorded = executor.events(&run_id).expect("known run");
    assert_eq!(recorded.len(), events.len());
    let counters = executor.counters();
    assert_eq!((counters.runs, counters.streamed_runs), (1, 1));
}

#[tokio::test]
async fn superwire_cut_stream_resumes_after_last_event_id_with_no_gap_and_no_duplicate() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        agents: vec!["plan".to_owned(), "draft".to_owned(), "reply".to_owned()],
        stream_cut: Some(StreamCut {
            after_events: 3,
            connections: 1,
        }),
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("spawn");
    let response = post_stream(&executor, &superwire_request()).await;
    let run_id = run_id_of(&response);
    let (before_cut, end) = read_events(response, None).await;
    assert_eq!(
        end,
        StreamEnd::Broken,
        "the connection must break, not finish"
    );
    assert_eq!(before_cut.len(), 3);
    assert!(
        !names(&before_cut)
            .iter()
            .any(|name| name.starts_with("workflow_completed"))
    );
    // The run goes on without a listener.
    let last = before_cut.last().expect("some events").id;
    let (after_cut, end) =
        read_events(resume_stream(&executor, &run_id, Some(last)).await, None).await;
    assert_eq!(end, StreamEnd::Finished);

    let all: Vec<SseEvent> = before_cut.into_iter().chain(after_cut).collect();
    let ids: Vec<u64> = all.iter().map(|event| event.id).collect();
    let recorded = executor.events(&run_id).expect("known run");
    assert_eq!(
        ids,
        (1..=u64::try_from(recorded.len()).expect("small")).collect::<Vec<_>>()
    );
    assert_eq!(
        all.last().map(|event| event.event.as_str()),
        Some("workflow_completed")
    );
    for (seen, emitted) in all.iter().zip(&recorded) {
        assert_eq!(
            (seen.id, &seen.event, &seen.data),
            (emitted.id, &emitted.event, &emitted.data)
        );
    }
    let counters = executor.counters();
    assert_eq!(
        (counters.runs, counters.stream_cuts, counters.resumes),
        (1, 1, 1)
    );

    // Resuming from the start (no Last-Event-ID) replays the whole finished run.
    let (replayed, _) = read_events(resume_stream(&executor, &run_id, None).await, None).await;
    assert_eq!(replayed, all);
}

#[tokio::test]
async fn superwire_resume_refuses_unknown_runs_and_bad_last_event_ids() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("spawn");
    let unknown = resume_stream(&executor, "no-such-run", Some(1)).await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    let body: Value = unknown.json().await.expect("json");
    assert_eq!(body["error"]["kind"], "not_found");

    let response = post_stream(&executor, &superwire_request()).await;
    let run_id = run_id_of(&response);
    drop(response);
    let bad = client()
        .get(join(
            executor.base_url(),
            &format!("execute/{run_id}/events"),
        ))
        .header("last-event-id", "seven")
        .send()
        .await
        .expect("reachable");
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn superwire_cancel_ends_the_run_and_every_open_stream() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        step_delay: Duration::from_secs(30),
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("spawn");
    let response = post_stream(&executor, &superwire_request()).await;
    let run_id = run_id_of(&response);
    // The first agent is now working for 30 s; its `agent_started` is event 3.
    let (first, _) = read_events(response, Some(3)).await;
    assert_eq!(
        names(&first),
        ["workflow_started", "workflow_planned", "agent_started"]
    );

    let follower = resume_stream(&executor, &run_id, Some(3)).await;
    let cancel_url = join(executor.base_url(), &format!("execute/{run_id}/cancel"));
    let cancelled = client()
        .post(cancel_url.clone())
        .send()
        .await
        .expect("reachable");
    assert_eq!(cancelled.status(), StatusCode::OK);
    let body: Value = cancelled.json().await.expect("json");
    assert_eq!(body, json!({ "run_id": run_id, "status": "cancelled" }));

    let (rest, end) = tokio::time::timeout(Duration::from_secs(5), read_events(follower, None))
        .await
        .expect("stream ends promptly after cancel");
    assert_eq!(end, StreamEnd::Finished);
    assert_eq!(names(&rest), ["workflow_failed"]);
    assert_eq!(rest[0].id, 4);
    assert_eq!(rest[0].data["error"]["kind"], "cancelled");

    // Cancelling again is idempotent; nothing more is emitted.
    let again = client().post(cancel_url).send().await.expect("reachable");
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(executor.events(&run_id).expect("known").len(), 4);
    assert_eq!(executor.runs()[0].status, RunStatus::Cancelled);
    let counters = executor.counters();
    assert_eq!((counters.cancel_requests, counters.cancellations), (2, 1));
}

#[tokio::test]
async fn superwire_cancel_after_completion_or_of_unknown_run_is_refused() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("spawn");
    let response = post_stream(&executor, &superwire_request()).await;
    let run_id = run_id_of(&response);
    let (events, _) = read_events(response, None).await;
    assert_eq!(
        events.last().map(|event| event.event.as_str()),
        Some("workflow_completed")
    );

    let late = client()
        .post(join(
            executor.base_url(),
            &format!("execute/{run_id}/cancel"),
        ))
        .send()
        .await
        .expect("reachable");
    assert_eq!(late.status(), StatusCode::CONFLICT);
    let unknown = client()
        .post(join(executor.base_url(), "execute/nope/cancel"))
        .send()
        .await
        .expect("reachable");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert_eq!(executor.counters().cancellations, 0);
}

#[tokio::test]
async fn superwire_failing_workflow_ends_with_workflow_failed() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        outcome: RunOutcome::Fail,
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("spawn");
    let (events, _) = read_events(post_stream(&executor, &superwire_request()).await, None).await;
    assert_eq!(
        names(&events),
        [
            "workflow_started",
            "workflow_planned",
            "agent_started",
            "workflow_failed"
        ]
    );
    assert_eq!(events[3].data["error"]["kind"], "execution_error");

    let response = client()
        .post(join(executor.base_url(), "execute"))
        .json(&superwire_request())
        .send()
        .await
        .expect("reachable");
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["kind"], "execution_error");
}

#[tokio::test]
async fn superwire_cache_key_reuses_agent_outputs() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("spawn");
    let (first, _) = read_events(post_stream(&executor, &superwire_request()).await, None).await;
    let (second, _) = read_events(post_stream(&executor, &superwire_request()).await, None).await;
    assert_eq!(first[3].data["cached"], false);
    assert_eq!(second[3].data["cached"], true);
    assert_eq!(first.last(), second.last());

    let mut no_cache = superwire_request();
    no_cache["options"]["use_cache"] = json!(false);
    let (third, _) = read_events(post_stream(&executor, &no_cache).await, None).await;
    assert_eq!(third[3].data["cached"], false);
    assert_eq!(executor.counters().cache_hits, 1);
}

#[tokio::test]
async fn superwire_validate_is_a_side_effect_free_probe() {
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("spawn");
    let ok = client()
        .post(join(executor.base_url(), "validate"))
        .json(&json!({ "workflow_source_base64": workflow_base64() }))
        .send()
        .await
        .expect("reachable");
    assert_eq!(ok.status(), StatusCode::OK);
    let body: Value = ok.json().await.expect("json");
    assert_eq!(body, json!({ "valid": true, "issues": [] }));

    let invalid = client()
        .post(join(executor.base_url(), "validate"))
        .json(&json!({ "workflow_source_base64": "" }))
        .send()
        .await
        .expect("reachable");
    assert_eq!(invalid.status(), StatusCode::BAD_REQUEST);
    let body: Value = invalid.json().await.expect("json");
    assert_eq!(body["error"]["kind"], "validation_error");

    let counters = executor.counters();
    assert_eq!((counters.validations, counters.runs), (2, 0));

    executor.go_down().await;
    let refused = client()
        .post(join(executor.base_url(), "validate"))
        .json(&json!({ "workflow_source_base64": workflow_base64() }))
        .send()
        .await
        .expect_err("down");
    assert!(refused.is_connect(), "{refused}");
}
