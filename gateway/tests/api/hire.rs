//! The paid hire over HTTP, on real parts: anvil + the devnet EIP-3009 token, the embedded
//! `LocalFacilitator`, worker-sdk example workers checking the gateway's contract tokens, and a
//! seeker wallet signing x402 payments. Balances are read on chain.

use std::time::Duration;

use alloy::primitives::U256;
use hiregate_contracts::{id::ContractId, terms::ContractTerms, token::verify_contract_token};
use hiregate_payments::{
    PaymentRequired, encode_header,
    extension::{PAYMENT_IDENTIFIER, set_payment_identifier},
};
use hiregate_store::{offer::StoredOffer, states::PaymentState};
use serde_json::{Value, json};
use sqlx::Connection as _;

use crate::{
    helpers::{TestDatabase, closed_port, eventually},
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env},
};

fn price() -> U256 {
    U256::from(PRICE)
}

/// A hire environment on `database` and a second gateway instance on the same database, both
/// signing with one key file (in the folder returned, which must outlive them).
async fn two_gateways(
    database: TestDatabase,
) -> (HireEnv, crate::helpers::TestApp, tempfile::TempDir) {
    let key_dir = tempfile::tempdir().unwrap();
    let shared_key = format!(
        "[signing_key]\npath = \"{}\"",
        key_dir.path().join("gateway-key.json").display()
    );
    let url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 4, &shared_key).await;
    let second = crate::helpers::spawn_app_on(
        TestDatabase::Shared(url),
        &crate::hire_env::chain_settings(&env.devnet, &shared_key),
    )
    .await;
    (env, second, key_dir)
}

async fn happy_path(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("the quick brown fox");

    // Contract: signed terms, a contract token the worker can verify, the offer.
    let response = env.propose(input.clone(), json!({})).await;
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    let contract_id = created["contract_id"].as_str().unwrap().to_owned();
    assert_eq!(created["state"], "offered");
    assert!(
        created["terms_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let jwks = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let claims = verify_contract_token(
        created["gateway_jws"].as_str().unwrap(),
        &jwks,
        chrono::Utc::now().into(),
    )
    .expect("the contract token verifies against the JWKS");
    assert_eq!(claims.contract_id.as_str(), contract_id);
    assert_eq!(claims.terms_hash.to_string(), created["terms_hash"]);
    let offered: PaymentRequired =
        serde_json::from_value(created["payment"]["x402"].clone()).unwrap();

    // 402, through the HIRE-style route with X-Contract-ID.
    let challenge = crate::hire_env::answer(
        env.app
            .client
            .post(format!("{}/execute", env.app.address))
            .bearer_auth(&env.seeker_key)
            .header("X-Contract-ID", &contract_id)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(challenge.status, 402, "{:?}", challenge.body);
    assert_eq!(challenge.header("cache-control"), Some("no-store"));
    assert_eq!(challenge.header("x-payment-amount"), Some("1.5"));
    assert_eq!(challenge.header("x-payment-currency"), Some("hUSD"));
    assert_eq!(
        challenge.header("x-payment-network"),
        Some(env.devnet.network().as_str())
    );
    assert_eq!(
        challenge.header("x-payment-address"),
        Some(env.pay_to.to_checksum(None).as_str())
    );
    assert_eq!(challenge.code(), "payment_required");
    let required = challenge.payment_required();
    assert_eq!(required, offered, "the 402 asks for what the contract said");
    assert!(
        required
            .resource
            .url
            .ends_with(&format!("/v1/contracts/{contract_id}/execute"))
    );
    let accepts = &required.accepts[0];
    assert_eq!(accepts.scheme, "exact");
    assert_eq!(accepts.network.as_str(), env.devnet.network());
    assert_eq!(accepts.amount.get(), price());
    assert_eq!(accepts.pay_to, env.pay_to.to_checksum(None));
    assert_eq!(accepts.asset, env.devnet.token().to_checksum(None));
    assert_eq!(accepts.extra["name"], env.devnet.token_name());
    assert_eq!(accepts.extra["version"], env.devnet.token_version());
    // 5 s SLA × 3 attempts + 30 s verification + 0 s acceptance + 120 s settlement margin.
    assert_eq!(accepts.max_timeout_seconds, 165);

    // Pay: the deliverable comes back with PAYMENT-RESPONSE, money moves once, on chain.
    let before = env.balances().await;
    let payment = env.pay(&required).await;
    let paid = env
        .execute(&contract_id, Some(&payment), Some(&input))
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let settlement = paid.payment_response();
    assert!(settlement.success, "{settlement:?}");
    assert!(settlement.transaction.starts_with("0x"));
    assert_eq!(paid.body["state"], "settled");
    assert_eq!(paid.body["deliverable"]["output"]["type"], "json");
    assert_eq!(
        paid.body["deliverable"]["output"]["content"]["summary"],
        "the quick brown fox"
    );
    assert_eq!(paid.body["verification"]["verification_status"], "passed");
    assert_eq!(
        paid.body["settlement"]["transaction"],
        settlement.transaction.as_str()
    );
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "payer paid the price");
    assert_eq!(after.1, before.1 + price(), "worker received the price");
    assert_eq!(env.worker.executions(), 1);

    // The same request again: the stored result and the original PAYMENT-RESPONSE, marked as
    // the answer to a duplicate.
    let again = env
        .execute(&contract_id, Some(&payment), Some(&input))
        .await;
    paid.assert_replayed_by(&again);
    assert_eq!(again.body["original"]["original_status"], "settled");
    assert_eq!(env.worker.executions(), 1);
    assert_eq!(env.balances().await, after);

    // The audit trail, in lifecycle order.
    assert_eq!(
        env.event_kinds(&contract_id).await,
        [
            "contract_offered",
            "payment_verified",
            "forwarded",
            "deliverable_received",
            "verification_started",
            "verification_passed",
            "acceptance_window_closed",
            "settlement_succeeded",
        ]
    );

    // Parties see the contract; others do not.
    let seeker_view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(seeker_view["state"], "settled");
    assert_eq!(
        seeker_view["settlement"]["transaction"],
        settlement.transaction.as_str()
    );
    assert_eq!(seeker_view["attempts"].as_array().unwrap().len(), 1);
    // A settled contract shows its signed receipt (see receipts.rs for what it binds).
    let receipt = hiregate_contracts::receipt::verify_receipt(
        seeker_view["receipt"].as_str().expect("receipt shown"),
        &jwks,
    )
    .expect("the receipt verifies");
    assert_eq!(receipt.sub.as_str(), contract_id);
    let operator_view = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.operator_key),
        )
        .await;
    assert_eq!(operator_view.status(), 200);
    let (stranger, _) = env.app.create_key("seeker").await;
    let stranger_view = env
        .app
        .get(&format!("/v1/contracts/{contract_id}"), Some(&stranger))
        .await;
    assert_eq!(stranger_view.status(), 404);

    let ready = env.app.get("/readyz", None).await;
    assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap());
}

