//! The reference WattSwarm executor: `/health`, `/capabilities`, `/execute`, and the evidence
//! artifacts its responses point at.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt as _;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use url::Url;

use super::wire::{
    ArtifactRef, Capabilities, ExecuteRequest, ExecuteResponse, Health, InlineEvidence,
};
use super::{Refusal, sha256_tagged};
use crate::reference::server::Listening;
use crate::reference::{FLUSH_PAUSE, lock};

/// What the executor does with the next executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorBehaviour {
    /// Answers [`ExecutorConfig::candidate_output`] (or the seed-style default answer) with an
    /// evidence ref whose digest matches the served bytes.
    Valid,
    /// Answers a `candidate_output` that the request's `output_schema` rejects: the first of
    /// `{}` and `{"answer": 42, "confidence": "high"}` that fails it (`{}` if the schema accepts
    /// both, i.e. accepts anything).
    SchemaInvalid,
    /// Valid output, but the evidence ref's `digest` is the digest of other bytes than the
    /// ones served at its `uri`.
    EvidenceDigestMismatch,
    /// Valid output, but the evidence ref's `uri` points at a loopback port nobody listens on.
    EvidenceUnreachable,
    /// Valid output; the first `/execute` answer after this behaviour is set is replaced by
    /// the given transport fault, *after* the execution ran and was stored. A retry with the
    /// same `execution_id` gets the stored response without a second execution.
    FaultOnce(TransportFault),
    /// Valid output after the execution takes this long (a retry with the same
    /// `execution_id` waits for the same execution instead of starting another).
    Slow(Duration),
}

/// A fault between a completed execution and the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportFault {
    /// `503 Service Unavailable`, as an overloaded proxy in front of the runtime would answer.
    ServiceUnavailable,
    /// `200` headers and half of the JSON body, then the connection is aborted.
    DropMidResponse,
}

/// How to start an [`Executor`].
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Served at `/capabilities`; `/execute` refuses task types and profiles not listed here.
    pub capabilities: Capabilities,
    /// Initial behaviour.
    pub behaviour: ExecutorBehaviour,
    /// `candidate_output` of valid executions; `None` answers the seed's example shape
    /// `{"answer": "<profile>::<inputs.prompt>", "confidence": 0.92}`.
    pub candidate_output: Option<Map<String, Value>>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            capabilities: Capabilities {
                task_types: vec!["swarm".to_owned(), "topic_interpretation".to_owned()],
                profiles: vec!["default".to_owned(), "careful".to_owned()],
                provider_family: "reference-wattswarm".to_owned(),
                model_id: "reference-model-v1".to_owned(),
            },
            behaviour: ExecutorBehaviour::Valid,
            candidate_output: None,
        }
    }
}

/// What the executor has seen and done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecutorCounters {
    /// `GET /health` calls.
    pub health_checks: u64,
    /// `GET /capabilities` calls.
    pub capability_checks: u64,
    /// `POST /execute` calls, accepted or not, replays included.
    pub execute_requests: u64,
    /// Executions actually run: one per distinct `execution_id`.
    pub executions: u64,
    /// `/execute` calls answered from the store of an earlier execution.
    pub replays: u64,
    /// Transport faults injected.
    pub faults_injected: u64,
    /// `GET /evidence/{execution_id}` calls that served bytes.
    pub evidence_fetches: u64,
}

/// A running reference WattSwarm executor on `127.0.0.1`. Dropping it stops the server.
#[derive(Debug)]
pub struct Executor {
    listening: Listening,
    state: Arc<ExecutorState>,
}

