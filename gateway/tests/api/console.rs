//! The web console at `/console`: its assets and headers over HTTP, the read APIs it is built on
//! (on SQLite and PostgreSQL), and a click-through in a real headless Chromium (the
//! distribution's package, driven by `tools/console/drive.mjs` with `playwright-core`) over real
//! hires on anvil: a seeker's contracts, live timeline, deliverable, verification, receipt
//! verified in the browser (and an altered one refused), dispute, answer to an operator's dispute
//! and webhook dead letters; an operator's workers with load, earnings (in the token's symbol,
//! from `GET /v1/assets`), health history, failures and rejections; an arbiter's queue, both
//! parties' statements and the decision; and on a 360 px phone, a header that fits with its
//! sign-out button on screen.
//! Screenshots of every page land in `target/console-screenshots/`. A second browser run
//! (`tools/console/hire.mjs`) hires from the console and pays with an injected EIP-1193 wallet
//! backed by a funded devnet key, `exact` and `auth-capture`, and the chain is checked after
//! (screenshots in `target/console-hire-screenshots/`). A third (`tools/console/wallethire.mjs`)
//! hires with the wallet alone, no account, over the listing's stable x402 resource: paid,
//! settled and followed live with the capability token; a refused payment and a rejected
//! deliverable move nothing; an escrowed listing the same way, captured (screenshots in
//! `target/console-wallet-hire-screenshots/`).
//!
//! The browser test needs node, `npm ci` in `tools/` (scripts/install-tools.sh) and Chromium
//! (`/usr/bin/chromium`, or `HIREGATE_CHROMIUM`); without them it is skipped with a message,
//! except under `CI=true`, where it fails.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use alloy::primitives::{B256, U256};
use axum::{Router, extract::State, http::StatusCode, routing::post};
use hiregate_engine::assets::whole_units;
use hiregate_http::console::{CONTENT_SECURITY_POLICY, asset_names};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{
    escrow_env::{EscrowEnv, escrow_env_with, price, token_store},
    helpers::{ADMIN_KEY, TestDatabase, eventually, spawn_app},
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env},
};

const WAIT: Duration = Duration::from_secs(30);

/// Webhook retries fast enough to park a dead letter in well under a second, and health probes
/// often enough to give the worker a history while the test sets up.
const SETTINGS: &str = r#"
[webhooks]
poll_interval_ms = 50
batch_size = 8
lease_ms = 5000
request_timeout_ms = 2000
max_attempts = 2
backoff_initial_ms = 50
backoff_max_ms = 100
retry_after_max_s = 1
[health]
interval_ms = 200
"#;

#[tokio::test]
async fn every_console_asset_is_served_with_its_type_and_a_self_only_policy() {
    let app = spawn_app().await;
    for path in ["/console", "/console/"] {
        let response = app.get(path, None).await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "text/html; charset=utf-8"
        );
        assert_eq!(
            response.headers()["content-security-policy"],
            CONTENT_SECURITY_POLICY
        );
        let page = response.text().await.unwrap();
        assert!(page.contains(r#"<script type="module" src="/console/app.js">"#));
    }
    for name in asset_names() {
        let response = app.get(&format!("/console/{name}"), None).await;
        assert_eq!(response.status(), 200, "{name}");
        let expected = match name.rsplit('.').next() {
            Some("html") => "text/html; charset=utf-8",
            Some("css") => "text/css; charset=utf-8",
            Some("js") => "text/javascript; charset=utf-8",
            Some("svg") => "image/svg+xml",
            other => panic!("unexpected asset type {other:?}"),
        };
        assert_eq!(response.headers()["content-type"], expected, "{name}");
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        assert_eq!(
            response.headers()["content-security-policy"],
            CONTENT_SECURITY_POLICY
        );
        // No asset names another host: everything comes from the gateway.
        let text = response.text().await.unwrap();
        for scheme in ["http://", "https://", "//cdn"] {
            assert!(
                !text.contains(scheme) || name == "favicon.svg",
                "{name} references {scheme}"
            );
        }
    }
    let missing = app.get("/console/nope.js", None).await;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "route_not_found");
}

/// Everything the browser run needs, or the reason it cannot run.
struct BrowserTools {
    node: PathBuf,
    chromium: PathBuf,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    })
}

fn browser_tools() -> Result<BrowserTools, String> {
    let node = std::env::var_os("HIREGATE_NODE")
        .map(PathBuf::from)
        .or_else(|| find_on_path("node"))
        .ok_or("no node on PATH (apt-get install nodejs npm)")?;
    let playwright = workspace_root().join("tools/node_modules/playwright-core/package.json");
    if !playwright.is_file() {
        return Err(format!(
            "{} is missing: run scripts/install-tools.sh",
            playwright.display()
        ));
    }
    let chromium = std::env::var_os("HIREGATE_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            ["chromium", "chromium-browser"]
                .into_iter()
                .find_map(find_on_path)
        })
        .ok_or("no chromium on PATH: run scripts/install-tools.sh (Debian package chromium)")?;
    Ok(BrowserTools { node, chromium })
}

