//! The `hiregate` command line: `serve`, `migrate`, `keys create`, `check-config`,
//! `facilitator` (the bundled x402 facilitator on its own), `receipt verify` (offline, with the
//! JWKS), `reconcile` (the store's settlements against the chain; exit 0 agree, 1 mismatch,
//! 2 could not run), `demo`, `devnet` (a local chain for your own gateway, see
//! [`crate::devnet_cli`]), `healthcheck` (for container images), `seeker …` (a seeker's hire
//! from the shell, see [`crate::seeker_cli`]) and `mcp` (the MCP tools over stdio).

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::json;

use crate::{config::Settings, shutdown, startup::App, telemetry};
use hiregate_contracts::id::PrincipalId;
use hiregate_engine::{
    auth::issue_api_key,
    clock::Clock,
    facilitator::bundled_facilitator_config,
    ledger::{ReconcileRequest, reconcile},
};
use hiregate_store::{Store, keys::Role};

/// hiregate: an x402 payment gateway for hiring AI agents.
#[derive(Debug, Parser)]
#[command(name = "hiregate", version, about)]
pub struct Cli {
    /// Configuration file layered over the built-in defaults (before HIREGATE_* variables).
    #[arg(long, global = true, env = "HIREGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway.
    ///
    /// A production configuration example (HTTPS public URL, PostgreSQL, a signing key file,
    /// an external facilitator) is `deploy/hiregate.production.toml`:
    /// `HIREGATE_CONFIG=deploy/hiregate.production.toml hiregate check-config` validates it;
    /// README "Deploying" covers the Docker image and the two-instance compose file.
    Serve {
        /// Apply pending migrations before serving (default: database.migrate_on_start).
        #[arg(long, conflicts_with = "no_migrate")]
        migrate: bool,
        /// Do not apply migrations, whatever the configuration says.
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Manage API keys.
    Keys {
        /// Key operation.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Load and validate the configuration, print it with secrets redacted, and exit.
    CheckConfig,
    /// Serve the bundled x402 facilitator (`/verify`, `/settle`, `/supported`, `/health`) for
    /// the chains under `[chains]`, each settling with its `relayer_private_key`.
    Facilitator {
        /// Address to listen on (default: facilitator.listen_address).
        #[arg(long)]
        listen: Option<SocketAddr>,
    },
    /// Work with contract receipts.
    Receipt {
        /// Receipt operation.
        #[command(subcommand)]
        command: ReceiptCommand,
    },
    /// Compare the store's settled payments with the chain's token transfers for a block range;
    /// exits 0 when they agree, 1 on any mismatch, 2 when the comparison could not run.
    Reconcile {
        /// First block (inclusive).
        #[arg(long, default_value_t = 0)]
        from_block: u64,
        /// Last block (inclusive); default: each chain's latest block.
        #[arg(long)]
        to_block: Option<u64>,
        /// Only this CAIP-2 network (e.g. `eip155:8453`); default: every chain under `[chains]`.
        #[arg(long)]
        network: Option<String>,
        /// Blocks per `eth_getLogs` request (lower it for RPCs with tighter limits).
        #[arg(long, default_value_t = hiregate_engine::ledger::chain::DEFAULT_LOG_CHUNK_BLOCKS,
              value_parser = clap::value_parser!(u64).range(1..))]
        chunk_blocks: u64,
        /// Print the report as JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Start a local chain (anvil + devnet token), the gateway with its bundled facilitator,
    /// and two example workers, then walk a seeker through a paid hire and a rejected one.
    #[cfg(feature = "devnet")]
    Demo,
    /// A local chain for running your own gateway (`devnet up`), and token balances on it
    /// (`devnet balance`): the README's walkthrough.
    #[cfg(feature = "devnet")]
    Devnet {
        /// Devnet operation.
        #[command(subcommand)]
        command: crate::devnet_cli::DevnetCommand,
    },
    /// Exit 0 when a gateway's `/healthz` answers 200 (the container image's HEALTHCHECK,
    /// which has no curl), 1 otherwise.
    Healthcheck {
        /// The liveness URL to ask.
        #[arg(long, default_value = "http://127.0.0.1:8402/healthz")]
        url: String,
    },
    /// Act as a seeker against a running gateway: discover workers, hire one (paying with a
    /// local key, under a spending guard), list contracts, open disputes.
    Seeker(Box<crate::seeker_cli::SeekerArgs>),
    /// Serve the MCP tools over stdio for a local agent, against a running gateway. Discovery
    /// and `hire_worker` (paid by the agent's own x402 wallet) need nothing more; the seeker
    /// key of `HIREGATE_SEEKER_KEY` (as `hiregate seeker`), if set, enables the account tools,
    /// and the wallet and limits of the `[mcp]` section the gateway-wallet `hire` (the day's
    /// spending is read from the configured database).
    Mcp {
        /// Public base URL of the gateway (what the tools' answers point to); the tools run the
        /// engine in this process on the gateway's configuration.
        #[arg(
            long,
            env = "HIREGATE_GATEWAY_URL",
            default_value = "http://127.0.0.1:8402/"
        )]
        gateway: url::Url,
    },
}

