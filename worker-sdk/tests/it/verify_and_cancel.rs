//! `POST /verify` (the seed's VerifyRequest/VerifyResponse) and `POST /tasks/{id}/cancel`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hiregate_contracts::canonical::Digest;
use hiregate_contracts::policy::{PolicyId, policy_hash};
use hiregate_contracts::verify::{ResultHashInput, verifier_result_hash};
use hiregate_worker_sdk::handler::TASK_CANCELLED;
use hiregate_worker_sdk::verify::{Verdict, VerifyRequest};
use hiregate_worker_sdk::{TaskContext, TaskOutcome, WorkerBuilder};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{TestWorker, expect_error, fresh_contract, json_of};

/// The request of `seeds/wattswarm-verify-endpoint.txt`'s example, with its elided hashes
/// made real (a `policy_hash` of its own binding, a full-length `output_ref` digest).
fn seed_verify_request() -> Value {
    json!({
      "candidate": {
        "candidate_id": "cand-7a3f",
        "execution_id": "exec-4f2a9c",
        "output_ref": {
          "uri": "https://runtime.local/task-abc-001/exec-4f2a9c",
          "digest": Digest::of_bytes(b"candidate output").to_string(),
          "size_bytes": 512,
          "mime": "application/json",
          "created_at": 1_718_000_000_000_u64,
          "producer": "my-agent/gpt-4o"
        },
        "output": {
          "answer": "The proposal carries three material risks.",
          "confidence": 0.91
        },
        "evidence_inline": [
          { "mime": "text/plain", "content": "trace:attempt-001" }
        ],
        "evidence_refs": []
      },
      "output_schema": {
        "type": "object",
        "required": ["answer", "confidence"],
        "properties": {
          "answer":     { "type": "string" },
          "confidence": { "type": "number" }
        }
      },
      "policy": {
        "policy_id": "vp.schema_only.v1",
        "policy_version": "1",
        "policy_hash": policy_hash(PolicyId::SchemaOnlyV1, &json!({})).unwrap().to_string(),
        "policy_params": {}
      }
    })
}

async fn verifier_worker(verdict: Verdict, calls: Arc<AtomicUsize>) -> TestWorker {
    let builder = WorkerBuilder::new("judge", "1.0.0")
        .task_type("summarize")
        .verifier(
            "swarm-runtime",
            "swarm-model-v1",
            move |request: VerifyRequest| {
                calls.fetch_add(1, Ordering::SeqCst);
                let mut verdict = verdict.clone();
                // The handler sees the seed's candidate as sent.
                if request.candidate.output["confidence"] != json!(0.91) {
                    verdict = Verdict::fail(1.0, vec![999]);
                }
                async move { verdict }
            },
        );
    TestWorker::spawn(builder, |_ctx: TaskContext, _input: Value| async {
        TaskOutcome::json(json!({}))
    })
    .await
}

#[tokio::test]
async fn the_seed_verify_request_gets_the_seed_verify_response() {
    let calls = Arc::new(AtomicUsize::new(0));
    let worker = verifier_worker(Verdict::pass(1.0), Arc::clone(&calls)).await;
    let request = seed_verify_request();
    let response = json_of(
        worker
            .client
            .post(worker.url("/verify"))
            .json(&request)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Exactly the seed's seven fields, with the seed's example values where it gives them.
    let mut keys: Vec<&str> = response
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "model_id",
            "passed",
            "provider_family",
            "reason_codes",
            "score",
            "verification_status",
            "verifier_result_hash"
        ]
    );
    assert_eq!(response["passed"], true);
    assert_eq!(response["score"], 1.0);
    assert_eq!(response["reason_codes"], json!([]));
    assert_eq!(response["verification_status"], "passed");
    assert_eq!(response["provider_family"], "swarm-runtime");
    assert_eq!(response["model_id"], "swarm-model-v1");
    // The hash binds the candidate, the verdict, the verifier and the policy it was sent.
    let policy_hash: Digest = request["policy"]["policy_hash"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let expected = verifier_result_hash(&ResultHashInput {
        candidate_id: "cand-7a3f",
        execution_id: "exec-4f2a9c",
        passed: true,
        score: 1.0,
        reason_codes: &[],
        provider_family: "swarm-runtime",
        model_id: "swarm-model-v1",
        policy_hash: &policy_hash,
    })
    .unwrap();
    assert_eq!(response["verifier_result_hash"], expected.to_string());

    // The capabilities declare the verifier and the cancel route.
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
    assert_eq!(capabilities["verify"], true);
    assert_eq!(capabilities["cancel"], true);
    assert_eq!(capabilities["provider_family"], "swarm-runtime");
}

#[tokio::test]
async fn failing_and_inconclusive_verdicts_keep_the_seed_semantics() {
    for (verdict, passed, status, codes) in [
        (Verdict::fail(0.8, vec![101]), false, "failed", json!([101])),
        (
            Verdict::inconclusive(vec![200]),
            false,
            "inconclusive",
            json!([200]),
        ),
        // A score outside [0, 1] is clamped, never sent as is.
        (Verdict::pass(7.0), true, "passed", json!([])),
    ] {
        let worker = verifier_worker(verdict, Arc::new(AtomicUsize::new(0))).await;
        let response = json_of(
            worker
                .client
                .post(worker.url("/verify"))
                .json(&seed_verify_request())
                .send()
                .await
                .unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(response["passed"], passed, "{response}");
        assert_eq!(response["verification_status"], status, "{response}");
        assert_eq!(response["reason_codes"], codes, "{response}");
        let score = response["score"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&score), "{response}");
    }
}

