//! Memory and scale of the gateway as a process (`hiregate serve`, release build): what an
//! operator sizes a machine by.
//!
//! | figure | how |
//! |---|---|
//! | RSS idle | a started gateway on SQLite with one worker listed |
//! | RSS with N pending contracts | N paid contracts (exact, verified, not settled) whose worker answered `pending` and keeps them running for hours: each has a stored payment, an attempt and a durable poll job |
//! | RSS with M open SSE streams | M seekers following `GET /v1/contracts/{id}/events` at once, on top of the pending contracts |
//! | throughput, 1 vs 3 instances on one PostgreSQL | paid hires settled on anvil (each instance with its own relayer key), the same load spread round-robin |
//!
//! `cargo bench -p hiregate-integration-tests --bench scale [-- PENDING STREAMS HIRES]`
//! (defaults 10000, 1000, 400). RSS is `VmRSS` (and the peak, `VmHWM`) from
//! `/proc/<pid>/status` of the gateway process alone: the driver, the worker and anvil run
//! elsewhere. PostgreSQL: `HIREGATE_TEST_DATABASE_URL` as for the other benches.

#[path = "common/mod.rs"]
mod common;

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use common::{ADMIN_KEY, BenchResult, PostgresDatabase, create_key, list_echo_worker};
use futures::{StreamExt as _, stream};
use hiregate_integration_tests::harness::{Binaries, GatewayConfig, GatewayProcess, RecoveryKnobs};
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::{
    GatewayKeys, RunningServer,
    example_workers::{
        FaultyBehaviour, FaultyMode, SUMMARIZE, echo_builder, echo_handler, faulty_builder,
        faulty_handler,
    },
    seeker::SeekerClient,
};
use serde_json::{Value, json};
use url::Url;

const PRICE: u64 = 1_000;
/// Requests in flight while filling the gateway.
const FILL_CONCURRENCY: usize = 32;
/// How long the gateway is left alone before its RSS is read: what it holds at rest once the
/// fill's burst is over, not a snapshot inside it. The peak (`VmHWM`) is reported next to it.
const SETTLE: Duration = Duration::from_secs(15);
/// Paid hires in flight in the throughput runs.
const HIRE_CONCURRENCY: usize = 16;

fn binaries() -> Binaries {
    Binaries {
        hiregate: env!("CARGO_BIN_EXE_hiregate-cli").into(),
        example_worker: env!("CARGO_BIN_EXE_example-worker").into(),
    }
}

