//! What operators see of a paid hire: one access log line per request (and no secret in any
//! log line), the Prometheus families of transitions, verifications, worker latency and
//! facilitator calls, and the example Grafana dashboard asking only for metrics that exist.

use std::time::Duration;

use hiregate_gateway::telemetry;
use serde_json::{Value, json};

use crate::{
    helpers::{TestDatabase, eventually},
    hire_env::{HireEnv, WorkerKind, hire_env},
};

/// Sample names (`name` of `name{labels} value` or `name value`) of a `/metrics` scrape.
fn sample_names(scrape: &str) -> Vec<&str> {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The value of the sample `name{labels}` whose labels include every one of `labels`.
fn sample(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_text, value) = rest.strip_prefix('{')?.split_once("} ")?;
        labels
            .iter()
            .all(|(key, value)| label_text.contains(&format!("{key}=\"{value}\"")))
            .then(|| value.split_whitespace().next()?.parse().ok())?
    })
}

/// Every `hiregate_…` metric name in the dashboard's queries.
fn dashboard_metric_names(dashboard: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for target in panels.iter().flat_map(|p| p["targets"].as_array().unwrap()) {
        let expr = target["expr"].as_str().expect("expr");
        let mut rest = expr;
        while let Some(start) = rest.find("hiregate_") {
            let name: String = rest[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[start + name.len()..];
            names.push(name);
        }
    }
    names.sort();
    names.dedup();
    names
}

async fn paid_hire(env: &HireEnv) -> (String, String) {
    let contract_id = env.contract(HireEnv::input("observed"), json!({})).await;
    let challenge = env.challenge(&contract_id).await;
    let payment = env.pay(&challenge).await;
    let paid = env.execute(&contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    (contract_id, payment)
}

#[tokio::test]
async fn a_paid_hire_is_logged_once_per_request_and_never_with_secrets() {
    // Debug, not info: nothing at any level may carry a secret.
    let (_guard, logs) = telemetry::capture("debug");
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let (contract_id, payment) = paid_hire(&env).await;

    let request_id = "obs-request-0001";
    let response = env
        .app
        .client
        .get(format!("{}/v1/contracts/{contract_id}", env.app.address))
        .bearer_auth(&env.seeker_key)
        .header("x-request-id", request_id)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    let access: Vec<Value> = logs
        .lines()
        .into_iter()
        .filter(|line| line["message"] == "request served" && line["request_id"] == request_id)
        .collect();
    assert_eq!(access.len(), 1, "{access:#?}\n{}", logs.text());
    let line = &access[0];
    assert_eq!(line["level"], "INFO");
    assert_eq!(line["target"], "hiregate_gateway::access");
    assert_eq!(line["method"], "GET");
    assert_eq!(line["route"], "/v1/contracts/{id}");
    assert_eq!(line["status"], 200);
    assert!(line["latency_ms"].is_u64(), "{line}");
    // Every request of the hire got its line too (propose, 402, paid execute, …).
    let executes = logs
        .lines()
        .into_iter()
        .filter(|l| l["message"] == "request served" && l["route"] == "/v1/contracts/{id}/execute")
        .count();
    assert_eq!(executes, 2, "the 402 and the paid execute");

    let text = logs.text();
    assert!(!text.is_empty());
    let decoded: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &payment).unwrap(),
    )
    .unwrap();
    let signature = decoded["payload"]["signature"].as_str().expect("signature");
    for secret in [
        env.seeker_key.as_str(),
        env.operator_key.as_str(),
        payment.as_str(),
        signature,
    ] {
        assert!(!text.contains(secret), "a secret was logged: {secret}");
    }
}

