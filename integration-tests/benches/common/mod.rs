//! What the gateway benchmarks share: result type, latency series and percentiles, a
//! throw-away PostgreSQL database per run, and the set-up of an in-process gateway (settings,
//! keys, the echo worker served and listed).

#![allow(dead_code)] // each bench uses its own part of this module

use std::time::Duration;

use alloy::signers::local::PrivateKeySigner;
use hiregate_engine::settings::Settings;
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::{
    GatewayKeys, RunningServer,
    example_workers::{SUMMARIZE, echo_builder, echo_handler, summary_output_schema},
};
use serde_json::{Value, json};
use sqlx::{Connection as _, Executor as _, PgConnection};
use tokio_util::sync::CancellationToken;
use url::Url;

/// The shipped binary's allocator (each bench's `main` configures it as the binary's does): the
/// benches measure what ships.
#[global_allocator]
static GLOBAL: hiregate_gateway::allocator::Allocator = hiregate_gateway::allocator::Allocator;

/// The admin key of every bench gateway.
pub const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef0123456789";

/// Default PostgreSQL server for the PostgreSQL runs.
pub const DEFAULT_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Latencies of one measured series and the wall time it took.
pub struct Series {
    pub latencies: Vec<Duration>,
    pub wall: Duration,
}

impl Series {
    pub fn percentile(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }

    pub fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

pub fn percentile(values: &[Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// A database created for this run on the PostgreSQL server, dropped by [`Self::drop_now`].
pub struct PostgresDatabase {
    admin_url: String,
    name: String,
    /// Its URL.
    pub url: String,
}

impl PostgresDatabase {
    /// `Ok(None)` with the reason printed when no server answers.
    pub async fn create() -> BenchResult<Option<Self>> {
        let admin_url = std::env::var("HIREGATE_TEST_DATABASE_URL")
            .unwrap_or_else(|_| DEFAULT_POSTGRES.to_owned());
        let connected =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url)).await;
        let mut admin = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                println!("PostgreSQL skipped: {error}");
                return Ok(None);
            }
            Err(_) => {
                println!("PostgreSQL skipped: no answer within 5 s");
                return Ok(None);
            }
        };
        let name = format!("hiregate_bench_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute(format!("create database {name}").as_str())
            .await?;
        admin.close().await?;
        let mut url = Url::parse(&admin_url)?;
        url.set_path(&format!("/{name}"));
        Ok(Some(Self {
            admin_url,
            name,
            url: url.to_string(),
        }))
    }

    pub async fn drop_now(self) -> BenchResult<()> {
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        admin
            .execute(format!("drop database if exists {} with (force)", self.name).as_str())
            .await?;
        Ok(())
    }
}

/// Settings of an in-process gateway on `database_url`: the bench admin key, private workers
/// over plain HTTP allowed, and the devnet chain reached at `rpc_url` (the node itself or a
/// counter in front of it) with `relayer` paying the embedded facilitator's gas. Everything
/// else is the shipped default; a bench changes what it measures on the returned value.
pub fn gateway_settings(
    database_url: &str,
    devnet: &Devnet,
    rpc_url: &Url,
    relayer: &PrivateKeySigner,
) -> BenchResult<Settings> {
    Ok(Settings::from_defaults_and(&format!(
        r#"
[http]
listen_address = "127.0.0.1:0"
[database]
url = "{database_url}"
[admin]
api_key = "{ADMIN_KEY}"
[outbound]
allow_private_targets = true
require_https = false
[chains.devnet]
network = "{network}"
rpc_url = "{rpc_url}"
relayer_private_key = "{key}"
"#,
        network = devnet.network(),
        key = relayer.to_bytes(),
    ))?)
}

/// The worker-sdk echo worker, trusting `gateway`'s keys, served until `stop`; `None` leaves its
/// concurrency unbounded.
pub async fn serve_echo_worker(
    gateway: &Url,
    stop: &CancellationToken,
    max_concurrent_tasks: Option<usize>,
) -> BenchResult<RunningServer> {
    let mut worker =
        echo_builder().gateway_keys(GatewayKeys::remote(gateway.join(".well-known/jwks.json")?));
    if let Some(max) = max_concurrent_tasks {
        worker = worker.max_concurrent_tasks(max);
    }
    let worker = worker.build(echo_handler())?;
    let stop = stop.child_token();
    Ok(
        hiregate_worker_sdk::serve(worker.router(), "127.0.0.1:0".parse()?, async move {
            stop.cancelled().await;
        })
        .await?,
    )
}

/// The body of a successful answer; an error naming the status and body otherwise.
pub async fn ok_json(response: reqwest::Response) -> BenchResult<Value> {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(format!("gateway answered {status}: {body}").into());
    }
    Ok(body)
}

/// A new API key of `role` from the admin API.
pub async fn create_key(http: &reqwest::Client, gateway: &Url, role: &str) -> BenchResult<String> {
    let body = ok_json(
        http.post(gateway.join("v1/admin/keys")?)
            .bearer_auth(ADMIN_KEY)
            .json(&json!({"role": role, "label": format!("bench {role}")}))
            .send()
            .await?,
    )
    .await?;
    Ok(body["api_key"].as_str().ok_or("no api_key")?.to_owned())
}

/// Lists `worker` for `summarize` at `price` atomic units of the devnet token, paid to a fresh
/// address; returns the listing id.
pub async fn list_echo_worker(
    http: &reqwest::Client,
    gateway: &Url,
    operator_key: &str,
    worker: &RunningServer,
    devnet: &Devnet,
    price: u64,
    max_parallel: u32,
) -> BenchResult<String> {
    let listing = ok_json(
        http.post(gateway.join("v1/workers")?)
            .bearer_auth(operator_key)
            .json(&json!({
                "endpoint": worker.base_url().as_str(),
                "protocol": "hire",
                "pay_to": PrivateKeySigner::random().address().to_checksum(None),
                "network": devnet.network(),
                "asset": devnet.token().to_checksum(None),
                "tasks": {SUMMARIZE: {"price": price.to_string(), "output_schema": summary_output_schema()}},
                "max_parallel": max_parallel
            }))
            .send()
            .await?,
    )
    .await?;
    Ok(listing["id"].as_str().ok_or("no listing id")?.to_owned())
}
