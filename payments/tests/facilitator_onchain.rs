//! The local facilitator against a real chain: anvil with the project's EIP-3009 token.
//! Run with `cargo test -p hiregate-payments --features devnet`.

#![cfg(feature = "devnet")]

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::Provider;
use alloy::signers::Signer;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{Eip712Domain, SolStruct};
use base64::Engine as _;
use futures::future::join_all;
use hiregate_payments::devnet::bindings::{CancelAuthorization, DevnetUsd};
use hiregate_payments::devnet::rpc_counter::{self, RpcCounter};
use hiregate_payments::exact::{Eip3009Authorization, ExactEvmPayload, token_eip712_domain};
use hiregate_payments::header::HeaderError;
use hiregate_payments::wire::{DecimalU256, UnknownFields, X402Version2};
use hiregate_payments::{
    ChainConfig, Facilitator, LocalFacilitator, Network, PaymentPayload, PaymentRequirements,
    Reason, SettleResponse, SignOptions, decode_header, encode_header,
};
use support::{AMOUNT, Harness, unix_now};

/// Verify and settle must both refuse `payload` with `reason`, and no token may move.
async fn assert_refused(harness: &Harness, payload: PaymentPayload, reason: Reason) {
    let facilitator = harness.facilitator().await;
    let payer = payload.exact_evm().unwrap().authorization.from;
    let payer_before = harness.balance(payer).await;
    let pay_to_before = harness.balance(harness.pay_to).await;
    let request = harness.request(payload);

    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(
        !verdict.is_valid,
        "verify accepted a payment that should fail with {reason}"
    );
    assert_eq!(verdict.invalid_reason, Some(reason.clone()));

    let outcome = facilitator.settle(&request).await.unwrap();
    assert!(!outcome.success, "settle succeeded: {outcome:?}");
    assert_eq!(outcome.error_reason, Some(reason));
    assert_eq!(outcome.transaction, "");

    assert_eq!(
        harness.balance(payer).await,
        payer_before,
        "payer balance moved"
    );
    assert_eq!(
        harness.balance(harness.pay_to).await,
        pay_to_before,
        "payTo balance moved"
    );
    assert!(
        harness.transfers_from(payer).await.is_empty(),
        "a transfer happened"
    );
}

fn assert_settled(outcome: &SettleResponse, network: &Network, payer: Address) {
    assert!(outcome.success, "settle failed: {outcome:?}");
    assert_eq!(outcome.error_reason, None);
    assert_eq!(outcome.network, network.as_str());
    assert_eq!(
        outcome.payer.as_deref(),
        Some(payer.to_checksum(None).as_str())
    );
    let hash = outcome.transaction.strip_prefix("0x").unwrap();
    assert_eq!(hash.len(), 64, "transaction hash: {}", outcome.transaction);
}

/// The reference facilitator's answer to a settle of a used authorization: `success: false`,
/// the used-nonce reason, nothing broadcast, and (when known) the original transaction named.
fn assert_nonce_used(outcome: &SettleResponse, payer: Address, original: Option<&str>) {
    assert!(
        !outcome.success,
        "a used authorization settled again: {outcome:?}"
    );
    assert_eq!(
        outcome.error_reason,
        Some(Reason::NonceAlreadyUsed),
        "{outcome:?}"
    );
    assert_eq!(
        outcome.transaction, "",
        "nothing was broadcast: {outcome:?}"
    );
    assert_eq!(
        outcome.payer.as_deref(),
        Some(payer.to_checksum(None).as_str())
    );
    if let Some(original) = original {
        let message = outcome.error_message.as_deref().unwrap_or_default();
        assert!(message.contains(original), "{outcome:?}");
    }
}

/// Transactions the relayer has sent so far.
async fn sent_by(harness: &Harness, relayer: Address) -> u64 {
    harness
        .devnet
        .provider()
        .get_transaction_count(relayer)
        .await
        .unwrap()
}

#[tokio::test]
async fn valid_payment_verifies_and_settles_moving_exactly_the_amount() {
    let harness = Harness::start().await;
    let facilitator = harness.facilitator().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);

    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(
        verdict.payer.as_deref(),
        Some(payer.address().to_checksum(None).as_str())
    );
    assert_eq!(
        harness.balance(payer.address()).await,
        U256::from(5 * AMOUNT),
        "verify moved money"
    );

    let outcome = facilitator.settle(&request).await.unwrap();
    assert_settled(&outcome, &harness.network, payer.address());
    assert_eq!(
        harness.balance(payer.address()).await,
        U256::from(4 * AMOUNT)
    );
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));

    let tx_hash = outcome.transaction.parse().unwrap();
    let receipt = harness
        .devnet
        .provider()
        .get_transaction_receipt(tx_hash)
        .await
        .unwrap()
        .expect("the reported transaction is on chain");
    assert!(receipt.status());
    assert_eq!(harness.transfers_from(payer.address()).await, vec![tx_hash]);
}

