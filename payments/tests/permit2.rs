//! `exact` over Permit2 and `upto` on a real anvil with the devnet's Permit2, proxies and a plain
//! ERC-20 (no EIP-3009): payments signed by the official `@x402/evm` 2.27 client (through
//! `tools/interop/sign.mjs`) and by our own signer verify and settle with the bundled
//! facilitator; balances, allowances, the payer's Permit2 nonce bitmap and the transfer logs are
//! read back from the chain; replays and concurrent duplicates move money once; `upto` moves
//! exactly the amount asked, and nothing for 0. The other way round, the official TypeScript
//! facilitator verifies and settles payments our signer produced.
//!
//! Node-dependent tests print `skipped: …` without the tools, and fail under `CI=true`.

#![cfg(feature = "devnet")]

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, TxHash, U256};
use alloy::providers::Provider;
use alloy::rpc::types::Filter;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolEvent;
use hiregate_payments::devnet::bindings::{DevnetPermitToken, X402ExactPermit2Proxy};
use hiregate_payments::devnet::{
    Devnet, EXACT_PERMIT2_PROXY_ADDRESS, PERMIT_TOKEN_NAME, PERMIT_TOKEN_VERSION, PERMIT2_ADDRESS,
    UPTO_PERMIT2_PROXY_ADDRESS, node_script, node_tools_or_skip,
};
use hiregate_payments::permit2::extension::{EIP2612_GAS_SPONSORING, eip2612_gas_sponsoring_offer};
use hiregate_payments::permit2::ledger::{
    Permit2OnChain, Permit2Ref, permit_on_chain, settlement_in_receipt,
};
use hiregate_payments::permit2::sign::add_eip2612_permit;
use hiregate_payments::permit2::upto::{settle_request, settled_amount};
use hiregate_payments::permit2::{self, Permit2Payment};
use hiregate_payments::wire::{Extensions, UnknownFields, X402Version2};
use hiregate_payments::{
    ChainConfig, Facilitator, FacilitatorConfig, LocalFacilitator, Network, PaymentPayload,
    PaymentRequired, PaymentRequirements, Permit2SignOptions, Reason, RelayerKey, ResourceInfo,
    SettleResponse, TokenDomain, VerifyRequest, decode_header, sign_permit2_payment,
};
use serde_json::{Value, json};

/// 1.25 units of a 6-decimal token.
const AMOUNT: u64 = 1_250_000;
/// The `upto` maximum: 5 units.
const MAX: u64 = 5_000_000;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

struct Env {
    devnet: Devnet,
    network: Network,
    pay_to: Address,
    facilitator: LocalFacilitator,
}

impl Env {
    async fn start() -> Self {
        let devnet = Devnet::start()
            .await
            .expect("devnet starts (scripts/install-tools.sh)");
        let network: Network = devnet.network().parse().unwrap();
        let facilitator = LocalFacilitator::connect(FacilitatorConfig {
            chains: vec![ChainConfig::new(
                network,
                devnet.rpc_url().clone(),
                RelayerKey::new(devnet.relayer()),
            )],
        })
        .await
        .unwrap();
        Self {
            devnet,
            network,
            pay_to: PrivateKeySigner::random().address(),
            facilitator,
        }
    }

    fn domain() -> TokenDomain {
        TokenDomain {
            name: PERMIT_TOKEN_NAME.into(),
            version: PERMIT_TOKEN_VERSION.into(),
        }
    }

    fn exact_offer(&self) -> PaymentRequirements {
        PaymentRequirements::exact_permit2_evm(
            self.network,
            U256::from(AMOUNT),
            self.devnet.permit_token(),
            self.pay_to,
            300,
            Some(&Self::domain()),
        )
    }

    fn upto_offer(&self) -> PaymentRequirements {
        PaymentRequirements::upto_evm(
            self.network,
            U256::from(MAX),
            self.devnet.permit_token(),
            self.pay_to,
            300,
            Some(&Self::domain()),
            self.devnet.relayer().address(),
        )
    }

    /// A payer holding `balance` of the permit token and ETH, which approved Permit2 for
    /// `allowance` (none when zero).
    async fn payer(&self, balance: u64, allowance: u64) -> PrivateKeySigner {
        let payer = self.devnet.fresh_relayer().await.unwrap();
        self.devnet
            .mint_permit_token(payer.address(), U256::from(balance))
            .await
            .unwrap();
        if allowance > 0 {
            self.devnet
                .approve_permit2(&payer, self.devnet.permit_token(), U256::from(allowance))
                .await
                .unwrap();
        }
        payer
    }

