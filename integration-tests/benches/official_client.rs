//! The official x402 client (`@x402/fetch` with `ExactEvmScheme`, `tools/interop/bench-pay.mjs`)
//! paying hiregate contracts on the shipped defaults, against the same client paying a null
//! endpoint that accepts any payment at once, in the same run: the ratio is what the gateway
//! costs a standard seeker. The same client also pays the official TypeScript stack on the same
//! chain (an `@x402/express` seller on the official facilitator, each its own process): a
//! standard x402 seller that, like hiregate, settles on chain before it answers.
//!
//! `cargo bench -p hiregate-integration-tests --bench official_client [-- <hires per level> <levels>]`
//! Defaults: 200 hires per concurrency level, levels `1,8`.
//!
//! Set-up, all real and as shipped: a plain anvil with instant mining whose Multicall3 is
//! removed (the code at its canonical address emptied), the gateway in-process with the default
//! configuration (SQLite in a temp folder, the embedded facilitator, `sync_send` left to its
//! default), the worker-sdk echo worker listed. The contracts are proposed before the clock
//! starts (the official client pays a URL; proposing is hiregate's own step).

mod common;

use std::{sync::Arc, time::Duration};

use alloy::{primitives::U256, providers::Provider, signers::local::PrivateKeySigner};
use common::{BenchResult, create_key, gateway_settings, list_echo_worker, serve_echo_worker};
use hiregate_engine::settings::LogLevel;
use hiregate_gateway::startup::App;
use hiregate_payments::devnet::{
    Devnet, MULTICALL3_ADDRESS, node_script_with_timeout, node_tools_or_skip,
};
use hiregate_worker_sdk::{example_workers::SUMMARIZE, seeker::SeekerClient};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const PRICE: u64 = 1_000;
const WARMUP: usize = 8;

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
    let per_level: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(200);
    let levels: Vec<u64> = args
        .get(1)
        .map_or("1,8", String::as_str)
        .split(',')
        .filter_map(|l| l.parse().ok())
        .collect();
    if !node_tools_or_skip("official_client bench") {
        return Ok(());
    }

    let devnet = Devnet::start().await?;
    // A plain anvil has no Multicall3: settlements go one transaction each, as shipped.
    let _: Value = devnet
        .provider()
        .raw_request(
            "anvil_setCode".into(),
            (MULTICALL3_ADDRESS, alloy::primitives::Bytes::new()),
        )
        .await?;
    let folder = tempfile::tempdir()?;
    let database = format!("sqlite://{}", folder.path().join("bench.db").display());
    let stop = CancellationToken::new();
    let relayer = devnet.fresh_relayer().await?;
    let mut settings = gateway_settings(&database, &devnet, devnet.rpc_url(), &relayer)?;
    settings.log.level = LogLevel::Warn;
    // `RUST_LOG` set: the gateway's log on stderr, to follow one hire step by step (e.g.
    // `RUST_LOG=hiregate=debug,sqlx=debug`, each line stamped to the microsecond).
    if std::env::var_os("RUST_LOG").is_some() {
        hiregate_gateway::telemetry::init_writing_to(&settings.log, std::io::stderr, false)?;
    }
    let app = App::build(settings).await?;
    let gateway = app.base_url().clone();
    let store = app.state().store.clone();
    tokio::spawn(app.run_until_stopped(stop.child_token()));
    let worker = serve_echo_worker(&gateway, &stop, None).await?;

    let http = reqwest::Client::new();
    let operator_key = create_key(&http, &gateway, "operator").await?;
    let seeker_key = create_key(&http, &gateway, "seeker").await?;
    let worker_id =
        list_echo_worker(&http, &gateway, &operator_key, &worker, &devnet, PRICE, 64).await?;

    let hires = WARMUP + per_level * levels.len();
    let payer = devnet
        // Every hire is bought twice: from hiregate and from the official stack.
        .funded_account(U256::from(PRICE) * U256::from(2 * hires))
        .await?;
    let seeker = SeekerClient::new(
        gateway.clone(),
        seeker_key.clone(),
        Arc::new(PrivateKeySigner::random()),
    );
    let mut urls = Vec::with_capacity(hires);
    let mut ids = Vec::with_capacity(hires);
    for n in 0..hires {
        let contract = seeker
            .propose(&json!({
                "worker_id": worker_id,
                "task_type": SUMMARIZE,
                "input": {"text": format!("official client hire {n}")},
            }))
            .await?;
        urls.push(
            gateway
                .join(&format!("v1/contracts/{}/execute", contract.id))?
                .to_string(),
        );
        ids.push(contract.id);
    }

    let report = node_script_with_timeout(
        "bench-pay.mjs",
        &json!({
            "privateKey": payer.to_bytes().to_string(),
            "authorization": format!("Bearer {seeker_key}"),
            "concurrency": levels,
            "warmup": WARMUP,
            "hiregate": urls,
            "allowedAssets": [{"network": devnet.network(), "asset": devnet.token().to_checksum(None)}],
            // The official stack settles with the devnet's own relayer, hiregate with a fresh
            // one: two senders never share a nonce.
            "officialStack": {
                "rpcUrl": devnet.rpc_url().as_str(),
                "chainId": devnet.chain_id(),
                "relayerKey": devnet.relayer().to_bytes().to_string(),
            },
        }),
        Duration::from_secs(900),
    )
    .await?;
    println!(
        "official @x402/fetch client, exact, echo worker, shipped defaults (SQLite, embedded facilitator, anvil automine without Multicall3):"
    );
    for round in report["rounds"].as_array().into_iter().flatten() {
        for target in ["null", "official", "hiregate"] {
            let load = &round[target];
            println!(
                "  c={:<3} {target:<9} {:>5} hires {:>7.1}/s  p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms",
                round["concurrency"],
                load["hires"],
                load["per_s"].as_f64().unwrap_or(0.0),
                load["p50_ms"].as_f64().unwrap_or(0.0),
                load["p90_ms"].as_f64().unwrap_or(0.0),
                load["p99_ms"].as_f64().unwrap_or(0.0),
            );
        }
        println!(
            "  c={:<3} ratio hiregate / null endpoint: {}, hiregate / official stack: {}",
            round["concurrency"], round["ratio"], round["ratio_to_official"]
        );
    }
    // Where a c=1 hire's time goes inside the gateway, from its event log: the median time
    // from each event to the next (the first is the paid request's payment stored).
    let mut phases: Vec<(String, Vec<f64>)> = Vec::new();
    for id in ids.iter().skip(WARMUP).take(per_level) {
        let events = store.list_contract_events(id, 1, 100).await?;
        for pair in events.windows(2) {
            let name = format!("{} → {}", pair[0].kind, pair[1].kind);
            let ms = (pair[1].at - pair[0].at).num_microseconds().unwrap_or(0) as f64 / 1000.0;
            match phases.iter_mut().find(|(n, _)| *n == name) {
                Some((_, all)) => all.push(ms),
                None => phases.push((name, vec![ms])),
            }
        }
    }
    println!("  inside the gateway, c=1, median per step (event log):");
    for (name, mut all) in phases {
        all.sort_by(f64::total_cmp);
        println!("    {name:<48} {:>7.2} ms", all[all.len() / 2]);
    }
    let failures = report["failures"].as_array().map_or(&[][..], Vec::as_slice);
    if !failures.is_empty() {
        println!(
            "  failures: {}, the first: {}",
            failures.len(),
            Value::from(failures[..failures.len().min(3)].to_vec())
        );
    }
    stop.cancel();
    Ok(())
}
