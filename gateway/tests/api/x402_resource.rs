//! The stable x402 resource of a listing's task type (`POST /x402/workers/{id}/{task}`) on a
//! real anvil chain with real signatures: the unpaid 402 carries a gateway-signed offer and
//! stores nothing; the paid call makes one contract from it and answers the verified deliverable
//! with `PAYMENT-RESPONSE` and a capability token for the contract's read routes; a payment for
//! one listing's offer pays no other; a rejected deliverable is neither paid nor shown; the
//! discovery list names each listing's task types.

use alloy::primitives::U256;
use hiregate_payments::{
    AuthCaptureSignOptions, PaymentRequired, encode_header, sign_auth_capture_payment,
};
use serde_json::{Value, json};
use sqlx::{Connection as _, Row as _};

use crate::{
    escrow_env::escrow_env,
    helpers::{ADMIN_KEY, TestDatabase},
    hire_env::{Answer, HireEnv, PRICE, WorkerKind, answer, hire_env, now},
};

fn resource_path(worker_id: &str) -> String {
    format!("/x402/workers/{worker_id}/summarize")
}

/// `POST` the stable resource of `worker_id` with `body` (raw JSON text) and an optional payment.
async fn call_raw(env: &HireEnv, worker_id: &str, body: &str, payment: Option<&str>) -> Answer {
    let mut request = env
        .app
        .client
        .post(format!("{}{}", env.app.address, resource_path(worker_id)))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .timeout(std::time::Duration::from_secs(60));
    if let Some(payment) = payment {
        request = request.header("PAYMENT-SIGNATURE", payment);
    }
    answer(request.send().await.expect("sent")).await
}

pub(crate) async fn call(
    env: &HireEnv,
    worker_id: &str,
    body: &Value,
    payment: Option<&str>,
) -> Answer {
    call_raw(env, worker_id, &body.to_string(), payment).await
}

/// The 402 of an unpaid call.
pub(crate) async fn offer(env: &HireEnv, worker_id: &str, body: &Value) -> PaymentRequired {
    let unpaid = call(env, worker_id, body, None).await;
    assert_eq!(unpaid.status, 402, "{:?}", unpaid.body);
    unpaid.payment_required()
}

/// The gateway's records equal the chain's transfers (`GET /v1/admin/reconcile`).
pub(crate) async fn assert_reconciled(env: &HireEnv) {
    let response = env.app.get("/v1/admin/reconcile", Some(ADMIN_KEY)).await;
    assert_eq!(response.status(), 200);
    let report: Value = response.json().await.unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
}

/// Rows per table, except the health prober's history (it runs in the background).
pub(crate) async fn row_counts(database_url: &str) -> Vec<(String, i64)> {
    let tables_sql = if database_url.starts_with("sqlite:") {
        "select name from sqlite_master where type = 'table' and name not like 'sqlite_%' order by name"
    } else {
        "select tablename::text as name from pg_tables where schemaname = current_schema() order by tablename"
    };
    let mut counts = Vec::new();
    macro_rules! count_all {
        ($conn:expr) => {{
            let names: Vec<String> = sqlx::query(tables_sql)
                .fetch_all(&mut $conn)
                .await
                .unwrap()
                .iter()
                .map(|row| row.get::<String, _>("name"))
                .collect();
            for name in names {
                if name == "worker_probe" || name.starts_with("_sqlx") {
                    continue;
                }
                let count: i64 = sqlx::query_scalar(&format!("select count(*) from {name}"))
                    .fetch_one(&mut $conn)
                    .await
                    .unwrap();
                counts.push((name, count));
            }
        }};
    }
    if database_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(database_url).await.unwrap();
        count_all!(conn);
    } else {
        let mut conn = sqlx::PgConnection::connect(database_url).await.unwrap();
        count_all!(conn);
    }
    counts
}

