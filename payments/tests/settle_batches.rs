//! Settlement at chain speed, against a real chain (anvil with the project's EIP-3009 token and
//! its Multicall3 look-alike): concurrent settlements share `aggregate3` transactions, one bad
//! authorization in a batch fails alone, every payment moves exactly once, and a transaction that
//! is stuck or dropped is sent again at the same nonce rather than doubled.
//!
//! Faults are injected through the chain itself: automine off so a batch waits in the mempool,
//! a payer's own transaction (higher tip, so mined first in the same block) draining its balance
//! or cancelling its authorization, and `anvil_dropTransaction`.
//!
//! At real block times (anvil `--block-time`): settlements that arrive within a block all leave
//! before the next one, in several transactions at consecutive nonces, even with sync sends
//! (whose answer comes only with the block); watching them costs lookups per block, not per
//! transaction and poll; and transactions sent again while the block is made never pay twice.

#![cfg(feature = "devnet")]

mod support;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::{B256, Bytes, U256};
use alloy::providers::Provider;
use alloy::signers::Signer;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct;
use futures::future::join_all;
use hiregate_payments::devnet::DevnetOptions;
use hiregate_payments::devnet::bindings::{CancelAuthorization, DevnetUsd};
use hiregate_payments::devnet::rpc_counter::RpcCounter;
use hiregate_payments::exact::ledger::{
    AuthorizationRef, settlement_in_receipt, settlement_in_transaction,
};
use hiregate_payments::exact::token_eip712_domain;
use hiregate_payments::{
    ChainConfig, Facilitator, LocalFacilitator, Reason, SettleResponse, SignOptions, VerifyRequest,
};
use support::{AMOUNT, Harness};

/// A tip far above the relayer's, so the payer's own transaction is mined first in the block.
const PAYER_TIP: u128 = 50_000_000_000;
/// Enough for a token transfer or a cancellation.
const PAYER_GAS: u64 = 200_000;

/// Polls `check` until it yields a value. Not a timing assertion: the bound only turns a hang
/// into a failure.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..1_500 {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("gave up waiting for {what}");
}

async fn facilitator_with(
    harness: &Harness,
    edit: impl FnOnce(&mut ChainConfig),
) -> Arc<LocalFacilitator> {
    Arc::new(
        LocalFacilitator::connect(harness.config_with(edit))
            .await
            .unwrap(),
    )
}

async fn paid_request(harness: &Harness, payer: &PrivateKeySigner) -> VerifyRequest {
    let payload = harness
        .sign(payer, &harness.requirements, &SignOptions::default())
        .await;
    harness.request(payload)
}

fn spawn_settles(
    facilitator: &Arc<LocalFacilitator>,
    requests: &[VerifyRequest],
) -> tokio::task::JoinHandle<Vec<SettleResponse>> {
    let facilitator = Arc::clone(facilitator);
    let requests = requests.to_vec();
    tokio::spawn(async move {
        join_all(
            requests
                .iter()
                .map(|request| async { facilitator.settle(request).await.unwrap() }),
        )
        .await
    })
}

/// The relayer's one pending transaction, once the node holds it.
async fn the_settlement_in_the_mempool(harness: &Harness) -> B256 {
    let relayer = harness.devnet.relayer().address();
    eventually("the settlement in the mempool", || async {
        let pending = harness.devnet.pending_transactions(relayer).await.unwrap();
        (pending.len() == 1).then(|| pending[0])
    })
    .await
}

async fn relayer_nonce(harness: &Harness) -> u64 {
    harness
        .devnet
        .provider()
        .get_transaction_count(harness.devnet.relayer().address())
        .await
        .unwrap()
}

