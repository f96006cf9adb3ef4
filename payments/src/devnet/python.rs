//! Running the Python interop scripts from Rust, as [`super::node_script`] runs the Node ones:
//! JSON on stdin, one JSON document on stdout. They run in `.tools/sdk-venv`, which
//! `scripts/install-tools.sh` fills from `sdks/python/requirements.lock` (the official x402
//! Python SDK, its `x402.mcp` client with the official MCP client); the scripts of the official
//! A2A client and the SIWX message builder also get their own libraries, kept apart because
//! their pins conflict with the SDK's lock ([`PythonLibs`]).

use std::{path::PathBuf, time::Duration};

use serde_json::Value;
use tokio::process::Command;

use super::{DevnetError, node::run_json_script, workspace_root};

/// Environment variable naming the Python interpreter; otherwise `.tools/sdk-venv/bin/python`.
pub const SDK_PYTHON_ENV: &str = "HIREGATE_SDK_PYTHON";

/// How long [`python_script`] lets a script run: a paid hire settles on chain and waits for
/// its receipt, a few block times on an interval-mining devnet.
pub const DEFAULT_PYTHON_SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// Which libraries a Python script runs with, and so which folder of `tools/` it is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonLibs {
    /// The SDK venv alone: `tools/interop/*.py`.
    Sdk,
    /// The official A2A SDK's venv (`.tools/a2a-venv`) first on `PYTHONPATH`: `tools/a2a/*.py`.
    A2a,
    /// The official x402 SDK's sign-in-with-x builder (`.tools/siwx-lib`) first on
    /// `PYTHONPATH`: `tools/siwx/*.py`.
    Siwx,
}

impl PythonLibs {
    /// The folder of `tools/` its scripts are in.
    fn folder(self) -> &'static str {
        match self {
            Self::Sdk => "interop",
            Self::A2a => "a2a",
            Self::Siwx => "siwx",
        }
    }

    /// What its scripts import; it loading means the libraries are installed as locked.
    fn imports(self) -> &'static str {
        match self {
            Self::Sdk => "import mcp.client.streamable_http, x402.mcp, eth_account",
            Self::A2a => "import a2a.client, x402, eth_account, jsonrpc.jsonrpc2, culsans",
            Self::Siwx => "import x402.extensions.sign_in_with_x, siwe, eth_account",
        }
    }

    /// What goes first on `PYTHONPATH`, if anything; an error naming what is missing.
    fn python_path(self) -> Result<Option<PathBuf>, DevnetError> {
        let tools = workspace_root().join(".tools");
        match self {
            Self::Sdk => Ok(None),
            // `lib/python3.X/site-packages`: the minor version is the interpreter's.
            Self::A2a => std::fs::read_dir(tools.join("a2a-venv/lib"))
                .ok()
                .and_then(|mut dirs| dirs.next())
                .and_then(Result::ok)
                .map(|dir| Some(dir.path().join("site-packages")))
                .ok_or_else(|| {
                    DevnetError::PythonToolsMissing(".tools/a2a-venv not found".to_owned())
                }),
            Self::Siwx => Ok(Some(tools.join("siwx-lib"))),
        }
    }

    /// The SDK venv's interpreter with this set's `PYTHONPATH`.
    fn command(self) -> Result<std::process::Command, DevnetError> {
        let mut command = std::process::Command::new(sdk_python());
        if let Some(path) = self.python_path()? {
            command.env("PYTHONPATH", path);
        }
        Ok(command)
    }
}

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
    check_python_libs(PythonLibs::Sdk)
}

/// Checks that the SDK venv's interpreter runs and, with `libs`, imports what its scripts need;
/// the error says what is missing.
pub fn check_python_libs(libs: PythonLibs) -> Result<(), DevnetError> {
    let python = sdk_python();
    if !python.is_file() {
        return Err(DevnetError::PythonToolsMissing(format!(
            "{} not found",
            python.display()
        )));
    }
    let output = libs
        .command()?
        .args(["-c", libs.imports()])
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
    python_libs_or_skip(test, PythonLibs::Sdk)
}

/// [`python_tools_or_skip`] for the scripts of `libs`.
///
/// # Panics
///
/// When they are missing and `CI=true`.
pub fn python_libs_or_skip(test: &str, libs: PythonLibs) -> bool {
    match check_python_libs(libs) {
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
    python_script_with(PythonLibs::Sdk, script, input).await
}

/// [`python_script`] for a script of `libs` (`tools/a2a/<script>`, `tools/siwx/<script>`), run
/// with its libraries.
pub async fn python_script_with(
    libs: PythonLibs,
    script: &str,
    input: &Value,
) -> Result<Value, DevnetError> {
    let is_plain_py = script.ends_with(".py")
        && !script.starts_with('.')
        && script
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let path = workspace_root()
        .join("tools")
        .join(libs.folder())
        .join(script);
    if !is_plain_py || !path.is_file() {
        return Err(DevnetError::InvalidScriptName(script.to_owned()));
    }
    check_python_libs(libs)?;
    let mut command = Command::from(libs.command()?);
    // Unbuffered, and no user site-packages: only the locked libraries.
    command.arg("-u").arg("-s").arg(&path);
    run_json_script(command, script, input, DEFAULT_PYTHON_SCRIPT_TIMEOUT).await
}
