//! HIRE `/execute` responses (seeds/hire-execution.txt): `completed`, `failed`, `pending`,
//! `partial`; and the worker's completion webhook, which the document tags by `event`
//! (`task_completed`, `task_failed`) instead of `status` ([`TaskCallback`], read by
//! [`parse_report`]); and how a `stream` output's events become a deliverable
//! ([`assemble_stream`]).
//!
//! A `stream` output (`{"type":"stream","url","format":"sse"}`) is read by the gateway as
//! Server-Sent Events. The seed leaves the end of a stream open; hiregate's convention (the
//! worker SDK follows it): an event named [`STREAM_END_EVENT`] ends it normally, one named
//! [`STREAM_ERROR_EVENT`] (data `{"code","message"}`) ends it as a failed attempt, every other
//! event is output, in order. A connection that closes before either is a broken stream: it is
//! resumed with `Last-Event-ID` when the worker sent event ids, else read again from the start
//! (what a server without ids can serve), the events already read being skipped by position
//! and checked to be the same; a replay that differs fails the attempt.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use crate::canonical::Digest;
use crate::deliverable::{Deliverable, DeliverableError, DeliveryStatus, FileOutput, Output};
use crate::id::ContractId;
use crate::schema::OutputSchema;

/// Name of the event that ends a HIRE stream output normally (its data is not output).
pub const STREAM_END_EVENT: &str = "done";
/// Name of the event that ends a HIRE stream output as a failure (data: `{"code","message"}`).
pub const STREAM_ERROR_EVENT: &str = "error";

/// The output a finished stream delivers, from its output events' `data` in order, shaped by
/// what the contract's output schemas ask for (the first schema with a top-level `type`
/// decides):
///
/// - `"array"`: a `json` output, the array of the events' data, each parsed as JSON when it
///   parses and kept as a JSON string when it does not (the schema then judges it);
/// - `"object"`, `"number"`, `"integer"`, `"boolean"`, `"null"`: the concatenated data parsed
///   as one JSON document (a worker streaming a JSON document in pieces); when it does not
///   parse, a `text` output, which such a schema then fails;
/// - `"string"`, no `type`, or no schema: a `text` output, the concatenated data.
///
/// The stored deliverable is this output (its digest is the deliverable digest); the stream's
/// URL is kept in the event log only, since the URL says nothing about what was delivered.
#[must_use]
pub fn assemble_stream(data: &[String], schemas: &[OutputSchema]) -> Output {
    let wanted = schemas
        .iter()
        .find_map(|schema| schema.document().get("type").and_then(Value::as_str));
    match wanted {
        Some("array") => Output::Json {
            content: Value::Array(
                data.iter()
                    .map(|item| {
                        serde_json::from_str(item).unwrap_or_else(|_| Value::String(item.clone()))
                    })
                    .collect(),
            ),
        },
        Some("object" | "number" | "integer" | "boolean" | "null") => {
            let joined = data.concat();
            match serde_json::from_str(&joined) {
                Ok(content) => Output::Json { content },
                Err(_) => Output::Text { content: joined },
            }
        }
        _ => Output::Text {
            content: data.concat(),
        },
    }
}

/// A HIRE `/execute` (or poll, or callback) response, tagged by `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ExecuteResponse {
    /// Work done.
    Completed(Delivery),
    /// Could not complete.
    Failed(Failure),
    /// Long-running; poll or wait for a callback.
    Pending(Pending),
    /// Some deliverables ready (progress, or a final partial result).
    Partial(Delivery),
}

impl ExecuteResponse {
    /// The deliverable of a `completed` or `partial` response; `None` for `failed`/`pending`.
    pub fn deliverable(&self) -> Option<Result<Deliverable, DeliverableError>> {
        match self {
            Self::Completed(delivery) => Some(delivery.to_deliverable(DeliveryStatus::Completed)),
            Self::Partial(delivery) => Some(delivery.to_deliverable(DeliveryStatus::Partial)),
            Self::Failed(_) | Self::Pending(_) => None,
        }
    }
}

/// A worker's completion webhook in the document's own shape: tagged by `event`, with no
/// `status` (`{"event":"task_completed","contract_id":…,"task_id":…,"deliverables":[…]}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TaskCallback {
    /// The task completed: its deliverables (or `output`).
    TaskCompleted(Delivery),
    /// The task failed: its `error`.
    TaskFailed(Failure),
}

impl From<TaskCallback> for ExecuteResponse {
    fn from(callback: TaskCallback) -> Self {
        match callback {
            TaskCallback::TaskCompleted(delivery) => Self::Completed(delivery),
            TaskCallback::TaskFailed(failure) => Self::Failed(failure),
        }
    }
}