#[tokio::test]
async fn one_bad_authorization_fails_alone_and_the_rest_of_its_batch_settles() {
    const GOOD: usize = 4;
    let harness = Harness::start().await;
    // The batch waits for all six settlements being verified, however long that takes.
    let facilitator = facilitator_with(&harness, |chain| {
        chain.settle_batch_max = GOOD + 2;
        chain.settle_batch_window_ms = 60_000;
    })
    .await;
    let relayer = harness.devnet.relayer().address();
    let mut good = Vec::new();
    for _ in 0..GOOD {
        good.push(harness.payer(AMOUNT).await);
    }
    let drained = harness.payer(AMOUNT).await;
    let cancelling = harness.payer(AMOUNT).await;
    let mut requests = Vec::new();
    for payer in good.iter().chain([&drained, &cancelling]) {
        requests.push(paid_request(&harness, payer).await);
    }
    let cancelled_nonce = requests[GOOD + 1]
        .payment_payload
        .exact_evm()
        .unwrap()
        .authorization
        .nonce;
    let nonce_before = relayer_nonce(&harness).await;

    harness.devnet.set_automine(false).await.unwrap();
    let settles = spawn_settles(&facilitator, &requests);
    // Every payment verified and joined one transaction, now waiting in the mempool.
    let batch = eventually("the batch in the mempool", || async {
        let pending = harness.devnet.pending_transactions(relayer).await.unwrap();
        (pending.len() == 1).then(|| pending[0])
    })
    .await;

    // Between verification and mining, one payer empties its wallet and another cancels its
    // authorization; both are mined ahead of the batch in the same block.
    let sink = PrivateKeySigner::random().address();
    let drain = DevnetUsd::new(harness.devnet.token(), harness.provider_as(drained.clone()))
        .transfer(sink, U256::from(AMOUNT))
        .max_priority_fee_per_gas(PAYER_TIP)
        .max_fee_per_gas(2 * PAYER_TIP)
        // Given, not estimated: the node estimates on top of the pending batch, which it would
        // make revert.
        .gas(PAYER_GAS)
        .send()
        .await
        .unwrap();
    let domain = token_eip712_domain(&harness.requirements).unwrap();
    let cancel = CancelAuthorization {
        authorizer: cancelling.address(),
        nonce: cancelled_nonce,
    };
    let signature = cancelling
        .sign_hash(&cancel.eip712_signing_hash(&domain))
        .await
        .unwrap();
    let cancellation = DevnetUsd::new(
        harness.devnet.token(),
        harness.provider_as(cancelling.clone()),
    )
    .cancelAuthorization_1(
        cancelling.address(),
        cancelled_nonce,
        Bytes::copy_from_slice(&signature.as_bytes()),
    )
    .max_priority_fee_per_gas(PAYER_TIP)
    .max_fee_per_gas(2 * PAYER_TIP)
    .gas(PAYER_GAS)
    .send()
    .await
    .unwrap();
    harness.devnet.mine_block().await.unwrap();
    harness.devnet.set_automine(true).await.unwrap();

    let provider = harness.devnet.provider();
    let batch_receipt = provider
        .get_transaction_receipt(batch)
        .await
        .unwrap()
        .expect("the batch was mined");
    assert!(batch_receipt.status(), "the batch itself never reverts");
    for payer_tx in [*drain.tx_hash(), *cancellation.tx_hash()] {
        let receipt = provider
            .get_transaction_receipt(payer_tx)
            .await
            .unwrap()
            .unwrap();
        assert!(receipt.status());
        assert_eq!(receipt.block_number, batch_receipt.block_number);
        assert!(
            receipt.transaction_index < batch_receipt.transaction_index,
            "the fault must land before the batch for this test to mean anything"
        );
    }

    let outcomes = settles.await.unwrap();
    let batch_hash = batch.to_string();
    for (outcome, payer) in outcomes.iter().zip(&good) {
        assert!(outcome.success, "{outcome:?}");
        assert_eq!(outcome.transaction, batch_hash, "{outcome:?}");
        assert_eq!(
            outcome.payer.as_deref(),
            Some(payer.address().to_checksum(None).as_str())
        );
        assert_eq!(harness.balance(payer.address()).await, U256::ZERO);
        assert_eq!(
            harness.transfers_from(payer.address()).await,
            vec![batch],
            "moved once, by the batch"
        );
    }
    let short = &outcomes[GOOD];
    assert!(!short.success, "{short:?}");
    assert_eq!(
        short.error_reason,
        Some(Reason::InsufficientBalance),
        "{short:?}"
    );
    assert_eq!(short.transaction, batch_hash, "the batch it failed in");
    let cancelled = &outcomes[GOOD + 1];
    assert!(!cancelled.success, "{cancelled:?}");
    assert_eq!(
        cancelled.error_reason,
        Some(Reason::NonceAlreadyUsed),
        "{cancelled:?}"
    );
    assert_eq!(cancelled.transaction, batch_hash);

    // The chain, to the atomic unit: the good payments moved, the bad ones moved nothing.
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(AMOUNT * GOOD as u64)
    );
    assert_eq!(harness.balance(drained.address()).await, U256::ZERO);
    assert_eq!(harness.balance(sink).await, U256::from(AMOUNT));
    assert_eq!(
        harness.transfers_from(drained.address()).await,
        vec![*drain.tx_hash()]
    );
    assert_eq!(
        harness.balance(cancelling.address()).await,
        U256::from(AMOUNT)
    );
    assert!(
        harness
            .transfers_from(cancelling.address())
            .await
            .is_empty()
    );
    let drained_nonce = requests[GOOD]
        .payment_payload
        .exact_evm()
        .unwrap()
        .authorization
        .nonce;
    assert!(
        !harness
            .devnet
            .authorization_state(drained.address(), drained_nonce)
            .await
            .unwrap(),
        "the drained payer's authorization is still unused"
    );
    assert_eq!(
        relayer_nonce(&harness).await,
        nonce_before + 1,
        "one transaction"
    );

    // The refused payments stay refused on retry, and nothing is sent for them.
    let retry = facilitator.settle(&requests[GOOD + 1]).await.unwrap();
    assert_eq!(retry.error_reason, Some(Reason::NonceAlreadyUsed));
    let retry = facilitator.settle(&requests[GOOD]).await.unwrap();
    assert_eq!(retry.error_reason, Some(Reason::InsufficientBalance));
    assert_eq!(relayer_nonce(&harness).await, nonce_before + 1);
}

