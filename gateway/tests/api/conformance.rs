//! The OpenAPI document and the server agree, checked from outside by Schemathesis (PyPI, pinned
//! in `tools/conformance/requirements.txt`, installed into `.tools/schemathesis-venv` by
//! `scripts/install-tools.sh`): it reads the served `/openapi.json`, generates requests from it
//! (the documented examples, the coverage phase's boundary and mutation cases, then property-based
//! fuzzing) and sends them to a live gateway with a seeker, an operator and the admin key, so the
//! authenticated routes are reached too, and with the ids of real resources (a listed worker on
//! anvil, a paid contract, its dispute), so requests reach the handlers behind the 404s. A run
//! fails on:
//!
//! - `not_a_server_error`: any 5xx (except `/readyz`'s 503, its documented not-ready answer);
//! - `status_code_conformance`: a status the operation does not document;
//! - `content_type_conformance`, `response_schema_conformance`: an answer whose media type or
//!   body the document does not describe;
//! - `positive_data_acceptance`: a request the document allows (every parameter and body within
//!   its documented constraints) refused with 400 or 422, i.e. a constraint the extractors
//!   enforce that the document does not state. Where a 422 is a verdict no schema can express
//!   (an opaque cursor this server did not issue, a task type the worker does not offer, a chain
//!   that is not configured, a rejected contract's verdict), the operation allows 422 in
//!   [`SEMANTIC_422`]. The one header whose rule no schema keyword states
//!   (`X-Hiregate-Secrets`: base64 of a JSON object) is given a real value, as the ids are.
//!
//! Bounded: [`MAX_EXAMPLES`] per operation and phase, one worker (CPython 3.11's parser is not
//! thread-safe under Hypothesis' lambda introspection), a fixed seed so a failure replays, and a
//! hard [`RUN_LIMIT`]. About 2,400 requests in 20–25 s on a 2-core machine.

use std::{path::PathBuf, process::Stdio, time::Duration};

use serde_json::Value;

use serde_json::json;

use crate::{
    helpers::{ADMIN_KEY, TestDatabase},
    hire_env::{HireEnv, WorkerKind, hire_env},
};

/// Examples per operation and phase: enough for the coverage phase's boundaries and a fuzzing
/// pass, small enough for CI.
const MAX_EXAMPLES: u32 = 25;
/// Fixed, so a failure found in CI replays locally with the same requests.
const SEED: u64 = 402;
/// The whole run's bound; past it the test fails rather than hanging CI.
const RUN_LIMIT: Duration = Duration::from_secs(420);

/// Operations where 422 is a semantic verdict that valid-per-schema data can receive.
const SEMANTIC_422: [(&str, &str); 10] = [
    // verification_failed: the contract's own verdict, answered again to a repeated execute
    ("POST", "/v1/contracts/{id}/execute"),
    ("POST", "/execute"),
    ("GET", "/v1/contracts"), // invalid_cursor: a cursor this server did not issue
    ("GET", "/v1/admin/reconcile"), // network_not_configured, a reversed block range
    ("POST", "/v1/contracts"), // task_type_not_offered, input_schema_violation, …
    ("POST", "/v1/workers"),  // the endpoint's probe fails
    ("PATCH", "/v1/workers/{id}"), // a new endpoint's probe fails
    ("POST", "/v1/contracts/{id}/disputes"), // validation_failed: a claim without text
    ("POST", "/v1/disputes/{id}/response"), // validation_failed: a blank statement
    ("POST", "/v1/admin/keys"), // validation_failed: a principal of another role
];

fn schemathesis_binary() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .expect("workspace root")
        .join(".tools/schemathesis-venv/bin/schemathesis")
}

/// Schemathesis, or `None` after saying why the test skips; under `CI=true` a missing install
/// fails instead.
fn schemathesis_or_skip() -> Option<PathBuf> {
    let binary = schemathesis_binary();
    if binary.is_file() {
        return Some(binary);
    }
    let reason = format!(
        "{} not found: run scripts/install-tools.sh (needs python3 with venv)",
        binary.display()
    );
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI=true and Schemathesis is missing: {reason}"
    );
    eprintln!("skipped: conformance: {reason}");
    None
}

/// The resources whose ids the path parameters take.
struct Ids {
    worker: String,
    contract: String,
    dispute: String,
}

