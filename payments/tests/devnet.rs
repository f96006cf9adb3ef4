//! The devnet on a real anvil: the token's EIP-712 domain, minting, and every EIP-3009 path
//! (both signature forms, replay, cancellation, time window, wrong domain, EIP-1271 wallets).
//! Each test starts its own chain, so they run in parallel.
#![cfg(feature = "devnet")]

use std::time::{SystemTime, UNIX_EPOCH};

use alloy::{
    network::EthereumWallet,
    primitives::{Address, B256, Bytes, U256},
    providers::{DynProvider, Provider, ProviderBuilder},
    signers::{Signer, local::PrivateKeySigner},
    sol_types::{Eip712Domain, SolCall, SolStruct},
};
use hiregate_payments::devnet::{
    Devnet, DevnetError, DevnetOptions, MULTICALL3_ADDRESS,
    bindings::{
        CancelAuthorization, DevnetMulticall, DevnetUsd, DevnetUsd::DevnetUsdErrors,
        ReceiveWithAuthorization, TransferWithAuthorization,
    },
};

const USDC: u64 = 1_000_000;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn random_nonce() -> B256 {
    B256::from(rand::random::<[u8; 32]>())
}

fn domain(devnet: &Devnet) -> Eip712Domain {
    domain_named(devnet, devnet.token_name())
}

fn domain_named(devnet: &Devnet, name: &str) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.to_owned().into()),
        Some(devnet.token_version().to_owned().into()),
        Some(U256::from(devnet.chain_id())),
        Some(devnet.token()),
        None,
    )
}

/// An authorization valid from now for ten minutes, with a random nonce.
fn authorization(from: Address, to: Address, value: u64) -> TransferWithAuthorization {
    TransferWithAuthorization {
        from,
        to,
        value: U256::from(value),
        validAfter: U256::ZERO,
        validBefore: U256::from(now() + 600),
        nonce: random_nonce(),
    }
}

async fn sign<T: SolStruct + Sync>(
    signer: &PrivateKeySigner,
    message: &T,
    domain: &Eip712Domain,
) -> alloy::primitives::Signature {
    signer
        .sign_hash(&message.eip712_signing_hash(domain))
        .await
        .unwrap()
}

/// A provider that sends transactions from `signer`.
fn wallet_provider(devnet: &Devnet, signer: PrivateKeySigner) -> DynProvider {
    ProviderBuilder::new()
        .wallet(EthereumWallet::from(signer))
        .connect_http(devnet.rpc_url().clone())
        .erased()
}

fn relayer_token(devnet: &Devnet) -> DevnetUsd::DevnetUsdInstance<DynProvider> {
    DevnetUsd::new(devnet.token(), wallet_provider(devnet, devnet.relayer()))
}

/// Submits with the `(v, r, s)` overload from the relayer; returns the revert, if any.
async fn submit_vrs(
    devnet: &Devnet,
    auth: &TransferWithAuthorization,
    signature: &alloy::primitives::Signature,
) -> Result<(), DevnetUsdErrors> {
    let token = relayer_token(devnet);
    let call = token.transferWithAuthorization_1(
        auth.from,
        auth.to,
        auth.value,
        auth.validAfter,
        auth.validBefore,
        auth.nonce,
        signature.v_byte(),
        signature.r().into(),
        signature.s().into(),
    );
    send(call).await
}

/// Submits with the `bytes signature` overload from the relayer; returns the revert, if any.
async fn submit_bytes(
    devnet: &Devnet,
    auth: &TransferWithAuthorization,
    signature: Bytes,
) -> Result<(), DevnetUsdErrors> {
    let token = relayer_token(devnet);
    let call = token.transferWithAuthorization_0(
        auth.from,
        auth.to,
        auth.value,
        auth.validAfter,
        auth.validBefore,
        auth.nonce,
        signature,
    );
    send(call).await
}

/// Sends a contract call, waits for it to be mined, and turns a revert into the token's error.
async fn send<P: Provider, C: SolCall>(
    call: alloy::contract::SolCallBuilder<P, C>,
) -> Result<(), DevnetUsdErrors> {
    match call.send().await {
        Ok(pending) => {
            let receipt = pending.get_receipt().await.unwrap();
            assert!(receipt.status(), "mined but reverted: {receipt:?}");
            Ok(())
        }
        Err(error) => Err(error
            .as_decoded_interface_error::<DevnetUsdErrors>()
            .unwrap_or_else(|| panic!("not a token revert: {error}"))),
    }
}

