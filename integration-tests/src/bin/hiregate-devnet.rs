//! `hiregate-devnet`: keeps the SDK deployment running (`hiregate_integration_tests::sdk_devnet`):
//! anvil with the devnet token, `hiregate facilitator`, `hiregate serve` and the Rust echo worker
//! listed for `summarize`, plus a seeker key and funded seeker wallets. The Python and TypeScript
//! quick starts hire on it (`scripts/devnet.sh` builds and starts it).
//!
//! ```text
//! hiregate-devnet [--env-file PATH] [--wallets N]
//! ```
//!
//! Prints the deployment's variables as `KEY=value` lines on stdout (and into `--env-file`, for
//! `set -a; . PATH`), then `devnet ready`, and runs until SIGINT or SIGTERM. The `hiregate` binary
//! it starts is `$HIREGATE_BIN`, else `hiregate-cli` next to this program (both are the gateway's
//! real command line). Keys printed here are for a throwaway local chain only.

use std::path::PathBuf;

use hiregate_integration_tests::harness::Binaries;
use hiregate_integration_tests::sdk_devnet::SdkDevnet;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut env_file: Option<PathBuf> = None;
    let mut wallets = 4_usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--env-file" => env_file = Some(args.next().ok_or("--env-file needs a path")?.into()),
            "--wallets" => wallets = args.next().ok_or("--wallets needs a number")?.parse()?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let here = std::env::current_exe()?;
    let dir = here.parent().ok_or("cannot locate this program's folder")?;
    let bins = Binaries {
        hiregate: std::env::var_os("HIREGATE_BIN")
            .map_or_else(|| dir.join("hiregate-cli"), PathBuf::from),
        example_worker: dir.join("example-worker"),
    };
    let deployment = SdkDevnet::start(&bins, wallets).await?;
    let lines: String = deployment
        .env()
        .iter()
        .map(|(key, value)| format!("{key}={value}\n"))
        .collect();
    if let Some(path) = &env_file {
        std::fs::write(path, &lines)?;
    }
    print!("{lines}");
    println!("devnet ready (logs in {})", deployment.dir().display());
    shutdown_signal().await;
    drop(deployment);
    Ok(())
}

/// SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