#[tokio::test]
async fn wrong_pay_to_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let mut other = harness.requirements.clone();
    other.pay_to = PrivateKeySigner::random().address().to_checksum(None);
    let payload = harness.sign(&payer, &other, &SignOptions::default()).await;
    assert_refused(&harness, payload, Reason::RecipientMismatch).await;
}

#[tokio::test]
async fn amount_lower_and_higher_are_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    for amount in [AMOUNT - 1, AMOUNT + 1] {
        let mut other = harness.requirements.clone();
        other.amount = DecimalU256::from(amount);
        let payload = harness.sign(&payer, &other, &SignOptions::default()).await;
        assert_refused(&harness, payload, Reason::ValueMismatch).await;
    }
}

#[tokio::test]
async fn expired_valid_before_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    // Signed 400 s ago with the 300 s timeout: validBefore passed 100 s ago.
    let payload = hiregate_payments::sign_exact_payment(
        &payer,
        &harness.requirements,
        None,
        unix_now() - 400,
    )
    .await
    .unwrap();
    assert_refused(&harness, payload, Reason::ValidBefore).await;
}

#[tokio::test]
async fn valid_after_in_the_future_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let options = SignOptions {
        valid_after: Some(unix_now() + 120),
        ..SignOptions::default()
    };
    let payload = harness.sign(&payer, &harness.requirements, &options).await;
    assert_refused(&harness, payload, Reason::ValidAfter).await;
}

/// The chain's clock 17 minutes behind the facilitator's (anvil keeps every block that far
/// behind): a payment valid from 10 minutes ago by the facilitator's clock is not valid yet by
/// the chain's, which is what the token judges, so it is refused as not yet valid (not as a
/// failed simulation), by verify and settle alike; one valid by the chain's clock settles.
#[tokio::test]
async fn valid_after_is_judged_by_the_chains_clock() {
    let harness = Harness::start_with(hiregate_payments::devnet::DevnetOptions {
        clock_behind: Duration::from_secs(17 * 60),
        ..Default::default()
    })
    .await;
    let chain_now = harness.devnet.block_time().await.unwrap();
    assert!(
        chain_now + 17 * 60 - 60 <= unix_now(),
        "the chain's clock lags"
    );
    let payer = harness.payer(5 * AMOUNT).await;
    let ten_minutes_ago = SignOptions {
        valid_after: Some(unix_now() - 600),
        ..SignOptions::default()
    };
    let early = harness
        .sign(&payer, &harness.requirements, &ten_minutes_ago)
        .await;
    assert_refused(&harness, early, Reason::ValidAfter).await;

    let by_the_chain = SignOptions {
        valid_after: Some(chain_now - 600),
        ..SignOptions::default()
    };
    let payload = harness
        .sign(&payer, &harness.requirements, &by_the_chain)
        .await;
    let facilitator = harness.facilitator().await;
    let request = harness.request(payload);
    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let settled = facilitator.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
}

/// The chain's clock is the latest block's time, asked once per reading's lifetime however many
/// callers ask at once, and never read backwards.
#[tokio::test]
async fn the_chains_clock_is_read_once_per_reading_and_shared() {
    use hiregate_payments::ChainClock;
    let harness = Harness::start().await;
    let counter = RpcCounter::start(harness.devnet.rpc_url().clone())
        .await
        .unwrap();
    let provider = alloy::providers::ProviderBuilder::new()
        .connect_http(counter.url())
        .erased();
    let kept = ChainClock::with_max_age(provider.clone(), Duration::from_secs(3_600));
    let readings = join_all((0..20).map(|_| kept.block_time())).await;
    let first = *readings[0].as_ref().unwrap();
    assert!(readings.iter().all(|r| r.as_ref().ok() == Some(&first)));
    assert_eq!(first, harness.devnet.block_time().await.unwrap());
    assert_eq!(
        counter.calls_of("eth_getBlockByNumber"),
        1,
        "one read for twenty callers"
    );

    harness.devnet.advance_time(100).await.unwrap();
    assert_eq!(
        kept.block_time().await.unwrap(),
        first,
        "still within its lifetime"
    );
    assert_eq!(counter.calls_of("eth_getBlockByNumber"), 1);
    let now = kept.now().await.unwrap();
    assert_eq!(now.block_time(), first);
    assert!(
        now.latest() >= unix_now() - 1,
        "the later of the two clocks"
    );

    let fresh = ChainClock::with_max_age(provider, Duration::ZERO);
    assert!(fresh.block_time().await.unwrap() >= first + 100);
    assert_eq!(counter.calls_of("eth_getBlockByNumber"), 2);
}

/// Signs `authorization` under `domain` and wraps it as a payment for `accepted`.
async fn payload_signed_under(
    payer: &PrivateKeySigner,
    accepted: &PaymentRequirements,
    domain: &Eip712Domain,
    authorization: Eip3009Authorization,
) -> PaymentPayload {
    let signature = payer
        .sign_hash(&authorization.signing_hash(domain))
        .await
        .unwrap();
    let exact = ExactEvmPayload {
        signature: Bytes::copy_from_slice(&signature.as_bytes()),
        authorization,
        unknown: UnknownFields::new(),
    };
    PaymentPayload {
        x402_version: X402Version2,
        resource: None,
        accepted: accepted.clone(),
        payload: serde_json::to_value(exact).unwrap(),
        extensions: Default::default(),
        unknown: UnknownFields::new(),
    }
}