#[tokio::test]
async fn token_reports_the_configured_domain_and_usdc_decimals() {
    let options = DevnetOptions {
        chain_id: 84_532,
        token_name: "USDC".to_owned(),
        token_version: "7".to_owned(),
        token_symbol: "tUSDC".to_owned(),
        ..DevnetOptions::default()
    };
    let devnet = Devnet::start_with(options).await.unwrap();
    assert_eq!(devnet.network(), "eip155:84532");
    assert_eq!(devnet.provider().get_chain_id().await.unwrap(), 84_532);

    let token = DevnetUsd::new(devnet.token(), devnet.provider());
    assert_eq!(token.name().call().await.unwrap(), "USDC");
    assert_eq!(token.version().call().await.unwrap(), "7");
    assert_eq!(token.symbol().call().await.unwrap(), "tUSDC");
    assert_eq!(token.decimals().call().await.unwrap(), 6);
    assert_eq!(token.owner().call().await.unwrap(), devnet.token_owner());

    let eip5267 = token.eip712Domain().call().await.unwrap();
    assert_eq!(eip5267.domainName, "USDC");
    assert_eq!(eip5267.domainVersion, "7");
    assert_eq!(eip5267.chainId, U256::from(84_532));
    assert_eq!(eip5267.verifyingContract, devnet.token());

    let separator = token.DOMAIN_SEPARATOR().call().await.unwrap();
    assert_eq!(separator, domain(&devnet).separator());
    assert_ne!(separator, domain_named(&devnet, "USD Coin").separator());

    // The typehash x402 clients sign with (x402 facts §2.2).
    let typehash = token
        .TRANSFER_WITH_AUTHORIZATION_TYPEHASH()
        .call()
        .await
        .unwrap();
    assert_eq!(
        typehash.to_string(),
        "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
    );
}

#[tokio::test]
async fn funded_accounts_hold_the_minted_tokens_and_eth() {
    let devnet = Devnet::start().await.unwrap();
    let first = devnet.funded_account(U256::from(5 * USDC)).await.unwrap();
    let second = devnet.funded_account(U256::from(7)).await.unwrap();
    assert_ne!(first.address(), second.address());
    assert_eq!(
        devnet.balance_of(first.address()).await.unwrap(),
        U256::from(5 * USDC)
    );
    assert_eq!(
        devnet.balance_of(second.address()).await.unwrap(),
        U256::from(7)
    );
    assert!(
        devnet
            .provider()
            .get_balance(first.address())
            .await
            .unwrap()
            > U256::ZERO
    );
    let supply = DevnetUsd::new(devnet.token(), devnet.provider())
        .totalSupply()
        .call()
        .await
        .unwrap();
    assert_eq!(supply, U256::from(5 * USDC + 7));
}