#[tokio::test]
async fn many_concurrent_settles_and_their_duplicates_move_every_payment_exactly_once() {
    let harness = Harness::start().await;
    let facilitator = Arc::new(harness.facilitator().await);
    every_payment_twice_at_once_moves_once(&harness, &facilitator).await;
}

#[tokio::test]
async fn with_sync_sends_concurrent_settles_and_duplicates_move_every_payment_exactly_once() {
    let harness = Harness::start().await;
    let facilitator = facilitator_with(&harness, |chain| {
        chain.sync_send = hiregate_payments::SyncSendMode::On
    })
    .await;
    every_payment_twice_at_once_moves_once(&harness, &facilitator).await;
}

/// Settles 48 payments, each twice, all at once: each moves once, in batches.
async fn every_payment_twice_at_once_moves_once(
    harness: &Harness,
    facilitator: &Arc<LocalFacilitator>,
) {
    const PAYMENTS: usize = 48;
    let mut payers = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..PAYMENTS {
        let payer = harness.payer(3 * AMOUNT).await;
        requests.push(paid_request(harness, &payer).await);
        payers.push(payer.address());
    }
    let nonce_before = relayer_nonce(harness).await;

    // Every payment twice, all at once: the duplicates race their originals.
    let twice: Vec<VerifyRequest> = requests.iter().chain(&requests).cloned().collect();
    let outcomes = spawn_settles(facilitator, &twice).await.unwrap();

    let mut batch_hashes = HashSet::new();
    for (index, payer) in payers.iter().enumerate() {
        let pair = [&outcomes[index], &outcomes[index + PAYMENTS]];
        let settled: Vec<_> = pair.iter().filter(|outcome| outcome.success).collect();
        assert_eq!(
            settled.len(),
            1,
            "exactly one success per payment: {pair:?}"
        );
        let refused = pair.iter().find(|outcome| !outcome.success).unwrap();
        assert_eq!(
            refused.error_reason,
            Some(Reason::NonceAlreadyUsed),
            "{refused:?}"
        );
        let transaction: B256 = settled[0].transaction.parse().unwrap();
        assert_eq!(
            harness.transfers_from(*payer).await,
            vec![transaction],
            "moved once, in the transaction named"
        );
        assert_eq!(harness.balance(*payer).await, U256::from(2 * AMOUNT));
        batch_hashes.insert(transaction);
    }
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(AMOUNT * PAYMENTS as u64)
    );
    let sent = relayer_nonce(harness).await - nonce_before;
    assert_eq!(
        sent,
        batch_hashes.len() as u64,
        "every transaction sent moved money"
    );
    assert!(
        sent < PAYMENTS as u64,
        "{PAYMENTS} concurrent settlements took {sent} transactions: nothing was batched"
    );
}