    async fn sign(&self, payer: &PrivateKeySigner, offer: &PaymentRequirements) -> PaymentPayload {
        sign_permit2_payment(
            payer,
            offer,
            None,
            unix_now(),
            &Permit2SignOptions::default(),
        )
        .await
        .unwrap()
    }

    /// The official client's payment for `required` (with the devnet RPC, so it can read its
    /// allowance and sign an EIP-2612 permit when offered one).
    async fn official_payment(
        &self,
        payer: &PrivateKeySigner,
        required: &PaymentRequired,
    ) -> PaymentPayload {
        let signed = node_script(
            "sign.mjs",
            &json!({
                "privateKey": payer.to_bytes().to_string(),
                "paymentRequired": required,
                "rpcUrl": self.devnet.rpc_url().as_str(),
            }),
        )
        .await
        .unwrap();
        decode_header(signed["paymentSignature"].as_str().unwrap()).unwrap()
    }

    async fn balance(&self, who: Address) -> U256 {
        self.devnet.permit_token_balance(who).await.unwrap()
    }

    async fn allowance(&self, who: Address) -> U256 {
        self.devnet
            .permit2_allowance(self.devnet.permit_token(), who)
            .await
            .unwrap()
    }

    /// Every transaction with a token `Transfer` from `from`.
    async fn transfers_from(&self, from: Address) -> Vec<(TxHash, U256)> {
        let filter = Filter::new()
            .address(self.devnet.permit_token())
            .event_signature(DevnetPermitToken::Transfer::SIGNATURE_HASH)
            .topic1(from.into_word())
            .from_block(0);
        self.devnet
            .provider()
            .get_logs(&filter)
            .await
            .unwrap()
            .iter()
            .map(|log| {
                let transfer = DevnetPermitToken::Transfer::decode_log(&log.inner).unwrap();
                (log.transaction_hash.unwrap(), transfer.value)
            })
            .collect()
    }

    fn permit_ref(&self, payload: &PaymentPayload) -> Permit2Ref {
        let permit = payload.permit2_evm().unwrap().permit2_authorization;
        Permit2Ref {
            token: self.devnet.permit_token(),
            owner: permit.from,
            to: permit.witness.to,
            nonce: permit.nonce.get(),
        }
    }
}

fn required(offer: &PaymentRequirements, extensions: Extensions) -> PaymentRequired {
    PaymentRequired {
        x402_version: X402Version2,
        error: Some("Payment required".into()),
        resource: ResourceInfo::new("https://gw.example/v1/contracts/ctr_permit2/execute"),
        accepts: vec![offer.clone()],
        extensions,
        unknown: UnknownFields::new(),
    }
}

fn tx(response: &SettleResponse) -> TxHash {
    response.transaction.parse().unwrap()
}