fn browser_tools_or_skip(test: &str) -> Option<BrowserTools> {
    match browser_tools() {
        Ok(tools) => Some(tools),
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("{test}: CI=true and the browser tools are missing: {reason}")
        }
        Err(reason) => {
            eprintln!("SKIPPED: {test}: {reason}");
            None
        }
    }
}

/// A `tools/console/*.mjs` script in node: its input on stdin, one JSON message per stdout line.
struct Driver {
    script: &'static str,
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Driver {
    async fn start(tools: &BrowserTools, script: &'static str, input: &Value) -> Self {
        let mut child = tokio::process::Command::new(&tools.node)
            .arg(workspace_root().join("tools/console").join(script))
            .current_dir(workspace_root().join("tools"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("node starts");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.to_string().as_bytes()).await.unwrap();
        drop(stdin);
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
            text
        });
        Self {
            script,
            child,
            lines,
            stderr,
        }
    }

    /// The next message; `None` once the script's output ends.
    async fn next_message(&mut self) -> Option<Value> {
        let line = self.lines.next_line().await.unwrap()?;
        Some(serde_json::from_str(&line).unwrap_or(Value::Null))
    }

    /// Waits for the script to exit and fails the test with its stderr if it failed.
    async fn finish(mut self) {
        let status = self.child.wait().await.unwrap();
        let stderr = self.stderr.await.unwrap();
        assert!(
            status.success(),
            "{} failed ({status}):\n{stderr}",
            self.script
        );
    }
}

/// A webhook receiver that answers 500 until told to accept.
#[derive(Clone, Default)]
struct Receiver {
    accept: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
}

