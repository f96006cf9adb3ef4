//! The upfront payment flow on real parts: anvil with the devnet EIP-3009 token, the embedded
//! facilitator, a worker-sdk worker that reads the chain the moment it is called, and the
//! official `@x402` 2.27 clients (`@x402/fetch` through `tools/interop/pay.mjs`, the core
//! `x402Client` through `sign.mjs`) paying unchanged.
//!
//! A listing with `payment_flow: "upfront"` (an `exact`-only one) signs terms that pin the flow
//! and its consequence, offers `extra.paymentFlow: "upfront"`, and has the price settled on
//! chain before its worker is called: the worker sees its payout already credited. A passing
//! deliverable settles the contract from that transfer, nothing sent again; a rejected one
//! stays paid (`rejected`, payment `settled`). Replays and concurrent duplicates move the money
//! once, and reconciliation agrees with the chain after each.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use alloy::primitives::{Address, U256};
use hiregate_contracts::{deliverable::Output, payment_flow::UPFRONT_CONSEQUENCE};
use hiregate_payments::{PaymentRequired, devnet::Devnet};
use hiregate_worker_sdk::{GatewayKeys, TaskContext, TaskOutcome, WorkerBuilder};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, spawn_app_on},
    hire_env::{
        HireEnv, PRICE, RunningWorker, assert_reconciled, chain_settings, hire_listing, listed_env,
        serve_worker,
    },
};

/// What the worker saw on chain when it was called: the watched address's token balance.
type Sightings = Arc<Mutex<Vec<U256>>>;

/// `token.balanceOf(who)` by a plain `eth_call` to `rpc`, as the worker reads it.
async fn balance_on_chain(rpc: &str, token: Address, who: Address) -> U256 {
    let data = format!("0x70a08231{:0>64}", hex::encode(who.as_slice()));
    let answer: Value = reqwest::Client::new()
        .post(rpc)
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "eth_call",
            "params": [{"to": token.to_checksum(None), "data": data}, "latest"],
        }))
        .send()
        .await
        .expect("eth_call sent")
        .json()
        .await
        .expect("eth_call answered");
    let raw = answer["result"].as_str().expect("a balance");
    U256::from_str_radix(raw.trim_start_matches("0x"), 16).expect("hex balance")
}

