//! A2A for real (A2A v1.0 JSON-RPC with the a2a-x402 extension) on a real anvil chain: the
//! official Python `a2a-sdk` client resolves a listing's agent card (checking its signature with
//! the SDK's verifier and the gateway's JWKS), sends `SendMessage`, gets the
//! task in `TASK_STATE_INPUT_REQUIRED` with the x402 requirements, has the official Python `x402`
//! client sign them, pays in the task's next message and gets the verified deliverable as an
//! artifact with the settlement receipt (`tools/a2a/hire.py`); a rejected deliverable fails the
//! task unpaid; eight identical payment messages make one execution and one transfer. The JSON-RPC
//! edge answers bad input in JSON-RPC's shape, an unpaid message stores nothing, and a payment
//! for one listing's offer pays no other.
//!
//! The Python client runs with `.tools/sdk-venv/bin/python` (which has `x402`, `eth_account`,
//! `httpx`, `pydantic`) and `.tools/a2a-venv`'s site-packages on `PYTHONPATH` (`a2a-sdk`,
//! `protobuf`, `json-rpc`, `culsans`), both installed by `scripts/install-tools.sh`.

use std::collections::BTreeSet;

use alloy::primitives::U256;
use hiregate_payments::{
    AuthCaptureSignOptions, PaymentRequired,
    devnet::{PythonLibs, python_libs_or_skip, python_script_with},
    sign_auth_capture_payment,
};
use serde_json::{Value, json};

use crate::{
    escrow_env::escrow_env,
    helpers::TestDatabase,
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env, now},
    x402_resource::{assert_reconciled, row_counts},
};

/// What `tools/a2a/hire.py` reports after hiring `env`'s listing with `input` (see there).
async fn hire_over_a2a(env: &HireEnv, input: &Value, copies: usize) -> Option<Value> {
    hire_over_a2a_with(env, input, json!({"copies": copies})).await
}

/// [`hire_over_a2a`] with more of `hire.py`'s arguments (`streaming`, `cardPath`, `metadata`).
async fn hire_over_a2a_with(env: &HireEnv, input: &Value, more: Value) -> Option<Value> {
    if !python_libs_or_skip("a2a: the official a2a-sdk client", PythonLibs::A2a) {
        return None;
    }
    let mut args = json!({
        "base": env.app.address,
        "cardPath": format!("/v1/workers/{}/agent-card.json", env.worker_id),
        "privateKey": env.wallet.to_bytes().to_string(),
        "input": input,
        "allowedAssets": [{"network": env.devnet.network(), "asset": env.devnet.token().to_checksum(None)}],
    });
    if let (Some(args), Value::Object(more)) = (args.as_object_mut(), more) {
        args.extend(more);
    }
    Some(
        python_script_with(PythonLibs::A2a, "hire.py", &args)
            .await
            .expect("hire.py runs"),
    )
}

fn metadata(task: &Value) -> &Value {
    &task["status"]["message"]["metadata"]
}

