//! The REST API's wire answers, recorded once and compared on every run: one scripted hire
//! session (proposals, the 402 challenge, payments good and bad, duplicates, a rejection, worker
//! failures and timeouts, pending, queued and refused work, cancels, callbacks, disputes,
//! refunds, receipts and events) driven through a real gateway, anvil chain and worker. Each
//! step keeps the status, the headers clients act on and the JSON body, with every volatile value
//! (ids, hashes, addresses, signatures, times, ports) replaced by a placeholder numbered in order
//! of first appearance, so equal values stay visibly equal.
//!
//! The transcript is what guards "byte for byte the same on the wire" when the engine's
//! internals change: a refactor must pass it without re-recording. `HIREGATE_BLESS_WIRE=1`
//! records it again (for a deliberate change of the API, reviewed in the fixture's diff).

use std::{collections::HashMap, fmt::Write as _, path::PathBuf, sync::LazyLock};

use alloy::primitives::U256;
use hiregate_contracts::id::ContractId;
use hiregate_payments::{
    PaymentRequired, encode_header,
    extension::{PAYMENT_IDENTIFIER, set_payment_identifier},
};
use regex::Regex;
use reqwest::{Method, RequestBuilder};
use serde_json::{Value, json};

use crate::{
    helpers::{ADMIN_KEY, TestDatabase},
    hire_env::{Answer, HireEnv, PRICE, WorkerKind, hire_env, hire_listing},
};

/// Where the transcript lives.
fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/api/fixtures/wire_answers.json")
}

/// Headers a client acts on; recorded when present. The x402 ones are recorded decoded.
const RECORDED_HEADERS: [&str; 13] = [
    "content-type",
    "cache-control",
    "retry-after",
    "location",
    "www-authenticate",
    "x-duplicate",
    "x-correlation-id",
    "x-payment-address",
    "x-payment-amount",
    "x-payment-currency",
    "x-payment-network",
    "payment-required",
    "payment-response",
];

/// Numbers that are clock readings, whatever the run: recorded as `"<number>"`.
const VOLATILE_NUMBERS: [&str; 4] = ["validAfter", "validBefore", "valid_before", "valid_after"];

/// Volatile text, in the order it is replaced, and the placeholder family of each pattern
/// (`None`: the family is the match's own prefix, as `ctr` for `ctr_01…`).
static PATTERNS: LazyLock<Vec<(Regex, Option<&'static str>)>> = LazyLock::new(|| {
    [
        // Compact JWS (contract tokens, receipts).
        (
            r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+",
            Some("jws"),
        ),
        (r"http://127\.0\.0\.1:\d+", Some("host")),
        // Prefixed ULIDs: ctr_, wk_, att_, dsp_, pay_ …, and lowercase ones (a worker's
        // task_…, a key id hg-…).
        (
            r"\b[a-z]{2,8}[_-]([0-9A-HJKMNP-TV-Z]{26}|[0-9a-hjkmnp-tv-z]{26})\b",
            None,
        ),
        (r"sha256:[0-9a-f]{64}", Some("sha256")),
        (r"0x[0-9a-fA-F]{64}", Some("bytes32")),
        (r"0x[0-9a-fA-F]{40}", Some("address")),
        (
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            Some("uuid"),
        ),
        (
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
            Some("time"),
        ),
        (r"\b[0-9a-f]{64}\b", Some("hex")),
    ]
    .into_iter()
    .map(|(pattern, family)| (Regex::new(pattern).expect("pattern"), family))
    .collect()
});

/// Volatile values to placeholders, numbered per family in order of first appearance. Times
/// are not numbered: two readings of the clock are never meant to be compared by identity.
#[derive(Default)]
struct Normaliser {
    seen: HashMap<String, String>,
    counts: HashMap<String, usize>,
}

impl Normaliser {
    fn placeholder(&mut self, family: &str, value: &str) -> String {
        if family == "time" {
            return "<time>".to_owned();
        }
        if let Some(known) = self.seen.get(value) {
            return known.clone();
        }
        let count = self.counts.entry(family.to_owned()).or_default();
        *count += 1;
        let placeholder = format!("<{family}_{count}>");
        self.seen.insert(value.to_owned(), placeholder.clone());
        placeholder
    }

