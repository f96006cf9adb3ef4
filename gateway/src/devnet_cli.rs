//! `hiregate devnet …`: a local chain to run your own gateway against, from a shell — the first
//! step of the README's walkthrough ("Run your own gateway and get a worker paid").
//!
//! `hiregate devnet up` starts anvil with the project's EIP-3009 token (the same devnet as the
//! demo and the tests: `hiregate_payments::devnet`), funds a seeker wallet, and writes into
//! `--dir` everything the other commands need:
//!
//! | file | what |
//! |---|---|
//! | `hiregate.toml` | a gateway configuration for this chain: listen address, SQLite in the folder, a signing key file, the bundled facilitator settling with anvil's dev account 1, the token's metadata, plain-HTTP loopback workers allowed |
//! | `seeker-wallet.key` | the funded seeker wallet's hex private key (mode 0600) |
//! | `env.sh` | `export`s for `. env.sh`: `HIREGATE_CONFIG`, `HIREGATE_GATEWAY_URL`, `HIREGATE_SEEKER_WALLET_KEY_FILE`, the chain (`DEVNET_*`), and the example worker's `WORKER_LISTEN`, `WORKER_URL`, `WORKER_GATEWAY_JWKS_URL`, `WORKER_PAY_TO` |
//!
//! then prints `devnet ready` and runs until Ctrl-C or SIGTERM, when anvil stops with it. Every
//! run is a fresh chain, so it also starts a fresh database: the folder's `hiregate.db` is
//! removed first. The keys it writes are anvil's public dev keys or fresh random ones, for this
//! local chain only.
//!
//! `hiregate devnet balance <address>` prints a token balance on that chain (from `env.sh`'s
//! `DEVNET_RPC_URL` and `DEVNET_TOKEN`), to see a worker's payout arrive.

use std::{
    fmt::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
};

use alloy::{
    primitives::{Address, U256},
    providers::{Provider as _, ProviderBuilder},
    signers::local::PrivateKeySigner,
};
use anyhow::Context as _;
use clap::{Args, Subcommand};
use hiregate_payments::devnet::{Devnet, bindings::DevnetUsd};
use url::Url;

use hiregate_engine::assets::whole_units;

/// What the seeker wallet starts with: 100 tokens of 6 decimals.
const SEEKER_FUNDS: u64 = 100_000_000;

/// `hiregate devnet` subcommands.
#[derive(Debug, Subcommand)]
pub enum DevnetCommand {
    /// Start a local chain (anvil + the devnet token), fund a seeker wallet, write a gateway
    /// configuration and `env.sh` into --dir, and run until Ctrl-C.
    Up(UpArgs),
    /// Print an address's token balance on the local chain.
    Balance {
        /// The address (e.g. a worker's payout address, `$WORKER_PAY_TO`).
        address: Address,
        /// The chain's JSON-RPC URL (written to env.sh by `hiregate devnet up`).
        #[arg(long, env = "DEVNET_RPC_URL")]
        rpc_url: Url,
        /// The token (written to env.sh by `hiregate devnet up`).
        #[arg(long, env = "DEVNET_TOKEN")]
        token: Address,
    },
}

/// `hiregate devnet up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// Folder for the configuration, env.sh, the wallet key and the gateway's database
    /// (created if missing).
    #[arg(long, default_value = "devnet")]
    dir: PathBuf,
    /// Address the gateway will listen on (the variable `hiregate serve` reads too).
    #[arg(
        long,
        env = "HIREGATE_HTTP__LISTEN_ADDRESS",
        default_value = "127.0.0.1:8402"
    )]
    gateway_listen: SocketAddr,
    /// Address the example worker will listen on (the variable the example workers read too).
    #[arg(long, env = "WORKER_LISTEN", default_value = "127.0.0.1:8081")]
    worker_listen: SocketAddr,
}

/// Run `hiregate devnet …`.
pub async fn run(command: DevnetCommand) -> anyhow::Result<ExitCode> {
    match command {
        DevnetCommand::Up(args) => up(args).await,
        DevnetCommand::Balance {
            address,
            rpc_url,
            token,
        } => balance(address, rpc_url, token).await,
    }
}

