//! Disputes over real parts: anvil chain, devnet token, embedded facilitator, worker-sdk
//! workers, SQLite. Replay decides where the evidence changed; the arbiter (admin key) decides
//! the rest; a silent arbiter's dispute is voided before the authorization lapses.

use std::{net::SocketAddr, time::Duration};

use alloy::primitives::U256;
use hiregate_contracts::{
    receipt::verify_receipt,
    state::{ContractState, DisputeDecision},
    token::Jwks,
};
use hiregate_worker_sdk::{
    GatewayKeys, Output, TaskContext, TaskOutcome, example_workers::echo_builder,
    protocol::file_output,
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    helpers::{ADMIN_KEY, TestDatabase, closed_port, eventually, spawn_app_on, tamper},
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env, hire_env_on, hire_listing, serve_worker},
};

const WAIT: Duration = Duration::from_secs(30);
/// Deadline sweep every 50 ms.
const FAST_JOBS: &str = "[contracts]\njobs_interval_ms = 50\nverification_budget_s = 1\n";

fn price() -> U256 {
    U256::from(PRICE)
}

async fn send(env: &HireEnv, method: Method, path: &str, key: &str, body: &Value) -> (u16, Value) {
    let response = env.app.send_json(method, path, Some(key), body).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn dispute(env: &HireEnv, contract_id: &str, key: &str, reason: &str) -> (u16, Value) {
    send(
        env,
        Method::POST,
        &format!("/v1/contracts/{contract_id}/disputes"),
        key,
        &json!({"reason": reason,
                "claim": {"text": "the summary misses the point", "failing_paths": ["/summary"]}}),
    )
    .await
}

async fn decide(env: &HireEnv, dispute_id: &str, decision: &str) -> (u16, Value) {
    send(
        env,
        Method::POST,
        &format!("/v1/disputes/{dispute_id}/decision"),
        ADMIN_KEY,
        &json!({"decision": decision, "reason": format!("arbiter says {decision}")}),
    )
    .await
}

async fn view(env: &HireEnv, contract_id: &str) -> Value {
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

async fn paid(env: &HireEnv, contract_id: &str) -> crate::hire_env::Answer {
    let payment = env.pay(&env.challenge(contract_id).await).await;
    env.execute(contract_id, Some(&payment), None).await
}

async fn jwks(env: &HireEnv) -> Jwks {
    env.app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap()
}

/// The contract's receipt as the seeker fetches it: its compact JWS.
async fn receipt_token(env: &HireEnv, contract_id: &str) -> String {
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/receipt"),
            Some(&env.seeker_key),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["receipt"].as_str().unwrap().to_owned()
}

async fn receipt_dispute(env: &HireEnv, contract_id: &str) -> hiregate_contracts::receipt::Receipt {
    verify_receipt(&receipt_token(env, contract_id).await, &jwks(env).await).unwrap()
}

/// A rejected (failed verification) contract of the faulty worker.
async fn rejected_contract(env: &HireEnv) -> String {
    let contract_id = env
        .contract(json!({"text": "bad", "mode": "invalid"}), json!({}))
        .await;
    let answer = paid(env, &contract_id).await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "rejected");
    contract_id
}

/// An accepted contract of `env` with a 600 s acceptance window.
async fn accepted_contract(env: &HireEnv, text: &str) -> String {
    let contract_id = env
        .contract(HireEnv::input(text), json!({"acceptance_window_s": 600}))
        .await;
    let answer = paid(env, &contract_id).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "accepted");
    contract_id
}