/// The official clients, unchanged: card → SendMessage → input-required → signed payment in the
/// task's next message → the verified deliverable, settled on chain; GetTask reads it back.
#[tokio::test]
async fn the_official_a2a_sdk_client_hires_and_pays_over_a2a() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let text = "hired by the official a2a-sdk client";
    let before = env.balances().await;
    let Some(report) = hire_over_a2a(&env, &HireEnv::input(text), 1).await else {
        return;
    };
    assert_eq!(
        report["interface"]["protocolBinding"], "JSONRPC",
        "{report}"
    );
    assert_eq!(
        report["interface"]["url"],
        format!("{}/a2a/workers/{}", env.app.address, env.worker_id)
    );
    let offered = &report["offered"];
    assert_eq!(offered["status"]["state"], "TASK_STATE_INPUT_REQUIRED");
    let task_id = offered["id"].as_str().unwrap().to_owned();
    let required = &metadata(offered)["x402.payment.required"];
    assert_eq!(required["accepts"][0]["scheme"], "exact");
    assert_eq!(required["accepts"][0]["amount"], PRICE.to_string());

    let paid = &report["paid"][0];
    assert_eq!(paid["id"], task_id.as_str(), "{paid}");
    assert_eq!(paid["status"]["state"], "TASK_STATE_COMPLETED", "{paid}");
    assert_eq!(metadata(paid)["x402.payment.status"], "payment-completed");
    let receipt = &metadata(paid)["x402.payment.receipts"][0];
    assert_eq!(receipt["success"], true, "{paid}");
    let transaction = receipt["transaction"].as_str().unwrap();
    assert!(transaction.starts_with("0x"), "{receipt}");
    let deliverable = &paid["artifacts"][0]["parts"][0]["data"]["output"]["content"];
    assert_eq!(deliverable["summary"], text, "{paid}");

    // On chain: the payer paid once, the worker was paid, by the transaction in the receipt.
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_eq!(env.state(&task_id).await, "settled");
    let payment = env
        .app
        .store
        .payment_of_contract(&task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(payment.settle_tx.as_deref(), Some(transaction));
    assert_eq!(payment.payer, env.wallet.address());
    assert_eq!(env.worker.executions(), 1);

    // GetTask with the capability token of the paid answer: the same task and deliverable.
    let got = &report["got"];
    assert_eq!(got["id"], task_id.as_str(), "{report}");
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(
        got["artifacts"][0]["parts"][0]["data"]["output"]["content"]["summary"],
        text
    );
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn eight_identical_a2a_payments_make_one_execution_one_transfer() {
    duplicates(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn eight_identical_a2a_payments_make_one_execution_one_transfer_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    duplicates(database).await;
}

async fn duplicates(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 4, "").await;
    let before = env.balances().await;
    let Some(report) = hire_over_a2a(&env, &HireEnv::input("eight at once over A2A"), 8).await
    else {
        return;
    };
    let tasks = report["paid"].as_array().unwrap();
    assert_eq!(tasks.len(), 8);
    let mut ids = BTreeSet::new();
    let mut transactions = BTreeSet::new();
    for task in tasks {
        ids.insert(task["id"].as_str().unwrap().to_owned());
        let state = task["status"]["state"].as_str().unwrap();
        assert!(
            state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_WORKING",
            "{task}"
        );
        if state == "TASK_STATE_COMPLETED" {
            transactions.insert(
                metadata(task)["x402.payment.receipts"][0]["transaction"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        }
    }
    assert_eq!(ids.len(), 1, "one task");
    assert_eq!(transactions.len(), 1, "one settlement transaction");
    assert_eq!(env.worker.executions(), 1, "one execution");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE), "one transfer");
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_reconciled(&env).await;
}

#[tokio::test]
async fn a_rejected_deliverable_fails_the_a2a_task_unpaid() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let before = env.balances().await;
    let Some(report) = hire_over_a2a(&env, &json!({"text": "x", "mode": "invalid"}), 1).await
    else {
        return;
    };
    let task = &report["paid"][0];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{task}");
    assert_eq!(metadata(task)["x402.payment.status"], "payment-failed");
    assert_eq!(metadata(task)["x402.payment.error"], "VERIFICATION_FAILED");
    assert_eq!(
        metadata(task)["x402.payment.receipts"][0]["success"],
        false,
        "{task}"
    );
    assert!(
        task.get("artifacts").is_none(),
        "the work is withheld: {task}"
    );
    let task_id = task["id"].as_str().unwrap();
    assert_eq!(env.state(task_id).await, "rejected");
    assert_eq!(env.balances().await, before, "nothing moved");
    // GetTask says the same, and still shows no work.
    let got = &report["got"];
    assert_eq!(got["status"]["state"], "TASK_STATE_FAILED", "{report}");
    assert!(got.get("artifacts").is_none());
    assert_reconciled(&env).await;
}

