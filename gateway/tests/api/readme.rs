//! The README's walkthrough ("Run your own gateway and get a worker paid"), run as written: its
//! fenced `sh` blocks are taken from `README.md` and executed by bash in one session, from the
//! repository root, as a newcomer would type them — the build, `hiregate devnet up`, `hiregate
//! serve`, the example worker `echo_worker`, keys, the registration, the paid hire, the balance
//! and `hiregate reconcile`. If the README drifts from the code, this fails.
//!
//! Each block is marked in the README by the HTML comment before it: `<!-- readme-test -->`
//! runs it in the session (a failing command fails the test: `set -euo pipefail`);
//! `<!-- readme-test: background until "text" -->` starts it in the background (the README's
//! "other terminal") and waits until its output shows `text`. Every `sh` block of the section
//! must carry a marker, so a block cannot silently leave the test.
//!
//! What the test changes around the commands, and only this: `HOME` is a fresh temporary folder
//! (the walkthrough works in `~/hiregate-walkthrough`; `CARGO_HOME` and `RUSTUP_HOME` keep
//! pointing at the real toolchain), the gateway and the worker get free ports through the
//! variables the commands read anyway (`HIREGATE_HTTP__LISTEN_ADDRESS`, `WORKER_LISTEN`), and
//! inherited `HIREGATE_*` variables are removed. Everything the blocks start is stopped at the
//! end (one process group).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

const SECTION: &str = "## Run your own gateway and get a worker paid";

/// How a marked block runs.
#[derive(Debug, PartialEq, Eq)]
enum Run {
    /// In the session, in order.
    Session,
    /// In the background, ready once its output shows this text.
    Background(String),
}

/// A fenced `sh` block of the walkthrough and how it runs.
#[derive(Debug)]
struct Block {
    run: Run,
    code: String,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn parse_marker(line: &str) -> Option<Run> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    let rest = inner.strip_prefix("readme-test")?.trim();
    if rest.is_empty() {
        return Some(Run::Session);
    }
    let text = rest
        .strip_prefix(": background until \"")
        .and_then(|tail| tail.strip_suffix('"'))
        .unwrap_or_else(|| panic!("unknown readme-test marker: {line}"));
    Some(Run::Background(text.to_owned()))
}

/// The walkthrough's blocks, each with its marker.
fn walkthrough(readme: &str) -> Vec<Block> {
    let start = readme
        .find(SECTION)
        .unwrap_or_else(|| panic!("README.md has no section {SECTION:?}"));
    let section = &readme[start + SECTION.len()..];
    let section = section.find("\n## ").map_or(section, |end| &section[..end]);
    let mut blocks = Vec::new();
    let mut marker = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if let Some(run) = parse_marker(line) {
            marker = Some(run);
        } else if line.trim_start().starts_with("```") {
            let fence = line.trim();
            let mut code = String::new();
            for body in lines.by_ref() {
                if body.trim_start().starts_with("```") {
                    break;
                }
                code.push_str(body);
                code.push('\n');
            }
            if fence == "```sh" {
                let run = marker.take().unwrap_or_else(|| {
                    panic!("a sh block of {SECTION:?} has no readme-test marker:\n{code}")
                });
                blocks.push(Block { run, code });
            }
        } else if !line.trim().is_empty() {
            // A marker belongs to the block right after it (blank lines aside).
            marker = None;
        }
    }
    blocks
}

/// One bash script: session blocks inline, background blocks started and waited for.
fn script(blocks: &[Block], logs: &Path) -> String {
    let mut script = String::from(
        r#"set -euo pipefail
readme_wait() { # log text pid
  for _ in $(seq 1 1200); do
    if grep -qF -- "$2" "$1"; then return 0; fi
    if ! kill -0 "$3" 2>/dev/null; then
      echo "README background block ended before printing '$2':" >&2; cat "$1" >&2; return 1
    fi
    sleep 0.1
  done
  echo "README background block did not print '$2' within 120 s:" >&2; cat "$1" >&2; return 1
}
"#,
    );
    for (index, block) in blocks.iter().enumerate() {
        match &block.run {
            Run::Session => {
                let _ = writeln!(script, "echo '### README block {index}' >&2");
                script.push_str(&block.code);
            }
            Run::Background(ready) => {
                let log = logs.join(format!("block-{index}.log"));
                let log = log.display();
                let ready = ready.replace('\'', r"'\''");
                let _ = write!(
                    script,
                    "echo '### README block {index} (background)' >&2\n\
                     (\n{code}) > '{log}' 2>&1 &\n\
                     readme_wait '{log}' '{ready}' $!\n",
                    code = block.code,
                );
            }
        }
    }
    script
}

