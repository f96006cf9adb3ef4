//! `hiregate seeker …` run as a child process against a real gateway on anvil: a paid hire of
//! the example worker end to end (money moved on chain, receipt verifies), and the spending
//! guard refusing a price above it before anything is signed.

use std::{path::Path, process::Output};

use alloy::primitives::U256;
use serde_json::Value;

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env},
};

/// Runs `hiregate seeker <args>` with only `env` among the `HIREGATE_*` variables. Async so the
/// gateway, which runs on this test's runtime, keeps serving while the child talks to it.
async fn seeker(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_hiregate"));
    command.arg("seeker").args(args);
    for (name, _) in std::env::vars() {
        if name.starts_with("HIREGATE_") {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().copied());
    command.output().await.expect("run hiregate seeker")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The seeker wallet's key, as a hex file the CLI reads; returns its content for leak checks.
fn write_wallet_key(env: &HireEnv, path: &Path) -> String {
    let key = env.wallet.to_bytes().to_string();
    std::fs::write(path, format!("{key}\n")).unwrap();
    key
}

fn contract_id_in(stderr: &str) -> String {
    stderr
        .split_whitespace()
        .find(|word| word.starts_with("ctr_"))
        .unwrap_or_else(|| panic!("no contract id in: {stderr}"))
        .to_owned()
}

#[tokio::test]
async fn the_cli_hires_the_example_worker_and_pays_on_chain() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("wallet.key");
    let wallet_key = write_wallet_key(&env, &key_file);
    let input_file = dir.path().join("input.json");
    std::fs::write(&input_file, r#"{"text": "hired from the shell"}"#).unwrap();
    let connection = [
        ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
        ("HIREGATE_SEEKER_KEY", env.seeker_key.as_str()),
    ];

    // Discovery shows the worker and its price.
    let listed = seeker(&["workers", "--task-type", "summarize"], &connection).await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let table = text(&listed.stdout);
    assert!(table.contains(&env.worker_id), "{table}");
    assert!(table.contains(&PRICE.to_string()), "{table}");
    let listed = seeker(&["workers", "--json"], &connection).await;
    let workers: Value = serde_json::from_slice(&listed.stdout).expect("JSON workers");
    assert_eq!(workers[0]["id"], env.worker_id.as_str());

    let before = env.balances().await;
    let hired = seeker(
        &[
            "hire",
            "--worker",
            &env.worker_id,
            "--task",
            "summarize",
            "--input",
            &format!("@{}", input_file.display()),
            "--wallet-key-file",
            key_file.to_str().unwrap(),
            "--max-price",
            "1.50",
        ],
        &connection,
    )
    .await;
    let (stdout, stderr) = (text(&hired.stdout), text(&hired.stderr));
    assert!(hired.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    let outcome: Value = serde_json::from_str(&stdout).expect("JSON outcome on stdout");
    let contract_id = outcome["contract_id"].as_str().unwrap().to_owned();
    assert_eq!(outcome["state"], "settled", "{outcome:#}");
    assert_eq!(
        outcome["deliverable"]["content"]["output"]["content"]["summary"], "hired from the shell",
        "{outcome:#}"
    );
    assert_eq!(outcome["verification"]["verification_status"], "passed");
    assert!(outcome["payment_response"]["success"].as_bool().unwrap());
    let jwks = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let receipt = hiregate_contracts::receipt::verify_receipt(
        outcome["receipt"].as_str().expect("a receipt"),
        &jwks,
    )
    .expect("the printed receipt verifies");
    assert_eq!(receipt.sub.as_str(), contract_id);

    // The money moved on chain, once, from the wallet in the key file to the worker.
    let after = env.balances().await;
    assert_eq!(
        after.0,
        before.0 - U256::from(PRICE),
        "payer paid the price"
    );
    assert_eq!(
        after.1,
        before.1 + U256::from(PRICE),
        "worker got the price"
    );
    assert_eq!(env.worker.executions(), 1);

    // Neither the API key nor the wallet key is ever printed.
    for secret in [env.seeker_key.as_str(), wallet_key.as_str()] {
        let bare = secret.trim_start_matches("0x");
        assert!(!stdout.contains(bare) && !stderr.contains(bare));
    }

    // The contract, as the CLI shows it.
    let shown = seeker(&["contract", &contract_id], &connection).await;
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(view["state"], "settled");
    assert!(!text(&shown.stderr).contains("deprecated"));

    // The key's former variable still works, with a warning that names the new one.
    let former = seeker(
        &["contract", &contract_id],
        &[
            ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
            ("HIREGATE_API_KEY", env.seeker_key.as_str()),
        ],
    )
    .await;
    assert!(former.status.success(), "{}", text(&former.stderr));
    let warning = text(&former.stderr);
    assert!(
        warning.contains("HIREGATE_API_KEY is deprecated")
            && warning.contains("HIREGATE_SEEKER_KEY"),
        "{warning}"
    );
    assert!(!warning.contains(env.seeker_key.as_str()));

    // Another seeker's key sees nothing of it: the gateway's 404, a non-zero exit.
    let (stranger, _) = env.app.create_key("seeker").await;
    let hidden = seeker(
        &["contract", &contract_id],
        &[
            ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
            ("HIREGATE_SEEKER_KEY", stranger.as_str()),
        ],
    )
    .await;
    assert!(!hidden.status.success());
    assert!(
        text(&hidden.stderr).contains("404"),
        "{}",
        text(&hidden.stderr)
    );
}

#[tokio::test]
async fn the_spending_guard_refuses_before_anything_is_signed() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("wallet.key");
    write_wallet_key(&env, &key_file);
    let before = env.balances().await;
    let hire_args = [
        "hire",
        "--worker",
        &env.worker_id,
        "--task",
        "summarize",
        "--input",
        r#"{"text": "too dear"}"#,
        "--wallet-key-file",
        key_file.to_str().unwrap(),
    ];
    let base = [
        ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
        ("HIREGATE_SEEKER_KEY", env.seeker_key.as_str()),
    ];

    // The price is 1.5: a guard one atomic unit below it (flag), then one from the environment.
    let flag_guard: Vec<&str> = hire_args
        .iter()
        .copied()
        .chain(["--max-price", "1.499999"])
        .collect();
    let from_flag = seeker(&flag_guard, &base).await;
    let mut with_env_guard = base.to_vec();
    with_env_guard.push(("HIREGATE_SEEKER_MAX_PRICE", "1"));
    let from_env = seeker(&hire_args, &with_env_guard).await;

    for refused in [from_flag, from_env] {
        let stderr = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("spending guard"), "{stderr}");
        assert!(refused.stdout.is_empty());
        let contract_id = contract_id_in(&stderr);
        assert_eq!(env.state(&contract_id).await, "offered");
        assert!(
            env.app
                .store
                .payment_of_contract(&contract_id)
                .await
                .unwrap()
                .is_none(),
            "no payment stored for {contract_id}"
        );
    }
    assert_eq!(env.balances().await, before, "nothing moved");
    assert_eq!(env.worker.executions(), 0);
}

#[tokio::test]
async fn the_cli_disputes_an_accepted_hire_inside_its_window() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("wallet.key");
    write_wallet_key(&env, &key_file);
    let connection = [
        ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
        ("HIREGATE_SEEKER_KEY", env.seeker_key.as_str()),
    ];
    let hired = seeker(
        &[
            "hire",
            "--worker",
            &env.worker_id,
            "--task",
            "summarize",
            "--input",
            r#"{"text": "judge me"}"#,
            "--wallet-key-file",
            key_file.to_str().unwrap(),
            "--acceptance-window-s",
            "600",
        ],
        &connection,
    )
    .await;
    assert!(hired.status.success(), "{}", text(&hired.stderr));
    let outcome: Value = serde_json::from_slice(&hired.stdout).unwrap();
    assert_eq!(
        outcome["state"], "accepted",
        "settlement waits for the window"
    );
    let contract_id = outcome["contract_id"].as_str().unwrap();

    let disputed = seeker(
        &[
            "dispute",
            contract_id,
            "--reason",
            "the summary is wrong",
            "--claim",
            r#"{"text": "too long", "expected": "a shorter summary"}"#,
        ],
        &connection,
    )
    .await;
    assert!(disputed.status.success(), "{}", text(&disputed.stderr));
    let dispute: Value = serde_json::from_slice(&disputed.stdout).unwrap();
    assert_eq!(dispute["party"], "seeker");
    assert_eq!(dispute["contract_id"], contract_id);

    // A second dispute is the gateway's error, reported with a non-zero exit.
    let again = seeker(&["dispute", contract_id, "--reason", "again"], &connection).await;
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("gateway answered"),
        "{}",
        text(&again.stderr)
    );
}