#[tokio::test]
async fn official_exact_permit2_payment_settles_once_and_the_chain_shows_what_moved() {
    if !node_tools_or_skip("official_exact_permit2_payment_settles_once") {
        return;
    }
    let env = Env::start().await;
    let payer = env.payer(3 * AMOUNT, 10 * AMOUNT).await;
    let offer = env.exact_offer();
    let payload = env
        .official_payment(&payer, &required(&offer, Extensions::new()))
        .await;
    // The official client's Permit2 shape, exactly as it sent it.
    let authorization = &payload.payload["permit2Authorization"];
    assert_eq!(
        authorization["spender"],
        EXACT_PERMIT2_PROXY_ADDRESS.to_checksum(None)
    );
    assert_eq!(authorization["witness"]["to"], env.pay_to.to_checksum(None));
    assert_eq!(authorization["permitted"]["amount"], AMOUNT.to_string());
    assert!(payload.extensions.get(EIP2612_GAS_SPONSORING).is_none());
    assert!(offer.mismatched_fields(&payload.accepted).is_empty());
    let key = payload.payment_key().unwrap();
    assert_eq!(key.payer, payer.address());
    permit2::precheck(&payload, &offer, unix_now()).unwrap();

    let request = VerifyRequest::new(payload.clone(), offer.clone());
    let verdict = env.facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let settled = env.facilitator.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(
        settled.amount, None,
        "exact answers like the official facilitator"
    );

    assert_eq!(env.balance(env.pay_to).await, U256::from(AMOUNT));
    assert_eq!(env.balance(payer.address()).await, U256::from(2 * AMOUNT));
    assert_eq!(env.allowance(payer.address()).await, U256::from(9 * AMOUNT));
    let nonce = payload
        .permit2_evm()
        .unwrap()
        .permit2_authorization
        .nonce
        .get();
    assert!(
        env.devnet
            .permit2_nonce_used(payer.address(), nonce)
            .await
            .unwrap()
    );

    // What moved, from the receipt the facilitator kept and from the chain alone.
    let receipt = env.facilitator.mined_receipt(tx(&settled)).unwrap();
    let transfer = settlement_in_receipt(&receipt, env.permit_ref(&payload)).unwrap();
    assert_eq!(
        (transfer.from, transfer.to, transfer.amount),
        (payer.address(), env.pay_to, U256::from(AMOUNT))
    );
    assert!(transfer.log_index.is_some());
    assert!(receipt.logs().iter().any(|log| {
        log.address() == EXACT_PERMIT2_PROXY_ADDRESS
            && X402ExactPermit2Proxy::Settled::decode_log(&log.inner).is_ok()
    }));
    assert_eq!(
        permit_on_chain(&env.devnet.provider(), env.permit_ref(&payload), None)
            .await
            .unwrap(),
        Permit2OnChain::Settled(transfer)
    );

    // Replays, here and by a facilitator that never saw the payment: refused, nothing moves.
    let replay = env.facilitator.settle(&request).await.unwrap();
    assert_eq!(replay.error_reason, Some(Reason::NonceAlreadyUsed));
    assert_eq!(replay.transaction, "");
    let fresh = LocalFacilitator::connect(FacilitatorConfig {
        chains: vec![ChainConfig::new(
            env.network,
            env.devnet.rpc_url().clone(),
            RelayerKey::new(env.devnet.fresh_relayer().await.unwrap()),
        )],
    })
    .await
    .unwrap();
    let elsewhere = fresh.settle(&request).await.unwrap();
    assert_eq!(elsewhere.error_reason, Some(Reason::NonceAlreadyUsed));
    assert!(
        elsewhere
            .error_message
            .as_deref()
            .unwrap()
            .contains(&settled.transaction),
        "{elsewhere:?}"
    );
    let again = env.facilitator.verify(&request).await.unwrap();
    assert_eq!(again.invalid_reason, Some(Reason::NonceAlreadyUsed));
    assert_eq!(env.transfers_from(payer.address()).await.len(), 1);
    assert_eq!(env.balance(env.pay_to).await, U256::from(AMOUNT));
}

#[tokio::test]
async fn concurrent_duplicate_settles_move_money_once() {
    let env = Env::start().await;
    let payer = env.payer(3 * AMOUNT, 10 * AMOUNT).await;
    let offer = env.exact_offer();
    let payload = env.sign(&payer, &offer).await;
    let request = VerifyRequest::new(payload.clone(), offer.clone());
    // One facilitator and a second one with another relayer key, eight settles at once.
    let second = Arc::new(
        LocalFacilitator::connect(FacilitatorConfig {
            chains: vec![ChainConfig::new(
                env.network,
                env.devnet.rpc_url().clone(),
                RelayerKey::new(env.devnet.fresh_relayer().await.unwrap()),
            )],
        })
        .await
        .unwrap(),
    );
    let first = Arc::new(env.facilitator);
    let outcomes = futures::future::join_all((0..8).map(|i| {
        let facilitator = if i % 2 == 0 {
            Arc::clone(&first)
        } else {
            Arc::clone(&second)
        };
        let request = request.clone();
        async move { facilitator.settle(&request).await.unwrap() }
    }))
    .await;
    let successes: Vec<_> = outcomes.iter().filter(|outcome| outcome.success).collect();
    assert_eq!(successes.len(), 1, "{outcomes:?}");
    for outcome in outcomes.iter().filter(|outcome| !outcome.success) {
        assert_eq!(
            outcome.error_reason,
            Some(Reason::NonceAlreadyUsed),
            "{outcome:?}"
        );
    }
    let devnet = &env.devnet;
    let transfers = {
        let filter = Filter::new()
            .address(devnet.permit_token())
            .event_signature(DevnetPermitToken::Transfer::SIGNATURE_HASH)
            .topic1(payer.address().into_word())
            .from_block(0);
        devnet.provider().get_logs(&filter).await.unwrap()
    };
    assert_eq!(transfers.len(), 1);
    assert_eq!(transfers[0].transaction_hash.unwrap(), tx(successes[0]));
    assert_eq!(
        devnet.permit_token_balance(env.pay_to).await.unwrap(),
        U256::from(AMOUNT)
    );
}