async fn unpaid_calls_store_nothing(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("offer me");
    let before = row_counts(&env.app.database_url).await;
    assert!(before.iter().any(|(name, _)| name == "contract"));

    let unpaid = call(&env, &env.worker_id, &input, None).await;
    assert_eq!(unpaid.status, 402, "{:?}", unpaid.body);
    assert_eq!(unpaid.code(), "payment_required");
    assert_eq!(unpaid.header("cache-control"), Some("no-store"));
    let challenge = unpaid.payment_required();
    assert_eq!(
        challenge.resource.url,
        format!("{}{}", env.app.address, resource_path(&env.worker_id))
    );
    let requirements = &challenge.accepts[0];
    assert_eq!(requirements.scheme, "exact");
    assert_eq!(requirements.amount.get(), U256::from(PRICE));
    assert_eq!(
        requirements.pay_to.to_lowercase(),
        env.pay_to.to_checksum(None).to_lowercase()
    );
    let offer = &requirements.extra["hiregate"];
    assert_eq!(offer["resource"], challenge.resource.url.as_str());
    assert!(offer["terms_hash"].as_str().unwrap().starts_with("sha256:"));
    assert!(offer["expires_at"].is_string());
    assert!(offer["signature"]["signature"].is_string());
    assert_eq!(offer["terms"]["worker"]["id"], env.worker_id.as_str());
    assert_eq!(offer["terms"]["task"]["task_type"], "summarize");
    // The input travels as the body, bound by its digest in the signed terms.
    assert!(offer["terms"]["task"]["input_digest"].is_string());
    assert!(offer["terms"]["task"].get("input").is_none());
    // The worker's endpoint stays the gateway's business (terms_hash still covers it).
    assert!(offer["terms"]["worker"].get("endpoint").is_none());
    assert!(!unpaid.header("payment-required").unwrap().is_empty());
    // The token's EIP-712 domain is there for the client, as in every exact offer.
    assert!(requirements.extra["name"].is_string());

    // A flood of unpaid calls stores nothing: every table holds what it held.
    let env = &env;
    let calls = (0..100).map(|i| {
        let input = HireEnv::input(&format!("flood {i}"));
        async move { call(env, &env.worker_id, &input, None).await.status }
    });
    let statuses = futures::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 402), "{statuses:?}");
    assert_eq!(row_counts(&env.app.database_url).await, before);
    assert_eq!(env.worker.executions(), 0);
}

