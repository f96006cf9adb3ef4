//! WattSwarm executor wire shapes, transcribed field by field from
//! `seeds/wattswarm-executor-contract.txt` and `seeds/wattswarm-verify-endpoint.txt`.
//!
//! Deliberately independent of `hiregate_contracts::wire::wattswarm`: these structs are the
//! protocol as the seed states it, so a gateway adapter tested against them is tested against
//! the protocol and not against its own types. Where the seed marks a field optional (or only
//! shows it in an example) it is `Option`/defaulted here; everything else is required, so a
//! request missing it is refused.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `GET /health` body: `{ "status": "ok" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `"ok"` when live.
    pub status: String,
}

/// `GET /capabilities` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// `task_type` strings this executor handles.
    pub task_types: Vec<String>,
    /// Named execution profiles (passed back in `ExecuteRequest.profile`).
    pub profiles: Vec<String>,
    /// Stable identifier of the runtime family.
    pub provider_family: String,
    /// Model or version within the family.
    pub model_id: String,
}

/// Lifecycle stage named in an [`ExecuteRequest`]: `explore`, `verify` or `finalize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// `explore`.
    Explore,
    /// `verify`.
    Verify,
    /// `finalize`.
    Finalize,
}

/// The `task_contract` object: "full TaskContract including output_schema and budget".
///
/// Only `output_schema` is required here: it is the one field the seed says the candidate must
/// satisfy. The rest of the TaskContract is kept as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskContract {
    /// JSON Schema the candidate output must satisfy.
    pub output_schema: Value,
    /// Budget, when the caller states one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Value>,
    /// Every other TaskContract field, as sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `POST /execute` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// The task being executed.
    pub task_id: String,
    /// Unique per execution attempt; the executor dedupes on it.
    pub execution_id: String,
    /// Must be one of the declared `task_types`.
    pub task_type: String,
    /// Merged task inputs (an object).
    pub inputs: Map<String, Value>,
    /// Must be one of the declared `profiles`.
    pub profile: String,
    /// The task contract, including `output_schema`.
    pub task_contract: TaskContract,
    /// Current lifecycle stage.
    pub stage: Stage,
    /// Attempt identifier for retry tracking.
    pub attempt_id: String,
    /// Optional knowledge seed (object or null).
    #[serde(default)]
    pub seed_bundle: Option<Map<String, Value>>,
}

/// Small evidence carried inline: `{mime, content}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InlineEvidence {
    /// MIME type of `content`.
    pub mime: String,
    /// The evidence itself.
    pub content: String,
}

/// Reference to an external artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// Where the bytes are served.
    pub uri: String,
    /// `sha256:<hex>` of the bytes.
    pub digest: String,
    /// Length of the bytes.
    pub size_bytes: u64,
    /// MIME type of the bytes.
    pub mime: String,
    /// Creation time, Unix milliseconds.
    pub created_at: u64,
    /// `provider_family/model_id` of the producer.
    pub producer: String,
}

/// `POST /execute` response body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResponse {
    /// The agent's answer (an object that should satisfy the contract's `output_schema`).
    pub candidate_output: Map<String, Value>,
    /// Inline evidence.
    pub evidence_inline: Vec<InlineEvidence>,
    /// External evidence.
    pub evidence_refs: Vec<ArtifactRef>,
}

/// The candidate a verifier judges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Candidate identifier.
    pub candidate_id: String,
    /// The proposer's `execution_id`.
    pub execution_id: String,
    /// The stored candidate output artifact. The seed lists it in every Candidate, and the
    /// reference runtime's `Candidate` type requires it, so a request without it is refused.
    pub output_ref: ArtifactRef,
    /// The proposer's `candidate_output`.
    pub output: Value,
    /// The proposer's inline evidence.
    #[serde(default)]
    pub evidence_inline: Vec<InlineEvidence>,
    /// The proposer's external evidence.
    #[serde(default)]
    pub evidence_refs: Vec<ArtifactRef>,
}

/// The policy that governs a verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyBinding {
    /// e.g. `vp.schema_only.v1`.
    pub policy_id: String,
    /// Policy version string.
    pub policy_version: String,
    /// `sha256:` of `policy_id` concatenated with the serialised `policy_params`.
    pub policy_hash: String,
    /// Policy-specific parameters.
    pub policy_params: Value,
}

/// `POST /verify` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyRequest {
    /// The proposer's candidate.
    pub candidate: Candidate,
    /// Schema the candidate was validated against.
    pub output_schema: Value,
    /// The governing policy.
    pub policy: PolicyBinding,
}

/// `passed`, `failed` or `inconclusive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerificationStatus {
    /// The candidate passes.
    Passed,
    /// The candidate fails.
    Failed,
    /// Could not be decided (e.g. evidence unreachable).
    Inconclusive,
}

/// `POST /verify` response body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// Verdict.
    pub passed: bool,
    /// Confidence in the verdict, 0.0–1.0.
    pub score: f64,
    /// u16 reason codes; empty on a clean pass.
    pub reason_codes: Vec<u16>,
    /// Explicit status (the seed allows omitting it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_status: Option<VerificationStatus>,
    /// `sha256:` over the canonical result object, binding the policy hash it evaluated.
    pub verifier_result_hash: String,
    /// As in `/capabilities`.
    pub provider_family: String,
    /// As in `/capabilities`.
    pub model_id: String,
}