/// One JSON-RPC call of `path`, with an optional bearer credential: (HTTP status, body).
async fn rpc_raw(env: &HireEnv, path: &str, body: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request = env
        .app
        .client
        .post(format!("{}{path}", env.app.address))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .timeout(std::time::Duration::from_secs(60));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn rpc(env: &HireEnv, path: &str, method: &str, params: Value) -> Value {
    let (status, body) = rpc_raw(
        env,
        path,
        &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string(),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["jsonrpc"], "2.0");
    body
}

fn send_params(input: &Value, metadata: Value) -> Value {
    let mut params = json!({"message": {
        "messageId": "m1",
        "role": "ROLE_USER",
        "parts": [{"data": input}],
    }});
    params["message"]["metadata"] = metadata;
    params
}

fn error_code(body: &Value) -> i64 {
    body["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {body}"))
}

#[tokio::test]
async fn the_json_rpc_edge_answers_bad_input_in_json_rpc_shape_and_unpaid_messages_store_nothing() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let path = format!("/a2a/workers/{}", env.worker_id);
    for (body, code) in [
        ("{not json", -32700),
        ("[1, 2]", -32600),
        (
            r#"{"jsonrpc": "1.0", "id": 1, "method": "SendMessage"}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": {}, "method": "SendMessage"}"#,
            -32600,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "message/send"}"#,
            -32601,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": 3}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {}}"#,
            -32004,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {}}"#,
            -32602,
        ),
        (
            r#"{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "ctr_nope"}}"#,
            -32001,
        ),
    ] {
        let (status, answer) = rpc_raw(&env, &path, body, None).await;
        assert_eq!(status, 200, "{body}: {answer}");
        assert_eq!(error_code(&answer), code, "{body}: {answer}");
        assert_eq!(
            answer["error"]["data"][0]["@type"],
            "type.googleapis.com/google.rpc.ErrorInfo"
        );
    }
    // A body past the gateway's limit is a JSON-RPC error too, not a 413 or a 500.
    let huge = format!(
        r#"{{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {{"pad": "{}"}}}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let (status, answer) = rpc_raw(&env, &path, &huge, None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(error_code(&answer), -32600, "{answer}");
    // A client of another protocol version is told so.
    let response = env
        .app
        .client
        .post(format!("{}{path}", env.app.address))
        .header("A2A-Version", "0.3")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(error_code(&answer), -32009, "{answer}");
    // Activating the a2a-x402 extension is answered in kind (and is not required).
    let extension = "https://github.com/google-a2a/a2a-x402/v0.1";
    let response = env
        .app
        .client
        .post(format!("{}{path}", env.app.address))
        .header("A2A-Extensions", format!("urn:other, {extension}"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                      "params": send_params(&HireEnv::input("x"), json!({}))}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["a2a-extensions"], extension);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["result"]["task"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    // No input, an unknown listing, a garbage listing id: invalid params, never a 404 or 500.
    let no_input = rpc(
        &env,
        &path,
        "SendMessage",
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
    )
    .await;
    assert_eq!(error_code(&no_input), -32602, "{no_input}");
    for other in [
        "/a2a/workers/wk_01J00000000000000000000000",
        "/a2a/workers/nope",
    ] {
        let answer = rpc(
            &env,
            other,
            "SendMessage",
            send_params(&HireEnv::input("x"), json!({})),
        )
        .await;
        assert_eq!(error_code(&answer), -32602, "{answer}");
        assert_eq!(answer["error"]["data"][0]["metadata"]["code"], "not_found");
    }
    // The marketplace interface needs the listing named.
    let unnamed = rpc(
        &env,
        "/a2a",
        "SendMessage",
        send_params(&HireEnv::input("x"), json!({})),
    )
    .await;
    assert_eq!(error_code(&unnamed), -32602, "{unnamed}");
    let named = rpc(
        &env,
        "/a2a",
        "SendMessage",
        send_params(
            &HireEnv::input("x"),
            json!({"hiregate.workerId": env.worker_id}),
        ),
    )
    .await;
    assert_eq!(
        named["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{named}"
    );
    // An input the listing's schema refuses: invalid params with the violations.
    let mut listing = env.another_listing();
    listing["input_schema"] = json!({
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string"}},
    });
    let strict = env.register(&listing).await;
    let wrong = rpc(
        &env,
        &format!("/a2a/workers/{strict}"),
        "SendMessage",
        send_params(&json!({"text": 7}), json!({})),
    )
    .await;
    assert_eq!(error_code(&wrong), -32602, "{wrong}");
    assert_eq!(
        wrong["error"]["data"][0]["metadata"]["code"],
        "input_schema_violation"
    );

    // Unpaid messages store nothing: every table holds what it held.
    let before = row_counts(&env.app.database_url).await;
    let env_ref = &env;
    let path_ref = &path;
    let answers = futures::future::join_all((0..50).map(|i| async move {
        rpc(
            env_ref,
            path_ref,
            "SendMessage",
            send_params(&HireEnv::input(&format!("flood {i}")), json!({})),
        )
        .await
    }))
    .await;
    for answer in &answers {
        let task = &answer["result"]["task"];
        assert_eq!(
            task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{answer}"
        );
        let required = &metadata(task)["x402.payment.required"];
        // The task is the offer's contract, and the offer carries the input back.
        assert_eq!(
            required["accepts"][0]["extra"]["hiregate"]["terms"]["contract_id"],
            task["id"]
        );
        assert!(required["accepts"][0]["extra"]["hiregate"]["input"]["text"].is_string());
    }
    assert_eq!(row_counts(&env.app.database_url).await, before);
    assert_eq!(env.worker.executions(), 0);
    // An unpaid task is nobody's yet: GetTask finds nothing, with or without a key.
    let task_id = answers[0]["result"]["task"]["id"].as_str().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}});
    for bearer in [None, Some(env.seeker_key.as_str()), Some("hg_cap_AAAA")] {
        let (_, answer) = rpc_raw(&env, &path, &body.to_string(), bearer).await;
        assert_eq!(error_code(&answer), -32001, "{answer}");
    }
}

