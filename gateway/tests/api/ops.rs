//! Liveness, readiness, metrics, middleware and error shape.

use reqwest::{Method, header};
use serde_json::{Value, json};

use crate::helpers::{TestWorker, spawn_app, spawn_app_with, spawn_postgres_app, worker_body};

#[tokio::test]
async fn healthz_answers_and_readyz_needs_a_facilitator() {
    // The harness configures no [chains]: the database is fine, but with nothing to verify or
    // settle payments on the gateway is not ready (the paid-hire tests cover the ready case).
    let app = spawn_app().await;
    let health = app.get("/healthz", None).await;
    assert_eq!(health.status(), 200);
    let ready = app.get("/readyz", None).await;
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["database"]["status"], "ok");
    assert_eq!(body["checks"]["facilitator"]["status"], "failed");
    assert!(
        body["checks"]["facilitator"]["reason"]
            .as_str()
            .unwrap()
            .contains("[chains]"),
        "{body}"
    );
}

#[tokio::test]
async fn readyz_reports_an_unreachable_database() {
    let app = spawn_app().await;
    // Closing the pool makes every later query fail, as a lost database would.
    app.store.close().await;
    let ready = app.get("/readyz", None).await;
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["database"]["status"], "failed");
}

#[tokio::test]
async fn readyz_on_postgres() {
    let Some(app) = spawn_postgres_app().await else {
        return;
    };
    let ready = app.get("/readyz", None).await;
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["checks"]["database"]["status"], "ok", "{body}");
}

#[tokio::test]
async fn metrics_count_requests_by_route() {
    let app = spawn_app().await;
    app.get("/healthz", None).await;
    app.get("/v1/workers", None).await;
    let metrics = app.get("/metrics", None).await;
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains(
            r#"hiregate_http_requests_total{method="GET",route="/healthz",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"route="/v1/workers""#), "{text}");
}

#[tokio::test]
async fn request_id_is_generated_or_propagated() {
    let app = spawn_app().await;
    let generated = app.get("/healthz", None).await;
    let id = generated.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let propagated = app
        .client
        .get(format!("{}/healthz", app.address))
        .header("x-request-id", "req-123")
        .send()
        .await
        .unwrap();
    assert_eq!(propagated.headers()["x-request-id"], "req-123");
}

#[tokio::test]
async fn cors_exposes_and_allows_the_x402_headers() {
    let app = spawn_app().await;
    let preflight = app
        .client
        .request(Method::OPTIONS, format!("{}/v1/workers", app.address))
        .header(header::ORIGIN, "https://seeker.example")
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "payment-signature,content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = preflight.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(allowed.contains("payment-signature"), "{allowed}");

    let simple = app
        .client
        .get(format!("{}/healthz", app.address))
        .header(header::ORIGIN, "https://seeker.example")
        .send()
        .await
        .unwrap();
    let exposed = simple.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("payment-required"), "{exposed}");
    assert!(exposed.contains("payment-response"), "{exposed}");

    // Without `Origin` (no browser), no CORS headers but CORS's own `Vary`, so that a cache
    // keeps the two answers apart.
    let plain = app
        .client
        .get(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert!(
        !plain
            .headers()
            .contains_key(header::ACCESS_CONTROL_EXPOSE_HEADERS),
        "{:?}",
        plain.headers()
    );
    let vary = |response: &reqwest::Response| -> Vec<String> {
        response
            .headers()
            .get_all(header::VARY)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(vary(&plain), vary(&simple));
    assert!(vary(&plain)[0].contains("origin"), "{:?}", vary(&plain));
}

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("a JSON error body");
    let error = body["error"].clone();
    assert!(error["message"].is_string(), "{body}");
    assert!(error["details"].is_object(), "{body}");
    (status, error)
}

#[tokio::test]
async fn malformed_json_is_400_with_a_stable_code() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;
    let response = app
        .client
        .post(format!("{}/v1/workers", app.address))
        .bearer_auth(&key)
        .header(header::CONTENT_TYPE, "application/json")
        .body("{\"endpoint\": ")
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 400);
    assert_eq!(error["code"], "malformed_json");
}

#[tokio::test]
async fn wrong_shape_is_422_and_missing_content_type_415() {
    let app = spawn_app().await;
    let (key, _) = app.create_key("operator").await;
    let response = app
        .send_json(
            Method::POST,
            "/v1/workers",
            Some(&key),
            &json!({ "endpoint": 5 }),
        )
        .await;
    let (status, error) = error_of(response).await;
    assert_eq!(status, 422);
    assert_eq!(error["code"], "invalid_body");

    let response = app
        .client
        .post(format!("{}/v1/workers", app.address))
        .bearer_auth(&key)
        .body("{}")
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(status, 415);
    assert_eq!(error["code"], "unsupported_media_type");
}

#[tokio::test]
async fn oversized_body_is_413() {
    let app = spawn_app_with("[http]\nbody_limit_bytes = 2048").await;
    let (key, _) = app.create_key("operator").await;
    let big = json!({ "endpoint": "x".repeat(4096) });
    let response = app
        .send_json(Method::POST, "/v1/workers", Some(&key), &big)
        .await;
    let (status, error) = error_of(response).await;
    assert_eq!(status, 413);
    assert_eq!(error["code"], "payload_too_large");

    // The execute routes read their body with their own extractor (an empty body skips the
    // limit's buffering); a body past the limit is still refused the same way.
    let (seeker, _) = app.create_key("seeker").await;
    let contract = hiregate_contracts::id::ContractId::generate();
    let response = app
        .send_json(
            Method::POST,
            &format!("/v1/contracts/{contract}/execute"),
            Some(&seeker),
            &big,
        )
        .await;
    let (status, error) = error_of(response).await;
    assert_eq!(status, 413);
    assert_eq!(error["code"], "payload_too_large");
}

#[tokio::test]
async fn unknown_route_and_method_are_json_errors() {
    let app = spawn_app().await;
    let (status, error) = error_of(app.get("/v1/nope", None).await).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (404, Some("route_not_found"))
    );
    let response = app
        .client
        .put(format!("{}/healthz", app.address))
        .send()
        .await
        .unwrap();
    let (status, error) = error_of(response).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
}

#[tokio::test]
async fn slow_requests_time_out_with_a_json_503() {
    let app =
        spawn_app_with("[http]\nrequest_timeout_s = 1\n[health]\nprobe_timeout_ms = 10000").await;
    let (key, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["summarize"]).await;
    // The registration probe waits on /health longer than the request may take.
    worker.set_health_delay(std::time::Duration::from_secs(3));
    let started = std::time::Instant::now();
    let response = app
        .register_worker(&key, &worker_body(&worker.endpoint, &[("summarize", "1")]))
        .await;
    assert!(started.elapsed() < std::time::Duration::from_millis(2500));
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    let (status, error) = error_of(response).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (503, Some("request_timeout"))
    );
}
