//! No money taken for a listing that cannot work: a listing the health loop marked unhealthy
//! (here: its worker's `/capabilities` stopped listing the task type) refuses payment before
//! anything is verified, stored or locked (503 `worker_unavailable` + `Retry-After`); a retired
//! listing or a withdrawn task type refuses it too (409). A paid contract's next attempt waits
//! for an unhealthy worker within the SLA, then ends without calling it and releases the
//! payment when no attempt is left.
//!
//! Real parts throughout: anvil, the devnet token and escrow, the embedded facilitator, the
//! gateway, and worker-sdk workers. A listing's health changes the way it does in production:
//! the worker at its address is replaced by one whose `/capabilities` no longer list the task
//! type, and the health loop (probing every 100 ms here) marks it.

use std::{net::SocketAddr, time::Duration};

use hiregate_payments::encode_header;
use hiregate_store::states::PaymentState;
use hiregate_worker_sdk::{
    GatewayKeys, WorkerBuilder,
    example_workers::{
        ECHO, FaultyBehaviour, FaultyMode, echo_builder, echo_handler, faulty_builder,
        faulty_handler,
    },
};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    escrow_env::{escrow_env, escrowed_payment, price, token_store},
    helpers::{TestDatabase, eventually},
    hire_env::{HireEnv, WorkerKind, hire_env, serve_worker, start_worker},
};

/// Probes every 100 ms; one miss marks a listing unhealthy, one pass heals it.
const FAST_HEALTH: &str = "[health]\ninterval_ms = 100\nmiss_threshold = 1\nprobe_timeout_ms = 500";

/// What the worker at the listing's address offers.
#[derive(Clone, Copy)]
enum Offers {
    /// `summarize` and `echo`, answering as the echo worker.
    Echo,
    /// `summarize` and `echo`, answering as the faulty worker (input `mode`).
    Faulty,
    /// `echo` only: the listing's `summarize` is gone from its `/capabilities`.
    EchoOnly,
}

/// Replace the worker serving `env`'s listing by one that offers `offers`, at the same address.
async fn replace_worker(env: &mut HireEnv, offers: Offers) {
    let address: SocketAddr = env
        .worker
        .endpoint
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let stand_in = start_worker(WorkerKind::Echo, &env.app.address).await;
    std::mem::replace(&mut env.worker, stand_in)
        .shut_down()
        .await;
    let keys = GatewayKeys::remote(
        format!("{}/.well-known/jwks.json", env.app.address)
            .parse()
            .unwrap(),
    );
    let worker = match offers {
        Offers::Echo => echo_builder().gateway_keys(keys).build(echo_handler()),
        Offers::Faulty => faulty_builder()
            .gateway_keys(keys)
            .build(faulty_handler(FaultyBehaviour::new(FaultyMode::Ok))),
        Offers::EchoOnly => WorkerBuilder::new("echo-only", "1.0.0")
            .task_type(ECHO)
            .gateway_keys(keys)
            .build(echo_handler()),
    }
    .unwrap();
    env.worker = serve_worker(worker, address).await;
}

/// Wait until the health loop marked the listing `health`; for `unhealthy`, from a probe that
/// found `summarize` missing from `/capabilities`.
async fn health_becomes(env: &HireEnv, health: &str) {
    health_becomes_probed(env, health, false).await;
}

/// [`health_becomes`]; with `probe_now`, the listing is made due for its next probe at every
/// look (for gateways on the default 30 s probe interval and 3-miss threshold).
async fn health_becomes_probed(env: &HireEnv, health: &str, probe_now: bool) {
    eventually(
        Duration::from_secs(20),
        &format!("the listing marked {health}"),
        || async {
            if probe_now {
                // Only the probe's schedule changes: the health loop still probes and decides.
                crate::helpers::tamper(
                    &env.app.database_url,
                    &format!(
                        "update worker set next_probe_at = 0 where worker_id = '{}'",
                        env.worker_id
                    ),
                )
                .await;
            }
            let view = env.app.owner_view(&env.operator_key, &env.worker_id).await;
            let capabilities_lost = view["last_probe_error"]
                .as_str()
                .is_some_and(|e| e.contains("does not list summarize"));
            (view["health"] == health && (health == "healthy" || capabilities_lost)).then_some(())
        },
    )
    .await;
}

async fn payment_stored(env: &HireEnv, contract_id: &str) -> bool {
    env.app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .is_some()
}

