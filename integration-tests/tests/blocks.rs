//! Paid hires at real block times ([`block_stack`]): anvil mining every second, the gateway on
//! its shipped defaults (embedded facilitator, SQLite), the echo worker with a slot for every
//! hire, and concurrent seekers paying `exact` (one settlement, batched) or `auth-capture`
//! (authorize before the work and capture after it, both on chain).
//!
//! CI form (`cargo test -p hiregate-integration-tests --test blocks`): 1 s blocks, 8 and 64
//! seekers at once, a few hires each, both schemes. It asserts what must hold whatever the
//! machine's speed: every hire answered 200 with a settled `PAYMENT-RESPONSE`, every payment
//! moved exactly once (each payer holds twice the price and must keep one; the worker, the
//! treasury and the escrow to the atomic unit), more than one payment per block (and, for
//! `auth-capture`, whose escrow calls cannot share a transaction, more than one transaction per
//! block), and `hiregate reconcile` clean. Latency in blocks and throughput are printed.
//!
//! Bench form (`HIREGATE_BLOCKS_BENCH=1`, e.g. with `--nocapture`): 1 s and 2 s blocks × 1, 8,
//! 64 and 256 seekers × both schemes; prints the table of hires/s, p50/p99 latency in blocks,
//! transactions and payouts per block, failures and double payments; then 64 seekers against a
//! worker with `max_parallel` 8 that answers at once (how many were answered 202).
//!
//! [`block_stack`]: hiregate_integration_tests::block_stack

use std::time::Duration;

use hiregate_integration_tests::{
    block_stack::{BlockStack, BlockStackOptions, LoadReport, Scheme},
    harness::Binaries,
};

const BENCH_ENV: &str = "HIREGATE_BLOCKS_BENCH";
/// The worker's slots in the bench's last rows.
const NARROW_WORKER_SLOTS: u32 = 8;

fn binaries() -> Binaries {
    Binaries {
        hiregate: env!("CARGO_BIN_EXE_hiregate-cli").into(),
        example_worker: env!("CARGO_BIN_EXE_example-worker").into(),
    }
}

fn bench_mode() -> bool {
    std::env::var(BENCH_ENV).is_ok_and(|value| value == "1")
}

/// Funds `hires` payers, sets the block time and runs them, `concurrency` at a time.
async fn load(
    stack: &mut BlockStack,
    block_time: Duration,
    scheme: Scheme,
    concurrency: usize,
    hires: usize,
) -> LoadReport {
    let payers = stack.payers(hires).await.expect("payers funded");
    stack.mine_every(block_time).await.expect("interval mining");
    let report = stack
        .run(scheme, concurrency, &payers)
        .await
        .expect("the load runs");
    eprintln!("[blocks] {}", report.row(0));
    report
}

fn failures_of(report: &LoadReport) -> String {
    report
        .hires
        .iter()
        .filter(|hire| !hire.ok())
        .map(|hire| format!("{:?}: {:?}", hire.contract_id, hire.error))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_one_second_blocks_concurrent_paid_hires_each_pay_once_and_share_blocks() {
    let mut stack = BlockStack::start(binaries(), BlockStackOptions::default())
        .await
        .expect("stack starts");
    let mut reports = Vec::new();
    for (concurrency, hires) in [(8, 16), (64, 64)] {
        for scheme in [Scheme::Exact, Scheme::AuthCapture] {
            let report = load(
                &mut stack,
                Duration::from_secs(1),
                scheme,
                concurrency,
                hires,
            )
            .await;
            assert_eq!(
                report.failures(),
                0,
                "{} at c={concurrency}: hires failed:\n{}\n{}",
                scheme.name(),
                failures_of(&report),
                stack.logs()
            );
            assert!(
                report.payouts_per_block.mean > 1.0,
                "{} at c={concurrency}: one payment per block: {:?}",
                scheme.name(),
                report.payouts_per_block
            );
            if scheme == Scheme::AuthCapture {
                assert!(
                    report.transactions_per_block.mean > 1.0,
                    "auth-capture at c={concurrency}: one escrow transaction per block: {:?}",
                    report.transactions_per_block
                );
            }
            reports.push(report);
        }
    }
    let money = stack
        .check_money(&reports.iter().collect::<Vec<_>>())
        .await
        .expect("balances read");
    assert!(money.exact(), "the chain disagrees: {money:?}");
    let reconcile = stack.reconcile().await.expect("reconcile runs");
    assert_eq!(
        reconcile.code,
        Some(0),
        "hiregate reconcile reports a mismatch:\n{}\n{}",
        reconcile.stdout,
        reconcile.stderr
    );
    println!("{}", LoadReport::header());
    for report in &reports {
        println!("{}", report.row(money.double_payments));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn block_time_table_bench() {
    if !bench_mode() {
        eprintln!("[blocks] the table runs with {BENCH_ENV}=1");
        return;
    }
    let mut stack = BlockStack::start(binaries(), BlockStackOptions::default())
        .await
        .expect("stack starts");
    let mut rows = Vec::new();
    for block_time in [Duration::from_secs(1), Duration::from_secs(2)] {
        for (concurrency, hires) in [(1, 8), (8, 32), (64, 128), (256, 256)] {
            for scheme in [Scheme::Exact, Scheme::AuthCapture] {
                let report = load(&mut stack, block_time, scheme, concurrency, hires).await;
                // Per load: its payers are its own, so the payers' balances say it alone.
                let money = stack.check_money(&[&report]).await.expect("balances read");
                rows.push(report.row(money.double_payments));
                if report.failures() > 0 {
                    eprintln!("[blocks] failures:\n{}", failures_of(&report));
                }
            }
        }
    }
    let reconcile = stack.reconcile().await.expect("reconcile runs");
    println!("{}", LoadReport::header());
    for row in &rows {
        println!("{row}");
    }
    println!(
        "reconcile: exit {:?} {}",
        reconcile.code,
        reconcile.stdout.trim()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_with_eight_slots_answering_at_once_bench() {
    if !bench_mode() {
        eprintln!("[blocks] the narrow-worker rows run with {BENCH_ENV}=1");
        return;
    }
    // A paid hire that finds the worker's slots taken should wait for one rather than be
    // answered 202: the rows count the hires that were not 200 with a settled PAYMENT-RESPONSE,
    // and the 202 answers among them.
    let mut stack = BlockStack::start(
        binaries(),
        BlockStackOptions {
            worker_slots: NARROW_WORKER_SLOTS,
            ..BlockStackOptions::default()
        },
    )
    .await
    .expect("stack starts");
    let mut rows = Vec::new();
    for scheme in [Scheme::Exact, Scheme::AuthCapture] {
        let report = load(&mut stack, Duration::from_secs(1), scheme, 64, 128).await;
        let accepted = report
            .hires
            .iter()
            .filter(|hire| hire.status == 202)
            .count();
        let money = stack.check_money(&[&report]).await.expect("balances read");
        rows.push(format!(
            "{} 202 answers: {accepted}",
            report.row(money.double_payments)
        ));
    }
    println!("worker max_parallel {NARROW_WORKER_SLOTS}, answering at once:");
    println!("{}", LoadReport::header());
    for row in &rows {
        println!("{row}");
    }
}
