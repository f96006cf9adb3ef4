//! A paid hire is not lost to a stale keep-alive connection: a worker that closes an idle
//! connection just as the gateway reuses it. The request was written into a connection the
//! worker no longer reads; the gateway sends it once more on a new connection under the same
//! idempotency key, without spending an attempt. And what may have reached a server is sent
//! again only when a repetition is harmless (an idempotent method, or a key the receiver
//! deduplicates by), and then once.
//!
//! The workers here are raw TCP servers speaking HTTP/1.1 by hand: no HTTP server library
//! closes an idle connection at the exact moment a client reuses it, and that moment is the
//! fault. Everything else (chain, token, facilitator, gateway, payments) is real, as in
//! `hire_env`. The worker skips the contract-token check a worker-sdk worker does: the
//! gateway's side of the exchange is what is under test.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use hiregate_engine::{
    outbound::{OutboundClient, OutboundError},
    settings::OutboundSettings,
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};
use url::Url;

use crate::{
    helpers::TestDatabase,
    hire_env::{HireEnv, PRICE, WorkerKind, hire_env, hire_listing},
};

/// One request as read off the socket.
struct RawRequest {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

/// Read one HTTP/1.1 request (head and `Content-Length` body); `None` when the peer closed
/// the connection first.
async fn read_request(stream: &mut TcpStream) -> Option<RawRequest> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(RawRequest {
        method,
        path,
        headers,
    })
}

async fn write_json(stream: &mut TcpStream, body: &Value, connection: &str) {
    let body = body.to_string();
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: {connection}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// A HIRE worker that answers each `/execute` with keep-alive, then closes the connection the
/// moment the next request arrives on it, without reading it: the reused connection is stale
/// exactly when the gateway reuses it. Probes are answered with `connection: close`, so only
/// executes leave connections in the gateway's pool.
#[derive(Clone, Default)]
struct StaleKeepAliveWorker {
    /// Execute requests read, by `X-Contract-ID`.
    executions: Arc<Mutex<HashMap<String, usize>>>,
    /// Requests that arrived on a kept-alive connection and were dropped unread.
    dropped_unread: Arc<Mutex<usize>>,
}

impl StaleKeepAliveWorker {
    async fn start(self) -> String {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(self.clone().serve(stream));
            }
        });
        endpoint
    }

    async fn serve(self, mut stream: TcpStream) {
        let Some(request) = read_request(&mut stream).await else {
            return;
        };
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/health") => write_json(&mut stream, &json!({"status": "ok"}), "close").await,
            ("GET", "/capabilities") => {
                write_json(&mut stream, &json!({"task_types": ["summarize"]}), "close").await;
            }
            ("POST", "/execute") => {
                let contract_id = request
                    .headers
                    .get("x-contract-id")
                    .cloned()
                    .unwrap_or_default();
                *self
                    .executions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(contract_id.clone())
                    .or_default() += 1;
                let answer = json!({
                    "status": "completed",
                    "contract_id": contract_id,
                    "output": {"type": "json", "content": {"summary": "kept alive", "confidence": 0.9}},
                });
                write_json(&mut stream, &answer, "keep-alive").await;
                // Idle until the client writes on this connection again (or closes it), then
                // close without reading: what arrived is never seen, and the unread bytes make
                // the kernel reset the connection.
                if stream.readable().await.is_ok() {
                    let mut probe = [0u8; 1];
                    if matches!(stream.peek(&mut probe).await, Ok(n) if n > 0) {
                        *self
                            .dropped_unread
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) += 1;
                    }
                }
            }
            _ => {}
        }
    }

    fn executions(&self) -> HashMap<String, usize> {
        self.executions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn dropped_unread(&self) -> usize {
        *self
            .dropped_unread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[tokio::test]
async fn a_paid_hire_survives_a_keep_alive_connection_the_worker_just_closed() {
    let mut env = hire_env(TestDatabase::sqlite(), WorkerKind::Echo, 4, "").await;
    let worker = StaleKeepAliveWorker::default();
    let endpoint = worker.clone().start().await;
    let response = env
        .app
        .register_worker(
            &env.operator_key,
            &hire_listing(&endpoint, env.pay_to, &env.devnet, 4),
        )
        .await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    env.worker_id = body["id"].as_str().unwrap().to_owned();

    let before = env.balances().await;
    // The first hire leaves its connection in the gateway's pool and the second is written
    // into it as the worker closes it. What is sent again goes on a connection of its own
    // (never pooled), so the third hire opens a new one and the fourth meets the fault again.
    let mut contracts = Vec::new();
    for n in 0..4 {
        let contract_id = env
            .contract(
                HireEnv::input(&format!("hire {n}")),
                json!({"retry_policy": {"max_attempts": 1}}),
            )
            .await;
        let payment = env.pay(&env.challenge(&contract_id).await).await;
        let answer = env.execute(&contract_id, Some(&payment), None).await;
        assert_eq!(answer.status, 200, "hire {n}: {:?}", answer.body);
        assert!(answer.payment_response().success);
        assert_eq!(env.state(&contract_id).await, "settled");
        let contract = env
            .app
            .store
            .get_contract(&contract_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(contract.attempts_used, 1, "hire {n}: no attempt spent");
        let attempts = env.app.store.list_attempts(&contract_id).await.unwrap();
        assert_eq!(attempts.len(), 1, "hire {n}: one attempt");
        contracts.push(contract_id);
    }
    assert!(
        worker.dropped_unread() >= 2,
        "the fault happened: requests met a connection the worker closed ({} times)",
        worker.dropped_unread()
    );
    let executions = worker.executions();
    for contract_id in &contracts {
        assert_eq!(
            executions.get(contract_id),
            Some(&1),
            "the worker ran each contract once: {executions:?}"
        );
    }
    let after = env.balances().await;
    let paid = alloy::primitives::U256::from(PRICE) * alloy::primitives::U256::from(4);
    assert_eq!(after.0, before.0 - paid);
    assert_eq!(after.1, before.1 + paid);
}

/// A server that reads every request in full and then resets the connection without an
/// answer: whatever it was sent, it has seen.
async fn reading_then_resetting_server() -> (String, Arc<Mutex<usize>>) {
    let seen = Arc::new(Mutex::new(0usize));
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                if read_request(&mut stream).await.is_some() {
                    *counter.lock().unwrap_or_else(PoisonError::into_inner) += 1;
                    // RST on close.
                    let _ = stream.set_zero_linger();
                }
            });
        }
    });
    (address, seen)
}