#[tokio::test]
async fn official_client_signs_an_eip2612_permit_when_offered_and_settlement_submits_it() {
    if !node_tools_or_skip("official_client_signs_an_eip2612_permit_when_offered") {
        return;
    }
    let env = Env::start().await;
    // No allowance to Permit2 at all: the offer's extension is the only way in.
    let payer = env.payer(3 * AMOUNT, 0).await;
    let offer = env.exact_offer();
    let mut extensions = Extensions::new();
    extensions.insert(
        EIP2612_GAS_SPONSORING.into(),
        eip2612_gas_sponsoring_offer(),
    );
    let payload = env
        .official_payment(&payer, &required(&offer, extensions))
        .await;
    let info = &payload.extensions[EIP2612_GAS_SPONSORING]["info"];
    assert_eq!(info["spender"], PERMIT2_ADDRESS.to_checksum(None));
    assert_eq!(info["amount"], AMOUNT.to_string());

    let request = VerifyRequest::new(payload.clone(), offer.clone());
    let verdict = env.facilitator.verify(&request).await.unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let settled = env.facilitator.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(env.balance(env.pay_to).await, U256::from(AMOUNT));
    assert_eq!(env.balance(payer.address()).await, U256::from(2 * AMOUNT));
    // The permit approved exactly the amount, and the transfer used it up.
    assert_eq!(env.allowance(payer.address()).await, U256::ZERO);
    let receipt = env.facilitator.mined_receipt(tx(&settled)).unwrap();
    assert!(
        receipt.logs().iter().any(|log| {
            X402ExactPermit2Proxy::SettledWithPermit::decode_log(&log.inner).is_ok()
        })
    );

    // Without the extension (and without an allowance) the same kind of payment is refused.
    let other = env.payer(3 * AMOUNT, 0).await;
    let bare = env.sign(&other, &offer).await;
    let refused = env
        .facilitator
        .verify(&VerifyRequest::new(bare, offer))
        .await
        .unwrap();
    assert_eq!(
        refused.invalid_reason,
        Some(Reason::Permit2AllowanceRequired)
    );
}

#[tokio::test]
async fn refusals_of_permit2_payments_have_stable_reasons_and_move_nothing() {
    let env = Env::start().await;
    let payer = env.payer(AMOUNT - 1, 10 * AMOUNT).await;
    let offer = env.exact_offer();
    let payload = env.sign(&payer, &offer).await;
    let verdict = env
        .facilitator
        .verify(&VerifyRequest::new(payload.clone(), offer.clone()))
        .await
        .unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::InsufficientBalance));

    // A permit signed by someone else for this payer.
    let rich = env.payer(3 * AMOUNT, 10 * AMOUNT).await;
    let mut forged = env.sign(&PrivateKeySigner::random(), &offer).await;
    forged.payload["permit2Authorization"]["from"] = rich.address().to_checksum(None).into();
    let forged_verdict = env
        .facilitator
        .verify(&VerifyRequest::new(forged.clone(), offer.clone()))
        .await
        .unwrap();
    assert_eq!(forged_verdict.invalid_reason, Some(Reason::Signature));
    let forged_settle = env
        .facilitator
        .settle(&VerifyRequest::new(forged, offer.clone()))
        .await
        .unwrap();
    assert_eq!(forged_settle.error_reason, Some(Reason::Signature));

    // An EIP-2612 permit of the wrong holder is refused before anything is simulated.
    let mut wrong_holder = env.sign(&rich, &offer).await;
    add_eip2612_permit(
        &payer,
        &mut wrong_holder,
        env.devnet.permit_token(),
        &Env::domain(),
        env.devnet.chain_id(),
        U256::ZERO,
        unix_now() + 300,
        U256::from(AMOUNT),
    )
    .await
    .unwrap();
    let wrong = env
        .facilitator
        .verify(&VerifyRequest::new(wrong_holder, offer))
        .await
        .unwrap();
    assert_eq!(wrong.invalid_reason, Some(Reason::Eip2612FromMismatch));
    assert!(env.transfers_from(rich.address()).await.is_empty());
    assert!(env.transfers_from(payer.address()).await.is_empty());
}