#[tokio::test]
async fn concurrent_funding_on_one_chain_never_collides() {
    let devnet = std::sync::Arc::new(Devnet::start().await.unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=8u64 {
        let devnet = devnet.clone();
        tasks.spawn(async move { (i, devnet.funded_account(U256::from(i * USDC)).await) });
    }
    let mut funded = 0;
    while let Some(joined) = tasks.join_next().await {
        let (i, account) = joined.unwrap();
        let account = account.unwrap();
        assert_eq!(
            devnet.balance_of(account.address()).await.unwrap(),
            U256::from(i * USDC)
        );
        funded += 1;
    }
    assert_eq!(funded, 8);
}

#[tokio::test]
async fn only_the_owner_mints() {
    let devnet = Devnet::start().await.unwrap();
    let stranger = devnet.funded_account(U256::ZERO).await.unwrap();
    let stranger_address = stranger.address();
    let provider = wallet_provider(&devnet, stranger);
    let token = DevnetUsd::new(devnet.token(), &provider);
    let error = send(token.mint(stranger_address, U256::from(USDC)))
        .await
        .unwrap_err();
    assert!(matches!(error, DevnetUsdErrors::NotOwner(e) if e.caller == stranger_address));
    assert_eq!(
        devnet.balance_of(stranger_address).await.unwrap(),
        U256::ZERO
    );
}

#[tokio::test]
async fn transfer_with_authorization_moves_exactly_the_amount_and_the_nonce_cannot_be_replayed() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(10 * USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let auth = authorization(payer.address(), pay_to, 1_234_567);
    let signature = sign(&payer, &auth, &domain(&devnet)).await;
    assert!(
        !devnet
            .authorization_state(payer.address(), auth.nonce)
            .await
            .unwrap()
    );

    submit_vrs(&devnet, &auth, &signature).await.unwrap();

    assert_eq!(
        devnet.balance_of(payer.address()).await.unwrap(),
        U256::from(10 * USDC - 1_234_567)
    );
    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(1_234_567)
    );
    assert!(
        devnet
            .authorization_state(payer.address(), auth.nonce)
            .await
            .unwrap()
    );
    // The relayer paid gas but moved no tokens of its own.
    assert_eq!(
        devnet.balance_of(devnet.relayer().address()).await.unwrap(),
        U256::ZERO
    );

    // Replay through either overload: refused, nothing moves.
    let replay = submit_vrs(&devnet, &auth, &signature).await.unwrap_err();
    assert!(
        matches!(&replay, DevnetUsdErrors::AuthorizationUsedOrCanceled(e) if e.nonce == auth.nonce),
        "{replay:?}"
    );
    let replay = submit_bytes(&devnet, &auth, signature.as_bytes().into())
        .await
        .unwrap_err();
    assert!(
        matches!(replay, DevnetUsdErrors::AuthorizationUsedOrCanceled(_)),
        "{replay:?}"
    );
    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(1_234_567)
    );
}

#[tokio::test]
async fn the_bytes_signature_form_accepts_an_eoa_signature() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let auth = authorization(payer.address(), pay_to, 250_000);
    let signature = sign(&payer, &auth, &domain(&devnet)).await;

    submit_bytes(&devnet, &auth, signature.as_bytes().into())
        .await
        .unwrap();

    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(250_000)
    );
    assert_eq!(
        devnet.balance_of(payer.address()).await.unwrap(),
        U256::from(750_000)
    );
}

#[tokio::test]
async fn the_transfer_emits_authorization_used_and_transfer_events() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let auth = authorization(payer.address(), pay_to, 10);
    let signature = sign(&payer, &auth, &domain(&devnet)).await;
    let token = relayer_token(&devnet);
    let receipt = token
        .transferWithAuthorization_0(
            auth.from,
            auth.to,
            auth.value,
            auth.validAfter,
            auth.validBefore,
            auth.nonce,
            signature.as_bytes().into(),
        )
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    let used = receipt
        .decoded_log::<DevnetUsd::AuthorizationUsed>()
        .unwrap();
    assert_eq!((used.authorizer, used.nonce), (payer.address(), auth.nonce));
    let transfer = receipt.decoded_log::<DevnetUsd::Transfer>().unwrap();
    assert_eq!(
        (transfer.from, transfer.to, transfer.value),
        (payer.address(), pay_to, U256::from(10))
    );
}

#[tokio::test]
async fn a_cancelled_authorization_can_never_be_executed() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let auth = authorization(payer.address(), pay_to, 100_000);
    let transfer_signature = sign(&payer, &auth, &domain(&devnet)).await;

    // The payer cancels the nonce itself (it holds ETH for gas).
    let cancel = CancelAuthorization {
        authorizer: payer.address(),
        nonce: auth.nonce,
    };
    let cancel_signature = sign(&payer, &cancel, &domain(&devnet)).await;
    let payer_provider = wallet_provider(&devnet, payer.clone());
    let token = DevnetUsd::new(devnet.token(), &payer_provider);
    let receipt = token
        .cancelAuthorization_0(
            cancel.authorizer,
            cancel.nonce,
            cancel_signature.v_byte(),
            cancel_signature.r().into(),
            cancel_signature.s().into(),
        )
        .send()
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    let event = receipt
        .decoded_log::<DevnetUsd::AuthorizationCanceled>()
        .unwrap();
    assert_eq!(event.nonce, auth.nonce);
    assert!(
        devnet
            .authorization_state(payer.address(), auth.nonce)
            .await
            .unwrap()
    );

    let refused = submit_vrs(&devnet, &auth, &transfer_signature)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, DevnetUsdErrors::AuthorizationUsedOrCanceled(_)),
        "{refused:?}"
    );
    assert_eq!(
        devnet.balance_of(payer.address()).await.unwrap(),
        U256::from(USDC)
    );
    assert_eq!(devnet.balance_of(pay_to).await.unwrap(), U256::ZERO);

    // A second cancel of the same nonce is refused too (bytes overload).
    let again = send(token.cancelAuthorization_1(
        cancel.authorizer,
        cancel.nonce,
        cancel_signature.as_bytes().into(),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(again, DevnetUsdErrors::AuthorizationUsedOrCanceled(_)),
        "{again:?}"
    );
}