#[tokio::test]
async fn unpaid_calls_offer_a_signed_402_and_store_nothing() {
    unpaid_calls_store_nothing(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn unpaid_calls_offer_a_signed_402_and_store_nothing_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    unpaid_calls_store_nothing(database).await;
}

#[tokio::test]
async fn bad_input_is_400_with_a_stable_code_and_unknown_listings_404() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let mut listing = env.another_listing();
    listing["input_schema"] = json!({
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string", "maxLength": 100}},
    });
    let strict = env.register(&listing).await;

    let wrong = call(&env, &strict, &json!({"text": 7}), None).await;
    assert_eq!(wrong.status, 400, "{:?}", wrong.body);
    assert_eq!(wrong.code(), "input_schema_violation");
    assert_eq!(
        wrong.body["error"]["details"]["violations"][0]["instance_path"],
        "/text"
    );
    assert!(wrong.header("payment-required").is_none());

    let malformed = call_raw(&env, &strict, "{not json", None).await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.code(), "malformed_json");

    let nobody = call(
        &env,
        "wk_01J00000000000000000000000",
        &HireEnv::input("x"),
        None,
    )
    .await;
    assert_eq!(nobody.status, 404, "{:?}", nobody.body);
    let garbage = call(&env, "not-a-worker", &HireEnv::input("x"), None).await;
    assert_eq!(garbage.status, 404);

    let untaught = env
        .app
        .client
        .post(format!(
            "{}/x402/workers/{}/translate",
            env.app.address, env.worker_id
        ))
        .json(&HireEnv::input("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(untaught.status(), 422);
}

async fn paid_call(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("pay me from a wallet");
    let challenge = offer(&env, &env.worker_id, &input).await;
    let payment = env.pay(&challenge).await;
    let before = env.balances().await;

    let paid = call(&env, &env.worker_id, &input, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let settlement = paid.payment_response();
    assert!(settlement.success);
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "the payer paid once");
    assert_eq!(after.1, before.1 + U256::from(PRICE), "the worker was paid");
    assert_eq!(paid.body["status"], "completed");
    assert!(!paid.body["output"].is_null(), "the verified deliverable");
    let contract_id = paid.body["contract_id"].as_str().unwrap().to_owned();
    assert_eq!(
        paid.header("x-hiregate-contract-id"),
        Some(contract_id.as_str())
    );
    assert_eq!(env.state(&contract_id).await, "settled");
    let token = paid.body["access"]["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("hg_cap_"));
    assert_eq!(paid.body["access"]["token_type"], "Bearer");
    let links = &paid.body["links"];

    // The payer's wallet is the seeker: it paid, and the contract names no API key.
    let stored = env
        .app
        .store
        .get_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    let payment_row = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment_row.payer, env.wallet.address());
    assert!(stored.seeker_id.as_str().starts_with("skr_"));
    // Stored hashed: the token itself is nowhere in the database.
    let cap_rows = row_counts(&env.app.database_url).await;
    assert!(cap_rows.contains(&("contract_capability".to_owned(), 1)));

    // The token reads the contract, its receipt and its event log...
    let view = env
        .app
        .get(
            links["contract"]
                .as_str()
                .unwrap()
                .trim_start_matches(&env.app.address),
            Some(&token),
        )
        .await;
    assert_eq!(view.status(), 200);
    let view: Value = view.json().await.unwrap();
    assert_eq!(view["state"], "settled");
    assert_eq!(
        view["payment"]["payer"],
        env.wallet.address().to_checksum(None)
    );
    let receipt = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/receipt"),
            Some(&token),
        )
        .await;
    assert_eq!(receipt.status(), 200);
    let log = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/events.jsonl"),
            Some(&token),
        )
        .await;
    assert_eq!(log.status(), 200);
    // ...and nothing else: a wrong token is 401 like a wrong key, another seeker's key and
    // this token on another contract are 404.
    let forged = format!("hg_cap_{}", "A".repeat(86));
    for path in [
        format!("/v1/contracts/{contract_id}"),
        format!("/v1/contracts/{contract_id}/receipt"),
        format!("/v1/contracts/{contract_id}/events.jsonl"),
        format!("/v1/contracts/{contract_id}/events"),
    ] {
        let response = env.app.get(&path, Some(&forged)).await;
        assert_eq!(response.status(), 401, "{path}");
        let response = env.app.get(&path, Some(&env.seeker_key)).await;
        assert_eq!(response.status(), 404, "{path}");
    }
    let other = env
        .contract(HireEnv::input("someone else's"), json!({}))
        .await;
    for path in [
        format!("/v1/contracts/{other}"),
        format!("/v1/contracts/{other}/receipt"),
        format!("/v1/contracts/{other}/events.jsonl"),
    ] {
        let response = env.app.get(&path, Some(&token)).await;
        assert_eq!(response.status(), 404, "{path}");
    }
    // The token makes no contracts.
    let propose = env
        .app
        .send_json(
            reqwest::Method::POST,
            "/v1/contracts",
            Some(&token),
            &json!({"worker_id": env.worker_id, "task_type": "summarize", "input": input}),
        )
        .await;
    assert_eq!(propose.status(), 401);

    // The same paid request again: the stored answer, the same token, nothing run again.
    let again = call(&env, &env.worker_id, &input, Some(&payment)).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body["access"]["token"], token.as_str());
    assert_eq!(again.payment_response().transaction, settlement.transaction);
    assert_eq!(env.worker.executions(), 1);
    assert_eq!(env.balances().await, after);
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn a_paid_call_settles_and_answers_the_deliverable_with_a_capability_token() {
    paid_call(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_paid_call_settles_and_answers_the_deliverable_with_a_capability_token_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    paid_call(database).await;
}

async fn duplicates(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("eight at once");
    let challenge = offer(&env, &env.worker_id, &input).await;
    let payment = env.pay(&challenge).await;
    let before = env.balances().await;
    let counts_before = row_counts(&env.app.database_url).await;
    let answers = futures::future::join_all(
        (0..8).map(|_| call(&env, &env.worker_id, &input, Some(&payment))),
    )
    .await;
    let mut transactions = std::collections::BTreeSet::new();
    let mut contracts = std::collections::BTreeSet::new();
    for answer in &answers {
        assert!(
            answer.status == 200 || answer.status == 202,
            "{} {:?}",
            answer.status,
            answer.body
        );
        contracts.insert(answer.body["contract_id"].as_str().unwrap().to_owned());
        if answer.status == 200 {
            transactions.insert(answer.payment_response().transaction);
        }
    }
    assert_eq!(contracts.len(), 1, "one contract");
    assert_eq!(transactions.len(), 1, "one settlement transaction");
    assert_eq!(env.worker.executions(), 1, "one execution");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "one transfer");
    let counts = row_counts(&env.app.database_url).await;
    let rows = |counts: &[(String, i64)], table: &str| {
        counts
            .iter()
            .find(|(name, _)| name == table)
            .map(|(_, n)| *n)
    };
    assert_eq!(
        rows(&counts, "contract").unwrap(),
        rows(&counts_before, "contract").unwrap() + 1
    );
    assert_eq!(
        rows(&counts, "payment").unwrap(),
        rows(&counts_before, "payment").unwrap() + 1
    );
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn eight_identical_paid_calls_make_one_contract_one_execution_one_transfer() {
    duplicates(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn eight_identical_paid_calls_make_one_contract_one_execution_one_transfer_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    duplicates(database).await;
}

#[tokio::test]
async fn a_payment_for_one_listings_offer_pays_no_other() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    // A second listing with the same price and payout: only the offer tells them apart.
    let other = env.register(&env.another_listing()).await;
    let input = HireEnv::input("for the first listing");
    let challenge = offer(&env, &env.worker_id, &input).await;
    let payment = env.pay(&challenge).await;
    let before = env.balances().await;
    let counts = row_counts(&env.app.database_url).await;

    let elsewhere = call(&env, &other, &input, Some(&payment)).await;
    assert_eq!(elsewhere.status, 402, "{:?}", elsewhere.body);
    assert_eq!(elsewhere.code(), "payment_mismatch");
    let refused = elsewhere.payment_required();
    assert!(
        refused
            .error
            .unwrap()
            .contains("accepted_requirements_mismatch")
    );
    assert_eq!(env.balances().await, before);
    assert_eq!(row_counts(&env.app.database_url).await, counts);

    // A forged offer (terms edited after signing) pays nothing either.
    let mut forged = env.sign(&challenge).await;
    forged.accepted.extra.get_mut("hiregate").unwrap()["terms"]["acceptance_window_s"] = json!(1);
    let tampered = call(&env, &env.worker_id, &input, Some(&encode_header(&forged))).await;
    assert_eq!(tampered.status, 402, "{:?}", tampered.body);
    assert_eq!(tampered.code(), "payment_mismatch");
    // No offer at all (a payment for the contract API's 402 shape) is refused the same way.
    let mut bare = env.sign(&challenge).await;
    bare.accepted.extra.remove("hiregate");
    let missing = call(&env, &env.worker_id, &input, Some(&encode_header(&bare))).await;
    assert_eq!(missing.status, 402);
    assert_eq!(missing.code(), "payment_mismatch");
    // A forged signature (a free offer, a made-up payment) makes no contract.
    let mut unsigned = env.sign(&challenge).await;
    unsigned.payload["signature"] = json!(format!("0x{}", "11".repeat(65)));
    let forged_payment = call(
        &env,
        &env.worker_id,
        &input,
        Some(&encode_header(&unsigned)),
    )
    .await;
    assert_eq!(forged_payment.status, 402, "{:?}", forged_payment.body);
    assert_eq!(forged_payment.code(), "payment_invalid");
    assert_eq!(row_counts(&env.app.database_url).await, counts);
    // Another body than the one offered is a conflict, not a payment.
    let changed = call(
        &env,
        &env.worker_id,
        &HireEnv::input("something else"),
        Some(&payment),
    )
    .await;
    assert_eq!(changed.status, 409, "{:?}", changed.body);
    assert_eq!(changed.code(), "input_mismatch");
    assert_eq!(env.balances().await, before);
    assert_eq!(row_counts(&env.app.database_url).await, counts);
    assert_eq!(env.worker.executions(), 0);

    // The payment still pays what it was signed for.
    let paid = call(&env, &env.worker_id, &input, Some(&payment)).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
}

#[tokio::test]
async fn a_rejected_deliverable_is_neither_paid_nor_shown() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let input = json!({"text": "x", "mode": "invalid"});
    let challenge = offer(&env, &env.worker_id, &input).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let before = env.balances().await;
    let rejected = call(&env, &env.worker_id, &input, Some(&encode_header(&payload))).await;
    assert_eq!(rejected.status, 422, "{:?}", rejected.body);
    assert_eq!(rejected.code(), "verification_failed");
    assert!(rejected.header("payment-response").is_none());
    assert!(rejected.body.get("output").is_none() && rejected.body.get("deliverable").is_none());
    let contract_id = rejected.body["contract_id"].as_str().unwrap().to_owned();
    assert_eq!(env.state(&contract_id).await, "rejected");
    assert_eq!(env.balances().await, before, "nothing settled");
    assert!(
        !env.devnet
            .authorization_state(env.wallet.address(), nonce)
            .await
            .unwrap()
    );
    assert_reconciled(&env).await;
    // The token shows the verdict, never the work.
    let token = rejected.body["access"]["token"].as_str().unwrap();
    let view: Value = env
        .app
        .get(&format!("/v1/contracts/{contract_id}"), Some(token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "rejected");
    assert!(view["deliverable"]["content"].is_null());
}

#[tokio::test]
async fn long_work_answers_202_with_a_location_the_token_reads() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let input = json!({"text": "async", "mode": "pending", "delay_ms": 60000});
    let challenge = offer(&env, &env.worker_id, &input).await;
    let payment = env.pay(&challenge).await;
    let pending = call(&env, &env.worker_id, &input, Some(&payment)).await;
    assert_eq!(pending.status, 202, "{:?}", pending.body);
    let location = pending.header("location").unwrap().to_owned();
    let contract_id = pending.body["contract_id"].as_str().unwrap();
    assert_eq!(
        location,
        format!("{}/v1/contracts/{contract_id}", env.app.address)
    );
    let token = pending.body["access"]["token"].as_str().unwrap();
    let poll = env
        .app
        .client
        .get(&location)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(poll.status(), 200);
    let view: Value = poll.json().await.unwrap();
    assert_eq!(view["state"], "pending");
    let stranger = env.app.client.get(&location).send().await.unwrap();
    assert_eq!(stranger.status(), 401);
}

