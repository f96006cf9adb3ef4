//! The reference Superwire executor: runs live in memory, each with an append-only event log
//! that any number of streams (the original `POST /execute`, later `GET …/events`) read from
//! their own cursor. Disconnecting a stream leaves the run going; cancelling ends it.

use std::collections::HashSet;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use url::Url;

use super::wire::{
    CancelResponse, ErrorBody, ErrorDetail, ExecuteOptions, ExecuteRequest, Issue, RUN_ID_HEADER,
    Secrets, ValidateRequest, ValidateResponse, WorkflowCompleted, WorkflowFailed, event,
};
use crate::reference::server::Listening;
use crate::reference::{FLUSH_PAUSE, lock};

/// How a run ends when nobody cancels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every agent completes, then `workflow_completed` with the output block.
    Complete,
    /// The first agent fails: `workflow_failed` with `kind: "execution_error"`.
    Fail,
}

/// Cut streams mid-way so a client has to reconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCut {
    /// A stream connection is aborted (no terminating chunk) after sending this many events.
    pub after_events: usize,
    /// How many stream connections to cut in total, counted across runs (then streams are
    /// left alone).
    pub connections: usize,
}

/// How to start an [`Executor`].
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Agent names of the workflow, run in order: each adds an `agent_started` and an
    /// `agent_completed` event.
    pub agents: Vec<String>,
    /// Time each agent takes (skipped on a cache hit).
    pub step_delay: Duration,
    /// The workflow's output block; `None` answers `{"result": {"message": "reply to:
    /// <input.message>"}}`.
    pub output: Option<Value>,
    /// How runs end.
    pub outcome: RunOutcome,
    /// Streams to cut, if any.
    pub stream_cut: Option<StreamCut>,
    /// Whether streamed events carry `id:` lines. Without them (the seed's example stream has
    /// none) a reconnect has no `Last-Event-ID` to send and gets the run's events from the
    /// start.
    pub event_ids: bool,
    /// Keys the workflow's `secrets` block declares: a request missing one is refused with a
    /// `validation_error`, as the seed says secrets "must match the workflow secrets block".
    pub required_secrets: Vec<String>,
    /// Issues `/validate` reports on a source it accepts (lint-like notes; the seed says it
    /// "returns validation diagnostics" without fixing their shape).
    pub validation_notes: Vec<Issue>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            agents: vec!["draft".to_owned(), "reply".to_owned()],
            step_delay: Duration::from_millis(20),
            output: None,
            outcome: RunOutcome::Complete,
            stream_cut: None,
            event_ids: true,
            required_secrets: Vec::new(),
            validation_notes: Vec::new(),
        }
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Still producing events.
    Running,
    /// Ended with `workflow_completed`.
    Completed,
    /// Ended with `workflow_failed`.
    Failed,
    /// Cancelled through `POST /execute/{run_id}/cancel` (ended with `workflow_failed`,
    /// `kind: "cancelled"`).
    Cancelled,
}

/// One event as the executor emitted it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEvent {
    /// Position in the run: 1, 2, 3… (the SSE `id` unless the config turns ids off).
    pub id: u64,
    /// SSE `event` name.
    pub event: String,
    /// SSE `data`, parsed.
    pub data: Value,
}

/// What the executor received for one run, and where the run is.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// `x-superwire-run-id`.
    pub run_id: String,
    /// `input` as received.
    pub input: Map<String, Value>,
    /// `secrets` as received (redacted in `Debug`).
    pub secrets: Secrets,
    /// `options` as received.
    pub options: ExecuteOptions,
    /// The decoded `.wire` source.
    pub workflow_source: String,
    /// Whether the caller asked for `text/event-stream`.
    pub streamed: bool,
    /// Where the run is now.
    pub status: RunStatus,
}

/// What the executor has seen and done so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecutorCounters {
    /// `POST /execute` calls, accepted or not.
    pub execute_requests: u64,
    /// Runs started.
    pub runs: u64,
    /// Runs started with `Accept: text/event-stream`.
    pub streamed_runs: u64,
    /// `GET /execute/{run_id}/events` calls for a known run.
    pub resumes: u64,
    /// Stream connections aborted by a [`StreamCut`].
    pub stream_cuts: u64,
    /// `POST /execute/{run_id}/cancel` calls for a known run.
    pub cancel_requests: u64,
    /// Runs actually cancelled (were running when the cancel arrived).
    pub cancellations: u64,
    /// `POST /validate` calls.
    pub validations: u64,
    /// Runs that reused cached agent outputs.
    pub cache_hits: u64,
}

