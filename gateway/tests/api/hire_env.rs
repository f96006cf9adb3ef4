//! Harness for the paid-hire tests: a real anvil chain with the devnet EIP-3009 token
//! (`hiregate_payments::devnet`), a gateway whose embedded `LocalFacilitator` settles on it, a
//! real worker-sdk example worker on 127.0.0.1:0 that checks the gateway's contract tokens
//! against its JWKS, and a funded seeker wallet that signs x402 payments.

use std::{net::SocketAddr, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    signers::local::PrivateKeySigner,
};
use hiregate_payments::{
    PaymentPayload, PaymentRequired, PaymentRequirements, SettleResponse, SignOptions,
    decode_header, devnet::Devnet, encode_header, sign_exact_payment, sign_exact_payment_with,
};
use hiregate_store::PaymentRecord;
use hiregate_worker_sdk::{
    GatewayKeys, RunningServer, Worker,
    example_workers::{
        FaultyBehaviour, FaultyMode, echo_builder, echo_handler, faulty_builder, faulty_handler,
        summary_output_schema,
    },
    serve,
};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::helpers::{ADMIN_KEY, TestApp, TestDatabase, spawn_app_on};

/// Price of the `summarize` task in the tests: 1.5 tokens of 6 decimals.
pub const PRICE: u64 = 1_500_000;
/// Tokens minted to the seeker wallet.
pub const SEEKER_FUNDS: u64 = 100_000_000;

/// Which example worker to run.
#[derive(Debug, Clone, Copy)]
pub enum WorkerKind {
    /// Always valid output.
    Echo,
    /// Misbehaves per input `mode`.
    Faulty,
}

/// A real worker-sdk worker served on 127.0.0.1:0.
pub struct RunningWorker {
    /// The worker (its execution counter).
    pub worker: Worker,
    /// Base URL.
    pub endpoint: String,
    shutdown: CancellationToken,
    _server: RunningServer,
}

impl RunningWorker {
    /// Handler runs so far.
    pub fn executions(&self) -> usize {
        self.worker.execution_counter().get()
    }

    /// Stop serving (in-flight requests finish).
    pub fn stop(&self) {
        self.shutdown.cancel();
    }
}

