//! Partial escrowed payments on real parts: anvil with the commerce-payments escrow look-alikes,
//! the devnet's EIP-3009 token, a worker-sdk worker delivering a `multiple` output, and the
//! official `@x402/evm` 2.27 `auth-capture` client (`tools/interop/auth-capture-sign.mjs`)
//! signing the payment unchanged.
//!
//! A listing priced per item that takes `auth-capture` pins the metering in the terms like an
//! `upto` one: the payer locks the maximum, the escrow captures only the verified items (partial
//! acceptance pays pro rata) and the rest is voided back at once. An arbiter may then refund part
//! of what was captured. Every step is checked on chain and reconciled to the atomic unit.

use alloy::primitives::U256;
use hiregate_payments::{PaymentPayload, encode_header};
use hiregate_store::states::PaymentState;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    escrow_env::{EscrowEnv, escrow_gateway, token_store},
    helpers::{ADMIN_KEY, TestDatabase},
    hire_env::{HireEnv, assert_reconciled},
    upto::{MAX_UNITS, UNIT, input, item_schema, metered_worker},
};

/// The treasury's share of a capture, basis points.
const FEE_BPS: u64 = 250;

/// A gateway operating the devnet's escrow, with the metered worker listed per item for
/// `auth-capture` at [`FEE_BPS`].
async fn metered_escrow_env(database: TestDatabase) -> EscrowEnv {
    let gateway = escrow_gateway(database).await;
    let worker = metered_worker(&gateway.app.address).await;
    let listing = json!({
        "endpoint": worker.endpoint,
        "protocol": "hire",
        "network": gateway.devnet.network(),
        "asset": gateway.devnet.token().to_checksum(None),
        "tasks": {
            "summarize": {
                "price": UNIT.to_string(),
                "output_schema": item_schema(),
                "metering": {"unit": "item", "max_units": MAX_UNITS},
            }
        },
        "payment_schemes": ["auth-capture"],
        "fee_policy": {"fee_bps": FEE_BPS},
        "max_parallel": 4,
    });
    gateway.listed(worker, listing).await
}

/// The official client's escrowed payment of `contract_id`'s 402, as a `PAYMENT-SIGNATURE`.
async fn official_escrowed_payment(env: &HireEnv, contract_id: &str) -> String {
    let challenge = env.challenge(contract_id).await;
    let requirements = &challenge.accepts[0];
    assert_eq!(requirements.scheme, "auth-capture");
    assert_eq!(
        requirements.amount.get(),
        U256::from(MAX_UNITS * UNIT),
        "the payer locks the maximum"
    );
    let signed = hiregate_payments::devnet::node_script(
        "auth-capture-sign.mjs",
        &json!({
            "privateKey": env.wallet.to_bytes().to_string(),
            "requirements": requirements,
        }),
    )
    .await
    .expect("auth-capture-sign.mjs runs");
    let mut payload: Value = signed["paymentPayload"].clone();
    payload["accepted"] = serde_json::to_value(requirements).unwrap();
    payload["resource"] = serde_json::to_value(&challenge.resource).unwrap();
    let payload: PaymentPayload = serde_json::from_value(payload).unwrap();
    encode_header(&payload)
}

fn fee_of(amount: U256) -> U256 {
    amount * U256::from(FEE_BPS) / U256::from(10_000u32)
}