/// A running reference Superwire executor on `127.0.0.1`. Dropping it stops the server.
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
        let state = Arc::new(ExecutorState {
            cuts_left: Mutex::new(config.stream_cut.map_or(0, |cut| cut.connections)),
            config: Mutex::new(config),
            runs: Mutex::new(Vec::new()),
            cached_keys: Mutex::new(HashSet::new()),
            counters: AtomicCounters::default(),
        });
        let router = Router::new()
            .route("/execute", post(execute))
            .route("/execute/{run_id}/events", get(resume))
            .route("/execute/{run_id}/cancel", post(cancel))
            .route("/validate", post(validate))
            .with_state(Arc::clone(&state));
        let listening = Listening::spawn(router).await?;
        Ok(Self { listening, state })
    }

    /// `http://127.0.0.1:<port>/`.
    #[must_use]
    pub fn base_url(&self) -> &Url {
        self.listening.base_url()
    }

    /// How runs started from now on end.
    pub fn set_outcome(&self, outcome: RunOutcome) {
        lock(&self.state.config).outcome = outcome;
    }

    /// Time each agent of runs started from now on takes.
    pub fn set_step_delay(&self, step_delay: Duration) {
        lock(&self.state.config).step_delay = step_delay;
    }

    /// Replaces the stream-cut plan (and its remaining budget of connections).
    pub fn set_stream_cut(&self, stream_cut: Option<StreamCut>) {
        *lock(&self.state.cuts_left) = stream_cut.map_or(0, |cut| cut.connections);
        lock(&self.state.config).stream_cut = stream_cut;
    }

    /// Snapshot of the counters.
    #[must_use]
    pub fn counters(&self) -> ExecutorCounters {
        self.state.counters.snapshot()
    }

    /// Every run, oldest first.
    #[must_use]
    pub fn runs(&self) -> Vec<RunRecord> {
        lock(&self.state.runs)
            .iter()
            .map(|run| run.record())
            .collect()
    }

    /// The events `run_id` emitted so far, `None` for an unknown run.
    #[must_use]
    pub fn events(&self, run_id: &str) -> Option<Vec<RecordedEvent>> {
        self.state
            .find(run_id)
            .map(|run| run.log.borrow().events.clone())
    }

    /// Stops accepting connections (connecting is refused) until [`Self::come_up`]; open
    /// streams keep going.
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

#[derive(Debug)]
struct ExecutorState {
    config: Mutex<ExecutorConfig>,
    cuts_left: Mutex<usize>,
    runs: Mutex<Vec<Arc<Run>>>,
    cached_keys: Mutex<HashSet<String>>,
    counters: AtomicCounters,
}

impl ExecutorState {
    fn find(&self, run_id: &str) -> Option<Arc<Run>> {
        lock(&self.runs)
            .iter()
            .find(|run| run.id == run_id)
            .cloned()
    }

    /// Whether the stream that just sent `sent` events must be cut now (and spends one cut).
    fn take_cut(&self, sent: usize) -> bool {
        let Some(cut) = lock(&self.config).stream_cut else {
            return false;
        };
        if sent != cut.after_events {
            return false;
        }
        let mut cuts_left = lock(&self.cuts_left);
        if *cuts_left == 0 {
            return false;
        }
        *cuts_left -= 1;
        bump(&self.counters.stream_cuts);
        true
    }
}

#[derive(Debug, Default)]
struct AtomicCounters {
    execute_requests: AtomicU64,
    runs: AtomicU64,
    streamed_runs: AtomicU64,
    resumes: AtomicU64,
    stream_cuts: AtomicU64,
    cancel_requests: AtomicU64,
    cancellations: AtomicU64,
    validations: AtomicU64,
    cache_hits: AtomicU64,
}

