//! The x402 `offer-receipt` extension on real parts: anvil, the embedded facilitator, a
//! worker-sdk worker, the official `@x402/fetch` client paying, and the official
//! `@x402/extensions/offer-receipt` 2.27 functions (`tools/interop/offer-receipt.mjs`) verifying
//! what the gateway signed: the offer in the 402 (its key found from the JWS `kid`, a `did:key`
//! over plain http; the gateway's `did:web` document resolved by the official resolver gives
//! the same key) and the receipt in `PAYMENT-RESPONSE`, whose transaction moved exactly the
//! settled amount on chain (a metered hire settles less than the signed maximum).

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    providers::Provider as _,
};
use hiregate_engine::hire::offer_receipt::verify_artifact;
use hiregate_payments::{
    PaymentRequired, SettleResponse, decode_header,
    offer_receipt::{OfferPayload, ReceiptPayload, offers_in, receipt_in},
};
use serde_json::{Value, json};

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, WorkerKind, assert_reconciled, hire_env},
    upto::{MAX_UNITS, UNIT, balances, input, upto_env},
};

/// The official verifier's verdicts on `challenge`'s offers and, when given, the receipt in
/// the raw `PAYMENT-RESPONSE` header; the `did:web` DID URL of the active key is resolved too.
async fn official_verdicts(
    env: &HireEnv,
    challenge: &Value,
    payment_response: Option<&str>,
) -> Value {
    let document: Value = env
        .app
        .get("/.well-known/did.json", None)
        .await
        .json()
        .await
        .unwrap();
    let active = document["assertionMethod"][0].as_str().unwrap().to_owned();
    hiregate_payments::devnet::node_script(
        "offer-receipt.mjs",
        &json!({
            "paymentRequired": challenge,
            "paymentResponseHeader": payment_response,
            "payer": env.wallet.address().to_checksum(None),
            "didWebKid": active,
            "gatewayUrl": env.app.address,
        }),
    )
    .await
    .expect("offer-receipt.mjs runs")
}

/// The gateway's JWKS, as published.
async fn jwks(env: &HireEnv) -> hiregate_contracts::token::Jwks {
    env.app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap()
}

/// The ERC-20 `Transfer`s to `to` in transaction `tx`, as (token, amount).
async fn transfers_to(env: &HireEnv, tx: &str, to: Address) -> Vec<(Address, U256)> {
    let hash: B256 = tx.parse().unwrap();
    let receipt = env
        .devnet
        .provider()
        .get_transaction_receipt(hash)
        .await
        .unwrap()
        .expect("the receipt's transaction is mined");
    assert!(receipt.status(), "the settlement transaction succeeded");
    let transfer = keccak256("Transfer(address,address,uint256)");
    receipt
        .inner
        .logs()
        .iter()
        .filter(|log| log.topics().first() == Some(&transfer))
        .filter(|log| log.topics().get(2).map(|t| Address::from_word(*t)) == Some(to))
        .map(|log| (log.address(), U256::from_be_slice(&log.data().data)))
        .collect()
}

