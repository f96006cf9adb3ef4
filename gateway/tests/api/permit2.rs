//! `exact` over Permit2 for any ERC-20, on real parts: anvil with Permit2 and the x402 exact
//! proxy at their canonical addresses, the devnet's plain ERC-20 (EIP-2612, no EIP-3009), the
//! embedded facilitator, a worker-sdk worker, and the official `@x402/fetch` client
//! (`tools/interop/pay.mjs`) paying unchanged.
//!
//! A listing priced in a token without EIP-3009 is offered `exact` with
//! `extra.assetTransferMethod = "permit2"`; the payer approves Permit2 once (or, with a node to
//! read from, the official client signs the `eip2612GasSponsoring` permit instead); replays and
//! concurrent duplicates are one payment (the Permit2 nonce is the replay key); a rejected
//! deliverable moves nothing and leaves the nonce unused; reconciliation recognises Permit2
//! settlements. An EIP-3009 token configured with `transfer_method = "permit2"` is offered the
//! same way.

use alloy::{
    primitives::{Address, B256, U256},
    signers::local::PrivateKeySigner,
};
use hiregate_payments::{
    PaymentPayload, PaymentRequired, Permit2SignOptions, devnet::Devnet, encode_header,
    sign_permit2_payment,
};
use serde_json::{Value, json};

use crate::{
    helpers::{ADMIN_KEY, TestDatabase, spawn_app_on},
    hire_env::{
        Answer, HireEnv, PRICE, SEEKER_FUNDS, WorkerKind, answer, assert_reconciled,
        chain_settings, hire_listing, listed_env, now, start_worker,
    },
};

/// What the payer lets Permit2 move, approved once: enough for a few hires.
const ALLOWANCE: u64 = 10 * PRICE;

/// A gateway on a fresh devnet with a `kind` worker listed at [`PRICE`] in `asset` (the
/// devnet's plain ERC-20 unless given), `extra` gateway settings, and a seeker wallet holding
/// [`SEEKER_FUNDS`] of it that approved Permit2 for [`ALLOWANCE`] when `approve` says so.
async fn permit2_env(
    database: TestDatabase,
    kind: WorkerKind,
    use_eip3009_token: bool,
    approve: bool,
) -> HireEnv {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    permit2_env_on(devnet, database, kind, use_eip3009_token, "", approve).await
}

/// [`permit2_env`] on a running `devnet`, with `extra` gateway settings.
async fn permit2_env_on(
    devnet: Devnet,
    database: TestDatabase,
    kind: WorkerKind,
    use_eip3009_token: bool,
    extra: &str,
    approve: bool,
) -> HireEnv {
    let asset = if use_eip3009_token {
        devnet.token()
    } else {
        devnet.permit_token()
    };
    let app = spawn_app_on(database, &chain_settings(&devnet, extra)).await;
    let worker = start_worker(kind, &app.address).await;
    let mut listing = hire_listing(&worker.endpoint, Address::ZERO, &devnet, 4);
    listing["asset"] = json!(asset.to_checksum(None));
    let env = listed_env(devnet, app, worker, listing).await;
    if !use_eip3009_token {
        env.fund_with_permit_token().await;
    }
    if approve {
        env.approve_permit2(asset, ALLOWANCE).await;
    }
    env
}

/// The listing's asset.
fn asset_of(env: &HireEnv, challenge: &PaymentRequired) -> Address {
    let asset: Address = challenge.accepts[0].asset.parse().unwrap();
    assert!(asset == env.devnet.permit_token() || asset == env.devnet.token());
    asset
}

/// (payer, worker) balances of `asset`.
async fn balances(env: &HireEnv, asset: Address) -> (U256, U256) {
    let of = |who: Address| async move {
        if asset == env.devnet.permit_token() {
            env.devnet.permit_token_balance(who).await.unwrap()
        } else {
            env.devnet.balance_of(who).await.unwrap()
        }
    };
    (of(env.wallet.address()).await, of(env.pay_to).await)
}

async fn allowance(env: &HireEnv, asset: Address) -> U256 {
    env.devnet
        .permit2_allowance(asset, env.wallet.address())
        .await
        .unwrap()
}