impl Drop for RunningWorker {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl RunningWorker {
    /// Stop serving and wait until the listener is closed (its port can be reused).
    pub async fn shut_down(mut self) {
        self.shutdown.cancel();
        // `Drop` needs a server to hand over; swap in nothing by taking the fields apart.
        let server = std::mem::replace(&mut self._server, placeholder_server().await);
        let _ = server.wait().await;
    }
}

async fn placeholder_server() -> RunningServer {
    serve(
        axum::Router::new(),
        SocketAddr::from(([127, 0, 0, 1], 0)),
        async {},
    )
    .await
    .unwrap()
}

/// Serve an already built `worker` on `address`.
pub async fn serve_worker(worker: Worker, address: SocketAddr) -> RunningWorker {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let server = serve(worker.router(), address, async move {
        token.cancelled().await;
    })
    .await
    .unwrap();
    RunningWorker {
        endpoint: server.base_url().as_str().trim_end_matches('/').to_owned(),
        worker,
        shutdown,
        _server: server,
    }
}

/// Start `kind` trusting the gateway at `gateway` (its JWKS).
pub async fn start_worker(kind: WorkerKind, gateway: &str) -> RunningWorker {
    let jwks = format!("{gateway}/.well-known/jwks.json").parse().unwrap();
    let worker = match kind {
        WorkerKind::Echo => echo_builder()
            .gateway_keys(GatewayKeys::remote(jwks))
            .build(echo_handler())
            .unwrap(),
        WorkerKind::Faulty => faulty_builder()
            .gateway_keys(GatewayKeys::remote(jwks))
            .build(faulty_handler(FaultyBehaviour {
                mode: FaultyMode::Ok,
                delay: Duration::from_millis(300),
            }))
            .unwrap(),
    };
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let server = serve(
        worker.router(),
        SocketAddr::from(([127, 0, 0, 1], 0)),
        async move { token.cancelled().await },
    )
    .await
    .unwrap();
    RunningWorker {
        endpoint: server.base_url().as_str().trim_end_matches('/').to_owned(),
        worker,
        shutdown,
        _server: server,
    }
}

/// Everything a paid-hire test needs.
pub struct HireEnv {
    /// The chain (kept alive for the test).
    pub devnet: Devnet,
    /// The gateway.
    pub app: TestApp,
    /// An operator key and account.
    pub operator_key: String,
    /// A seeker key.
    pub seeker_key: String,
    /// The worker.
    pub worker: RunningWorker,
    /// Its listing id.
    pub worker_id: String,
    /// Its payout address.
    pub pay_to: Address,
    /// The seeker's funded wallet.
    pub wallet: PrivateKeySigner,
}

/// Gateway settings that point the embedded facilitator at `devnet`, plus `extra` TOML.
pub fn chain_settings(devnet: &Devnet, extra: &str) -> String {
    format!(
        r#"
        [chains.devnet]
        network = "{network}"
        rpc_url = "{rpc}"
        relayer_private_key = "{key}"
        [outbound]
        request_timeout_ms = 10000
        {extra}
        "#,
        network = devnet.network(),
        rpc = devnet.rpc_url(),
        key = devnet.relayer().to_bytes(),
    )
}

/// Start a devnet, a gateway on `database` (with `extra` settings layered on the chain
/// settings), a `kind` worker registered with `max_parallel`, and a funded seeker.
pub async fn hire_env(
    database: TestDatabase,
    kind: WorkerKind,
    max_parallel: u32,
    extra: &str,
) -> HireEnv {
    let devnet = Devnet::start().await.expect("anvil devnet starts");
    hire_env_on(devnet, database, kind, max_parallel, extra).await
}

/// [`hire_env`] on an already running `devnet`.
pub async fn hire_env_on(
    devnet: Devnet,
    database: TestDatabase,
    kind: WorkerKind,
    max_parallel: u32,
    extra: &str,
) -> HireEnv {
    let app = spawn_app_on(database, &chain_settings(&devnet, extra)).await;
    let worker = start_worker(kind, &app.address).await;
    let listing = hire_listing(&worker.endpoint, Address::ZERO, &devnet, max_parallel);
    listed_env(devnet, app, worker, listing).await
}

/// An operator and a seeker key on `app`, `worker` registered with `listing` (its `pay_to`
/// replaced by a fresh address, the env's `pay_to`), and a seeker wallet funded with gas and
/// [`SEEKER_FUNDS`] of the devnet's EIP-3009 token.
pub async fn listed_env(
    devnet: Devnet,
    app: TestApp,
    worker: RunningWorker,
    mut listing: Value,
) -> HireEnv {
    let (operator_key, _) = app.create_key("operator").await;
    let (seeker_key, _) = app.create_key("seeker").await;
    let pay_to = PrivateKeySigner::random().address();
    listing["pay_to"] = json!(pay_to.to_checksum(None));
    let response = app.register_worker(&operator_key, &listing).await;
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
    let body: Value = response.json().await.unwrap();
    let worker_id = body["id"].as_str().unwrap().to_owned();
    let wallet = devnet
        .funded_account(U256::from(SEEKER_FUNDS))
        .await
        .expect("funded seeker");
    HireEnv {
        devnet,
        app,
        operator_key,
        seeker_key,
        worker,
        worker_id,
        pay_to,
        wallet,
    }
}

impl HireEnv {
    /// Give the seeker [`SEEKER_FUNDS`] of the devnet's plain ERC-20 (no EIP-3009).
    pub async fn fund_with_permit_token(&self) {
        self.devnet
            .mint_permit_token(self.wallet.address(), U256::from(SEEKER_FUNDS))
            .await
            .expect("minted");
    }