#[tokio::test]
async fn the_cli_waits_for_pending_work_and_shows_its_progress() {
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        4,
        "[contracts]\npoll_interval_ms = 100\n",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("wallet.key");
    write_wallet_key(&env, &key_file);
    let before = env.balances().await;
    let hired = seeker(
        &[
            "hire",
            "--worker",
            &env.worker_id,
            "--task",
            "summarize",
            "--input",
            r#"{"text": "later", "mode": "pending", "delay_ms": 500}"#,
            "--wallet-key-file",
            key_file.to_str().unwrap(),
            "--poll-interval-ms",
            "100",
        ],
        &[
            ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
            ("HIREGATE_SEEKER_KEY", env.seeker_key.as_str()),
        ],
    )
    .await;
    let stderr = text(&hired.stderr);
    assert!(hired.status.success(), "{stderr}");
    let outcome: Value = serde_json::from_slice(&hired.stdout).unwrap();
    assert_eq!(outcome["state"], "settled", "{outcome:#}");
    assert_eq!(
        outcome["deliverable"]["content"]["output"]["content"]["summary"],
        "later"
    );
    // Not a terminal: one progress line per state seen while waiting.
    let contract_id = outcome["contract_id"].as_str().unwrap();
    assert!(
        stderr.contains(&format!("{contract_id}: pending")),
        "{stderr}"
    );
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
}