fn authorization_for(harness: &Harness, payer: Address) -> Eip3009Authorization {
    Eip3009Authorization {
        from: payer,
        to: harness.pay_to,
        value: DecimalU256::from(AMOUNT),
        valid_after: DecimalU256::from(0u64),
        valid_before: DecimalU256::from(unix_now() + 300),
        nonce: B256::from(rand::random::<[u8; 32]>()),
    }
}

#[tokio::test]
async fn wrong_chain_id_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;

    // The client paid for another chain.
    let mut mainnet = harness.requirements.clone();
    mainnet.network = Network::eip155(1).unwrap();
    let payload = harness
        .sign(&payer, &mainnet, &SignOptions::default())
        .await;
    assert_refused(&harness, payload, Reason::NetworkMismatch).await;

    // The client claims this chain but signed with another chain id in the EIP-712 domain.
    let mut domain = token_eip712_domain(&harness.requirements).unwrap();
    domain.chain_id = Some(U256::from(1u64));
    let payload = payload_signed_under(
        &payer,
        &harness.requirements,
        &domain,
        authorization_for(&harness, payer.address()),
    )
    .await;
    assert_refused(&harness, payload, Reason::Signature).await;
}

#[tokio::test]
async fn wrong_asset_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let mut other = harness.requirements.clone();
    other.asset = PrivateKeySigner::random().address().to_checksum(None);
    let payload = harness.sign(&payer, &other, &SignOptions::default()).await;
    assert_refused(&harness, payload, Reason::AssetMismatch).await;
}

#[tokio::test]
async fn wrong_eip712_domain_name_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let mut other = harness.requirements.clone();
    other
        .extra
        .insert("name".into(), serde_json::Value::String("USD Coin".into()));
    let payload = harness.sign(&payer, &other, &SignOptions::default()).await;
    assert_refused(&harness, payload, Reason::Signature).await;
}

/// Tampers with `payload`'s signature: one nibble of `s` flipped.
fn flip_a_nibble_of_s(payload: &mut PaymentPayload) {
    let mut signature = payload.payload["signature"]
        .as_str()
        .unwrap()
        .to_owned()
        .into_bytes();
    signature[100] = if signature[100] == b'0' { b'1' } else { b'0' };
    payload.payload["signature"] = String::from_utf8(signature).unwrap().into();
}

#[tokio::test]
async fn tampered_signature_and_tampered_authorization_are_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;

    let mut payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    flip_a_nibble_of_s(&mut payload);
    assert_refused(&harness, payload, Reason::Signature).await;

    let mut payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let valid_before = payload.payload["authorization"]["validBefore"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    payload.payload["authorization"]["validBefore"] = (valid_before + 1).to_string().into();
    assert_refused(&harness, payload, Reason::Signature).await;
}

#[tokio::test]
async fn insufficient_balance_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(AMOUNT - 1).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    assert_refused(&harness, payload, Reason::InsufficientBalance).await;
}

/// Once a token has shown it speaks EIP-3009, a plain key's payment is judged by the simulation
/// alone; a refusal must still name its reason, not just "simulation failed".
#[tokio::test]
async fn refusals_keep_their_reason_once_the_token_is_known() {
    let harness = Harness::start().await;
    let facilitator = harness.facilitator().await;
    let good = harness.payer(AMOUNT).await;
    let payload = harness
        .sign(&good, &harness.requirements, &SignOptions::default())
        .await;
    let verdict = facilitator.verify(&harness.request(payload)).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");

    let short = harness.payer(AMOUNT - 1).await;
    let payload = harness
        .sign(&short, &harness.requirements, &SignOptions::default())
        .await;
    let verdict = facilitator.verify(&harness.request(payload)).await.unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::InsufficientBalance));
}

#[tokio::test]
async fn nonce_already_used_is_refused() {
    let harness = Harness::start().await;
    let facilitator = harness.facilitator().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let nonce = B256::from(rand::random::<[u8; 32]>());
    let options = SignOptions {
        nonce: Some(nonce),
        ..SignOptions::default()
    };

    // The nonce is spent by a payment to someone else...
    let mut elsewhere = harness.requirements.clone();
    let other_pay_to = PrivateKeySigner::random().address();
    elsewhere.pay_to = other_pay_to.to_checksum(None);
    let first = harness.sign(&payer, &elsewhere, &options).await;
    let outcome = facilitator
        .settle(&hiregate_payments::VerifyRequest::new(
            first.clone(),
            elsewhere.clone(),
        ))
        .await
        .unwrap();
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(harness.balance(other_pay_to).await, U256::from(AMOUNT));

    // ...so verifying that payment again reports the spent nonce (verify is not idempotent)...
    let again = facilitator
        .verify(&hiregate_payments::VerifyRequest::new(first, elsewhere))
        .await
        .unwrap();
    assert_eq!(again.invalid_reason, Some(Reason::NonceAlreadyUsed));

    // ...and a new payment reusing the nonce is refused without moving anything more.
    let payer_before = harness.balance(payer.address()).await;
    let second = harness.sign(&payer, &harness.requirements, &options).await;
    let request = harness.request(second);
    let verdict = facilitator.verify(&request).await.unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::NonceAlreadyUsed));
    let outcome = facilitator.settle(&request).await.unwrap();
    assert!(!outcome.success);
    assert_eq!(outcome.error_reason, Some(Reason::NonceAlreadyUsed));
    assert_eq!(harness.balance(payer.address()).await, payer_before);
    assert_eq!(harness.balance(harness.pay_to).await, U256::ZERO);
    assert_eq!(harness.transfers_from(payer.address()).await.len(), 1);
}

