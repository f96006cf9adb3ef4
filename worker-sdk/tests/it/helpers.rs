//! Spawning workers on 127.0.0.1:0 with real signed tokens, and typed request helpers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use hiregate_worker_sdk::example_workers::{
    FaultyBehaviour, FaultyMode, faulty_builder, faulty_handler,
};
use hiregate_worker_sdk::testing::TestTokenIssuer;
use hiregate_worker_sdk::{
    ContractId, ExecutionCounter, GatewayKeys, Jwks, RunningServer, TaskHandler, WorkerBuilder,
    serve,
};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::Value;
use tokio::sync::{RwLock, oneshot};
use url::Url;

/// A new contract id, as the gateway would issue.
pub fn fresh_contract() -> ContractId {
    ContractId::generate()
}

/// Serves a router on 127.0.0.1:0 until dropped.
pub struct Served {
    pub server: RunningServer,
    _stop: oneshot::Sender<()>,
}

impl Served {
    pub async fn start(router: Router) -> Self {
        let (stop, stopped) = oneshot::channel::<()>();
        let server = serve(router, "127.0.0.1:0".parse().unwrap(), async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        Self {
            server,
            _stop: stop,
        }
    }

    pub fn url(&self, path: &str) -> Url {
        self.server.base_url().join(path).unwrap()
    }
}

pub struct TestWorker {
    pub served: Served,
    pub runs: ExecutionCounter,
    pub issuer: TestTokenIssuer,
    pub client: reqwest::Client,
}

impl TestWorker {
    /// The faulty example worker (default mode `ok`) with a fixed JWKS.
    pub async fn faulty() -> Self {
        Self::faulty_with(|b| b).await
    }

    /// The faulty example worker, with extra builder settings.
    pub async fn faulty_with(configure: impl FnOnce(WorkerBuilder) -> WorkerBuilder) -> Self {
        Self::spawn(
            configure(faulty_builder()),
            faulty_handler(FaultyBehaviour::new(FaultyMode::Ok)),
        )
        .await
    }

    /// Any builder and handler; the gateway keys are set to a fresh test issuer's, and the
    /// worker id to the one its tokens name.
    pub async fn spawn(builder: WorkerBuilder, handler: impl TaskHandler) -> Self {
        let issuer = TestTokenIssuer::new("gw-key-1").unwrap();
        let worker = builder
            .gateway_keys(GatewayKeys::fixed(issuer.jwks()))
            .worker_id(issuer.worker_id().clone())
            .build(handler)
            .unwrap();
        let runs = worker.execution_counter();
        Self {
            served: Served::start(worker.router()).await,
            runs,
            issuer,
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> Url {
        self.served.url(path)
    }

    /// `POST /execute` as the gateway sends it: token, `X-Contract-ID`, `Idempotency-Key`.
    pub fn execute(&self, contract_id: &ContractId, input: &Value) -> RequestBuilder {
        self.client
            .post(self.url("/execute"))
            .bearer_auth(self.issuer.token_for(contract_id).unwrap())
            .header("x-contract-id", contract_id.as_str())
            .header("idempotency-key", contract_id.as_str())
            .json(input)
    }

    pub fn execute_attempt(
        &self,
        contract_id: &ContractId,
        attempt: u32,
        input: &Value,
    ) -> RequestBuilder {
        self.execute(contract_id, input)
            .header("x-attempt", attempt.to_string())
    }

    /// `GET <poll_url>` with the gateway's headers.
    pub fn poll(&self, poll_url: &str, contract_id: &ContractId) -> RequestBuilder {
        self.client
            .get(poll_url)
            .bearer_auth(self.issuer.token_for(contract_id).unwrap())
            .header("x-contract-id", contract_id.as_str())
    }

    /// Polls until the task leaves `pending`/`partial`; returns the final report.
    pub async fn poll_until_done(&self, poll_url: &str, contract_id: &ContractId) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let report = json_of(
                self.poll(poll_url, contract_id).send().await.unwrap(),
                StatusCode::OK,
            )
            .await;
            if !matches!(report["status"].as_str(), Some("pending" | "partial")) {
                return report;
            }
            assert!(Instant::now() < deadline, "task still {report} after 10 s");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Asserts the status and returns the JSON body.
pub async fn json_of(response: Response, expected: StatusCode) -> Value {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, expected, "unexpected status; body: {body}");
    body
}

/// Asserts a JSON error with this status and code.
pub async fn expect_error(response: Response, status: StatusCode, code: &str) -> Value {
    let body = json_of(response, status).await;
    assert_eq!(body["error"]["code"], code, "body: {body}");
    assert!(body["error"]["message"].is_string(), "body: {body}");
    body
}

/// A stand-in for the gateway's `/.well-known/jwks.json`: serves whatever key set it holds
/// now and counts fetches.
pub struct JwksServer {
    pub served: Served,
    pub jwks: Arc<RwLock<Jwks>>,
    pub fetches: Arc<AtomicUsize>,
}

impl JwksServer {
    pub async fn start(initial: Jwks) -> Self {
        let jwks = Arc::new(RwLock::new(initial));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (state_jwks, state_fetches) = (Arc::clone(&jwks), Arc::clone(&fetches));
        let router = Router::new().route(
            "/.well-known/jwks.json",
            get(move || {
                let jwks = Arc::clone(&state_jwks);
                let fetches = Arc::clone(&state_fetches);
                async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    axum::Json(jwks.read().await.clone())
                }
            }),
        );
        Self {
            served: Served::start(router).await,
            jwks,
            fetches,
        }
    }

    pub fn jwks_url(&self) -> Url {
        self.served.url("/.well-known/jwks.json")
    }
}