impl AtomicCounters {
    fn snapshot(&self) -> ExecutorCounters {
        let read = |counter: &AtomicU64| counter.load(Ordering::SeqCst);
        ExecutorCounters {
            execute_requests: read(&self.execute_requests),
            runs: read(&self.runs),
            streamed_runs: read(&self.streamed_runs),
            resumes: read(&self.resumes),
            stream_cuts: read(&self.stream_cuts),
            cancel_requests: read(&self.cancel_requests),
            cancellations: read(&self.cancellations),
            validations: read(&self.validations),
            cache_hits: read(&self.cache_hits),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

/// The part of a run every stream reads: events so far and whether more can come.
#[derive(Debug, Clone)]
struct RunLog {
    events: Vec<RecordedEvent>,
    status: RunStatus,
}

#[derive(Debug)]
struct Run {
    id: String,
    request: ExecuteRequest,
    workflow_source: String,
    streamed: bool,
    log: watch::Sender<RunLog>,
    task: Mutex<Option<AbortHandle>>,
}

impl Run {
    fn record(&self) -> RunRecord {
        RunRecord {
            run_id: self.id.clone(),
            input: self.request.input.clone(),
            secrets: self.request.secrets.clone(),
            options: self.request.options.clone(),
            workflow_source: self.workflow_source.clone(),
            streamed: self.streamed,
            status: self.log.borrow().status,
        }
    }

    /// Appends an event unless the run already ended; a terminal event sets `ends_as`.
    /// Ignoring late appends is what keeps a cancelled run's log ending at its cancel event
    /// even if the aborted task was mid-step.
    fn append(&self, name: &str, data: Value, ends_as: Option<RunStatus>) -> bool {
        self.log.send_if_modified(|log| {
            if log.status != RunStatus::Running {
                return false;
            }
            let id = u64::try_from(log.events.len()).unwrap_or(u64::MAX - 1) + 1;
            log.events.push(RecordedEvent {
                id,
                event: name.to_owned(),
                data,
            });
            if let Some(status) = ends_as {
                log.status = status;
            }
            true
        })
    }
}

fn error_body(kind: &str, message: impl Into<String>, issues: Vec<Issue>) -> ErrorBody {
    ErrorBody {
        error: ErrorDetail {
            kind: kind.to_owned(),
            message: message.into(),
            issues,
        },
    }
}

fn error_response(status: StatusCode, body: ErrorBody) -> Response {
    (status, Json(body)).into_response()
}

fn validation_error(message: impl Into<String>, issues: Vec<Issue>) -> Response {
    error_response(
        StatusCode::BAD_REQUEST,
        error_body("validation_error", message, issues),
    )
}

fn not_found(run_id: &str) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        error_body("not_found", format!("no run `{run_id}`"), Vec::new()),
    )
}

/// Parses a JSON body, or says why it is not one in a validation-error message. The message
/// names the position and class of the problem only: serde's own message can quote the
/// offending value, which may be a secret.
fn parse_body<T: DeserializeOwned>(body: &Bytes) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|err| {
        let class = match err.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "not valid JSON",
            serde_json::error::Category::Data => "missing a field or holding a wrong type",
            serde_json::error::Category::Eof => "truncated",
        };
        format!(
            "request body is {class} (line {}, column {})",
            err.line(),
            err.column()
        )
    })
}

/// Decodes `workflow_source_base64` into the `.wire` text.
fn decode_workflow_source(encoded: &str) -> Result<String, Issue> {
    let issue = |message: &str| Issue {
        path: "workflow_source_base64".to_owned(),
        message: message.to_owned(),
    };
    let bytes = BASE64
        .decode(encoded)
        .map_err(|_| issue("is not valid base64"))?;
    let source = String::from_utf8(bytes).map_err(|_| issue("does not decode to UTF-8 text"))?;
    if source.trim().is_empty() {
        return Err(issue("decodes to an empty workflow"));
    }
    Ok(source)
}

fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("text/event-stream"))
}

async fn execute(
    State(state): State<Arc<ExecutorState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    bump(&state.counters.execute_requests);
    let request: ExecuteRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(message) => return validation_error(message, Vec::new()),
    };
    let workflow_source = match decode_workflow_source(&request.workflow_source_base64) {
        Ok(source) => source,
        Err(issue) => return validation_error("invalid workflow source", vec![issue]),
    };
    let config = lock(&state.config).clone();
    let missing_secrets: Vec<Issue> = config
        .required_secrets
        .iter()
        .filter(|key| !request.secrets.expose().contains_key(key.as_str()))
        .map(|key| Issue {
            path: format!("secrets.{key}"),
            message: "required by the workflow's secrets block but not provided".to_owned(),
        })
        .collect();
    if !missing_secrets.is_empty() {
        return validation_error("secrets do not match the workflow", missing_secrets);
    }

    let streamed = wants_event_stream(&headers);
    let (log, _) = watch::channel(RunLog {
        events: Vec::new(),
        status: RunStatus::Running,
    });
    let run = Arc::new(Run {
        id: uuid::Uuid::new_v4().to_string(),
        request,
        workflow_source,
        streamed,
        log,
        task: Mutex::new(None),
    });
    lock(&state.runs).push(Arc::clone(&run));
    bump(&state.counters.runs);
    if streamed {
        bump(&state.counters.streamed_runs);
    }
    let task = tokio::spawn(drive_run(Arc::clone(&state), Arc::clone(&run), config));
    *lock(&run.task) = Some(task.abort_handle());

    if streamed {
        return stream_response(&state, &run, 0);
    }
    let mut log = run.log.subscribe();
    let ended = match log.wait_for(|log| log.status != RunStatus::Running).await {
        Ok(log) => log.clone(),
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    json_outcome(&ended)
}

