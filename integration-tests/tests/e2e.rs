//! The paid hire over real processes: anvil with the devnet token, `hiregate facilitator`,
//! `hiregate serve` (SQLite, facilitator over HTTP) and an example worker, each its own process
//! (see `hiregate_integration_tests::harness`). Seekers pay from wallets funded on chain, and
//! every money claim is checked against on-chain balances.
//!
//! Faults come from the processes themselves: the facilitator is killed, the gateway gets
//! SIGTERM and is started again on the same database.

use std::{sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    providers::Provider as _,
    signers::local::PrivateKeySigner,
};
use hiregate_integration_tests::harness::{Binaries, E2eStack, PRICE};
use hiregate_payments::{
    PaymentPayload,
    devnet::{node_script, node_tools_or_skip},
    encode_header,
};
use hiregate_worker_sdk::{
    example_workers::SUMMARIZE,
    seeker::{DiscoveryFilter, SeekerClient},
};
use serde_json::{Value, json};

/// What each seeker wallet starts with: 10 tokens.
const SEEKER_FUNDS: u64 = 10_000_000;

fn binaries() -> Binaries {
    Binaries {
        hiregate: env!("CARGO_BIN_EXE_hiregate-cli").into(),
        example_worker: env!("CARGO_BIN_EXE_example-worker").into(),
    }
}

async fn start_stack() -> E2eStack {
    match E2eStack::start(binaries()).await {
        Ok(stack) => stack,
        Err(error) => panic!("the e2e stack did not start: {error}"),
    }
}

fn price() -> U256 {
    U256::from(PRICE)
}

async fn funded_wallet(stack: &E2eStack) -> PrivateKeySigner {
    stack
        .funded_seeker(SEEKER_FUNDS)
        .await
        .expect("a funded seeker wallet")
}

fn seeker_client(stack: &E2eStack, wallet: PrivateKeySigner) -> SeekerClient {
    SeekerClient::new(
        stack.gateway_url(),
        stack.seeker_key.clone(),
        Arc::new(wallet),
    )
    // The harness's client has a time limit; a hung gateway fails the test instead of stalling it.
    .with_http_client(stack.http().clone())
}

/// The settlement transaction is mined, succeeded and went to the devnet token.
async fn assert_mined_transfer(stack: &E2eStack, transaction: &str) {
    let hash: B256 = transaction
        .parse()
        .unwrap_or_else(|_| panic!("settlement transaction {transaction:?} is a 32-byte hash"));
    let receipt = stack
        .devnet
        .provider()
        .get_transaction_receipt(hash)
        .await
        .expect("receipt lookup")
        .unwrap_or_else(|| panic!("settlement transaction {transaction} is not on chain"));
    assert!(receipt.status(), "settlement transaction reverted");
    assert_eq!(receipt.to, Some(stack.devnet.token()), "not a token call");
}

/// The EIP-3009 nonce of an `exact` payment.
fn nonce_of(payment: &PaymentPayload) -> B256 {
    payment.payload["authorization"]["nonce"]
        .as_str()
        .and_then(|nonce| nonce.parse().ok())
        .expect("exact payment carries authorization.nonce")
}

fn same_address(text: &Value, address: Address) -> bool {
    text.as_str()
        .and_then(|text| text.parse::<Address>().ok())
        .is_some_and(|parsed| parsed == address)
}

#[tokio::test]
async fn the_official_x402_fetch_client_pays_a_gateway_process() {
    if !node_tools_or_skip("the_official_x402_fetch_client_pays_a_gateway_process") {
        return;
    }
    let stack = start_stack().await;
    let wallet = funded_wallet(&stack).await;
    let payer = wallet.address();
    let text = "paid by @x402/fetch across process boundaries";
    let input = json!({ "text": text });
    let contract_id = stack.propose(&input).await.expect("contract proposed");
    let before = stack.balances(payer).await.unwrap();

    // Nothing hiregate-specific: the official client answers the 402 on its own; the seeker's
    // API key is an ordinary header it passes through.
    let url = stack
        .gateway_url()
        .join(&format!("v1/contracts/{contract_id}/execute"))
        .unwrap();
    let result = node_script(
        "pay.mjs",
        &json!({
            "url": url.as_str(),
            "privateKey": wallet.to_bytes().to_string(),
            "method": "POST",
            "authorization": format!("Bearer {}", stack.seeker_key),
            "body": input,
            "allowedAssets": [{
                "network": stack.devnet.network(),
                "asset": stack.devnet.token().to_checksum(None),
            }],
        }),
    )
    .await
    .expect("pay.mjs runs");

    assert_eq!(result["status"], 200, "{result}\n{}", stack.logs());
    assert!(
        result["headers"]["payment-response"].is_string(),
        "no PAYMENT-RESPONSE header: {result}"
    );
    let settlement = &result["paymentResponse"];
    assert_eq!(settlement["success"], true, "{result}");
    assert_eq!(settlement["network"], stack.devnet.network());
    assert!(same_address(&settlement["payer"], payer), "{settlement}");
    let transaction = settlement["transaction"]
        .as_str()
        .expect("settlement names its transaction");
    assert_mined_transfer(&stack, transaction).await;
    assert_eq!(
        result["body"]["deliverable"]["output"]["content"]["summary"], text,
        "the echo worker's summary is the deliverable: {}",
        result["body"]
    );

    let after = stack.balances(payer).await.unwrap();
    assert_eq!(after.payer, before.payer - price(), "payer paid the price");
    assert_eq!(after.payee, before.payee + price(), "payTo got the price");

    let record = stack.contract(&contract_id).await.unwrap();
    assert_eq!(record["state"], "settled", "{record}");
    assert_eq!(record["settlement"]["transaction"], transaction, "{record}");
    assert!(same_address(&record["payment"]["payer"], payer), "{record}");
    assert_eq!(stack.worker.executions().await.unwrap(), 1);
}