/// A facilitator on `harness`'s chain whose node calls go through the returned counter.
async fn counted_facilitator(harness: &Harness) -> (RpcCounter, LocalFacilitator) {
    counted_facilitator_with(harness, |_| {}).await
}

/// [`counted_facilitator`] with its chain's configuration edited by `edit`.
async fn counted_facilitator_with(
    harness: &Harness,
    edit: impl FnOnce(&mut ChainConfig),
) -> (RpcCounter, LocalFacilitator) {
    let node = RpcCounter::start(harness.devnet.rpc_url().clone())
        .await
        .unwrap();
    let facilitator = LocalFacilitator::connect(harness.config_with(|chain| {
        chain.rpc_url = node.url();
        edit(chain);
    }))
    .await
    .unwrap();
    (node, facilitator)
}

/// Settling a plain key's payment on a token known to speak EIP-3009 simulates the transfer
/// once, in the relayer's gas measurement: no `eth_call` re-check before the send. (A payment
/// that would revert still gets its own reason: `settle_batches` retries a drained payer's.)
#[tokio::test]
async fn a_known_plain_payers_settlement_simulates_the_transfer_once() {
    let harness = Harness::start().await;
    let (node, facilitator) = counted_facilitator(&harness).await;
    let harness = &harness;
    let request = |payer: PrivateKeySigner| async move {
        let payload = harness
            .sign(&payer, &harness.requirements, &SignOptions::default())
            .await;
        harness.request(payload)
    };
    // The first verification learns that the token speaks EIP-3009.
    let first = request(harness.payer(AMOUNT).await).await;
    assert!(facilitator.verify(&first).await.unwrap().is_valid);

    let payment = request(harness.payer(AMOUNT).await).await;
    let before = node.counts();
    let settled = facilitator.settle(&payment).await.unwrap();
    assert!(settled.success, "{settled:?}");
    let calls = rpc_counter::difference(&before, &node.counts());
    assert_eq!(calls.get("eth_call"), None, "{calls:?}");
    assert_eq!(calls.get("eth_createAccessList"), Some(&1), "{calls:?}");
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
}

/// A payment of a fresh plain payer, unverified, its token learnt by a first verification.
async fn known_payers_payment(
    harness: &Harness,
    facilitator: &LocalFacilitator,
) -> hiregate_payments::SettleRequest {
    let mut requests = Vec::new();
    for _ in 0..2 {
        let payer = harness.payer(AMOUNT).await;
        let payload = harness
            .sign(&payer, &harness.requirements, &SignOptions::default())
            .await;
        requests.push(harness.request(payload));
    }
    assert!(facilitator.verify(&requests[0]).await.unwrap().is_valid);
    requests.pop().unwrap()
}