#[tokio::test]
async fn one_payers_payments_beyond_its_balance_in_one_batch_move_only_what_it_holds() {
    let harness = Harness::start().await;
    let facilitator = facilitator_with(&harness, |chain| {
        chain.settle_batch_max = 3;
        chain.settle_batch_window_ms = 60_000;
    })
    .await;
    // Each payment verifies on its own; together they exceed the balance.
    let payer = harness.payer(2 * AMOUNT).await;
    let mut requests = Vec::new();
    for _ in 0..3 {
        requests.push(paid_request(&harness, &payer).await);
    }

    let outcomes = spawn_settles(&facilitator, &requests).await.unwrap();

    let settled: Vec<_> = outcomes.iter().filter(|outcome| outcome.success).collect();
    assert_eq!(settled.len(), 2, "{outcomes:?}");
    let refused = outcomes.iter().find(|outcome| !outcome.success).unwrap();
    assert!(
        matches!(
            refused.error_reason,
            Some(
                Reason::InsufficientBalance | Reason::SimulationFailed | Reason::TransactionFailed
            )
        ),
        "{refused:?}"
    );
    assert_eq!(harness.balance(payer.address()).await, U256::ZERO);
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(2 * AMOUNT)
    );
    assert_eq!(harness.transfers_from(payer.address()).await.len(), 2);
}

#[tokio::test]
async fn a_stuck_settlement_is_replaced_at_the_same_nonce_and_paid_once() {
    let harness = Harness::start().await;
    let facilitator = facilitator_with(&harness, |chain| {
        chain.resend_after_ms = 300;
    })
    .await;
    let relayer = harness.devnet.relayer().address();
    let payer = harness.payer(AMOUNT).await;
    let request = paid_request(&harness, &payer).await;
    let nonce_before = relayer_nonce(&harness).await;

    harness.devnet.set_automine(false).await.unwrap();
    let settle = spawn_settles(&facilitator, std::slice::from_ref(&request));
    let first = the_settlement_in_the_mempool(&harness).await;
    // Unmined past the bound: the same call again, same nonce, higher fees, in its place.
    eventually("the replacement", || async {
        let pending = harness.devnet.pending_transactions(relayer).await.unwrap();
        (pending.len() == 1 && pending[0] != first).then_some(())
    })
    .await;
    harness.devnet.mine_block().await.unwrap();
    harness.devnet.set_automine(true).await.unwrap();

    let outcome = settle.await.unwrap().remove(0);
    assert!(outcome.success, "{outcome:?}");
    let provider = harness.devnet.provider();
    let mined: B256 = outcome.transaction.parse().unwrap();
    assert!(
        provider
            .get_transaction_receipt(mined)
            .await
            .unwrap()
            .is_some(),
        "the answer names the transaction that was mined"
    );
    assert_ne!(mined, first, "a later version was mined");
    assert!(
        provider
            .get_transaction_receipt(first)
            .await
            .unwrap()
            .is_none(),
        "the replaced version never mined"
    );
    let fees = |hash: B256| {
        let provider = provider.clone();
        async move {
            let tx = provider.get_transaction_by_hash(hash).await.unwrap();
            tx.map(|tx| alloy::consensus::Transaction::max_fee_per_gas(&tx))
        }
    };
    if let Some(first_fee) = fees(first).await {
        assert!(
            fees(mined).await.unwrap() > first_fee,
            "replacement paid more"
        );
    }
    assert_eq!(relayer_nonce(&harness).await, nonce_before + 1);
    assert_eq!(harness.transfers_from(payer.address()).await, vec![mined]);
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));

    // Settled is settled: the replay is refused and sends nothing.
    let replay = facilitator.settle(&request).await.unwrap();
    assert_eq!(replay.error_reason, Some(Reason::NonceAlreadyUsed));
    assert_eq!(relayer_nonce(&harness).await, nonce_before + 1);
}

