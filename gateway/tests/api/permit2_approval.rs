//! `exact` over Permit2 with the `erc20ApprovalGasSponsoring` extension, on real parts: anvil
//! with Permit2 and the x402 exact proxy at their canonical addresses, the devnet's plainest
//! ERC-20 (no EIP-3009, no EIP-2612), the embedded facilitator, a worker-sdk worker, and the
//! official `@x402/evm` 2.27 client (`tools/interop/pay.mjs`, `sign.mjs`) given a node to read
//! from.
//!
//! The payer has never approved Permit2 and holds no ETH: the official client signs
//! `token.approve(Permit2, maxUint256)` at its next nonce; the gateway checks it when the payment
//! arrives (a forged one makes no contract), and at settlement funds the payer's gas, broadcasts
//! the approval and settles. A replay moves money once; reconciliation is clean.

use alloy::{
    consensus::{SignableTransaction, TxEip1559, TxEnvelope},
    eips::eip2718::Encodable2718,
    primitives::{Address, Bytes, TxKind, U256},
    providers::Provider as _,
    signers::{SignerSync, local::PrivateKeySigner},
    sol_types::SolCall,
};
use hiregate_payments::{
    PaymentPayload, PaymentRequired,
    devnet::Devnet,
    encode_header,
    permit2::{PERMIT2_ADDRESS, approval::ERC20_APPROVAL_GAS_SPONSORING},
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, spawn_app_on},
    hire_env::{
        Answer, HireEnv, PRICE, SEEKER_FUNDS, WorkerKind, answer, assert_reconciled,
        chain_settings, hire_listing, listed_env, start_worker,
    },
};

alloy::sol! {
    interface IApprove {
        function approve(address spender, uint256 amount) external returns (bool);
    }
}

/// A gateway on a fresh devnet with an echo worker listed at [`PRICE`] in a freshly deployed
/// plain ERC-20, and a seeker holding [`SEEKER_FUNDS`] of it, no ETH, and no approval.
async fn plain_token_env(database: TestDatabase) -> (HireEnv, Address) {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let token = devnet.deploy_plain_token().await.expect("plain token");
    let app = spawn_app_on(database, &chain_settings(&devnet, "")).await;
    let worker = start_worker(WorkerKind::Echo, &app.address).await;
    let mut listing = hire_listing(&worker.endpoint, Address::ZERO, &devnet, 4);
    listing["asset"] = json!(token.to_checksum(None));
    let env = listed_env(devnet, app, worker, listing).await;
    env.devnet
        .mint_plain_token(token, env.wallet.address(), U256::from(SEEKER_FUNDS))
        .await
        .expect("minted");
    env.devnet
        .set_eth_balance(env.wallet.address(), U256::ZERO)
        .await
        .expect("no ETH");
    (env, token)
}

fn resource_url(env: &HireEnv) -> String {
    format!(
        "{}/x402/workers/{}/summarize",
        env.app.address, env.worker_id
    )
}

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

async fn offer(env: &HireEnv, body: &Value) -> PaymentRequired {
    let unpaid = call(env, body, None).await;
    assert_eq!(unpaid.status, 402, "{:?}", unpaid.body);
    unpaid.payment_required()
}

/// (payer, worker) balances of `token`.
async fn balances(env: &HireEnv, token: Address) -> (U256, U256) {
    (
        env.devnet
            .erc20_balance(token, env.wallet.address())
            .await
            .unwrap(),
        env.devnet.erc20_balance(token, env.pay_to).await.unwrap(),
    )
}

async fn eth(env: &HireEnv) -> U256 {
    env.devnet
        .provider()
        .get_balance(env.wallet.address())
        .await
        .unwrap()
}

/// The official client's payment of `challenge`, signed with a node to read from (so it adds
/// the approval when the allowance is short).
async fn official_signature(env: &HireEnv, challenge: &PaymentRequired) -> PaymentPayload {
    let signed = hiregate_payments::devnet::node_script(
        "sign.mjs",
        &json!({
            "privateKey": env.wallet.to_bytes().to_string(),
            "paymentRequired": challenge,
            "rpcUrl": env.devnet.rpc_url().as_str(),
        }),
    )
    .await
    .expect("sign.mjs runs");
    serde_json::from_value(signed["paymentPayload"].clone()).expect("a payment payload")
}

/// An approval transaction as the official client builds it, with `to`, `spender` and the
/// signing key chosen by the test.
fn approval_tx(env: &HireEnv, signer: &PrivateKeySigner, to: Address, spender: Address) -> Bytes {
    let tx = TxEip1559 {
        chain_id: env.devnet.chain_id(),
        nonce: 0,
        gas_limit: 70_000,
        max_fee_per_gas: 2_000_000_000,
        max_priority_fee_per_gas: 1_000_000_000,
        to: TxKind::Call(to),
        value: U256::ZERO,
        access_list: Default::default(),
        input: IApprove::approveCall {
            spender,
            amount: U256::MAX,
        }
        .abi_encode()
        .into(),
    };
    let signature = signer.sign_hash_sync(&tx.signature_hash()).unwrap();
    TxEnvelope::from(tx.into_signed(signature))
        .encoded_2718()
        .into()
}