#[tokio::test]
async fn metrics_after_a_paid_hire_and_the_dashboard_uses_only_exported_names() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    paid_hire(&env).await;
    // Transitions are counted from the event bus, a moment after the response.
    let scrape = eventually(
        Duration::from_secs(10),
        "the settled transition in /metrics",
        || async {
            let text = env.app.get("/metrics", None).await.text().await.unwrap();
            sample(
                &text,
                "hiregate_contract_transitions_total",
                &[("from", "settling"), ("to", "settled")],
            )
            .is_some()
            .then_some(text)
        },
    )
    .await;

    for (from, to) in [
        ("offered", "paid"),
        ("paid", "executing"),
        ("executing", "delivered"),
        ("delivered", "verifying"),
        ("verifying", "accepted"),
        ("accepted", "settling"),
        ("settling", "settled"),
    ] {
        assert_eq!(
            sample(
                &scrape,
                "hiregate_contract_transitions_total",
                &[("from", from), ("to", to)]
            ),
            Some(1.0),
            "{from} → {to} in\n{scrape}"
        );
    }
    // One verdict counted; the family's other series (present from the start) are at 0.
    let counted: Vec<&str> = scrape
        .lines()
        .filter(|l| l.starts_with("hiregate_verifications_total{") && !l.ends_with(" 0"))
        .collect();
    assert_eq!(counted.len(), 1, "{counted:?}");
    let verification_line = counted[0];
    assert!(
        verification_line.contains("policy=\"vp."),
        "{verification_line}"
    );
    assert!(
        verification_line.contains("outcome=\"passed\""),
        "{verification_line}"
    );
    assert!(
        verification_line.contains("reason_code=\""),
        "{verification_line}"
    );
    assert!(verification_line.ends_with(" 1"), "{verification_line}");
    assert_eq!(
        sample(
            &scrape,
            "hiregate_worker_request_duration_seconds_count",
            &[("worker_id", &env.worker_id)]
        ),
        Some(1.0),
        "{scrape}"
    );
    for operation in ["verify", "settle"] {
        assert_eq!(
            sample(
                &scrape,
                "hiregate_facilitator_calls_total",
                &[("operation", operation), ("outcome", "ok")]
            ),
            Some(1.0),
            "{operation} in\n{scrape}"
        );
    }

    let dashboard: Value = serde_json::from_str(include_str!(
        "../../../deploy/grafana/hiregate-dashboard.json"
    ))
    .expect("the dashboard is JSON");
    let exported = sample_names(&scrape);
    let used = dashboard_metric_names(&dashboard);
    assert!(used.len() >= 8, "{used:?}");
    for name in &used {
        assert!(
            exported.contains(&name.as_str()),
            "the dashboard queries {name}, which /metrics does not export:\n{scrape}"
        );
    }
}

/// A token under `[chains.*.tokens]` of the fresh gateway below.
const CONFIGURED_TOKEN: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";

/// A fresh gateway exports every outcome series whose labels it knows at start, at 0, so
/// `rate(hiregate_settlements_total{outcome="settlement_failed"}[5m]) > 0` and its siblings need
/// no `or vector(0)`: settlement outcomes, facilitator verdicts and errors, verification
/// outcomes per built-in policy, probe and reconciliation results, mismatch kinds, and the escrow
/// outcomes, amounts and fees of every configured token.
#[tokio::test]
async fn a_fresh_gateway_exports_every_known_outcome_series_at_zero() {
    // Nothing is asked of the chain or the facilitator before the first payment, so neither
    // needs to answer for this test.
    let app = crate::helpers::spawn_app_with(&format!(
        r#"
        [facilitator]
        mode = "http"
        url = "http://127.0.0.1:9/"
        [chains.base]
        network = "eip155:8453"
        rpc_url = "http://127.0.0.1:9/"
        tokens = [{{ address = "{}", name = "USD Coin", version = "2", decimals = 6, symbol = "USDC" }}]
        "#,
        CONFIGURED_TOKEN.to_lowercase()
    ))
    .await;
    let scrape = app.get("/metrics", None).await.text().await.unwrap();
    let zero = |name: &str, labels: &[(&str, &str)]| {
        assert_eq!(
            sample(&scrape, name, labels),
            Some(0.0),
            "{name}{labels:?} at 0 in\n{scrape}"
        );
    };
    for outcome in ["settled", "settlement_failed", "settlement_unknown"] {
        zero("hiregate_settlements_total", &[("outcome", outcome)]);
    }
    for operation in ["verify", "settle"] {
        for outcome in ["ok", "refused", "unknown"] {
            zero(
                "hiregate_facilitator_calls_total",
                &[("operation", operation), ("outcome", outcome)],
            );
        }
        for kind in ["refused", "unknown"] {
            zero(
                "hiregate_facilitator_errors_total",
                &[("operation", operation), ("kind", kind)],
            );
        }
    }
    for policy in [
        "vp.schema_only.v1",
        "vp.schema_thresholds.v1",
        "vp.crosscheck.v1",
    ] {
        for outcome in ["passed", "failed", "inconclusive"] {
            zero(
                "hiregate_verifications_total",
                &[
                    ("policy", policy),
                    ("outcome", outcome),
                    ("reason_code", "none"),
                ],
            );
        }
    }
    // (This family has spelled its values in Rust case since it was introduced.)
    for outcome in ["Passed", "Failed"] {
        zero("hiregate_worker_probes_total", &[("outcome", outcome)]);
    }
    for result in ["ok", "mismatch", "error"] {
        zero("hiregate_reconciliations_total", &[("result", result)]);
    }
    zero(
        "hiregate_reconciliation_mismatches",
        &[("kind", "settled_without_transfer")],
    );
    // Per asset: the configured token, spelled EIP-55 as the outcomes will spell it.
    let token = [("network", "eip155:8453"), ("asset", CONFIGURED_TOKEN)];
    zero("hiregate_settled_amount_atomic_total", &token);
    zero("hiregate_escrow_fees_atomic_total", &token);
    for outcome in ["authorized", "captured", "voided", "refunded", "reclaimed"] {
        let labels = [("outcome", outcome), token[0], token[1]];
        zero("hiregate_escrow_outcomes_total", &labels);
        zero("hiregate_escrow_amount_atomic_total", &labels);
    }
}
