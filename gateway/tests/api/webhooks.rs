//! Seeker webhooks over real parts: a paid hire (anvil, embedded facilitator, worker-sdk
//! worker) whose contract names a webhook URL served by a real in-test axum receiver on
//! 127.0.0.1, signatures checked with the worker-sdk Standard Webhooks verifier.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU16, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    response::IntoResponse,
    routing::post,
};
use hiregate_worker_sdk::WebhookSecret;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::{
    helpers::{TestDatabase, eventually},
    hire_env::{HireEnv, WorkerKind, hire_env},
};

/// Short retry timing so a whole retry cycle takes well under a second.
const FAST_WEBHOOKS: &str = r#"
[webhooks]
poll_interval_ms = 50
batch_size = 8
lease_ms = 5000
request_timeout_ms = 2000
max_attempts = 3
backoff_initial_ms = 100
backoff_max_ms = 400
retry_after_max_s = 2
"#;

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
    answered: u16,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }
}

#[derive(Clone)]
struct ReceiverState {
    status: Arc<AtomicU16>,
    retry_after: Arc<Mutex<Option<String>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

/// A real webhook receiver answering `status` (changeable while running).
struct Receiver {
    address: SocketAddr,
    state: ReceiverState,
    shutdown: CancellationToken,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let answered = state.status.load(Ordering::SeqCst);
    state.received.lock().unwrap().push(Received {
        headers,
        body,
        answered,
    });
    let mut response = StatusCode::from_u16(answered).unwrap().into_response();
    if let Some(value) = state.retry_after.lock().unwrap().clone() {
        response
            .headers_mut()
            .insert("retry-after", value.parse().unwrap());
    }
    response
}

impl Receiver {
    /// Serve on `address` (port 0 for any).
    async fn start_on(address: SocketAddr, status: u16) -> Self {
        let listener = tokio::net::TcpListener::bind(address).await.unwrap();
        let address = listener.local_addr().unwrap();
        let state = ReceiverState {
            status: Arc::new(AtomicU16::new(status)),
            retry_after: Arc::new(Mutex::new(None)),
            received: Arc::new(Mutex::new(Vec::new())),
        };
        let router = Router::new()
            .route("/hooks", post(receive))
            .with_state(state.clone());
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
                .unwrap();
        });
        Self {
            address,
            state,
            shutdown,
        }
    }

    async fn start(status: u16) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), status).await
    }

    fn url(&self) -> String {
        format!("http://{}/hooks", self.address)
    }

    fn set_status(&self, status: u16) {
        self.state.status.store(status, Ordering::SeqCst);
    }

    fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }
}

/// `POST /v1/webhooks/secret` as the env's seeker: the parsed secret.
async fn seeker_secret(env: &HireEnv) -> WebhookSecret {
    let response = env
        .app
        .send_json(
            Method::POST,
            "/v1/webhooks/secret",
            Some(&env.seeker_key),
            &json!({}),
        )
        .await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    let text = body["secret"].as_str().unwrap();
    assert!(text.starts_with("whsec_"));
    text.parse().expect("a valid whsec_ secret")
}

async fn deliveries(env: &HireEnv, contract_id: &str) -> Vec<Value> {
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{contract_id}/webhook-deliveries"),
            Some(&env.seeker_key),
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["deliveries"].as_array().unwrap().clone()
}

async fn dead_letters(env: &HireEnv) -> Vec<Value> {
    let response = env
        .app
        .get("/v1/webhooks/dead-letters", Some(&env.seeker_key))
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["dead_letters"].as_array().unwrap().clone()
}

/// Check a received request with the worker-sdk verifier and return its body.
fn verified(secret: &WebhookSecret, request: &Received) -> Value {
    secret
        .verify(&request.headers, &request.body, chrono::Utc::now())
        .expect("the webhook signature verifies");
    request.json()
}

/// Pay and run `contract_id` to its end (echo worker: settled).
async fn run_paid_hire(env: &HireEnv, contract_id: &str) {
    let challenge = env.challenge(contract_id).await;
    let payment = env.pay(&challenge).await;
    let paid = env.execute(contract_id, Some(&payment), None).await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    assert_eq!(paid.body["state"], "settled");
}

