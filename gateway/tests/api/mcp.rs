//! The MCP server with the official `rmcp` client: over streamable HTTP at `/mcp` (tools listed
//! with schemas, discovery, a paid hire of the example worker on anvil, spending limits refused
//! before anything is signed, open without credentials but 401/403 for a key that is not a
//! seeker's) and over stdio (`hiregate mcp`, with and without a seeker key). `hire_worker`, paid
//! by the caller's own wallet, is `mcp_x402.rs`.

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use rmcp::{
    RoleClient, ServiceExt as _,
    model::{CallToolRequestParams, CallToolResult},
    service::RunningService,
    transport::{
        ConfigureCommandExt as _, StreamableHttpClientTransport, TokioChildProcess,
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, PRICE, SEEKER_FUNDS, WorkerKind, chain_settings, hire_env_on},
};

const TOOLS: [&str; 7] = [
    "find_workers",
    "describe_worker",
    "propose_contract",
    "hire",
    "hire_worker",
    "get_contract",
    "open_dispute",
];

/// A hire environment whose gateway's `[mcp]` wallet is a funded account of the devnet.
async fn mcp_env(
    database: TestDatabase,
    max_per_hire: u64,
    max_per_day: u64,
) -> (HireEnv, PrivateKeySigner) {
    let devnet = hiregate_payments::devnet::Devnet::start()
        .await
        .expect("anvil devnet starts");
    let wallet = devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .expect("funded MCP wallet");
    let extra = format!(
        "[mcp]\nwallet_private_key = \"{}\"\nmax_per_hire = {max_per_hire}\nmax_per_day = {max_per_day}\n",
        wallet.to_bytes()
    );
    let env = hire_env_on(devnet, database, WorkerKind::Echo, 4, &extra).await;
    (env, wallet)
}

pub(crate) async fn connect(env: &HireEnv, key: &str) -> RunningService<RoleClient, ()> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", env.app.address))
        .auth_header(key);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("the MCP session initializes")
}

pub(crate) async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments))
        .await
        .unwrap_or_else(|error| panic!("{tool}: {error}"))
}

pub(crate) fn structured(result: &CallToolResult) -> Value {
    result.structured_content.clone().unwrap_or(Value::Null)
}

pub(crate) fn hire_arguments(env: &HireEnv, text: &str) -> Value {
    json!({"worker_id": env.worker_id, "task_type": "summarize", "input": {"text": text}})
}

/// Payments the store holds from `wallet`, ever.
async fn payments_from(env: &HireEnv, wallet: &PrivateKeySigner) -> usize {
    env.app
        .store
        .payment_amounts_by_payer_since(
            &wallet.address().to_checksum(None),
            chrono::DateTime::UNIX_EPOCH,
        )
        .await
        .expect("payments")
        .len()
}

