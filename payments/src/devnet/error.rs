//! The one error type of the devnet helper.

use std::{path::PathBuf, time::Duration};

use alloy::primitives::TxHash;

/// Why a devnet operation failed. Messages name the fix where there is one (most often: run
/// `scripts/install-tools.sh`).
#[derive(Debug, thiserror::Error)]
pub enum DevnetError {
    /// No anvil binary at any of the places searched.
    #[error(
        "anvil not found (looked at: {searched}); run scripts/install-tools.sh, or set HIREGATE_ANVIL to an anvil binary"
    )]
    AnvilNotFound {
        /// The places looked at, in order.
        searched: String,
    },
    /// The anvil process could not be started.
    #[error("could not start anvil at {}: {source}", path.display())]
    AnvilSpawn {
        /// The binary that was run.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Anvil exited before it answered RPC calls.
    #[error("anvil exited during start-up ({status}); its output ends with:\n{output}")]
    AnvilExited {
        /// The exit status.
        status: String,
        /// The end of anvil's stdout and stderr.
        output: String,
    },
    /// Anvil kept running but did not answer RPC calls in time.
    #[error("anvil did not answer on {rpc_url} within {waited:?}; its output ends with:\n{output}")]
    AnvilStartTimeout {
        /// Where it was asked.
        rpc_url: String,
        /// How long the helper waited.
        waited: Duration,
        /// The end of anvil's stdout and stderr.
        output: String,
    },
    /// The node that answered is not the fresh anvil the helper expects.
    #[error("unexpected devnet node: {0}")]
    UnexpectedNode(String),
    /// A local I/O step of the start-up failed (free port, log file).
    #[error("devnet start-up: {context}: {source}")]
    Io {
        /// The step.
        context: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The options cannot describe a devnet.
    #[error("invalid devnet options: {0}")]
    InvalidOptions(String),
    /// A JSON-RPC call to anvil failed.
    #[error("devnet RPC {call} failed: {source}")]
    Rpc {
        /// The call.
        call: &'static str,
        /// The transport's error.
        #[source]
        source: Box<alloy::transports::TransportError>,
    },
    /// A contract call or deployment failed (including reverts during gas estimation).
    #[error("devnet contract call {call} failed: {source}")]
    Contract {
        /// The call.
        call: &'static str,
        /// alloy's error, which carries the revert data.
        #[source]
        source: Box<alloy::contract::Error>,
    },
    /// A sent transaction could not be confirmed.
    #[error("devnet transaction {call} was not confirmed: {source}")]
    Confirmation {
        /// The call.
        call: &'static str,
        /// alloy's error.
        #[source]
        source: Box<alloy::providers::PendingTransactionError>,
    },
    /// A mined transaction reverted.
    #[error("devnet transaction {call} reverted (tx {tx_hash})")]
    Reverted {
        /// The call.
        call: &'static str,
        /// The transaction.
        tx_hash: TxHash,
    },
    /// `node` could not be run.
    #[error("node not available ({0}); install node >= 20 and run scripts/install-tools.sh")]
    NodeNotFound(String),
    /// The npm tools the interop scripts import are not installed.
    #[error("interop tools missing: {0}; run scripts/install-tools.sh")]
    NodeToolsMissing(String),
    /// The Python interop tools (`.tools/sdk-venv` with the locked SDKs) are not installed.
    #[error("python interop tools missing: {0}; run scripts/install-tools.sh")]
    PythonToolsMissing(String),
    /// The script name is not a plain `*.mjs` (or `*.py`) file name under `tools/interop/`.
    #[error(
        "invalid interop script name {0:?}: expected a file name like \"sign.mjs\" or \"mcp-hire.py\""
    )]
    InvalidScriptName(String),
    /// The script ran and failed.
    #[error("interop script {script} failed ({status}): {stderr}")]
    NodeScriptFailed {
        /// The script.
        script: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The script did not finish in time (it was killed).
    #[error("interop script {script} did not finish within {timeout:?}")]
    NodeScriptTimeout {
        /// The script.
        script: String,
        /// The bound.
        timeout: Duration,
    },
    /// The script succeeded but did not print one JSON document.
    #[error("interop script {script} printed no valid JSON ({source}); stdout: {stdout}")]
    NodeScriptOutput {
        /// The script.
        script: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
        /// What it printed.
        stdout: String,
    },
    /// Talking to the script's process failed.
    #[error("interop script {script}: {source}")]
    NodeScriptIo {
        /// The script.
        script: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl DevnetError {
    /// `map_err` adapter for a failed RPC call.
    pub(super) fn rpc(
        call: &'static str,
    ) -> impl FnOnce(alloy::transports::TransportError) -> Self {
        move |source| Self::Rpc {
            call,
            source: Box::new(source),
        }
    }

    /// `map_err` adapter for a failed contract call or deployment.
    pub(super) fn contract(call: &'static str) -> impl FnOnce(alloy::contract::Error) -> Self {
        move |source| Self::Contract {
            call,
            source: Box::new(source),
        }
    }

    /// `map_err` adapter for a transaction that could not be confirmed.
    pub(super) fn confirmation(
        call: &'static str,
    ) -> impl FnOnce(alloy::providers::PendingTransactionError) -> Self {
        move |source| Self::Confirmation {
            call,
            source: Box::new(source),
        }
    }
}
