//! Wire types of the hire protocol as this SDK speaks it (`seeds/hire-execution.txt`):
//! the task report returned by `POST /execute`, `GET /tasks/{id}` and the completion
//! callback, the output kinds, `/capabilities`, `/health` and the error body.
//!
//! Field names and `status` / `type` values follow the HIRE document literally. The output
//! model ([`Output`], [`FileOutput`], [`Digest`]) is the one in `hiregate-contracts`, so what
//! the SDK emits is by construction what the gateway parses
//! (`hiregate_contracts::wire::hire::ExecuteResponse`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
pub use hiregate_contracts::canonical::Digest;
pub use hiregate_contracts::deliverable::{FileOutput, Output, StreamFormat};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use crate::ids::{ContractId, TaskId, TaskType};

/// Header names of the hire protocol (lower case, as HTTP/2 sends them).
pub mod headers {
    /// The contract being executed; also the idempotency key.
    pub const CONTRACT_ID: &str = "x-contract-id";
    /// Sent by the gateway with the contract id as value; must equal `X-Contract-ID`.
    pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
    /// hiregate extension: the contract's task type, so a worker with several task types
    /// knows which one is asked (the contract token does not carry it).
    pub const TASK_TYPE: &str = "x-task-type";
    /// The gateway's attempt number (1-based); a new number after a failure reruns the task.
    pub const ATTEMPT: &str = "x-attempt";
    /// The id that follows the hire from proposal to receipt (SW4RM's `correlation_id`): put
    /// it in your logs to line them up with the gateway's and the seeker's.
    pub const CORRELATION_ID: &str = "x-correlation-id";
}

/// The hire protocol's name, as listed in `/capabilities` and `/health`.
pub const PROTOCOL_NAME: &str = "hire";

/// State of a task as reported by the worker. Tagged by `status`:
/// `completed`, `failed`, `pending` or `partial`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TaskReport {
    /// Work done; the deliverable is in `output` (and/or `deliverables`).
    Completed(CompletedReport),
    /// Work could not be done; see `error`.
    Failed(FailedReport),
    /// Work is running; poll `poll_url` or wait for the callback.
    Pending(PendingReport),
    /// Work is running and has reported progress (or ended with only part of its
    /// deliverables); not a delivery.
    Partial(PartialReport),
}

impl TaskReport {
    /// The contract this report belongs to.
    #[must_use]
    pub fn contract_id(&self) -> &ContractId {
        match self {
            Self::Completed(r) => &r.contract_id,
            Self::Failed(r) => &r.contract_id,
            Self::Pending(r) => &r.contract_id,
            Self::Partial(r) => &r.contract_id,
        }
    }

    /// The `status` value on the wire.
    #[must_use]
    pub fn status(&self) -> &'static str {
        match self {
            Self::Completed(_) => "completed",
            Self::Failed(_) => "failed",
            Self::Pending(_) => "pending",
            Self::Partial(_) => "partial",
        }
    }

    /// Whether this is a `completed` report.
    #[must_use]
    pub fn is_completed(&self) -> bool {
        matches!(self, Self::Completed(_))
    }
}

/// `status: completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletedReport {
    /// The contract executed.
    pub contract_id: ContractId,
    /// The worker's task id for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The deliverable.
    pub output: Output,
    /// Free-form facts about the run (e.g. `execution_time_ms`, `model_used`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// `status: failed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedReport {
    /// The contract executed.
    pub contract_id: ContractId,
    /// The worker's task id for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// What went wrong.
    pub error: TaskError,
}

/// `status: pending`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingReport {
    /// The contract executed.
    pub contract_id: ContractId,
    /// The worker's task id for this run.
    pub task_id: TaskId,
    /// Where to `GET` the current state (`<worker base>/tasks/{task_id}`).
    pub poll_url: Url,
    /// When the worker expects to finish, if it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_completion: Option<DateTime<Utc>>,
}

/// `status: partial`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialReport {
    /// The contract executed.
    pub contract_id: ContractId,
    /// The worker's task id for this run.
    pub task_id: TaskId,
    /// Where to `GET` the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_url: Option<Url>,
    /// How far the work has come.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// The part of the deliverable that is ready, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    /// When the worker expects to finish, if it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_completion: Option<DateTime<Utc>>,
}

