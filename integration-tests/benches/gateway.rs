//! What the gateway adds to a hire: latency over calling a no-op worker directly, and paid
//! executes per second, on SQLite and (when reachable) PostgreSQL.
//!
//! `cargo bench -p hiregate-integration-tests --bench gateway [-- <sequential paid executes>]`
//!
//! Set-up, all real: anvil with the devnet token (instant mining), the gateway in-process
//! (`App::build_with` on 127.0.0.1:0) with its embedded facilitator settling on anvil, and the
//! worker-sdk echo worker on 127.0.0.1:0 (its handler does no work, so it stands for a no-op
//! worker). The embedded facilitator is the one `facilitator.mode = "embedded"` builds, wrapped
//! to time each `/verify` and `/settle` call so the table can split the gateway's time.
//!
//! Measured:
//! - (a) `POST /execute` on the worker directly, with a valid contract token from
//!   `TestTokenIssuer` and a fresh contract id per call;
//! - (b) the paid `POST /v1/contracts/{id}/execute` (`PAYMENT-SIGNATURE` → verify → worker →
//!   schema check → settle on chain → 200 + `PAYMENT-RESPONSE`), sequential, one fresh contract
//!   per call; the 402 and the signing happen before the clock starts;
//! - (c) the same with 8 in flight, distinct contracts and distinct payers, as executes/s (as
//!   many executes as in (b), at least 64);
//! - store operations and node RPC calls per hire, over 20 untimed hires on a deployment of
//!   their own whose gateway reaches anvil through a counting proxy (the timed ones reach it
//!   directly).
//!
//! PostgreSQL: `HIREGATE_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`)
//! names a server where a fresh database is created per run and dropped afterwards.
//!
//! A custom harness rather than criterion: every paid execute consumes its contract and its
//! payment, and the figures wanted are percentiles and a rate, not a per-iteration mean.

