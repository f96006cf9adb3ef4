//! Reference Superwire executor, written from `seeds/superwire-executor-api.txt`.
//!
//! | item | what |
//! |---|---|
//! | [`wire`] | the seed's request, error and event shapes |
//! | [`Executor`] | `POST /execute` (JSON, or SSE with `Accept: text/event-stream` and an `x-superwire-run-id` header), `GET /execute/{run_id}/events` (resume after `Last-Event-ID`), `POST /execute/{run_id}/cancel`, `POST /validate` |
//!
//! Flow of a run: `/execute` validates the body (base64 `.wire` source, secrets the workflow
//! declares), starts the run in the background and streams `workflow_started`,
//! `workflow_planned`, `agent_started`/`agent_completed` per agent, then `workflow_completed`
//! (`{"output": <output block>}`) or `workflow_failed` (`{"error": {...}}`). Event ids are
//! 1, 2, 3… per run. A dropped stream does not stop the run; a cancel does, and ends the log
//! with `workflow_failed` of kind `cancelled`. Secrets are kept only in memory for the test
//! to inspect ([`RunRecord::secrets`]) and are never logged.

mod executor;
pub mod wire;

pub use executor::{
    Executor, ExecutorConfig, ExecutorCounters, RecordedEvent, RunOutcome, RunRecord, RunStatus,
    StreamCut,
};
