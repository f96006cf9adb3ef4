//! The hash of a verification result as the seed verifiers compute it (and the forms a
//! claimed vote hash may take), so a vote can be matched to the result it claims.

use super::*;

/// The fields bound by `verifier_result_hash`, in WattSwarm's naming.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ResultHashInput<'a> {
    /// Candidate judged.
    pub candidate_id: &'a str,
    /// Execution judged.
    pub execution_id: &'a str,
    /// Verdict.
    pub passed: bool,
    /// Score.
    pub score: f64,
    /// Reason codes, in the order reported.
    pub reason_codes: &'a [u16],
    /// Verifier runtime family.
    pub provider_family: &'a str,
    /// Verifier model.
    pub model_id: &'a str,
    /// Policy applied.
    pub policy_hash: &'a Digest,
}

/// `sha256(canonical({candidate_id, execution_id, passed, score, reason_codes,
/// provider_family, model_id, policy_hash}))`.
pub fn verifier_result_hash(input: &ResultHashInput<'_>) -> Result<Digest, CanonicalError> {
    Digest::of_canonical(input)
}

/// How a vote's `verifier_result_hash` was serialised before hashing, among the two forms a
/// vote may use (see [`vote_hash_form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultHashForm {
    /// RFC 8785 (JCS), as hiregate's own verifiers and DESIGN §7 write it: a `score` of 1 is
    /// `1`.
    Rfc8785,
    /// `serde_json::to_vec(&json!({...}))`, as the verify seed's reference handler writes it:
    /// keys sorted (serde_json's default map is a `BTreeMap`), no whitespace, numbers as
    /// serde_json prints them, so a `score` of 1 is `1.0`.
    SeedRuntime,
}

/// The eight fields in the verify seed's reference handler serialisation: declared in sorted
/// key order, which is the order `serde_json::to_vec(&json!({...}))` writes them in (its
/// default map sorts keys), whether or not this build's serde_json preserves insertion order.
#[derive(Serialize)]
struct SeedRuntimePreimage<'a> {
    candidate_id: &'a str,
    execution_id: &'a str,
    model_id: &'a str,
    passed: bool,
    policy_hash: &'a Digest,
    provider_family: &'a str,
    reason_codes: &'a [u16],
    score: f64,
}

/// SHA-256 of `input` serialised as the verify seed's reference handler does
/// ([`ResultHashForm::SeedRuntime`]).
pub fn seed_runtime_result_hash(input: &ResultHashInput<'_>) -> Result<Digest, CanonicalError> {
    let preimage = SeedRuntimePreimage {
        candidate_id: input.candidate_id,
        execution_id: input.execution_id,
        model_id: input.model_id,
        passed: input.passed,
        policy_hash: input.policy_hash,
        provider_family: input.provider_family,
        reason_codes: input.reason_codes,
        score: input.score,
    };
    let bytes = serde_json::to_vec(&preimage).map_err(CanonicalError)?;
    Ok(Digest::of_bytes(&bytes))
}

/// The 32 bytes a `verifier_result_hash` string names: `sha256:<64 hex>` (hiregate, and the
/// seed's example response) or bare `<64 hex>` (what the seed's reference handler's
/// `sha256_hex` returns). Either case of hex. Anything else names nothing.
fn claimed_result_hash(claimed: &str) -> Option<Digest> {
    if let Ok(digest) = claimed.parse::<Digest>() {
        return Some(digest);
    }
    let mut bytes = [0u8; 32];
    (claimed.len() == 64)
        .then(|| hex::decode_to_slice(claimed, &mut bytes).ok())
        .flatten()
        .map(|()| Digest::from_raw(bytes))
}

/// Which accepted serialisation of `input` the vote's `claimed` hash is the SHA-256 of, if
/// any. Both forms serialise the same eight values, so a match in either proves the verifier
/// bound exactly this candidate, execution, verdict, runtime and policy. Any other
/// serialisation (another key order, whitespace, another number spelling) cannot be told
/// apart from a hash over other values, so it matches nothing and the vote does not count.
#[must_use]
pub fn vote_hash_form(input: &ResultHashInput<'_>, claimed: &str) -> Option<ResultHashForm> {
    let claimed = claimed_result_hash(claimed)?;
    if verifier_result_hash(input).is_ok_and(|hash| hash == claimed) {
        Some(ResultHashForm::Rfc8785)
    } else if seed_runtime_result_hash(input).is_ok_and(|hash| hash == claimed) {
        Some(ResultHashForm::SeedRuntime)
    } else {
        None
    }
}