#[tokio::test]
async fn a_cancellation_signed_by_someone_else_is_refused() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let cancel = CancelAuthorization {
        authorizer: payer.address(),
        nonce: random_nonce(),
    };
    let forged = sign(&PrivateKeySigner::random(), &cancel, &domain(&devnet)).await;
    let token = relayer_token(&devnet);
    let refused = send(token.cancelAuthorization_1(
        cancel.authorizer,
        cancel.nonce,
        forged.as_bytes().into(),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(refused, DevnetUsdErrors::InvalidSignature(_)),
        "{refused:?}"
    );
    assert!(
        !devnet
            .authorization_state(payer.address(), cancel.nonce)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn the_validity_window_is_enforced() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();

    let mut expired = authorization(payer.address(), pay_to, 1);
    expired.validBefore = U256::from(now() - 1);
    let signature = sign(&payer, &expired, &domain(&devnet)).await;
    let error = submit_vrs(&devnet, &expired, &signature).await.unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::AuthorizationExpired(_)),
        "{error:?}"
    );

    let mut early = authorization(payer.address(), pay_to, 1);
    early.validAfter = U256::from(now() + 300);
    let signature = sign(&payer, &early, &domain(&devnet)).await;
    let error = submit_vrs(&devnet, &early, &signature).await.unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::AuthorizationNotYetValid(_)),
        "{error:?}"
    );

    assert_eq!(devnet.balance_of(pay_to).await.unwrap(), U256::ZERO);
    assert!(
        !devnet
            .authorization_state(payer.address(), early.nonce)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn signatures_over_another_domain_or_message_are_refused() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let auth = authorization(payer.address(), pay_to, 500);

    // Wrong EIP-712 name: the classic real-world USDC mistake.
    let wrong_name = sign(&payer, &auth, &domain_named(&devnet, "USD Coin")).await;
    let error = submit_vrs(&devnet, &auth, &wrong_name).await.unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );

    // A valid signature, but the relayer raises the amount.
    let signature = sign(&payer, &auth, &domain(&devnet)).await;
    let mut inflated = auth.clone();
    inflated.value = U256::from(501);
    let error = submit_vrs(&devnet, &inflated, &signature)
        .await
        .unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );

    // Signed by someone other than `from`.
    let impostor = sign(&PrivateKeySigner::random(), &auth, &domain(&devnet)).await;
    let error = submit_bytes(&devnet, &auth, impostor.as_bytes().into())
        .await
        .unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );

    // Truncated signature bytes.
    let error = submit_bytes(
        &devnet,
        &auth,
        Bytes::from(signature.as_bytes()[..64].to_vec()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );

    assert_eq!(devnet.balance_of(pay_to).await.unwrap(), U256::ZERO);
}

