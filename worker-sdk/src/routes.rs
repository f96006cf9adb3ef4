//! The worker's HTTP surface: `GET /health`, `GET /capabilities`, `POST /execute`,
//! `GET /tasks/{id}`, `POST /tasks/{id}/cancel`, `POST /verify` (when a verifier is
//! configured), the hosted outputs `GET /streams/{id}` and `GET /files/{id}/{name}`
//! ([`crate::hosted`]), and the mapping of every refusal to a JSON error.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;
use url::Url;

use tokio_util::sync::CancellationToken;

use crate::callback::CallbackSender;
use crate::executions::{
    Admission, CancelRequest, ExecutionCounter, Executions, Phase, StartedRun,
};
use crate::gateway_auth::AuthError;
use crate::gateway_auth::TokenVerifier;
use crate::handler::{
    HANDLER_PANICKED, INVALID_OUTPUT, TASK_CANCELLED, TaskContext, TaskFuture, TaskHandler,
    TaskOutcome,
};
use crate::hosted::HostedOutputs;
use crate::ids::{Attempt, ContractId, TaskId, TaskType};
use crate::protocol::{
    Capabilities, CompletedReport, ErrorBody, ErrorDetail, FailedReport, Health, Output,
    PartialReport, StreamFormat, TaskError, TaskReport, headers,
};
use crate::verify::VerifierSetup;
use crate::verify::{self, VerifyRequest};

/// What every route of a worker reads: its capabilities, token check, executions and handler.
pub(crate) struct WorkerShared {
    pub(crate) capabilities: Capabilities,
    /// `None` only with the explicit local-dev opt-out.
    pub(crate) verifier: Option<TokenVerifier>,
    pub(crate) executions: Arc<Executions>,
    pub(crate) hosted: Arc<HostedOutputs>,
    pub(crate) handler: Arc<dyn TaskHandler>,
    pub(crate) public_url: Option<Url>,
    pub(crate) callback: Option<CallbackSender>,
    pub(crate) sync_wait: Option<Duration>,
    pub(crate) max_input_bytes: usize,
    pub(crate) handler_runs: ExecutionCounter,
    pub(crate) verifier_setup: Option<VerifierSetup>,
}

impl fmt::Debug for WorkerShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerShared")
            .field("capabilities", &self.capabilities)
            .field("token_check", &self.verifier.is_some())
            .field("public_url", &self.public_url.as_ref().map(Url::as_str))
            .field("callback", &self.callback)
            .field("sync_wait", &self.sync_wait)
            .finish_non_exhaustive()
    }
}

/// How long a handler that saw its cancellation may take to stop before it is aborted.
const CANCEL_GRACE: Duration = Duration::from_millis(500);
/// How long `POST /tasks/{id}/cancel` waits for the run's final report.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

pub(crate) fn router(shared: Arc<WorkerShared>) -> Router {
    let body_limit = shared.max_input_bytes;
    let mut router = Router::new()
        .route("/health", get(health))
        .route("/capabilities", get(capabilities))
        .route("/execute", post(execute))
        .route("/tasks/{id}", get(task_status))
        .route("/tasks/{id}/cancel", post(cancel_task))
        .route("/streams/{id}", get(stream_events))
        .route("/files/{id}/{name}", get(hosted_file));
    if shared.verifier_setup.is_some() {
        router = router.route("/verify", post(verify_candidate));
    }
    router
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(shared)
}

/// `GET /health`: liveness for the gateway's probes. Unauthenticated.
async fn health(State(shared): State<Arc<WorkerShared>>) -> Response {
    axum::Json(Health {
        status: "ok".to_owned(),
        protocol: shared.capabilities.protocol.clone(),
        name: shared.capabilities.name.clone(),
        version: shared.capabilities.version.clone(),
        tasks_in_flight: shared.executions.in_flight(),
    })
    .into_response()
}

/// `GET /capabilities`: what the worker does. Unauthenticated.
async fn capabilities(State(shared): State<Arc<WorkerShared>>) -> Response {
    axum::Json(shared.capabilities.clone()).into_response()
}

