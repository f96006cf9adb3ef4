//! `hiregate seeker …`: the seeker's side of the API from a shell, on top of the worker SDK's
//! [`SeekerClient`] (which already knows the 402 → sign → retry dance).
//!
//! `hire` proposes, reads the 402 the contract will ask for, and refuses before signing anything
//! when the price is above the spending guard (`--max-price`, `HIREGATE_SEEKER_MAX_PRICE`,
//! default [`DEFAULT_MAX_PRICE`] whole units of the contract's asset). Only then does it sign with
//! the local key, pay, follow pending work with a progress line on stderr, and print the outcome
//! (deliverable, verification, settlement, receipt) as JSON on stdout.
//!
//! Exit codes: 0 done (accepted/settled), 1 error, [`EXIT_REFUSED_BY_GUARD`] refused by the
//! guard (nothing signed), [`EXIT_NOT_ACCEPTED`] the hire ended without an accepted deliverable.
//!
//! The seeker key comes from `--api-key` or [`SEEKER_KEY_ENV`], the one variable every seeker
//! command of the binary reads (`hiregate mcp` too, see [`seeker_key_from_env`]).

use std::{
    cmp::Ordering,
    fmt,
    io::{IsTerminal as _, Write as _},
    path::{Path, PathBuf},
    process::ExitCode,
    str::FromStr,
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use hiregate_http::mcp::tools::{ACCEPTED, hire_report, in_progress};
use hiregate_worker_sdk::seeker::{ContractFilter, DiscoveryFilter, SeekerClient, WorkerSummary};
use serde_json::{Value, json};
use url::Url;

/// The guard when none is configured: at most this many whole units of the contract's asset.
pub const DEFAULT_MAX_PRICE: &str = "5";
/// Exit code of a hire refused by the spending guard.
pub const EXIT_REFUSED_BY_GUARD: u8 = 2;
/// Exit code of a paid hire that ended rejected, failed or otherwise not accepted.
pub const EXIT_NOT_ACCEPTED: u8 = 3;
/// The seeker API key of `hiregate seeker` and `hiregate mcp`.
pub const SEEKER_KEY_ENV: &str = "HIREGATE_SEEKER_KEY";
/// The name `hiregate seeker` used to read the key from; still read when [`SEEKER_KEY_ENV`] is
/// unset, with a deprecation warning, so existing scripts keep working.
pub const DEPRECATED_SEEKER_KEY_ENV: &str = "HIREGATE_API_KEY";

/// The seeker key from the environment: [`SEEKER_KEY_ENV`], else the deprecated
/// [`DEPRECATED_SEEKER_KEY_ENV`] (with a warning on stderr, never the key). Blank counts as unset.
pub fn seeker_key_from_env() -> Option<String> {
    let read = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|key| key.trim().to_owned())
            .filter(|key| !key.is_empty())
    };
    read(SEEKER_KEY_ENV).or_else(|| {
        let key = read(DEPRECATED_SEEKER_KEY_ENV)?;
        eprintln!(
            "warning: {DEPRECATED_SEEKER_KEY_ENV} is deprecated; set {SEEKER_KEY_ENV} instead"
        );
        Some(key)
    })
}

/// `hiregate seeker`: connection options shared by every subcommand.
#[derive(Debug, Args)]
pub struct SeekerArgs {
    /// Base URL of the gateway.
    #[arg(
        long,
        global = true,
        env = "HIREGATE_GATEWAY_URL",
        default_value = "http://127.0.0.1:8402/"
    )]
    gateway: Url,
    /// Seeker API key (`hg_sk_…`); prefer the environment variable HIREGATE_SEEKER_KEY over the
    /// command line (HIREGATE_API_KEY, its former name, is still read, with a warning).
    #[arg(long, global = true)]
    api_key: Option<ApiKey>,
    /// What to do.
    #[command(subcommand)]
    command: SeekerCommand,
}