/// Waits (up to 5 s) until `node` has answered `calls` more `method` calls than in `before`.
async fn node_answered(
    node: &RpcCounter,
    before: &rpc_counter::MethodCounts,
    method: &str,
    calls: u64,
) {
    for _ in 0..500 {
        let seen = rpc_counter::difference(before, &node.counts());
        if seen.get(method).copied().unwrap_or(0) >= calls {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the node saw no {method} within 5 s");
}

/// Prepares a known plain payer's settlement on a relayer that sends alone, waits for the
/// measurement and then `aged` more, and settles it; returns the node calls of the settle.
async fn settle_prepared(aged: Duration) -> rpc_counter::MethodCounts {
    let harness = Harness::start().await;
    // A relayer that sends each settlement alone, as on a chain without Multicall3.
    let (node, facilitator) =
        counted_facilitator_with(&harness, |chain| chain.settle_batch_max = 1).await;
    let payment = known_payers_payment(&harness, &facilitator).await;

    let before = node.counts();
    facilitator.prepare_settle(&payment);
    node_answered(&node, &before, "eth_createAccessList", 1).await;
    tokio::time::sleep(aged).await;
    let measured = node.counts();
    let settled = facilitator.settle(&payment).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
    rpc_counter::difference(&measured, &node.counts())
}

/// A settlement prepared while its deliverable is judged sends on the gas measured then: the
/// measurement runs at `prepare_settle`, and the settle itself asks the node only to send.
#[tokio::test]
async fn a_prepared_settlement_sends_on_the_gas_measured_ahead() {
    let calls = settle_prepared(Duration::ZERO).await;
    assert_eq!(calls.get("eth_createAccessList"), None, "{calls:?}");
}

/// A measurement that has waited longer than its bound (500 ms) for its settle is not used:
/// the chain may have moved since, so the settle measures again, as it would unprepared.
#[tokio::test]
async fn a_settlement_prepared_too_long_ago_is_measured_again() {
    let calls = settle_prepared(Duration::from_millis(600)).await;
    assert_eq!(calls.get("eth_createAccessList"), Some(&1), "{calls:?}");
}

/// A relayer that batches measures each batch whole, so it measures nothing ahead: the node
/// hears nothing of a prepared payment (watched for 300 ms) until it is settled.
#[tokio::test]
async fn a_batching_relayer_measures_nothing_ahead() {
    let harness = Harness::start().await;
    let (node, facilitator) = counted_facilitator(&harness).await;
    let payment = known_payers_payment(&harness, &facilitator).await;

    let before = node.counts();
    facilitator.prepare_settle(&payment);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let calls = rpc_counter::difference(&before, &node.counts());
    assert!(calls.is_empty(), "{calls:?}");
    let settled = facilitator.settle(&payment).await.unwrap();
    assert!(settled.success, "{settled:?}");
}

/// A verified payment's signature is remembered for its settlement, and only those bytes: the
/// same authorization settled with another signature (one flipped nibble of `s`) is judged
/// anew and refused, and nothing moves. The one that verified then settles.
#[tokio::test]
async fn a_settlement_takes_only_the_signature_that_verified() {
    let harness = Harness::start().await;
    let facilitator = harness.facilitator().await;
    let payer = harness.payer(AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let verified = harness.request(payload.clone());
    assert!(facilitator.verify(&verified).await.unwrap().is_valid);

    let mut tampered = payload;
    flip_a_nibble_of_s(&mut tampered);
    let outcome = facilitator
        .settle(&harness.request(tampered))
        .await
        .unwrap();
    assert!(
        !outcome.success,
        "settled with a signature never verified: {outcome:?}"
    );
    assert_eq!(outcome.error_reason, Some(Reason::Signature));
    assert_eq!(harness.balance(harness.pay_to).await, U256::ZERO);

    let settled = facilitator.settle(&verified).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
}

/// Concurrent verifications share the node's calls (Multicall3 `aggregate3`), and each still
/// gets the answer it would get alone: a refusal keeps its own reason, and a payment whose
/// payer is paid in the same burst is not judged on money it does not hold yet.
#[tokio::test]
async fn concurrent_verifications_share_node_calls_and_each_gets_its_own_answer() {
    const VALID: usize = 16;
    let harness = Harness::start().await;
    let (node, facilitator) = counted_facilitator(&harness).await;

    // A settled payment: the token is known to speak EIP-3009 from here on, and this
    // payment's nonce is spent.
    let spender = harness.payer(AMOUNT).await;
    let spent = harness.request(
        harness
            .sign(&spender, &harness.requirements, &SignOptions::default())
            .await,
    );
    assert!(facilitator.settle(&spent).await.unwrap().success);

    // `funder` pays `empty`, which holds nothing; `empty`'s own payment comes right after.
    let (funder, empty) = (harness.payer(AMOUNT).await, harness.payer(0).await);
    let mut to_empty = harness.requirements.clone();
    to_empty.pay_to = empty.address().to_checksum(None);
    let funding = hiregate_payments::VerifyRequest::new(
        harness
            .sign(&funder, &to_empty, &SignOptions::default())
            .await,
        to_empty,
    );
    let from_empty = harness.request(
        harness
            .sign(&empty, &harness.requirements, &SignOptions::default())
            .await,
    );
    // One payer's two payments, each of its whole balance: each is valid alone.
    let twice = harness.payer(AMOUNT).await;
    let mut requests = vec![funding, from_empty, spent];
    for _ in 0..2 {
        requests.push(
            harness.request(
                harness
                    .sign(&twice, &harness.requirements, &SignOptions::default())
                    .await,
            ),
        );
    }
    let short = harness.payer(AMOUNT - 1).await;
    requests.push(
        harness.request(
            harness
                .sign(&short, &harness.requirements, &SignOptions::default())
                .await,
        ),
    );
    for _ in 0..VALID {
        let payer = harness.payer(AMOUNT).await;
        requests.push(
            harness.request(
                harness
                    .sign(&payer, &harness.requirements, &SignOptions::default())
                    .await,
            ),
        );
    }

    let calls_before = node.calls_of("eth_call");
    let verdicts = join_all(requests.iter().map(|request| facilitator.verify(request))).await;
    let reasons: Vec<Option<Reason>> = verdicts
        .into_iter()
        .map(|verdict| verdict.unwrap().invalid_reason)
        .collect();
    let mut expected = vec![
        None,
        Some(Reason::InsufficientBalance),
        Some(Reason::NonceAlreadyUsed),
        None,
        None,
        Some(Reason::InsufficientBalance),
    ];
    expected.extend(std::iter::repeat_n(None, VALID));
    assert_eq!(reasons, expected);
    // Each refusal costs a few calls of its own (asked alone, then its nonce and balance);
    // the valid payments share theirs.
    let calls = node.calls_of("eth_call") - calls_before;
    assert!(
        calls < requests.len() as u64,
        "{calls} eth_calls for {} verifications",
        requests.len()
    );
    assert_eq!(harness.balance(empty.address()).await, U256::ZERO);
}

#[tokio::test]
async fn authorization_cancelled_by_the_payer_is_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let nonce = payload.exact_evm().unwrap().authorization.nonce;

    // The payer burns the nonce on chain with EIP-3009 cancelAuthorization.
    let domain = token_eip712_domain(&harness.requirements).unwrap();
    let cancel = CancelAuthorization {
        authorizer: payer.address(),
        nonce,
    };
    let signature = payer
        .sign_hash(&cancel.eip712_signing_hash(&domain))
        .await
        .unwrap();
    let token = DevnetUsd::new(harness.devnet.token(), harness.provider_as(payer.clone()));
    let receipt = token
        .cancelAuthorization_1(
            payer.address(),
            nonce,
            Bytes::copy_from_slice(&signature.as_bytes()),
        )
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    assert!(
        harness
            .devnet
            .authorization_state(payer.address(), nonce)
            .await
            .unwrap()
    );

    assert_refused(&harness, payload, Reason::NonceAlreadyUsed).await;
}

#[tokio::test]
async fn malformed_headers_and_version_one_are_refused_before_any_chain_call() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let header = encode_header(&payload);
    let engine = base64::engine::general_purpose::STANDARD;

    let malformed_base64 = format!("{}*", &header[..header.len() - 4]);
    let err = decode_header::<PaymentPayload>(&malformed_base64).unwrap_err();
    assert!(matches!(err, HeaderError::MalformedBase64(_)), "{err}");
    assert_eq!(err.reason(), Reason::InvalidPayload);

    let json = engine.decode(&header).unwrap();
    let malformed_json = engine.encode(&json[..json.len() - 1]);
    let err = decode_header::<PaymentPayload>(&malformed_json).unwrap_err();
    assert!(matches!(err, HeaderError::MalformedJson(_)), "{err}");
    assert_eq!(err.reason(), Reason::InvalidPayload);

    let mut v1: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v1["x402Version"] = 1.into();
    let err = decode_header::<PaymentPayload>(&engine.encode(v1.to_string())).unwrap_err();
    assert!(
        matches!(err, HeaderError::UnsupportedVersion { .. }),
        "{err}"
    );
    assert_eq!(err.reason(), Reason::InvalidX402Version);

    // The intact header still decodes into a payment that would settle; nothing moved.
    let decoded: PaymentPayload = decode_header(&header).unwrap();
    let verdict = harness
        .facilitator()
        .await
        .verify(&harness.request(decoded))
        .await
        .unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    assert_eq!(
        harness.balance(payer.address()).await,
        U256::from(5 * AMOUNT)
    );
}

#[tokio::test]
async fn eip1271_wallet_payment_verifies_and_settles() {
    let harness = Harness::start().await;
    let facilitator = harness.facilitator().await;
    let owner = PrivateKeySigner::random();
    let wallet = harness
        .devnet
        .deploy_1271_wallet(owner.address())
        .await
        .unwrap();
    harness
        .devnet
        .mint(wallet, U256::from(3 * AMOUNT))
        .await
        .unwrap();
    let options = SignOptions {
        payer: Some(wallet),
        ..SignOptions::default()
    };

    // Someone who is not the owner cannot pay from the wallet.
    let stranger = PrivateKeySigner::random();
    let forged = harness
        .sign(&stranger, &harness.requirements, &options)
        .await;
    assert_refused(&harness, forged, Reason::Signature).await;

    let payload = harness.sign(&owner, &harness.requirements, &options).await;
    let request = harness.request(payload);
    let verdict = facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let outcome = facilitator.settle(&request).await.unwrap();
    assert_settled(&outcome, &harness.network, wallet);
    assert_eq!(harness.balance(wallet).await, U256::from(2 * AMOUNT));
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
}

#[tokio::test]
async fn twenty_concurrent_settles_through_one_relayer_all_land() {
    const PAYMENTS: usize = 20;
    let harness = Harness::start().await;
    let facilitator = Arc::new(harness.facilitator().await);
    let mut requests = Vec::new();
    let mut payers = Vec::new();
    for _ in 0..PAYMENTS {
        let payer = harness.payer(AMOUNT).await;
        let payload = harness
            .sign(&payer, &harness.requirements, &SignOptions::default())
            .await;
        requests.push(harness.request(payload));
        payers.push(payer.address());
    }

    let outcomes = join_all(requests.iter().map(|request| {
        let facilitator = Arc::clone(&facilitator);
        async move { facilitator.settle(request).await.unwrap() }
    }))
    .await;

    for (outcome, payer) in outcomes.iter().zip(&payers) {
        assert_settled(outcome, &harness.network, *payer);
        assert_eq!(harness.balance(*payer).await, U256::ZERO);
        // Payments may share a transaction; each names the one that moved it.
        assert_eq!(
            harness.transfers_from(*payer).await,
            vec![outcome.transaction.parse::<B256>().unwrap()]
        );
    }
    let hashes: HashSet<_> = outcomes.iter().map(|o| o.transaction.clone()).collect();
    assert_eq!(
        sent_by(&harness, harness.devnet.relayer().address()).await,
        hashes.len() as u64,
        "every transaction sent settled something"
    );
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(AMOUNT * PAYMENTS as u64)
    );
}

