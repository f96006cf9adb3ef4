//! Escrowed hires (x402 `auth-capture`): listings that accept the scheme and set a fee, proposals
//! that ask for it, the signed terms and the 402 offer that pin the escrow, and the bounds that
//! let escrowed contracts run long while `exact` ones stay within one authorization.
//!
//! Real parts: an anvil devnet (the asset's EIP-712 domain is read from its token), a real
//! gateway, a real worker-sdk worker.

use alloy::{primitives::Address, signers::local::PrivateKeySigner};
use hiregate_payments::devnet::Devnet;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, spawn_app_on},
    hire_env::{HireEnv, PRICE, WorkerKind, hire_listing, now, start_worker},
};

/// The canonical v1.0 `AuthCaptureEscrow` the offers name by default.
const CANONICAL_ESCROW: &str = "0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff";

struct EscrowEnv {
    env: HireEnv,
    operator: Address,
    treasury: Address,
    /// The gateway's settings overrides, to build its escrow operators in the test.
    settings: String,
}

/// A gateway whose devnet chain has an escrow operator key and a treasury, and a worker
/// listing that accepts `schemes` with `fee_policy`.
async fn escrow_env(database: TestDatabase, schemes: Value, fee_policy: Value) -> EscrowEnv {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let operator = PrivateKeySigner::random();
    let treasury = PrivateKeySigner::random().address();
    let settings = format!(
        r#"
        [chains.devnet]
        network = "{network}"
        rpc_url = "{rpc}"
        relayer_private_key = "{relayer}"
        operator_private_key = "{operator}"
        [outbound]
        request_timeout_ms = 10000
        [escrow]
        treasury = "{treasury}"
        max_fee_bps = 500
        "#,
        network = devnet.network(),
        rpc = devnet.rpc_url(),
        relayer = devnet.relayer().to_bytes(),
        operator = operator.to_bytes(),
    );
    let app = spawn_app_on(database, &settings).await;
    let (operator_key, _) = app.create_key("operator").await;
    let (seeker_key, _) = app.create_key("seeker").await;
    let worker = start_worker(WorkerKind::Echo, &app.address).await;
    let pay_to = PrivateKeySigner::random().address();
    let mut listing = hire_listing(&worker.endpoint, pay_to, &devnet, 4);
    listing["payment_schemes"] = schemes;
    if !fee_policy.is_null() {
        listing["fee_policy"] = fee_policy;
    }
    let response = app.register_worker(&operator_key, &listing).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    let worker_id = body["id"].as_str().unwrap().to_owned();
    let wallet = devnet
        .funded_account(alloy::primitives::U256::from(crate::hire_env::SEEKER_FUNDS))
        .await
        .expect("funded seeker");
    EscrowEnv {
        env: HireEnv {
            devnet,
            app,
            operator_key,
            seeker_key,
            worker,
            worker_id,
            pay_to,
            wallet,
        },
        operator: operator.address(),
        treasury,
        settings,
    }
}

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
    let (status, body) = refused(&env, json!({"payment_scheme": "upto"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_body");
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

#[tokio::test]
async fn an_escrowed_payment_matches_the_offer_but_is_not_run_yet_and_nothing_moves() {
    use hiregate_payments::{
        AuthCaptureSignOptions, EscrowAddresses, auth_capture::precheck, encode_header,
        sign_auth_capture_payment,
    };
    let EscrowEnv { env, .. } = escrow_env(
        TestDatabase::sqlite(),
        json!(["auth-capture"]),
        json!({"fee_bps": 100}),
    )
    .await;
    let contract_id = env.contract(HireEnv::input("locked"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let offer = &challenge.accepts[0];
    // The payments crate's client (which mirrors the official @x402/evm one) signs our offer,
    // and the spec's node-free checks accept the result against it: the 402 is well-formed.
    let payload = sign_auth_capture_payment(
        &env.wallet,
        offer,
        Some(challenge.resource.clone()),
        now(),
        &AuthCaptureSignOptions::default(),
    )
    .await
    .unwrap();
    let payment = precheck(&payload, offer, EscrowAddresses::default(), now()).unwrap();
    assert_eq!(payment.payer(), env.wallet.address());
    assert_eq!(payment.info.receiver, env.pay_to);
    assert_eq!(payment.info.minFeeBps, 100);

    let payer_before = env.balance(env.wallet.address()).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&payload)), None)
        .await;
    assert_eq!(answer.status, 422, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_scheme_not_enabled");

    // A payment signed for other terms (a later capture deadline) fails the nonce check.
    let mut other = offer.clone();
    let deadline = other.extra["captureDeadline"].as_u64().unwrap();
    other
        .extra
        .insert("captureDeadline".into(), json!(deadline + 60));
    let mut forged = sign_auth_capture_payment(
        &env.wallet,
        &other,
        Some(challenge.resource.clone()),
        now(),
        &AuthCaptureSignOptions::default(),
    )
    .await
    .unwrap();
    forged.accepted = offer.clone();
    let answer = env
        .execute(&contract_id, Some(&encode_header(&forged)), None)
        .await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    assert!(
        answer.body.to_string().contains("nonce_mismatch"),
        "{:?}",
        answer.body
    );

    assert_eq!(env.state(&contract_id).await, "offered");
    assert!(
        env.app
            .store
            .payment_of_contract(&contract_id)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(env.balance(env.wallet.address()).await, payer_before);
    assert_eq!(env.worker.executions(), 0);
}

/// `getTokenStore(operator)`: where the escrow keeps an operator's authorized funds.
async fn token_store(env: &HireEnv, operator: Address) -> Address {
    use alloy::{
        providers::Provider as _,
        rpc::types::{TransactionInput, TransactionRequest},
        sol_types::SolCall as _,
    };
    use hiregate_payments::auth_capture::abi::IAuthCaptureEscrow;
    let call = IAuthCaptureEscrow::getTokenStoreCall { operator };
    let request = TransactionRequest::default()
        .to(env.devnet.auth_capture_escrow())
        .input(TransactionInput::new(call.abi_encode().into()));
    let bytes = env.devnet.provider().call(request).await.unwrap();
    IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(&bytes).unwrap()
}

/// The gateway's own escrow operator (built from its config) drives the devnet escrow for a
/// payment signed over the gateway's 402: authorize locks the price in the operator's token
/// store, capture pays the worker the price minus the terms' fee and the treasury the fee; a
/// second payment voided gives the payer back exactly what it paid. These are the calls the
/// escrowed lifecycle makes; the HTTP lifecycle itself does not run them yet.
#[tokio::test]
async fn the_gateway_operator_captures_with_the_terms_fee_and_voids_exactly() {
    use hiregate_contracts::terms::ContractTerms;
    use hiregate_gateway::{
        config::Settings,
        hire::escrow::{CaptureOrder, EscrowOperators, payment_info},
    };
    use hiregate_payments::{AuthCaptureSignOptions, sign_auth_capture_payment};

    let EscrowEnv {
        env,
        operator,
        treasury,
        settings,
    } = escrow_env(
        TestDatabase::sqlite(),
        json!(["auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let settings = Settings::from_defaults_and(&settings).unwrap();
    let operators = EscrowOperators::from_settings(&settings).unwrap();
    let escrow_operator = operators
        .get(env.devnet.chain_id())
        .expect("devnet operator");
    assert_eq!(escrow_operator.operator(), operator);
    assert_eq!(
        escrow_operator.addresses().escrow,
        env.devnet.auth_capture_escrow()
    );
    env.devnet
        .set_eth_balance(operator, alloy::primitives::U256::from(10u128.pow(19)))
        .await
        .unwrap();

    let authorize = |contract_id: String| {
        let env = &env;
        async move {
            let response = env
                .app
                .client
                .get(format!("{}/v1/contracts/{contract_id}", env.app.address))
                .bearer_auth(&env.seeker_key)
                .send()
                .await
                .unwrap();
            let view: Value = response.json().await.unwrap();
            let terms: ContractTerms = serde_json::from_value(view["terms"].clone())
                .unwrap_or_else(|e| panic!("terms in {view}: {e}"));
            let challenge = env.challenge(&contract_id).await;
            let offer = challenge.accepts[0].clone();
            let payload = sign_auth_capture_payment(
                &env.wallet,
                &offer,
                Some(challenge.resource.clone()),
                now(),
                &AuthCaptureSignOptions::default(),
            )
            .await
            .unwrap();
            let info = payment_info(&payload, &offer, escrow_operator.addresses()).unwrap();
            let signature = payload.auth_capture_evm().unwrap().signature;
            escrow_operator
                .authorize(
                    &info,
                    offer.amount.get(),
                    escrow_operator.addresses().erc3009_collector,
                    signature,
                )
                .await
                .unwrap();
            (terms, info)
        }
    };

    let price = alloy::primitives::U256::from(PRICE);
    let payer = env.wallet.address();
    let store = token_store(&env, operator).await;
    let payer_start = env.balance(payer).await;

    // Lock → capture with the fee.
    let captured_id = env.contract(HireEnv::input("captured"), json!({})).await;
    let (terms, info) = authorize(captured_id).await;
    assert_eq!(env.balance(payer).await, payer_start - price);
    assert_eq!(env.balance(store).await, price);
    let state = escrow_operator.payment_state(&info).await.unwrap();
    assert!(state.has_collected_payment);
    assert_eq!(state.capturable_amount, price);

    let order = CaptureOrder::of(&terms).unwrap();
    assert_eq!(order.fee_receiver, treasury);
    assert_eq!(order.fee(), alloy::primitives::U256::from(37_500));
    escrow_operator
        .capture(&info, order.amount, order.fee_bps, order.fee_receiver)
        .await
        .unwrap();
    assert_eq!(env.balance(env.pay_to).await, price - order.fee());
    assert_eq!(env.balance(treasury).await, order.fee());
    assert_eq!(env.balance(store).await, alloy::primitives::U256::ZERO);
    let state = escrow_operator.payment_state(&info).await.unwrap();
    assert_eq!(state.capturable_amount, alloy::primitives::U256::ZERO);
    assert_eq!(state.refundable_amount, price);
    // Never a second capture: the escrow refuses it and nothing moves.
    assert!(
        escrow_operator
            .capture(&info, order.amount, order.fee_bps, order.fee_receiver)
            .await
            .is_err()
    );
    assert_eq!(env.balance(env.pay_to).await, price - order.fee());

    // Lock → void: the payer is made whole exactly.
    let before_void = env.balance(payer).await;
    let voided_id = env.contract(HireEnv::input("voided"), json!({})).await;
    let (_, info) = authorize(voided_id).await;
    assert_eq!(env.balance(payer).await, before_void - price);
    escrow_operator.void(&info).await.unwrap();
    assert_eq!(env.balance(payer).await, before_void);
    assert_eq!(env.balance(store).await, alloy::primitives::U256::ZERO);
    // Never a capture of voided money.
    assert!(
        escrow_operator
            .capture(&info, price, order.fee_bps, order.fee_receiver)
            .await
            .is_err()
    );
    assert_eq!(env.balance(payer).await, before_void);
}
