//! The unpaid execute (→ 402 `PAYMENT-REQUIRED`) against the ceiling: a raw axum handler that
//! returns a fixed 402 of the same size, measured by the same load generator in the same run.
//!
//! `cargo bench -p hiregate-integration-tests --bench unpaid [-- <seconds> <connections> <rounds>]`
//! (`scripts/bench.sh` runs it). Load comes from `wrk` (Debian package `wrk`; the script installs
//! it when missing), sending both servers the same request, so the client costs the same for
//! both; the figure that matters is the ratio, the median of rounds that alternate which server
//! goes first. Defaults: 8 s, 32 connections, 2 threads (as in the issue's table), 3 rounds.
//!
//! Set-up, all real: anvil with the devnet token, the gateway in-process on SQLite in a temp
//! folder with its embedded facilitator and the shipped log setup (`[log]` defaults: info, one
//! access line per request, uncoloured as to a file, written to `/dev/null`; `BENCH_LOG=off`
//! runs without a subscriber, `BENCH_LOG=colours` coloured as to a terminal),
//! the worker-sdk echo worker listed, a seeker key and one offered contract whose
//! `POST /v1/contracts/{id}/execute` (no payment) every request hits.

mod common;

use std::{process::Command, sync::Arc};

use alloy::signers::local::PrivateKeySigner;
use axum::{
    Router,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::post,
};
use common::{BenchResult, create_key, gateway_settings, list_echo_worker, serve_echo_worker};
use hiregate_gateway::{startup::App, telemetry};
use hiregate_payments::devnet::Devnet;
use hiregate_worker_sdk::{RunningServer, example_workers::SUMMARIZE, seeker::SeekerClient};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use url::Url;

/// What wrk reported for one target.
struct Load {
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// On the gateway's own runtime, as the binary runs (its workers hold access lines back while
/// busy).
fn main() -> BenchResult<()> {
    hiregate_gateway::allocator::configure();
    hiregate_gateway::startup::runtime()?.block_on(run())
}

async fn run() -> BenchResult<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let seconds: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(8);
    let connections: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    let rounds: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    if Command::new("wrk").arg("--version").output().is_err() {
        return Err("wrk is not installed (apt-get install wrk, or run scripts/bench.sh)".into());
    }

    let devnet = Devnet::start().await?;
    let folder = tempfile::tempdir()?;
    let database = format!("sqlite://{}", folder.path().join("bench.db").display());
    let stop = CancellationToken::new();
    // The worker keeps serving for the whole run: the gateway's health loop must find it.
    let (gateway, seeker_key, contract_id, _worker) = deploy(&devnet, &database, &stop).await?;
    let target = gateway.join(&format!("v1/contracts/{contract_id}/execute"))?;

    // The same 402 the gateway answers (headers and body), served by the thinnest handler.
    let sample = reqwest::Client::new()
        .post(target.clone())
        .bearer_auth(&seeker_key)
        .send()
        .await?;
    if sample.status() != 402 {
        return Err(format!("the gateway answered {} instead of 402", sample.status()).into());
    }
    let raw = raw_axum(sample, &stop).await?;

