//! Deterministic verification of a deliverable under a pinned [`PolicyBinding`].
//!
//! Flow of [`Verifier::verify`]:
//!
//! 1. **Evidence** (always, before any policy): every file and evidence artifact the
//!    deliverable names (see [`Deliverable::evidence_requests`]) must have been fetched by the
//!    caller and handed in as an [`EvidenceFetch`]. Fetching is I/O, so it happens outside this
//!    crate. A digest mismatch or oversize evidence **fails**; evidence that could not be
//!    fetched (or was not handed in) makes the result **inconclusive**, never failed.
//! 2. **Subject**: the JSON value the policy judges (see [`Output`](crate::deliverable::Output)).
//! 3. **Policy**: every output schema of the contract, then thresholds (`vp.schema_thresholds.v1`)
//!    or reference values and the verifier quorum (`vp.crosscheck.v1`).
//! 4. **Result**: `passed`, `score`, sorted `reason_codes`, `verification_status`, and
//!    `verifier_result_hash = sha256(canonical({candidate_id, execution_id, passed, score,
//!    reason_codes, provider_family, model_id, policy_hash}))`.
//!
//! Nothing here reads a clock or the network: the same inputs give the same result and hash,
//! which is what dispute replay relies on.

mod metered;
mod result_hash;

pub use result_hash::{
    ResultHashForm, ResultHashInput, seed_runtime_result_hash, verifier_result_hash, vote_hash_form,
};

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use crate::canonical::{CanonicalError, Digest, to_canonical_vec};
use crate::deliverable::{Deliverable, DeliveryStatus, Subject};
use crate::metering::MeterUnit;
use crate::policy::{
    Aggregation, CrosscheckParams, PolicyBinding, PolicyParams, Quorum, ThresholdOp,
    ThresholdParams,
};
use crate::reason;
use crate::schema::{MAX_INSTANCE_DEPTH, OutputSchema, SchemaCache, SchemaError, SchemaViolation};
pub use crate::verdict::VerificationStatus;
use crate::wire::wattswarm::VerifyResponse;

/// Why evidence could not be fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchFailure {
    /// Connection refused, DNS failure, 5xx, 404… (reason 200).
    Unreachable,
    /// Timed out (reason 201).
    Timeout,
    /// 401/403 from the source (reason 202).
    AuthDenied,
}

impl FetchFailure {
    const fn reason_code(self) -> u16 {
        match self {
            Self::Unreachable => reason::EVIDENCE_UNREACHABLE,
            Self::Timeout => reason::EVIDENCE_TIMEOUT,
            Self::AuthDenied => reason::EVIDENCE_AUTH_DENIED,
        }
    }
}

/// What the caller got when it fetched one piece of evidence.
#[derive(Clone, PartialEq, Eq)]
pub enum EvidenceFetch {
    /// The bytes (already size-limited by the fetcher).
    Fetched(Vec<u8>),
    /// Not fetched.
    Failed(FetchFailure),
    /// The source sent more than the fetch limit allows (reason 250, failed).
    TooLarge {
        /// The limit that was exceeded.
        limit_bytes: u64,
    },
}

impl fmt::Debug for EvidenceFetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Evidence can be large and is the parties' data: print its size only.
            Self::Fetched(bytes) => write!(f, "Fetched({} bytes)", bytes.len()),
            Self::Failed(failure) => write!(f, "Failed({failure:?})"),
            Self::TooLarge { limit_bytes } => write!(f, "TooLarge({limit_bytes})"),
        }
    }
}

/// Fetched evidence by URL, handed to the verifier.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvidenceSet {
    fetched: BTreeMap<String, EvidenceFetch>,
}

impl EvidenceSet {
    /// No evidence.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records what fetching `uri` gave.
    pub fn insert(&mut self, uri: &Url, fetch: EvidenceFetch) {
        self.fetched.insert(uri.as_str().to_owned(), fetch);
    }

    /// Builder form of [`insert`](Self::insert).
    #[must_use]
    pub fn with(mut self, uri: &Url, fetch: EvidenceFetch) -> Self {
        self.insert(uri, fetch);
        self
    }

    /// What fetching `uri` gave, if it was attempted.
    #[must_use]
    pub fn get(&self, uri: &Url) -> Option<&EvidenceFetch> {
        self.fetched.get(uri.as_str())
    }
}

/// One verifier's answer, or its absence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VerifierVote {
    /// The verifier answered.
    Cast {
        /// Who was asked (e.g. a worker id).
        verifier: String,
        /// Its `/verify` response.
        response: VerifyResponse,
        /// The `provider_family` and `model_id` the verifier declares in its `/capabilities`;
        /// `None` when that declaration could not be read. A vote naming another runtime (or
        /// cast without a readable declaration) does not count: fail-closed.
        #[serde(default)]
        declared: Option<VerifierIdentity>,
    },
    /// The verifier was asked and did not answer in time (counts against: fail-closed).
    Missing {
        /// Who was asked.
        verifier: String,
    },
}

impl VerifierVote {
    fn verifier(&self) -> &str {
        match self {
            Self::Cast { verifier, .. } | Self::Missing { verifier } => verifier,
        }
    }
}

/// The votes collected for a `vp.crosscheck.v1` quorum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VoteSet {
    /// The `policy_hash` the verifiers were asked to apply; used to recompute each vote's
    /// `verifier_result_hash`.
    pub requested_policy_hash: Digest,
    /// One entry per verifier asked.
    pub votes: Vec<VerifierVote>,
}

/// Who is verifying, as named in `verifier_result_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifierIdentity {
    /// Runtime family (WattSwarm `provider_family`).
    pub provider_family: String,
    /// Model or version (WattSwarm `model_id`).
    pub model_id: String,
}

impl Default for VerifierIdentity {
    fn default() -> Self {
        Self {
            provider_family: "hiregate".to_owned(),
            model_id: "hiregate-policy-engine-v1".to_owned(),
        }
    }
}

/// Everything a verification needs. All of it is data the gateway stores, so a dispute can
/// replay exactly this.
#[derive(Debug, Clone, Copy)]
pub struct VerificationRequest<'a> {
    /// WattSwarm `candidate_id`; hiregate uses the deliverable digest.
    pub candidate_id: &'a str,
    /// WattSwarm `execution_id`; hiregate uses the execution id the proposer got in its
    /// `/execute` call (`<contract>-attempt-<n>`), the one cross-check verifiers are asked about.
    pub execution_id: &'a str,
    /// What was delivered.
    pub deliverable: &'a Deliverable,
    /// Every schema the output must satisfy (the listing's, then the seeker's).
    pub output_schemas: &'a [OutputSchema],
    /// The pinned policy.
    pub policy: &'a PolicyBinding,
    /// Fetched files and evidence.
    pub evidence: &'a EvidenceSet,
    /// Verifier votes, for a policy with a quorum.
    pub votes: Option<&'a VoteSet>,
}

/// What happened to one piece of evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum EvidenceOutcome {
    /// Fetched and its digest matches.
    Verified {
        /// Digest of the bytes.
        digest: Digest,
    },
    /// Fetched; no digest was declared to check against.
    Unchecked {
        /// Digest of the bytes (recorded for disputes).
        digest: Digest,
    },
    /// Fetched; the bytes hash to something else.
    DigestMismatch {
        /// Digest of the bytes actually fetched.
        actual: Digest,
    },
    /// Not fetched.
    Unavailable {
        /// Why.
        failure: FetchFailure,
    },
    /// The caller did not hand in this evidence (treated as unreachable).
    NotProvided,
    /// Larger than the fetch limit.
    TooLarge {
        /// The limit.
        limit_bytes: u64,
    },
}

/// The check of one piece of evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceCheck {
    /// What was fetched.
    pub uri: Url,
    /// What it should hash to.
    pub expected_digest: Option<Digest>,
    /// What happened.
    #[serde(flatten)]
    pub outcome: EvidenceOutcome,
}

