//! The devnet against the official x402 TypeScript SDK (npm `@x402/*`, run through the scripts
//! in `tools/interop/`), plus the rebuild check of the checked-in contract artifacts.
//!
//! Needs node and `scripts/install-tools.sh`; without them each test prints `skipped: …` and
//! passes, except under `CI=true` where it fails.
#![cfg(feature = "devnet")]

use std::{
    process::Command,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use alloy::{
    primitives::{Address, B256, U256},
    providers::Provider,
    signers::{Signer, local::PrivateKeySigner},
    sol_types::{Eip712Domain, SolStruct},
};
use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use base64::{Engine, engine::general_purpose::STANDARD as BASE64};
use hiregate_payments::devnet::{
    Devnet, DevnetError, NODE_ENV, bindings::TransferWithAuthorization, node_script,
    node_tools_or_skip, workspace_root,
};
use serde_json::{Value, json};

const USDC: u64 = 1_000_000;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The 7-field x402 v2 requirements for `amount` atomic units of the devnet token.
fn requirements(devnet: &Devnet, pay_to: Address, amount: u64) -> Value {
    json!({
        "scheme": "exact",
        "network": devnet.network(),
        "amount": amount.to_string(),
        "asset": devnet.token().to_checksum(None),
        "payTo": pay_to.to_checksum(None),
        "maxTimeoutSeconds": 300,
        "extra": { "name": devnet.token_name(), "version": devnet.token_version() },
    })
}

fn payment_required(requirements: &Value) -> Value {
    json!({
        "x402Version": 2,
        "resource": { "url": "http://127.0.0.1/v1/contracts/test/execute" },
        "accepts": [requirements],
    })
}

async fn sign_with_official_client(
    payer: &PrivateKeySigner,
    devnet: &Devnet,
    requirements: &Value,
) -> Value {
    node_script(
        "sign.mjs",
        &json!({
            "privateKey": payer.to_bytes().to_string(),
            "rpcUrl": devnet.rpc_url().as_str(),
            "paymentRequired": payment_required(requirements),
        }),
    )
    .await
    .unwrap()
}

async fn official_facilitator(
    devnet: &Devnet,
    action: &str,
    payload: &Value,
    requirements: &Value,
) -> Value {
    node_script(
        "facilitator.mjs",
        &json!({
            "rpcUrl": devnet.rpc_url().as_str(),
            "chainId": devnet.chain_id(),
            "relayerKey": devnet.relayer().to_bytes().to_string(),
            "paymentPayload": payload,
            "paymentRequirements": requirements,
            "action": action,
        }),
    )
    .await
    .unwrap()
}

/// A v2 `exact` payload signed in Rust with alloy (the shape the official client produces).
async fn alloy_signed_payload(
    signer: &PrivateKeySigner,
    from: Address,
    devnet: &Devnet,
    requirements: &Value,
    domain_name: &str,
) -> Value {
    let authorization = TransferWithAuthorization {
        from,
        to: requirements["payTo"].as_str().unwrap().parse().unwrap(),
        value: requirements["amount"].as_str().unwrap().parse().unwrap(),
        validAfter: U256::ZERO,
        validBefore: U256::from(now() + 300),
        nonce: B256::from(rand::random::<[u8; 32]>()),
    };
    let domain = Eip712Domain::new(
        Some(domain_name.to_owned().into()),
        Some(devnet.token_version().to_owned().into()),
        Some(U256::from(devnet.chain_id())),
        Some(devnet.token()),
        None,
    );
    let signature = signer
        .sign_hash(&authorization.eip712_signing_hash(&domain))
        .await
        .unwrap();
    json!({
        "x402Version": 2,
        "accepted": requirements,
        "payload": {
            "signature": format!("0x{}", hex::encode(signature.as_bytes())),
            "authorization": {
                "from": authorization.from.to_checksum(None),
                "to": authorization.to.to_checksum(None),
                "value": authorization.value.to_string(),
                "validAfter": authorization.validAfter.to_string(),
                "validBefore": authorization.validBefore.to_string(),
                "nonce": authorization.nonce.to_string(),
            },
        },
    })
}

#[tokio::test]
async fn checked_in_artifacts_match_a_fresh_solc_build() {
    if !node_tools_or_skip("checked_in_artifacts_match_a_fresh_solc_build") {
        return;
    }
    let root = workspace_root();
    let node = std::env::var_os(NODE_ENV).unwrap_or_else(|| "node".into());
    let output = Command::new(node)
        .arg(root.join("tools/build-contracts.mjs"))
        .arg("--print")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "solc build failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let fresh: Value = serde_json::from_slice(&output.stdout).unwrap();
    for name in [
        "DevnetUsd",
        "Eip1271Wallet",
        "DevnetMulticall",
        "AuthCaptureEscrow",
        "ERC3009PaymentCollector",
        "OperatorRefundCollector",
        "DevnetPermitToken",
        "Permit2",
        "X402ExactPermit2Proxy",
        "X402UptoPermit2Proxy",
    ] {
        let path = root.join(format!("payments/devnet/artifacts/{name}.json"));
        let checked_in: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            fresh[name],
            checked_in,
            "{} is stale: run `node tools/build-contracts.mjs` and commit the result",
            path.display()
        );
    }
}

