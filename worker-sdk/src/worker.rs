//! [`WorkerBuilder`] → [`Worker`] → axum [`Router`]: the configuration side of a worker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use url::Url;

use crate::callback::CallbackConfig;
pub use crate::executions::ExecutionCounter;
use crate::executions::Executions;
use crate::gateway_auth::GatewayKeys;
use crate::handler::TaskHandler;
use crate::hosted::HostedOutputs;
use crate::ids::{IdError, TaskType, WorkerId};
use crate::protocol::{Capabilities, PROTOCOL_NAME, PriceInfo};
use crate::routes::{self, WorkerShared};
use crate::verify::{VerifierSetup, VerifyHandler};

/// How long `/execute` waits for a handler before answering `pending` by default; below
/// the HIRE document's 30-second connection timeout.
pub const DEFAULT_SYNC_WAIT: Duration = Duration::from_secs(25);
/// How long finished runs are remembered for duplicates and polls by default (the HIRE
/// document's long-running poll horizon).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Largest task input accepted by default.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 2 * 1024 * 1024;

/// Configures a [`Worker`].
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use hiregate_worker_sdk::{GatewayKeys, TaskContext, TaskOutcome, WorkerBuilder};
/// let worker = WorkerBuilder::new("echo", "1.0.0")
///     .task_type("echo")
///     .gateway_keys(GatewayKeys::remote(
///         "https://gateway.example/.well-known/jwks.json".parse()?,
///     ))
///     .build(|_ctx: TaskContext, input: serde_json::Value| async move {
///         TaskOutcome::json(input)
///     })?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
/// axum::serve(listener, worker.router()).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct WorkerBuilder {
    name: String,
    version: String,
    task_types: Vec<String>,
    pricing: Vec<(String, PriceInfo)>,
    auth: Option<AuthMode>,
    worker_id: Option<WorkerId>,
    public_url: Option<Url>,
    callback: Option<CallbackConfig>,
    sync_wait: Option<Duration>,
    retention: Duration,
    max_concurrent_tasks: Option<usize>,
    max_input_bytes: usize,
    verifier_setup: Option<VerifierSetup>,
}

#[derive(Debug)]
enum AuthMode {
    Gateway(GatewayKeys),
    /// Explicit opt-out for local development.
    Disabled,
}

/// Why a worker could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Name or version is empty.
    #[error("worker {0} must not be empty")]
    Empty(&'static str),
    /// No task type was declared.
    #[error("a worker must declare at least one task type")]
    NoTaskTypes,
    /// A task type is not a valid identifier.
    #[error("task type {task_type:?}: {source}")]
    InvalidTaskType {
        /// The offending value.
        task_type: String,
        /// Why it was refused.
        source: IdError,
    },
    /// A price names a task type the worker does not declare.
    #[error("price given for undeclared task type {0:?}")]
    PriceForUndeclaredTaskType(String),
    /// Neither gateway keys nor the explicit local-dev opt-out were configured.
    #[error(
        "configure gateway keys (gateway_keys) or explicitly allow_unauthenticated_for_local_dev"
    )]
    NoGatewayAuth,
    /// The public URL cannot carry paths (e.g. `mailto:`).
    #[error("public URL must be an http(s) base URL")]
    InvalidPublicUrl,
    /// `max_concurrent_tasks` was 0.
    #[error("max_concurrent_tasks must be at least 1")]
    ZeroConcurrency,
    /// An HTTP client (JWKS fetch, callbacks) could not be created.
    #[error("cannot create HTTP client: {0}")]
    HttpClient(#[from] reqwest::Error),
}

