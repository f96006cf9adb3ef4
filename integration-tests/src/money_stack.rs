//! The deployment the money-truth tests break on purpose: a devnet, the OFFICIAL TypeScript
//! facilitator behind a [`FaultProxy`], one or two `hiregate serve` processes on one database,
//! and a [`ScriptedWorker`] in the test process.
//!
//! | part | real or scripted |
//! |---|---|
//! | chain | real anvil ([`Devnet`]); automine can be turned off to leave a settlement unmined |
//! | facilitator | real: `tools/interop/facilitator-server.mjs` (`x402Facilitator` + `registerExactEvmScheme`) |
//! | gateway ↔ facilitator | [`FaultProxy`]: passes through unless a test scripts a lost or garbled answer; or no facilitator process at all ([`FacilitatorChoice::Embedded`]) |
//! | gateway | the real binary as a child: killed with SIGKILL, restarted on the same database, or joined by a second instance (PostgreSQL) |
//! | worker | a real hire worker (worker-sdk) whose output carries a marker derived from the contract id, never from the input, so a leak of the deliverable can be searched for |
//!
//! The worker reads its behaviour from the task input: `mode` = `ok` (answer at once), `slow`
//! (answer after `delay_ms`), `pending` (answer `pending`, finish after `delay_ms`), `file` (a
//! JSON file deliverable the worker hosts and serves only after `file_delay_ms`, so the
//! gateway's verification is slow), `invalid` (a deliverable the summary schema rejects, still
//! carrying the marker, so a rejected deliverable shown anywhere is found). It counts executions
//! and file downloads per contract.
//!
//! With [`MoneyStackOptions::escrow`] the gateways also run escrowed hires (x402
//! `auth-capture`): an operator key for the devnet chain (the escrow's `captureAuthorizer`,
//! funded with ETH for gas), an `[escrow] treasury`, and a listing that takes both schemes with
//! a marketplace fee. [`MoneyStack::escrow_events`] reads every escrow event of the chain, so a
//! test can count captures and voids without trusting the gateway's hashes.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::Path,
    sync::{Arc, Mutex, OnceLock},
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256},
    providers::Provider as _,
    rpc::types::{Filter, TransactionInput, TransactionRequest},
    signers::local::PrivateKeySigner,
    sol_types::SolCall as _,
};
use axum::{
    Router,
    extract::{Path as UrlPath, State},
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use hiregate_payments::{
    AuthCaptureSignOptions, EscrowEvent, PaymentPayload,
    auth_capture::{abi::IAuthCaptureEscrow, escrow::payment_events},
    devnet::{Devnet, DevnetOptions},
    sign_auth_capture_payment,
};
use hiregate_worker_sdk::{
    GatewayKeys, Output, TaskContext, TaskOutcome, WorkerBuilder, example_workers::SUMMARIZE,
    protocol::file_output, seeker::SeekerClient,
};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};
use url::Url;

use crate::{
    fault_proxy::FaultProxy,
    harness::{
        Binaries, CliRun, GatewayConfig, GatewayProcess, HarnessError, HarnessResult, Listed,
        OfficialFacilitatorProcess, RecoveryKnobs, checked_json, list_summarize_worker,
        propose_contract, summarize_proposal,
    },
};

/// States no contract leaves.
pub const TERMINAL_STATES: [&str; 8] = [
    "settled",
    "settlement_failed",
    "rejected",
    "failed",
    "voided",
    "cancelled",
    "expired",
    "refunded",
];

/// The unique string the worker puts into the deliverable of `contract_id` (and nowhere else):
/// finding it in an answer means the deliverable's content was shown.
pub fn deliverable_marker(contract_id: &str) -> String {
    let digest = Sha256::digest(format!("deliverable of {contract_id}").as_bytes());
    format!("paid-content-{}", &hex::encode(digest)[..24])
}

/// The deliverable the worker returns for `contract_id` (valid against the summary schema).
pub fn deliverable_content(contract_id: &str) -> Value {
    json!({"summary": deliverable_marker(contract_id), "confidence": 0.9})
}

#[derive(Default)]
struct WorkerBook {
    executions: HashMap<String, u32>,
    file_fetches: HashMap<String, u32>,
    file_delays: HashMap<String, Duration>,
}

#[derive(Clone)]
struct WorkerShared {
    book: Arc<Mutex<WorkerBook>>,
    base: Arc<OnceLock<Url>>,
}