/// The arbiter's queue: `GET /v1/disputes?state=escalated`.
async fn escalated_queue(env: &HireEnv) -> Vec<Value> {
    let (status, body) = send(
        env,
        Method::GET,
        "/v1/disputes?state=escalated",
        ADMIN_KEY,
        &json!({}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["disputes"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_seekers_dispute_the_replay_does_not_uphold_goes_to_the_arbiter_who_decides_both_ways() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let before = env.balances().await;
    let to_settle = accepted_contract(&env, "disputed, then paid").await;
    let to_void = accepted_contract(&env, "disputed, then voided").await;
    assert_eq!(
        env.balances().await,
        before,
        "settlement waits for the window"
    );
    let original = view(&env, &to_settle).await["verification"]["verifier_result_hash"].clone();

    // A seeker's dispute needs a claim with its text; refused ones change nothing.
    for claim in [
        json!(null),
        json!({"note": "no text"}),
        json!({"text": " "}),
        json!({"text": "x", "failing_paths": ["no-slash"]}),
    ] {
        let (status, body) = send(
            &env,
            Method::POST,
            &format!("/v1/contracts/{to_settle}/disputes"),
            &env.seeker_key,
            &json!({"reason": "wrong", "claim": claim}),
        )
        .await;
        assert_eq!(status, 422, "{claim}: {body}");
        assert_eq!(body["error"]["code"], "validation_failed");
        assert_eq!(body["error"]["details"]["field"], "claim");
    }
    assert_eq!(env.state(&to_settle).await, "accepted");

    let (status, settle_dispute) =
        dispute(&env, &to_settle, &env.seeker_key, "summary is wrong").await;
    assert_eq!(status, 201, "{settle_dispute}");
    assert_eq!(settle_dispute["party"], "seeker");
    // The replay agrees with the acceptance: not an answer to the claim, so a person decides.
    assert_eq!(settle_dispute["state"], "escalated");
    assert!(settle_dispute["decision"].is_null());
    assert_eq!(settle_dispute["replay"]["verification_status"], "passed");
    assert_eq!(settle_dispute["replay_verifier_result_hash"], original);
    assert_eq!(
        settle_dispute["claim"]["text"],
        "the summary misses the point"
    );
    assert_eq!(settle_dispute["claim"]["failing_paths"][0], "/summary");
    assert_eq!(env.state(&to_settle).await, "disputed");
    let (status, void_dispute) = dispute(&env, &to_void, &env.seeker_key, "also wrong").await;
    assert_eq!(status, 201, "{void_dispute}");
    assert_eq!(void_dispute["state"], "escalated");

    // The arbiter's queue: oldest first, each with the silent arbiter's deadline.
    let queue = escalated_queue(&env).await;
    let ids: Vec<&Value> = queue
        .iter()
        .map(|item| &item["dispute"]["dispute_id"])
        .collect();
    assert_eq!(
        ids,
        [&settle_dispute["dispute_id"], &void_dispute["dispute_id"]]
    );
    for item in &queue {
        assert_eq!(
            item["dispute"]["claim"]["text"],
            "the summary misses the point"
        );
        assert_eq!(item["deadline_action"], "void");
        let deadline: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(item["deadline_at"].clone()).expect("a deadline");
        let valid_before = item["contract"]["payment"]["valid_before"]
            .as_i64()
            .unwrap();
        assert_eq!(
            deadline.timestamp(),
            valid_before - 120,
            "validBefore - settlement margin"
        );
        assert!(deadline > chrono::Utc::now());
    }

    let (status, decided) = decide(
        &env,
        settle_dispute["dispute_id"].as_str().unwrap(),
        "settle",
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["decision"]["via"], "arbiter");
    assert_eq!(env.state(&to_settle).await, "settled");
    let after_settle = env.balances().await;
    assert_eq!(
        after_settle.0,
        before.0 - price(),
        "the worker is paid on chain"
    );
    assert_eq!(after_settle.1, before.1 + price());

    let (status, decided) =
        decide(&env, void_dispute["dispute_id"].as_str().unwrap(), "void").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(env.state(&to_void).await, "voided");
    assert_eq!(
        env.balances().await,
        after_settle,
        "the payer is made whole: nothing moved"
    );
    assert!(escalated_queue(&env).await.is_empty());

    let kinds = env.event_kinds(&to_settle).await;
    let order: Vec<&str> = kinds
        .iter()
        .map(String::as_str)
        .filter(|k| {
            matches!(
                *k,
                "dispute_opened"
                    | "dispute_replayed"
                    | "dispute_decided"
                    | "dispute_resolved"
                    | "settlement_succeeded"
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            "dispute_opened",
            "dispute_replayed",
            "dispute_decided",
            "dispute_resolved",
            "settlement_succeeded"
        ]
    );
    let receipt = receipt_dispute(&env, &to_settle).await;
    assert_eq!(receipt.outcome, ContractState::Settled);
    let decided = receipt.dispute.expect("the receipt binds the dispute");
    assert_eq!(decided.decision, DisputeDecision::Settle);
    assert_eq!(decided.decided_by, "admin");
    assert_eq!(
        receipt_dispute(&env, &to_void).await.outcome,
        ContractState::Voided
    );

    // One dispute per contract.
    let (status, again) = dispute(&env, &to_settle, &env.seeker_key, "again").await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "contract_not_disputable");
}

#[tokio::test]
async fn a_replay_on_stored_bytes_that_fail_their_digest_is_refused_never_a_verdict() {
    let database = TestDatabase::sqlite();
    let database_url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let contract_id = accepted_contract(&env, "tampered later").await;
    let before = env.balances().await;
    // Someone with database access rewrites the stored deliverable.
    tamper(
        &database_url,
        &format!(
            "update deliverable set digest = 'sha256:{}' \
             where contract_id = '{contract_id}' and kind = 'deliverable'",
            "0".repeat(64)
        ),
    )
    .await;
    let (status, body) = dispute(&env, &contract_id, &env.seeker_key, "prove it").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "escalated");
    assert!(
        body["decision"].is_null(),
        "no verdict from bytes that are not what was judged"
    );
    assert_eq!(body["replay"]["error"]["code"], "stored_digest_mismatch");
    assert!(
        body["replay"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("differs from the recorded"),
        "{body}"
    );
    assert_eq!(body["replay_verifier_result_hash"], "");
    assert!(
        env.event_kinds(&contract_id)
            .await
            .contains(&"dispute_escalated".to_owned())
    );
    assert_eq!(env.state(&contract_id).await, "disputed");
    assert_eq!(env.balances().await, before, "no money moved");
}

#[tokio::test]
async fn an_operators_dispute_of_an_inconclusive_rejection_settles_once_the_file_is_reachable() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST_JOBS).await;
    // The worker hands back a JSON file hosted on a port where nothing listens yet.
    let port = closed_port().await;
    let file_bytes = serde_json::to_vec(&json!({"summary": "late", "confidence": 0.9})).unwrap();
    let url: url::Url = format!("http://127.0.0.1:{port}/summary.json")
        .parse()
        .unwrap();
    let file = file_output(url.clone(), "application/json", &file_bytes);
    let jwks_url = format!("{}/.well-known/jwks.json", env.app.address)
        .parse()
        .unwrap();
    let worker = echo_builder()
        .gateway_keys(GatewayKeys::remote(jwks_url))
        .build(move |_ctx: TaskContext, _input: Value| {
            let file = file.clone();
            async move {
                TaskOutcome::Completed {
                    output: Output::File(file),
                    metadata: None,
                }
            }
        })
        .unwrap();
    let file_worker = serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&file_worker.endpoint, env.pay_to, &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201);
    let registered: Value = response.json().await.unwrap();
    env.worker_id = registered["id"].as_str().unwrap().to_owned();

    let contract_id = env.contract(HireEnv::input("file"), json!({})).await;
    let before = env.balances().await;
    let answer = paid(&env, &contract_id).await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "rejected");
    assert_eq!(
        view(&env, &contract_id).await["verification"]["verification_status"],
        "inconclusive"
    );

    // Now the file is served.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let served = file_bytes.clone();
    let files = axum::Router::new().route(
        "/summary.json",
        axum::routing::get(move || {
            let served = served.clone();
            async move { ([("content-type", "application/json")], served) }
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, files).await });

    let (status, body) = dispute(&env, &contract_id, &env.operator_key, "the file is up now").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["party"], "operator");
    assert_eq!(body["replay"]["verification_status"], "passed");
    // Unreachable at the original verdict: the one piece of evidence fetched again.
    assert_eq!(body["replay"]["evidence"]["refetched"][0], url.as_str());
    assert_eq!(body["replay"]["evidence"]["from_store"], json!([]));
    assert_eq!(body["decision"]["decision"], "settle");
    assert_eq!(body["decision"]["via"], "replay");
    assert_eq!(env.state(&contract_id).await, "settled");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
    server.abort();
}

