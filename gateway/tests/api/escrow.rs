//! Escrowed hires (x402 `auth-capture`): listings that accept the scheme and set a fee, proposals
//! that ask for it, the signed terms and the 402 offer that pin the escrow, and the bounds that
//! let escrowed contracts run long while `exact` ones stay within one authorization.
//!
//! Real parts: an anvil devnet (the asset's EIP-712 domain is read from its token), a real
//! gateway, a real worker-sdk worker.

use alloy::signers::local::PrivateKeySigner;
use hiregate_store::states::PaymentState;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    escrow_env::{
        EscrowEnv, escrow_env, escrow_env_with, escrowed_offer_and_payment, escrowed_payment,
        price, token_store,
    },
    helpers::TestDatabase,
    hire_env::{HireEnv, PRICE, WorkerKind, hire_listing, now},
};

/// The canonical v1.0 `AuthCaptureEscrow` the offers name by default.
const CANONICAL_ESCROW: &str = "0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff";

async fn refused(env: &HireEnv, extra: Value) -> (u16, Value) {
    let response = env.propose(HireEnv::input("x"), extra).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn an_auth_capture_contract_pins_the_escrow_in_its_terms_and_its_402() {
    let EscrowEnv {
        env,
        operator,
        treasury,
        ..
    } = escrow_env(
        TestDatabase::sqlite(),
        json!(["exact", "auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;

    // The listing shows what it accepts.
    let listing: Value = env
        .app
        .client
        .get(format!("{}/v1/workers/{}", env.app.address, env.worker_id))
        .bearer_auth(&env.operator_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["payment_schemes"], json!(["exact", "auth-capture"]));
    assert_eq!(listing["fee_policy"], json!({"fee_bps": 250}));

    // No scheme asked: the listing's first, exact, as before (no escrow in the terms).
    let response = env.propose(HireEnv::input("plain"), json!({})).await;
    assert_eq!(response.status(), 201);
    let plain: Value = response.json().await.unwrap();
    assert_eq!(plain["terms"]["price"]["scheme"], "exact");
    assert!(plain["terms"].get("escrow").is_none(), "{plain}");
    let exact_offer = &plain["payment"]["x402"]["accepts"][0];
    assert_eq!(exact_offer["scheme"], "exact");
    assert_eq!(
        exact_offer["extra"].as_object().unwrap().len(),
        2,
        "{exact_offer}"
    );

    // Escrowed, with a long poll window and an acceptance window of hours.
    let before = now();
    let response = env
        .propose(
            HireEnv::input("escrowed"),
            json!({
                "payment_scheme": "auth-capture",
                "acceptance_window_s": 7200,
                "sla": {"max_latency_ms": 5000, "poll_window_s": 36000},
                "retry_policy": {"max_attempts": 2},
            }),
        )
        .await;
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    let contract_id = created["contract_id"].as_str().unwrap().to_owned();
    let terms = &created["terms"];
    assert_eq!(terms["price"]["scheme"], "auth-capture");
    let escrow = &terms["escrow"];
    assert_eq!(escrow["escrow"], CANONICAL_ESCROW);
    assert_eq!(escrow["capture_authorizer"], operator.to_checksum(None));
    assert_eq!(escrow["fee_recipient"], treasury.to_checksum(None));
    assert_eq!(escrow["min_fee_bps"], 250);
    assert_eq!(escrow["max_fee_bps"], 250);

    // The 402 offers exactly that scheme with the spec's extra.
    let challenge = env.challenge(&contract_id).await;
    assert_eq!(challenge.accepts.len(), 1);
    let offer = &challenge.accepts[0];
    assert_eq!(offer.scheme, "auth-capture");
    assert_eq!(offer.pay_to, env.pay_to.to_checksum(None));
    assert_eq!(offer.amount.to_string(), PRICE.to_string());
    // escrow.payment_window_s: only the authorization must be mined in time.
    assert_eq!(offer.max_timeout_seconds, 300);
    let extra = Value::Object(offer.extra.clone());
    // The token's EIP-712 domain, as in the exact offer.
    assert_eq!(extra["name"], exact_offer["extra"]["name"], "{extra}");
    assert_eq!(extra["version"], exact_offer["extra"]["version"], "{extra}");
    assert_eq!(extra["captureAuthorizer"], operator.to_checksum(None));
    assert_eq!(extra["feeRecipient"], treasury.to_checksum(None));
    assert_eq!(extra["minFeeBps"], 250);
    assert_eq!(extra["maxFeeBps"], 250);
    assert_eq!(extra["autoCapture"], false);
    assert_eq!(extra["assetTransferMethod"], "eip3009");
    assert_eq!(extra["authCaptureEscrow"], CANONICAL_ESCROW);
    let capture_deadline = extra["captureDeadline"].as_u64().unwrap();
    let refund_deadline = extra["refundDeadline"].as_u64().unwrap();
    // Offer ttl (900) + payment (300) + 2 × (5 + 36000) + verification (30) + acceptance
    // (7200) + capture margin (600), counted from creation.
    let span = 900 + 300 + 2 * (5 + 36_000) + 30 + 7_200 + 600;
    assert!(capture_deadline >= before + span, "{capture_deadline}");
    assert!(capture_deadline <= now() + span + 2, "{capture_deadline}");
    assert_eq!(refund_deadline - capture_deadline, 604_800);
    assert_eq!(
        escrow["capture_deadline"],
        chrono::DateTime::from_timestamp(i64::try_from(capture_deadline).unwrap(), 0)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    );
}

#[tokio::test]
async fn exact_refuses_what_one_authorization_cannot_cover_and_escrow_bounds_hold() {
    let EscrowEnv { env, .. } = escrow_env(
        TestDatabase::sqlite(),
        json!(["auth-capture", "exact"]),
        Value::Null,
    )
    .await;

    // The listing prefers auth-capture: a proposal naming no scheme is escrowed, at the
    // default fee (escrow.default_fee_bps = 0).
    let response = env.propose(HireEnv::input("d"), json!({})).await;
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["terms"]["price"]["scheme"], "auth-capture");
    assert_eq!(created["terms"]["escrow"]["max_fee_bps"], 0);

    for (extra, code, limit) in [
        (
            json!({"payment_scheme": "exact", "acceptance_window_s": 7200}),
            "authorization_window_too_long",
            "contracts.max_authorization_window_s",
        ),
        (
            json!({"payment_scheme": "exact", "sla": {"max_latency_ms": 5000, "poll_window_s": 36000}}),
            "poll_window_too_long",
            "contracts.max_authorization_window_s",
        ),
        (
            json!({"payment_scheme": "auth-capture", "acceptance_window_s": 86_401}),
            "acceptance_window_too_long",
            "escrow.max_acceptance_window_s",
        ),
    ] {
        let (status, body) = refused(&env, extra.clone()).await;
        assert_eq!(status, 422, "{extra}: {body}");
        assert_eq!(body["error"]["code"], code, "{extra}: {body}");
        assert_eq!(body["error"]["details"]["limit"], limit, "{extra}: {body}");
    }
    // An unknown scheme is a bad body, not a silent exact.
    let (status, body) = refused(&env, json!({"payment_scheme": "batch-settlement"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_body");
    // A known scheme the listing does not take is refused as such.
    let (status, body) = refused(&env, json!({"payment_scheme": "upto"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "payment_scheme_not_accepted");
}

#[tokio::test]
async fn listings_refuse_bad_schemes_and_fees_and_exact_only_listings_refuse_escrow() {
    let EscrowEnv { env, .. } =
        escrow_env(TestDatabase::sqlite(), json!(["exact"]), Value::Null).await;
    let (status, body) = refused(&env, json!({"payment_scheme": "auth-capture"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "payment_scheme_not_accepted");
    assert_eq!(body["error"]["details"]["accepted"], json!(["exact"]));

    let base = hire_listing(&env.worker.endpoint, env.pay_to, &env.devnet, 1);
    for (field, value, fault) in [
        ("payment_schemes", json!([]), None),
        ("payment_schemes", json!(["exact", "exact"]), None),
        ("payment_schemes", json!(["auth_capture"]), None),
        // Above this gateway's escrow.max_fee_bps (500).
        (
            "fee_policy",
            json!({"fee_bps": 501}),
            Some("fee_policy.fee_bps"),
        ),
    ] {
        let mut listing = base.clone();
        listing[field] = value.clone();
        let response = env.app.register_worker(&env.operator_key, &listing).await;
        assert_eq!(response.status(), 422, "{field} = {value}");
        let body: Value = response.json().await.unwrap();
        if let Some(fault) = fault {
            assert_eq!(body["error"]["code"], "validation_failed", "{body}");
            assert_eq!(body["error"]["details"]["field"], fault, "{body}");
        }
    }
    // A PATCH is held to the same bound.
    let response = env
        .app
        .send_json(
            Method::PATCH,
            &format!("/v1/workers/{}", env.worker_id),
            Some(&env.operator_key),
            &json!({"fee_policy": {"fee_bps": 10_000}, "payment_schemes": ["auth-capture"]}),
        )
        .await;
    assert_eq!(response.status(), 422);
}

#[tokio::test]
async fn a_gateway_without_an_operator_key_offers_no_escrow() {
    let env = crate::hire_env::hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 1, "").await;
    let response = env
        .app
        .send_json(
            Method::PATCH,
            &format!("/v1/workers/{}", env.worker_id),
            Some(&env.operator_key),
            &json!({"payment_schemes": ["exact", "auth-capture"]}),
        )
        .await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let (status, body) = refused(&env, json!({"payment_scheme": "auth-capture"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "escrow_not_available");
    // Exact still works.
    assert_eq!(
        env.propose(HireEnv::input("e"), json!({})).await.status(),
        201
    );
}

#[tokio::test]
async fn listing_schemes_and_fees_round_trip_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    let EscrowEnv { env, .. } = escrow_env(
        database,
        json!(["auth-capture", "exact"]),
        json!({"fee_bps": 500}),
    )
    .await;
    let response = env.propose(HireEnv::input("pg"), json!({})).await;
    assert_eq!(response.status(), 201);
    let created: Value = response.json().await.unwrap();
    assert_eq!(created["terms"]["escrow"]["min_fee_bps"], 500);
}

/// Lock → verified → capture with the fee: the payer pays the price once, the worker gets the
/// price minus 2.5 %, the treasury the fee, the operator's token store ends empty, and the
/// execute answers 200 with the deliverable and a PAYMENT-RESPONSE naming the capture.
#[tokio::test]
async fn an_escrowed_hire_locks_then_captures_with_the_fee() {
    use hiregate_payments::encode_header;
    let EscrowEnv {
        env,
        operator,
        treasury,
        ..
    } = escrow_env(
        TestDatabase::sqlite(),
        json!(["auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let store = token_store(&env, operator).await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;
    let contract_id = env.contract(HireEnv::input("escrowed"), json!({})).await;
    let payload = escrowed_payment(&env, &contract_id).await;

    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "settled");
    assert!(
        answer.body.to_string().contains("escrowed"),
        "the deliverable is released: {:?}",
        answer.body
    );
    let settlement = answer.payment_response();
    assert!(settlement.success);

    let fee = price() * alloy::primitives::U256::from(250) / alloy::primitives::U256::from(10_000);
    assert_eq!(env.balance(payer).await, payer_before - price());
    assert_eq!(env.balance(env.pay_to).await, price() - fee);
    assert_eq!(env.balance(treasury).await, fee);
    assert_eq!(env.balance(store).await, alloy::primitives::U256::ZERO);

    let payment = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.state, PaymentState::Settled);
    assert!(payment.authorize_tx.is_some());
    assert_eq!(
        payment.settle_tx.as_deref(),
        Some(settlement.transaction.as_str())
    );
    let kinds = env.event_kinds(&contract_id).await;
    for kind in [
        "authorization_sent",
        "payment_authorized",
        "verification_passed",
        "settlement_succeeded",
    ] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "{kind} missing from {kinds:?}"
        );
    }

    // The same payment again: answered from the stored state, nothing moves twice.
    let again = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    answer.assert_replayed_by(&again);
    assert_eq!(env.balance(payer).await, payer_before - price());
    assert_eq!(env.balance(env.pay_to).await, price() - fee);
}

/// Lock → rejected → void: the payer is made whole to the atomic unit, the worker and the
/// treasury get nothing, and the escrow's void is recorded with its transaction.
#[tokio::test]
async fn an_escrowed_rejection_voids_and_the_payer_is_made_whole() {
    use hiregate_payments::encode_header;
    let EscrowEnv { env, treasury, .. } = escrow_env_with(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        json!(["auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;
    let contract_id = env
        .contract(json!({"text": "x", "mode": "invalid"}), json!({}))
        .await;
    let payload = escrowed_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(answer.code(), "verification_failed");
    assert_eq!(env.state(&contract_id).await, "voided");
    assert_eq!(env.balance(payer).await, payer_before);
    assert_eq!(env.balance(env.pay_to).await, alloy::primitives::U256::ZERO);
    assert_eq!(env.balance(treasury).await, alloy::primitives::U256::ZERO);
    let payment = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.state, PaymentState::Voided);
    assert!(payment.authorize_tx.is_some());
    assert!(payment.release_tx.is_some());
    // The content of rejected work is never shown.
    assert!(answer.body.get("result").is_none(), "{:?}", answer.body);
    assert!(
        !answer.body.to_string().contains("\"content\""),
        "{:?}",
        answer.body
    );
}

/// The seeker empties its wallet while the worker runs: under `auth-capture` the money was
/// locked before work started, so the worker is paid anyway.
#[tokio::test]
async fn a_payer_who_empties_its_wallet_mid_run_still_pays_the_worker() {
    use hiregate_payments::encode_header;
    let EscrowEnv { env, .. } = escrow_env_with(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        json!(["auth-capture"]),
        Value::Null,
    )
    .await;
    let payer = env.wallet.address();
    let contract_id = env
        .contract(json!({"text": "x", "mode": "slow"}), json!({}))
        .await;
    let payload = escrowed_payment(&env, &contract_id).await;
    let header = encode_header(&payload);
    let execute = env.execute(&contract_id, Some(&header), None);
    let drain = async {
        // Once the escrow holds the price, move everything else away.
        for _ in 0..200 {
            if env.state(&contract_id).await == "executing" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let rest = env.balance(payer).await;
        let sink = PrivateKeySigner::random().address();
        env.devnet
            .transfer_tokens(&env.wallet, sink, rest)
            .await
            .expect("payer drains its wallet");
        assert_eq!(env.balance(payer).await, alloy::primitives::U256::ZERO);
    };
    let (answer, ()) = tokio::join!(execute, drain);
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "settled");
    assert_eq!(env.balance(env.pay_to).await, price());
}

/// An arbiter refunds a captured contract before the refund deadline: the price comes from the
/// operator's own wallet through the refund collector, the worker keeps its payout, and the
/// contract ends `refunded`; an operator wallet too poor to fund it changes nothing.
#[tokio::test]
async fn an_arbiter_refunds_a_capture_from_the_operator_wallet() {
    use hiregate_payments::encode_header;
    let EscrowEnv { env, operator, .. } =
        escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let payer = env.wallet.address();
    let contract_id = env.contract(HireEnv::input("refund me"), json!({})).await;
    let payload = escrowed_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let after_capture = env.balance(payer).await;
    let refund = |key: &'static str| {
        let env = &env;
        let contract_id = contract_id.clone();
        async move {
            env.app
                .send_json(
                    Method::POST,
                    &format!("/v1/contracts/{contract_id}/refund"),
                    Some(key),
                    &json!({"reason": "arbiter found the work unusable"}),
                )
                .await
        }
    };
    // The operator holds no tokens: nothing can be refunded, nothing changes, and not even
    // the collector's approval is sent (the whole refund is simulated first).
    let sent = env.devnet.transaction_count(operator).await.unwrap();
    let response = refund(crate::helpers::ADMIN_KEY).await;
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "refund_not_funded", "{body}");
    assert_eq!(env.state(&contract_id).await, "settled");
    assert_eq!(env.devnet.transaction_count(operator).await.unwrap(), sent);

    env.devnet
        .mint(operator, price())
        .await
        .expect("fund the operator");
    // Only the arbiter (admin) may refund.
    let response = refund_as_seeker(&env, &contract_id).await;
    assert!(matches!(response, 401 | 403 | 404), "{response}");
    let response = refund(crate::helpers::ADMIN_KEY).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["state"], "refunded", "{body}");
    assert_eq!(env.state(&contract_id).await, "refunded");
    assert_eq!(env.balance(payer).await, after_capture + price());
    assert_eq!(env.balance(operator).await, alloy::primitives::U256::ZERO);
    assert_eq!(env.balance(env.pay_to).await, price());
    // Twice is once.
    let response = refund(crate::helpers::ADMIN_KEY).await;
    assert_eq!(response.status(), 200);
    assert_eq!(env.balance(payer).await, after_capture + price());
}

/// The chain's clock past the escrow's refund deadline while the gateway's is not: the refund
/// is refused as `refund_window_closed` (the escrow's `AfterRefundExpiry`), with no transaction
/// sent (not even the collector's approval) and nothing changed, although the operator could
/// fund it.
#[tokio::test]
async fn a_refund_past_the_deadline_by_the_chains_clock_is_refused_and_sends_nothing() {
    use hiregate_payments::encode_header;
    let EscrowEnv { env, operator, .. } =
        escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let payer = env.wallet.address();
    let contract_id = env.contract(HireEnv::input("too late"), json!({})).await;
    let (offer, payload) = escrowed_offer_and_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "settled");
    env.devnet
        .mint(operator, price())
        .await
        .expect("fund the operator");
    let refund_deadline = offer.extra["refundDeadline"].as_u64().unwrap();
    let chain_now = env.devnet.block_time().await.unwrap();
    env.devnet
        .advance_time(refund_deadline - chain_now + 10)
        .await
        .unwrap();
    assert!(
        now() < refund_deadline,
        "the gateway's clock is before the deadline"
    );
    let payer_before = env.balance(payer).await;
    let sent = env.devnet.transaction_count(operator).await.unwrap();

    let response = env
        .app
        .send_json(
            Method::POST,
            &format!("/v1/contracts/{contract_id}/refund"),
            Some(crate::helpers::ADMIN_KEY),
            &json!({"reason": "the arbiter is late"}),
        )
        .await;
    assert_eq!(response.status(), 409);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "refund_window_closed", "{body}");
    assert_eq!(
        env.devnet.transaction_count(operator).await.unwrap(),
        sent,
        "no transaction was sent"
    );
    assert_eq!(env.state(&contract_id).await, "settled");
    let payment = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.state, PaymentState::Settled);
    assert_eq!(env.balance(payer).await, payer_before);
    assert_eq!(env.balance(operator).await, price());
}

/// The chain's clock close to the escrow's capture deadline while the gateway's clock is an hour
/// away from it (a long acceptance window): the deadline sweep judges by the chain's clock and
/// captures before the escrow stops allowing it, instead of leaving the payer a reclaim.
#[tokio::test]
async fn the_capture_deadline_is_judged_by_the_chains_clock() {
    use hiregate_payments::encode_header;
    let EscrowEnv { env, .. } =
        escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let contract_id = env
        .contract(
            HireEnv::input("capture in time"),
            json!({"acceptance_window_s": 3600}),
        )
        .await;
    let (offer, payload) = escrowed_offer_and_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "accepted");
    let capture_deadline = offer.extra["captureDeadline"].as_u64().unwrap();
    // Inside `contracts.settlement_margin_s` (120 s) of the deadline by the chain's clock.
    let chain_now = env.devnet.block_time().await.unwrap();
    env.devnet
        .advance_time(capture_deadline - 100 - chain_now)
        .await
        .unwrap();
    let mut state = String::new();
    for _ in 0..300 {
        state = env.state(&contract_id).await;
        if state == "settled" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "settled");
    assert_eq!(env.balance(env.pay_to).await, price());
    let kinds = env.event_kinds(&contract_id).await;
    assert!(
        kinds.contains(&"authorization_deadline_reached".to_owned()),
        "{kinds:?}"
    );
}

async fn refund_as_seeker(env: &HireEnv, contract_id: &str) -> u16 {
    env.app
        .send_json(
            Method::POST,
            &format!("/v1/contracts/{contract_id}/refund"),
            Some(&env.seeker_key),
            &json!({"reason": "I want my money"}),
        )
        .await
        .status()
        .as_u16()
}

/// The same escrowed hire on PostgreSQL: lock, capture, balances exact.
#[tokio::test]
async fn an_escrowed_hire_captures_on_postgres() {
    use hiregate_payments::encode_header;
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    let EscrowEnv { env, treasury, .. } =
        escrow_env(database, json!(["auth-capture"]), json!({"fee_bps": 100})).await;
    let contract_id = env.contract(HireEnv::input("pg"), json!({})).await;
    let payload = escrowed_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let fee = price() / alloy::primitives::U256::from(100);
    assert_eq!(env.balance(env.pay_to).await, price() - fee);
    assert_eq!(env.balance(treasury).await, fee);
}

/// More than an hour of chain time between lock and capture (what no `exact` authorization
/// can span): a pending worker finishes after the chain's clock moved 61 minutes, and the
/// capture still lands before the escrow's capture deadline.
#[tokio::test]
async fn an_escrowed_contract_pending_for_over_an_hour_of_chain_time_is_captured() {
    use hiregate_payments::encode_header;
    let EscrowEnv { env, .. } = escrow_env_with(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        json!(["auth-capture"]),
        Value::Null,
    )
    .await;
    let contract_id = env
        .contract(
            json!({"text": "long", "mode": "pending"}),
            json!({"sla": {"max_latency_ms": 5000, "poll_window_s": 36000}}),
        )
        .await;
    let payload = escrowed_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 202, "{:?}", answer.body);
    env.devnet.advance_time(3_660).await.unwrap();
    let mut state = String::new();
    for _ in 0..300 {
        state = env.state(&contract_id).await;
        if state == "settled" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "settled");
    assert_eq!(env.balance(env.pay_to).await, price());
}

/// The gateway never captures (a long acceptance window on its clock) while the chain's clock
/// passes the capture deadline: the payer reclaims on chain, and the gateway records it as
/// `voided` by actor `payer`, with the payer made whole.
#[tokio::test]
async fn a_payer_reclaim_after_the_capture_deadline_is_recorded() {
    use alloy::{
        network::TransactionBuilder as _,
        providers::{Provider as _, ProviderBuilder},
        rpc::types::{TransactionInput, TransactionRequest},
        sol_types::SolCall as _,
    };
    use hiregate_payments::{
        EscrowAddresses, auth_capture::abi::IAuthCaptureEscrow, encode_header,
    };
    let EscrowEnv { env, .. } =
        escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;
    let contract_id = env
        .contract(HireEnv::input("held"), json!({"acceptance_window_s": 3600}))
        .await;
    let (offer, payload) = escrowed_offer_and_payment(&env, &contract_id).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "accepted");
    assert_eq!(env.balance(payer).await, payer_before - price());

    // The chain's clock jumps past the capture deadline in the reclaim's own block: before it
    // the gateway (which acts on the chain's clock) has no deadline to act on, after it the
    // money is back with the payer.
    let capture_deadline = offer.extra["captureDeadline"].as_u64().unwrap();
    env.devnet
        .set_next_block_timestamp(capture_deadline + 10)
        .await
        .unwrap();
    let info =
        hiregate_engine::hire::escrow::payment_info(&payload, &offer, EscrowAddresses::default())
            .unwrap();
    let reclaim = IAuthCaptureEscrow::reclaimCall { paymentInfo: info };
    let wallet = ProviderBuilder::new()
        .wallet(env.wallet.clone())
        .connect_http(env.devnet.rpc_url().clone());
    let receipt = wallet
        .send_transaction(
            TransactionRequest::default()
                .with_to(env.devnet.auth_capture_escrow())
                .input(TransactionInput::new(reclaim.abi_encode().into())),
        )
        .await
        .unwrap()
        .get_receipt()
        .await
        .unwrap();
    assert!(receipt.status());
    assert_eq!(env.balance(payer).await, payer_before);

    let mut state = String::new();
    for _ in 0..300 {
        state = env.state(&contract_id).await;
        if state == "voided" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(state, "voided");
    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    let reclaimed = events
        .iter()
        .find(|e| e.kind.as_str() == "payment_reclaimed")
        .expect("reclaim recorded");
    assert_eq!(reclaimed.actor.to_string(), "payer");
    let payment = env
        .app
        .store
        .payment_of_contract(&contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.state, PaymentState::Reclaimed);
    assert_eq!(
        payment.release_tx.as_deref(),
        Some(receipt.transaction_hash.to_string().as_str())
    );
    assert_eq!(env.balance(env.pay_to).await, alloy::primitives::U256::ZERO);
}