impl WorkerShared {
    fn book(&self) -> std::sync::MutexGuard<'_, WorkerBook> {
        self.book
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A hire worker served from the test process (see the module doc for its modes).
pub struct ScriptedWorker {
    shared: WorkerShared,
    url: Url,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedWorker")
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

impl ScriptedWorker {
    /// Serves the worker on a free port, trusting the contract tokens of the gateway at
    /// `gateway` (its JWKS is fetched once and cached, so a killed instance does not matter).
    pub async fn start(gateway: &Url) -> HarnessResult<Self> {
        let shared = WorkerShared {
            book: Arc::default(),
            base: Arc::default(),
        };
        let handler_shared = shared.clone();
        let worker = WorkerBuilder::new("scripted-worker", "1.0.0")
            .task_type(SUMMARIZE)
            .gateway_keys(GatewayKeys::remote(gateway.join(".well-known/jwks.json")?))
            .build(move |ctx: TaskContext, input: Value| {
                let shared = handler_shared.clone();
                async move { perform(shared, ctx, input).await }
            })
            .map_err(|error| HarnessError::Stop {
                name: "scripted-worker".to_owned(),
                reason: format!("cannot build: {error}"),
            })?;
        let router = worker.router().merge(
            Router::new()
                .route("/files/{name}", get(serve_file))
                .with_state(shared.clone()),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|source| HarnessError::File {
                path: "127.0.0.1:0".into(),
                source,
            })?;
        let address = listener.local_addr().map_err(|source| HarnessError::File {
            path: "127.0.0.1:0".into(),
            source,
        })?;
        let url = Url::parse(&format!("http://{address}/"))?;
        let _ = shared.base.set(url.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            shared,
            url,
            server,
        })
    }

    /// Base URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// How many times the task handler ran for `contract_id` (all attempts).
    pub fn executions(&self, contract_id: &str) -> u32 {
        self.shared
            .book()
            .executions
            .get(contract_id)
            .copied()
            .unwrap_or(0)
    }

    /// How many times the file deliverable of `contract_id` was requested.
    pub fn file_fetches(&self, contract_id: &str) -> u32 {
        self.shared
            .book()
            .file_fetches
            .get(contract_id)
            .copied()
            .unwrap_or(0)
    }