#[tokio::test]
async fn happy_path_settles_on_chain() {
    happy_path(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn happy_path_settles_on_chain_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    happy_path(database).await;
}

/// The store remembers a contract this gateway proposed with the terms and offer it was written
/// from, so its reads do not parse the stored text. They must be exactly what parsing that
/// text gives, which is what any other instance, or this one after a restart, reads.
async fn a_proposed_contract_reads_as_its_stored_text_parses(database: TestDatabase) {
    let (env, second, _key_dir) = two_gateways(database).await;
    let mut input = HireEnv::input("numbers 1e16, -0.0 and 0.1, and a \u{0} in text");
    input["extra"] = json!({"float": 0.1, "big": 1e16, "negative_zero": -0.0, "nested": [[{}]]});
    let contract_id = env.contract(input, json!({})).await;

    let remembered = env
        .app
        .store
        .get_contract(&contract_id)
        .await
        .unwrap()
        .expect("the contract is stored");
    let (terms_text, offer_text) = stored_documents(&env.app.database_url, &contract_id).await;
    let terms_document: Value = serde_json::from_str(&terms_text).unwrap();
    assert_eq!(*remembered.terms_document, terms_document);
    let terms: ContractTerms = serde_json::from_value(terms_document).unwrap();
    assert_eq!(*remembered.terms, terms);
    let offer: StoredOffer =
        serde_json::from_str(&offer_text.expect("an offer is stored")).unwrap();
    assert_eq!(remembered.payment_offer.as_deref(), Some(&offer));

    // The proposing instance answers the first unpaid execute from what it proposed; another
    // instance on the same database builds it from the stored row. Both are the same 402.
    let proposed = env.execute(&contract_id, None, None).await;
    let stored = env
        .execute_on(&second.address, &contract_id, None, None)
        .await;
    assert_eq!((proposed.status, stored.status), (402, 402));
    assert_eq!(
        proposed.header("payment-required"),
        stored.header("payment-required")
    );
    assert_eq!(proposed.body, stored.body);
    assert!(proposed.header("x-correlation-id").is_some());
    assert_eq!(
        proposed.header("x-correlation-id"),
        stored.header("x-correlation-id"),
        "the hire's correlation id, from its proposal"
    );
}

/// The terms and offer texts of `contract_id`, read behind the gateway's back.
async fn stored_documents(database_url: &str, contract_id: &str) -> (String, Option<String>) {
    const SQL: &str = "select terms, payment_offer from contract_document where contract_id = $1";
    // One query for either backend's connection type.
    macro_rules! read {
        ($connection:ty) => {{
            let mut conn = <$connection>::connect(database_url).await.unwrap();
            let row = sqlx::query_as(SQL).bind(contract_id).fetch_one(&mut conn);
            row.await.unwrap()
        }};
    }
    if database_url.starts_with("sqlite:") {
        read!(sqlx::SqliteConnection)
    } else {
        read!(sqlx::PgConnection)
    }
}

#[tokio::test]
async fn a_proposed_contract_reads_as_its_stored_text_parses_on_sqlite() {
    a_proposed_contract_reads_as_its_stored_text_parses(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_proposed_contract_reads_as_its_stored_text_parses_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_proposed_contract_reads_as_its_stored_text_parses(database).await;
}

#[tokio::test]
async fn schema_invalid_output_is_rejected_and_nothing_moves() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let input = json!({"text": "x", "mode": "invalid"});
    let contract_id = env.contract(input.clone(), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let before = env.balances().await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(answer.code(), "verification_failed");
    let verification = &answer.body["error"]["details"]["verification"];
    assert_eq!(verification["verification_status"], "failed");
    assert!(!verification["reason_codes"].as_array().unwrap().is_empty());
    assert!(answer.headers.get("payment-response").is_none());
    assert_eq!(env.state(&contract_id).await, "rejected");
    assert_eq!(env.balances().await, before, "nothing settled");
    assert!(
        !env.devnet
            .authorization_state(env.wallet.address(), nonce)
            .await
            .unwrap(),
        "the authorization was never used on chain"
    );
    // Asking again gives the same verdict without running the worker again.
    let again = env.execute(&contract_id, None, None).await;
    assert_eq!(again.status, 422);
    assert_eq!(env.worker.executions(), 1);
}

#[tokio::test]
async fn worker_failure_is_retried_under_the_same_payment_and_settled_once() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    // `flaky` fails attempt 1 and succeeds from attempt 2 (the gateway's X-Attempt).
    let input = json!({"text": "retry me", "mode": "flaky"});
    let contract_id = env.contract(input.clone(), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let before = env.balances().await;

    let first = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(first.status, 502, "{:?}", first.body);
    assert_eq!(first.code(), "worker_failed");
    assert_eq!(first.body["error"]["details"]["retry_allowed"], true);
    assert_eq!(
        first.body["error"]["details"]["worker_error"]["code"],
        "TRANSIENT_FAILURE"
    );
    assert_eq!(env.state(&contract_id).await, "paid");
    assert_eq!(env.balances().await, before);

    // The retry carries no payment at all: the held authorization pays.
    let retry = env.execute(&contract_id, None, Some(&input)).await;
    assert_eq!(retry.status, 200, "{:?}", retry.body);
    assert!(retry.payment_response().success);
    assert_eq!(env.worker.executions(), 2);
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "charged exactly once");
    assert_eq!(after.1, before.1 + price());
    let view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    let attempts = view["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["state"], "failed");
    assert_eq!(attempts[1]["state"], "completed");
}

#[tokio::test]
async fn exhausted_retries_fail_the_contract_and_settle_nothing() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let input = json!({"text": "never", "mode": "fail"});
    let contract_id = env
        .contract(input, json!({"retry_policy": {"max_attempts": 2}}))
        .await;
    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;
    let payment = encode_header(&payload);
    let before = env.balances().await;

    let first = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(first.status, 502);
    assert_eq!(first.body["error"]["details"]["attempts_left"], 1);
    let second = env.execute(&contract_id, None, None).await;
    assert_eq!(second.status, 502, "{:?}", second.body);
    assert_eq!(second.body["error"]["details"]["retry_allowed"], false);
    assert_eq!(env.state(&contract_id).await, "failed");
    let payment_row = env
        .app
        .store
        .find_payment_by_authorization(
            &env.devnet.network().parse().unwrap(),
            &env.devnet.token(),
            &env.wallet.address(),
            &nonce.to_string(),
        )
        .await
        .unwrap()
        .expect("payment stored");
    assert_eq!(payment_row.state, PaymentState::Voided);
    assert!(payment_row.settle_started_at.is_none());
    assert!(
        env.event_kinds(&contract_id)
            .await
            .contains(&"payment_voided".to_owned())
    );

    // Terminal: a third execute answers from the record, the worker is not called again.
    let third = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(third.status, 502);
    assert_eq!(third.code(), "worker_failed");
    assert_eq!(env.worker.executions(), 2);
    assert_eq!(env.balances().await, before, "nothing settled");
    assert!(
        !env.devnet
            .authorization_state(env.wallet.address(), nonce)
            .await
            .unwrap()
    );
}

async fn concurrent_executes(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("only once");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let shared = env.pay(&challenge).await;
    let mut headers = Vec::new();
    for i in 0..10 {
        // Half the callers resend one payment, the others each sign a fresh one.
        headers.push(if i % 2 == 0 {
            shared.clone()
        } else {
            env.pay(&challenge).await
        });
    }
    let before = env.balances().await;
    let answers = futures::future::join_all(
        headers
            .iter()
            .map(|header| env.execute(&contract_id, Some(header), Some(&input))),
    )
    .await;
    let mut transactions = std::collections::BTreeSet::new();
    for answer in &answers {
        assert!(
            answer.status == 200 || answer.status == 202,
            "{} {:?}",
            answer.status,
            answer.body
        );
        if answer.status == 200 {
            let settlement = answer.payment_response();
            assert!(settlement.success);
            transactions.insert(settlement.transaction);
        }
    }
    assert_eq!(transactions.len(), 1, "one settlement transaction");
    assert_eq!(env.worker.executions(), 1, "one worker execution");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "one transfer");
    assert_eq!(after.1, before.1 + price());
    assert_eq!(env.state(&contract_id).await, "settled");
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(kinds.iter().filter(|k| *k == "payment_verified").count(), 1);
    assert_eq!(kinds.iter().filter(|k| *k == "forwarded").count(), 1);
}