#[tokio::test]
async fn the_typed_seeker_client_hires_across_processes() {
    let stack = start_stack().await;
    let wallet = funded_wallet(&stack).await;
    let payer = wallet.address();
    let seeker = seeker_client(&stack, wallet);

    let found = seeker
        .discover(&DiscoveryFilter {
            task_type: Some(SUMMARIZE.into()),
            ..DiscoveryFilter::default()
        })
        .await
        .expect("discovery");
    let listing = found
        .iter()
        .find(|worker| worker.id == stack.worker_id)
        .unwrap_or_else(|| panic!("the listed worker is discoverable: {found:?}"));
    assert_eq!(listing.tasks[SUMMARIZE].price, PRICE.to_string());

    let text = "the typed client pays the 402 itself";
    let contract = seeker
        .propose(&stack.proposal(&json!({ "text": text })))
        .await
        .expect("contract proposed");
    assert_eq!(contract.state, "offered");

    let challenge = seeker.challenge(&contract.id).await.expect("a 402");
    let offer = &challenge.accepts[0];
    assert_eq!(offer.amount.to_string(), PRICE.to_string());
    assert_eq!(
        offer.pay_to.to_string().parse::<Address>().ok(),
        Some(stack.pay_to)
    );
    assert_eq!(offer.network.to_string(), stack.devnet.network());

    let before = stack.balances(payer).await.unwrap();
    let outcome = seeker.execute(&contract.id).await.expect("paid execute");
    assert_eq!(outcome.status, 200, "{}\n{}", outcome.body, stack.logs());
    let settlement = outcome
        .payment_response
        .expect("a settled answer carries PAYMENT-RESPONSE");
    assert!(settlement.success, "{settlement:?}");
    assert_mined_transfer(&stack, &settlement.transaction).await;
    assert_eq!(
        outcome.body["deliverable"]["output"]["content"]["summary"], text,
        "{}",
        outcome.body
    );

    let after = stack.balances(payer).await.unwrap();
    assert_eq!(after.payer, before.payer - price());
    assert_eq!(after.payee, before.payee + price());
    let record = seeker.contract(&contract.id).await.unwrap();
    assert_eq!(record.state, "settled", "{}", record.body);
    assert_eq!(
        record.body["settlement"]["transaction"],
        settlement.transaction
    );
    assert_eq!(stack.worker.executions().await.unwrap(), 1);
}

#[tokio::test]
async fn a_killed_facilitator_means_503_and_the_worker_is_never_called() {
    let mut stack = start_stack().await;
    let wallet = funded_wallet(&stack).await;
    let payer = wallet.address();
    let seeker = seeker_client(&stack, wallet);
    let contract = seeker
        .propose(&stack.proposal(&json!({ "text": "nobody can verify this payment" })))
        .await
        .unwrap();
    let challenge = seeker.challenge(&contract.id).await.unwrap();
    let payment = seeker.sign_for(&challenge).await.unwrap();
    let before = stack.balances(payer).await.unwrap();

    stack.kill_facilitator();
    let response = stack
        .http()
        .post(
            stack
                .gateway_url()
                .join(&format!("v1/contracts/{}/execute", contract.id))
                .unwrap(),
        )
        .bearer_auth(&stack.seeker_key)
        .header("PAYMENT-SIGNATURE", encode_header(&payment))
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 503, "{body}\n{}", stack.logs());
    assert_eq!(body["error"]["code"], "facilitator_unavailable", "{body}");
    let retry_after: u64 = retry_after
        .as_deref()
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or_else(|| panic!("Retry-After in seconds, got {retry_after:?}"));
    assert!(retry_after > 0);

    assert_eq!(stack.worker.executions().await.unwrap(), 0, "worker called");
    let record = stack.contract(&contract.id).await.unwrap();
    assert_eq!(record["state"], "offered", "{record}");
    assert_eq!(record["attempts_used"], 0, "{record}");
    assert_eq!(record["attempts"], json!([]), "{record}");
    assert_eq!(record["payment"], Value::Null, "{record}");
    assert_eq!(stack.balances(payer).await.unwrap(), before, "money moved");
    assert!(
        !stack
            .devnet
            .authorization_state(payer, nonce_of(&payment))
            .await
            .unwrap(),
        "the authorization was used on chain"
    );

    // "Unknown" is retryable: the same payment goes through once a facilitator is back.
    stack
        .restart_facilitator()
        .await
        .expect("facilitator again");
    let outcome = seeker
        .execute_with_payment(&contract.id, &payment)
        .await
        .unwrap();
    assert_eq!(outcome.status, 200, "{}\n{}", outcome.body, stack.logs());
    assert_eq!(stack.worker.executions().await.unwrap(), 1);
    let after = stack.balances(payer).await.unwrap();
    assert_eq!(after.payer, before.payer - price());
    assert_eq!(after.payee, before.payee + price());
}

