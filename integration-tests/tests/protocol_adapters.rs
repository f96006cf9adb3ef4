//! The gateway's WattSwarm adapter against the reference WattSwarm executor (written from the
//! seed, not from the gateway's types): a real anvil devnet with the EIP-3009 token, a gateway
//! in-process whose embedded facilitator settles on it, and a funded seeker that pays the 402.
//! Every money claim is checked on chain.

use std::sync::Arc;

use alloy::{
    primitives::{Address, U256},
    signers::local::PrivateKeySigner,
};
use hiregate_engine::settings::Settings;
use hiregate_gateway::{startup::App, telemetry};
use hiregate_integration_tests::postgres::PostgresDatabase;
use hiregate_integration_tests::reference::superwire::{self, StreamCut};
use hiregate_integration_tests::reference::wattswarm::{
    Executor, ExecutorBehaviour, ExecutorConfig, ResultHashing, TransportFault, Verifier,
    VerifierBehaviour, VerifierConfig,
};
use hiregate_payments::devnet::Devnet;
use hiregate_store::Store;
use hiregate_worker_sdk::seeker::{ExecuteOutcome, SeekerClient};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use url::Url;

/// Admin key of the test gateway.
const ADMIN_KEY: &str = "protocol-adapters-admin-key-0123456789abcdef";
/// Price of one `swarm` task: 2 tokens of 6 decimals.
const PRICE: u64 = 2_000_000;
/// What the seeker wallet starts with.
const SEEKER_FUNDS: u64 = 20_000_000;

/// The schema the reference executor's default answer satisfies.
fn answer_schema() -> Value {
    json!({
        "type": "object",
        "required": ["answer", "confidence"],
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number"}
        }
    })
}

/// A devnet, a gateway on a temp SQLite database, and the operator and seeker keys.
struct Env {
    devnet: Devnet,
    base: Url,
    http: reqwest::Client,
    store: Store,
    operator_key: String,
    seeker_key: String,
    shutdown: CancellationToken,
    /// The gateway's settings, for a second instance on the same database.
    settings_toml: String,
    _db_dir: tempfile::TempDir,
    /// Dropped after the gateways stop (`Drop` below cancels them first).
    _postgres: Option<PostgresDatabase>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Env {
    /// A gateway on a temp SQLite database.
    async fn start() -> Self {
        Self::start_on(None).await
    }

    /// A gateway on a fresh PostgreSQL database, or `None` (skipped) without a server.
    async fn start_on_postgres(test: &str) -> Option<Self> {
        let database = PostgresDatabase::create(test).await?;
        Some(Self::start_on(Some(database)).await)
    }

    async fn start_on(postgres: Option<PostgresDatabase>) -> Self {
        telemetry::init_for_tests();
        let devnet = Devnet::start().await.expect("anvil devnet starts");
        let db_dir = tempfile::tempdir().expect("temp dir");
        let db_url = match &postgres {
            Some(database) => database.url.clone(),
            None => format!("sqlite://{}/hiregate.db", db_dir.path().display()),
        };
        let settings_toml = format!(
            r#"
            [http]
            listen_address = "127.0.0.1:0"
            [database]
            url = "{db_url}"
            [admin]
            api_key = "{ADMIN_KEY}"
            [outbound]
            allow_private_targets = true
            require_https = false
            connect_timeout_ms = 2000
            request_timeout_ms = 10000
            [health]
            interval_ms = 3600000
            probe_timeout_ms = 2000
            [chains.devnet]
            network = "{network}"
            rpc_url = "{rpc}"
            relayer_private_key = "{key}"
            "#,
            network = devnet.network(),
            rpc = devnet.rpc_url(),
            key = devnet.relayer().to_bytes(),
        );
        let settings = Settings::from_defaults_and(&settings_toml).expect("valid test settings");
        let app = App::build(settings).await.expect("gateway builds");
        let base = app.base_url().clone();
        let store = app.state().store.clone();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move {
            if let Err(error) = app.run_until_stopped(token).await {
                eprintln!("gateway stopped: {error}");
            }
        });
        let mut env = Self {
            devnet,
            base,
            http: reqwest::Client::new(),
            store,
            operator_key: String::new(),
            seeker_key: String::new(),
            shutdown,
            settings_toml,
            _db_dir: db_dir,
            _postgres: postgres,
        };
        env.operator_key = env.create_key("operator").await;
        env.seeker_key = env.create_key("seeker").await;
        env
    }

    fn url(&self, path: &str) -> Url {
        self.base.join(path).expect("gateway URL")
    }

    /// A second gateway instance on the same database (stopped with the first); its base URL.
    async fn second_instance(&self) -> Url {
        let settings = Settings::from_defaults_and(&self.settings_toml).expect("valid settings");
        let app = App::build(settings).await.expect("second gateway builds");
        let base = app.base_url().clone();
        let token = self.shutdown.clone();
        tokio::spawn(async move {
            if let Err(error) = app.run_until_stopped(token).await {
                eprintln!("second gateway stopped: {error}");
            }
        });
        base
    }

