//! Real processes for end-to-end tests: an anvil devnet, `hiregate facilitator`, `hiregate serve`
//! and an example worker, each a child process of the test.
//!
//! - [`ChildProcess`]: a child whose stdout and stderr go to files (shown in failure messages),
//!   waited for with time bounds, killed on drop, or stopped with SIGTERM.
//! - [`FacilitatorProcess`], [`GatewayProcess`], [`WorkerProcess`]: start one component on port 0
//!   and learn its address from what it prints (`facilitator listening on …` on stderr, the
//!   gateway's JSON log line `hiregate gateway listening` with `local_addr`, the worker's
//!   `listening on …`).
//! - [`E2eStack`]: all of them wired together (gateway → facilitator over HTTP, worker trusting
//!   the gateway's JWKS), with an operator that listed the worker and a seeker key.
//!
//! Binaries come from the caller ([`Binaries`]), because `CARGO_BIN_EXE_*` exists only when
//! tests and benches are compiled, not this library.

use std::{
    fmt,
    fs::File,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, U256},
    signers::local::PrivateKeySigner,
};
use hiregate_payments::devnet::{Devnet, DevnetError};
use hiregate_worker_sdk::example_workers::{SUMMARIZE, summary_output_schema};
use serde_json::{Value, json};
use url::Url;

