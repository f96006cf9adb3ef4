//! `upto` metered by what the gateway measured, on the same real parts as [`crate::upto`]
//! (anvil with Permit2 and the x402 `upto` proxy, the devnet's plain ERC-20, the embedded
//! facilitator, the official `@x402/evm` 2.27 `upto` client signing unchanged):
//!
//! - per stream **event** the gateway relayed: a stream cut after 40 of 100 events is delivered
//!   as a partial and pays 40 units; a worker claiming more events than it sent is paid for the
//!   events relayed;
//! - per **token** and per **second** the worker reports (`metadata.usage`), capped by the
//!   gateway's own bound: the output's UTF-8 bytes, the attempt's wall time.
//!
//! The stream worker is a small axum stub, as in [`crate::outputs`]: an SDK worker never breaks
//! its stream mid-way, and the cut is the fault under test. The token and second worker is an
//! SDK worker that over-reports on purpose.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::primitives::U256;
use axum::{
    Json, Router,
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, header},
    response::Response,
    routing::{get, post},
};
use hiregate_contracts::{deliverable::Output, reputation::Window, token::Jwks};
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::{
    GatewayKeys, TaskContext, TaskOutcome, WorkerBuilder, receipt::verify_receipt,
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, spawn_app_on},
    hire_env::{Answer, HireEnv, assert_reconciled, chain_settings, listed_env, serve_worker},
    upto::{allowance, assert_permit_unused, balances, official_upto_payment},
};

/// Price of one stream event or one second.
const UNIT: u64 = 10_000;
/// Price of one token.
const TOKEN_UNIT: u64 = 10;
/// Most events, tokens and seconds one contract pays for.
const MAX_EVENTS: u64 = 100;
const MAX_TOKENS: u64 = 10_000;
const MAX_SECONDS: u64 = 60;
/// What the payer lets Permit2 move, approved once.
const ALLOWANCE: u64 = 50_000_000;

fn metered(price: u64, unit: &str, max_units: u64) -> Value {
    json!({
        "price": price.to_string(),
        "output_schema": {"type": "string", "minLength": 1},
        "metering": {"unit": unit, "max_units": max_units},
    })
}

/// An SDK worker whose `write` answers `input.text` and whose `work` sleeps `input.sleep_ms`
/// first; both report `input.claim` (when given) as their `usage` of the unit `input.unit`.
async fn reporting_worker(gateway: &str) -> crate::hire_env::RunningWorker {
    let handler = |_ctx: TaskContext, input: Value| async move {
        if let Some(ms) = input["sleep_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let outcome = TaskOutcome::output(Output::Text {
            content: input["text"].as_str().unwrap_or_default().to_owned(),
        });
        match (input["unit"].as_str(), input["claim"].as_u64()) {
            (Some(unit), Some(claim)) => {
                outcome.with_metadata(json!({"usage": {unit: claim}, "model": "test"}))
            }
            _ => outcome.with_metadata(json!({"model": "test"})),
        }
    };
    let worker = WorkerBuilder::new("reporting", "1")
        .task_type("write")
        .task_type("work")
        .gateway_keys(GatewayKeys::remote(
            format!("{gateway}/.well-known/jwks.json").parse().unwrap(),
        ))
        .build(handler)
        .unwrap();
    serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// A gateway on a fresh devnet listing the reporting worker (`write` per token, `work` per
/// second, `upto`), a seeker holding the devnet's plain ERC-20 that approved Permit2.
async fn measured_env(database: TestDatabase) -> HireEnv {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let app = spawn_app_on(database, &chain_settings(&devnet, "")).await;
    let worker = reporting_worker(&app.address).await;
    let listing = json!({
        "endpoint": worker.endpoint,
        "protocol": "hire",
        "network": devnet.network(),
        "asset": devnet.permit_token().to_checksum(None),
        "tasks": {
            "write": metered(TOKEN_UNIT, "token", MAX_TOKENS),
            "work": metered(UNIT, "second", MAX_SECONDS),
        },
        "payment_schemes": ["upto"],
        "max_parallel": 4,
    });
    let env = listed_env(devnet, app, worker, listing).await;
    env.fund_with_permit_token().await;
    env.approve_permit2(env.devnet.permit_token(), ALLOWANCE)
        .await;
    env
}

/// The stub's stream connections so far.
#[derive(Clone, Default)]
struct StreamStub {
    opened: Arc<AtomicUsize>,
    address: Arc<std::sync::Mutex<String>>,
}

/// `/execute`: a stream of `input.events` events (cut before its `done` when `input.cut`),
/// with `metadata.usage.events = input.claim`.
async fn stub_execute(State(stub): State<StreamStub>, Json(input): Json<Value>) -> Json<Value> {
    let address = stub.address.lock().unwrap().clone();
    let events = input["events"].as_u64().unwrap_or(0);
    let cut = input["cut"].as_bool().unwrap_or(false);
    Json(json!({
        "status": "completed",
        "task_id": "task_1",
        "output": {"type": "stream", "url": format!("{address}/stream/{events}/{cut}"), "format": "sse"},
        "metadata": {"usage": {"events": input["claim"]}},
    }))
}