async fn down_then_up(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 2, FAST_WEBHOOKS).await;
    let secret = seeker_secret(&env).await;
    // Reserve a port and close it: the receiver is down (connection refused) at first.
    let address = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    let url = format!("http://{address}/hooks");
    let contract_id = env
        .contract(HireEnv::input("deliver me"), json!({"webhook_url": url}))
        .await;

    // The first event's delivery fails at least twice against the closed port.
    eventually(Duration::from_secs(10), "two failed tries", || async {
        let log = deliveries(&env, &contract_id).await;
        let tries = log[0]["attempt_log"].as_array().unwrap();
        (tries.len() >= 2 && tries.iter().all(|t| t["http_status"].is_null())).then_some(())
    })
    .await;
    assert_eq!(deliveries(&env, &contract_id).await[0]["state"], "pending");

    // Up: the receiver comes back on the same port; the hire runs to settlement meanwhile.
    let receiver = Receiver::start_on(address, 200).await;
    run_paid_hire(&env, &contract_id).await;
    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    assert!(events.len() >= 5, "a full hire has several events");
    let log = eventually(Duration::from_secs(15), "every event delivered", || async {
        let log = deliveries(&env, &contract_id).await;
        (log.len() == events.len() && log.iter().all(|d| d["state"] == "delivered")).then_some(log)
    })
    .await;

    // Each event arrived once (2xx), signed, in its own message with a stable id.
    let received = receiver.received();
    assert_eq!(received.len(), events.len(), "one 2xx request per event");
    let mut seqs = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for request in &received {
        let body = verified(&secret, request);
        let id = request.header("webhook-id").to_owned();
        let delivery = log
            .iter()
            .find(|d| d["delivery_id"] == id.as_str())
            .expect("the message id names a delivery");
        assert_eq!(body["data"]["seq"], delivery["seq"]);
        assert_eq!(body["data"]["contract_id"], contract_id.as_str());
        assert_eq!(
            body["type"],
            format!("contract.{}", body["data"]["kind"].as_str().unwrap())
        );
        assert!(body["data"].get("correlation_id").is_none());
        assert!(ids.insert(id), "no message sent twice after success");
        seqs.push(body["data"]["seq"].as_i64().unwrap());
    }
    seqs.sort_unstable();
    let expected: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, expected);

    // The first event was retried under the same webhook-id and finally delivered.
    let first = &log[0];
    assert_eq!(first["seq"], 1);
    let tries = first["attempt_log"].as_array().unwrap();
    assert!(tries.len() >= 3, "{first}");
    assert_eq!(tries.last().unwrap()["http_status"], 200);
    assert!(
        tries[..tries.len() - 1]
            .iter()
            .all(|t| t["error"].as_str().is_some_and(|e| !e.is_empty()))
    );
    assert_eq!(
        received
            .iter()
            .find(|r| r.json()["data"]["seq"] == 1)
            .unwrap()
            .header("webhook-id"),
        first["delivery_id"].as_str().unwrap()
    );
}

async fn gone_disables(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 2, FAST_WEBHOOKS).await;
    let receiver = Receiver::start(410).await;
    let first = env
        .contract(
            HireEnv::input("one"),
            json!({"webhook_url": receiver.url()}),
        )
        .await;
    let log = eventually(Duration::from_secs(10), "the 410 recorded", || async {
        let log = deliveries(&env, &first).await;
        (log[0]["state"] == "dead").then_some(log)
    })
    .await;
    assert_eq!(log[0]["last_status"], 410);
    assert_eq!(log[0]["endpoint_disabled"], true);
    assert_eq!(
        log[0]["attempt_log"].as_array().unwrap().len(),
        1,
        "410 is not retried"
    );
    assert_eq!(receiver.received().len(), 1);

    // A later event for the same endpoint is parked without a request.
    receiver.set_status(200);
    let second = env
        .contract(
            HireEnv::input("two"),
            json!({"webhook_url": receiver.url()}),
        )
        .await;
    let log = eventually(Duration::from_secs(10), "second parked", || async {
        let log = deliveries(&env, &second).await;
        (log[0]["state"] == "dead").then_some(log)
    })
    .await;
    assert!(log[0]["last_error"].as_str().unwrap().contains("disabled"));
    assert!(log[0]["attempt_log"].as_array().unwrap().is_empty());
    assert_eq!(
        receiver.received().len(),
        1,
        "a disabled endpoint gets nothing"
    );
    let letters = dead_letters(&env).await;
    assert_eq!(letters.len(), 2);
}