#[tokio::test]
async fn concurrent_executes_run_once_and_transfer_once() {
    concurrent_executes(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn concurrent_executes_run_once_and_transfer_once_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    concurrent_executes(database).await;
}

#[tokio::test]
async fn a_payment_replayed_on_another_contract_is_refused() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let first = env.contract(HireEnv::input("one"), json!({})).await;
    let second = env.contract(HireEnv::input("two"), json!({})).await;
    let payment = env.pay(&env.challenge(&first).await).await;
    assert_eq!(env.execute(&first, Some(&payment), None).await.status, 200);
    let after_first = env.balances().await;

    let replay = env.execute(&second, Some(&payment), None).await;
    assert_eq!(replay.status, 409, "{:?}", replay.body);
    assert_eq!(replay.code(), "payment_already_used");
    assert_eq!(env.state(&second).await, "offered");
    assert_eq!(env.balances().await, after_first, "no second transfer");
    assert_eq!(env.worker.executions(), 1);
}

#[tokio::test]
async fn a_wrong_amount_is_refused_with_the_reason() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = env.contract(HireEnv::input("price"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let before = env.balances().await;

    // The client claims a lower price: the field-by-field match names `amount`.
    let mut cheaper = challenge.clone();
    cheaper.accepts[0].amount = (price() - U256::from(1u64)).into();
    let answer = env
        .execute(&contract_id, Some(&env.pay(&cheaper).await), None)
        .await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_mismatch");
    let fresh = answer.payment_required();
    assert!(
        fresh.error.as_deref().unwrap().contains("accepted.amount"),
        "{fresh:?}"
    );
    assert_eq!(
        fresh.accepts, challenge.accepts,
        "a fresh challenge to pay again"
    );

    // `accepted` copied faithfully, but the signed authorization is for less.
    let payload = env
        .sign_for(&cheaper.accepts[0], &challenge.accepts[0], None)
        .await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    assert_eq!(
        answer.payment_required().error.as_deref(),
        Some("invalid_exact_evm_payload_authorization_value_mismatch")
    );
    assert_eq!(env.state(&contract_id).await, "offered");
    assert_eq!(env.balances().await, before);
    assert_eq!(env.worker.executions(), 0);
}

#[tokio::test]
async fn a_payment_identifier_is_honoured() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let first = env.contract(HireEnv::input("one"), json!({})).await;
    let challenge = env.challenge(&first).await;
    assert!(challenge.extensions.contains_key(PAYMENT_IDENTIFIER));
    let id = "pay_0123456789abcdef0123".parse().unwrap();
    let mut payload = env.sign(&challenge).await;
    set_payment_identifier(&mut payload.extensions, &id);
    let header = encode_header(&payload);
    let paid = env.execute(&first, Some(&header), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);

    // Same id, same payload: the same response.
    let again = env.execute(&first, Some(&header), None).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.payment_response(), paid.payment_response());

    // Same id, another payload: 409, nothing changes.
    let second = env.contract(HireEnv::input("two"), json!({})).await;
    let mut other = env.sign(&env.challenge(&second).await).await;
    set_payment_identifier(&mut other.extensions, &id);
    let conflict = env
        .execute(&second, Some(&encode_header(&other)), None)
        .await;
    assert_eq!(conflict.status, 409, "{:?}", conflict.body);
    assert_eq!(conflict.code(), "payment_identifier_conflict");
    assert_eq!(env.state(&second).await, "offered");
    assert_eq!(env.worker.executions(), 1);
}