#[tokio::test]
async fn a_payment_from_the_official_client_verifies_and_settles_with_the_official_facilitator() {
    if !node_tools_or_skip("official client + official facilitator") {
        return;
    }
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(5 * USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let requirements = requirements(&devnet, pay_to, 1_250_000);

    let signed = sign_with_official_client(&payer, &devnet, &requirements).await;
    let header = signed["paymentSignature"].as_str().unwrap();
    let decoded: Value = serde_json::from_slice(&BASE64.decode(header).unwrap()).unwrap();
    assert_eq!(decoded, signed["paymentPayload"]);
    let payload = &signed["paymentPayload"];
    assert_eq!(payload["x402Version"], 2);
    assert_eq!(payload["accepted"], requirements);

    let verdict = official_facilitator(&devnet, "verify", payload, &requirements).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");
    assert_eq!(
        verdict["payer"].as_str().unwrap().to_lowercase(),
        payer.address().to_string().to_lowercase()
    );
    // Verification moves nothing.
    assert_eq!(devnet.balance_of(pay_to).await.unwrap(), U256::ZERO);

    let settled = official_facilitator(&devnet, "settle", payload, &requirements).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["network"], devnet.network());
    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(1_250_000)
    );
    assert_eq!(
        devnet.balance_of(payer.address()).await.unwrap(),
        U256::from(5 * USDC - 1_250_000)
    );
    let tx_hash: B256 = settled["transaction"].as_str().unwrap().parse().unwrap();
    let receipt = devnet
        .provider()
        .get_transaction_receipt(tx_hash)
        .await
        .unwrap()
        .unwrap();
    assert!(receipt.status());
    assert_eq!(receipt.from, devnet.relayer().address());

    // The same payment again: refused (the devnet's Multicall3 lets the library name the
    // reason), and nothing moves a second time.
    let verdict = official_facilitator(&devnet, "verify", payload, &requirements).await;
    assert_eq!(verdict["isValid"], false, "{verdict}");
    assert_eq!(
        verdict["invalidReason"],
        "invalid_exact_evm_nonce_already_used"
    );
    let again = official_facilitator(&devnet, "settle", payload, &requirements).await;
    assert_eq!(again["success"], false, "{again}");
    // Its settle skips the simulation by default, so the refusal comes from the chain itself.
    assert_eq!(again["errorReason"], "invalid_exact_evm_transaction_failed");
    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(1_250_000)
    );
}

#[tokio::test]
async fn the_official_facilitator_accepts_an_alloy_signed_payment_and_refuses_bad_ones() {
    if !node_tools_or_skip("alloy-signed payment + official facilitator") {
        return;
    }
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let requirements = requirements(&devnet, pay_to, 10_000);

    let payload = alloy_signed_payload(
        &payer,
        payer.address(),
        &devnet,
        &requirements,
        devnet.token_name(),
    )
    .await;
    let verdict = official_facilitator(&devnet, "verify", &payload, &requirements).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");

    // The resource server asks for more than was signed.
    let higher = self::requirements(&devnet, pay_to, 10_001);
    let verdict = official_facilitator(&devnet, "verify", &payload, &higher).await;
    assert_eq!(verdict["isValid"], false);
    assert_eq!(
        verdict["invalidReason"],
        "invalid_exact_evm_payload_authorization_value_mismatch"
    );

    // Signed over the wrong EIP-712 name.
    let wrong_domain =
        alloy_signed_payload(&payer, payer.address(), &devnet, &requirements, "USD Coin").await;
    let verdict = official_facilitator(&devnet, "verify", &wrong_domain, &requirements).await;
    assert_eq!(verdict["isValid"], false);
    assert_eq!(verdict["invalidReason"], "invalid_exact_evm_signature");

    // A payer who cannot cover the amount.
    let poor = devnet.funded_account(U256::from(9_999)).await.unwrap();
    let unfunded = alloy_signed_payload(
        &poor,
        poor.address(),
        &devnet,
        &requirements,
        devnet.token_name(),
    )
    .await;
    let verdict = official_facilitator(&devnet, "verify", &unfunded, &requirements).await;
    assert_eq!(verdict["isValid"], false);
    assert_eq!(
        verdict["invalidReason"],
        "invalid_exact_evm_insufficient_balance"
    );

    let settled = official_facilitator(&devnet, "settle", &payload, &requirements).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(devnet.balance_of(pay_to).await.unwrap(), U256::from(10_000));
    assert_eq!(
        devnet.balance_of(poor.address()).await.unwrap(),
        U256::from(9_999)
    );
}