#[tokio::test]
async fn an_escrowed_listing_is_paid_with_auth_capture_over_the_stable_url_and_forgeries_store_nothing()
 {
    let escrow = escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let env = &escrow.env;
    let input = HireEnv::input("escrow me");
    let challenge = offer(env, &env.worker_id, &input).await;
    assert_eq!(challenge.accepts[0].scheme, "auth-capture");
    assert!(challenge.accepts[0].extra["hiregate"].is_object());
    let payload = sign_auth_capture_payment(
        &env.wallet,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now(),
        &AuthCaptureSignOptions::default(),
    )
    .await
    .unwrap();
    let before = env.balance(env.wallet.address()).await;
    // A forged signature on an escrowed payment makes no contract either (offers are free: a
    // flood of these must not leave rows behind).
    let counts = row_counts(&env.app.database_url).await;
    let mut unsigned = payload.clone();
    unsigned.payload["signature"] = json!(format!("0x{}", "11".repeat(65)));
    let forged = call(env, &env.worker_id, &input, Some(&encode_header(&unsigned))).await;
    assert_eq!(forged.status, 402, "{:?}", forged.body);
    assert_eq!(forged.code(), "payment_invalid");
    assert_eq!(row_counts(&env.app.database_url).await, counts);

    let paid = call(env, &env.worker_id, &input, Some(&encode_header(&payload))).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert!(
        !paid.body["output"].is_null(),
        "verified and locked: released"
    );
    let contract_id = paid.body["contract_id"].as_str().unwrap().to_owned();
    assert_eq!(
        env.balance(env.wallet.address()).await,
        before - U256::from(PRICE),
        "the payer's money left its wallet (escrow, then capture)"
    );
    let token = paid.body["access"]["token"].as_str().unwrap();
    let view: Value = env
        .app
        .get(&format!("/v1/contracts/{contract_id}"), Some(token))
        .await
        .json()
        .await
        .unwrap();
    assert!(
        ["accepted", "settling", "settled"].contains(&view["state"].as_str().unwrap()),
        "{}",
        view["state"]
    );
}