#[tokio::test]
async fn the_arbiter_settles_or_voids_an_escalated_dispute_once() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let to_settle = rejected_contract(&env).await;
    let to_void = rejected_contract(&env).await;
    let before = env.balances().await;

    let (status, settle_dispute) =
        dispute(&env, &to_settle, &env.operator_key, "the output is fine").await;
    assert_eq!(status, 201, "{settle_dispute}");
    // The replay fails again: nothing new for a machine to decide.
    assert_eq!(settle_dispute["state"], "escalated");
    assert_eq!(settle_dispute["replay"]["verification_status"], "failed");
    assert!(settle_dispute["decision"].is_null());
    assert_eq!(env.state(&to_settle).await, "disputed");
    let dispute_id = settle_dispute["dispute_id"].as_str().unwrap();

    // Only the admin decides; parties can read it, other accounts cannot.
    let (status, _) = send(
        &env,
        Method::POST,
        &format!("/v1/disputes/{dispute_id}/decision"),
        &env.operator_key,
        &json!({"decision": "settle", "reason": "mine"}),
    )
    .await;
    assert_eq!(status, 403);
    let (status, seen) = send(
        &env,
        Method::GET,
        &format!("/v1/disputes/{dispute_id}"),
        &env.seeker_key,
        &json!({}),
    )
    .await;
    assert_eq!(status, 200, "{seen}");
    let (stranger, _) = env.app.create_key("seeker").await;
    let (status, _) = send(
        &env,
        Method::GET,
        &format!("/v1/disputes/{dispute_id}"),
        &stranger,
        &json!({}),
    )
    .await;
    assert_eq!(status, 404);

    let (status, decided) = decide(&env, dispute_id, "settle").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["decision"]["decision"], "settle");
    assert_eq!(decided["decision"]["decided_by"], "admin");
    assert_eq!(decided["decision"]["reason"], "arbiter says settle");
    assert_eq!(env.state(&to_settle).await, "settled");
    let (status, again) = decide(&env, dispute_id, "void").await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "dispute_already_decided");
    let events = env
        .app
        .store
        .list_contract_events(&to_settle, 0, 1000)
        .await
        .unwrap();
    let audit = events
        .iter()
        .find(|e| e.kind.as_str() == "dispute_decided")
        .expect("the decision is in the audit log");
    assert_eq!(audit.actor.to_string(), "admin");
    assert_eq!(audit.details["reason"], "arbiter says settle");

    let (status, void_dispute) = dispute(&env, &to_void, &env.operator_key, "please pay").await;
    assert_eq!(status, 201, "{void_dispute}");
    assert_eq!(void_dispute["state"], "escalated");
    let (status, decided) =
        decide(&env, void_dispute["dispute_id"].as_str().unwrap(), "void").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(env.state(&to_void).await, "voided");
    assert_eq!(view(&env, &to_void).await["payment"]["state"], "voided");

    // One settlement (to_settle), one void (to_void).
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
    let receipt = receipt_dispute(&env, &to_void).await;
    assert_eq!(receipt.outcome, ContractState::Voided);
    let decided = receipt.dispute.expect("bound");
    assert_eq!(decided.decision, DisputeDecision::Void);
    assert_eq!(decided.decided_by, "admin");
}

