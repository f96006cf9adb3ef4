//! The hire engine driven directly, from its own crate: no HTTP API, no listener of the
//! gateway's, no axum in this crate's tree. `Engine::build` gives the engine on a real SQLite
//! store, the
//! embedded facilitator settles on a real anvil chain (the devnet EIP-3009 token), and a real
//! worker-sdk worker (it checks the gateway's contract tokens against the JWKS it is given)
//! does the work. What the engine answers is read as values: `Outcome`, `HireError`,
//! `Execution`.

use std::{net::SocketAddr, time::Duration};

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use figment::{
    Figment,
    providers::{Format, Toml},
};
use hiregate_contracts::id::PrincipalId;
use hiregate_engine::{
    hire::{
        ContractRequest,
        error::ErrorCode,
        execute::ExecuteRequest,
        outcome::{Execution, FailureKind, Outcome, Settlement},
    },
    registry::NewWorker,
    services::{Engine as Services, EngineOptions},
    settings::{DEFAULT_CONFIG_TOML, Settings},
};
use hiregate_payments::{PaymentRequired, devnet::Devnet, encode_header, sign_exact_payment};
use hiregate_worker_sdk::{
    GatewayKeys, RunningServer, Worker,
    example_workers::{
        FaultyBehaviour, FaultyMode, faulty_builder, faulty_handler, summary_output_schema,
    },
    serve,
};
use serde_json::{Value, json};

/// Price of `summarize`: 1.5 tokens of 6 decimals.
const PRICE: u64 = 1_500_000;

/// One engine on `database_url` (a SQLite file), its chain, worker and seeker.
struct Engine {
    services: Services,
    devnet: Devnet,
    worker: Worker,
    worker_id: String,
    pay_to: alloy::primitives::Address,
    wallet: PrivateKeySigner,
    seeker: PrincipalId,
    database_url: String,
    _server: RunningServer,
    _dir: tempfile::TempDir,
}

/// Settings for an engine on `database_url` settling on `devnet`, plus `extra` TOML.
fn settings(database_url: &str, devnet: &Devnet, extra: &str) -> Settings {
    let overrides = format!(
        r#"
        [database]
        url = "{database_url}"
        max_connections = 5
        [outbound]
        allow_private_targets = true
        require_https = false
        request_timeout_ms = 10000
        [health]
        interval_ms = 3600000
        [chains.devnet]
        network = "{network}"
        rpc_url = "{rpc}"
        relayer_private_key = "{key}"
        {extra}
        "#,
        network = devnet.network(),
        rpc = devnet.rpc_url(),
        key = devnet.relayer().to_bytes(),
    );
    let figment = Figment::from(Toml::string(DEFAULT_CONFIG_TOML)).merge(Toml::string(&overrides));
    Settings::from_figment(&figment).expect("valid settings")
}

async fn services(settings: Settings) -> Services {
    let base_url = "http://gateway.test/".parse().unwrap();
    Services::build(settings, EngineOptions::default(), base_url)
        .await
        .expect("the engine builds")
}

impl Engine {
    async fn start(extra: &str) -> Self {
        let devnet = Devnet::start().await.expect("anvil devnet starts");
        let dir = tempfile::tempdir().unwrap();
        let database_url = format!("sqlite://{}/hiregate.db", dir.path().display());
        let services = services(settings(&database_url, &devnet, extra)).await;
        // The worker trusts the engine's keys as given: there is no JWKS endpoint to fetch.
        let worker = faulty_builder()
            .gateway_keys(GatewayKeys::fixed(services.hire.jwks()))
            .build(faulty_handler(FaultyBehaviour {
                mode: FaultyMode::Ok,
                delay: Duration::from_millis(300),
            }))
            .unwrap();
        let server = serve(
            worker.router(),
            SocketAddr::from(([127, 0, 0, 1], 0)),
            std::future::pending(),
        )
        .await
        .unwrap();
        let endpoint = server.base_url().as_str().trim_end_matches('/').to_owned();
        let pay_to = PrivateKeySigner::random().address();
        let listing: NewWorker = serde_json::from_value(json!({
            "endpoint": endpoint,
            "protocol": "hire",
            "pay_to": pay_to.to_checksum(None),
            "network": devnet.network(),
            "asset": devnet.token().to_checksum(None),
            "tasks": {"summarize": {
                "price": PRICE.to_string(),
                "output_schema": summary_output_schema(),
            }},
            "max_parallel": 4,
        }))
        .unwrap();
        let (registered, _) = services
            .registry
            .register(&PrincipalId::generate_operator(), listing)
            .await
            .expect("the worker registers");
        let wallet = devnet
            .funded_account(U256::from(100_000_000u64))
            .await
            .expect("funded seeker");
        Self {
            services,
            devnet,
            worker,
            worker_id: registered.id.to_string(),
            pay_to,
            wallet,
            seeker: PrincipalId::generate_seeker(),
            database_url,
            _server: server,
            _dir: dir,
        }
    }