#[tokio::test]
async fn discovery_lists_each_listing_task_type_as_an_x402_resource() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let response = env.app.get("/discovery/resources", None).await;
    assert_eq!(response.status(), 200);
    let list: Value = response.json().await.unwrap();
    assert_eq!(list["x402Version"], 2);
    let url = format!("{}{}", env.app.address, resource_path(&env.worker_id));
    let items = list["items"].as_array().unwrap();
    let item = items
        .iter()
        .find(|i| i["resource"] == url.as_str())
        .unwrap();
    assert_eq!(item["type"], "http");
    assert_eq!(item["accepts"][0]["scheme"], "exact");
    assert_eq!(item["accepts"][0]["amount"], PRICE.to_string());
    assert!(item["description"].as_str().unwrap().chars().count() <= 500);
    assert_eq!(
        item["extensions"]["bazaar"]["info"]["input"]["method"],
        "POST"
    );
    assert!(item["metadata"]["output_schema"].is_object());
    assert_eq!(list["pagination"]["total"], items.len());
    // The bazaar filters.
    let filtered: Value = env
        .app
        .get("/discovery/resources?scheme=auth-capture", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(filtered["items"], json!([]));
    // The resource it names is the one a client pays.
    let challenge = offer(&env, &env.worker_id, &HireEnv::input("listed")).await;
    assert_eq!(challenge.resource.url, url);
}

