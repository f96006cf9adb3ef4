use alloy::primitives::{address, b256};
use alloy::signers::local::PrivateKeySigner;
use serde_json::json;

use super::sign::{AuthCaptureSignOptions, sign_auth_capture_payment};
use super::*;
use crate::exact::sign::SignError;

const NOW: u64 = 1_750_000_000;

fn extra() -> AuthCaptureExtra {
    AuthCaptureExtra {
        domain: TokenDomain {
            name: "Hiregate Devnet USD".into(),
            version: "2".into(),
        },
        capture_authorizer: address!("90F79bf6EB2c4f870365E785982E1f101E93b906"),
        capture_deadline: NOW + 3_600,
        refund_deadline: NOW + 86_400,
        min_fee_bps: 0,
        max_fee_bps: 1_000,
        fee_recipient: address!("15d34AAf54267DB7D7c367839AAf71A00a2C6A65"),
        auto_capture: false,
        asset_transfer_method: METHOD_EIP3009.into(),
        auth_capture_escrow: Some(AUTH_CAPTURE_ESCROW_V1_0),
        payment_flow: None,
        capture_mode: None,
        operator_type: None,
        receiver_authorizer: None,
        policy: None,
    }
}

fn requirements() -> PaymentRequirements {
    PaymentRequirements::auth_capture_evm(
        Network::eip155(31337).unwrap(),
        U256::from(1_250_000u64),
        address!("5FbDB2315678afecb367f032d93F642f64180aa3"),
        address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
        300,
        &extra(),
    )
}

async fn signed(requirements: &PaymentRequirements) -> (PrivateKeySigner, PaymentPayload) {
    let signer = PrivateKeySigner::random();
    let payload = sign_auth_capture_payment(
        &signer,
        requirements,
        None,
        NOW,
        &AuthCaptureSignOptions::default(),
    )
    .await
    .unwrap();
    (signer, payload)
}

fn check(payload: &PaymentPayload, requirements: &PaymentRequirements) -> Result<(), Reason> {
    let payment = AuthCapturePayment::parse(payload, requirements, EscrowAddresses::default())
        .map_err(|refusal| refusal.reason)?;
    payment.check_times(NOW)?;
    if !payment.signature_recovers() {
        return Err(Reason::Signature);
    }
    payment.check_amount_and_nonce()
}

#[test]
fn extra_round_trips_and_keeps_unknown_keys() {
    let mut requirements = requirements();
    requirements
        .extra
        .insert("serviceHint".into(), json!({"tier": "gold"}));
    // A zero receiver authorizer is the same as none (the v1.1 spec reads absent as zero).
    requirements.extra.insert(
        "receiverAuthorizer".into(),
        json!("0x0000000000000000000000000000000000000000"),
    );
    let wire = serde_json::to_value(&requirements).unwrap();
    assert_eq!(wire["extra"]["captureDeadline"], json!(NOW + 3_600));
    assert_eq!(wire["extra"]["minFeeBps"], json!(0));
    assert_eq!(wire["extra"]["autoCapture"], json!(false));
    assert_eq!(wire["extra"]["assetTransferMethod"], json!("eip3009"));
    let back: PaymentRequirements = serde_json::from_value(wire).unwrap();
    assert_eq!(back, requirements);
    assert_eq!(AuthCaptureExtra::from_requirements(&back).unwrap(), extra());
    let mut rewritten = back.extra.clone();
    extra().write_into(&mut rewritten);
    assert_eq!(rewritten["serviceHint"], json!({"tier": "gold"}));
    assert!(!rewritten.contains_key("receiverAuthorizer"));
}