async fn unhealthy_listing_takes_no_payment(database: TestDatabase) {
    let mut env = hire_env(database, WorkerKind::Echo, 4, FAST_HEALTH).await;
    let contract_id = env.contract(HireEnv::input("paid later"), json!({})).await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    replace_worker(&mut env, Offers::EchoOnly).await;
    health_becomes(&env, "unhealthy").await;
    let before = env.balances().await;

    let refused = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(refused.code(), "worker_unavailable");
    let retry_after: u64 = refused
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    assert_eq!(
        refused.body["error"]["details"]["retry_after_s"],
        retry_after
    );
    assert_eq!(refused.body["error"]["details"]["health"], "unhealthy");
    // Nothing was stored, held or run.
    assert_eq!(env.state(&contract_id).await, "offered");
    assert!(!payment_stored(&env, &contract_id).await);
    assert!(
        !env.event_kinds(&contract_id)
            .await
            .iter()
            .any(|k| k == "payment_verified"),
    );
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(env.balances().await, before);

    // The worker lists the task type again: the same signed payment is taken now.
    replace_worker(&mut env, Offers::Echo).await;
    health_becomes(&env, "healthy").await;
    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert!(paid.payment_response().success);
    assert_eq!(env.state(&contract_id).await, "settled");
    assert_eq!(env.worker.executions(), 1);
}

#[tokio::test]
async fn an_unhealthy_listing_takes_no_payment() {
    unhealthy_listing_takes_no_payment(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn an_unhealthy_listing_takes_no_payment_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    unhealthy_listing_takes_no_payment(database).await;
}

#[tokio::test]
async fn a_retired_listing_or_a_withdrawn_task_type_takes_no_payment() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let before = env.balances().await;

    // The operator stops offering `summarize` (its worker still serves it).
    let withdrawn = env.contract(HireEnv::input("withdrawn"), json!({})).await;
    let payment = env.pay(&env.challenge(&withdrawn).await).await;
    let patched = env
        .app
        .send_json(
            Method::PATCH,
            &format!("/v1/workers/{}", env.worker_id),
            Some(&env.operator_key),
            &json!({"tasks": {"echo": {"price": "1000", "output_schema": {"type": "object"}}}}),
        )
        .await;
    assert_eq!(patched.status(), 200, "{}", patched.text().await.unwrap());
    let refused = env.execute(&withdrawn, Some(&payment), None).await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.code(), "task_type_not_offered");
    assert!(refused.header("retry-after").is_none());
    assert_eq!(env.state(&withdrawn).await, "offered");
    assert!(!payment_stored(&env, &withdrawn).await);

    // The operator offers it again, then retires the listing.
    let restored = env
        .app
        .send_json(
            Method::PATCH,
            &format!("/v1/workers/{}", env.worker_id),
            Some(&env.operator_key),
            &json!({"tasks": {"summarize": {
                "price": crate::hire_env::PRICE.to_string(),
                "output_schema": hiregate_worker_sdk::example_workers::summary_output_schema(),
            }}}),
        )
        .await;
    assert_eq!(restored.status(), 200);
    let retired = env.contract(HireEnv::input("retired"), json!({})).await;
    let payment = env.pay(&env.challenge(&retired).await).await;
    let deleted = env
        .app
        .client
        .delete(format!("{}/v1/workers/{}", env.app.address, env.worker_id))
        .bearer_auth(&env.operator_key)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let refused = env.execute(&retired, Some(&payment), None).await;
    assert_eq!(refused.status, 409, "{:?}", refused.body);
    assert_eq!(refused.code(), "worker_retired");
    assert_eq!(env.state(&retired).await, "offered");
    assert!(!payment_stored(&env, &retired).await);

    assert_eq!(env.worker.executions(), 0);
    assert_eq!(env.balances().await, before);
}

#[tokio::test]
async fn an_escrowed_payment_is_refused_before_anything_is_locked() {
    let escrow = escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let operator = escrow.operator;
    let mut env = escrow.env;
    let contract_id = env.contract(HireEnv::input("escrowed"), json!({})).await;
    let payload = escrowed_payment(&env, &contract_id).await;
    replace_worker(&mut env, Offers::EchoOnly).await;
    health_becomes_probed(&env, "unhealthy", true).await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;
    let store = token_store(&env, operator).await;

    let refused = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(refused.status, 503, "{:?}", refused.body);
    assert_eq!(refused.code(), "worker_unavailable");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(env.state(&contract_id).await, "offered");
    assert!(!payment_stored(&env, &contract_id).await);
    let kinds = env.event_kinds(&contract_id).await;
    assert!(
        !kinds.iter().any(|k| k == "authorization_sent"),
        "{kinds:?}"
    );
    assert_eq!(env.balance(payer).await, payer_before);
    assert_eq!(env.balance(store).await, alloy::primitives::U256::ZERO);

    // Healthy again: the same payment locks and the hire settles.
    replace_worker(&mut env, Offers::Echo).await;
    health_becomes_probed(&env, "healthy", true).await;
    let paid = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(env.state(&contract_id).await, "settled");
    assert_eq!(env.balance(payer).await, payer_before - price());
}

/// A `flaky` contract (attempt 1 fails, attempt 2 delivers) with two attempts, paid; its first
/// attempt failed, so it waits `paid` for the seeker's retry. Then the worker stops listing
/// the task type and the listing is marked unhealthy.
async fn paid_retry_facing_an_unhealthy_worker(sla_ms: u64) -> (HireEnv, String) {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST_HEALTH).await;
    let contract_id = env
        .contract(
            json!({"text": "second time lucky", "mode": "flaky"}),
            json!({"sla": {"max_latency_ms": sla_ms}, "retry_policy": {"max_attempts": 2}}),
        )
        .await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    let first = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(first.status, 502, "{:?}", first.body);
    assert_eq!(first.body["error"]["details"]["retry_allowed"], true);
    assert_eq!(env.state(&contract_id).await, "paid");
    replace_worker(&mut env, Offers::EchoOnly).await;
    health_becomes(&env, "unhealthy").await;
    (env, contract_id)
}