/// An official x402 client, used unchanged: nothing hiregate-specific (no key, no contract call),
/// the signed offer echoed as it echoes any `accepts` entry.
#[derive(Clone, Copy, Debug)]
enum OfficialClient {
    /// `@x402/fetch` (`tools/interop/pay.mjs`).
    Fetch,
    /// `@x402/axios` (`tools/interop/pay-axios.mjs`).
    Axios,
    /// The Python `x402` SDK's httpx transport (`tools/interop/pay.py`).
    PythonHttpx,
    /// The Python `x402` SDK's requests adapter (`tools/interop/pay.py`).
    PythonRequests,
    /// x402-rs's `x402-reqwest` middleware with its EVM `exact` client, in process.
    Reqwest,
}

impl OfficialClient {
    /// `false` (and a `skipped:` line) when the client's tools are not installed.
    fn installed_or_skip(self, test: &str) -> bool {
        match self {
            Self::Fetch | Self::Axios => hiregate_payments::devnet::node_tools_or_skip(test),
            Self::PythonHttpx | Self::PythonRequests => {
                hiregate_payments::devnet::python_tools_or_skip(test)
            }
            Self::Reqwest => true,
        }
    }
}

/// `client` pays the stable URL of `env`'s listing for `input` with `scheme`; the answer as the
/// interop scripts print it: `{status, headers, body, paymentResponse}`.
async fn official_client_pays(
    env: &HireEnv,
    client: OfficialClient,
    input: &Value,
    scheme: &str,
) -> Value {
    let url = format!("{}{}", env.app.address, resource_path(&env.worker_id));
    let private_key = env.wallet.to_bytes().to_string();
    let network = env.devnet.network();
    let asset = env.devnet.token().to_checksum(None);
    match client {
        OfficialClient::Fetch | OfficialClient::Axios => {
            let script = if matches!(client, OfficialClient::Fetch) {
                "pay.mjs"
            } else {
                "pay-axios.mjs"
            };
            hiregate_payments::devnet::node_script(
                script,
                &json!({
                    "url": url, "privateKey": private_key, "method": "POST", "body": input,
                    "scheme": scheme, "allowedAssets": [{"network": network, "asset": asset}],
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("{script} runs: {e}"))
        }
        OfficialClient::PythonHttpx | OfficialClient::PythonRequests => {
            assert_eq!(scheme, "exact", "the Python SDK has no auth-capture client");
            let which = if matches!(client, OfficialClient::PythonHttpx) {
                "httpx"
            } else {
                "requests"
            };
            hiregate_payments::devnet::python_script(
                "pay.py",
                &json!({
                    "url": url, "privateKey": private_key, "client": which, "method": "POST",
                    "body": input, "network": network, "asset": asset,
                }),
            )
            .await
            .unwrap_or_else(|e| panic!("pay.py ({which}) runs: {e}"))
        }
        OfficialClient::Reqwest => {
            assert_eq!(scheme, "exact", "x402-rs has no auth-capture client");
            reqwest_client_pays(env, &url, input).await
        }
    }
}

/// x402-rs's reqwest middleware pays `url`, answered in the interop scripts' shape.
async fn reqwest_client_pays(env: &HireEnv, url: &str, input: &Value) -> Value {
    use x402_reqwest::{ReqwestWithPayments as _, ReqwestWithPaymentsBuild as _, X402Client};

    let payer = X402Client::new().register(x402_chain_eip155::V2Eip155ExactClient::new(
        std::sync::Arc::new(env.wallet.clone()),
    ));
    let client = reqwest::Client::new().with_payments(payer).build();
    let response = client
        .post(url)
        .json(input)
        .timeout(std::time::Duration::from_secs(120))
        .send()
        .await
        .expect("x402-reqwest sends and pays");
    let status = response.status().as_u16();
    let payment_response = response
        .headers()
        .get("payment-response")
        .map(|value| {
            let decoded: hiregate_payments::SettleResponse =
                hiregate_payments::decode_header(value.to_str().unwrap()).unwrap();
            serde_json::to_value(decoded).unwrap()
        })
        .unwrap_or(Value::Null);
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    json!({"status": status, "body": body, "paymentResponse": payment_response})
}

/// `client` hires over the stable URL end to end: the payer's money reaches the worker in the
/// settlement transaction it is told about, the deliverable comes back only when paid, and a
/// rejected deliverable is neither paid nor shown; the books reconcile after each.
async fn an_official_client_hires_over_the_stable_url(client: OfficialClient, test: &str) {
    if !client.installed_or_skip(test) {
        return;
    }
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let text = format!("paid by {client:?} over the stable URL");
    let before = env.balances().await;
    let result = official_client_pays(&env, client, &HireEnv::input(&text), "exact").await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result}");
    let transaction = result["paymentResponse"]["transaction"].as_str().unwrap();
    assert!(transaction.starts_with("0x"), "{result}");
    assert_eq!(
        result["body"]["deliverable"]["output"]["content"]["summary"],
        text.as_str(),
        "{result}"
    );
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "the payer paid");
    assert_eq!(after.1, before.1 + U256::from(PRICE), "the worker was paid");
    let receipt = {
        use alloy::providers::Provider as _;
        env.devnet
            .provider()
            .get_transaction_receipt(transaction.parse().unwrap())
            .await
            .unwrap()
            .expect("the settlement transaction is mined")
    };
    assert!(receipt.status(), "the settlement transaction succeeded");
    let contract_id = result["body"]["contract_id"].as_str().unwrap();
    assert_eq!(env.state(contract_id).await, "settled");
    let stored = env
        .app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.settle_tx.as_deref(), Some(transaction));
    assert_reconciled(&env).await;

    // A rejected deliverable: the client gets the 422, no PAYMENT-RESPONSE, no work.
    let faulty = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let before = faulty.balances().await;
    let rejected = official_client_pays(
        &faulty,
        client,
        &json!({"text": "x", "mode": "invalid"}),
        "exact",
    )
    .await;
    assert_eq!(rejected["status"], 422, "{rejected}");
    assert_eq!(
        rejected["body"]["error"]["code"], "verification_failed",
        "{rejected}"
    );
    assert!(rejected["paymentResponse"].is_null(), "{rejected}");
    assert!(rejected["body"].get("output").is_none(), "{rejected}");
    assert!(rejected["body"].get("deliverable").is_none(), "{rejected}");
    assert_eq!(faulty.balances().await, before, "nothing moved");
    assert_reconciled(&faulty).await;
}

