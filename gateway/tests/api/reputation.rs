//! Reputation from verified, paid outcomes only, over real parts (anvil, devnet token, embedded
//! facilitator, the faulty example worker): a scripted mix of passed, rejected, failed, timed
//! out, disputed and self-dealt hires, its figures checked against a hand count, the snapshot
//! verified offline with the JWKS, and discovery's reputation sort and filters.

use std::collections::BTreeSet;

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use hiregate_contracts::{
    reputation::{ReputationSnapshot, Window, verify_reputation_snapshot},
    token::Jwks,
};
use hiregate_payments::{encode_header, sign_exact_payment};
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    helpers::{ADMIN_KEY, TestDatabase},
    hire_env::{HireEnv, PRICE, SEEKER_FUNDS, WorkerKind, hire_env, hire_listing, now},
};

async fn send(env: &HireEnv, method: Method, path: &str, key: &str, body: &Value) -> (u16, Value) {
    let response = env.app.send_json(method, path, Some(key), body).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A contract proposed by `seeker_key`, paid from `wallet`; returns its id and the execute status.
async fn hire(
    env: &HireEnv,
    seeker_key: &str,
    wallet: &PrivateKeySigner,
    input: Value,
    extra: Value,
) -> (String, u16) {
    let mut proposal = json!({
        "worker_id": env.worker_id,
        "task_type": "summarize",
        "input": input,
        "sla": {"max_latency_ms": 5000},
        "retry_policy": {"max_attempts": 1},
    });
    for (key, value) in extra.as_object().unwrap() {
        proposal[key] = value.clone();
    }
    let (status, body) = send(env, Method::POST, "/v1/contracts", seeker_key, &proposal).await;
    assert_eq!(status, 201, "{body}");
    let contract_id = body["contract_id"].as_str().unwrap().to_owned();
    let challenge = env
        .execute_as(seeker_key, &contract_id, None, None)
        .await
        .payment_required();
    let payload = sign_exact_payment(
        wallet,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now(),
    )
    .await
    .unwrap();
    let answer = env
        .execute_as(
            seeker_key,
            &contract_id,
            Some(&encode_header(&payload)),
            None,
        )
        .await;
    (contract_id, answer.status)
}

/// The worker's signed reputation snapshot, verified offline with the JWKS (and the token).
pub(crate) async fn reputation(env: &HireEnv, worker_id: &str) -> (String, ReputationSnapshot) {
    let response = env
        .app
        .get(&format!("/v1/workers/{worker_id}/reputation"), None)
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let jwks: Jwks = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let token = body["snapshot"].as_str().unwrap().to_owned();
    let snapshot = verify_reputation_snapshot(&token, &jwks).expect("verifies offline");
    assert_eq!(
        serde_json::to_value(&snapshot).unwrap(),
        body["reputation"],
        "the body states what the signed snapshot states"
    );
    (token, snapshot)
}

async fn discover(env: &HireEnv, query: &str) -> Vec<Value> {
    let response = env.app.get(&format!("/v1/workers?{query}"), None).await;
    assert_eq!(response.status(), 200, "{query}");
    let body: Value = response.json().await.unwrap();
    body["workers"].as_array().unwrap().clone()
}

async fn scripted_mix(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Faulty, 4, "").await;
    let seeker_a = env.seeker_key.clone();
    let wallet_a = env.wallet.clone();
    let (seeker_b, _) = env.app.create_key("seeker").await;
    let wallet_b = env
        .devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .unwrap();
    // The operator's second listing pays out to a wallet the operator also pays from.
    let own_wallet = env
        .devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .unwrap();
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&env.worker.endpoint, own_wallet.address(), &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201);
    let second_listing = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let worker_before = env.balance(env.pay_to).await;

    let ok = || json!({"text": "fine", "mode": "ok"});
    let (passed_a, status) = hire(&env, &seeker_a, &wallet_a, ok(), json!({})).await;
    assert_eq!(status, 200);
    let (passed_b, status) = hire(&env, &seeker_b, &wallet_b, ok(), json!({})).await;
    assert_eq!(status, 200);
    let invalid = || json!({"text": "bad", "mode": "invalid"});
    let (rejected, status) = hire(&env, &seeker_a, &wallet_a, invalid(), json!({})).await;
    assert_eq!(status, 422);
    let (failed, status) = hire(
        &env,
        &seeker_a,
        &wallet_a,
        json!({"text": "no", "mode": "fail"}),
        json!({}),
    )
    .await;
    assert_eq!(status, 502);
    let (timed_out, status) = hire(
        &env,
        &seeker_b,
        &wallet_b,
        json!({"text": "slow", "mode": "slow", "delay_ms": 3000}),
        json!({"sla": {"max_latency_ms": 500}}),
    )
    .await;
    assert_eq!(status, 504);
    let (disputed, status) = hire(&env, &seeker_a, &wallet_a, invalid(), json!({})).await;
    assert_eq!(status, 422);
    let (self_dealt, status) = hire(&env, &seeker_a, &own_wallet, ok(), json!({})).await;
    assert_eq!(status, 200);

    // The operator disputes one rejection; the arbiter voids it: a dispute lost.
    let (status, opened) = send(
        &env,
        Method::POST,
        &format!("/v1/contracts/{disputed}/disputes"),
        &env.operator_key,
        &json!({"reason": "the output is fine", "claim": {"note": "look again"}}),
    )
    .await;
    assert_eq!(status, 201, "{opened}");
    let (status, decided) = send(
        &env,
        Method::POST,
        &format!(
            "/v1/disputes/{}/decision",
            opened["dispute_id"].as_str().unwrap()
        ),
        ADMIN_KEY,
        &json!({"decision": "void", "reason": "the schema says no"}),
    )
    .await;
    assert_eq!(status, 200, "{decided}");

    // Three settlements reached the worker's payout address on chain, one of them paid by the
    // operator's own wallet; nothing else moved to it.
    assert_eq!(
        env.balance(env.pay_to).await,
        worker_before + U256::from(3 * PRICE)
    );

    let (_, snapshot) = reputation(&env, &env.worker_id).await;
    assert_eq!(snapshot.sub.as_str(), env.worker_id);
    let ids = |list: &[hiregate_contracts::id::ContractId]| -> BTreeSet<String> {
        list.iter().map(|id| id.as_str().to_owned()).collect()
    };
    let set =
        |list: &[&String]| -> BTreeSet<String> { list.iter().map(|s| (*s).clone()).collect() };
    for window in Window::ALL {
        let figures = snapshot.figures(window, None).unwrap();
        assert_eq!(snapshot.figures(window, Some("summarize")), Some(figures));
        // Six counted hires by two seekers; the self-dealt one counts nowhere.
        assert_eq!(figures.hires.value, 6, "{window}");
        assert_eq!(figures.hires.distinct_seekers, 2);
        assert_eq!(
            ids(&figures.hires.contracts),
            set(&[
                &passed_a, &passed_b, &rejected, &failed, &timed_out, &disputed
            ])
        );
        assert_eq!(figures.excluded_self_dealt, 1);
        assert!(!ids(&figures.hires.contracts).contains(&self_dealt));
        assert_eq!(figures.hires_settled.value, 2);
        assert_eq!(figures.hires_settled.distinct_seekers, 2);
        // Judged: two passes, two schema failures.
        assert_eq!((figures.pass_rate.hits, figures.pass_rate.sample), (2, 4));
        assert_eq!(figures.pass_rate.value, Some(0.5));
        assert_eq!(
            ids(&figures.pass_rate.contracts),
            set(&[&passed_a, &passed_b, &rejected, &disputed])
        );
        assert_eq!(figures.pass_rate.distinct_seekers, 2);
        assert_eq!(
            (figures.failure_rate.hits, figures.failure_rate.sample),
            (1, 6)
        );
        assert_eq!(
            (figures.timeout_rate.hits, figures.timeout_rate.sample),
            (1, 6)
        );
        assert_eq!(figures.disputes_opened.value, 1);
        assert_eq!(ids(&figures.disputes_opened.contracts), set(&[&disputed]));
        assert_eq!(figures.disputes_lost.value, 1);
        assert_eq!(figures.latency.sample, 4);
        let (p50, p95) = (
            figures.latency.p50_ms.unwrap(),
            figures.latency.p95_ms.unwrap(),
        );
        assert!(p50 <= p95);
        assert_eq!(figures.volume_settled.len(), 1);
        assert_eq!(
            figures.volume_settled[0].amount.units(),
            u128::from(2 * PRICE)
        );
        assert_eq!(
            figures.volume_settled[0].asset.to_lowercase(),
            env.devnet.token().to_string().to_lowercase()
        );
    }

    // Discovery: the worker with a record ranks first, and the filters read the same figures.
    let ranked = discover(&env, "sort=reputation&window=7d").await;
    let order: Vec<&str> = ranked.iter().map(|w| w["id"].as_str().unwrap()).collect();
    assert_eq!(order, [env.worker_id.as_str(), second_listing.as_str()]);
    assert_eq!(ranked[0]["reputation"]["pass_rate"], 0.5);
    assert_eq!(ranked[0]["reputation"]["hires_settled"], 2);
    assert_eq!(ranked[0]["reputation"]["distinct_seekers"], 2);
    assert_eq!(ranked[1]["reputation"]["hires"], 0);
    let kept = discover(&env, "min_pass_rate=0.5&task_type=summarize").await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["id"], env.worker_id);
    assert!(discover(&env, "min_pass_rate=0.51").await.is_empty());
    assert!(discover(&env, "max_p95_latency_ms=0").await.is_empty());
    assert_eq!(
        discover(&env, &format!("max_p95_latency_ms={}", 600_000))
            .await
            .len(),
        1
    );
    let page = discover(&env, "sort=reputation&limit=1").await;
    assert_eq!(page[0]["id"], env.worker_id);

    // The self-dealing listing's own record: the hire paid into it by its operator is excluded.
    let (_, own) = reputation(&env, &second_listing).await;
    let own_figures = own.figures(Window::AllTime, None).unwrap();
    assert_eq!(own_figures.hires.value, 0);
}