    println!(
        "unpaid execute → 402, wrk c={connections} t=2 {seconds}s, {rounds} rounds, on this machine:"
    );
    // Rounds alternate which server goes first, so a drift of the machine over the run (another
    // process waking, the CPU's clock) weighs on both alike; the figure is the median round's.
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let (ceiling, ours) = if round % 2 == 0 {
            let ceiling = wrk(&raw, &seeker_key, seconds, connections)?;
            (ceiling, wrk(&target, &seeker_key, seconds, connections)?)
        } else {
            let ours = wrk(&target, &seeker_key, seconds, connections)?;
            (wrk(&raw, &seeker_key, seconds, connections)?, ours)
        };
        for (name, load) in [("raw axum, fixed 402", &ceiling), ("hiregate", &ours)] {
            println!(
                "  {name:<22} {:>9.0} req/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
                load.requests_per_s, load.p50_ms, load.p99_ms
            );
        }
        let ratio = ours.requests_per_s / ceiling.requests_per_s;
        println!(
            "  round {}: ratio hiregate / raw axum {ratio:.3}",
            round + 1
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "  ratio hiregate / raw axum: {:.3} (median of {rounds} rounds; {:.3}–{:.3})",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
    stop.cancel();
    Ok(())
}

/// A raw axum server answering every POST with `sample`'s status, headers and body.
async fn raw_axum(sample: reqwest::Response, stop: &CancellationToken) -> BenchResult<Url> {
    let headers = sample.headers().clone();
    let body = sample.bytes().await?;
    let fixed = Arc::new((headers, body));
    let app = Router::new().route(
        "/{*path}",
        post(move || {
            let fixed = Arc::clone(&fixed);
            async move {
                let mut response = (StatusCode::PAYMENT_REQUIRED, fixed.1.clone()).into_response();
                for (name, value) in &fixed.0 {
                    if name != header::CONTENT_LENGTH {
                        response.headers_mut().insert(name.clone(), value.clone());
                    }
                }
                response
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = Url::parse(&format!("http://{}/execute", listener.local_addr()?))?;
    let stopped = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service())
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await;
    });
    Ok(url)
}

/// The gateway with an echo worker listed, a seeker key and one offered contract, logging as
/// shipped (the raw handler logs nothing) unless `BENCH_LOG=off`.
async fn deploy(
    devnet: &Devnet,
    database_url: &str,
    stop: &CancellationToken,
) -> BenchResult<(Url, String, String, RunningServer)> {
    let relayer = devnet.fresh_relayer().await?;
    let settings = gateway_settings(database_url, devnet, devnet.rpc_url(), &relayer)?;
    let log = std::env::var("BENCH_LOG");
    if log.as_deref() != Ok("off") {
        let sink = Arc::new(std::fs::File::create("/dev/null")?);
        // Uncoloured, as the binary logs to anything but a terminal; `BENCH_LOG=colours`
        // measures what a terminal costs.
        telemetry::init_writing_to(&settings.log, sink, log.as_deref() == Ok("colours"))?;
    }
    let app = App::build(settings).await?;
    let gateway = app.base_url().clone();
    tokio::spawn(app.run_until_stopped(stop.child_token()));
    let worker = serve_echo_worker(&gateway, stop, None).await?;
    let http = reqwest::Client::new();
    let operator_key = create_key(&http, &gateway, "operator").await?;
    let seeker_key = create_key(&http, &gateway, "seeker").await?;
    let worker_id = list_echo_worker(
        &http,
        &gateway,
        &operator_key,
        &worker,
        devnet,
        1_000_000,
        32,
    )
    .await?;
    let seeker = SeekerClient::new(
        gateway.clone(),
        seeker_key.clone(),
        Arc::new(PrivateKeySigner::random()),
    );
    let contract = seeker
        .propose(&json!({
            "worker_id": worker_id,
            "task_type": SUMMARIZE,
            "input": {"text": "a benchmark task"},
        }))
        .await?;
    Ok((gateway, seeker_key, contract.id, worker))
}

/// Runs wrk against `url` with POST and the seeker's key (the raw handler gets the same request
/// and ignores the key) and reads its summary through a Lua `done` hook.
fn wrk(url: &Url, bearer: &str, seconds: u64, connections: u64) -> BenchResult<Load> {
    let script = tempfile::NamedTempFile::new()?;
    let auth = format!("wrk.headers[\"Authorization\"] = \"Bearer {bearer}\"\n");
    std::fs::write(
        script.path(),
        format!(
            r#"wrk.method = "POST"
{auth}done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %f %f %f\n", summary.requests,
    summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3))
end
"#
        ),
    )?;
    let output = Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "-s",
        ])
        .arg(script.path())
        .arg(url.as_str())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("RESULT "))
        .ok_or_else(|| format!("wrk printed no result: {text}"))?;
    let fields: Vec<f64> = line[7..]
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    Ok(Load {
        requests_per_s: fields[0] / fields[1],
        p50_ms: fields[2],
        p99_ms: fields[3],
    })
}