/// One threshold or reference value that did not hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleFailure {
    /// Where in the output.
    pub pointer: String,
    /// The rule, e.g. `">= 0.8"` or `"== \"yes\""`.
    pub rule: String,
    /// The value found (truncated canonical JSON), if any.
    pub actual: Option<String>,
    /// The reason code this failure contributed.
    pub reason_code: u16,
}

/// How the verifier votes added up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuorumTally {
    /// Verifiers asked.
    pub requested: u32,
    /// Votes that decided (passed or failed).
    pub decisive: u32,
    /// Votes counted as passing (passed, with at least `min_score`).
    pub passing: u32,
    /// Passing votes demoted for a score below `min_score`.
    pub below_min_score: u32,
    /// Verifiers that did not answer.
    pub missing: u32,
    /// Votes that answered inconclusive, carried an out-of-range score, named another
    /// runtime than the verifier declares, or whose `verifier_result_hash` does not bind the
    /// requested policy and this candidate.
    pub undecided: u32,
    /// Votes whose `provider_family`/`model_id` are not what the verifier declares in its
    /// `/capabilities` (or whose declaration could not be read); counted in `undecided` too.
    #[serde(default)]
    pub identity_mismatch: u32,
    /// Votes whose `verifier_result_hash` matches our recomputation (only those can decide).
    pub hash_verified: u32,
    /// Weight of passing votes.
    pub pass_weight: f64,
    /// Weight of all requested votes.
    pub total_weight: f64,
    /// `pass_weight / total_weight`.
    pub pass_ratio: f64,
}

/// Why the result is what it is, for people and for disputes. Not part of the result hash.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VerificationDetails {
    /// [`Deliverable::digest`] of what was judged.
    pub deliverable_digest: Option<Digest>,
    /// Every evidence check.
    pub evidence: Vec<EvidenceCheck>,
    /// Schema violations with failing instance paths.
    pub schema_violations: Vec<SchemaViolation>,
    /// Thresholds that did not hold.
    pub threshold_failures: Vec<RuleFailure>,
    /// Reference values that did not match.
    pub reference_mismatches: Vec<RuleFailure>,
    /// The quorum tally, for a policy with a quorum.
    pub quorum: Option<QuorumTally>,
    /// Anything else worth knowing (e.g. a JSON file that does not parse).
    pub notes: Vec<String>,
    /// A metered (`upto`) contract: the units delivered, verified and billed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metered: Option<MeteredCount>,
}

/// What a metered contract's verification counted ([`Verifier::verify_metered`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeteredCount {
    /// The unit counted.
    pub unit: MeterUnit,
    /// Units delivered as the gateway counted them: items of the output, events relayed, or
    /// the worker's reported seconds or tokens within the gateway's [`measured`](Self::measured)
    /// bound.
    pub delivered: u32,
    /// Units that passed verification (items on their own; the other units all or none, with
    /// the whole output).
    pub verified: u32,
    /// Units paid for: `verified`, at most the terms' `max_units`.
    pub billable: u32,
    /// Which items passed (0-based positions in the output); empty for other units.
    pub passed_items: Vec<u32>,
    /// What the worker reported for the unit (`metadata.usage`), as it wrote it; absent for
    /// `item`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<u64>,
    /// The gateway's own measurement bounding the count (events relayed, wall seconds, the
    /// output's token bound); absent for `item`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<u64>,
}

/// The verdict. The first eight fields (with `verification_status`) are what WattSwarm
/// `/verify` returns; `details` explains them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerificationResult {
    /// True only for [`VerificationStatus::Passed`].
    pub passed: bool,
    /// Confidence in [0, 1]: 1 for a pass (the quorum's pass ratio when votes decided it), 0
    /// otherwise.
    pub score: f64,
    /// Sorted, de-duplicated reason codes; empty on a clean pass.
    pub reason_codes: Vec<u16>,
    /// Passed, failed or inconclusive.
    pub verification_status: VerificationStatus,
    /// Hash binding the verdict to the candidate, the verifier and the policy.
    pub verifier_result_hash: Digest,
    /// Candidate judged.
    pub candidate_id: String,
    /// Execution judged.
    pub execution_id: String,
    /// Verifier runtime family.
    pub provider_family: String,
    /// Verifier model.
    pub model_id: String,
    /// Policy applied.
    pub policy_hash: Digest,
    /// Why.
    pub details: VerificationDetails,
}

impl VerificationResult {
    /// The WattSwarm `/verify` response for this result.
    #[must_use]
    pub fn to_verify_response(&self) -> VerifyResponse {
        VerifyResponse {
            passed: self.passed,
            score: self.score,
            reason_codes: self.reason_codes.clone(),
            verification_status: Some(self.verification_status),
            verifier_result_hash: self.verifier_result_hash.to_string(),
            provider_family: self.provider_family.clone(),
            model_id: self.model_id.clone(),
        }
    }
}

/// A verification could not be carried out at all (not a verdict).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A schema could not be compiled.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Something could not be canonicalised.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// Applies policies. Holds the compiled-schema cache; share one per process.
#[derive(Debug, Default)]
pub struct Verifier {
    schemas: SchemaCache,
    identity: VerifierIdentity,
}

/// Reason codes that decide a verdict as failed.
fn is_definitive_failure(code: u16) -> bool {
    !(reason::is_evidence_unavailable(code) || code == reason::INSUFFICIENT_VERIFIERS)
}

#[derive(Default)]
struct Findings {
    codes: Vec<u16>,
    details: VerificationDetails,
    /// The subject could not be built (needed evidence missing).
    undecidable: bool,
    quorum_ratio: Option<f64>,
}

impl Verifier {
    /// A verifier naming itself `identity` in result hashes.
    #[must_use]
    pub fn new(identity: VerifierIdentity) -> Self {
        Self {
            schemas: SchemaCache::default(),
            identity,
        }
    }

    /// A verifier with a specific cache.
    #[must_use]
    pub fn with_cache(identity: VerifierIdentity, schemas: SchemaCache) -> Self {
        Self { schemas, identity }
    }

    /// The compiled-schema cache.
    #[must_use]
    pub fn schemas(&self) -> &SchemaCache {
        &self.schemas
    }

    /// Who this verifier says it is.
    #[must_use]
    pub fn identity(&self) -> &VerifierIdentity {
        &self.identity
    }

    /// Judges a deliverable. Errors only when the inputs cannot be processed at all; every
    /// judgement about the deliverable is in the result.
    pub fn verify(
        &self,
        request: &VerificationRequest<'_>,
    ) -> Result<VerificationResult, VerifyError> {
        let mut findings = Findings::default();
        findings.details.deliverable_digest = Some(request.deliverable.digest()?);

        let content = check_evidence(request, &mut findings);
        if request.deliverable.status() == DeliveryStatus::Partial {
            let items = request.deliverable.output().item_count();
            match request.policy.accept_partial() {
                Some(allowed) if items >= allowed.min_items as usize => {
                    findings.details.notes.push(format!(
                        "the worker ended with status partial: {items} item(s), at least the {} the contract accepts",
                        allowed.min_items
                    ));
                }
                Some(allowed) => {
                    findings.codes.push(reason::PARTIAL_DELIVERY);
                    findings.details.notes.push(format!(
                        "the worker ended with status partial: {items} item(s), fewer than the {} the contract accepts",
                        allowed.min_items
                    ));
                }
                None => {
                    findings.codes.push(reason::PARTIAL_DELIVERY);
                    findings
                        .details
                        .notes
                        .push("the worker ended with status partial".to_owned());
                }
            }
        }

        match request.deliverable.output().subject(&content) {
            Subject::Ready(subject) => {
                if exceeds_depth(&subject, MAX_INSTANCE_DEPTH) {
                    findings.codes.push(reason::INVALID_OUTPUT);
                    findings.details.notes.push(format!(
                        "output nests deeper than {MAX_INSTANCE_DEPTH} levels"
                    ));
                } else {
                    self.apply_policy(request, &subject, &mut findings)?;
                }
            }
            Subject::Unavailable => {
                findings.undecidable = true;
                findings
                    .details
                    .notes
                    .push("the output's content could not be fetched".to_owned());
            }
            Subject::Invalid(note) => {
                findings.codes.push(reason::INVALID_OUTPUT);
                findings.details.notes.push(note);
            }
        }
        if let (Some(quorum), None) = (request.policy.quorum(), &findings.details.quorum) {
            // The policy needs votes but the subject could not be judged; still report them.
            let tally = tally_votes(request, quorum);
            findings.details.quorum = Some(tally);
        }

        self.conclude(request, findings)
    }