#[tokio::test]
async fn an_insufficient_balance_reverts_and_moves_nothing() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(99)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let auth = authorization(payer.address(), pay_to, 100);
    let signature = sign(&payer, &auth, &domain(&devnet)).await;
    let error = submit_vrs(&devnet, &auth, &signature).await.unwrap_err();
    assert!(
        matches!(&error, DevnetUsdErrors::InsufficientBalance(e) if e.balance == U256::from(99)),
        "{error:?}"
    );
    // A failed attempt does not burn the nonce.
    assert!(
        !devnet
            .authorization_state(payer.address(), auth.nonce)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn receive_with_authorization_only_lets_the_payee_submit() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    let payee = devnet.funded_account(U256::ZERO).await.unwrap();
    let message = ReceiveWithAuthorization {
        from: payer.address(),
        to: payee.address(),
        value: U256::from(42),
        validAfter: U256::ZERO,
        validBefore: U256::from(now() + 600),
        nonce: random_nonce(),
    };
    let signature = sign(&payer, &message, &domain(&devnet)).await;
    async fn submit(
        token: &DevnetUsd::DevnetUsdInstance<DynProvider>,
        message: &ReceiveWithAuthorization,
        signature: &alloy::primitives::Signature,
    ) -> Result<(), DevnetUsdErrors> {
        send(token.receiveWithAuthorization_0(
            message.from,
            message.to,
            message.value,
            message.validAfter,
            message.validBefore,
            message.nonce,
            signature.as_bytes().into(),
        ))
        .await
    }

    let error = submit(&relayer_token(&devnet), &message, &signature)
        .await
        .unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::CallerMustBePayee(_)),
        "{error:?}"
    );

    let by_payee = DevnetUsd::new(devnet.token(), wallet_provider(&devnet, payee.clone()));
    submit(&by_payee, &message, &signature).await.unwrap();
    assert_eq!(
        devnet.balance_of(payee.address()).await.unwrap(),
        U256::from(42)
    );

    // A transfer-typed signature is not a receive-typed one.
    let transfer_typed = authorization(payer.address(), payee.address(), 1);
    let wrong_type = sign(&payer, &transfer_typed, &domain(&devnet)).await;
    let error = send(by_payee.receiveWithAuthorization_1(
        transfer_typed.from,
        transfer_typed.to,
        transfer_typed.value,
        transfer_typed.validAfter,
        transfer_typed.validBefore,
        transfer_typed.nonce,
        wrong_type.v_byte(),
        wrong_type.r().into(),
        wrong_type.s().into(),
    ))
    .await
    .unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_eip1271_wallet_pays_with_its_owners_signature() {
    let devnet = Devnet::start().await.unwrap();
    let owner = PrivateKeySigner::random();
    let wallet = devnet.deploy_1271_wallet(owner.address()).await.unwrap();
    assert!(
        !devnet
            .provider()
            .get_code_at(wallet)
            .await
            .unwrap()
            .is_empty()
    );
    devnet.mint(wallet, U256::from(3 * USDC)).await.unwrap();
    let pay_to = PrivateKeySigner::random().address();

    // The owner signs the typed data whose `from` is the wallet; the token asks the wallet.
    let auth = authorization(wallet, pay_to, USDC);
    let signature = sign(&owner, &auth, &domain(&devnet)).await;
    submit_bytes(&devnet, &auth, signature.as_bytes().into())
        .await
        .unwrap();
    assert_eq!(devnet.balance_of(pay_to).await.unwrap(), U256::from(USDC));
    assert_eq!(
        devnet.balance_of(wallet).await.unwrap(),
        U256::from(2 * USDC)
    );

    // The (v, r, s) form goes through the same EIP-1271 check.
    let auth = authorization(wallet, pay_to, USDC);
    let signature = sign(&owner, &auth, &domain(&devnet)).await;
    submit_vrs(&devnet, &auth, &signature).await.unwrap();
    assert_eq!(
        devnet.balance_of(pay_to).await.unwrap(),
        U256::from(2 * USDC)
    );

    // Someone else's signature: the wallet says no, nothing moves.
    let auth = authorization(wallet, pay_to, USDC);
    let forged = sign(&PrivateKeySigner::random(), &auth, &domain(&devnet)).await;
    let error = submit_bytes(&devnet, &auth, forged.as_bytes().into())
        .await
        .unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );
    assert_eq!(devnet.balance_of(wallet).await.unwrap(), U256::from(USDC));
}