    /// The seeker lets Permit2 move `allowance` of `asset` (the one approval a Permit2 payer
    /// makes).
    pub async fn approve_permit2(&self, asset: Address, allowance: u64) {
        self.devnet
            .approve_permit2(&self.wallet, asset, U256::from(allowance))
            .await
            .expect("approved Permit2");
    }
}

/// The registration body of a hire worker offering `summarize` at [`PRICE`].
pub fn hire_listing(endpoint: &str, pay_to: Address, devnet: &Devnet, max_parallel: u32) -> Value {
    json!({
        "endpoint": endpoint,
        "protocol": "hire",
        "pay_to": pay_to.to_checksum(None),
        "network": devnet.network(),
        "asset": devnet.token().to_checksum(None),
        "tasks": {
            "summarize": {
                "price": PRICE.to_string(),
                "output_schema": summary_output_schema(),
            }
        },
        "max_parallel": max_parallel,
    })
}

/// A finished execute: status, headers and JSON body.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// JSON body (`null` when empty).
    pub body: Value,
}

impl Answer {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The decoded `PAYMENT-REQUIRED`.
    pub fn payment_required(&self) -> PaymentRequired {
        decode_header(
            self.header("payment-required")
                .expect("PAYMENT-REQUIRED header"),
        )
        .expect("PAYMENT-REQUIRED decodes")
    }

    /// The decoded `PAYMENT-RESPONSE`.
    pub fn payment_response(&self) -> SettleResponse {
        decode_header(
            self.header("payment-response")
                .expect("PAYMENT-RESPONSE header"),
        )
        .expect("PAYMENT-RESPONSE decodes")
    }

    /// `error.code` of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// Asserts that `again`, a repeat of the execute this answered, is this answer read back
    /// from the store: the same body besides the duplicate's marks (`duplicate`, `original`)
    /// and the same `PAYMENT-RESPONSE`, byte for byte. A paid hire's first answer is built
    /// from what its execute wrote, a repeat's from the store: the two must never differ.
    pub fn assert_replayed_by(&self, again: &Answer) {
        assert_eq!(again.status, self.status, "{:?}", again.body);
        assert_eq!(again.header("x-duplicate"), Some("true"));
        assert_eq!(
            again.header("payment-response"),
            self.header("payment-response")
        );
        let mut replayed = again.body.clone();
        let marks = replayed.as_object_mut().expect("a JSON object");
        assert_eq!(marks.remove("duplicate"), Some(json!(true)));
        assert!(marks.remove("original").is_some(), "{:?}", again.body);
        assert_eq!(replayed, self.body);
    }
}

impl HireEnv {
    /// A listing of this environment's worker like its own (same price, payout and token), to
    /// change before [`Self::register`].
    pub fn another_listing(&self) -> Value {
        hire_listing(&self.worker.endpoint, self.pay_to, &self.devnet, 4)
    }

