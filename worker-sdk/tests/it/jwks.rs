use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use serde_json::json;

use hiregate_worker_sdk::example_workers::{
    FaultyBehaviour, FaultyMode, faulty_builder, faulty_handler,
};
use hiregate_worker_sdk::testing::TestTokenIssuer;
use hiregate_worker_sdk::{GatewayKeys, Jwks};

use crate::helpers::{JwksServer, Served, expect_error, fresh_contract, json_of};

async fn worker_with_keys(keys: GatewayKeys) -> Served {
    let worker = faulty_builder()
        .gateway_keys(keys)
        .build(faulty_handler(FaultyBehaviour::new(FaultyMode::Ok)))
        .unwrap();
    Served::start(worker.router()).await
}

async fn execute_with(worker: &Served, issuer: &TestTokenIssuer) -> reqwest::Response {
    let contract = fresh_contract();
    reqwest::Client::new()
        .post(worker.url("/execute"))
        .bearer_auth(issuer.token_for(&contract).unwrap())
        .header("x-contract-id", contract.as_str())
        .json(&json!({}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn fetched_keys_are_cached_and_refreshed_on_an_unknown_kid() {
    let old_key = TestTokenIssuer::new("gw-2024").unwrap();
    let new_key = TestTokenIssuer::new("gw-2025").unwrap();
    let gateway = JwksServer::start(old_key.jwks()).await;
    let worker = worker_with_keys(
        GatewayKeys::remote(gateway.jwks_url()).min_refresh_interval(Duration::ZERO),
    )
    .await;

    for _ in 0..3 {
        json_of(execute_with(&worker, &old_key).await, StatusCode::OK).await;
    }
    assert_eq!(
        gateway.fetches.load(Ordering::SeqCst),
        1,
        "cached after the first fetch"
    );

    // The gateway rotates: the new kid is unknown to the cache, so the worker refetches.
    *gateway.jwks.write().await = TestTokenIssuer::jwks_of(&[&old_key, &new_key]).unwrap();
    json_of(execute_with(&worker, &new_key).await, StatusCode::OK).await;
    assert_eq!(gateway.fetches.load(Ordering::SeqCst), 2);

    // A kid the gateway never published is still refused after the refetch.
    let forged = TestTokenIssuer::new("gw-forged").unwrap();
    expect_error(
        execute_with(&worker, &forged).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    )
    .await;
}

#[tokio::test]
async fn unknown_kids_do_not_refetch_more_often_than_the_minimum_interval() {
    let key = TestTokenIssuer::new("gw-1").unwrap();
    let gateway = JwksServer::start(key.jwks()).await;
    let worker = worker_with_keys(
        GatewayKeys::remote(gateway.jwks_url()).min_refresh_interval(Duration::from_secs(60)),
    )
    .await;
    json_of(execute_with(&worker, &key).await, StatusCode::OK).await;
    let forged = TestTokenIssuer::new("gw-forged").unwrap();
    for _ in 0..5 {
        expect_error(
            execute_with(&worker, &forged).await,
            StatusCode::UNAUTHORIZED,
            "invalid_token",
        )
        .await;
    }
    assert_eq!(gateway.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn unreachable_keys_answer_503_not_401() {
    let key = TestTokenIssuer::new("gw-1").unwrap();
    // Bind a port, then free it, so nothing listens there.
    let gone = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let worker = worker_with_keys(GatewayKeys::remote(
        format!("http://{gone}/.well-known/jwks.json")
            .parse()
            .unwrap(),
    ))
    .await;
    let response = execute_with(&worker, &key).await;
    assert_eq!(response.headers()[RETRY_AFTER], "5");
    expect_error(
        response,
        StatusCode::SERVICE_UNAVAILABLE,
        "gateway_keys_unavailable",
    )
    .await;
}

#[tokio::test]
async fn an_empty_fixed_key_set_refuses_everything() {
    let empty: Jwks = serde_json::from_value(json!({"keys": []})).unwrap();
    let worker = worker_with_keys(GatewayKeys::fixed(empty)).await;
    let issuer = TestTokenIssuer::new("gw-1").unwrap();
    expect_error(
        execute_with(&worker, &issuer).await,
        StatusCode::UNAUTHORIZED,
        "invalid_token",
    )
    .await;
}