#[tokio::test]
async fn same_payment_settled_twice_in_sequence_succeeds_once_and_transfers_once() {
    let harness = Harness::start().await;
    let facilitator = harness.facilitator().await;
    let relayer = harness.devnet.relayer().address();
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);

    let first = facilitator.settle(&request).await.unwrap();
    assert_settled(&first, &harness.network, payer.address());
    let sent = sent_by(&harness, relayer).await;

    // The replay fails like the official facilitator's, so a resource server relying on it
    // (`@x402/express`) refuses a replayed payment header.
    let second = facilitator.settle(&request).await.unwrap();
    assert_nonce_used(&second, payer.address(), Some(&first.transaction));
    let third = facilitator.settle(&request).await.unwrap();
    assert_nonce_used(&third, payer.address(), Some(&first.transaction));
    assert_eq!(sent_by(&harness, relayer).await, sent, "a replay broadcast");

    assert_eq!(
        harness.transfers_from(payer.address()).await,
        vec![first.transaction.parse::<B256>().unwrap()]
    );
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
    assert_eq!(
        harness.balance(payer.address()).await,
        U256::from(4 * AMOUNT)
    );
}

#[tokio::test]
async fn a_restarted_facilitator_refuses_an_authorization_settled_before() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);
    let first = harness.facilitator().await.settle(&request).await.unwrap();
    assert_settled(&first, &harness.network, payer.address());

    // No memory of the settlement: the chain's AuthorizationUsed log names the original.
    let restarted = harness.facilitator().await;
    let verdict = restarted.verify(&request).await.unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::NonceAlreadyUsed));
    let replay = restarted.settle(&request).await.unwrap();
    assert_nonce_used(&replay, payer.address(), Some(&first.transaction));

    assert_eq!(harness.transfers_from(payer.address()).await.len(), 1);
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
}

