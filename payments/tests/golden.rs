//! Golden tests: messages in the shapes the official SDKs and other facilitators produce are
//! decoded, checked and re-encoded without losing anything.

use alloy::primitives::{Address, Signature, U256};
use base64::Engine as _;
use hiregate_payments::exact::ExactPayment;
use hiregate_payments::extension::PAYMENT_IDENTIFIER;
use hiregate_payments::wire::SupportedResponse;
use hiregate_payments::{
    PaymentPayload, PaymentRequired, Reason, SettleResponse, VerifyRequest, VerifyResponse,
    decode_header, encode_header, precheck,
};
use serde_json::{Value, json};

fn b64(value: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(value.to_string())
}

fn unb64(header: &str) -> Value {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(header)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A payment produced by the official TS client (see the fixture's `_comment`).
fn official_fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/official_exact_evm_payment.json")).unwrap()
}

#[test]
fn official_client_payment_decodes_verifies_locally_and_round_trips() {
    let fixture = official_fixture();
    let header = fixture["paymentSignature"].as_str().unwrap();
    let signer: Address = fixture["signer"].as_str().unwrap().parse().unwrap();
    let required: PaymentRequired =
        serde_json::from_value(fixture["paymentRequired"].clone()).unwrap();
    let offer = &required.accepts[0];

    let payload: PaymentPayload = decode_header(header).unwrap();
    assert!(offer.mismatched_fields(&payload.accepted).is_empty());
    assert_eq!(
        payload.resource.as_ref().unwrap().unknown["serviceName"],
        "Example Data"
    );

    // Our EIP-712 digest must be the one viem signed, or the signature would not recover.
    let exact = ExactPayment::parse(&payload, offer).unwrap();
    let signature = Signature::from_raw(&exact.payload.signature).unwrap();
    assert_eq!(
        signature
            .recover_address_from_prehash(&exact.signing_hash())
            .unwrap(),
        signer
    );
    let authorization = &exact.payload.authorization;
    assert_eq!(authorization.value.get(), U256::from(10_000u64));
    assert_eq!(authorization.valid_after.get(), U256::ZERO);
    let valid_before: u64 = authorization.valid_before.get().to();
    assert_eq!(precheck(&payload, offer, valid_before - 60), Ok(()));
    assert_eq!(
        precheck(&payload, offer, valid_before),
        Err(Reason::ValidBefore)
    );

    // The echoed extension survives, and so does every key of the original JSON.
    assert!(payload.extensions.contains_key(PAYMENT_IDENTIFIER));
    assert_eq!(payload.payment_identifier(), Ok(None));
    assert_eq!(unb64(&encode_header(&payload)), unb64(header));

    let key = payload.payment_key().unwrap();
    assert_eq!(key.payer, signer);
    assert_eq!(key.nonce, authorization.nonce);
}

#[test]
fn payment_required_with_newer_fields_and_extensions_round_trips() {
    let original = json!({
        "x402Version": 2,
        "error": "Payment required",
        "resource": {
            "url": "https://gw.example/v1/contracts/ctr_01J9Z8/execute",
            "description": "Summarise a PDF",
            "mimeType": "application/json",
            "serviceName": "hiregate",
            "tags": ["agents", "summaries"],
            "iconUrl": "https://gw.example/icon.png"
        },
        "accepts": [{
            "scheme": "exact",
            "network": "eip155:8453",
            "amount": "2500000",
            "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "payTo": "0xfa3F54AE9C4287CA09a486dfaFaCe7d1d4095d93",
            "maxTimeoutSeconds": 900,
            "extra": {"name": "USD Coin", "version": "2", "assetTransferMethod": "eip3009"}
        }],
        "extensions": {
            "bazaar": {
                "info": {"input": {"type": "http", "method": "POST"}, "output": {"type": "json"}},
                "schema": {"type": "object"}
            },
            "payment-identifier": {"info": {"required": true}, "schema": {"type": "object"}}
        },
        "futureTopLevelField": {"kept": true}
    });
    let header = b64(&original);
    let decoded: PaymentRequired = decode_header(&header).unwrap();
    assert_eq!(decoded.accepts[0].amount.get(), U256::from(2_500_000u64));
    assert_eq!(decoded.unknown["futureTopLevelField"]["kept"], true);
    assert_eq!(unb64(&encode_header(&decoded)), original);
}

#[test]
fn client_added_extension_fields_and_ids_survive() {
    let fixture = official_fixture();
    let mut payload = unb64(fixture["paymentSignature"].as_str().unwrap());
    payload["extensions"][PAYMENT_IDENTIFIER]["info"]["id"] =
        json!("pay_7d5d747be160e280504c099d984bcfe0");
    payload["extensions"]["sign-in-with-x"] = json!({"info": {"domain": "gw.example"}});
    payload["payload"]["futurePayloadField"] = json!(1);
    let decoded: PaymentPayload = decode_header(&b64(&payload)).unwrap();
    assert_eq!(
        decoded.payment_identifier().unwrap().unwrap().as_str(),
        "pay_7d5d747be160e280504c099d984bcfe0"
    );
    assert_eq!(
        decoded.exact_evm().unwrap().unknown["futurePayloadField"],
        1
    );
    assert_eq!(unb64(&encode_header(&decoded)), payload);
}

#[test]
fn verify_request_in_the_http_client_shape_round_trips() {
    let fixture = official_fixture();
    let request = json!({
        "x402Version": 2,
        "paymentPayload": unb64(fixture["paymentSignature"].as_str().unwrap()),
        "paymentRequirements": fixture["paymentRequired"]["accepts"][0],
    });
    let parsed: VerifyRequest = serde_json::from_value(request.clone()).unwrap();
    assert_eq!(serde_json::to_value(&parsed).unwrap(), request);
}

#[test]
fn verdicts_of_other_facilitators_parse() {
    // x402-rs answers refusals with 400/412/500 and this body (`payer: ""`,
    // `invalidReasonDetails`); its reason reads as the stable code and is written back as it.
    let mut x402_rs = json!({
        "isValid": false,
        "invalidReason": "invalid_payment_expired",
        "invalidReasonDetails": "authorization expired",
        "payer": ""
    });
    let verdict: VerifyResponse = serde_json::from_value(x402_rs.clone()).unwrap();
    assert!(!verdict.is_valid);
    assert_eq!(verdict.invalid_reason, Some(Reason::ValidBefore));
    x402_rs["invalidReason"] = json!("invalid_exact_evm_payload_authorization_valid_before");
    assert_eq!(serde_json::to_value(&verdict).unwrap(), x402_rs);

    // A reason no vocabulary knows survives verbatim.
    let novel = json!({"isValid": false, "invalidReason": "invalid_batch_settlement_evm_scheme"});
    let verdict: VerifyResponse = serde_json::from_value(novel.clone()).unwrap();
    assert_eq!(
        verdict.invalid_reason,
        Some(Reason::Other("invalid_batch_settlement_evm_scheme".into()))
    );
    assert_eq!(serde_json::to_value(&verdict).unwrap(), novel);

    // The TS facilitator answers with 200 and its own vocabulary.
    let ts = json!({
        "isValid": false,
        "invalidReason": "invalid_exact_evm_payload_authorization_value_mismatch",
        "invalidMessage": "value 9999 != amount 10000",
        "payer": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    });
    let verdict: VerifyResponse = serde_json::from_value(ts.clone()).unwrap();
    assert_eq!(verdict.invalid_reason, Some(Reason::ValueMismatch));
    assert_eq!(serde_json::to_value(&verdict).unwrap(), ts);
}

#[test]
fn settle_responses_round_trip_through_payment_response() {
    let success = json!({
        "success": true,
        "transaction": "0x3f1e0b2a4c0d9a3b7e5f6a1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",
        "network": "eip155:8453",
        "payer": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "extensions": {"payment-identifier": {"info": {"id": "pay_7d5d747be160e280504c099d984bcfe0"}}}
    });
    let decoded: SettleResponse = decode_header(&b64(&success)).unwrap();
    assert!(decoded.success);
    assert_eq!(unb64(&encode_header(&decoded)), success);

    let pending = json!({
        "success": false,
        "errorReason": "settlement_pending",
        "transaction": "0x3f1e0b2a4c0d9a3b7e5f6a1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e",
        "network": "eip155:8453",
        "payer": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    });
    let decoded: SettleResponse = serde_json::from_value(pending.clone()).unwrap();
    assert_eq!(decoded.error_reason, Some(Reason::SettlementPending));
    assert_eq!(serde_json::to_value(&decoded).unwrap(), pending);
}

#[test]
fn supported_response_of_the_ts_facilitator_parses() {
    let supported = json!({
        "kinds": [
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"},
            {"x402Version": 1, "scheme": "exact", "network": "base-sepolia"},
            {"x402Version": 2, "scheme": "exact", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
             "extra": {"feePayer": "CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5"}}
        ],
        "extensions": ["bazaar"],
        "signers": {"eip155:*": ["0x70997970C51812dc3A010C7d01b50e0d17dc79C8"]}
    });
    let parsed: SupportedResponse = serde_json::from_value(supported.clone()).unwrap();
    assert_eq!(parsed.kinds.len(), 3);
    assert_eq!(parsed.kinds[1].x402_version, 1);
    assert_eq!(serde_json::to_value(&parsed).unwrap(), supported);
}
