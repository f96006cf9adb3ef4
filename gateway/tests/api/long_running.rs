//! Long-running work on real parts (anvil + devnet token, embedded facilitator, worker-sdk
//! faulty workers in `pending` mode, real callbacks signed with the worker's secret): polling,
//! callbacks, their race, SLA breaches and automatic retries, cancel, authorization deadlines
//! and a gateway restarted mid-job. Timings are shortened through configuration.

use std::{net::SocketAddr, time::Duration};

use alloy::primitives::U256;
use chrono::Utc;
use hiregate_contracts::state::ContractState;
use hiregate_worker_sdk::{
    CallbackConfig, GatewayKeys, WebhookSecret,
    example_workers::{FaultyBehaviour, FaultyMode, faulty_builder, faulty_handler},
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, eventually, spawn_app_on},
    hire_env::{
        HireEnv, PRICE, WorkerKind, chain_settings, hire_env, hire_env_on, hire_listing,
        serve_worker, start_worker,
    },
};

/// Polls every 100–400 ms, job runner every 50 ms.
const FAST: &str = "[contracts]\npoll_interval_ms = 100\npoll_max_interval_ms = 400\n\
                    jobs_interval_ms = 50\njob_lease_ms = 5000\n";
/// Polling so slow that only a callback can finish the work within the test.
const NO_POLLING: &str = "[contracts]\npoll_interval_ms = 600000\npoll_max_interval_ms = 600000\n\
                          jobs_interval_ms = 50\n";

const WAIT: Duration = Duration::from_secs(30);

fn price() -> U256 {
    U256::from(PRICE)
}

fn pending_input(text: &str, delay_ms: u64) -> Value {
    json!({"text": text, "mode": "pending", "delay_ms": delay_ms})
}

/// Pay `contract_id` and expect the 202 of pending work.
async fn pay_expecting_pending(env: &HireEnv, contract_id: &str) {
    let challenge = env.challenge(contract_id).await;
    let answer = env
        .execute(contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    assert_eq!(answer.body["state"], "pending");
    assert!(
        answer.body["poll_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/contracts/{contract_id}"))
    );
    assert!(
        answer.body["events_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/contracts/{contract_id}/events"))
    );
}

async fn wait_for_state(env: &HireEnv, contract_id: &str, wanted: &str) {
    eventually(WAIT, &format!("contract {wanted}"), || async {
        (env.state(contract_id).await == wanted).then_some(())
    })
    .await;
}

fn count(kinds: &[String], kind: &str) -> usize {
    kinds.iter().filter(|k| *k == kind).count()
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

/// Replace the env's worker by a faulty worker that calls the gateway back, listed anew: a
/// placeholder is registered (the probe needs something serving) to learn the listing's
/// callback secret, then the callback-capable worker takes over its address.
async fn use_callback_worker(env: &mut HireEnv) -> WebhookSecret {
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
            CallbackConfig::new(env.app.address.parse().unwrap(), secret.clone())
                .first_retry_delay(Duration::from_millis(100)),
        )
        .build(faulty_handler(FaultyBehaviour::new(FaultyMode::Ok)))
        .unwrap();
    env.worker = serve_worker(worker, address).await;
    env.worker_id = body["id"].as_str().unwrap().to_owned();
    secret
}

#[tokio::test]
async fn pending_work_is_polled_verified_and_settled() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST).await;
    let contract_id = env
        .contract(
            pending_input("polled", 800),
            json!({"sla": {"max_latency_ms": 10000}}),
        )
        .await;
    let before = env.balances().await;
    pay_expecting_pending(&env, &contract_id).await;
    wait_for_state(&env, &contract_id, "settled").await;

    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "charged once");
    assert_eq!(after.1, before.1 + price());
    let kinds = env.event_kinds(&contract_id).await;
    for kind in [
        "worker_pending",
        "deliverable_received",
        "verification_passed",
        "settlement_succeeded",
    ] {
        assert_eq!(count(&kinds, kind), 1, "{kind} in {kinds:?}");
    }
    // The seeker's next execute gets the stored result with the original PAYMENT-RESPONSE.
    let result = env.execute(&contract_id, None, None).await;
    assert_eq!(result.status, 200, "{:?}", result.body);
    assert!(result.payment_response().success);
    assert_eq!(
        result.body["deliverable"]["output"]["content"]["confidence"],
        0.9
    );
    assert_eq!(env.worker.executions(), 1);
    let view = view(&env, &contract_id).await;
    assert_eq!(view["attempts"][0]["state"], "completed");
}