    /// From now on the file of `contract_id` is served after `delay` (e.g. zero, once the
    /// crash the slow download was for has happened).
    pub fn set_file_delay(&self, contract_id: &str, delay: Duration) {
        self.shared
            .book()
            .file_delays
            .insert(contract_id.to_owned(), delay);
    }
}

impl Drop for ScriptedWorker {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn perform(shared: WorkerShared, ctx: TaskContext, input: Value) -> TaskOutcome {
    let contract_id = ctx.contract_id().to_string();
    *shared
        .book()
        .executions
        .entry(contract_id.clone())
        .or_default() += 1;
    let delay = Duration::from_millis(input["delay_ms"].as_u64().unwrap_or(0));
    let content = deliverable_content(&contract_id);
    match input["mode"].as_str().unwrap_or("ok") {
        "slow" => {
            tokio::time::sleep(delay).await;
            TaskOutcome::json(content)
        }
        "invalid" => TaskOutcome::json(json!({
            "summary": deliverable_marker(&contract_id),
            "confidence": 7,
        })),
        "pending" => TaskOutcome::pending(None, async move {
            tokio::time::sleep(delay).await;
            TaskOutcome::json(content)
        }),
        "file" => {
            let file_delay = Duration::from_millis(input["file_delay_ms"].as_u64().unwrap_or(0));
            shared
                .book()
                .file_delays
                .entry(contract_id.clone())
                .or_insert(file_delay);
            let bytes = content.to_string().into_bytes();
            let Some(base) = shared.base.get() else {
                return TaskOutcome::failed("NOT_READY", "worker URL unknown");
            };
            match base.join(&format!("files/{contract_id}.json")) {
                Ok(url) => {
                    TaskOutcome::output(Output::File(file_output(url, "application/json", &bytes)))
                }
                Err(error) => TaskOutcome::failed("BAD_URL", error.to_string()),
            }
        }
        _ => TaskOutcome::json(content),
    }
}

async fn serve_file(
    State(shared): State<WorkerShared>,
    UrlPath(name): UrlPath<String>,
) -> impl IntoResponse {
    let Some(contract_id) = name.strip_suffix(".json").map(str::to_owned) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let delay = {
        let mut book = shared.book();
        *book.file_fetches.entry(contract_id.clone()).or_default() += 1;
        book.file_delays.get(&contract_id).copied()
    };
    let Some(delay) = delay else {
        return StatusCode::NOT_FOUND.into_response();
    };
    tokio::time::sleep(delay).await;
    (
        [(header::CONTENT_TYPE, "application/json")],
        deliverable_content(&contract_id).to_string(),
    )
        .into_response()
}

/// Where the gateways keep their data.
#[derive(Debug, Clone)]
pub enum Database {
    /// A fresh SQLite file in the stack's directory.
    Sqlite,
    /// A database URL the caller created (and drops), e.g. a fresh PostgreSQL database.
    Url(String),
}

/// Which facilitator the gateways settle through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FacilitatorChoice {
    /// The official TypeScript facilitator, over HTTP, behind the [`FaultProxy`].
    OfficialBehindProxy,
    /// The gateway's bundled facilitator in-process (`facilitator.mode = "embedded"`), with the
    /// devnet's relayer key: the gateway broadcasts settlements itself. The official
    /// facilitator and the proxy still run, unused.
    Embedded,
}

/// How to start a [`MoneyStack`].
#[derive(Debug, Clone)]
pub struct MoneyStackOptions {
    /// The database.
    pub database: Database,
    /// The facilitator.
    pub facilitator: FacilitatorChoice,
    /// Recovery timing of the gateway processes.
    pub knobs: RecoveryKnobs,
    /// Task SLA (`sla.max_latency_ms`) of the contracts [`MoneyStack::proposal`] makes.
    pub max_latency_ms: u64,
    /// Escrowed hires: `None` runs the gateways without an escrow operator.
    pub escrow: Option<EscrowOptions>,
    /// The listing is paid upfront (`payment_flow: "upfront"`): settled before the worker is
    /// called.
    pub upfront: bool,
}

/// How a [`MoneyStack`] runs escrowed (`auth-capture`) hires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowOptions {
    /// The listing's `fee_policy.fee_bps`: the treasury's cut of every capture.
    pub fee_bps: u16,
}

/// The escrow's parties on a [`MoneyStack`] started with [`EscrowOptions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowParties {
    /// The gateway's operator (`captureAuthorizer`): sends authorize, capture, void, refund.
    pub operator: Address,
    /// `[escrow] treasury`: receives the fee of every capture.
    pub treasury: Address,
    /// The listing's fee.
    pub fee_bps: u16,
}

impl EscrowParties {
    /// The fee of a capture of `amount` (rounded down, as the escrow does).
    pub fn fee_of(&self, amount: U256) -> U256 {
        amount * U256::from(self.fee_bps) / U256::from(10_000u32)
    }
}

/// Token balances around one escrowed payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EscrowBalances {
    /// The payer.
    pub payer: U256,
    /// The worker's payout address.
    pub worker: U256,
    /// The treasury.
    pub treasury: U256,
    /// The operator's token store in the escrow: what is locked right now.
    pub token_store: U256,
}

impl Default for MoneyStackOptions {
    fn default() -> Self {
        Self {
            database: Database::Sqlite,
            facilitator: FacilitatorChoice::OfficialBehindProxy,
            knobs: RecoveryKnobs::FAST,
            max_latency_ms: 15_000,
            escrow: None,
            upfront: false,
        }
    }
}