#[tokio::test]
async fn the_official_x402_fetch_client_pays_the_stable_url_unchanged() {
    an_official_client_hires_over_the_stable_url(
        OfficialClient::Fetch,
        "the_official_x402_fetch_client_pays_the_stable_url_unchanged",
    )
    .await;
}

#[tokio::test]
async fn the_official_x402_axios_client_pays_the_stable_url_unchanged() {
    an_official_client_hires_over_the_stable_url(
        OfficialClient::Axios,
        "the_official_x402_axios_client_pays_the_stable_url_unchanged",
    )
    .await;
}

#[tokio::test]
async fn the_official_python_x402_httpx_client_pays_the_stable_url_unchanged() {
    an_official_client_hires_over_the_stable_url(
        OfficialClient::PythonHttpx,
        "the_official_python_x402_httpx_client_pays_the_stable_url_unchanged",
    )
    .await;
}

#[tokio::test]
async fn the_official_python_x402_requests_client_pays_the_stable_url_unchanged() {
    an_official_client_hires_over_the_stable_url(
        OfficialClient::PythonRequests,
        "the_official_python_x402_requests_client_pays_the_stable_url_unchanged",
    )
    .await;
}

#[tokio::test]
async fn the_x402_reqwest_client_pays_the_stable_url_unchanged() {
    an_official_client_hires_over_the_stable_url(
        OfficialClient::Reqwest,
        "the_x402_reqwest_client_pays_the_stable_url_unchanged",
    )
    .await;
}

