//! Test harness: a gateway per test on port 0 with its own database (a temp SQLite file, or a
//! fresh PostgreSQL database named by UUID and dropped afterwards), and a real in-test worker.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, http::StatusCode, routing::get};
use figment::{
    Figment,
    providers::{Format, Toml},
};
use hiregate_engine::{
    clock::TestClock,
    settings::{DEFAULT_CONFIG_TOML, Settings},
};
use hiregate_gateway::{
    startup::{App, AppOptions},
    telemetry,
};
use hiregate_store::Store;
use serde_json::{Value, json};
use sqlx::{Connection, Executor, PgConnection};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Admin key configured in every test app.
pub const ADMIN_KEY: &str = "test-admin-key-0123456789abcdef0123456789";

/// Default PostgreSQL for tests; override with `HIREGATE_TEST_DATABASE_URL`.
const DEFAULT_TEST_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A test database that is removed when dropped.
pub enum TestDatabase {
    /// A SQLite file in a temp dir.
    Sqlite(tempfile::TempDir),
    /// A PostgreSQL database created for this test.
    Postgres(PostgresDatabase),
    /// Another test's database, by URL (a second gateway instance on it); not removed.
    Shared(String),
}

impl TestDatabase {
    /// URL to give the gateway.
    pub fn url(&self) -> String {
        match self {
            Self::Sqlite(dir) => format!("sqlite://{}/hiregate.db", dir.path().display()),
            Self::Postgres(db) => db.url.clone(),
            Self::Shared(url) => url.clone(),
        }
    }

    /// A fresh SQLite database.
    pub fn sqlite() -> Self {
        Self::Sqlite(tempfile::tempdir().expect("temp dir"))
    }

    /// A fresh PostgreSQL database, or `None` (after printing why) when the server is
    /// unreachable. Under `CI=true` an unreachable server fails the test instead.
    pub async fn postgres() -> Option<Self> {
        PostgresDatabase::create().await.map(Self::Postgres)
    }
}