/// The offer of an unpaid message, as the x402 `PaymentRequired` its task carries.
async fn offer(env: &HireEnv, path: &str, input: &Value) -> (String, PaymentRequired) {
    let answer = rpc(env, path, "SendMessage", send_params(input, json!({}))).await;
    let task = &answer["result"]["task"];
    let required = metadata(task)["x402.payment.required"].clone();
    (
        task["id"].as_str().unwrap().to_owned(),
        serde_json::from_value(required).unwrap(),
    )
}

fn payment_params(task_id: &str, payment: &Value) -> Value {
    json!({"message": {
        "messageId": "m2",
        "role": "ROLE_USER",
        "taskId": task_id,
        "parts": [{"text": "Here is the payment authorization."}],
        "metadata": {"x402.payment.status": "payment-submitted", "x402.payment.payload": payment},
    }})
}

#[tokio::test]
async fn a_payment_for_one_listings_a2a_offer_pays_no_other() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let other = env.register(&env.another_listing()).await;
    let path = format!("/a2a/workers/{}", env.worker_id);
    let input = HireEnv::input("for the first listing");
    let (task_id, challenge) = offer(&env, &path, &input).await;
    let payment = serde_json::to_value(env.sign(&challenge).await).unwrap();
    let before = env.balances().await;
    let counts = row_counts(&env.app.database_url).await;

    let elsewhere = rpc(
        &env,
        &format!("/a2a/workers/{other}"),
        "SendMessage",
        payment_params(&task_id, &payment),
    )
    .await;
    let task = &elsewhere["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{elsewhere}");
    assert_eq!(metadata(task)["x402.payment.status"], "payment-failed");
    assert_eq!(metadata(task)["x402.payment.error"], "PAYMENT_MISMATCH");
    // Another task's id is refused before anything runs.
    let wrong_task = rpc(
        &env,
        &path,
        "SendMessage",
        payment_params("ctr_01J00000000000000000000000", &payment),
    )
    .await;
    assert_eq!(error_code(&wrong_task), -32602, "{wrong_task}");
    // An unpaid follow-up message is not a payment.
    let follow_up = rpc(
        &env,
        &path,
        "SendMessage",
        json!({"message": {"messageId": "m3", "role": "ROLE_USER", "taskId": task_id,
                           "parts": [{"text": "hello?"}]}}),
    )
    .await;
    assert_eq!(error_code(&follow_up), -32602, "{follow_up}");
    assert_eq!(env.balances().await, before);
    assert_eq!(row_counts(&env.app.database_url).await, counts);
    assert_eq!(env.worker.executions(), 0);

    // The payment still pays what it was signed for, on its own listing's interface.
    let paid = rpc(
        &env,
        &path,
        "SendMessage",
        payment_params(&task_id, &payment),
    )
    .await;
    let task = &paid["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{paid}");
    assert_eq!(task["id"], task_id.as_str());
    assert_eq!(
        task["artifacts"][0]["parts"][0]["data"]["output"]["content"]["summary"],
        "for the first listing"
    );
    // GetTask: the capability token reads it; another seeker's key does not.
    let token = metadata(task)["hiregate.access"]["token"].as_str().unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}});
    let (_, got) = rpc_raw(&env, &path, &body.to_string(), Some(token)).await;
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{got}"
    );
    let (_, stranger) = rpc_raw(&env, &path, &body.to_string(), Some(&env.seeker_key)).await;
    assert_eq!(error_code(&stranger), -32001, "{stranger}");
    // The token of one task reads no other: a second paid task, each token its own.
    let (second, challenge) = offer(&env, &path, &HireEnv::input("another task")).await;
    let payment = serde_json::to_value(env.sign(&challenge).await).unwrap();
    let paid = rpc(
        &env,
        &path,
        "SendMessage",
        payment_params(&second, &payment),
    )
    .await;
    let second_token = metadata(&paid["result"]["task"])["hiregate.access"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    for (id, wrong) in [(&task_id, &second_token), (&second, &token.to_owned())] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": id}});
        let (_, crossed) = rpc_raw(&env, &path, &body.to_string(), Some(wrong)).await;
        assert_eq!(error_code(&crossed), -32001, "{crossed}");
    }
    // SubscribeToTask: the ended task as one event, then the stream closes; a stranger gets the
    // JSON-RPC error, not a stream.
    let subscribe =
        json!({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}});
    let stream = env
        .app
        .client
        .post(format!("{}{path}", env.app.address))
        .bearer_auth(token)
        .json(&subscribe)
        .send()
        .await
        .unwrap();
    assert_eq!(
        stream.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = stream.text().await.unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(events.len(), 1, "{text}");
    assert_eq!(events[0]["id"], 2);
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    let (_, refused) = rpc_raw(&env, &path, &subscribe.to_string(), Some(&env.seeker_key)).await;
    assert_eq!(error_code(&refused), -32001, "{refused}");
    assert_reconciled(&env).await;
}