/// `keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it once, as JSON.
    Create {
        /// Role of the key.
        #[arg(long, value_enum)]
        role: KeyRole,
        /// Add the key to this existing account instead of creating a new one.
        #[arg(long)]
        principal: Option<PrincipalId>,
        /// Free-form note stored with the key.
        #[arg(long)]
        label: Option<String>,
    },
}

/// `receipt` subcommands.
#[derive(Debug, Subcommand)]
pub enum ReceiptCommand {
    /// Verify a receipt offline against the gateway's JWKS; prints what it states, exits 1 if
    /// it does not verify.
    Verify {
        /// JWKS file, or the `http(s)://…/.well-known/jwks.json` URL to fetch it from.
        #[arg(long)]
        jwks: String,
        /// A file holding the receipt (compact JWS), or the receipt itself.
        receipt: String,
    },
}

/// Roles `keys create` can issue.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum KeyRole {
    /// `hg_sk_…`
    Seeker,
    /// `hg_op_…`
    Operator,
}

impl From<KeyRole> for Role {
    fn from(role: KeyRole) -> Self {
        match role {
            KeyRole::Seeker => Self::Seeker,
            KeyRole::Operator => Self::Operator,
        }
    }
}

/// The whole `hiregate` process: allocator settings first (before any thread exists), then the
/// async runtime, then the command line.
pub fn main() -> ExitCode {
    crate::allocator::configure();
    let runtime = match crate::startup::runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("hiregate: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(Cli::parse()))
}

/// Run the parsed command line; errors are printed with their causes.
pub async fn run(cli: Cli) -> ExitCode {
    // Boxed: the serve path's future (the whole assembled gateway) is ~16 KiB.
    match Box::pin(dispatch(cli)).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let load = || crate::config::load(cli.config.as_deref()).context("cannot load configuration");
    match cli.command {
        Command::Serve {
            migrate,
            no_migrate,
        } => {
            let mut settings = load()?;
            if migrate {
                settings.database.migrate_on_start = true;
            }
            if no_migrate {
                settings.database.migrate_on_start = false;
            }
            telemetry::init(&settings.log)?;
            let shutdown = shutdown::token_cancelled_on_signals();
            let app = App::build(settings)
                .await
                .context("cannot start the gateway")?;
            app.run_until_stopped(shutdown).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Migrate => {
            let settings = load()?;
            let store = Store::connect(&settings.database)
                .await
                .context("cannot open the database")?;
            store.migrate().await?;
            store.close().await;
            println!("migrations applied");
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys {
            command:
                KeysCommand::Create {
                    role,
                    principal,
                    label,
                },
        } => {
            let settings = load()?;
            let store = Store::connect(&settings.database)
                .await
                .context("cannot open the database")?;
            if settings.database.migrate_on_start {
                store.migrate().await?;
            }
            let issued =
                issue_api_key(&store, &Clock::system(), role.into(), principal, label).await?;
            store.close().await;
            eprintln!("The key is shown only this once; only its hash is stored.");
            let record = issued.record;
            println!(
                "{}",
                json!({
                    "api_key": issued.key.reveal(),
                    "key_id": record.id,
                    "role": record.role,
                    "principal_id": record.principal_id,
                    "label": record.label,
                })
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig => {
            let settings = load()?;
            println!("{settings:#?}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Facilitator { listen } => {
            let settings = load()?;
            telemetry::init(&settings.log)?;
            let config = bundled_facilitator_config(&settings)?;
            let address = listen.unwrap_or(settings.facilitator.listen_address);
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen on {address}"))?;
            let bound = listener.local_addr().context("bound address")?;
            // Machine-readable for scripts that start it on port 0.
            eprintln!("facilitator listening on http://{bound}");
            let shutdown = shutdown::token_cancelled_on_signals();
            hiregate_payments::serve(config, listener, shutdown)
                .await
                .context("the facilitator stopped")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Receipt {
            command: ReceiptCommand::Verify { jwks, receipt },
        } => verify_receipt_command(&jwks, &receipt).await,
        Command::Reconcile {
            from_block,
            to_block,
            network,
            chunk_blocks,
            json,
        } => {
            let request = ReconcileRequest {
                from_block,
                to_block,
                network,
                log_chunk_blocks: Some(chunk_blocks),
            };
            let outcome = async { reconcile_command(load()?, &request, json).await }.await;
            match outcome {
                Ok(code) => Ok(code),
                Err(error) => {
                    // 2, not 1: "could not compare" must not read as "found a mismatch".
                    eprintln!("error: {error:#}");
                    Ok(ExitCode::from(2))
                }
            }
        }
        #[cfg(feature = "devnet")]
        Command::Demo => match crate::demo::run().await {
            Ok(()) => Ok(ExitCode::SUCCESS),
            // The demo already said what went wrong.
            Err(_) => Ok(ExitCode::FAILURE),
        },
        #[cfg(feature = "devnet")]
        Command::Devnet { command } => crate::devnet_cli::run(command).await,
        Command::Healthcheck { url } => {
            let client = reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(5))
                .build()?;
            match client.get(&url).send().await {
                Ok(response) if response.status().is_success() => Ok(ExitCode::SUCCESS),
                Ok(response) => {
                    eprintln!("{url} answered {}", response.status());
                    Ok(ExitCode::FAILURE)
                }
                Err(error) => {
                    eprintln!("{url}: {error}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Seeker(args) => crate::seeker_cli::run(*args).await,
        Command::Mcp { gateway } => {
            let settings = load()?;
            Box::pin(mcp_command(settings, gateway)).await
        }
    }
}

/// `hiregate reconcile`: the report on stdout; exit 1 on any mismatch.
/// `hiregate mcp`: the MCP tools over stdin/stdout until the client hangs up. Nothing but MCP
/// messages may go to stdout, so nothing else is printed there.
async fn mcp_command(settings: Settings, gateway: url::Url) -> anyhow::Result<ExitCode> {
    use rmcp::ServiceExt as _;

    // Optional: without it the account tools answer `unauthorized`, hire_worker still works.
    let seeker_key = crate::seeker_cli::seeker_key_from_env();
    let wallet = hiregate_http::mcp::tools::McpWallet::from_settings(&settings.mcp);
    // The tools call the engine in this process, on the gateway's configuration: its database,
    // chains and signing key, with `gateway` as the public URL its answers point to.
    let base_url = crate::seeker_cli::with_trailing_slash(gateway);
    let engine = hiregate_engine::services::Engine::build(
        settings,
        hiregate_engine::services::EngineOptions::default(),
        base_url.clone(),
    )
    .await
    .context("cannot start the engine (database, chains, signing key)")?;
    let services = hiregate_http::state::AppState::over(engine, &base_url);
    let server =
        hiregate_http::mcp::tools::HiregateMcp::over_stdio(services.clone(), seeker_key, wallet)
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not initialize")?;
    server.waiting().await.context("the MCP session failed")?;
    services.store.close().await;
    Ok(ExitCode::SUCCESS)
}

async fn reconcile_command(
    settings: Settings,
    request: &ReconcileRequest,
    json: bool,
) -> anyhow::Result<ExitCode> {
    // Read-only: an audit never migrates the database it audits.
    let store = Store::connect(&settings.database)
        .await
        .context("cannot open the database")?;
    let outcome = reconcile(&store, settings.chains.values(), request).await;
    store.close().await;
    let report = outcome.context("reconciliation failed")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `hiregate receipt verify`: no configuration or database needed, only the JWKS.
async fn verify_receipt_command(jwks: &str, receipt: &str) -> anyhow::Result<ExitCode> {
    let jwks_text = if jwks.starts_with("http://") || jwks.starts_with("https://") {
        reqwest::get(jwks)
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("cannot fetch the JWKS from {jwks}"))?
            .text()
            .await
            .context("cannot read the JWKS response")?
    } else {
        std::fs::read_to_string(jwks).with_context(|| format!("cannot read JWKS file {jwks}"))?
    };
    let jwks: hiregate_contracts::token::Jwks =
        serde_json::from_str(&jwks_text).context("the JWKS is not a JSON Web Key Set")?;
    let token = if std::path::Path::new(receipt).is_file() {
        std::fs::read_to_string(receipt)
            .with_context(|| format!("cannot read receipt file {receipt}"))?
    } else {
        receipt.to_owned()
    };
    match hiregate_contracts::receipt::verify_receipt(&token, &jwks) {
        Ok(claims) => {
            println!("{}", serde_json::to_string_pretty(&claims)?);
            eprintln!("receipt verifies");
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("receipt does NOT verify: {error}");
            Ok(ExitCode::FAILURE)
        }
    }
}