#[tokio::test]
async fn official_upto_payment_settles_exactly_the_verified_amount() {
    if !node_tools_or_skip("official_upto_payment_settles_exactly_the_verified_amount") {
        return;
    }
    let env = Env::start().await;
    let payer = env.payer(2 * MAX, 10 * MAX).await;
    let offer = env.upto_offer();
    let payload = env
        .official_payment(&payer, &required(&offer, Extensions::new()))
        .await;
    let witness = &payload.payload["permit2Authorization"]["witness"];
    assert_eq!(
        witness["facilitator"],
        env.devnet.relayer().address().to_checksum(None)
    );
    assert_eq!(
        payload.payload["permit2Authorization"]["spender"],
        UPTO_PERMIT2_PROXY_ADDRESS.to_checksum(None)
    );

    // Verification is against the maximum the payer signed.
    let verdict = env
        .facilitator
        .verify(&VerifyRequest::new(payload.clone(), offer.clone()))
        .await
        .unwrap();
    assert!(verdict.is_valid, "{verdict:?}");

    // Three items of five verified: 3/5 of the maximum, to the atomic unit.
    let verified = U256::from(3 * MAX / 5 + 7);
    let request = settle_request(payload.clone(), &offer, verified).unwrap();
    let settled = env.facilitator.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled_amount(&settled), Some(verified));
    assert_eq!(env.balance(env.pay_to).await, verified);
    assert_eq!(
        env.balance(payer.address()).await,
        U256::from(2 * MAX) - verified
    );
    assert_eq!(
        env.allowance(payer.address()).await,
        U256::from(10 * MAX) - verified
    );
    let receipt = env.facilitator.mined_receipt(tx(&settled)).unwrap();
    let transfer = settlement_in_receipt(&receipt, env.permit_ref(&payload)).unwrap();
    assert_eq!(transfer.amount, verified);

    // The authorization is spent: any second settle, of any amount, is refused.
    for amount in [U256::ZERO, U256::from(1u8), U256::from(MAX)] {
        let again = env
            .facilitator
            .settle(&settle_request(payload.clone(), &offer, amount).unwrap())
            .await
            .unwrap();
        assert_eq!(
            again.error_reason,
            Some(Reason::NonceAlreadyUsed),
            "{amount}"
        );
    }
    assert_eq!(env.transfers_from(payer.address()).await.len(), 1);
    assert_eq!(env.balance(env.pay_to).await, verified);
}

#[tokio::test]
async fn upto_zero_moves_nothing_and_spends_the_authorization() {
    let env = Env::start().await;
    let payer = env.payer(2 * MAX, 10 * MAX).await;
    let offer = env.upto_offer();
    let payload = env.sign(&payer, &offer).await;
    let zero = env
        .facilitator
        .settle(&settle_request(payload.clone(), &offer, U256::ZERO).unwrap())
        .await
        .unwrap();
    assert!(zero.success, "{zero:?}");
    assert_eq!(zero.transaction, "");
    assert_eq!(zero.amount.as_deref(), Some("0"));
    assert!(env.transfers_from(payer.address()).await.is_empty());
    assert_eq!(env.balance(payer.address()).await, U256::from(2 * MAX));
    // Nothing was sent, so the chain still shows the nonce unused…
    assert!(matches!(
        permit_on_chain(&env.devnet.provider(), env.permit_ref(&payload), None)
            .await
            .unwrap(),
        Permit2OnChain::Unused { .. }
    ));
    // …but the facilitator holds it spent: a later settle for more is refused.
    let later = env
        .facilitator
        .settle(&settle_request(payload, &offer, U256::from(MAX)).unwrap())
        .await
        .unwrap();
    assert_eq!(later.error_reason, Some(Reason::NonceAlreadyUsed));
    assert!(env.transfers_from(payer.address()).await.is_empty());
}