/// `seeker` subcommands.
#[derive(Debug, Subcommand)]
pub enum SeekerCommand {
    /// Discover listed workers (`GET /v1/workers`).
    Workers {
        /// Only workers offering this task type.
        #[arg(long)]
        task_type: Option<String>,
        /// Only healthy workers.
        #[arg(long)]
        healthy: bool,
        /// Print the listings as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Hire a worker: propose, check the price against the guard, pay the 402 with the local
    /// key, wait for the work, print the deliverable and the receipt as JSON.
    Hire {
        /// Worker id (`wk_…`).
        #[arg(long)]
        worker: String,
        /// Task type.
        #[arg(long)]
        task: String,
        /// Task input: JSON, or `@file.json`.
        #[arg(long)]
        input: String,
        /// A stricter output JSON Schema: JSON, or `@schema.json`.
        #[arg(long)]
        schema: Option<String>,
        /// File holding the paying wallet's hex private key.
        #[arg(long, env = "HIREGATE_SEEKER_WALLET_KEY_FILE")]
        wallet_key_file: PathBuf,
        /// Spending guard: the most this hire may cost, in whole units of the contract's asset
        /// (e.g. `1.50`); a higher price is refused before anything is signed.
        #[arg(long, env = "HIREGATE_SEEKER_MAX_PRICE", default_value = DEFAULT_MAX_PRICE)]
        max_price: DecimalAmount,
        /// Seconds the seeker may dispute a passed deliverable before settlement.
        #[arg(long)]
        acceptance_window_s: Option<u64>,
        /// Print the outcome of the execute call and return without waiting for pending work.
        #[arg(long)]
        no_wait: bool,
        /// How often to poll the contract while the work is in progress, in milliseconds.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..))]
        poll_interval_ms: u64,
    },
    /// List own contracts, newest first (`GET /v1/contracts`).
    Contracts {
        /// Only contracts in this state.
        #[arg(long)]
        state: Option<String>,
        /// Only contracts with this worker.
        #[arg(long)]
        worker: Option<String>,
        /// Only contracts created at or after this RFC 3339 time.
        #[arg(long)]
        created_after: Option<String>,
        /// Only contracts created before this RFC 3339 time.
        #[arg(long)]
        created_before: Option<String>,
        /// Page size (the gateway's default when absent).
        #[arg(long)]
        limit: Option<u32>,
        /// `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
        /// Print the page as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one contract as JSON (`GET /v1/contracts/{id}`).
    Contract {
        /// Contract id (`ctr_…`).
        id: String,
    },
    /// Open a dispute on a contract (`POST /v1/contracts/{id}/disputes`).
    Dispute {
        /// Contract id (`ctr_…`).
        id: String,
        /// Why.
        #[arg(long)]
        reason: String,
        /// What is claimed: JSON, or `@claim.json`.
        #[arg(long)]
        claim: Option<String>,
    },
}

/// An API key from the command line or environment; `Debug` never shows it.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl FromStr for ApiKey {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let value = value.trim();
        if value.is_empty() {
            return Err("the API key is empty".to_owned());
        }
        Ok(Self(value.to_owned()))
    }
}

/// A non-negative decimal amount in whole token units (`1`, `1.50`), compared exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecimalAmount {
    /// Integer digits without leading zeros (empty for zero).
    whole: String,
    /// Fraction digits without trailing zeros.
    fraction: String,
}

impl FromStr for DecimalAmount {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let (whole, fraction) = value.trim().split_once('.').unwrap_or((value.trim(), ""));
        let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || value.trim().ends_with('.') {
            return Err(format!(
                "`{value}` is not a decimal amount such as 2 or 1.50"
            ));
        }
        Ok(Self {
            whole: whole.trim_start_matches('0').to_owned(),
            fraction: fraction.trim_end_matches('0').to_owned(),
        })
    }
}

impl fmt::Display for DecimalAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = if self.whole.is_empty() {
            "0"
        } else {
            &self.whole
        };
        if self.fraction.is_empty() {
            f.write_str(whole)
        } else {
            write!(f, "{whole}.{}", self.fraction)
        }
    }
}

impl Ord for DecimalAmount {
    fn cmp(&self, other: &Self) -> Ordering {
        // Normalised digits: a longer integer part is larger; then digit by digit.
        self.whole
            .len()
            .cmp(&other.whole.len())
            .then_with(|| self.whole.cmp(&other.whole))
            .then_with(|| {
                let width = self.fraction.len().max(other.fraction.len());
                format!("{:0<width$}", self.fraction).cmp(&format!("{:0<width$}", other.fraction))
            })
    }
}