#[tokio::test]
async fn an_unhealthy_worker_gets_no_contract() {
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        "[health]\ninterval_ms = 100\nmiss_threshold = 1\nprobe_timeout_ms = 500",
    )
    .await;
    env.worker.stop();
    eventually(
        Duration::from_secs(10),
        "the worker marked unhealthy",
        || async {
            let view = env.app.owner_view(&env.operator_key, &env.worker_id).await;
            (view["health"] == "unhealthy").then_some(())
        },
    )
    .await;
    let response = env.propose(HireEnv::input("x"), json!({})).await;
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "worker_unhealthy");
}

#[tokio::test]
async fn facilitator_down_answers_503_and_never_calls_the_worker() {
    // Fault injection: the external facilitator is a port nobody listens on. A real facilitator
    // cannot be made unreachable on demand; a closed port is exactly "down".
    let port = closed_port().await;
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        &format!(
            "[facilitator]\nmode = \"http\"\nurl = \"http://127.0.0.1:{port}/\"\nverify_timeout_ms = 2000"
        ),
    )
    .await;
    let contract_id = env.contract(HireEnv::input("x"), json!({})).await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(answer.code(), "facilitator_unavailable");
    assert!(answer.header("retry-after").is_some());
    assert_eq!(env.worker.executions(), 0, "nothing executed");
    assert_eq!(env.state(&contract_id).await, "offered", "nothing paid");
    assert!(
        env.app
            .store
            .payment_of_contract(&contract_id)
            .await
            .unwrap()
            .is_none()
    );
    let ready = env.app.get("/readyz", None).await;
    assert_eq!(ready.status(), 503);
}

/// A gateway whose facilitator is a wiremock answering every call with `status` and `body`.
/// Fault injection: the bundled facilitator answers 5xx only when its chain is unreachable,
/// which cannot be arranged per request.
async fn with_facilitator_answering(status: u16, body: &str) -> (HireEnv, wiremock::MockServer) {
    let facilitator = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(
            wiremock::ResponseTemplate::new(status)
                .set_body_raw(body.to_owned(), "application/json"),
        )
        .mount(&facilitator)
        .await;
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        &format!(
            "[facilitator]\nmode = \"http\"\nurl = \"{}\"",
            facilitator.uri()
        ),
    )
    .await;
    (env, facilitator)
}

#[tokio::test]
async fn a_facilitator_answering_500_without_a_verdict_is_unknown_not_a_refusal() {
    let (env, _facilitator) =
        with_facilitator_answering(500, "<html>internal server error</html>").await;
    let contract_id = env.contract(HireEnv::input("x"), json!({})).await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 503, "{:?}", answer.body);
    assert_eq!(answer.code(), "facilitator_unavailable");
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(env.state(&contract_id).await, "offered");
}

#[tokio::test]
async fn a_verdict_is_a_verdict_whatever_the_http_status() {
    // The x402-rs facilitator refuses a bad signature with HTTP 500 and a verdict body.
    let (env, _facilitator) = with_facilitator_answering(
        500,
        r#"{"isValid":false,"invalidReason":"invalid_signature","payer":"0x0000000000000000000000000000000000000001"}"#,
    )
    .await;
    let contract_id = env.contract(HireEnv::input("x"), json!({})).await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    assert!(
        answer
            .body
            .to_string()
            .contains("invalid_exact_evm_signature"),
        "x402-rs's reason maps to the stable code: {:?}",
        answer.body
    );
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(env.state(&contract_id).await, "offered");
}