#[tokio::test]
async fn a_silent_arbiters_dispute_is_voided_before_valid_before() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST_JOBS).await;
    let contract_id = env
        .contract(
            json!({"text": "bad", "mode": "invalid"}),
            json!({"sla": {"max_latency_ms": 3000}, "retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let before = env.balances().await;
    let answer = paid(&env, &contract_id).await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    // validBefore - settlement_margin_s is ~4 s after payment: dispute now, then stay silent.
    let (status, opened) = dispute(&env, &contract_id, &env.operator_key, "no answer").await;
    assert_eq!(status, 201, "{opened}");
    assert_eq!(opened["state"], "escalated");
    eventually(WAIT, "the silent arbiter's void", || async {
        (env.state(&contract_id).await == "voided").then_some(())
    })
    .await;
    let dispute_id = opened["dispute_id"].as_str().unwrap();
    let (status, decided) = send(
        &env,
        Method::GET,
        &format!("/v1/disputes/{dispute_id}"),
        ADMIN_KEY,
        &json!({}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(decided["decision"]["decision"], "void");
    assert_eq!(decided["decision"]["decided_by"], "system");
    assert_eq!(decided["decision"]["reason"], "arbiter_silent");
    assert_eq!(decided["decision"]["via"], "timeout");
    let contract = view(&env, &contract_id).await;
    assert_eq!(contract["payment"]["state"], "voided");
    let valid_before = contract["payment"]["valid_before"].as_i64().unwrap();
    let decided_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(decided["decision"]["decided_at"].clone()).unwrap();
    assert!(
        decided_at.timestamp() < valid_before,
        "{decided_at} vs {valid_before}"
    );
    assert_eq!(env.balances().await, before);
    let (status, late) = decide(&env, dispute_id, "settle").await;
    assert_eq!(status, 409, "{late}");
    let receipt = receipt_dispute(&env, &contract_id).await;
    assert_eq!(receipt.dispute.expect("bound").decided_by, "system");
}

#[tokio::test]
async fn a_replay_after_a_gateway_restart_gives_the_same_verifier_result_hash() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/hiregate.db", dir.path().display());
    let settings = format!(
        "[signing_key]\npath = \"{}\"\n",
        dir.path().join("gateway-key.json").display()
    );
    let devnet = hiregate_payments::devnet::Devnet::start()
        .await
        .expect("anvil devnet starts");
    let env = hire_env_on(
        devnet,
        TestDatabase::Shared(url.clone()),
        WorkerKind::Faulty,
        4,
        &settings,
    )
    .await;
    let contract_id = rejected_contract(&env).await;
    let original = view(&env, &contract_id).await["verification"]["verifier_result_hash"].clone();
    assert!(original.is_string());

    let HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker,
        worker_id,
        pay_to,
        wallet,
    } = env;
    drop(app);
    let app = spawn_app_on(
        TestDatabase::Shared(url),
        &crate::hire_env::chain_settings(&devnet, &settings),
    )
    .await;
    let env = HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker,
        worker_id,
        pay_to,
        wallet,
    };
    let (status, body) = dispute(&env, &contract_id, &env.operator_key, "after restart").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "escalated");
    assert_eq!(body["replay_verifier_result_hash"], original);
}