    /// `method path` as `key` on the gateway at `base`: `(status, JSON body)`, whatever the
    /// status.
    async fn call(
        &self,
        base: &Url,
        method: Method,
        path: &str,
        key: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, base.join(path).expect("gateway URL"))
            .bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("gateway answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The contract's event log entries of `kind`, oldest first, as their details.
    async fn events_of_kind(&self, contract_id: &str, kind: &str) -> Vec<Value> {
        self.store
            .list_contract_events(contract_id, 0, 1000)
            .await
            .expect("contract events")
            .into_iter()
            .filter(|event| event.kind.as_str() == kind)
            .map(|event| event.details)
            .collect()
    }

    async fn send(&self, method: Method, path: &str, key: &str, body: Option<&Value>) -> Value {
        let mut request = self.http.request(method, self.url(path)).bearer_auth(key);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("gateway answers");
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{path} answered {status}: {body}");
        body
    }

    async fn create_key(&self, role: &str) -> String {
        let body = self
            .send(
                Method::POST,
                "/v1/admin/keys",
                ADMIN_KEY,
                Some(&json!({"role": role})),
            )
            .await;
        body["api_key"].as_str().expect("api_key").to_owned()
    }

    /// Lists `endpoint` as a `protocol` worker offering `swarm`; returns `(worker id, payTo)`.
    async fn register(&self, endpoint: &Url, protocol: &str) -> (String, Address) {
        self.register_with(endpoint, protocol, "swarm", answer_schema(), json!({}))
            .await
    }

    /// Lists `endpoint` offering `task_type` with `schema` and `protocol_options`.
    async fn register_with(
        &self,
        endpoint: &Url,
        protocol: &str,
        task_type: &str,
        schema: Value,
        protocol_options: Value,
    ) -> (String, Address) {
        self.register_as(
            &self.operator_key,
            endpoint,
            protocol,
            task_type,
            schema,
            protocol_options,
        )
        .await
    }

    /// Like [`Env::register_with`], for the operator of `operator_key`.
    async fn register_as(
        &self,
        operator_key: &str,
        endpoint: &Url,
        protocol: &str,
        task_type: &str,
        schema: Value,
        protocol_options: Value,
    ) -> (String, Address) {
        let pay_to = PrivateKeySigner::random().address();
        let body = self
            .send(
                Method::POST,
                "/v1/workers",
                operator_key,
                Some(&json!({
                    "endpoint": endpoint.as_str(),
                    "protocol": protocol,
                    "pay_to": pay_to.to_checksum(None),
                    "network": self.devnet.network(),
                    "asset": self.devnet.token().to_checksum(None),
                    "tasks": {task_type: {"price": PRICE.to_string(), "output_schema": schema}},
                    "max_parallel": 4,
                    "protocol_options": protocol_options,
                })),
            )
            .await;
        (body["id"].as_str().expect("worker id").to_owned(), pay_to)
    }

    async fn seeker(&self) -> SeekerClient {
        let wallet = self
            .devnet
            .funded_account(U256::from(SEEKER_FUNDS))
            .await
            .expect("funded seeker");
        SeekerClient::new(self.base.clone(), self.seeker_key.clone(), Arc::new(wallet))
    }

    /// Proposes a `swarm` hire of `worker_id` settling right after verification.
    async fn propose(&self, seeker: &SeekerClient, worker_id: &str, prompt: &str) -> String {
        seeker
            .propose(&json!({
                "worker_id": worker_id,
                "task_type": "swarm",
                "input": {"prompt": prompt, "agent_id": "analyst-a"},
                "sla": {"max_latency_ms": 8000},
                "acceptance_window_s": 0,
            }))
            .await
            .expect("contract proposed")
            .id
    }

    async fn contract(&self, contract_id: &str) -> Value {
        self.send(
            Method::GET,
            &format!("/v1/contracts/{contract_id}"),
            &self.seeker_key,
            None,
        )
        .await
    }

    async fn balance(&self, who: Address) -> U256 {
        self.devnet.balance_of(who).await.expect("balance on chain")
    }
}

async fn hire(
    env: &Env,
    seeker: &SeekerClient,
    worker_id: &str,
    prompt: &str,
) -> (String, ExecuteOutcome) {
    let contract_id = env.propose(seeker, worker_id, prompt).await;
    let outcome = seeker
        .execute(&contract_id)
        .await
        .expect("execute answered");
    (contract_id, outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_hire_through_a_wattswarm_executor_is_verified_and_settled_on_chain() {
    let env = Env::start().await;
    let executor = Executor::spawn(ExecutorConfig::default())
        .await
        .expect("executor");
    let (worker_id, pay_to) = env.register(executor.base_url(), "wattswarm").await;
    // Registration probed the seed's liveness and capability routes.
    let probed = executor.counters();
    assert!(
        probed.health_checks >= 1 && probed.capability_checks >= 1,
        "{probed:?}"
    );

    let seeker = env.seeker().await;
    let (contract_id, outcome) = hire(&env, &seeker, &worker_id, "Summarize the key risks.").await;
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    let settlement = outcome
        .payment_response
        .expect("PAYMENT-RESPONSE on a settled hire");
    assert!(settlement.success, "{settlement:?}");
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS - PRICE)
    );

    // The executor got the seed's ExecuteRequest, keyed to the contract.
    let requests = executor.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.task_id, contract_id);
    assert_eq!(request.task_type, "swarm");
    assert_eq!(request.inputs["prompt"], "Summarize the key risks.");
    assert_eq!(request.task_contract.output_schema, answer_schema());
    assert!(request.execution_id.contains(&contract_id));
    // The deliverable is the executor's candidate_output, and its evidence was fetched.
    let stored = executor
        .stored_response(&request.execution_id)
        .expect("stored execution");
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "settled", "{view}");
    assert!(
        view.to_string()
            .contains(stored.candidate_output["answer"].as_str().expect("answer")),
        "{view}"
    );
    assert_eq!(executor.counters().evidence_fetches, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evidence_digest_mismatch_is_rejected_and_nothing_is_settled() {
    let env = Env::start().await;
    let executor = Executor::spawn(ExecutorConfig {
        behaviour: ExecutorBehaviour::EvidenceDigestMismatch,
        ..ExecutorConfig::default()
    })
    .await
    .expect("executor");
    let (worker_id, pay_to) = env.register(executor.base_url(), "wattswarm").await;
    let seeker = env.seeker().await;
    let (contract_id, outcome) = hire(&env, &seeker, &worker_id, "Summarize.").await;
    assert_eq!(outcome.status, 422, "{}", outcome.body);
    assert!(outcome.payment_response.is_none());
    assert_eq!(executor.counters().evidence_fetches, 1);
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "rejected", "{view}");
    assert_eq!(env.balance(pay_to).await, U256::ZERO);
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_retry_does_not_execute_twice() {
    for fault in [
        TransportFault::ServiceUnavailable,
        TransportFault::DropMidResponse,
    ] {
        let env = Env::start().await;
        let executor = Executor::spawn(ExecutorConfig {
            behaviour: ExecutorBehaviour::FaultOnce(fault),
            ..ExecutorConfig::default()
        })
        .await
        .expect("executor");
        let (worker_id, pay_to) = env.register(executor.base_url(), "wattswarm").await;
        let seeker = env.seeker().await;
        let (_, outcome) = hire(&env, &seeker, &worker_id, "Summarize.").await;
        assert_eq!(outcome.status, 200, "{fault:?}: {}", outcome.body);
        let counters = executor.counters();
        assert_eq!(counters.faults_injected, 1, "{fault:?}: {counters:?}");
        assert_eq!(counters.execute_requests, 2, "{fault:?}: {counters:?}");
        assert_eq!(counters.executions, 1, "{fault:?}: {counters:?}");
        assert_eq!(counters.replays, 1, "{fault:?}: {counters:?}");
        let requests = executor.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].execution_id, requests[1].execution_id);
        assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    }
}

