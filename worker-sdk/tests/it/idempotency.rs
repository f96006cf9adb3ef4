use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use hiregate_worker_sdk::example_workers::faulty_builder;
use hiregate_worker_sdk::{TaskContext, TaskOutcome};

use crate::helpers::{TestWorker, fresh_contract, json_of};

#[tokio::test]
async fn sequential_duplicates_get_the_stored_result() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let input = json!({"text": "once"});
    let first = json_of(
        worker.execute(&contract, &input).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    for _ in 0..3 {
        let again = json_of(
            worker.execute(&contract, &input).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(again, first);
    }
    assert_eq!(worker.runs.get(), 1);
}

#[tokio::test]
async fn a_duplicate_while_running_gets_the_current_status() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let input = json!({"mode": "pending", "delay_ms": 500});
    let first = json_of(
        worker.execute(&contract, &input).send().await.unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    let duplicate = json_of(
        worker.execute(&contract, &input).send().await.unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    assert_eq!(duplicate["status"], "pending");
    assert_eq!(duplicate["task_id"], first["task_id"]);
    assert_eq!(duplicate["poll_url"], first["poll_url"]);

    worker
        .poll_until_done(first["poll_url"].as_str().unwrap(), &contract)
        .await;
    let after = json_of(
        worker.execute(&contract, &input).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(after["status"], "completed");
    assert_eq!(after["task_id"], first["task_id"]);
    assert_eq!(worker.runs.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_concurrent_duplicates_run_the_handler_once() {
    // Counts handler bodies actually entered, independently of the SDK's own counter.
    let entered = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&entered);
    let handler = move |_ctx: TaskContext, _input: Value| {
        let seen = Arc::clone(&seen);
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            TaskOutcome::json(json!({"summary": "s", "confidence": 0.9}))
        }
    };
    let worker = Arc::new(TestWorker::spawn(faulty_builder(), handler).await);
    let contract = fresh_contract();

    let mut calls = JoinSet::new();
    for _ in 0..10 {
        let worker = Arc::clone(&worker);
        let contract = contract.clone();
        calls.spawn(async move {
            let response = worker.execute(&contract, &json!({})).send().await.unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap())
        });
    }
    let mut task_ids = Vec::new();
    let mut completed = 0;
    while let Some(joined) = calls.join_next().await {
        let (status, report) = joined.unwrap();
        match report["status"].as_str() {
            Some("completed") => {
                assert_eq!(status, StatusCode::OK);
                completed += 1;
            }
            Some("pending") => assert_eq!(status, StatusCode::ACCEPTED),
            other => panic!("unexpected {other:?}: {report}"),
        }
        task_ids.push(report["task_id"].clone());
    }
    assert!(completed >= 1, "the first caller waits for the result");
    assert!(task_ids.iter().all(|t| *t == task_ids[0]), "{task_ids:?}");
    assert_eq!(entered.load(Ordering::SeqCst), 1);
    assert_eq!(worker.runs.get(), 1);
}

#[tokio::test]
async fn a_new_attempt_reruns_after_a_failure_and_the_same_attempt_is_deduped() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let input = json!({"mode": "flaky", "text": "second time lucky"});

    let first = json_of(
        worker
            .execute_attempt(&contract, 1, &input)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(first["status"], "failed");
    assert_eq!(first["error"]["code"], "TRANSIENT_FAILURE");

    let same_attempt = json_of(
        worker
            .execute_attempt(&contract, 1, &input)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(same_attempt, first);
    assert_eq!(worker.runs.get(), 1);

    let retry = json_of(
        worker
            .execute_attempt(&contract, 2, &input)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(retry["status"], "completed");
    assert_ne!(retry["task_id"], first["task_id"]);
    assert_eq!(worker.runs.get(), 2);

    // Completed now: neither the same nor a newer attempt runs it again.
    for attempt in [2, 3] {
        let again = json_of(
            worker
                .execute_attempt(&contract, attempt, &input)
                .send()
                .await
                .unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(again, retry);
    }
    assert_eq!(worker.runs.get(), 2);
}

#[tokio::test]
async fn a_new_attempt_never_reruns_a_completed_contract() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let first = json_of(
        worker
            .execute_attempt(&contract, 1, &json!({}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let second = json_of(
        worker
            .execute_attempt(&contract, 2, &json!({}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(second, first);
    assert_eq!(worker.runs.get(), 1);
}