async fn approval_sponsored(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("approval_sponsored") {
        return;
    }
    let (env, token) = plain_token_env(database).await;
    let payer = env.wallet.address();
    let input = HireEnv::input("paid in a plain ERC-20 by a payer with no ETH");
    let challenge = offer(&env, &input).await;
    assert_eq!(challenge.accepts[0].extra["assetTransferMethod"], "permit2");
    // No EIP-2612 domain: only the approval transaction can approve Permit2 gaslessly.
    assert!(challenge.accepts[0].extra.get("version").is_none());
    assert!(!challenge.extensions.contains_key("eip2612GasSponsoring"));
    assert!(
        challenge
            .extensions
            .contains_key(ERC20_APPROVAL_GAS_SPONSORING)
    );
    assert_eq!(
        env.devnet.permit2_allowance(token, payer).await.unwrap(),
        U256::ZERO
    );
    assert_eq!(eth(&env).await, U256::ZERO);
    assert_eq!(env.devnet.transaction_count(payer).await.unwrap(), 0);

    // Forged approvals: nothing stored, nothing moved, the reason said.
    let contract_id = challenge.accepts[0].extra["hiregate"]["terms"]["contract_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let genuine = official_signature(&env, &challenge).await;
    let info = &genuine.extensions[ERC20_APPROVAL_GAS_SPONSORING]["info"];
    assert_eq!(info["spender"], PERMIT2_ADDRESS.to_checksum(None));
    assert_eq!(info["amount"], U256::MAX.to_string());
    let stranger = PrivateKeySigner::random();
    let forgeries = [
        (
            approval_tx(&env, &env.wallet, token, stranger.address()),
            "erc20_approval_tx_wrong_spender",
        ),
        (
            approval_tx(&env, &stranger, token, PERMIT2_ADDRESS),
            "erc20_approval_tx_signer_mismatch",
        ),
        (
            approval_tx(&env, &env.wallet, env.devnet.token(), PERMIT2_ADDRESS),
            "erc20_approval_tx_wrong_target",
        ),
    ];
    let before = balances(&env, token).await;
    for (signed_transaction, reason) in forgeries {
        let mut forged = genuine.clone();
        forged
            .extensions
            .get_mut(ERC20_APPROVAL_GAS_SPONSORING)
            .unwrap()["info"]["signedTransaction"] = json!(signed_transaction.to_string());
        let refused = call(&env, &input, Some(&encode_header(&forged))).await;
        assert_eq!(refused.status, 402, "{reason}: {:?}", refused.body);
        assert!(refused.header("payment-required").is_some(), "{reason}");
        assert!(
            refused.body.to_string().contains(reason),
            "{reason}: {:?}",
            refused.body
        );
        assert!(
            env.app
                .store
                .get_contract(&contract_id)
                .await
                .unwrap()
                .is_none(),
            "{reason}: no contract stored"
        );
    }
    assert_eq!(balances(&env, token).await, before);
    assert_eq!(eth(&env).await, U256::ZERO, "no gas funded for a forgery");

    // The official client pays through @x402/fetch, signing its own approval.
    let result = hiregate_payments::devnet::node_script(
        "pay.mjs",
        &json!({
            "url": resource_url(&env),
            "privateKey": env.wallet.to_bytes().to_string(),
            "method": "POST",
            "body": input,
            "scheme": "exact",
            "allowedAssets": [{"network": env.devnet.network(), "asset": token.to_checksum(None)}],
            "rpcUrl": env.devnet.rpc_url().as_str(),
        }),
    )
    .await
    .expect("pay.mjs runs");
    assert_eq!(result["status"], 200, "{result}");
    assert_eq!(result["paymentResponse"]["success"], true, "{result}");
    let transaction = result["paymentResponse"]["transaction"]
        .as_str()
        .unwrap()
        .to_owned();
    let after = balances(&env, token).await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "the payer paid once");
    assert_eq!(after.1, before.1 + U256::from(PRICE), "the worker was paid");
    // The approval the payer signed was broadcast (its one transaction, nonce 0), approving
    // Permit2 for maxUint256, which a Permit2 transfer leaves untouched.
    assert_eq!(env.devnet.transaction_count(payer).await.unwrap(), 1);
    assert_eq!(
        env.devnet.permit2_allowance(token, payer).await.unwrap(),
        U256::MAX
    );
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
    let signed: PaymentPayload = serde_json::from_value(stored.payload.clone()).unwrap();
    let approval = hiregate_payments::permit2::approval::SignedApproval::in_payload(&signed)
        .expect("the stored payment carries the approval");
    let receipt = env
        .devnet
        .provider()
        .get_transaction_receipt(approval.hash)
        .await
        .unwrap()
        .expect("the approval was mined");
    assert!(receipt.status());
    assert_eq!(receipt.from, payer);
    // The funded gas paid for the approval; what is left is the unused part of the funding.
    assert!(eth(&env).await < approval.gas_cost());

    // A replay of the same payment: the stored answer, nothing moved again.
    let replay = call(&env, &input, Some(&encode_header(&signed))).await;
    assert_eq!(replay.status, 200, "{:?}", replay.body);
    assert_eq!(replay.payment_response().transaction, transaction);
    assert_eq!(balances(&env, token).await, after);
    assert_eq!(env.devnet.transaction_count(payer).await.unwrap(), 1);
    assert_eq!(env.worker.executions(), 1);

    let report = assert_reconciled(&env).await;
    let matched = report["matched"].as_array().unwrap();
    assert_eq!(matched.len(), 1, "{report:#}");
    assert_eq!(matched[0]["transaction"], transaction.as_str());
}

#[tokio::test]
async fn the_official_client_pays_a_plain_erc20_through_a_sponsored_approval() {
    Box::pin(approval_sponsored(TestDatabase::sqlite())).await;
}

#[tokio::test]
async fn the_official_client_pays_a_plain_erc20_through_a_sponsored_approval_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(approval_sponsored(database)).await;
}