/// Streaming with the official client (`SendStreamingMessage`): the offer as one task event; the
/// payment as the task at once (working), then the deliverable's artifact and the final status.
#[tokio::test]
async fn the_official_a2a_sdk_client_hires_over_a_stream() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let text = "streamed to the official a2a-sdk client";
    let before = env.balances().await;
    let Some(report) =
        hire_over_a2a_with(&env, &HireEnv::input(text), json!({"streaming": true})).await
    else {
        return;
    };
    assert_eq!(
        report["events"],
        json!(["task", "task", "artifact_update", "status_update"]),
        "{report}"
    );
    assert_eq!(
        report["offered"]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    let paid = &report["paid"][0];
    assert_eq!(paid["status"]["state"], "TASK_STATE_COMPLETED", "{paid}");
    assert_eq!(metadata(paid)["x402.payment.status"], "payment-completed");
    assert_eq!(
        paid["artifacts"][0]["parts"][0]["data"]["output"]["content"]["summary"],
        text
    );
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_eq!(env.worker.executions(), 1);
    assert_reconciled(&env).await;
}

/// The figure for the notes: 10,000 unpaid `SendMessage`s (32 at a time) leave every table as
/// it was.
/// `cargo test -p hiregate-gateway --all-features --test api a2a::unpaid_flood -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a measurement (10,000 calls), run by hand"]
async fn unpaid_flood_of_ten_thousand_a2a_messages_leaves_the_store_unchanged() {
    use futures::StreamExt as _;
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let path = format!("/a2a/workers/{}", env.worker_id);
    let before = row_counts(&env.app.database_url).await;
    let started = std::time::Instant::now();
    let (env, path) = (&env, &path);
    let states: Vec<Value> = futures::stream::iter(0..10_000)
        .map(|i| async move {
            let answer = rpc(
                env,
                path,
                "SendMessage",
                send_params(&HireEnv::input(&format!("flood {i}")), json!({})),
            )
            .await;
            answer["result"]["task"]["status"]["state"].clone()
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let elapsed = started.elapsed();
    assert!(states.iter().all(|s| s == "TASK_STATE_INPUT_REQUIRED"));
    let after = row_counts(&env.app.database_url).await;
    println!(
        "10000 unpaid A2A messages in {elapsed:?} ({:.0}/s); rows before {before:?}; rows after \
         {after:?}",
        10_000.0 / elapsed.as_secs_f64()
    );
    assert_eq!(after, before);
}

/// The marketplace's card (`/.well-known/agent-card.json`) names `/a2a`: the official client
/// hires through it, naming the listing in the message metadata.
#[tokio::test]
async fn the_official_a2a_sdk_client_hires_through_the_marketplace_card() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let text = "hired through the marketplace's card";
    let before = env.balances().await;
    let Some(report) = hire_over_a2a_with(
        &env,
        &HireEnv::input(text),
        json!({
            "cardPath": "/.well-known/agent-card.json",
            "metadata": {"hiregate.workerId": env.worker_id, "hiregate.taskType": "summarize"},
        }),
    )
    .await
    else {
        return;
    };
    assert_eq!(
        report["interface"]["url"],
        format!("{}/a2a", env.app.address),
        "{report}"
    );
    let paid = &report["paid"][0];
    assert_eq!(paid["status"]["state"], "TASK_STATE_COMPLETED", "{paid}");
    assert_eq!(
        paid["artifacts"][0]["parts"][0]["data"]["output"]["content"]["summary"],
        text
    );
    assert_eq!(report["got"]["status"]["state"], "TASK_STATE_COMPLETED");
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - U256::from(PRICE));
    assert_eq!(after.1, before.1 + U256::from(PRICE));
    assert_reconciled(&env).await;
}

