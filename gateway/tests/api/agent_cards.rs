//! A2A Agent Cards: a healthy listing's card and the marketplace's, validated against the official
//! A2A v1.0 AgentCard definition (PyPI `a2a-sdk`, through `tools/a2a/validate_card.py`), their
//! gateway signatures verified offline with the JWKS and by the official SDK's own signature
//! verifier (`tools/a2a/verify_card_signature.py`), and unhealthy or unknown listings unpublished.

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

/// What `script` (in `tools/a2a/`, run by the A2A SDK venv's python) says about `input`: success
/// and its output, or `None` (after saying why) when the venv is not installed; under `CI=true`
/// a missing venv fails instead.
fn a2a_script(script: &str, input: &Value) -> Option<(bool, String)> {
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
        .arg(root.join("tools/a2a").join(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    Some((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
    ))
}

/// The validator's verdict on `card` (see [`a2a_script`]).
fn a2a_verdict(card: &Value) -> Option<(bool, String)> {
    a2a_script("validate_card.py", card)
}

/// The official A2A SDK signature verifier's verdict on `card` with the keys of `jwks`, and the
/// card's protected header (see [`a2a_script`]).
fn sdk_signature_verdict(card: &Value, jwks: &Value) -> Option<(bool, String, Value)> {
    let (valid, output) = a2a_script(
        "verify_card_signature.py",
        &json!({"card": card, "jwks": jwks}),
    )?;
    let mut lines = output.lines();
    let verdict = lines.next().unwrap_or_default().to_owned();
    let header = serde_json::from_str(lines.next().unwrap_or("null")).unwrap();
    Some((valid, verdict, header))
}

/// Checks what every A2A verifier needs of a signed card: the SDK's verifier accepts it with the
/// gateway's JWKS, the header is the specification's (`typ` `JOSE`, EdDSA, a `kid` in the
/// JWKS), and the card holds nothing that a verifier would drop before canonicalizing (an
/// implicit default such as `"required": false`, an empty string, list or object, a `null`),
/// so the specification's canonical form and the SDK's are the card as served.
fn assert_signed_as_a2a_defines(card: &Value, jwks: &Value) {
    fn no_dropped_values(value: &Value, path: &str) {
        match value {
            Value::Null => panic!("{path} is null"),
            Value::String(text) => assert!(!text.is_empty(), "{path} is empty"),
            Value::Array(items) => {
                assert!(!items.is_empty(), "{path} is an empty list");
                for (index, item) in items.iter().enumerate() {
                    no_dropped_values(item, &format!("{path}[{index}]"));
                }
            }
            Value::Object(fields) => {
                assert!(!fields.is_empty(), "{path} is an empty object");
                for (key, field) in fields {
                    no_dropped_values(field, &format!("{path}.{key}"));
                }
            }
            Value::Bool(_) | Value::Number(_) => {}
        }
    }
    let mut unsigned = card.clone();
    unsigned.as_object_mut().unwrap().remove("signatures");
    no_dropped_values(&unsigned, "card");
    for extension in card["capabilities"]["extensions"].as_array().unwrap() {
        assert_ne!(
            extension["required"], false,
            "an implicit default: {extension}"
        );
    }
    if let Some((valid, verdict, header)) = sdk_signature_verdict(card, jwks) {
        assert!(valid, "the A2A SDK's verifier refuses the card: {verdict}");
        assert_eq!(header["typ"], "JOSE", "{header}");
        assert_eq!(header["alg"], "EdDSA", "{header}");
        let kid = header["kid"].as_str().unwrap();
        assert!(
            jwks["keys"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kid"] == kid),
            "{header}"
        );
    }
}

#[tokio::test]
async fn cards_follow_the_a2a_definition_and_carry_the_gateways_signature() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, "").await;
    let jwks_json: Value = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let jwks: Jwks = serde_json::from_value(jwks_json.clone()).unwrap();

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
    assert_signed_as_a2a_defines(&card, &jwks_json);
    // Only what is served is claimed: the A2A interface streams, nothing pushes notifications.
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], false);
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
    if let Some((valid, verdict, _)) = sdk_signature_verdict(&forged, &jwks_json) {
        assert!(!valid, "the SDK must refuse a changed card: {verdict}");
        assert!(verdict.contains("No valid signature found"), "{verdict}");
    }
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
    assert_signed_as_a2a_defines(&gateway, &jwks_json);
    assert_eq!(gateway["capabilities"]["streaming"], true);
    assert_eq!(gateway["capabilities"]["pushNotifications"], false);
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

/// A listing whose schemas hold values A2A verifiers drop (an empty `properties`, an empty
/// `default`) and no examples: its card leaves those schemas out rather than show them altered,
/// and its signature still verifies with the official SDK.
#[tokio::test]
async fn a_card_leaves_out_schemas_a2a_canonicalization_would_alter_and_still_verifies() {
    let app = spawn_app_on(TestDatabase::sqlite(), "").await;
    let (operator, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["translate", "classify"]).await;
    let mut body = worker_body(
        &worker.endpoint,
        &[("translate", "1000"), ("classify", "2000")],
    );
    body["tasks"]["classify"]["output_schema"] =
        json!({"type": "object", "properties": {}, "required": []});
    body["input_schema"] =
        json!({"type": "object", "properties": {"lang": {"type": "string", "default": ""}}});
    let response = app.register_worker(&operator, &body).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let jwks_json: Value = app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let jwks: Jwks = serde_json::from_value(jwks_json.clone()).unwrap();
    let card: Value = app
        .get(&format!("/v1/workers/{id}/agent-card.json"), None)
        .await
        .json()
        .await
        .unwrap();
    verify_agent_card(&card, &jwks).expect("the card verifies offline");
    assert_signed_as_a2a_defines(&card, &jwks_json);
    let params = &card["capabilities"]["extensions"][1]["params"];
    assert!(params.get("inputSchema").is_none(), "{params}");
    assert!(
        params["tasks"]["classify"].get("outputSchema").is_none(),
        "{params}"
    );
    assert_eq!(params["tasks"]["classify"]["price"], "2000");
    assert_eq!(
        params["tasks"]["translate"]["outputSchema"]["required"],
        json!(["summary"])
    );
    assert!(
        params["discoveryUrl"]
            .as_str()
            .unwrap()
            .ends_with("/v1/workers")
    );
    assert!(card["skills"][0].get("examples").is_none(), "{card}");
    if let Some((valid, verdict)) = a2a_verdict(&card) {
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