    /// Registers `listing` with the operator's key; its id.
    pub async fn register(&self, listing: &Value) -> String {
        let response = self.app.register_worker(&self.operator_key, listing).await;
        assert_eq!(response.status(), 201);
        response.json::<Value>().await.unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The summarize input used by most tests.
    pub fn input(text: &str) -> Value {
        json!({"text": text})
    }

    /// `POST /v1/contracts` for `summarize` with `input` and `extra` proposal fields.
    pub async fn propose(&self, input: Value, extra: Value) -> reqwest::Response {
        let mut body = json!({
            "worker_id": self.worker_id,
            "task_type": "summarize",
            "input": input,
            "sla": {"max_latency_ms": 5000},
        });
        if let (Some(target), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            for (key, value) in extra {
                target.insert(key.clone(), value.clone());
            }
        }
        self.app
            .send_json(Method::POST, "/v1/contracts", Some(&self.seeker_key), &body)
            .await
    }

    /// A contract that must be created; returns its id.
    pub async fn contract(&self, input: Value, extra: Value) -> String {
        let response = self.propose(input, extra).await;
        assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
        let body: Value = response.json().await.unwrap();
        body["contract_id"].as_str().unwrap().to_owned()
    }

    /// `POST /v1/contracts/{id}/execute` as the seeker, with an optional payment and body.
    pub async fn execute(
        &self,
        contract_id: &str,
        payment: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        self.execute_as(&self.seeker_key, contract_id, payment, body)
            .await
    }

    /// The same as `key`.
    pub async fn execute_as(
        &self,
        key: &str,
        contract_id: &str,
        payment: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        self.execute_at(&self.app.address, key, contract_id, payment, body)
            .await
    }

    /// [`Self::execute`] on the gateway at `address` (another instance on the same database).
    pub async fn execute_on(
        &self,
        address: &str,
        contract_id: &str,
        payment: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        self.execute_at(address, &self.seeker_key, contract_id, payment, body)
            .await
    }

    async fn execute_at(
        &self,
        address: &str,
        key: &str,
        contract_id: &str,
        payment: Option<&str>,
        body: Option<&Value>,
    ) -> Answer {
        let mut request = self
            .app
            .client
            .post(format!("{address}/v1/contracts/{contract_id}/execute"))
            .bearer_auth(key)
            .timeout(Duration::from_secs(60));
        if let Some(payment) = payment {
            request = request.header("PAYMENT-SIGNATURE", payment);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        answer(request.send().await.expect("execute sent")).await
    }

    /// The 402 challenge of `contract_id`'s execute.
    pub async fn challenge(&self, contract_id: &str) -> PaymentRequired {
        let answer = self.execute(contract_id, None, None).await;
        assert_eq!(answer.status, 402, "{:?}", answer.body);
        answer.payment_required()
    }

    /// A payment of `challenge` signed by the seeker's wallet, as a header value.
    pub async fn pay(&self, challenge: &PaymentRequired) -> String {
        encode_header(&self.sign(challenge).await)
    }

    /// The signed payload (to tamper with).
    pub async fn sign(&self, challenge: &PaymentRequired) -> PaymentPayload {
        sign_exact_payment(
            &self.wallet,
            &challenge.accepts[0],
            Some(challenge.resource.clone()),
            now(),
        )
        .await
        .expect("signs")
    }

    /// A payload signed for `requirements` but claiming `accepted` (to test prechecks).
    pub async fn sign_for(
        &self,
        requirements: &PaymentRequirements,
        accepted: &PaymentRequirements,
        nonce: Option<B256>,
    ) -> PaymentPayload {
        let mut payload = sign_exact_payment_with(
            &self.wallet,
            requirements,
            None,
            now(),
            &SignOptions {
                nonce,
                ..SignOptions::default()
            },
        )
        .await
        .expect("signs");
        payload.accepted = accepted.clone();
        payload
    }

    /// Token balance of `who`.
    pub async fn balance(&self, who: Address) -> U256 {
        self.devnet.balance_of(who).await.expect("balance")
    }

    /// (seeker, worker payout) balances.
    pub async fn balances(&self) -> (U256, U256) {
        (
            self.balance(self.wallet.address()).await,
            self.balance(self.pay_to).await,
        )
    }

    /// The stored contract state.
    pub async fn state(&self, contract_id: &str) -> String {
        self.app
            .store
            .get_contract(contract_id)
            .await
            .unwrap()
            .expect("contract stored")
            .state
            .to_string()
    }

    /// The stored payment of a contract.
    pub async fn payment(&self, contract_id: &str) -> PaymentRecord {
        self.app
            .store
            .payment_of_contract(contract_id)
            .await
            .unwrap()
            .expect("payment stored")
    }

    /// Event kinds of a contract, in order.
    pub async fn event_kinds(&self, contract_id: &str) -> Vec<String> {
        self.app
            .store
            .list_contract_events(contract_id, 0, 1000)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.kind.as_str().to_owned())
            .collect()
    }
}

/// Read a response into an [`Answer`].
pub async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
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

/// Unix seconds now.
pub fn now() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp()).unwrap()
}

/// The gateway's records equal the chain's (`GET /v1/admin/reconcile` is ok); returns the
/// report.
pub async fn assert_reconciled(env: &HireEnv) -> Value {
    let response = env.app.get("/v1/admin/reconcile", Some(ADMIN_KEY)).await;
    assert_eq!(response.status(), 200);
    let report: Value = response.json().await.unwrap();
    assert_eq!(report["ok"], true, "{report:#}");
    report
}
