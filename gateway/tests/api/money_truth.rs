//! The chain decides money outcomes, and nothing unpaid is shown (issue 10), on real parts:
//! anvil with the devnet EIP-3009 token, the embedded facilitator, the example echo worker.
//! Chain events the gateway did not cause (a third party submitting the seeker's
//! authorization, the payer emptying its wallet) are produced for real with signed EIP-3009
//! transfers sent by another account.

use std::time::Duration;

use alloy::{
    network::TransactionBuilder,
    primitives::{Address, TxHash, U256},
    providers::{Provider, ProviderBuilder},
    rpc::types::TransactionRequest,
    signers::local::PrivateKeySigner,
};
use hiregate_payments::{
    ExactPayment, PaymentPayload, PaymentRequirements, SignOptions, devnet::Devnet, encode_header,
    exact::onchain::transfer_calldata, sign_exact_payment, sign_exact_payment_with,
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, eventually},
    hire_env::{HireEnv, WorkerKind, hire_env, now},
};

/// Fast background loops, and an acceptance window long enough to act inside it.
const FAST_LOOPS: &str = r#"
    [contracts]
    sweep_interval_ms = 200
    jobs_interval_ms = 200
    recovery_grace_ms = 500
"#;

/// Send `payload`'s EIP-3009 transfer to the chain from an account that is not the gateway's
/// relayer, as anyone holding the signed authorization can.
async fn submit_authorization(
    devnet: &Devnet,
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
) -> TxHash {
    let payment = ExactPayment::parse(payload, requirements).expect("an exact payment");
    let sender = devnet.fresh_relayer().await.expect("a funded sender");
    let provider = ProviderBuilder::new()
        .wallet(sender)
        .connect_http(devnet.rpc_url().clone());
    let tx = TransactionRequest::default()
        .with_to(devnet.token())
        .with_input(transfer_calldata(&payment, false));
    let receipt = provider
        .send_transaction(tx)
        .await
        .expect("sent")
        .get_receipt()
        .await
        .expect("mined");
    assert!(receipt.status(), "the transfer succeeded on chain");
    receipt.transaction_hash
}

/// Whether any JSON object in `value` (outside the signed terms, which hold the seeker's own
/// input) has the echo worker's output key.
fn shows_work(value: &Value) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            // The terms and the offer (its x402 discovery metadata) carry the output schema,
            // whose property names are not work.
            .any(|(key, inner)| {
                key == "summary"
                    || (key != "terms" && key != "payment_required" && shows_work(inner))
            }),
        Value::Array(items) => items.iter().any(shows_work),
        Value::String(text) => text.contains("\"summary\""),
        _ => false,
    }
}