#[tokio::test]
async fn bad_inputs_get_stable_codes_and_change_nothing() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("x");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let events_before = env.event_kinds(&contract_id).await;

    let cases: Vec<(u16, &str, crate::hire_env::Answer)> = vec![
        (
            409,
            "input_mismatch",
            env.execute(&contract_id, None, Some(&json!({"text": "y"})))
                .await,
        ),
        // An unreadable PAYMENT-SIGNATURE is a fresh 402 challenge: see
        // `an_unreadable_payment_signature_gets_a_fresh_challenge`.
        (
            404,
            "not_found",
            env.execute(ContractId::generate().as_str(), None, None)
                .await,
        ),
        (
            404,
            "not_found",
            env.execute("ctr_garbage", None, None).await,
        ),
        (
            403,
            "forbidden",
            env.execute_as(&env.operator_key, &contract_id, None, None)
                .await,
        ),
    ];
    for (status, code, answer) in cases {
        assert_eq!(answer.status, status, "{code}: {:?}", answer.body);
        assert_eq!(answer.code(), code, "{:?}", answer.body);
    }
    // Equivalent JSON spelling of the input is the input.
    let same = env
        .execute(&contract_id, None, Some(&json!({ "text": "x" })))
        .await;
    assert_eq!(same.status, 402);

    let malformed = crate::hire_env::answer(
        env.app
            .client
            .post(format!(
                "{}/v1/contracts/{contract_id}/execute",
                env.app.address
            ))
            .bearer_auth(&env.seeker_key)
            .body("{not json")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(malformed.status, 400);
    assert_eq!(malformed.code(), "malformed_json");
    let no_id = crate::hire_env::answer(
        env.app
            .client
            .post(format!("{}/execute", env.app.address))
            .bearer_auth(&env.seeker_key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(no_id.status, 400);
    assert_eq!(no_id.code(), "missing_contract_id");
    let (stranger, _) = env.app.create_key("seeker").await;
    let foreign = env.execute_as(&stranger, &contract_id, None, None).await;
    assert_eq!(foreign.status, 404);

    // Proposals the gateway refuses.
    for (extra, status, code) in [
        (
            json!({"task_type": "translate"}),
            422,
            "task_type_not_offered",
        ),
        (
            json!({"worker_id": "wk_01J00000000000000000000000"}),
            404,
            "not_found",
        ),
        (
            json!({"output_schema": {"type": "string", "pattern": "(?=x)"}}),
            422,
            "validation_failed",
        ),
        (
            json!({"sla": {"max_latency_ms": 3_600_000}, "retry_policy": {"max_attempts": 10}}),
            422,
            "authorization_window_too_long",
        ),
        (
            json!({"verification": {"policy_id": "vp.nope.v1"}}),
            422,
            "invalid_body",
        ),
        (json!({"surprise": true}), 422, "invalid_body"),
    ] {
        let response = env.propose(input.clone(), extra.clone()).await;
        assert_eq!(response.status(), status, "{extra}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{extra}: {body}");
    }

    assert_eq!(env.state(&contract_id).await, "offered");
    assert_eq!(env.event_kinds(&contract_id).await, events_before);
    assert_eq!(env.worker.executions(), 0);
}

fn base64_json(value: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(value.to_string())
}

/// The official x402 middleware answers a payment it cannot read with 402 and a fresh
/// `PAYMENT-REQUIRED` whose `error` says why, and x402 clients act on that 402 (they sign
/// again); a 400 would end their flow. The stable code stays in the body; nothing changes.
#[tokio::test]
async fn an_unreadable_payment_signature_gets_a_fresh_challenge() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = env.contract(HireEnv::input("x"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let events_before = env.event_kinds(&contract_id).await;

    // A real payment whose payment-identifier extension is malformed.
    let mut bad_extension = serde_json::to_value(env.sign(&challenge).await).unwrap();
    bad_extension["extensions"] = json!({ PAYMENT_IDENTIFIER: "not an object" });
    let cases = [
        (
            "not base64 !!".to_owned(),
            "invalid_payment_signature",
            "base64",
        ),
        (
            base64_json(&json!("a string")),
            "invalid_payment_signature",
            "PAYMENT-SIGNATURE",
        ),
        (
            {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD.encode("{truncated")
            },
            "invalid_payment_signature",
            "JSON",
        ),
        (
            base64_json(&json!({"x402Version": 1, "payload": {}})),
            "invalid_payment_signature",
            "version",
        ),
        (
            base64_json(&json!({"x402Version": 2, "payload": {}})),
            "invalid_payment_signature",
            "accepted",
        ),
        (
            base64_json(&bad_extension),
            "invalid_payment_identifier",
            "payment-identifier",
        ),
    ];
    for (header, code, says) in &cases {
        for by_header_route in [false, true] {
            let answer = if by_header_route {
                crate::hire_env::answer(
                    env.app
                        .client
                        .post(format!("{}/execute", env.app.address))
                        .bearer_auth(&env.seeker_key)
                        .header("x-contract-id", &contract_id)
                        .header("payment-signature", header)
                        .send()
                        .await
                        .unwrap(),
                )
                .await
            } else {
                env.execute(&contract_id, Some(header), None).await
            };
            assert_eq!(answer.status, 402, "{code} {says}: {:?}", answer.body);
            assert_eq!(answer.code(), *code, "{:?}", answer.body);
            assert_eq!(answer.header("cache-control"), Some("no-store"));
            let fresh = answer.payment_required();
            assert_eq!(
                fresh.accepts, challenge.accepts,
                "the same offer, to sign again"
            );
            let error = fresh.error.clone().unwrap_or_default();
            assert!(error.starts_with(code), "{error}");
            assert!(
                error.to_lowercase().contains(&says.to_lowercase()),
                "{code}: the challenge says what was wrong ({says}): {error}"
            );
        }
    }
    assert_eq!(env.state(&contract_id).await, "offered");
    assert_eq!(env.event_kinds(&contract_id).await, events_before);
    assert_eq!(env.worker.executions(), 0);

    // The challenge is one to act on: a good payment now pays.
    let payment = env.pay(&challenge).await;
    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
}

#[tokio::test]
async fn a_busy_worker_answers_429_before_anyone_pays() {
    // No queue: a worker at max_parallel refuses outright (the queue is in `sw4rm`).
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        1,
        "[contracts]\nworker_queue_depth = 0\n",
    )
    .await;
    let slow_input = json!({"text": "slow", "mode": "slow", "delay_ms": 1500});
    let slow = env.contract(slow_input, json!({})).await;
    let other = env.contract(HireEnv::input("next"), json!({})).await;
    let slow_payment = env.pay(&env.challenge(&slow).await).await;
    let other_payment = env.pay(&env.challenge(&other).await).await;

    let running = env.execute(&slow, Some(&slow_payment), None);
    let blocked = async {
        eventually(
            Duration::from_secs(5),
            "the slow contract executing",
            || async { (env.state(&slow).await == "executing").then_some(()) },
        )
        .await;
        env.execute(&other, Some(&other_payment), None).await
    };
    let (done, busy) = tokio::join!(running, blocked);
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert_eq!(busy.status, 429, "{:?}", busy.body);
    assert!(busy.header("retry-after").is_some());
    assert_eq!(env.state(&other).await, "offered", "not paid while busy");

    let later = env.execute(&other, Some(&other_payment), None).await;
    assert_eq!(later.status, 200, "{:?}", later.body);
    assert_eq!(env.worker.executions(), 2);
}

#[tokio::test]
async fn an_acceptance_window_defers_settlement() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = env
        .contract(HireEnv::input("later"), json!({"acceptance_window_s": 600}))
        .await;
    let challenge = env.challenge(&contract_id).await;
    assert_eq!(challenge.accepts[0].max_timeout_seconds, 165 + 600);
    let before = env.balances().await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(answer.body["settlement"]["status"], "deferred");
    assert!(answer.headers.get("payment-response").is_none());
    assert_eq!(env.state(&contract_id).await, "accepted");
    assert_eq!(
        env.balances().await,
        before,
        "settlement waits for the window"
    );
}

#[tokio::test]
async fn pending_work_answers_202_with_where_to_look() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let contract_id = env
        .contract(
            json!({"text": "async", "mode": "pending", "delay_ms": 60000}),
            json!({}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    assert_eq!(answer.body["state"], "pending");
    assert!(
        answer.body["poll_url"]
            .as_str()
            .unwrap()
            .ends_with(&contract_id)
    );
    assert!(
        answer.body["events_url"]
            .as_str()
            .unwrap()
            .ends_with("/events")
    );
    assert_eq!(env.state(&contract_id).await, "pending");
    // A duplicate reports the status; it neither forwards nor pays again.
    let again = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(again.status, 202);
    assert_eq!(env.worker.executions(), 1);
}

#[tokio::test]
async fn the_official_x402_fetch_client_pays_a_contract() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "the_official_x402_fetch_client_pays_a_contract",
    ) {
        return;
    }
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("paid by @x402/fetch");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let before = env.balances().await;
    let result = hiregate_payments::devnet::node_script(
        "pay.mjs",
        &json!({
            "url": format!("{}/v1/contracts/{contract_id}/execute", env.app.address),
            "privateKey": env.wallet.to_bytes().to_string(),
            "method": "POST",
            "authorization": format!("Bearer {}", env.seeker_key),
            "body": input,
            "allowedAssets": [{"network": env.devnet.network(), "asset": env.devnet.token().to_checksum(None)}],
        }),
    )
    .await
    .expect("pay.mjs runs");
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result}");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
}

