//! A2A Agent Cards: a healthy listing's card and the marketplace's, validated against the official
//! A2A v1.0 AgentCard definition (PyPI `a2a-sdk`, through `tools/a2a/validate_card.py`), their
//! gateway signatures verified offline with the JWKS, and unhealthy or unknown listings unpublished.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use hiregate_contracts::token::{Jwks, verify_agent_card};
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, TestWorker, spawn_app_on, worker_body},
    hire_env::{WorkerKind, hire_env},
};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The validator's verdict on `card`, or `None` (after saying why) when the A2A SDK venv is not
/// installed; under `CI=true` a missing venv fails instead.
fn a2a_verdict(card: &Value) -> Option<(bool, String)> {
    let root = repo_root();
    let python = root.join(".tools/a2a-venv/bin/python");
    if !python.exists() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "the A2A SDK venv is missing: run scripts/install-tools.sh"
        );
        eprintln!(
            "SKIPPED: {} missing (scripts/install-tools.sh)",
            python.display()
        );
        return None;
    }
    let mut child = Command::new(python)
        .arg(root.join("tools/a2a/validate_card.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(card.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    Some((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    ))
}

#[tokio::test]
async fn cards_follow_the_a2a_definition_and_carry_the_gateways_signature() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, "").await;
    let jwks: Jwks = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();

    let response = env
        .app
        .get(
            &format!("/v1/workers/{}/agent-card.json", env.worker_id),
            None,
        )
        .await;
    assert_eq!(response.status(), 200);
    let card: Value = response.json().await.unwrap();
    verify_agent_card(&card, &jwks).expect("the listing card verifies offline");
    let skill = &card["skills"][0];
    assert_eq!(skill["id"], "summarize");
    let x402 = &card["capabilities"]["extensions"][0];
    assert_eq!(x402["uri"], "https://github.com/google-a2a/a2a-x402/v0.1");
    assert_eq!(x402["required"], true);
    let accepts = &x402["params"]["accepts"][0];
    assert_eq!(accepts["amount"], "1500000");
    assert_eq!(
        accepts["payTo"].as_str().unwrap().to_lowercase(),
        env.pay_to.to_string().to_lowercase()
    );
    let contract = &card["capabilities"]["extensions"][1]["params"];
    assert_eq!(contract["workerId"], env.worker_id);
    assert_eq!(
        contract["tasks"]["summarize"]["outputSchema"]["required"],
        json!(["summary", "confidence"])
    );
    if let Some((valid, verdict)) = a2a_verdict(&card) {
        assert!(valid, "{verdict}");
    }

    // A changed card no longer verifies; the validator refuses what the definition forbids.
    let mut forged = card.clone();
    forged["capabilities"]["extensions"][0]["params"]["accepts"][0]["payTo"] =
        json!("0x000000000000000000000000000000000000dEaD");
    assert!(verify_agent_card(&forged, &jwks).is_err());
    let mut unsigned = card.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    assert!(verify_agent_card(&unsigned, &jwks).is_err());
    let mut off_spec = card.clone();
    off_spec["skills"][0]["price"] = json!("1");
    if let Some((valid, verdict)) = a2a_verdict(&off_spec) {
        assert!(!valid, "an unknown field must be refused: {verdict}");
    }
    let mut incomplete = card.clone();
    incomplete.as_object_mut().unwrap().remove("skills");
    if let Some((valid, verdict)) = a2a_verdict(&incomplete) {
        assert!(
            !valid,
            "a missing required field must be refused: {verdict}"
        );
    }

    let response = env.app.get("/.well-known/agent-card.json", None).await;
    assert_eq!(response.status(), 200);
    let gateway: Value = response.json().await.unwrap();
    verify_agent_card(&gateway, &jwks).expect("the marketplace card verifies offline");
    let skills: Vec<&str> = gateway["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(skills, ["hire", "summarize"]);
    if let Some((valid, verdict)) = a2a_verdict(&gateway) {
        assert!(valid, "{verdict}");
    }
}

#[tokio::test]
async fn unknown_unhealthy_and_retired_listings_have_no_card() {
    let app = spawn_app_on(TestDatabase::sqlite(), "").await;
    let (operator, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["translate"]).await;
    let response = app
        .register_worker(
            &operator,
            &worker_body(&worker.endpoint, &[("translate", "1000")]),
        )
        .await;
    assert_eq!(response.status(), 201);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        app.get(&format!("/v1/workers/{id}/agent-card.json"), None)
            .await
            .status(),
        200
    );
    let response = app
        .send_json(
            reqwest::Method::DELETE,
            &format!("/v1/workers/{id}"),
            Some(&operator),
            &json!({}),
        )
        .await;
    assert!(response.status().is_success());
    for path in [
        format!("/v1/workers/{id}/agent-card.json"),
        "/v1/workers/wk_01J9ZQ4X1V8E6W0M3C5T7B2N4K/agent-card.json".to_owned(),
        "/v1/workers/nope/agent-card.json".to_owned(),
    ] {
        let response = app.get(&path, None).await;
        assert_eq!(response.status(), 404, "{path}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "not_found");
    }
    // With no healthy listing the marketplace card still lists the generic skill.
    let gateway: Value = app
        .get("/.well-known/agent-card.json", None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(gateway["skills"][0]["id"], "hire");
    assert_eq!(gateway["skills"].as_array().unwrap().len(), 1);
}