#[path = "common/mod.rs"]
mod common;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use async_trait::async_trait;
use common::{
    BenchResult, PostgresDatabase, Series, create_key, gateway_settings, list_echo_worker, ms,
    percentile, serve_echo_worker,
};
use futures::{StreamExt as _, stream};
use hiregate_engine::facilitator::build_facilitator;
use hiregate_gateway::startup::{App, AppOptions};
use hiregate_payments::devnet::rpc_counter::{self, RpcCounter};
use hiregate_payments::{
    Facilitator, FacilitatorError, PaymentPayload, PaymentRequired, SyncSendMode,
    devnet::Devnet,
    wire::{SettleRequest, SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse},
};
use hiregate_worker_sdk::{
    GatewayKeys, RunningServer,
    example_workers::{SUMMARIZE, echo_builder, echo_handler},
    ids::ContractId,
    seeker::SeekerClient,
    testing::TestTokenIssuer,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use url::Url;

/// Price of one task: 1 token of 6 decimals.
const PRICE: u64 = 1_000_000;
/// Direct worker calls measured for (a).
const DIRECT_CALLS: usize = 200;
/// Sequential paid executes for (b), unless given on the command line.
const DEFAULT_SEQUENTIAL: usize = 100;
/// Paid executes in (c) at least (as many as in (b) when that is more), and how many are in
/// flight at once.
const MIN_CONCURRENT_EXECUTES: usize = 64;
const CONCURRENCY: usize = 8;
/// Sequential hires over which store operations and node calls are counted.
const COUNTED_HIRES: usize = 20;

/// The embedded facilitator with a stopwatch on `/verify` and `/settle`.
struct TimedFacilitator {
    inner: Arc<dyn Facilitator>,
    verify: Mutex<Vec<Duration>>,
    settle: Mutex<Vec<Duration>>,
}

impl TimedFacilitator {
    fn take(&self) -> (Vec<Duration>, Vec<Duration>) {
        let take = |times: &Mutex<Vec<Duration>>| {
            std::mem::take(&mut *times.lock().unwrap_or_else(|e| e.into_inner()))
        };
        (take(&self.verify), take(&self.settle))
    }
}

#[async_trait]
impl Facilitator for TimedFacilitator {
    async fn verify(&self, request: &VerifyRequest) -> Result<VerifyResponse, FacilitatorError> {
        let started = Instant::now();
        let verdict = self.inner.verify(request).await;
        let elapsed = started.elapsed();
        self.verify
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(elapsed);
        verdict
    }

    async fn settle(&self, request: &SettleRequest) -> Result<SettleResponse, FacilitatorError> {
        let started = Instant::now();
        let outcome = self.inner.settle(request).await;
        let elapsed = started.elapsed();
        self.settle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(elapsed);
        outcome
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.inner.supported().await
    }

    fn prepare_settle(&self, request: &SettleRequest) {
        self.inner.prepare_settle(request);
    }

    fn mined_receipt(
        &self,
        transaction: alloy::primitives::TxHash,
    ) -> Option<Arc<alloy::rpc::types::TransactionReceipt>> {
        self.inner.mined_receipt(transaction)
    }
}

/// (a): the echo worker called directly, as the gateway would call it.
async fn direct_worker_calls(calls: usize) -> BenchResult<Series> {
    let issuer = TestTokenIssuer::new("bench-direct")?;
    let worker = echo_builder()
        .gateway_keys(GatewayKeys::fixed(issuer.jwks()))
        .build(echo_handler())?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let server = hiregate_worker_sdk::serve(worker.router(), "127.0.0.1:0".parse()?, async move {
        stopped.cancelled().await
    })
    .await?;
    let execute = server.base_url().join("execute")?;
    let http = reqwest::Client::new();
    let requests = (0..calls)
        .map(|_| {
            let contract = ContractId::generate();
            let token = issuer.token_for(&contract)?;
            Ok((contract, token))
        })
        .collect::<Result<Vec<_>, hiregate_contracts::token::TokenError>>()?;

    // One unmeasured call opens the connection, as the gateway's pooled client would have.
    let mut latencies = Vec::with_capacity(calls);
    for (index, (contract, token)) in requests.iter().enumerate() {
        let begun = Instant::now();
        let response = http
            .post(execute.clone())
            .bearer_auth(token)
            .header("X-Contract-ID", contract.as_str())
            .header("Idempotency-Key", contract.as_str())
            .header("X-Task-Type", SUMMARIZE)
            .json(&json!({"text": "a no-op task"}))
            .send()
            .await?;
        let status = response.status();
        let report: Value = response.json().await?;
        let elapsed = begun.elapsed();
        if status != 200 || report["status"] != "completed" {
            return Err(format!("direct worker call answered {status}: {report}").into());
        }
        if index > 0 {
            latencies.push(elapsed);
        }
    }
    // Sequential calls: the series' wall time is the sum of its latencies.
    let wall = latencies.iter().sum();
    stop.cancel();
    drop(server);
    Ok(Series { latencies, wall })
}

/// A gateway on `database_url` with its own relayer, an echo worker listed on it, and a seeker
/// key; stopped when dropped.
struct Deployment {
    gateway: Url,
    store: hiregate_store::Store,
    seeker_key: String,
    worker_id: String,
    facilitator: Arc<TimedFacilitator>,
    http: reqwest::Client,
    stop: CancellationToken,
    _worker: RunningServer,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Deployment {
    /// A deployment on `database_url` whose gateway (and embedded facilitator) reach `devnet`'s
    /// anvil at `rpc_url`: the node itself, or an [`RpcCounter`] in front of it.
    async fn start(devnet: &Devnet, database_url: &str, rpc_url: &Url) -> BenchResult<Self> {
        let relayer = devnet.fresh_relayer().await?;
        let mut settings = gateway_settings(database_url, devnet, rpc_url, &relayer)?;
        settings.database.max_connections = 16;
        // anvil mines each transaction as it arrives: the send's answer is the receipt.
        for chain in settings.chains.values_mut() {
            chain.sync_send = SyncSendMode::On;
        }
        let embedded = build_facilitator(&settings, None)
            .await?
            .ok_or("the embedded facilitator needs the devnet chain")?;
        let facilitator = Arc::new(TimedFacilitator {
            inner: embedded,
            verify: Mutex::default(),
            settle: Mutex::default(),
        });
        let app = App::build_with(
            settings,
            AppOptions {
                facilitator: Some(facilitator.clone()),
                ..AppOptions::default()
            },
        )
        .await?;
        let gateway = app.base_url().clone();
        let store = app.state().store.clone();
        let stop = CancellationToken::new();
        tokio::spawn(app.run_until_stopped(stop.child_token()));

        let worker = serve_echo_worker(&gateway, &stop, Some(64)).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let operator_key = create_key(&http, &gateway, "operator").await?;
        let seeker_key = create_key(&http, &gateway, "seeker").await?;
        let worker_id =
            list_echo_worker(&http, &gateway, &operator_key, &worker, devnet, PRICE, 32).await?;
        Ok(Self {
            gateway,
            store,
            seeker_key,
            worker_id,
            facilitator,
            http,
            stop,
            _worker: worker,
        })
    }

    fn seeker(&self, wallet: PrivateKeySigner) -> SeekerClient {
        SeekerClient::new(
            self.gateway.clone(),
            self.seeker_key.clone(),
            Arc::new(wallet),
        )
        .with_http_client(self.http.clone())
    }

    /// A fresh contract, its 402 answered with a signed payment (none of this is timed).
    async fn paid_contract(&self, seeker: &SeekerClient) -> BenchResult<(String, PaymentPayload)> {
        let (contract_id, challenge) = self.offered_contract(seeker).await?;
        let payment = seeker.sign_for(&challenge).await?;
        Ok((contract_id, payment))
    }

    /// A contract proposed by `seeker`, with its 402.
    async fn offered_contract(
        &self,
        seeker: &SeekerClient,
    ) -> BenchResult<(String, PaymentRequired)> {
        let contract = seeker
            .propose(&json!({
                "worker_id": self.worker_id,
                "task_type": SUMMARIZE,
                "input": {"text": "a no-op task"},
                "verification": {"policy_id": "vp.schema_only.v1", "policy_params": {}},
                "sla": {"max_latency_ms": 30_000},
                "retry_policy": {"max_attempts": 1},
                "acceptance_window_s": 0
            }))
            .await?;
        let challenge = seeker.challenge(&contract.id).await?;
        Ok((contract.id, challenge))
    }
}

/// One timed paid execute; anything but a settled 200 stops the benchmark.
async fn timed_paid_execute(
    seeker: &SeekerClient,
    contract_id: &str,
    payment: &PaymentPayload,
) -> BenchResult<Duration> {
    let begun = Instant::now();
    let outcome = seeker.execute_with_payment(contract_id, payment).await?;
    let elapsed = begun.elapsed();
    let settled = outcome
        .payment_response
        .as_ref()
        .is_some_and(|settlement| settlement.success);
    if outcome.status != 200 || !settled {
        return Err(format!(
            "paid execute of {contract_id} answered {}: {}",
            outcome.status, outcome.body
        )
        .into());
    }
    Ok(elapsed)
}

/// Figures of one backend.
struct BackendFigures {
    sequential: Series,
    verify: Vec<Duration>,
    settle: Vec<Duration>,
    /// Per sequential execute: its latency minus its own verify and settle calls.
    without_facilitator: Vec<Duration>,
    /// Store operations (queries or transactions) per sequential hire, proposal included
    /// (see [`count_operations`]).
    store_round_trips: f64,
    /// RPC calls to the node per sequential hire (gateway and embedded facilitator), by method.
    rpc_calls: Vec<(String, f64)>,
    concurrent: Series,
}

/// Store operations and node calls (by method) per sequential hire, proposal included,
/// counted over [`COUNTED_HIRES`] untimed hires on a deployment of their own that reaches the
/// node through an [`RpcCounter`]. The first hire warms the caches and is not counted.
async fn count_operations(
    devnet: &Devnet,
    database_url: &str,
) -> BenchResult<(f64, Vec<(String, f64)>)> {
    let counter = RpcCounter::start(devnet.rpc_url().clone()).await?;
    let deployment = Deployment::start(devnet, database_url, &counter.url()).await?;
    let wallet = devnet
        .funded_account(U256::from(PRICE) * U256::from(COUNTED_HIRES + 1))
        .await?;
    let seeker = deployment.seeker(wallet);
    let (mut trips_before, mut rpc_before) = (0, Default::default());
    for index in 0..=COUNTED_HIRES {
        if index == 1 {
            // Background loops (sweeps, health probes) add a little to these counts.
            trips_before = deployment.store.round_trips();
            rpc_before = counter.counts();
        }
        let (contract_id, payment) = deployment.paid_contract(&seeker).await?;
        timed_paid_execute(&seeker, &contract_id, &payment).await?;
    }
    let per_hire = |count: u64| count as f64 / COUNTED_HIRES as f64;
    let store_round_trips = per_hire(deployment.store.round_trips() - trips_before);
    let rpc_calls = rpc_counter::difference(&rpc_before, &counter.counts())
        .into_iter()
        .map(|(method, count)| (method, per_hire(count)))
        .collect();
    Ok((store_round_trips, rpc_calls))
}

async fn measure_backend(
    devnet: &Devnet,
    database_url: &str,
    sequential: usize,
) -> BenchResult<BackendFigures> {
    let (store_round_trips, rpc_calls) = count_operations(devnet, database_url).await?;
    // The timed phases reach the node directly: the counting proxy is an HTTP hop per call,
    // about a millisecond per hire, that no deployment has.
    let deployment = Deployment::start(devnet, database_url, devnet.rpc_url()).await?;

    // (b) one payer, one contract per execute, one at a time. The first execute warms the
    // connections and caches (token metadata, JWKS) and is not counted.
    let wallet = devnet
        .funded_account(U256::from(PRICE) * U256::from(sequential + 1))
        .await?;
    let seeker = deployment.seeker(wallet);
    let mut latencies = Vec::with_capacity(sequential);
    let mut wall = Duration::ZERO;
    for index in 0..=sequential {
        let (contract_id, payment) = deployment.paid_contract(&seeker).await?;
        if index == 1 {
            deployment.facilitator.take();
        }
        let elapsed = timed_paid_execute(&seeker, &contract_id, &payment).await?;
        if index > 0 {
            latencies.push(elapsed);
            wall += elapsed;
        }
    }
    let (verify, settle) = deployment.facilitator.take();
    if verify.len() != sequential || settle.len() != sequential {
        return Err(format!(
            "expected {sequential} verify and settle calls, timed {} and {}",
            verify.len(),
            settle.len()
        )
        .into());
    }
    let without_facilitator = latencies
        .iter()
        .zip(verify.iter().zip(&settle))
        .map(|(total, (verify, settle))| total.saturating_sub(*verify + *settle))
        .collect();

    // (c) distinct payers and contracts, CONCURRENCY in flight.
    let concurrent_executes = sequential.max(MIN_CONCURRENT_EXECUTES);
    let mut prepared = Vec::with_capacity(concurrent_executes);
    for _ in 0..concurrent_executes {
        let seeker = deployment.seeker(devnet.funded_account(U256::from(PRICE)).await?);
        let offered = deployment.offered_contract(&seeker).await?;
        prepared.push((seeker, offered));
    }
    // Signed last: an authorization must still cover the contract's whole window when it is
    // presented, and funding hundreds of payers takes a while.
    let mut signed = Vec::with_capacity(prepared.len());
    for (seeker, (contract_id, challenge)) in prepared {
        let payment = seeker.sign_for(&challenge).await?;
        signed.push((seeker, contract_id, payment));
    }
    let prepared = signed;
    let started = Instant::now();
    let concurrent: Vec<Duration> = stream::iter(prepared.iter())
        .map(|(seeker, contract_id, payment)| timed_paid_execute(seeker, contract_id, payment))
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<BenchResult<_>>()?;
    let concurrent_wall = started.elapsed();

    Ok(BackendFigures {
        sequential: Series { latencies, wall },
        verify,
        settle,
        without_facilitator,
        store_round_trips,
        rpc_calls,
        concurrent: Series {
            latencies: concurrent,
            wall: concurrent_wall,
        },
    })
}

fn print_backend(name: &str, direct: &Series, figures: &BackendFigures) {
    let seq = &figures.sequential;
    let row = |label: &str, n: usize, p50: Duration, p99: Duration, rate: Option<f64>| {
        let rate = rate.map(|r| format!("{r:>8.1}")).unwrap_or_default();
        println!(
            "{name:<10} {label:<44} {n:>4} {:>9.2} {:>9.2} {rate}",
            ms(p50),
            ms(p99)
        );
    };
    row(
        "(b) paid execute, sequential",
        seq.latencies.len(),
        seq.percentile(0.5),
        seq.percentile(0.99),
        Some(seq.per_second()),
    );
    row(
        "    of which facilitator /verify",
        figures.verify.len(),
        percentile(&figures.verify, 0.5),
        percentile(&figures.verify, 0.99),
        None,
    );
    row(
        "    of which facilitator /settle (on chain)",
        figures.settle.len(),
        percentile(&figures.settle, 0.5),
        percentile(&figures.settle, 0.99),
        None,
    );
    row(
        "    the rest (gateway + its worker call)",
        figures.without_facilitator.len(),
        percentile(&figures.without_facilitator, 0.5),
        percentile(&figures.without_facilitator, 0.99),
        None,
    );
    let added = |p: f64| seq.percentile(p).saturating_sub(direct.percentile(p));
    row(
        "gateway adds over (a): (b) − (a)",
        seq.latencies.len(),
        added(0.5),
        added(0.99),
        None,
    );
    let own =
        |p: f64| percentile(&figures.without_facilitator, p).saturating_sub(direct.percentile(p));
    row(
        "  … without verify+settle: rest − (a)",
        seq.latencies.len(),
        own(0.5),
        own(0.99),
        None,
    );
    println!(
        "{name:<10} per hire ({COUNTED_HIRES} untimed hires through a node call counter): store round trips {:.1}; node RPC calls {:.1} ({})",
        figures.store_round_trips,
        figures.rpc_calls.iter().map(|(_, n)| n).sum::<f64>(),
        figures
            .rpc_calls
            .iter()
            .map(|(method, n)| format!("{method} {n:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let conc = &figures.concurrent;
    row(
        &format!("(c) paid execute, {CONCURRENCY} in flight"),
        conc.latencies.len(),
        conc.percentile(0.5),
        conc.percentile(0.99),
        Some(conc.per_second()),
    );
}

fn main() -> BenchResult<()> {
    hiregate_gateway::allocator::configure();
    let sequential = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse::<usize>().ok())
        .unwrap_or(DEFAULT_SEQUENTIAL)
        .max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(sequential))
}

async fn run(sequential: usize) -> BenchResult<()> {
    let started = Instant::now();
    let direct = direct_worker_calls(DIRECT_CALLS).await?;

    // Each backend gets an anvil of its own: anvil takes longer to mine each block the longer
    // its chain (from about 0.5 ms to 2.6 ms after 2,400 blocks on this machine, idle all the
    // while), so a backend measured second on a shared one would pay for the first one's blocks.
    let sqlite_dir = tempfile::tempdir()?;
    let sqlite_url = format!("sqlite://{}", sqlite_dir.path().join("bench.db").display());
    let sqlite = measure_backend(&Devnet::start().await?, &sqlite_url, sequential).await?;

    let postgres = match PostgresDatabase::create().await? {
        Some(database) => {
            let figures = measure_backend(&Devnet::start().await?, &database.url, sequential).await;
            database.drop_now().await?;
            Some(figures?)
        }
        None => None,
    };

    println!();
    println!(
        "gateway benchmark: anvil (instant mining) + embedded facilitator + echo worker, \
         {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:<10} {:<44} {:>4} {:>9} {:>9} {:>8}",
        "backend", "measure", "n", "p50 ms", "p99 ms", "per s"
    );
    println!(
        "{:<10} {:<44} {:>4} {:>9.2} {:>9.2} {:>8.1}",
        "-",
        "(a) worker /execute, direct",
        direct.latencies.len(),
        ms(direct.percentile(0.5)),
        ms(direct.percentile(0.99)),
        direct.per_second()
    );
    print_backend("SQLite", &direct, &sqlite);
    if let Some(postgres) = &postgres {
        print_backend("PostgreSQL", &direct, postgres);
    }
    println!("total run time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