    fn text(&mut self, text: &str) -> String {
        let mut current = text.to_owned();
        for (pattern, family) in PATTERNS.iter() {
            let mut out = String::with_capacity(current.len());
            let mut last = 0;
            let found: Vec<(usize, usize)> = pattern
                .find_iter(&current)
                .map(|m| (m.start(), m.end()))
                .collect();
            for (start, end) in found {
                let matched = &current[start..end];
                let family = family
                    .map(str::to_owned)
                    .unwrap_or_else(|| matched[..matched.len() - 27].to_owned());
                out.push_str(&current[last..start]);
                out.push_str(&self.placeholder(&family, matched));
                last = end;
            }
            out.push_str(&current[last..]);
            current = out;
        }
        current
    }

    fn value(&mut self, value: &Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.text(text)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.value(v)).collect()),
            Value::Object(object) => Value::Object(
                object
                    .iter()
                    .map(|(key, v)| {
                        let v = if VOLATILE_NUMBERS.contains(&key.as_str()) && !v.is_null() {
                            json!("<number>")
                        } else {
                            self.value(v)
                        };
                        (self.text(key), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

/// The session: the environment, the steps recorded so far and the names given.
struct Transcript {
    env: HireEnv,
    steps: Vec<Value>,
    names: Normaliser,
}

impl Transcript {
    fn request(&self, method: Method, path: &str, key: Option<&str>) -> RequestBuilder {
        let request = self
            .env
            .app
            .client
            .request(method, format!("{}{path}", self.env.app.address))
            .timeout(std::time::Duration::from_secs(60));
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Send `request` (`what` names it: method and path) and record its answer as `label`.
    async fn record(&mut self, label: &str, what: &str, request: RequestBuilder) -> Answer {
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        let mut recorded_headers = serde_json::Map::new();
        for name in RECORDED_HEADERS {
            let values: Vec<&str> = headers
                .get_all(name)
                .iter()
                .map(|v| v.to_str().expect("ASCII header"))
                .collect();
            if values.is_empty() {
                continue;
            }
            let joined = values.join(", ");
            let recorded = if name.starts_with("payment-") {
                decoded_x402_header(&joined)
            } else {
                Value::String(joined)
            };
            recorded_headers.insert(name.to_owned(), self.names.value(&recorded));
        }
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let body = self.names.value(&wire_body(content_type, &text));
        let step = json!({
            "step": label,
            "request": self.names.text(what),
            "status": status,
            "headers": recorded_headers,
            "body": body,
        });
        self.steps.push(step);
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    async fn get(&mut self, label: &str, path: &str, key: Option<&str>) -> Answer {
        let request = self.request(Method::GET, path, key);
        self.record(label, &format!("GET {path}"), request).await
    }

    async fn post(&mut self, label: &str, path: &str, key: Option<&str>, body: &Value) -> Answer {
        let request = self.request(Method::POST, path, key).json(body);
        self.record(label, &format!("POST {path}"), request).await
    }

    /// `POST /v1/contracts` as the seeker: `summarize` of `input` on `worker_id` plus `extra`.
    async fn propose(
        &mut self,
        label: &str,
        worker_id: &str,
        input: Value,
        extra: Value,
    ) -> Answer {
        let mut body = json!({
            "worker_id": worker_id,
            "task_type": "summarize",
            "input": input,
            "sla": {"max_latency_ms": 5000},
        });
        for (key, value) in extra.as_object().expect("extra fields") {
            body[key] = value.clone();
        }
        let seeker = self.env.seeker_key.clone();
        self.post(label, "/v1/contracts", Some(&seeker), &body)
            .await
    }

    /// A proposal that must be created; returns the contract id.
    async fn contract(
        &mut self,
        label: &str,
        worker_id: &str,
        input: Value,
        extra: Value,
    ) -> String {
        let created = self.propose(label, worker_id, input, extra).await;
        assert_eq!(created.status, 201, "{label}: {:?}", created.body);
        created.body["contract_id"].as_str().unwrap().to_owned()
    }

    /// Execute `contract_id` as `key` with an optional payment and body.
    async fn execute_as(
        &mut self,
        label: &str,
        key: Option<&str>,
        contract_id: &str,
        payment: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let path = format!("/v1/contracts/{contract_id}/execute");
        let mut request = self.request(Method::POST, &path, key);
        if let Some(payment) = payment {
            request = request.header("PAYMENT-SIGNATURE", payment);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        self.record(label, &format!("POST {path}"), request).await
    }

    async fn execute(
        &mut self,
        label: &str,
        contract_id: &str,
        payment: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let seeker = self.env.seeker_key.clone();
        self.execute_as(label, Some(&seeker), contract_id, payment, body)
            .await
    }

    /// The recorded 402 of `contract_id`, and a payment for it.
    async fn challenge_and_pay(
        &mut self,
        label: &str,
        contract_id: &str,
    ) -> (PaymentRequired, String) {
        let answer = self.execute(label, contract_id, None, None).await;
        assert_eq!(answer.status, 402, "{label}: {:?}", answer.body);
        let challenge = answer.payment_required();
        let payment = self.env.pay(&challenge).await;
        (challenge, payment)
    }
}

/// A body as recorded: JSON when it is JSON whose compact spelling is the bytes sent (so the
/// recorded value stands for the exact bytes), server-sent events and JSON Lines item by item,
/// else the text.
fn wire_body(content_type: &str, text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    if content_type.starts_with("text/event-stream") {
        let events: Vec<Value> = text
            .split("\n\n")
            .filter(|block| !block.is_empty())
            .map(|block| {
                let fields: serde_json::Map<String, Value> = block
                    .lines()
                    .map(|line| {
                        let (field, value) = line.split_once(": ").unwrap_or((line, ""));
                        let value = serde_json::from_str(value)
                            .ok()
                            .filter(|_| field == "data")
                            .unwrap_or_else(|| Value::String(value.to_owned()));
                        (field.to_owned(), value)
                    })
                    .collect();
                Value::Object(fields)
            })
            .collect();
        return json!({"server_sent_events": events});
    }
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        if serde_json::to_string(&value).expect("serialises") == text {
            return value;
        }
        return json!({"not_compact_json": text});
    }
    let lines: Option<Vec<Value>> = text
        .lines()
        .map(|line| serde_json::from_str(line).ok())
        .collect();
    match lines {
        Some(lines) if !lines.is_empty() => json!({"json_lines": lines}),
        _ => Value::String(text.to_owned()),
    }
}

/// An x402 header (base64 JSON) decoded; its raw text when it does not decode.
fn decoded_x402_header(raw: &str) -> Value {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(raw)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| json!({"undecodable": raw}))
}

fn base64_json(value: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(value.to_string())
}

/// The scripted session. Returns the transcript.
async fn session() -> Vec<Value> {
    let env = hire_env(
        TestDatabase::sqlite(),
        WorkerKind::Faulty,
        4,
        "[contracts]\nworker_queue_depth = 1\n",
    )
    .await;
    let mut t = Transcript {
        env,
        steps: Vec::new(),
        names: Normaliser::default(),
    };
    let seeker = t.env.seeker_key.clone();
    let operator = t.env.operator_key.clone();
    let worker = t.env.worker_id.clone();
    let (stranger, _) = t.env.app.create_key("seeker").await;
    let input = HireEnv::input("the quick brown fox");

    // Proposals.
    let plain = t
        .contract("propose", &worker, input.clone(), json!({}))
        .await;
    t.get(
        "view offered contract",
        &format!("/v1/contracts/{plain}"),
        Some(&seeker),
    )
    .await;
    for (label, extra) in [
        (
            "propose: task type not offered",
            json!({"task_type": "translate"}),
        ),
        (
            "propose: unknown worker",
            json!({"worker_id": "wk_01J00000000000000000000000"}),
        ),
        (
            "propose: invalid output schema",
            json!({"output_schema": {"type": "string", "pattern": "(?=x)"}}),
        ),
        (
            "propose: authorization window too long",
            json!({"sla": {"max_latency_ms": 3_600_000}, "retry_policy": {"max_attempts": 10}}),
        ),
        (
            "propose: poll window too long",
            json!({"sla": {"max_latency_ms": 5000, "poll_window_s": 360_000}}),
        ),
        (
            "propose: escrow on an exact-only listing",
            json!({"payment_scheme": "auth-capture"}),
        ),
        ("propose: unknown field", json!({"surprise": true})),
    ] {
        t.propose(label, &worker, input.clone(), extra).await;
    }
    let request = t
        .request(Method::POST, "/v1/contracts", None)
        .json(&json!({}));
    t.record("propose: no key", "POST /v1/contracts", request)
        .await;
    t.propose_as_operator(&worker, &operator).await;

    // The unpaid execute, and the ways to get it wrong.
    let first = t.execute("execute unpaid", &plain, None, None).await;
    let challenge = first.payment_required();
    t.execute(
        "execute unpaid again (from memory)",
        &plain,
        None,
        Some(&input),
    )
    .await;
    let request = t
        .request(Method::POST, "/execute", Some(&seeker))
        .header("X-Contract-ID", &plain);
    t.record("execute unpaid by X-Contract-ID", "POST /execute", request)
        .await;
    let request = t.request(Method::POST, "/execute", Some(&seeker));
    t.record("execute without a contract id", "POST /execute", request)
        .await;
    t.execute(
        "execute: body is not the input",
        &plain,
        None,
        Some(&json!({"text": "other"})),
    )
    .await;
    let path = format!("/v1/contracts/{plain}/execute");
    let request = t
        .request(Method::POST, &path, Some(&seeker))
        .header("content-type", "application/json")
        .body("{not json");
    t.record("execute: malformed body", &format!("POST {path}"), request)
        .await;
    let unknown = ContractId::generate().to_string();
    t.execute("execute: unknown contract", &unknown, None, None)
        .await;
    t.execute("execute: garbage contract id", "ctr_garbage", None, None)
        .await;
    t.execute_as("execute: no key", None, &plain, None, None)
        .await;
    t.execute_as(
        "execute: unknown key",
        Some("hg_sk_not_a_real_key_0000000000000000"),
        &plain,
        None,
        None,
    )
    .await;
    t.execute_as("execute: operator key", Some(&operator), &plain, None, None)
        .await;
    t.execute_as(
        "execute: another seeker",
        Some(&stranger),
        &plain,
        None,
        None,
    )
    .await;

    // Payments that cannot be used: a fresh challenge each time, nothing stored.
    let mut bad_extension = serde_json::to_value(t.env.sign(&challenge).await).unwrap();
    bad_extension["extensions"] = json!({ PAYMENT_IDENTIFIER: "not an object" });
    for (label, header) in [
        ("payment: not base64", "not base64 !!".to_owned()),
        ("payment: a JSON string", base64_json(&json!("a string"))),
        (
            "payment: x402 version 1",
            base64_json(&json!({"x402Version": 1, "payload": {}})),
        ),
        (
            "payment: no accepted requirements",
            base64_json(&json!({"x402Version": 2, "payload": {}})),
        ),
        (
            "payment: malformed payment identifier",
            base64_json(&bad_extension),
        ),
    ] {
        t.execute(label, &plain, Some(&header), None).await;
    }
    let mut cheaper = challenge.clone();
    cheaper.accepts[0].amount = (U256::from(PRICE) - U256::from(1u64)).into();
    let claimed_cheaper = t.env.pay(&cheaper).await;
    t.execute(
        "payment: accepted terms differ",
        &plain,
        Some(&claimed_cheaper),
        None,
    )
    .await;
    let signed_for_less = t
        .env
        .sign_for(&cheaper.accepts[0], &challenge.accepts[0], None)
        .await;
    t.execute(
        "payment: signed for less than accepted",
        &plain,
        Some(&encode_header(&signed_for_less)),
        None,
    )
    .await;

    // Paid, and paid again.
    let payment = t.env.pay(&challenge).await;
    let paid = t
        .execute("execute paid", &plain, Some(&payment), Some(&input))
        .await;
    assert_eq!(paid.status, 200, "{:?}", paid.body);
    t.execute(
        "execute paid: same payment again",
        &plain,
        Some(&payment),
        None,
    )
    .await;
    t.execute("execute paid: no payment again", &plain, None, None)
        .await;
    let second = t
        .contract("propose second", &worker, HireEnv::input("two"), json!({}))
        .await;
    t.execute(
        "payment replayed on another contract",
        &second,
        Some(&payment),
        None,
    )
    .await;
    let (second_challenge, _) = t.challenge_and_pay("execute second unpaid", &second).await;
    let id = "pay_0123456789abcdef0123".parse().unwrap();
    let mut identified = t.env.sign(&second_challenge).await;
    set_payment_identifier(&mut identified.extensions, &id);
    t.execute(
        "execute with a payment identifier",
        &second,
        Some(&encode_header(&identified)),
        None,
    )
    .await;
    let third = t
        .contract("propose third", &worker, HireEnv::input("three"), json!({}))
        .await;
    let (third_challenge, _) = t.challenge_and_pay("execute third unpaid", &third).await;
    let mut reused = t.env.sign(&third_challenge).await;
    set_payment_identifier(&mut reused.extensions, &id);
    t.execute(
        "payment identifier reused for another payment",
        &third,
        Some(&encode_header(&reused)),
        None,
    )
    .await;

    // The worker's failures: rejected, failed with a retry left, failed for good, too slow.
    let rejected = t
        .contract(
            "propose: output will be invalid",
            &worker,
            json!({"text": "x", "mode": "invalid"}),
            json!({}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("rejected: unpaid", &rejected).await;
    t.execute("rejected: paid", &rejected, Some(&payment), None)
        .await;
    t.execute("rejected: asked again", &rejected, None, None)
        .await;
    let flaky = t
        .contract(
            "propose: worker fails once",
            &worker,
            json!({"text": "retry me", "mode": "flaky"}),
            json!({}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("flaky: unpaid", &flaky).await;
    t.execute("flaky: first attempt fails", &flaky, Some(&payment), None)
        .await;
    t.execute("flaky: the retry settles", &flaky, None, None)
        .await;
    let failing = t
        .contract(
            "propose: worker always fails",
            &worker,
            json!({"text": "never", "mode": "fail"}),
            json!({"retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("failing: unpaid", &failing).await;
    t.execute(
        "failing: the only attempt fails",
        &failing,
        Some(&payment),
        None,
    )
    .await;
    t.execute("failing: asked again", &failing, None, None)
        .await;
    let slow = t
        .contract(
            "propose: worker slower than the SLA",
            &worker,
            json!({"text": "slow", "mode": "slow", "delay_ms": 2000}),
            json!({"sla": {"max_latency_ms": 500}, "retry_policy": {"max_attempts": 1}}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("slow: unpaid", &slow).await;
    t.execute("slow: times out", &slow, Some(&payment), None)
        .await;

    // One slot, a queue of one: pending work holds the slot, the next hire waits, the one
    // after is refused before anyone pays.
    let narrow_pay_to = alloy::signers::local::PrivateKeySigner::random().address();
    let listing = hire_listing(&t.env.worker.endpoint, narrow_pay_to, &t.env.devnet, 1);
    let registered = t.env.app.register_worker(&operator, &listing).await;
    assert_eq!(registered.status(), 201);
    let narrow = registered.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let pending = t
        .contract(
            "propose: pending work",
            &narrow,
            json!({"text": "async", "mode": "pending", "delay_ms": 60000}),
            json!({}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("pending: unpaid", &pending).await;
    t.execute("pending: paid", &pending, Some(&payment), None)
        .await;
    t.execute("pending: asked again", &pending, None, None)
        .await;
    let queued = t
        .contract(
            "propose: to be queued",
            &narrow,
            HireEnv::input("queued"),
            json!({}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("queued: unpaid", &queued).await;
    t.execute("queued: paid", &queued, Some(&payment), None)
        .await;
    t.execute("queued: asked again", &queued, None, None).await;
    let refused = t
        .contract(
            "propose: queue full",
            &narrow,
            HireEnv::input("refused"),
            json!({}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("queue full: unpaid", &refused).await;
    t.execute("queue full: refused", &refused, Some(&payment), None)
        .await;

    // Worker callbacks that are not the worker's.
    let callback = format!("/v1/callbacks/{pending}");
    let request = t
        .request(Method::POST, &callback, None)
        .json(&json!({"event": "task_completed", "status": "completed"}));
    t.record("callback: unsigned", &format!("POST {callback}"), request)
        .await;
    let request = t
        .request(Method::POST, &callback, None)
        .header("content-type", "application/json")
        .body("{not json");
    t.record("callback: not JSON", &format!("POST {callback}"), request)
        .await;

    // Cancels.
    let cancel = |id: &str| format!("/v1/contracts/{id}/cancel");
    t.post("cancel queued", &cancel(&queued), Some(&seeker), &json!({}))
        .await;
    t.execute("queued: asked after cancel", &queued, None, None)
        .await;
    t.post(
        "cancel pending",
        &cancel(&pending),
        Some(&seeker),
        &json!({}),
    )
    .await;
    t.post(
        "cancel pending again",
        &cancel(&pending),
        Some(&seeker),
        &json!({}),
    )
    .await;
    t.post(
        "cancel offered",
        &cancel(&refused),
        Some(&seeker),
        &json!({}),
    )
    .await;
    t.post("cancel settled", &cancel(&plain), Some(&seeker), &json!({}))
        .await;
    t.post(
        "cancel failed",
        &cancel(&failing),
        Some(&seeker),
        &json!({}),
    )
    .await;
    t.post(
        "cancel unknown",
        &cancel(&unknown),
        Some(&seeker),
        &json!({}),
    )
    .await;
    t.post(
        "cancel: another seeker",
        &cancel(&second),
        Some(&stranger),
        &json!({}),
    )
    .await;

    // An acceptance window, a dispute and its decision.
    let windowed = t
        .contract(
            "propose: acceptance window",
            &worker,
            HireEnv::input("later"),
            json!({"acceptance_window_s": 600}),
        )
        .await;
    let (_, payment) = t.challenge_and_pay("windowed: unpaid", &windowed).await;
    t.execute(
        "windowed: accepted, settlement deferred",
        &windowed,
        Some(&payment),
        None,
    )
    .await;
    t.get(
        "receipt before the end",
        &format!("/v1/contracts/{windowed}/receipt"),
        Some(&seeker),
    )
    .await;
    let claim = json!({"reason": "not what I asked",
        "claim": {"text": "the summary misses the point", "failing_paths": ["/summary"]}});
    let disputes = |id: &str| format!("/v1/contracts/{id}/disputes");
    t.post(
        "dispute: another seeker",
        &disputes(&windowed),
        Some(&stranger),
        &claim,
    )
    .await;
    t.post(
        "dispute: unknown contract",
        &disputes(&unknown),
        Some(&seeker),
        &claim,
    )
    .await;
    t.post(
        "dispute: settled exact contract",
        &disputes(&plain),
        Some(&seeker),
        &claim,
    )
    .await;
    t.post(
        "dispute: offered contract",
        &disputes(&refused),
        Some(&seeker),
        &claim,
    )
    .await;
    let opened = t
        .post(
            "dispute: opened",
            &disputes(&windowed),
            Some(&seeker),
            &claim,
        )
        .await;
    t.post(
        "dispute: opened twice",
        &disputes(&windowed),
        Some(&seeker),
        &claim,
    )
    .await;
    if let Some(dispute_id) = opened.body["dispute_id"].as_str().map(str::to_owned) {
        let response = format!("/v1/disputes/{dispute_id}/response");
        let statement = json!({"statement": "the summary is faithful"});
        t.post(
            "dispute response by its opener",
            &response,
            Some(&seeker),
            &statement,
        )
        .await;
        t.post("dispute response", &response, Some(&operator), &statement)
            .await;
        t.post(
            "dispute response again",
            &response,
            Some(&operator),
            &statement,
        )
        .await;
        t.get(
            "dispute view",
            &format!("/v1/disputes/{dispute_id}"),
            Some(&seeker),
        )
        .await;
        let decision = format!("/v1/disputes/{dispute_id}/decision");
        let decide = json!({"decision": "settle", "reason": "arbiter says settle"});
        t.post(
            "dispute decision by a party",
            &decision,
            Some(&operator),
            &decide,
        )
        .await;
        t.post("dispute decision", &decision, Some(ADMIN_KEY), &decide)
            .await;
        t.post(
            "dispute decision again",
            &decision,
            Some(ADMIN_KEY),
            &decide,
        )
        .await;
    }
    t.post(
        "dispute: rejected contract by its operator",
        &disputes(&rejected),
        Some(&operator),
        &json!({"reason": "the output is fine"}),
    )
    .await;

    // Refunds, receipts, events and views.
    let refund = |id: &str| format!("/v1/contracts/{id}/refund");
    let why = json!({"reason": "arbiter refunds"});
    t.post(
        "refund: exact contract",
        &refund(&plain),
        Some(ADMIN_KEY),
        &why,
    )
    .await;
    t.post(
        "refund: unknown contract",
        &refund(&unknown),
        Some(ADMIN_KEY),
        &why,
    )
    .await;
    t.post(
        "refund: by the seeker",
        &refund(&plain),
        Some(&seeker),
        &why,
    )
    .await;
    t.get(
        "receipt",
        &format!("/v1/contracts/{plain}/receipt"),
        Some(&seeker),
    )
    .await;
    t.get(
        "receipt: unknown",
        &format!("/v1/contracts/{unknown}/receipt"),
        Some(&seeker),
    )
    .await;
    t.get(
        "events as JSON lines",
        &format!("/v1/contracts/{plain}/events.jsonl"),
        Some(&seeker),
    )
    .await;
    t.get(
        "events",
        &format!("/v1/contracts/{plain}/events"),
        Some(&seeker),
    )
    .await;
    t.get(
        "events: another seeker",
        &format!("/v1/contracts/{plain}/events"),
        Some(&stranger),
    )
    .await;
    for (label, id) in [
        ("view settled", &plain),
        ("view rejected", &rejected),
        ("view failed", &failing),
        ("view timed out", &slow),
        ("view cancelled", &pending),
    ] {
        t.get(label, &format!("/v1/contracts/{id}"), Some(&seeker))
            .await;
    }
    t.get(
        "view: another seeker",
        &format!("/v1/contracts/{plain}"),
        Some(&stranger),
    )
    .await;
    t.steps
}

impl Transcript {
    async fn propose_as_operator(&mut self, worker: &str, operator: &str) {
        let body = json!({"worker_id": worker, "task_type": "summarize",
            "input": HireEnv::input("x"), "sla": {"max_latency_ms": 5000}});
        self.post(
            "propose: operator key",
            "/v1/contracts",
            Some(operator),
            &body,
        )
        .await;
    }
}

#[tokio::test]
async fn the_rest_api_answers_as_recorded() {
    // Boxed: the whole recorded session is one large future.
    let steps = Box::pin(session()).await;
    let path = fixture_path();
    if std::env::var("HIREGATE_BLESS_WIRE").is_ok_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(&steps).unwrap() + "\n";
        std::fs::write(&path, text).expect("fixture written");
        eprintln!(
            "recorded {} wire answers in {}",
            steps.len(),
            path.display()
        );
        return;
    }
    let recorded: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(&path).expect("fixture exists (HIREGATE_BLESS_WIRE=1 records it)"),
    )
    .expect("fixture is JSON");
    let report = compare(&recorded, &steps);
    assert!(
        report.is_empty(),
        "the REST API's wire answers changed (HIREGATE_BLESS_WIRE=1 records them again, \
         for a deliberate change only):\n{report}"
    );
}

/// A readable report of how `actual` differs from `recorded`, step by step; empty when equal.
/// Steps are compared by their pretty-printed text, so key order counts.
fn compare(recorded: &[Value], actual: &[Value]) -> String {
    let mut report = String::new();
    if recorded.len() != actual.len() {
        let _ = writeln!(
            report,
            "{} steps recorded, {} taken",
            recorded.len(),
            actual.len()
        );
    }
    for index in 0..recorded.len().max(actual.len()) {
        let expected = recorded
            .get(index)
            .map(|s| serde_json::to_string_pretty(s).unwrap())
            .unwrap_or_default();
        let got = actual
            .get(index)
            .map(|s| serde_json::to_string_pretty(s).unwrap())
            .unwrap_or_default();
        if expected == got {
            continue;
        }
        let label = actual
            .get(index)
            .or_else(|| recorded.get(index))
            .and_then(|s| s["step"].as_str())
            .unwrap_or("?");
        let _ = writeln!(report, "step {index} ({label}):");
        report.push_str(&line_diff(&expected, &got));
    }
    report
}

/// `-`/`+` lines of a longest-common-subsequence diff of two texts (small: one step each).
fn line_diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "  - {}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "  + {}", b[j]);
            j += 1;
        }
    }
    out
}

#[test]
fn the_normaliser_keeps_equal_values_equal_and_hides_volatile_ones() {
    let mut names = Normaliser::default();
    let value = json!({
        "ctr_01J00000000000000000000000": "ctr_01J00000000000000000000000",
        "other": "ctr_01J00000000000000000000001 at 2025-01-02T03:04:05.678Z",
        "url": "http://127.0.0.1:4321/v1/contracts/ctr_01J00000000000000000000000",
        "validBefore": 1_700_000_000,
        "amount": "1500000",
    });
    assert_eq!(
        names.value(&value),
        json!({
            "<ctr_1>": "<ctr_1>",
            "other": "<ctr_2> at <time>",
            "url": "<host_1>/v1/contracts/<ctr_1>",
            "validBefore": "<number>",
            "amount": "1500000",
        })
    );
    assert!(line_diff("a\nb\nc", "a\nx\nc").contains("  - b\n  + x"));
}