/// Proposes a `swarm` hire of `worker_id` pinned to `vp.crosscheck.v1` with `quorum`.
async fn propose_crosscheck(seeker: &SeekerClient, worker_id: &str, quorum: Value) -> String {
    seeker
        .propose(&json!({
            "worker_id": worker_id,
            "task_type": "swarm",
            "input": {"prompt": "Cross-check me."},
            "sla": {"max_latency_ms": 8000},
            "acceptance_window_s": 0,
            "verification": {"policy_id": "vp.crosscheck.v1", "policy_params": {"quorum": quorum}},
        }))
        .await
        .expect("crosscheck contract proposed")
        .id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crosscheck_with_three_verifier_workers_passes_fails_and_fails_closed() {
    let env = Env::start().await;
    let executor = Executor::spawn(ExecutorConfig::default())
        .await
        .expect("executor");
    let (worker_id, pay_to) = env.register(executor.base_url(), "wattswarm").await;
    let mut verifiers = Vec::new();
    let mut verifier_ids = Vec::new();
    // Verifiers must be independent of the hired worker: another operator's listings.
    // verifier-b hashes its votes as the verify seed's reference handler does (serde_json,
    // bare hex), the others with RFC 8785: both must count.
    let verifier_operator = env.create_key("operator").await;
    for (name, hashing) in [
        ("verifier-a", ResultHashing::Rfc8785),
        ("verifier-b", ResultHashing::SeedRuntime),
        ("verifier-c", ResultHashing::Rfc8785),
    ] {
        let config = VerifierConfig::named(name, VerifierBehaviour::Honest).hashing(hashing);
        let verifier = Verifier::spawn(config).await.expect("verifier");
        let (id, _) = env
            .register_as(
                &verifier_operator,
                verifier.base_url(),
                "wattswarm",
                "swarm",
                answer_schema(),
                json!({}),
            )
            .await;
        verifier_ids.push(id);
        verifiers.push(verifier);
    }
    let seeker = env.seeker().await;
    let quorum = |min_verifiers: u32, min_pass_ratio: f64| {
        json!({
            "min_verifiers": min_verifiers,
            "min_pass_ratio": min_pass_ratio,
            "min_score": 0.5,
            "aggregation": "count",
            "verifiers": verifier_ids,
        })
    };

    // Passing quorum: three honest votes on a valid candidate.
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(3, 1.0)).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert!(outcome.payment_response.is_some_and(|p| p.success));
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "settled", "{view}");
    assert_eq!(
        view["verification"]["details"]["quorum"]["hash_verified"], 3,
        "{view}"
    );
    let policy_hash = view.to_string();
    let proposed = executor
        .requests()
        .into_iter()
        .find(|request| request.task_id == contract_id)
        .expect("the proposer's ExecuteRequest");
    for verifier in &verifiers {
        let requests = verifier.requests();
        assert_eq!(requests.len(), 1, "each verifier is asked once");
        // The candidate is named by the execution id the proposer got, and its output_ref is
        // the output's bytes as WattSwarm's kernel digests them (serde_json).
        let candidate = &requests[0].candidate;
        assert_eq!(candidate.execution_id, proposed.execution_id);
        let bytes = serde_json::to_vec(&candidate.output).expect("output bytes");
        assert_eq!(
            candidate.output_ref.digest,
            format!(
                "sha256:{}",
                hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
            )
        );
        assert_eq!(candidate.output_ref.size_bytes, bytes.len() as u64);
        assert_eq!(
            candidate.output_ref.producer,
            "reference-wattswarm/reference-model-v1"
        );
        // The verifier got the contract's pinned policy (its hash appears in the record).
        assert!(policy_hash.contains(&requests[0].policy.policy_hash));
        // Each vote is recorded with its verifier_result_hash.
        let vote = &verifier.responses()[0];
        assert!(
            view.to_string().contains(&vote.verifier_result_hash),
            "vote of {} not recorded: {view}",
            vote.model_id
        );
    }

    // Failing quorum: two confident dissents out of three, 2/3 passes needed.
    verifiers[0]
        .set_behaviour(VerifierBehaviour::VoteFail)
        .await
        .expect("behaviour");
    verifiers[1]
        .set_behaviour(VerifierBehaviour::VoteFail)
        .await
        .expect("behaviour");
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(2, 0.6)).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 422, "{}", outcome.body);
    assert!(outcome.payment_response.is_none());
    assert_eq!(env.contract(&contract_id).await["state"], "rejected");
    assert_eq!(
        env.balance(pay_to).await,
        U256::from(PRICE),
        "nothing more settled"
    );

    // A verifier that evaluated another policy: its result hash does not bind the policy the
    // gateway sent, so its pass does not count and a quorum of 3 cannot be reached.
    verifiers[0]
        .set_behaviour(VerifierBehaviour::WrongPolicyHash)
        .await
        .expect("behaviour");
    verifiers[1]
        .set_behaviour(VerifierBehaviour::Honest)
        .await
        .expect("behaviour");
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(3, 0.6)).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 422, "{}", outcome.body);
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "rejected", "{view}");
    assert_eq!(
        view["verification"]["details"]["quorum"]["hash_verified"], 2,
        "{view}"
    );
    assert_eq!(
        env.balance(pay_to).await,
        U256::from(PRICE),
        "nothing more settled"
    );

    // A verifier whose vote names another model than its /capabilities declare: the vote's
    // hash binds what it names, and still it does not count.
    verifiers[0]
        .set_behaviour(VerifierBehaviour::NamesAnotherModel)
        .await
        .expect("behaviour");
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(3, 0.6)).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 422, "{}", outcome.body);
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "rejected", "{view}");
    assert_eq!(
        view["verification"]["details"]["quorum"]["identity_mismatch"], 1,
        "{view}"
    );
    assert_eq!(
        env.balance(pay_to).await,
        U256::from(PRICE),
        "nothing more settled"
    );

    // One verifier down: its missing vote counts against; a quorum of 3 cannot be reached.
    verifiers[0]
        .set_behaviour(VerifierBehaviour::Honest)
        .await
        .expect("behaviour");
    verifiers[1]
        .set_behaviour(VerifierBehaviour::Honest)
        .await
        .expect("behaviour");
    verifiers[2]
        .set_behaviour(VerifierBehaviour::Down)
        .await
        .expect("behaviour");
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(3, 0.6)).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 422, "{}", outcome.body);
    assert!(outcome.payment_response.is_none());
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "rejected", "{view}");
    assert!(view.to_string().contains(r#""kind":"missing""#), "{view}");
    assert_eq!(
        env.balance(pay_to).await,
        U256::from(PRICE),
        "nothing more settled"
    );
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS - PRICE)
    );
}

// ---------------------------------------------------------------------------------------------
// Superwire

/// A `.wire` workflow as an operator would list it.
const WORKFLOW_SOURCE: &str = "workflow welcome {\n  input { message: string }\n  agent reply { instruction: \"Reply to ${input.message}\" }\n  output { result: agent.reply }\n}\n";

fn welcome_schema() -> Value {
    json!({
        "type": "object",
        "required": ["result"],
        "properties": {"result": {"type": "object", "required": ["message"]}}
    })
}

async fn register_superwire(env: &Env, executor: &superwire::Executor) -> (String, Address) {
    use base64::Engine as _;
    env.register_with(
        executor.base_url(),
        "superwire",
        "welcome",
        welcome_schema(),
        json!({"workflow_source_base64": base64::engine::general_purpose::STANDARD.encode(WORKFLOW_SOURCE)}),
    )
    .await
}

async fn propose_welcome(seeker: &SeekerClient, worker_id: &str) -> String {
    seeker
        .propose(&json!({
            "worker_id": worker_id,
            "task_type": "welcome",
            "input": {"message": "Write a short welcome message."},
            "sla": {"max_latency_ms": 8000},
            "acceptance_window_s": 0,
        }))
        .await
        .expect("welcome contract proposed")
        .id
}

