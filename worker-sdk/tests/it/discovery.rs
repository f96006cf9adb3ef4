use reqwest::StatusCode;
use serde_json::json;

use hiregate_worker_sdk::example_workers::{SUMMARIZE, echo_builder, echo_handler};
use hiregate_worker_sdk::protocol::PriceInfo;

use crate::helpers::{TestWorker, expect_error, json_of};

#[tokio::test]
async fn health_and_capabilities_have_the_documented_shape() {
    let worker = TestWorker::spawn(
        echo_builder().max_concurrent_tasks(4).price(
            SUMMARIZE,
            PriceInfo {
                amount: "0.05".to_owned(),
                currency: "USDC".to_owned(),
                network: Some("eip155:31337".to_owned()),
            },
        ),
        echo_handler(),
    )
    .await;

    let health = json_of(
        worker
            .client
            .get(worker.url("/health"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        health,
        json!({
            "status": "ok",
            "protocol": "hire",
            "name": "echo-worker",
            "version": env!("CARGO_PKG_VERSION"),
            "tasks_in_flight": 0
        })
    );

    let capabilities = json_of(
        worker
            .client
            .get(worker.url("/capabilities"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        capabilities,
        json!({
            "protocol": "hire",
            "name": "echo-worker",
            "version": env!("CARGO_PKG_VERSION"),
            "task_types": ["summarize", "echo"],
            "pricing": {"summarize": {"amount": "0.05", "currency": "USDC", "network": "eip155:31337"}},
            "max_concurrent_tasks": 4,
            "completion_callbacks": false,
            "cancel": true,
            "verify": false
        })
    );
}

#[tokio::test]
async fn unknown_routes_answer_a_json_404() {
    let worker = TestWorker::faulty().await;
    let response = worker.client.get(worker.url("/nope")).send().await.unwrap();
    expect_error(response, StatusCode::NOT_FOUND, "not_found").await;
}