impl Executor {
    /// Starts the executor on a free loopback port.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn spawn(config: ExecutorConfig) -> io::Result<Self> {
        // A port that was free a moment ago and is now closed: connecting to it is refused,
        // which is what "evidence URL unreachable" means to a fetcher.
        let closed_port = StdTcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?
            .local_addr()?
            .port();
        let unreachable_base = Url::parse(&format!("http://127.0.0.1:{closed_port}/"))
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
        let state = Arc::new(ExecutorState {
            base_url: Mutex::new(None),
            unreachable_base,
            capabilities: config.capabilities,
            candidate_output: config.candidate_output,
            behaviour: Mutex::new(config.behaviour),
            armed_fault: Mutex::new(armed_fault(config.behaviour)),
            executions: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            counters: AtomicCounters::default(),
        });
        let router = Router::new()
            .route("/health", get(health))
            .route("/capabilities", get(capabilities))
            .route("/execute", post(execute))
            .route("/evidence/{execution_id}", get(evidence))
            .with_state(Arc::clone(&state));
        let listening = Listening::spawn(router).await?;
        *lock(&state.base_url) = Some(listening.base_url().clone());
        Ok(Self { listening, state })
    }

    /// `http://127.0.0.1:<port>/`.
    #[must_use]
    pub fn base_url(&self) -> &Url {
        self.listening.base_url()
    }

    /// What `/capabilities` answers.
    #[must_use]
    pub fn capabilities(&self) -> &Capabilities {
        &self.state.capabilities
    }

    /// Changes the behaviour of executions started from now on (stored executions keep their
    /// response). Setting [`ExecutorBehaviour::FaultOnce`] arms one fault.
    pub fn set_behaviour(&self, behaviour: ExecutorBehaviour) {
        *lock(&self.state.armed_fault) = armed_fault(behaviour);
        *lock(&self.state.behaviour) = behaviour;
    }

    /// Snapshot of the counters.
    #[must_use]
    pub fn counters(&self) -> ExecutorCounters {
        self.state.counters.snapshot()
    }

    /// Every well-formed `/execute` body received, in arrival order (replays included).
    #[must_use]
    pub fn requests(&self) -> Vec<ExecuteRequest> {
        lock(&self.state.requests).clone()
    }

    /// The response stored for `execution_id`, once its execution finished.
    #[must_use]
    pub fn stored_response(&self, execution_id: &str) -> Option<ExecuteResponse> {
        self.state
            .finished(execution_id)
            .map(|stored| stored.response.clone())
    }

    /// The bytes served as `execution_id`'s evidence artifact, once its execution finished.
    #[must_use]
    pub fn evidence_bytes(&self, execution_id: &str) -> Option<Bytes> {
        self.state
            .finished(execution_id)
            .map(|stored| stored.evidence.clone())
    }

    /// Stops accepting connections (connecting is refused) until [`Self::come_up`].
    pub async fn go_down(&self) {
        self.listening.go_down().await;
    }

    /// Accepts connections again on the same port.
    ///
    /// # Errors
    /// When the port cannot be bound again.
    pub async fn come_up(&self) -> io::Result<()> {
        self.listening.come_up().await
    }
}

/// One finished execution: what `/execute` answers for its `execution_id`, and the evidence
/// artifact it points at.
#[derive(Debug)]
struct StoredExecution {
    response: ExecuteResponse,
    evidence: Bytes,
}

/// `None` while the execution runs, then the result, for every caller of the same id.
type ExecutionSlot = watch::Receiver<Option<Arc<StoredExecution>>>;

#[derive(Debug)]
struct ExecutorState {
    /// Set right after binding; evidence URIs are built from it.
    base_url: Mutex<Option<Url>>,
    unreachable_base: Url,
    capabilities: Capabilities,
    candidate_output: Option<Map<String, Value>>,
    behaviour: Mutex<ExecutorBehaviour>,
    /// The fault the next `/execute` answer gets, consumed by that answer.
    armed_fault: Mutex<Option<TransportFault>>,
    executions: Mutex<HashMap<String, ExecutionSlot>>,
    requests: Mutex<Vec<ExecuteRequest>>,
    counters: AtomicCounters,
}

impl ExecutorState {
    fn finished(&self, execution_id: &str) -> Option<Arc<StoredExecution>> {
        lock(&self.executions)
            .get(execution_id)
            .and_then(|slot| slot.borrow().clone())
    }
}

#[derive(Debug, Default)]
struct AtomicCounters {
    health_checks: AtomicU64,
    capability_checks: AtomicU64,
    execute_requests: AtomicU64,
    executions: AtomicU64,
    replays: AtomicU64,
    faults_injected: AtomicU64,
    evidence_fetches: AtomicU64,
}

