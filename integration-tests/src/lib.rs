//! End-to-end test support for hiregate: real processes and protocol peers the tests run
//! against.
//!
//! | module | what |
//! |---|---|
//! | [`harness`] | real processes for e2e tests: anvil devnet, `hiregate facilitator`, `hiregate serve` and an example worker as children (port 0, logs to files, killed on drop), wired as an [`harness::E2eStack`] |
//! | [`block_stack`] | paid hires at real block times: anvil mining every 1–2 s, gateway instance(s) on the shipped defaults (embedded facilitator; own or shared relayer keys; one escrow operator), the echo worker, concurrent seekers paying `exact` or `auth-capture`; per-load figures (hires/s, latency in blocks, transactions and payouts per block) and the chain's account of every payment |
//! | [`fault_proxy`] | a proxy between the gateway and a real facilitator that loses or garbles answers (before or after forwarding) on a per-path script |
//! | [`money_stack`] | the money-truth deployment: devnet, official TS facilitator behind the fault proxy, gateway process(es) on SQLite or PostgreSQL, a scripted in-process worker whose deliverables carry a searchable marker |
//! | [`postgres`] | a fresh, dropped-after PostgreSQL database per test (gateway instances on PostgreSQL, several sharing one) |
//! | [`sdk_devnet`] | the deployment the Python and TypeScript SDK suites run against (`tests/sdks.rs`) and the `hiregate-devnet` binary keeps running for their quick starts |
//! | [`reference`](mod@reference) | reference WattSwarm executor + verifier and Superwire executor, written from the seeds' wire text (not from the gateway's types), with scripted faults and counters |
//!
//! Flow of a protocol test: spawn a reference server on `127.0.0.1:0`, point the gateway (or a
//! plain HTTP client) at its base URL, then assert on what the server counted and recorded.
//!
//! Flow of an e2e test (`tests/e2e.rs`): [`harness::E2eStack::start`] with the package's
//! `hiregate-cli` and `example-worker` binaries → a seeker (official `@x402/fetch` via
//! `tools/interop/pay.mjs`, or the typed `SeekerClient`) pays a contract → assert on the HTTP
//! answers, the contract record and on-chain balances; faults come from stopping processes.
//!
//! Flow of a money-truth test (`tests/money_truth.rs`): [`money_stack::MoneyStack::start`] → a
//! seeker pays → a fault is scripted in the [`fault_proxy::FaultProxy`], or the gateway is
//! killed (`kill -9`) at a chosen state and restarted or replaced by a second instance → poll
//! the contract to its terminal state → compare the record with the chain (authorization logs,
//! transfers, balances) and search every answer for the deliverable's marker.

pub mod block_stack;
pub mod fault_proxy;
pub mod harness;
pub mod money_stack;
pub mod postgres;
pub mod reference;
pub mod sdk_devnet;