/// A worker whose `summarize` first records the token balance of `input.watch` (the listing's
/// payout address) and then delivers a summary that passes the output schema, or (with
/// `input.pass: false`) one that lacks its `confidence` and is rejected.
async fn watching_worker(gateway: &str, devnet: &Devnet, seen: Sightings) -> RunningWorker {
    let rpc = devnet.rpc_url().to_string();
    let token = devnet.token();
    let handler = move |_ctx: TaskContext, input: Value| {
        let rpc = rpc.clone();
        let seen = seen.clone();
        async move {
            if let Some(watched) = input["watch"].as_str().and_then(|a| a.parse().ok()) {
                let balance = balance_on_chain(&rpc, token, watched).await;
                seen.lock().unwrap().push(balance);
            }
            let content = if input["pass"] == false {
                json!({"summary": "no confidence given"})
            } else {
                json!({"summary": "done", "confidence": 0.9})
            };
            TaskOutcome::output(Output::Json { content })
        }
    };
    let worker = WorkerBuilder::new("upfront", "1")
        .task_type("summarize")
        .gateway_keys(GatewayKeys::remote(
            format!("{gateway}/.well-known/jwks.json").parse().unwrap(),
        ))
        .build(handler)
        .unwrap();
    serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// A gateway on a fresh devnet with the watching worker listed upfront, and a funded seeker.
async fn upfront_env(database: TestDatabase) -> (HireEnv, Sightings) {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let app = spawn_app_on(
        database,
        &chain_settings(&devnet, "[contracts]\njobs_interval_ms = 50"),
    )
    .await;
    let seen = Sightings::default();
    let worker = watching_worker(&app.address, &devnet, seen.clone()).await;
    let mut listing = hire_listing(&worker.endpoint, Address::ZERO, &devnet, 4);
    listing["payment_flow"] = json!("upfront");
    (listed_env(devnet, app, worker, listing).await, seen)
}

fn input(env: &HireEnv, pass: bool, label: &str) -> Value {
    json!({"text": label, "pass": pass, "watch": env.pay_to.to_checksum(None)})
}

/// The official `@x402/fetch` client pays `contract_id`'s execute on its own (402, sign, retry).
async fn fetch_pays(env: &HireEnv, contract_id: &str, body: &Value) -> Value {
    hiregate_payments::devnet::node_script(
        "pay.mjs",
        &json!({
            "url": format!("{}/v1/contracts/{contract_id}/execute", env.app.address),
            "privateKey": env.wallet.to_bytes().to_string(),
            "method": "POST",
            "authorization": format!("Bearer {}", env.seeker_key),
            "body": body,
            "scheme": "exact",
            "allowedAssets": [{"network": env.devnet.network(), "asset": env.devnet.token().to_checksum(None)}],
        }),
    )
    .await
    .expect("pay.mjs runs")
}

/// The official core client's `PAYMENT-SIGNATURE` for `challenge`, for replays.
async fn official_signature(env: &HireEnv, challenge: &PaymentRequired) -> String {
    let signed = hiregate_payments::devnet::node_script(
        "sign.mjs",
        &json!({
            "privateKey": env.wallet.to_bytes().to_string(),
            "paymentRequired": challenge,
        }),
    )
    .await
    .expect("sign.mjs runs");
    assert_eq!(
        signed["paymentPayload"]["accepted"]["extra"]["paymentFlow"],
        "upfront"
    );
    signed["paymentSignature"].as_str().unwrap().to_owned()
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

async fn upfront_hires_settle_before_the_worker_and_rejected_work_stays_paid(
    database: TestDatabase,
) {
    if !hiregate_payments::devnet::node_tools_or_skip("upfront_hires") {
        return;
    }
    let (env, seen) = upfront_env(database).await;
    let price = U256::from(PRICE);

    // The terms pin the flow and its consequence; the offer names it as the official server does.
    let proposed = env.propose(input(&env, true, "accepted"), json!({})).await;
    assert_eq!(proposed.status(), 201);
    let created: Value = proposed.json().await.unwrap();
    assert_eq!(
        created["terms"]["payment_flow"],
        json!({"flow": "upfront", "consequence": UPFRONT_CONSEQUENCE})
    );
    assert_eq!(
        created["payment"]["x402"]["accepts"][0]["extra"]["paymentFlow"],
        "upfront"
    );
    assert_eq!(
        created["payment"]["informational"]["payment_flow"],
        "upfront"
    );
    let contract_id = created["contract_id"].as_str().unwrap().to_owned();
    let challenge = env.challenge(&contract_id).await;
    assert_eq!(challenge.accepts[0].extra["paymentFlow"], "upfront");

    // Paid by @x402/fetch: the worker, when called, already sees the price on its payout address.
    let before = env.balances().await;
    let paid = fetch_pays(&env, &contract_id, &input(&env, true, "accepted")).await;
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(paid["paymentResponse"]["success"], true, "{paid}");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [before.1 + price],
        "the money moved before the worker was called"
    );
    let after = env.balances().await;
    assert_eq!(after, (before.0 - price, before.1 + price), "moved once");
    assert_eq!(env.state(&contract_id).await, "settled");
    let kinds = env.event_kinds(&contract_id).await;
    let position = |kind: &str| kinds.iter().position(|k| k == kind).expect(kind);
    assert!(
        position("payment_settled_upfront") < position("forwarded"),
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "settlement_succeeded")
            .count(),
        1
    );
    let view = contract_view(&env, &contract_id).await;
    assert_eq!(view["payment_flow"], "upfront");
    assert_eq!(view["payment"]["state"], "settled");
    assert_eq!(
        paid["paymentResponse"]["transaction"], view["settlement"]["transaction"],
        "the contract settled with the upfront transfer"
    );
    assert_reconciled(&env).await;

    // A deliverable that fails verification: rejected, and paid all the same.
    let contract_id = env
        .contract(input(&env, false, "rejected"), json!({}))
        .await;
    let before = env.balances().await;
    let rejected = fetch_pays(&env, &contract_id, &input(&env, false, "rejected")).await;
    assert_eq!(rejected["status"], 422, "{rejected}");
    assert_eq!(seen.lock().unwrap().last(), Some(&(before.1 + price)));
    assert_eq!(env.balances().await, (before.0 - price, before.1 + price));
    assert_eq!(env.state(&contract_id).await, "rejected");
    let view = contract_view(&env, &contract_id).await;
    assert_eq!(view["payment_flow"], "upfront");
    assert_eq!(view["payment"]["state"], "settled", "{view:#}");
    assert!(view["settlement"]["transaction"].is_string(), "{view:#}");
    assert_eq!(view["verification"]["passed"], false, "{view:#}");
    assert_reconciled(&env).await;
    let rejected_id = contract_id;

    // Replays and concurrent duplicates of one payment move the money once.
    let body = input(&env, true, "duplicates");
    let contract_id = env.contract(body.clone(), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let signature = official_signature(&env, &challenge).await;
    let before = env.balances().await;
    let calls_before = env.worker.executions();
    let (first, second) = tokio::join!(
        env.execute(&contract_id, Some(&signature), Some(&body)),
        env.execute(&contract_id, Some(&signature), Some(&body)),
    );
    assert!(
        [first.status, second.status].contains(&200),
        "{first:?} {second:?}"
    );
    let again = env
        .execute(&contract_id, Some(&signature), Some(&body))
        .await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(env.balances().await, (before.0 - price, before.1 + price));
    assert_eq!(env.worker.executions(), calls_before + 1);
    assert_eq!(env.state(&contract_id).await, "settled");
    assert_reconciled(&env).await;

    // Past every authorization's validBefore, the authorization sweep (every 50 ms here) never
    // voids a payment that moved: the rejected contract stays rejected and paid.
    env.app
        .clock
        .advance(std::time::Duration::from_secs(7 * 24 * 3600));
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(env.state(&rejected_id).await, "rejected");
    let payment = env
        .app
        .store
        .payment_of_contract(&rejected_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.state.as_str(), "settled");
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn upfront_hires_settle_before_the_worker_and_rejected_work_stays_paid_on_sqlite() {
    Box::pin(
        upfront_hires_settle_before_the_worker_and_rejected_work_stays_paid(TestDatabase::sqlite()),
    )
    .await;
}

#[tokio::test]
async fn upfront_hires_settle_before_the_worker_and_rejected_work_stays_paid_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(upfront_hires_settle_before_the_worker_and_rejected_work_stays_paid(database)).await;
}

/// Upfront is refused for listings it cannot mean anything for, at listing time, with the field
/// named; an `exact`-only listing may switch to it and back.
#[tokio::test]
async fn upfront_is_refused_for_metered_and_escrowed_listings() {
    let (env, _) = upfront_env(TestDatabase::sqlite()).await;
    for schemes in [json!(["upto"]), json!(["exact", "auth-capture"])] {
        let mut listing = env.another_listing();
        listing["payment_flow"] = json!("upfront");
        listing["payment_schemes"] = schemes.clone();
        let response = env.app.register_worker(&env.operator_key, &listing).await;
        assert_eq!(response.status(), 422, "{schemes}");
        let body: Value = response.json().await.unwrap();
        assert!(body.to_string().contains("payment_flow"), "{body:#}");
    }
    let path = format!("/v1/workers/{}", env.worker_id);
    let patch = |body: Value| {
        let request = env
            .app
            .client
            .patch(format!("{}{path}", env.app.address))
            .bearer_auth(&env.operator_key)
            .json(&body);
        async move { request.send().await.expect("request sent") }
    };
    let refused = patch(json!({"payment_schemes": ["exact", "auth-capture"]})).await;
    assert_eq!(refused.status(), 422);
    let unknown = patch(json!({"payment_flow": "later"})).await;
    assert_eq!(unknown.status(), 422);
    let back = patch(json!({"payment_flow": "authorization"})).await;
    assert_eq!(back.status(), 200, "{}", back.text().await.unwrap());
    let contract_id = env.contract(input(&env, true, "plain"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    assert!(
        !challenge.accepts[0].extra.contains_key("paymentFlow"),
        "authorization, the default, is left out as the official server leaves it"
    );
}