#[test]
fn extra_refuses_missing_or_mistyped_fields() {
    for key in REQUIRED_KEYS {
        let mut requirements = requirements();
        requirements.extra.remove(key);
        assert_eq!(
            AuthCaptureExtra::from_requirements(&requirements),
            Err(Reason::InvalidAuthCaptureExtra),
            "{key}"
        );
    }
    for (key, value) in [
        ("captureDeadline", json!("1750003600")),
        ("captureDeadline", json!(1u64 << 48)),
        ("minFeeBps", json!(70_000)),
        ("maxFeeBps", json!(-1)),
        ("feeRecipient", json!("treasury")),
        ("autoCapture", json!("false")),
        ("authCaptureEscrow", json!(12)),
    ] {
        let mut requirements = requirements();
        requirements.extra.insert(key.into(), value.clone());
        assert_eq!(
            AuthCaptureExtra::from_requirements(&requirements),
            Err(Reason::InvalidAuthCaptureExtra),
            "{key} = {value}"
        );
    }
    let mut defaults = requirements();
    defaults.extra.remove("autoCapture");
    defaults.extra.remove("assetTransferMethod");
    let parsed = AuthCaptureExtra::from_requirements(&defaults).unwrap();
    assert!(!parsed.auto_capture);
    assert_eq!(parsed.asset_transfer_method, METHOD_EIP3009);
}

#[tokio::test]
async fn signed_payment_reconstructs_and_passes_every_offline_step() {
    let requirements = requirements();
    let (signer, payload) = signed(&requirements).await;
    assert_eq!(check(&payload, &requirements), Ok(()));
    let payment = precheck(&payload, &requirements, EscrowAddresses::default(), NOW).unwrap();
    let info = &payment.info;
    assert_eq!(info.payer, signer.address());
    assert_eq!(info.operator, extra().capture_authorizer);
    assert_eq!(info.preApprovalExpiry, payment_info::u48(NOW + 300));
    assert_eq!(info.authorizationExpiry, payment_info::u48(NOW + 3_600));
    assert_eq!(info.feeReceiver, extra().fee_recipient);
    assert_eq!(
        info.salt,
        U256::from_be_bytes(payment.payload.salt.0),
        "salt = uint256(payload.salt)"
    );
    let authorization = &payment.payload.authorization;
    assert_eq!(authorization.to, ERC3009_TOKEN_COLLECTOR_V1_0);
    assert_eq!(authorization.valid_after.get(), U256::ZERO);
    assert_eq!(
        authorization.nonce,
        info.hash_payer_agnostic(31337, AUTH_CAPTURE_ESCROW_V1_0)
    );
    // The key of paymentState differs from the signed nonce (payer zeroed there).
    assert_ne!(payment.payment_hash(), authorization.nonce);
    assert!(
        !format!("{:?}", payment.payload).contains(&payment.payload.signature.to_string()[4..20])
    );
}

#[tokio::test]
async fn salts_are_fresh_per_payment() {
    let requirements = requirements();
    let (_, a) = signed(&requirements).await;
    let (_, b) = signed(&requirements).await;
    assert_ne!(a.payload["salt"], b.payload["salt"]);
    assert_ne!(
        a.payload["authorization"]["nonce"],
        b.payload["authorization"]["nonce"]
    );
}

#[tokio::test]
async fn each_step_names_its_refusal() {
    let requirements = requirements();
    let (_, payload) = signed(&requirements).await;
    let edited = |edit: &dyn Fn(&mut PaymentPayload)| {
        let mut copy = payload.clone();
        edit(&mut copy);
        check(&copy, &requirements)
    };
    // 1. Type guard.
    assert_eq!(
        edited(&|p| {
            p.payload.as_object_mut().unwrap().remove("salt");
        }),
        Err(Reason::InvalidPayload)
    );
    // 2. Scheme.
    assert_eq!(
        edited(&|p| p.accepted.scheme = "exact".into()),
        Err(Reason::InvalidScheme)
    );
    // 3. Network.
    assert_eq!(
        edited(&|p| p.accepted.network = Network::eip155(1).unwrap()),
        Err(Reason::NetworkMismatch)
    );
    // 8. Collector.
    assert_eq!(
        edited(&|p| p.payload["authorization"]["to"] =
            json!("0x0000000000000000000000000000000000000001")),
        Err(Reason::TokenCollectorMismatch)
    );
    // 10. Signature: any change to what was signed breaks it before amount and nonce.
    assert_eq!(
        edited(&|p| p.payload["authorization"]["value"] = json!("1")),
        Err(Reason::Signature)
    );
    // 12. Nonce: the salt is not signed directly, only through the nonce.
    assert_eq!(
        edited(&|p| p.payload["salt"] = json!(format!("0x{}", "00".repeat(32)))),
        Err(Reason::NonceMismatch)
    );
}

