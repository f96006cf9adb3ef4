//! The chain's clock, not the gateway's, for what the chain will judge (issue 26, item 7), and a
//! settlement retry that cannot succeed yet waits without growing the event log.
//!
//! Real parts: anvil (started with its clock 17 minutes behind the wall clock, so every block
//! keeps that distance: a chain whose block time lags the gateway's), the devnet EIP-3009
//! token, the bundled facilitator (embedded, or served over HTTP), a worker-sdk worker.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use hiregate_payments::{
    ChainConfig, FacilitatorConfig, LocalFacilitator, RelayerKey, SignOptions,
    devnet::{Devnet, DevnetOptions},
    encode_header, sign_exact_payment_with,
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, eventually},
    hire_env::{HireEnv, WorkerKind, hire_env_on, now},
};

/// How far the lagging devnet's clock runs behind the wall clock.
const LAG_S: u64 = 17 * 60;

/// With the chain's last block 17 minutes old by the gateway's clock, a payment valid from ten
/// minutes ago (the official client's `validAfter = now - 600`) is not valid yet by the chain's
/// clock: the gateway refuses it as such before anything is stored or run, and without asking
/// the facilitator (an external one judges by its own clock), instead of accepting what the
/// chain will then refuse to settle. A payment valid by the chain's clock is accepted and
/// settles.
#[tokio::test]
async fn valid_after_is_judged_by_the_chains_clock_at_acceptance() {
    let devnet = Devnet::start_with(DevnetOptions {
        clock_behind: Duration::from_secs(LAG_S),
        ..DevnetOptions::default()
    })
    .await
    .expect("anvil devnet starts");
    let gate = SettleGate::default();
    let facilitator_url = gated_facilitator(&devnet, &gate).await;
    let env = hire_env_on(
        devnet,
        TestDatabase::sqlite(),
        WorkerKind::Echo,
        4,
        &format!("[facilitator]\nmode = \"http\"\nurl = \"{facilitator_url}\""),
    )
    .await;
    let chain_now = env.devnet.block_time().await.unwrap();
    assert!(chain_now + LAG_S - 60 <= now(), "the chain's clock lags");

    let contract_id = env.contract(HireEnv::input("lagging"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let sign = |valid_after: u64| {
        let env = &env;
        let challenge = challenge.clone();
        async move {
            sign_exact_payment_with(
                &env.wallet,
                &challenge.accepts[0],
                Some(challenge.resource.clone()),
                now(),
                &SignOptions {
                    valid_after: Some(valid_after),
                    ..SignOptions::default()
                },
            )
            .await
            .unwrap()
        }
    };
    let early = sign(now() - 600).await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&early)), None)
        .await;
    assert_eq!(answer.status, 402, "{:?}", answer.body);
    assert_eq!(answer.code(), "payment_invalid");
    assert!(
        answer
            .body
            .to_string()
            .contains("invalid_exact_evm_payload_authorization_valid_after"),
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
            .is_none(),
        "nothing stored"
    );
    assert_eq!(env.worker.executions(), 0);
    assert_eq!(gate.verifies(), 0, "the facilitator was not asked");

    let on_time = sign(chain_now - 600).await;
    let before = env.balances().await;
    let answer = env
        .execute(&contract_id, Some(&encode_header(&on_time)), None)
        .await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "settled");
    let price = alloy::primitives::U256::from(crate::hire_env::PRICE);
    assert_eq!(env.balances().await, (before.0 - price, before.1 + price));
}

/// A facilitator `/settle` that can be switched off: while off it answers 503 with no verdict,
/// as an unreachable facilitator does (a fault the real facilitator cannot be made to produce
/// on demand, so this gate stands in front of it). `/verify` always passes through. Both are
/// counted.
#[derive(Clone, Default)]
struct SettleGate {
    closed: Arc<AtomicBool>,
    settles: Arc<AtomicUsize>,
    verifies: Arc<AtomicUsize>,
}

impl SettleGate {
    fn settles(&self) -> usize {
        self.settles.load(Ordering::SeqCst)
    }

    fn verifies(&self) -> usize {
        self.verifies.load(Ordering::SeqCst)
    }
}

