//! `upto`: pay for what was verified, on real parts: anvil with Permit2 and the x402 `upto`
//! proxy at their canonical addresses, the devnet's plain ERC-20, the embedded facilitator, a
//! worker-sdk worker delivering a `multiple` output, and the official `@x402/evm` 2.27 `upto`
//! client (`tools/interop/sign.mjs`) signing the payment unchanged.
//!
//! The listing prices `summarize` per item (`metering: {unit: item, max_units: 5}`) and takes
//! `upto`: the terms pin the unit, its price and the maximum; the seeker authorizes the maximum;
//! each delivered item is verified on its own and only the verified items are paid. What the
//! worker claims (its `metadata`) is never counted. A rejection moves nothing. Replays and
//! concurrent duplicates are one payment; reconciliation matches the settled amount.

use std::net::SocketAddr;

use alloy::primitives::{Address, U256};
use hiregate_contracts::{deliverable::Output, reputation::Window, token::Jwks};
use hiregate_payments::{PaymentPayload, PaymentRequired, devnet::Devnet};
use hiregate_worker_sdk::{
    GatewayKeys, TaskContext, TaskOutcome, WorkerBuilder, receipt::verify_receipt,
};
use serde_json::{Value, json};

use crate::{
    helpers::{ADMIN_KEY, TestDatabase, spawn_app_on},
    hire_env::{HireEnv, assert_reconciled, chain_settings, listed_env, serve_worker},
};

/// Price of one verified item.
pub(crate) const UNIT: u64 = 200_000;
/// The most items one contract pays for.
pub(crate) const MAX_UNITS: u64 = 5;
/// What the payer lets Permit2 move, approved once.
const ALLOWANCE: u64 = 20 * MAX_UNITS * UNIT;

/// One item's schema: a non-empty summary.
pub(crate) fn item_schema() -> Value {
    json!({
        "type": "object",
        "required": ["summary"],
        "properties": {"summary": {"type": "string", "minLength": 1}},
    })
}

/// The input asking the worker for items passing (or not) as `passing` says.
pub(crate) fn input(passing: &[bool]) -> Value {
    json!({"text": "summarize these", "passing": passing})
}