#[tokio::test]
async fn parallel_devnets_are_separate_chains() {
    let (a, b) = tokio::join!(
        Devnet::start(),
        Devnet::start_with(DevnetOptions {
            chain_id: 1_337,
            ..DevnetOptions::default()
        })
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.rpc_url(), b.rpc_url());
    assert_eq!((a.chain_id(), b.chain_id()), (31_337, 1_337));
    let payer = a.funded_account(U256::from(USDC)).await.unwrap();
    assert_eq!(b.balance_of(payer.address()).await.unwrap(), U256::ZERO);

    // Same deployer, same nonce: the token has the same address on both chains, yet a signature
    // for chain A's domain does not verify on chain B.
    assert_eq!(a.token(), b.token());
    b.mint(payer.address(), U256::from(USDC)).await.unwrap();
    let auth = authorization(payer.address(), PrivateKeySigner::random().address(), 1);
    let signature = sign(&payer, &auth, &domain(&a)).await;
    let error = submit_vrs(&b, &auth, &signature).await.unwrap_err();
    assert!(
        matches!(error, DevnetUsdErrors::InvalidSignature(_)),
        "{error:?}"
    );
    submit_vrs(&a, &auth, &signature).await.unwrap();

    let rpc_url = a.rpc_url().clone();
    drop(a);
    // Dropping kills anvil: the port stops answering.
    let provider = ProviderBuilder::new().connect_http(rpc_url);
    let mut stopped = false;
    for _ in 0..50 {
        if provider.get_chain_id().await.is_err() {
            stopped = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(stopped, "anvil still answers after the Devnet was dropped");
}

#[tokio::test]
async fn interval_mining_works_with_a_block_time() {
    let devnet = Devnet::start_with(DevnetOptions {
        block_time: Some(std::time::Duration::from_millis(500)),
        ..DevnetOptions::default()
    })
    .await
    .unwrap();
    let payer = devnet.funded_account(U256::from(USDC)).await.unwrap();
    assert_eq!(
        devnet.balance_of(payer.address()).await.unwrap(),
        U256::from(USDC)
    );
    let first = devnet.provider().get_block_number().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_600)).await;
    assert!(devnet.provider().get_block_number().await.unwrap() > first);
}

#[tokio::test]
async fn bad_options_are_refused_before_anything_starts() {
    let zero_chain = DevnetOptions {
        chain_id: 0,
        ..DevnetOptions::default()
    };
    assert!(matches!(
        Devnet::start_with(zero_chain).await,
        Err(DevnetError::InvalidOptions(_))
    ));
    let no_name = DevnetOptions {
        token_name: String::new(),
        ..DevnetOptions::default()
    };
    assert!(matches!(
        Devnet::start_with(no_name).await,
        Err(DevnetError::InvalidOptions(_))
    ));
    let zero_block_time = DevnetOptions {
        block_time: Some(std::time::Duration::ZERO),
        ..DevnetOptions::default()
    };
    assert!(matches!(
        Devnet::start_with(zero_block_time).await,
        Err(DevnetError::InvalidOptions(_))
    ));
}

#[tokio::test]
async fn multicall3_answers_at_its_canonical_address() {
    let devnet = Devnet::start().await.unwrap();
    let payer = devnet.funded_account(U256::from(777)).await.unwrap();
    let multicall = DevnetMulticall::new(MULTICALL3_ADDRESS, devnet.provider());
    let balance_call = DevnetUsd::balanceOfCall {
        account: payer.address(),
    }
    .abi_encode();
    let results = multicall
        .tryAggregate(
            false,
            vec![
                DevnetMulticall::Call {
                    target: devnet.token(),
                    callData: balance_call.into(),
                },
                // No such function on the token: this call fails, the batch does not.
                DevnetMulticall::Call {
                    target: devnet.token(),
                    callData: vec![0xde, 0xad, 0xbe, 0xef].into(),
                },
            ],
        )
        .call()
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert!(results[0].success);
    assert_eq!(U256::from_be_slice(&results[0].returnData), U256::from(777));
    assert!(!results[1].success);
}

alloy::sol! {
    /// EIP-2612's typed-data struct.
    #[derive(Debug)]
    struct Permit {
        address owner;
        address spender;
        uint256 value;
        uint256 nonce;
        uint256 deadline;
    }
}

