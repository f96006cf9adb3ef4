//! Throughput and latency of the bundled facilitator over HTTP on anvil.
//!
//! `cargo bench -p hiregate-payments --features devnet --bench facilitator`
//! (optionally `-- <payments>` to change the sample size, default 200).
//!
//! A custom harness rather than criterion: the figures wanted are p50/p99 latency and
//! requests per second of a stateful operation (each settlement consumes its payment), which
//! criterion's repeat-the-same-closure model does not measure. Every request is a distinct,
//! valid payment; verify moves nothing, settle mines one transfer per payment (concurrent
//! settlements share Multicall3 transactions). Settlement is measured twice at each
//! concurrency: sending and polling for the receipt, and with sync sends (`sync_send`, the
//! receipt in the send's answer), each through a facilitator of its own with its own relayer.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy::primitives::U256;
use alloy::providers::Provider;
use alloy::signers::local::PrivateKeySigner;
use futures::StreamExt;
use futures::stream;
use hiregate_payments::devnet::Devnet;
use hiregate_payments::facilitator::http_client::Timeouts;
use hiregate_payments::{
    ChainConfig, Facilitator, FacilitatorConfig, HttpFacilitatorClient, Network,
    PaymentRequirements, RelayerKey, TokenDomain, VerifyRequest, serve, sign_exact_payment,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const AMOUNT: u64 = 1_000_000;
const CONCURRENCY: usize = 16;
/// Settlement is measured at each of these concurrencies, on fresh payments each time.
const SETTLE_CONCURRENCY: [usize; 3] = [1, 8, 16];
/// Accounts that pay; more than the highest concurrency, so concurrent payments mostly come
/// from different payers.
const PAYERS: usize = 32;

struct Stats {
    label: String,
    latencies: Vec<Duration>,
    wall: Duration,
}

impl Stats {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn print(&self) {
        let n = self.latencies.len();
        println!(
            "{:<34} n={:<4} {:>8.1} req/s   p50 {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms",
            self.label,
            n,
            n as f64 / self.wall.as_secs_f64(),
            self.percentile(0.50).as_secs_f64() * 1e3,
            self.percentile(0.99).as_secs_f64() * 1e3,
            self.percentile(1.0).as_secs_f64() * 1e3,
        );
    }
}

/// Runs `call` once per request with at most `concurrency` in flight, timing each.
async fn measure<F, Fut>(
    label: &str,
    requests: &[VerifyRequest],
    concurrency: usize,
    call: F,
) -> Stats
where
    F: Fn(VerifyRequest) -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    let latencies: Vec<Duration> = stream::iter(requests.iter().cloned())
        .map(|request| {
            let fut = call(request);
            async move {
                let begun = Instant::now();
                assert!(fut.await, "{label}: a valid payment was not accepted");
                begun.elapsed()
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    Stats {
        label: format!("{label} (concurrency {concurrency})"),
        latencies,
        wall: started.elapsed(),
    }
}

/// [`PAYERS`] payers funded for `each` payments apiece, signing under distinct nonces. A fresh account per payment would grow anvil's state by thousands of accounts, and
/// anvil rehashes its whole state for every block: the figures would then measure that, not the
/// facilitator.
async fn payers(devnet: &Devnet, each: usize) -> Vec<PrivateKeySigner> {
    let share = each as u64;
    let mut payers = Vec::with_capacity(PAYERS);
    for _ in 0..PAYERS {
        payers.push(
            devnet
                .funded_account(U256::from(AMOUNT * share))
                .await
                .unwrap(),
        );
    }
    payers
}

async fn signed_payments(
    payers: &[PrivateKeySigner],
    requirements: &PaymentRequirements,
    count: usize,
) -> Vec<VerifyRequest> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut requests = Vec::with_capacity(count);
    for index in 0..count {
        let payer = &payers[index % payers.len()];
        let payload = sign_exact_payment(payer, requirements, None, now)
            .await
            .unwrap();
        requests.push(VerifyRequest::new(payload, requirements.clone()));
    }
    requests
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let count: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.parse().ok())
        .unwrap_or(200);
    let devnet = Devnet::start()
        .await
        .expect("devnet starts (scripts/install-tools.sh)");
    let network: Network = devnet.network().parse().unwrap();
    let pay_to = PrivateKeySigner::random().address();
    let requirements = PaymentRequirements::exact_evm(
        network,
        U256::from(AMOUNT),
        devnet.token(),
        pay_to,
        600,
        &TokenDomain {
            name: devnet.token_name().to_owned(),
            version: devnet.token_version().to_owned(),
        },
    );

    let shutdown = CancellationToken::new();
    let (client, server) =
        start_facilitator(&devnet, &network, devnet.relayer(), false, &shutdown).await;
    let sync_relayer = devnet.fresh_relayer().await.unwrap();
    let (sync_client, sync_server) =
        start_facilitator(&devnet, &network, sync_relayer.clone(), true, &shutdown).await;

    println!(
        "preparing {count} verify payments and {count} settle payments per concurrency {SETTLE_CONCURRENCY:?}..."
    );
    // Each settle run takes payers round-robin, at most `count / PAYERS` rounded up apiece.
    let payers = payers(
        &devnet,
        count.div_ceil(PAYERS) * SETTLE_CONCURRENCY.len() * 2,
    )
    .await;
    let verify_requests = signed_payments(&payers, &requirements, count).await;
    let mut settle_runs = Vec::new();
    for concurrency in SETTLE_CONCURRENCY {
        for sync in [false, true] {
            settle_runs.push((
                concurrency,
                sync,
                signed_payments(&payers, &requirements, count).await,
            ));
        }
    }

    // Warm-up: connections, caches of the node.
    for request in verify_requests.iter().take(10) {
        assert!(client.verify(request).await.unwrap().is_valid);
    }

    let verify = |request: VerifyRequest| {
        let client = Arc::clone(&client);
        async move { client.verify(&request).await.is_ok_and(|v| v.is_valid) }
    };
    let settle = |client: &Arc<HttpFacilitatorClient>, request: VerifyRequest| {
        let client = Arc::clone(client);
        async move {
            match client.settle(&request).await {
                Ok(settled) if settled.success => true,
                outcome => {
                    eprintln!("settle failed: {outcome:?}");
                    false
                }
            }
        }
    };

    println!("\nfacilitator over HTTP on anvil (automine), exact EIP-3009 payments");
    measure("verify", &verify_requests, 1, verify).await.print();
    measure("verify", &verify_requests, CONCURRENCY, verify)
        .await
        .print();
    let provider = devnet.provider();
    let mut settled_payments = 0;
    for (concurrency, sync, requests) in &settle_runs {
        let (label, relayer, client) = if *sync {
            ("settle, sync sends", sync_relayer.address(), &sync_client)
        } else {
            ("settle", devnet.relayer().address(), &client)
        };
        let sent_before = provider.get_transaction_count(relayer).await.unwrap();
        measure(label, requests, *concurrency, |request| {
            settle(client, request)
        })
        .await
        .print();
        let sent = provider.get_transaction_count(relayer).await.unwrap() - sent_before;
        println!(
            "{:<34} {sent} transactions for {} payments",
            "",
            requests.len()
        );
        settled_payments += requests.len();
    }

    let settled = devnet.balance_of(pay_to).await.unwrap();
    assert_eq!(
        settled,
        U256::from(AMOUNT) * U256::from(settled_payments),
        "every settlement moved exactly one amount"
    );

    shutdown.cancel();
    server.await.unwrap().unwrap();
    sync_server.await.unwrap().unwrap();
}

type Server =
    tokio::task::JoinHandle<Result<(), hiregate_payments::facilitator::server::ServeError>>;

/// The bundled facilitator over HTTP on 127.0.0.1, settling from `relayer`.
async fn start_facilitator(
    devnet: &Devnet,
    network: &Network,
    relayer: PrivateKeySigner,
    sync_send: bool,
    shutdown: &CancellationToken,
) -> (Arc<HttpFacilitatorClient>, Server) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let mut chain = ChainConfig::new(*network, devnet.rpc_url().clone(), RelayerKey::new(relayer));
    // Explicit both ways: the figures compare the two.
    chain.sync_send = if sync_send {
        hiregate_payments::SyncSendMode::On
    } else {
        hiregate_payments::SyncSendMode::Off
    };
    let config = FacilitatorConfig {
        chains: vec![chain],
    };
    let server = tokio::spawn(serve(config, listener, shutdown.clone()));
    let client = Arc::new(HttpFacilitatorClient::new(url, Timeouts::default(), None).unwrap());
    (client, server)
}