fn client() -> OutboundClient {
    OutboundClient::new(&OutboundSettings {
        connect_timeout_ms: 2000,
        request_timeout_ms: 5000,
        max_response_bytes: 1024 * 1024,
        allow_private_targets: true,
        require_https: false,
        stream_max_bytes: 1024 * 1024,
        stream_max_duration_ms: 5000,
    })
    .unwrap()
}

#[tokio::test]
async fn what_may_have_reached_a_server_is_sent_again_only_when_that_is_harmless() {
    let client = client();
    let seen =
        |counter: &Arc<Mutex<usize>>| *counter.lock().unwrap_or_else(PoisonError::into_inner);

    // A POST without a key: the server may have acted on it, so it is never sent again.
    let (address, counter) = reading_then_resetting_server().await;
    let url = Url::parse(&format!("{address}/execute")).unwrap();
    let post = client
        .request(reqwest::Method::POST, &url)
        .unwrap()
        .json(&json!({"run": 1}));
    let result = client.send(post).await;
    assert!(
        matches!(result, Err(OutboundError::ConnectionLost(_))),
        "{result:?}"
    );
    assert_eq!(seen(&counter), 1, "an unkeyed POST is sent once");

    // The same POST carrying a key its receiver deduplicates by: sent once more, not more.
    let (address, counter) = reading_then_resetting_server().await;
    let url = Url::parse(&format!("{address}/execute")).unwrap();
    let keyed = client
        .request(reqwest::Method::POST, &url)
        .unwrap()
        .header("Idempotency-Key", "ctr_1")
        .json(&json!({"run": 1}));
    let result = client.send_keyed(keyed).await;
    assert!(
        matches!(result, Err(OutboundError::ConnectionLost(_))),
        "{result:?}"
    );
    assert_eq!(seen(&counter), 2, "a keyed POST is sent once more");

    // A GET is idempotent (RFC 9110): sent once more.
    let (address, counter) = reading_then_resetting_server().await;
    let result = client
        .get(
            &Url::parse(&format!("{address}/health")).unwrap(),
            Duration::from_secs(2),
        )
        .await;
    assert!(
        matches!(result, Err(OutboundError::ConnectionLost(_))),
        "{result:?}"
    );
    assert_eq!(seen(&counter), 2, "a GET is sent once more");
}