    /// A contract for `summarize` of `input`, with `extra` proposal fields.
    async fn contract(&self, input: Value, extra: Value) -> String {
        let mut request = json!({
            "worker_id": self.worker_id,
            "task_type": "summarize",
            "input": input,
            "sla": {"max_latency_ms": 5000},
        });
        for (key, value) in extra.as_object().unwrap() {
            request[key] = value.clone();
        }
        let request: ContractRequest = serde_json::from_value(request).unwrap();
        let created = self
            .services
            .hire
            .create_contract(&self.seeker, request, "req_engine_test")
            .await
            .expect("the contract is created");
        created.contract_id.to_string()
    }

    async fn execute(&self, contract_id: &str, payment: Option<&str>) -> Execution {
        self.services
            .hire
            .execute(ExecuteRequest {
                contract_id: contract_id.to_owned(),
                seeker: self.seeker.clone(),
                body: bytes::Bytes::new(),
                payment_signature: payment.map(str::to_owned),
                correlation_id: "req_engine_test".to_owned(),
                secrets: None,
            })
            .await
    }

    /// The contract's payment demand (the unpaid execute), and a payment signed for it.
    async fn demand_and_payment(&self, contract_id: &str) -> (PaymentRequired, String) {
        let unpaid = self.execute(contract_id, None).await;
        let Ok(Outcome::PaymentRequired(demand)) = unpaid.result else {
            panic!("an unpaid execute demands payment: {unpaid:?}");
        };
        assert_eq!(demand.code, ErrorCode::PaymentRequired);
        let challenge = demand.challenge.clone();
        let payload = sign_exact_payment(
            &self.wallet,
            &challenge.accepts[0],
            Some(challenge.resource.clone()),
            now(),
        )
        .await
        .expect("signs");
        (challenge, encode_header(&payload))
    }

    /// (seeker, worker payout) balances on chain.
    async fn balances(&self) -> (U256, U256) {
        (
            self.devnet.balance_of(self.wallet.address()).await.unwrap(),
            self.devnet.balance_of(self.pay_to).await.unwrap(),
        )
    }

    async fn state(&self, contract_id: &str) -> String {
        self.services
            .store
            .get_contract(contract_id)
            .await
            .unwrap()
            .expect("stored")
            .state
            .to_string()
    }

    async fn event_kinds(&self, contract_id: &str) -> Vec<String> {
        self.services
            .store
            .list_contract_events(contract_id, 0, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind.as_str().to_owned())
            .collect()
    }
}

fn now() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp()).unwrap()
}

fn price() -> U256 {
    U256::from(PRICE)
}

#[tokio::test]
async fn a_paid_hire_is_accepted_and_settled_on_chain() {
    let engine = Engine::start("").await;
    let contract_id = engine
        .contract(json!({"text": "the quick brown fox"}), json!({}))
        .await;
    let (challenge, payment) = engine.demand_and_payment(&contract_id).await;
    assert_eq!(challenge.accepts[0].amount.get(), price());
    let before = engine.balances().await;

    let paid = engine.execute(&contract_id, Some(&payment)).await;
    assert!(paid.duplicate_of.is_none());
    assert!(paid.correlation_id.is_some());
    let Ok(Outcome::Accepted(work)) = paid.result else {
        panic!("a paid hire is accepted: {paid:?}");
    };
    assert_eq!(work.state.as_str(), "settled");
    assert_eq!(work.status, "completed");
    assert_eq!(
        work.output.as_ref().unwrap()["content"]["summary"],
        "the quick brown fox"
    );
    let Settlement::Settled { transaction, .. } = &work.settlement else {
        panic!("settled: {:?}", work.settlement);
    };
    let response = work.payment_response.as_ref().expect("settlement response");
    assert!(response.success);
    assert_eq!(transaction.as_deref(), Some(response.transaction.as_str()));
    let after = engine.balances().await;
    assert_eq!(after.0, before.0 - price(), "the payer paid the price");
    assert_eq!(after.1, before.1 + price(), "the worker received it");
    assert_eq!(engine.worker.execution_counter().get(), 1);
    assert_eq!(
        engine
            .event_kinds(&contract_id)
            .await
            .last()
            .map(String::as_str),
        Some("settlement_succeeded")
    );
}

#[tokio::test]
async fn a_rejected_deliverable_is_not_paid_for() {
    let engine = Engine::start("").await;
    let contract_id = engine
        .contract(json!({"text": "x", "mode": "invalid"}), json!({}))
        .await;
    let (_, payment) = engine.demand_and_payment(&contract_id).await;
    let before = engine.balances().await;

    let answer = engine.execute(&contract_id, Some(&payment)).await;
    let Ok(Outcome::Failed(failure)) = &answer.result else {
        panic!("the hire fails verification: {answer:?}");
    };
    assert_eq!(failure.kind, FailureKind::Rejected);
    assert_eq!(failure.code, ErrorCode::VerificationFailed);
    assert_eq!(
        failure.details["verification"]["verification_status"],
        "failed"
    );
    assert_eq!(engine.state(&contract_id).await, "rejected");
    assert_eq!(engine.balances().await, before, "nothing moved");

    // Asked again: the same verdict, from the store, marked as a repeat; the worker is not
    // called again.
    let again = engine.execute(&contract_id, None).await;
    assert!(matches!(
        &again.result,
        Ok(Outcome::Failed(failure)) if failure.kind == FailureKind::Rejected
    ));
    assert_eq!(
        again.duplicate_of.as_ref().map(|o| o.status.as_str()),
        Some("rejected")
    );
    assert_eq!(engine.worker.execution_counter().get(), 1);
}

