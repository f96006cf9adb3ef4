//! `auth-capture` on the newer wire (scheme v1.1: `paymentFlow`, `captureMode`,
//! `receiverAuthorizer`, bound salt) and partial finalization, on a real anvil with the devnet
//! escrow look-alikes at the canonical v1.0 addresses:
//! - the official `@x402/evm` 2.27 `AuthCaptureEvmScheme` pays an `escrow` offer with a receiver
//!   authorizer (bound salt, `saltNonce`) and our facilitator authorizes it;
//! - an `authorization` offer settles as a `charge` only with the server's completion, for the
//!   amount the server chose, signed by its receiver authorizer;
//! - partial capture with the rest voided, and partial refunds, move amounts exact to the atomic
//!   unit, and each escrow receipt says what moved.
//!
//! Node-dependent tests print `skipped: …` without the tools, and fail under `CI=true`.

#![cfg(feature = "devnet")]

use std::time::Duration;

use alloy::primitives::{Address, Bytes, U256};
use alloy::providers::{Provider, ProviderBuilder};
use alloy::rpc::types::{TransactionInput, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolCall;
use hiregate_payments::auth_capture::abi::IAuthCaptureEscrow;
use hiregate_payments::auth_capture::charge::complete_charge;
use hiregate_payments::auth_capture::escrow::{
    EscrowEventKind, EscrowOperator, EscrowTotals, PaymentState,
};
use hiregate_payments::auth_capture::sign::{AuthCaptureSignOptions, sign_auth_capture_payment};
use hiregate_payments::auth_capture::{
    AuthCaptureExtra, AuthCapturePayment, CaptureMode, EscrowAddresses, METHOD_EIP3009,
    PaymentInfo, bound_salt,
};
use hiregate_payments::devnet::{Devnet, node_script, node_tools_or_skip};
use hiregate_payments::wire::{Extensions, UnknownFields, X402Version2};
use hiregate_payments::{
    ChainConfig, Facilitator, FacilitatorConfig, LocalFacilitator, Network, PaymentFlow,
    PaymentPayload, PaymentRequirements, Reason, RelayerKey, TokenDomain, VerifyRequest,
};
use serde_json::json;

const AMOUNT: u64 = 1_250_000;

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

struct Env {
    devnet: Devnet,
    operator_key: PrivateKeySigner,
    receiver: Address,
    treasury: Address,
    requirements: PaymentRequirements,
    facilitator: LocalFacilitator,
    operator: EscrowOperator,
}

impl Env {
    async fn start(edit: impl FnOnce(&mut AuthCaptureExtra)) -> Self {
        let devnet = Devnet::start()
            .await
            .expect("devnet starts (scripts/install-tools.sh)");
        let network: Network = devnet.network().parse().unwrap();
        let operator_key = devnet.fresh_relayer().await.unwrap();
        let receiver = PrivateKeySigner::random().address();
        let treasury = PrivateKeySigner::random().address();
        let now = unix_now();
        let mut extra = AuthCaptureExtra {
            domain: TokenDomain {
                name: devnet.token_name().to_owned(),
                version: devnet.token_version().to_owned(),
            },
            capture_authorizer: operator_key.address(),
            capture_deadline: now + 3_600,
            refund_deadline: now + 86_400,
            min_fee_bps: 0,
            max_fee_bps: 1_000,
            fee_recipient: treasury,
            auto_capture: false,
            asset_transfer_method: METHOD_EIP3009.into(),
            auth_capture_escrow: Some(devnet.auth_capture_escrow()),
            payment_flow: Some(PaymentFlow::Escrow),
            capture_mode: Some(CaptureMode::Deferred),
            operator_type: None,
            receiver_authorizer: None,
            policy: None,
        };
        edit(&mut extra);
        let requirements = PaymentRequirements::auth_capture_evm(
            network,
            U256::from(AMOUNT),
            devnet.token(),
            receiver,
            300,
            &extra,
        );
        let chain = ChainConfig::new(
            network,
            devnet.rpc_url().clone(),
            RelayerKey::new(operator_key.clone()),
        );
        let facilitator = LocalFacilitator::connect(FacilitatorConfig {
            chains: vec![chain.clone()],
        })
        .await
        .unwrap();
        let provider = ProviderBuilder::new()
            .wallet(operator_key.clone())
            .connect_http(devnet.rpc_url().clone())
            .erased();
        let operator = EscrowOperator::new(
            provider,
            devnet.chain_id(),
            chain.escrow_addresses(),
            operator_key.address(),
        )
        .with_receipt_timeout(Duration::from_secs(30), Duration::from_millis(20));
        Self {
            devnet,
            operator_key,
            receiver,
            treasury,
            requirements,
            facilitator,
            operator,
        }
    }

    async fn official_payment(&self, payer: &PrivateKeySigner) -> PaymentPayload {
        let signed = node_script(
            "auth-capture-sign.mjs",
            &json!({
                "privateKey": payer.to_bytes().to_string(),
                "requirements": self.requirements,
            }),
        )
        .await
        .unwrap();
        PaymentPayload {
            x402_version: X402Version2,
            resource: None,
            accepted: self.requirements.clone(),
            payload: signed["paymentPayload"]["payload"].clone(),
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }

    async fn own_payment(&self, payer: &PrivateKeySigner) -> PaymentPayload {
        sign_auth_capture_payment(
            payer,
            &self.requirements,
            None,
            unix_now(),
            &AuthCaptureSignOptions::default(),
        )
        .await
        .unwrap()
    }

    fn request(&self, payload: PaymentPayload) -> VerifyRequest {
        VerifyRequest::new(payload, self.requirements.clone())
    }

    fn payment(&self, payload: &PaymentPayload) -> AuthCapturePayment {
        AuthCapturePayment::parse(payload, &self.requirements, EscrowAddresses::default()).unwrap()
    }

    fn info(&self, payload: &PaymentPayload) -> PaymentInfo {
        self.payment(payload).info
    }

    async fn balance(&self, who: Address) -> U256 {
        self.devnet.balance_of(who).await.unwrap()
    }

    async fn token_store(&self) -> Address {
        let call = IAuthCaptureEscrow::getTokenStoreCall {
            operator: self.operator_key.address(),
        };
        let request = TransactionRequest::default()
            .to(self.devnet.auth_capture_escrow())
            .input(TransactionInput::new(call.abi_encode().into()));
        let bytes = self.devnet.provider().call(request).await.unwrap();
        IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(&bytes).unwrap()
    }
}

#[tokio::test]
async fn the_official_client_pays_a_v1_1_escrow_offer_with_a_bound_salt() {
    if !node_tools_or_skip("the_official_client_pays_a_v1_1_escrow_offer_with_a_bound_salt") {
        return;
    }
    let authorizer = PrivateKeySigner::random().address();
    let env = Env::start(|extra| extra.receiver_authorizer = Some(authorizer)).await;
    let wire = serde_json::to_value(&env.requirements).unwrap();
    assert_eq!(wire["extra"]["paymentFlow"], "escrow");
    assert_eq!(wire["extra"]["captureMode"], "deferred");
    assert!(
        wire["extra"].get("autoCapture").is_none(),
        "v1.1 has no autoCapture"
    );

    let payer = env
        .devnet
        .funded_account(U256::from(2 * AMOUNT))
        .await
        .unwrap();
    let payload = env.official_payment(&payer).await;
    // The client bound the salt to the receiver authorizer and sent its nonce beside it.
    let salt_nonce: alloy::primitives::B256 = payload.payload["saltNonce"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let salt: alloy::primitives::B256 = payload.payload["salt"].as_str().unwrap().parse().unwrap();
    assert_eq!(bound_salt(authorizer, Address::ZERO, salt_nonce), salt);

    let verdict = env
        .facilitator
        .verify(&env.request(payload.clone()))
        .await
        .unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    let settled = env
        .facilitator
        .settle(&env.request(payload.clone()))
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    let store = env.token_store().await;
    assert_eq!(env.balance(store).await, U256::from(AMOUNT));
    assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));

    // A payload whose saltNonce was swapped no longer opens the commitment.
    let mut swapped = payload.clone();
    swapped.payload["saltNonce"] = json!(format!("0x{}", "42".repeat(32)));
    let refused = env.facilitator.verify(&env.request(swapped)).await.unwrap();
    assert_eq!(refused.invalid_reason, Some(Reason::SaltBindingMismatch));

    // Capture 60 % (the verified share) and release the rest: exact to the atomic unit.
    let info = env.info(&payload);
    let captured = U256::from(AMOUNT * 3 / 5);
    let finalized = env
        .operator
        .capture_and_void(&info, captured, 0, env.treasury)
        .await
        .unwrap();
    assert_eq!(env.balance(env.receiver).await, captured);
    assert_eq!(
        env.balance(payer.address()).await,
        U256::from(2 * AMOUNT) - captured
    );
    assert_eq!(env.balance(store).await, U256::ZERO);
    let void = finalized.void.unwrap();
    assert!(matches!(
        void.events[..],
        [hiregate_payments::EscrowEvent {
            kind: EscrowEventKind::Voided { amount },
            ..
        }] if amount == U256::from(AMOUNT) - captured
    ));
}

#[tokio::test]
async fn partial_capture_then_partial_refunds_are_exact_to_the_atomic_unit() {
    let env = Env::start(|_| {}).await;
    let payer = env.devnet.funded_account(U256::from(AMOUNT)).await.unwrap();
    let payload = env.own_payment(&payer).await;
    let settled = env
        .facilitator
        .settle(&env.request(payload.clone()))
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    let info = env.info(&payload);
    // A second payment, authorized now: the facilitator and the operator send from one key,
    // so the facilitator's sends come before the operator's provider caches its nonce.
    let other = env.devnet.funded_account(U256::from(AMOUNT)).await.unwrap();
    let other_payload = env.own_payment(&other).await;
    assert!(
        env.facilitator
            .settle(&env.request(other_payload.clone()))
            .await
            .unwrap()
            .success
    );

    // 750 001 of 1 250 000 captured at 2.5 %: the fee rounds down as the escrow does.
    let captured = U256::from(750_001u64);
    let fee = U256::from(750_001u64 * 250 / 10_000);
    assert_eq!(fee, U256::from(18_750u64));
    let finalized = env
        .operator
        .capture_and_void(&info, captured, 250, env.treasury)
        .await
        .unwrap();
    let capture = finalized.capture.unwrap();
    assert_eq!(env.balance(env.receiver).await, captured - fee);
    assert_eq!(env.balance(env.treasury).await, fee);
    assert_eq!(env.balance(payer.address()).await, U256::from(499_999u64));
    // The capture's receipt says what moved where.
    let moved: Vec<_> = capture
        .transfers
        .iter()
        .filter(|transfer| transfer.token == env.devnet.token())
        .map(|transfer| (transfer.to, transfer.value))
        .collect();
    assert!(moved.contains(&(env.receiver, captured - fee)), "{moved:?}");
    assert!(moved.contains(&(env.treasury, fee)), "{moved:?}");
    assert!(matches!(
        capture.events[..],
        [hiregate_payments::EscrowEvent {
            kind: EscrowEventKind::Captured { amount, fee_bps: 250, .. },
            ..
        }] if amount == captured
    ));
    assert_eq!(
        env.operator.payment_state(&info).await.unwrap(),
        PaymentState {
            has_collected_payment: true,
            capturable_amount: U256::ZERO,
            refundable_amount: captured,
        }
    );

    // Refunds in two parts, funded from the operator's wallet; never more than captured.
    let collector = env.operator.addresses().operator_refund_collector;
    env.devnet
        .mint(env.operator_key.address(), captured)
        .await
        .unwrap();
    env.operator
        .ensure_refund_allowance(env.devnet.token(), captured)
        .await
        .unwrap();
    let first = U256::from(123_457u64);
    env.operator
        .refund(&info, first, collector, Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        env.balance(payer.address()).await,
        U256::from(499_999u64) + first
    );
    let rest = captured - first;
    let over = env
        .operator
        .refund(&info, rest + U256::from(1u8), collector, Bytes::new())
        .await
        .unwrap_err();
    assert_eq!(over.reason(), Some(&Reason::RefundExceedsCapture));
    env.operator
        .refund(&info, rest, collector, Bytes::new())
        .await
        .unwrap();
    assert_eq!(
        env.balance(payer.address()).await,
        U256::from(499_999u64) + captured
    );
    assert_eq!(
        env.balance(env.receiver).await,
        captured - fee,
        "worker kept"
    );
    let events = env
        .operator
        .events(env.operator.payment_hash(&info), 0)
        .await
        .unwrap();
    let totals = EscrowTotals::of(&events);
    assert_eq!(totals.authorized, U256::from(AMOUNT));
    assert_eq!(totals.captured, captured);
    assert_eq!(totals.fees, fee);
    assert_eq!(totals.voided, U256::from(499_999u64));
    assert_eq!(totals.refunded, captured);
    assert_eq!(totals.held(), U256::ZERO);

    // Capturing nothing just releases the hold.
    let released = env
        .operator
        .capture_and_void(&env.info(&other_payload), U256::ZERO, 0, env.treasury)
        .await
        .unwrap();
    assert!(released.capture.is_none());
    assert!(released.void.is_some());
    assert_eq!(env.balance(other.address()).await, U256::from(AMOUNT));
}

#[tokio::test]
async fn a_v1_1_charge_settles_only_as_the_server_completed_it() {
    if !node_tools_or_skip("a_v1_1_charge_settles_only_as_the_server_completed_it") {
        return;
    }
    let authorizer = PrivateKeySigner::random();
    let authorizer_address = authorizer.address();
    let env = Env::start(|extra| {
        extra.payment_flow = Some(PaymentFlow::Authorization);
        extra.capture_mode = None;
        extra.receiver_authorizer = Some(authorizer_address);
        extra.min_fee_bps = 100;
        extra.max_fee_bps = 100;
    })
    .await;
    let payer = env.devnet.funded_account(U256::from(AMOUNT)).await.unwrap();
    let raw = env.official_payment(&payer).await;
    // The raw client payload verifies (provisionally, as a full charge)…
    let verdict = env
        .facilitator
        .verify(&env.request(raw.clone()))
        .await
        .unwrap();
    assert!(verdict.is_valid, "{verdict:?}");
    // …but does not settle: the server names the amount.
    let refused = env
        .facilitator
        .settle(&env.request(raw.clone()))
        .await
        .unwrap();
    assert_eq!(refused.error_reason, Some(Reason::InvalidPayload));
    assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));

    // Completed by someone who is not the receiver authorizer: refused.
    let payment = env.payment(&raw);
    let charged = U256::from(AMOUNT * 2 / 5 + 3);
    let mut forged = raw.clone();
    complete_charge(
        &mut forged,
        &payment,
        &PrivateKeySigner::random(),
        charged,
        100,
        env.treasury,
    )
    .await
    .unwrap();
    let forged_verdict = env.facilitator.verify(&env.request(forged)).await.unwrap();
    assert_eq!(
        forged_verdict.invalid_reason,
        Some(Reason::AuthorizerSignature)
    );

    let mut completed = raw.clone();
    complete_charge(
        &mut completed,
        &payment,
        &authorizer,
        charged,
        100,
        env.treasury,
    )
    .await
    .unwrap();
    let settled = env
        .facilitator
        .settle(&env.request(completed.clone()))
        .await
        .unwrap();
    assert!(settled.success, "{settled:?}");
    let fee = charged * U256::from(100u8) / U256::from(10_000u32);
    assert_eq!(env.balance(env.receiver).await, charged - fee);
    assert_eq!(env.balance(env.treasury).await, fee);
    // Charging less than the maximum leaves the rest with the payer.
    assert_eq!(
        env.balance(payer.address()).await,
        U256::from(AMOUNT) - charged
    );
    let replay = env
        .facilitator
        .settle(&env.request(completed))
        .await
        .unwrap();
    assert_eq!(replay.error_reason, Some(Reason::PaymentAlreadyCollected));
    let events = env
        .operator
        .events(env.operator.payment_hash(&payment.info), 0)
        .await
        .unwrap();
    assert!(matches!(
        events[..],
        [hiregate_payments::EscrowEvent {
            kind: EscrowEventKind::Charged { amount, fee_bps: 100, .. },
            ..
        }] if amount == charged
    ));
}