/// A worker whose `summarize` delivers one item per `input.passing` entry (an empty summary
/// where it is `false`) and claims, in its metadata, to have done nine units whatever it did.
pub(crate) async fn metered_worker(gateway: &str) -> crate::hire_env::RunningWorker {
    let handler = |_ctx: TaskContext, input: Value| async move {
        let items = input["passing"]
            .as_array()
            .map(|flags| {
                flags
                    .iter()
                    .enumerate()
                    .map(|(i, passes)| Output::Json {
                        content: if passes.as_bool() == Some(true) {
                            json!({"summary": format!("point {i}")})
                        } else {
                            json!({"summary": ""})
                        },
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        TaskOutcome::output(Output::Multiple { items })
            .with_metadata(json!({"units": 9, "items_done": 9}))
    };
    let worker = WorkerBuilder::new("metered", "1")
        .task_type("summarize")
        .gateway_keys(GatewayKeys::remote(
            format!("{gateway}/.well-known/jwks.json").parse().unwrap(),
        ))
        .build(handler)
        .unwrap();
    serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// A gateway on a fresh devnet with the metered worker listed per item for `upto`, and a
/// seeker holding [`SEEKER_FUNDS`](crate::hire_env::SEEKER_FUNDS) of the devnet's plain ERC-20 that approved Permit2.
pub(crate) async fn upto_env(database: TestDatabase) -> HireEnv {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    upto_env_on(devnet, database, "").await
}

/// [`upto_env`] on `devnet`, with `extra` gateway settings.
pub(crate) async fn upto_env_on(devnet: Devnet, database: TestDatabase, extra: &str) -> HireEnv {
    let app = spawn_app_on(database, &chain_settings(&devnet, extra)).await;
    let worker = metered_worker(&app.address).await;
    let listing = json!({
        "endpoint": worker.endpoint,
        "protocol": "hire",
        "network": devnet.network(),
        "asset": devnet.permit_token().to_checksum(None),
        "tasks": {
            "summarize": {
                "price": UNIT.to_string(),
                "output_schema": item_schema(),
                "metering": {"unit": "item", "max_units": MAX_UNITS},
            }
        },
        "payment_schemes": ["upto"],
        "max_parallel": 4,
    });
    let env = listed_env(devnet, app, worker, listing).await;
    env.fund_with_permit_token().await;
    env.approve_permit2(env.devnet.permit_token(), ALLOWANCE)
        .await;
    env
}

/// (payer, worker) balances of the plain ERC-20.
pub(crate) async fn balances(env: &HireEnv) -> (U256, U256) {
    let of = |who: Address| async move { env.devnet.permit_token_balance(who).await.unwrap() };
    (of(env.wallet.address()).await, of(env.pay_to).await)
}

pub(crate) async fn allowance(env: &HireEnv) -> U256 {
    env.devnet
        .permit2_allowance(env.devnet.permit_token(), env.wallet.address())
        .await
        .unwrap()
}

/// The official `@x402/evm` 2.27 client's payment of `challenge` (it picks its `upto` scheme
/// client for the `upto` offer): the `PAYMENT-SIGNATURE` value and the decoded payload.
pub(crate) async fn official_upto_payment(
    env: &HireEnv,
    challenge: &PaymentRequired,
) -> (String, Value) {
    let signed = hiregate_payments::devnet::node_script(
        "sign.mjs",
        &json!({
            "privateKey": env.wallet.to_bytes().to_string(),
            "paymentRequired": challenge,
        }),
    )
    .await
    .expect("sign.mjs runs");
    (
        signed["paymentSignature"].as_str().unwrap().to_owned(),
        signed["paymentPayload"].clone(),
    )
}

/// The Permit2 nonce of the signed `payload` is still unused on chain: nothing was settled.
pub(crate) async fn assert_permit_unused(env: &HireEnv, payload: &Value) {
    let nonce: U256 = payload["payload"]["permit2Authorization"]["nonce"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        !env.devnet
            .permit2_nonce_used(env.wallet.address(), nonce)
            .await
            .unwrap()
    );
}

fn assert_upto_offer(env: &HireEnv, challenge: &PaymentRequired) {
    let requirements = &challenge.accepts[0];
    assert_eq!(requirements.scheme, "upto");
    assert_eq!(requirements.amount.get(), U256::from(MAX_UNITS * UNIT));
    assert_eq!(requirements.extra["assetTransferMethod"], "permit2");
    assert_eq!(
        requirements.extra["facilitatorAddress"],
        env.devnet.relayer().address().to_checksum(None),
        "the embedded facilitator's relayer settles, as its /supported says"
    );
    assert_eq!(
        requirements.asset,
        env.devnet.permit_token().to_checksum(None)
    );
}

async fn three_of_five_items_pay_three_units(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("three_of_five_items_pay_three_units") {
        return;
    }
    let env = upto_env(database).await;
    // The terms pin the unit, its price and the maximum, and price the contract at it.
    let proposed = env
        .propose(input(&[true, false, true, false, true]), json!({}))
        .await;
    assert_eq!(proposed.status(), 201);
    let created: Value = proposed.json().await.unwrap();
    let terms = &created["terms"];
    assert_eq!(terms["price"]["scheme"], "upto");
    assert_eq!(
        terms["price"]["amount"],
        (MAX_UNITS * UNIT).to_string(),
        "{terms:#}"
    );
    assert_eq!(
        terms["metering"],
        json!({"unit": "item", "unit_price": UNIT.to_string(), "max_units": MAX_UNITS})
    );
    let contract_id = created["contract_id"].as_str().unwrap().to_owned();
    let challenge = env.challenge(&contract_id).await;
    assert_upto_offer(&env, &challenge);
    let before = balances(&env).await;

    let (payment, payload) = official_upto_payment(&env, &challenge).await;
    assert_eq!(payload["accepted"]["scheme"], "upto");
    assert_eq!(
        payload["payload"]["permit2Authorization"]["permitted"]["amount"],
        (MAX_UNITS * UNIT).to_string(),
        "the seeker authorizes the maximum"
    );
    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(paid.body["state"], "settled");
    let transaction = paid.payment_response().transaction;

    // Three items passed of five: exactly three units moved, whatever the worker claimed.
    let three = U256::from(3 * UNIT);
    let after = balances(&env).await;
    assert_eq!(after.0, before.0 - three, "the payer paid three units");
    assert_eq!(after.1, before.1 + three, "the worker got three units");
    assert_eq!(allowance(&env).await, U256::from(ALLOWANCE) - three);
    let stored = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.amount, three.to_string(), "the settled amount");
    assert_eq!(stored.settle_tx.as_deref(), Some(transaction.as_str()));
    let signed: PaymentPayload = serde_json::from_value(stored.payload.clone()).unwrap();
    assert_eq!(
        signed
            .permit2_evm()
            .unwrap()
            .permit2_authorization
            .permitted
            .amount
            .get(),
        U256::from(MAX_UNITS * UNIT),
        "the signed maximum stays in the payload"
    );
    let verification = env
        .app
        .store
        .latest_verification(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert!(verification.passed);
    assert_eq!(
        verification.result["details"]["metered"],
        json!({"unit": "item", "delivered": 5, "verified": 3, "billable": 3,
               "passed_items": [0, 2, 4]})
    );
    let attempt = &env.app.store.list_attempts(&contract_id).await.unwrap()[0];
    assert_eq!(
        attempt.worker_metadata.as_ref().unwrap()["units"],
        9,
        "the worker claimed nine units and was paid for three"
    );

    // A replay of the same payment: the stored answer, nothing run or moved again.
    let again = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.payment_response().transaction, transaction);
    assert_eq!(balances(&env).await, after);
    assert_eq!(env.worker.executions(), 1);

    // Reconciliation matches the settled amount, not the authorized maximum.
    let report = assert_reconciled(&env).await;
    let matched = report["matched"].as_array().unwrap();
    assert_eq!(matched.len(), 1, "{report:#}");
    assert_eq!(matched[0]["transaction"], transaction.as_str());
    assert_eq!(report["totals"][0]["chain"]["amount"], three.to_string());
    assert_eq!(report["totals"][0]["store"]["amount"], three.to_string());
    // `hiregate reconcile`, reading the gateway's own configuration, agrees and exits 0.
    crate::ledger::reconcile_cli_ok(&env).await;

    // The signed receipt binds the settled amount, not the authorized maximum.
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/receipt"),
            Some(&env.seeker_key),
        )
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
    let receipt = verify_receipt(body["receipt"].as_str().unwrap(), &jwks).unwrap();
    let bound = receipt.payment.expect("the payment is bound");
    assert_eq!(bound.amount, three.to_string());
    assert_eq!(bound.tx_hash.as_deref(), Some(transaction.as_str()));

    // More items than pinned, all passing: the maximum, never more.
    let contract_id = env.contract(input(&[true; 7]), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let (payment, _) = official_upto_payment(&env, &challenge).await;
    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let most = U256::from(MAX_UNITS * UNIT);
    assert_eq!(balances(&env).await.1, after.1 + most);

    // No item passes: rejected, nothing moves, the permit stays unused.
    let contract_id = env.contract(input(&[false, false]), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let (payment, payload) = official_upto_payment(&env, &challenge).await;
    let before = balances(&env).await;
    let rejected = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(rejected.status, 422, "{:?}", rejected.body);
    assert_eq!(env.state(&contract_id).await, "rejected");
    assert_eq!(balances(&env).await, before, "a rejection settles nothing");
    assert_permit_unused(&env, &payload).await;
    let report = assert_reconciled(&env).await;
    assert_eq!(
        report["totals"][0]["chain"]["amount"],
        (three + most).to_string()
    );
    // The worker's reputation counts the settled volume: three units, then the maximum.
    let (_, snapshot) = crate::reputation::reputation(&env, &env.worker_id).await;
    let figures = snapshot.figures(Window::AllTime, None).unwrap();
    assert_eq!(figures.volume_settled.len(), 1);
    assert_eq!(
        U256::from(figures.volume_settled[0].amount.units()),
        three + most
    );
}

#[tokio::test]
async fn the_official_upto_client_pays_three_units_for_three_of_five_verified_items() {
    Box::pin(three_of_five_items_pay_three_units(TestDatabase::sqlite())).await;
}

#[tokio::test]
async fn the_official_upto_client_pays_three_units_for_three_of_five_verified_items_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(three_of_five_items_pay_three_units(database)).await;
}

async fn concurrent_duplicates(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("concurrent_upto_duplicates") {
        return;
    }
    let env = upto_env(database).await;
    let contract_id = env
        .contract(input(&[true, true, false, true]), json!({}))
        .await;
    let challenge = env.challenge(&contract_id).await;
    let (payment, _) = official_upto_payment(&env, &challenge).await;
    let before = balances(&env).await;
    let answers =
        futures::future::join_all((0..8).map(|_| env.execute(&contract_id, Some(&payment), None)))
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
            transactions.insert(answer.payment_response().transaction);
        }
    }
    assert!(transactions.len() <= 1, "{transactions:?}");
    assert_eq!(env.worker.executions(), 1, "one execution");
    let three = U256::from(3 * UNIT);
    crate::helpers::eventually(std::time::Duration::from_secs(30), "settled", || async {
        (env.state(&contract_id).await == "settled").then_some(())
    })
    .await;
    let after = balances(&env).await;
    assert_eq!(after.0, before.0 - three, "one transfer of three units");
    assert_eq!(after.1, before.1 + three);

    // The same permit offered to another contract is the same payment: refused, nothing moves.
    let other = env.contract(input(&[true]), json!({})).await;
    let replayed = env.execute(&other, Some(&payment), None).await;
    assert_eq!(replayed.status, 409, "{:?}", replayed.body);
    assert_eq!(replayed.code(), "payment_already_used");
    assert_eq!(balances(&env).await, after);
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn replays_and_eight_concurrent_duplicates_of_an_upto_payment_move_money_once() {
    concurrent_duplicates(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn replays_and_eight_concurrent_duplicates_of_an_upto_payment_move_money_once_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    concurrent_duplicates(database).await;
}

#[tokio::test]
async fn upto_is_refused_for_a_task_type_priced_per_contract() {
    let env = upto_env(TestDatabase::sqlite()).await;
    let mut listing = env.another_listing();
    listing["payment_schemes"] = json!(["upto", "exact"]);
    let fixed = env.register(&listing).await;
    let response = env
        .app
        .send_json(
            reqwest::Method::POST,
            "/v1/contracts",
            Some(&env.seeker_key),
            &json!({
                "worker_id": fixed,
                "task_type": "summarize",
                "input": {"text": "x"},
            }),
        )
        .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["error"]["code"], "payment_scheme_not_accepted",
        "{body:#}"
    );
    // A listing whose metering cannot be paid is refused at registration.
    let mut listing = env.another_listing();
    listing["tasks"]["summarize"]["metering"] = json!({"unit": "item", "max_units": 65});
    let response = env.app.register_worker(&env.operator_key, &listing).await;
    assert_eq!(response.status(), 422, "{}", response.text().await.unwrap());
}

/// An operator disputes a rejection; the arbiter decides "settle". The arbiter's decision stands
/// in for the verifier's on every item the gateway counted: the delivered items are paid, at
/// most the pinned maximum. With no item delivered there is nothing to bill: the decision is
/// carried out as a void, nothing moves and the permit stays unused (an `upto` settlement of
/// zero would move nothing without a transaction, and the contract would wait for one forever).
#[tokio::test]
async fn the_arbiter_settling_a_rejection_pays_the_delivered_items_and_voids_when_none() {
    if !hiregate_payments::devnet::node_tools_or_skip("arbiter_settles_upto") {
        return;
    }
    let env = upto_env(TestDatabase::sqlite()).await;
    let dispute_and_settle = |contract_id: String| {
        let env = &env;
        async move {
            let response = env
                .app
                .send_json(
                    reqwest::Method::POST,
                    &format!("/v1/contracts/{contract_id}/disputes"),
                    Some(&env.operator_key),
                    &json!({"reason": "the items are fine"}),
                )
                .await;
            let opened: Value = response.json().await.unwrap();
            assert_eq!(opened["state"], "escalated", "{opened:#}");
            let dispute_id = opened["dispute_id"].as_str().unwrap();
            let response = env
                .app
                .send_json(
                    reqwest::Method::POST,
                    &format!("/v1/disputes/{dispute_id}/decision"),
                    Some(ADMIN_KEY),
                    &json!({"decision": "settle", "reason": "the work is good"}),
                )
                .await;
            assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        }
    };

    // Three items delivered, none passing: rejected; the arbiter settles three units.
    let contract_id = env.contract(input(&[false, false, false]), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let (payment, _) = official_upto_payment(&env, &challenge).await;
    let rejected = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(rejected.status, 422, "{:?}", rejected.body);
    let before = balances(&env).await;
    dispute_and_settle(contract_id.clone()).await;
    assert_eq!(env.state(&contract_id).await, "settled");
    let three = U256::from(3 * UNIT);
    let after = balances(&env).await;
    assert_eq!(
        after.0,
        before.0 - three,
        "the payer paid the delivered items"
    );
    assert_eq!(after.1, before.1 + three);
    let stored = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.amount, three.to_string());

    // Nothing delivered (an empty list is no deliverable, so the contract fails without a
    // verdict): nothing to bill, nothing moves.
    let contract_id = env.contract(input(&[]), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let (payment, payload) = official_upto_payment(&env, &challenge).await;
    // The worker's empty list fails each attempt; the last one fails the contract.
    for _ in 0..3 {
        let failed = env.execute(&contract_id, Some(&payment), None).await;
        assert_eq!(failed.status, 502, "{:?}", failed.body);
        assert_eq!(failed.code(), "worker_failed");
    }
    assert_eq!(env.state(&contract_id).await, "failed");
    dispute_and_settle(contract_id.clone()).await;
    assert_eq!(env.state(&contract_id).await, "voided");
    assert_eq!(balances(&env).await, after, "nothing moved");
    assert_permit_unused(&env, &payload).await;
    let report = assert_reconciled(&env).await;
    assert_eq!(report["totals"][0]["chain"]["amount"], three.to_string());
}

/// The stable x402 URL of a metered listing offers `upto` for the maximum; the official
/// `@x402/fetch` client with its `upto` scheme client pays it unchanged and only the verified
/// items move. The catalogue describes the resource the same way (the maximum, Permit2, the
/// pinned metering).
#[tokio::test]
async fn the_official_fetch_client_pays_a_metered_stable_url_for_the_verified_items() {
    if !hiregate_payments::devnet::node_tools_or_skip("metered_stable_url") {
        return;
    }
    let env = upto_env(TestDatabase::sqlite()).await;
    let url = format!(
        "{}/x402/workers/{}/summarize",
        env.app.address, env.worker_id
    );

    let catalogue: Value = env
        .app
        .get("/discovery/resources?scheme=upto", None)
        .await
        .json()
        .await
        .unwrap();
    let item = catalogue["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["resource"] == url.as_str())
        .unwrap_or_else(|| panic!("{catalogue:#}"))
        .clone();
    let listed = &item["accepts"][0];
    assert_eq!(listed["scheme"], "upto", "{item:#}");
    assert_eq!(listed["amount"], (MAX_UNITS * UNIT).to_string());
    assert_eq!(listed["extra"]["assetTransferMethod"], "permit2");
    assert_eq!(
        listed["extra"]["facilitatorAddress"],
        env.devnet.relayer().address().to_checksum(None)
    );
    assert_eq!(
        item["metadata"]["price"]["metering"],
        json!({"unit": "item", "unit_price": UNIT.to_string(), "max_units": MAX_UNITS})
    );

    let unpaid = env
        .app
        .send_json(
            reqwest::Method::POST,
            &format!("/x402/workers/{}/summarize", env.worker_id),
            None,
            &input(&[true, false, true]),
        )
        .await;
    assert_eq!(unpaid.status(), 402);
    let challenge: PaymentRequired =
        hiregate_payments::decode_header(unpaid.headers()["payment-required"].to_str().unwrap())
            .unwrap();
    assert_upto_offer(&env, &challenge);

    let before = balances(&env).await;
    let result = hiregate_payments::devnet::node_script(
        "pay.mjs",
        &json!({
            "url": url,
            "privateKey": env.wallet.to_bytes().to_string(),
            "method": "POST",
            "body": input(&[true, false, true]),
            "scheme": "upto",
            "allowedAssets": [{"network": env.devnet.network(),
                               "asset": env.devnet.permit_token().to_checksum(None)}],
        }),
    )
    .await
    .expect("pay.mjs runs");
    assert_eq!(result["status"], 200, "{result:#}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result:#}");
    let two = U256::from(2 * UNIT);
    let after = balances(&env).await;
    assert_eq!(after.0, before.0 - two, "two verified items of three");
    assert_eq!(after.1, before.1 + two);
    assert_reconciled(&env).await;
}
