//! Finding the anvil binary and running it as a child process that dies with its owner.

use std::{
    ffi::OsString,
    net::{Ipv4Addr, TcpListener},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use alloy::providers::{Provider, ProviderBuilder};
use tempfile::NamedTempFile;
use tokio::{
    process::{Child, Command},
    time::Instant,
};
use url::Url;

use super::{DevnetError, workspace_root};

/// Environment variable naming an anvil binary; it wins over the other places.
pub(super) const ANVIL_ENV: &str = "HIREGATE_ANVIL";

/// A new port can be taken by another process between our probe and anvil's bind (tests start
/// chains in parallel); anvil then exits with "address in use" and we try another port.
const PORT_ATTEMPTS: usize = 4;
const READY_POLL_INTERVAL: Duration = Duration::from_millis(50);
const READY_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const OUTPUT_TAIL_BYTES: usize = 4_000;

/// Where to look for anvil: `$HIREGATE_ANVIL`, then `<workspace>/.tools/bin/anvil` (installed by
/// `scripts/install-tools.sh`), then `anvil` on `PATH`.
pub(super) fn locate_anvil() -> Result<PathBuf, DevnetError> {
    locate_anvil_in(
        std::env::var_os(ANVIL_ENV),
        &workspace_root(),
        std::env::var_os("PATH"),
    )
}

/// [`locate_anvil`] with its inputs explicit, so the search order is testable.
fn locate_anvil_in(
    configured: Option<OsString>,
    workspace_root: &Path,
    path_var: Option<OsString>,
) -> Result<PathBuf, DevnetError> {
    let mut searched = Vec::new();
    if let Some(configured) = configured {
        let path = PathBuf::from(configured);
        if path.is_file() {
            return Ok(path);
        }
        searched.push(format!("${ANVIL_ENV}={}", path.display()));
    }
    let project_local = workspace_root.join(".tools").join("bin").join("anvil");
    if project_local.is_file() {
        return Ok(project_local);
    }
    searched.push(project_local.display().to_string());
    if let Some(on_path) = find_in_path_var("anvil", path_var) {
        return Ok(on_path);
    }
    searched.push("anvil on PATH".to_owned());
    Err(DevnetError::AnvilNotFound {
        searched: searched.join(", "),
    })
}

pub(super) fn find_on_path(program: &str) -> Option<PathBuf> {
    find_in_path_var(program, std::env::var_os("PATH"))
}

fn find_in_path_var(program: &str, path_var: Option<OsString>) -> Option<PathBuf> {
    std::env::split_paths(&path_var?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// How to run anvil.
#[derive(Debug, Clone)]
pub(super) struct AnvilArgs {
    pub chain_id: u64,
    pub block_time: Option<Duration>,
    pub clock_behind: Duration,
    pub startup_timeout: Duration,
}

/// A running anvil. Dropping it kills the process; its output is kept in a temporary file that
/// is deleted with it.
#[derive(Debug)]
pub(super) struct AnvilProcess {
    child: Child,
    rpc_url: Url,
    log: NamedTempFile,
}

impl AnvilProcess {
    /// Starts anvil on a free loopback port and waits until it answers `eth_chainId` with the
    /// requested chain id.
    pub async fn start(binary: &Path, args: &AnvilArgs) -> Result<Self, DevnetError> {
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            match Self::start_on_free_port(binary, args).await {
                Ok(process) => return Ok(process),
                Err(StartFailure::PortTaken(error)) => last_error = Some(error),
                Err(StartFailure::Fatal(error)) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| DevnetError::InvalidOptions("no start attempt".into())))
    }

    async fn start_on_free_port(binary: &Path, args: &AnvilArgs) -> Result<Self, StartFailure> {
        let port = free_loopback_port().map_err(StartFailure::Fatal)?;
        let rpc_url = Url::parse(&format!("http://127.0.0.1:{port}/"))
            .map_err(|e| DevnetError::InvalidOptions(format!("no RPC URL for port {port}: {e}")))?;
        let log = tempfile::Builder::new()
            .prefix("hiregate-anvil-")
            .suffix(".log")
            .tempfile()
            .map_err(|source| io_error("create the anvil log file", source))?;
        let stdout = log
            .reopen()
            .map_err(|source| io_error("open the anvil log file", source))?;
        let stderr = log
            .reopen()
            .map_err(|source| io_error("open the anvil log file", source))?;

        let mut command = Command::new(binary);
        command
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--chain-id", &args.chain_id.to_string()])
            // Past states stay in memory as anvil keeps them (a call resolved at "latest" just
            // before the next block is mined still finds its state), but none is written to
            // disk: by default, once the in-memory history is full, anvil serialises a state
            // to JSON under ~/.foundry/anvil/tmp for every block mined, work that grows with
            // the chain (the c=8 benchmark's SQLite hires went from about 180 to 210 per
            // second without it), in files a killed anvil never removes. Nothing here reads
            // state at an old block.
            .args(["--max-persisted-states", "0"])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        if let Some(block_time) = args.block_time {
            command.args(["--block-time", &block_time.as_secs_f64().to_string()]);
        }
        if !args.clock_behind.is_zero() {
            // The genesis time; anvil keeps every later block the same distance behind.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let genesis = now.saturating_sub(args.clock_behind).as_secs();
            command.args(["--timestamp", &genesis.to_string()]);
        }
        let child = command.spawn().map_err(|source| {
            StartFailure::Fatal(DevnetError::AnvilSpawn {
                path: binary.to_owned(),
                source,
            })
        })?;
        let mut process = Self {
            child,
            rpc_url,
            log,
        };
        process.wait_until_ready(args).await?;
        Ok(process)
    }

    async fn wait_until_ready(&mut self, args: &AnvilArgs) -> Result<(), StartFailure> {
        let provider = ProviderBuilder::new().connect_http(self.rpc_url.clone());
        let deadline = Instant::now() + args.startup_timeout;
        loop {
            if let Some(status) = self
                .child
                .try_wait()
                .map_err(|source| io_error("poll the anvil process", source))?
            {
                let output = self.output_tail();
                let port_taken = is_port_conflict(&output);
                let error = DevnetError::AnvilExited {
                    status: status.to_string(),
                    output,
                };
                return Err(if port_taken {
                    StartFailure::PortTaken(error)
                } else {
                    StartFailure::Fatal(error)
                });
            }
            if let Ok(Ok(chain_id)) =
                tokio::time::timeout(READY_PROBE_TIMEOUT, provider.get_chain_id()).await
            {
                if chain_id != args.chain_id {
                    return Err(StartFailure::Fatal(DevnetError::UnexpectedNode(format!(
                        "{} reports chain id {chain_id}, expected {}",
                        self.rpc_url, args.chain_id
                    ))));
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartFailure::Fatal(DevnetError::AnvilStartTimeout {
                    rpc_url: self.rpc_url.to_string(),
                    waited: args.startup_timeout,
                    output: self.output_tail(),
                }));
            }
            tokio::time::sleep(READY_POLL_INTERVAL).await;
        }
    }

    pub fn rpc_url(&self) -> &Url {
        &self.rpc_url
    }

    pub fn log_path(&self) -> &Path {
        self.log.path()
    }

    /// The last few kilobytes anvil printed, for error messages.
    pub fn output_tail(&self) -> String {
        let Ok(bytes) = std::fs::read(self.log.path()) else {
            return "(anvil output unreadable)".to_owned();
        };
        let start = bytes.len().saturating_sub(OUTPUT_TAIL_BYTES);
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

enum StartFailure {
    PortTaken(DevnetError),
    Fatal(DevnetError),
}

impl From<DevnetError> for StartFailure {
    fn from(error: DevnetError) -> Self {
        Self::Fatal(error)
    }
}

fn io_error(context: &'static str, source: std::io::Error) -> DevnetError {
    DevnetError::Io { context, source }
}

fn is_port_conflict(output: &str) -> bool {
    let output = output.to_ascii_lowercase();
    output.contains("address already in use") || output.contains("addrinuse")
}

/// Asks the OS for a free port by binding port 0, then releases it for anvil.
fn free_loopback_port() -> Result<u16, DevnetError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|source| io_error("find a free local port", source))?;
    let port = listener
        .local_addr()
        .map_err(|source| io_error("find a free local port", source))?
        .port();
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_is_env_then_project_tools_then_path() {
        let root = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        let configured = root.path().join("my-anvil");
        let project_local = root.path().join(".tools/bin/anvil");
        let path_anvil = on_path.path().join("anvil");
        std::fs::create_dir_all(project_local.parent().unwrap()).unwrap();
        for file in [&configured, &project_local, &path_anvil] {
            std::fs::write(file, b"").unwrap();
        }
        let path_var = Some(on_path.path().as_os_str().to_owned());

        let found = locate_anvil_in(
            Some(configured.clone().into()),
            root.path(),
            path_var.clone(),
        );
        assert_eq!(found.unwrap(), configured);

        let found = locate_anvil_in(None, root.path(), path_var.clone());
        assert_eq!(found.unwrap(), project_local);

        std::fs::remove_file(&project_local).unwrap();
        let found = locate_anvil_in(None, root.path(), path_var);
        assert_eq!(found.unwrap(), path_anvil);
    }

    #[test]
    fn missing_anvil_names_the_install_script_and_every_place_searched() {
        let root = tempfile::tempdir().unwrap();
        let error = locate_anvil_in(
            Some("/nonexistent/anvil".into()),
            root.path(),
            Some("".into()),
        )
        .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, DevnetError::AnvilNotFound { .. }),
            "{message}"
        );
        assert!(message.contains("scripts/install-tools.sh"), "{message}");
        assert!(
            message.contains("HIREGATE_ANVIL=/nonexistent/anvil"),
            "{message}"
        );
        assert!(message.contains(".tools/bin/anvil"), "{message}");
    }

    #[test]
    fn port_conflicts_are_recognised_in_anvil_output() {
        assert!(is_port_conflict(
            "Error: Address already in use (os error 98)"
        ));
        assert!(!is_port_conflict(
            "error: invalid value 'x' for '--chain-id <CHAIN_ID>'"
        ));
    }
}
