//! Outputs the SDK hosts: a handler's event stream served as SSE with numbered events and
//! `Last-Event-ID` resume, hosted files with their checksum, and a final `partial`.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use serde_json::{Value, json};

use hiregate_worker_sdk::example_workers::{outputs_builder, outputs_handler};
use hiregate_worker_sdk::protocol::Digest;
use hiregate_worker_sdk::{StreamEvent, TaskContext, TaskOutcome, WorkerBuilder};

use crate::helpers::{TestWorker, fresh_contract, json_of};

/// The events of an SSE body, each as its fields (`id`, `event`, `data`; data lines joined
/// with `\n`, as SSE clients do).
fn sse_events(body: &str) -> Vec<BTreeMap<String, String>> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut fields: BTreeMap<String, String> = BTreeMap::new();
            for (field, value) in block.lines().filter_map(|line| line.split_once(':')) {
                let value = value.strip_prefix(' ').unwrap_or(value);
                fields
                    .entry(field.to_owned())
                    .and_modify(|known| {
                        known.push('\n');
                        known.push_str(value);
                    })
                    .or_insert_with(|| value.to_owned());
            }
            fields
        })
        .collect()
}

#[tokio::test]
async fn a_stream_is_served_with_numbered_events_and_resumes_after_last_event_id() {
    let handler = |_ctx: TaskContext, _input: Value| async move {
        TaskOutcome::stream(futures::stream::iter([
            StreamEvent::data("three "),
            StreamEvent::named("note", "small\r\n"),
            StreamEvent::data("risks"),
        ]))
    };
    let worker =
        TestWorker::spawn(WorkerBuilder::new("streamer", "1").task_type("t"), handler).await;
    let contract = fresh_contract();
    let report = json_of(
        worker.execute(&contract, &json!({})).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "completed");
    assert_eq!(report["output"]["type"], "stream");
    assert_eq!(report["output"]["format"], "sse");
    let url = report["output"]["url"].as_str().unwrap();
    assert!(url.contains("/streams/task_"), "{url}");

    let read = |last_event_id: Option<&str>| {
        let mut request = worker.poll(url, &contract);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        async move {
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert!(
                response.headers()["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/event-stream")
            );
            sse_events(&response.text().await.unwrap())
        }
    };
    let all = read(None).await;
    let ids: Vec<&str> = all.iter().map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, ["1", "2", "3", "4"]);
    assert_eq!(all[0]["data"], "three ");
    assert_eq!(all[1]["event"], "note");
    assert_eq!(
        all[1]["data"], "small\n",
        "a carriage return is sent as a line feed"
    );
    assert_eq!(all[3]["event"], "done", "the SDK closes the stream");
    let resumed = read(Some("2")).await;
    let ids: Vec<&str> = resumed.iter().map(|e| e["id"].as_str()).collect();
    assert_eq!(ids, ["3", "4"], "only the events after Last-Event-ID");
    assert_eq!(resumed[0]["data"], "risks");

    // Another contract's token does not open this stream.
    let other = fresh_contract();
    let refused = worker.poll(url, &other).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_hosted_file_is_served_with_the_checksum_its_output_names() {
    let worker = TestWorker::spawn(outputs_builder(), outputs_handler()).await;
    let contract = fresh_contract();
    let report = json_of(
        worker
            .execute(&contract, &json!({"text": "three small risks"}))
            .header("x-task-type", "output_file")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let output = &report["output"];
    assert_eq!(output["type"], "file", "{report}");
    assert_eq!(output["mime"], "application/json");
    let response = reqwest::get(output["url"].as_str().unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let bytes = response.bytes().await.unwrap();
    assert_eq!(
        output["checksum"],
        Digest::of_bytes(&bytes).to_string(),
        "the checksum is the file's"
    );
    assert_eq!(output["size"], bytes.len());
    let content: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(content["summary"], "three small risks");
}

#[tokio::test]
async fn a_run_ending_partial_answers_200_without_a_poll_url() {
    let worker = TestWorker::spawn(outputs_builder(), outputs_handler()).await;
    let contract = fresh_contract();
    let report = json_of(
        worker
            .execute(
                &contract,
                &json!({"text": "x", "items": 3, "items_done": 1}),
            )
            .header("x-task-type", "output_partial")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["status"], "partial", "{report}");
    assert!(report.get("poll_url").is_none(), "{report}");
    assert_eq!(report["output"]["type"], "multiple");
    assert_eq!(report["output"]["items"].as_array().unwrap().len(), 1);
    assert_eq!(report["progress"]["message"], "1 of 3 items");
}