/// Everything one money-truth test runs against. Fields drop in order: gateways, worker,
/// proxy, facilitator, anvil, temp dir.
#[derive(Debug)]
pub struct MoneyStack {
    /// The gateway (the first instance).
    pub gateway: GatewayProcess,
    /// A second instance on the same database, once [`MoneyStack::start_second_instance`] ran.
    pub second: Option<GatewayProcess>,
    /// The worker.
    pub worker: ScriptedWorker,
    /// The fault proxy the gateways use as their facilitator.
    pub proxy: FaultProxy,
    /// The official facilitator behind the proxy.
    pub facilitator: OfficialFacilitatorProcess,
    /// The chain.
    pub devnet: Devnet,
    /// The seeker's API key.
    pub seeker_key: String,
    /// The worker's listing id.
    pub worker_id: String,
    /// The worker's payout address.
    pub pay_to: Address,
    /// The escrow's parties, when started with [`MoneyStackOptions::escrow`].
    pub escrow: Option<EscrowParties>,
    /// The admin key of the gateways (arbiter decisions, refunds).
    pub admin_key: String,
    /// What the stack was started with.
    pub options: MoneyStackOptions,
    config: GatewayConfig,
    bins: Binaries,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

impl MoneyStack {
    /// Starts chain, official facilitator, proxy, gateway and worker; lists the worker.
    pub async fn start(bins: Binaries, options: MoneyStackOptions) -> HarnessResult<Self> {
        let dir = tempfile::tempdir().map_err(|source| HarnessError::File {
            path: std::env::temp_dir(),
            source,
        })?;
        let devnet = Devnet::start_with(DevnetOptions::default()).await?;
        let facilitator = OfficialFacilitatorProcess::start(&devnet, dir.path()).await?;
        let proxy = FaultProxy::start(facilitator.url().clone())
            .await
            .map_err(|source| HarnessError::File {
                path: "fault proxy".into(),
                source,
            })?;
        let admin_key = format!("hg_admin_{}", uuid::Uuid::new_v4().simple());
        let database_url = match &options.database {
            Database::Sqlite => {
                format!("sqlite://{}", dir.path().join("hiregate.db").display())
            }
            Database::Url(url) => url.clone(),
        };
        let mut config = GatewayConfig {
            database_url,
            admin_key: admin_key.clone(),
            facilitator_url: proxy.url(),
            network: devnet.network(),
            rpc_url: devnet.rpc_url().clone(),
            signing_key_path: dir.path().join("gateway-key.json"),
            env: options.knobs.env(),
        };
        if options.facilitator == FacilitatorChoice::Embedded {
            config.env.extend([
                (
                    "HIREGATE_FACILITATOR__MODE".to_owned(),
                    "embedded".to_owned(),
                ),
                (
                    "HIREGATE_CHAINS__DEVNET__RELAYER_PRIVATE_KEY".to_owned(),
                    devnet.relayer().to_bytes().to_string(),
                ),
            ]);
        }
        let escrow = match options.escrow {
            Some(escrow) => {
                let operator = PrivateKeySigner::random();
                let treasury = PrivateKeySigner::random().address();
                config.env.extend([
                    (
                        "HIREGATE_CHAINS__DEVNET__OPERATOR_PRIVATE_KEY".to_owned(),
                        operator.to_bytes().to_string(),
                    ),
                    (
                        "HIREGATE_ESCROW__TREASURY".to_owned(),
                        treasury.to_checksum(None),
                    ),
                ]);
                // Gas for authorize, capture, void and refund; the operator holds no tokens.
                devnet
                    .set_eth_balance(operator.address(), U256::from(10u128.pow(19)))
                    .await?;
                Some(EscrowParties {
                    operator: operator.address(),
                    treasury,
                    fee_bps: escrow.fee_bps,
                })
            }
            None => None,
        };
        let gateway = GatewayProcess::start(&bins, &config, dir.path()).await?;
        let worker = ScriptedWorker::start(&gateway.url()).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(90))
            .build()?;
        let gateway_url = gateway.url();
        let Listed {
            operator_key,
            seeker_key,
            pay_to,
            worker_id,
        } = list_summarize_worker(&http, &gateway_url, &admin_key, worker.url(), &devnet, 8)
            .await?;
        if options.upfront {
            checked_json(
                "PATCH /v1/workers/{id}",
                http.patch(gateway_url.join(&format!("v1/workers/{worker_id}"))?)
                    .bearer_auth(&operator_key)
                    .json(&json!({"payment_flow": "upfront"}))
                    .send()
                    .await?,
            )
            .await?;
        }
        if let Some(escrow) = &escrow {
            // `exact` first: a proposal naming no scheme stays `exact`, as in the other tests.
            checked_json(
                "PATCH /v1/workers/{id}",
                http.patch(gateway_url.join(&format!("v1/workers/{worker_id}"))?)
                    .bearer_auth(&operator_key)
                    .json(&json!({
                        "payment_schemes": ["exact", "auth-capture"],
                        "fee_policy": {"fee_bps": escrow.fee_bps},
                    }))
                    .send()
                    .await?,
            )
            .await?;
        }
        Ok(Self {
            gateway,
            second: None,
            worker,
            proxy,
            facilitator,
            devnet,
            seeker_key,
            worker_id,
            pay_to,
            escrow,
            admin_key,
            options,
            config,
            bins,
            http,
            dir,
        })
    }