    /// The result of `findings` on `request`: the status its codes decide, the score, the
    /// result hash.
    fn conclude(
        &self,
        request: &VerificationRequest<'_>,
        findings: Findings,
    ) -> Result<VerificationResult, VerifyError> {
        let mut codes = findings.codes;
        codes.sort_unstable();
        codes.dedup();
        let status = if codes.iter().any(|code| is_definitive_failure(*code)) {
            VerificationStatus::Failed
        } else if findings.undecidable || !codes.is_empty() {
            VerificationStatus::Inconclusive
        } else {
            VerificationStatus::Passed
        };
        let passed = status == VerificationStatus::Passed;
        let score = if passed {
            findings.quorum_ratio.unwrap_or(1.0)
        } else {
            0.0
        };
        let policy_hash = request.policy.policy_hash();
        let verifier_result_hash = verifier_result_hash(&ResultHashInput {
            candidate_id: request.candidate_id,
            execution_id: request.execution_id,
            passed,
            score,
            reason_codes: &codes,
            provider_family: &self.identity.provider_family,
            model_id: &self.identity.model_id,
            policy_hash: &policy_hash,
        })?;
        Ok(VerificationResult {
            passed,
            score,
            reason_codes: codes,
            verification_status: status,
            verifier_result_hash,
            candidate_id: request.candidate_id.to_owned(),
            execution_id: request.execution_id.to_owned(),
            provider_family: self.identity.provider_family.clone(),
            model_id: self.identity.model_id.clone(),
            policy_hash,
            details: findings.details,
        })
    }

    fn apply_policy(
        &self,
        request: &VerificationRequest<'_>,
        subject: &Value,
        findings: &mut Findings,
    ) -> Result<(), VerifyError> {
        for schema in request.output_schemas {
            let violations = self.schemas.validate(schema, subject)?;
            if !violations.is_empty() {
                findings.codes.push(reason::SCHEMA_INVALID);
                findings.details.schema_violations.extend(violations);
            }
        }
        match request.policy.params() {
            PolicyParams::SchemaOnly(_) => {}
            PolicyParams::Thresholds(params) => check_thresholds(params, subject, findings)?,
            PolicyParams::Crosscheck(params) => {
                check_references(params, subject, findings)?;
                if let Some(quorum) = &params.quorum {
                    let tally = tally_votes(request, quorum);
                    if tally.decisive < quorum.min_verifiers {
                        findings.codes.push(reason::INSUFFICIENT_VERIFIERS);
                    } else if tally.pass_ratio < quorum.min_pass_ratio {
                        findings.codes.push(reason::QUORUM_NOT_MET);
                        if tally.below_min_score > 0 {
                            findings.codes.push(reason::SCORE_TOO_LOW);
                        }
                    }
                    findings.quorum_ratio = Some(tally.pass_ratio);
                    findings.details.quorum = Some(tally);
                }
            }
        }
        Ok(())
    }
}

/// Checks every evidence request; returns the usable bytes by URL.
fn check_evidence(
    request: &VerificationRequest<'_>,
    findings: &mut Findings,
) -> BTreeMap<String, Vec<u8>> {
    let mut content = BTreeMap::new();
    for wanted in request.deliverable.evidence_requests() {
        let outcome = match request.evidence.get(&wanted.uri) {
            None => {
                findings.codes.push(reason::EVIDENCE_UNREACHABLE);
                EvidenceOutcome::NotProvided
            }
            Some(EvidenceFetch::Failed(failure)) => {
                findings.codes.push(failure.reason_code());
                EvidenceOutcome::Unavailable { failure: *failure }
            }
            Some(EvidenceFetch::TooLarge { limit_bytes }) => {
                findings.codes.push(reason::EVIDENCE_TOO_LARGE);
                EvidenceOutcome::TooLarge {
                    limit_bytes: *limit_bytes,
                }
            }
            Some(EvidenceFetch::Fetched(bytes)) => {
                let actual = Digest::of_bytes(bytes);
                match wanted.expected_digest {
                    Some(expected) if expected != actual => {
                        findings.codes.push(reason::EVIDENCE_DIGEST_MISMATCH);
                        EvidenceOutcome::DigestMismatch { actual }
                    }
                    Some(_) => {
                        content.insert(wanted.uri.as_str().to_owned(), bytes.clone());
                        EvidenceOutcome::Verified { digest: actual }
                    }
                    None => {
                        content.insert(wanted.uri.as_str().to_owned(), bytes.clone());
                        EvidenceOutcome::Unchecked { digest: actual }
                    }
                }
            }
        };
        findings.details.evidence.push(EvidenceCheck {
            uri: wanted.uri,
            expected_digest: wanted.expected_digest,
            outcome,
        });
    }
    content
}