#[tokio::test]
async fn same_payment_settled_concurrently_succeeds_once_and_transfers_once() {
    let harness = Harness::start().await;
    let facilitator = Arc::new(harness.facilitator().await);
    let relayer = harness.devnet.relayer().address();
    // A second facilitator instance with its own relayer, racing the first through the chain.
    let other_relayer = harness.devnet.fresh_relayer().await.unwrap();
    let other_address = other_relayer.address();
    let other = Arc::new(
        LocalFacilitator::connect(harness.config_with(|chain| {
            chain.relayer_key = hiregate_payments::RelayerKey::new(other_relayer);
        }))
        .await
        .unwrap(),
    );
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);
    let sent_before = (
        sent_by(&harness, relayer).await,
        sent_by(&harness, other_address).await,
    );

    let mut settlers: Vec<Arc<dyn Facilitator>> = vec![other.clone(), other];
    settlers.extend((0..6).map(|_| facilitator.clone() as Arc<dyn Facilitator>));
    let outcomes = join_all(settlers.iter().map(|settler| {
        let request = &request;
        async move { settler.settle(request).await.unwrap() }
    }))
    .await;

    let transfers = harness.transfers_from(payer.address()).await;
    assert_eq!(transfers.len(), 1, "exactly one transfer: {outcomes:?}");
    let (settled, refused): (Vec<_>, Vec<_>) = outcomes.iter().partition(|o| o.success);
    assert_eq!(settled.len(), 1, "exactly one success: {outcomes:?}");
    assert_settled(settled[0], &harness.network, payer.address());
    assert_eq!(settled[0].transaction, transfers[0].to_string());
    for outcome in refused {
        // A settler whose own transaction lost the race names it in `transaction`.
        assert!(!outcome.success);
        assert_eq!(
            outcome.error_reason,
            Some(Reason::NonceAlreadyUsed),
            "{outcome:?}"
        );
    }
    // The per-key lock: each facilitator broadcast at most once for the payment.
    assert!(sent_by(&harness, relayer).await - sent_before.0 <= 1);
    assert!(sent_by(&harness, other_address).await - sent_before.1 <= 1);
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
}