/// `client`'s official `auth-capture` scheme client (`@x402/evm`) pays an escrowed listing's
/// stable URL: the money leaves the payer's wallet, the released deliverable comes back.
async fn an_official_client_escrows_over_the_stable_url(client: OfficialClient, test: &str) {
    if !client.installed_or_skip(test) {
        return;
    }
    let escrow = escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let env = &escrow.env;
    let before = env.balance(env.wallet.address()).await;
    let result = official_client_pays(
        env,
        client,
        &HireEnv::input(&format!("escrowed by {client:?}")),
        "auth-capture",
    )
    .await;
    assert_eq!(result["status"], 200, "{result}");
    assert!(!result["body"]["output"].is_null(), "{result}");
    assert_eq!(
        env.balance(env.wallet.address()).await,
        before - U256::from(PRICE)
    );
    assert_reconciled(env).await;
}

#[tokio::test]
async fn the_official_auth_capture_client_pays_an_escrowed_stable_url() {
    an_official_client_escrows_over_the_stable_url(
        OfficialClient::Fetch,
        "the_official_auth_capture_client_pays_an_escrowed_stable_url",
    )
    .await;
}

#[tokio::test]
async fn the_official_axios_client_pays_an_escrowed_stable_url_with_auth_capture() {
    an_official_client_escrows_over_the_stable_url(
        OfficialClient::Axios,
        "the_official_axios_client_pays_an_escrowed_stable_url_with_auth_capture",
    )
    .await;
}

/// The figure for the notes: 10,000 unpaid calls (32 at a time) leave every table as it was.
/// `cargo test -p hiregate-gateway --test api x402_resource::unpaid_flood -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement (10,000 calls), run by hand"]
async fn unpaid_flood_of_ten_thousand_calls_leaves_the_store_unchanged() {
    use futures::StreamExt as _;
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let before = row_counts(&env.app.database_url).await;
    let size_before = std::fs::metadata(env.app.database_url.trim_start_matches("sqlite://"))
        .map(|m| m.len())
        .unwrap_or(0);
    let started = std::time::Instant::now();
    let env = &env;
    let statuses: Vec<u16> = futures::stream::iter(0..10_000)
        .map(|i| async move {
            call(
                env,
                &env.worker_id,
                &HireEnv::input(&format!("flood {i}")),
                None,
            )
            .await
            .status
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let elapsed = started.elapsed();
    assert!(statuses.iter().all(|s| *s == 402));
    let after = row_counts(&env.app.database_url).await;
    let size_after = std::fs::metadata(env.app.database_url.trim_start_matches("sqlite://"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "10000 unpaid calls in {elapsed:?} ({:.0}/s); rows before {before:?}; rows after {after:?}; \
         database file {size_before} -> {size_after} bytes",
        10_000.0 / elapsed.as_secs_f64()
    );
    assert_eq!(after, before);
}