#[tokio::test]
async fn a_payment_sent_many_times_runs_once_and_transfers_once() {
    let engine = Engine::start("").await;
    let contract_id = engine
        .contract(json!({"text": "only once"}), json!({}))
        .await;
    let (_, payment) = engine.demand_and_payment(&contract_id).await;
    let before = engine.balances().await;

    let answers =
        futures::future::join_all((0..6).map(|_| engine.execute(&contract_id, Some(&payment))))
            .await;
    let mut transactions = std::collections::BTreeSet::new();
    for answer in &answers {
        match &answer.result {
            Ok(Outcome::Accepted(work)) => {
                transactions.insert(work.payment_response.as_ref().unwrap().transaction.clone());
            }
            Ok(Outcome::InProgress(_)) => assert!(answer.duplicate_of.is_some()),
            other => panic!("a duplicate answers the stored result or work under way: {other:?}"),
        }
    }
    assert_eq!(
        answers.iter().filter(|a| a.duplicate_of.is_none()).count(),
        1,
        "one execute ran the hire, the others were answered as duplicates"
    );
    assert_eq!(transactions.len(), 1, "one settlement transaction");
    assert_eq!(engine.worker.execution_counter().get(), 1, "one worker run");
    let after = engine.balances().await;
    assert_eq!(after.0, before.0 - price(), "one transfer");
    assert_eq!(after.1, before.1 + price());

    // The same payment on another contract is refused, and nothing moves.
    let other = engine.contract(json!({"text": "another"}), json!({})).await;
    let refused = engine.execute(&other, Some(&payment)).await;
    let Err(error) = &refused.result else {
        panic!("a used payment is refused: {refused:?}");
    };
    assert_eq!(error.code, ErrorCode::PaymentAlreadyUsed);
    assert_eq!(engine.state(&other).await, "offered");
    assert_eq!(engine.balances().await, after);
}

#[tokio::test]
async fn a_hire_left_mid_attempt_by_a_crash_is_resumed_and_settled_once() {
    // Stale after the SLA plus 100 ms of grace.
    let extra = "[contracts]\nrecovery_grace_ms = 100\n";
    let engine = Engine::start(extra).await;
    let contract_id = engine
        .contract(
            json!({"text": "survives", "mode": "slow", "delay_ms": 1500}),
            json!({"sla": {"max_latency_ms": 3000}}),
        )
        .await;
    let (_, payment) = engine.demand_and_payment(&contract_id).await;
    let before = engine.balances().await;

    // Another engine on the same store takes the payment and forwards the attempt; its process
    // dies while the worker is at it (its runtime is dropped with every task on it).
    let crashing = settings(&engine.database_url, &engine.devnet, extra);
    let (seeker, id, paid_with) = (engine.seeker.clone(), contract_id.clone(), payment.clone());
    let watched = contract_id.clone();
    let store = engine.services.store.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let hire = services(crashing).await.hire.clone();
            tokio::spawn(async move {
                hire.execute(ExecuteRequest {
                    contract_id: id,
                    seeker,
                    body: bytes::Bytes::new(),
                    payment_signature: Some(paid_with),
                    correlation_id: "req_doomed".to_owned(),
                    secrets: None,
                })
                .await
            });
            loop {
                let state = store.get_contract(&watched).await;
                if matches!(state, Ok(Some(c)) if c.state.as_str() == "executing") {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        drop(runtime);
    })
    .join()
    .unwrap();
    assert_eq!(
        engine.state(&contract_id).await,
        "executing",
        "left mid-attempt"
    );

    // Nothing resumes it before its time bound; after it, recovery takes it over.
    assert_eq!(engine.services.hire.recover_stale().await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(3200)).await;
    assert_eq!(engine.services.hire.recover_stale().await.unwrap(), 1);
    assert_eq!(engine.state(&contract_id).await, "settled");
    let kinds = engine.event_kinds(&contract_id).await;
    assert!(kinds.contains(&"recovery_takeover".to_owned()), "{kinds:?}");
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "settlement_succeeded")
            .count(),
        1
    );
    assert_eq!(
        engine.worker.execution_counter().get(),
        1,
        "the worker's run was picked up again by its idempotency key, not run twice"
    );
    let after = engine.balances().await;
    assert_eq!(after.0, before.0 - price(), "charged once");
    assert_eq!(after.1, before.1 + price());

    // The seeker's next execute answers the settled result as a repeat.
    let answer = engine.execute(&contract_id, None).await;
    assert!(
        matches!(answer.result, Ok(Outcome::Accepted(_))),
        "{answer:?}"
    );
    assert!(answer.duplicate_of.is_some());
}