#[tokio::test]
async fn offers_that_differ_from_the_signed_payment_are_refused() {
    let requirements = requirements();
    let (_, payload) = signed(&requirements).await;

    // 4. Extra.
    let mut no_authorizer = requirements.clone();
    no_authorizer.extra.remove("captureAuthorizer");
    assert_eq!(
        check(&payload, &no_authorizer),
        Err(Reason::InvalidAuthCaptureExtra)
    );

    // 5. Method routing.
    let mut permit2 = requirements.clone();
    permit2
        .extra
        .insert("assetTransferMethod".into(), json!("permit2"));
    let refusal =
        AuthCapturePayment::parse(&payload, &permit2, EscrowAddresses::default()).unwrap_err();
    assert_eq!(refusal.reason, Reason::UnsupportedAssetTransferMethod);
    assert!(refusal.message.unwrap().contains("not supported yet"));
    let mut unknown = requirements.clone();
    unknown
        .extra
        .insert("assetTransferMethod".into(), json!("wire"));
    assert_eq!(
        check(&payload, &unknown),
        Err(Reason::UnsupportedAssetTransferMethod)
    );
    let mut permit2_payload = payload.clone();
    permit2_payload.payload = json!({"permit2Authorization": {}, "signature": "0x", "salt": "0x"});
    assert_eq!(
        check(&permit2_payload, &requirements),
        Err(Reason::PayloadMethodMismatch)
    );

    // 6. Deadline ordering and capture deadline.
    let mut inverted = requirements.clone();
    inverted
        .extra
        .insert("refundDeadline".into(), json!(NOW + 60));
    assert_eq!(
        check(&payload, &inverted),
        Err(Reason::InvalidDeadlineOrdering)
    );
    let mut closing = requirements.clone();
    closing
        .extra
        .insert("captureDeadline".into(), json!(NOW + 6));
    assert_eq!(
        check(&payload, &closing),
        Err(Reason::CaptureDeadlineExpired)
    );
    let mut short = requirements.clone();
    short
        .extra
        .insert("captureDeadline".into(), json!(NOW + 299));
    assert_eq!(
        check(&payload, &short),
        Err(Reason::InvalidDeadlineOrdering)
    );

    // 11. Amount.
    let mut cheaper = requirements.clone();
    cheaper.amount = U256::from(1_000_000u64).into();
    assert_eq!(check(&payload, &cheaper), Err(Reason::ValueMismatch));

    // 12. Every PaymentInfo field is bound by the nonce.
    for (key, value) in [
        ("maxFeeBps", json!(2_000)),
        ("minFeeBps", json!(10)),
        (
            "feeRecipient",
            json!("0x0000000000000000000000000000000000000009"),
        ),
        (
            "captureAuthorizer",
            json!("0x0000000000000000000000000000000000000009"),
        ),
        ("captureDeadline", json!(NOW + 3_601)),
    ] {
        let mut other = requirements.clone();
        other.extra.insert(key.into(), value);
        assert_eq!(check(&payload, &other), Err(Reason::NonceMismatch), "{key}");
    }
    let mut other_receiver = requirements.clone();
    other_receiver.pay_to = "0x0000000000000000000000000000000000000009".into();
    assert_eq!(check(&payload, &other_receiver), Err(Reason::NonceMismatch));

    // Another escrow than the one in use.
    let mut v1_1 = requirements.clone();
    v1_1.extra.insert(
        "authCaptureEscrow".into(),
        json!("0xf96815976523E00e65Be8f34cA5e64b4f41EB19c"),
    );
    assert_eq!(check(&payload, &v1_1), Err(Reason::InvalidAuthCaptureExtra));
}