/// `/stream/{events}/{cut}`: events `e1 `…`eN ` with ids, then `done`; a cut stream closes
/// after its events, and every resumption (`Last-Event-ID`) closes at once: the worker is gone.
async fn stub_stream(
    State(stub): State<StreamStub>,
    Path((events, cut)): Path<(u64, bool)>,
    headers: HeaderMap,
) -> Response {
    stub.opened.fetch_add(1, Ordering::SeqCst);
    let resumed_after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = String::new();
    if !(cut && resumed_after.is_some()) {
        for n in resumed_after.unwrap_or(0) + 1..=events {
            body.push_str(&format!("id: {n}\ndata: e{n} \n\n"));
        }
        if !cut {
            body.push_str(&format!("id: {}\nevent: done\ndata: {{}}\n\n", events + 1));
        }
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(body))
        .unwrap()
}

/// Serve the stream stub and list it (`narrate` per event, `upto`); the env hires it from now on.
async fn use_stream_stub(env: &mut HireEnv) -> StreamStub {
    let stub = StreamStub::default();
    let router = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route(
            "/capabilities",
            get(|| async { Json(json!({"task_types": ["narrate"]})) }),
        )
        .route("/execute", post(stub_execute))
        .route("/stream/{events}/{cut}", get(stub_stream))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    *stub.address.lock().unwrap() = endpoint.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    env.worker_id = env
        .register(&json!({
            "endpoint": endpoint,
            "protocol": "hire",
            "pay_to": env.pay_to.to_checksum(None),
            "network": env.devnet.network(),
            "asset": env.devnet.permit_token().to_checksum(None),
            "tasks": {"narrate": metered(UNIT, "event", MAX_EVENTS)},
            "payment_schemes": ["upto"],
            "max_parallel": 4,
        }))
        .await;
    stub
}

/// A paid hire: the execute's answer, the contract id, the `PAYMENT-SIGNATURE` value and the
/// signed payload.
struct Hired {
    answer: Answer,
    contract_id: String,
    payment: String,
    payload: Value,
}

/// Propose `task_type` with `input`, pay it with the official `upto` client.
async fn hire(env: &HireEnv, task_type: &str, input: Value) -> Hired {
    let contract_id = env.contract(input, json!({"task_type": task_type})).await;
    let challenge = env.challenge(&contract_id).await;
    assert_eq!(challenge.accepts[0].scheme, "upto");
    let (payment, payload) = official_upto_payment(env, &challenge).await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    Hired {
        answer,
        contract_id,
        payment,
        payload,
    }
}

/// The stored verdict's metered count of `contract_id`.
async fn metered_count(env: &HireEnv, contract_id: &str) -> Value {
    env.app
        .store
        .latest_verification(contract_id)
        .await
        .unwrap()
        .unwrap()
        .result["details"]["metered"]
        .clone()
}

/// `contract_id` settled `amount`: it moved on chain from the payer to the worker, the stored
/// payment, the signed receipt and reconciliation all say `amount`.
async fn assert_settled(env: &HireEnv, contract_id: &str, before: (U256, U256), amount: U256) {
    let after = balances(env).await;
    assert_eq!(after.0, before.0 - amount, "the payer paid {amount}");
    assert_eq!(after.1, before.1 + amount, "the worker got {amount}");
    let stored = env
        .app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.amount, amount.to_string(), "the settled amount");
    let body: Value = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/receipt"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap();
    let jwks: Jwks = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let receipt = verify_receipt(body["receipt"].as_str().unwrap(), &jwks).unwrap();
    assert_eq!(receipt.payment.expect("bound").amount, amount.to_string());
    assert_reconciled(env).await;
}

async fn a_cut_stream_pays_the_relayed_events(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("a_cut_stream_pays_the_relayed_events") {
        return;
    }
    let mut env = measured_env(database).await;
    let stub = use_stream_stub(&mut env).await;

    // 40 of 100 events, then the connection closes and every resumption closes at once; the
    // worker claims all 100.
    let before = balances(&env).await;
    let Hired {
        answer: paid,
        contract_id,
        payment,
        ..
    } = hire(
        &env,
        "narrate",
        json!({"events": 40, "cut": true, "claim": 100}),
    )
    .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(paid.body["state"], "settled");
    assert_eq!(
        stub.opened.load(Ordering::SeqCst),
        6,
        "read, then five reconnects before the stream counts as lost"
    );
    let expected: String = (1..=40).map(|n| format!("e{n} ")).collect();
    assert_eq!(
        paid.body["deliverable"]["output"]["content"],
        expected.as_str()
    );
    assert_eq!(
        metered_count(&env, &contract_id).await,
        json!({"unit": "event", "delivered": 40, "verified": 40, "billable": 40,
               "passed_items": [], "measured": 40}),
        "the 40 relayed events, not the 100 claimed"
    );
    let kinds = env.event_kinds(&contract_id).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "worker_stream_event").count(),
        40
    );
    let forty = U256::from(40 * UNIT);
    assert_settled(&env, &contract_id, before, forty).await;
    assert_eq!(
        allowance(&env).await,
        U256::from(ALLOWANCE) - forty,
        "Permit2 moved the settled amount, not the authorized maximum"
    );
    // A replay of the paid execute: the stored answer, nothing read or moved again.
    let transaction = paid.payment_response().transaction;
    let again = env.execute(&contract_id, Some(&payment), None).await;
    paid.assert_replayed_by(&again);
    assert_eq!(again.payment_response().transaction, transaction);
    assert_eq!(balances(&env).await.1, before.1 + forty);
    assert_eq!(stub.opened.load(Ordering::SeqCst), 6);

    // A whole stream of 10 events whose worker claims 100: the 10 relayed.
    let before = balances(&env).await;
    let Hired {
        answer: paid,
        contract_id,
        ..
    } = hire(
        &env,
        "narrate",
        json!({"events": 10, "cut": false, "claim": 100}),
    )
    .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(metered_count(&env, &contract_id).await["billable"], 10);
    assert_settled(&env, &contract_id, before, U256::from(10 * UNIT)).await;

    // The worker's reputation counts the settled volume.
    let (_, snapshot) = crate::reputation::reputation(&env, &env.worker_id).await;
    let figures = snapshot.figures(Window::AllTime, None).unwrap();
    assert_eq!(
        U256::from(figures.volume_settled[0].amount.units()),
        U256::from(50 * UNIT)
    );
    crate::ledger::reconcile_cli_ok(&env).await;
}