async fn up(args: UpArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let dir = std::fs::canonicalize(&args.dir)
        .with_context(|| format!("cannot resolve {}", args.dir.display()))?;
    // A fresh chain: yesterday's contracts and listings would point at money that never was.
    for name in ["hiregate.db", "hiregate.db-wal", "hiregate.db-shm"] {
        let path = dir.join(name);
        if path.exists() {
            std::fs::remove_file(&path)
                .with_context(|| format!("cannot remove the old {}", path.display()))?;
        }
    }

    let devnet = Devnet::start()
        .await
        .context("cannot start anvil with the devnet token (run scripts/install-tools.sh)")?;
    let seeker = devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .context("cannot fund the seeker wallet")?;
    let payout = PrivateKeySigner::random().address();

    let config_path = dir.join("hiregate.toml");
    let wallet_path = dir.join("seeker-wallet.key");
    let env_path = dir.join("env.sh");
    write_secret(&wallet_path, &format!("{}\n", seeker.to_bytes()))?;
    std::fs::write(
        &config_path,
        gateway_config(&devnet, &dir, args.gateway_listen),
    )
    .with_context(|| format!("cannot write {}", config_path.display()))?;
    let environment = Environment {
        config: &config_path,
        wallet: &wallet_path,
        devnet: &devnet,
        gateway_listen: args.gateway_listen,
        worker_listen: args.worker_listen,
        payout,
    };
    std::fs::write(&env_path, environment.script())
        .with_context(|| format!("cannot write {}", env_path.display()))?;

    println!(
        "local chain {} at {}\n\
         token {} ({}, 6 decimals)\n\
         seeker wallet {} holds {} {} (key in {})\n\
         worker payout address {}\n\
         gateway configuration {}\n\
         load the environment in each terminal with: . {}\n\
         devnet ready (Ctrl-C stops the chain)",
        devnet.network(),
        devnet.rpc_url(),
        devnet.token(),
        devnet.token_symbol(),
        seeker.address(),
        whole_units(U256::from(SEEKER_FUNDS), 6),
        devnet.token_symbol(),
        wallet_path.display(),
        payout,
        config_path.display(),
        env_path.display(),
    );
    crate::shutdown::token_cancelled_on_signals()
        .cancelled()
        .await;
    // Dropping the devnet stops anvil.
    drop(devnet);
    Ok(ExitCode::SUCCESS)
}

/// The gateway's configuration for this chain (layered over the built-in defaults).
fn gateway_config(devnet: &Devnet, dir: &Path, listen: SocketAddr) -> String {
    let relayer = devnet.relayer().to_bytes();
    format!(
        r#"# Written by `hiregate devnet up` for its local chain; rewritten by every run.
# Layered over the built-in defaults (engine/config.default.toml), under HIREGATE_* variables.

[http]
listen_address = "{listen}"

[database]
url = {database}

[signing_key]
path = {signing_key}

# The example workers listen on http://127.0.0.1: allow plain HTTP to loopback, for this local
# setup only.
[outbound]
allow_private_targets = true
require_https = false

[chains.devnet]
network = "{network}"
rpc_url = "{rpc_url}"
# anvil's dev account 1 (a public key of the local chain): the bundled facilitator pays gas with it.
relayer_private_key = "{relayer}"
sync_send = true
tokens = [
  {{ address = "{token}", name = "{name}", version = "{version}", decimals = 6, symbol = "{symbol}" }},
]
"#,
        database = toml_string(&format!("sqlite://{}", dir.join("hiregate.db").display())),
        signing_key = toml_string(&dir.join("signing-key").display().to_string()),
        network = devnet.network(),
        rpc_url = devnet.rpc_url(),
        token = devnet.token(),
        name = devnet.token_name(),
        version = devnet.token_version(),
        symbol = devnet.token_symbol(),
    )
}

/// What `env.sh` exports.
struct Environment<'a> {
    config: &'a Path,
    wallet: &'a Path,
    devnet: &'a Devnet,
    gateway_listen: SocketAddr,
    worker_listen: SocketAddr,
    payout: Address,
}

impl Environment<'_> {
    fn script(&self) -> String {
        let gateway = format!("http://{}/", self.gateway_listen);
        let variables = [
            ("HIREGATE_CONFIG", self.config.display().to_string()),
            ("HIREGATE_GATEWAY_URL", gateway.clone()),
            (
                "HIREGATE_SEEKER_WALLET_KEY_FILE",
                self.wallet.display().to_string(),
            ),
            ("DEVNET_RPC_URL", self.devnet.rpc_url().to_string()),
            ("DEVNET_NETWORK", self.devnet.network()),
            ("DEVNET_TOKEN", self.devnet.token().to_string()),
            ("WORKER_LISTEN", self.worker_listen.to_string()),
            ("WORKER_URL", format!("http://{}", self.worker_listen)),
            (
                "WORKER_GATEWAY_JWKS_URL",
                format!("{gateway}.well-known/jwks.json"),
            ),
            ("WORKER_PAY_TO", self.payout.to_string()),
        ];
        let mut script = String::from(
            "# Written by `hiregate devnet up`; load it with `. env.sh` in each terminal.\n",
        );
        for (name, value) in variables {
            let _ = writeln!(script, "export {name}={}", shell_quoted(&value));
        }
        script
    }
}

/// `value` in single quotes for a POSIX shell.
fn shell_quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', r"\\").replace('"', "\\\""))
}

/// Writes `content` readable by its owner only.
fn write_secret(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt as _;

    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(content.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

async fn balance(address: Address, rpc_url: Url, token: Address) -> anyhow::Result<ExitCode> {
    let provider = ProviderBuilder::new()
        .connect_http(rpc_url.clone())
        .erased();
    provider.get_chain_id().await.with_context(|| {
        format!("the chain at {rpc_url} does not answer (is `hiregate devnet up` running?)")
    })?;
    let contract = DevnetUsd::new(token, &provider);
    let amount = contract
        .balanceOf(address)
        .call()
        .await
        .context("balanceOf")?;
    let decimals = contract.decimals().call().await.context("decimals")?;
    let symbol = contract.symbol().call().await.context("symbol")?;
    println!(
        "{} {symbol} ({amount} atomic units) at {address}",
        whole_units(amount, decimals)
    );
    Ok(ExitCode::SUCCESS)
}