async fn contract_view(env: &HireEnv, contract_id: &str) -> Value {
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

async fn events_export(env: &HireEnv, contract_id: &str) -> String {
    env.app
        .get(
            &format!("/v1/contracts/{contract_id}/events.jsonl"),
            Some(&env.seeker_key),
        )
        .await
        .text()
        .await
        .unwrap()
}

async fn wait_for_state(env: &HireEnv, contract_id: &str, state: &str) {
    eventually(Duration::from_secs(20), state, || async {
        (env.state(contract_id).await == state).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_payment_valid_for_years_is_refused_and_nothing_is_stored() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = env.contract(HireEnv::input("far"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    // validBefore = "now" + maxTimeoutSeconds with "now" ten years ahead.
    let ten_years = 10 * 365 * 24 * 3600;
    let payload = sign_exact_payment(
        &env.wallet,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now() + ten_years,
    )
    .await
    .unwrap();
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    assert!(
        answer
            .body
            .to_string()
            .contains("authorization_window_too_long"),
        "{:?}",
        answer.body
    );
    assert_eq!(env.state(&contract_id).await, "offered");
    assert!(
        env.app
            .store
            .payment_of_contract(&contract_id)
            .await
            .unwrap()
            .is_none(),
        "nothing stored"
    );
    assert_eq!(env.worker.executions(), 0);
}

async fn used_outside_the_gateway(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, FAST_LOOPS).await;
    let contract_id = env
        .contract(
            HireEnv::input("paid elsewhere"),
            json!({"acceptance_window_s": 3}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let payload = env.sign(&challenge).await;
    let before = env.balances().await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "accepted");
    assert!(
        answer.body["deliverable"].is_null() && !shows_work(&answer.body),
        "during the acceptance window of an `exact` contract the work is withheld: {:?}",
        answer.body
    );
    assert!(answer.body["deliverable_digest"].is_string());

    // Anyone holding the signed authorization may submit it; the worker is paid by it.
    let external = submit_authorization(&env.devnet, &payload, &challenge.accepts[0]).await;

    // When the window ends the facilitator's settle is refused (the nonce is used), and the
    // gateway asks the chain: the money moved, in the third party's transaction.
    wait_for_state(&env, &contract_id, "settled").await;
    let price = U256::from(crate::hire_env::PRICE);
    assert_eq!(env.balances().await, (before.0 - price, before.1 + price));
    let view = contract_view(&env, &contract_id).await;
    assert_eq!(view["settlement"]["transaction"], external.to_string());
    assert_eq!(view["payment"]["state"], "settled");
    assert!(shows_work(&view["deliverable"]), "settled work is released");
    let events = env.event_kinds(&contract_id).await;
    assert!(events.contains(&"settlement_succeeded".to_owned()));
    assert!(!events.contains(&"settlement_failed".to_owned()));
}

#[tokio::test]
async fn an_authorization_used_outside_the_gateway_settles_with_the_chains_transaction() {
    used_outside_the_gateway(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn an_authorization_used_outside_the_gateway_settles_with_the_chains_transaction_on_postgres()
{
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    used_outside_the_gateway(database).await;
}

#[tokio::test]
async fn a_payer_who_drains_the_wallet_gets_settlement_failed_and_never_sees_the_work() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, FAST_LOOPS).await;
    let contract_id = env
        .contract(HireEnv::input("drained"), json!({"acceptance_window_s": 3}))
        .await;
    let challenge = env.challenge(&contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert!(!shows_work(&answer.body), "{:?}", answer.body);

    // Inside the window the payer moves its whole balance away with another authorization.
    let balance = env.balance(env.wallet.address()).await;
    let sink = PrivateKeySigner::random().address();
    let mut drain = challenge.accepts[0].clone();
    drain.pay_to = sink.to_checksum(None);
    drain.amount = balance.into();
    let drain_payload =
        sign_exact_payment_with(&env.wallet, &drain, None, now(), &SignOptions::default())
            .await
            .unwrap();
    submit_authorization(&env.devnet, &drain_payload, &drain).await;
    assert_eq!(env.balance(env.wallet.address()).await, U256::ZERO);

    wait_for_state(&env, &contract_id, "settlement_failed").await;
    assert_eq!(env.balance(env.pay_to).await, U256::ZERO, "nothing moved");

    // No endpoint or stream shows the work.
    let view = contract_view(&env, &contract_id).await;
    assert!(!shows_work(&view), "{view}");
    assert!(
        view["deliverable"]["content_withheld"].is_string(),
        "{view}"
    );
    assert!(view["deliverable"]["digest"].is_string());
    assert!(view["verification"]["passed"].as_bool().unwrap());
    let again = env.execute(&contract_id, None, None).await;
    assert_eq!(again.status, 402, "{:?}", again.body);
    assert_eq!(again.code(), "settlement_failed");
    assert!(!shows_work(&again.body));
    let export = events_export(&env, &contract_id).await;
    assert!(!export.contains("summary"), "{export}");
    // The operator may see what its worker delivered.
    let operator_view: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.operator_key),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(shows_work(&operator_view["deliverable"]), "{operator_view}");
    let _: Address = sink;
}