#[tokio::test]
async fn a_worker_slower_than_the_sla_times_out_with_504() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let contract_id = env
        .contract(
            json!({"text": "slow", "mode": "slow", "delay_ms": 3000}),
            json!({"sla": {"max_latency_ms": 500}, "retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let before = env.balances().await;
    let answer = env
        .execute(
            &contract_id,
            Some(&env.pay(&env.challenge(&contract_id).await).await),
            None,
        )
        .await;
    assert_eq!(answer.status, 504, "{:?}", answer.body);
    assert_eq!(answer.code(), "worker_timeout");
    assert_eq!(answer.body["error"]["details"]["retry_allowed"], false);
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(env.balances().await, before);
}

#[tokio::test]
async fn an_expired_offer_cannot_be_paid() {
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        "[contracts]\noffer_ttl_s = 1",
    )
    .await;
    let contract_id = env.contract(HireEnv::input("late"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    // Past the offer's 1 s by the engine's clock, not by waiting for it.
    env.app.clock.advance(Duration::from_millis(1100));
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 410, "{:?}", answer.body);
    assert_eq!(answer.code(), "contract_expired");
    assert_eq!(env.state(&contract_id).await, "expired");
    assert_eq!(env.worker.executions(), 0);
}

/// Two gateway instances on one database (sharing the signing key file), executes split
/// between them: the database's conditional transitions decide, not the in-process locks.
async fn two_instances(database: TestDatabase) {
    let (env, second, _key_dir) = two_gateways(database).await;
    let input = HireEnv::input("two gateways");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let mut payments = Vec::new();
    for _ in 0..6 {
        payments.push(env.pay(&challenge).await);
    }
    let before = env.balances().await;
    let answers = futures::future::join_all(payments.iter().enumerate().map(|(i, payment)| {
        let address = if i % 2 == 0 {
            &env.app.address
        } else {
            &second.address
        };
        env.execute_on(address, &contract_id, Some(payment), Some(&input))
    }))
    .await;
    for answer in &answers {
        assert!(
            [200, 202].contains(&answer.status),
            "{} {:?}",
            answer.status,
            answer.body
        );
    }
    // Whatever answered 202 now gets the stored result.
    let settled = env.execute(&contract_id, None, None).await;
    assert_eq!(settled.status, 200, "{:?}", settled.body);
    let transaction = settled.payment_response().transaction;
    for answer in answers.iter().filter(|a| a.status == 200) {
        assert_eq!(answer.payment_response().transaction, transaction);
    }
    assert_eq!(env.worker.executions(), 1);
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "one transfer");
    assert_eq!(after.1, before.1 + price());
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(kinds.iter().filter(|k| *k == "payment_verified").count(), 1);
    assert_eq!(kinds.iter().filter(|k| *k == "forwarded").count(), 1);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "settlement_succeeded")
            .count(),
        1
    );
}