async fn dead_letter_and_redelivery(database: TestDatabase) {
    let env = hire_env(database, WorkerKind::Echo, 2, FAST_WEBHOOKS).await;
    let secret = seeker_secret(&env).await;
    let receiver = Receiver::start(500).await;
    let contract_id = env
        .contract(
            HireEnv::input("retry me"),
            json!({"webhook_url": receiver.url()}),
        )
        .await;

    let letter = eventually(Duration::from_secs(10), "a dead letter", || async {
        dead_letters(&env).await.into_iter().next()
    })
    .await;
    assert_eq!(letter["contract_id"], contract_id.as_str());
    assert_eq!(letter["attempts"], 3, "webhooks.max_attempts");
    assert_eq!(letter["last_status"], 500);
    let id = letter["delivery_id"].as_str().unwrap().to_owned();
    let tries = receiver.received();
    assert_eq!(tries.len(), 3);
    assert!(tries.iter().all(|r| r.header("webhook-id") == id));
    for request in &tries {
        verified(&secret, request);
    }

    // Only its seeker may redeliver it.
    let (stranger, _) = env.app.create_key("seeker").await;
    let path = format!("/v1/webhooks/dead-letters/{id}/redeliver");
    let refused = env
        .app
        .send_json(Method::POST, &path, Some(&stranger), &json!({}))
        .await;
    assert_eq!(refused.status(), 404);

    receiver.set_status(204);
    let requeued = env
        .app
        .send_json(Method::POST, &path, Some(&env.seeker_key), &json!({}))
        .await;
    assert_eq!(requeued.status(), 202);
    let body: Value = requeued.json().await.unwrap();
    assert_eq!(body["state"], "pending");
    assert_eq!(body["attempts"], 0);

    let log = eventually(Duration::from_secs(10), "redelivered", || async {
        let log = deliveries(&env, &contract_id).await;
        (log[0]["state"] == "delivered").then_some(log)
    })
    .await;
    assert_eq!(log[0]["total_attempts"], 4);
    let received = receiver.received();
    assert_eq!(received.len(), 4);
    let last = received.last().unwrap();
    assert_eq!(last.answered, 204);
    assert_eq!(
        last.header("webhook-id"),
        id,
        "the same message id after redelivery"
    );
    assert_eq!(verified(&secret, last)["data"]["seq"], 1);
    assert!(dead_letters(&env).await.is_empty());

    // Not a dead letter any more.
    let again = env
        .app
        .send_json(Method::POST, &path, Some(&env.seeker_key), &json!({}))
        .await;
    assert_eq!(again.status(), 409);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 2, FAST_WEBHOOKS).await;
    let receiver = Receiver::start(503).await;
    *receiver.state.retry_after.lock().unwrap() = Some("1".to_owned());
    let contract_id = env
        .contract(
            HireEnv::input("later"),
            json!({"webhook_url": receiver.url()}),
        )
        .await;
    eventually(Duration::from_secs(10), "two tries", || async {
        (receiver.received().len() >= 2).then_some(())
    })
    .await;
    receiver.set_status(200);
    let log = eventually(Duration::from_secs(10), "delivered", || async {
        let log = deliveries(&env, &contract_id).await;
        (log[0]["state"] == "delivered").then_some(log)
    })
    .await;
    let tries = log[0]["attempt_log"].as_array().unwrap();
    let at =
        |i: usize| chrono::DateTime::parse_from_rfc3339(tries[i]["at"].as_str().unwrap()).unwrap();
    // Backoff alone would retry after 50-400 ms; the receiver asked for 1 s.
    for i in 1..tries.len() {
        let gap = at(i) - at(i - 1);
        assert!(gap >= chrono::Duration::milliseconds(950), "{gap}");
    }
}

#[tokio::test]
async fn the_secret_is_shown_once_and_rotates() {
    let env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 1, "").await;
    let status: Value = env
        .app
        .get("/v1/webhooks/secret", Some(&env.seeker_key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["configured"], false);
    let first = seeker_secret(&env).await;
    let second = seeker_secret(&env).await;
    assert_ne!(first, second);
    let status: Value = env
        .app
        .get("/v1/webhooks/secret", Some(&env.seeker_key))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(status["configured"], true);
    assert!(status.get("secret").is_none());
    // Operators have no webhook secret.
    let response = env
        .app
        .get("/v1/webhooks/secret", Some(&env.operator_key))
        .await;
    assert_eq!(response.status(), 403);
}