#[tokio::test]
async fn pending_work_is_completed_by_a_signed_callback() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, NO_POLLING).await;
    use_callback_worker(&mut env).await;
    let contract_id = env
        .contract(pending_input("called back", 500), json!({}))
        .await;
    let before = env.balances().await;
    pay_expecting_pending(&env, &contract_id).await;
    wait_for_state(&env, &contract_id, "settled").await;

    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 100)
        .await
        .unwrap();
    let delivered: Vec<_> = events
        .iter()
        .filter(|e| e.kind.as_str() == "deliverable_received")
        .collect();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].from_state, Some(ContractState::Pending));
    assert_eq!(
        delivered[0].actor.to_string(),
        format!("worker:{}", env.worker_id)
    );
    // No poll ran: the only poll job is still waiting for its first turn, or done.
    assert_eq!(
        count(
            &events
                .iter()
                .map(|e| e.kind.as_str().to_owned())
                .collect::<Vec<_>>(),
            "settlement_succeeded"
        ),
        1
    );
}

#[tokio::test]
async fn poll_and_callback_racing_settle_once() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST).await;
    use_callback_worker(&mut env).await;
    let before = env.balances().await;
    let mut contracts = Vec::new();
    for i in 0..3 {
        let contract_id = env
            .contract(pending_input(&format!("race {i}"), 400), json!({}))
            .await;
        pay_expecting_pending(&env, &contract_id).await;
        contracts.push(contract_id);
    }
    for contract_id in &contracts {
        wait_for_state(&env, contract_id, "settled").await;
        let kinds = env.event_kinds(contract_id).await;
        assert_eq!(count(&kinds, "deliverable_received"), 1, "{kinds:?}");
        assert_eq!(count(&kinds, "verification_started"), 1, "{kinds:?}");
        assert_eq!(count(&kinds, "settlement_succeeded"), 1, "{kinds:?}");
    }
    // Let late callbacks and polls arrive: they must change nothing.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after = env.balances().await;
    let three = price() * U256::from(3);
    assert_eq!(after.0, before.0 - three, "one transfer per contract");
    assert_eq!(after.1, before.1 + three);
    for contract_id in &contracts {
        assert_eq!(env.state(contract_id).await, "settled");
    }
}

#[tokio::test]
async fn a_pending_attempt_past_its_sla_fails_and_nothing_is_settled() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST).await;
    let contract_id = env
        .contract(
            pending_input("too slow", 60_000),
            json!({"sla": {"max_latency_ms": 1000}, "retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let before = env.balances().await;
    let answer = env
        .execute(
            &contract_id,
            Some(&hiregate_payments::encode_header(&payload)),
            None,
        )
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    wait_for_state(&env, &contract_id, "failed").await;

    let view = view(&env, &contract_id).await;
    assert_eq!(view["attempts"][0]["state"], "timed_out");
    assert_eq!(view["attempts"][0]["error"]["code"], "sla_exceeded");
    assert_eq!(view["payment"]["state"], "voided");
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(count(&kinds, "payment_voided"), 1);
    assert_eq!(count(&kinds, "settlement_succeeded"), 0);
    assert_eq!(env.balances().await, before, "nothing settled");
    assert!(
        !env.devnet
            .authorization_state(env.wallet.address(), nonce)
            .await
            .unwrap(),
        "the authorization was never used"
    );
    let again = env.execute(&contract_id, None, None).await;
    assert_eq!(again.status, 502);
    assert_eq!(again.code(), "worker_failed");
}

#[tokio::test]
async fn a_pending_attempt_past_its_sla_is_retried_without_new_payment_and_settled_once() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST).await;
    // The task needs 2.5 s; each attempt may take 1.5 s. Attempt 1 breaches, the gateway
    // retries on its own under the same authorization, attempt 2 sees the result.
    let contract_id = env
        .contract(
            pending_input("second time lucky", 2500),
            json!({"sla": {"max_latency_ms": 1500}, "retry_policy": {"max_attempts": 2}}),
        )
        .await;
    let before = env.balances().await;
    pay_expecting_pending(&env, &contract_id).await;
    wait_for_state(&env, &contract_id, "settled").await;

    let view = view(&env, &contract_id).await;
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(attempts[0]["error"]["code"], "sla_exceeded");
    assert_eq!(attempts[1]["state"], "completed");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "charged exactly once");
    assert_eq!(after.1, before.1 + price());
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(count(&kinds, "payment_verified"), 1);
    assert_eq!(count(&kinds, "forwarded"), 2);
    assert_eq!(count(&kinds, "settlement_succeeded"), 1);
}

