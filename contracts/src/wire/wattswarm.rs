//! WattSwarm executor shapes (seeds/wattswarm-executor-contract.txt,
//! seeds/wattswarm-verify-endpoint.txt): `/capabilities`, `/execute`, `/verify`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::deliverable::{
    ArtifactRef, Deliverable, DeliverableError, DeliveryStatus, InlineEvidence, Output,
};
use crate::policy::PolicyBindingWire;
use crate::verdict::VerificationStatus;

/// `GET /capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Task types the executor handles.
    pub task_types: Vec<String>,
    /// Named execution profiles.
    #[serde(default)]
    pub profiles: Vec<String>,
    /// Stable runtime family id.
    pub provider_family: String,
    /// Model or version within the family.
    pub model_id: String,
}

/// `POST /execute` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// The task; hiregate sends the contract id.
    pub task_id: String,
    /// Stable per attempt; the executor's idempotency key.
    pub execution_id: String,
    /// Task type.
    pub task_type: String,
    /// Task input.
    pub inputs: Value,
    /// Execution profile.
    pub profile: String,
    /// Task contract (hiregate sends at least `output_schema`).
    pub task_contract: Value,
    /// `explore`, `verify` or `finalize`.
    pub stage: String,
    /// Attempt id for retry tracking.
    pub attempt_id: String,
    /// Optional seed bundle.
    #[serde(default)]
    pub seed_bundle: Option<Value>,
}

/// `POST /execute` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteResponse {
    /// The answer.
    pub candidate_output: Value,
    /// Small inline evidence.
    #[serde(default)]
    pub evidence_inline: Vec<InlineEvidence>,
    /// External evidence with digests.
    #[serde(default)]
    pub evidence_refs: Vec<ArtifactRef>,
}

impl ExecuteResponse {
    /// The deliverable: `candidate_output` as a `json` output, with the evidence.
    pub fn to_deliverable(&self) -> Result<Deliverable, DeliverableError> {
        Deliverable::new(
            DeliveryStatus::Completed,
            Output::Json {
                content: self.candidate_output.clone(),
            },
            self.evidence_inline.clone(),
            self.evidence_refs.clone(),
        )
    }
}

/// The candidate a verifier evaluates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Candidate id.
    pub candidate_id: String,
    /// The proposer's execution id.
    pub execution_id: String,
    /// Stored copy of the output, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_ref: Option<ArtifactRef>,
    /// The output.
    pub output: Value,
    /// Inline evidence.
    #[serde(default)]
    pub evidence_inline: Vec<InlineEvidence>,
    /// Evidence references.
    #[serde(default)]
    pub evidence_refs: Vec<ArtifactRef>,
}

impl Candidate {
    /// The candidate as a deliverable (its `output_ref` is a stored copy of `output`, not
    /// separate evidence).
    pub fn to_deliverable(&self) -> Result<Deliverable, DeliverableError> {
        Deliverable::new(
            DeliveryStatus::Completed,
            Output::Json {
                content: self.output.clone(),
            },
            self.evidence_inline.clone(),
            self.evidence_refs.clone(),
        )
    }
}

/// `POST /verify` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyRequest {
    /// What to verify.
    pub candidate: Candidate,
    /// The schema the output must satisfy.
    pub output_schema: Value,
    /// The policy to apply.
    pub policy: PolicyBindingWire,
}

/// `POST /verify` response: one verifier's vote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyResponse {
    /// Verdict.
    pub passed: bool,
    /// Confidence in [0, 1].
    pub score: f64,
    /// Reason codes (u16).
    #[serde(default)]
    pub reason_codes: Vec<u16>,
    /// `passed`/`failed`/`inconclusive`; inferred when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_status: Option<VerificationStatus>,
    /// `sha256(canonical({candidate_id, execution_id, passed, score, reason_codes,
    /// provider_family, model_id, policy_hash}))`.
    pub verifier_result_hash: String,
    /// Verifier runtime family.
    pub provider_family: String,
    /// Verifier model.
    pub model_id: String,
}

impl VerifyResponse {
    /// The declared status, or the one WattSwarm infers: passed if `passed`, inconclusive if an
    /// evidence-unavailable code is present, failed otherwise.
    #[must_use]
    pub fn status(&self) -> VerificationStatus {
        if let Some(status) = self.verification_status {
            return status;
        }
        if self.passed {
            VerificationStatus::Passed
        } else if self
            .reason_codes
            .iter()
            .any(|code| crate::reason::is_evidence_unavailable(*code))
        {
            VerificationStatus::Inconclusive
        } else {
            VerificationStatus::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn seed_examples_parse() {
        let execute: ExecuteResponse = serde_json::from_value(json!({
            "candidate_output": {"answer": "The three key risks are ...", "confidence": 0.92},
            "evidence_inline": [{"mime": "text/plain", "content": "trace:attempt-1"}],
            "evidence_refs": [{
                "uri": "https://runtime.local/task-demo-001/exec-uuid-abc123",
                "digest": format!("sha256:{}", "0a".repeat(32)),
                "size_bytes": 1024,
                "mime": "application/json",
                "created_at": 1_710_000_000_000_u64,
                "producer": "my-runtime/my-model-v1"
            }]
        }))
        .unwrap();
        let deliverable = execute.to_deliverable().unwrap();
        assert_eq!(deliverable.evidence_refs().len(), 1);
        assert_eq!(deliverable.evidence_requests().len(), 1);

        let vote: VerifyResponse = serde_json::from_value(json!({
            "passed": false,
            "score": 0.4,
            "reason_codes": [200],
            "verifier_result_hash": "sha256:d4e9f2a1",
            "provider_family": "swarm-runtime",
            "model_id": "swarm-model-v1"
        }))
        .unwrap();
        assert_eq!(vote.status(), VerificationStatus::Inconclusive);
    }
}