async fn free_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn every_walkthrough_block_is_marked_and_the_markers_parse() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let blocks = walkthrough(&readme);
    let background: Vec<&Run> = blocks
        .iter()
        .map(|block| &block.run)
        .filter(|run| matches!(run, Run::Background(_)))
        .collect();
    // The chain, the gateway and the worker run beside the session.
    assert_eq!(background.len(), 3, "{blocks:#?}");
    assert!(blocks.len() >= 6, "{blocks:#?}");
    let all: String = blocks.iter().map(|block| block.code.as_str()).collect();
    for command in [
        "cargo build --locked --bin hiregate --example echo_worker",
        "hiregate devnet up",
        "hiregate serve",
        "echo_worker",
        "hiregate keys create --role operator",
        "hiregate seeker hire",
        "hiregate devnet balance",
        "hiregate reconcile",
    ] {
        assert!(all.contains(command), "the walkthrough runs `{command}`");
    }
}

#[tokio::test]
async fn the_readme_walkthrough_runs_as_written() {
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let blocks = walkthrough(&readme);
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("home");
    let logs = scratch.path().join("logs");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    let script_path = scratch.path().join("walkthrough.sh");
    std::fs::write(&script_path, script(&blocks, &logs)).unwrap();

    let real_home = std::env::var_os("HOME").map(PathBuf::from);
    let toolchain_home = |variable: &str, under_home: &str| {
        std::env::var_os(variable)
            .map(PathBuf::from)
            .or_else(|| real_home.as_ref().map(|home| home.join(under_home)))
            .expect("HOME or the variable is set")
    };
    let mut command = tokio::process::Command::new("bash");
    command
        .arg(&script_path)
        .current_dir(workspace_root())
        .env("HOME", &home)
        .env("CARGO_HOME", toolchain_home("CARGO_HOME", ".cargo"))
        .env("RUSTUP_HOME", toolchain_home("RUSTUP_HOME", ".rustup"))
        .env(
            "HIREGATE_HTTP__LISTEN_ADDRESS",
            format!("127.0.0.1:{}", free_port().await),
        )
        .env("WORKER_LISTEN", format!("127.0.0.1:{}", free_port().await))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // One group for everything the blocks start, stopped together below.
        .process_group(0)
        .kill_on_drop(true);
    for (name, _) in std::env::vars() {
        if name.starts_with("HIREGATE_") && name != "HIREGATE_ANVIL" && name != "HIREGATE_NODE" {
            command.env_remove(&name);
        }
    }
    let child = command.spawn().expect("bash runs");
    let group = child.id().expect("the session's process id");
    // A bound on a hung command, not a timing assertion: the build is usually fresh and the
    // rest takes seconds.
    let outcome = tokio::time::timeout(Duration::from_secs(900), child.wait_with_output()).await;
    // The chain, the gateway and the worker stop with their group.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", "--", &format!("-{group}")])
        .status();
    let output = outcome.expect("the walkthrough ends").expect("bash ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut background_logs = String::new();
    for entry in std::fs::read_dir(&logs).unwrap().flatten() {
        let _ = write!(
            background_logs,
            "\n--- {}:\n{}",
            entry.file_name().to_string_lossy(),
            std::fs::read_to_string(entry.path()).unwrap_or_default()
        );
    }
    let report =
        format!("stdout:\n{stdout}\nstderr:\n{stderr}\nbackground blocks:{background_logs}");
    assert!(output.status.success(), "the walkthrough failed\n{report}");

    // What the README says the newcomer sees.
    assert!(stdout.contains("\"state\": \"settled\""), "{report}");
    assert!(
        stdout.contains("1.25 hUSD (1250000 atomic units) at 0x"),
        "the worker's payout arrived\n{report}"
    );
    assert!(
        stdout.contains("store 1 settled = 1250000; chain 1 transfers = 1250000")
            && stdout.contains("mismatches: 0"),
        "reconcile agrees with the chain\n{report}"
    );
    assert!(
        stdout.contains(r#""earnings":[{"amount":"1250000""#),
        "the operator sees the earnings\n{report}"
    );
    // The session worked where the README says, not in the repository.
    assert!(
        home.join("hiregate-walkthrough/devnet/hiregate.toml")
            .is_file()
    );
}