/// Why a worker's report does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// Not JSON, or not one of the HIRE shapes.
    #[error(transparent)]
    Shape(#[from] serde_json::Error),
    /// `status` and `event` both present and naming different ends.
    #[error("`event` {event:?} contradicts `status` {status:?}")]
    Contradiction {
        /// The `event` given.
        event: String,
        /// The `status` given.
        status: String,
    },
}

/// A worker's report in any HIRE shape: an execute/poll response tagged by `status`, or a
/// completion webhook tagged by `event` (worker-sdk sends both tags; they must then agree).
pub fn parse_report(body: &[u8]) -> Result<ExecuteResponse, ReportError> {
    let value: Value = serde_json::from_slice(body)?;
    let status = value.get("status").and_then(Value::as_str);
    let event = value.get("event").and_then(Value::as_str);
    match (status, event) {
        (None, Some(_)) => Ok(serde_json::from_value::<TaskCallback>(value)?.into()),
        (Some(status), Some(event)) => {
            let agrees = matches!(
                (status, event),
                ("completed", "task_completed")
                    | ("failed", "task_failed")
                    | ("partial", "task_partial")
            );
            if !agrees {
                return Err(ReportError::Contradiction {
                    event: event.to_owned(),
                    status: status.to_owned(),
                });
            }
            Ok(serde_json::from_value(value)?)
        }
        _ => Ok(serde_json::from_value(value)?),
    }
}

/// A file in HIRE's `deliverables` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliverableFile {
    /// File name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where it is hosted.
    pub url: Url,
    /// `sha256:` digest of its bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Digest>,
    /// Media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// Body of a `completed` or `partial` response: an `output`, or a `deliverables` file list.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Delivery {
    /// The contract, echoed by the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_id: Option<ContractId>,
    /// The task, for async completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The output (preferred form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    /// Files (the older form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliverables: Option<Vec<DeliverableFile>>,
    /// Free-form metadata (execution time, model); not part of the deliverable digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Delivery {
    /// The internal deliverable: `output` when present, else the files (one file is a `file`
    /// output, several a `multiple`).
    pub fn to_deliverable(&self, status: DeliveryStatus) -> Result<Deliverable, DeliverableError> {
        let output = if let Some(output) = &self.output {
            output.clone()
        } else {
            let mut files: Vec<Output> = self
                .deliverables
                .iter()
                .flatten()
                .map(|file| {
                    Output::File(FileOutput {
                        url: file.url.clone(),
                        mime: file.mime.clone(),
                        size: file.size,
                        checksum: file.checksum,
                        name: file.name.clone(),
                    })
                })
                .collect();
            match files.len() {
                0 => return Err(DeliverableError::Empty),
                1 => files.remove(0),
                _ => Output::Multiple { items: files },
            }
        };
        Deliverable::new(status, output, Vec::new(), Vec::new())
    }
}

/// The `error` of a `failed` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine code, e.g. `INVALID_INPUT`.
    pub code: String,
    /// Human message.
    pub message: String,
    /// Details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// Body of a `failed` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The contract, echoed by the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_id: Option<ContractId>,
    /// What went wrong.
    pub error: ErrorBody,
}

