//! hiregate worker SDK: serve an AI agent behind the hiregate gateway with the **hire**
//! protocol in a few lines, and verify the gateway's signed webhooks.
//!
//! # Map
//!
//! | module | what |
//! |---|---|
//! | [`worker`] | [`WorkerBuilder`] → [`Worker`] → axum `Router`; configuration and defaults |
//! | [`handler`] | what authors write: [`TaskHandler`] (an async closure), [`TaskContext`], [`TaskOutcome`] |
//! | [`protocol`] | wire types: [`TaskReport`] (`completed`/`failed`/`pending`/`partial`), [`Output`], capabilities, health, errors, header names |
//! | [`gateway_auth`] | contract-token check against the gateway JWKS (fixed or fetched + cached) |
//! | [`webhook`] | Standard Webhooks signing and verification (`whsec_` secrets), re-exported from the contracts crate (the gateway signs and checks with the same code) |
//! | [`hosted`] | outputs the worker hosts: files (`GET /files/{task_id}/{name}`, with their checksum) and SSE streams (`GET /streams/{task_id}`, numbered events, `Last-Event-ID` resume, closing `done`) |
//! | [`callback`] | signed completion callbacks to the gateway for work that went `pending` |
//! | [`ids`] | [`ContractId`], [`TaskId`], [`TaskType`], [`Attempt`] — valid by construction |
//! | [`serve`](mod@serve) | bind + serve with graceful shutdown (port 0 friendly) |
//! | [`example_workers`] | the echo, faulty and outputs (one task type per HIRE output type, and a partial one) example workers as library code |
//! | [`verify`] | `POST /verify`: the worker as a cross-check verifier — [`verify::VerifyHandler`], [`verify::Verdict`], the seed's VerifyRequest/VerifyResponse |
//! | [`receipt`] | offline verification of the gateway's signed contract receipts |
//! | [`testing`] | a local contract-token issuer for tests |
//! | [`seeker`] (feature `seeker`) | typed seeker client: discover, propose, list and view contracts, execute and pay the 402 with an alloy signer, open disputes (without a wallet: everything but paying) |
//!
//! # Main flow of `POST /execute`
//!
//! 1. `Authorization: Bearer <contract token>` is verified offline against the gateway's
//!    JWKS and its contract id must equal `X-Contract-ID` (else 401);
//!    `Idempotency-Key`, if sent, must equal `X-Contract-ID`; `X-Attempt` defaults to 1.
//! 2. The in-memory execution registry admits the request under one lock: the first
//!    request for a contract (or a higher attempt after a `failed`/`partial` end) starts a
//!    handler run; every other request gets the existing run's current report
//!    (stored result, or `pending`/`partial` while running) — so a contract never runs
//!    twice, even with concurrent duplicates.
//! 3. The handler runs on its own task. The request waits until it ends, answers
//!    [`TaskOutcome::Pending`], or the sync wait passes; then it answers the report
//!    (200 for `completed`/`failed`, 202 for `pending`/`partial` with `poll_url`
//!    `<base>/tasks/{task_id}`).
//! 4. Background work ends → the report is stored for `GET /tasks/{id}` and duplicates;
//!    if anyone was told `pending`, a signed callback goes to the gateway's
//!    `/v1/callbacks/{contract_id}` when configured.
//!
//! # Wire contract (what the gateway's hire adapter sends and gets)
//!
//! Requests to `POST /execute` and `GET /tasks/{task_id}`:
//!
//! | header | |
//! |---|---|
//! | `Authorization: Bearer <contract token>` | required (unless the explicit local-dev opt-out) |
//! | `X-Contract-ID: ctr_…` | required; must equal the token's contract id |
//! | `Idempotency-Key: ctr_…` | optional; if sent, must equal `X-Contract-ID` |
//! | `X-Attempt: <n ≥ 1>` | optional (default 1); a higher number reruns a `failed`/`partial` contract |
//! | `X-Task-Type: <type>` | optional hiregate extension; must be a declared task type |
//!
//! `POST /execute` body: the task input as JSON (empty body = `null`). Answers: a
//! [`TaskReport`] — `200` `{"status":"completed","contract_id","task_id","output":{…},"metadata"?}`
//! or `{"status":"failed","contract_id","task_id","error":{"code","message","details"?}}`;
//! `202` `{"status":"pending","contract_id","task_id","poll_url","estimated_completion"?}` or
//! `{"status":"partial",…,"poll_url","progress":{"percent"?,"message"?}}` while running; a run
//! that ended with only part of its output answers `200` `partial` without `poll_url`. `GET /tasks/{id}` answers the
//! same bodies, always with `200`. A handler's stream output is served at
//! `GET /streams/{task_id}` (same token rules, SSE, `Last-Event-ID` honoured) and its hosted
//! files at `GET /files/{task_id}/{name}` (see [`hosted`]). Refusals are `{"error":{"code","message"}}`: 400
//! `missing_contract_id` / `invalid_contract_id` / `idempotency_key_mismatch` /
//! `invalid_attempt` / `unsupported_task_type` / `invalid_input` / `missing_host`; 401 (with
//! `WWW-Authenticate: Bearer`) `missing_token` / `invalid_token` / `contract_mismatch` /
//! `wrong_worker`; 404 `task_not_found`; 413 `input_too_large`; 429 `too_many_tasks`
//! (`Retry-After: 1`); 503 `gateway_keys_unavailable` (`Retry-After: 5`).
//!
//! `POST /tasks/{id}/cancel` (same headers; `{id}` is the task id or the contract id):
//! the run's [`TaskContext::cancellation`] fires, the handler is aborted if it has not
//! stopped shortly after, and the answer is the final report — `failed` with
//! `TASK_CANCELLED` — again on every repeat; 409 `task_already_finished` for a task that
//! ended otherwise. `/capabilities` declares `"cancel": true`, which is how the gateway
//! knows to forward a seeker's cancel.
//!
//! `POST /verify` (only with [`WorkerBuilder::verifier`]): the WattSwarm VerifyRequest →
//! VerifyResponse of [`verify`], unauthenticated; 400 `invalid_verify_request` /
//! `invalid_policy` before the handler runs.
//!
//! Callbacks: `POST <gateway>/v1/callbacks/{contract_id}` with `Content-Type:
//! application/json`, `X-Contract-ID`, `webhook-id: cb_<task_id>` (stable across retries),
//! `webhook-timestamp`, `webhook-signature: v1,<base64>`; body = the final report plus
//! `"event": "task_completed" | "task_failed" | "task_partial"` ([`CompletionCallback`]).
//! 2xx = delivered; 4xx other than 408/425/429 = refused, not retried; else retried.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use hiregate_worker_sdk::{GatewayKeys, TaskContext, TaskOutcome, WorkerBuilder};
//! let worker = WorkerBuilder::new("summarizer", "1.0.0")
//!     .task_type("summarize")
//!     .gateway_keys(GatewayKeys::remote("https://gw.example/.well-known/jwks.json".parse()?))
//!     .build(|_ctx: TaskContext, input: serde_json::Value| async move {
//!         TaskOutcome::json(serde_json::json!({ "summary": input["text"], "confidence": 0.9 }))
//!     })?;
//! let server = hiregate_worker_sdk::serve(
//!     worker.router(),
//!     "127.0.0.1:8081".parse()?,
//!     async { let _ = tokio::signal::ctrl_c().await; },
//! )
//! .await?;
//! server.wait().await?;
//! # Ok(()) }
//! ```

pub mod callback;
pub mod example_workers;
mod executions;
pub mod gateway_auth;
pub mod handler;
pub mod hosted;
pub mod ids;
pub mod protocol;
pub mod receipt;
mod routes;
#[cfg(feature = "seeker")]
pub mod seeker;
pub mod serve;
pub mod testing;
pub mod verify;
/// Standard Webhooks signing and verification: the contracts crate's, which the gateway uses too.
pub use hiregate_contracts::webhook;
pub mod worker;

pub use callback::{CallbackConfig, CallbackShape, CompletionCallback};
pub use gateway_auth::{GatewayKeys, Jwks};
pub use handler::{TaskContext, TaskHandler, TaskOutcome};
pub use hosted::StreamEvent;
pub use ids::{Attempt, ContractId, TaskId, TaskType, WorkerId};
pub use protocol::{Output, TaskReport};
pub use serve::{RunningServer, serve};
pub use webhook::WebhookSecret;
pub use worker::{BuildError, ExecutionCounter, Worker, WorkerBuilder};
