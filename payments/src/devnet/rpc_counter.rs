//! A JSON-RPC proxy that counts what a client asks a node, by method: the gateway benchmark
//! puts it between the gateway and anvil to report the RPC calls one paid hire makes, and tests
//! count the calls a facilitator makes.
//!
//! It forwards every request body unchanged and returns the node's answer unchanged; batches
//! (JSON arrays) count each call in them. [`RpcCounter::refusing`] also answers one method with
//! "method not found", as a node without it does: a fault anvil cannot produce (it has every
//! method this project calls).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use axum::{Router, body::Bytes, extract::State, http::StatusCode, response::IntoResponse};
use url::Url;

/// Calls counted so far, by JSON-RPC method.
pub type MethodCounts = BTreeMap<String, u64>;

#[derive(Clone)]
struct Shared {
    upstream: Url,
    refused: Option<&'static str>,
    client: reqwest::Client,
    counts: Arc<Mutex<MethodCounts>>,
}

/// The running proxy; stops when dropped.
#[derive(Debug)]
pub struct RpcCounter {
    address: SocketAddr,
    counts: Arc<Mutex<MethodCounts>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for RpcCounter {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl RpcCounter {
    /// Listens on `127.0.0.1:0` and forwards to `upstream`.
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub async fn start(upstream: Url) -> std::io::Result<Self> {
        Self::listen(upstream, None).await
    }

    /// [`Self::start`], answering single calls of `method` with JSON-RPC error -32601 instead
    /// of forwarding them (they are not counted).
    ///
    /// # Errors
    /// No loopback port could be bound.
    pub async fn refusing(upstream: Url, method: &'static str) -> std::io::Result<Self> {
        Self::listen(upstream, Some(method)).await
    }

    async fn listen(upstream: Url, refused: Option<&'static str>) -> std::io::Result<Self> {
        let counts = Arc::new(Mutex::new(MethodCounts::new()));
        let shared = Shared {
            upstream,
            refused,
            client: reqwest::Client::new(),
            counts: counts.clone(),
        };
        let router = Router::new()
            .fallback(axum::routing::post(forward))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Self {
            address,
            counts,
            server,
        })
    }

    /// The URL to give the client instead of the node's.
    pub fn url(&self) -> Url {
        Url::parse(&format!("http://{}/", self.address)).expect("a socket address is a URL")
    }

    /// The counts so far.
    #[must_use]
    pub fn counts(&self) -> MethodCounts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Calls of `method` so far.
    #[must_use]
    pub fn calls_of(&self, method: &str) -> u64 {
        self.counts
            .lock()
            .map_or(0, |c| c.get(method).copied().unwrap_or(0))
    }
}

async fn forward(State(shared): State<Shared>, body: Bytes) -> impl IntoResponse {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&body) {
        if let Some(method) = shared.refused
            && value["method"] == method
        {
            let refusal = serde_json::json!({
                "jsonrpc": "2.0",
                "id": value["id"],
                "error": {"code": -32601, "message": format!("the method {method} does not exist")},
            });
            return axum::Json(refusal).into_response();
        }
        let calls = match &value {
            serde_json::Value::Array(batch) => batch.iter().collect::<Vec<_>>(),
            single => vec![single],
        };
        if let Ok(mut counts) = shared.counts.lock() {
            for call in calls {
                let method = call["method"].as_str().unwrap_or("?").to_owned();
                *counts.entry(method).or_default() += 1;
            }
        }
    }
    let answer = shared
        .client
        .post(shared.upstream.clone())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    match answer {
        Ok(answer) => {
            let status =
                StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let bytes = answer.bytes().await.unwrap_or_default();
            (status, [("content-type", "application/json")], bytes).into_response()
        }
        Err(error) => (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    }
}

/// `after - before`, per method, without the zeros.
#[must_use]
pub fn difference(before: &MethodCounts, after: &MethodCounts) -> MethodCounts {
    after
        .iter()
        .filter_map(|(method, count)| {
            let delta = count - before.get(method).copied().unwrap_or(0);
            (delta > 0).then(|| (method.clone(), delta))
        })
        .collect()
}