#[tokio::test]
async fn concurrent_settles_in_one_facilitator_broadcast_once() {
    let harness = Harness::start().await;
    let facilitator = Arc::new(harness.facilitator().await);
    let relayer = harness.devnet.relayer().address();
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);
    let sent_before = sent_by(&harness, relayer).await;

    let outcomes = join_all((0..8).map(|_| {
        let facilitator = Arc::clone(&facilitator);
        let request = &request;
        async move { facilitator.settle(request).await.unwrap() }
    }))
    .await;

    let (settled, refused): (Vec<_>, Vec<_>) = outcomes.iter().partition(|o| o.success);
    assert_eq!(settled.len(), 1, "exactly one success: {outcomes:?}");
    for outcome in refused {
        assert_nonce_used(outcome, payer.address(), Some(&settled[0].transaction));
    }
    assert_eq!(
        sent_by(&harness, relayer).await,
        sent_before + 1,
        "one broadcast"
    );
    assert_eq!(
        harness.transfers_from(payer.address()).await,
        vec![settled[0].transaction.parse::<B256>().unwrap()]
    );
}

#[tokio::test]
async fn unconfirmed_settlement_reports_pending_and_a_retry_reconciles() {
    let harness = Harness::start().await;
    let facilitator = LocalFacilitator::connect(harness.config_with(|chain| {
        chain.receipt_timeout_secs = 1;
    }))
    .await
    .unwrap();
    let relayer = harness.devnet.relayer().address();
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let request = harness.request(payload);
    let sent_before = sent_by(&harness, relayer).await;

    let provider = harness.devnet.provider();
    provider
        .raw_request::<_, ()>("evm_setAutomine".into(), (false,))
        .await
        .unwrap();
    let pending = facilitator.settle(&request).await.unwrap();
    assert!(!pending.success);
    assert_eq!(pending.error_reason, Some(Reason::SettlementPending));
    assert!(pending.transaction.starts_with("0x"), "{pending:?}");
    assert_eq!(harness.balance(harness.pay_to).await, U256::ZERO);

    // Still unmined: the retry waits on the same transaction instead of sending another.
    let still = facilitator.settle(&request).await.unwrap();
    assert_eq!(still.error_reason, Some(Reason::SettlementPending));
    assert_eq!(still.transaction, pending.transaction);

    provider
        .raw_request::<_, String>("evm_mine".into(), ())
        .await
        .unwrap();
    provider
        .raw_request::<_, ()>("evm_setAutomine".into(), (true,))
        .await
        .unwrap();
    // The caller never had a success for this payment: the mined transaction is reported once.
    let settled = facilitator.settle(&request).await.unwrap();
    assert_settled(&settled, &harness.network, payer.address());
    assert_eq!(
        settled.transaction, pending.transaction,
        "the retry reused the broadcast"
    );
    let replay = facilitator.settle(&request).await.unwrap();
    assert_nonce_used(&replay, payer.address(), Some(&pending.transaction));

    assert_eq!(
        harness.transfers_from(payer.address()).await,
        vec![pending.transaction.parse::<B256>().unwrap()]
    );
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
    assert_eq!(sent_by(&harness, relayer).await, sent_before + 1);
}

#[tokio::test]
async fn unsupported_network_and_unlisted_token_are_refused() {
    let harness = Harness::start().await;
    let payer = harness.payer(5 * AMOUNT).await;

    let mut elsewhere = harness.requirements.clone();
    elsewhere.network = Network::eip155(8453).unwrap();
    let payload = harness
        .sign(&payer, &elsewhere, &SignOptions::default())
        .await;
    let facilitator = harness.facilitator().await;
    let verdict = facilitator
        .verify(&hiregate_payments::VerifyRequest::new(payload, elsewhere))
        .await
        .unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::InvalidNetwork));

    let listed_only = LocalFacilitator::connect(harness.config_with(|chain| {
        chain.tokens = Some(vec![Address::repeat_byte(0x11)]);
    }))
    .await
    .unwrap();
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let outcome = listed_only.settle(&harness.request(payload)).await.unwrap();
    assert_eq!(outcome.error_reason, Some(Reason::UnsupportedAsset));
    assert_eq!(
        harness.balance(payer.address()).await,
        U256::from(5 * AMOUNT)
    );
}

#[tokio::test]
async fn connect_refuses_a_node_of_another_chain() {
    let harness = Harness::start().await;
    let mut config = harness.config();
    config.chains[0].network = Network::eip155(1).unwrap();
    let err = LocalFacilitator::connect(config).await.unwrap_err();
    assert!(
        matches!(err, hiregate_payments::facilitator::local::LocalFacilitatorError::ChainIdMismatch { actual, .. } if actual == harness.devnet.chain_id()),
        "{err}"
    );
}

#[tokio::test]
async fn a_transfer_the_token_would_revert_fails_simulation() {
    let mut harness = Harness::start().await;
    // Every check of ours passes, but the token refuses transfers to the zero address.
    harness.pay_to = Address::ZERO;
    harness.requirements.pay_to = Address::ZERO.to_checksum(None);
    let payer = harness.payer(5 * AMOUNT).await;
    let payload = harness
        .sign(&payer, &harness.requirements, &SignOptions::default())
        .await;
    let verdict = harness
        .facilitator()
        .await
        .verify(&harness.request(payload.clone()))
        .await
        .unwrap();
    assert!(
        verdict
            .invalid_message
            .as_deref()
            .is_some_and(|m| m.contains("revert")),
        "{verdict:?}"
    );
    assert_refused(&harness, payload, Reason::SimulationFailed).await;
}