#[tokio::test]
async fn upto_refuses_more_than_the_maximum_and_another_facilitators_witness() {
    let env = Env::start().await;
    let payer = env.payer(2 * MAX, 10 * MAX).await;
    let offer = env.upto_offer();
    let payload = env.sign(&payer, &offer).await;
    // The offer-side helper refuses too much…
    assert_eq!(
        settle_request(payload.clone(), &offer, U256::from(MAX + 1)).unwrap_err(),
        Reason::UptoSettlementExceedsAmount
    );
    // …and so does the facilitator, when a hand-made request asks for it.
    let mut greedy = offer.clone();
    greedy.amount = U256::from(MAX + 1).into();
    let refused = env
        .facilitator
        .settle(&VerifyRequest::new(payload.clone(), greedy))
        .await
        .unwrap();
    assert_eq!(
        refused.error_reason,
        Some(Reason::UptoSettlementExceedsAmount)
    );

    // A payment whose witness names another facilitator is not ours to settle.
    let mut elsewhere = offer.clone();
    elsewhere.extra.insert(
        "facilitatorAddress".into(),
        PrivateKeySigner::random()
            .address()
            .to_checksum(None)
            .into(),
    );
    let other = env.sign(&payer, &elsewhere).await;
    let verdict = env
        .facilitator
        .verify(&VerifyRequest::new(other, elsewhere))
        .await
        .unwrap();
    assert_eq!(
        verdict.invalid_reason,
        Some(Reason::UptoFacilitatorMismatch)
    );
    assert!(env.transfers_from(payer.address()).await.is_empty());

    // The facilitator advertises the address `upto` payers must name.
    let supported = env.facilitator.supported().await.unwrap();
    let upto = supported
        .kinds
        .iter()
        .find(|kind| kind.scheme == "upto")
        .unwrap();
    assert_eq!(
        upto.extra.as_ref().unwrap()["facilitatorAddress"],
        env.devnet.relayer().address().to_checksum(None)
    );
}

#[tokio::test]
async fn concurrent_upto_settles_of_different_amounts_move_one_of_them_once() {
    let env = Env::start().await;
    let payer = env.payer(2 * MAX, 10 * MAX).await;
    let offer = env.upto_offer();
    let payload = env.sign(&payer, &offer).await;
    let facilitator = Arc::new(env.facilitator);
    let outcomes = futures::future::join_all((1..=6u64).map(|i| {
        let facilitator = Arc::clone(&facilitator);
        let request = settle_request(payload.clone(), &offer, U256::from(i * 100_000)).unwrap();
        async move { facilitator.settle(&request).await.unwrap() }
    }))
    .await;
    let successes: Vec<_> = outcomes.iter().filter(|outcome| outcome.success).collect();
    assert_eq!(successes.len(), 1, "{outcomes:?}");
    let moved = settled_amount(successes[0]).unwrap();
    let devnet = &env.devnet;
    assert_eq!(
        devnet.permit_token_balance(env.pay_to).await.unwrap(),
        moved
    );
    assert_eq!(
        devnet.permit_token_balance(payer.address()).await.unwrap(),
        U256::from(2 * MAX) - moved
    );
}