#[tokio::test]
async fn cancel_while_pending_voids_the_authorization_and_moves_no_money() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST).await;
    let contract_id = env
        .contract(pending_input("never mind", 1500), json!({}))
        .await;
    let before = env.balances().await;
    pay_expecting_pending(&env, &contract_id).await;

    let cancel = |id: String| {
        let request = env
            .app
            .client
            .post(format!("{}/v1/contracts/{id}/cancel", env.app.address))
            .bearer_auth(&env.seeker_key);
        async move { crate::hire_env::answer(request.send().await.unwrap()).await }
    };
    let cancelled = cancel(contract_id.clone()).await;
    assert_eq!(cancelled.status, 200, "{:?}", cancelled.body);
    assert_eq!(cancelled.body["state"], "cancelled");
    assert_eq!(cancelled.body["payment"]["state"], "voided");
    assert_eq!(cancel(contract_id.clone()).await.status, 200, "idempotent");
    // The worker finishes after 1.5 s; its result must not revive the contract.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(env.state(&contract_id).await, "cancelled");
    assert_eq!(env.balances().await, before, "balances unchanged");
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(count(&kinds, "seeker_cancelled"), 1);
    assert_eq!(count(&kinds, "payment_voided"), 1);
    assert_eq!(count(&kinds, "worker_cancel_requested"), 1);
    assert_eq!(count(&kinds, "deliverable_received"), 0);
    let execute = env.execute(&contract_id, None, None).await;
    assert_eq!(execute.status, 409);
    assert_eq!(execute.code(), "contract_cancelled");

    // After delivery: refused with a stable code, nothing changes.
    let done = env
        .contract(json!({"text": "done", "mode": "ok"}), json!({}))
        .await;
    let challenge = env.challenge(&done).await;
    let paid = env
        .execute(&done, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let late = cancel(done.clone()).await;
    assert_eq!(late.status, 409);
    assert_eq!(late.code(), "contract_already_delivered");
    assert_eq!(env.state(&done).await, "settled");
    // Someone else's contract is not found.
    let (other_seeker, _) = env.app.create_key("seeker").await;
    let foreign = env
        .app
        .client
        .post(format!("{}/v1/contracts/{done}/cancel", env.app.address))
        .bearer_auth(&other_seeker)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 404);
}

