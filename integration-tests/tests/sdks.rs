//! The Python and TypeScript SDKs against the real `hiregate` binary on anvil: one deployment
//! (`hiregate_integration_tests::sdk_devnet`: anvil + devnet token, `hiregate facilitator`,
//! `hiregate serve`, the Rust echo worker listed, funded seeker wallets) is started once and handed
//! to both SDK suites through `HIREGATE_*` variables, which run side by side:
//!
//! - `pytest sdks/python/tests sdks/conformance` in `.tools/sdk-venv`: the Python SDK's own tests
//!   (its seeker example hires the Rust example worker and verifies the receipt offline), the
//!   shared protocol conformance cases against the Rust, Python and TypeScript workers (behind a
//!   fake gateway the suite controls: JWKS rotation, token tampering and expiry, callback
//!   signatures and retries, stream resume), and the end-to-end hires of each worker through the
//!   gateway (settled with balances on chain, rejected out of schema, deduplicated under 8
//!   concurrent executes, pending work followed over SSE);
//! - `node --test` in `sdks/typescript`: the TypeScript SDK's own tests (its seeker example hires
//!   the Rust example worker with `@x402/fetch` and verifies the receipt offline).
//!
//! `scripts/install-tools.sh` installs both (venv from `sdks/python/requirements.lock`, `npm ci`
//! from `sdks/typescript/package-lock.json`). Missing, the test says why it skips, except under
//! `CI=true`, where it fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use hiregate_integration_tests::harness::Binaries;
use hiregate_integration_tests::sdk_devnet::SdkDevnet;
use hiregate_payments::devnet::workspace_root;

/// Seeker wallets: one per end-to-end worker (Python, TypeScript, Rust) and one per seeker example,
/// so every balance check sees only its own payments.
const WALLETS: usize = 5;
/// Bound on each suite, so a hung child fails the test instead of stalling CI.
const SUITE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

fn binaries() -> Binaries {
    Binaries {
        hiregate: env!("CARGO_BIN_EXE_hiregate-cli").into(),
        example_worker: env!("CARGO_BIN_EXE_example-worker").into(),
    }
}

/// The SDK toolchains, or why they are missing.
fn sdk_tools(root: &Path) -> Result<(PathBuf, PathBuf), String> {
    let python = root.join(".tools/sdk-venv/bin/python");
    let typescript = root.join("sdks/typescript");
    if !python.is_file() {
        return Err(format!("{} is missing", python.display()));
    }
    if !typescript.join("node_modules/.bin/tsc").is_file() {
        return Err(format!("{}/node_modules is missing", typescript.display()));
    }
    Ok((python, typescript))
}

struct SuiteRun {
    name: &'static str,
    success: bool,
    output: String,
}

async fn run_suite(
    name: &'static str,
    mut command: tokio::process::Command,
    env: &[(String, String)],
) -> SuiteRun {
    command
        .envs(env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(SUITE_TIMEOUT, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(error)) => panic!("{name}: cannot run: {error}"),
        Err(_) => panic!("{name}: still running after {SUITE_TIMEOUT:?}"),
    };
    SuiteRun {
        name,
        success: output.status.success(),
        output: format!(
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

fn tail(text: &str, bytes: usize) -> &str {
    let start = text.len().saturating_sub(bytes);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    &text[start..]
}

#[tokio::test]
async fn the_python_and_typescript_sdks_pass_their_suites_and_the_conformance_cases_against_the_real_gateway()
 {
    let root = workspace_root();
    let (python, typescript) = match sdk_tools(&root) {
        Ok(tools) => tools,
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!(
                "CI=true and the SDK toolchains are missing ({reason}): run scripts/install-tools.sh"
            )
        }
        Err(reason) => {
            eprintln!("skipped: SDK suites: {reason} (run scripts/install-tools.sh)");
            return;
        }
    };
    // The TypeScript conformance worker runs from the build: build it before anything starts it.
    let build = std::process::Command::new(typescript.join("node_modules/.bin/tsc"))
        .args(["-p", "tsconfig.json"])
        .current_dir(&typescript)
        .output()
        .expect("tsc runs");
    assert!(
        build.status.success(),
        "the TypeScript SDK does not build:\n{}{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );

    let deployment = match SdkDevnet::start(&binaries(), WALLETS).await {
        Ok(deployment) => deployment,
        Err(error) => panic!("the SDK deployment did not start: {error}"),
    };
    let mut env = deployment.env().to_vec();
    env.push((
        "HIREGATE_CONFORMANCE_LOGS".to_owned(),
        deployment.dir().join("conformance").display().to_string(),
    ));

    let mut pytest = tokio::process::Command::new(&python);
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"])
        .arg(root.join("sdks/python/tests"))
        .arg(root.join("sdks/conformance"))
        .current_dir(&root);
    let mut node = tokio::process::Command::new("node");
    node.args(["--test", "--test-concurrency=1", "dist/test/"])
        .current_dir(&typescript);
    let (python_run, node_run) = tokio::join!(
        run_suite(
            "pytest (Python SDK + conformance + end to end)",
            pytest,
            &env
        ),
        run_suite("node --test (TypeScript SDK)", node, &env),
    );
    for run in [&python_run, &node_run] {
        eprintln!("--- {} ---\n{}", run.name, tail(&run.output, 3_000));
    }
    for run in [python_run, node_run] {
        assert!(
            run.success,
            "{} failed:\n{}\n{}",
            run.name,
            tail(&run.output, 20_000),
            deployment.logs()
        );
    }
}