fn resource_url(env: &HireEnv) -> String {
    format!(
        "{}/x402/workers/{}/summarize",
        env.app.address, env.worker_id
    )
}

/// `POST` the stable resource with an optional payment.
async fn call(env: &HireEnv, body: &Value, payment: Option<&str>) -> Answer {
    let mut request = env
        .app
        .client
        .post(resource_url(env))
        .json(body)
        .timeout(std::time::Duration::from_secs(60));
    if let Some(payment) = payment {
        request = request.header("PAYMENT-SIGNATURE", payment);
    }
    answer(request.send().await.expect("sent")).await
}

/// The 402 of an unpaid call.
async fn offer(env: &HireEnv, body: &Value) -> PaymentRequired {
    let unpaid = call(env, body, None).await;
    assert_eq!(unpaid.status, 402, "{:?}", unpaid.body);
    unpaid.payment_required()
}

/// A Permit2 payment of `challenge` signed as the official client signs it.
async fn sign(env: &HireEnv, challenge: &PaymentRequired) -> PaymentPayload {
    let mut payload = sign_permit2_payment(
        &env.wallet,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now(),
        &Permit2SignOptions::default(),
    )
    .await
    .expect("signs");
    // The official client echoes the 402's extensions.
    payload.extensions = challenge.extensions.clone();
    payload
}

fn nonce_of(payload: &PaymentPayload) -> U256 {
    payload
        .permit2_evm()
        .unwrap()
        .permit2_authorization
        .nonce
        .get()
}

/// The official `@x402/fetch` client pays the stable URL; `rpc` lets it read the chain (and so
/// offer the EIP-2612 gas-sponsoring permit).
async fn official_client_pays(env: &HireEnv, input: &Value, asset: Address, rpc: bool) -> Value {
    let mut request = json!({
        "url": resource_url(env),
        "privateKey": env.wallet.to_bytes().to_string(),
        "method": "POST",
        "body": input,
        "scheme": "exact",
        "allowedAssets": [{"network": env.devnet.network(), "asset": asset.to_checksum(None)}],
    });
    if rpc {
        request["rpcUrl"] = json!(env.devnet.rpc_url().as_str());
    }
    hiregate_payments::devnet::node_script("pay.mjs", &request)
        .await
        .expect("pay.mjs runs")
}

fn assert_permit2_offer(challenge: &PaymentRequired, asset: Address) {
    let requirements = &challenge.accepts[0];
    assert_eq!(requirements.scheme, "exact");
    assert_eq!(requirements.extra["assetTransferMethod"], "permit2");
    assert_eq!(requirements.asset, asset.to_checksum(None));
    assert_eq!(requirements.amount.get(), U256::from(PRICE));
    // The token's EIP-2612 domain, for the gas-sponsoring permit.
    assert!(requirements.extra["name"].is_string());
    assert!(requirements.extra["version"].is_string());
    // The embedded facilitator submits EIP-2612 permits: the 402 says so.
    assert!(challenge.extensions.contains_key("eip2612GasSponsoring"));
}

