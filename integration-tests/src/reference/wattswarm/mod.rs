//! Reference WattSwarm runtime, split in two servers so each side can be scripted on its own:
//!
//! | item | what |
//! |---|---|
//! | [`wire`] | the seed's wire shapes (ExecuteRequest/Response, ArtifactRef, VerifyRequest/Response, …) |
//! | [`Executor`] | `GET /health`, `GET /capabilities`, `POST /execute` (deduped by `execution_id`), `GET /evidence/{execution_id}` (the evidence artifact bytes) |
//! | [`Verifier`] | `GET /health`, `GET /capabilities`, `POST /verify` with scripted votes |
//!
//! A WattSwarm runtime serves all four seed endpoints from one process; splitting them lets a
//! test run one executor and three verifiers with different scripts. A gateway must therefore
//! not require `/verify` from an executor listing, nor `/execute` from a verifier.

mod executor;
mod verifier;
pub mod wire;

pub use executor::{Executor, ExecutorBehaviour, ExecutorConfig, ExecutorCounters, TransportFault};
pub use verifier::{
    EVIDENCE_UNREACHABLE_REASON, ResultHashing, SCHEMA_INVALID_REASON, SCRIPTED_DISSENT_REASON,
    Verifier, VerifierBehaviour, VerifierConfig, VerifierCounters,
};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// `sha256:<64 lowercase hex>` of `bytes`, the digest notation of the seed's ArtifactRef.
fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `policy_hash` as the verify seed defines it: SHA-256 of `policy_id` concatenated with the
/// serialised `policy_params` (serialised as RFC 8785 canonical JSON, per DESIGN §7).
fn policy_hash(policy_id: &str, policy_params: &Value) -> Result<String, serde_json::Error> {
    let mut preimage = policy_id.as_bytes().to_vec();
    preimage.extend(serde_jcs::to_vec(policy_params)?);
    Ok(sha256_tagged(&preimage))
}

/// The object `verifier_result_hash` is taken over (verify seed, "verifier_result_hash").
#[derive(Serialize)]
struct ResultHashPreimage<'a> {
    candidate_id: &'a str,
    execution_id: &'a str,
    passed: bool,
    score: f64,
    reason_codes: &'a [u16],
    provider_family: &'a str,
    model_id: &'a str,
    policy_hash: &'a str,
}

impl ResultHashPreimage<'_> {
    fn digest(&self, hashing: ResultHashing) -> Result<String, serde_json::Error> {
        match hashing {
            ResultHashing::Rfc8785 => Ok(sha256_tagged(&serde_jcs::to_vec(self)?)),
            // The seed's handler, as written there: `sha256_hex(serde_json::to_vec(&json!({...})))`.
            ResultHashing::SeedRuntime => Ok(hex::encode(Sha256::digest(serde_json::to_vec(
                &serde_json::json!({
                    "candidate_id":   self.candidate_id,
                    "execution_id":   self.execution_id,
                    "passed":         self.passed,
                    "score":          self.score,
                    "reason_codes":   self.reason_codes,
                    "provider_family": self.provider_family,
                    "model_id":       self.model_id,
                    "policy_hash":    self.policy_hash,
                }),
            )?))),
        }
    }
}

/// Why a reference WattSwarm server refused a request. The seed's own handler answers
/// `(StatusCode, String)`, so these render as a status with a plain-text reason.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("request body is not a valid {what}: {detail}")]
    BadBody { what: &'static str, detail: String },
    #[error("task_type `{0}` is not declared in /capabilities")]
    UnsupportedTaskType(String),
    #[error("profile `{0}` is not declared in /capabilities")]
    UnsupportedProfile(String),
    #[error("policy binding invalid: {0}")]
    PolicyBinding(&'static str),
    #[error("output_schema is not a valid JSON Schema")]
    InvalidOutputSchema,
    #[error("no evidence artifact for this execution")]
    UnknownArtifact,
    #[error("the execution ended without a result")]
    ExecutionLost,
    #[error("result could not be serialised canonically")]
    Canonicalisation(#[from] serde_json::Error),
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = match self {
            Self::BadBody { .. }
            | Self::UnsupportedTaskType(_)
            | Self::UnsupportedProfile(_)
            | Self::PolicyBinding(_)
            | Self::InvalidOutputSchema => StatusCode::BAD_REQUEST,
            Self::UnknownArtifact => StatusCode::NOT_FOUND,
            Self::ExecutionLost | Self::Canonicalisation(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, self.to_string()).into_response()
    }
}