fn status_word(status: VerificationStatus) -> &'static str {
    match status {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

fn exceeds_depth(value: &Value, limit: usize) -> bool {
    let mut stack = vec![(value, 1usize)];
    while let Some((node, depth)) = stack.pop() {
        if depth > limit {
            return true;
        }
        match node {
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            Value::Object(map) => stack.extend(map.values().map(|item| (item, depth + 1))),
            _ => {}
        }
    }
    false
}

fn short_json(value: &Value) -> String {
    crate::schema::truncate(&value.to_string(), 200)
}

/// Size used by byte limits: UTF-8 bytes of a string, canonical JSON bytes of anything else.
fn byte_size(value: &Value) -> Result<u64, CanonicalError> {
    let size = match value {
        Value::String(text) => text.len(),
        other => to_canonical_vec(other)?.len(),
    };
    Ok(u64::try_from(size).unwrap_or(u64::MAX))
}

fn canonical_eq(a: &Value, b: &Value) -> Result<bool, CanonicalError> {
    Ok(to_canonical_vec(a)? == to_canonical_vec(b)?)
}

fn fail(findings: &mut Findings, pointer: &str, rule: String, actual: Option<&Value>, code: u16) {
    findings.codes.push(code);
    findings.details.threshold_failures.push(RuleFailure {
        pointer: pointer.to_owned(),
        rule,
        actual: actual.map(short_json),
        reason_code: code,
    });
}

fn check_thresholds(
    params: &ThresholdParams,
    subject: &Value,
    findings: &mut Findings,
) -> Result<(), VerifyError> {
    if let Some(min) = params.min_confidence {
        let actual = subject.get("confidence");
        if actual.and_then(Value::as_f64).is_none_or(|c| c < min) {
            fail(
                findings,
                "/confidence",
                format!(">= {min}"),
                actual,
                reason::CONFIDENCE_TOO_LOW,
            );
        }
    }
    if let Some(max) = params.max_len {
        let size = u64::try_from(to_canonical_vec(subject)?.len()).unwrap_or(u64::MAX);
        if size > max {
            fail(
                findings,
                "",
                format!("max_len {max}"),
                None,
                reason::OUTPUT_TOO_LARGE,
            );
        }
    }
    for threshold in &params.thresholds {
        let pointer = threshold.pointer.as_str();
        let rule = format!(
            "{} {}",
            serde_json::to_value(threshold.op)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            short_json(&threshold.value)
        );
        let Some(actual) = threshold.pointer.resolve(subject) else {
            fail(findings, pointer, rule, None, reason::VALUE_MISSING);
            continue;
        };
        let holds = match threshold.op {
            ThresholdOp::Gte | ThresholdOp::Gt | ThresholdOp::Lte | ThresholdOp::Lt => {
                match (actual.as_f64(), threshold.value.as_f64()) {
                    (Some(a), Some(b)) => match threshold.op {
                        ThresholdOp::Gte => a >= b,
                        ThresholdOp::Gt => a > b,
                        ThresholdOp::Lte => a <= b,
                        _ => a < b,
                    },
                    _ => false,
                }
            }
            ThresholdOp::Eq => canonical_eq(actual, &threshold.value)?,
            ThresholdOp::Ne => !canonical_eq(actual, &threshold.value)?,
            ThresholdOp::MaxBytes | ThresholdOp::MinBytes => {
                let size = byte_size(actual)?;
                let limit = threshold.value.as_u64().unwrap_or(0);
                if threshold.op == ThresholdOp::MaxBytes {
                    size <= limit
                } else {
                    size >= limit
                }
            }
        };
        if !holds {
            let code = if threshold.op == ThresholdOp::MaxBytes {
                reason::OUTPUT_TOO_LARGE
            } else {
                reason::THRESHOLD_NOT_MET
            };
            fail(findings, pointer, rule, Some(actual), code);
        }
    }
    Ok(())
}

fn check_references(
    params: &CrosscheckParams,
    subject: &Value,
    findings: &mut Findings,
) -> Result<(), VerifyError> {
    for reference in &params.references {
        let pointer = reference.pointer.as_str();
        let rule = match reference.tolerance {
            Some(tolerance) => format!("== {} ± {tolerance}", short_json(&reference.equals)),
            None => format!("== {}", short_json(&reference.equals)),
        };
        let Some(actual) = reference.pointer.resolve(subject) else {
            findings.codes.push(reason::VALUE_MISSING);
            findings.details.reference_mismatches.push(RuleFailure {
                pointer: pointer.to_owned(),
                rule,
                actual: None,
                reason_code: reason::VALUE_MISSING,
            });
            continue;
        };
        let agrees = match (
            reference.tolerance,
            actual.as_f64(),
            reference.equals.as_f64(),
        ) {
            (Some(tolerance), Some(a), Some(b)) => (a - b).abs() <= tolerance,
            _ => canonical_eq(actual, &reference.equals)?,
        };
        if !agrees {
            findings.codes.push(reason::REFERENCE_MISMATCH);
            findings.details.reference_mismatches.push(RuleFailure {
                pointer: pointer.to_owned(),
                rule,
                actual: Some(short_json(actual)),
                reason_code: reason::REFERENCE_MISMATCH,
            });
        }
    }
    Ok(())
}

/// Adds up the votes, fail-closed: every verifier asked weighs 1 in the denominator, whether it
/// passed, failed, said inconclusive or never answered; only a pass adds to the numerator
/// (its score when confidence-weighted, 1 when counted). The ratio is the average support.
fn tally_votes(request: &VerificationRequest<'_>, quorum: &Quorum) -> QuorumTally {
    let mut tally = QuorumTally {
        requested: 0,
        decisive: 0,
        passing: 0,
        below_min_score: 0,
        missing: 0,
        undecided: 0,
        identity_mismatch: 0,
        hash_verified: 0,
        pass_weight: 0.0,
        total_weight: 0.0,
        pass_ratio: 0.0,
    };
    let Some(vote_set) = request.votes else {
        return tally;
    };
    // Sum in a fixed order so the float result (and so the result hash) does not depend on
    // the order votes arrived in.
    let mut votes: Vec<&VerifierVote> = vote_set.votes.iter().collect();
    votes.sort_by(|a, b| a.verifier().cmp(b.verifier()));
    for vote in votes {
        tally.requested = tally.requested.saturating_add(1);
        let (response, declared) = match vote {
            VerifierVote::Missing { .. } => {
                tally.missing += 1;
                tally.total_weight += 1.0;
                continue;
            }
            VerifierVote::Cast {
                response, declared, ..
            } => (response, declared),
        };
        let declared_runtime = declared.as_ref().is_some_and(|identity| {
            identity.provider_family == response.provider_family
                && identity.model_id == response.model_id
        });
        if !declared_runtime {
            // Cast by another runtime than the one the verifier declares (or by one that
            // declares nothing readable): not the verifier the quorum named. Fail-closed.
            tally.identity_mismatch += 1;
            tally.undecided += 1;
            tally.total_weight += 1.0;
            continue;
        }
        let binds = vote_hash_form(
            &ResultHashInput {
                candidate_id: request.candidate_id,
                execution_id: request.execution_id,
                passed: response.passed,
                score: response.score,
                reason_codes: &response.reason_codes,
                provider_family: &response.provider_family,
                model_id: &response.model_id,
                policy_hash: &vote_set.requested_policy_hash,
            },
            &response.verifier_result_hash,
        );
        if binds.is_some() {
            tally.hash_verified += 1;
        } else {
            // The hash does not bind this candidate and the requested policy: the verifier
            // judged something else (another policy, another candidate), so its vote cannot
            // count for this one. Fail-closed, like a missing vote.
            tally.undecided += 1;
            tally.total_weight += 1.0;
            continue;
        }
        let score_valid = (0.0..=1.0).contains(&response.score);
        let status = response.status();
        if !score_valid || status == VerificationStatus::Inconclusive {
            tally.undecided += 1;
            tally.total_weight += 1.0;
            continue;
        }
        tally.decisive += 1;
        tally.total_weight += 1.0;
        if status == VerificationStatus::Passed && response.passed {
            if response.score >= quorum.min_score {
                tally.passing += 1;
                tally.pass_weight += match quorum.aggregation {
                    Aggregation::ConfidenceWeighted => response.score,
                    Aggregation::Count => 1.0,
                };
            } else {
                tally.below_min_score += 1;
            }
        }
    }
    tally.pass_ratio = if tally.total_weight > 0.0 {
        tally.pass_weight / tally.total_weight
    } else {
        0.0
    };
    tally
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deliverable::{ArtifactRef, FileOutput, Output};
    use crate::metering::Metering;
    use crate::policy::PolicyId;
    use crate::schema::SchemaLimits;
    use serde_json::json;

    fn schema() -> OutputSchema {
        OutputSchema::parse(
            json!({
                "type": "object",
                "required": ["answer", "confidence"],
                "properties": {
                    "answer": {"type": "string", "minLength": 1},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "items": {"type": "array", "items": {"type": "integer"}}
                }
            }),
            &SchemaLimits::default(),
        )
        .unwrap()
    }

    fn json_deliverable(content: Value) -> Deliverable {
        Deliverable::completed(Output::Json { content }).unwrap()
    }

    fn binding(policy: PolicyId, params: Value) -> PolicyBinding {
        PolicyBinding::new(policy, params).unwrap()
    }

    fn run(
        deliverable: &Deliverable,
        policy: &PolicyBinding,
        evidence: &EvidenceSet,
        votes: Option<&VoteSet>,
    ) -> VerificationResult {
        let schemas = [schema()];
        Verifier::default()
            .verify(&VerificationRequest {
                candidate_id: "cand-1",
                execution_id: "att-1",
                deliverable,
                output_schemas: &schemas,
                policy,
                evidence,
                votes,
            })
            .unwrap()
    }

    fn good() -> Deliverable {
        json_deliverable(json!({"answer": "three risks", "confidence": 0.91, "items": [1, 2]}))
    }

    #[test]
    fn schema_valid_output_passes_cleanly() {
        let result = run(
            &good(),
            &PolicyBinding::schema_only(),
            &EvidenceSet::new(),
            None,
        );
        assert_eq!(result.verification_status, VerificationStatus::Passed);
        assert!(result.passed);
        assert_eq!(result.score, 1.0);
        assert!(result.reason_codes.is_empty());
        assert_eq!(
            result.details.deliverable_digest,
            Some(good().digest().unwrap())
        );
    }

    #[test]
    fn schema_invalid_output_fails_with_the_failing_paths() {
        let bad = json_deliverable(json!({"answer": "", "confidence": 1.5, "items": [1, "two"]}));
        let result = run(
            &bad,
            &PolicyBinding::schema_only(),
            &EvidenceSet::new(),
            None,
        );
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert!(!result.passed);
        assert_eq!(result.score, 0.0);
        assert_eq!(result.reason_codes, vec![reason::SCHEMA_INVALID]);
        let mut paths: Vec<&str> = result
            .details
            .schema_violations
            .iter()
            .map(|v| v.instance_path.as_str())
            .collect();
        paths.sort_unstable();
        assert_eq!(paths, vec!["/answer", "/confidence", "/items/1"]);
        assert!(
            result
                .details
                .schema_violations
                .iter()
                .all(|v| v.schema == schema().digest())
        );
    }

    #[test]
    fn every_contract_schema_must_hold() {
        let seeker_schema = OutputSchema::parse(
            json!({"properties": {"confidence": {"minimum": 0.95}}}),
            &SchemaLimits::default(),
        )
        .unwrap();
        let schemas = [schema(), seeker_schema.clone()];
        let result = Verifier::default()
            .verify(&VerificationRequest {
                candidate_id: "c",
                execution_id: "e",
                deliverable: &good(),
                output_schemas: &schemas,
                policy: &PolicyBinding::schema_only(),
                evidence: &EvidenceSet::new(),
                votes: None,
            })
            .unwrap();
        assert_eq!(result.reason_codes, vec![reason::SCHEMA_INVALID]);
        assert_eq!(
            result.details.schema_violations[0].schema,
            seeker_schema.digest()
        );
        assert_eq!(
            result.details.schema_violations[0].instance_path,
            "/confidence"
        );
    }

    #[test]
    fn thresholds_fail_with_their_reason_codes() {
        let policy = binding(
            PolicyId::SchemaThresholdsV1,
            json!({
                "min_confidence": 0.95,
                "thresholds": [
                    {"pointer": "/answer", "op": "max_bytes", "value": 5},
                    {"pointer": "/items/0", "op": ">", "value": 1},
                    {"pointer": "/missing", "op": "==", "value": true},
                    {"pointer": "/items", "op": "!=", "value": []},
                    {"pointer": "/answer", "op": "min_bytes", "value": 3}
                ]
            }),
        );
        let result = run(&good(), &policy, &EvidenceSet::new(), None);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(
            result.reason_codes,
            vec![
                reason::CONFIDENCE_TOO_LOW,
                reason::OUTPUT_TOO_LARGE,
                reason::THRESHOLD_NOT_MET,
                reason::VALUE_MISSING
            ]
        );
        let pointers: Vec<&str> = result
            .details
            .threshold_failures
            .iter()
            .map(|f| f.pointer.as_str())
            .collect();
        assert_eq!(
            pointers,
            vec!["/confidence", "/answer", "/items/0", "/missing"]
        );
        assert_eq!(
            result.details.threshold_failures[2].actual.as_deref(),
            Some("1")
        );

        let lenient = binding(
            PolicyId::SchemaThresholdsV1,
            json!({"thresholds": [{"pointer": "/confidence", "op": ">=", "value": 0.8}], "max_len": 1000}),
        );
        assert!(run(&good(), &lenient, &EvidenceSet::new(), None).passed);
    }

    fn file_deliverable(url: &Url, checksum: Digest) -> Deliverable {
        Deliverable::completed(Output::File(FileOutput {
            url: url.clone(),
            mime: Some("application/json; charset=utf-8".to_owned()),
            size: None,
            checksum: Some(checksum),
            name: Some("answer.json".to_owned()),
        }))
        .unwrap()
    }

    #[test]
    fn a_json_file_is_fetched_digest_checked_and_validated() {
        let url: Url = "https://cdn.worker.example/answer.json".parse().unwrap();
        let bytes = br#"{"answer": "from a file", "confidence": 0.5}"#.to_vec();
        let deliverable = file_deliverable(&url, Digest::of_bytes(&bytes));
        let evidence = EvidenceSet::new().with(&url, EvidenceFetch::Fetched(bytes.clone()));
        let result = run(&deliverable, &PolicyBinding::schema_only(), &evidence, None);
        assert_eq!(result.verification_status, VerificationStatus::Passed);
        assert_eq!(
            result.details.evidence[0].outcome,
            EvidenceOutcome::Verified {
                digest: Digest::of_bytes(&bytes)
            }
        );

        let not_json = b"<html>".to_vec();
        let deliverable = file_deliverable(&url, Digest::of_bytes(&not_json));
        let evidence = EvidenceSet::new().with(&url, EvidenceFetch::Fetched(not_json));
        let result = run(&deliverable, &PolicyBinding::schema_only(), &evidence, None);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(result.reason_codes, vec![reason::INVALID_OUTPUT]);
    }

    #[test]
    fn a_digest_mismatch_fails() {
        let url: Url = "https://cdn.worker.example/answer.json".parse().unwrap();
        let promised = br#"{"answer": "promised", "confidence": 0.5}"#;
        let served = br#"{"answer": "swapped!", "confidence": 0.5}"#.to_vec();
        let deliverable = file_deliverable(&url, Digest::of_bytes(promised));
        let evidence = EvidenceSet::new().with(&url, EvidenceFetch::Fetched(served.clone()));
        let result = run(&deliverable, &PolicyBinding::schema_only(), &evidence, None);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert!(!result.passed);
        assert_eq!(result.reason_codes, vec![reason::EVIDENCE_DIGEST_MISMATCH]);
        assert_eq!(
            result.details.evidence[0].outcome,
            EvidenceOutcome::DigestMismatch {
                actual: Digest::of_bytes(&served)
            }
        );
    }

    fn with_evidence_ref(url: &Url, digest: Digest) -> Deliverable {
        Deliverable::new(
            DeliveryStatus::Completed,
            Output::Json {
                content: json!({"answer": "ok", "confidence": 0.9}),
            },
            vec![],
            vec![ArtifactRef {
                uri: url.clone(),
                digest,
                size_bytes: None,
                mime: None,
                created_at: None,
                producer: None,
            }],
        )
        .unwrap()
    }

    #[test]
    fn unreachable_evidence_is_inconclusive_never_failed() {
        let url: Url = "https://runtime.local/trace/1".parse().unwrap();
        let deliverable = with_evidence_ref(&url, Digest::of_bytes(b"trace"));
        for (fetch, code) in [
            (
                EvidenceFetch::Failed(FetchFailure::Unreachable),
                reason::EVIDENCE_UNREACHABLE,
            ),
            (
                EvidenceFetch::Failed(FetchFailure::Timeout),
                reason::EVIDENCE_TIMEOUT,
            ),
            (
                EvidenceFetch::Failed(FetchFailure::AuthDenied),
                reason::EVIDENCE_AUTH_DENIED,
            ),
        ] {
            let evidence = EvidenceSet::new().with(&url, fetch);
            let result = run(&deliverable, &PolicyBinding::schema_only(), &evidence, None);
            assert_eq!(result.verification_status, VerificationStatus::Inconclusive);
            assert!(!result.passed);
            assert_eq!(result.reason_codes, vec![code]);
        }
        // Evidence the caller never fetched counts as unreachable.
        let result = run(
            &deliverable,
            &PolicyBinding::schema_only(),
            &EvidenceSet::new(),
            None,
        );
        assert_eq!(result.verification_status, VerificationStatus::Inconclusive);
        assert_eq!(
            result.details.evidence[0].outcome,
            EvidenceOutcome::NotProvided
        );
        // Once reachable, the same deliverable passes (what a dispute replay relies on).
        let evidence = EvidenceSet::new().with(&url, EvidenceFetch::Fetched(b"trace".to_vec()));
        assert!(run(&deliverable, &PolicyBinding::schema_only(), &evidence, None).passed);
        // Oversize evidence is the worker's problem: failed.
        let evidence = EvidenceSet::new().with(&url, EvidenceFetch::TooLarge { limit_bytes: 10 });
        let result = run(&deliverable, &PolicyBinding::schema_only(), &evidence, None);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(result.reason_codes, vec![reason::EVIDENCE_TOO_LARGE]);
    }

    #[test]
    fn a_definite_failure_beats_unreachable_evidence() {
        let url: Url = "https://runtime.local/trace/1".parse().unwrap();
        let mut deliverable_json =
            serde_json::to_value(with_evidence_ref(&url, Digest::of_bytes(b"t"))).unwrap();
        deliverable_json["output"]["content"]["confidence"] = json!("high");
        let deliverable: Deliverable = serde_json::from_value(deliverable_json).unwrap();
        let evidence = EvidenceSet::new().with(&url, EvidenceFetch::Failed(FetchFailure::Timeout));
        let result = run(&deliverable, &PolicyBinding::schema_only(), &evidence, None);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(
            result.reason_codes,
            vec![reason::SCHEMA_INVALID, reason::EVIDENCE_TIMEOUT]
        );
    }

    fn metered(
        deliverable: &Deliverable,
        policy: &PolicyBinding,
        max_units: u32,
    ) -> VerificationResult {
        let schemas = [schema()];
        let metering = Metering::new(
            MeterUnit::Item,
            crate::money::AtomicAmount::new(100),
            max_units,
        )
        .unwrap();
        Verifier::default()
            .verify_metered(
                &VerificationRequest {
                    candidate_id: "cand-1",
                    execution_id: "att-1",
                    deliverable,
                    output_schemas: &schemas,
                    policy,
                    evidence: &EvidenceSet::new(),
                    votes: None,
                },
                &metering,
                &crate::metering::MeterReadings::default(),
            )
            .unwrap()
    }

    /// A `multiple` whose items pass the schema where `passing` says so.
    fn items(passing: &[bool], status: DeliveryStatus) -> Deliverable {
        let items = passing
            .iter()
            .enumerate()
            .map(|(i, passes)| Output::Json {
                content: if *passes {
                    json!({"answer": format!("item {i}"), "confidence": 0.9})
                } else {
                    json!({"answer": "", "confidence": 0.5})
                },
            })
            .collect();
        Deliverable::new(status, Output::Multiple { items }, Vec::new(), Vec::new()).unwrap()
    }

    #[test]
    fn a_metered_multiple_counts_the_items_that_pass_on_their_own() {
        let five = items(&[true, false, true, false, true], DeliveryStatus::Completed);
        let result = metered(&five, &PolicyBinding::schema_only(), 5);
        assert_eq!(result.verification_status, VerificationStatus::Passed);
        assert!(result.reason_codes.is_empty());
        let count = result.details.metered.clone().unwrap();
        assert_eq!((count.delivered, count.verified, count.billable), (5, 3, 3));
        assert_eq!(count.passed_items, vec![0, 2, 4]);
        assert!((result.score - 0.6).abs() < 1e-9);
        // The whole `multiple` would fail the per-item schema: metering judges items.
        assert!(
            !run(
                &five,
                &PolicyBinding::schema_only(),
                &EvidenceSet::new(),
                None
            )
            .passed
        );

        // A partial run is paid for what passed, and more items than pinned bill the maximum.
        let partial = items(&[true, false, true, false, true], DeliveryStatus::Partial);
        let count = metered(&partial, &PolicyBinding::schema_only(), 2)
            .details
            .metered
            .unwrap();
        assert_eq!((count.verified, count.billable), (3, 2));

        // No item passes: rejected, with the items' reasons.
        let none = items(&[false], DeliveryStatus::Completed);
        let result = metered(&none, &PolicyBinding::schema_only(), 5);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert!(result.reason_codes.contains(&reason::SCHEMA_INVALID));
        assert_eq!(result.details.metered.unwrap().billable, 0);

        // Fewer than the policy's accept_partial.min_items: rejected.
        let at_least_four = binding(
            PolicyId::SchemaOnlyV1,
            json!({"accept_partial": {"min_items": 4}}),
        );
        let result = metered(&five, &at_least_four, 5);
        assert!(!result.passed);
        assert!(result.reason_codes.contains(&reason::PARTIAL_DELIVERY));
    }

    #[test]
    fn a_partial_delivery_fails() {
        let partial = Deliverable::new(
            DeliveryStatus::Partial,
            Output::Json {
                content: json!({"answer": "half", "confidence": 0.9}),
            },
            vec![],
            vec![],
        )
        .unwrap();
        let result = run(
            &partial,
            &PolicyBinding::schema_only(),
            &EvidenceSet::new(),
            None,
        );
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(result.reason_codes, vec![reason::PARTIAL_DELIVERY]);
    }

    #[test]
    fn a_partial_delivery_passes_only_when_the_contract_accepts_that_many_items() {
        let partial = Deliverable::new(
            DeliveryStatus::Partial,
            Output::Json {
                content: json!({"answer": "half", "confidence": 0.9}),
            },
            vec![],
            vec![],
        )
        .unwrap();
        let one = binding(
            PolicyId::SchemaOnlyV1,
            json!({"accept_partial": {"min_items": 1}}),
        );
        let result = run(&partial, &one, &EvidenceSet::new(), None);
        assert_eq!(result.verification_status, VerificationStatus::Passed);
        let two = binding(
            PolicyId::SchemaThresholdsV1,
            json!({"min_confidence": 0.5, "accept_partial": {"min_items": 2}}),
        );
        let result = run(&partial, &two, &EvidenceSet::new(), None);
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(result.reason_codes, vec![reason::PARTIAL_DELIVERY]);
        // What it delivered must still pass: partial acceptance lowers no other bar.
        let bad = Deliverable::new(
            DeliveryStatus::Partial,
            Output::Json {
                content: json!({"answer": ""}),
            },
            vec![],
            vec![],
        )
        .unwrap();
        let result = run(&bad, &one, &EvidenceSet::new(), None);
        assert_eq!(result.reason_codes, vec![reason::SCHEMA_INVALID]);
        for nonsense in [
            json!({"accept_partial": {"min_items": 0}}),
            json!({"accept_partial": {"min_items": 65}}),
            json!({"accept_partial": {"min_items": -1}}),
            json!({"accept_partial": {"min_items": 1, "max": 2}}),
            json!({"accept_partial": true}),
            json!({"other": 1}),
        ] {
            assert!(
                PolicyBinding::new(PolicyId::SchemaOnlyV1, nonsense.clone()).is_err(),
                "{nonsense}"
            );
        }
        assert_ne!(
            one.policy_hash(),
            PolicyBinding::schema_only().policy_hash()
        );
    }

    #[test]
    fn crosscheck_reference_values() {
        let policy = binding(
            PolicyId::CrosscheckV1,
            json!({"references": [
                {"pointer": "/answer", "equals": "three risks"},
                {"pointer": "/confidence", "equals": 0.9, "tolerance": 0.05}
            ]}),
        );
        assert!(run(&good(), &policy, &EvidenceSet::new(), None).passed);
        let off = json_deliverable(json!({"answer": "two risks", "confidence": 0.7}));
        let result = run(&off, &policy, &EvidenceSet::new(), None);
        assert_eq!(result.reason_codes, vec![reason::REFERENCE_MISMATCH]);
        assert_eq!(result.details.reference_mismatches.len(), 2);
    }

    fn quorum_policy() -> PolicyBinding {
        binding(
            PolicyId::CrosscheckV1,
            json!({"quorum": {"min_verifiers": 2, "min_pass_ratio": 0.6, "min_score": 0.5, "aggregation": "count"}}),
        )
    }

    /// A vote as a hiregate verifier would cast it: its own verification of the same candidate.
    fn vote(verifier: &str, passed: bool, score: f64, policy_hash: Digest) -> VerifierVote {
        let reason_codes = if passed {
            vec![]
        } else {
            vec![reason::SCHEMA_INVALID]
        };
        let hash = verifier_result_hash(&ResultHashInput {
            candidate_id: "cand-1",
            execution_id: "att-1",
            passed,
            score,
            reason_codes: &reason_codes,
            provider_family: "peer",
            model_id: verifier,
            policy_hash: &policy_hash,
        })
        .unwrap();
        VerifierVote::Cast {
            verifier: verifier.to_owned(),
            response: VerifyResponse {
                passed,
                score,
                reason_codes,
                verification_status: None,
                verifier_result_hash: hash.to_string(),
                provider_family: "peer".to_owned(),
                model_id: verifier.to_owned(),
            },
            declared: Some(VerifierIdentity {
                provider_family: "peer".to_owned(),
                model_id: verifier.to_owned(),
            }),
        }
    }

    /// The verify seed's reference handler, transcribed: `sha256_hex(serde_json::to_vec(
    /// &json!({...})))`, bare lowercase hex, over this vote's fields.
    fn seed_handler_hash(response: &VerifyResponse, policy_hash: &Digest) -> String {
        use sha2::Digest as _;
        let bytes = serde_json::to_vec(&json!({
            "candidate_id":   "cand-1",
            "execution_id":   "att-1",
            "passed":         response.passed,
            "score":          response.score,
            "reason_codes":   response.reason_codes,
            "provider_family": response.provider_family,
            "model_id":       response.model_id,
            "policy_hash":    policy_hash.to_string(),
        }))
        .unwrap();
        hex::encode(sha2::Sha256::digest(&bytes))
    }

    /// `vote` with its `verifier_result_hash` replaced by `hash(response)`.
    fn rehashed(vote: VerifierVote, hash: impl Fn(&VerifyResponse) -> String) -> VerifierVote {
        match vote {
            VerifierVote::Cast {
                verifier,
                mut response,
                declared,
            } => {
                response.verifier_result_hash = hash(&response);
                VerifierVote::Cast {
                    verifier,
                    response,
                    declared,
                }
            }
            missing @ VerifierVote::Missing { .. } => missing,
        }
    }

    /// A pass with score 1.0 from each of `verifiers`, hashed by `hash`, and the tally of a
    /// quorum needing all of them.
    fn tally_of(verifiers: &[&str], hash: impl Fn(&VerifyResponse) -> String) -> QuorumTally {
        let h = PolicyBinding::schema_only().policy_hash();
        let set = votes(
            verifiers
                .iter()
                .map(|name| rehashed(vote(name, true, 1.0, h), &hash))
                .collect(),
        );
        let policy = binding(
            PolicyId::CrosscheckV1,
            json!({"quorum": {"min_verifiers": verifiers.len(), "min_pass_ratio": 1.0}}),
        );
        run(&good(), &policy, &EvidenceSet::new(), Some(&set))
            .details
            .quorum
            .unwrap()
    }

    #[test]
    fn a_vote_hashed_as_the_seed_handler_does_counts() {
        let h = PolicyBinding::schema_only().policy_hash();
        let VerifierVote::Cast { response, .. } = vote("a", true, 1.0, h) else {
            unreachable!("vote() casts")
        };
        // The seed's serialisation spells the score `1.0`, RFC 8785 spells it `1`: the two
        // hashes differ, and each must count.
        let seed_hash = seed_handler_hash(&response, &h);
        assert_ne!(format!("sha256:{seed_hash}"), response.verifier_result_hash);
        let preimage = ResultHashInput {
            candidate_id: "cand-1",
            execution_id: "att-1",
            passed: true,
            score: 1.0,
            reason_codes: &[],
            provider_family: "peer",
            model_id: "a",
            policy_hash: &h,
        };
        assert_eq!(
            vote_hash_form(&preimage, &seed_hash),
            Some(ResultHashForm::SeedRuntime)
        );
        assert_eq!(
            vote_hash_form(&preimage, &response.verifier_result_hash),
            Some(ResultHashForm::Rfc8785)
        );

        // Bare hex, as the handler's `sha256_hex` returns it.
        let tally = tally_of(&["a", "b"], |r| seed_handler_hash(r, &h));
        assert_eq!((tally.hash_verified, tally.passing), (2, 2), "{tally:?}");
        // `sha256:`-prefixed, as the seed's example response shows it; hex in either case.
        let tally = tally_of(&["a", "b"], |r| {
            format!("sha256:{}", seed_handler_hash(r, &h))
        });
        assert_eq!((tally.hash_verified, tally.passing), (2, 2), "{tally:?}");
        let tally = tally_of(&["a"], |r| seed_handler_hash(r, &h).to_uppercase());
        assert_eq!(tally.hash_verified, 1, "{tally:?}");
        // And the RFC 8785 form beside it.
        let tally = tally_of(&["a", "b"], |r| r.verifier_result_hash.clone());
        assert_eq!((tally.hash_verified, tally.passing), (2, 2), "{tally:?}");
    }

    #[test]
    fn a_vote_hashed_any_other_way_does_not_count() {
        use sha2::Digest as _;
        let h = PolicyBinding::schema_only().policy_hash();
        let sha_hex = |bytes: &[u8]| hex::encode(sha2::Sha256::digest(bytes));
        let fields = |r: &VerifyResponse| {
            json!({
                "candidate_id": "cand-1", "execution_id": "att-1", "passed": r.passed,
                "score": r.score, "reason_codes": r.reason_codes,
                "provider_family": r.provider_family, "model_id": r.model_id,
                "policy_hash": h.to_string(),
            })
        };
        type Hashing<'a> = Box<dyn Fn(&VerifyResponse) -> String + 'a>;
        let others: Vec<Hashing<'_>> = vec![
            // Pretty-printed.
            Box::new(|r| sha_hex(&serde_json::to_vec_pretty(&fields(r)).unwrap())),
            // Keys in the order the seed lists them instead of sorted.
            Box::new(|r| {
                sha_hex(
                    format!(
                        r#"{{"candidate_id":"cand-1","execution_id":"att-1","passed":{},"score":{:?},"reason_codes":[],"provider_family":"{}","model_id":"{}","policy_hash":"{h}"}}"#,
                        r.passed, r.score, r.provider_family, r.model_id
                    )
                    .as_bytes(),
                )
            }),
            // Another label, a truncated hash, the hash of another candidate.
            Box::new(|r| format!("sha512:{}", seed_handler_hash(r, &h))),
            Box::new(|r| seed_handler_hash(r, &h)[..63].to_owned()),
            Box::new(|r| {
                let mut other = fields(r);
                other["candidate_id"] = json!("cand-2");
                sha_hex(&serde_json::to_vec(&other).unwrap())
            }),
        ];
        for other in others {
            let tally = tally_of(&["a"], other);
            assert_eq!((tally.hash_verified, tally.undecided), (0, 1), "{tally:?}");
        }
    }

    #[test]
    fn a_vote_naming_another_runtime_than_declared_does_not_count() {
        let h = PolicyBinding::schema_only().policy_hash();
        let declaring = |declared: Option<VerifierIdentity>| match vote("a", true, 1.0, h) {
            VerifierVote::Cast {
                verifier, response, ..
            } => VerifierVote::Cast {
                verifier,
                response,
                declared,
            },
            missing @ VerifierVote::Missing { .. } => missing,
        };
        let policy = binding(
            PolicyId::CrosscheckV1,
            json!({"quorum": {"min_verifiers": 1, "min_pass_ratio": 1.0}}),
        );
        let honest = votes(vec![declaring(Some(VerifierIdentity {
            provider_family: "peer".to_owned(),
            model_id: "a".to_owned(),
        }))]);
        assert!(run(&good(), &policy, &EvidenceSet::new(), Some(&honest)).passed);
        // The vote's hash binds what the vote names, but /capabilities declare another model,
        // another family, or nothing readable.
        for declared in [
            Some(VerifierIdentity {
                provider_family: "peer".to_owned(),
                model_id: "a-v2".to_owned(),
            }),
            Some(VerifierIdentity {
                provider_family: "other".to_owned(),
                model_id: "a".to_owned(),
            }),
            None,
        ] {
            let set = votes(vec![declaring(declared.clone())]);
            let result = run(&good(), &policy, &EvidenceSet::new(), Some(&set));
            assert!(!result.passed, "{declared:?}");
            assert_eq!(result.reason_codes, vec![reason::INSUFFICIENT_VERIFIERS]);
            let tally = result.details.quorum.unwrap();
            assert_eq!(
                (tally.identity_mismatch, tally.undecided, tally.decisive),
                (1, 1, 0),
                "{declared:?}"
            );
        }
    }

    fn missing(verifier: &str) -> VerifierVote {
        VerifierVote::Missing {
            verifier: verifier.to_owned(),
        }
    }

    fn votes(list: Vec<VerifierVote>) -> VoteSet {
        VoteSet {
            requested_policy_hash: PolicyBinding::schema_only().policy_hash(),
            votes: list,
        }
    }

    #[test]
    fn a_vote_bound_to_another_policy_does_not_count() {
        let requested = PolicyBinding::schema_only().policy_hash();
        let other = quorum_policy().policy_hash();
        let set = votes(vec![
            vote("a", true, 0.9, requested),
            vote("b", true, 0.9, other),
        ]);
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), Some(&set));
        assert!(!result.passed);
        let tally = result.details.quorum.unwrap();
        assert_eq!(
            (tally.hash_verified, tally.undecided, tally.decisive),
            (1, 1, 1)
        );
    }

    #[test]
    fn crosscheck_quorum_met() {
        let h = PolicyBinding::schema_only().policy_hash();
        let set = votes(vec![
            vote("a", true, 0.9, h),
            vote("b", true, 0.8, h),
            vote("c", false, 1.0, h),
        ]);
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), Some(&set));
        assert_eq!(result.verification_status, VerificationStatus::Passed);
        let tally = result.details.quorum.unwrap();
        assert_eq!((tally.requested, tally.decisive, tally.passing), (3, 3, 2));
        assert_eq!(tally.hash_verified, 3);
        assert!((result.score - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn crosscheck_quorum_missed() {
        let h = PolicyBinding::schema_only().policy_hash();
        // Two decisive votes, but one pass in three asked is below 0.6.
        let set = votes(vec![
            vote("a", true, 0.9, h),
            vote("b", false, 0.9, h),
            missing("c"),
        ]);
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), Some(&set));
        assert_eq!(result.verification_status, VerificationStatus::Failed);
        assert_eq!(result.reason_codes, vec![reason::QUORUM_NOT_MET]);
        // A pass below min_score does not count as a pass.
        let set = votes(vec![
            vote("a", true, 0.9, h),
            vote("b", true, 0.2, h),
            vote("c", true, 0.3, h),
        ]);
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), Some(&set));
        assert_eq!(
            result.reason_codes,
            vec![reason::SCORE_TOO_LOW, reason::QUORUM_NOT_MET]
        );
    }

    #[test]
    fn crosscheck_with_a_missing_vote() {
        let h = PolicyBinding::schema_only().policy_hash();
        // Two passes and one missing vote: quorum of 2 decisive votes reached, 2/3 >= 0.6.
        let set = votes(vec![
            vote("a", true, 0.9, h),
            vote("b", true, 0.9, h),
            missing("c"),
        ]);
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), Some(&set));
        assert_eq!(result.verification_status, VerificationStatus::Passed);
        assert_eq!(result.details.quorum.as_ref().unwrap().missing, 1);
        // Two missing votes: too few verifiers decided; fail-closed as inconclusive.
        let set = votes(vec![vote("a", true, 0.9, h), missing("b"), missing("c")]);
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), Some(&set));
        assert_eq!(result.verification_status, VerificationStatus::Inconclusive);
        assert!(!result.passed);
        assert_eq!(result.reason_codes, vec![reason::INSUFFICIENT_VERIFIERS]);
        // No votes handed in at all.
        let result = run(&good(), &quorum_policy(), &EvidenceSet::new(), None);
        assert_eq!(result.reason_codes, vec![reason::INSUFFICIENT_VERIFIERS]);
    }

    #[test]
    fn confidence_weighting_discounts_unsure_passes() {
        let policy = binding(
            PolicyId::CrosscheckV1,
            json!({"quorum": {"min_verifiers": 2, "min_pass_ratio": 0.7}}),
        );
        let h = PolicyBinding::schema_only().policy_hash();
        let sure = votes(vec![vote("a", true, 0.9, h), vote("b", true, 0.9, h)]);
        assert!(run(&good(), &policy, &EvidenceSet::new(), Some(&sure)).passed);
        let unsure = votes(vec![vote("a", true, 0.6, h), vote("b", true, 0.6, h)]);
        let result = run(&good(), &policy, &EvidenceSet::new(), Some(&unsure));
        assert_eq!(result.reason_codes, vec![reason::QUORUM_NOT_MET]);
    }

    #[test]
    fn results_are_deterministic_and_independent_of_vote_order() {
        let h = PolicyBinding::schema_only().policy_hash();
        let forward = votes(vec![
            vote("a", true, 0.7, h),
            vote("b", true, 0.9, h),
            vote("c", true, 0.3, h),
        ]);
        let mut backward = forward.clone();
        backward.votes.reverse();
        let first = run(
            &good(),
            &quorum_policy(),
            &EvidenceSet::new(),
            Some(&forward),
        );
        let second = run(
            &good(),
            &quorum_policy(),
            &EvidenceSet::new(),
            Some(&backward),
        );
        assert_eq!(first, second);
        let other_candidate = Verifier::default()
            .verify(&VerificationRequest {
                candidate_id: "cand-2",
                execution_id: "att-1",
                deliverable: &good(),
                output_schemas: &[schema()],
                policy: &quorum_policy(),
                evidence: &EvidenceSet::new(),
                votes: Some(&forward),
            })
            .unwrap();
        assert_ne!(
            other_candidate.verifier_result_hash,
            first.verifier_result_hash
        );
    }

    #[test]
    fn a_result_is_a_valid_wattswarm_vote() {
        let policy = PolicyBinding::schema_only();
        let result = run(&good(), &policy, &EvidenceSet::new(), None);
        let response = result.to_verify_response();
        let recomputed = verifier_result_hash(&ResultHashInput {
            candidate_id: "cand-1",
            execution_id: "att-1",
            passed: response.passed,
            score: response.score,
            reason_codes: &response.reason_codes,
            provider_family: &response.provider_family,
            model_id: &response.model_id,
            policy_hash: &policy.policy_hash(),
        })
        .unwrap();
        assert_eq!(response.verifier_result_hash, recomputed.to_string());
        assert_eq!(response.status(), VerificationStatus::Passed);
    }

    #[test]
    fn overly_deep_output_is_invalid_not_a_crash() {
        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let result = run(
            &json_deliverable(deep),
            &PolicyBinding::schema_only(),
            &EvidenceSet::new(),
            None,
        );
        assert_eq!(result.reason_codes, vec![reason::INVALID_OUTPUT]);
    }
}