/// How long a component may take to report its address.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a SIGTERM-ed process may take to exit before it is killed.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(15);
/// Price of one `summarize` task in the stack: 1.25 tokens of 6 decimals.
pub const PRICE: u64 = 1_250_000;
/// How much of each log file goes into an error message.
const LOG_TAIL_BYTES: usize = 6_000;
/// How often log files and exit status are checked while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Something in the harness went wrong. Messages carry the logs of the process at fault.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A child process could not be spawned.
    #[error("cannot start {name} ({}): {source}", binary.display())]
    Spawn {
        /// Component name.
        name: String,
        /// The binary.
        binary: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// A child did not come up as expected.
    #[error("{name} did not start: {reason}\n{logs}")]
    Startup {
        /// Component name.
        name: String,
        /// What was missing.
        reason: String,
        /// Tail of its logs.
        logs: String,
    },
    /// A file of the harness could not be written or read.
    #[error("harness file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The devnet failed.
    #[error("devnet: {0}")]
    Devnet(#[from] DevnetError),
    /// An HTTP call of the harness failed.
    #[error("HTTP call failed: {0}")]
    Http(#[from] reqwest::Error),
    /// A component answered an HTTP call of the harness with an error.
    #[error("{what}: HTTP {status}: {body}")]
    Api {
        /// The call.
        what: String,
        /// HTTP status.
        status: u16,
        /// Response body.
        body: String,
    },
    /// A URL could not be built.
    #[error("URL: {0}")]
    Url(#[from] url::ParseError),
    /// A chain call of the harness failed.
    #[error("chain RPC: {0}")]
    Rpc(#[from] alloy::transports::TransportError),
    /// A payment could not be built or read.
    #[error("payment: {0}")]
    Payment(String),
    /// Stopping a process failed.
    #[error("cannot stop {name}: {reason}")]
    Stop {
        /// Component name.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Result of harness operations.
pub type HarnessResult<T> = Result<T, HarnessError>;

/// The binaries the harness starts, from the test's `env!("CARGO_BIN_EXE_…")`.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The real `hiregate` CLI (`hiregate-cli` in this package).
    pub hiregate: PathBuf,
    /// The example worker (`example-worker` in this package).
    pub example_worker: PathBuf,
}

/// Which stream of a child to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A child process with its output captured to files. Killed (SIGKILL) on drop.
pub struct ChildProcess {
    name: String,
    child: std::process::Child,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    /// Where this run's output starts in the (appended) log files.
    stdout_start: u64,
    stderr_start: u64,
    exit: Option<ExitStatus>,
}

impl fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildProcess")
            .field("name", &self.name)
            .field("pid", &self.child.id())
            .field("exit", &self.exit)
            .finish_non_exhaustive()
    }
}

impl ChildProcess {
    /// Spawns `command` with stdout/stderr into `<log_dir>/<name>.{stdout,stderr}.log` (appended,
    /// so a restarted component keeps one history). `HIREGATE_*` and `RUST_LOG` of the test's
    /// environment are not passed on: the child is configured only by what the harness says.
    pub fn spawn(name: &str, mut command: Command, log_dir: &Path) -> HarnessResult<Self> {
        let stdout_path = log_dir.join(format!("{name}.stdout.log"));
        let stderr_path = log_dir.join(format!("{name}.stderr.log"));
        let open = |path: &Path| {
            File::options()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| HarnessError::File {
                    path: path.to_path_buf(),
                    source,
                })
        };
        for (key, _) in std::env::vars_os() {
            let inherited = key.to_string_lossy();
            if inherited.starts_with("HIREGATE_") || inherited == "RUST_LOG" {
                command.env_remove(&key);
            }
        }
        command
            .stdin(Stdio::null())
            .stdout(open(&stdout_path)?)
            .stderr(open(&stderr_path)?);
        let start_of = |path: &Path| std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let (stdout_start, stderr_start) = (start_of(&stdout_path), start_of(&stderr_path));
        let child = command.spawn().map_err(|source| HarnessError::Spawn {
            name: name.to_owned(),
            binary: PathBuf::from(command.get_program()),
            source,
        })?;
        Ok(Self {
            name: name.to_owned(),
            child,
            stdout_path,
            stderr_path,
            stdout_start,
            stderr_start,
            exit: None,
        })
    }

    /// The component name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The OS process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some` once the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Everything this process (not an earlier run under the same name) wrote to `stream`.
    pub fn output(&self, stream: Stream) -> String {
        let (path, start) = match stream {
            Stream::Stdout => (&self.stdout_path, self.stdout_start),
            Stream::Stderr => (&self.stderr_path, self.stderr_start),
        };
        let bytes = std::fs::read(path).unwrap_or_default();
        let start = usize::try_from(start)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// The last few KB of both streams, for failure messages.
    pub fn log_tail(&self) -> String {
        let tail = |text: String| {
            let start = text.len().saturating_sub(LOG_TAIL_BYTES);
            let start = (start..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            text[start..].to_owned()
        };
        format!(
            "--- {name} stdout ---\n{}\n--- {name} stderr ---\n{}",
            tail(self.output(Stream::Stdout)),
            tail(self.output(Stream::Stderr)),
            name = self.name,
        )
    }

    /// Waits until a line of `stream` gives `Some` through `parse`; fails when the process exits
    /// first or `timeout` passes.
    pub async fn wait_for_line<T>(
        &mut self,
        stream: Stream,
        timeout: Duration,
        what: &str,
        parse: impl Fn(&str) -> Option<T>,
    ) -> HarnessResult<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = self.output(stream).lines().find_map(&parse) {
                return Ok(found);
            }
            if let Some(status) = self.exit_status() {
                return Err(self.startup_error(format!("exited with {status} before {what}")));
            }
            if Instant::now() >= deadline {
                return Err(self.startup_error(format!("no {what} within {timeout:?}")));
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    fn startup_error(&self, reason: String) -> HarnessError {
        HarnessError::Startup {
            name: self.name.clone(),
            reason,
            logs: self.log_tail(),
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.exit_status().is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit (SIGKILL after that, reported as an
    /// error: a process that ignores SIGTERM is a finding).
    pub async fn terminate(&mut self, timeout: Duration) -> HarnessResult<ExitStatus> {
        if let Some(status) = self.exit_status() {
            return Ok(status);
        }
        // `kill(1)` rather than a signal crate: the workspace forbids `unsafe`, and this is the
        // one signal the harness sends.
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .map_err(|e| HarnessError::Stop {
                name: self.name.clone(),
                reason: format!("kill -TERM: {e}"),
            })?;
        if !sent.success() {
            return Err(HarnessError::Stop {
                name: self.name.clone(),
                reason: format!("kill -TERM exited with {sent}"),
            });
        }
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.exit_status() {
                return Ok(status);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        self.kill();
        Err(HarnessError::Stop {
            name: self.name.clone(),
            reason: format!(
                "still running {timeout:?} after SIGTERM (killed)\n{}",
                self.log_tail()
            ),
        })
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn write_file(path: &Path, contents: &str) -> HarnessResult<()> {
    std::fs::write(path, contents).map_err(|source| HarnessError::File {
        path: path.to_path_buf(),
        source,
    })
}

/// `hiregate facilitator` on its own, settling on a devnet with the devnet's relayer key.
#[derive(Debug)]
pub struct FacilitatorProcess {
    process: ChildProcess,
    config_path: PathBuf,
    address: SocketAddr,
}

impl FacilitatorProcess {
    /// Writes `<dir>/facilitator.toml` for `devnet` and starts the facilitator on a free port.
    pub async fn start(bins: &Binaries, devnet: &Devnet, dir: &Path) -> HarnessResult<Self> {
        let config_path = dir.join("facilitator.toml");
        write_file(
            &config_path,
            &format!(
                r#"
[log]
level = "info"
[chains.devnet]
network = "{network}"
rpc_url = "{rpc}"
relayer_private_key = "{key}"
"#,
                network = devnet.network(),
                rpc = devnet.rpc_url(),
                key = devnet.relayer().to_bytes(),
            ),
        )?;
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        Self::start_on(bins, config_path, dir, listen).await
    }

    async fn start_on(
        bins: &Binaries,
        config_path: PathBuf,
        dir: &Path,
        listen: SocketAddr,
    ) -> HarnessResult<Self> {
        let mut command = Command::new(&bins.hiregate);
        command
            .arg("--config")
            .arg(&config_path)
            .arg("facilitator")
            .arg("--listen")
            .arg(listen.to_string());
        let mut process = ChildProcess::spawn("facilitator", command, dir)?;
        let address = process
            .wait_for_line(
                Stream::Stderr,
                STARTUP_TIMEOUT,
                "`facilitator listening on` line",
                |line| {
                    line.trim()
                        .strip_prefix("facilitator listening on http://")
                        .and_then(|address| address.trim_end_matches('/').parse().ok())
                },
            )
            .await?;
        Ok(Self {
            process,
            config_path,
            address,
        })
    }

    /// Base URL (`http://127.0.0.1:<port>/`).
    pub fn url(&self) -> Url {
        base_url(self.address)
    }

    /// The process (logs, kill, terminate).
    pub fn process(&mut self) -> &mut ChildProcess {
        &mut self.process
    }

    /// Starts a new facilitator on the same address and config (after this one was stopped).
    pub async fn restart(&mut self, bins: &Binaries, dir: &Path) -> HarnessResult<()> {
        self.process.kill();
        let again = Self::start_on(bins, self.config_path.clone(), dir, self.address).await?;
        *self = again;
        Ok(())
    }
}

/// `hiregate serve` on SQLite (or any database URL), using an external facilitator over HTTP.
#[derive(Debug)]
pub struct GatewayProcess {
    process: ChildProcess,
    name: String,
    config_path: PathBuf,
    env: Vec<(String, String)>,
    address: SocketAddr,
}

/// What [`GatewayProcess::start`] configures.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// `database.url`.
    pub database_url: String,
    /// `admin.api_key`.
    pub admin_key: String,
    /// The facilitator's base URL (`facilitator.mode = "http"`).
    pub facilitator_url: Url,
    /// The devnet's network (for the token metadata the offers need).
    pub network: String,
    /// The devnet's RPC URL.
    pub rpc_url: Url,
    /// `signing_key.path`, so a restarted gateway keeps its key.
    pub signing_key_path: PathBuf,
    /// `HIREGATE_*` overrides passed to the process (e.g. [`RecoveryKnobs::env`]); they win
    /// over the file and survive restarts.
    pub env: Vec<(String, String)>,
}

impl GatewayProcess {
    /// Writes `<dir>/gateway.toml` and starts `hiregate serve` on a free port.
    pub async fn start(bins: &Binaries, config: &GatewayConfig, dir: &Path) -> HarnessResult<Self> {
        Self::start_named(bins, config, dir, "gateway").await
    }

    /// [`GatewayProcess::start`] under another component name (`<dir>/<name>.toml`, its own log
    /// files): a second instance on the same database.
    pub async fn start_named(
        bins: &Binaries,
        config: &GatewayConfig,
        dir: &Path,
        name: &str,
    ) -> HarnessResult<Self> {
        let config_path = dir.join(format!("{name}.toml"));
        write_file(
            &config_path,
            &format!(
                r#"
[http]
listen_address = "127.0.0.1:0"
request_timeout_s = 60
[database]
url = "{database}"
[log]
# JSON, so the harness can read the bound address from the "listening" event.
level = "info"
format = "json"
[admin]
api_key = "{admin}"
[outbound]
# The workers run on this machine.
allow_private_targets = true
require_https = false
request_timeout_ms = 15000
[health]
interval_ms = 2000
[signing_key]
path = "{signing_key}"
[facilitator]
mode = "http"
url = "{facilitator}"
verify_timeout_ms = 3000
settle_timeout_ms = 30000
[chains.devnet]
network = "{network}"
rpc_url = "{rpc}"
"#,
                database = config.database_url,
                admin = config.admin_key,
                signing_key = config.signing_key_path.display(),
                facilitator = config.facilitator_url,
                network = config.network,
                rpc = config.rpc_url,
            ),
        )?;
        Self::start_with(
            bins,
            Launch {
                name: name.to_owned(),
                config_path,
                env: config.env.clone(),
            },
            dir,
            None,
        )
        .await
    }

    async fn start_with(
        bins: &Binaries,
        launch: Launch,
        dir: &Path,
        listen: Option<SocketAddr>,
    ) -> HarnessResult<Self> {
        let mut command = Command::new(&bins.hiregate);
        command
            .arg("--config")
            .arg(&launch.config_path)
            .arg("serve");
        command.envs(launch.env.iter().map(|(key, value)| (key, value)));
        if let Some(listen) = listen {
            // The environment layer wins over the file: the restart keeps the first port.
            command.env("HIREGATE_HTTP__LISTEN_ADDRESS", listen.to_string());
        }
        let mut process = ChildProcess::spawn(&launch.name, command, dir)?;
        let address = process
            .wait_for_line(
                Stream::Stdout,
                STARTUP_TIMEOUT,
                "`hiregate gateway listening` log event",
                listening_address,
            )
            .await?;
        Ok(Self {
            process,
            name: launch.name,
            config_path: launch.config_path,
            env: launch.env,
            address,
        })
    }

    fn launch(&self) -> Launch {
        Launch {
            name: self.name.clone(),
            config_path: self.config_path.clone(),
            env: self.env.clone(),
        }
    }

    /// Base URL (`http://127.0.0.1:<port>/`).
    pub fn url(&self) -> Url {
        base_url(self.address)
    }

    /// The process (logs, kill, terminate).
    pub fn process(&mut self) -> &mut ChildProcess {
        &mut self.process
    }

    /// The process, read-only (logs).
    pub fn process_ref(&self) -> &ChildProcess {
        &self.process
    }

    /// Runs `hiregate <args…>` once with this gateway's configuration file and environment
    /// (e.g. `reconcile --json`), within `timeout`.
    pub async fn run_cli(
        &self,
        bins: &Binaries,
        args: &[&str],
        timeout: Duration,
    ) -> HarnessResult<CliRun> {
        let mut command = tokio::process::Command::new(&bins.hiregate);
        command.arg("--config").arg(&self.config_path).args(args);
        for (key, _) in std::env::vars_os() {
            let inherited = key.to_string_lossy();
            if inherited.starts_with("HIREGATE_") || inherited == "RUST_LOG" {
                command.env_remove(&key);
            }
        }
        command
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let what = format!("hiregate {}", args.join(" "));
        let output = tokio::time::timeout(timeout, command.output())
            .await
            .map_err(|_| HarnessError::Stop {
                name: what.clone(),
                reason: format!("still running after {timeout:?}"),
            })?
            .map_err(|source| HarnessError::Spawn {
                name: what,
                binary: bins.hiregate.clone(),
                source,
            })?;
        Ok(CliRun {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// SIGTERM (graceful shutdown), then the same configuration and port again.
    pub async fn restart(&mut self, bins: &Binaries, dir: &Path) -> HarnessResult<ExitStatus> {
        let stopped = self.process.terminate(SHUTDOWN_TIMEOUT).await?;
        let again = Self::start_with(bins, self.launch(), dir, Some(self.address)).await?;
        *self = again;
        Ok(stopped)
    }

    /// `kill -9`: the process dies wherever it is, with no shutdown code running.
    pub fn kill9(&mut self) {
        self.process.kill();
    }

    /// Starts the same configuration (database, key, environment) on the same port after
    /// [`GatewayProcess::kill9`]; kills the old process first if it still runs.
    pub async fn restart_after_kill(&mut self, bins: &Binaries, dir: &Path) -> HarnessResult<()> {
        self.process.kill();
        let again = Self::start_with(bins, self.launch(), dir, Some(self.address)).await?;
        *self = again;
        Ok(())
    }
}

/// The end of a one-shot `hiregate` command.
#[derive(Debug, Clone)]
pub struct CliRun {
    /// Exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// What starting one gateway process needs besides the binaries.
struct Launch {
    name: String,
    config_path: PathBuf,
    env: Vec<(String, String)>,
}

/// The time bounds that decide how fast a gateway notices and resumes work after a crash, in
/// one place so the fault tests can tune them together. Each becomes a `HIREGATE_*` variable
/// of the gateway process ([`RecoveryKnobs::env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryKnobs {
    /// `contracts.jobs_interval_ms`: how often due jobs (polls, deadlines, stuck settlements)
    /// are looked for.
    pub jobs_interval_ms: u64,
    /// `contracts.job_lease_ms`: after a crash, another instance takes a job over once its
    /// lease ran out.
    pub job_lease_ms: u64,
    /// `contracts.sweep_interval_ms`: the settlement sweep's period.
    pub sweep_interval_ms: u64,
    /// `contracts.poll_interval_ms`: first poll of pending work.
    pub poll_interval_ms: u64,
    /// `contracts.recovery_grace_ms`: slack added to each step's time bound before another
    /// instance (or a restart) takes a contract over. Sent only to gateways that know the key.
    pub recovery_grace_ms: u64,
    /// `facilitator.verify_timeout_ms`.
    pub verify_timeout_ms: u64,
    /// `facilitator.settle_timeout_ms`.
    pub settle_timeout_ms: u64,
    /// `contracts.verification_budget_s`: authorization time reserved for verification.
    pub verification_budget_s: u64,
    /// `contracts.settlement_margin_s`: authorization time reserved for settlement.
    pub settlement_margin_s: u64,
    /// `contracts.max_authorization_window_s`: the longest `validBefore - now` accepted.
    pub max_authorization_window_s: u64,
}

impl RecoveryKnobs {
    /// Seconds-scale recovery: every background loop runs several times a second, a lost
    /// `/settle` answer is given up on after a few seconds, and authorizations are short.
    pub const FAST: Self = Self {
        jobs_interval_ms: 200,
        job_lease_ms: 2_000,
        sweep_interval_ms: 300,
        poll_interval_ms: 200,
        recovery_grace_ms: 1_000,
        verify_timeout_ms: 3_000,
        settle_timeout_ms: 3_000,
        verification_budget_s: 10,
        settlement_margin_s: 30,
        max_authorization_window_s: 300,
    };

    /// The knobs as `HIREGATE_*` variables for a gateway process.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("CONTRACTS__JOBS_INTERVAL_MS", self.jobs_interval_ms),
            ("CONTRACTS__JOB_LEASE_MS", self.job_lease_ms),
            ("CONTRACTS__SWEEP_INTERVAL_MS", self.sweep_interval_ms),
            ("CONTRACTS__POLL_INTERVAL_MS", self.poll_interval_ms),
            ("FACILITATOR__VERIFY_TIMEOUT_MS", self.verify_timeout_ms),
            ("FACILITATOR__SETTLE_TIMEOUT_MS", self.settle_timeout_ms),
            (
                "CONTRACTS__VERIFICATION_BUDGET_S",
                self.verification_budget_s,
            ),
            ("CONTRACTS__SETTLEMENT_MARGIN_S", self.settlement_margin_s),
            (
                "CONTRACTS__MAX_AUTHORIZATION_WINDOW_S",
                self.max_authorization_window_s,
            ),
        ];
        // The configuration refuses unknown keys; a gateway from before `recovery_grace_ms`
        // must still start.
        if gateway_knows_key("recovery_grace_ms") {
            env.push(("CONTRACTS__RECOVERY_GRACE_MS", self.recovery_grace_ms));
        }
        env.into_iter()
            .map(|(key, value)| (format!("HIREGATE_{key}"), value.to_string()))
            .collect()
    }

    /// The longest a contract in a non-terminal state may wait, after a crash, for another
    /// instance (or a restart) to resume it: a lease, a grace, two job and sweep periods and one
    /// lost facilitator call. Tests wait this long (plus the step's own work) before failing.
    pub fn takeover_bound(&self) -> Duration {
        Duration::from_millis(
            self.job_lease_ms
                + self.recovery_grace_ms
                + 2 * (self.jobs_interval_ms + self.sweep_interval_ms)
                + self.settle_timeout_ms.max(self.verify_timeout_ms),
        )
    }
}

/// Whether the gateway under test has `key` in its `[contracts]`/`[facilitator]` defaults.
fn gateway_knows_key(key: &str) -> bool {
    hiregate_engine::settings::DEFAULT_CONFIG_TOML
        .lines()
        .any(|line| {
            line.trim_start().starts_with(&format!("{key} "))
                || line.trim_start().starts_with(&format!("{key}="))
        })
}

/// The official TypeScript facilitator (`tools/interop/facilitator-server.mjs`: `x402Facilitator`
/// with `registerExactEvmScheme`) as a child process, settling on a devnet with its relayer.
#[derive(Debug)]
pub struct OfficialFacilitatorProcess {
    process: ChildProcess,
    url: Url,
}

impl OfficialFacilitatorProcess {
    /// Starts it on a free port. Needs Node and `tools/node_modules` (see
    /// `hiregate_payments::devnet::node_tools_or_skip`).
    pub async fn start(devnet: &Devnet, dir: &Path) -> HarnessResult<Self> {
        let node = std::env::var_os(hiregate_payments::devnet::NODE_ENV)
            .map_or_else(|| PathBuf::from("node"), PathBuf::from);
        let script = hiregate_payments::devnet::interop_dir().join("facilitator-server.mjs");
        let mut command = Command::new(node);
        command
            .arg(script)
            .arg("--rpc-url")
            .arg(devnet.rpc_url().as_str())
            .arg("--chain-id")
            .arg(devnet.chain_id().to_string())
            // The key goes through the environment: a command line is visible to every user.
            .env(
                "FACILITATOR_RELAYER_KEY",
                devnet.relayer().to_bytes().to_string(),
            )
            .current_dir(hiregate_payments::devnet::workspace_root());
        let mut process = ChildProcess::spawn("official-facilitator", command, dir)?;
        let url = process
            .wait_for_line(
                Stream::Stdout,
                STARTUP_TIMEOUT,
                "`facilitator listening on` line",
                |line| {
                    line.trim()
                        .strip_prefix("facilitator listening on ")
                        .and_then(|url| Url::parse(url).ok())
                },
            )
            .await?;
        Ok(Self { process, url })
    }

    /// Base URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The process (logs, kill).
    pub fn process(&mut self) -> &mut ChildProcess {
        &mut self.process
    }

    /// The process, read-only (logs).
    pub fn process_ref(&self) -> &ChildProcess {
        &self.process
    }
}

/// The gateway's `"hiregate gateway listening"` JSON event → its `local_addr`.
fn listening_address(line: &str) -> Option<SocketAddr> {
    let event: Value = serde_json::from_str(line.trim()).ok()?;
    let field = |name: &str| {
        event
            .get(name)
            .or_else(|| event.get("fields").and_then(|fields| fields.get(name)))
            .and_then(Value::as_str)
    };
    if field("message") != Some("hiregate gateway listening") {
        return None;
    }
    field("local_addr")?.parse().ok()
}

/// A worker-sdk example worker as a child process (`example-worker`).
#[derive(Debug)]
pub struct WorkerProcess {
    process: ChildProcess,
    url: Url,
    http: reqwest::Client,
}

impl WorkerProcess {
    /// Starts the `kind` (`echo` or `faulty`) example worker trusting the gateway at `gateway`.
    pub async fn start(
        bins: &Binaries,
        kind: &str,
        gateway: &Url,
        dir: &Path,
    ) -> HarnessResult<Self> {
        let jwks = gateway.join(".well-known/jwks.json")?;
        let mut command = Command::new(&bins.example_worker);
        command
            .env("EXAMPLE_WORKER", kind)
            .env("WORKER_LISTEN", "127.0.0.1:0")
            .env("WORKER_GATEWAY_JWKS_URL", jwks.as_str());
        let mut process = ChildProcess::spawn(&format!("worker-{kind}"), command, dir)?;
        let url = process
            .wait_for_line(
                Stream::Stdout,
                STARTUP_TIMEOUT,
                "`listening on` line",
                |line| {
                    line.trim()
                        .strip_prefix("listening on ")
                        .and_then(|rest| rest.split_whitespace().next())
                        .and_then(|url| Url::parse(url).ok())
                },
            )
            .await?;
        Ok(Self {
            process,
            url,
            http: reqwest::Client::new(),
        })
    }

    /// Base URL.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The process (logs, kill, terminate).
    pub fn process(&mut self) -> &mut ChildProcess {
        &mut self.process
    }

    /// The process, read-only (logs).
    pub fn process_ref(&self) -> &ChildProcess {
        &self.process
    }

    /// How many times the worker's task handler ran (its `GET /test/executions`).
    pub async fn executions(&self) -> HarnessResult<u64> {
        let body = checked_json(
            "worker /test/executions",
            self.http
                .get(self.url.join("test/executions")?)
                .timeout(Duration::from_secs(5))
                .send()
                .await?,
        )
        .await?;
        body["executions"]
            .as_u64()
            .ok_or_else(|| HarnessError::Api {
                what: "worker /test/executions".to_owned(),
                status: 200,
                body: body.to_string(),
            })
    }
}

/// Token balances of a payer and a payee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balances {
    /// The payer's.
    pub payer: U256,
    /// The payee's.
    pub payee: U256,
}

/// A whole deployment of separate processes on one devnet: facilitator, gateway (SQLite in the
/// stack's temp dir) and an echo worker listed by an operator; plus a seeker API key.
///
/// Fields drop in order: gateway, worker, facilitator, then anvil, then the temp dir.
#[derive(Debug)]
pub struct E2eStack {
    /// The gateway process.
    pub gateway: GatewayProcess,
    /// The worker process.
    pub worker: WorkerProcess,
    /// The facilitator process.
    pub facilitator: FacilitatorProcess,
    /// The chain.
    pub devnet: Devnet,
    /// `Authorization: Bearer …` of the seeker.
    pub seeker_key: String,
    /// The operator's key.
    pub operator_key: String,
    /// The worker's listing id.
    pub worker_id: String,
    /// The worker's payout address.
    pub pay_to: Address,
    bins: Binaries,
    http: reqwest::Client,
    dir: tempfile::TempDir,
}

impl E2eStack {
    /// Starts devnet, facilitator, gateway and worker; lists the worker; issues a seeker key.
    pub async fn start(bins: Binaries) -> HarnessResult<Self> {
        let dir = tempfile::tempdir().map_err(|source| HarnessError::File {
            path: std::env::temp_dir(),
            source,
        })?;
        let devnet = Devnet::start().await?;
        let facilitator = FacilitatorProcess::start(&bins, &devnet, dir.path()).await?;
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
        let gateway = GatewayProcess::start(&bins, &gateway_config, dir.path()).await?;
        let worker = WorkerProcess::start(&bins, "echo", &gateway.url(), dir.path()).await?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()?;
        let gateway_url = gateway.url();
        let Listed {
            operator_key,
            seeker_key,
            pay_to,
            worker_id,
        } = list_summarize_worker(&http, &gateway_url, &admin_key, worker.url(), &devnet, 4)
            .await?;
        Ok(Self {
            gateway,
            worker,
            facilitator,
            devnet,
            seeker_key,
            operator_key,
            worker_id,
            pay_to,
            bins,
            http,
            dir,
        })
    }

    /// The gateway's base URL.
    pub fn gateway_url(&self) -> Url {
        self.gateway.url()
    }

    /// A fresh wallet with gas and `tokens` atomic units.
    pub async fn funded_seeker(&self, tokens: u64) -> HarnessResult<PrivateKeySigner> {
        Ok(self.devnet.funded_account(U256::from(tokens)).await?)
    }

    /// Balances of `payer` and the worker's payout address.
    pub async fn balances(&self, payer: Address) -> HarnessResult<Balances> {
        Ok(Balances {
            payer: self.devnet.balance_of(payer).await?,
            payee: self.devnet.balance_of(self.pay_to).await?,
        })
    }

    /// The proposal of a `summarize` contract with the listed worker, settled right after a
    /// passed schema check.
    pub fn proposal(&self, input: &Value) -> Value {
        summarize_proposal(&self.worker_id, input, 10_000)
    }

    /// `POST /v1/contracts` as the seeker; returns the contract id.
    pub async fn propose(&self, input: &Value) -> HarnessResult<String> {
        propose_contract(
            &self.http,
            &self.gateway_url(),
            &self.seeker_key,
            &self.proposal(input),
        )
        .await
    }

    /// `GET /v1/contracts/{id}` as the seeker.
    pub async fn contract(&self, contract_id: &str) -> HarnessResult<Value> {
        checked_json(
            "GET /v1/contracts/{id}",
            self.http
                .get(
                    self.gateway_url()
                        .join(&format!("v1/contracts/{contract_id}"))?,
                )
                .bearer_auth(&self.seeker_key)
                .send()
                .await?,
        )
        .await
    }

    /// The HTTP client the harness uses (60 s timeout).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Stops the facilitator with SIGKILL: down, not shutting down gracefully.
    pub fn kill_facilitator(&mut self) {
        self.facilitator.process().kill();
    }

    /// Starts the facilitator again on its old port.
    pub async fn restart_facilitator(&mut self) -> HarnessResult<()> {
        self.facilitator.restart(&self.bins, self.dir.path()).await
    }

    /// SIGTERM the gateway and start it again on the same database, key and port; returns the
    /// stopped process's exit status.
    pub async fn restart_gateway(&mut self) -> HarnessResult<ExitStatus> {
        self.gateway.restart(&self.bins, self.dir.path()).await
    }

    /// Log tails of every process, for assertion messages.
    pub fn logs(&self) -> String {
        [
            self.gateway.process.log_tail(),
            self.facilitator.process.log_tail(),
            self.worker.process.log_tail(),
        ]
        .join("\n")
    }
}

fn base_url(address: SocketAddr) -> Url {
    // An IP and a port always make a valid http URL.
    Url::parse(&format!("http://{address}/")).unwrap_or_else(|_| unreachable!())
}

pub(crate) async fn create_key(
    http: &reqwest::Client,
    gateway: &Url,
    admin_key: &str,
    role: &str,
) -> HarnessResult<String> {
    let what = format!("POST /v1/admin/keys ({role})");
    let body = checked_json(
        &what,
        http.post(gateway.join("v1/admin/keys")?)
            .bearer_auth(admin_key)
            .json(&json!({"role": role, "label": "e2e"}))
            .send()
            .await?,
    )
    .await?;
    body["api_key"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HarnessError::Api {
            what,
            status: 200,
            body: body.to_string(),
        })
}

/// What [`list_summarize_worker`] set up on a gateway.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The operator's key.
    pub operator_key: String,
    /// A seeker's key.
    pub seeker_key: String,
    /// The listing's payout address (a fresh account).
    pub pay_to: Address,
    /// The listing id (`wk_…`).
    pub worker_id: String,
}

/// An operator and a seeker key on `gateway`, and the worker at `worker` listed by the operator
/// for `summarize` at [`PRICE`] on the devnet token.
pub async fn list_summarize_worker(
    http: &reqwest::Client,
    gateway: &Url,
    admin_key: &str,
    worker: &Url,
    devnet: &Devnet,
    max_parallel: u32,
) -> HarnessResult<Listed> {
    let operator_key = create_key(http, gateway, admin_key, "operator").await?;
    let seeker_key = create_key(http, gateway, admin_key, "seeker").await?;
    let pay_to = PrivateKeySigner::random().address();
    let what = "POST /v1/workers";
    let listing = checked_json(
        what,
        http.post(gateway.join("v1/workers")?)
            .bearer_auth(&operator_key)
            .json(&json!({
                "endpoint": worker.as_str(),
                "protocol": "hire",
                "pay_to": pay_to.to_checksum(None),
                "network": devnet.network(),
                "asset": devnet.token().to_checksum(None),
                "tasks": {SUMMARIZE: {"price": PRICE.to_string(), "output_schema": summary_output_schema()}},
                "max_parallel": max_parallel
            }))
            .send()
            .await?,
    )
    .await?;
    let worker_id = listing["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HarnessError::Api {
            what: what.to_owned(),
            status: 201,
            body: listing.to_string(),
        })?;
    Ok(Listed {
        operator_key,
        seeker_key,
        pay_to,
        worker_id,
    })
}

/// A `summarize` proposal for `worker_id`: schema check, one attempt, settlement right after
/// verification.
pub fn summarize_proposal(worker_id: &str, input: &Value, max_latency_ms: u64) -> Value {
    json!({
        "worker_id": worker_id,
        "task_type": SUMMARIZE,
        "input": input,
        "verification": {"policy_id": "vp.schema_only.v1", "policy_params": {}},
        "sla": {"max_latency_ms": max_latency_ms},
        "retry_policy": {"max_attempts": 1},
        "acceptance_window_s": 0
    })
}

/// `POST /v1/contracts` of `proposal` as `seeker_key`; returns the contract id.
pub async fn propose_contract(
    http: &reqwest::Client,
    gateway: &Url,
    seeker_key: &str,
    proposal: &Value,
) -> HarnessResult<String> {
    let what = "POST /v1/contracts";
    let created = checked_json(
        what,
        http.post(gateway.join("v1/contracts")?)
            .bearer_auth(seeker_key)
            .json(proposal)
            .send()
            .await?,
    )
    .await?;
    created["contract_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| HarnessError::Api {
            what: what.to_owned(),
            status: 201,
            body: created.to_string(),
        })
}

/// The JSON body of a 2xx answer; anything else is an [`HarnessError::Api`].
pub async fn checked_json(what: &str, response: reqwest::Response) -> HarnessResult<Value> {
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        return Err(HarnessError::Api {
            what: what.to_owned(),
            status: status.as_u16(),
            body: text,
        });
    }
    serde_json::from_str(&text).map_err(|_| HarnessError::Api {
        what: format!("{what} (not JSON)"),
        status: status.as_u16(),
        body: text,
    })
}