#[tokio::test]
async fn time_window_is_checked_with_the_buffer() {
    let requirements = requirements();
    let (_, payload) = signed(&requirements).await;
    let payment =
        AuthCapturePayment::parse(&payload, &requirements, EscrowAddresses::default()).unwrap();
    // validBefore = NOW + 300: valid until 6 s before it.
    assert_eq!(payment.check_times(NOW + 293), Ok(()));
    assert_eq!(payment.check_times(NOW + 294), Err(Reason::ValidBefore));
    let mut late_start = payment.clone();
    late_start.payload.authorization.valid_after = (NOW + 1).into();
    assert_eq!(late_start.check_times(NOW), Err(Reason::ValidAfter));
}

#[tokio::test]
async fn the_client_refuses_what_it_cannot_sign() {
    let signer = PrivateKeySigner::random();
    let sign = |requirements: PaymentRequirements| {
        let signer = signer.clone();
        async move {
            sign_auth_capture_payment(
                &signer,
                &requirements,
                None,
                NOW,
                &AuthCaptureSignOptions::default(),
            )
            .await
        }
    };
    let mut permit2 = requirements();
    permit2
        .extra
        .insert("assetTransferMethod".into(), json!("permit2"));
    assert!(matches!(
        sign(permit2).await,
        Err(SignError::Requirements(
            Reason::UnsupportedAssetTransferMethod
        ))
    ));
    let mut exact = requirements();
    exact.scheme = "exact".into();
    assert!(matches!(
        sign(exact).await,
        Err(SignError::Requirements(Reason::InvalidScheme))
    ));
    let mut huge = requirements();
    huge.amount = (U256::from(1u8) << 120usize).into();
    assert!(matches!(
        sign(huge).await,
        Err(SignError::Requirements(Reason::AmountOverflow))
    ));
}

/// A golden vector computed independently with viem (`keccak256(encodeAbiParameters(…))`,
/// the official client's own code path) for fixed inputs.
#[test]
fn nonce_matches_a_viem_vector() {
    let info = PaymentInfo {
        operator: address!("90F79bf6EB2c4f870365E785982E1f101E93b906"),
        payer: address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
        receiver: address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
        token: address!("5FbDB2315678afecb367f032d93F642f64180aa3"),
        maxAmount: payment_info::u120(U256::from(1_250_000u64)).unwrap(),
        preApprovalExpiry: payment_info::u48(1_750_000_300),
        authorizationExpiry: payment_info::u48(1_750_003_600),
        refundExpiry: payment_info::u48(1_750_086_400),
        minFeeBps: 0,
        maxFeeBps: 1_000,
        feeReceiver: address!("15d34AAf54267DB7D7c367839AAf71A00a2C6A65"),
        salt: U256::from(0xabcu64),
    };
    assert_eq!(
        info.hash_payer_agnostic(31337, AUTH_CAPTURE_ESCROW_V1_0),
        NONCE_VECTOR
    );
    assert_eq!(
        info.get_hash(31337, AUTH_CAPTURE_ESCROW_V1_0),
        PAYER_HASH_VECTOR
    );
}

const NONCE_VECTOR: B256 =
    b256!("85c8b9b40eaade95a3504ff079e3a236dd40006024a54400031bec0077e55ee4");
const PAYER_HASH_VECTOR: B256 =
    b256!("213a769bde920965bd55b97cf6999334d8b80b5c0453d96a06188d8280bdf369");

fn v1_1(edit: impl FnOnce(&mut AuthCaptureExtra)) -> PaymentRequirements {
    let mut extra = extra();
    extra.payment_flow = Some(PaymentFlow::Escrow);
    extra.capture_mode = Some(CaptureMode::Deferred);
    edit(&mut extra);
    PaymentRequirements::auth_capture_evm(
        Network::eip155(31337).unwrap(),
        U256::from(1_250_000u64),
        address!("5FbDB2315678afecb367f032d93F642f64180aa3"),
        address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
        300,
        &extra,
    )
}