async fn official_client_pays_a_permit2_listing(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("official_client_pays_a_permit2_listing") {
        return;
    }
    let env = permit2_env(database, WorkerKind::Echo, false, true).await;
    let input = HireEnv::input("paid in any ERC-20 by @x402/fetch");
    let challenge = offer(&env, &input).await;
    let asset = asset_of(&env, &challenge);
    assert_permit2_offer(&challenge, asset);
    assert_eq!(allowance(&env, asset).await, U256::from(ALLOWANCE));
    let before = balances(&env, asset).await;

    let result = official_client_pays(&env, &input, asset, false).await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result}");
    let transaction = result["paymentResponse"]["transaction"]
        .as_str()
        .unwrap()
        .to_owned();
    let after = balances(&env, asset).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "the payer paid once");
    assert_eq!(after.1, before.1 + U256::from(PRICE), "the worker was paid");
    assert_eq!(
        allowance(&env, asset).await,
        U256::from(ALLOWANCE - PRICE),
        "Permit2 used the approval for the price"
    );
    // The relayer's cost of one Permit2 settlement (proxy → Permit2 → token), for the notes.
    let receipt = {
        use alloy::providers::Provider as _;
        env.devnet
            .provider()
            .get_transaction_receipt(transaction.parse().unwrap())
            .await
            .unwrap()
            .expect("mined")
    };
    eprintln!("permit2 exact settlement gas used: {}", receipt.gas_used);
    assert!(receipt.gas_used < 200_000, "{}", receipt.gas_used);
    let contract_id = result["body"]["contract_id"].as_str().unwrap();
    assert_eq!(env.state(contract_id).await, "settled");
    let stored = env
        .app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.settle_tx.as_deref(), Some(transaction.as_str()));
    assert_eq!(stored.asset, asset);
    // Written EIP-55: a lookup by authorization compares the stored text with that spelling.
    let by_authorization = env
        .app
        .store
        .find_payment_by_authorization(&stored.network, &asset, &stored.payer, &stored.nonce)
        .await
        .unwrap();
    assert_eq!(
        by_authorization.map(|p| p.payment_id),
        Some(stored.payment_id.clone())
    );
    // The stored replay key is the Permit2 nonce the payer signed, spent on chain.
    let signed: PaymentPayload = serde_json::from_value(stored.payload.clone()).unwrap();
    let nonce = nonce_of(&signed);
    assert_eq!(stored.nonce, B256::from(nonce).to_string());
    assert!(
        env.devnet
            .permit2_nonce_used(env.wallet.address(), nonce)
            .await
            .unwrap()
    );
    let report = assert_reconciled(&env).await;
    let matched = report["matched"].as_array().unwrap();
    assert_eq!(matched.len(), 1, "{report:#}");
    assert_eq!(matched[0]["transaction"], transaction.as_str());
    assert_eq!(matched[0]["asset"], asset.to_checksum(None));
    assert_eq!(report["totals"][0]["chain"]["amount"], PRICE.to_string());
    // `hiregate reconcile`, reading the gateway's own configuration, agrees and exits 0.
    let cli = crate::ledger::reconcile_cli_ok(&env).await;
    assert_eq!(cli["matched"][0]["transaction"], transaction.as_str());

    // A rejected deliverable: the official client gets the 422, nothing moves, the nonce stays
    // unused and the allowance untouched.
    let faulty = permit2_env(TestDatabase::sqlite(), WorkerKind::Faulty, false, true).await;
    let before = balances(&faulty, asset).await;
    let rejected = official_client_pays(
        &faulty,
        &json!({"text": "x", "mode": "invalid"}),
        faulty.devnet.permit_token(),
        false,
    )
    .await;
    assert_eq!(rejected["status"], 422, "{rejected}");
    assert!(rejected["paymentResponse"].is_null(), "{rejected}");
    assert!(rejected["body"].get("output").is_none(), "{rejected}");
    assert_eq!(balances(&faulty, asset).await, before, "nothing moved");
    assert_eq!(allowance(&faulty, asset).await, U256::from(ALLOWANCE));
    let contract_id = rejected["body"]["contract_id"].as_str().unwrap();
    assert_eq!(faulty.state(contract_id).await, "rejected");
    let stored = faulty
        .app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .unwrap();
    let signed: PaymentPayload = serde_json::from_value(stored.payload.clone()).unwrap();
    assert!(
        !faulty
            .devnet
            .permit2_nonce_used(faulty.wallet.address(), nonce_of(&signed))
            .await
            .unwrap()
    );
    assert_reconciled(&faulty).await;
}

#[tokio::test]
async fn the_official_client_pays_a_permit2_listing_and_a_rejection_moves_nothing() {
    Box::pin(official_client_pays_a_permit2_listing(
        TestDatabase::sqlite(),
    ))
    .await;
}

#[tokio::test]
async fn the_official_client_pays_a_permit2_listing_and_a_rejection_moves_nothing_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(official_client_pays_a_permit2_listing(database)).await;
}

