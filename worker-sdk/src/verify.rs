//! `POST /verify`: an SDK worker serving as a cross-check verifier
//! (`seeds/wattswarm-verify-endpoint.txt`), so it can vote in a `vp.crosscheck.v1` quorum.
//!
//! The author writes a [`VerifyHandler`] (usually an async closure) that judges the
//! candidate and returns a [`Verdict`]; the SDK does the protocol around it:
//!
//! 1. the body must be the seed's `VerifyRequest` (else 400 `invalid_verify_request`), and
//!    its policy binding must be one the SDK knows with `policy_hash = sha256(policy_id ‖
//!    JCS(policy_params))` (else 400 `invalid_policy`) — the handler never sees a binding
//!    whose hash does not match its parameters;
//! 2. the answer is the seed's `VerifyResponse`: the verdict, the worker's declared
//!    `provider_family` and `model_id`, and `verifier_result_hash = sha256(JCS({candidate_id,
//!    execution_id, passed, score, reason_codes, provider_family, model_id, policy_hash}))`,
//!    which is how the gateway checks that the vote judged the policy it asked about.
//!
//! The route is unauthenticated, as in the seed: a vote carries no paid work, and the
//! gateway only counts votes of the verifier listings a contract names.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use hiregate_contracts::canonical::CanonicalError;
use hiregate_contracts::policy::{PolicyBinding, PolicyError};
pub use hiregate_contracts::verify::VerificationStatus;
use hiregate_contracts::verify::{ResultHashInput, verifier_result_hash};
pub use hiregate_contracts::wire::wattswarm::{Candidate, VerifyRequest, VerifyResponse};

/// The future a verify handler returns.
pub type VerifyFuture = Pin<Box<dyn Future<Output = Verdict> + Send + 'static>>;

/// Judges candidates for `POST /verify`. Implemented for every
/// `Fn(VerifyRequest) -> impl Future<Output = Verdict>` that is `Send + Sync + 'static`:
///
/// ```
/// use hiregate_worker_sdk::verify::{Verdict, VerifyRequest};
/// let judge = |request: VerifyRequest| async move {
///     if request.candidate.output.get("answer").is_some() {
///         Verdict::pass(1.0)
///     } else {
///         Verdict::fail(1.0, vec![101])
///     }
/// };
/// # let _ = judge;
/// ```
pub trait VerifyHandler: Send + Sync + 'static {
    /// Judges one candidate under the request's (already checked) policy binding.
    fn verify(&self, request: VerifyRequest) -> VerifyFuture;
}

impl<F, Fut> VerifyHandler for F
where
    F: Fn(VerifyRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    fn verify(&self, request: VerifyRequest) -> VerifyFuture {
        Box::pin(self(request))
    }
}

/// A verify handler's judgement.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Whether the candidate passes.
    pub passed: bool,
    /// Confidence in [0, 1]; values outside are clamped, a non-number counts as 0.
    pub score: f64,
    /// WattSwarm reason codes (1xx schema/threshold, 2xx evidence, 3xx task, 999 custom).
    pub reason_codes: Vec<u16>,
    /// `passed`/`failed`/`inconclusive`; derived from `passed` when `None`.
    pub status: Option<VerificationStatus>,
}

impl Verdict {
    /// The candidate passes with confidence `score`.
    #[must_use]
    pub fn pass(score: f64) -> Self {
        Self {
            passed: true,
            score,
            reason_codes: Vec::new(),
            status: Some(VerificationStatus::Passed),
        }
    }

    /// The candidate fails, for `reason_codes`, with confidence `score` in that verdict.
    #[must_use]
    pub fn fail(score: f64, reason_codes: Vec<u16>) -> Self {
        Self {
            passed: false,
            score,
            reason_codes,
            status: Some(VerificationStatus::Failed),
        }
    }

    /// No verdict could be reached (e.g. evidence unreachable): the seed's `inconclusive`.
    #[must_use]
    pub fn inconclusive(reason_codes: Vec<u16>) -> Self {
        Self {
            passed: false,
            score: 0.0,
            reason_codes,
            status: Some(VerificationStatus::Inconclusive),
        }
    }
}

/// Who this worker is when it votes, as declared in `/capabilities`.
pub(crate) struct VerifierSetup {
    pub(crate) provider_family: String,
    pub(crate) model_id: String,
    pub(crate) handler: Box<dyn VerifyHandler>,
}

impl fmt::Debug for VerifierSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifierSetup")
            .field("provider_family", &self.provider_family)
            .field("model_id", &self.model_id)
            .finish_non_exhaustive()
    }
}

/// Checks the request's policy binding (known policy, parameters that parse, hash of id and
/// parameters as sent).
pub(crate) fn check_binding(request: &VerifyRequest) -> Result<PolicyBinding, PolicyError> {
    PolicyBinding::try_from(request.policy.clone())
}

/// The seed's `VerifyResponse` for `verdict` on `request`, signed off with the result hash.
pub(crate) fn response(
    setup: &VerifierSetup,
    request: &VerifyRequest,
    verdict: Verdict,
) -> Result<VerifyResponse, CanonicalError> {
    let score = if verdict.score.is_finite() {
        verdict.score.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let status = verdict.status.unwrap_or(if verdict.passed {
        VerificationStatus::Passed
    } else {
        VerificationStatus::Failed
    });
    // A vote saying both "passed" and "failed" would be counted inconsistently: the status
    // decides, and `passed` follows it.
    let passed = status == VerificationStatus::Passed;
    let hash = verifier_result_hash(&ResultHashInput {
        candidate_id: &request.candidate.candidate_id,
        execution_id: &request.candidate.execution_id,
        passed,
        score,
        reason_codes: &verdict.reason_codes,
        provider_family: &setup.provider_family,
        model_id: &setup.model_id,
        policy_hash: &request.policy.policy_hash,
    })?;
    Ok(VerifyResponse {
        passed,
        score,
        reason_codes: verdict.reason_codes,
        verification_status: Some(status),
        verifier_result_hash: hash.to_string(),
        provider_family: setup.provider_family.clone(),
        model_id: setup.model_id.clone(),
    })
}