#[tokio::test]
async fn a_restarted_gateway_keeps_the_settled_contract_and_never_charges_twice() {
    let mut stack = start_stack().await;
    let wallet = funded_wallet(&stack).await;
    let payer = wallet.address();
    let seeker = seeker_client(&stack, wallet);
    let contract = seeker
        .propose(&stack.proposal(&json!({ "text": "survives a restart" })))
        .await
        .unwrap();
    let first = seeker.execute(&contract.id).await.unwrap();
    assert_eq!(first.status, 200, "{}\n{}", first.body, stack.logs());
    let settlement = first.payment_response.clone().expect("PAYMENT-RESPONSE");
    let payment = first.payment.clone().expect("the payment it sent");
    let settled = stack.balances(payer).await.unwrap();
    let first_pid = stack.gateway.process().pid();

    let stopped = tokio::time::timeout(Duration::from_secs(60), stack.restart_gateway())
        .await
        .expect("restart within a minute")
        .expect("gateway restarted");
    assert!(
        stopped.success(),
        "SIGTERM should stop the gateway cleanly: {stopped}"
    );
    assert_ne!(
        stack.gateway.process().pid(),
        first_pid,
        "a new gateway process"
    );

    let record = seeker.contract(&contract.id).await.expect("readable again");
    assert_eq!(record.state, "settled", "{}", record.body);
    assert_eq!(
        record.body["settlement"]["transaction"],
        settlement.transaction
    );

    let again = seeker
        .execute_with_payment(&contract.id, &payment)
        .await
        .unwrap();
    assert_eq!(again.status, 200, "{}\n{}", again.body, stack.logs());
    let replayed = again
        .payment_response
        .expect("the stored PAYMENT-RESPONSE comes back");
    assert_eq!(
        replayed.transaction, settlement.transaction,
        "a second transfer"
    );
    assert_eq!(again.body["deliverable"], first.body["deliverable"]);
    assert_eq!(
        stack.balances(payer).await.unwrap(),
        settled,
        "charged twice"
    );
    assert_eq!(stack.worker.executions().await.unwrap(), 1, "ran twice");
}

/// The stable x402 resource of the listing, paid by the official `@x402/fetch` client with no
/// key and no contract call: the gateway process signs the offer in its 402, the client echoes
/// it, the payment settles on chain, and the capability token of the answer reads the contract.
#[tokio::test]
async fn the_official_x402_fetch_client_pays_a_listings_stable_url() {
    if !node_tools_or_skip("the_official_x402_fetch_client_pays_a_listings_stable_url") {
        return;
    }
    let stack = start_stack().await;
    let wallet = funded_wallet(&stack).await;
    let payer = wallet.address();
    let text = "paid over the stable URL by @x402/fetch";
    let before = stack.balances(payer).await.unwrap();
    let url = stack
        .gateway_url()
        .join(&format!("x402/workers/{}/{SUMMARIZE}", stack.worker_id))
        .unwrap();
    let result = node_script(
        "pay.mjs",
        &json!({
            "url": url.as_str(),
            "privateKey": wallet.to_bytes().to_string(),
            "method": "POST",
            "body": { "text": text },
            "allowedAssets": [{
                "network": stack.devnet.network(),
                "asset": stack.devnet.token().to_checksum(None),
            }],
        }),
    )
    .await
    .expect("pay.mjs runs");

    assert_eq!(result["status"], 200, "{result}\n{}", stack.logs());
    let settlement = &result["paymentResponse"];
    assert_eq!(settlement["success"], true, "{result}");
    assert!(same_address(&settlement["payer"], payer), "{settlement}");
    let transaction = settlement["transaction"].as_str().expect("a transaction");
    assert_mined_transfer(&stack, transaction).await;
    assert_eq!(
        result["body"]["deliverable"]["output"]["content"]["summary"], text,
        "{}",
        result["body"]
    );
    let after = stack.balances(payer).await.unwrap();
    assert_eq!(after.payer, before.payer - price(), "payer paid the price");
    assert_eq!(after.payee, before.payee + price(), "payTo got the price");

    // The capability token, not an API key, reads the contract.
    let contract_url = result["body"]["links"]["contract"].as_str().unwrap();
    let token = result["body"]["access"]["token"].as_str().unwrap();
    let view: Value = stack
        .http()
        .get(contract_url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["state"], "settled", "{view}");
    assert_eq!(view["settlement"]["transaction"], transaction, "{view}");
    let stranger = stack.http().get(contract_url).send().await.unwrap();
    assert_eq!(stranger.status(), 401);
    assert_eq!(stack.worker.executions().await.unwrap(), 1);
}