#[test]
fn the_v1_1_wire_names_the_flow_and_refuses_mixed_or_unknown_ones() {
    let escrow = v1_1(|_| {});
    let wire = serde_json::to_value(&escrow).unwrap();
    assert_eq!(wire["extra"]["paymentFlow"], "escrow");
    assert_eq!(wire["extra"]["captureMode"], "deferred");
    assert!(wire["extra"].get("autoCapture").is_none());
    let parsed = AuthCaptureExtra::from_requirements(&escrow).unwrap();
    assert!(!parsed.settles_by_charge());
    let charge = v1_1(|extra| {
        extra.payment_flow = Some(PaymentFlow::Authorization);
        extra.capture_mode = None;
    });
    assert!(
        AuthCaptureExtra::from_requirements(&charge)
            .unwrap()
            .settles_by_charge()
    );
    // The v1.0 wire still decides with autoCapture.
    let mut old = requirements();
    old.extra.insert("autoCapture".into(), json!(true));
    assert!(
        AuthCaptureExtra::from_requirements(&old)
            .unwrap()
            .settles_by_charge()
    );

    for (key, value) in [
        ("paymentFlow", json!("upfront")),
        ("paymentFlow", json!("later")),
        ("captureMode", json!("eventually")),
        ("autoCapture", json!(true)),
    ] {
        let mut requirements = v1_1(|_| {});
        requirements.extra.insert(key.into(), value.clone());
        assert_eq!(
            AuthCaptureExtra::from_requirements(&requirements),
            Err(Reason::UnsupportedPaymentFlow),
            "{key} = {value}"
        );
    }
    let mut mode_on_charge = charge.clone();
    mode_on_charge
        .extra
        .insert("captureMode".into(), json!("sync"));
    assert_eq!(
        AuthCaptureExtra::from_requirements(&mode_on_charge),
        Err(Reason::UnsupportedPaymentFlow)
    );
    let mut unknown_operator = v1_1(|_| {});
    unknown_operator
        .extra
        .insert("operatorType".into(), json!("friendly"));
    assert_eq!(
        AuthCaptureExtra::from_requirements(&unknown_operator),
        Err(Reason::UnsupportedOperatorType)
    );
}

#[tokio::test]
async fn a_bound_salt_must_open_to_the_offers_authorizer_and_nonce() {
    let authorizer = address!("14dC79964da2C08b23698B3D3cc7Ca32193d9955");
    let bound = v1_1(|extra| extra.receiver_authorizer = Some(authorizer));
    let (_, payload) = signed(&bound).await;
    let salt_nonce: B256 = payload.payload["saltNonce"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        AuthCapturePayment::parse(&payload, &bound, EscrowAddresses::default())
            .unwrap()
            .payload
            .salt,
        bound_salt(authorizer, Address::ZERO, salt_nonce)
    );
    assert_eq!(check(&payload, &bound), Ok(()));

    let parse = |payload: &PaymentPayload, requirements: &PaymentRequirements| {
        AuthCapturePayment::parse(payload, requirements, EscrowAddresses::default())
            .map(|_| ())
            .map_err(|refusal| refusal.reason)
    };
    let mut swapped = payload.clone();
    swapped.payload["saltNonce"] = json!(format!("0x{}", "07".repeat(32)));
    assert_eq!(parse(&swapped, &bound), Err(Reason::SaltBindingMismatch));
    let mut missing = payload.clone();
    missing.payload.as_object_mut().unwrap().remove("saltNonce");
    assert_eq!(parse(&missing, &bound), Err(Reason::SaltBindingMismatch));
    // Another authorizer in the offer: the commitment no longer opens.
    let other = v1_1(|extra| {
        extra.receiver_authorizer = Some(address!("a0Ee7A142d267C1f36714E4a8F75612F20a79720"));
    });
    assert_eq!(parse(&payload, &other), Err(Reason::SaltBindingMismatch));
    // An unbound offer takes no saltNonce.
    let (_, unbound) = signed(&v1_1(|_| {})).await;
    let mut with_nonce = unbound.clone();
    with_nonce.payload["saltNonce"] = json!(format!("0x{}", "07".repeat(32)));
    assert_eq!(
        parse(&with_nonce, &v1_1(|_| {})),
        Err(Reason::SaltBindingMismatch)
    );
}