/// The upstream events relayed into `contract_id`'s log, as `(upstream id, event name)` (no id
/// for an event the executor sent without one).
async fn relayed_events(env: &Env, contract_id: &str) -> Vec<(Option<u64>, String)> {
    let events = env
        .store
        .list_contract_events(contract_id, 0, 1000)
        .await
        .expect("contract events");
    events
        .iter()
        .filter(|event| event.kind.as_str() == "worker_event")
        .map(|event| {
            (
                event.details["upstream_id"].as_u64(),
                event.details["upstream_event"]
                    .as_str()
                    .expect("upstream event")
                    .to_owned(),
            )
        })
        .collect()
}

/// What the executor emitted for its only run, as `(id, event name)`.
fn emitted_events(executor: &superwire::Executor) -> Vec<(Option<u64>, String)> {
    let runs = executor.runs();
    assert_eq!(runs.len(), 1, "one run");
    executor
        .events(&runs[0].run_id)
        .expect("run events")
        .into_iter()
        .map(|event| (Some(event.id), event.event))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_hire_through_a_superwire_executor_relays_its_events_and_settles_on_chain() {
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    // Superwire has no health route: registration validated the listed workflow.
    assert_eq!(executor.counters().validations, 1);

    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert!(outcome.payment_response.is_some_and(|p| p.success));
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "settled", "{view}");
    assert_eq!(
        view["deliverable"]["content"]["output"]["content"]["result"]["message"],
        "reply to: Write a short welcome message.",
        "{view}"
    );

    let runs = executor.runs();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].streamed, "asked for text/event-stream");
    assert_eq!(runs[0].workflow_source, WORKFLOW_SOURCE);
    assert_eq!(runs[0].input["message"], "Write a short welcome message.");
    assert!(runs[0].secrets.is_empty(), "no secrets are sent");
    let emitted = emitted_events(&executor);
    assert!(emitted.len() >= 4, "{emitted:?}");
    assert_eq!(relayed_events(&env, &contract_id).await, emitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_superwire_stream_is_resumed_with_last_event_id_without_loss_or_duplicates() {
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        stream_cut: Some(StreamCut {
            after_events: 2,
            connections: 2,
        }),
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    let counters = executor.counters();
    assert_eq!(counters.stream_cuts, 2, "{counters:?}");
    assert_eq!(counters.resumes, 2, "{counters:?}");
    assert_eq!(counters.runs, 1, "resuming never starts another run");
    let emitted = emitted_events(&executor);
    let relayed = relayed_events(&env, &contract_id).await;
    assert_eq!(relayed, emitted, "every event exactly once, in order");
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_superwire_stream_without_ids_is_replayed_and_relayed_exactly_once() {
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        event_ids: false,
        stream_cut: Some(StreamCut {
            after_events: 2,
            connections: 1,
        }),
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    let counters = executor.counters();
    assert_eq!(counters.stream_cuts, 1, "{counters:?}");
    assert_eq!(counters.resumes, 1, "{counters:?}");
    assert_eq!(counters.runs, 1, "resuming never starts another run");
    // The reconnect replayed the run from its first event; the log has each event once.
    let emitted: Vec<(Option<u64>, String)> = emitted_events(&executor)
        .into_iter()
        .map(|(_, name)| (None, name))
        .collect();
    assert!(emitted.len() > 2, "{emitted:?}");
    let relayed = relayed_events(&env, &contract_id).await;
    assert_eq!(relayed, emitted, "every event exactly once, in order");
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeker_cancel_reaches_the_superwire_executor_and_nothing_is_settled() {
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        agents: (0..20).map(|i| format!("step{i}")).collect(),
        step_delay: std::time::Duration::from_millis(200),
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let paying = {
        let seeker = seeker.clone();
        let contract_id = contract_id.clone();
        tokio::spawn(async move { seeker.execute(&contract_id).await })
    };
    // Wait until the run streams, then cancel as the seeker.
    let started = tokio::time::Instant::now();
    while executor.runs().is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the run never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cancelled = env
        .send(
            Method::POST,
            &format!("/v1/contracts/{contract_id}/cancel"),
            &env.seeker_key,
            Some(&json!({})),
        )
        .await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let outcome = paying.await.expect("execute task").expect("execute");
    assert!(outcome.payment_response.is_none(), "{}", outcome.body);
    let counters = executor.counters();
    assert_eq!(counters.cancellations, 1, "{counters:?}");
    assert_eq!(executor.runs()[0].status, superwire::RunStatus::Cancelled);
    assert_eq!(env.contract(&contract_id).await["state"], "cancelled");
    assert_eq!(env.balance(pay_to).await, U256::ZERO);
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_superwire_workflow_is_a_worker_failure_and_nothing_is_settled() {
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        outcome: superwire::RunOutcome::Fail,
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 502, "{}", outcome.body);
    assert!(outcome.payment_response.is_none());
    let relayed = relayed_events(&env, &contract_id).await;
    assert_eq!(
        relayed.last().map(|(_, name)| name.as_str()),
        Some("workflow_failed")
    );
    assert_eq!(env.balance(pay_to).await, U256::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superwire_listing_needs_a_workflow_the_executor_accepts() {
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("superwire executor");
    for options in [
        json!({}),
        json!({"workflow_source_base64": "%%% not base64 %%%"}),
        // Valid base64 of an all-blank workflow: the executor's /validate refuses it.
        json!({"workflow_source_base64": "ICAK"}),
    ] {
        let response = env
            .http
            .post(env.url("/v1/workers"))
            .bearer_auth(&env.operator_key)
            .json(&json!({
                "endpoint": executor.base_url().as_str(),
                "protocol": "superwire",
                "pay_to": PrivateKeySigner::random().address().to_checksum(None),
                "network": env.devnet.network(),
                "asset": env.devnet.token().to_checksum(None),
                "tasks": {"welcome": {"price": PRICE.to_string(), "output_schema": welcome_schema()}},
                "max_parallel": 1,
                "protocol_options": options,
            }))
            .send()
            .await
            .expect("gateway answers");
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert!(status.is_client_error(), "{options}: {status} {body}");
        if options == json!({"workflow_source_base64": "ICAK"}) {
            // The executor's validation issues reach the operator.
            assert_eq!(body["error"]["details"]["check"], "validate", "{body}");
            assert!(
                body["error"]["details"]["diagnostics"]["issues"]
                    .as_array()
                    .is_some_and(|issues| !issues.is_empty()),
                "{body}"
            );
        }
    }
    assert_eq!(
        executor.counters().validations,
        1,
        "only the decodable source was probed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superwire_validate_diagnostics_are_shown_at_registration_and_in_the_listing() {
    let env = Env::start().await;
    let note = superwire::wire::Issue {
        path: "agent.reply.instruction".to_owned(),
        message: "instruction never mentions the output".to_owned(),
    };
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        validation_notes: vec![note.clone()],
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    use base64::Engine as _;
    let registered = env
        .send(
            Method::POST,
            "/v1/workers",
            &env.operator_key,
            Some(&json!({
                "endpoint": executor.base_url().as_str(),
                "protocol": "superwire",
                "pay_to": PrivateKeySigner::random().address().to_checksum(None),
                "network": env.devnet.network(),
                "asset": env.devnet.token().to_checksum(None),
                "tasks": {"welcome": {"price": PRICE.to_string(), "output_schema": welcome_schema()}},
                "max_parallel": 1,
                "protocol_options": {"workflow_source_base64":
                    base64::engine::general_purpose::STANDARD.encode(WORKFLOW_SOURCE)},
            })),
        )
        .await;
    let expected = json!({"issues": [{"path": note.path, "message": note.message}]});
    assert_eq!(registered["probe_diagnostics"], expected, "{registered}");
    let worker_id = registered["id"].as_str().expect("worker id");
    let listing = env
        .send(
            Method::GET,
            &format!("/v1/workers/{worker_id}"),
            &env.operator_key,
            None,
        )
        .await;
    assert_eq!(listing["probe_diagnostics"], expected, "{listing}");
}

/// A seeker's webhook endpoint that records every body it receives.
struct WebhookReceiver {
    url: Url,
    bodies: Arc<std::sync::Mutex<Vec<String>>>,
}

impl WebhookReceiver {
    async fn spawn() -> Self {
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = bodies.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |body: String| {
                let recorded = recorded.clone();
                async move {
                    recorded.lock().expect("webhook bodies").push(body);
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("webhook listener");
        let address = listener.local_addr().expect("webhook address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            url: Url::parse(&format!("http://{address}/hook")).expect("webhook URL"),
            bodies,
        }
    }

    fn text(&self) -> String {
        self.bodies.lock().expect("webhook bodies").join("\n")
    }
}

/// Every text and blob value of every table of the SQLite database at `db_url`, hex-encoded
/// (upper case), so text and binary columns are searched alike.
async fn every_stored_value_as_hex(db_url: &str) -> Vec<String> {
    use sqlx::{Connection as _, Row as _};
    let mut db = sqlx::SqliteConnection::connect(db_url)
        .await
        .expect("open the gateway's database");
    let tables: Vec<String> = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table'")
        .fetch_all(&mut db)
        .await
        .expect("tables")
        .iter()
        .map(|row| row.get::<String, _>(0))
        .collect();
    assert!(tables.iter().any(|t| t == "contract"), "{tables:?}");
    let mut values = Vec::new();
    for table in tables {
        let columns: Vec<String> = sqlx::query(&format!("PRAGMA table_info(\"{table}\")"))
            .fetch_all(&mut db)
            .await
            .expect("columns")
            .iter()
            .map(|row| row.get::<String, _>("name"))
            .collect();
        for column in columns {
            let rows = sqlx::query(&format!("SELECT hex(\"{column}\") FROM \"{table}\""))
                .fetch_all(&mut db)
                .await
                .expect("column values");
            values.extend(rows.iter().map(|row| row.get::<String, _>(0)));
        }
    }
    values
}

fn upper_hex(text: &str) -> String {
    hex::encode_upper(text.as_bytes())
}

/// Environment variable carrying the secret value to [`secrets_scenario_in_a_logging_process`].
const SCENARIO_SECRET_ENV: &str = "HIREGATE_TEST_SEEKER_SECRET";

/// The `X-Hiregate-Secrets` value the scenario sends for `secret_value`.
fn secrets_header_value(secret_value: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(json!({"api_key": secret_value}).to_string())
}

/// Seeker secrets reach the Superwire executor and nowhere else: not the database, the event
/// log, the contract view, webhooks — checked by the scenario itself — nor the logs, checked
/// here. The logs must be those of every thread of the gateway, its background jobs and the
/// executor, at TRACE: a thread-local subscriber misses some (other tests of this binary race
/// it for tracing's callsite cache), so the scenario runs alone in a child process of this test
/// binary with the gateway's test subscriber on (`TEST_LOG`, `RUST_LOG=trace`, `--nocapture`),
/// and this test reads everything it printed.
#[test]
fn seeker_secrets_reach_the_superwire_executor_and_nothing_else() {
    let secret_value = format!("sk-live-{}", uuid::Uuid::new_v4().simple());
    let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "secrets_scenario_in_a_logging_process",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TEST_LOG", "1")
        .env("RUST_LOG", "trace")
        .env(SCENARIO_SECRET_ENV, &secret_value)
        .output()
        .expect("the scenario process runs");
    let printed = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let tail: String = {
        let chars: Vec<char> = printed.chars().collect();
        chars[chars.len().saturating_sub(4000)..].iter().collect()
    };
    assert!(output.status.success(), "the scenario failed: {tail}");
    assert!(
        printed.contains("test result: ok. 1 passed"),
        "the scenario did not run: {tail}"
    );
    assert!(
        printed.contains("forwarding to worker") && printed.contains("TRACE"),
        "the gateway's logs were not captured at TRACE: {tail}"
    );
    assert!(!printed.contains(&secret_value), "the secret was logged");
    assert!(
        !printed.contains(&secrets_header_value(&secret_value)),
        "the secrets header was logged"
    );
}

/// The scenario of [`seeker_secrets_reach_the_superwire_executor_and_nothing_else`], run by it
/// in a child process (it needs the secret from [`SCENARIO_SECRET_ENV`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a child process by seeker_secrets_reach_the_superwire_executor_and_nothing_else"]
async fn secrets_scenario_in_a_logging_process() {
    use base64::Engine as _;
    let secret_value = std::env::var(SCENARIO_SECRET_ENV).expect("secret from the parent test");
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        required_secrets: vec!["api_key".to_owned()],
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;

    let secrets = json!({"api_key": secret_value});
    let header_value = secrets_header_value(&secret_value);
    let webhooks = WebhookReceiver::spawn().await;
    let contract_id = env
        .seeker()
        .await
        .propose(&json!({
            "worker_id": worker_id,
            "task_type": "welcome",
            "input": {"message": "Write a short welcome message."},
            "sla": {"max_latency_ms": 8000},
            "acceptance_window_s": 0,
            "webhook_url": webhooks.url.as_str(),
        }))
        .await
        .expect("welcome contract proposed")
        .id;

    // A malformed header is refused at the edge and changes nothing.
    for malformed in [
        "%%% not base64 %%%".to_owned(),
        base64::engine::general_purpose::STANDARD.encode("[\"not an object\"]"),
    ] {
        let response = env
            .http
            .post(env.url(&format!("/v1/contracts/{contract_id}/execute")))
            .bearer_auth(&env.seeker_key)
            .header("X-Hiregate-Secrets", malformed)
            .send()
            .await
            .expect("gateway answers");
        assert_eq!(response.status(), 400);
        let body: Value = response.json().await.expect("error body");
        assert_eq!(body["error"]["code"], "invalid_secrets_header", "{body}");
    }
    assert_eq!(env.contract(&contract_id).await["state"], "offered");
    assert!(executor.runs().is_empty());

    // The paid hire, with the secrets on every request of this seeker (the 402 retry too).
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        "x-hiregate-secrets",
        reqwest::header::HeaderValue::from_str(&header_value).expect("header value"),
    );
    let seeker = env.seeker().await.with_http_client(
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("http client"),
    );
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert!(outcome.payment_response.is_some_and(|p| p.success));
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    let runs = executor.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        Value::Object(runs[0].secrets.expose().clone()),
        secrets,
        "the executor received exactly the seeker's secrets"
    );

    // Without the header, the workflow that needs secrets is refused and nothing is settled.
    let (bare_worker_id, bare_pay_to) = register_superwire(&env, &executor).await;
    let bare_seeker = env.seeker().await;
    let bare_contract_id = propose_welcome(&bare_seeker, &bare_worker_id).await;
    let refused = bare_seeker
        .execute(&bare_contract_id)
        .await
        .expect("execute");
    assert!(refused.status >= 400, "{}", refused.body);
    assert!(refused.payment_response.is_none(), "{}", refused.body);
    assert_eq!(env.balance(bare_pay_to).await, U256::ZERO);
    assert_eq!(
        env.balance(bare_seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS)
    );
    let bare_state = env.contract(&bare_contract_id).await["state"].clone();
    assert_ne!(bare_state, "settled");
    assert_ne!(bare_state, "accepted");

    // Nowhere else: not the database (every text/blob column of every table) ...
    let db_url = format!("sqlite://{}/hiregate.db", env._db_dir.path().display());
    let needles = [upper_hex(&secret_value), upper_hex(&header_value)];
    let stored = every_stored_value_as_hex(&db_url).await;
    assert!(
        stored.iter().any(|v| v.contains(&upper_hex(&contract_id))),
        "the scan sees the contract's rows"
    );
    for needle in &needles {
        assert!(
            !stored.iter().any(|value| value.contains(needle.as_str())),
            "a stored value holds the seeker's secret"
        );
    }
    // ... not the event log the SSE feed and webhooks are made from, nor the contract view ...
    let events = env
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .expect("contract events");
    assert!(
        events.iter().any(|e| e.kind.as_str() == "worker_event"),
        "events relayed"
    );
    let event_text = format!("{events:?}");
    let view_text = env.contract(&contract_id).await.to_string();
    for text in [&event_text, &view_text] {
        assert!(!text.contains(&secret_value), "the secret leaked: {text}");
        assert!(!text.contains(&header_value));
    }
    // ... nor the webhooks delivered for the contract.
    let started = tokio::time::Instant::now();
    while !webhooks.text().contains("settled") {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no webhook for the settlement: {}",
            webhooks.text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let delivered = webhooks.text();
    assert!(delivered.contains(&contract_id), "{delivered}");
    assert!(
        !delivered.contains(&secret_value),
        "a webhook carried the secret"
    );
    assert!(!delivered.contains(&header_value));
    // The logs are checked by the parent test.
}

// ---------------------------------------------------------------------------------------------
// worker-sdk workers as verifiers and as cancellable hire workers

/// A worker-sdk worker offering `swarm`, served on a free port until the test ends; with
/// `verdict`, it also serves `/verify` and counts the votes it casts.
struct SdkWorker {
    server: hiregate_worker_sdk::RunningServer,
    votes: Arc<std::sync::atomic::AtomicUsize>,
    _stop: tokio_util::sync::DropGuard,
}

impl SdkWorker {
    async fn spawn(
        env: &Env,
        verdict: Option<hiregate_worker_sdk::verify::Verdict>,
        handler: impl hiregate_worker_sdk::TaskHandler,
    ) -> Self {
        let votes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut builder = hiregate_worker_sdk::WorkerBuilder::new("sdk-worker", "1.0.0")
            .task_type("swarm")
            .gateway_keys(hiregate_worker_sdk::GatewayKeys::remote(
                env.url("/.well-known/jwks.json"),
            ))
            .wait_for_handler_indefinitely();
        if let Some(verdict) = verdict {
            let counted = Arc::clone(&votes);
            builder = builder.verifier(
                "sdk-runtime",
                "sdk-judge-v1",
                move |_request: hiregate_worker_sdk::verify::VerifyRequest| {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let verdict = verdict.clone();
                    async move { verdict }
                },
            );
        }
        let worker = builder.build(handler).expect("sdk worker builds");
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let server = hiregate_worker_sdk::serve(
            worker.router(),
            "127.0.0.1:0".parse().expect("address"),
            async move { stopped.cancelled().await },
        )
        .await
        .expect("sdk worker serves");
        Self {
            server,
            votes,
            _stop: stop.drop_guard(),
        }
    }

    fn base_url(&self) -> Url {
        self.server.base_url()
    }

    fn votes(&self) -> usize {
        self.votes.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn unused_handler(
    _ctx: hiregate_worker_sdk::TaskContext,
    _input: Value,
) -> hiregate_worker_sdk::TaskOutcome {
    hiregate_worker_sdk::TaskOutcome::failed("NOT_HIRED", "this worker only verifies")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_worker_votes_as_a_crosscheck_verifier_in_a_paid_hire() {
    use hiregate_worker_sdk::verify::Verdict;
    let env = Env::start().await;
    let executor = Executor::spawn(ExecutorConfig::default())
        .await
        .expect("executor");
    let (worker_id, pay_to) = env.register(executor.base_url(), "wattswarm").await;
    let verifier_operator = env.create_key("operator").await;
    let approving = SdkWorker::spawn(&env, Some(Verdict::pass(0.9)), unused_handler).await;
    let dissenting =
        SdkWorker::spawn(&env, Some(Verdict::fail(1.0, vec![152])), unused_handler).await;
    let mut ids = Vec::new();
    for worker in [&approving, &dissenting] {
        let (id, _) = env
            .register_as(
                &verifier_operator,
                &worker.base_url(),
                "hire",
                "swarm",
                answer_schema(),
                json!({}),
            )
            .await;
        ids.push(id);
    }
    let seeker = env.seeker().await;
    let quorum = |verifier: &str| {
        json!({"min_verifiers": 1, "min_pass_ratio": 1.0, "min_score": 0.5,
               "aggregation": "count", "verifiers": [verifier]})
    };

    // The approving SDK verifier's vote passes the candidate: settled on chain.
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(&ids[0])).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert!(outcome.payment_response.is_some_and(|p| p.success));
    assert_eq!(approving.votes(), 1);
    let view = env.contract(&contract_id).await;
    assert_eq!(view["state"], "settled", "{view}");
    assert_eq!(
        view["verification"]["details"]["quorum"]["hash_verified"], 1,
        "the SDK's verifier_result_hash binds the policy the gateway sent: {view}"
    );
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));

    // The dissenting SDK verifier's vote fails it: rejected, nothing more settled.
    let contract_id = propose_crosscheck(&seeker, &worker_id, quorum(&ids[1])).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 422, "{}", outcome.body);
    assert!(outcome.payment_response.is_none());
    assert_eq!(dissenting.votes(), 1);
    assert_eq!(env.contract(&contract_id).await["state"], "rejected");
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS - PRICE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verifiers_that_cannot_vote_independently_are_refused_before_signing() {
    let env = Env::start().await;
    let executor = Executor::spawn(ExecutorConfig::default())
        .await
        .expect("executor");
    let (worker_id, _) = env.register(executor.base_url(), "wattswarm").await;
    // Another listing of the same operator.
    let sibling = Verifier::spawn(VerifierConfig::named("sibling", VerifierBehaviour::Honest))
        .await
        .expect("verifier");
    let (sibling_id, _) = env.register(sibling.base_url(), "wattswarm").await;
    // Another operator's hire worker that does not serve /verify.
    let other_operator = env.create_key("operator").await;
    let no_verify = SdkWorker::spawn(&env, None, unused_handler).await;
    let (no_verify_id, _) = env
        .register_as(
            &other_operator,
            &no_verify.base_url(),
            "hire",
            "swarm",
            answer_schema(),
            json!({}),
        )
        .await;
    // Another operator's WattSwarm verifier that failed its health probe (recorded the way
    // the health loop records it; the loop itself runs hourly in this gateway's settings).
    let failing = Verifier::spawn(VerifierConfig::named("failing", VerifierBehaviour::Honest))
        .await
        .expect("verifier");
    let (failing_id, _) = env
        .register_as(
            &other_operator,
            failing.base_url(),
            "wattswarm",
            "swarm",
            answer_schema(),
            json!({}),
        )
        .await;
    env.store
        .record_probe(
            &failing_id.parse().expect("worker id"),
            &hiregate_store::ProbeResult::Failed {
                reason: "health check failed: connection refused".to_owned(),
            },
            1,
            chrono::Utc::now(),
        )
        .await
        .expect("probe recorded");
    let (_, before) = env
        .call(
            &env.base,
            Method::GET,
            "/v1/contracts",
            &env.seeker_key,
            None,
        )
        .await;
    for (verifier, code) in [
        (failing_id.as_str(), "verifier_unhealthy"),
        (worker_id.as_str(), "verifier_is_worker"),
        (sibling_id.as_str(), "verifier_same_operator"),
        (no_verify_id.as_str(), "verifier_cannot_verify"),
        ("wk_01jz0000000000000000000000", "verifier_not_found"),
        ("not-a-listing", "verifier_not_found"),
    ] {
        let (status, body) = env
            .call(
                &env.base,
                Method::POST,
                "/v1/contracts",
                &env.seeker_key,
                Some(&json!({
                    "worker_id": worker_id,
                    "task_type": "swarm",
                    "input": {"prompt": "Cross-check me."},
                    "verification": {"policy_id": "vp.crosscheck.v1", "policy_params": {"quorum": {
                        "min_verifiers": 1, "min_pass_ratio": 1.0, "verifiers": [verifier]}}},
                })),
            )
            .await;
        assert_eq!(status, 422, "{verifier}: {body}");
        assert_eq!(body["error"]["code"], code, "{verifier}: {body}");
        assert_eq!(body["error"]["details"]["verifier"], verifier, "{body}");
    }
    let (_, after) = env
        .call(
            &env.base,
            Method::GET,
            "/v1/contracts",
            &env.seeker_key,
            None,
        )
        .await;
    assert_eq!(before, after, "no contract was stored");
    assert_eq!(sibling.counters().verify_calls, 0);
    assert_eq!(failing.counters().verify_calls, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeker_cancel_reaches_an_sdk_worker_that_declares_cancel_and_nothing_is_settled() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let env = Env::start().await;
    let started = Arc::new(AtomicBool::new(false));
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let handler = {
        let (started, saw_cancel) = (Arc::clone(&started), Arc::clone(&saw_cancel));
        move |ctx: hiregate_worker_sdk::TaskContext, _input: Value| {
            let (started, saw_cancel) = (Arc::clone(&started), Arc::clone(&saw_cancel));
            async move {
                started.store(true, Ordering::SeqCst);
                tokio::select! {
                    () = ctx.cancellation().cancelled() => {
                        saw_cancel.store(true, Ordering::SeqCst);
                        hiregate_worker_sdk::TaskOutcome::failed("STOPPED", "stopped on cancel")
                    }
                    () = tokio::time::sleep(std::time::Duration::from_secs(30)) => {
                        hiregate_worker_sdk::TaskOutcome::json(json!({"answer": "late", "confidence": 1.0}))
                    }
                }
            }
        }
    };
    let worker = SdkWorker::spawn(&env, None, handler).await;
    let (worker_id, pay_to) = env.register(&worker.base_url(), "hire").await;
    let seeker = env.seeker().await;
    let contract_id = env.propose(&seeker, &worker_id, "Take your time.").await;
    let paying = {
        let seeker = seeker.clone();
        let contract_id = contract_id.clone();
        tokio::spawn(async move { seeker.execute(&contract_id).await })
    };
    let waiting = tokio::time::Instant::now();
    while !started.load(Ordering::SeqCst) {
        assert!(
            waiting.elapsed() < std::time::Duration::from_secs(10),
            "the task never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let cancelled = env
        .send(
            Method::POST,
            &format!("/v1/contracts/{contract_id}/cancel"),
            &env.seeker_key,
            Some(&json!({})),
        )
        .await;
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert!(
        saw_cancel.load(Ordering::SeqCst),
        "the handler's token fired"
    );
    let told = env
        .events_of_kind(&contract_id, "worker_cancel_requested")
        .await;
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0]["outcome"], "acknowledged", "{told:?}");
    assert_eq!(told[0]["protocol"], "hire");
    let outcome = paying.await.expect("execute task").expect("execute");
    assert!(outcome.payment_response.is_none(), "{}", outcome.body);
    assert_eq!(env.contract(&contract_id).await["state"], "cancelled");
    assert_eq!(env.balance(pay_to).await, U256::ZERO);
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS)
    );
    // Cancelling again changes nothing.
    let again = env
        .send(
            Method::POST,
            &format!("/v1/contracts/{contract_id}/cancel"),
            &env.seeker_key,
            Some(&json!({})),
        )
        .await;
    assert_eq!(again["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wattswarm_profile_is_chosen_at_proposal_among_the_declared_ones() {
    let env = Env::start().await;
    let executor = Executor::spawn(ExecutorConfig::default())
        .await
        .expect("executor");
    let (worker_id, pay_to) = env.register(executor.base_url(), "wattswarm").await;
    let seeker = env.seeker().await;

    // An undeclared profile is refused before anything is signed.
    let (status, body) = env
        .call(
            &env.base,
            Method::POST,
            "/v1/contracts",
            &env.seeker_key,
            Some(&json!({"worker_id": worker_id, "task_type": "swarm",
                         "input": {"prompt": "x"}, "profile": "reckless"})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "profile_not_declared", "{body}");

    // A declared one is pinned in the terms and sent with every attempt.
    let contract_id = seeker
        .propose(&json!({
            "worker_id": worker_id,
            "task_type": "swarm",
            "input": {"prompt": "Summarize the key risks."},
            "sla": {"max_latency_ms": 8000},
            "acceptance_window_s": 0,
            "profile": "careful",
        }))
        .await
        .expect("contract proposed")
        .id;
    let view = env.contract(&contract_id).await;
    assert_eq!(view["terms"]["execution"]["profile"], "careful", "{view}");
    assert_eq!(
        view["terms"]["execution"]["provider_family"], "reference-wattswarm",
        "{view}"
    );
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
    let request = &executor.requests()[0];
    assert_eq!(request.profile, "careful");
    assert_eq!(
        request.stage,
        hiregate_integration_tests::reference::wattswarm::wire::Stage::Explore
    );
    let contract = &request.task_contract;
    assert_eq!(contract.output_schema, answer_schema());
    assert_eq!(contract.other["policy"]["policy_id"], "vp.schema_only.v1");
    let budget = contract.budget.as_ref().expect("budget");
    assert_eq!(budget["max_latency_ms"], 8000);
    assert_eq!(budget["price"]["amount"], PRICE.to_string());
    // The runtime that answered is recorded with the attempt.
    let runtime = env.events_of_kind(&contract_id, "worker_runtime").await;
    assert_eq!(runtime.len(), 1, "{runtime:?}");
    assert_eq!(runtime[0]["model_id"], "reference-model-v1");
    // The seed's example answer, its inline evidence kept with the attempt's deliverable.
    let settled = env.contract(&contract_id).await;
    assert_eq!(settled["state"], "settled", "{settled}");
    assert!(
        settled.to_string().contains("trace:attempt-1"),
        "inline evidence kept: {settled}"
    );
    let stored = executor
        .stored_response(&request.execution_id)
        .expect("stored execution");
    assert_eq!(
        stored.candidate_output["answer"],
        "careful::Summarize the key risks."
    );

    // Without a choice, the executor's first declared profile.
    let (_, outcome) = hire(&env, &seeker, &worker_id, "Again.").await;
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert_eq!(executor.requests()[1].profile, "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_taken_by_another_instance_stops_the_superwire_stream_held_by_the_first() {
    cancel_from_another_instance(Env::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_cancel_taken_by_another_instance_stops_the_superwire_stream_held_by_the_first()
{
    let test = "postgres_a_cancel_taken_by_another_instance_stops_the_superwire_stream";
    if let Some(env) = Env::start_on_postgres(test).await {
        cancel_from_another_instance(env).await;
    }
}

/// Two gateway instances on `env`'s database: the seeker pays on instance 1, which streams
/// the Superwire run; the cancel reaches instance 2.
async fn cancel_from_another_instance(env: Env) {
    let second = env.second_instance().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig {
        agents: (0..20).map(|i| format!("step{i}")).collect(),
        step_delay: std::time::Duration::from_millis(200),
        ..superwire::ExecutorConfig::default()
    })
    .await
    .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    // The seeker pays on instance 1, which streams the run.
    let paying = {
        let seeker = seeker.clone();
        let contract_id = contract_id.clone();
        tokio::spawn(async move { seeker.execute(&contract_id).await })
    };
    let waiting = tokio::time::Instant::now();
    while executor.runs().is_empty() {
        assert!(
            waiting.elapsed() < std::time::Duration::from_secs(10),
            "the run never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The cancel reaches instance 2, which holds no stream.
    let (status, cancelled) = env
        .call(
            &second,
            Method::POST,
            &format!("/v1/contracts/{contract_id}/cancel"),
            &env.seeker_key,
            Some(&json!({})),
        )
        .await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    let outcome = paying.await.expect("execute task").expect("execute");
    assert!(outcome.payment_response.is_none(), "{}", outcome.body);
    // Instance 1 saw the cancel in the store and told the executor, once.
    let counters = executor.counters();
    assert_eq!(counters.cancellations, 1, "{counters:?}");
    assert_eq!(executor.runs()[0].status, superwire::RunStatus::Cancelled);
    let told = env
        .events_of_kind(&contract_id, "worker_cancel_requested")
        .await;
    assert!(
        told.iter().any(|t| t["outcome"] == "delegated"),
        "instance 2 delegated: {told:?}"
    );
    assert!(
        told.iter()
            .any(|t| t["outcome"] == "acknowledged" && t["by"] == "streaming_instance"),
        "instance 1 told the executor: {told:?}"
    );
    // This attempt's own cache key: a retry would not replay its cached agent outputs.
    assert_eq!(
        executor.runs()[0].options.cache_key.as_deref(),
        Some(format!("{contract_id}-attempt-1").as_str())
    );
    assert_eq!(env.contract(&contract_id).await["state"], "cancelled");
    assert_eq!(env.balance(pay_to).await, U256::ZERO);
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superwire_workflow_changed_after_signing_is_not_run_for_the_contract() {
    use base64::Engine as _;
    let env = Env::start().await;
    let executor = superwire::Executor::spawn(superwire::ExecutorConfig::default())
        .await
        .expect("superwire executor");
    let (worker_id, pay_to) = register_superwire(&env, &executor).await;
    let seeker = env.seeker().await;
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let view = env.contract(&contract_id).await;
    let pinned = view["terms"]["execution"]["workflow_digest"].clone();
    assert!(
        pinned.as_str().is_some_and(|d| d.starts_with("sha256:")),
        "{view}"
    );
    // The operator lists another workflow after the contract was signed.
    let other = WORKFLOW_SOURCE.replace("Reply to", "Answer");
    let patched = env
        .send(
            Method::PATCH,
            &format!("/v1/workers/{worker_id}"),
            &env.operator_key,
            Some(&json!({"protocol_options": {"workflow_source_base64":
                base64::engine::general_purpose::STANDARD.encode(&other)}})),
        )
        .await;
    assert_eq!(
        executor.counters().validations,
        2,
        "the new workflow was validated"
    );
    assert!(patched["id"].is_string(), "{patched}");
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 502, "{}", outcome.body);
    assert!(
        outcome.body.to_string().contains("workflow_changed"),
        "{}",
        outcome.body
    );
    assert!(outcome.payment_response.is_none());
    assert!(
        executor.runs().is_empty(),
        "the changed workflow never ran for it"
    );
    assert_eq!(env.balance(pay_to).await, U256::ZERO);
    assert_eq!(
        env.balance(seeker.payer().unwrap()).await,
        U256::from(SEEKER_FUNDS)
    );
    // A contract proposed now pins the new workflow and runs it.
    let contract_id = propose_welcome(&seeker, &worker_id).await;
    let outcome = seeker.execute(&contract_id).await.expect("execute");
    assert_eq!(outcome.status, 200, "{}", outcome.body);
    assert_eq!(executor.runs()[0].workflow_source, other);
    assert_eq!(env.balance(pay_to).await, U256::from(PRICE));
}