#[tokio::test]
async fn a_sync_send_not_mined_in_time_is_watched_until_mined_and_paid_once() {
    let harness = Harness::start().await;
    let facilitator = facilitator_with(&harness, |chain| {
        chain.sync_send = hiregate_payments::SyncSendMode::On
    })
    .await;
    let payer = harness.payer(AMOUNT).await;
    let request = paid_request(&harness, &payer).await;
    let nonce_before = relayer_nonce(&harness).await;

    // Nothing is mined, so the send's answer never comes: the relayer stops waiting for it
    // (after a second) and watches the transaction instead.
    harness.devnet.set_automine(false).await.unwrap();
    let settle = spawn_settles(&facilitator, std::slice::from_ref(&request));
    let sent = the_settlement_in_the_mempool(&harness).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!settle.is_finished(), "answered before anything was mined");
    harness.devnet.mine_block().await.unwrap();
    harness.devnet.set_automine(true).await.unwrap();

    let outcome = settle.await.unwrap().remove(0);
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.transaction, sent.to_string());
    assert_eq!(relayer_nonce(&harness).await, nonce_before + 1);
    assert_eq!(harness.transfers_from(payer.address()).await, vec![sent]);
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));

    // The relayer goes on: the next settlement's send is answered with its receipt.
    let next = harness.payer(AMOUNT).await;
    let next_outcome = facilitator
        .settle(&paid_request(&harness, &next).await)
        .await
        .unwrap();
    assert!(next_outcome.success, "{next_outcome:?}");
    assert_eq!(relayer_nonce(&harness).await, nonce_before + 2);
}

#[tokio::test]
async fn with_sync_sends_a_node_without_the_method_gets_plain_sends() {
    let harness = Harness::start().await;
    // anvil has the method, so only its refusal is injected.
    let node = RpcCounter::refusing(
        harness.devnet.rpc_url().clone(),
        "eth_sendRawTransactionSync",
    )
    .await
    .unwrap();
    let facilitator = facilitator_with(&harness, |chain| {
        chain.sync_send = hiregate_payments::SyncSendMode::On;
        chain.rpc_url = node.url();
    })
    .await;
    let nonce_before = relayer_nonce(&harness).await;

    // The first send is refused as unknown and goes out plain; the second is plain from the start.
    for sent in 1..=2 {
        let payer = harness.payer(AMOUNT).await;
        let outcome = facilitator
            .settle(&paid_request(&harness, &payer).await)
            .await
            .unwrap();
        assert!(outcome.success, "{outcome:?}");
        let transaction: B256 = outcome.transaction.parse().unwrap();
        assert_eq!(
            harness.transfers_from(payer.address()).await,
            vec![transaction]
        );
        assert_eq!(relayer_nonce(&harness).await, nonce_before + sent);
    }
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(2 * AMOUNT)
    );
}

#[tokio::test]
async fn a_dropped_settlement_is_sent_again_at_the_same_nonce_and_paid_once() {
    let harness = Harness::start().await;
    let facilitator = facilitator_with(&harness, |chain| {
        chain.resend_after_ms = 300;
    })
    .await;
    let relayer = harness.devnet.relayer().address();
    let payer = harness.payer(AMOUNT).await;
    let request = paid_request(&harness, &payer).await;
    let nonce_before = relayer_nonce(&harness).await;

    harness.devnet.set_automine(false).await.unwrap();
    let settle = spawn_settles(&facilitator, std::slice::from_ref(&request));
    let first = the_settlement_in_the_mempool(&harness).await;
    harness.devnet.drop_transaction(first).await.unwrap();
    assert!(
        harness
            .devnet
            .pending_transactions(relayer)
            .await
            .unwrap()
            .is_empty(),
        "the node lost the settlement"
    );
    let resent = eventually("the settlement sent again", || async {
        let pending = harness.devnet.pending_transactions(relayer).await.unwrap();
        (pending.len() == 1).then(|| pending[0])
    })
    .await;
    assert_ne!(resent, first, "sent with new fees");
    harness.devnet.mine_block().await.unwrap();
    harness.devnet.set_automine(true).await.unwrap();

    let outcome = settle.await.unwrap().remove(0);
    assert!(outcome.success, "{outcome:?}");
    assert_eq!(outcome.transaction, resent.to_string());
    assert_eq!(relayer_nonce(&harness).await, nonce_before + 1);
    assert_eq!(harness.transfers_from(payer.address()).await, vec![resent]);
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
    assert_eq!(harness.balance(payer.address()).await, U256::ZERO);
}