#[tokio::test]
async fn strangers_get_403_and_a_late_dispute_a_clear_409() {
    // No settlement sweep during the test: the contract stays accepted after its window.
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        4,
        "[contracts]\nsweep_interval_ms = 600000\n",
    )
    .await;
    let contract_id = env
        .contract(HireEnv::input("late"), json!({"acceptance_window_s": 1}))
        .await;
    let answer = paid(&env, &contract_id).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let (other_seeker, _) = env.app.create_key("seeker").await;
    let (other_operator, _) = env.app.create_key("operator").await;
    for key in [&other_seeker, &other_operator] {
        let (status, body) = dispute(&env, &contract_id, key, "not mine").await;
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["code"], "not_a_party");
    }
    // The worker's operator cannot dispute an acceptance.
    let (status, body) = dispute(&env, &contract_id, &env.operator_key, "why").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "contract_not_disputable");
    assert_eq!(body["error"]["details"]["state"], "accepted");

    // Past the 1 s acceptance window by the engine's clock, not by waiting for it.
    env.app.clock.advance(Duration::from_millis(1500));
    let (status, body) = dispute(&env, &contract_id, &env.seeker_key, "too late").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "dispute_window_closed");
    assert!(body["error"]["details"]["window_ended_at"].is_string());
    assert_eq!(env.state(&contract_id).await, "accepted");
    assert!(
        env.app
            .store
            .dispute_of_contract(&contract_id)
            .await
            .unwrap()
            .is_none()
    );
}