async fn lists_tools_and_hires(database: TestDatabase) {
    let (env, wallet) = mcp_env(database, PRICE, 10 * PRICE).await;
    let client = connect(&env, &env.seeker_key).await;

    let tools = client.list_all_tools().await.expect("tools/list");
    for name in TOOLS {
        let tool = tools
            .iter()
            .find(|tool| tool.name == name)
            .unwrap_or_else(|| panic!("no {name} tool"));
        assert_eq!(
            tool.input_schema.get("type"),
            Some(&json!("object")),
            "{name}"
        );
        assert!(tool.description.is_some(), "{name}");
        let output = tool
            .output_schema
            .as_ref()
            .unwrap_or_else(|| panic!("{name}: no output schema"));
        assert_eq!(output.get("type"), Some(&json!("object")), "{name}");
        assert!(output["properties"]["error"].is_object(), "{name}");
    }
    let hire_tool = tools.iter().find(|tool| tool.name == "hire").unwrap();
    let properties = hire_tool.input_schema["properties"].as_object().unwrap();
    for field in ["worker_id", "task_type", "input"] {
        assert!(
            properties.contains_key(field),
            "{field}: {:?}",
            hire_tool.input_schema
        );
    }

    let found = call(&client, "find_workers", json!({"task_type": "summarize"})).await;
    assert_ne!(found.is_error, Some(true), "{found:?}");
    assert_eq!(
        structured(&found)["workers"][0]["id"],
        env.worker_id.as_str()
    );
    let cheaper = call(
        &client,
        "find_workers",
        json!({"max_price": (PRICE - 1).to_string()}),
    )
    .await;
    assert_eq!(structured(&cheaper)["workers"], json!([]), "{cheaper:?}");

    let described = call(
        &client,
        "describe_worker",
        json!({"worker_id": env.worker_id}),
    )
    .await;
    assert_ne!(described.is_error, Some(true), "{described:?}");
    let described = structured(&described);
    assert!(
        described["listing"]["tasks"]["summarize"].is_object(),
        "{described:#}"
    );
    assert!(described["reputation"].is_object(), "{described:#}");

    let payer_before = env.balance(wallet.address()).await;
    let worker_before = env.balance(env.pay_to).await;
    let hired = call(&client, "hire", hire_arguments(&env, "hired over MCP")).await;
    assert_ne!(hired.is_error, Some(true), "{hired:?}");
    let outcome = structured(&hired);
    assert_eq!(outcome["state"], "settled", "{outcome:#}");
    assert_eq!(outcome["accepted"], true);
    assert_eq!(
        outcome["deliverable"]["content"]["output"]["content"]["summary"], "hired over MCP",
        "{outcome:#}"
    );
    let contract_id = outcome["contract_id"].as_str().unwrap().to_owned();
    let jwks = env
        .app
        .get("/.well-known/jwks.json", None)
        .await
        .json()
        .await
        .unwrap();
    let receipt = hiregate_contracts::receipt::verify_receipt(
        outcome["receipt"].as_str().expect("a receipt"),
        &jwks,
    )
    .expect("the returned receipt verifies");
    assert_eq!(receipt.sub.as_str(), contract_id);
    // The chain is the ledger: the configured wallet paid the worker the price, once.
    assert_eq!(
        env.balance(wallet.address()).await,
        payer_before - U256::from(PRICE)
    );
    assert_eq!(
        env.balance(env.pay_to).await,
        worker_before + U256::from(PRICE)
    );
    assert_eq!(env.worker.executions(), 1);

    let shown = call(&client, "get_contract", json!({"contract_id": contract_id})).await;
    assert_eq!(structured(&shown)["state"], "settled", "{shown:?}");
    let missing = call(
        &client,
        "get_contract",
        json!({"contract_id": "ctr_01J00000000000000000000000"}),
    )
    .await;
    assert_eq!(missing.is_error, Some(true), "{missing:?}");
    assert_eq!(
        structured(&missing)["error"]["details"]["status"],
        404,
        "{missing:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_lists_tools_and_hires_the_example_worker_on_sqlite() {
    lists_tools_and_hires(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn mcp_lists_tools_and_hires_the_example_worker_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    lists_tools_and_hires(database).await;
}

#[tokio::test]
async fn a_hire_over_the_per_hire_limit_is_refused_before_signing() {
    let (env, wallet) = mcp_env(TestDatabase::sqlite(), PRICE - 1, 10 * PRICE).await;
    let client = connect(&env, &env.seeker_key).await;
    let before = (
        env.balance(wallet.address()).await,
        env.balance(env.pay_to).await,
    );

    let refused = call(&client, "hire", hire_arguments(&env, "too dear")).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let error = &structured(&refused)["error"];
    assert_eq!(error["code"], "spending_limit_exceeded", "{error:#}");
    assert_eq!(error["details"]["price"], PRICE.to_string());
    assert_eq!(error["details"]["max_per_hire"], (PRICE - 1).to_string());
    // The refusal says which setting to raise.
    assert_eq!(error["details"]["setting"], "mcp.max_per_hire");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("[mcp] max_per_hire") && message.contains("HIREGATE_MCP__MAX_PER_HIRE"),
        "{message}"
    );

    // Nothing signed: no payment row, no execution, no money moved.
    assert_eq!(payments_from(&env, &wallet).await, 0);
    assert_eq!(env.worker.executions(), 0);
    let contract_id = error["details"]["contract_id"].as_str().unwrap();
    assert_eq!(env.state(contract_id).await, "offered");
    assert_eq!(
        (
            env.balance(wallet.address()).await,
            env.balance(env.pay_to).await
        ),
        before
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn the_day_limit_refuses_the_hire_that_would_pass_it() {
    let (env, wallet) = mcp_env(TestDatabase::sqlite(), PRICE, PRICE + PRICE / 2).await;
    let client = connect(&env, &env.seeker_key).await;

    let first = call(&client, "hire", hire_arguments(&env, "first of the day")).await;
    assert_ne!(first.is_error, Some(true), "{first:?}");
    assert_eq!(structured(&first)["state"], "settled");
    let after_first = env.balance(wallet.address()).await;

    let second = call(&client, "hire", hire_arguments(&env, "one too many")).await;
    assert_eq!(second.is_error, Some(true), "{second:?}");
    let error = &structured(&second)["error"];
    assert_eq!(error["code"], "spending_limit_exceeded", "{error:#}");
    assert_eq!(error["details"]["spent_last_24h"], PRICE.to_string());
    assert_eq!(error["details"]["setting"], "mcp.max_per_day");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("[mcp] max_per_day"),
        "{error:#}"
    );
    assert_eq!(payments_from(&env, &wallet).await, 1);
    assert_eq!(env.worker.executions(), 1);
    assert_eq!(env.balance(wallet.address()).await, after_first);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn mcp_is_open_without_credentials_but_refuses_keys_that_are_not_a_seekers() {
    let (env, _wallet) = mcp_env(TestDatabase::sqlite(), PRICE, PRICE).await;
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}});
    // A contract's capability token opens that contract's read routes, not the account tools.
    let capability = format!("hg_cap_{}", "A".repeat(86));
    for key in [
        None,
        Some("hg_sk_not_a_key"),
        Some(env.operator_key.as_str()),
        Some(capability.as_str()),
    ] {
        let mut request = http
            .post(format!("{}/mcp", env.app.address))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        if key.is_none() {
            // A wallet is all an x402 caller has: the session opens.
            assert_eq!(status, 200, "{}", response.text().await.unwrap());
            continue;
        }
        let body: Value = response.json().await.unwrap();
        assert!(matches!(status, 401 | 403), "{key:?}: {status} {body}");
        assert!(body["error"]["code"].is_string(), "{body}");
    }
}