async fn receive(State(receiver): State<Receiver>) -> StatusCode {
    if receiver.accept.load(Ordering::SeqCst) {
        receiver.accepted.fetch_add(1, Ordering::SeqCst);
        StatusCode::NO_CONTENT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

async fn start_receiver() -> (Receiver, String) {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let router = Router::new()
        .route("/hook", post(receive))
        .with_state(receiver.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    (receiver, url)
}

async fn paid(env: &HireEnv, contract_id: &str) -> crate::hire_env::Answer {
    let payment = env.pay(&env.challenge(contract_id).await).await;
    env.execute(contract_id, Some(&payment), None).await
}

/// The summary in a contract view's released deliverable (a `json` output document).
fn summary_of(view: &Value) -> Value {
    let summary = view
        .pointer("/deliverable/content/output/content/summary")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(summary.is_string(), "no summary in {}", view["deliverable"]);
    summary
}

async fn view(env: &HireEnv, contract_id: &str) -> Value {
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}"),
            Some(&env.seeker_key),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn a_seeker_an_operator_and_an_arbiter_click_through_the_console_in_chromium() {
    let Some(tools) = browser_tools_or_skip(
        "a_seeker_an_operator_and_an_arbiter_click_through_the_console_in_chromium",
    ) else {
        return;
    };
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, SETTINGS).await;

    // Settled at once (no acceptance window).
    let settled = env
        .contract(HireEnv::input("the console shows this"), json!({}))
        .await;
    let answer = paid(&env, &settled).await;
    assert_eq!(answer.status, 200, "{:?}", answer.body);
    let settled_view = view(&env, &settled).await;
    assert_eq!(settled_view["state"], "settled");

    // Rejected: the worker's output breaks the schema.
    let bad_input = json!({"text": "bad", "mode": "invalid"});
    let rejected = env.contract(bad_input.clone(), json!({})).await;
    assert_eq!(paid(&env, &rejected).await.status, 422);

    // Rejected again, then disputed by the operator: the replay fails too → escalated.
    let escalated = env.contract(bad_input, json!({})).await;
    assert_eq!(paid(&env, &escalated).await.status, 422);
    let response = env
        .app
        .send_json(
            Method::POST,
            &format!("/v1/contracts/{escalated}/disputes"),
            Some(&env.operator_key),
            &json!({"reason": "The output is fine; the schema is too strict.",
                    "claim": {"note": "summary 42 is a summary"}}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let dispute: Value = response.json().await.unwrap();
    assert_eq!(dispute["state"], "escalated");
    let dispute_id = dispute["dispute_id"].as_str().unwrap().to_owned();

    // A worker failure retried under the same payment: a failed attempt for the operator.
    let flaky_input = json!({"text": "retry me", "mode": "flaky"});
    let flaky = env.contract(flaky_input.clone(), json!({})).await;
    assert_eq!(paid(&env, &flaky).await.status, 502);
    assert_eq!(
        env.execute(&flaky, None, Some(&flaky_input)).await.status,
        200
    );

    // Accepted, inside a ten-minute acceptance window: the seeker may dispute it.
    let accepted = env
        .contract(
            HireEnv::input("dispute me"),
            json!({"acceptance_window_s": 600}),
        )
        .await;
    assert_eq!(paid(&env, &accepted).await.status, 200);
    assert_eq!(env.state(&accepted).await, "accepted");

    // An offered contract whose webhook fails until the receiver is told to accept: a dead
    // letter to redeliver.
    let (receiver, hook_url) = start_receiver().await;
    let hooked = env
        .contract(HireEnv::input("webhooks"), json!({"webhook_url": hook_url}))
        .await;
    let dead_letter = eventually(WAIT, "a dead letter", || async {
        let response = env
            .app
            .get("/v1/webhooks/dead-letters", Some(&env.seeker_key))
            .await;
        let body: Value = response.json().await.ok()?;
        body["dead_letters"][0]["delivery_id"]
            .as_str()
            .map(str::to_owned)
    })
    .await;
    receiver.accept.store(true, Ordering::SeqCst);

    // Offered, paid while the browser watches its page.
    let live = env
        .contract(HireEnv::input("watched live"), json!({}))
        .await;

    // The health loop has probed the worker by now (every 200 ms).
    let worker_id: hiregate_contracts::id::WorkerId = env.worker_id.parse().unwrap();
    eventually(WAIT, "a probe in the health history", || async {
        let stats = env
            .app
            .store
            .worker_stats(
                &worker_id,
                hiregate_store::StatsLimits {
                    failures: 1,
                    rejections: 1,
                    probes: 1,
                },
            )
            .await
            .unwrap();
        (!stats.probes.is_empty()).then_some(())
    })
    .await;

    let mut newest_first = Vec::new();
    for id in [
        &settled, &rejected, &escalated, &flaky, &accepted, &hooked, &live,
    ] {
        let record = env.app.store.get_contract(id).await.unwrap().unwrap();
        newest_first.push((record.created_at, record.contract_id.to_string()));
    }
    newest_first.sort_by(|a, b| b.cmp(a));
    let newest_first: Vec<String> = newest_first.into_iter().map(|(_, id)| id).collect();

    let screenshot_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("console-screenshots");
    let _ = std::fs::remove_dir_all(&screenshot_dir);
    let input = json!({
        "baseUrl": env.app.address,
        "chromium": tools.chromium,
        "screenshotDir": screenshot_dir,
        "seekerKey": env.seeker_key,
        "operatorKey": env.operator_key,
        "adminKey": ADMIN_KEY,
        "workerId": env.worker_id,
        "newestFirst": newest_first,
        "settled": {
            "contractId": settled,
            "eventKinds": env.event_kinds(&settled).await,
            "summary": summary_of(&settled_view),
            "transaction": settled_view["settlement"]["transaction"],
        },
        "live": {"contractId": live},
        "accepted": {"contractId": accepted},
        "rejected": {"contractId": rejected},
        "escalated": {"disputeId": dispute_id, "contractId": escalated},
        // settled, flaky and live before the operator looks (the accepted one's dispute
        // waits for the arbiter).
        // Amounts show with the token's symbol and decimals (from GET /v1/assets), not its
        // address: 4.5 and 1.5 hUSD.
        "earnings": {
            "asset": env.devnet.token().to_checksum(None),
            "amount": (3 * PRICE).to_string(),
            "shown": format!("{} {}", whole_units(U256::from(3 * PRICE), 6), env.devnet.token_symbol()),
        },
        "price": {
            "amount": PRICE.to_string(),
            "shown": format!("{} {}", whole_units(U256::from(PRICE), 6), env.devnet.token_symbol()),
        },
        "flaky": {"contractId": flaky},
        "deadLetter": {"deliveryId": dead_letter},
    });

    let mut driver = Driver::start(&tools, "drive.mjs", &input).await;
    let run = async {
        let mut done = None;
        while let Some(message) = driver.next_message().await {
            if message["step"] == "live_page_open" {
                // The page is open and following the stream: pay now.
                let answer = paid(&env, &live).await;
                assert_eq!(answer.status, 200, "{:?}", answer.body);
            } else if message["done"] == true {
                done = Some(message);
            }
        }
        driver.finish().await;
        done
    };
    // A bound on a hung browser, not a timing assertion: the run takes seconds.
    let done = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the browser run ends");
    let done = done.expect("drive.mjs reports done");
    assert!(done["checks"].as_u64().unwrap() > 30, "{done}");

    // What the clicks did, seen from the API and the chain.
    assert_eq!(env.state(&live).await, "settled");
    // The seeker's claim waits for the arbiter, as the form sent it.
    assert_eq!(env.state(&accepted).await, "disputed");
    let (_, contract) = get(&env, &format!("/v1/contracts/{accepted}"), &env.seeker_key).await;
    assert_eq!(contract["dispute"]["state"], "escalated");
    assert_eq!(
        contract["dispute"]["claim"]["text"],
        "a summary naming the main point"
    );
    assert_eq!(env.state(&escalated).await, "voided");
    eventually(WAIT, "the redelivered webhook", || async {
        (receiver.accepted.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    let screenshots: Vec<PathBuf> = done["screenshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| PathBuf::from(p.as_str().unwrap()))
        .collect();
    assert!(screenshots.len() >= 12, "{screenshots:?}");
    for path in &screenshots {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{}", path.display());
    }
}

/// A seeker hires from the console and pays with a browser wallet, in Chromium
/// (`tools/console/hire.mjs`): discovery, the listing's input schema, examples and reputation,
/// proposals refused by the page's input check (nothing sent) and by the gateway (its failing
/// path shown), then an `exact` contract that a wallet on the wrong chain cannot pay (nothing
/// signed or sent), that a user rejection (EIP-1193 4001) leaves offered, and that the third
/// attempt pays; then an escrowed (`auth-capture`) one. The wallet is an EIP-1193 provider
/// injected before the page's scripts whose `eth_signTypedData_v4` is signed in node by viem with
/// the funded devnet key: the signatures are real, and the chain shows what they paid.
#[tokio::test]
async fn a_seeker_discovers_proposes_and_pays_from_a_browser_wallet_in_chromium() {
    let Some(tools) = browser_tools_or_skip(
        "a_seeker_discovers_proposes_and_pays_from_a_browser_wallet_in_chromium",
    ) else {
        return;
    };
    let EscrowEnv {
        env,
        operator,
        treasury,
    } = escrow_env_with(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        json!(["exact", "auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let name = "Summaries, checked";
    let input_schema = json!({
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": 4000},
            "mode": {"type": "string", "enum": ["ok", "slow"]},
        },
        "additionalProperties": false,
    });
    let examples = json!([
        {"text": "A browser wallet pays for this summary."},
        {"text": "This one is paid into escrow first.", "mode": "ok"},
    ]);
    let (status, listing) = call(
        &env,
        Method::PATCH,
        &format!("/v1/workers/{}", env.worker_id),
        &env.operator_key,
        &json!({
            "name": name,
            "description": "Summarizes a text; every summary is checked against its schema.",
            "input_schema": input_schema,
            "examples": examples,
        }),
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    let store = token_store(&env, operator).await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;

    let screenshot_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("console-hire-screenshots");
    let input = json!({
        "baseUrl": env.app.address,
        "chromium": tools.chromium,
        "screenshotDir": screenshot_dir,
        "seekerKey": env.seeker_key,
        "workerId": env.worker_id,
        "workerName": name,
        "walletKey": env.wallet.to_bytes().to_string(),
        "chainId": env.devnet.chain_id(),
        "network": env.devnet.network(),
        "inputSchema": input_schema,
        "examples": examples,
        "price": {
            "amount": PRICE.to_string(),
            "shown": format!("{} {}", whole_units(U256::from(PRICE), 6), env.devnet.token_symbol()),
        },
    });
    let mut driver = Driver::start(&tools, "hire.mjs", &input).await;
    let run = async {
        let mut done = None;
        while let Some(message) = driver.next_message().await {
            if message["done"] == true {
                done = Some(message);
            }
        }
        driver.finish().await;
        done
    };
    // A bound on a hung browser, not a timing assertion: the run takes seconds.
    let done = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the browser run ends")
        .expect("hire.mjs reports done");
    assert!(done["checks"].as_u64().unwrap() > 40, "{done}");
    let text = |pointer: &str| {
        done.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    };
    let (exact, exact_tx) = (text("/exact/contractId"), text("/exact/transaction"));
    let (escrowed, escrowed_tx) = (text("/escrowed/contractId"), text("/escrowed/transaction"));

    // What the browser's payments did, seen from the store and the chain.
    assert_eq!(env.state(&exact).await, "settled");
    assert_eq!(env.state(&escrowed).await, "settled");
    let fee = price() * U256::from(250) / U256::from(10_000);
    assert_eq!(env.balance(payer).await, payer_before - price() - price());
    assert_eq!(env.balance(env.pay_to).await, price() + price() - fee);
    assert_eq!(env.balance(treasury).await, fee);
    assert_eq!(env.balance(store).await, U256::ZERO);
    let exact_payment = env
        .app
        .store
        .payment_of_contract(&exact)
        .await
        .unwrap()
        .expect("the exact contract's payment");
    assert_eq!(exact_payment.payer, payer);
    assert_eq!(exact_payment.settle_tx.as_deref(), Some(exact_tx.as_str()));
    let exact_tx: B256 = exact_tx.parse().unwrap();
    // The settlement consumed the authorization the wallet signed, and moved the price from the
    // wallet to the worker, once.
    assert_eq!(
        env.devnet
            .authorization_used_transactions(payer, exact_payment.nonce.parse().unwrap())
            .await
            .unwrap(),
        vec![exact_tx]
    );
    assert_eq!(
        env.devnet.transfers(payer, env.pay_to).await.unwrap(),
        vec![(exact_tx, price())]
    );
    let escrowed_payment = env
        .app
        .store
        .payment_of_contract(&escrowed)
        .await
        .unwrap()
        .expect("the escrowed contract's payment");
    assert_eq!(escrowed_payment.payer, payer);
    assert!(escrowed_payment.authorize_tx.is_some());
    assert_eq!(
        escrowed_payment.settle_tx.as_deref(),
        Some(escrowed_tx.as_str())
    );
    // The capture paid the worker its share out of the escrow.
    assert_eq!(
        env.devnet.transfers(store, env.pay_to).await.unwrap(),
        vec![(escrowed_tx.parse::<B256>().unwrap(), price() - fee)]
    );
    // The declined and wrong-chain attempts left no trace but the one payment.
    for contract_id in [&exact, &escrowed] {
        let kinds = env.event_kinds(contract_id).await;
        assert_eq!(
            kinds
                .iter()
                .filter(|k| *k == "settlement_succeeded")
                .count(),
            1,
            "{kinds:?}"
        );
    }
    let (status, report) = get(&env, "/v1/admin/reconcile", ADMIN_KEY).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report:#}");
}

/// A browser wallet hires without an account from the console, in Chromium
/// (`tools/console/wallethire.mjs`), over the listing's stable x402 resource: the page shows the
/// gateway's signed offer, the injected EIP-1193 wallet (viem in node with the funded devnet key)
/// signs the EIP-3009 authorization, and the page shows the verified deliverable, the settlement
/// transaction and the contract followed live with the capability token (long work's 202 until
/// its deliverable is released). A declined signature
/// sends nothing, a signature over other data is refused (402) and moves nothing, and a
/// deliverable that fails verification is shown as rejected, withheld and unpaid.
#[tokio::test]
async fn a_wallet_hires_without_an_account_from_the_console_in_chromium() {
    let Some(tools) =
        browser_tools_or_skip("a_wallet_hires_without_an_account_from_the_console_in_chromium")
    else {
        return;
    };
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Faulty, 4, "").await;
    let name = "Summaries for any wallet";
    let (status, listing) = call(
        &env,
        Method::PATCH,
        &format!("/v1/workers/{}", env.worker_id),
        &env.operator_key,
        &json!({
            "name": name,
            "description": "Summarizes a text; paid per call from a browser wallet.",
            "input_schema": {
                "type": "object",
                "required": ["text"],
                "properties": {
                    "text": {"type": "string", "minLength": 1, "maxLength": 4000},
                    "mode": {"type": "string", "enum": ["ok", "pending", "invalid"]},
                    "delay_ms": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": false,
            },
            "examples": [{"text": "A wallet pays for this summary.", "mode": "ok"}],
        }),
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    let payer = env.wallet.address();
    let (payer_before, worker_before) = (env.balance(payer).await, env.balance(env.pay_to).await);

    let screenshot_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("console-wallet-hire-screenshots");
    let input = json!({
        "baseUrl": env.app.address,
        "chromium": tools.chromium,
        "screenshotDir": screenshot_dir,
        "workerId": env.worker_id,
        "workerName": name,
        "walletKey": env.wallet.to_bytes().to_string(),
        "chainId": env.devnet.chain_id(),
        "network": env.devnet.network(),
        "task": "summarize",
        "good": {"text": "Paid from a browser wallet, with no account.", "mode": "ok"},
        "slow": {"text": "Long work, paid from a browser wallet.", "mode": "pending", "delay_ms": 1500},
        "bad": {"text": "x", "mode": "invalid"},
        "price": {
            "amount": PRICE.to_string(),
            "shown": format!("{} {}", whole_units(U256::from(PRICE), 6), env.devnet.token_symbol()),
        },
    });
    let done = wallet_hire_run(&tools, &input).await;
    assert!(done["checks"].as_u64().unwrap() > 30, "{done}");
    let text = |pointer: &str| {
        done.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap()
            .to_owned()
    };
    let (paid, paid_tx) = (text("/paid/contractId"), text("/paid/transaction"));
    let (pending, pending_tx) = (text("/pending/contractId"), text("/pending/transaction"));
    let rejected = text("/rejected/contractId");

    // The chain: the price moved once, from the wallet to the worker, by the transaction the
    // page showed, consuming the authorization the wallet signed; the rejected hire moved nothing.
    assert_eq!(env.state(&paid).await, "settled");
    assert_eq!(env.state(&pending).await, "settled");
    assert_eq!(env.state(&rejected).await, "rejected");
    let two = U256::from(2 * PRICE);
    assert_eq!(env.balance(payer).await, payer_before - two);
    assert_eq!(env.balance(env.pay_to).await, worker_before + two);
    let paid_tx: B256 = paid_tx.parse().unwrap();
    assert_eq!(
        env.devnet.transfers(payer, env.pay_to).await.unwrap(),
        vec![
            (paid_tx, U256::from(PRICE)),
            (pending_tx.parse().unwrap(), U256::from(PRICE))
        ]
    );
    let paid_nonce: B256 = text("/paid/nonce").parse().unwrap();
    assert_eq!(
        env.devnet
            .authorization_used_transactions(payer, paid_nonce)
            .await
            .unwrap(),
        vec![paid_tx]
    );
    let rejected_nonce: B256 = text("/rejected/nonce").parse().unwrap();
    assert!(
        !env.devnet
            .authorization_state(payer, rejected_nonce)
            .await
            .unwrap(),
        "the rejected hire's authorization was never used"
    );
    let payment = env
        .app
        .store
        .payment_of_contract(&paid)
        .await
        .unwrap()
        .expect("the paid contract's payment");
    assert_eq!(payment.payer, payer);
    assert_eq!(
        payment.settle_tx.as_deref(),
        Some(text("/paid/transaction").as_str())
    );
    let kinds = env.event_kinds(&paid).await;
    assert_eq!(
        kinds
            .iter()
            .filter(|k| *k == "settlement_succeeded")
            .count(),
        1,
        "{kinds:?}"
    );
    let (status, report) = get(&env, "/v1/admin/reconcile", ADMIN_KEY).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report:#}");
}

/// Run `tools/console/wallethire.mjs` with `input`; its final `done` message.
async fn wallet_hire_run(tools: &BrowserTools, input: &Value) -> Value {
    let mut driver = Driver::start(tools, "wallethire.mjs", input).await;
    let run = async {
        let mut done = None;
        while let Some(message) = driver.next_message().await {
            if message["done"] == true {
                done = Some(message);
            }
        }
        driver.finish().await;
        done
    };
    // A bound on a hung browser, not a timing assertion: the run takes seconds.
    tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the browser run ends")
        .expect("wallethire.mjs reports done")
}

/// The wallet hire of an escrowed (`auth-capture`) listing from the console, no account: the
/// offer is an escrow's, the wallet signs the ERC-3009 `ReceiveWithAuthorization` into it, and
/// the capture pays the worker its share and the treasury the fee, as the chain shows.
#[tokio::test]
async fn a_wallet_hires_an_escrowed_listing_without_an_account_from_the_console_in_chromium() {
    let Some(tools) = browser_tools_or_skip(
        "a_wallet_hires_an_escrowed_listing_without_an_account_from_the_console_in_chromium",
    ) else {
        return;
    };
    let EscrowEnv {
        env,
        operator,
        treasury,
    } = escrow_env_with(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        json!(["auth-capture"]),
        json!({"fee_bps": 250}),
    )
    .await;
    let name = "Escrowed summaries";
    let (status, listing) = call(
        &env,
        Method::PATCH,
        &format!("/v1/workers/{}", env.worker_id),
        &env.operator_key,
        &json!({"name": name}),
    )
    .await;
    assert_eq!(status, 200, "{listing}");
    let store = token_store(&env, operator).await;
    let payer = env.wallet.address();
    let payer_before = env.balance(payer).await;
    let screenshot_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
        .join("console-wallet-hire-screenshots");
    let input = json!({
        "baseUrl": env.app.address,
        "chromium": tools.chromium,
        "screenshotDir": screenshot_dir,
        "workerId": env.worker_id,
        "workerName": name,
        "walletKey": env.wallet.to_bytes().to_string(),
        "chainId": env.devnet.chain_id(),
        "network": env.devnet.network(),
        "task": "summarize",
        "scheme": "auth-capture",
        "good": {"text": "Held in escrow, released once verified.", "mode": "ok"},
        "price": {
            "amount": PRICE.to_string(),
            "shown": format!("{} {}", whole_units(U256::from(PRICE), 6), env.devnet.token_symbol()),
        },
    });
    let done = wallet_hire_run(&tools, &input).await;
    assert!(done["checks"].as_u64().unwrap() > 8, "{done}");
    let contract_id = done["paid"]["contractId"].as_str().unwrap();
    let capture: B256 = done["paid"]["transaction"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(env.state(contract_id).await, "settled");
    let fee = price() * U256::from(250) / U256::from(10_000);
    assert_eq!(env.balance(payer).await, payer_before - price());
    assert_eq!(env.balance(env.pay_to).await, price() - fee);
    assert_eq!(env.balance(treasury).await, fee);
    assert_eq!(env.balance(store).await, U256::ZERO);
    assert_eq!(
        env.devnet.transfers(store, env.pay_to).await.unwrap(),
        vec![(capture, price() - fee)]
    );
    let payment = env
        .app
        .store
        .payment_of_contract(contract_id)
        .await
        .unwrap()
        .expect("the escrowed contract's payment");
    assert_eq!(payment.payer, payer);
    assert!(payment.authorize_tx.is_some());
    let (status, report) = get(&env, "/v1/admin/reconcile", ADMIN_KEY).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ok"], true, "{report:#}");
}

async fn call(env: &HireEnv, method: Method, path: &str, key: &str, body: &Value) -> (u16, Value) {
    let response = env.app.send_json(method, path, Some(key), body).await;
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn get(env: &HireEnv, path: &str, key: &str) -> (u16, Value) {
    let response = env.app.get(path, Some(key)).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The read APIs the console is built on, with the same answers on both backends.
async fn the_console_read_apis(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Faulty, 3, SETTINGS).await;
    let settled = env.contract(HireEnv::input("one"), json!({})).await;
    assert_eq!(paid(&env, &settled).await.status, 200);
    let rejected = env
        .contract(json!({"text": "bad", "mode": "invalid"}), json!({}))
        .await;
    assert_eq!(paid(&env, &rejected).await.status, 422);
    let offered = env.contract(HireEnv::input("three"), json!({})).await;

    // GET /v1/contracts: newest first, filters, cursor pages, errors.
    let (status, page) = get(&env, "/v1/contracts", &env.seeker_key).await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["contracts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["contract_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [offered.as_str(), rejected.as_str(), settled.as_str()]);
    assert_eq!(page["contracts"][2]["price"]["amount"], PRICE.to_string());
    assert!(page["next_cursor"].is_null());
    let (_, first) = get(&env, "/v1/contracts?limit=2", &env.seeker_key).await;
    assert_eq!(first["contracts"].as_array().unwrap().len(), 2);
    let cursor = first["next_cursor"].as_str().expect("a second page");
    let (_, second) = get(
        &env,
        &format!("/v1/contracts?limit=2&cursor={cursor}"),
        &env.seeker_key,
    )
    .await;
    assert_eq!(second["contracts"][0]["contract_id"], settled.as_str());
    assert_eq!(second["contracts"].as_array().unwrap().len(), 1);
    let (_, only) = get(&env, "/v1/contracts?state=rejected", &env.seeker_key).await;
    assert_eq!(only["contracts"].as_array().unwrap().len(), 1);
    assert_eq!(only["contracts"][0]["contract_id"], rejected.as_str());
    let (_, by_worker) = get(
        &env,
        &format!("/v1/contracts?worker_id={}", env.worker_id),
        &env.operator_key,
    )
    .await;
    assert_eq!(by_worker["contracts"].as_array().unwrap().len(), 3);
    let (stranger, _) = env.app.create_key("seeker").await;
    let (_, none) = get(&env, "/v1/contracts", &stranger).await;
    assert_eq!(none["contracts"], json!([]));
    for (query, code) in [
        ("state=paying", "invalid_filter"),
        ("worker_id=ctr_1", "invalid_filter"),
        ("limit=0", "invalid_filter"),
        ("cursor=bm90LWEtY3Vyc29y", "invalid_cursor"),
    ] {
        let (status, body) = get(&env, &format!("/v1/contracts?{query}"), &env.seeker_key).await;
        assert_eq!(status, 422, "{query}: {body}");
        assert_eq!(body["error"]["code"], code, "{query}");
    }

    // A worker failure, retried under the same payment: a failed attempt, then a settlement.
    let flaky_input = json!({"text": "retry me", "mode": "flaky"});
    let flaky = env.contract(flaky_input.clone(), json!({})).await;
    assert_eq!(paid(&env, &flaky).await.status, 502);
    assert_eq!(
        env.execute(&flaky, None, Some(&flaky_input)).await.status,
        200
    );

    // The operator's workers and one worker's stats.
    let (status, mine) = get(&env, "/v1/operator/workers", &env.operator_key).await;
    assert_eq!(status, 200, "{mine}");
    assert_eq!(mine["workers"][0]["id"], env.worker_id.as_str());
    assert_eq!(
        get(&env, "/v1/operator/workers", &env.seeker_key).await.0,
        403
    );
    let stats_path = format!("/v1/workers/{}/stats", env.worker_id);
    let stats = eventually(WAIT, "a probe in the stats", || async {
        let (_, stats) = get(&env, &stats_path, &env.operator_key).await;
        (!stats["health_history"].as_array()?.is_empty()).then_some(stats)
    })
    .await;
    assert_eq!(stats["max_parallel"], 3);
    assert_eq!(stats["in_flight"], 0);
    assert_eq!(stats["contracts_by_state"]["settled"], 2);
    assert_eq!(stats["contracts_by_state"]["rejected"], 1);
    assert_eq!(stats["contracts_by_state"]["offered"], 1);
    assert_eq!(
        stats["earnings"],
        json!([{
            "network": env.devnet.network(),
            "asset": env.devnet.token().to_checksum(None),
            "amount": (2 * PRICE).to_string(),
            "payments": 2,
        }])
    );
    // The key to those amounts, for anyone: the listing's token with its symbol and decimals
    // (read from the chain, the test's token not being configured).
    let assets = env.app.get("/v1/assets", None).await;
    assert_eq!(assets.status(), 200);
    let assets: Value = assets.json().await.unwrap();
    assert_eq!(
        assets["assets"],
        json!([{
            "network": env.devnet.network(),
            "address": env.devnet.token().to_checksum(None),
            "symbol": env.devnet.token_symbol(),
            "decimals": 6,
            "name": env.devnet.token_name(),
            "version": env.devnet.token_version(),
        }])
    );
    assert_eq!(stats["recent_failures"][0]["contract_id"], flaky.as_str());
    assert_eq!(stats["recent_failures"][0]["attempt_no"], 1);
    assert_eq!(stats["recent_failures"][0]["state"], "failed");
    assert_eq!(stats["recent_failures"][0]["http_status"], 200);
    assert_eq!(
        stats["recent_rejections"][0]["contract_id"],
        rejected.as_str()
    );
    assert_eq!(
        stats["recent_rejections"][0]["verification_status"],
        "failed"
    );
    assert!(
        !stats["recent_rejections"][0]["details"]["schema_violations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(stats["health_history"][0]["passed"], true);
    assert_eq!(stats["health_history"][0]["health"], "healthy");
    let (other_operator, _) = env.app.create_key("operator").await;
    assert_eq!(get(&env, &stats_path, &other_operator).await.0, 404);
    assert_eq!(get(&env, &stats_path, &env.seeker_key).await.0, 403);

    // The arbiter's queue and both parties' statements.
    let (status, opened) = call(
        &env,
        Method::POST,
        &format!("/v1/contracts/{rejected}/disputes"),
        &env.operator_key,
        &json!({"reason": "fine as it is"}),
    )
    .await;
    assert_eq!(status, 201, "{opened}");
    assert_eq!(opened["state"], "escalated");
    let dispute_id = opened["dispute_id"].as_str().unwrap();
    let (status, queue) = get(&env, "/v1/disputes?state=escalated", ADMIN_KEY).await;
    assert_eq!(status, 200, "{queue}");
    assert_eq!(queue["disputes"][0]["dispute"]["dispute_id"], dispute_id);
    let contract = &queue["disputes"][0]["contract"];
    assert_eq!(contract["contract_id"], rejected.as_str());
    assert!(
        contract["deliverable"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(contract["verification"]["verification_status"], "failed");
    assert_eq!(get(&env, "/v1/disputes", &env.seeker_key).await.0, 403);
    let (status, body) = get(&env, "/v1/disputes?state=lost", ADMIN_KEY).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_query"))
    );

    let answer_path = format!("/v1/disputes/{dispute_id}/response");
    let statement = json!({"statement": "the summary is not a string"});
    let (status, body) = call(
        &env,
        Method::POST,
        &answer_path,
        &env.operator_key,
        &statement,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("dispute_opened_by_you"))
    );
    assert_eq!(
        call(&env, Method::POST, &answer_path, &stranger, &statement)
            .await
            .0,
        404
    );
    let (status, body) = call(
        &env,
        Method::POST,
        &answer_path,
        &env.seeker_key,
        &json!({"statement": " "}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    let (status, answered) = call(
        &env,
        Method::POST,
        &answer_path,
        &env.seeker_key,
        &statement,
    )
    .await;
    assert_eq!(status, 200, "{answered}");
    assert_eq!(
        answered["response"]["statement"],
        "the summary is not a string"
    );
    assert!(
        answered["response"]["by"]
            .as_str()
            .unwrap()
            .starts_with("seeker:")
    );
    let (status, body) = call(
        &env,
        Method::POST,
        &answer_path,
        &env.seeker_key,
        &statement,
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("dispute_already_answered"))
    );
    assert!(
        env.event_kinds(&rejected)
            .await
            .contains(&"dispute_answered".to_owned())
    );
    let (_, queue) = get(&env, "/v1/disputes?state=escalated", ADMIN_KEY).await;
    assert_eq!(
        queue["disputes"][0]["dispute"]["response"]["statement"],
        "the summary is not a string"
    );
}

#[tokio::test]
async fn the_console_read_apis_on_sqlite() {
    the_console_read_apis(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn the_console_read_apis_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    the_console_read_apis(database).await;
}
