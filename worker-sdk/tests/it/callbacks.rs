use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use chrono::Utc;
use reqwest::StatusCode as ReqwestStatus;
use serde_json::{Value, json};

use hiregate_worker_sdk::example_workers::faulty_builder;
use hiregate_worker_sdk::webhook::{HEADER_ID, WebhookError};
use hiregate_worker_sdk::{
    CallbackConfig, CompletionCallback, TaskContext, TaskOutcome, TaskReport, WebhookSecret,
};

use crate::helpers::{Served, TestWorker, fresh_contract, json_of};

struct Received {
    path_contract_id: String,
    headers: HeaderMap,
    body: Bytes,
    verified: Result<(), WebhookError>,
}

#[derive(Clone)]
struct ReceiverState {
    secret: WebhookSecret,
    received: Arc<Mutex<Vec<Received>>>,
    failures_left: Arc<AtomicUsize>,
}

/// A stand-in for the gateway's `POST /v1/callbacks/{contract_id}`: verifies the
/// signature with the shared secret and records every delivery. It can be told to answer
/// 503 a number of times first — a fault a real gateway cannot produce on demand.
struct CallbackReceiver {
    served: Served,
    state: ReceiverState,
}

impl CallbackReceiver {
    async fn start(secret: WebhookSecret, failures_first: usize) -> Self {
        let state = ReceiverState {
            secret,
            received: Arc::default(),
            failures_left: Arc::new(AtomicUsize::new(failures_first)),
        };
        let router = Router::new()
            .route("/v1/callbacks/{contract_id}", post(receive))
            .with_state(state.clone());
        Self {
            served: Served::start(router).await,
            state,
        }
    }

    fn deliveries(&self) -> usize {
        self.state.received.lock().unwrap().len()
    }

    async fn wait_for_deliveries(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.deliveries() < count {
            assert!(
                Instant::now() < deadline,
                "only {} callbacks after 10 s",
                self.deliveries()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    Path(contract_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let verified = state.secret.verify(&headers, &body, Utc::now()).map(|_| ());
    let ok = verified.is_ok();
    state.received.lock().unwrap().push(Received {
        path_contract_id: contract_id,
        headers,
        body,
        verified,
    });
    let fail = state
        .failures_left
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    match (fail, ok) {
        (true, _) => StatusCode::SERVICE_UNAVAILABLE,
        (false, true) => StatusCode::NO_CONTENT,
        (false, false) => StatusCode::UNAUTHORIZED,
    }
}

async fn worker_calling_back(receiver: &CallbackReceiver, secret: WebhookSecret) -> TestWorker {
    let gateway = receiver.served.server.base_url();
    TestWorker::faulty_with(move |b| {
        b.completion_callback(
            CallbackConfig::new(gateway, secret).first_retry_delay(Duration::from_millis(50)),
        )
    })
    .await
}

#[tokio::test]
async fn finished_pending_work_is_called_back_with_a_valid_signature() {
    let secret = WebhookSecret::generate();
    let receiver = CallbackReceiver::start(secret.clone(), 0).await;
    let worker = worker_calling_back(&receiver, secret).await;

    // A task answered synchronously owes no callback.
    json_of(
        worker
            .execute(&fresh_contract(), &json!({}))
            .send()
            .await
            .unwrap(),
        ReqwestStatus::OK,
    )
    .await;

    let contract = fresh_contract();
    let pending = json_of(
        worker
            .execute(
                &contract,
                &json!({"mode": "pending", "delay_ms": 200, "text": "async"}),
            )
            .send()
            .await
            .unwrap(),
        ReqwestStatus::ACCEPTED,
    )
    .await;
    receiver.wait_for_deliveries(1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        receiver.deliveries(),
        1,
        "exactly one callback: the pending task's"
    );

    let received = receiver.state.received.lock().unwrap();
    let delivery = &received[0];
    assert_eq!(delivery.verified, Ok(()));
    assert_eq!(delivery.path_contract_id, contract.as_str());
    assert_eq!(delivery.headers["x-contract-id"], contract.as_str());
    assert_eq!(delivery.headers["content-type"], "application/json");
    let callback: CompletionCallback = serde_json::from_slice(&delivery.body).unwrap();
    let TaskReport::Completed(report) = callback.report else {
        panic!("expected completed, got {callback:?}")
    };
    assert_eq!(report.contract_id, contract);
    assert_eq!(
        report.task_id.as_ref().map(|t| t.as_str()),
        pending["task_id"].as_str()
    );
    let body: Value = serde_json::from_slice(&delivery.body).unwrap();
    assert_eq!(body["event"], "task_completed");
    assert_eq!(body["output"]["content"]["summary"], "async");

    // Someone holding another secret cannot have produced it.
    assert!(
        WebhookSecret::generate()
            .verify(&delivery.headers, &delivery.body, Utc::now())
            .is_err()
    );
}

#[tokio::test]
async fn a_failed_callback_is_retried_with_the_same_webhook_id() {
    let secret = WebhookSecret::generate();
    let receiver = CallbackReceiver::start(secret.clone(), 2).await;
    let worker = worker_calling_back(&receiver, secret).await;
    let contract = fresh_contract();
    json_of(
        worker
            .execute(&contract, &json!({"mode": "pending", "delay_ms": 50}))
            .send()
            .await
            .unwrap(),
        ReqwestStatus::ACCEPTED,
    )
    .await;
    receiver.wait_for_deliveries(3).await;
    let received = receiver.state.received.lock().unwrap();
    let ids: Vec<_> = received
        .iter()
        .map(|r| r.headers[HEADER_ID].clone())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert!(received.iter().all(|r| r.verified.is_ok()));
}

#[tokio::test]
async fn pending_work_that_fails_is_called_back_as_task_failed() {
    let secret = WebhookSecret::generate();
    let receiver = CallbackReceiver::start(secret.clone(), 0).await;
    let gateway = receiver.served.server.base_url();
    let handler = |_ctx: TaskContext, _input: Value| async move {
        TaskOutcome::pending(None, async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            TaskOutcome::failed("MODEL_DOWN", "the model is unavailable")
        })
    };
    let worker = TestWorker::spawn(
        faulty_builder().completion_callback(CallbackConfig::new(gateway, secret)),
        handler,
    )
    .await;
    json_of(
        worker
            .execute(&fresh_contract(), &json!({}))
            .send()
            .await
            .unwrap(),
        ReqwestStatus::ACCEPTED,
    )
    .await;
    receiver.wait_for_deliveries(1).await;
    let received = receiver.state.received.lock().unwrap();
    let body: Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(body["event"], "task_failed");
    assert_eq!(body["status"], "failed");
    assert_eq!(body["error"]["code"], "MODEL_DOWN");
}