impl PartialOrd for DecimalAmount {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Run `hiregate seeker …`.
pub async fn run(args: SeekerArgs) -> anyhow::Result<ExitCode> {
    let SeekerArgs {
        gateway,
        api_key,
        command,
    } = args;
    let gateway = with_trailing_slash(gateway);
    // Read once, so the deprecation warning is printed once.
    let api_key = api_key.map(|key| key.0).or_else(seeker_key_from_env);
    let key = || {
        api_key
            .clone()
            .with_context(|| format!("no API key: set {SEEKER_KEY_ENV} or pass --api-key"))
    };
    match command {
        SeekerCommand::Workers {
            task_type,
            healthy,
            json,
        } => {
            // Discovery needs no key; send one only when given.
            let client = SeekerClient::without_wallet(gateway, key().unwrap_or_default());
            let workers = client
                .discover(&DiscoveryFilter {
                    task_type: task_type.clone(),
                    healthy: healthy.then_some(true),
                    ..DiscoveryFilter::default()
                })
                .await?;
            if json {
                let listed: Vec<Value> = workers.iter().map(worker_json).collect();
                println!("{}", serde_json::to_string_pretty(&listed)?);
            } else {
                print!("{}", workers_table(&workers, task_type.as_deref()));
            }
            Ok(ExitCode::SUCCESS)
        }
        SeekerCommand::Hire {
            worker,
            task,
            input,
            schema,
            wallet_key_file,
            max_price,
            acceptance_window_s,
            no_wait,
            poll_interval_ms,
        } => {
            let signer = read_wallet_key(&wallet_key_file)?;
            let client = SeekerClient::new(gateway, key()?, Arc::new(signer));
            let mut proposal = json!({
                "worker_id": worker,
                "task_type": task,
                "input": json_argument("--input", &input)?,
            });
            if let Some(schema) = schema {
                proposal["output_schema"] = json_argument("--schema", &schema)?;
            }
            if let Some(window) = acceptance_window_s {
                proposal["acceptance_window_s"] = json!(window);
            }
            let hire = Hire {
                client,
                max_price,
                wait: (!no_wait).then(|| Duration::from_millis(poll_interval_ms)),
            };
            hire.run(&proposal).await
        }
        SeekerCommand::Contracts {
            state,
            worker,
            created_after,
            created_before,
            limit,
            cursor,
            json,
        } => {
            let client = SeekerClient::without_wallet(gateway, key()?);
            let page = client
                .contracts(&ContractFilter {
                    state,
                    worker_id: worker,
                    created_after,
                    created_before,
                    limit,
                    cursor,
                })
                .await?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "contracts": page.contracts,
                        "next_cursor": page.next_cursor,
                    }))?
                );
            } else {
                print!("{}", contracts_table(&page.contracts));
                if let Some(cursor) = page.next_cursor {
                    eprintln!("more: --cursor {cursor}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SeekerCommand::Contract { id } => {
            let client = SeekerClient::without_wallet(gateway, key()?);
            let view = client.contract(&id).await?;
            println!("{}", serde_json::to_string_pretty(&view.body)?);
            Ok(ExitCode::SUCCESS)
        }
        SeekerCommand::Dispute { id, reason, claim } => {
            let client = SeekerClient::without_wallet(gateway, key()?);
            let claim = claim
                .map(|claim| json_argument("--claim", &claim))
                .transpose()?;
            let dispute = client.open_dispute(&id, &reason, claim.as_ref()).await?;
            println!("{}", serde_json::to_string_pretty(&dispute)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `Url::join` drops the last path segment of a base without a trailing slash
/// (`https://host/gw` + `v1/…` → `https://host/v1/…`); a gateway behind a path prefix needs it.
pub(crate) fn with_trailing_slash(mut url: Url) -> Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

/// The paying key; errors never quote the file's content.
fn read_wallet_key(path: &Path) -> anyhow::Result<PrivateKeySigner> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the wallet key file {}", path.display()))?;
    PrivateKeySigner::from_str(text.trim()).map_err(|_| {
        anyhow::anyhow!(
            "the wallet key file {} does not hold a hex secp256k1 private key",
            path.display()
        )
    })
}

/// A JSON argument given inline or as `@file`.
fn json_argument(flag: &str, value: &str) -> anyhow::Result<Value> {
    let text = match value.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).with_context(|| format!("{flag}: cannot read {path}"))?
        }
        None => value.to_owned(),
    };
    serde_json::from_str(&text).with_context(|| format!("{flag}: not valid JSON"))
}

/// One paid hire, from proposal to outcome.
struct Hire {
    client: SeekerClient,
    max_price: DecimalAmount,
    /// Poll interval while waiting; `None` to return after the execute call.
    wait: Option<Duration>,
}