#[tokio::test]
async fn verify_requests_off_the_seed_are_refused_before_the_handler() {
    let calls = Arc::new(AtomicUsize::new(0));
    let worker = verifier_worker(Verdict::pass(1.0), Arc::clone(&calls)).await;
    let mut wrong_hash = seed_verify_request();
    wrong_hash["policy"]["policy_params"] = json!({"anything": 1});
    expect_error(
        worker
            .client
            .post(worker.url("/verify"))
            .json(&wrong_hash)
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_policy",
    )
    .await;
    let mut no_candidate = seed_verify_request();
    no_candidate.as_object_mut().unwrap().remove("candidate");
    for body in [no_candidate, json!("not an object")] {
        expect_error(
            worker
                .client
                .post(worker.url("/verify"))
                .json(&body)
                .send()
                .await
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_verify_request",
        )
        .await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // A worker without a verifier has no /verify.
    let plain = TestWorker::faulty().await;
    expect_error(
        plain
            .client
            .post(plain.url("/verify"))
            .json(&seed_verify_request())
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
}

/// A worker whose handler waits for its cancellation (or 30 s); counts the cancels it saw.
async fn patient_worker(saw_cancel: Arc<AtomicUsize>) -> TestWorker {
    TestWorker::spawn(
        WorkerBuilder::new("patient", "1.0.0")
            .task_type("summarize")
            .wait_for_handler_indefinitely(),
        move |ctx: TaskContext, _input: Value| {
            let saw_cancel = Arc::clone(&saw_cancel);
            async move {
                tokio::select! {
                    () = ctx.cancellation().cancelled() => {
                        saw_cancel.fetch_add(1, Ordering::SeqCst);
                        TaskOutcome::failed("STOPPED", "stopped")
                    }
                    () = tokio::time::sleep(Duration::from_secs(30)) => TaskOutcome::json(json!({})),
                }
            }
        },
    )
    .await
}

impl TestWorker {
    fn cancel(
        &self,
        id: &str,
        contract_id: &hiregate_worker_sdk::ContractId,
    ) -> reqwest::RequestBuilder {
        self.client
            .post(self.url(&format!("/tasks/{id}/cancel")))
            .bearer_auth(self.issuer.token_for(contract_id).unwrap())
            .header("x-contract-id", contract_id.as_str())
    }
}

async fn wait_for_run(worker: &TestWorker) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while worker.runs.get() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn cancel_stops_the_running_handler_and_reports_failed_cancelled_idempotently() {
    let saw_cancel = Arc::new(AtomicUsize::new(0));
    let worker = Arc::new(patient_worker(Arc::clone(&saw_cancel)).await);
    let contract = fresh_contract();
    let executing = {
        let worker = Arc::clone(&worker);
        let contract = contract.clone();
        tokio::spawn(async move {
            json_of(
                worker.execute(&contract, &json!({})).send().await.unwrap(),
                StatusCode::OK,
            )
            .await
        })
    };
    wait_for_run(&worker).await;
    // By contract id (the gateway knows no task id for a sync run).
    let cancelled = json_of(
        worker
            .cancel(contract.as_str(), &contract)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(cancelled["status"], "failed", "{cancelled}");
    assert_eq!(cancelled["error"]["code"], TASK_CANCELLED);
    assert_eq!(
        saw_cancel.load(Ordering::SeqCst),
        1,
        "the handler saw its token"
    );
    // The waiting execute gets the same end.
    let executed = executing.await.unwrap();
    assert_eq!(executed, cancelled);
    // Again, by task id: the same report, nothing runs again.
    let task_id = cancelled["task_id"].as_str().unwrap();
    let again = json_of(
        worker.cancel(task_id, &contract).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(again, cancelled);
    assert_eq!(worker.runs.get(), 1);
    // Another contract's token cannot see or cancel it.
    expect_error(
        worker
            .cancel(task_id, &fresh_contract())
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "task_not_found",
    )
    .await;
    // Without a token: 401.
    let anonymous = worker
        .client
        .post(worker.url(&format!("/tasks/{task_id}/cancel")))
        .header("x-contract-id", contract.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_handler_ignoring_its_token_is_aborted_and_a_finished_task_cannot_be_cancelled() {
    let worker = TestWorker::spawn(
        WorkerBuilder::new("stubborn", "1.0.0")
            .task_type("summarize")
            .sync_wait(Duration::from_millis(50)),
        |_ctx: TaskContext, _input: Value| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            TaskOutcome::json(json!({"late": true}))
        },
    )
    .await;
    let contract = fresh_contract();
    let pending = json_of(
        worker.execute(&contract, &json!({})).send().await.unwrap(),
        StatusCode::ACCEPTED,
    )
    .await;
    let task_id = pending["task_id"].as_str().unwrap();
    let started = tokio::time::Instant::now();
    let cancelled = json_of(
        worker.cancel(task_id, &contract).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(cancelled["error"]["code"], TASK_CANCELLED, "{cancelled}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "aborted after the grace"
    );
    let polled = worker
        .poll_until_done(pending["poll_url"].as_str().unwrap(), &contract)
        .await;
    assert_eq!(polled["error"]["code"], TASK_CANCELLED);

    // A completed task is not cancelled after the fact.
    let done = TestWorker::faulty().await;
    let contract = fresh_contract();
    let report = json_of(
        done.execute(&contract, &json!({"text": "x"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let task_id = report["task_id"].as_str().unwrap();
    expect_error(
        done.cancel(task_id, &contract).send().await.unwrap(),
        StatusCode::CONFLICT,
        "task_already_finished",
    )
    .await;
}