#[tokio::test]
async fn the_cli_lists_own_contracts_newest_first_with_filters() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let first = env
        .contract(HireEnv::input("one"), serde_json::json!({}))
        .await;
    let second = env
        .contract(HireEnv::input("two"), serde_json::json!({}))
        .await;
    let (stranger, _) = env.app.create_key("seeker").await;
    env.app
        .send_json(
            reqwest::Method::POST,
            "/v1/contracts",
            Some(&stranger),
            &serde_json::json!({
                "worker_id": env.worker_id,
                "task_type": "summarize",
                "input": {"text": "not yours"},
            }),
        )
        .await;
    let connection = [
        ("HIREGATE_GATEWAY_URL", env.app.address.as_str()),
        ("HIREGATE_SEEKER_KEY", env.seeker_key.as_str()),
    ];

    let listed = seeker(&["contracts", "--json"], &connection).await;
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    let page: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ids: Vec<&str> = page["contracts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["contract_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "own, newest first");
    assert!(page["next_cursor"].is_null());

    // Pages: one contract per page, the cursor leads to the next.
    let paged = seeker(&["contracts", "--json", "--limit", "1"], &connection).await;
    let page: Value = serde_json::from_slice(&paged.stdout).unwrap();
    assert_eq!(page["contracts"][0]["contract_id"], second.as_str());
    let cursor = page["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let next = seeker(
        &["contracts", "--json", "--limit", "1", "--cursor", &cursor],
        &connection,
    )
    .await;
    let page: Value = serde_json::from_slice(&next.stdout).unwrap();
    assert_eq!(page["contracts"][0]["contract_id"], first.as_str());

    // The table, and a state filter that matches nothing.
    let table = seeker(&["contracts", "--worker", &env.worker_id], &connection).await;
    let table = text(&table.stdout);
    assert!(table.starts_with("CONTRACT"), "{table}");
    assert!(table.contains(&first) && table.contains(&second), "{table}");
    assert!(table.contains(&PRICE.to_string()), "{table}");
    let none = seeker(&["contracts", "--json", "--state", "settled"], &connection).await;
    let page: Value = serde_json::from_slice(&none.stdout).unwrap();
    assert_eq!(page["contracts"], serde_json::json!([]));
    // A bad filter is the gateway's 422, reported with a non-zero exit.
    let bad = seeker(&["contracts", "--created-after", "yesterday"], &connection).await;
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("invalid_filter"),
        "{}",
        text(&bad.stderr)
    );
}
