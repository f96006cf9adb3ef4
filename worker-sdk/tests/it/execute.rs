use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use serde_json::{Value, json};

use hiregate_worker_sdk::example_workers::{CONFIDENCE, faulty_builder};
use hiregate_worker_sdk::protocol::{Percent, Progress};
use hiregate_worker_sdk::{TaskContext, TaskOutcome};
use tokio::sync::Notify;

use crate::helpers::{TestWorker, expect_error, fresh_contract, json_of};

#[tokio::test]
async fn a_sync_task_answers_completed_with_its_output() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let report = json_of(
        worker
            .execute(&contract, &json!({"text": "A long text to summarize."}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "completed");
    assert_eq!(report["contract_id"], contract.as_str());
    assert_eq!(
        report["output"],
        json!({"type": "json", "content": {"summary": "A long text to summarize.", "confidence": CONFIDENCE}})
    );
    let task_id = report["task_id"].as_str().unwrap();
    assert!(task_id.starts_with("task_"));
    assert_eq!(worker.runs.get(), 1);

    // The stored report is readable at the task URL.
    let polled = json_of(
        worker
            .poll(worker.url(&format!("/tasks/{task_id}")).as_str(), &contract)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(polled, report);
}

#[tokio::test]
async fn the_task_type_header_reaches_the_handler() {
    let worker = TestWorker::faulty().await;
    let text = "word ".repeat(100);
    let echoed = json_of(
        worker
            .execute(&fresh_contract(), &json!({"text": text}))
            .header("x-task-type", "echo")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(echoed["output"]["content"]["summary"], text);
    let summarized = json_of(
        worker
            .execute(&fresh_contract(), &json!({"text": text}))
            .header("x-task-type", "summarize")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        summarized["output"]["content"]["summary"]
            .as_str()
            .unwrap()
            .len(),
        200
    );
}

#[tokio::test]
async fn an_output_the_protocol_forbids_becomes_a_failed_report() {
    use hiregate_worker_sdk::Output;
    let handler = |_ctx: TaskContext, _input: Value| async move {
        let inner = Output::Multiple {
            items: vec![Output::Text {
                content: "x".to_owned(),
            }],
        };
        TaskOutcome::output(Output::Multiple { items: vec![inner] })
    };
    let worker = TestWorker::spawn(faulty_builder(), handler).await;
    let report = json_of(
        worker
            .execute(&fresh_contract(), &json!({}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "failed");
    assert_eq!(report["error"]["code"], "WORKER_INVALID_OUTPUT");
}

#[tokio::test]
async fn a_failing_task_answers_failed_with_the_error() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let report = json_of(
        worker
            .execute(&contract, &json!({"mode": "fail"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "failed");
    assert_eq!(report["contract_id"], contract.as_str());
    assert_eq!(report["error"]["code"], "SIMULATED_FAILURE");
    assert!(report["error"]["message"].is_string());
}

#[tokio::test]
async fn the_invalid_mode_answers_schema_invalid_json() {
    let worker = TestWorker::faulty().await;
    let report = json_of(
        worker
            .execute(&fresh_contract(), &json!({"mode": "invalid"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "completed");
    assert_eq!(report["output"]["content"], json!({"summary": 42}));
}

#[tokio::test]
async fn pending_work_is_polled_to_completion() {
    let worker = TestWorker::faulty().await;
    let contract = fresh_contract();
    let pending = json_of(
        worker
            .execute(
                &contract,
                &json!({"mode": "pending", "delay_ms": 300, "text": "later"}),
            )
            .send()
            .await
            .unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    assert_eq!(pending["status"], "pending");
    assert_eq!(pending["contract_id"], contract.as_str());
    let task_id = pending["task_id"].as_str().unwrap();
    let poll_url = pending["poll_url"].as_str().unwrap();
    assert_eq!(poll_url, worker.url(&format!("/tasks/{task_id}")).as_str());
    assert!(
        pending["estimated_completion"]
            .as_str()
            .is_some_and(|t| chrono::DateTime::parse_from_rfc3339(t).is_ok()),
        "{pending}"
    );

    let done = worker.poll_until_done(poll_url, &contract).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["task_id"], task_id);
    assert_eq!(done["output"]["content"]["summary"], "later");
    assert_eq!(worker.runs.get(), 1);
}

#[tokio::test]
async fn a_slow_handler_turns_pending_after_the_sync_wait() {
    let worker = TestWorker::faulty_with(|b| b.sync_wait(Duration::from_millis(100))).await;
    let contract = fresh_contract();
    let pending = json_of(
        worker
            .execute(&contract, &json!({"mode": "slow", "delay_ms": 1000}))
            .send()
            .await
            .unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    assert_eq!(pending["status"], "pending");
    let done = worker
        .poll_until_done(pending["poll_url"].as_str().unwrap(), &contract)
        .await;
    assert_eq!(done["status"], "completed");
    assert_eq!(worker.runs.get(), 1);
}

#[tokio::test]
async fn reported_progress_shows_as_partial_while_running() {
    // The work reports progress, then waits until the test has seen it.
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    let handler = move |ctx: TaskContext, _input: Value| {
        let gate = Arc::clone(&gate);
        async move {
            TaskOutcome::pending(None, async move {
                ctx.report_progress(Progress::new(Percent::new(50.0).unwrap(), "halfway"));
                gate.notified().await;
                TaskOutcome::text("done")
            })
        }
    };
    let worker = TestWorker::spawn(faulty_builder(), handler).await;
    let contract = fresh_contract();
    let pending = json_of(
        worker.execute(&contract, &json!({})).send().await.unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    let poll_url = pending["poll_url"].as_str().unwrap();
    let partial = loop {
        let report = json_of(
            worker.poll(poll_url, &contract).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        if report["status"] != "pending" {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(partial["status"], "partial", "{partial}");
    assert_eq!(partial["poll_url"], poll_url);
    assert_eq!(
        partial["progress"],
        json!({"percent": 50.0, "message": "halfway"})
    );
    release.notify_one();
    let done = worker.poll_until_done(poll_url, &contract).await;
    assert_eq!(done["output"], json!({"type": "text", "content": "done"}));
}

#[tokio::test]
async fn bad_input_is_refused_before_the_handler() {
    let worker = TestWorker::faulty_with(|b| b.max_input_bytes(1024)).await;
    let contract = fresh_contract();
    let token = worker.issuer.token_for(&contract).unwrap();
    let not_json = worker
        .client
        .post(worker.url("/execute"))
        .bearer_auth(&token)
        .header("x-contract-id", contract.as_str())
        .body("{not json")
        .send()
        .await
        .unwrap();
    expect_error(not_json, StatusCode::BAD_REQUEST, "invalid_input").await;

    let too_large = worker
        .execute(&contract, &json!({"text": "x".repeat(4096)}))
        .send()
        .await
        .unwrap();
    expect_error(too_large, StatusCode::PAYLOAD_TOO_LARGE, "input_too_large").await;

    let unknown_mode = json_of(
        worker
            .execute(&contract, &json!({"mode": "explode"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(unknown_mode["error"]["code"], "INVALID_INPUT");
    assert_eq!(
        worker.runs.get(),
        1,
        "only the well-formed request reached the handler"
    );
}

#[tokio::test]
async fn a_panicking_handler_becomes_a_failed_report() {
    let handler = |_ctx: TaskContext, input: Value| async move {
        assert!(
            input.get("boom").is_none(),
            "handler bug triggered on purpose"
        );
        TaskOutcome::text("fine")
    };
    let worker = TestWorker::spawn(faulty_builder(), handler).await;
    let report = json_of(
        worker
            .execute(&fresh_contract(), &json!({"boom": true}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "failed");
    assert_eq!(report["error"]["code"], "WORKER_PANICKED");
}

#[tokio::test]
async fn beyond_max_concurrent_tasks_the_worker_answers_429() {
    let worker = TestWorker::faulty_with(|b| {
        b.max_concurrent_tasks(1)
            .sync_wait(Duration::from_millis(50))
    })
    .await;
    let busy = json_of(
        worker
            .execute(
                &fresh_contract(),
                &json!({"mode": "slow", "delay_ms": 5000}),
            )
            .send()
            .await
            .unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    let refused = worker
        .execute(&fresh_contract(), &json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.headers()[RETRY_AFTER], "1");
    expect_error(refused, StatusCode::TOO_MANY_REQUESTS, "too_many_tasks").await;
    assert_eq!(worker.runs.get(), 1);
    let _ = busy;
}
