//! Superwire executor wire shapes, transcribed from `seeds/superwire-executor-api.txt`.
//!
//! Independent of `hiregate_contracts::wire::superwire` on purpose (see the parent module).
//! The seed documents `/execute` fully; for `/validate` it gives only the purpose ("validates
//! workflow source and returns validation diagnostics"), so [`ValidateRequest`] and
//! [`ValidateResponse`] are this repo's reading of it and are marked as such.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Response header naming the run of a streaming `/execute`.
pub const RUN_ID_HEADER: &str = "x-superwire-run-id";

/// Event names the reference executor emits, in the order the seed's example stream shows.
pub mod event {
    /// First event of every run; data `{}`.
    pub const WORKFLOW_STARTED: &str = "workflow_started";
    /// The plan; data `{"nodes": [...]}`.
    pub const WORKFLOW_PLANNED: &str = "workflow_planned";
    /// An agent began; data `{"agent": "<name>"}`.
    pub const AGENT_STARTED: &str = "agent_started";
    /// An agent finished; data `{"output": {...}}` (plus `agent`).
    pub const AGENT_COMPLETED: &str = "agent_completed";
    /// Terminal success; data [`WorkflowCompleted`](super::WorkflowCompleted).
    pub const WORKFLOW_COMPLETED: &str = "workflow_completed";
    /// Terminal failure; data [`WorkflowFailed`](super::WorkflowFailed).
    pub const WORKFLOW_FAILED: &str = "workflow_failed";
}

/// `POST /execute` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// Public workflow input; must match the workflow's `input` block.
    pub input: Map<String, Value>,
    /// Sensitive runtime values; must match the workflow's `secrets` block.
    #[serde(default, skip_serializing_if = "Secrets::is_empty")]
    pub secrets: Secrets,
    /// Caching options.
    #[serde(default)]
    pub options: ExecuteOptions,
    /// Base64-encoded `.wire` source.
    pub workflow_source_base64: String,
}

/// The `secrets` object. Its `Debug` names the keys and never the values, because the seed
/// warns that it carries provider and MCP credentials.
#[derive(Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secrets(Map<String, Value>);

impl Secrets {
    /// Wraps a secrets object.
    #[must_use]
    pub const fn new(values: Map<String, Value>) -> Self {
        Self(values)
    }

    /// The secret values, for a test asserting that they arrived.
    #[must_use]
    pub const fn expose(&self) -> &Map<String, Value> {
        &self.0
    }

    /// True when no secret was sent.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("keys", &self.0.keys().collect::<Vec<_>>())
            .field("values", &"<redacted>")
            .finish()
    }
}

/// `options` of an execute request.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExecuteOptions {
    /// Client-controlled cache key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Cache toggle; absent means `true` (used only with a `cache_key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_cache: Option<bool>,
}

/// Structured error body: `{"error": {"kind", "message", "issues"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The `error` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// e.g. `validation_error`.
    pub kind: String,
    /// Human-readable message.
    pub message: String,
    /// Where, for validation errors.
    #[serde(default)]
    pub issues: Vec<Issue>,
}

/// One validation issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// Dotted path of the offending element.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// `workflow_completed` data: the workflow's `output` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowCompleted {
    /// The output block (what a non-streaming `/execute` answers as its body).
    pub output: Value,
}

/// `workflow_failed` data. The seed names the event but not its payload; the reference
/// executor sends the same `error` object as its JSON error bodies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowFailed {
    /// Why the run failed (`kind: "cancelled"` for a cancelled run).
    pub error: ErrorDetail,
}

/// `POST /validate` body (this repo's reading; the seed gives no body for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidateRequest {
    /// Base64-encoded `.wire` source.
    pub workflow_source_base64: String,
}

/// `POST /validate` success body (this repo's reading; invalid source answers an
/// [`ErrorBody`] with `kind: "validation_error"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidateResponse {
    /// True when the source is valid.
    pub valid: bool,
    /// Diagnostics (empty when valid).
    pub issues: Vec<Issue>,
}

/// `POST /execute/{run_id}/cancel` body (not specified by the seed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelResponse {
    /// The run.
    pub run_id: String,
    /// Always `"cancelled"`.
    pub status: String,
}