#[tokio::test]
async fn one_payers_payments_sharing_a_batch_are_each_read_with_their_own_transfer() {
    let harness = Harness::start().await;
    let facilitator = facilitator_with(&harness, |chain| {
        chain.settle_batch_max = 2;
        chain.settle_batch_window_ms = 60_000;
    })
    .await;
    let payer = harness.payer(2 * AMOUNT).await;
    let mut elsewhere = harness.requirements.clone();
    let other_pay_to = PrivateKeySigner::random().address();
    elsewhere.pay_to = other_pay_to.to_checksum(None);
    let here = paid_request(&harness, &payer).await;
    let there = VerifyRequest::new(
        harness
            .sign(&payer, &elsewhere, &SignOptions::default())
            .await,
        elsewhere,
    );

    let outcomes = spawn_settles(&facilitator, &[here.clone(), there.clone()])
        .await
        .unwrap();

    assert!(
        outcomes.iter().all(|outcome| outcome.success),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[0].transaction, outcomes[1].transaction,
        "one batch"
    );
    let batch: B256 = outcomes[0].transaction.parse().unwrap();
    // The facilitator hands out the node's receipt of its own settlement; a hash it did not
    // settle is left to the node.
    let mined = facilitator
        .mined_receipt(batch)
        .expect("the receipt of its own settlement");
    assert!(facilitator.mined_receipt(B256::repeat_byte(7)).is_none());
    // The ledger pairs each authorization with its own transfer, not the payer's first one,
    // whether it reads the receipt from the node or from the facilitator.
    for (request, pay_to) in [(&here, harness.pay_to), (&there, other_pay_to)] {
        let authorization = AuthorizationRef {
            asset: harness.devnet.token(),
            payer: payer.address(),
            nonce: request
                .payment_payload
                .exact_evm()
                .unwrap()
                .authorization
                .nonce,
        };
        let from_node = settlement_in_transaction(&harness.devnet.provider(), batch, authorization)
            .await
            .unwrap()
            .expect("settled in the batch");
        assert_eq!(
            settlement_in_receipt(&mined, authorization),
            Some(from_node)
        );
        let (_, transfer) = from_node;
        assert_eq!(transfer.to, pay_to);
        assert_eq!(transfer.value, U256::from(AMOUNT));
    }
    assert_eq!(harness.balance(harness.pay_to).await, U256::from(AMOUNT));
    assert_eq!(harness.balance(other_pay_to).await, U256::from(AMOUNT));
}

/// The block that mined each of `transactions`.
async fn blocks_of(harness: &Harness, transactions: &HashSet<B256>) -> Vec<u64> {
    let provider = harness.devnet.provider();
    let mut blocks = Vec::new();
    for transaction in transactions {
        let receipt = provider
            .get_transaction_receipt(*transaction)
            .await
            .unwrap()
            .expect("mined");
        blocks.push(receipt.block_number.unwrap());
    }
    blocks.sort_unstable();
    blocks
}

/// Waits for the chain's next block, so what follows starts early in a block.
async fn next_block(harness: &Harness) -> u64 {
    let provider = harness.devnet.provider();
    let now = provider.get_block_number().await.unwrap();
    eventually("the next block", || async {
        let head = provider.get_block_number().await.unwrap();
        (head > now).then_some(head)
    })
    .await
}