#[tokio::test]
async fn a_paid_retry_waits_for_an_unhealthy_worker_then_releases_the_payment() {
    let (env, contract_id) = paid_retry_facing_an_unhealthy_worker(1500).await;
    let before = env.balances().await;

    let answer = env.execute(&contract_id, None, None).await;
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(answer.body["status"], "failed");
    assert_eq!(answer.body["error"]["code"], "worker_unavailable");
    assert_eq!(answer.body["error"]["details"]["retry_allowed"], false);
    assert_eq!(answer.body["error"]["details"]["state"], "failed");
    // The contract ended, its payment released, and the unhealthy worker was never called.
    assert_eq!(env.state(&contract_id).await, "failed");
    let payment = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.state, PaymentState::Voided);
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(env.balances().await, before);
    let attempts = env.app.store.list_attempts(&contract_id).await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        attempts[1].error.as_ref().map(|e| e["code"].clone()),
        Some(json!("worker_unavailable"))
    );
    let kinds = env.event_kinds(&contract_id).await;
    let waited = kinds.iter().position(|k| k == "waiting_for_worker");
    let voided = kinds.iter().position(|k| k == "payment_voided");
    assert!(waited.is_some() && voided > waited, "{kinds:?}");

    // A repeated execute answers the stored failure; nothing else happens.
    let again = env.execute(&contract_id, None, None).await;
    assert_eq!(again.status, 502, "{:?}", again.body);
    assert_eq!(
        again.body["error"]["details"]["worker_error"]["code"],
        "worker_unavailable"
    );
    assert_eq!(env.worker.executions(), 0);
}

#[tokio::test]
async fn a_paid_retry_is_forwarded_once_the_worker_recovers_within_the_sla() {
    let (mut env, contract_id) = paid_retry_facing_an_unhealthy_worker(20_000).await;
    let gateway = env.app.address.clone();
    let seeker_key = env.seeker_key.clone();
    let client = env.app.client.clone();
    let retry = tokio::spawn({
        let contract_id = contract_id.clone();
        async move {
            client
                .post(format!("{gateway}/v1/contracts/{contract_id}/execute"))
                .bearer_auth(seeker_key)
                .timeout(Duration::from_secs(60))
                .send()
                .await
                .unwrap()
        }
    });
    eventually(
        Duration::from_secs(10),
        "the retry waits for the worker",
        || async {
            env.event_kinds(&contract_id)
                .await
                .iter()
                .any(|k| k == "waiting_for_worker")
                .then_some(())
        },
    )
    .await;
    assert_eq!(env.state(&contract_id).await, "paid");
    replace_worker(&mut env, Offers::Faulty).await;

    let answer = crate::hire_env::answer(retry.await.unwrap()).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    assert_eq!(env.state(&contract_id).await, "settled");
    assert_eq!(
        env.worker.executions(),
        1,
        "the recovered worker ran attempt 2"
    );
    let contract = env
        .app
        .store
        .get_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(contract.attempts_used, 2);
}

#[tokio::test]
async fn crash_recovery_waits_apart_for_an_unhealthy_worker_and_releases_the_payment() {
    let (env, contract_id) = paid_retry_facing_an_unhealthy_worker(1000).await;
    let before = env.balances().await;
    // The seeker never comes back. A second gateway instance on the same database, whose crash
    // recovery looks for stale contracts every 100 ms, takes the paid contract over: its round
    // hands the wait to a task of its own, which ends the attempt once the SLA is over.
    let _recovering = crate::helpers::spawn_app_on(
        TestDatabase::Shared(env.app.database_url.clone()),
        &crate::hire_env::chain_settings(
            &env.devnet,
            &format!("{FAST_HEALTH}\n[contracts]\nrecovery_grace_ms = 200\njobs_interval_ms = 100"),
        ),
    )
    .await;
    // Two commits, the contract's `failed` and then its payment's release: wait for both.
    eventually(
        Duration::from_secs(30),
        "the contract failed and its payment was released",
        || async {
            (env.state(&contract_id).await == "failed"
                && env.payment(&contract_id).await.state == PaymentState::Voided)
                .then_some(())
        },
    )
    .await;
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(env.balances().await, before);
    let attempts = env.app.store.list_attempts(&contract_id).await.unwrap();
    assert_eq!(
        attempts
            .last()
            .and_then(|a| a.error.as_ref())
            .map(|e| e["code"].clone()),
        Some(json!("worker_unavailable"))
    );
    let kinds = env.event_kinds(&contract_id).await;
    for kind in ["recovery_takeover", "waiting_for_worker", "payment_voided"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind} missing: {kinds:?}");
    }
}