#[tokio::test]
async fn permit2_its_proxies_and_a_plain_permit_token_are_in_place() {
    use hiregate_payments::devnet::bindings::{
        DevnetPermitToken, DevnetPermitToken::DevnetPermitTokenErrors, Permit2,
        X402ExactPermit2Proxy, X402UptoPermit2Proxy,
    };
    use hiregate_payments::devnet::{
        EXACT_PERMIT2_PROXY_ADDRESS, PERMIT_TOKEN_NAME, PERMIT_TOKEN_VERSION, PERMIT2_ADDRESS,
        UPTO_PERMIT2_PROXY_ADDRESS,
    };

    let devnet = Devnet::start().await.unwrap();
    let provider = devnet.provider();
    // Permit2's domain has no version and names the canonical address it runs at.
    let permit2 = Permit2::new(PERMIT2_ADDRESS, &provider);
    let permit2_domain = Eip712Domain::new(
        Some("Permit2".into()),
        None,
        Some(U256::from(devnet.chain_id())),
        Some(PERMIT2_ADDRESS),
        None,
    );
    assert_eq!(
        permit2.DOMAIN_SEPARATOR().call().await.unwrap(),
        permit2_domain.separator()
    );
    let exact = X402ExactPermit2Proxy::new(EXACT_PERMIT2_PROXY_ADDRESS, &provider);
    assert_eq!(exact.PERMIT2().call().await.unwrap(), PERMIT2_ADDRESS);
    assert_eq!(
        exact.WITNESS_TYPEHASH().call().await.unwrap(),
        alloy::primitives::keccak256("Witness(address to,uint256 validAfter)")
    );
    let upto = X402UptoPermit2Proxy::new(UPTO_PERMIT2_PROXY_ADDRESS, &provider);
    assert_eq!(upto.PERMIT2().call().await.unwrap(), PERMIT2_ADDRESS);
    assert_eq!(
        upto.WITNESS_TYPE_STRING().call().await.unwrap(),
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
    );

    // The permit token is a plain ERC-20 (no EIP-3009) with EIP-2612.
    let token = DevnetPermitToken::new(devnet.permit_token(), &provider);
    assert_eq!(token.name().call().await.unwrap(), PERMIT_TOKEN_NAME);
    assert_eq!(token.decimals().call().await.unwrap(), 6);
    let has_eip3009 = provider
        .call(
            alloy::rpc::types::TransactionRequest::default()
                .to(devnet.permit_token())
                .input(
                    DevnetUsd::authorizationStateCall {
                        authorizer: Address::ZERO,
                        nonce: B256::ZERO,
                    }
                    .abi_encode()
                    .into(),
                ),
        )
        .await
        .is_ok();
    assert!(!has_eip3009, "the permit token must not speak EIP-3009");

    // A holder approves Permit2 with its own transaction…
    let holder = PrivateKeySigner::random();
    devnet
        .set_eth_balance(holder.address(), U256::from(10u64).pow(U256::from(18u8)))
        .await
        .unwrap();
    devnet
        .mint_permit_token(holder.address(), U256::from(5 * USDC))
        .await
        .unwrap();
    assert_eq!(
        devnet.permit_token_balance(holder.address()).await.unwrap(),
        U256::from(5 * USDC)
    );
    devnet
        .approve_permit2(&holder, devnet.permit_token(), U256::from(USDC))
        .await
        .unwrap();
    assert_eq!(
        devnet
            .permit2_allowance(devnet.permit_token(), holder.address())
            .await
            .unwrap(),
        U256::from(USDC)
    );

    // …or signs an EIP-2612 permit anyone may submit, once.
    let token_domain = Eip712Domain::new(
        Some(PERMIT_TOKEN_NAME.into()),
        Some(PERMIT_TOKEN_VERSION.into()),
        Some(U256::from(devnet.chain_id())),
        Some(devnet.permit_token()),
        None,
    );
    let permit = Permit {
        owner: holder.address(),
        spender: PERMIT2_ADDRESS,
        value: U256::from(3 * USDC),
        nonce: U256::ZERO,
        deadline: U256::from(now() + 600),
    };
    let signature = sign(&holder, &permit, &token_domain).await;
    let relayer = DevnetPermitToken::new(
        devnet.permit_token(),
        wallet_provider(&devnet, devnet.relayer()),
    );
    let submit = || {
        relayer.permit(
            permit.owner,
            permit.spender,
            permit.value,
            permit.deadline,
            27 + u8::from(signature.v()),
            signature.r().into(),
            signature.s().into(),
        )
    };
    submit().send().await.unwrap().get_receipt().await.unwrap();
    assert_eq!(
        devnet
            .permit2_allowance(devnet.permit_token(), holder.address())
            .await
            .unwrap(),
        U256::from(3 * USDC)
    );
    let replay = submit().send().await.unwrap_err();
    assert!(matches!(
        replay.as_decoded_interface_error::<DevnetPermitTokenErrors>(),
        Some(DevnetPermitTokenErrors::ERC2612InvalidSigner(_))
    ));
    assert!(
        !devnet
            .permit2_nonce_used(holder.address(), U256::from(7u8))
            .await
            .unwrap()
    );
}