impl WorkerBuilder {
    /// A worker called `name` at `version`.
    #[must_use]
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            task_types: Vec::new(),
            pricing: Vec::new(),
            auth: None,
            worker_id: None,
            public_url: None,
            callback: None,
            sync_wait: Some(DEFAULT_SYNC_WAIT),
            retention: DEFAULT_RETENTION,
            max_concurrent_tasks: None,
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            verifier_setup: None,
        }
    }

    /// Declares a task type (e.g. `summarize`) listed in `/capabilities`.
    #[must_use]
    pub fn task_type(mut self, task_type: impl Into<String>) -> Self {
        self.task_types.push(task_type.into());
        self
    }

    /// Publishes an informational price for a declared task type.
    #[must_use]
    pub fn price(mut self, task_type: impl Into<String>, price: PriceInfo) -> Self {
        self.pricing.push((task_type.into(), price));
        self
    }

    /// Verifies the gateway's contract token on `/execute` and `/tasks/{id}` with these keys.
    #[must_use]
    pub fn gateway_keys(mut self, keys: GatewayKeys) -> Self {
        self.auth = Some(AuthMode::Gateway(keys));
        self
    }

    /// This worker's id at the gateway (`wk_…`, from registration): tokens the gateway
    /// issued for another worker are then refused (401 `wrong_worker`). Recommended when
    /// several workers trust the same gateway.
    #[must_use]
    pub fn worker_id(mut self, worker_id: WorkerId) -> Self {
        self.worker_id = Some(worker_id);
        self
    }

    /// Accepts calls without a contract token. For local development only: anyone who can
    /// reach the worker can then make it work. `X-Contract-ID` is still required.
    #[must_use]
    pub fn allow_unauthenticated_for_local_dev(mut self) -> Self {
        self.auth = Some(AuthMode::Disabled);
        self
    }

    /// The worker's public base URL, used for `poll_url`. Without it the URL is derived
    /// from the request's `Host` header (plain `http`).
    #[must_use]
    pub fn public_url(mut self, url: Url) -> Self {
        self.public_url = Some(url);
        self
    }

    /// Calls the gateway back when work that was reported `pending` ends.
    #[must_use]
    pub fn completion_callback(mut self, config: CallbackConfig) -> Self {
        self.callback = Some(config);
        self
    }

    /// How long `/execute` waits for the handler before answering `pending` while the
    /// work continues ([`DEFAULT_SYNC_WAIT`] by default).
    #[must_use]
    pub fn sync_wait(mut self, wait: Duration) -> Self {
        self.sync_wait = Some(wait);
        self
    }

    /// Makes `/execute` wait for the handler however long it takes (unless the handler
    /// itself answers pending).
    #[must_use]
    pub fn wait_for_handler_indefinitely(mut self) -> Self {
        self.sync_wait = None;
        self
    }

    /// How long finished runs are remembered ([`DEFAULT_RETENTION`] by default). A
    /// duplicate arriving later runs the handler again.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Caps handler runs in progress (sync and background); beyond it `/execute` answers
    /// 429 with `Retry-After`.
    #[must_use]
    pub fn max_concurrent_tasks(mut self, max: usize) -> Self {
        self.max_concurrent_tasks = Some(max);
        self
    }

    /// Largest task input accepted, in bytes ([`DEFAULT_MAX_INPUT_BYTES`] by default).
    #[must_use]
    pub fn max_input_bytes(mut self, max: usize) -> Self {
        self.max_input_bytes = max;
        self
    }

    /// Builds the worker around `handler`.
    ///
    /// # Errors
    /// [`BuildError`] naming the first invalid setting.
    /// Serves `POST /verify` with `handler`, so this worker can vote as a verifier in
    /// `vp.crosscheck.v1` quorums (`seeds/wattswarm-verify-endpoint.txt`). `provider_family`
    /// and `model_id` are declared in `/capabilities` and bound in every vote's
    /// `verifier_result_hash`. See [`crate::verify`].
    #[must_use]
    pub fn verifier(
        mut self,
        provider_family: impl Into<String>,
        model_id: impl Into<String>,
        handler: impl VerifyHandler,
    ) -> Self {
        self.verifier_setup = Some(VerifierSetup {
            provider_family: provider_family.into(),
            model_id: model_id.into(),
            handler: Box::new(handler),
        });
        self
    }

    pub fn build(self, handler: impl TaskHandler) -> Result<Worker, BuildError> {
        if self.name.trim().is_empty() {
            return Err(BuildError::Empty("name"));
        }
        if self.version.trim().is_empty() {
            return Err(BuildError::Empty("version"));
        }
        if self.task_types.is_empty() {
            return Err(BuildError::NoTaskTypes);
        }
        let mut task_types = Vec::with_capacity(self.task_types.len());
        for raw in self.task_types {
            let task_type =
                TaskType::parse(&raw).map_err(|source| BuildError::InvalidTaskType {
                    task_type: raw.clone(),
                    source,
                })?;
            if !task_types.contains(&task_type) {
                task_types.push(task_type);
            }
        }
        let mut pricing = BTreeMap::new();
        for (raw, price) in self.pricing {
            let task_type = TaskType::parse(&raw)
                .ok()
                .filter(|t| task_types.contains(t))
                .ok_or(BuildError::PriceForUndeclaredTaskType(raw))?;
            pricing.insert(task_type, price);
        }
        if self.max_concurrent_tasks == Some(0) {
            return Err(BuildError::ZeroConcurrency);
        }
        if let Some(url) = &self.public_url
            && (url.cannot_be_a_base() || !matches!(url.scheme(), "http" | "https"))
        {
            return Err(BuildError::InvalidPublicUrl);
        }
        let verifier = match self.auth.ok_or(BuildError::NoGatewayAuth)? {
            AuthMode::Gateway(keys) => Some(keys.into_verifier(self.worker_id)?),
            AuthMode::Disabled => {
                tracing::warn!(
                    worker = %self.name,
                    "gateway token check DISABLED (local development): anyone can call /execute"
                );
                None
            }
        };
        let callback = self.callback.map(CallbackConfig::into_sender).transpose()?;

        let capabilities = Capabilities {
            protocol: PROTOCOL_NAME.to_owned(),
            name: self.name,
            version: self.version,
            task_types,
            pricing,
            max_concurrent_tasks: self.max_concurrent_tasks,
            completion_callbacks: callback.is_some(),
            cancel: true,
            verify: self.verifier_setup.is_some(),
            provider_family: self
                .verifier_setup
                .as_ref()
                .map(|setup| setup.provider_family.clone()),
            model_id: self
                .verifier_setup
                .as_ref()
                .map(|setup| setup.model_id.clone()),
        };
        Ok(Worker {
            shared: Arc::new(WorkerShared {
                capabilities,
                verifier,
                executions: Arc::new(Executions::new(self.retention, self.max_concurrent_tasks)),
                hosted: Arc::new(HostedOutputs::new(self.retention)),
                handler: Arc::new(handler),
                public_url: self.public_url,
                callback,
                sync_wait: self.sync_wait,
                max_input_bytes: self.max_input_bytes,
                handler_runs: ExecutionCounter::default(),
                verifier_setup: self.verifier_setup,
            }),
        })
    }
}

/// A configured worker; [`Worker::router`] serves it.
#[derive(Debug, Clone)]
pub struct Worker {
    shared: Arc<WorkerShared>,
}

impl Worker {
    /// The axum router with `GET /health`, `GET /capabilities`, `POST /execute` and
    /// `GET /tasks/{id}`. Routers from one worker share its state.
    pub fn router(&self) -> Router {
        routes::router(Arc::clone(&self.shared))
    }

    /// Counts handler runs (each call of the handler, not each request): what tests
    /// watch to prove duplicates did not run twice.
    #[must_use]
    pub fn execution_counter(&self) -> ExecutionCounter {
        self.shared.handler_runs.clone()
    }

    /// What `/capabilities` answers.
    #[must_use]
    pub fn capabilities(&self) -> &Capabilities {
        &self.shared.capabilities
    }
}
