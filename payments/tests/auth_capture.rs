//! `auth-capture` end to end:
//! - offline: a payload the OFFICIAL `@x402/evm` `AuthCaptureEvmScheme` client built (checked-in
//!   fixture, produced by the full `x402Client` flow) passes our reconstruction and every
//!   offline step, and its nonce is our payer-agnostic hash;
//! - on the devnet (feature `devnet`; the escrow look-alikes sit at the canonical v1.0
//!   addresses): our facilitator verifies and settles the official client's fresh payload and
//!   ours, balances move payer → operator token store, a replay is refused with the original
//!   transaction named, and the operator's capture / void / refund move the money as the
//!   escrow's events and `paymentState` then say. At a real block time (1 s) the operator's
//!   concurrent captures are in flight together: several mined per block, each once.

use alloy::primitives::{Address, U256};
use hiregate_payments::auth_capture::{
    AUTH_CAPTURE_ESCROW_V1_0, AuthCapturePayment, ERC3009_TOKEN_COLLECTOR_V1_0, EscrowAddresses,
    precheck,
};
use hiregate_payments::{PaymentPayload, PaymentRequired};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/auth_capture_official.json")).unwrap()
}

#[test]
fn official_client_payload_passes_our_reconstruction_and_nonce() {
    let fixture = fixture();
    let required: PaymentRequired =
        serde_json::from_value(fixture["paymentRequired"].clone()).unwrap();
    let requirements = required.accepts[0].clone();
    let payload: PaymentPayload =
        serde_json::from_value(fixture["paymentPayload"].clone()).unwrap();
    assert!(requirements.mismatched_fields(&payload.accepted).is_empty());

    let valid_before: u64 = payload.payload["authorization"]["validBefore"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let signed_at = valid_before - requirements.max_timeout_seconds;
    let payment = precheck(
        &payload,
        &requirements,
        EscrowAddresses::default(),
        signed_at,
    )
    .expect("the official client's payload passes steps 1-8, 11, 12");
    assert!(payment.signature_recovers(), "step 10 for an EOA");

    // The official client's nonce is our payer-agnostic hash of the PaymentInfo we rebuilt.
    let authorization = &payment.payload.authorization;
    assert_eq!(
        authorization.nonce,
        payment
            .info
            .hash_payer_agnostic(31337, AUTH_CAPTURE_ESCROW_V1_0)
    );
    assert_eq!(authorization.to, ERC3009_TOKEN_COLLECTOR_V1_0);
    assert_eq!(
        payment.info.payer,
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
            .parse::<Address>()
            .unwrap()
    );
    assert_eq!(
        U256::from(payment.info.preApprovalExpiry),
        U256::from(valid_before)
    );
    assert_eq!(
        payment.info.salt,
        U256::from_be_bytes(payment.payload.salt.0)
    );

    // The wrong escrow deployment (the client's v1.1 default) gives a different nonce.
    let mut v1_1 = requirements.clone();
    v1_1.extra.remove("authCaptureEscrow");
    let v1_1_addresses = EscrowAddresses {
        escrow: "0xf96815976523E00e65Be8f34cA5e64b4f41EB19c"
            .parse()
            .unwrap(),
        ..EscrowAddresses::default()
    };
    let parsed = AuthCapturePayment::parse(&payload, &v1_1, v1_1_addresses).unwrap();
    assert_eq!(
        parsed.check_amount_and_nonce(),
        Err(hiregate_payments::Reason::NonceMismatch)
    );
}

#[cfg(feature = "devnet")]
mod onchain {
    use std::time::Duration;

    use alloy::primitives::{Address, Bytes, TxHash, U256};
    use alloy::providers::{Provider, ProviderBuilder};
    use alloy::rpc::types::{TransactionInput, TransactionRequest};
    use alloy::signers::local::PrivateKeySigner;
    use alloy::sol_types::SolCall;
    use hiregate_payments::auth_capture::abi::IAuthCaptureEscrow;
    use hiregate_payments::auth_capture::escrow::{
        EscrowError, EscrowEventKind, EscrowOperator, EscrowTotals, PaymentState,
    };
    use hiregate_payments::auth_capture::sign::{
        AuthCaptureSignOptions, sign_auth_capture_payment,
    };
    use hiregate_payments::auth_capture::{
        AUTH_CAPTURE_SCHEME, AuthCaptureExtra, AuthCapturePayment, EscrowAddresses, METHOD_EIP3009,
        PaymentInfo,
    };
    use hiregate_payments::devnet::{Devnet, DevnetOptions, node_script, node_tools_or_skip};
    use hiregate_payments::wire::{Extensions, UnknownFields, X402Version2};
    use hiregate_payments::{
        ChainConfig, Facilitator, FacilitatorConfig, LocalFacilitator, Network, PaymentPayload,
        PaymentRequirements, Reason, RelayerKey, TokenDomain, VerifyRequest,
    };
    use serde_json::{Value, json};

    const AMOUNT: u64 = 1_250_000;

    fn unix_now() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    struct Escrowed {
        devnet: Devnet,
        /// The captureAuthorizer: the facilitator's relayer and the operator of capture/void.
        operator_key: PrivateKeySigner,
        receiver: Address,
        treasury: Address,
        requirements: PaymentRequirements,
        facilitator: LocalFacilitator,
        chain: ChainConfig,
        operator: EscrowOperator,
    }

    impl Escrowed {
        async fn start() -> Self {
            Self::start_with(|_| {}).await
        }

        async fn start_with(edit: impl FnOnce(&mut AuthCaptureExtra)) -> Self {
            Self::start_on(DevnetOptions::default(), edit).await
        }

        async fn start_on(
            options: DevnetOptions,
            edit: impl FnOnce(&mut AuthCaptureExtra),
        ) -> Self {
            let devnet = Devnet::start_with(options)
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
                payment_flow: None,
                capture_mode: None,
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
                chain,
                operator,
            }
        }

        /// Another facilitator on the same chain and relayer, with `edit` applied.
        async fn facilitator_with(&self, edit: impl FnOnce(&mut ChainConfig)) -> LocalFacilitator {
            let mut chain = self.chain.clone();
            edit(&mut chain);
            LocalFacilitator::connect(FacilitatorConfig {
                chains: vec![chain],
            })
            .await
            .unwrap()
        }

        async fn rpc(&self, method: &'static str, params: Value) {
            self.devnet
                .provider()
                .raw_request::<_, Value>(method.into(), params)
                .await
                .unwrap();
        }

        async fn payer(&self, balance: u64) -> PrivateKeySigner {
            self.devnet
                .funded_account(U256::from(balance))
                .await
                .unwrap()
        }

        async fn sign(&self, payer: &PrivateKeySigner) -> PaymentPayload {
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

        fn info(&self, payload: &PaymentPayload) -> PaymentInfo {
            AuthCapturePayment::parse(payload, &self.requirements, EscrowAddresses::default())
                .unwrap()
                .info
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

    fn tx(hash: &str) -> TxHash {
        hash.parse().unwrap()
    }

    #[tokio::test]
    async fn official_client_payment_is_authorized_then_captured_with_a_fee() {
        if !node_tools_or_skip("official_client_payment_is_authorized_then_captured_with_a_fee") {
            return;
        }
        let env = Escrowed::start().await;
        let payer = env.payer(3 * AMOUNT).await;
        let signed = node_script(
            "auth-capture-sign.mjs",
            &json!({
                "privateKey": format!("0x{}", hex::encode(payer.to_bytes())),
                "requirements": env.requirements,
            }),
        )
        .await
        .unwrap();
        let payload = PaymentPayload {
            x402_version: X402Version2,
            resource: None,
            accepted: env.requirements.clone(),
            payload: signed["paymentPayload"]["payload"].clone(),
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        };
        let request = env.request(payload.clone());

        let verdict = env.facilitator.verify(&request).await.unwrap();
        assert!(verdict.is_valid, "{verdict:?}");
        let settled = env.facilitator.settle(&request).await.unwrap();
        assert!(settled.success, "{settled:?}");
        let store = env.token_store().await;
        assert_eq!(env.balance(payer.address()).await, U256::from(2 * AMOUNT));
        assert_eq!(env.balance(store).await, U256::from(AMOUNT));

        // Replay: refused with a stable reason, the original transaction named, nothing moved.
        let replay = env.facilitator.settle(&request).await.unwrap();
        assert!(!replay.success);
        assert_eq!(replay.error_reason, Some(Reason::PaymentAlreadyCollected));
        assert_eq!(replay.transaction, "");
        assert!(
            replay
                .error_message
                .as_deref()
                .unwrap()
                .contains(&settled.transaction),
            "{replay:?}"
        );
        let again = env.facilitator.verify(&request).await.unwrap();
        assert_eq!(again.invalid_reason, Some(Reason::PaymentAlreadyCollected));
        assert_eq!(env.balance(payer.address()).await, U256::from(2 * AMOUNT));

        // Capture at 2.5 % to the treasury.
        let info = env.info(&payload);
        let receipt = env
            .operator
            .capture(&info, U256::from(AMOUNT), 250, env.treasury)
            .await
            .unwrap();
        let fee = AMOUNT * 250 / 10_000;
        assert_eq!(env.balance(env.treasury).await, U256::from(fee));
        assert_eq!(env.balance(env.receiver).await, U256::from(AMOUNT - fee));
        assert_eq!(env.balance(store).await, U256::ZERO);
        assert_eq!(
            env.operator.payment_state(&info).await.unwrap(),
            PaymentState {
                has_collected_payment: true,
                capturable_amount: U256::ZERO,
                refundable_amount: U256::from(AMOUNT),
            }
        );
        let events = env
            .operator
            .events(env.operator.payment_hash(&info), 0)
            .await
            .unwrap();
        let kinds: Vec<_> = events.iter().map(|event| event.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                EscrowEventKind::Authorized {
                    amount: U256::from(AMOUNT),
                    token_collector: env.operator.addresses().erc3009_collector,
                },
                EscrowEventKind::Captured {
                    amount: U256::from(AMOUNT),
                    fee_bps: 250,
                    fee_receiver: env.treasury,
                },
            ]
        );
        assert_eq!(events[0].tx_hash, Some(tx(&settled.transaction)));
        let totals = EscrowTotals::of(&events);
        assert_eq!(totals.captured, U256::from(AMOUNT));
        assert_eq!(totals.fees, U256::from(fee));
        assert_eq!(totals.held(), U256::ZERO);
        assert_eq!(events[1].tx_hash, Some(receipt.tx_hash));

        // Nothing left to capture or void.
        let second = env
            .operator
            .capture(&info, U256::from(1u64), 250, env.treasury)
            .await
            .unwrap_err();
        assert_eq!(second.reason(), Some(&Reason::InsufficientAuthorization));
        let void = env.operator.void(&info).await.unwrap_err();
        assert_eq!(void.reason(), Some(&Reason::ZeroAuthorization));
    }

    #[tokio::test]
    async fn void_returns_the_payer_exactly_and_closes_the_payment() {
        let env = Escrowed::start().await;
        let payer = env.payer(AMOUNT).await;
        let payload = env.sign(&payer).await;
        let request = env.request(payload.clone());
        let settled = env.facilitator.settle(&request).await.unwrap();
        assert!(settled.success, "{settled:?}");
        assert_eq!(env.balance(payer.address()).await, U256::ZERO);

        let info = env.info(&payload);
        env.operator.void(&info).await.unwrap();
        assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));
        assert_eq!(env.balance(env.token_store().await).await, U256::ZERO);
        let events = env
            .operator
            .events(env.operator.payment_hash(&info), 0)
            .await
            .unwrap();
        assert!(matches!(
            events.last().unwrap().kind,
            EscrowEventKind::Voided { amount } if amount == U256::from(AMOUNT)
        ));
        let totals = EscrowTotals::of(&events);
        assert_eq!(
            (totals.authorized, totals.voided),
            (U256::from(AMOUNT), U256::from(AMOUNT))
        );
        assert_eq!(totals.held(), U256::ZERO);
        // A voided payment reads like a captured-and-refunded one: only events tell.
        assert_eq!(
            env.operator.payment_state(&info).await.unwrap(),
            PaymentState {
                has_collected_payment: true,
                capturable_amount: U256::ZERO,
                refundable_amount: U256::ZERO,
            }
        );
        let capture = env
            .operator
            .capture(&info, U256::from(AMOUNT), 0, env.treasury)
            .await
            .unwrap_err();
        assert_eq!(capture.reason(), Some(&Reason::InsufficientAuthorization));
        // Each PaymentInfo can be authorized once, even after a void.
        let replay = env.facilitator.settle(&request).await.unwrap();
        assert_eq!(replay.error_reason, Some(Reason::PaymentAlreadyCollected));
        assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));
    }

    #[tokio::test]
    async fn capture_fee_rules_and_refund_from_the_operator_wallet() {
        let env = Escrowed::start().await;
        let payer = env.payer(AMOUNT).await;
        let payload = env.sign(&payer).await;
        let settled = env
            .facilitator
            .settle(&env.request(payload.clone()))
            .await
            .unwrap();
        assert!(settled.success, "{settled:?}");
        let info = env.info(&payload);

        let over = env
            .operator
            .capture(&info, U256::from(AMOUNT), 1_001, env.treasury)
            .await
            .unwrap_err();
        assert_eq!(over.reason(), Some(&Reason::FeeBpsOutOfRange));
        let elsewhere = env
            .operator
            .capture(&info, U256::from(AMOUNT), 100, env.receiver)
            .await
            .unwrap_err();
        assert_eq!(elsewhere.reason(), Some(&Reason::InvalidFeeReceiver));
        assert!(matches!(over, EscrowError::Refused(_)), "nothing was sent");

        env.operator
            .capture(&info, U256::from(AMOUNT), 0, env.treasury)
            .await
            .unwrap();
        assert_eq!(env.balance(env.receiver).await, U256::from(AMOUNT));

        // The refund is funded by the operator's wallet through the refund collector.
        let collector = env.operator.addresses().operator_refund_collector;
        let half = U256::from(AMOUNT / 2);
        let unfunded = env
            .operator
            .refund(&info, half, collector, Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(
            unfunded.reason(),
            Some(&Reason::RefundNotFunded),
            "{unfunded:?}"
        );
        env.devnet
            .mint(env.operator_key.address(), half)
            .await
            .unwrap();
        env.operator
            .ensure_refund_allowance(env.devnet.token(), half)
            .await
            .unwrap()
            .expect("an approval was needed");
        assert!(
            env.operator
                .ensure_refund_allowance(env.devnet.token(), half)
                .await
                .unwrap()
                .is_none()
        );
        env.operator
            .refund(&info, half, collector, Bytes::new())
            .await
            .unwrap();
        assert_eq!(env.balance(payer.address()).await, half);
        assert_eq!(
            env.balance(env.receiver).await,
            U256::from(AMOUNT),
            "worker kept"
        );
        assert_eq!(env.balance(env.operator_key.address()).await, U256::ZERO);
        let too_much = env
            .operator
            .refund(&info, U256::from(AMOUNT), collector, Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(too_much.reason(), Some(&Reason::RefundExceedsCapture));
        let events = env
            .operator
            .events(env.operator.payment_hash(&info), 0)
            .await
            .unwrap();
        assert!(matches!(
            events.last().unwrap().kind,
            EscrowEventKind::Refunded { amount, token_collector } if amount == half && token_collector == collector
        ));
    }

    /// A refund the escrow would refuse is found out before anything is sent, the collector's
    /// approval included: by the escrow's own reason (the refund deadline by the chain's clock,
    /// an operator wallet that cannot fund it), with the operator's transaction count unmoved.
    /// The approval and the refund are simulated in one block (`eth_simulateV1`) while the
    /// allowance is short; a node without that method gets the refund simulated alone.
    #[tokio::test]
    async fn a_refund_is_simulated_whole_before_anything_is_sent() {
        use hiregate_payments::devnet::rpc_counter::RpcCounter;
        let env = Escrowed::start().await;
        let payer = env.payer(AMOUNT).await;
        let payload = env.sign(&payer).await;
        let settled = env
            .facilitator
            .settle(&env.request(payload.clone()))
            .await
            .unwrap();
        assert!(settled.success, "{settled:?}");
        let info = env.info(&payload);
        env.operator
            .capture(&info, U256::from(AMOUNT), 0, env.treasury)
            .await
            .unwrap();
        // The same operator through a node that has no `eth_simulateV1` (the proxy answers
        // "method not found" for it: a fault anvil cannot produce).
        let without_simulate = RpcCounter::refusing(env.devnet.rpc_url().clone(), "eth_simulateV1")
            .await
            .unwrap();
        let staged = EscrowOperator::new(
            ProviderBuilder::new()
                .wallet(env.operator_key.clone())
                .connect_http(without_simulate.url())
                .erased(),
            env.devnet.chain_id(),
            env.chain.escrow_addresses(),
            env.operator_key.address(),
        );
        let operator = env.operator_key.address();
        let sent = env.devnet.transaction_count(operator).await.unwrap();
        let amount = U256::from(AMOUNT);
        for simulating in [&env.operator, &staged] {
            // No allowance and no tokens: the wallet cannot fund it.
            let unfunded = simulating.simulate_refund(&info, amount).await.unwrap();
            assert_eq!(unfunded.map_err(|r| r.reason), Err(Reason::RefundNotFunded));
            let too_much = simulating
                .simulate_refund(&info, amount + U256::from(1))
                .await
                .unwrap();
            assert_eq!(
                too_much.map_err(|r| r.reason),
                Err(Reason::RefundExceedsCapture)
            );
        }
        env.devnet.mint(operator, amount).await.unwrap();
        for simulating in [&env.operator, &staged] {
            // Funded, not yet approved: the approval then the refund would pass.
            assert_eq!(
                simulating.simulate_refund(&info, amount).await.unwrap(),
                Ok(())
            );
        }
        assert_eq!(without_simulate.calls_of("eth_simulateV1"), 0);

        // Past the refund deadline by the chain's clock (a day and more), whatever ours says.
        env.rpc("evm_increaseTime", json!([86_500])).await;
        env.rpc("evm_mine", json!([])).await;
        for simulating in [&env.operator, &staged] {
            let late = simulating.simulate_refund(&info, amount).await.unwrap();
            assert_eq!(
                late.map_err(|r| r.reason),
                Err(Reason::RefundDeadlineExpired)
            );
        }
        assert_eq!(
            env.devnet.transaction_count(operator).await.unwrap(),
            sent,
            "nothing was sent"
        );
        // With the allowance in place a plain simulation of the refund says the same.
        env.operator
            .ensure_refund_allowance(env.devnet.token(), amount)
            .await
            .unwrap()
            .expect("approved");
        let late = env.operator.simulate_refund(&info, amount).await.unwrap();
        assert_eq!(
            late.map_err(|r| r.reason),
            Err(Reason::RefundDeadlineExpired)
        );
        let sent = env
            .operator
            .refund(
                &info,
                amount,
                env.operator.addresses().operator_refund_collector,
                Bytes::new(),
            )
            .await
            .unwrap_err();
        assert_eq!(sent.reason(), Some(&Reason::RefundDeadlineExpired));
        assert_eq!(env.balance(operator).await, amount, "nothing refunded");
    }

    /// An escrow address that holds no code (the offer names an escrow not deployed on this
    /// chain) is refused with the scheme's own reason before any simulation, and the operator
    /// sends nothing to it.
    #[tokio::test]
    async fn an_escrow_address_without_code_is_refused_with_an_auth_capture_reason() {
        let nowhere = PrivateKeySigner::random().address();
        let env = Escrowed::start_with(|extra| extra.auth_capture_escrow = Some(nowhere)).await;
        let facilitator = env
            .facilitator_with(|chain| chain.escrow = Some(nowhere))
            .await;
        let payer = env.payer(AMOUNT).await;
        let addresses = EscrowAddresses {
            escrow: nowhere,
            ..env.chain.escrow_addresses()
        };
        let payload = sign_auth_capture_payment(
            &payer,
            &env.requirements,
            None,
            unix_now(),
            &AuthCaptureSignOptions {
                addresses: Some(addresses),
                ..AuthCaptureSignOptions::default()
            },
        )
        .await
        .unwrap();
        let request = env.request(payload.clone());
        let verdict = facilitator.verify(&request).await.unwrap();
        assert_eq!(
            verdict.invalid_reason,
            Some(Reason::InvalidAuthCaptureExtra),
            "{verdict:?}"
        );
        assert!(
            verdict
                .invalid_message
                .as_deref()
                .is_some_and(|m| m.contains("no escrow")),
            "{verdict:?}"
        );
        let settled = facilitator.settle(&request).await.unwrap();
        assert_eq!(settled.error_reason, Some(Reason::InvalidAuthCaptureExtra));

        let operator = EscrowOperator::new(
            ProviderBuilder::new()
                .wallet(env.operator_key.clone())
                .connect_http(env.devnet.rpc_url().clone())
                .erased(),
            env.devnet.chain_id(),
            addresses,
            env.operator_key.address(),
        );
        let info = AuthCapturePayment::parse(&payload, &env.requirements, addresses)
            .unwrap()
            .info;
        let sent = env
            .devnet
            .transaction_count(env.operator_key.address())
            .await
            .unwrap();
        let void = operator.void(&info).await.unwrap_err();
        assert_eq!(void.reason(), Some(&Reason::InvalidAuthCaptureExtra));
        assert_eq!(
            operator
                .simulate_refund(&info, U256::from(AMOUNT))
                .await
                .unwrap()
                .map_err(|r| r.reason),
            Err(Reason::InvalidAuthCaptureExtra)
        );
        assert_eq!(
            env.devnet
                .transaction_count(env.operator_key.address())
                .await
                .unwrap(),
            sent
        );
        assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));
    }

    #[tokio::test]
    async fn refusals_from_the_chain_have_stable_reasons() {
        let env = Escrowed::start().await;

        // Not enough tokens.
        let poor = env.payer(AMOUNT - 1).await;
        let verdict = env
            .facilitator
            .verify(&env.request(env.sign(&poor).await))
            .await
            .unwrap();
        assert_eq!(verdict.invalid_reason, Some(Reason::InsufficientBalance));

        // A relayer that is not the captureAuthorizer cannot authorize (escrow InvalidSender).
        let stranger = env.devnet.fresh_relayer().await.unwrap();
        let other = LocalFacilitator::connect(FacilitatorConfig {
            chains: vec![ChainConfig::new(
                env.requirements.network,
                env.devnet.rpc_url().clone(),
                RelayerKey::new(stranger),
            )],
        })
        .await
        .unwrap();
        let payer = env.payer(AMOUNT).await;
        let request = env.request(env.sign(&payer).await);
        let verdict = other.verify(&request).await.unwrap();
        assert_eq!(
            verdict.invalid_reason,
            Some(Reason::InvalidCaptureAuthorizer),
            "{verdict:?}"
        );
        let refused = other.settle(&request).await.unwrap();
        assert_eq!(refused.error_reason, Some(Reason::InvalidCaptureAuthorizer));
        assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));

        // A forged signature (another key signs for the payer).
        let mut forged = env.sign(&PrivateKeySigner::random()).await;
        forged.payload["authorization"]["from"] = json!(payer.address().to_checksum(None));
        let verdict = env.facilitator.verify(&env.request(forged)).await.unwrap();
        assert_eq!(verdict.invalid_reason, Some(Reason::Signature));

        // An exact payment is still served by the same facilitator.
        let supported = env.facilitator.supported().await.unwrap();
        let schemes: Vec<_> = supported.kinds.iter().map(|k| k.scheme.as_str()).collect();
        assert!(schemes.contains(&"exact") && schemes.contains(&AUTH_CAPTURE_SCHEME));
    }

    #[tokio::test]
    async fn auto_capture_charges_in_one_step() {
        let env = Escrowed::start_with(|extra| {
            extra.auto_capture = true;
            extra.min_fee_bps = 100;
        })
        .await;
        let payer = env.payer(AMOUNT).await;
        let payload = env.sign(&payer).await;
        let settled = env
            .facilitator
            .settle(&env.request(payload.clone()))
            .await
            .unwrap();
        assert!(settled.success, "{settled:?}");
        let fee = AMOUNT / 100;
        assert_eq!(env.balance(env.treasury).await, U256::from(fee));
        assert_eq!(env.balance(env.receiver).await, U256::from(AMOUNT - fee));
        let info = env.info(&payload);
        let events = env
            .operator
            .events(env.operator.payment_hash(&info), 0)
            .await
            .unwrap();
        assert!(matches!(
            events[0].kind,
            EscrowEventKind::Charged { fee_bps: 100, .. }
        ));
    }

    #[tokio::test]
    async fn unconfirmed_authorization_reports_pending_and_a_retry_reconciles() {
        let env = Escrowed::start().await;
        let facilitator = env
            .facilitator_with(|chain| chain.receipt_timeout_secs = 1)
            .await;
        let payer = env.payer(AMOUNT).await;
        let request = env.request(env.sign(&payer).await);

        env.rpc("evm_setAutomine", json!([false])).await;
        let pending = facilitator.settle(&request).await.unwrap();
        assert_eq!(
            pending.error_reason,
            Some(Reason::SettlementPending),
            "{pending:?}"
        );
        assert!(pending.transaction.starts_with("0x"));
        let still = facilitator.settle(&request).await.unwrap();
        assert_eq!(still.error_reason, Some(Reason::SettlementPending));
        assert_eq!(still.transaction, pending.transaction, "no second send");

        env.rpc("evm_mine", json!([])).await;
        env.rpc("evm_setAutomine", json!([true])).await;
        let settled = facilitator.settle(&request).await.unwrap();
        assert!(settled.success, "{settled:?}");
        assert_eq!(settled.transaction, pending.transaction);
        let replay = facilitator.settle(&request).await.unwrap();
        assert_eq!(replay.error_reason, Some(Reason::PaymentAlreadyCollected));
        assert_eq!(env.balance(payer.address()).await, U256::ZERO);
        assert_eq!(
            env.balance(env.token_store().await).await,
            U256::from(AMOUNT)
        );
    }

    #[tokio::test]
    async fn concurrent_settles_of_one_payment_authorize_once() {
        let env = Escrowed::start().await;
        let payer = env.payer(3 * AMOUNT).await;
        let request = env.request(env.sign(&payer).await);
        let second = env.facilitator_with(|_| {}).await;
        let (a, b, c) = tokio::join!(
            env.facilitator.settle(&request),
            env.facilitator.settle(&request),
            second.settle(&request),
        );
        let outcomes = [a.unwrap(), b.unwrap(), c.unwrap()];
        let successes = outcomes.iter().filter(|outcome| outcome.success).count();
        assert_eq!(successes, 1, "{outcomes:?}");
        for outcome in outcomes.iter().filter(|outcome| !outcome.success) {
            assert_eq!(
                outcome.error_reason,
                Some(Reason::PaymentAlreadyCollected),
                "{outcome:?}"
            );
        }
        assert_eq!(env.balance(payer.address()).await, U256::from(2 * AMOUNT));
    }

    #[tokio::test]
    async fn after_the_capture_deadline_capture_is_refused_and_the_payer_can_reclaim() {
        let env = Escrowed::start().await;
        let payer = env.payer(AMOUNT).await;
        let payload = env.sign(&payer).await;
        let settled = env
            .facilitator
            .settle(&env.request(payload.clone()))
            .await
            .unwrap();
        assert!(settled.success, "{settled:?}");
        let info = env.info(&payload);

        // More than an hour of chain time: past captureDeadline.
        env.rpc("evm_increaseTime", json!([3_700])).await;
        env.rpc("evm_mine", json!([])).await;
        let late = env
            .operator
            .capture(&info, U256::from(AMOUNT), 0, env.treasury)
            .await
            .unwrap_err();
        assert_eq!(late.reason(), Some(&Reason::CaptureDeadlineExpired));

        // The payer reclaims on their own; the operator reads it from the chain.
        let reclaim = IAuthCaptureEscrow::reclaimCall {
            paymentInfo: info.clone(),
        };
        let payer_provider = ProviderBuilder::new()
            .wallet(payer.clone())
            .connect_http(env.devnet.rpc_url().clone())
            .erased();
        let receipt = payer_provider
            .send_transaction(
                TransactionRequest::default()
                    .to(env.devnet.auth_capture_escrow())
                    .input(TransactionInput::new(reclaim.abi_encode().into())),
            )
            .await
            .unwrap()
            .get_receipt()
            .await
            .unwrap();
        assert!(receipt.status());
        assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));
        let events = env
            .operator
            .events(env.operator.payment_hash(&info), 0)
            .await
            .unwrap();
        assert_eq!(
            events.last().unwrap().kind,
            EscrowEventKind::Reclaimed {
                amount: U256::from(AMOUNT)
            }
        );
        assert_eq!(
            events.last().unwrap().tx_hash,
            Some(receipt.transaction_hash)
        );
        let void = env.operator.void(&info).await.unwrap_err();
        assert_eq!(void.reason(), Some(&Reason::ZeroAuthorization));
    }

    #[tokio::test]
    async fn void_still_works_after_the_capture_deadline() {
        let env = Escrowed::start().await;
        let payer = env.payer(AMOUNT).await;
        let payload = env.sign(&payer).await;
        assert!(
            env.facilitator
                .settle(&env.request(payload.clone()))
                .await
                .unwrap()
                .success
        );
        env.rpc("evm_increaseTime", json!([3_700])).await;
        env.rpc("evm_mine", json!([])).await;
        let info = env.info(&payload);
        env.operator.void(&info).await.unwrap();
        assert_eq!(env.balance(payer.address()).await, U256::from(AMOUNT));
    }

    #[cfg(feature = "server")]
    #[tokio::test]
    async fn served_facilitator_routes_auth_capture_over_http() {
        let env = Escrowed::start().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: url::Url = format!("http://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let served = tokio::spawn(hiregate_payments::serve(
            FacilitatorConfig {
                chains: vec![env.chain.clone()],
            },
            listener,
            shutdown.clone(),
        ));
        let client = hiregate_payments::HttpFacilitatorClient::new(
            url,
            hiregate_payments::Timeouts::default(),
            None,
        )
        .unwrap();

        let payer = env.payer(AMOUNT).await;
        let request = env.request(env.sign(&payer).await);
        let verdict = client.verify(&request).await.unwrap();
        assert!(verdict.is_valid, "{verdict:?}");
        let settled = client.settle(&request).await.unwrap();
        assert!(settled.success, "{settled:?}");
        let replay = client.settle(&request).await.unwrap();
        assert_eq!(replay.error_reason, Some(Reason::PaymentAlreadyCollected));

        // A bad offer is a verdict with the spec's code, not an HTTP error.
        let mut broken = request.clone();
        broken
            .payment_requirements
            .extra
            .insert("captureDeadline".into(), json!("tomorrow"));
        let verdict = client.verify(&broken).await.unwrap();
        assert_eq!(
            verdict.invalid_reason,
            Some(Reason::InvalidAuthCaptureExtra)
        );

        shutdown.cancel();
        served.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn at_one_second_blocks_concurrent_captures_are_pipelined_several_per_block_each_once() {
        const PAYMENTS: usize = 8;
        const FEE_BPS: u16 = 100;
        let env = Escrowed::start_on(
            DevnetOptions {
                block_time: Some(Duration::from_secs(1)),
                ..DevnetOptions::default()
            },
            |_| {},
        )
        .await;
        let mut infos = Vec::new();
        let mut requests = Vec::new();
        for _ in 0..PAYMENTS {
            let payer = env.payer(AMOUNT).await;
            let payload = env.sign(&payer).await;
            infos.push(env.info(&payload));
            requests.push(env.request(payload));
        }
        let authorized = futures::future::join_all(
            requests
                .iter()
                .map(|request| env.facilitator.settle(request)),
        )
        .await;
        for settled in authorized {
            let settled = settled.unwrap();
            assert!(settled.success, "{settled:?}");
        }

        let captures = futures::future::join_all(infos.iter().map(|info| {
            env.operator
                .capture(info, U256::from(AMOUNT), FEE_BPS, env.treasury)
        }))
        .await;

        let mut blocks = Vec::new();
        let mut transactions = std::collections::HashSet::new();
        for capture in captures {
            let receipt = capture.unwrap();
            blocks.push(receipt.block_number.unwrap());
            transactions.insert(receipt.tx_hash);
        }
        assert_eq!(transactions.len(), PAYMENTS, "a transaction per capture");
        blocks.sort_unstable();
        // Sent one after another, awaiting each receipt, they would take a block each.
        assert!(
            blocks.last().unwrap() - blocks.first().unwrap() <= 1,
            "{PAYMENTS} captures sent at once were mined in blocks {blocks:?}"
        );
        let fee = AMOUNT * u64::from(FEE_BPS) / 10_000;
        assert_eq!(
            env.balance(env.receiver).await,
            U256::from((AMOUNT - fee) * PAYMENTS as u64)
        );
        assert_eq!(
            env.balance(env.treasury).await,
            U256::from(fee * PAYMENTS as u64)
        );
        assert_eq!(env.balance(env.token_store().await).await, U256::ZERO);
        for info in &infos {
            let events = env
                .operator
                .events(env.operator.payment_hash(info), 0)
                .await
                .unwrap();
            let totals = EscrowTotals::of(&events);
            assert_eq!(totals.captured, U256::from(AMOUNT), "captured once");
        }
    }
}