#[tokio::test]
async fn the_official_client_signs_the_gas_sponsoring_permit_when_permit2_is_not_approved() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "the_official_client_signs_the_gas_sponsoring_permit_when_permit2_is_not_approved",
    ) {
        return;
    }
    // No approval: the payer holds the tokens and has never sent a transaction.
    let env = permit2_env(TestDatabase::sqlite(), WorkerKind::Echo, false, false).await;
    let asset = env.devnet.permit_token();
    assert_eq!(allowance(&env, asset).await, U256::ZERO);
    let sent_before = env
        .devnet
        .transaction_count(env.wallet.address())
        .await
        .unwrap();
    let before = balances(&env, asset).await;
    let result = official_client_pays(&env, &HireEnv::input("gasless approval"), asset, true).await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result}");
    let after = balances(&env, asset).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    // The EIP-2612 permit approved Permit2 for exactly the price, used by the same settlement;
    // the payer sent no transaction of its own.
    assert_eq!(allowance(&env, asset).await, U256::ZERO);
    assert_eq!(
        env.devnet
            .transaction_count(env.wallet.address())
            .await
            .unwrap(),
        sent_before
    );
    let contract_id = result["body"]["contract_id"].as_str().unwrap();
    let stored = env
        .app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        stored.payload["extensions"]["eip2612GasSponsoring"]["info"]["signature"].is_string(),
        "the official client signed the permit"
    );
    assert_reconciled(&env).await;
}