/// A contract that failed on an SLA breach: a pending worker slower than the 1 s SLA, one
/// attempt allowed.
async fn failed_contract(env: &HireEnv, text: &str) -> String {
    let contract_id = env
        .contract(
            json!({"text": text, "mode": "pending", "delay_ms": 60_000}),
            // The acceptance window keeps the authorization valid well after the failure.
            json!({"sla": {"max_latency_ms": 1000}, "retry_policy": {"max_attempts": 1},
                   "acceptance_window_s": 600}),
        )
        .await;
    let answer = paid(env, &contract_id).await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    eventually(WAIT, "the SLA breach", || async {
        (env.state(&contract_id).await == "failed").then_some(())
    })
    .await;
    contract_id
}

#[tokio::test]
async fn an_operators_dispute_of_a_failure_is_decided_while_the_money_is_held_refused_after() {
    let database = TestDatabase::sqlite();
    let database_url = database.url();
    let env = hire_env(database, WorkerKind::Faulty, 4, FAST_JOBS).await;
    let before = env.balances().await;
    let held = failed_contract(&env, "the gateway was down").await;
    let released = failed_contract(&env, "too late to argue").await;
    assert_eq!(env.balances().await, before, "a failure moves no money");
    let failed_receipt = receipt_token(&env, &held).await;
    let failure = verify_receipt(&failed_receipt, &jwks(&env).await).unwrap();
    assert_eq!(failure.outcome, ContractState::Failed);
    assert!(failure.payment.expect("the held payment").tx_hash.is_none());

    // Only the operator may dispute a failure.
    let (status, body) = dispute(&env, &held, &env.seeker_key, "mine").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "contract_not_disputable");

    let (status, body) = dispute(
        &env,
        &held,
        &env.operator_key,
        "the SLA breach was the gateway's outage",
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["party"], "operator");
    assert_eq!(
        body["state"], "escalated",
        "no verdict to replay: the arbiter decides"
    );
    assert!(body["replay"]["skipped"].is_string(), "{body}");
    assert_eq!(env.state(&held).await, "disputed");
    let queue = escalated_queue(&env).await;
    assert_eq!(queue.len(), 1);
    assert_eq!(queue[0]["dispute"]["dispute_id"], body["dispute_id"]);
    assert!(queue[0]["deadline_at"].is_string());

    let (status, decided) = decide(&env, body["dispute_id"].as_str().unwrap(), "settle").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(env.state(&held).await, "settled");
    let after = env.balances().await;
    assert_eq!(
        after.0,
        before.0 - price(),
        "the held authorization settled on chain"
    );
    assert_eq!(after.1, before.1 + price());
    // The failure's receipt no longer speaks for the contract: the settlement has its own.
    let settled_receipt = receipt_token(&env, &held).await;
    assert_ne!(settled_receipt, failed_receipt);
    let settlement = verify_receipt(&settled_receipt, &jwks(&env).await).unwrap();
    assert_eq!(settlement.outcome, ContractState::Settled);
    assert!(settlement.payment.expect("paid").tx_hash.is_some());
    assert_eq!(settlement.dispute.expect("bound").decided_by, "admin");
    assert_eq!(
        receipt_token(&env, &held).await,
        settled_receipt,
        "written once for its outcome"
    );

    // The other one's authorization is about to lapse (its validBefore moved close, standing
    // in for the time that would pass): the money is as good as back with the payer.
    let soon = chrono::Utc::now().timestamp() + 60;
    tamper(
        &database_url,
        &format!("update payment set valid_before = {soon} where contract_id = '{released}'"),
    )
    .await;
    let (status, body) = dispute(&env, &released, &env.operator_key, "also the gateway").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "money_released");
    assert_eq!(body["error"]["details"]["reason"], "authorization_expired");
    assert_eq!(env.state(&released).await, "failed", "nothing changed");
    assert!(view(&env, &released).await["dispute"].is_null());
    assert_eq!(env.balances().await, after);
}