#[tokio::test]
async fn the_official_facilitator_settles_an_eip1271_wallet_payment() {
    if !node_tools_or_skip("EIP-1271 wallet + official facilitator") {
        return;
    }
    let devnet = Devnet::start().await.unwrap();
    let owner = PrivateKeySigner::random();
    let wallet = devnet.deploy_1271_wallet(owner.address()).await.unwrap();
    devnet.mint(wallet, U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let requirements = requirements(&devnet, pay_to, 300_000);

    let payload =
        alloy_signed_payload(&owner, wallet, &devnet, &requirements, devnet.token_name()).await;
    let verdict = official_facilitator(&devnet, "verify", &payload, &requirements).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");
    let settled = official_facilitator(&devnet, "settle", &payload, &requirements).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(300_000)
    );
    assert_eq!(
        devnet.balance_of(wallet).await.unwrap(),
        U256::from(700_000)
    );
}

/// A minimal x402 v2 resource server for `pay.mjs`: 402 with `PAYMENT-REQUIRED` until a
/// `PAYMENT-SIGNATURE` arrives, then settlement through the official facilitator and 200 with
/// `PAYMENT-RESPONSE`. It stands in for the gateway, which does not exist in this crate.
struct PaidEndpoint {
    devnet: Devnet,
    requirements: Value,
}

async fn paid_handler(
    State(endpoint): State<Arc<PaidEndpoint>>,
    headers: HeaderMap,
    body: String,
) -> impl IntoResponse {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer hg_sk_test") {
        return (
            StatusCode::UNAUTHORIZED,
            HeaderMap::new(),
            "no api key".to_owned(),
        );
    }
    let Some(signature) = headers
        .get("payment-signature")
        .and_then(|v| v.to_str().ok())
    else {
        let challenge = BASE64.encode(payment_required(&endpoint.requirements).to_string());
        let mut response_headers = HeaderMap::new();
        response_headers.insert("payment-required", challenge.parse().unwrap());
        return (
            StatusCode::PAYMENT_REQUIRED,
            response_headers,
            "{}".to_owned(),
        );
    };
    let payload: Value = serde_json::from_slice(&BASE64.decode(signature).unwrap()).unwrap();
    let settled =
        official_facilitator(&endpoint.devnet, "settle", &payload, &endpoint.requirements).await;
    let mut response_headers = HeaderMap::new();
    response_headers.insert(
        "payment-response",
        BASE64.encode(settled.to_string()).parse().unwrap(),
    );
    if settled["success"] != true {
        return (
            StatusCode::PAYMENT_REQUIRED,
            response_headers,
            "{}".to_owned(),
        );
    }
    (
        StatusCode::OK,
        response_headers,
        json!({ "echo": body }).to_string(),
    )
}

#[tokio::test]
async fn pay_mjs_pays_a_402_endpoint_with_the_official_fetch_wrapper() {
    if !node_tools_or_skip("pay.mjs against a 402 endpoint") {
        return;
    }
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let requirements = requirements(&devnet, pay_to, 20_000);
    let endpoint = Arc::new(PaidEndpoint {
        devnet,
        requirements,
    });

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/paid", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/paid", post(paid_handler))
        .with_state(endpoint.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let outcome = node_script(
        "pay.mjs",
        &json!({
            "url": url,
            "privateKey": payer.to_bytes().to_string(),
            "authorization": "Bearer hg_sk_test",
            "body": { "task": "summarise" },
            "allowedAssets": [{ "network": endpoint.devnet.network(), "asset": endpoint.devnet.token().to_string() }],
        }),
    )
    .await
    .unwrap();
    server.abort();

    assert_eq!(outcome["status"], 200, "{outcome}");
    assert_eq!(outcome["body"]["echo"], r#"{"task":"summarise"}"#);
    assert_eq!(outcome["paymentResponse"]["success"], true, "{outcome}");
    let tx_hash: B256 = outcome["paymentResponse"]["transaction"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        endpoint
            .devnet
            .provider()
            .get_transaction_receipt(tx_hash)
            .await
            .unwrap()
            .unwrap()
            .status()
    );
    assert_eq!(
        endpoint.devnet.balance_of(pay_to).await.unwrap(),
        U256::from(20_000)
    );
    assert_eq!(
        endpoint.devnet.balance_of(payer.address()).await.unwrap(),
        U256::from(USDC - 20_000)
    );
}

#[tokio::test]
async fn node_script_failures_are_typed_errors() {
    if !node_tools_or_skip("node_script failures") {
        return;
    }
    let escape = node_script("../build-contracts.mjs", &json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(escape, DevnetError::InvalidScriptName(_)),
        "{escape}"
    );
    let unknown = node_script("nope.mjs", &json!({})).await.unwrap_err();
    assert!(
        matches!(unknown, DevnetError::InvalidScriptName(_)),
        "{unknown}"
    );

    let secret = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
    let failed = node_script("facilitator.mjs", &json!({ "relayerKey": secret }))
        .await
        .unwrap_err();
    let DevnetError::NodeScriptFailed { stderr, .. } = &failed else {
        panic!("expected NodeScriptFailed, got {failed}");
    };
    assert!(
        stderr.contains(r#"input field "rpcUrl" is required"#),
        "{stderr}"
    );
    assert!(
        !failed.to_string().contains(secret),
        "the input must not leak into errors"
    );
}