async fn replays_and_duplicates(database: TestDatabase) {
    let env = permit2_env(database, WorkerKind::Echo, false, true).await;
    let input = HireEnv::input("eight at once, over Permit2");
    let challenge = offer(&env, &input).await;
    let asset = asset_of(&env, &challenge);
    let payload = sign(&env, &challenge).await;
    let payment = encode_header(&payload);
    let before = balances(&env, asset).await;

    let answers =
        futures::future::join_all((0..8).map(|_| call(&env, &input, Some(&payment)))).await;
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
    let after = balances(&env, asset).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "one transfer");
    assert_eq!(after.1, before.1 + U256::from(PRICE));

    // The same payment later: the stored answer, nothing run or moved again.
    let again = call(&env, &input, Some(&payment)).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(
        Some(again.payment_response().transaction),
        transactions.first().cloned()
    );
    assert_eq!(env.worker.executions(), 1);
    assert_eq!(balances(&env, asset).await, after);

    // The contract API takes Permit2 payments too: its offer is the same kind.
    let contract_id = env.contract(HireEnv::input("by contract"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    assert_permit2_offer(&challenge, asset);
    let contract_payload = sign(&env, &challenge).await;
    let contract_payment = encode_header(&contract_payload);
    let paid = env
        .execute(&contract_id, Some(&contract_payment), None)
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(paid.body["state"], "settled");
    let after = balances(&env, asset).await;
    // The same permit offered to another contract (whose offer it matches field by field) is
    // the same payment: its Permit2 nonce is the replay key.
    let other = env.contract(HireEnv::input("second"), json!({})).await;
    let replayed = env.execute(&other, Some(&contract_payment), None).await;
    assert_eq!(replayed.status, 409, "{:?}", replayed.body);
    assert_eq!(replayed.code(), "payment_already_used");
    assert_eq!(balances(&env, asset).await, after, "nothing moved twice");
    // An EIP-3009 authorization is not what a Permit2 offer asks for.
    let challenge = env.challenge(&other).await;
    let eip3009 = hiregate_payments::sign_exact_payment(
        &env.wallet,
        &{
            let mut requirements = challenge.accepts[0].clone();
            requirements.extra.remove("assetTransferMethod");
            requirements
        },
        Some(challenge.resource.clone()),
        now(),
    )
    .await
    .unwrap();
    let mut eip3009 = eip3009;
    eip3009.accepted = challenge.accepts[0].clone();
    let refused = env
        .execute(&other, Some(&encode_header(&eip3009)), None)
        .await;
    assert_eq!(refused.status, 402, "{:?}", refused.body);
    assert_eq!(refused.code(), "payment_invalid");
    assert_eq!(env.state(&other).await, "offered");
    assert_eq!(balances(&env, asset).await, after);

    let report = assert_reconciled(&env).await;
    assert_eq!(report["matched"].as_array().unwrap().len(), 2, "{report:#}");
    assert_eq!(
        report["totals"][0]["store"]["amount"],
        (2 * PRICE).to_string()
    );
    assert_eq!(
        report["totals"][0]["chain"]["amount"],
        (2 * PRICE).to_string()
    );
}

#[tokio::test]
async fn replays_and_eight_concurrent_duplicates_of_a_permit2_payment_move_money_once() {
    Box::pin(replays_and_duplicates(TestDatabase::sqlite())).await;
}

#[tokio::test]
async fn replays_and_eight_concurrent_duplicates_of_a_permit2_payment_move_money_once_on_postgres()
{
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(replays_and_duplicates(database)).await;
}

#[tokio::test]
async fn an_eip3009_token_configured_for_permit2_is_offered_and_paid_over_permit2() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "an_eip3009_token_configured_for_permit2_is_offered_and_paid_over_permit2",
    ) {
        return;
    }
    // Unlisted, an EIP-3009 token is offered with EIP-3009.
    let plain = permit2_env(TestDatabase::sqlite(), WorkerKind::Echo, true, true).await;
    let challenge = offer(&plain, &HireEnv::input("eip3009 by default")).await;
    assert_eq!(challenge.accepts[0].asset_transfer_method(), "eip3009");
    assert!(!challenge.extensions.contains_key("eip2612GasSponsoring"));
    drop(plain);

    // Listed with `transfer_method = "permit2"`, it is offered over Permit2.
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let usdc = devnet.token();
    let listed = format!(
        r#"
        [[chains.devnet.tokens]]
        address = "{address}"
        name = "{name}"
        version = "{version}"
        decimals = 6
        symbol = "hUSD"
        transfer_method = "permit2"
        "#,
        address = usdc.to_checksum(None),
        name = devnet.token_name(),
        version = devnet.token_version(),
    );
    let env = permit2_env_on(
        devnet,
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        true,
        &listed,
        true,
    )
    .await;
    let input = HireEnv::input("USDC over Permit2");
    let challenge = offer(&env, &input).await;
    assert_permit2_offer(&challenge, usdc);
    let before = balances(&env, usdc).await;
    let result = official_client_pays(&env, &input, usdc, false).await;
    assert_eq!(result["status"], 200, "{result}");
    let after = balances(&env, usdc).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_eq!(allowance(&env, usdc).await, U256::from(ALLOWANCE - PRICE));
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn a_permit2_settlement_behind_the_gateways_back_is_reported_then_found_on_chain() {
    use hiregate_payments::{
        ChainConfig, Facilitator as _, FacilitatorConfig, LocalFacilitator, Network, RelayerKey,
        SettleRequest,
    };
    use std::str::FromStr as _;
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let env = permit2_env_on(
        devnet,
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        false,
        "[contracts]\nsweep_interval_ms = 200\njobs_interval_ms = 200\nrecovery_grace_ms = 500\n",
        true,
    )
    .await;
    let asset = env.devnet.permit_token();
    let before = balances(&env, asset).await;
    // A contract held in its acceptance window, its permit settled meanwhile by someone else
    // (an independent bundled facilitator with its own relayer): money the store does not show.
    let contract_id = env
        .contract(
            HireEnv::input("held, then settled elsewhere"),
            json!({"acceptance_window_s": 4}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let payload = sign(&env, &challenge).await;
    let paid = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(env.state(&contract_id).await, "accepted");
    let outsider = LocalFacilitator::connect(FacilitatorConfig {
        chains: vec![ChainConfig::new(
            Network::from_str(&env.devnet.network()).unwrap(),
            env.devnet.rpc_url().clone(),
            RelayerKey::new(env.devnet.fresh_relayer().await.unwrap()),
        )],
    })
    .await
    .unwrap();
    let elsewhere = outsider
        .settle(&SettleRequest::new(
            payload.clone(),
            challenge.accepts[0].clone(),
        ))
        .await
        .unwrap();
    assert!(elsewhere.success, "{elsewhere:?}");
    let response = env.app.get("/v1/admin/reconcile", Some(ADMIN_KEY)).await;
    let report: Value = response.json().await.unwrap();
    assert_eq!(report["ok"], false, "{report:#}");
    let mismatches = report["mismatches"].as_array().unwrap();
    assert_eq!(mismatches.len(), 1, "{report:#}");
    assert_eq!(mismatches[0]["kind"], "used_not_recorded_settled");
    assert_eq!(mismatches[0]["contract_id"], contract_id.as_str());
    assert_eq!(mismatches[0]["transaction"], elsewhere.transaction.as_str());

    // When the window closes the gateway settles: the facilitator finds the nonce spent, and the
    // chain names the settlement, which the contract records. Nothing moves twice.
    crate::helpers::eventually(
        std::time::Duration::from_secs(30),
        "settled from the chain",
        || async { (env.state(&contract_id).await == "settled").then_some(()) },
    )
    .await;
    let stored = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.settle_tx.as_deref(),
        Some(elsewhere.transaction.as_str())
    );
    let after = balances(&env, asset).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn the_rust_sdk_seeker_pays_a_permit2_contract() {
    use hiregate_worker_sdk::seeker::SeekerClient;
    let env = permit2_env(TestDatabase::sqlite(), WorkerKind::Echo, false, true).await;
    let asset = env.devnet.permit_token();
    let before = balances(&env, asset).await;
    let client = SeekerClient::new(
        url::Url::parse(&env.app.address).unwrap(),
        env.seeker_key.clone(),
        std::sync::Arc::new(env.wallet.clone()),
    );
    let contract = client
        .propose(&json!({
            "worker_id": env.worker_id,
            "task_type": "summarize",
            "input": HireEnv::input("hired by the SDK in a plain ERC-20"),
        }))
        .await
        .unwrap();
    let outcome = client.execute(&contract.id).await.unwrap();
    assert_eq!(outcome.status, 200, "{:?}", outcome.body);
    assert!(outcome.payment_response.unwrap().success);
    let payment = outcome.payment.unwrap();
    assert!(
        payment.permit2_evm().is_ok(),
        "the SDK signed a Permit2 payment"
    );
    let after = balances(&env, asset).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn discovery_lists_a_permit2_listing_with_its_transfer_method() {
    let env = permit2_env(TestDatabase::sqlite(), WorkerKind::Echo, false, false).await;
    let list: Value = env
        .app
        .get("/discovery/resources", None)
        .await
        .json()
        .await
        .unwrap();
    let item = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["resource"] == resource_url(&env).as_str())
        .unwrap()
        .clone();
    let accepts = &item["accepts"][0];
    assert_eq!(accepts["scheme"], "exact");
    assert_eq!(accepts["extra"]["assetTransferMethod"], "permit2");
    assert_eq!(
        accepts["asset"],
        env.devnet.permit_token().to_checksum(None)
    );
}

#[tokio::test]
async fn auth_capture_is_refused_for_a_token_paid_over_permit2_and_exact_is_offered() {
    let escrow = crate::escrow_env::escrow_env(
        TestDatabase::sqlite(),
        json!(["exact", "auth-capture"]),
        Value::Null,
    )
    .await;
    let env = &escrow.env;
    let mut listing = env.another_listing();
    listing["asset"] = json!(env.devnet.permit_token().to_checksum(None));
    listing["payment_schemes"] = json!(["auth-capture", "exact"]);
    let worker_id = env.register(&listing).await;
    let propose = |scheme: Option<&str>| {
        let mut body = json!({
            "worker_id": worker_id,
            "task_type": "summarize",
            "input": HireEnv::input("escrow in a plain ERC-20?"),
        });
        if let Some(scheme) = scheme {
            body["payment_scheme"] = json!(scheme);
        }
        async move {
            env.app
                .send_json(
                    reqwest::Method::POST,
                    "/v1/contracts",
                    Some(&env.seeker_key),
                    &body,
                )
                .await
        }
    };
    // The listing prefers auth-capture, which the escrow cannot take in this token.
    let refused = propose(None).await;
    assert_eq!(refused.status(), 422);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body["error"]["code"], "payment_scheme_not_accepted",
        "{body}"
    );
    assert_eq!(body["error"]["details"]["asset_transfer_method"], "permit2");
    // Asking for exact gets the Permit2 offer.
    let offered = propose(Some("exact")).await;
    assert_eq!(offered.status(), 201);
    let contract_id = offered.json::<Value>().await.unwrap()["contract_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let challenge = env.challenge(&contract_id).await;
    assert_eq!(challenge.accepts[0].scheme, "exact");
    assert_eq!(challenge.accepts[0].asset_transfer_method(), "permit2");
}

#[tokio::test]
async fn the_official_typescript_facilitator_settles_a_permit2_hire_for_the_gateway() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "the_official_typescript_facilitator_settles_a_permit2_hire_for_the_gateway",
    ) {
        return;
    }
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let (_facilitator, url) = crate::x402_interop::official_facilitator(&devnet).await;
    let env = permit2_env_on(
        devnet,
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        false,
        &format!("[facilitator]\nmode = \"http\"\nurl = \"{url}\"\n"),
        true,
    )
    .await;
    let asset = env.devnet.permit_token();
    let input = HireEnv::input("settled by the official facilitator");
    let challenge = offer(&env, &input).await;
    assert_eq!(challenge.accepts[0].asset_transfer_method(), "permit2");
    // An external facilitator is not assumed to submit EIP-2612 permits.
    assert!(!challenge.extensions.contains_key("eip2612GasSponsoring"));
    let before = balances(&env, asset).await;
    let result = official_client_pays(&env, &input, asset, false).await;
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result}");
    let after = balances(&env, asset).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    let contract_id = result["body"]["contract_id"].as_str().unwrap();
    assert_eq!(env.state(contract_id).await, "settled");
    let report = assert_reconciled(&env).await;
    assert_eq!(report["matched"].as_array().unwrap().len(), 1, "{report:#}");
}