    /// The directory of config, logs and the SQLite file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The harness's HTTP client (90 s time limit).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The URL of the instance that is up: the second one once started, else the first.
    pub fn gateway_url(&self) -> Url {
        self.second
            .as_ref()
            .map_or_else(|| self.gateway.url(), GatewayProcess::url)
    }

    /// `kill -9` the first gateway.
    pub fn kill_gateway(&mut self) {
        self.gateway.kill9();
    }

    /// Starts the first gateway again on the same database, key and port.
    pub async fn restart_gateway(&mut self) -> HarnessResult<()> {
        self.gateway
            .restart_after_kill(&self.bins, self.dir.path())
            .await
    }

    /// Starts a second gateway instance on the same database (and key), on its own port.
    pub async fn start_second_instance(&mut self) -> HarnessResult<()> {
        let second =
            GatewayProcess::start_named(&self.bins, &self.config, self.dir.path(), "gateway-2")
                .await?;
        self.second = Some(second);
        Ok(())
    }

    /// A wallet with gas and `tokens` atomic units.
    pub async fn funded_seeker(&self, tokens: u64) -> HarnessResult<PrivateKeySigner> {
        Ok(self.devnet.funded_account(U256::from(tokens)).await?)
    }

    /// A typed seeker client for `wallet` against the instance that is up.
    pub fn seeker(&self, wallet: PrivateKeySigner) -> SeekerClient {
        SeekerClient::new(
            self.gateway_url(),
            self.seeker_key.clone(),
            Arc::new(wallet),
        )
        .with_http_client(self.http.clone())
    }

    /// A `summarize` proposal for the scripted worker: `input` names the worker's mode; schema
    /// check, one attempt, settlement right after verification.
    pub fn proposal(&self, input: &Value) -> Value {
        summarize_proposal(&self.worker_id, input, self.options.max_latency_ms)
    }

    /// `POST /v1/contracts` as the seeker; returns the contract id.
    pub async fn propose(&self, input: &Value) -> HarnessResult<String> {
        propose_contract(
            &self.http,
            &self.gateway_url(),
            &self.seeker_key,
            &self.proposal(input),
        )
        .await
    }

    /// [`MoneyStack::proposal`] paid by `auth-capture`, with an acceptance window of
    /// `acceptance_window_s` (the capture waits for it; a rejection waits for it before the
    /// void, as the operator's dispute window).
    pub fn escrowed_proposal(&self, input: &Value, acceptance_window_s: u64) -> Value {
        let mut proposal = self.proposal(input);
        proposal["payment_scheme"] = json!("auth-capture");
        proposal["acceptance_window_s"] = json!(acceptance_window_s);
        proposal
    }

    /// `POST /v1/contracts` of [`MoneyStack::escrowed_proposal`]; returns the contract id.
    pub async fn propose_escrowed(
        &self,
        input: &Value,
        acceptance_window_s: u64,
    ) -> HarnessResult<String> {
        propose_contract(
            &self.http,
            &self.gateway_url(),
            &self.seeker_key,
            &self.escrowed_proposal(input, acceptance_window_s),
        )
        .await
    }

    /// An `auth-capture` payment of `contract_id`'s 402 signed by `wallet` with the payments
    /// crate's client (the one the official `@x402/evm` client is checked against), echoing
    /// the 402's extensions.
    pub async fn escrowed_payment(
        &self,
        wallet: &PrivateKeySigner,
        contract_id: &str,
    ) -> HarnessResult<PaymentPayload> {
        let challenge = self
            .seeker(wallet.clone())
            .challenge(contract_id)
            .await
            .map_err(|error| HarnessError::Payment(format!("no 402: {error}")))?;
        let offer = challenge
            .accepts
            .iter()
            .find(|offer| offer.scheme == "auth-capture")
            .ok_or_else(|| {
                HarnessError::Payment(format!("the 402 offers no auth-capture: {challenge:?}"))
            })?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or_default();
        let mut payment = sign_auth_capture_payment(
            wallet,
            offer,
            Some(challenge.resource.clone()),
            now,
            &AuthCaptureSignOptions::default(),
        )
        .await
        .map_err(|error| HarnessError::Payment(error.to_string()))?;
        payment.extensions = challenge.extensions.clone();
        Ok(payment)
    }