/// The `error` object of a `failed` report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskError {
    /// Stable, machine-readable code chosen by the worker (e.g. `INVALID_INPUT`).
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// Structured detail (e.g. the offending field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl TaskError {
    /// An error without details.
    #[must_use]
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }

    /// Adds structured details.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// How far a running task has come.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Progress {
    /// Share of the work done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<Percent>,
    /// What the worker is doing now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Progress {
    /// Progress with a percentage and a message.
    #[must_use]
    pub fn new(percent: Percent, message: impl Into<String>) -> Self {
        Self {
            percent: Some(percent),
            message: Some(message.into()),
        }
    }
}

/// A percentage from 0 to 100 inclusive.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Percent(f64);

/// A percentage outside 0..=100 (or not a number).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("percent must be a number from 0 to 100, got {0}")]
pub struct PercentError(f64);

impl Percent {
    /// The percentage, if it lies in 0..=100.
    ///
    /// # Errors
    /// [`PercentError`] for values outside the range and NaN.
    pub fn new(value: f64) -> Result<Self, PercentError> {
        if (0.0..=100.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(PercentError(value))
        }
    }

    /// The value.
    #[must_use]
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Percent {
    type Error = PercentError;
    fn try_from(value: f64) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<Percent> for f64 {
    fn from(p: Percent) -> Self {
        p.0
    }
}

/// Builds the `file` output for bytes the worker hosts at `url`, with the size and
/// `sha256:` checksum the gateway checks the download against.
#[must_use]
pub fn file_output(url: Url, mime: impl Into<String>, bytes: &[u8]) -> FileOutput {
    FileOutput {
        url,
        mime: Some(mime.into()),
        size: Some(bytes.len() as u64),
        checksum: Some(Digest::of_bytes(bytes)),
        name: None,
    }
}

/// Body of `GET /capabilities`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Always `hire` for this SDK.
    pub protocol: String,
    /// Worker name.
    pub name: String,
    /// Worker version.
    pub version: String,
    /// Task types this worker performs.
    pub task_types: Vec<TaskType>,
    /// Informational prices per task type (the gateway listing is authoritative).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pricing: BTreeMap<TaskType, PriceInfo>,
    /// Handler runs the worker accepts at once; beyond it `/execute` answers 429.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_tasks: Option<usize>,
    /// Whether the worker calls the gateway back when pending work finishes.
    pub completion_callbacks: bool,
    /// Whether `POST /tasks/{id}/cancel` stops a running task (always, for this SDK); the
    /// gateway forwards a seeker's cancel only to workers that declare it.
    #[serde(default)]
    pub cancel: bool,
    /// Whether `POST /verify` judges candidates (WattSwarm VerifyRequest), so the worker
    /// can be named as a verifier in `vp.crosscheck.v1` quorums.
    #[serde(default)]
    pub verify: bool,
    /// The verifier's runtime family, as bound in its votes' `verifier_result_hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_family: Option<String>,
    /// The verifier's model, as bound in its votes' `verifier_result_hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
}

/// An informational price for one task type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceInfo {
    /// Decimal amount in whole token units, e.g. `"0.05"`.
    pub amount: String,
    /// Token symbol, e.g. `USDC`.
    pub currency: String,
    /// CAIP-2 network, e.g. `eip155:84532`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

/// Body of `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Always `ok` when the worker answers.
    pub status: String,
    /// Always `hire` for this SDK.
    pub protocol: String,
    /// Worker name.
    pub name: String,
    /// Worker version.
    pub version: String,
    /// Handler runs (sync or background) currently in progress.
    pub tasks_in_flight: usize,
}

/// Error body of every non-report answer: `{"error":{"code","message","details"?}}`,
/// the same shape as the gateway's API errors.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// Stable `snake_case` code.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// Structured detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

#[cfg(test)]
mod tests {
    use hiregate_contracts::wire::hire::ExecuteResponse;
    use serde_json::json;

    use super::*;

    const CONTRACT: &str = "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K";

    fn contract() -> ContractId {
        CONTRACT.parse().unwrap()
    }

    fn task() -> TaskId {
        TaskId::parse("task_abc123").unwrap()
    }

    fn poll_url() -> Url {
        Url::parse("https://worker.example.com/tasks/task_abc123").unwrap()
    }

    #[test]
    fn the_seed_failure_example_round_trips() {
        let seed = json!({
          "status": "failed",
          "contract_id": CONTRACT,
          "error": {
            "code": "INVALID_INPUT",
            "message": "Color format not recognized",
            "details": {"field": "colors[0]", "expected": "hex color", "received": "red"}
          }
        });
        let report: TaskReport = serde_json::from_value(seed.clone()).unwrap();
        let TaskReport::Failed(failed) = &report else {
            panic!("expected failed, got {report:?}")
        };
        assert_eq!(failed.error.code, "INVALID_INPUT");
        assert_eq!(serde_json::to_value(&report).unwrap(), seed);
    }