/// A database created on the test PostgreSQL server, dropped (forcibly) on drop.
pub struct PostgresDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PostgresDatabase {
    async fn create() -> Option<Self> {
        let admin_url = std::env::var("HIREGATE_TEST_DATABASE_URL")
            .unwrap_or_else(|_| DEFAULT_TEST_POSTGRES.to_owned());
        let connect =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url));
        let mut admin = match connect.await {
            Ok(Ok(conn)) => conn,
            outcome => {
                let reason = match outcome {
                    Ok(Err(error)) => error.to_string(),
                    _ => "connection timed out".to_owned(),
                };
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("PostgreSQL is required under CI=true but unreachable: {reason}");
                }
                eprintln!(
                    "SKIPPED: PostgreSQL unreachable ({reason}); set HIREGATE_TEST_DATABASE_URL \
                     or start PostgreSQL to run the PostgreSQL variant of this test"
                );
                return None;
            }
        };
        let name = format!("hiregate_test_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute(format!("create database {name}").as_str())
            .await
            .expect("create test database");
        let mut url = url::Url::parse(&admin_url).expect("test database URL");
        url.set_path(&format!("/{name}"));
        Some(Self {
            admin_url,
            name,
            url: url.to_string(),
        })
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        // Drop runs outside async context (and possibly during a panic): use a private runtime
        // on its own thread so cleanup happens even when the test failed.
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            runtime.block_on(async move {
                if let Ok(mut admin) = PgConnection::connect(&admin_url).await {
                    let _ = admin
                        .execute(format!("drop database if exists {name} with (force)").as_str())
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// Settings for a test app: defaults, then the harness's test settings, then `overrides`.
pub fn test_settings(database_url: &str, overrides: &str) -> Settings {
    let harness = format!(
        r#"
        [http]
        listen_address = "127.0.0.1:0"
        [database]
        url = "{database_url}"
        max_connections = 5
        [admin]
        api_key = "{ADMIN_KEY}"
        [outbound]
        allow_private_targets = true
        require_https = false
        connect_timeout_ms = 2000
        request_timeout_ms = 5000
        [health]
        interval_ms = 3600000
        probe_timeout_ms = 2000
        "#
    );
    let figment = Figment::from(Toml::string(DEFAULT_CONFIG_TOML))
        .merge(Toml::string(&harness))
        .merge(Toml::string(overrides));
    Settings::from_figment(&figment).expect("valid test settings")
}

/// A running gateway.
pub struct TestApp {
    /// `http://127.0.0.1:<port>`.
    pub address: String,
    /// Its store (same database).
    pub store: Store,
    /// Its database URL (for child processes that open the same database).
    pub database_url: String,
    /// Plain HTTP client.
    pub client: reqwest::Client,
    /// The engine's clock: at the system's time until a test moves it past a deadline
    /// instead of sleeping.
    pub clock: TestClock,
    shutdown: CancellationToken,
    server: Option<JoinHandle<()>>,
    _database: TestDatabase,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// A gateway on a fresh SQLite database.
pub async fn spawn_app() -> TestApp {
    spawn_app_with("").await
}

/// A gateway on a fresh SQLite database, with config `overrides` (TOML).
pub async fn spawn_app_with(overrides: &str) -> TestApp {
    spawn_app_on(TestDatabase::sqlite(), overrides).await
}

/// A gateway on a fresh PostgreSQL database, or `None` when PostgreSQL is unreachable.
pub async fn spawn_postgres_app() -> Option<TestApp> {
    Some(spawn_app_on(TestDatabase::postgres().await?, "").await)
}

/// A gateway on `database`.
pub async fn spawn_app_on(database: TestDatabase, overrides: &str) -> TestApp {
    telemetry::init_for_tests();
    let database_url = database.url();
    let settings = test_settings(&database_url, overrides);
    let clock = TestClock::new();
    let options = AppOptions {
        clock: Some(clock.clock()),
        ..AppOptions::default()
    };
    let app = App::build_with(settings, options)
        .await
        .expect("app builds");
    let address = format!("http://127.0.0.1:{}", app.port());
    assert_eq!(app.base_url().as_str().trim_end_matches('/'), address);
    let store = app.state().store.clone();
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let server = tokio::spawn(async move {
        app.run_until_stopped(token).await.expect("server runs");
    });
    TestApp {
        address,
        store,
        database_url,
        client: reqwest::Client::new(),
        clock,
        shutdown,
        server: Some(server),
        _database: database,
    }
}

impl TestApp {
    /// `GET path` with an optional bearer key.
    pub async fn get(&self, path: &str, key: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.address));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.expect("request sent")
    }

    /// `method path` with a JSON body and an optional bearer key.
    pub async fn send_json(
        &self,
        method: reqwest::Method,
        path: &str,
        key: Option<&str>,
        body: &Value,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.address))
            .json(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.expect("request sent")
    }

    /// Create a key through the admin API; returns `(key, principal_id)`.
    pub async fn create_key(&self, role: &str) -> (String, String) {
        let response = self
            .send_json(
                reqwest::Method::POST,
                "/v1/admin/keys",
                Some(ADMIN_KEY),
                &json!({ "role": role }),
            )
            .await;
        assert_eq!(response.status(), 201);
        let body: Value = response.json().await.expect("json");
        (
            body["api_key"].as_str().expect("api_key").to_owned(),
            body["principal_id"]
                .as_str()
                .expect("principal_id")
                .to_owned(),
        )
    }

    /// `POST /v1/workers` as `operator_key`.
    pub async fn register_worker(&self, operator_key: &str, body: &Value) -> reqwest::Response {
        self.send_json(
            reqwest::Method::POST,
            "/v1/workers",
            Some(operator_key),
            body,
        )
        .await
    }

    /// The owner's view of a worker.
    pub async fn owner_view(&self, operator_key: &str, id: &str) -> Value {
        let response = self
            .get(&format!("/v1/workers/{id}"), Some(operator_key))
            .await;
        assert_eq!(response.status(), 200);
        response.json().await.expect("json")
    }
}

/// A registration body for `endpoint` offering `tasks` as `(task_type, price)`.
pub fn worker_body(endpoint: &str, tasks: &[(&str, &str)]) -> Value {
    let tasks: serde_json::Map<String, Value> = tasks
        .iter()
        .map(|(task, price)| {
            (
                (*task).to_owned(),
                json!({
                    "price": price,
                    "output_schema": {
                        "type": "object",
                        "required": ["summary"],
                        "properties": { "summary": { "type": "string" } }
                    }
                }),
            )
        })
        .collect();
    json!({
        "endpoint": endpoint,
        "protocol": "hire",
        "pay_to": "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "network": "eip155:31337",
        "asset": "0x5FbDB2315678afecb367f032d93F642f64180aa3",
        "tasks": tasks,
        "max_parallel": 2,
    })
}

#[derive(Clone)]
struct WorkerControl {
    healthy: Arc<AtomicBool>,
    task_types: Arc<Mutex<Vec<String>>>,
    health_calls: Arc<AtomicUsize>,
    health_delay_ms: Arc<AtomicUsize>,
}

/// A real HTTP worker on 127.0.0.1:0 answering `/health` and `/capabilities` like a hire
/// worker; its health can be switched off and on.
pub struct TestWorker {
    /// Base URL.
    pub endpoint: String,
    control: WorkerControl,
    shutdown: CancellationToken,
}

impl Drop for TestWorker {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl TestWorker {
    /// Start a worker offering `task_types`.
    pub async fn start(task_types: &[&str]) -> Self {
        let control = WorkerControl {
            healthy: Arc::new(AtomicBool::new(true)),
            task_types: Arc::new(Mutex::new(
                task_types.iter().map(|t| (*t).to_owned()).collect(),
            )),
            health_calls: Arc::new(AtomicUsize::new(0)),
            health_delay_ms: Arc::new(AtomicUsize::new(0)),
        };
        let router = Router::new()
            .route("/health", get(worker_health))
            .route("/capabilities", get(worker_capabilities))
            .with_state(control.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("bind worker");
        let port = listener.local_addr().expect("worker addr").port();
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(token.cancelled_owned())
                .await;
        });
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            control,
            shutdown,
        }
    }

    /// Make `/health` answer 200 (true) or 503 (false).
    pub fn set_healthy(&self, healthy: bool) {
        self.control.healthy.store(healthy, Ordering::SeqCst);
    }

    /// Make `/health` take this long to answer.
    pub fn set_health_delay(&self, delay: Duration) {
        let millis = usize::try_from(delay.as_millis()).unwrap_or(usize::MAX);
        self.control.health_delay_ms.store(millis, Ordering::SeqCst);
    }

    /// How many times `/health` was called.
    pub fn health_calls(&self) -> usize {
        self.control.health_calls.load(Ordering::SeqCst)
    }
}

async fn worker_health(State(control): State<WorkerControl>) -> (StatusCode, Json<Value>) {
    control.health_calls.fetch_add(1, Ordering::SeqCst);
    let delay = control.health_delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay as u64)).await;
    }
    if control.healthy.load(Ordering::SeqCst) {
        (StatusCode::OK, Json(json!({ "status": "ok" })))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "down" })),
        )
    }
}

