//! Running the Node interop scripts of `tools/interop/` (official x402 SDK) from Rust.

use std::{path::PathBuf, process::Stdio, time::Duration};

use serde_json::Value;
use tokio::{io::AsyncWriteExt, process::Command};

use super::{DevnetError, anvil::find_on_path, workspace_root};

/// Environment variable naming the `node` binary; otherwise `node` on `PATH`.
pub const NODE_ENV: &str = "HIREGATE_NODE";

/// How long [`node_script`] lets a script run. Settling through the official facilitator waits
/// for a receipt, which on an interval-mining devnet takes a few block times.
pub const DEFAULT_NODE_SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// A package that every interop script imports; its presence means `npm ci` ran in `tools/`.
const MARKER_PACKAGE: &str = "tools/node_modules/@x402/evm/package.json";

/// The folder of the interop scripts: `<workspace>/tools/interop`.
pub fn interop_dir() -> PathBuf {
    workspace_root().join("tools").join("interop")
}

fn node_binary() -> Result<PathBuf, DevnetError> {
    if let Some(configured) = std::env::var_os(NODE_ENV) {
        return Ok(PathBuf::from(configured));
    }
    find_on_path("node").ok_or_else(|| DevnetError::NodeNotFound("no node on PATH".to_owned()))
}

/// Checks that `node` runs and the npm tools are installed; the error says what is missing.
pub fn check_node_tools() -> Result<(), DevnetError> {
    let node = node_binary()?;
    let version = std::process::Command::new(&node)
        .arg("--version")
        .output()
        .map_err(|e| DevnetError::NodeNotFound(format!("{}: {e}", node.display())))?;
    if !version.status.success() {
        return Err(DevnetError::NodeNotFound(format!(
            "{} --version exited with {}",
            node.display(),
            version.status
        )));
    }
    let marker = workspace_root().join(MARKER_PACKAGE);
    if !marker.is_file() {
        return Err(DevnetError::NodeToolsMissing(format!(
            "{} not found",
            marker.display()
        )));
    }
    Ok(())
}

/// For tests that need Node and the npm tools: `true` when they are there. Otherwise prints
/// `skipped: <test>: <reason>` and returns `false`, so the test can return early.
///
/// # Panics
///
/// When the tools are missing and `CI=true`: CI must never pass on a skipped interop suite.
pub fn node_tools_or_skip(test: &str) -> bool {
    match check_node_tools() {
        Ok(()) => true,
        Err(reason) if running_in_ci() => {
            panic!("{test}: CI=true and the Node interop tools are missing: {reason}")
        }
        Err(reason) => {
            eprintln!("skipped: {test}: {reason}");
            false
        }
    }
}

fn running_in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// Runs `node tools/interop/<script>` with `input` as JSON on stdin and returns the JSON document
/// it prints, within [`DEFAULT_NODE_SCRIPT_TIMEOUT`].
///
/// Inputs usually hold private keys: they are never logged or put into errors.
pub async fn node_script(script: &str, input: &Value) -> Result<Value, DevnetError> {
    node_script_with_timeout(script, input, DEFAULT_NODE_SCRIPT_TIMEOUT).await
}

/// [`node_script`] with an explicit time bound; the process is killed when it is exceeded.
pub async fn node_script_with_timeout(
    script: &str,
    input: &Value,
    timeout: Duration,
) -> Result<Value, DevnetError> {
    let is_plain_mjs = script.ends_with(".mjs")
        && !script.starts_with('.')
        && script
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let path = interop_dir().join(script);
    if !is_plain_mjs || !path.is_file() {
        return Err(DevnetError::InvalidScriptName(script.to_owned()));
    }
    check_node_tools()?;
    let mut command = Command::new(node_binary()?);
    command.arg(&path);
    run_json_script(command, script, input, timeout).await
}

/// Runs `command` (an interop script) in the workspace root with `input` as JSON on stdin and
/// returns the one JSON document it prints, within `timeout` (killed past it).
pub(super) async fn run_json_script(
    mut command: Command,
    script: &str,
    input: &Value,
    timeout: Duration,
) -> Result<Value, DevnetError> {
    let io_error = |source| DevnetError::NodeScriptIo {
        script: script.to_owned(),
        source,
    };

    let mut child = command
        .current_dir(workspace_root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io_error)?;
    let stdin_bytes =
        serde_json::to_vec(input).map_err(|source| DevnetError::NodeScriptOutput {
            script: script.to_owned(),
            source,
            stdout: String::new(),
        })?;
    let run = async {
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&stdin_bytes).await?;
            // Closing stdin is the script's end-of-input signal.
            drop(stdin);
        }
        child.wait_with_output().await
    };
    let output = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| DevnetError::NodeScriptTimeout {
            script: script.to_owned(),
            timeout,
        })?
        .map_err(io_error)?;

    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(DevnetError::NodeScriptFailed {
            script: script.to_owned(),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    serde_json::from_str(stdout.trim()).map_err(|source| DevnetError::NodeScriptOutput {
        script: script.to_owned(),
        source,
        stdout,
    })
}