#[tokio::test]
async fn receiver_down_then_up_gets_every_event_once_with_stable_ids() {
    down_then_up(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn receiver_down_then_up_gets_every_event_once_with_stable_ids_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    down_then_up(database).await;
}

#[tokio::test]
async fn exhausted_retries_become_a_dead_letter_that_can_be_redelivered() {
    dead_letter_and_redelivery(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn exhausted_retries_become_a_dead_letter_that_can_be_redelivered_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    dead_letter_and_redelivery(database).await;
}

#[tokio::test]
async fn gone_disables_the_endpoint() {
    gone_disables(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn gone_disables_the_endpoint_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    gone_disables(database).await;
}

async fn two_instances(database: TestDatabase) {
    let url = database.url();
    let env = hire_env(database, WorkerKind::Echo, 4, FAST_WEBHOOKS).await;
    // A second gateway on the same database runs its own delivery loop; leases split the work.
    let _other = crate::helpers::spawn_app_on(
        TestDatabase::Shared(url),
        &crate::hire_env::chain_settings(&env.devnet, FAST_WEBHOOKS),
    )
    .await;
    let secret = seeker_secret(&env).await;
    let receiver = Receiver::start(200).await;
    let mut contracts = Vec::new();
    for n in 0..6 {
        contracts.push(
            env.contract(
                HireEnv::input(&format!("shared {n}")),
                json!({"webhook_url": receiver.url()}),
            )
            .await,
        );
    }
    run_paid_hire(&env, &contracts[0]).await;
    let mut expected = 0;
    for contract_id in &contracts {
        expected += env.event_kinds(contract_id).await.len();
    }
    eventually(Duration::from_secs(15), "every event delivered", || async {
        let mut delivered = 0;
        for contract_id in &contracts {
            delivered += deliveries(&env, contract_id)
                .await
                .iter()
                .filter(|d| d["state"] == "delivered")
                .count();
        }
        (delivered == expected).then_some(())
    })
    .await;
    // Give a duplicate send (if any) time to show up before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = receiver.received();
    assert_eq!(received.len(), expected, "each event sent exactly once");
    let ids: std::collections::HashSet<&str> =
        received.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), expected);
    for request in &received {
        verified(&secret, request);
    }
}

#[tokio::test]
async fn two_instances_deliver_each_event_once() {
    two_instances(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn two_instances_deliver_each_event_once_on_postgres() {
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    two_instances(database).await;
}

/// `POST` the stable x402 resource of the env's listing, with a `Hiregate-Webhook-Url` header
/// when `webhook` is given.
async fn call_resource(
    env: &HireEnv,
    input: &Value,
    webhook: Option<&str>,
    payment: Option<&str>,
) -> crate::hire_env::Answer {
    let mut request = env
        .app
        .client
        .post(format!(
            "{}/x402/workers/{}/summarize",
            env.app.address, env.worker_id
        ))
        .json(input)
        .timeout(Duration::from_secs(60));
    if let Some(url) = webhook {
        request = request.header("Hiregate-Webhook-Url", url);
    }
    if let Some(payment) = payment {
        request = request.header("PAYMENT-SIGNATURE", payment);
    }
    crate::hire_env::answer(request.send().await.expect("sent")).await
}

/// A wallet seeker (no account: the stable x402 resource) names its webhook URL in a header,
/// gets the signing secret in the paid answer, receives every event signed with it, and reads
/// the deliveries with the contract's capability token; no other proof reads them, and a bad
/// URL is refused before anything is stored.
async fn wallet_webhooks(database: TestDatabase) {
    use crate::x402_resource::row_counts;
    let env = hire_env(database, WorkerKind::Faulty, 4, FAST_WEBHOOKS).await;
    let receiver = Receiver::start(200).await;
    let url = receiver.url();
    // Slow work: the first events are delivered while the paid call is still running, so they
    // are signed with the secret stored before the contract was, not one made later.
    let input = json!({"text": "a wallet wants webhooks", "mode": "slow", "delay_ms": 600});

    // A malformed URL: 400 with a stable code, unpaid or paid, and nothing stored.
    let counts = row_counts(&env.app.database_url).await;
    let bad = call_resource(&env, &input, Some("ftp://nowhere.example/hooks"), None).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.code(), "validation_failed");
    assert_eq!(
        bad.body["error"]["details"]["field"],
        "hiregate-webhook-url"
    );
    let unpaid = call_resource(&env, &input, Some(&url), None).await;
    assert_eq!(unpaid.status, 402, "{:?}", unpaid.body);
    let payment = env.pay(&unpaid.payment_required()).await;
    let bad = call_resource(&env, &input, Some("not a url"), Some(&payment)).await;
    assert_eq!(bad.status, 400, "{:?}", bad.body);
    assert_eq!(bad.code(), "validation_failed");
    // Another URL than the signed offer's is a conflict, not a payment.
    let other_url = format!("{url}/elsewhere");
    let changed = call_resource(&env, &input, Some(&other_url), Some(&payment)).await;
    assert_eq!(changed.status, 409, "{:?}", changed.body);
    assert_eq!(changed.code(), "input_mismatch");
    assert_eq!(row_counts(&env.app.database_url).await, counts);
    assert!(receiver.received().is_empty());

    // Paid with the same URL: the deliverable, the token and the webhook secret.
    let paid = call_resource(&env, &input, Some(&url), Some(&payment)).await;
    assert!(paid.status == 200 || paid.status == 202, "{:?}", paid.body);
    let contract_id = paid.body["contract_id"].as_str().unwrap().to_owned();
    let token = paid.body["access"]["token"].as_str().unwrap().to_owned();
    let webhook = &paid.body["webhook"];
    assert_eq!(webhook["url"], url.as_str());
    let secret_text = webhook["secret"].as_str().unwrap().to_owned();
    let secret: WebhookSecret = secret_text.parse().expect("a whsec_ secret");
    assert!(
        webhook["deliveries"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/contracts/{contract_id}/webhook-deliveries"))
    );
    // A replay shows the same secret (derived, not drawn again).
    let again = call_resource(&env, &input, Some(&url), Some(&payment)).await;
    assert!(
        again.status == 200 || again.status == 202,
        "{:?}",
        again.body
    );
    assert_eq!(again.body["webhook"]["secret"], secret_text.as_str());
    eventually(Duration::from_secs(15), "settled", || async {
        (env.state(&contract_id).await == "settled").then_some(())
    })
    .await;
    assert_eq!(env.worker.executions(), 1);

    // Every event arrives, signed with that secret.
    let events = env
        .app
        .store
        .list_contract_events(&contract_id, 0, 1000)
        .await
        .unwrap();
    assert!(events.len() >= 5, "a full hire has several events");
    let deliveries_path = format!("/v1/contracts/{contract_id}/webhook-deliveries");
    let log = eventually(Duration::from_secs(15), "every event delivered", || async {
        let response = env.app.get(&deliveries_path, Some(&token)).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let log = body["deliveries"].as_array().unwrap().clone();
        (log.len() == events.len() && log.iter().all(|d| d["state"] == "delivered")).then_some(log)
    })
    .await;
    let received = receiver.received();
    assert_eq!(received.len(), events.len());
    for request in &received {
        let body = verified(&secret, request);
        assert_eq!(body["data"]["contract_id"], contract_id.as_str());
        assert!(
            log.iter()
                .any(|d| d["delivery_id"] == request.header("webhook-id"))
        );
    }
    let dead = env.app.get("/v1/webhooks/dead-letters", Some(&token)).await;
    assert_eq!(dead.status(), 200);
    let dead: Value = dead.json().await.unwrap();
    assert_eq!(dead["dead_letters"], json!([]));

    // No other proof reads them: a forged token (401), an API-key seeker (404), another wallet
    // contract's token (404); and this token reads no other contract's deliveries (404).
    let other_input = json!({"text": "another wallet, no webhook", "mode": "ok"});
    let unpaid = call_resource(&env, &other_input, None, None).await;
    let other_payment = env.pay(&unpaid.payment_required()).await;
    let other = call_resource(&env, &other_input, None, Some(&other_payment)).await;
    assert_eq!(other.status, 200, "{:?}", other.body);
    assert!(other.body.get("webhook").is_none());
    let other_token = other.body["access"]["token"].as_str().unwrap().to_owned();
    let other_contract = other.body["contract_id"].as_str().unwrap().to_owned();
    let forged = format!("hg_cap_{}", "A".repeat(86));
    for (proof, status) in [
        (forged.as_str(), 401),
        (env.seeker_key.as_str(), 404),
        (other_token.as_str(), 404),
    ] {
        let response = env.app.get(&deliveries_path, Some(proof)).await;
        assert_eq!(response.status(), status, "{proof}");
    }
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{other_contract}/webhook-deliveries"),
            Some(&token),
        )
        .await;
    assert_eq!(response.status(), 404);
    let key_contract = env
        .contract(HireEnv::input("a key seeker's"), json!({}))
        .await;
    let response = env
        .app
        .get(
            &format!("/v1/contracts/{key_contract}/webhook-deliveries"),
            Some(&token),
        )
        .await;
    assert_eq!(response.status(), 404);
    crate::x402_resource::assert_reconciled(&env).await;
}

#[tokio::test]
async fn a_wallet_seeker_gets_signed_webhooks_and_reads_them_with_its_capability_token() {
    wallet_webhooks(TestDatabase::sqlite()).await;
}

#[tokio::test]
async fn a_wallet_seeker_gets_signed_webhooks_and_reads_them_with_its_capability_token_on_postgres()
{
    let Some(database) = TestDatabase::postgres().await else {
        return;
    };
    wallet_webhooks(database).await;
}
