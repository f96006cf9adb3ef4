//! SW4RM semantics of the paid gateway over real parts (anvil chain, devnet token, embedded
//! facilitator, worker-sdk workers): duplicate executes marked as such, a bounded queue per
//! worker beyond `max_parallel`, one correlation id from proposal to webhook, late worker
//! reports recorded without changing anything.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use alloy::primitives::U256;
use axum::{Router, body::Bytes, extract::State, http::HeaderMap, routing::post};
use chrono::Utc;
use hiregate_worker_sdk::{
    GatewayKeys, Output, TaskContext, TaskOutcome, WebhookSecret, example_workers::echo_builder,
};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    helpers::{TestDatabase, eventually},
    hire_env::{
        Answer, HireEnv, PRICE, WorkerKind, answer, hire_env, hire_listing, serve_worker,
        start_worker,
    },
};

const WAIT: Duration = Duration::from_secs(30);

fn price() -> U256 {
    U256::from(PRICE)
}

async fn paid_execute(env: &HireEnv, contract_id: &str) -> Answer {
    let payment = env.pay(&env.challenge(contract_id).await).await;
    env.execute(contract_id, Some(&payment), None).await
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

async fn wait_for_state(env: &HireEnv, contract_id: &str, wanted: &str) {
    eventually(WAIT, &format!("contract {wanted}"), || async {
        (env.state(contract_id).await == wanted).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_repeated_execute_is_marked_duplicate_and_linked_to_the_original_attempt() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, "").await;
    let contract_id = env.contract(HireEnv::input("once"), json!({})).await;
    let before = env.balances().await;
    let first = paid_execute(&env, &contract_id).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert!(first.body.get("duplicate").is_none(), "{:?}", first.body);
    assert!(first.header("x-duplicate").is_none());

    let again = env.execute(&contract_id, None, None).await;
    assert_eq!(again.status, 200, "{:?}", again.body);
    assert_eq!(again.body["duplicate"], true);
    assert_eq!(again.header("x-duplicate"), Some("true"));
    let original = &again.body["original"];
    assert_eq!(original["status"], "DUPLICATE_DETECTED");
    assert_eq!(original["original_status"], "settled");
    assert!(original["cached_at"].is_string());
    let attempt_id = view(&env, &contract_id).await["attempts"][0]["attempt_id"].clone();
    assert!(attempt_id.is_string());
    assert_eq!(original["original_attempt_id"], attempt_id);
    // The original answer, not a new run: same deliverable, same PAYMENT-RESPONSE.
    assert_eq!(again.body["deliverable"], first.body["deliverable"]);
    assert_eq!(
        again.payment_response().transaction,
        first.payment_response().transaction
    );
    assert_eq!(env.worker.executions(), 1);
    let after = env.balances().await;
    assert_eq!(after.0, before.0 - price(), "charged once");
    assert_eq!(after.1, before.1 + price());
}

/// Depth-2 queue behind a worker of `max_parallel` 1; the dispatcher looks every 50 ms. A
/// paid execute holds its request for a slot at most 300 ms: the 1.5 s hire ahead is a long
/// wait, answered 202 `queued`.
const QUEUE_OF_TWO: &str = "[contracts]\nworker_queue_depth = 2\njobs_interval_ms = 50\n\
                            queue_hold_max_ms = 300\n";

async fn a_full_worker_queues_then_refuses_and_the_queue_drains(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Faulty, 1, QUEUE_OF_TWO).await;
    let slow = env
        .contract(
            json!({"text": "slow", "mode": "slow", "delay_ms": 1500}),
            json!({}),
        )
        .await;
    let queued = env.contract(HireEnv::input("queued"), json!({})).await;
    let cancelled = env.contract(HireEnv::input("cancelled"), json!({})).await;
    let refused = env.contract(HireEnv::input("refused"), json!({})).await;
    let mut payments = Vec::new();
    for id in [&slow, &queued, &cancelled, &refused] {
        payments.push(env.pay(&env.challenge(id).await).await);
    }
    let before = env.balances().await;

    let running = env.execute(&slow, Some(&payments[0]), None);
    let beyond = async {
        eventually(
            Duration::from_secs(5),
            "the slow contract executing",
            || async { (env.state(&slow).await == "executing").then_some(()) },
        )
        .await;
        let first = env.execute(&queued, Some(&payments[1]), None).await;
        let second = env.execute(&cancelled, Some(&payments[2]), None).await;
        let third = env.execute(&refused, Some(&payments[3]), None).await;
        // Cancelled while the slow hire still holds the slot: once it frees, the dispatcher
        // may run the whole queue before a later cancel arrives.
        let cancel = env
            .app
            .client
            .post(format!(
                "{}/v1/contracts/{cancelled}/cancel",
                env.app.address
            ))
            .bearer_auth(&env.seeker_key)
            .send()
            .await
            .unwrap()
            .status();
        (first, second, third, cancel)
    };
    let (done, (first, second, third, cancel)) = tokio::join!(running, beyond);
    assert_eq!(done.status, 200, "{:?}", done.body);

    // Beyond max_parallel: paid, queued in order, with a position and an ETA.
    assert_eq!(first.status, 202, "{:?}", first.body);
    assert_eq!(first.body["status"], "queued");
    assert_eq!(first.body["state"], "paid");
    assert_eq!(first.body["queued"]["position"], 1);
    assert_eq!(first.body["queued"]["queue_depth"], 2);
    assert_eq!(first.body["queued"]["max_parallel"], 1);
    assert!(first.body["queued"]["eta_s"].as_u64().unwrap() >= 5);
    assert!(first.header("retry-after").is_some());
    // Where a standard x402 client that cannot wait finds the result.
    assert_eq!(
        first.header("location"),
        Some(format!("{}/v1/contracts/{queued}", env.app.address).as_str())
    );
    assert_eq!(second.status, 202, "{:?}", second.body);
    assert_eq!(second.body["queued"]["position"], 2);
    // Past the queue: 429 before anyone pays.
    assert_eq!(third.status, 429, "{:?}", third.body);
    assert_eq!(third.code(), "too_many_requests");
    assert_eq!(third.body["error"]["details"]["queue_depth"], 2);
    assert_eq!(third.body["error"]["details"]["queued"], 2);
    assert_eq!(
        env.state(&refused).await,
        "offered",
        "not paid past the queue"
    );

    // A queued hire cancelled in the queue is not charged.
    assert_eq!(cancel, 200);
    assert_eq!(env.state(&cancelled).await, "cancelled");

    // The slot freed: the dispatcher forwards the queued hire, which settles.
    wait_for_state(&env, &queued, "settled").await;
    let kinds = env.event_kinds(&queued).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "queued").count(),
        1,
        "{kinds:?}"
    );
    assert!(view(&env, &queued).await["queued_at"].is_null());
    let result = env.execute(&queued, None, None).await;
    assert_eq!(result.status, 200, "{:?}", result.body);
    assert_eq!(result.body["duplicate"], true);
    assert_eq!(
        env.worker.executions(),
        2,
        "slow and queued ran, nothing else"
    );

    let after = env.balances().await;
    let two = price() * U256::from(2);
    assert_eq!(
        after.0,
        before.0 - two,
        "slow and queued charged, nothing else"
    );
    assert_eq!(after.1, before.1 + two);
}

