//! Running the Python interop scripts of `tools/interop/` (the official x402 Python SDK, its
//! `x402.mcp` client with the official MCP client) from Rust, as [`super::node_script`] runs the
//! Node ones: JSON on stdin, one JSON document on stdout. They run in `.tools/sdk-venv`, which
//! `scripts/install-tools.sh` fills from `sdks/python/requirements.lock`.

use std::{path::PathBuf, time::Duration};

use serde_json::Value;
use tokio::process::Command;

use super::{DevnetError, node::run_json_script, workspace_root};

/// Environment variable naming the Python interpreter; otherwise `.tools/sdk-venv/bin/python`.
pub const SDK_PYTHON_ENV: &str = "HIREGATE_SDK_PYTHON";

/// How long [`python_script`] lets a script run: a paid hire settles on chain and waits for
/// its receipt, a few block times on an interval-mining devnet.
pub const DEFAULT_PYTHON_SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// What every Python interop script imports; it loading means the venv holds the locked SDKs.
const MARKER_IMPORTS: &str = "import mcp.client.streamable_http, x402.mcp, eth_account";

/// The interpreter of the SDK venv (or `$HIREGATE_SDK_PYTHON`).
pub fn sdk_python() -> PathBuf {
    std::env::var_os(SDK_PYTHON_ENV).map_or_else(
        || workspace_root().join(".tools/sdk-venv/bin/python"),
        PathBuf::from,
    )
}

/// Checks that the SDK venv's interpreter runs and imports the official x402 and MCP clients;
/// the error says what is missing.
pub fn check_python_tools() -> Result<(), DevnetError> {
    let python = sdk_python();
    if !python.is_file() {
        return Err(DevnetError::PythonToolsMissing(format!(
            "{} not found",
            python.display()
        )));
    }
    let output = std::process::Command::new(&python)
        .args(["-c", MARKER_IMPORTS])
        .output()
        .map_err(|e| DevnetError::PythonToolsMissing(format!("{}: {e}", python.display())))?;
    if !output.status.success() {
        return Err(DevnetError::PythonToolsMissing(format!(
            "{} cannot import the locked SDKs: {}",
            python.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// For tests that need the Python SDKs: `true` when they are there. Otherwise prints
/// `skipped: <test>: <reason>` and returns `false`.
///
/// # Panics
///
/// When they are missing and `CI=true`: CI must never pass on a skipped interop test.
pub fn python_tools_or_skip(test: &str) -> bool {
    match check_python_tools() {
        Ok(()) => true,
        Err(reason) if std::env::var("CI").is_ok_and(|value| value == "true") => {
            panic!("{test}: CI=true and the Python interop tools are missing: {reason}")
        }
        Err(reason) => {
            eprintln!("skipped: {test}: {reason}");
            false
        }
    }
}

/// Runs `python tools/interop/<script>` (a plain `*.py` file name) in the SDK venv with `input`
/// as JSON on stdin and returns the JSON document it prints, within
/// [`DEFAULT_PYTHON_SCRIPT_TIMEOUT`]. Inputs usually hold private keys: never logged.
pub async fn python_script(script: &str, input: &Value) -> Result<Value, DevnetError> {
    let is_plain_py = script.ends_with(".py")
        && !script.starts_with('.')
        && script
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let path = super::interop_dir().join(script);
    if !is_plain_py || !path.is_file() {
        return Err(DevnetError::InvalidScriptName(script.to_owned()));
    }
    check_python_tools()?;
    let mut command = Command::new(sdk_python());
    // Unbuffered, and no user site-packages: only the locked venv's modules.
    command.arg("-u").arg("-s").arg(&path);
    run_json_script(command, script, input, DEFAULT_PYTHON_SCRIPT_TIMEOUT).await
}