#[tokio::test]
async fn a_replay_judges_evidence_fetched_at_the_verdict_from_the_stored_bytes() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST_JOBS).await;
    // The worker hands back a JSON file served while the verdict is taken, gone afterwards.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let file_bytes = serde_json::to_vec(&json!({"summary": "kept", "confidence": 0.9})).unwrap();
    let served = file_bytes.clone();
    let files = axum::Router::new().route(
        "/summary.json",
        axum::routing::get(move || {
            let served = served.clone();
            async move { ([("content-type", "application/json")], served) }
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, files).await });
    let url: url::Url = format!("http://127.0.0.1:{port}/summary.json")
        .parse()
        .unwrap();
    let file = file_output(url.clone(), "application/json", &file_bytes);
    let jwks_url = format!("{}/.well-known/jwks.json", env.app.address)
        .parse()
        .unwrap();
    let worker = echo_builder()
        .gateway_keys(GatewayKeys::remote(jwks_url))
        .build(move |_ctx: TaskContext, _input: Value| {
            let file = file.clone();
            async move {
                TaskOutcome::Completed {
                    output: Output::File(file),
                    metadata: None,
                }
            }
        })
        .unwrap();
    let file_worker = serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&file_worker.endpoint, env.pay_to, &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201);
    env.worker_id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let contract_id = accepted_contract(&env, "file kept").await;
    server.abort();
    let _ = server.await;

    let (status, body) = dispute(
        &env,
        &contract_id,
        &env.seeker_key,
        "the file says otherwise",
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Judged on the bytes stored at the verdict, not fetched again (the server is gone).
    assert_eq!(body["replay"]["evidence"]["from_store"][0], url.as_str());
    assert_eq!(body["replay"]["evidence"]["refetched"], json!([]));
    assert_eq!(body["replay"]["verification_status"], "passed");
    assert_eq!(
        body["replay_verifier_result_hash"],
        view(&env, &contract_id).await["verification"]["verifier_result_hash"]
    );
    assert_eq!(body["state"], "escalated");
}