#[tokio::test]
async fn a_stream_cut_after_40_of_100_events_pays_40_units_whatever_the_worker_claims() {
    Box::pin(a_cut_stream_pays_the_relayed_events(TestDatabase::sqlite())).await;
}

#[tokio::test]
async fn a_stream_cut_after_40_of_100_events_pays_40_units_whatever_the_worker_claims_on_postgres()
{
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(a_cut_stream_pays_the_relayed_events(database)).await;
}

async fn over_reports_pay_the_measured_units(database: TestDatabase) {
    if !hiregate_payments::devnet::node_tools_or_skip("over_reports_pay_the_measured_units") {
        return;
    }
    let env = measured_env(database).await;
    let text = "Three small risks: rates, supply, weather.";

    // A million tokens claimed for 42 bytes of text: 42 tokens at most, 42 paid.
    let before = balances(&env).await;
    let Hired {
        answer: paid,
        contract_id,
        ..
    } = hire(
        &env,
        "write",
        json!({"text": text, "unit": "tokens", "claim": 1_000_000}),
    )
    .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let bytes = text.len() as u64;
    assert_eq!(
        metered_count(&env, &contract_id).await,
        json!({"unit": "token", "delivered": bytes, "verified": bytes, "billable": bytes,
               "passed_items": [], "reported": 1_000_000, "measured": bytes})
    );
    assert_settled(&env, &contract_id, before, U256::from(bytes * TOKEN_UNIT)).await;

    // An honest figure below the bound is paid as reported.
    let before = balances(&env).await;
    let Hired {
        answer: paid,
        contract_id,
        ..
    } = hire(
        &env,
        "write",
        json!({"text": text, "unit": "tokens", "claim": 7}),
    )
    .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_settled(&env, &contract_id, before, U256::from(7 * TOKEN_UNIT)).await;

    // No figure reported: nothing to bill; rejected, nothing moves, the permit stays unused.
    let before = balances(&env).await;
    let Hired {
        answer: rejected,
        contract_id,
        payload,
        ..
    } = hire(&env, "write", json!({"text": text})).await;
    assert_eq!(rejected.status, 422, "{:?}", rejected.body);
    assert_eq!(env.state(&contract_id).await, "rejected");
    assert_eq!(balances(&env).await, before);
    assert_permit_unused(&env, &payload).await;

    // An hour claimed for a run of about a second: the seconds the gateway measured.
    let before = balances(&env).await;
    let Hired {
        answer: paid,
        contract_id,
        ..
    } = hire(
        &env,
        "work",
        json!({"text": text, "unit": "seconds", "claim": 3_600, "sleep_ms": 1_100}),
    )
    .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let attempt = &env.app.store.list_attempts(&contract_id).await.unwrap()[0];
    let wall_ms = (attempt.finished_at.unwrap() - attempt.started_at).num_milliseconds();
    let seconds = u64::try_from(wall_ms).unwrap().div_ceil(1000);
    assert!((2..=5).contains(&seconds), "{wall_ms} ms measured");
    assert_eq!(
        metered_count(&env, &contract_id).await,
        json!({"unit": "second", "delivered": seconds, "verified": seconds,
               "billable": seconds, "passed_items": [], "reported": 3_600,
               "measured": seconds})
    );
    assert_settled(&env, &contract_id, before, U256::from(seconds * UNIT)).await;
}

#[tokio::test]
async fn over_reported_tokens_and_seconds_pay_what_the_gateway_measured() {
    Box::pin(over_reports_pay_the_measured_units(TestDatabase::sqlite())).await;
}

#[tokio::test]
async fn over_reported_tokens_and_seconds_pay_what_the_gateway_measured_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    Box::pin(over_reports_pay_the_measured_units(database)).await;
}