/// `VmRSS` and `VmHWM` of `pid`, MiB.
fn rss_mib(pid: u32) -> BenchResult<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> BenchResult<f64> {
        let line = status
            .lines()
            .find(|line| line.starts_with(name))
            .ok_or_else(|| format!("{name} missing from /proc/{pid}/status"))?;
        let kib: f64 = line.split_whitespace().nth(1).ok_or("no value")?.parse()?;
        Ok(kib / 1024.0)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// A gateway process on `database_url` with the bundled facilitator and its own relayer key.
async fn gateway(
    devnet: &Devnet,
    database_url: &str,
    dir: &Path,
    name: &str,
) -> BenchResult<GatewayProcess> {
    let relayer = devnet.fresh_relayer().await?;
    let mut env = RecoveryKnobs::FAST.env();
    env.retain(|(key, _)| !key.contains("AUTHORIZATION_WINDOW") && !key.contains("MARGIN"));
    env.extend([
        (
            "HIREGATE_FACILITATOR__MODE".to_owned(),
            "embedded".to_owned(),
        ),
        (
            "HIREGATE_CHAINS__DEVNET__RELAYER_PRIVATE_KEY".to_owned(),
            relayer.to_bytes().to_string(),
        ),
        // Pending work is polled slowly: the figure is what holding it costs.
        (
            "HIREGATE_CONTRACTS__POLL_INTERVAL_MS".to_owned(),
            "60000".to_owned(),
        ),
        (
            "HIREGATE_CONTRACTS__POLL_MAX_INTERVAL_MS".to_owned(),
            "120000".to_owned(),
        ),
        (
            "HIREGATE_DATABASE__MAX_CONNECTIONS".to_owned(),
            "16".to_owned(),
        ),
    ]);
    let config = GatewayConfig {
        database_url: database_url.to_owned(),
        admin_key: ADMIN_KEY.to_owned(),
        // Unused in embedded mode.
        facilitator_url: Url::parse("http://127.0.0.1:9/")?,
        network: devnet.network(),
        rpc_url: devnet.rpc_url().clone(),
        signing_key_path: dir.join("gateway-key.json"),
        env,
    };
    Ok(GatewayProcess::start_named(&binaries(), &config, dir, name).await?)
}

/// Propose, pay and execute one contract; returns its id and the execute's status.
async fn hire(seeker: &SeekerClient, worker_id: &str, input: Value) -> BenchResult<(String, u16)> {
    let contract = seeker
        .propose(&json!({
            "worker_id": worker_id,
            "task_type": SUMMARIZE,
            "input": input,
            "sla": {"max_latency_ms": 30_000, "poll_window_s": 3_000},
            "retry_policy": {"max_attempts": 1},
        }))
        .await?;
    let challenge = seeker.challenge(&contract.id).await?;
    let payment = seeker.sign_for(&challenge).await?;
    let outcome = seeker.execute_with_payment(&contract.id, &payment).await?;
    Ok((contract.id, outcome.status))
}

struct Deployment {
    http: reqwest::Client,
    gateways: Vec<GatewayProcess>,
    _worker: RunningServer,
    seeker_key: String,
    worker_id: String,
}

impl Deployment {
    async fn start(
        devnet: &Devnet,
        database_url: &str,
        dir: &Path,
        instances: usize,
        pending_worker: bool,
    ) -> BenchResult<Self> {
        let mut gateways = Vec::with_capacity(instances);
        for index in 0..instances {
            gateways.push(gateway(devnet, database_url, dir, &format!("gateway{index}")).await?);
        }
        // Every instance signs with the same key file, so one JWKS serves the worker.
        let worker = serve_worker(
            pending_worker,
            gateways[0].url().join(".well-known/jwks.json")?,
        )
        .await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .pool_max_idle_per_host(256)
            .build()?;
        let first = gateways[0].url();
        let operator_key = create_key(&http, &first, "operator").await?;
        let seeker_key = create_key(&http, &first, "seeker").await?;
        let worker_id =
            list_echo_worker(&http, &first, &operator_key, &worker, devnet, PRICE, 10_000).await?;
        Ok(Self {
            http,
            gateways,
            _worker: worker,
            seeker_key,
            worker_id,
        })
    }

    fn seeker(&self, instance: usize, wallet: &PrivateKeySigner) -> SeekerClient {
        SeekerClient::new(
            self.gateways[instance % self.gateways.len()].url(),
            self.seeker_key.clone(),
            Arc::new(wallet.clone()),
        )
        .with_http_client(self.http.clone())
    }
}

async fn serve_worker(pending: bool, jwks: Url) -> BenchResult<RunningServer> {
    let keys = GatewayKeys::remote(jwks);
    let worker = if pending {
        faulty_builder()
            .gateway_keys(keys)
            .max_concurrent_tasks(100_000)
            .build(faulty_handler(FaultyBehaviour {
                mode: FaultyMode::Pending,
                delay: Duration::from_secs(6 * 3600),
            }))?
    } else {
        echo_builder()
            .gateway_keys(keys)
            .max_concurrent_tasks(256)
            .build(echo_handler())?
    };
    Ok(hiregate_worker_sdk::serve(
        worker.router(),
        "127.0.0.1:0".parse()?,
        std::future::pending(),
    )
    .await?)
}

/// RSS with `pending` contracts held, then with `streams` SSE followers on top.
async fn memory(devnet: &Devnet, pending: usize, streams: usize) -> BenchResult<()> {
    let dir = tempfile::tempdir()?;
    let database = format!("sqlite://{}", dir.path().join("scale.db").display());
    let deployment = Deployment::start(devnet, &database, dir.path(), 1, true).await?;
    let pid = deployment.gateways[0].process_ref().pid();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (idle, _) = rss_mib(pid)?;

    let wallet = devnet.funded_account(U256::from(PRICE)).await?;
    let seeker = deployment.seeker(0, &wallet);
    let started = Instant::now();
    let results: Vec<BenchResult<(String, u16)>> = stream::iter(0..pending)
        .map(|index| {
            let seeker = &seeker;
            let worker_id = &deployment.worker_id;
            async move { hire(seeker, worker_id, json!({"text": format!("held {index}")})).await }
        })
        .buffer_unordered(FILL_CONCURRENCY)
        .collect()
        .await;
    let mut contracts = Vec::with_capacity(pending);
    for result in results {
        let (id, status) = result?;
        if status != 202 {
            return Err(format!("a pending hire answered {status}").into());
        }
        contracts.push(id);
    }
    let fill = started.elapsed();
    tokio::time::sleep(SETTLE).await;
    let (with_pending, peak_pending) = rss_mib(pid)?;

    let mut followers = Vec::with_capacity(streams);
    for contract_id in contracts.iter().take(streams) {
        let response = deployment
            .http
            .get(
                deployment.gateways[0]
                    .url()
                    .join(&format!("v1/contracts/{contract_id}/events"))?,
            )
            .bearer_auth(&deployment.seeker_key)
            .header("accept", "text/event-stream")
            .timeout(Duration::from_secs(3600))
            .send()
            .await?;
        if !response.status().is_success() {
            return Err(format!("SSE answered {}", response.status()).into());
        }
        followers.push(response);
    }
    tokio::time::sleep(SETTLE).await;
    let (with_streams, peak_streams) = rss_mib(pid)?;
    println!(
        "memory (SQLite, one instance): idle {idle:.1} MiB | {pending} pending contracts \
         (filled in {:.1} s): {with_pending:.1} MiB (peak {peak_pending:.1}) | + {} open SSE \
         streams: {with_streams:.1} MiB (peak {peak_streams:.1})",
        fill.as_secs_f64(),
        followers.len()
    );
    drop(followers);
    Ok(())
}

/// Paid hires per second, settled on chain, through `instances` gateways on one database.
async fn throughput(
    devnet: &Devnet,
    database_url: &str,
    instances: usize,
    hires: usize,
) -> BenchResult<f64> {
    let dir = tempfile::tempdir()?;
    let deployment = Deployment::start(devnet, database_url, dir.path(), instances, false).await?;
    let mut wallets = Vec::with_capacity(hires);
    for _ in 0..hires {
        wallets.push(devnet.funded_account(U256::from(PRICE)).await?);
    }
    let started = Instant::now();
    let statuses: Vec<BenchResult<(String, u16)>> = stream::iter(wallets.iter().enumerate())
        .map(|(index, wallet)| {
            let seeker = deployment.seeker(index, wallet);
            let worker_id = deployment.worker_id.clone();
            async move {
                hire(
                    &seeker,
                    &worker_id,
                    json!({"text": format!("hire {index}")}),
                )
                .await
            }
        })
        .buffer_unordered(HIRE_CONCURRENCY)
        .collect()
        .await;
    let elapsed = started.elapsed();
    for status in statuses {
        let (id, status) = status?;
        if status != 200 {
            return Err(format!("hire {id} answered {status}").into());
        }
    }
    Ok(hires as f64 / elapsed.as_secs_f64())
}

fn main() -> BenchResult<()> {
    hiregate_gateway::allocator::configure();
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let pending = numbers.first().copied().unwrap_or(10_000);
    let streams = numbers.get(1).copied().unwrap_or(1_000);
    let hires = numbers.get(2).copied().unwrap_or(400);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let devnet = Devnet::start().await?;
        memory(&devnet, pending, streams).await?;
        match PostgresDatabase::create().await? {
            Some(one) => {
                let single = throughput(&devnet, &one.url, 1, hires).await;
                one.drop_now().await?;
                let three_db = PostgresDatabase::create()
                    .await?
                    .ok_or("PostgreSQL went away")?;
                let three = throughput(&devnet, &three_db.url, 3, hires).await;
                three_db.drop_now().await?;
                let (single, three) = (single?, three?);
                println!(
                    "throughput (PostgreSQL, paid hires settled on anvil, {HIRE_CONCURRENCY} in \
                     flight, {hires} hires): 1 instance {single:.1}/s | 3 instances \
                     {three:.1}/s ({:.2}x)",
                    three / single
                );
            }
            None => println!("throughput: PostgreSQL not available, skipped"),
        }
        BenchResult::Ok(())
    })
}