#[tokio::test]
async fn callbacks_with_a_bad_signature_an_old_timestamp_or_a_replayed_id_are_refused() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, NO_POLLING).await;
    let secret = use_callback_worker(&mut env).await;
    // The worker itself would call back after a minute; this test speaks for it.
    let contract_id = env
        .contract(pending_input("forged?", 60_000), json!({}))
        .await;
    let before = env.balances().await;
    pay_expecting_pending(&env, &contract_id).await;
    let task_id = view(&env, &contract_id).await["attempts"][0]["worker_task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = serde_json::to_vec(&json!({
        "event": "task_completed",
        "status": "completed",
        "contract_id": contract_id,
        "task_id": task_id,
        "output": {"type": "json", "content": {"summary": "forged?", "confidence": 0.9}},
    }))
    .unwrap();
    let url = format!("{}/v1/callbacks/{contract_id}", env.app.address);
    let send = |headers: reqwest::header::HeaderMap, body: Vec<u8>| {
        let request = env
            .app
            .client
            .post(&url)
            .headers(headers)
            .header("content-type", "application/json")
            .body(body);
        async move { crate::hire_env::answer(request.send().await.unwrap()).await }
    };
    let events_before = env.event_kinds(&contract_id).await.len();

    let unsigned = send(reqwest::header::HeaderMap::new(), body.clone()).await;
    assert_eq!(unsigned.status, 401);
    assert_eq!(unsigned.code(), "callback_unsigned");
    let wrong_key = WebhookSecret::generate()
        .sign_headers("cb_forged", Utc::now(), &body)
        .unwrap();
    let forged = send(wrong_key, body.clone()).await;
    assert_eq!(forged.status, 401);
    assert_eq!(forged.code(), "callback_signature_invalid");
    let signed = secret
        .sign_headers("cb_tampered", Utc::now(), &body)
        .unwrap();
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let tampered = send(signed, tampered).await;
    assert_eq!(tampered.status, 401);
    assert_eq!(tampered.code(), "callback_signature_invalid");
    let old = secret
        .sign_headers("cb_old", Utc::now() - chrono::Duration::minutes(10), &body)
        .unwrap();
    let old = send(old, body.clone()).await;
    assert_eq!(old.status, 401);
    assert_eq!(old.code(), "callback_timestamp_out_of_window");
    assert_eq!(env.state(&contract_id).await, "pending", "no state change");
    assert_eq!(env.event_kinds(&contract_id).await.len(), events_before);

    // The genuine callback is applied once...
    let genuine = secret
        .sign_headers("cb_genuine", Utc::now(), &body)
        .unwrap();
    let accepted = send(genuine.clone(), body.clone()).await;
    assert_eq!(accepted.status, 200, "{:?}", accepted.body);
    wait_for_state(&env, &contract_id, "settled").await;
    let settled_events = env.event_kinds(&contract_id).await;
    // ...and its replay (same id, same signature, inside the window) is refused.
    let replayed = send(genuine, body.clone()).await;
    assert_eq!(replayed.status, 409);
    assert_eq!(replayed.code(), "callback_replayed");
    assert_eq!(env.event_kinds(&contract_id).await, settled_events);
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
}

#[tokio::test]
async fn a_rejected_contract_is_voided_before_its_authorization_lapses() {
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        4,
        &format!("{FAST}verification_budget_s = 1\n"),
    )
    .await;
    let contract_id = env
        .contract(
            json!({"text": "bad", "mode": "invalid"}),
            json!({"sla": {"max_latency_ms": 1000}, "retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let before = env.balances().await;
    let challenge = env.challenge(&contract_id).await;
    assert_eq!(challenge.accepts[0].max_timeout_seconds, 1 + 1 + 120);
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "rejected");
    // validBefore - settlement_margin_s is ~2 s after payment: the sweep records the void.
    wait_for_state(&env, &contract_id, "voided").await;
    let view = view(&env, &contract_id).await;
    assert_eq!(view["payment"]["state"], "voided");
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(count(&kinds, "void_recorded"), 1);
    assert_eq!(count(&kinds, "payment_voided"), 1);
    assert_eq!(env.balances().await, before);
}

#[tokio::test]
async fn a_gateway_restarted_while_work_is_pending_resumes_polling_and_settles_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/hiregate.db", dir.path().display());
    let key = format!(
        "[signing_key]\npath = \"{}\"\n",
        dir.path().join("gateway-key.json").display()
    );
    let settings = format!("{key}{FAST}");
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
    let contract_id = env
        .contract(pending_input("survive a restart", 2000), json!({}))
        .await;
    let before = env.balances().await;
    pay_expecting_pending(&env, &contract_id).await;

    // Stop the gateway while the job is pending; start another on the same database file.
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
    assert_eq!(
        hiregate_store::Store::connect(
            &hiregate_engine::settings::Settings::from_defaults_and(&format!(
                "[database]\nurl = \"{url}\""
            ))
            .unwrap()
            .database
        )
        .await
        .unwrap()
        .get_contract(&contract_id)
        .await
        .unwrap()
        .unwrap()
        .state,
        ContractState::Pending,
        "stopped before the work finished"
    );
    let app = spawn_app_on(
        TestDatabase::Shared(url),
        &chain_settings(&devnet, &settings),
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

    wait_for_state(&env, &contract_id, "settled").await;
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "one transfer");
    assert_eq!(after.1, before.1 + price());
    assert_eq!(env.worker.executions(), 1);
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(count(&kinds, "deliverable_received"), 1);
    assert_eq!(count(&kinds, "settlement_succeeded"), 1);
}