/// `schemathesis.toml` for the run: a key per security scheme, real ids for the path
/// parameters, and the per-operation exceptions this module's doc names.
fn config(seeker: &str, operator: &str, ids: &Ids) -> String {
    let mut toml = format!(
        "[auth.openapi.seeker_key]\nbearer = \"{seeker}\"\n\
         [auth.openapi.operator_key]\nbearer = \"{operator}\"\n\
         [auth.openapi.admin_key]\nbearer = \"{ADMIN_KEY}\"\n\n\
         [[operations]]\ninclude-name = \"GET /readyz\"\n\
         checks.not_a_server_error.expected-statuses = [\"2xx\", \"4xx\", \"503\"]\n"
    );
    // The one header whose rule (base64 of a JSON object) no schema keyword states gets a real
    // value, as the ids do. First: the first block naming a parameter gives its value.
    for (operation, id) in [
        ("POST /v1/contracts/{id}/execute", &ids.contract),
        ("POST /execute", &ids.contract),
    ] {
        toml.push_str(&format!(
            "\n[[operations]]\ninclude-name = \"{operation}\"\n\
             parameters = {{ id = \"{id}\", \"X-Contract-ID\" = \"{id}\", \
             \"X-Hiregate-Secrets\" = \"e30=\" }}\n"
        ));
    }
    for (pattern, id) in [
        ("^/v1/workers/\\\\{id\\\\}", &ids.worker),
        ("^/v1/contracts/\\\\{id\\\\}", &ids.contract),
        ("^/v1/callbacks/", &ids.contract),
        ("^/v1/disputes/\\\\{id\\\\}", &ids.dispute),
    ] {
        toml.push_str(&format!(
            "\n[[operations]]\ninclude-path-regex = \"{pattern}\"\n\
             parameters = {{ id = \"{id}\", contract_id = \"{id}\" }}\n"
        ));
    }
    for (method, path) in SEMANTIC_422 {
        toml.push_str(&format!(
            "\n[[operations]]\ninclude-name = \"{method} {path}\"\n\
             checks.positive_data_acceptance.expected-statuses = \
             [\"2xx\", \"401\", \"403\", \"404\", \"409\", \"422\", \"429\"]\n"
        ));
    }
    toml
}

#[tokio::test]
async fn the_server_answers_what_its_openapi_document_says() {
    let Some(schemathesis) = schemathesis_or_skip() else {
        return;
    };
    // Real resources for the path ids (a listed worker, a paid and accepted contract, its
    // dispute), so requests reach the handlers behind the 404s, not only the 404s.
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let app = &env.app;
    let contract_id = env
        .contract(
            HireEnv::input("conformance"),
            json!({"acceptance_window_s": 600}),
        )
        .await;
    let challenge = env.challenge(&contract_id).await;
    let paid = env
        .execute(&contract_id, Some(&env.pay(&challenge).await), None)
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    let opened = app
        .send_json(
            reqwest::Method::POST,
            &format!("/v1/contracts/{contract_id}/disputes"),
            Some(&env.seeker_key),
            &json!({"reason": "conformance", "claim": {"text": "not what I asked"}}),
        )
        .await;
    assert_eq!(opened.status(), 201);
    let opened: Value = opened.json().await.unwrap();
    let ids = Ids {
        worker: env.worker_id.clone(),
        contract: contract_id,
        dispute: opened["dispute_id"].as_str().unwrap().to_owned(),
    };
    let (seeker, operator) = (env.seeker_key.clone(), env.operator_key.clone());

    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("schemathesis.toml");
    std::fs::write(&config_path, config(&seeker, &operator, &ids)).unwrap();
    let run = tokio::process::Command::new(&schemathesis)
        .arg("--config-file")
        .arg(&config_path)
        .arg("--no-color")
        .args(["run", &format!("{}/openapi.json", app.address)])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance,positive_data_acceptance",
        ])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        .args(["--seed", &SEED.to_string()])
        .args(["--workers", "1", "--request-timeout", "10"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("Schemathesis ran longer than {RUN_LIMIT:?}"))
        .expect("Schemathesis runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the server and its OpenAPI document disagree ({}):\n{report}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    // Not vacuous: every operation was tested, but the document's own `GET /openapi.json`,
    // which Schemathesis leaves out when it loads the document from that URL.
    let served: Value = app.get("/openapi.json", None).await.json().await.unwrap();
    let operations: usize = served["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().unwrap().keys())
        .filter(|key| ["get", "post", "put", "patch", "delete"].contains(&key.as_str()))
        .count();
    assert!(
        report.contains(&format!("Tested: {}", operations - 1)),
        "expected {operations} operations tested:\n{report}"
    );
}