#[tokio::test]
async fn a_full_worker_queues_then_refuses_and_the_queue_drains_on_sqlite() {
    a_full_worker_queues_then_refuses_and_the_queue_drains(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_full_worker_queues_then_refuses_and_the_queue_drains_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_full_worker_queues_then_refuses_and_the_queue_drains(database).await;
}

/// 64 seekers pay at once for a worker of `max_parallel` 8 that answers at once: each waits
/// for a slot within its request (the wait is milliseconds, the SLA seconds) and gets its
/// result with `PAYMENT-RESPONSE`; none is answered 202 `queued`. Every hire is charged once
/// and the ledger reconciles.
async fn a_momentarily_full_worker_answers_every_paid_hire(database: TestDatabase) {
    const SEEKERS: usize = 64;
    let env = hire_env(
        database,
        WorkerKind::Echo,
        8,
        "[contracts]\nworker_queue_depth = 64\n",
    )
    .await;
    let mut paid = Vec::new();
    for n in 0..SEEKERS {
        let id = env
            .contract(HireEnv::input(&format!("burst {n}")), json!({}))
            .await;
        let payment = env.pay(&env.challenge(&id).await).await;
        paid.push((id, payment));
    }
    let before = env.balances().await;
    let answers = futures::future::join_all(
        paid.iter()
            .map(|(id, payment)| env.execute(id, Some(payment), None)),
    )
    .await;
    for ((id, _), answer) in paid.iter().zip(&answers) {
        assert_eq!(answer.status, 200, "{id}: {:?}", answer.body);
        assert_eq!(answer.body["state"], "settled", "{id}");
        assert!(answer.payment_response().success, "{id}");
        assert!(answer.header("location").is_none(), "{id}");
    }
    let mut held = 0;
    for (id, _) in &paid {
        if env
            .event_kinds(id)
            .await
            .iter()
            .any(|kind| kind == "queued")
        {
            held += 1;
        }
    }
    assert!(
        held > 0,
        "the burst did find the worker full (else this tests nothing)"
    );
    assert_eq!(env.worker.executions(), SEEKERS, "each hire ran once");

    let after = env.balances().await;
    let all = price() * U256::from(SEEKERS);
    assert_eq!(after.0, before.0 - all, "each seeker charged once");
    assert_eq!(after.1, before.1 + all);
    let report: Value = env
        .app
        .get("/v1/admin/reconcile", Some(crate::helpers::ADMIN_KEY))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
    // One transfer per hire on chain (settlements of one moment share a Multicall3
    // transaction, so hashes repeat; the transfers do not).
    assert_eq!(
        report["totals"][0]["chain"]["count"],
        json!(SEEKERS),
        "{report:#}"
    );
    assert_eq!(
        report["matched"].as_array().map(Vec::len),
        Some(SEEKERS),
        "{report:#}"
    );
}

#[tokio::test]
async fn a_momentarily_full_worker_answers_every_paid_hire_on_sqlite() {
    a_momentarily_full_worker_answers_every_paid_hire(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_momentarily_full_worker_answers_every_paid_hire_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    a_momentarily_full_worker_answers_every_paid_hire(database).await;
}

/// Everything the webhook receiver got.
type Received = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn receive(State(received): State<Received>, headers: HeaderMap, body: Bytes) {
    received.lock().unwrap().push((headers, body));
}

/// Webhooks delivered within 50 ms.
const FAST_WEBHOOKS: &str = "[webhooks]\npoll_interval_ms = 50\n";

#[tokio::test]
async fn one_correlation_id_follows_the_hire_to_the_worker_and_the_webhook() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, FAST_WEBHOOKS).await;
    // A worker that remembers the correlation id it was sent.
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let jwks = format!("{}/.well-known/jwks.json", env.app.address)
        .parse()
        .unwrap();
    let remember = Arc::clone(&seen);
    let worker = echo_builder()
        .gateway_keys(GatewayKeys::remote(jwks))
        .build(move |ctx: TaskContext, _input: Value| {
            remember
                .lock()
                .unwrap()
                .push(ctx.correlation_id().map(str::to_owned));
            async move {
                TaskOutcome::Completed {
                    output: Output::Json {
                        content: json!({"summary": "traced", "confidence": 0.9}),
                    },
                    metadata: None,
                }
            }
        })
        .unwrap();
    env.worker = serve_worker(worker, SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&env.worker.endpoint, env.pay_to, &env.devnet, 2),
        )
        .await;
    assert_eq!(response.status(), 201);
    env.worker_id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hooks", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let router = Router::new()
        .route("/hooks", post(receive))
        .with_state(Arc::clone(&received));
    let stop = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .unwrap();
    });

    let propose = |correlation: &'static str| {
        let request = env
            .app
            .client
            .post(format!("{}/v1/contracts", env.app.address))
            .bearer_auth(&env.seeker_key)
            .header("X-Correlation-ID", correlation)
            .json(&json!({
                "worker_id": env.worker_id,
                "task_type": "summarize",
                "input": {"text": format!("trace {correlation}")},
                "sla": {"max_latency_ms": 5000},
                "webhook_url": hook_url,
            }));
        async move { answer(request.send().await.unwrap()).await }
    };
    // A malformed id is refused and creates nothing.
    let bad = propose("no spaces allowed").await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.code(), "invalid_correlation_id");

    let created = propose("seeker-trace:42").await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    assert_eq!(created.header("x-correlation-id"), Some("seeker-trace:42"));
    assert_eq!(created.body["correlation_id"], "seeker-trace:42");
    let contract_id = created.body["contract_id"].as_str().unwrap().to_owned();
    let paid = paid_execute(&env, &contract_id).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(paid.header("x-correlation-id"), Some("seeker-trace:42"));

    assert_eq!(
        seen.lock().unwrap().clone(),
        [Some("seeker-trace:42".to_owned())],
        "the worker got the hire's correlation id"
    );
    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    assert!(events.len() >= 5);
    assert!(
        events.iter().all(|e| e.correlation_id == "seeker-trace:42"),
        "{:?}",
        events
            .iter()
            .map(|e| (&e.kind, &e.correlation_id))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        view(&env, &contract_id).await["correlation_id"],
        "seeker-trace:42"
    );
    let hooks = eventually(WAIT, "the settlement webhook", || async {
        let hooks = received.lock().unwrap().clone();
        hooks
            .iter()
            .any(|(_, body)| {
                serde_json::from_slice::<Value>(body).unwrap()["type"]
                    == "contract.settlement_succeeded"
            })
            .then_some(hooks)
    })
    .await;
    for (headers, body) in &hooks {
        assert_eq!(headers["x-correlation-id"], "seeker-trace:42");
        let body: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(body["correlation_id"], "seeker-trace:42");
    }

    // Without the header the gateway picks one, and it sticks as well.
    let plain = env.contract(HireEnv::input("untraced"), json!({})).await;
    let generated = view(&env, &plain).await["correlation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(generated.starts_with("cor_"), "{generated}");
    let answer = paid_execute(&env, &plain).await;
    assert_eq!(answer.header("x-correlation-id"), Some(generated.as_str()));
    shutdown.cancel();
}