async fn official_facilitator(
    env: &Env,
    action: &str,
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
) -> Value {
    node_script(
        "facilitator.mjs",
        &json!({
            "rpcUrl": env.devnet.rpc_url().as_str(),
            "chainId": env.devnet.chain_id(),
            "relayerKey": env.devnet.relayer().to_bytes().to_string(),
            "paymentPayload": payload,
            "paymentRequirements": requirements,
            "action": action,
        }),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn the_official_facilitator_settles_our_permit2_and_upto_payments() {
    if !node_tools_or_skip("the_official_facilitator_settles_our_permit2_and_upto_payments") {
        return;
    }
    let env = Env::start().await;
    let payer = env.payer(4 * MAX, 10 * MAX).await;

    let offer = env.exact_offer();
    let exact = env.sign(&payer, &offer).await;
    let verdict = official_facilitator(&env, "verify", &exact, &offer).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");
    let settled = official_facilitator(&env, "settle", &exact, &offer).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(env.balance(env.pay_to).await, U256::from(AMOUNT));
    let replay = official_facilitator(&env, "settle", &exact, &offer).await;
    assert_eq!(replay["success"], false, "{replay}");
    // Ours agrees the permit is spent.
    let ours = env
        .facilitator
        .settle(&VerifyRequest::new(exact.clone(), offer))
        .await
        .unwrap();
    assert_eq!(ours.error_reason, Some(Reason::NonceAlreadyUsed));

    // `upto`: the official facilitator (whose relayer the witness names) settles the amount
    // the settle-time requirements carry.
    let upto_offer = env.upto_offer();
    let upto = env.sign(&payer, &upto_offer).await;
    let verdict = official_facilitator(&env, "verify", &upto, &upto_offer).await;
    assert_eq!(verdict["isValid"], true, "{verdict}");
    let amount = U256::from(1_858u64);
    let request = settle_request(upto.clone(), &upto_offer, amount).unwrap();
    let settled = official_facilitator(
        &env,
        "settle",
        &request.payment_payload,
        &request.payment_requirements,
    )
    .await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["amount"], "1858");
    assert_eq!(env.balance(env.pay_to).await, U256::from(AMOUNT) + amount);
    // The chain's record of it is what ours reads too.
    let on_chain = permit_on_chain(&env.devnet.provider(), env.permit_ref(&upto), None)
        .await
        .unwrap();
    let Permit2OnChain::Settled(transfer) = on_chain else {
        panic!("{on_chain:?}");
    };
    assert_eq!(transfer.amount, amount);
    assert_eq!(
        transfer.transaction,
        settled["transaction"]
            .as_str()
            .unwrap()
            .parse::<TxHash>()
            .unwrap()
    );
    let parsed = Permit2Payment::parse(&upto, &upto_offer).unwrap();
    assert_eq!(parsed.max_amount(), U256::from(MAX));
}

#[tokio::test]
async fn an_unconfirmed_upto_settlement_reports_pending_and_a_retry_reconciles_without_resending() {
    let env = Env::start().await;
    let mut chain = ChainConfig::new(
        env.network,
        env.devnet.rpc_url().clone(),
        RelayerKey::new(env.devnet.relayer()),
    );
    chain.receipt_timeout_secs = 1;
    let facilitator = LocalFacilitator::connect(FacilitatorConfig {
        chains: vec![chain],
    })
    .await
    .unwrap();
    let payer = env.payer(2 * MAX, 10 * MAX).await;
    let offer = env.upto_offer();
    let payload = env.sign(&payer, &offer).await;
    let request = settle_request(payload.clone(), &offer, U256::from(777_777u64)).unwrap();

    env.devnet.set_automine(false).await.unwrap();
    let pending = facilitator.settle(&request).await.unwrap();
    assert_eq!(
        pending.error_reason,
        Some(Reason::SettlementPending),
        "{pending:?}"
    );
    assert!(pending.transaction.starts_with("0x"));
    // A retry (even one asking another amount) waits on the same broadcast.
    let other_amount = settle_request(payload.clone(), &offer, U256::from(1u8)).unwrap();
    let still = facilitator.settle(&other_amount).await.unwrap();
    assert_eq!(still.error_reason, Some(Reason::SettlementPending));
    assert_eq!(still.transaction, pending.transaction, "no second send");

    env.devnet.mine_block().await.unwrap();
    env.devnet.set_automine(true).await.unwrap();
    // The retry that learns the outcome reports what the broadcast moved, not what it asked.
    let settled = facilitator.settle(&other_amount).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.transaction, pending.transaction);
    assert_eq!(settled_amount(&settled), Some(U256::from(777_777u64)));
    assert_eq!(env.balance(env.pay_to).await, U256::from(777_777u64));
    let replay = facilitator.settle(&request).await.unwrap();
    assert_eq!(replay.error_reason, Some(Reason::NonceAlreadyUsed));
    assert_eq!(env.transfers_from(payer.address()).await.len(), 1);
}

#[tokio::test]
async fn an_upto_payment_with_an_eip2612_permit_settles_part_of_it_without_a_prior_approval() {
    let env = Env::start().await;
    let payer = env.payer(2 * MAX, 0).await;
    let offer = env.upto_offer();
    let mut payload = env.sign(&payer, &offer).await;
    add_eip2612_permit(
        &payer,
        &mut payload,
        env.devnet.permit_token(),
        &Env::domain(),
        env.devnet.chain_id(),
        U256::ZERO,
        unix_now() + 300,
        U256::from(MAX),
    )
    .await
    .unwrap();
    let verdict = env
        .facilitator
        .verify(&VerifyRequest::new(payload.clone(), offer.clone()))
        .await
        .unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let part = U256::from(MAX * 2 / 5);
    let settled = env
        .facilitator
        .settle(&settle_request(payload, &offer, part).unwrap())
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(env.balance(env.pay_to).await, part);
    // The permit approved the maximum; the settlement used only the part.
    assert_eq!(env.allowance(payer.address()).await, U256::from(MAX) - part);
}