/// `POST /execute`: runs the contract's task once per (contract, attempt).
///
/// 200 with a `completed`/`failed` report, 202 with `pending`/`partial`; 400 on bad
/// headers or input, 401 on a missing/invalid/mismatched token, 413 on oversized input,
/// 429 when all handler slots are taken, 503 when the gateway keys are unavailable.
async fn execute(
    State(shared): State<Arc<WorkerShared>>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    // Authenticate before reading the body: an anonymous caller costs no body buffering.
    let caller = Caller {
        contract_id: authenticate(&shared, &parts.headers).await?,
        task_type: task_type_header(&shared, &parts.headers)?,
        correlation_id: parts
            .headers
            .get(headers::CORRELATION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
    };
    if let Some(key) = parts.headers.get(headers::IDEMPOTENCY_KEY)
        && key.as_bytes() != caller.contract_id.as_str().as_bytes()
    {
        return Err(ApiError::IdempotencyKeyMismatch);
    }
    let attempt = match parts.headers.get(headers::ATTEMPT) {
        None => Attempt::FIRST,
        Some(raw) => raw
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(ApiError::InvalidAttempt)?,
    };
    let poll_base = poll_base(&shared, &parts.headers)?;
    let bytes = Bytes::from_request(Request::from_parts(parts, body), &())
        .await
        .map_err(ApiError::Body)?;
    let input: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).map_err(|e| ApiError::InvalidJson(e.to_string()))?
    };

    let report = match shared
        .executions
        .admit(&caller.contract_id, attempt, &poll_base)
    {
        Admission::Existing(report) => *report,
        Admission::Busy => return Err(ApiError::Busy),
        Admission::Start(run) => start_and_wait(&shared, caller, attempt, input, run).await?,
    };
    Ok(report_response(report, true))
}

/// `GET /tasks/{id}`: the task's current report. Same token and `X-Contract-ID` rules as
/// `/execute`; 404 for an unknown task or one of another contract.
async fn task_status(
    State(shared): State<Arc<WorkerShared>>,
    Path(raw_task_id): Path<String>,
    request_headers: HeaderMap,
) -> Result<Response, ApiError> {
    let contract_id = authenticate(&shared, &request_headers).await?;
    let task_id = TaskId::parse(&raw_task_id).map_err(|_| ApiError::TaskNotFound)?;
    let report = shared
        .executions
        .answer(&task_id, &contract_id)
        .ok_or(ApiError::TaskNotFound)?;
    Ok(report_response(report, false))
}

/// `POST /tasks/{id}/cancel`: stops a running task (`{id}` is the task id of its poll URL,
/// or the contract id for the contract's latest run). Same token and `X-Contract-ID` rules
/// as `/execute`. Idempotent: a running task is told to stop and the answer is its final
/// report (`failed` with `TASK_CANCELLED`), 200; a task already cancelled answers the same
/// report again; a task that ended otherwise answers 409 `task_already_finished`; 404
/// `task_not_found` for an unknown task or one of another contract.
async fn cancel_task(
    State(shared): State<Arc<WorkerShared>>,
    Path(raw_id): Path<String>,
    request_headers: HeaderMap,
) -> Result<Response, ApiError> {
    let contract_id = authenticate(&shared, &request_headers).await?;
    let task_id = if raw_id == contract_id.as_str() {
        shared.executions.latest_task(&contract_id)
    } else {
        TaskId::parse(&raw_id).ok()
    }
    .ok_or(ApiError::TaskNotFound)?;
    let report = match shared
        .executions
        .cancel(&task_id, &contract_id)
        .ok_or(ApiError::TaskNotFound)?
    {
        CancelRequest::Ended(report) => *report,
        CancelRequest::Signalled(mut phase) => {
            let ended = async {
                loop {
                    if let Phase::Finished(report) = &*phase.borrow_and_update() {
                        return Some((**report).clone());
                    }
                    if phase.changed().await.is_err() {
                        return None;
                    }
                }
            };
            match tokio::time::timeout(CANCEL_WAIT, ended).await {
                Ok(Some(report)) => report,
                // Still stopping: the run is cancelled, its report follows on the task.
                _ => shared
                    .executions
                    .answer(&task_id, &contract_id)
                    .ok_or(ApiError::TaskNotFound)?,
            }
        }
    };
    match &report {
        TaskReport::Failed(failed) if failed.error.code == TASK_CANCELLED => {}
        TaskReport::Pending(_) | TaskReport::Partial(_) => {}
        other => return Err(ApiError::TaskFinished(other.status())),
    }
    tracing::info!(%contract_id, %task_id, "task cancelled");
    Ok(report_response(report, false))
}