#[tokio::test]
async fn a_late_callback_is_recorded_and_changes_nothing() {
    // Job runner every 50 ms, polls every 100-400 ms: the worker stays pending past the SLA.
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        4,
        "[contracts]\npoll_interval_ms = 100\npoll_max_interval_ms = 400\njobs_interval_ms = 50\n",
    )
    .await;
    // A listing of its own, to know its callback secret.
    let worker = start_worker(WorkerKind::Faulty, &env.app.address).await;
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&worker.endpoint, env.pay_to, &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201);
    let listing: Value = response.json().await.unwrap();
    let secret: WebhookSecret = listing["callback_secret"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let body = json!({
        "worker_id": listing["id"],
        "task_type": "summarize",
        "input": {"text": "too late", "mode": "pending", "delay_ms": 60_000},
        "sla": {"max_latency_ms": 1000},
        "retry_policy": {"max_attempts": 1},
    });
    let created = env
        .app
        .send_json(Method::POST, "/v1/contracts", Some(&env.seeker_key), &body)
        .await;
    assert_eq!(created.status(), 201);
    let contract_id = created.json::<Value>().await.unwrap()["contract_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let before = env.balances().await;
    let pending = paid_execute(&env, &contract_id).await;
    assert_eq!(pending.status, 202, "{:?}", pending.body);
    let task_id = view(&env, &contract_id).await["attempts"][0]["worker_task_id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for_state(&env, &contract_id, "failed").await;
    let failed_events = env.event_kinds(&contract_id).await;

    // The worker's completion arrives after the SLA ended the attempt.
    let report = serde_json::to_vec(&json!({
        "event": "task_completed",
        "status": "completed",
        "contract_id": contract_id,
        "task_id": task_id,
        "output": {"type": "json", "content": {"summary": "too late", "confidence": 0.9}},
    }))
    .unwrap();
    let url = format!("{}/v1/callbacks/{contract_id}", env.app.address);
    let send = |id: &str| {
        let request = env
            .app
            .client
            .post(&url)
            .headers(secret.sign_headers(id, Utc::now(), &report).unwrap())
            .header("content-type", "application/json")
            .body(report.clone());
        async move { answer(request.send().await.unwrap()).await }
    };
    let late = send("cb_late").await;
    assert_eq!(late.status, 409, "{:?}", late.body);
    assert_eq!(late.code(), "contract_not_pending");

    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    // What came after the failure: this report's record, and possibly the worker's own late
    // word on the task it was still holding (sent whenever its run ends, so it may land before
    // or after the snapshot). Neither may move the contract.
    let later = &events[failed_events.len()..];
    assert!(
        later.iter().all(|event| event.to_state.is_none()),
        "nothing after the failure transitions: {later:?}"
    );
    let records: Vec<_> = later
        .iter()
        .filter(|event| {
            event.kind.as_str() == "late_result" && event.details["reported_status"] == "completed"
        })
        .collect();
    assert_eq!(records.len(), 1, "one event records this report: {later:?}");
    let recorded = records[0];
    assert_eq!(recorded.kind.as_str(), "late_result");
    assert_eq!(recorded.details["reported_status"], "completed");
    assert_eq!(recorded.details["task_id"], task_id);
    assert_eq!(recorded.details["contract_state"], "failed");
    assert_eq!(recorded.details["attempt_state"], "timed_out");
    assert_eq!(recorded.details["applied"], false);
    assert!(recorded.to_state.is_none(), "no transition");
    // Recorded once: the same report again is a replay.
    let replayed = send("cb_late").await;
    assert_eq!(replayed.code(), "callback_replayed");

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(env.state(&contract_id).await, "failed");
    assert_eq!(env.balances().await, before, "no money moved");
    assert!(view(&env, &contract_id).await["deliverable"].is_null());
}

#[tokio::test]
async fn a_queued_hire_survives_a_gateway_restart_and_runs_when_the_slot_frees() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/hiregate.db", dir.path().display());
    // The signing key outlives the instance (the worker keeps trusting its tokens); should the
    // slow attempt die with it, the next instance takes it over 300 ms after its SLA. Executes
    // hold for a slot at most 300 ms: the queued hire is answered 202 behind the 1.5 s one.
    let settings = format!(
        "[signing_key]\npath = \"{}\"\n[contracts]\nworker_queue_depth = 2\n\
         jobs_interval_ms = 50\nrecovery_grace_ms = 300\nqueue_hold_max_ms = 300\n",
        dir.path().join("gateway-key.json").display()
    );
    let devnet = hiregate_payments::devnet::Devnet::start()
        .await
        .expect("anvil devnet starts");
    let env = crate::hire_env::hire_env_on(
        devnet,
        TestDatabase::Shared(url.clone()),
        WorkerKind::Faulty,
        1,
        &settings,
    )
    .await;
    let slow = env
        .contract(
            json!({"text": "slow", "mode": "slow", "delay_ms": 1500}),
            json!({"sla": {"max_latency_ms": 3000}}),
        )
        .await;
    let queued = env.contract(HireEnv::input("queued"), json!({})).await;
    let slow_payment = env.pay(&env.challenge(&slow).await).await;
    let queued_payment = env.pay(&env.challenge(&queued).await).await;
    let before = env.balances().await;
    // The slow hire's caller may lose its answer when the instance goes away.
    let request = env
        .app
        .client
        .post(format!("{}/v1/contracts/{slow}/execute", env.app.address))
        .bearer_auth(&env.seeker_key)
        .header("PAYMENT-SIGNATURE", slow_payment);
    let lost = tokio::spawn(async move { request.send().await });
    eventually(
        Duration::from_secs(5),
        "the slow contract executing",
        || async { (env.state(&slow).await == "executing").then_some(()) },
    )
    .await;
    let waiting = env.execute(&queued, Some(&queued_payment), None).await;
    assert_eq!(waiting.status, 202, "{:?}", waiting.body);
    assert_eq!(waiting.body["status"], "queued");

    // The instance that queued the hire stops (its job runner with it); another one starts on
    // the same database and knows the queue from there alone.
    let HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker,
        worker_id,
        pay_to,
        wallet,
    } = env;
    drop(app);
    let _ = lost.await;
    let app = crate::helpers::spawn_app_on(
        TestDatabase::Shared(url),
        &crate::hire_env::chain_settings(&devnet, &settings),
    )
    .await;
    let env = HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker,
        worker_id,
        pay_to,
        wallet,
    };
    // Once the slow hire is done, the freed slot goes to the queued hire.
    wait_for_state(&env, &slow, "settled").await;
    wait_for_state(&env, &queued, "settled").await;
    assert_eq!(env.worker.executions(), 2, "each hire ran once");
    let after = env.balances().await;
    let two = price() * U256::from(2);
    assert_eq!(after.0, before.0 - two);
    assert_eq!(after.1, before.1 + two);
}
