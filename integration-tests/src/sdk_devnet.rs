//! The deployment the Python and TypeScript SDKs are tested against, and that their quick starts
//! hire on: an anvil devnet with the devnet token, `hiregate facilitator` and `hiregate serve` as
//! child processes (the real binary, SQLite, facilitator over HTTP), the Rust echo example worker
//! listed by an operator for `summarize`, a seeker key and a few funded seeker wallets.
//!
//! Everything the SDK suites need is handed over as environment variables ([`SdkDevnet::env`]),
//! so they depend on the gateway's wire protocol only:
//!
//! | variable | value |
//! |---|---|
//! | `HIREGATE_GATEWAY_URL` | the gateway's base URL |
//! | `HIREGATE_ADMIN_KEY`, `HIREGATE_OPERATOR_KEY`, `HIREGATE_SEEKER_KEY` | API keys |
//! | `HIREGATE_RPC_URL`, `HIREGATE_NETWORK`, `HIREGATE_ASSET` | the chain (CAIP-2) and the token |
//! | `HIREGATE_SEEKER_WALLET_KEYS` | comma-separated hex private keys of wallets holding [`WALLET_FUNDS`] each |
//! | `HIREGATE_RUST_WORKER_ID`, `HIREGATE_RUST_WORKER_PAY_TO` | the listed Rust echo worker (`summarize`, [`PRICE`]) |
//! | `HIREGATE_RUST_CONFORMANCE_WORKER` | the `example-worker` binary (run with `EXAMPLE_WORKER=conformance`) |
//!
//! Used by `tests/sdks.rs` (which runs the SDK suites against it) and by the `hiregate-devnet`
//! binary (which keeps it running for a developer: `scripts/devnet.sh`).

use std::path::Path;
use std::time::Duration;

use alloy::primitives::U256;
use hiregate_payments::devnet::Devnet;

use crate::harness::{
    Binaries, FacilitatorProcess, GatewayConfig, GatewayProcess, HarnessError, HarnessResult,
    Listed, PRICE, WorkerProcess, list_summarize_worker,
};

/// Tokens each seeker wallet holds at the start: 100 tokens of 6 decimals.
pub const WALLET_FUNDS: u64 = 100_000_000;

/// The running deployment. Fields drop in order: worker, gateway, facilitator, anvil, temp dir.
#[derive(Debug)]
pub struct SdkDevnet {
    /// The listed Rust echo worker.
    pub worker: WorkerProcess,
    /// `hiregate serve`.
    pub gateway: GatewayProcess,
    /// `hiregate facilitator`.
    pub facilitator: FacilitatorProcess,
    /// The chain.
    pub devnet: Devnet,
    env: Vec<(String, String)>,
    dir: tempfile::TempDir,
}

impl SdkDevnet {
    /// Starts the deployment with `wallets` funded seeker wallets.
    pub async fn start(bins: &Binaries, wallets: usize) -> HarnessResult<Self> {
        let dir = tempfile::tempdir().map_err(|source| HarnessError::File {
            path: std::env::temp_dir(),
            source,
        })?;
        let devnet = Devnet::start().await?;
        let facilitator = FacilitatorProcess::start(bins, &devnet, dir.path()).await?;
        let admin_key = format!("hg_admin_{}", uuid::Uuid::new_v4().simple());
        let gateway_config = GatewayConfig {
            database_url: format!("sqlite://{}", dir.path().join("hiregate.db").display()),
            admin_key: admin_key.clone(),
            facilitator_url: facilitator.url(),
            network: devnet.network(),
            rpc_url: devnet.rpc_url().clone(),
            signing_key_path: dir.path().join("gateway-key.json"),
            env: Vec::new(),
        };
        let gateway = GatewayProcess::start(bins, &gateway_config, dir.path()).await?;
        let worker = WorkerProcess::start(bins, "echo", &gateway.url(), dir.path()).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let Listed {
            operator_key,
            seeker_key,
            pay_to,
            worker_id,
        } = list_summarize_worker(&http, &gateway.url(), &admin_key, worker.url(), &devnet, 16)
            .await?;
        let mut keys = Vec::with_capacity(wallets);
        for _ in 0..wallets {
            let wallet = devnet.funded_account(U256::from(WALLET_FUNDS)).await?;
            keys.push(wallet.to_bytes().to_string());
        }
        let env = vec![
            ("HIREGATE_GATEWAY_URL", gateway.url().to_string()),
            ("HIREGATE_ADMIN_KEY", admin_key),
            ("HIREGATE_OPERATOR_KEY", operator_key),
            ("HIREGATE_SEEKER_KEY", seeker_key),
            ("HIREGATE_RPC_URL", devnet.rpc_url().to_string()),
            ("HIREGATE_NETWORK", devnet.network()),
            ("HIREGATE_ASSET", devnet.token().to_checksum(None)),
            ("HIREGATE_SEEKER_WALLET_KEYS", keys.join(",")),
            ("HIREGATE_RUST_WORKER_ID", worker_id),
            ("HIREGATE_RUST_WORKER_PAY_TO", pay_to.to_checksum(None)),
            ("HIREGATE_WORKER_PRICE", PRICE.to_string()),
            (
                "HIREGATE_RUST_CONFORMANCE_WORKER",
                bins.example_worker.display().to_string(),
            ),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
        Ok(Self {
            worker,
            gateway,
            facilitator,
            devnet,
            env,
            dir,
        })
    }

    /// The variables the SDK suites read (see the module docs). They hold secrets (API keys,
    /// wallet keys of a throwaway chain): hand them to child processes, never print them in CI.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The folder holding the processes' logs and the gateway's database.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Log tails of every process, for failure messages.
    pub fn logs(&self) -> String {
        [
            self.gateway.process_ref().log_tail(),
            self.worker.process_ref().log_tail(),
        ]
        .join("\n")
    }
}