    /// The escrow's parties; panics on a stack started without [`MoneyStackOptions::escrow`].
    pub fn escrow_parties(&self) -> &EscrowParties {
        self.escrow
            .as_ref()
            .expect("the stack was started with MoneyStackOptions::escrow")
    }

    /// `getTokenStore(operator)`: where the escrow keeps the gateway operator's locked funds.
    pub async fn token_store(&self) -> HarnessResult<Address> {
        let call = IAuthCaptureEscrow::getTokenStoreCall {
            operator: self.escrow_parties().operator,
        };
        let request = TransactionRequest::default()
            .to(self.devnet.auth_capture_escrow())
            .input(TransactionInput::new(call.abi_encode().into()));
        let bytes = self.devnet.provider().call(request).await?;
        IAuthCaptureEscrow::getTokenStoreCall::abi_decode_returns(&bytes)
            .map_err(|error| HarnessError::Payment(format!("getTokenStore: {error}")))
    }

    /// The token balances of `payer`, the worker's payout address, the treasury and the
    /// operator's token store.
    pub async fn escrow_balances(&self, payer: Address) -> HarnessResult<EscrowBalances> {
        let parties = self.escrow_parties();
        Ok(EscrowBalances {
            payer: self.devnet.balance_of(payer).await?,
            worker: self.devnet.balance_of(self.pay_to).await?,
            treasury: self.devnet.balance_of(parties.treasury).await?,
            token_store: self.devnet.balance_of(self.token_store().await?).await?,
        })
    }

    /// Every payment event the escrow ever emitted on this devnet, by payment hash (`getHash`
    /// of its `PaymentInfo`), oldest first: found from the logs themselves, not from what the
    /// gateway recorded.
    pub async fn escrow_events(&self) -> HarnessResult<BTreeMap<B256, Vec<EscrowEvent>>> {
        let provider = self.devnet.provider();
        let escrow = self.devnet.auth_capture_escrow();
        let logs = provider
            .get_logs(&Filter::new().address(escrow).from_block(0))
            .await?;
        // Every payment event indexes the payment hash first; other events (a token store
        // created) index something else and decode to no payment event below.
        let keys: BTreeSet<B256> = logs
            .iter()
            .filter_map(|log| log.topics().get(1).copied())
            .collect();
        let mut by_payment = BTreeMap::new();
        for key in keys {
            let events = payment_events(&provider, escrow, key, 0).await?;
            if !events.is_empty() {
                by_payment.insert(key, events);
            }
        }
        Ok(by_payment)
    }

    /// `GET /v1/contracts/{id}` as the seeker, on the instance that is up.
    pub async fn contract(&self, contract_id: &str) -> HarnessResult<Value> {
        checked_json(
            "GET /v1/contracts/{id}",
            self.http
                .get(
                    self.gateway_url()
                        .join(&format!("v1/contracts/{contract_id}"))?,
                )
                .bearer_auth(&self.seeker_key)
                .timeout(Duration::from_secs(10))
                .send()
                .await?,
        )
        .await
    }

