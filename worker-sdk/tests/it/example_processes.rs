//! The example programs as real processes (cargo builds examples for `cargo test`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use url::Url;

use hiregate_worker_sdk::testing::TestTokenIssuer;

use crate::helpers::{JwksServer, expect_error, fresh_contract, json_of};

fn example_path(name: &str) -> PathBuf {
    // The test binary lives in target/<profile>/deps; examples in target/<profile>/examples.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile_dir.join("examples").join(name)
}

/// Starts an example with `env` and returns it with the base URL it printed.
async fn start_example(name: &str, env: &[(&str, &str)]) -> (Child, Url) {
    let mut command = Command::new(example_path(name));
    command
        .env("WORKER_LISTEN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start example {name} ({e}); run via cargo test"));
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("example did not report its address in time")
        .unwrap()
        .expect("example exited before listening");
    let url = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    (child, url.parse().unwrap())
}

#[tokio::test]
async fn the_faulty_example_misbehaves_as_configured() {
    let issuer = TestTokenIssuer::new("gw-1").unwrap();
    let gateway = JwksServer::start(issuer.jwks()).await;
    let jwks_url = gateway.jwks_url().to_string();
    let (_child, base) = start_example(
        "faulty_worker",
        &[
            ("WORKER_GATEWAY_JWKS_URL", jwks_url.as_str()),
            ("FAULTY_MODE", "invalid"),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let execute = |input: serde_json::Value| {
        let contract = fresh_contract();
        client
            .post(base.join("/execute").unwrap())
            .bearer_auth(issuer.token_for(&contract).unwrap())
            .header("x-contract-id", contract.as_str())
            .json(&input)
            .send()
    };

    let by_default = json_of(execute(json!({"text": "x"})).await.unwrap(), StatusCode::OK).await;
    assert_eq!(by_default["output"]["content"], json!({"summary": 42}));
    let told_to_fail = json_of(
        execute(json!({"mode": "fail"})).await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(told_to_fail["status"], "failed");

    let anonymous = client
        .post(base.join("/execute").unwrap())
        .header("x-contract-id", "ctr_x")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(anonymous, StatusCode::UNAUTHORIZED, "missing_token").await;
}

#[tokio::test]
async fn the_echo_example_runs_without_auth_only_when_explicitly_told() {
    let (_child, base) = start_example("echo_worker", &[("WORKER_INSECURE_NO_AUTH", "1")]).await;
    let report = json_of(
        reqwest::Client::new()
            .post(base.join("/execute").unwrap())
            .header("x-contract-id", fresh_contract().as_str())
            .json(&json!({"text": "hello there"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        report["output"]["content"],
        json!({"summary": "hello there", "confidence": 0.9})
    );

    // Without keys and without the opt-out the example refuses to start.
    let status = Command::new(example_path("echo_worker"))
        .env("WORKER_LISTEN", "127.0.0.1:0")
        .env_remove("WORKER_GATEWAY_JWKS_URL")
        .env_remove("WORKER_INSECURE_NO_AUTH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .unwrap();
    assert!(!status.success());
}