#[tokio::test]
async fn at_one_second_blocks_settlements_of_one_block_leave_before_the_next_in_pipelined_transactions()
 {
    // A chain that mines every second, sends that may be synchronous (the answer of one would
    // come only with the block) and batches of at most 4: 16 settlements need 4 transactions or
    // more, which must all leave within the block they arrived in, at consecutive nonces.
    let harness = Harness::start_with(DevnetOptions {
        block_time: Some(Duration::from_secs(1)),
        ..DevnetOptions::default()
    })
    .await;
    let node = RpcCounter::start(harness.devnet.rpc_url().clone())
        .await
        .unwrap();
    let facilitator = facilitator_with(&harness, |chain| {
        chain.rpc_url = node.url();
        chain.sync_send = hiregate_payments::SyncSendMode::On;
        chain.settle_batch_max = 4;
    })
    .await;
    const PAYMENTS: usize = 16;
    let mut requests = Vec::new();
    let mut payers = Vec::new();
    for _ in 0..PAYMENTS {
        let payer = harness.payer(AMOUNT).await;
        requests.push(paid_request(&harness, &payer).await);
        payers.push(payer.address());
    }
    let nonce_before = relayer_nonce(&harness).await;
    let arrived_in = next_block(&harness).await + 1;
    let lookups_before = node.calls_of("eth_getTransactionReceipt");

    let outcomes = spawn_settles(&facilitator, &requests).await.unwrap();

    let mut transactions = HashSet::new();
    for (outcome, payer) in outcomes.iter().zip(&payers) {
        assert!(outcome.success, "{outcome:?}");
        let transaction: B256 = outcome.transaction.parse().unwrap();
        assert_eq!(harness.transfers_from(*payer).await, vec![transaction]);
        transactions.insert(transaction);
    }
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(AMOUNT * PAYMENTS as u64)
    );
    let sent = relayer_nonce(&harness).await - nonce_before;
    assert_eq!(
        sent,
        transactions.len() as u64,
        "every transaction moved money"
    );
    assert!(sent >= 4, "batches of at most 4: {sent} transactions");
    let blocks = blocks_of(&harness, &transactions).await;
    // A sync send holding the nonce until its block would have needed a block per transaction.
    assert!(
        blocks.iter().all(|block| *block <= arrived_in + 1),
        "settlements that arrived in block {arrived_in} were mined in blocks {blocks:?}"
    );
    let most_in_one_block = blocks
        .chunk_by(|a, b| a == b)
        .map(<[u64]>::len)
        .max()
        .unwrap_or(0);
    assert!(
        most_in_one_block > 1,
        "one relayer transaction per block: {blocks:?}"
    );
    // Watching costs per block, not per transaction per poll: a lookup by hash or two each.
    let lookups = node.calls_of("eth_getTransactionReceipt") - lookups_before;
    assert!(
        lookups <= 3 * sent,
        "{lookups} receipt lookups for {sent} transactions"
    );
    assert!(node.calls_of("eth_getBlockReceipts") > 0);
}

#[tokio::test]
async fn at_two_second_blocks_replacements_at_the_same_nonces_pay_every_payment_once() {
    // Transactions go unmined far past the resend bound while the block is made: each is sent
    // again, at its own nonce, several times. Whichever version is mined, each payment moves
    // once.
    let harness = Harness::start_with(DevnetOptions {
        block_time: Some(Duration::from_secs(2)),
        ..DevnetOptions::default()
    })
    .await;
    let node = RpcCounter::start(harness.devnet.rpc_url().clone())
        .await
        .unwrap();
    let facilitator = facilitator_with(&harness, |chain| {
        chain.rpc_url = node.url();
        chain.resend_after_ms = 300;
        chain.settle_batch_max = 2;
    })
    .await;
    const PAYMENTS: usize = 8;
    let mut requests = Vec::new();
    let mut payers = Vec::new();
    for _ in 0..PAYMENTS {
        let payer = harness.payer(AMOUNT).await;
        requests.push(paid_request(&harness, &payer).await);
        payers.push(payer.address());
    }
    let nonce_before = relayer_nonce(&harness).await;
    next_block(&harness).await;
    let sends_before = node.calls_of("eth_sendRawTransaction");

    let outcomes = spawn_settles(&facilitator, &requests).await.unwrap();

    let mut transactions = HashSet::new();
    for (outcome, payer) in outcomes.iter().zip(&payers) {
        assert!(outcome.success, "{outcome:?}");
        let transaction: B256 = outcome.transaction.parse().unwrap();
        assert_eq!(
            harness.transfers_from(*payer).await,
            vec![transaction],
            "moved once, by the version named"
        );
        assert_eq!(harness.balance(*payer).await, U256::ZERO);
        transactions.insert(transaction);
    }
    assert_eq!(
        harness.balance(harness.pay_to).await,
        U256::from(AMOUNT * PAYMENTS as u64)
    );
    let mined = relayer_nonce(&harness).await - nonce_before;
    assert_eq!(mined, transactions.len() as u64);
    let sends = node.calls_of("eth_sendRawTransaction") - sends_before;
    assert!(
        sends > mined,
        "{sends} sends for {mined} transactions: nothing was replaced"
    );
}