impl AtomicCounters {
    fn snapshot(&self) -> ExecutorCounters {
        ExecutorCounters {
            health_checks: self.health_checks.load(Ordering::SeqCst),
            capability_checks: self.capability_checks.load(Ordering::SeqCst),
            execute_requests: self.execute_requests.load(Ordering::SeqCst),
            executions: self.executions.load(Ordering::SeqCst),
            replays: self.replays.load(Ordering::SeqCst),
            faults_injected: self.faults_injected.load(Ordering::SeqCst),
            evidence_fetches: self.evidence_fetches.load(Ordering::SeqCst),
        }
    }
}

const fn armed_fault(behaviour: ExecutorBehaviour) -> Option<TransportFault> {
    match behaviour {
        ExecutorBehaviour::FaultOnce(fault) => Some(fault),
        _ => None,
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

async fn health(State(state): State<Arc<ExecutorState>>) -> Json<Health> {
    bump(&state.counters.health_checks);
    Json(Health {
        status: "ok".to_owned(),
    })
}

async fn capabilities(State(state): State<Arc<ExecutorState>>) -> Json<Capabilities> {
    bump(&state.counters.capability_checks);
    Json(state.capabilities.clone())
}

async fn execute(
    State(state): State<Arc<ExecutorState>>,
    body: Result<Json<ExecuteRequest>, JsonRejection>,
) -> Result<Response, Refusal> {
    bump(&state.counters.execute_requests);
    let Json(request) = body.map_err(|rejection| Refusal::BadBody {
        what: "ExecuteRequest",
        detail: rejection.body_text(),
    })?;
    if !state.capabilities.task_types.contains(&request.task_type) {
        return Err(Refusal::UnsupportedTaskType(request.task_type));
    }
    if !state.capabilities.profiles.contains(&request.profile) {
        return Err(Refusal::UnsupportedProfile(request.profile));
    }
    lock(&state.requests).push(request.clone());

    let mut slot = {
        let mut executions = lock(&state.executions);
        if let Some(existing) = executions.get(&request.execution_id) {
            bump(&state.counters.replays);
            existing.clone()
        } else {
            let (done, slot) = watch::channel(None);
            executions.insert(request.execution_id.clone(), slot.clone());
            let behaviour = *lock(&state.behaviour);
            // Spawned, not awaited in the handler: a caller that times out and disconnects
            // must not cancel the execution, or its retry would execute a second time.
            tokio::spawn(run_execution(Arc::clone(&state), request, behaviour, done));
            slot
        }
    };
    let stored = slot
        .wait_for(Option::is_some)
        .await
        .map_err(|_| Refusal::ExecutionLost)?
        .clone()
        .ok_or(Refusal::ExecutionLost)?;

    let fault = lock(&state.armed_fault).take();
    if let Some(fault) = fault {
        bump(&state.counters.faults_injected);
        return Ok(fault_response(fault, &stored.response));
    }
    Ok(Json(stored.response.clone()).into_response())
}

async fn run_execution(
    state: Arc<ExecutorState>,
    request: ExecuteRequest,
    behaviour: ExecutorBehaviour,
    done: watch::Sender<Option<Arc<StoredExecution>>>,
) {
    bump(&state.counters.executions);
    if let ExecutorBehaviour::Slow(duration) = behaviour {
        tokio::time::sleep(duration).await;
    }
    let stored = build_execution(&state, &request, behaviour);
    // Receivers live in the executions map for the server's lifetime, so nobody can have
    // stopped listening; an error here would only mean the server is being torn down.
    let _ = done.send(Some(Arc::new(stored)));
}

fn build_execution(
    state: &ExecutorState,
    request: &ExecuteRequest,
    behaviour: ExecutorBehaviour,
) -> StoredExecution {
    let capabilities = &state.capabilities;
    let producer = format!("{}/{}", capabilities.provider_family, capabilities.model_id);
    let evidence_document = json!({
        "task_id": request.task_id,
        "execution_id": request.execution_id,
        "attempt_id": request.attempt_id,
        "stage": request.stage,
        "producer": producer,
        "trace": ["received", "executed", "answered"],
    });
    let evidence = Bytes::from(evidence_document.to_string());

    let candidate_output = match behaviour {
        ExecutorBehaviour::SchemaInvalid => {
            schema_invalid_output(&request.task_contract.output_schema)
        }
        _ => state
            .candidate_output
            .clone()
            .unwrap_or_else(|| default_answer(request)),
    };
    let digest = if behaviour == ExecutorBehaviour::EvidenceDigestMismatch {
        let mut other_bytes = evidence.to_vec();
        other_bytes.extend_from_slice(b" (not what is served)");
        sha256_tagged(&other_bytes)
    } else {
        sha256_tagged(&evidence)
    };
    let served_from = if behaviour == ExecutorBehaviour::EvidenceUnreachable {
        Some(state.unreachable_base.clone())
    } else {
        lock(&state.base_url).clone()
    };
    let uri = served_from
        .map(|base| evidence_url(base, &request.execution_id).to_string())
        .unwrap_or_default();

    StoredExecution {
        response: ExecuteResponse {
            candidate_output,
            evidence_inline: vec![InlineEvidence {
                mime: "text/plain".to_owned(),
                content: format!("trace:{}", request.attempt_id),
            }],
            evidence_refs: vec![ArtifactRef {
                uri,
                digest,
                size_bytes: u64::try_from(evidence.len()).unwrap_or(u64::MAX),
                mime: "application/json".to_owned(),
                created_at: unix_millis(),
                producer,
            }],
        },
        evidence,
    }
}

/// `<base>evidence/<execution_id>`, the id percent-encoded as one path segment.
fn evidence_url(mut base: Url, execution_id: &str) -> Url {
    if let Ok(mut segments) = base.path_segments_mut() {
        segments.pop_if_empty().push("evidence").push(execution_id);
    }
    base
}

/// The seed's toy answer: `"<profile>::<prompt>"` with a fixed confidence.
fn default_answer(request: &ExecuteRequest) -> Map<String, Value> {
    let prompt = request
        .inputs
        .get("prompt")
        .and_then(Value::as_str)
        .map_or_else(
            || Value::Object(request.inputs.clone()).to_string(),
            str::to_owned,
        );
    let mut answer = Map::new();
    answer.insert(
        "answer".to_owned(),
        Value::String(format!("{}::{prompt}", request.profile)),
    );
    answer.insert("confidence".to_owned(), json!(0.92));
    answer
}

fn schema_invalid_output(output_schema: &Value) -> Map<String, Value> {
    let candidates = [
        Map::new(),
        json!({"answer": 42, "confidence": "high"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    ];
    let Ok(validator) = jsonschema::validator_for(output_schema) else {
        return Map::new();
    };
    candidates
        .into_iter()
        .find(|candidate| !validator.is_valid(&Value::Object(candidate.clone())))
        .unwrap_or_default()
}

fn fault_response(fault: TransportFault, response: &ExecuteResponse) -> Response {
    match fault {
        TransportFault::ServiceUnavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream temporarily unavailable",
        )
            .into_response(),
        TransportFault::DropMidResponse => {
            let body = serde_json::to_vec(response).unwrap_or_default();
            let half = Bytes::copy_from_slice(&body[..body.len() / 2]);
            // Erroring the body stream makes hyper abort the connection without finishing
            // the chunked body: the client sees a 200 whose body breaks off. The pause
            // before the error lets hyper flush the headers and the first half; an error
            // polled straight after them would discard them unsent.
            let abort = async {
                tokio::time::sleep(FLUSH_PAUSE).await;
                Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "fault injected",
                ))
            };
            let chunks = futures::stream::once(async { Ok::<_, io::Error>(half) })
                .chain(futures::stream::once(abort));
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from_stream(chunks))
                .unwrap_or_else(|_| StatusCode::SERVICE_UNAVAILABLE.into_response())
        }
    }
}

async fn evidence(
    State(state): State<Arc<ExecutorState>>,
    Path(execution_id): Path<String>,
) -> Result<Response, Refusal> {
    let stored = state
        .finished(&execution_id)
        .ok_or(Refusal::UnknownArtifact)?;
    bump(&state.counters.evidence_fetches);
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        stored.evidence.clone(),
    )
        .into_response())
}

fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}