/// An escrowed listing (`auth-capture`) over A2A: the offer's requirement is `auth-capture`, the
/// payment in the message locks the money in escrow, and the verified deliverable releases it.
#[tokio::test]
async fn an_escrowed_listing_is_hired_over_a2a_with_auth_capture() {
    let escrow = escrow_env(TestDatabase::sqlite(), json!(["auth-capture"]), Value::Null).await;
    let env = &escrow.env;
    let path = format!("/a2a/workers/{}", env.worker_id);
    let (task_id, challenge) = offer(env, &path, &HireEnv::input("escrow me over A2A")).await;
    assert_eq!(challenge.accepts[0].scheme, "auth-capture");
    let payload = sign_auth_capture_payment(
        &env.wallet,
        &challenge.accepts[0],
        Some(challenge.resource.clone()),
        now(),
        &AuthCaptureSignOptions::default(),
    )
    .await
    .unwrap();
    let before = env.balance(env.wallet.address()).await;
    let paid = rpc(
        env,
        &path,
        "SendMessage",
        payment_params(&task_id, &serde_json::to_value(&payload).unwrap()),
    )
    .await;
    let task = &paid["result"]["task"];
    assert_eq!(task["id"], task_id.as_str(), "{paid}");
    let state = task["status"]["state"].as_str().unwrap();
    assert!(
        state == "TASK_STATE_COMPLETED" || state == "TASK_STATE_WORKING",
        "{paid}"
    );
    assert_eq!(
        env.balance(env.wallet.address()).await,
        before - U256::from(PRICE),
        "the payer's money left its wallet (escrow, then capture)"
    );
    let contract = env.state(&task_id).await;
    assert!(
        ["accepted", "settling", "settled"].contains(&contract.as_str()),
        "{contract}"
    );
}