async fn refund(env: &HireEnv, contract_id: &str, body: Value) -> (u16, Value) {
    let response = env
        .app
        .send_json(
            Method::POST,
            &format!("/v1/contracts/{contract_id}/refund"),
            Some(ADMIN_KEY),
            &body,
        )
        .await;
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn three_of_five_items_capture_three_units_then_part_is_refunded(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("metered escrow: three of five items") {
        return;
    }
    let EscrowEnv {
        env,
        operator,
        treasury,
    } = metered_escrow_env(database).await;
    let payer = env.wallet.address();
    let store = token_store(&env, operator).await;
    let proposed = env
        .propose(input(&[true, false, true, false, true]), json!({}))
        .await;
    assert_eq!(proposed.status(), 201);
    let created: Value = proposed.json().await.unwrap();
    assert_eq!(created["terms"]["price"]["scheme"], "auth-capture");
    assert_eq!(
        created["terms"]["metering"],
        json!({"unit": "item", "unit_price": UNIT.to_string(), "max_units": MAX_UNITS}),
        "the escrowed terms pin the metering"
    );
    let contract_id = created["contract_id"].as_str().unwrap().to_owned();
    let payer_before = env.balance(payer).await;
    let payment = official_escrowed_payment(&env, &contract_id).await;

    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(env.state(&contract_id).await, "settled");
    let capture = paid.payment_response().transaction;

    // Three items of five passed: three units captured (the fee out of them), two voided back.
    let three = U256::from(3 * UNIT);
    assert_eq!(env.balance(payer).await, payer_before - three);
    assert_eq!(env.balance(env.pay_to).await, three - fee_of(three));
    assert_eq!(env.balance(treasury).await, fee_of(three));
    assert_eq!(env.balance(store).await, U256::ZERO, "nothing stays locked");
    let stored = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.state, PaymentState::Settled);
    assert_eq!(stored.amount, three.to_string(), "the captured amount");
    assert_eq!(stored.settle_tx.as_deref(), Some(capture.as_str()));
    let remainder = stored.remainder_tx.clone().expect("the remainder's void");
    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    let settled = events
        .iter()
        .find(|event| event.kind.as_str() == "settlement_succeeded")
        .expect("settlement_succeeded");
    assert_eq!(settled.details["amount"], three.to_string());
    assert_eq!(settled.details["remainder_transaction"], remainder);

    // The same payment again: the stored answer, nothing moves twice.
    let again = env.execute(&contract_id, Some(&payment), None).await;
    paid.assert_replayed_by(&again);
    assert_eq!(again.payment_response().transaction, capture);
    assert_eq!(env.balance(payer).await, payer_before - three);
    assert_eq!(env.worker.executions(), 1);

    let report = assert_reconciled(&env).await;
    let matched = &report["escrow"]["matched"];
    assert_eq!(matched.as_array().unwrap().len(), 1, "{report:#}");
    let steps: Vec<(String, String)> = matched[0]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            (
                step["step"].as_str().unwrap().to_owned(),
                step["amount"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let five = U256::from(MAX_UNITS * UNIT);
    assert_eq!(
        steps,
        [
            ("authorize".to_owned(), five.to_string()),
            ("capture".to_owned(), three.to_string()),
            ("void".to_owned(), (five - three).to_string()),
        ],
        "{report:#}"
    );

    // The arbiter refunds one unit of the three: more than was captured is refused with
    // nothing sent, then the one unit goes back from the operator's wallet.
    let one = U256::from(UNIT);
    env.devnet
        .mint(operator, one)
        .await
        .expect("fund the operator");
    let sent = env.devnet.transaction_count(operator).await.unwrap();
    let (status, body) = refund(
        &env,
        &contract_id,
        json!({"reason": "two items were thin", "amount": (three + U256::from(1)).to_string()}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "validation_failed", "{body}");
    let (status, body) = refund(
        &env,
        &contract_id,
        json!({"reason": "two items were thin", "amount": "12x"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_body", "{body}");
    assert_eq!(env.devnet.transaction_count(operator).await.unwrap(), sent);
    assert_eq!(env.state(&contract_id).await, "settled");

    let reason = json!({"reason": "two items were thin", "amount": one.to_string()});
    let (status, body) = refund(&env, &contract_id, reason.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "refunded");
    assert_eq!(body["amount"], one.to_string());
    assert_eq!(env.balance(payer).await, payer_before - three + one);
    assert_eq!(env.balance(operator).await, U256::ZERO);
    assert_eq!(
        env.balance(env.pay_to).await,
        three - fee_of(three),
        "the worker is never clawed back"
    );
    // Twice is once.
    let (status, body) = refund(&env, &contract_id, reason).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["amount"], one.to_string());
    assert_eq!(env.balance(payer).await, payer_before - three + one);

    let report = assert_reconciled(&env).await;
    let steps = report["escrow"]["matched"][0]["steps"].as_array().unwrap();
    let refunded = steps
        .iter()
        .find(|step| step["step"] == "refund")
        .expect("the refund step");
    assert_eq!(refunded["amount"], one.to_string(), "{report:#}");
    crate::ledger::reconcile_cli_ok(&env).await;

    // No item passes: rejected, everything locked goes back.
    let contract_id = env.contract(input(&[false, false]), json!({})).await;
    let before = env.balance(payer).await;
    let payment = official_escrowed_payment(&env, &contract_id).await;
    let rejected = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(rejected.status, 422, "{:?}", rejected.body);
    assert_eq!(env.state(&contract_id).await, "voided");
    assert_eq!(env.balance(store).await, U256::ZERO);
    assert_eq!(
        env.balance(payer).await,
        before,
        "a rejection captures nothing"
    );
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn an_escrowed_metered_hire_captures_the_verified_items_and_the_arbiter_refunds_part() {
    Box::pin(three_of_five_items_capture_three_units_then_part_is_refunded(TestDatabase::sqlite()))
        .await;
}

#[tokio::test]
async fn an_escrowed_metered_hire_captures_the_verified_items_and_the_arbiter_refunds_part_on_postgres()
 {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(three_of_five_items_capture_three_units_then_part_is_refunded(database)).await;
}