/// The non-streaming answer of an ended run: its output block, or its error.
fn json_outcome(log: &RunLog) -> Response {
    let last = log.events.last().map(|event| event.data.clone());
    match log.status {
        RunStatus::Completed => {
            let output = last
                .and_then(|data| serde_json::from_value::<WorkflowCompleted>(data).ok())
                .map_or(Value::Null, |completed| completed.output);
            Json(output).into_response()
        }
        RunStatus::Failed | RunStatus::Cancelled | RunStatus::Running => {
            let failure = last
                .and_then(|data| serde_json::from_value::<WorkflowFailed>(data).ok())
                .map_or_else(
                    || error_body("execution_error", "run ended without a result", Vec::new()),
                    |failed| ErrorBody {
                        error: failed.error,
                    },
                );
            let status = if log.status == RunStatus::Cancelled {
                StatusCode::CONFLICT
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            error_response(status, failure)
        }
    }
}

/// Runs the workflow: one step per agent, appending events as it goes.
async fn drive_run(state: Arc<ExecutorState>, run: Arc<Run>, config: ExecutorConfig) {
    let cache_key = run
        .request
        .options
        .cache_key
        .clone()
        .filter(|_| run.request.options.use_cache.unwrap_or(true));
    let cache_hit = cache_key
        .as_ref()
        .is_some_and(|key| lock(&state.cached_keys).contains(key));
    if cache_hit {
        bump(&state.counters.cache_hits);
    }
    let output = config
        .output
        .clone()
        .unwrap_or_else(|| default_output(&run.request.input));

    run.append(event::WORKFLOW_STARTED, json!({}), None);
    let nodes: Vec<Value> = config
        .agents
        .iter()
        .map(|agent| json!({"agent": agent}))
        .collect();
    run.append(event::WORKFLOW_PLANNED, json!({ "nodes": nodes }), None);
    for (index, agent) in config.agents.iter().enumerate() {
        run.append(event::AGENT_STARTED, json!({ "agent": agent }), None);
        if !cache_hit {
            tokio::time::sleep(config.step_delay).await;
        }
        if config.outcome == RunOutcome::Fail {
            let failed = WorkflowFailed {
                error: ErrorDetail {
                    kind: "execution_error".to_owned(),
                    message: format!("agent `{agent}` failed"),
                    issues: Vec::new(),
                },
            };
            run.append(
                event::WORKFLOW_FAILED,
                serde_json::to_value(failed).unwrap_or_default(),
                Some(RunStatus::Failed),
            );
            return;
        }
        let agent_output = if index + 1 == config.agents.len() {
            output
                .get("result")
                .cloned()
                .unwrap_or_else(|| output.clone())
        } else {
            json!({ "text": format!("{agent} done") })
        };
        run.append(
            event::AGENT_COMPLETED,
            json!({ "agent": agent, "output": agent_output, "cached": cache_hit }),
            None,
        );
    }
    let completed = WorkflowCompleted { output };
    let appended = run.append(
        event::WORKFLOW_COMPLETED,
        serde_json::to_value(completed).unwrap_or_default(),
        Some(RunStatus::Completed),
    );
    if appended && let Some(key) = cache_key {
        lock(&state.cached_keys).insert(key);
    }
}

fn default_output(input: &Map<String, Value>) -> Value {
    let message = input
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| Value::Object(input.clone()).to_string(), str::to_owned);
    json!({ "result": { "message": format!("reply to: {message}") } })
}