    /// `POST /v1/contracts/{id}/cancel` as the seeker: (status, body).
    pub async fn cancel(&self, contract_id: &str) -> HarnessResult<(u16, Value)> {
        let response = self
            .http
            .post(
                self.gateway_url()
                    .join(&format!("v1/contracts/{contract_id}/cancel"))?,
            )
            .bearer_auth(&self.seeker_key)
            .timeout(Duration::from_secs(10))
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or(Value::Null)))
    }

    /// `GET /v1/contracts/{id}/events.jsonl` as the seeker: the raw export.
    pub async fn events_export(&self, contract_id: &str) -> HarnessResult<String> {
        let response = self
            .http
            .get(
                self.gateway_url()
                    .join(&format!("v1/contracts/{contract_id}/events.jsonl"))?,
            )
            .bearer_auth(&self.seeker_key)
            .timeout(Duration::from_secs(10))
            .send()
            .await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        if status != 200 {
            return Err(HarnessError::Api {
                what: "GET /v1/contracts/{id}/events.jsonl".to_owned(),
                status,
                body: text,
            });
        }
        Ok(text)
    }

    /// What the SSE feed `GET /v1/contracts/{id}/events` sends within `listen` (the stream
    /// stays open; everything received until then is returned).
    pub async fn sse_transcript(
        &self,
        contract_id: &str,
        listen: Duration,
    ) -> HarnessResult<String> {
        let mut response = self
            .http
            .get(
                self.gateway_url()
                    .join(&format!("v1/contracts/{contract_id}/events"))?,
            )
            .bearer_auth(&self.seeker_key)
            .header(header::ACCEPT, "text/event-stream")
            .send()
            .await?;
        let status = response.status().as_u16();
        if status != 200 {
            let body = response.text().await.unwrap_or_default();
            return Err(HarnessError::Api {
                what: "GET /v1/contracts/{id}/events".to_owned(),
                status,
                body,
            });
        }
        let mut transcript = Vec::new();
        let deadline = tokio::time::Instant::now() + listen;
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
            transcript.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8_lossy(&transcript).into_owned())
    }

    /// Polls the contract until `done` holds for its JSON, or fails after `within` with the last
    /// record and the logs. Unanswered polls (a gateway being restarted) are retried.
    pub async fn wait_for(
        &self,
        contract_id: &str,
        within: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Result<Value, String> {
        let deadline = Instant::now() + within;
        let mut last = Value::Null;
        loop {
            if let Ok(record) = self.contract(contract_id).await {
                if done(&record) {
                    return Ok(record);
                }
                last = record;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "contract {contract_id} did not reach {what} within {within:?}; last seen \
                     state {}:\n{last:#}\n{}",
                    last["state"],
                    self.logs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`MoneyStack::wait_for`] a terminal state.
    pub async fn wait_for_terminal(
        &self,
        contract_id: &str,
        within: Duration,
    ) -> Result<Value, String> {
        self.wait_for(contract_id, within, "a terminal state", |record| {
            record["state"]
                .as_str()
                .is_some_and(|state| TERMINAL_STATES.contains(&state))
        })
        .await
    }

    /// [`MoneyStack::wait_for`] one of `states`.
    pub async fn wait_for_state(
        &self,
        contract_id: &str,
        states: &[&str],
        within: Duration,
    ) -> Result<Value, String> {
        self.wait_for(contract_id, within, &format!("{states:?}"), |record| {
            record["state"]
                .as_str()
                .is_some_and(|state| states.contains(&state))
        })
        .await
    }

    /// What the chain shows for one authorization: the transactions of its `AuthorizationUsed`
    /// logs and of the token transfers from `payer` to the worker's payout address.
    pub async fn chain_record(&self, payer: Address, nonce: B256) -> HarnessResult<ChainRecord> {
        Ok(ChainRecord {
            authorization_used: self
                .devnet
                .authorization_used_transactions(payer, nonce)
                .await?,
            transfers: self.devnet.transfers(payer, self.pay_to).await?,
            payer_balance: self.devnet.balance_of(payer).await?,
            payee_balance: self.devnet.balance_of(self.pay_to).await?,
        })
    }

    /// `hiregate reconcile --json` over the whole chain with the gateway's configuration.
    /// `None` when this gateway build has no `reconcile` command.
    pub async fn reconcile(&self) -> HarnessResult<Option<CliRun>> {
        let run = self
            .gateway
            .run_cli(
                &self.bins,
                &["reconcile", "--json"],
                Duration::from_secs(60),
            )
            .await?;
        let unknown = run.code == Some(2) && run.stderr.contains("unrecognized subcommand");
        Ok((!unknown).then_some(run))
    }

    /// Log tails of every process, for assertion messages.
    pub fn logs(&self) -> String {
        let mut logs = vec![self.gateway.process_ref().log_tail()];
        if let Some(second) = &self.second {
            logs.push(second.process_ref().log_tail());
        }
        logs.push(self.facilitator.process_ref().log_tail());
        logs.join("\n")
    }
}

/// The chain's side of one payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainRecord {
    /// Transactions with the authorization's `AuthorizationUsed` log.
    pub authorization_used: Vec<B256>,
    /// `(transaction, value)` of every transfer payer → payout address.
    pub transfers: Vec<(B256, U256)>,
    /// The payer's token balance now.
    pub payer_balance: U256,
    /// The payout address's token balance now.
    pub payee_balance: U256,
}