#[tokio::test]
async fn hiregate_mcp_serves_the_tools_over_stdio() {
    let (env, _wallet) = mcp_env(TestDatabase::sqlite(), PRICE, PRICE).await;
    let database_url = env.app.database_url.clone();
    let address = env.app.address.clone();
    let seeker_key = env.seeker_key.clone();
    let transport = TokioChildProcess::new(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_hiregate")).configure(|command| {
            for (name, _) in std::env::vars() {
                if name.starts_with("HIREGATE_") {
                    command.env_remove(name);
                }
            }
            command
                .arg("mcp")
                .arg("--gateway")
                .arg(&address)
                .env("HIREGATE_SEEKER_KEY", &seeker_key)
                .env("HIREGATE_DATABASE__URL", &database_url);
        }),
    )
    .expect("spawn hiregate mcp");
    let client = ().serve(transport).await.expect("stdio session initializes");
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    names.sort_unstable();
    let mut expected = TOOLS.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected);
    let found = call(&client, "find_workers", json!({})).await;
    assert_eq!(
        structured(&found)["workers"][0]["id"],
        env.worker_id.as_str(),
        "{found:?}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn hiregate_mcp_over_stdio_needs_no_seeker_key_for_discovery_and_hire_worker() {
    let (env, _wallet) = mcp_env(TestDatabase::sqlite(), PRICE, PRICE).await;
    let database_url = env.app.database_url.clone();
    let address = env.app.address.clone();
    // The engine runs in the child: it needs the chain the listing is paid on.
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), chain_settings(&env.devnet, "")).unwrap();
    let transport = TokioChildProcess::new(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_hiregate")).configure(|command| {
            for (name, _) in std::env::vars() {
                if name.starts_with("HIREGATE_") {
                    command.env_remove(name);
                }
            }
            command
                .arg("mcp")
                .arg("--gateway")
                .arg(&address)
                .env("HIREGATE_CONFIG", config.path())
                .env("HIREGATE_DATABASE__URL", &database_url);
        }),
    )
    .expect("spawn hiregate mcp");
    let client = ().serve(transport).await.expect("stdio session initializes");
    let found = call(&client, "find_workers", json!({})).await;
    assert_eq!(
        structured(&found)["workers"][0]["id"],
        env.worker_id.as_str(),
        "{found:?}"
    );
    let unpaid = call(&client, "hire_worker", hire_arguments(&env, "over stdio")).await;
    assert_eq!(unpaid.is_error, Some(true), "{unpaid:?}");
    assert_eq!(structured(&unpaid)["x402Version"], 2, "{unpaid:?}");
    assert!(structured(&unpaid)["accepts"][0]["extra"]["hiregate"].is_object());
    let refused = call(
        &client,
        "get_contract",
        json!({"contract_id": "ctr_01J00000000000000000000000"}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(structured(&refused)["error"]["code"], "unauthorized");
    client.cancel().await.unwrap();
}

/// What MCP clients read from a refusal: a JSON-RPC error object with a JSON content type, never
/// a plain-text body; checked on the raw wire, with a valid seeker key.
#[tokio::test]
async fn malformed_mcp_requests_get_json_rpc_errors() {
    let app = crate::helpers::spawn_app().await;
    let (seeker_key, _) = app.create_key("seeker").await;
    let both = "application/json, text/event-stream";
    let post = |body: &str, content_type: &str, accept: &str| {
        app.client
            .post(format!("{}/mcp", app.address))
            .bearer_auth(&seeker_key)
            .header("accept", accept.to_owned())
            .header("content-type", content_type.to_owned())
            .body(body.to_owned())
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}})
    .to_string();
    // (body, content type, accept, HTTP status, JSON-RPC code, id)
    let cases = [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize""#,
            "application/json",
            both,
            400,
            -32700,
            Value::Null,
        ),
        (
            "not json at all",
            "application/json",
            both,
            400,
            -32700,
            Value::Null,
        ),
        ("", "application/json", both, 400, -32700, Value::Null),
        (
            r#"{"hello":"world"}"#,
            "application/json",
            both,
            400,
            -32600,
            Value::Null,
        ),
        ("42", "application/json", both, 400, -32600, Value::Null),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            "application/json",
            both,
            400,
            -32600,
            Value::Null,
        ),
        ("[]", "application/json", both, 400, -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":7}"#,
            "application/json",
            both,
            400,
            -32600,
            json!(7),
        ),
        // Well formed, but no session: the transport's own refusal, as JSON-RPC too.
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{}}}"#,
            "application/json",
            both,
            400,
            -32600,
            Value::Null,
        ),
        (
            initialize.as_str(),
            "text/plain",
            both,
            415,
            -32600,
            Value::Null,
        ),
        (
            initialize.as_str(),
            "application/x-www-form-urlencoded",
            both,
            415,
            -32600,
            Value::Null,
        ),
        // The transport's own refusal (it must be able to answer with SSE), as JSON-RPC too.
        (
            initialize.as_str(),
            "application/json",
            "application/json",
            406,
            -32600,
            Value::Null,
        ),
    ];
    for (body, content_type, accept, status, code, id) in cases {
        let response = post(body, content_type, accept).send().await.unwrap();
        let got = response.status().as_u16();
        let media = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.unwrap();
        let answer: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{body:?} ({content_type}): not JSON: {got} {text}"));
        assert_eq!(got, status, "{body:?} ({content_type}): {answer}");
        assert!(media.starts_with("application/json"), "{body:?}: {media}");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["error"]["code"], code, "{body:?}: {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
    }
    // A well-formed initialize still opens a session.
    let response = post(&initialize, "application/json", both)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Arguments that do not fit a tool's input schema are the tool's error in the API's shape,