/// Body of a `pending` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The worker's task id.
    pub task_id: String,
    /// Where to poll.
    pub poll_url: Url,
    /// Estimated completion (RFC 3339), informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_completion: Option<String>,
    /// The contract, echoed by the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_id: Option<ContractId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SchemaLimits;
    use serde_json::json;

    #[test]
    fn streams_assemble_as_the_schema_asks() {
        let schema = |doc: Value| OutputSchema::parse(doc, &SchemaLimits::default()).unwrap();
        let data = ["{\"n\":1}".to_owned(), "plain".to_owned()];
        assert_eq!(
            assemble_stream(&data, &[]),
            Output::Text {
                content: "{\"n\":1}plain".to_owned()
            }
        );
        assert_eq!(
            assemble_stream(&data, &[schema(json!({"type": "array"}))]),
            Output::Json {
                content: json!([{"n": 1}, "plain"])
            }
        );
        let pieces = ["{\"score\":".to_owned(), "8}".to_owned()];
        assert_eq!(
            assemble_stream(&pieces, &[schema(json!({"type": "object"}))]),
            Output::Json {
                content: json!({"score": 8})
            }
        );
        assert!(matches!(
            assemble_stream(&data, &[schema(json!({"type": "object"}))]),
            Output::Text { .. }
        ));
    }

    #[test]
    fn the_seed_examples_parse() {
        let completed: ExecuteResponse = serde_json::from_value(json!({
            "status": "completed",
            "contract_id": "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K",
            "deliverables": [
                {"name": "logo_v1.svg", "url": "https://storage.example.com/logo_v1.svg",
                 "checksum": format!("sha256:{}", "ab".repeat(32))},
                {"name": "logo_v2.svg", "url": "https://storage.example.com/logo_v2.svg",
                 "checksum": format!("sha256:{}", "cd".repeat(32))}
            ],
            "metadata": {"execution_time_ms": 4500, "model_used": "designbot-v2"}
        }))
        .unwrap();
        let deliverable = completed.deliverable().unwrap().unwrap();
        assert!(matches!(deliverable.output(), Output::Multiple { items } if items.len() == 2));
        assert_eq!(deliverable.evidence_requests().len(), 2);

        let json_output: ExecuteResponse = serde_json::from_value(json!({
            "status": "completed",
            "output": {"type": "json", "content": {"score": 8, "issues": []}}
        }))
        .unwrap();
        let deliverable = json_output.deliverable().unwrap().unwrap();
        assert_eq!(deliverable.status(), DeliveryStatus::Completed);

        let failed: ExecuteResponse = serde_json::from_value(json!({
            "status": "failed",
            "contract_id": "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K",
            "error": {"code": "INVALID_INPUT", "message": "Color format not recognized",
                      "details": {"field": "colors[0]"}}
        }))
        .unwrap();
        assert!(failed.deliverable().is_none());

        let pending: ExecuteResponse = serde_json::from_value(json!({
            "status": "pending",
            "task_id": "task_abc123",
            "poll_url": "https://worker.example.com/tasks/task_abc123",
            "estimated_completion": "2025-01-30T12:00:00Z"
        }))
        .unwrap();
        assert!(matches!(pending, ExecuteResponse::Pending(_)));

        let partial: ExecuteResponse = serde_json::from_value(json!({
            "status": "partial",
            "output": {"type": "text", "content": "half"}
        }))
        .unwrap();
        assert_eq!(
            partial.deliverable().unwrap().unwrap().status(),
            DeliveryStatus::Partial
        );
    }

    #[test]
    fn the_seed_webhook_shapes_parse_as_reports() {
        let completed = json!({
            "event": "task_completed",
            "contract_id": "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K",
            "task_id": "task_abc123",
            "deliverables": [{"name": "logo_v1.svg", "url": "https://storage.example.com/logo_v1.svg",
                              "checksum": format!("sha256:{}", "ab".repeat(32))}]
        });
        let report = parse_report(completed.to_string().as_bytes()).unwrap();
        let ExecuteResponse::Completed(delivery) = &report else {
            panic!("{report:?}")
        };
        assert_eq!(delivery.task_id.as_deref(), Some("task_abc123"));
        assert!(matches!(
            report.deliverable().unwrap().unwrap().output(),
            Output::File(file) if file.name.as_deref() == Some("logo_v1.svg")
        ));
        let failed = json!({
            "event": "task_failed",
            "contract_id": "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K",
            "task_id": "task_abc123",
            "error": {"code": "INVALID_INPUT", "message": "Color format not recognized",
                      "details": {"field": "colors[0]"}}
        });
        assert!(matches!(
            parse_report(failed.to_string().as_bytes()).unwrap(),
            ExecuteResponse::Failed(failure) if failure.error.code == "INVALID_INPUT"
        ));
        // worker-sdk's shape: both tags, agreeing.
        let both = json!({"event": "task_completed", "status": "completed",
                          "output": {"type": "text", "content": "done"}});
        assert!(matches!(
            parse_report(both.to_string().as_bytes()).unwrap(),
            ExecuteResponse::Completed(_)
        ));
        for refused in [
            json!({"event": "task_failed", "status": "completed",
                   "output": {"type": "text", "content": "done"}}),
            json!({"event": "task_exploded", "output": {"type": "text", "content": "x"}}),
            json!({"event": "task_completed"}),
        ] {
            let parsed = parse_report(refused.to_string().as_bytes());
            let refused_outright = parsed.is_err();
            let empty = parsed.is_ok_and(|r| matches!(r.deliverable(), Some(Err(_))));
            assert!(refused_outright || empty, "{refused}");
        }
    }

    #[test]
    fn a_completion_without_output_is_refused() {
        let empty: ExecuteResponse =
            serde_json::from_value(json!({"status": "completed"})).unwrap();
        assert_eq!(
            empty.deliverable().unwrap().unwrap_err(),
            DeliverableError::Empty
        );
    }
}