#[tokio::test]
async fn reputation_counts_only_verified_paid_outcomes_on_sqlite() {
    scripted_mix(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn reputation_counts_only_verified_paid_outcomes_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    scripted_mix(database).await;
}

#[tokio::test]
async fn reputation_bad_input_is_a_clear_error() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 1, "").await;
    for query in [
        "min_pass_rate=1.5",
        "min_pass_rate=-0.1",
        "min_pass_rate=abc",
        "window=90d",
        "sort=stars",
        "max_p95_latency_ms=-1",
    ] {
        let response = env.app.get(&format!("/v1/workers?{query}"), None).await;
        assert_eq!(response.status(), 400, "{query}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_query", "{query}");
    }
    for id in ["wk_01J9ZQ4X1V8E6W0M3C5T7B2N4K", "nope"] {
        let response = env
            .app
            .get(&format!("/v1/workers/{id}/reputation"), None)
            .await;
        assert_eq!(response.status(), 404, "{id}");
    }
    // A listing never hired has empty figures, still signed.
    let (_, snapshot) = reputation(&env, &env.worker_id).await;
    let all = snapshot.figures(Window::AllTime, None).unwrap();
    assert_eq!(all.hires.value, 0);
    assert_eq!(all.pass_rate.value, None);
    assert!(
        snapshot
            .figures(Window::AllTime, Some("summarize"))
            .is_none()
    );
}