/// like every other tool error, not a bare JSON-RPC error.
#[tokio::test]
async fn tool_argument_errors_have_the_api_error_shape() {
    let (env, _wallet) = mcp_env(TestDatabase::sqlite(), PRICE, PRICE).await;
    let client = connect(&env, &env.seeker_key).await;
    for (tool, arguments) in [
        ("get_contract", json!({})),
        ("get_contract", json!({"contract_id": 7})),
        ("describe_worker", json!({"worker": "wk_x"})),
        (
            "hire",
            json!({"worker_id": env.worker_id, "task_type": "summarize"}),
        ),
        (
            "open_dispute",
            json!({"contract_id": "ctr_x", "reason": ["not", "text"]}),
        ),
        ("find_workers", json!({"min_reputation": "high"})),
    ] {
        let result = call(&client, tool, arguments.clone()).await;
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} {arguments}: {result:?}"
        );
        let error = &structured(&result)["error"];
        assert_eq!(
            error["code"], "invalid_argument",
            "{tool} {arguments}: {result:?}"
        );
        assert!(error["message"].is_string(), "{error}");
        assert!(error["details"]["arguments"].is_string(), "{error}");
    }
    // Nothing was proposed or paid.
    let listed: Value = env
        .app
        .get("/v1/contracts", Some(&env.seeker_key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(listed["contracts"], json!([]), "{listed}");
    client.cancel().await.unwrap();
}
