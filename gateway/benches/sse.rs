//! Events per second the SSE endpoint (`GET /v1/contracts/{id}/events`) delivers to 200
//! connected clients.
//!
//! Real parts: an anvil devnet (the contract's asset is looked up on chain), a gateway on a
//! SQLite file, a worker-sdk echo worker registered through the API, contracts created through
//! the API, and 200 reqwest SSE clients on loopback. Each iteration appends a batch of events
//! through the store (the path the hire flow uses: transaction, gap-free seq, commit, bus) and
//! waits until every client has read every event. Throughput = events delivered to clients per
//! second (batch × clients per iteration).
//!
//! Run: `cargo bench -p hiregate-gateway --bench sse`.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use hiregate_engine::settings::Settings;
use hiregate_gateway::startup::App;
use hiregate_payments::devnet::Devnet;
use hiregate_store::{NewContractEvent, Store};
use hiregate_worker_sdk::{
    GatewayKeys,
    example_workers::{echo_builder, echo_handler, summary_output_schema},
    serve,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CLIENTS: usize = 200;
const BATCH: u64 = 50;
const ADMIN_KEY: &str = "bench-admin-key-0123456789abcdef0123456789";

struct Bench {
    store: Store,
    contracts: Vec<String>,
    delivered: Arc<AtomicU64>,
    _keep: Vec<Box<dyn std::any::Any + Send>>,
    shutdown: CancellationToken,
}

async fn post(client: &reqwest::Client, url: String, key: &str, body: &Value) -> Value {
    let response = client
        .post(url)
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .expect("request");
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.expect("json")
}

/// Gateway + worker + `contracts` contracts + `CLIENTS` SSE clients spread over them.
async fn setup(contract_count: usize) -> Bench {
    let devnet = Devnet::start().await.expect("anvil devnet");
    let dir = tempfile::tempdir().expect("temp dir");
    let overrides = format!(
        r#"
        [http]
        listen_address = "127.0.0.1:0"
        [database]
        url = "sqlite://{db}/hiregate.db"
        [admin]
        api_key = "{ADMIN_KEY}"
        [outbound]
        allow_private_targets = true
        require_https = false
        [chains.devnet]
        network = "{network}"
        rpc_url = "{rpc}"
        relayer_private_key = "{key}"
        "#,
        db = dir.path().display(),
        network = devnet.network(),
        rpc = devnet.rpc_url(),
        key = devnet.relayer().to_bytes(),
    );
    let settings = Settings::from_defaults_and(&overrides).expect("settings");
    let app = App::build(settings).await.expect("app");
    let base = format!("http://127.0.0.1:{}", app.port());
    let store = app.state().store.clone();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move { app.run_until_stopped(token).await });

    let client = reqwest::Client::new();
    let operator = post(
        &client,
        format!("{base}/v1/admin/keys"),
        ADMIN_KEY,
        &json!({"role": "operator"}),
    )
    .await;
    let seeker = post(
        &client,
        format!("{base}/v1/admin/keys"),
        ADMIN_KEY,
        &json!({"role": "seeker"}),
    )
    .await;
    let operator_key = operator["api_key"].as_str().expect("key").to_owned();
    let seeker_key = seeker["api_key"].as_str().expect("key").to_owned();

    let worker = echo_builder()
        .gateway_keys(GatewayKeys::remote(
            format!("{base}/.well-known/jwks.json")
                .parse()
                .expect("url"),
        ))
        .build(echo_handler())
        .expect("worker");
    let worker_stop = CancellationToken::new();
    let stop = worker_stop.clone();
    let server = serve(
        worker.router(),
        SocketAddr::from(([127, 0, 0, 1], 0)),
        async move { stop.cancelled().await },
    )
    .await
    .expect("worker serves");
    let endpoint = server.base_url().as_str().trim_end_matches('/').to_owned();
    let listing = post(
        &client,
        format!("{base}/v1/workers"),
        &operator_key,
        &json!({
            "endpoint": endpoint,
            "protocol": "hire",
            "pay_to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
            "network": devnet.network(),
            "asset": devnet.token().to_checksum(None),
            "tasks": {"summarize": {"price": "1000", "output_schema": summary_output_schema()}},
            "max_parallel": 4,
        }),
    )
    .await;
    let worker_id = listing["id"].as_str().expect("id").to_owned();

    let mut contracts = Vec::new();
    for n in 0..contract_count {
        let created = post(
            &client,
            format!("{base}/v1/contracts"),
            &seeker_key,
            &json!({"worker_id": worker_id, "task_type": "summarize", "input": {"text": format!("bench {n}")}}),
        )
        .await;
        contracts.push(created["contract_id"].as_str().expect("id").to_owned());
    }

    // One connection per client, like 200 separate seekers' browsers.
    let delivered = Arc::new(AtomicU64::new(0));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(CLIENTS);
    for n in 0..CLIENTS {
        let contract_id = contracts[n % contracts.len()].clone();
        let url = format!("{base}/v1/contracts/{contract_id}/events");
        let key = seeker_key.clone();
        let delivered = delivered.clone();
        let ready = ready_tx.clone();
        let client = reqwest::Client::builder().build().expect("client");
        tokio::spawn(async move {
            let response = client
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .expect("stream");
            let mut events = response.bytes_stream().eventsource();
            // The first event (contract_offered, seq 1) proves the stream is live.
            let _ = events.next().await;
            let _ = ready.send(()).await;
            while let Some(Ok(_)) = events.next().await {
                delivered.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    for _ in 0..CLIENTS {
        ready_rx.recv().await.expect("client ready");
    }
    Bench {
        store,
        contracts,
        delivered,
        _keep: vec![
            Box::new(devnet),
            Box::new(dir),
            Box::new(server),
            Box::new(worker),
            Box::new(worker_stop.drop_guard()),
        ],
        shutdown,
    }
}

impl Bench {
    /// Append `BATCH` events spread over the contracts and wait until every client has them.
    async fn round(&self) -> Duration {
        let clients_per_contract = (CLIENTS / self.contracts.len()) as u64;
        let target = self.delivered.load(Ordering::Relaxed) + BATCH * clients_per_contract;
        let started = Instant::now();
        for n in 0..BATCH {
            let contract_id = &self.contracts[n as usize % self.contracts.len()];
            self.store
                .append_contract_event(
                    contract_id,
                    &NewContractEvent {
                        at: chrono::Utc::now(),
                        actor: hiregate_store::states::Actor::Gateway,
                        correlation_id: format!("bench-{n}"),
                        kind: hiregate_store::states::EventKind::WorkerProgress,
                        details: json!({"progress": n}),
                    },
                )
                .await
                .expect("append");
        }
        while self.delivered.load(Ordering::Relaxed) < target {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        started.elapsed()
    }
}

fn sse_fan_out(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("sse_200_clients");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for contract_count in [1_usize, 10] {
        let bench = runtime.block_on(setup(contract_count));
        // Every event goes to the clients of its contract: BATCH × (CLIENTS / contracts).
        group.throughput(Throughput::Elements(
            BATCH * (CLIENTS / contract_count) as u64,
        ));
        group.bench_function(
            BenchmarkId::new("delivered_events", format!("{contract_count}_contracts")),
            |b| {
                b.to_async(&runtime).iter_custom(|iters| {
                    let bench = &bench;
                    async move {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            total += bench.round().await;
                        }
                        total
                    }
                });
            },
        );
        bench.shutdown.cancel();
        runtime.block_on(async { tokio::time::sleep(Duration::from_millis(200)).await });
    }
    group.finish();
}

criterion_group!(benches, sse_fan_out);
criterion_main!(benches);