/// `POST /verify`: the seed's VerifyRequest judged by the worker's verify handler.
async fn verify_candidate(
    State(shared): State<Arc<WorkerShared>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(setup) = &shared.verifier_setup else {
        return Err(ApiError::RouteNotFound);
    };
    let request: VerifyRequest =
        serde_json::from_slice(&body).map_err(|e| ApiError::InvalidVerifyRequest(e.to_string()))?;
    verify::check_binding(&request).map_err(|e| ApiError::InvalidPolicy(e.to_string()))?;
    let verdict = setup.handler.verify(request.clone()).await;
    let response = verify::response(setup, &request, verdict)
        .map_err(|e| ApiError::InvalidVerifyRequest(e.to_string()))?;
    Ok(axum::Json(response).into_response())
}

/// `GET /streams/{id}`: the task's streamed output as SSE (see [`crate::hosted`]), after the
/// `Last-Event-ID` event when one is sent. Same token and `X-Contract-ID` rules as
/// `/tasks/{id}`; 404 for an unknown stream or one of another contract.
async fn stream_events(
    State(shared): State<Arc<WorkerShared>>,
    Path(raw_task_id): Path<String>,
    request_headers: HeaderMap,
) -> Result<Response, ApiError> {
    let contract_id = authenticate(&shared, &request_headers).await?;
    let after = request_headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    shared
        .hosted
        .serve_stream(&raw_task_id, contract_id.as_str(), after)
        .map(IntoResponse::into_response)
        .ok_or(ApiError::TaskNotFound)
}