#[tokio::test]
async fn two_instances_on_one_sqlite_file_settle_once() {
    two_instances(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn two_instances_on_one_postgres_settle_once() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    two_instances(database).await;
}

/// The bundled facilitator served over HTTP behind a bearer check, and a gateway in
/// `facilitator.mode = "http"` sending that header through its auth hook.
#[tokio::test]
async fn an_http_facilitator_with_an_auth_header_settles() {
    use axum::{extract::Request, http::StatusCode, middleware::Next, response::Response};
    use hiregate_payments::{ChainConfig, FacilitatorConfig, LocalFacilitator, RelayerKey};

    const SECRET: &str = "Bearer facilitator-test-secret";
    let devnet = hiregate_payments::devnet::Devnet::start().await.unwrap();
    let facilitator = LocalFacilitator::connect(FacilitatorConfig {
        chains: vec![ChainConfig::new(
            devnet.network().parse().unwrap(),
            devnet.rpc_url().clone(),
            RelayerKey::new(devnet.fresh_relayer().await.unwrap()),
        )],
    })
    .await
    .unwrap();
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = calls.clone();
    let router = hiregate_payments::router(std::sync::Arc::new(facilitator)).layer(
        axum::middleware::from_fn(move |request: Request, next: Next| {
            let seen = seen.clone();
            async move {
                let authorized = request
                    .headers()
                    .get("authorization")
                    .is_some_and(|v| v.as_bytes() == SECRET.as_bytes());
                if !authorized {
                    return Response::builder()
                        .status(StatusCode::UNAUTHORIZED)
                        .body(axum::body::Body::empty())
                        .unwrap();
                }
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                next.run(request).await
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });

    let env = crate::hire_env::hire_env_on(
        devnet,
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        &format!(
            "[facilitator]\nmode = \"http\"\nurl = \"{facilitator_url}\"\nauth_header_value = \"{SECRET}\""
        ),
    )
    .await;
    let contract_id = env.contract(HireEnv::input("via http"), json!({})).await;
    let before = env.balances().await;
    let answer = env
        .execute(
            &contract_id,
            Some(&env.pay(&env.challenge(&contract_id).await).await),
            None,
        )
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(answer.payment_response().success);
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert!(
        calls.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "verify and settle went through the authorized facilitator"
    );
    let ready = env.app.get("/readyz", None).await;
    assert_eq!(ready.status(), 200, "{}", ready.text().await.unwrap());
}

/// `hiregate facilitator` serves the bundled facilitator for the configured chains.
#[tokio::test]
async fn the_facilitator_subcommand_serves_the_configured_chains() {
    let devnet = hiregate_payments::devnet::Devnet::start().await.unwrap();
    let (mut child, url) = crate::x402_interop::bundled_facilitator(&devnet).await;
    let supported: Value = reqwest::get(format!("{url}/supported"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(supported["kinds"][0]["network"], devnet.network());
    assert_eq!(supported["kinds"][0]["scheme"], "exact");
    assert_eq!(
        supported["signers"]["eip155:*"][0],
        devnet.relayer().address().to_checksum(None)
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn the_sweep_settles_when_the_acceptance_window_ends() {
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        "[contracts]\nsweep_interval_ms = 100",
    )
    .await;
    let contract_id = env
        .contract(HireEnv::input("window"), json!({"acceptance_window_s": 30}))
        .await;
    let before = env.balances().await;
    let delivered = env
        .execute(
            &contract_id,
            Some(&env.pay(&env.challenge(&contract_id).await).await),
            None,
        )
        .await;
    assert_eq!(delivered.status, 200, "{:?}", delivered.body);
    assert_eq!(delivered.body["settlement"]["status"], "deferred");
    assert_eq!(
        env.balances().await,
        before,
        "nothing moves during the window"
    );
    // The window ends by the engine's clock; the sweep (every 100 ms) settles it.
    env.app.clock.advance(Duration::from_secs(30));
    eventually(
        Duration::from_secs(10),
        "the sweep settling the contract",
        || async { (env.state(&contract_id).await == "settled").then_some(()) },
    )
    .await;
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price());
    assert_eq!(after.1, before.1 + price());
    let answer = env.execute(&contract_id, None, None).await;
    assert_eq!(answer.status, 200);
    assert!(answer.payment_response().success);
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "settlement_succeeded")
            .count(),
        1
    );
}

#[tokio::test]
async fn an_instance_never_serves_a_402_for_a_contract_it_saw_paid() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("cached offer");
    let contract_id = env.contract(input.clone(), json!({})).await;
    let first = env.execute(&contract_id, None, Some(&input)).await;
    let again = env.execute(&contract_id, None, Some(&input)).await;
    assert_eq!((first.status, again.status), (402, 402));
    assert_eq!(
        first.header("payment-required"),
        again.header("payment-required"),
        "the same challenge, served from memory the second time"
    );
    assert_eq!(first.body, again.body);
    // A body that is not the contract's input is still refused on the fast path.
    let other = env
        .execute(&contract_id, None, Some(&HireEnv::input("other")))
        .await;
    assert_eq!(other.status, 409, "{:?}", other.body);
    // Another seeker does not learn the contract exists.
    let (stranger, _) = env.app.create_key("seeker").await;
    let hidden = env.execute_as(&stranger, &contract_id, None, None).await;
    assert_eq!(hidden.status, 404, "{:?}", hidden.body);

    let paid = env
        .execute(
            &contract_id,
            Some(&env.pay(&first.payment_required()).await),
            None,
        )
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let after = env.execute(&contract_id, None, None).await;
    assert_eq!(after.status, 200, "{:?}", after.body);
    assert_eq!(
        after.payment_response().transaction,
        paid.payment_response().transaction
    );
}

#[tokio::test]
async fn a_stale_402_on_another_instance_is_harmless() {
    let (env, second, _key_dir) = two_gateways(TestDatabase::sqlite()).await;
    let contract_id = env.contract(HireEnv::input("two caches"), json!({})).await;
    // The second instance caches the 402; the first takes the payment.
    let stale = env
        .execute_on(&second.address, &contract_id, None, None)
        .await;
    assert_eq!(stale.status, 402);
    let before = env.balances().await;
    let paid = env
        .execute(
            &contract_id,
            Some(&env.pay(&env.challenge(&contract_id).await).await),
            None,
        )
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    // Across instances the second may still show the old 402; a payment signed for it is
    // answered from the stored state and never charged.
    let again = env
        .execute_on(&second.address, &contract_id, None, None)
        .await;
    assert!([200, 402].contains(&again.status), "{:?}", again.body);
    let second_payment = env.pay(&stale.payment_required()).await;
    let answered = env
        .execute_on(&second.address, &contract_id, Some(&second_payment), None)
        .await;
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    assert_eq!(
        answered.payment_response().transaction,
        paid.payment_response().transaction
    );
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "one transfer");
    // Having seen the stored state, the second instance stops serving the stale 402.
    let now_known = env
        .execute_on(&second.address, &contract_id, None, None)
        .await;
    assert_eq!(now_known.status, 200, "{:?}", now_known.body);
    assert_eq!(env.worker.executions(), 1);
}

/// The offer cache is bounded by what its entries hold, not by their number: a contract whose
/// input would make its entry heavier than one may be is not remembered, and its unpaid
/// executes read the stored state. Both contracts are paid on a second instance, so the first
/// sees none of their events: the small one's 402 still comes from memory, the large one is
/// answered from the store.
#[tokio::test]
async fn a_contract_too_large_to_remember_is_answered_from_the_store() {
    let (env, second, _key_dir) = two_gateways(TestDatabase::sqlite()).await;
    let small = env.contract(HireEnv::input("small"), json!({})).await;
    let large = env
        .contract(HireEnv::input(&"x".repeat(600 * 1024)), json!({}))
        .await;
    let mut transactions = Vec::new();
    for contract_id in [&small, &large] {
        let payment = env.pay(&env.challenge(contract_id).await).await;
        let paid = env
            .execute_on(&second.address, contract_id, Some(&payment), None)
            .await;
        assert_eq!(paid.status, 200, "{:?}", paid.body);
        transactions.push(paid.payment_response().transaction);
    }

    let remembered = env.execute(&small, None, None).await;
    assert_eq!(remembered.status, 402, "{:?}", remembered.body);
    let stored = env.execute(&large, None, None).await;
    assert_eq!(stored.status, 200, "{:?}", stored.body);
    assert_eq!(stored.payment_response().transaction, transactions[1]);
    assert_eq!(env.worker.executions(), 2);
}

/// Protocol options a hire worker cannot honour, an ill-typed one, and a verifier quorum
/// naming the hired worker itself: refused with stable codes before anything is signed.
async fn proposals_the_worker_cannot_honour_are_refused(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let input = HireEnv::input("the quick brown fox");
    let contracts = || async {
        let response = env.app.get("/v1/contracts", Some(&env.seeker_key)).await;
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.unwrap()
    };
    let before = contracts().await;
    for (extra, status, code) in [
        (json!({"profile": "careful"}), 422, "option_not_supported"),
        (
            json!({"reuse_cached_outputs": true}),
            422,
            "option_not_supported",
        ),
        (json!({"reuse_cached_outputs": "yes"}), 422, "invalid_body"),
        (
            json!({"verification": {"policy_id": "vp.crosscheck.v1", "policy_params": {"quorum": {
                "min_verifiers": 1, "min_pass_ratio": 1.0, "verifiers": [env.worker_id]}}}}),
            422,
            "verifier_is_worker",
        ),
    ] {
        let response = env.propose(input.clone(), extra.clone()).await;
        assert_eq!(response.status(), status, "{extra}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{extra}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    assert_eq!(contracts().await, before, "nothing was stored");
}

#[tokio::test]
async fn proposals_the_worker_cannot_honour_are_refused_on_sqlite() {
    proposals_the_worker_cannot_honour_are_refused(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn proposals_the_worker_cannot_honour_are_refused_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    proposals_the_worker_cannot_honour_are_refused(database).await;
}