#[tokio::test]
async fn a_forged_or_mismatched_permit2_payment_makes_no_contract() {
    let env = permit2_env(TestDatabase::sqlite(), WorkerKind::Echo, false, true).await;
    let input = HireEnv::input("forged");
    let challenge = offer(&env, &input).await;
    let contract_id = challenge.accepts[0].extra["hiregate"]["terms"]["contract_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = balances(&env, env.devnet.permit_token()).await;
    // Another key's signature over the same permit: the offer is free, so no contract row.
    let mut forged = sign(&env, &challenge).await;
    forged.payload["signature"] = json!(format!("0x{}", "11".repeat(65)));
    let answer = call(&env, &input, Some(&encode_header(&forged))).await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    // A permit paying someone else than the offer's payTo.
    let mut elsewhere = sign(&env, &challenge).await;
    elsewhere.payload["permit2Authorization"]["witness"]["to"] =
        json!(PrivateKeySigner::random().address().to_checksum(None));
    let answer = call(&env, &input, Some(&encode_header(&elsewhere))).await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    assert!(
        env.app
            .store
            .get_contract(&contract_id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(balances(&env, env.devnet.permit_token()).await, before);
}

#[tokio::test]
async fn the_mcp_hire_tool_pays_a_permit2_listing_from_its_wallet() {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let asset = devnet.permit_token();
    let mcp_wallet = devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .expect("funded MCP wallet");
    devnet
        .mint_permit_token(mcp_wallet.address(), U256::from(SEEKER_FUNDS))
        .await
        .unwrap();
    devnet
        .approve_permit2(&mcp_wallet, asset, U256::from(ALLOWANCE))
        .await
        .unwrap();
    let extra = format!(
        "[mcp]\nwallet_private_key = \"{}\"\nmax_per_hire = {PRICE}\nmax_per_day = {}\n",
        mcp_wallet.to_bytes(),
        10 * PRICE
    );
    let env = permit2_env_on(
        devnet,
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        false,
        &extra,
        false,
    )
    .await;
    let payer_before = env
        .devnet
        .permit_token_balance(mcp_wallet.address())
        .await
        .unwrap();
    let client = crate::mcp::connect(&env, &env.seeker_key).await;
    let hired = crate::mcp::call(
        &client,
        "hire",
        crate::mcp::hire_arguments(&env, "hired over MCP in a plain ERC-20"),
    )
    .await;
    assert_ne!(hired.is_error, Some(true), "{hired:?}");
    let outcome = crate::mcp::structured(&hired);
    assert_eq!(outcome["state"], "settled", "{outcome:#}");
    assert_eq!(
        env.devnet
            .permit_token_balance(mcp_wallet.address())
            .await
            .unwrap(),
        payer_before - U256::from(PRICE)
    );
    assert_eq!(
        env.devnet
            .permit2_allowance(asset, mcp_wallet.address())
            .await
            .unwrap(),
        U256::from(ALLOWANCE - PRICE)
    );
    client.cancel().await.unwrap();
    assert_reconciled(&env).await;
}