/// A settle whose payer's gas funding stays unmined (automine off, a 1 s receipt limit) is
/// retried by a facilitator started afresh, as after a crash: the retry finds the funding in the
/// node's pool and waits for it instead of funding the approval again. Once mined, the approval
/// and the payment go through, and the relayer funded the payer once.
#[tokio::test]
async fn a_retried_sponsored_approval_funds_the_payers_gas_once() {
    use hiregate_payments::permit2::approval::{
        ERC20_APPROVAL_GAS_SPONSORING, erc20_approval_gas_sponsoring_offer,
    };
    if !node_tools_or_skip("a_retried_sponsored_approval_funds_the_payers_gas_once") {
        return;
    }
    let env = Env::start().await;
    let token = env.devnet.deploy_plain_token().await.unwrap();
    let payer = PrivateKeySigner::random();
    env.devnet
        .mint_plain_token(token, payer.address(), U256::from(3 * AMOUNT))
        .await
        .unwrap();
    let offer = PaymentRequirements::exact_permit2_evm(
        env.network,
        U256::from(AMOUNT),
        token,
        env.pay_to,
        300,
        None,
    );
    let mut extensions = Extensions::new();
    extensions.insert(
        ERC20_APPROVAL_GAS_SPONSORING.into(),
        erc20_approval_gas_sponsoring_offer(),
    );
    let payload = env
        .official_payment(&payer, &required(&offer, extensions))
        .await;
    assert!(
        payload
            .extensions
            .contains_key(ERC20_APPROVAL_GAS_SPONSORING)
    );
    let request = VerifyRequest::new(payload, offer);
    let relayer = env.devnet.relayer().address();
    let impatient = || async {
        let mut chain = ChainConfig::new(
            env.network,
            env.devnet.rpc_url().clone(),
            RelayerKey::new(env.devnet.relayer()),
        );
        chain.receipt_timeout_secs = 1;
        LocalFacilitator::connect(FacilitatorConfig {
            chains: vec![chain],
        })
        .await
        .unwrap()
    };

    env.devnet.set_automine(false).await.unwrap();
    let first = impatient().await.settle(&request).await.unwrap();
    assert!(!first.success, "{first:?}");
    assert_eq!(
        env.devnet
            .pending_transactions(relayer)
            .await
            .unwrap()
            .len(),
        1
    );
    // A fresh facilitator (nothing remembered) retries twice while the funding waits.
    let restarted = impatient().await;
    for _ in 0..2 {
        let retry = restarted.settle(&request).await.unwrap();
        assert!(!retry.success, "{retry:?}");
        assert_eq!(
            retry.error_reason,
            Some(Reason::Erc20ApprovalBroadcastFailed)
        );
    }
    assert_eq!(
        env.devnet
            .pending_transactions(relayer)
            .await
            .unwrap()
            .len(),
        1,
        "the payer's gas was funded once"
    );
    assert_eq!(env.balance(env.pay_to).await, U256::ZERO);

    env.devnet.mine_block().await.unwrap();
    env.devnet.set_automine(true).await.unwrap();
    let settled = restarted.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    let devnet = &env.devnet;
    let paid = |who: Address| async move {
        use alloy::sol_types::SolCall as _;
        alloy::sol! { function balanceOf(address who) external view returns (uint256); }
        let returned = devnet
            .provider()
            .call(
                alloy::rpc::types::TransactionRequest::default()
                    .to(token)
                    .input(balanceOfCall { who }.abi_encode().into()),
            )
            .await
            .unwrap();
        balanceOfCall::abi_decode_returns(&returned).unwrap()
    };
    assert_eq!(paid(env.pay_to).await, U256::from(AMOUNT));
    assert_eq!(paid(payer.address()).await, U256::from(2 * AMOUNT));
    assert_eq!(
        env.devnet.transaction_count(payer.address()).await.unwrap(),
        1,
        "the payer's one transaction: its approval"
    );
}
