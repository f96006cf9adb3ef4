use alloy::primitives::{U256, address, keccak256};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct;

use super::sign::{Permit2SignOptions, add_eip2612_permit, sign_permit2_payment};
use super::*;
use crate::wire::TokenDomain;

const NOW: u64 = 1_750_000_000;
const TOKEN: Address = address!("5FbDB2315678afecb367f032d93F642f64180aa3");
const PAY_TO: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
const FACILITATOR: Address = address!("70997970C51812dc3A010C7d01b50e0d17dc79C8");

fn exact_offer() -> PaymentRequirements {
    PaymentRequirements::exact_permit2_evm(
        Network::eip155(31337).unwrap(),
        U256::from(10_000u64),
        TOKEN,
        PAY_TO,
        60,
        None,
    )
}

fn upto_offer() -> PaymentRequirements {
    PaymentRequirements::upto_evm(
        Network::eip155(31337).unwrap(),
        U256::from(5_000_000u64),
        TOKEN,
        PAY_TO,
        300,
        None,
        FACILITATOR,
    )
}

#[test]
fn typehashes_are_permit2s_witness_types() {
    let exact = keccak256(exact_typed::PermitWitnessTransferFrom::eip712_encode_type().as_bytes());
    assert_eq!(
        exact,
        keccak256(
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
        )
    );
    let upto = keccak256(upto_typed::PermitWitnessTransferFrom::eip712_encode_type().as_bytes());
    assert_eq!(
        upto,
        keccak256(
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
        )
    );
}

#[tokio::test]
async fn a_signed_exact_payment_parses_recovers_and_has_the_official_shape() {
    let signer = PrivateKeySigner::random();
    let offer = exact_offer();
    let payload = sign_permit2_payment(&signer, &offer, None, NOW, &Permit2SignOptions::default())
        .await
        .unwrap();
    let wire = &payload.payload["permit2Authorization"];
    assert_eq!(wire["spender"], EXACT_PERMIT2_PROXY.to_checksum(None));
    assert_eq!(wire["permitted"]["amount"], "10000");
    assert_eq!(wire["deadline"], (NOW + 60).to_string());
    assert_eq!(wire["witness"]["validAfter"], "0");
    assert!(wire["witness"].get("facilitator").is_none());
    assert!(
        wire["nonce"]
            .as_str()
            .unwrap()
            .bytes()
            .all(|b| b.is_ascii_digit())
    );

    let payment = precheck(&payload, &offer, NOW).unwrap();
    assert_eq!(payment.scheme, Permit2Scheme::Exact);
    assert_eq!(payment.payer(), signer.address());
    assert!(onchain::ecdsa_signs(
        &payment.payload.signature,
        &payment.signing_hash(),
        signer.address()
    ));
    let key = payload.payment_key().unwrap();
    assert_eq!(key, payment.key());
    assert_eq!(key.payer, signer.address());
}

#[tokio::test]
async fn each_broken_term_is_refused_with_its_reason() {
    let signer = PrivateKeySigner::random();
    let offer = exact_offer();
    let payload = sign_permit2_payment(&signer, &offer, None, NOW, &Permit2SignOptions::default())
        .await
        .unwrap();
    let case = |edit: &dyn Fn(&mut Value), expected: Reason| {
        let mut tampered = payload.clone();
        edit(&mut tampered.payload["permit2Authorization"]);
        assert_eq!(
            precheck(&tampered, &offer, NOW).map(|_| ()),
            Err(expected),
            "{}",
            tampered.payload
        );
    };
    case(
        &|a| a["spender"] = json(UPTO_PERMIT2_PROXY),
        Reason::Permit2InvalidSpender,
    );
    case(
        &|a| a["witness"]["to"] = json(FACILITATOR),
        Reason::RecipientMismatch,
    );
    case(
        &|a| a["permitted"]["amount"] = "9999".into(),
        Reason::ValueMismatch,
    );
    case(
        &|a| a["permitted"]["token"] = json(FACILITATOR),
        Reason::AssetMismatch,
    );
    case(
        &|a| a["deadline"] = (NOW + 5).to_string().into(),
        Reason::ValidBefore,
    );
    case(
        &|a| a["witness"]["validAfter"] = (NOW + 1).to_string().into(),
        Reason::ValidAfter,
    );
    case(&|a| a["nonce"] = "-1".into(), Reason::InvalidPayload);

    let mut upto = offer.clone();
    upto.scheme = UPTO_SCHEME.into();
    assert_eq!(
        precheck(&payload, &upto, NOW).map(|_| ()),
        Err(Reason::InvalidScheme)
    );
}

fn json(address: Address) -> Value {
    Value::String(address.to_checksum(None))
}