#[tokio::test]
async fn operators_this_facilitator_does_not_drive_are_refused() {
    let (_, payload) = signed(&v1_1(|_| {})).await;
    let parse = |requirements: &PaymentRequirements| {
        AuthCapturePayment::parse(&payload, requirements, EscrowAddresses::default())
            .map(|_| ())
            .map_err(|refusal| refusal.reason)
    };
    assert_eq!(
        parse(&v1_1(
            |extra| extra.operator_type = Some(OperatorType::Custom)
        )),
        Err(Reason::UnsupportedOperatorType)
    );
    assert_eq!(
        parse(&v1_1(|extra| {
            extra.policy = Some(address!("a0Ee7A142d267C1f36714E4a8F75612F20a79720"));
        })),
        Err(Reason::InvalidPolicy)
    );
    assert_eq!(
        parse(&v1_1(|extra| {
            extra.payment_flow = Some(PaymentFlow::Authorization);
            extra.capture_mode = None;
        })),
        Err(Reason::MissingReceiverAuthorizer)
    );
}

#[tokio::test]
async fn a_charge_completion_is_checked_against_the_offer_and_its_authorizer() {
    use super::charge::{ChargeCompletion, complete_charge};
    let authorizer = PrivateKeySigner::random();
    let requirements = v1_1(|extra| {
        extra.payment_flow = Some(PaymentFlow::Authorization);
        extra.capture_mode = None;
        extra.receiver_authorizer = Some(authorizer.address());
    });
    let (_, raw) = signed(&requirements).await;
    let payment =
        AuthCapturePayment::parse(&raw, &requirements, EscrowAddresses::default()).unwrap();
    assert!(payment.completion.is_none());
    let fee_recipient = payment.extra.fee_recipient;
    let complete = |amount: u64, fee_bps: u16| {
        let mut payload = raw.clone();
        let payment = payment.clone();
        let authorizer = authorizer.clone();
        let requirements = requirements.clone();
        async move {
            complete_charge(
                &mut payload,
                &payment,
                &authorizer,
                U256::from(amount),
                fee_bps,
                fee_recipient,
            )
            .await
            .unwrap();
            let completed =
                AuthCapturePayment::parse(&payload, &requirements, EscrowAddresses::default())
                    .unwrap();
            completed.completion.clone().unwrap().check(&completed)
        }
    };
    assert_eq!(complete(500_000, 100).await, Ok(()));
    assert_eq!(
        complete(1_250_001, 100).await.map_err(|r| r.reason),
        Err(Reason::ValueMismatch)
    );
    assert_eq!(
        complete(0, 100).await.map_err(|r| r.reason),
        Err(Reason::ValueMismatch)
    );
    assert_eq!(
        complete(500_000, 1_001).await.map_err(|r| r.reason),
        Err(Reason::FeeBpsOutOfRange)
    );
    // The v1.1 deployment's fee field is the wrong one for the v1.0 escrow in use.
    let mut fee_amount = raw.clone();
    fee_amount.payload["amount"] = json!("500000");
    fee_amount.payload["feeAmount"] = json!("5000");
    assert_eq!(
        ChargeCompletion::from_payload(&fee_amount.payload),
        Err(Reason::InvalidPayload)
    );
    // An escrow (authorize) payload carries no completion.
    let (_, escrow_payload) = signed(&v1_1(|_| {})).await;
    let mut completed_escrow = escrow_payload.clone();
    completed_escrow.payload["amount"] = json!("1");
    completed_escrow.payload["feeBps"] = json!(0);
    completed_escrow.payload["feeReceiver"] = json!(fee_recipient.to_checksum(None));
    completed_escrow.payload["authorizerSignature"] = json!("0x00");
    assert_eq!(
        AuthCapturePayment::parse(&completed_escrow, &v1_1(|_| {}), EscrowAddresses::default())
            .map(|_| ())
            .map_err(|refusal| refusal.reason),
        Err(Reason::InvalidPayload)
    );
}
