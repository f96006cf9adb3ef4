//! The SSRF filter of the outbound client, against real local servers.

use std::time::Duration;

use axum::{Router, http::StatusCode, response::Redirect, routing::get};
use hiregate_engine::{
    outbound::{OutboundClient, OutboundError},
    settings::OutboundSettings,
};
use serde_json::Value;
use url::Url;

use crate::helpers::{TestWorker, spawn_app_with, worker_body};

fn client(allow_private_targets: bool) -> OutboundClient {
    OutboundClient::new(&OutboundSettings {
        connect_timeout_ms: 2000,
        request_timeout_ms: 5000,
        max_response_bytes: 1024 * 1024,
        allow_private_targets,
        require_https: false,
        stream_max_bytes: 1024 * 1024,
        stream_max_duration_ms: 5000,
    })
    .unwrap()
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("127.0.0.1:{port}")
}

#[tokio::test]
async fn private_targets_are_refused_unless_allowed() {
    let worker = TestWorker::start(&["summarize"]).await;
    let port = Url::parse(&worker.endpoint).unwrap().port().unwrap();
    let strict = client(false);
    for target in [
        format!("http://127.0.0.1:{port}/health"),
        format!("http://localhost:{port}/health"),
        format!("http://[::1]:{port}/health"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://10.0.0.1/".to_owned(),
    ] {
        let result = strict
            .get(&Url::parse(&target).unwrap(), Duration::from_secs(2))
            .await;
        assert!(
            matches!(result, Err(OutboundError::BlockedTarget { .. })),
            "{target}: {result:?}"
        );
    }
    assert_eq!(worker.health_calls(), 0, "no request reached the worker");

    let file = strict.request(
        reqwest::Method::GET,
        &Url::parse("file:///etc/passwd").unwrap(),
    );
    assert!(matches!(file, Err(OutboundError::UnsupportedScheme { .. })));

    let relaxed = client(true);
    let response = relaxed
        .get(
            &Url::parse(&format!("http://localhost:{port}/health")).unwrap(),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(worker.health_calls(), 1);
}

#[tokio::test]
async fn redirects_are_not_followed_and_bodies_are_capped() {
    let target = TestWorker::start(&["summarize"]).await;
    let location = format!("{}/health", target.endpoint);
    let address = serve(
        Router::new()
            .route(
                "/hop",
                get(move || async move { Redirect::temporary(&location) }),
            )
            .route(
                "/big",
                get(|| async { (StatusCode::OK, "x".repeat(64 * 1024)) }),
            ),
    )
    .await;
    let relaxed = client(true);
    let hop = relaxed
        .get(
            &Url::parse(&format!("http://{address}/hop")).unwrap(),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    assert_eq!(hop.status(), 307);
    assert_eq!(target.health_calls(), 0, "the redirect was not followed");

    let big = relaxed
        .get(
            &Url::parse(&format!("http://{address}/big")).unwrap(),
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    let read = relaxed.read_body(big, 4096).await;
    assert!(
        matches!(read, Err(OutboundError::ResponseTooLarge { limit: 4096 })),
        "{read:?}"
    );
}

#[tokio::test]
async fn registration_refuses_private_endpoints_by_default() {
    let app = spawn_app_with("[outbound]\nallow_private_targets = false").await;
    let (key, _) = app.create_key("operator").await;
    let worker = TestWorker::start(&["summarize"]).await;
    let port = Url::parse(&worker.endpoint).unwrap().port().unwrap();
    for endpoint in [worker.endpoint.clone(), format!("http://localhost:{port}")] {
        let response = app
            .register_worker(&key, &worker_body(&endpoint, &[("summarize", "1")]))
            .await;
        assert_eq!(response.status(), 422);
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            body["error"]["code"], "endpoint_not_allowed",
            "{endpoint}: {body}"
        );
    }
    assert_eq!(worker.health_calls(), 0);
}