/// `GET /files/{id}/{name}`: a file the task hosts (see [`crate::hosted`]). Unauthenticated.
async fn hosted_file(
    State(shared): State<Arc<WorkerShared>>,
    Path((task_id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let file = shared
        .hosted
        .file(&task_id, &name)
        .ok_or(ApiError::TaskNotFound)?;
    let mime = HeaderValue::from_str(&file.mime)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    Ok((
        [(header::CONTENT_TYPE, mime)],
        Bytes::from((*file.bytes).clone()),
    )
        .into_response())
}

async fn not_found() -> ApiError {
    ApiError::RouteNotFound
}

struct Caller {
    contract_id: ContractId,
    task_type: Option<TaskType>,
    correlation_id: Option<String>,
}

/// Checks the contract token (unless the local-dev opt-out is on) and returns the
/// authenticated contract.
async fn authenticate(shared: &WorkerShared, headers: &HeaderMap) -> Result<ContractId, ApiError> {
    let Some(verifier) = &shared.verifier else {
        return contract_id_header(headers);
    };
    let token = bearer_token(headers).ok_or(ApiError::Auth(AuthError::MissingToken))?;
    let contract_id = contract_id_header(headers)?;
    verifier
        .verify(token, &contract_id)
        .await
        .map_err(ApiError::Auth)?;
    Ok(contract_id)
}

/// The `X-Task-Type` the gateway sent, if any; it must be one this worker declared.
fn task_type_header(
    shared: &WorkerShared,
    headers: &HeaderMap,
) -> Result<Option<TaskType>, ApiError> {
    let Some(raw) = headers.get(headers::TASK_TYPE) else {
        return Ok(None);
    };
    let task_type = raw
        .to_str()
        .ok()
        .and_then(|s| TaskType::parse(s.trim()).ok())
        .filter(|t| shared.capabilities.task_types.contains(t))
        .ok_or(ApiError::UnsupportedTaskType)?;
    Ok(Some(task_type))
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn contract_id_header(headers: &HeaderMap) -> Result<ContractId, ApiError> {
    let raw = headers
        .get(headers::CONTRACT_ID)
        .ok_or(ApiError::MissingContractId)?
        .to_str()
        .map_err(|_| ApiError::InvalidContractId)?;
    raw.trim()
        .parse::<ContractId>()
        .map_err(|_| ApiError::InvalidContractId)
}

fn poll_base(shared: &WorkerShared, headers: &HeaderMap) -> Result<Url, ApiError> {
    if let Some(url) = &shared.public_url {
        return Ok(url.clone());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or(ApiError::MissingHost)?;
    Url::parse(&format!("http://{host}/")).map_err(|_| ApiError::MissingHost)
}

/// Spawns the handler run and waits for it to end, to go to the background, or for the
/// sync wait to pass — whichever comes first.
async fn start_and_wait(
    shared: &Arc<WorkerShared>,
    caller: Caller,
    attempt: Attempt,
    input: Value,
    run: StartedRun,
) -> Result<TaskReport, ApiError> {
    let StartedRun {
        task_id,
        poll_url,
        mut phase,
        cancel,
        permit,
    } = run;
    let ctx = TaskContext {
        contract_id: caller.contract_id.clone(),
        attempt,
        task_id: task_id.clone(),
        task_type: caller.task_type,
        correlation_id: caller.correlation_id,
        executions: Arc::clone(&shared.executions),
        cancel,
        hosted: Arc::clone(&shared.hosted),
        base_url: poll_base_of(&poll_url),
    };
    tracing::info!(contract_id = %ctx.contract_id, %task_id, attempt = attempt.get(), "task started");
    // The run lives on its own task: a caller hanging up must not cancel paid work, and
    // duplicates must find its result.
    let worker = Arc::clone(shared);
    tokio::spawn(async move {
        let owed_callback = run_task(&worker, ctx, input, poll_url).await;
        // The slot is free once the work is done; a slow callback must not hold it.
        drop(permit);
        if let (Some(report), Some(callback)) = (owed_callback, &worker.callback) {
            callback.deliver(report).await;
        }
    });

    let settled = async {
        while matches!(*phase.borrow_and_update(), Phase::Running) {
            if phase.changed().await.is_err() {
                break;
            }
        }
    };
    match shared.sync_wait {
        Some(wait) => {
            // Timing out is the normal way to turn a slow run into `pending`.
            let _ = tokio::time::timeout(wait, settled).await;
        }
        None => settled.await,
    }

    if let Phase::Finished(report) = &*phase.borrow() {
        return Ok((**report).clone());
    }
    if let Some(report) = shared.executions.answer(&task_id, &caller.contract_id) {
        return Ok(report);
    }
    // Only a finished run can have left the registry, and then its report is in `phase`.
    match &*phase.borrow() {
        Phase::Finished(report) => Ok((**report).clone()),
        _ => Err(ApiError::TaskStateLost),
    }
}

/// Runs the handler (and any background work it hands back) to the end and stores the
/// final report. Returns the report when a caller was shown a running state and so is owed
/// a completion callback.
async fn run_task(
    shared: &WorkerShared,
    ctx: TaskContext,
    input: Value,
    poll_url: Url,
) -> Option<TaskReport> {
    let contract_id = ctx.contract_id.clone();
    let task_id = ctx.task_id.clone();
    let cancel = ctx.cancel.clone();
    shared.handler_runs.increment();
    let handler = Arc::clone(&shared.handler);
    let mut outcome = run_guarded(
        Box::pin(async move { handler.handle(ctx, input).await }),
        &cancel,
    )
    .await;
    while let TaskOutcome::Pending(pending) = outcome {
        shared
            .executions
            .move_to_background(&task_id, pending.estimated_completion);
        outcome = run_guarded(pending.work, &cancel).await;
    }
    if let TaskOutcome::Stream(events) = outcome {
        shared
            .hosted
            .start_stream(&task_id, contract_id.as_str(), events);
        let url = poll_base_of(&poll_url)
            .join(&format!("streams/{}", task_id.as_str()))
            .unwrap_or_else(|_| poll_url.clone());
        outcome = TaskOutcome::output(Output::Stream {
            url,
            format: StreamFormat::Sse,
        });
    }
    let report = final_report(outcome, contract_id.clone(), task_id.clone());
    tracing::info!(%contract_id, %task_id, status = report.status(), "task finished");
    shared
        .executions
        .finish(&task_id, report.clone())
        .then_some(report)
}

/// Runs handler code on its own task so a panic becomes a `failed` report instead of a
/// run stuck in `pending` forever. A cancelled run ends `failed` with `TASK_CANCELLED`
/// whatever the handler does: it gets [`CANCEL_GRACE`] to stop on its own token, then it is
/// aborted.
async fn run_guarded(work: TaskFuture, cancel: &CancellationToken) -> TaskOutcome {
    let cancelled = || TaskOutcome::failed(TASK_CANCELLED, "the task was cancelled");
    if cancel.is_cancelled() {
        return cancelled();
    }
    let mut handle = tokio::spawn(work);
    tokio::select! {
        joined = &mut handle => match joined {
            Ok(_) if cancel.is_cancelled() => cancelled(),
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::error!(%error, "task handler panicked");
                TaskOutcome::failed(HANDLER_PANICKED, "the worker's task handler crashed")
            }
        },
        () = cancel.cancelled() => {
            if tokio::time::timeout(CANCEL_GRACE, &mut handle).await.is_err() {
                handle.abort();
            }
            cancelled()
        }
    }
}

/// Checks an output against the protocol's rules (the same parse the gateway applies), so
/// a handler bug shows up as a clear `failed` report rather than a response the gateway
/// cannot read.
fn admissible(output: &Output) -> Result<(), TaskError> {
    serde_json::to_value(output)
        .and_then(serde_json::from_value::<Output>)
        .map(drop)
        .map_err(|e| {
            TaskError::new(
                INVALID_OUTPUT,
                format!("the worker produced an invalid output: {e}"),
            )
        })
}

fn final_report(outcome: TaskOutcome, contract_id: ContractId, task_id: TaskId) -> TaskReport {
    let outcome = match &outcome {
        TaskOutcome::Completed { output, .. }
        | TaskOutcome::Partial {
            output: Some(output),
            ..
        } => match admissible(output) {
            Ok(()) => outcome,
            Err(error) => TaskOutcome::Failed(error),
        },
        _ => outcome,
    };
    match outcome {
        TaskOutcome::Completed { output, metadata } => TaskReport::Completed(CompletedReport {
            contract_id,
            task_id: Some(task_id),
            output,
            metadata,
        }),
        TaskOutcome::Failed(error) => TaskReport::Failed(FailedReport {
            contract_id,
            task_id: Some(task_id),
            error,
        }),
        // A final partial names no `poll_url`: there is nothing left to check back for, which
        // is how a poller tells it from a progress report.
        TaskOutcome::Partial { progress, output } => TaskReport::Partial(PartialReport {
            contract_id,
            task_id,
            poll_url: None,
            progress,
            output,
            estimated_completion: None,
        }),
        // `run_task` drains every `Pending` and starts every `Stream` before calling this.
        TaskOutcome::Pending(_) | TaskOutcome::Stream(_) => TaskReport::Failed(FailedReport {
            contract_id,
            task_id: Some(task_id),
            error: TaskError::new("WORKER_ERROR", "task ended while still pending"),
        }),
    }
}

/// The worker's base URL, from a task's `poll_url` (`<base>/tasks/{id}`).
fn poll_base_of(poll_url: &Url) -> Url {
    poll_url.join("../").unwrap_or_else(|_| poll_url.clone())
}

fn report_response(report: TaskReport, from_execute: bool) -> Response {
    let status = match (&report, from_execute) {
        (TaskReport::Pending(_), true) => StatusCode::ACCEPTED,
        (TaskReport::Partial(partial), true) if partial.poll_url.is_some() => StatusCode::ACCEPTED,
        _ => StatusCode::OK,
    };
    (status, axum::Json(report)).into_response()
}

/// Every non-report answer of the router.
#[derive(Debug, thiserror::Error)]
enum ApiError {
    #[error(transparent)]
    Auth(AuthError),
    #[error("missing X-Contract-ID header")]
    MissingContractId,
    #[error("X-Contract-ID is not a valid contract id")]
    InvalidContractId,
    #[error("Idempotency-Key must equal X-Contract-ID")]
    IdempotencyKeyMismatch,
    #[error("X-Attempt must be a whole number of at least 1")]
    InvalidAttempt,
    #[error("X-Task-Type names a task type this worker does not perform")]
    UnsupportedTaskType,
    #[error("cannot build poll URLs: no valid Host header and no public URL configured")]
    MissingHost,
    #[error("request body could not be read: {0}")]
    Body(BytesRejection),
    #[error("task input is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("all task slots are busy; retry later")]
    Busy,
    #[error("no such task for this contract")]
    TaskNotFound,
    #[error("no such route")]
    RouteNotFound,
    #[error("task state was lost")]
    TaskStateLost,
    #[error("the task already ended ({0}); there is nothing to cancel")]
    TaskFinished(&'static str),
    #[error("the body is not a WattSwarm VerifyRequest: {0}")]
    InvalidVerifyRequest(String),
    #[error("the policy binding cannot be applied: {0}")]
    InvalidPolicy(String),
}

/// Seconds a caller should wait after a 429 / 503.
const RETRY_AFTER_BUSY: HeaderValue = HeaderValue::from_static("1");
const RETRY_AFTER_KEYS: HeaderValue = HeaderValue::from_static("5");

impl ApiError {
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Auth(AuthError::MissingToken) => (StatusCode::UNAUTHORIZED, "missing_token"),
            Self::Auth(AuthError::InvalidToken(_)) => (StatusCode::UNAUTHORIZED, "invalid_token"),
            Self::Auth(AuthError::ContractMismatch) => {
                (StatusCode::UNAUTHORIZED, "contract_mismatch")
            }
            Self::Auth(AuthError::WrongWorker) => (StatusCode::UNAUTHORIZED, "wrong_worker"),
            Self::Auth(AuthError::KeysUnavailable(_)) => {
                (StatusCode::SERVICE_UNAVAILABLE, "gateway_keys_unavailable")
            }
            Self::MissingContractId => (StatusCode::BAD_REQUEST, "missing_contract_id"),
            Self::InvalidContractId => (StatusCode::BAD_REQUEST, "invalid_contract_id"),
            Self::IdempotencyKeyMismatch => (StatusCode::BAD_REQUEST, "idempotency_key_mismatch"),
            Self::InvalidAttempt => (StatusCode::BAD_REQUEST, "invalid_attempt"),
            Self::UnsupportedTaskType => (StatusCode::BAD_REQUEST, "unsupported_task_type"),
            Self::MissingHost => (StatusCode::BAD_REQUEST, "missing_host"),
            Self::Body(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                (StatusCode::PAYLOAD_TOO_LARGE, "input_too_large")
            }
            Self::Body(rejection) => (rejection.status(), "unreadable_body"),
            Self::InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_input"),
            Self::Busy => (StatusCode::TOO_MANY_REQUESTS, "too_many_tasks"),
            Self::TaskNotFound => (StatusCode::NOT_FOUND, "task_not_found"),
            Self::RouteNotFound => (StatusCode::NOT_FOUND, "not_found"),
            Self::TaskStateLost => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
            Self::TaskFinished(_) => (StatusCode::CONFLICT, "task_already_finished"),
            Self::InvalidVerifyRequest(_) => (StatusCode::BAD_REQUEST, "invalid_verify_request"),
            Self::InvalidPolicy(_) => (StatusCode::BAD_REQUEST, "invalid_policy"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if status.is_server_error() {
            tracing::warn!(error = %self, code, "worker request failed");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: self.to_string(),
                details: None,
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        let response_headers = response.headers_mut();
        match status {
            StatusCode::UNAUTHORIZED => {
                response_headers
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                response_headers.insert(header::RETRY_AFTER, RETRY_AFTER_BUSY);
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                response_headers.insert(header::RETRY_AFTER, RETRY_AFTER_KEYS);
            }
            _ => {}
        }
        response
    }
}
