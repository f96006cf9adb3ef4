use chrono::Utc;
use hiregate_contracts::canonical::Digest;
use hiregate_contracts::id::SeekerId;
use hiregate_contracts::token::{ContractTokenClaims, ISSUER};
use reqwest::StatusCode;
use reqwest::header::WWW_AUTHENTICATE;
use serde_json::json;

use hiregate_worker_sdk::testing::TestTokenIssuer;
use hiregate_worker_sdk::{ContractId, WorkerId};

use crate::helpers::{TestWorker, expect_error, fresh_contract, json_of};

#[tokio::test]
async fn execute_without_a_token_is_401_and_runs_nothing() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let response = worker
        .client
        .post(worker.url("/execute"))
        .header("x-contract-id", contract.as_str())
        .json(&json!({"text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[WWW_AUTHENTICATE], "Bearer");
    expect_error(response, StatusCode::UNAUTHORIZED, "missing_token").await;
    assert_eq!(worker.runs.get(), 0);
}

#[tokio::test]
async fn invalid_tokens_are_401() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let stranger = TestTokenIssuer::new("gw-key-1").unwrap(); // same kid, other key
    let now = Utc::now().timestamp();
    let expired = claims(&contract, worker.issuer.worker_id(), now - 7200, now - 3600);
    let not_yet_valid = claims(&contract, worker.issuer.worker_id(), now + 3600, now + 7200);
    let mut not_the_gateway = claims(&contract, worker.issuer.worker_id(), now, now + 600);
    not_the_gateway.iss = "someone-else".to_owned();
    let bad_tokens = [
        "not-a-jwt".to_owned(),
        stranger.token_for(&contract).unwrap(),
        worker.issuer.token_with_claims(&expired).unwrap(),
        worker.issuer.token_with_claims(&not_yet_valid).unwrap(),
        worker.issuer.token_with_claims(&not_the_gateway).unwrap(),
        // Claims missing (no expiry, no worker…).
        worker
            .issuer
            .token_with_claims(&json!({"contract_id": contract.as_str()}))
            .unwrap(),
    ];
    for token in bad_tokens {
        let response = worker
            .client
            .post(worker.url("/execute"))
            .bearer_auth(&token)
            .header("x-contract-id", contract.as_str())
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        expect_error(response, StatusCode::UNAUTHORIZED, "invalid_token").await;
    }
    assert_eq!(worker.runs.get(), 0);
}

fn claims(contract: &ContractId, worker: &WorkerId, iat: i64, exp: i64) -> ContractTokenClaims {
    ContractTokenClaims {
        iss: ISSUER.to_owned(),
        sub: contract.clone(),
        iat,
        exp,
        contract_id: contract.clone(),
        terms_hash: Digest::of_bytes(b"terms"),
        seeker: SeekerId::generate(),
        worker: worker.clone(),
    }
}

#[tokio::test]
async fn a_token_for_another_worker_is_401() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let response = worker
        .client
        .post(worker.url("/execute"))
        .bearer_auth(
            worker
                .issuer
                .token_for_worker(&contract, &WorkerId::generate())
                .unwrap(),
        )
        .header("x-contract-id", contract.as_str())
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(response, StatusCode::UNAUTHORIZED, "wrong_worker").await;
    assert_eq!(worker.runs.get(), 0);
}

#[tokio::test]
async fn a_token_for_another_contract_is_401() {
    let worker = TestWorker::faulty().await;
    let (mine, other) = (fresh_contract(), fresh_contract());
    let response = worker
        .client
        .post(worker.url("/execute"))
        .bearer_auth(worker.issuer.token_for(&other).unwrap())
        .header("x-contract-id", mine.as_str())
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(response, StatusCode::UNAUTHORIZED, "contract_mismatch").await;
    assert_eq!(worker.runs.get(), 0);
}

#[tokio::test]
async fn header_mistakes_are_400() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let token = worker.issuer.token_for(&contract).unwrap();

    let no_contract_header = worker
        .client
        .post(worker.url("/execute"))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(
        no_contract_header,
        StatusCode::BAD_REQUEST,
        "missing_contract_id",
    )
    .await;

    let other_key = worker
        .client
        .post(worker.url("/execute"))
        .bearer_auth(&token)
        .header("x-contract-id", contract.as_str())
        .header("idempotency-key", fresh_contract().as_str())
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(
        other_key,
        StatusCode::BAD_REQUEST,
        "idempotency_key_mismatch",
    )
    .await;

    let bad_attempt = worker
        .execute(&contract, &json!({}))
        .header("x-attempt", "0")
        .send()
        .await
        .unwrap();
    expect_error(bad_attempt, StatusCode::BAD_REQUEST, "invalid_attempt").await;

    let unknown_task_type = worker
        .execute(&contract, &json!({}))
        .header("x-task-type", "translate")
        .send()
        .await
        .unwrap();
    expect_error(
        unknown_task_type,
        StatusCode::BAD_REQUEST,
        "unsupported_task_type",
    )
    .await;

    let not_a_contract_id = worker
        .client
        .post(worker.url("/execute"))
        .bearer_auth(&token)
        .header("x-contract-id", "ctr_not-a-ulid")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    expect_error(
        not_a_contract_id,
        StatusCode::BAD_REQUEST,
        "invalid_contract_id",
    )
    .await;
    assert_eq!(worker.runs.get(), 0);
}

#[tokio::test]
async fn polling_needs_the_token_of_the_tasks_contract() {
    let worker = TestWorker::faulty().await;
    let (owner, other) = (fresh_contract(), fresh_contract());
    let report = json_of(
        worker
            .execute(&owner, &json!({"text": "x"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let task_url = worker.url(&format!("/tasks/{}", report["task_id"].as_str().unwrap()));

    let anonymous = worker
        .client
        .get(task_url.clone())
        .header("x-contract-id", owner.as_str())
        .send()
        .await
        .unwrap();
    expect_error(anonymous, StatusCode::UNAUTHORIZED, "missing_token").await;

    // Another contract's valid token does not reveal this task.
    let foreign = worker.poll(task_url.as_str(), &other).send().await.unwrap();
    expect_error(foreign, StatusCode::NOT_FOUND, "task_not_found").await;

    let own = worker.poll(task_url.as_str(), &owner).send().await.unwrap();
    assert_eq!(json_of(own, StatusCode::OK).await, report);
}