/// A `text/event-stream` response of `run`'s events with ids above `after`, following the
/// run until its terminal event.
fn stream_response(state: &Arc<ExecutorState>, run: &Arc<Run>, after: u64) -> Response {
    let cursor = Cursor {
        state: Arc::clone(state),
        log: run.log.subscribe(),
        last_sent: after,
        sent: 0,
        done: false,
    };
    let stream = futures::stream::unfold(cursor, Cursor::next);
    let mut response = Sse::new(stream).into_response();
    if let Ok(run_id) = HeaderValue::from_str(&run.id) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(RUN_ID_HEADER), run_id);
    }
    response
}

/// One stream connection's position in a run's log.
struct Cursor {
    state: Arc<ExecutorState>,
    log: watch::Receiver<RunLog>,
    last_sent: u64,
    sent: usize,
    done: bool,
}

impl Cursor {
    async fn next(mut self) -> Option<(Result<Event, io::Error>, Self)> {
        if self.done {
            return None;
        }
        if self.state.take_cut(self.sent) {
            self.done = true;
            // An error from the body stream makes hyper drop the connection without the
            // final chunk: to the client this is an unintentional disconnect. The pause lets
            // hyper flush the events already yielded; an error polled straight after them
            // would discard them unsent.
            tokio::time::sleep(FLUSH_PAUSE).await;
            let cut = io::Error::new(io::ErrorKind::ConnectionAborted, "stream cut");
            return Some((Err(cut), self));
        }
        let next = loop {
            {
                let log = self.log.borrow_and_update();
                let index = usize::try_from(self.last_sent).unwrap_or(usize::MAX);
                if let Some(event) = log.events.get(index) {
                    break event.clone();
                }
                if log.status != RunStatus::Running {
                    return None;
                }
            }
            if self.log.changed().await.is_err() {
                return None;
            }
        };
        self.last_sent = next.id;
        self.sent += 1;
        let mut event = Event::default()
            .event(next.event)
            .data(next.data.to_string());
        if lock(&self.state.config).event_ids {
            event = event.id(next.id.to_string());
        }
        Some((Ok(event), self))
    }
}

async fn resume(
    State(state): State<Arc<ExecutorState>>,
    Path(run_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(run) = state.find(&run_id) else {
        return not_found(&run_id);
    };
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(value) => match value
            .to_str()
            .ok()
            .and_then(|id| id.trim().parse::<u64>().ok())
        {
            Some(id) => id,
            None => {
                return validation_error(
                    "Last-Event-ID must be an event id this executor sent",
                    vec![Issue {
                        path: "Last-Event-ID".to_owned(),
                        message: "not a decimal event id".to_owned(),
                    }],
                );
            }
        },
    };
    bump(&state.counters.resumes);
    stream_response(&state, &run, after)
}

async fn cancel(State(state): State<Arc<ExecutorState>>, Path(run_id): Path<String>) -> Response {
    let Some(run) = state.find(&run_id) else {
        return not_found(&run_id);
    };
    bump(&state.counters.cancel_requests);
    let cancelled = WorkflowFailed {
        error: ErrorDetail {
            kind: "cancelled".to_owned(),
            message: "run cancelled by the client".to_owned(),
            issues: Vec::new(),
        },
    };
    let was_running = run.append(
        event::WORKFLOW_FAILED,
        serde_json::to_value(cancelled).unwrap_or_default(),
        Some(RunStatus::Cancelled),
    );
    if was_running {
        bump(&state.counters.cancellations);
        if let Some(task) = lock(&run.task).take() {
            task.abort();
        }
    }
    let status = run.log.borrow().status;
    match status {
        RunStatus::Cancelled => Json(CancelResponse {
            run_id: run.id.clone(),
            status: "cancelled".to_owned(),
        })
        .into_response(),
        status => error_response(
            StatusCode::CONFLICT,
            error_body(
                "run_finished",
                format!("run already ended ({status:?}); nothing to cancel"),
                Vec::new(),
            ),
        ),
    }
}

async fn validate(State(state): State<Arc<ExecutorState>>, body: Bytes) -> Response {
    bump(&state.counters.validations);
    let request: ValidateRequest = match parse_body(&body) {
        Ok(request) => request,
        Err(message) => return validation_error(message, Vec::new()),
    };
    match decode_workflow_source(&request.workflow_source_base64) {
        Ok(_) => Json(ValidateResponse {
            valid: true,
            issues: lock(&state.config).validation_notes.clone(),
        })
        .into_response(),
        Err(issue) => validation_error("invalid workflow source", vec![issue]),
    }
}