impl Hire {
    async fn run(&self, proposal: &Value) -> anyhow::Result<ExitCode> {
        let offered = self
            .client
            .propose(proposal)
            .await
            .context("the proposal was refused")?;
        let contract_id = offered.id.clone();
        let informational = &offered.body["payment"]["informational"];
        let (Some(price), Some(atomic)) = (
            informational["amount"].as_str(),
            informational["amount_atomic"].as_str(),
        ) else {
            bail!("contract {contract_id}: the gateway's offer names no price");
        };
        let currency = informational["currency"].as_str().unwrap_or("units");
        let network = informational["network"].as_str().unwrap_or("?");
        let price_amount: DecimalAmount = price
            .parse()
            .map_err(|error: String| anyhow::anyhow!("contract {contract_id}: {error}"))?;
        eprintln!(
            "contract {contract_id} offered: {price} {currency} ({atomic} atomic units) on {network}"
        );

        // The guard is checked against what will be signed: the 402's own amounts.
        let challenge = self
            .client
            .challenge(&contract_id)
            .await
            .context("cannot read the payment challenge")?;
        if let Some(other) = challenge
            .accepts
            .iter()
            .find(|offer| offer.amount.to_string() != atomic)
        {
            eprintln!(
                "refused: contract {contract_id} asks for {} atomic units but its offer said \
                 {atomic}; nothing was signed",
                other.amount
            );
            return Ok(ExitCode::from(EXIT_REFUSED_BY_GUARD));
        }
        if price_amount > self.max_price {
            eprintln!(
                "refused: contract {contract_id} costs {price} {currency}, above the spending \
                 guard of {} {currency} (--max-price / HIREGATE_SEEKER_MAX_PRICE); nothing was \
                 signed or paid",
                self.max_price
            );
            return Ok(ExitCode::from(EXIT_REFUSED_BY_GUARD));
        }

        let payment = self
            .client
            .sign_for(&challenge)
            .await
            .context("cannot sign the payment")?;
        eprintln!(
            "paying {price} {currency} from {}",
            payment_payer(&self.client)
        );
        let outcome = self
            .client
            .execute_with_payment(&contract_id, &payment)
            .await
            .context("the execute call failed")?;
        match outcome.status {
            200 | 202 | 422 => {}
            402 => bail!(
                "contract {contract_id}: the payment was refused: {}",
                error_text(&outcome.body)
            ),
            status => bail!(
                "contract {contract_id}: the gateway answered {status}: {} (the payment is held; \
                 `hiregate seeker contract {contract_id}` shows where it stands)",
                error_text(&outcome.body)
            ),
        }
        if outcome.status == 202 && self.wait.is_none() {
            println!("{}", serde_json::to_string_pretty(&outcome.body)?);
            return Ok(ExitCode::SUCCESS);
        }
        // Pending work, and a settlement still under way after a 200, are followed to the end.
        if let Some(interval) = self.wait {
            self.follow(&contract_id, interval).await?;
        }
        let view = self.client.contract(&contract_id).await?;
        let state = view.state.clone();
        let report = hire_report(
            &view.id,
            &view.state,
            &view.body,
            outcome.payment_response.as_ref(),
        );
        println!("{}", serde_json::to_string_pretty(&report)?);
        if ACCEPTED.contains(&state.as_str()) {
            eprintln!("contract {contract_id}: {state}");
            Ok(ExitCode::SUCCESS)
        } else {
            eprintln!("contract {contract_id} ended {state}: no accepted deliverable");
            Ok(ExitCode::from(EXIT_NOT_ACCEPTED))
        }
    }

    /// Polls the contract until it leaves the in-progress states, showing the state and the
    /// time waited on stderr.
    async fn follow(&self, contract_id: &str, interval: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        let live = std::io::stderr().is_terminal();
        let mut last = String::new();
        loop {
            let view = self.client.contract(contract_id).await?;
            let elapsed = started.elapsed().as_secs();
            if live {
                eprint!("\r\x1b[2K{contract_id}: {} ({elapsed}s)", view.state);
                let _ = std::io::stderr().flush();
            } else if view.state != last {
                eprintln!("{contract_id}: {} ({elapsed}s)", view.state);
            }
            if !in_progress(&view.state, &view.body) {
                if live {
                    eprintln!();
                }
                return Ok(());
            }
            last = view.state;
            tokio::time::sleep(interval).await;
        }
    }
}