#[tokio::test]
async fn upto_settles_at_most_the_signed_maximum() {
    let signer = PrivateKeySigner::random();
    let offer = upto_offer();
    let payload = sign_permit2_payment(&signer, &offer, None, NOW, &Permit2SignOptions::default())
        .await
        .unwrap();
    assert_eq!(
        payload.payload["permit2Authorization"]["witness"]["facilitator"],
        FACILITATOR.to_checksum(None)
    );
    let payment = precheck(&payload, &offer, NOW).unwrap();
    assert_eq!(payment.scheme, Permit2Scheme::Upto);
    assert_eq!(payment.max_amount(), U256::from(5_000_000u64));

    let request = upto::settle_request(payload.clone(), &offer, U256::from(1858u64)).unwrap();
    let (_, amount) = Permit2Payment::parse_for_settlement(
        &request.payment_payload,
        &request.payment_requirements,
    )
    .unwrap();
    assert_eq!(amount, U256::from(1858u64));
    // Verification compares the maximum; a smaller amount there is a mismatch.
    assert_eq!(
        Permit2Payment::parse(&request.payment_payload, &request.payment_requirements).map(|_| ()),
        Err(Reason::ValueMismatch)
    );
    let mut over = offer.clone();
    over.amount = U256::from(5_000_001u64).into();
    assert_eq!(
        Permit2Payment::parse_for_settlement(&payload, &over).map(|_| ()),
        Err(Reason::UptoSettlementExceedsAmount)
    );
    // `exact` moves exactly the signed amount, at settlement too.
    let exact_payload = sign_permit2_payment(
        &signer,
        &exact_offer(),
        None,
        NOW,
        &Permit2SignOptions::default(),
    )
    .await
    .unwrap();
    let mut less = exact_offer();
    less.amount = U256::from(9_999u64).into();
    assert_eq!(
        Permit2Payment::parse_for_settlement(&exact_payload, &less).map(|_| ()),
        Err(Reason::ValueMismatch)
    );

    let mut no_facilitator = payload.clone();
    no_facilitator.payload["permit2Authorization"]["witness"]
        .as_object_mut()
        .unwrap()
        .remove("facilitator");
    assert_eq!(
        precheck(&no_facilitator, &offer, NOW).map(|_| ()),
        Err(Reason::InvalidPayload)
    );
}

#[tokio::test]
async fn an_eip2612_permit_rides_along_and_is_checked() {
    let signer = PrivateKeySigner::random();
    let offer = exact_offer();
    let mut payload =
        sign_permit2_payment(&signer, &offer, None, NOW, &Permit2SignOptions::default())
            .await
            .unwrap();
    let domain = TokenDomain {
        name: "Devnet Permit Token".into(),
        version: "1".into(),
    };
    add_eip2612_permit(
        &signer,
        &mut payload,
        TOKEN,
        &domain,
        31337,
        U256::ZERO,
        NOW + 60,
        U256::from(10_000u64),
    )
    .await
    .unwrap();
    let payment = precheck(&payload, &offer, NOW).unwrap();
    let permit = payment.eip2612.unwrap();
    assert_eq!(permit.spender, PERMIT2_ADDRESS);
    assert_eq!(permit.amount, U256::from(10_000u64));

    let mut other_amount = payload.clone();
    other_amount.extensions["eip2612GasSponsoring"]["info"]["amount"] = "1".into();
    assert_eq!(
        precheck(&other_amount, &offer, NOW).map(|_| ()),
        Err(Reason::Permit2612AmountMismatch)
    );
    assert_eq!(
        precheck(&payload, &offer, NOW + 55).map(|_| ()),
        Err(Reason::ValidBefore)
    );
}

#[tokio::test]
async fn the_servers_declaration_echoed_back_is_no_permit() {
    // The official client merges the 402's `eip2612GasSponsoring` declaration into every
    // payload and adds the permit fields only when it signs one: the bare echo is no permit,
    // as the official facilitator reads it, and a half-filled one is refused.
    let signer = PrivateKeySigner::random();
    let offer = exact_offer();
    let mut payload =
        sign_permit2_payment(&signer, &offer, None, NOW, &Permit2SignOptions::default())
            .await
            .unwrap();
    payload.extensions.insert(
        extension::EIP2612_GAS_SPONSORING.into(),
        extension::eip2612_gas_sponsoring_offer(),
    );
    let payment = precheck(&payload, &offer, NOW).unwrap();
    assert!(payment.eip2612.is_none());
    let info = &mut payload.extensions["eip2612GasSponsoring"]["info"];
    for (key, value) in [
        ("from", signer.address().to_checksum(None)),
        ("asset", TOKEN.to_checksum(None)),
        ("spender", PERMIT2_ADDRESS.to_checksum(None)),
        ("amount", "10000".to_owned()),
        ("nonce", "0".to_owned()),
        ("deadline", (NOW + 60).to_string()),
        ("signature", "0x1234".to_owned()),
    ] {
        info[key] = value.into();
    }
    assert_eq!(
        precheck(&payload, &offer, NOW).map(|_| ()),
        Err(Reason::Eip2612ExtensionInvalid)
    );
}

#[test]
fn hex_nonces_of_the_spec_example_read_as_numbers() {
    let authorization: Permit2Authorization = serde_json::from_value(serde_json::json!({
        "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
        "permitted": {"token": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "amount": "5000000"},
        "spender": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
        "nonce": "0xff",
        "deadline": "1740672154",
        "witness": {"to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "facilitator": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", "validAfter": "1740672089"}
    }))
    .unwrap();
    assert_eq!(authorization.nonce.get(), U256::from(255u64));
}