/// A metered hire at a listing's stable URL: the 402's signed offer (the maximum) and the paid
/// answer's signed receipt both pass the official verifier; the receipt's transaction moved the
/// two verified items' price, not the maximum. A tampered offer fails the same verifier.
#[tokio::test]
async fn the_official_verifier_accepts_a_metered_hires_signed_offer_and_receipt() {
    if !hiregate_payments::devnet::node_tools_or_skip("offer_receipt_metered") {
        return;
    }
    let env = upto_env(TestDatabase::sqlite()).await;
    let path = format!("/x402/workers/{}/summarize", env.worker_id);
    let url = format!("{}{path}", env.app.address);
    let unpaid = env
        .app
        .send_json(
            reqwest::Method::POST,
            &path,
            None,
            &input(&[true, false, true]),
        )
        .await;
    assert_eq!(unpaid.status(), 402);
    let challenge: PaymentRequired =
        decode_header(unpaid.headers()["payment-required"].to_str().unwrap()).unwrap();
    let challenge = serde_json::to_value(&challenge).unwrap();

    let verdicts = official_verdicts(&env, &challenge, None).await;
    let offer = &verdicts["offers"][0];
    assert_eq!(offer["matchesAccept"], true, "{verdicts:#}");
    assert!(
        offer["kid"].as_str().unwrap().starts_with("did:key:z6Mk"),
        "{verdicts:#}"
    );
    assert_eq!(offer["payload"]["resourceUrl"], url.as_str());
    assert_eq!(offer["payload"]["scheme"], "upto");
    assert_eq!(offer["payload"]["amount"], (MAX_UNITS * UNIT).to_string());
    assert!(offer["payload"]["validUntil"].as_u64().unwrap() > crate::hire_env::now());
    assert_eq!(verdicts["didWeb"]["offers"], json!([true]), "{verdicts:#}");

    // The same offer with another amount: the official verifier refuses it.
    let mut tampered = challenge.clone();
    let signature = tampered["extensions"]["offer-receipt"]["info"]["offers"][0]["signature"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut parts: Vec<&str> = signature.split('.').collect();
    let cheaper = {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut payload: Value = serde_json::from_slice(&engine.decode(parts[1]).unwrap()).unwrap();
        payload["amount"] = json!("1");
        engine.encode(payload.to_string())
    };
    parts[1] = &cheaper;
    tampered["extensions"]["offer-receipt"]["info"]["offers"][0]["signature"] =
        json!(parts.join("."));
    let refused = official_verdicts(&env, &tampered, None).await;
    assert!(refused["offers"][0]["error"].is_string(), "{refused:#}");
    assert_eq!(refused["didWeb"]["offers"], json!([false]));

    let before = balances(&env).await;
    let result = hiregate_payments::devnet::node_script(
        "pay.mjs",
        &json!({
            "url": url,
            "privateKey": env.wallet.to_bytes().to_string(),
            "method": "POST",
            "body": input(&[true, false, true]),
            "scheme": "upto",
            "allowedAssets": [{"network": env.devnet.network(),
                               "asset": env.devnet.permit_token().to_checksum(None)}],
        }),
    )
    .await
    .expect("pay.mjs runs");
    assert_eq!(result["status"], 200, "{result:#}");
    let header = result["headers"]["payment-response"].as_str().unwrap();
    let settlement: SettleResponse = decode_header(header).unwrap();
    let two = U256::from(2 * UNIT);
    assert_eq!(settlement.amount, Some(two.to_string()));

    let verdicts = official_verdicts(&env, &challenge, Some(header)).await;
    let receipt = &verdicts["receipt"]["payload"];
    assert_eq!(receipt["resourceUrl"], url.as_str(), "{verdicts:#}");
    assert_eq!(
        receipt["payer"],
        env.wallet.address().to_checksum(None).as_str()
    );
    assert_eq!(receipt["network"], env.devnet.network());
    assert_eq!(receipt["transaction"], settlement.transaction.as_str());
    assert_eq!(verdicts["receiptMatchesOffer"], true, "{verdicts:#}");
    assert_eq!(verdicts["didWeb"]["receipt"], true, "{verdicts:#}");

    // The gateway's own check agrees, and the chain shows what the receipt's transaction moved.
    let base: url::Url = env.app.address.parse().unwrap();
    let read = receipt_in(&settlement.extensions).unwrap().unwrap();
    let statement: ReceiptPayload = verify_artifact(&read, &jwks(&env).await, &base).unwrap();
    assert_eq!(
        statement.transaction.as_deref(),
        Some(settlement.transaction.as_str())
    );
    assert_eq!(
        transfers_to(&env, &settlement.transaction, env.pay_to).await,
        vec![(env.devnet.permit_token(), two)],
        "the receipt's transaction paid the two verified items"
    );
    let after = balances(&env).await;
    assert_eq!(after.1, before.1 + two);
    assert_reconciled(&env).await;
}

/// A REST contract's 402 carries its signed offer, made once when the contract was proposed
/// (the unpaid execute answered from memory repeats the same bytes); the paid answer carries the
/// receipt of the settlement, and a replay of the payment the very same receipt.
#[tokio::test]
async fn a_contracts_offer_is_signed_once_and_its_paid_answer_carries_the_same_receipt_each_time() {
    if !hiregate_payments::devnet::node_tools_or_skip("offer_receipt_contract") {
        return;
    }
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let contract_id = env.contract(HireEnv::input("hello"), json!({})).await;
    let first = env.execute(&contract_id, None, None).await;
    let second = env.execute(&contract_id, None, None).await;
    assert_eq!(first.status, 402);
    assert_eq!(
        first.header("payment-required"),
        second.header("payment-required"),
        "one offer, signed once"
    );
    let challenge: PaymentRequired = first.payment_required();
    let jwks = jwks(&env).await;
    let base: url::Url = env.app.address.parse().unwrap();
    let offers = offers_in(&challenge.extensions).unwrap();
    let offer: OfferPayload = verify_artifact(&offers[0], &jwks, &base).unwrap();
    assert!(offer.matches(&challenge.accepts[0]));
    assert_eq!(
        offer.resource_url,
        format!("{}/v1/contracts/{contract_id}/execute", env.app.address)
    );

    let payment = env.pay(&challenge).await;
    let paid = env
        .execute(&contract_id, Some(&payment), Some(&HireEnv::input("hello")))
        .await;
    assert_eq!(paid.status, 200, "{:#}", paid.body);
    let header = paid.header("payment-response").unwrap().to_owned();
    let verdicts = official_verdicts(
        &env,
        &serde_json::to_value(&challenge).unwrap(),
        Some(&header),
    )
    .await;
    assert_eq!(verdicts["offers"][0]["matchesAccept"], true, "{verdicts:#}");
    let settlement = paid.payment_response();
    assert_eq!(
        verdicts["receipt"]["payload"]["transaction"],
        settlement.transaction.as_str(),
        "{verdicts:#}"
    );
    assert_eq!(verdicts["receiptMatchesOffer"], true, "{verdicts:#}");
    assert_eq!(
        transfers_to(&env, &settlement.transaction, env.pay_to).await,
        vec![(env.devnet.token(), U256::from(crate::hire_env::PRICE))]
    );

    let replayed = env
        .execute(&contract_id, Some(&payment), Some(&HireEnv::input("hello")))
        .await;
    assert_eq!(replayed.status, 200);
    assert_eq!(replayed.header("payment-response"), Some(header.as_str()));
}