fn payment_payer(client: &SeekerClient) -> String {
    client
        .payer()
        .map_or_else(String::new, |payer| payer.to_checksum(None))
}

fn error_text(body: &Value) -> String {
    match (
        body.pointer("/error/code").and_then(Value::as_str),
        body.pointer("/error/message").and_then(Value::as_str),
    ) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        _ => body.to_string(),
    }
}

fn worker_json(worker: &WorkerSummary) -> Value {
    json!({
        "id": worker.id,
        "protocol": worker.protocol,
        "health": worker.health,
        "network": worker.network,
        "asset": worker.asset,
        "pay_to": worker.pay_to,
        "tasks": worker.tasks.iter().map(|(task, offered)| (task.clone(), json!({
            "price": offered.price,
            "output_schema": offered.output_schema,
        }))).collect::<serde_json::Map<_, _>>(),
    })
}

/// One row per (worker, task type); only `task_type` when given.
fn workers_table(workers: &[WorkerSummary], task_type: Option<&str>) -> String {
    let mut rows = vec![[
        "WORKER".to_owned(),
        "TASK".to_owned(),
        "PRICE (ATOMIC)".to_owned(),
        "HEALTH".to_owned(),
        "PROTOCOL".to_owned(),
        "NETWORK".to_owned(),
        "ASSET".to_owned(),
    ]];
    for worker in workers {
        for (task, offered) in &worker.tasks {
            if task_type.is_some_and(|wanted| wanted != task) {
                continue;
            }
            rows.push([
                worker.id.clone(),
                task.clone(),
                offered.price.clone(),
                worker.health.clone(),
                worker.protocol.clone(),
                worker.network.clone(),
                worker.asset.clone(),
            ]);
        }
    }
    table(&rows)
}

fn contracts_table(contracts: &[Value]) -> String {
    let field = |contract: &Value, name: &str| {
        contract[name]
            .as_str()
            .map_or_else(|| contract[name].to_string(), str::to_owned)
    };
    let mut rows = vec![[
        "CONTRACT".to_owned(),
        "STATE".to_owned(),
        "WORKER".to_owned(),
        "TASK".to_owned(),
        "PRICE (ATOMIC)".to_owned(),
        "CREATED".to_owned(),
    ]];
    rows.extend(contracts.iter().map(|contract| {
        [
            field(contract, "contract_id"),
            field(contract, "state"),
            field(contract, "worker_id"),
            field(contract, "task_type"),
            contract
                .pointer("/price/amount")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            field(contract, "created_at"),
        ]
    }));
    table(&rows)
}

/// Left-aligned columns, two spaces apart.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amount(text: &str) -> DecimalAmount {
        text.parse().unwrap()
    }

    #[test]
    fn decimal_amounts_compare_by_value() {
        assert_eq!(amount("1.50"), amount("1.5"));
        assert_eq!(amount("001.5"), amount("1.5"));
        assert!(amount("1.5") > amount("1.49"));
        assert!(amount("1.5") < amount("1.500001"));
        assert!(amount("10") > amount("9.999"));
        assert!(amount("0.1") > amount("0.09"));
        assert_eq!(amount("0"), amount("0.000"));
        assert_eq!(amount("2.50").to_string(), "2.5");
        assert_eq!(amount("0.05").to_string(), "0.05");
    }

    #[test]
    fn malformed_amounts_are_refused() {
        for bad in ["", ".5", "1.", "-1", "1e3", "1,5", "abc", "1.2.3"] {
            assert!(bad.parse::<DecimalAmount>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bad_wallet_key_file_is_refused_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wallet.key");
        std::fs::write(&path, "0xnot-a-key-but-secret-looking\n").unwrap();
        let error = read_wallet_key(&path).unwrap_err().to_string();
        assert!(
            error.contains("does not hold a hex secp256k1 private key"),
            "{error}"
        );
        assert!(!error.contains("secret-looking"), "{error}");

        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        std::fs::write(&path, format!("{key}\n")).unwrap();
        let signer = read_wallet_key(&path).unwrap();
        assert_eq!(
            signer.address().to_checksum(None),
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
        );
        assert!(read_wallet_key(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn the_api_key_never_shows_in_debug() {
        let key: ApiKey = "hg_sk_secret".parse().unwrap();
        assert!(!format!("{key:?}").contains("hg_sk_secret"));
    }
}