#[tokio::test]
async fn an_operators_dispute_of_an_escrowed_failure_is_refused_once_the_escrow_was_voided() {
    use hiregate_payments::encode_header;
    let crate::escrow_env::EscrowEnv { env, .. } = crate::escrow_env::escrow_env_with(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        json!(["auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;
    let contract_id = env
        .contract(
            json!({"text": "x", "mode": "fail"}),
            json!({"retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let payload = crate::escrow_env::escrowed_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 502, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(
        env.balance(payer).await,
        payer_before,
        "the escrow was voided"
    );

    let (status, body) = dispute(
        &env,
        &contract_id,
        &env.operator_key,
        "our fault? no, yours",
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "money_released");
    assert_eq!(body["error"]["details"]["reason"], "escrow_released");
    assert_eq!(body["error"]["details"]["payment_state"], "voided");
    assert_eq!(env.state(&contract_id).await, "failed", "nothing changed");
    assert!(view(&env, &contract_id).await["dispute"].is_null());
    assert_eq!(env.balance(payer).await, payer_before);
}

/// `method path` as `key` with a raw body (`None`: no body and no content type).
async fn raw(
    env: &HireEnv,
    method: Method,
    path: &str,
    key: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let mut request = env
        .app
        .client
        .request(method, format!("{}{path}", env.app.address))
        .bearer_auth(key);
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_owned());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Bodies each route refuses from a caller who may act: not JSON, the wrong shape, no body.
const BAD_BODIES: [Option<&str>; 4] = [Some("{not json"), Some("{}"), Some("[1]"), None];

/// Authorization before validation, on every route with a resource id in its path and a JSON
/// body: a caller who may not act on the resource gets 404/403 whatever its body, and only a
/// caller who may gets the body's 400/415/422.
#[tokio::test]
async fn a_caller_who_may_not_act_is_refused_before_its_body_is_read() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = accepted_contract(&env, "who may speak").await;
    let (status, opened) = dispute(&env, &contract_id, &env.seeker_key, "not what I asked").await;
    assert_eq!(status, 201, "{opened}");
    let dispute_id = opened["dispute_id"].as_str().unwrap().to_owned();
    let (stranger_seeker, _) = env.app.create_key("seeker").await;
    let (stranger_operator, _) = env.app.create_key("operator").await;
    let missing_contract = hiregate_contracts::id::ContractId::generate();
    let missing_dispute = format!("dsp_{}", ulid::Ulid::new());
    let missing_worker = format!("wk_{}", ulid::Ulid::new());

    // (method, path, caller, status, code) for callers who may not act.
    let refusals = [
        (
            Method::POST,
            format!("/v1/contracts/{contract_id}/disputes"),
            &stranger_seeker,
            403,
            "not_a_party",
        ),
        (
            Method::POST,
            format!("/v1/contracts/{contract_id}/disputes"),
            &stranger_operator,
            403,
            "not_a_party",
        ),
        (
            Method::POST,
            format!("/v1/contracts/{missing_contract}/disputes"),
            &env.seeker_key,
            404,
            "not_found",
        ),
        (
            Method::POST,
            format!("/v1/disputes/{dispute_id}/response"),
            &stranger_seeker,
            404,
            "not_found",
        ),
        (
            Method::POST,
            format!("/v1/disputes/{dispute_id}/response"),
            &stranger_operator,
            404,
            "not_found",
        ),
        (
            Method::POST,
            format!("/v1/disputes/{missing_dispute}/decision"),
            &ADMIN_KEY.to_owned(),
            404,
            "not_found",
        ),
        (
            Method::POST,
            format!("/v1/contracts/{missing_contract}/refund"),
            &ADMIN_KEY.to_owned(),
            404,
            "not_found",
        ),
        (
            Method::PATCH,
            format!("/v1/workers/{}", env.worker_id),
            &stranger_operator,
            404,
            "not_found",
        ),
        (
            Method::PATCH,
            format!("/v1/workers/{missing_worker}"),
            &env.operator_key,
            404,
            "not_found",
        ),
    ];
    for (method, path, key, status, code) in &refusals {
        for body in BAD_BODIES {
            let (got, answer) = raw(&env, method.clone(), path, key, body).await;
            assert_eq!(
                (got, answer["error"]["code"].as_str()),
                (*status, Some(*code)),
                "{method} {path} with {body:?}: {answer}"
            );
        }
    }

    // The same bodies from callers who may act: the body's own answer.
    let permitted = [
        (
            Method::POST,
            format!("/v1/disputes/{dispute_id}/response"),
            &env.operator_key,
        ),
        (
            Method::POST,
            format!("/v1/disputes/{dispute_id}/decision"),
            &ADMIN_KEY.to_owned(),
        ),
        (
            Method::POST,
            format!("/v1/contracts/{contract_id}/refund"),
            &ADMIN_KEY.to_owned(),
        ),
        (
            Method::PATCH,
            format!("/v1/workers/{}", env.worker_id),
            &env.operator_key,
        ),
    ];
    for (method, path, key) in &permitted {
        for (body, status, code) in [
            (Some("{not json"), 400, "malformed_json"),
            (
                Some(r#"{"reason": 7, "x-unknown": true}"#),
                422,
                "invalid_body",
            ),
            (None, 415, "unsupported_media_type"),
        ] {
            let (got, answer) = raw(&env, method.clone(), path, key, body).await;
            assert_eq!(
                (got, answer["error"]["code"].as_str()),
                (status, Some(code)),
                "{method} {path} with {body:?}: {answer}"
            );
        }
    }
    // Nothing changed: the dispute is still open and unanswered, the contract still disputed.
    let (status, view) = raw(
        &env,
        Method::GET,
        &format!("/v1/disputes/{dispute_id}"),
        ADMIN_KEY,
        None,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    assert!(
        view["response"].is_null() && view["decision"].is_null(),
        "{view}"
    );
}