/// Hires over the stable x402 resource have no API-key seeker (each offer mints its own seeker
/// id): the wallet that paid is the seeker, so three hires by one wallet are one seeker, not
/// three.
async fn one_wallet_is_one_seeker(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let path = format!("/x402/workers/{}/summarize", env.worker_id);
    for text in ["first", "second", "third"] {
        let input = HireEnv::input(text);
        let unpaid = env.app.send_json(Method::POST, &path, None, &input).await;
        assert_eq!(unpaid.status(), 402);
        let challenge = crate::hire_env::answer(unpaid).await.payment_required();
        let payment = env.pay(&challenge).await;
        let paid = env
            .app
            .client
            .post(format!("{}{path}", env.app.address))
            .header("PAYMENT-SIGNATURE", payment)
            .json(&input)
            .send()
            .await
            .unwrap();
        assert_eq!(paid.status(), 200, "{}", paid.text().await.unwrap());
    }
    let (_, snapshot) = reputation(&env, &env.worker_id).await;
    for window in Window::ALL {
        let figures = snapshot.figures(window, None).unwrap();
        assert_eq!(figures.hires.value, 3, "{window}");
        assert_eq!(figures.hires.distinct_seekers, 1, "one wallet, {window}");
        assert_eq!(figures.hires_settled.distinct_seekers, 1, "{window}");
    }
}

#[tokio::test]
async fn one_wallet_hiring_without_an_account_counts_as_one_seeker() {
    one_wallet_is_one_seeker(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn one_wallet_hiring_without_an_account_counts_as_one_seeker_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    one_wallet_is_one_seeker(database).await;
}