async fn worker_capabilities(State(control): State<WorkerControl>) -> Json<Value> {
    let task_types = control.task_types.lock().expect("lock").clone();
    Json(json!({ "task_types": task_types, "provider_family": "test", "model_id": "test-1" }))
}

/// A port on 127.0.0.1 with nothing listening (bound, then released).
pub async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Poll `check` every 25 ms until it returns `Some`, or panic after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Run one SQL statement on the test database behind the gateway's back (to plant a bug).
pub async fn tamper(database_url: &str, sql: &str) {
    if database_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(database_url).await.unwrap();
        conn.execute(sql).await.unwrap();
    } else {
        let mut conn = PgConnection::connect(database_url).await.unwrap();
        conn.execute(sql).await.unwrap();
    }
}

/// A signed-terms document as a contract row holds it, for tests that store contracts directly:
/// `contract_id` hiring `worker_id` for `summarize` at `amount` atomic units of a Base Sepolia
/// token, with `input` as the task's input. Built by the contracts crate, so the store reads it
/// back as valid terms.
pub fn signed_terms(contract_id: &str, worker_id: &str, amount: u64, input: &Value) -> Value {
    use hiregate_contracts::{
        money::{AtomicAmount, Network, PaymentScheme, Price},
        terms::{
            ContractProposal, ContractTerms, OfferContext, TermsLimits, WorkerOffer, WorkerParty,
            WorkerProtocol,
        },
    };
    let worker_id = worker_id.parse().expect("a worker id");
    let offer = WorkerOffer {
        worker: WorkerParty::new(
            worker_id,
            "https://worker.example.com/".parse().expect("a URL"),
            WorkerProtocol::Hire,
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
                .parse()
                .expect("an address"),
        )
        .expect("a worker party"),
        task_type: "summarize".parse().expect("a task type"),
        price: Price::new(
            PaymentScheme::Exact,
            Network::eip155(84532).expect("a network"),
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
                .parse()
                .expect("an address"),
            AtomicAmount::new(u128::from(amount)),
        )
        .expect("a price"),
        output_schema: None,
    };
    let proposal: ContractProposal = serde_json::from_value(json!({
        "worker_id": offer.worker.id(),
        "task_type": "summarize",
        "input": input,
    }))
    .expect("a proposal");
    let context = OfferContext {
        contract_id: contract_id.parse().expect("a contract id"),
        seeker: hiregate_contracts::id::SeekerId::generate(),
        created_at: chrono::Utc::now().into(),
        offer_ttl_s: 900,
        escrow: None,
    };
    let terms = ContractTerms::from_proposal(proposal, &offer, context, &TermsLimits::default())
        .expect("terms");
    serde_json::to_value(terms).expect("terms serialize")
}