/// The bundled facilitator over HTTP on `devnet`, behind `gate`; returns its URL.
async fn gated_facilitator(devnet: &Devnet, gate: &SettleGate) -> String {
    use axum::{extract::Request, http::StatusCode, middleware::Next, response::Response};
    let facilitator = LocalFacilitator::connect(FacilitatorConfig {
        chains: vec![ChainConfig::new(
            devnet.network().parse().unwrap(),
            devnet.rpc_url().clone(),
            RelayerKey::new(devnet.fresh_relayer().await.unwrap()),
        )],
    })
    .await
    .unwrap();
    let gate = gate.clone();
    let router = hiregate_payments::router(Arc::new(facilitator)).layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let gate = gate.clone();
            async move {
                if request.uri().path().ends_with("/verify") {
                    gate.verifies.fetch_add(1, Ordering::SeqCst);
                }
                if request.uri().path().ends_with("/settle") {
                    gate.settles.fetch_add(1, Ordering::SeqCst);
                    if gate.closed.load(Ordering::SeqCst) {
                        return Response::builder()
                            .status(StatusCode::SERVICE_UNAVAILABLE)
                            .body(axum::body::Body::empty())
                            .unwrap();
                    }
                }
                next.run(request).await
            }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

async fn contract_view(env: &HireEnv, contract_id: &str) -> Value {
    env.app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await
        .json()
        .await
        .unwrap()
}

/// A settlement whose outcome is unknown and whose retries keep failing (the facilitator
/// cannot be reached) is retried every `recovery_grace_ms` without writing an event per retry:
/// the contract counts the retries (`settlement.retries`), and the log gets one event per state
/// change. Once the facilitator answers again, the next retry settles, with one event.
async fn retries_in_place(database: TestDatabase) {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    let gate = SettleGate::default();
    let facilitator_url = gated_facilitator(&devnet, &gate).await;
    let env = hire_env_on(
        devnet,
        database,
        WorkerKind::Echo,
        4,
        &format!(
            r#"
            [facilitator]
            mode = "http"
            url = "{facilitator_url}"
            [contracts]
            sweep_interval_ms = 100
            jobs_interval_ms = 100
            recovery_grace_ms = 200
            "#
        ),
    )
    .await;
    let contract_id = env
        .contract(HireEnv::input("retried"), json!({"acceptance_window_s": 1}))
        .await;
    let payment = env.pay(&env.challenge(&contract_id).await).await;
    let answer = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    assert_eq!(env.state(&contract_id).await, "accepted");

    gate.closed.store(true, Ordering::SeqCst);
    eventually(Duration::from_secs(20), "settlement_unknown", || async {
        (env.state(&contract_id).await == "settlement_unknown").then_some(())
    })
    .await;
    let events_then = env.event_kinds(&contract_id).await;
    let settles_then = gate.settles();
    eventually(
        Duration::from_secs(30),
        "four more /settle retries",
        || async { (gate.settles() >= settles_then + 4).then_some(()) },
    )
    .await;
    assert_eq!(env.state(&contract_id).await, "settlement_unknown");
    assert_eq!(
        env.event_kinds(&contract_id).await,
        events_then,
        "retries that changed nothing wrote no events"
    );
    let view = contract_view(&env, &contract_id).await;
    assert!(
        view["settlement"]["retries"].as_u64().unwrap_or(0) >= 3,
        "{view}"
    );

    gate.closed.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(20), "settled", || async {
        (env.state(&contract_id).await == "settled").then_some(())
    })
    .await;
    let kinds = env.event_kinds(&contract_id).await;
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(count("settlement_outcome_unknown"), 1, "{kinds:?}");
    assert_eq!(count("settlement_retried"), 0, "{kinds:?}");
    assert_eq!(count("settlement_succeeded"), 1, "{kinds:?}");
    assert_eq!(kinds.len(), events_then.len() + 1, "{kinds:?}");
    let price = alloy::primitives::U256::from(crate::hire_env::PRICE);
    assert_eq!(env.balance(env.pay_to).await, price, "paid once");
}

#[tokio::test]
async fn a_settlement_retry_that_cannot_succeed_yet_writes_no_event() {
    retries_in_place(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_settlement_retry_that_cannot_succeed_yet_writes_no_event_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    retries_in_place(database).await;
}