/// A streamed payment shows the task at once, before the (slow) work ends, then the artifact and
/// the final status when it does.
#[tokio::test]
async fn a_streamed_payment_shows_the_task_before_the_work_ends() {
    use futures::StreamExt as _;
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let path = format!("/a2a/workers/{}", env.worker_id);
    let input = json!({"text": "take your time", "mode": "slow", "delay_ms": 1500});
    let (task_id, challenge) = offer(&env, &path, &input).await;
    let payment = serde_json::to_value(env.sign(&challenge).await).unwrap();
    let started = std::time::Instant::now();
    let response = env
        .app
        .client
        .post(format!("{}{path}", env.app.address))
        .json(&json!({
            "jsonrpc": "2.0", "id": "s1", "method": "SendStreamingMessage",
            "params": payment_params(&task_id, &payment),
        }))
        .timeout(std::time::Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut bytes = response.bytes_stream();
    let mut buffer = String::new();
    let mut events: Vec<(std::time::Duration, Value)> = Vec::new();
    while let Some(chunk) = bytes.next().await {
        buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for data in block.lines().filter_map(|l| l.strip_prefix("data: ")) {
                events.push((started.elapsed(), serde_json::from_str(data).unwrap()));
            }
        }
    }
    let kinds: Vec<&str> = events
        .iter()
        .map(|(_, e)| {
            let result = e["result"].as_object().unwrap();
            result.keys().next().unwrap().as_str()
        })
        .collect();
    assert_eq!(
        kinds,
        ["task", "artifactUpdate", "statusUpdate"],
        "{events:?}"
    );
    let (first_at, first) = &events[0];
    assert_eq!(first["id"], "s1");
    assert_eq!(
        first["result"]["task"]["status"]["state"],
        "TASK_STATE_WORKING"
    );
    assert_eq!(
        metadata(&first["result"]["task"])["x402.payment.status"],
        "payment-submitted"
    );
    let (last_at, last) = &events[2];
    assert_eq!(
        last["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(
        *last_at >= *first_at + std::time::Duration::from_millis(1000),
        "the task came first ({first_at:?}), the end after the work ({last_at:?})"
    );
    assert_eq!(env.state(&task_id).await, "settled");
}

/// Pending work over A2A: the paid answer is a working task with its capability token, and
/// `SubscribeToTask` streams it until the worker's result is verified and settled.
#[tokio::test]
async fn pending_work_is_followed_to_its_end_with_subscribe_to_task() {
    const FAST: &str = "[contracts]\npoll_interval_ms = 100\npoll_max_interval_ms = 400\n\
                        jobs_interval_ms = 50\njob_lease_ms = 5000\n";
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, FAST).await;
    let path = format!("/a2a/workers/{}", env.worker_id);
    let input = json!({"text": "later", "mode": "pending", "delay_ms": 1500});
    let (task_id, challenge) = offer(&env, &path, &input).await;
    let payment = serde_json::to_value(env.sign(&challenge).await).unwrap();
    let paid = rpc(
        &env,
        &path,
        "SendMessage",
        payment_params(&task_id, &payment),
    )
    .await;
    let task = &paid["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{paid}");
    assert!(task.get("artifacts").is_none());
    let token = metadata(task)["hiregate.access"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = env
        .app
        .client
        .post(format!("{}{path}", env.app.address))
        .bearer_auth(&token)
        .json(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "SubscribeToTask",
                      "params": {"id": task_id}}),
        )
        .timeout(std::time::Duration::from_secs(60))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .map(|data| serde_json::from_str(data).unwrap())
        .collect();
    assert_eq!(
        events[0]["result"]["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{text}"
    );
    let last = &events[events.len() - 1]["result"]["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_COMPLETED", "{text}");
    assert_eq!(
        last["status"]["message"]["metadata"]["x402.payment.status"],
        "payment-completed"
    );
    let artifact = events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .unwrap_or_else(|| panic!("no artifact: {text}"));
    assert_eq!(
        artifact["artifact"]["parts"][0]["data"]["output"]["content"]["summary"],
        "later"
    );
    assert_eq!(env.state(&task_id).await, "settled");
    assert_reconciled(&env).await;
}