    #[test]
    fn the_seed_pending_example_round_trips() {
        let pending = json!({
          "status": "pending",
          "contract_id": CONTRACT,
          "task_id": "task_abc123",
          "poll_url": "https://worker.example.com/tasks/task_abc123",
          "estimated_completion": "2025-01-30T12:00:00Z"
        });
        let report: TaskReport = serde_json::from_value(pending.clone()).unwrap();
        assert_eq!(report.status(), "pending");
        assert_eq!(serde_json::to_value(&report).unwrap(), pending);
    }

    #[test]
    fn a_completed_report_carries_the_output_under_its_type() {
        let report = TaskReport::Completed(CompletedReport {
            contract_id: contract(),
            task_id: None,
            output: Output::Json {
                content: json!({"summary": "s", "confidence": 0.9}),
            },
            metadata: None,
        });
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            json!({
                "status": "completed",
                "contract_id": CONTRACT,
                "output": {"type": "json", "content": {"summary": "s", "confidence": 0.9}}
            })
        );
    }

    /// Every report the SDK can emit must parse as what the gateway reads.
    #[test]
    fn every_report_parses_as_the_gateways_execute_response() {
        let file = file_output(
            Url::parse("https://w.example.com/f.json").unwrap(),
            "application/json",
            b"{}",
        );
        let reports = [
            TaskReport::Completed(CompletedReport {
                contract_id: contract(),
                task_id: Some(task()),
                output: Output::Multiple {
                    items: vec![
                        Output::File(file.clone()),
                        Output::Text {
                            content: "t".to_owned(),
                        },
                    ],
                },
                metadata: Some(json!({"execution_time_ms": 12})),
            }),
            TaskReport::Failed(FailedReport {
                contract_id: contract(),
                task_id: Some(task()),
                error: TaskError::new("BOOM", "boom").with_details(json!({"x": 1})),
            }),
            TaskReport::Pending(PendingReport {
                contract_id: contract(),
                task_id: task(),
                poll_url: poll_url(),
                estimated_completion: Some(Utc::now()),
            }),
            TaskReport::Partial(PartialReport {
                contract_id: contract(),
                task_id: task(),
                poll_url: Some(poll_url()),
                progress: Some(Progress::new(Percent::new(40.0).unwrap(), "working")),
                output: Some(Output::File(file)),
                estimated_completion: None,
            }),
        ];
        for report in reports {
            let wire = serde_json::to_value(&report).unwrap();
            let parsed: ExecuteResponse = serde_json::from_value(wire.clone())
                .unwrap_or_else(|e| panic!("gateway cannot parse {wire}: {e}"));
            match (&report, parsed) {
                (TaskReport::Completed(_), ExecuteResponse::Completed(d)) => {
                    assert_eq!(d.contract_id.as_ref(), Some(&contract()));
                    assert!(d.output.is_some());
                }
                (TaskReport::Failed(_), ExecuteResponse::Failed(f)) => {
                    assert_eq!(f.error.code, "BOOM");
                }
                (TaskReport::Pending(_), ExecuteResponse::Pending(p)) => {
                    assert_eq!(p.poll_url, poll_url());
                    assert_eq!(p.task_id, "task_abc123");
                }
                (TaskReport::Partial(_), ExecuteResponse::Partial(d)) => {
                    assert!(d.output.is_some());
                }
                (ours, theirs) => panic!("{ours:?} parsed as {theirs:?}"),
            }
        }
    }

    #[test]
    fn file_outputs_carry_size_and_checksum() {
        let file = file_output(
            Url::parse("https://w.example.com/a").unwrap(),
            "text/plain",
            b"abc",
        );
        assert_eq!(file.size, Some(3));
        assert_eq!(
            file.checksum.unwrap().to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn percent_is_bounded() {
        assert!(Percent::new(0.0).is_ok());
        assert!(Percent::new(100.0).is_ok());
        assert!(Percent::new(100.5).is_err());
        assert!(Percent::new(f64::NAN).is_err());
        assert!(serde_json::from_value::<Progress>(json!({"percent": -1})).is_err());
    }

    #[test]
    fn unknown_status_is_refused() {
        let err = serde_json::from_value::<TaskReport>(json!({
            "status": "done", "contract_id": CONTRACT
        }));
        assert!(err.is_err());
    }
}
