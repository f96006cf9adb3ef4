//! Verifier votes for `vp.crosscheck.v1` quorums (`seeds/wattswarm-verify-endpoint.txt`).
//!
//! After delivery, every verifier worker named in `policy_params.quorum.verifiers` (gateway
//! listing ids) gets the seed's VerifyRequest on `POST <endpoint>/verify`, all at once, each
//! with the same bounded timeout. Whatever does not come back as a well-formed VerifyResponse
//! in time (unknown or retired listing, refused connection, 4xx/5xx, malformed body, timeout)
//! is a [`VerifierVote::Missing`], which the contracts crate's quorum counts against the
//! candidate: fail-closed. The echoed policy is checked there too, by recomputing each
//! vote's `verifier_result_hash` with the policy hash the gateway sent
//! ([`hiregate_contracts::verify::vote_hash_form`]: RFC 8785 or the seed handler's serde_json
//! form, `sha256:`-prefixed or bare hex).
//!
//! The candidate is the proposer's, named as the proposer knows it ([`Proposal`]):
//! `candidate.execution_id` is the execution id the proposer got in its `/execute` call
//! ([`crate::adapters::execution_id`]), and `candidate.output_ref` is the seed's ArtifactRef
//! of the output, as WattSwarm's own kernel makes one for an output carried inline
//! (`inline://candidate-output/<digest>`, digest and size of the output's serde_json bytes).
//!
//! Whose vote it is: each verifier's `/capabilities` is read beside its `/verify` call, and
//! the `provider_family`/`model_id` it declares there go with the vote; a vote naming another
//! runtime, or from a verifier whose declaration cannot be read, does not count. Read at vote
//! time rather than taken from registration: the registry keeps only health, and a redeployed
//! runtime's declaration is then the one its votes are judged by.
//!
//! Before a contract naming verifiers is signed, [`check_verifiers`] makes sure each named
//! listing can cast an independent vote: it exists and is not retired, is not the hired
//! worker, belongs to another operator (an operator must not verify its own work), is
//! healthy, and serves `/verify` — every WattSwarm runtime does (the seed requires it), a
//! hire worker must declare `"verify": true` with its `provider_family` and `model_id` in
//! `/capabilities` (the worker-sdk's `WorkerBuilder::verifier`), Superwire executors cannot.
//! Each refusal is a 422 with a stable code and the verifier's id in the details.

use std::{str::FromStr, time::Duration};

use chrono::{DateTime, Utc};
use hiregate_contracts::{
    canonical::Digest,
    deliverable::{ArtifactRef, Deliverable, Output},
    id::{AttemptId, WorkerId},
    policy::PolicyBinding,
    schema::OutputSchema,
    terms::ContractTerms,
    verify::{VerifierIdentity, VerifierVote, VoteSet},
    wire::wattswarm::{Candidate, VerifyRequest, VerifyResponse},
};
use reqwest::{Method, header};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::error::{ErrorCode, HireError};
use crate::{
    adapters::{execution_id, read_capabilities},
    outbound::OutboundClient,
};
use hiregate_store::{
    Store, StoreError,
    listing::model::{HealthState, Protocol, WorkerListing},
};

/// Refuses a contract whose quorum names a verifier that cannot cast an independent vote
/// on `worker`'s work (see the module docs for the rules and codes).
pub async fn check_verifiers(
    store: &Store,
    client: &OutboundClient,
    worker: &WorkerListing,
    policy: &PolicyBinding,
) -> Result<(), HireError> {
    let Some(quorum) = policy.quorum() else {
        return Ok(());
    };
    for verifier in &quorum.verifiers {
        let refuse = |code: ErrorCode, message: String| {
            HireError::unprocessable(code, message).with_details(json!({"verifier": verifier}))
        };
        let listing = match WorkerId::from_str(verifier) {
            Ok(id) => store.get_worker(&id).await?,
            Err(_) => None,
        };
        let Some(listing) = listing.filter(|l| l.retired_at.is_none()) else {
            return Err(refuse(
                ErrorCode::VerifierNotFound,
                format!("verifier `{verifier}` is not a listed worker"),
            ));
        };
        if listing.id == worker.id {
            return Err(refuse(
                ErrorCode::VerifierIsWorker,
                "the hired worker cannot verify its own work".to_owned(),
            ));
        }
        if listing.operator_id == worker.operator_id {
            return Err(refuse(
                ErrorCode::VerifierSameOperator,
                format!(
                    "verifier `{verifier}` belongs to the hired worker's operator; its vote                      would not be independent"
                ),
            ));
        }
        if listing.health != HealthState::Healthy {
            return Err(refuse(
                ErrorCode::VerifierUnhealthy,
                format!("verifier `{verifier}` is failing its health checks"),
            ));
        }
        if let Err(why) = serves_verify(client, &listing).await {
            return Err(refuse(
                ErrorCode::VerifierCannotVerify,
                format!("verifier `{verifier}` does not serve /verify: {why}"),
            ));
        }
    }
    Ok(())
}

/// Whether `listing` answers WattSwarm `/verify` requests.
async fn serves_verify(client: &OutboundClient, listing: &WorkerListing) -> Result<(), String> {
    match listing.protocol {
        Protocol::Wattswarm => Ok(()),
        Protocol::Superwire => Err("Superwire executors have no /verify".to_owned()),
        Protocol::Hire => {
            let body: Value = read_capabilities(client, &listing.endpoint).await?;
            if body.get("verify") != Some(&Value::Bool(true)) {
                return Err("its /capabilities do not declare \"verify\": true".to_owned());
            }
            // Its votes count only when they name the runtime it declares.
            serde_json::from_value::<DeclaredRuntime>(body)
                .ok()
                .and_then(DeclaredRuntime::identity)
                .map(|_| ())
                .ok_or_else(|| {
                    "its /capabilities do not declare the provider_family and model_id its \
                     votes are cast by"
                        .to_owned()
                })
        }
    }
}

/// The runtime a verifier declares in `/capabilities` (both protocols use the seed's names).
#[derive(Debug, Deserialize)]
struct DeclaredRuntime {
    #[serde(default)]
    provider_family: Option<String>,
    #[serde(default)]
    model_id: Option<String>,
}

impl DeclaredRuntime {
    /// The identity, when both halves are declared and not blank.
    fn identity(self) -> Option<VerifierIdentity> {
        let provider_family = self.provider_family.filter(|v| !v.trim().is_empty())?;
        let model_id = self.model_id.filter(|v| !v.trim().is_empty())?;
        Some(VerifierIdentity {
            provider_family,
            model_id,
        })
    }
}

/// Largest `/verify` answer read.
const MAX_VOTE_BYTES: usize = 64 * 1024;

/// The proposer's side of a candidate: which of its executions produced it, and who.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The execution id the proposer got in its `/execute` call: WattSwarm's
    /// `execution_id` (Superwire's per-attempt `cache_key`, the name of a hire attempt).
    /// Also the `execution_id` of the gateway's own verification, so votes and verdict bind
    /// the same execution.
    pub execution_id: String,
    /// `producer` of the output's ArtifactRef: the pinned WattSwarm runtime as the seed
    /// writes it (`provider_family/model_id`), else the hired listing's id.
    pub producer: String,
    /// When the gateway stored the output (the attempt's end), Unix milliseconds: the
    /// ArtifactRef's `created_at`.
    pub stored_at_ms: u64,
}

impl Proposal {
    /// The proposal of attempt `attempt_id` of the contract with `terms`, from the store.
    pub async fn of_attempt(
        store: &Store,
        terms: &ContractTerms,
        attempt_id: &AttemptId,
    ) -> Result<Self, StoreError> {
        let attempt = store
            .list_attempts(terms.contract_id().as_str())
            .await?
            .into_iter()
            .find(|attempt| &attempt.attempt_id == attempt_id)
            // The delivery names its attempt (a foreign key): one that is gone is corruption.
            .ok_or_else(|| StoreError::corrupt("attempt", &format!("{attempt_id} is missing")))?;
        Ok(Self::new(
            terms,
            attempt.attempt_no,
            attempt.finished_at.unwrap_or(attempt.started_at),
        ))
    }

    /// The proposal of attempt `attempt_no` of the contract with `terms`, whose output was
    /// stored at `stored_at`.
    pub fn new(terms: &ContractTerms, attempt_no: u32, stored_at: DateTime<Utc>) -> Self {
        let producer = terms
            .execution()
            .and_then(|runtime| {
                Some(format!(
                    "{}/{}",
                    runtime.provider_family.as_deref()?,
                    runtime.model_id.as_deref()?
                ))
            })
            .unwrap_or_else(|| terms.worker().id().as_str().to_owned());
        Self {
            execution_id: execution_id(terms.contract_id().as_str(), attempt_no),
            producer,
            stored_at_ms: u64::try_from(stored_at.timestamp_millis()).unwrap_or(0),
        }
    }
}

/// What the verifiers are asked about.
#[derive(Debug, Clone, Copy)]
pub struct VoteRequest<'a> {
    /// WattSwarm `candidate_id` (the verification's candidate id).
    pub candidate_id: &'a str,
    /// The proposer's execution that produced the candidate.
    pub proposal: &'a Proposal,
    /// The delivered candidate.
    pub deliverable: &'a Deliverable,
    /// Every schema the output must satisfy.
    pub output_schemas: &'a [OutputSchema],
    /// The contract's pinned policy.
    pub policy: &'a PolicyBinding,
    /// How long each verifier may take.
    pub timeout: Duration,
}

/// The candidate's output as the JSON a verifier evaluates: a JSON output as is, any other
/// output in its tagged wire form.
fn output_value(output: &Output) -> Value {
    match output {
        Output::Json { content } => content.clone(),
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

fn combined_output_schema(schemas: &[OutputSchema]) -> Value {
    match schemas {
        [] => json!({}),
        [only] => only.document().clone(),
        many => json!({"allOf": many.iter().map(|s| s.document().clone()).collect::<Vec<_>>()}),
    }
}

/// Scheme and host of the `uri` of an output carried inline in the request, as WattSwarm's
/// kernel names one: `inline://candidate-output/<digest>`.
const INLINE_OUTPUT_BASE: &str = "inline://candidate-output/";

/// The seed's ArtifactRef of `output` (`candidate.output_ref`), made the way WattSwarm's
/// kernel makes one for an output carried inline: `digest` and `size_bytes` of the output's
/// `serde_json::to_vec` bytes (keys sorted, no whitespace), which is also what the kernel
/// checks a candidate's `output_ref` against; `uri` names those bytes by digest, since they
/// travel in `candidate.output` and there is nothing to fetch.
fn output_ref(output: &Value, proposal: &Proposal) -> Option<ArtifactRef> {
    let bytes = serde_json::to_vec(output).ok()?;
    let digest = Digest::of_bytes(&bytes);
    Some(ArtifactRef {
        uri: Url::parse(&format!("{INLINE_OUTPUT_BASE}{digest}")).ok()?,
        digest,
        size_bytes: u64::try_from(bytes.len()).ok(),
        mime: Some("application/json".to_owned()),
        created_at: Some(proposal.stored_at_ms),
        producer: Some(proposal.producer.clone()),
    })
}

/// The seed's VerifyRequest for `request`.
#[must_use]
pub fn verify_request(request: &VoteRequest<'_>) -> VerifyRequest {
    let output = output_value(request.deliverable.output());
    VerifyRequest {
        candidate: Candidate {
            candidate_id: request.candidate_id.to_owned(),
            execution_id: request.proposal.execution_id.clone(),
            output_ref: output_ref(&output, request.proposal),
            output,
            evidence_inline: request.deliverable.evidence_inline().to_vec(),
            evidence_refs: request.deliverable.evidence_refs().to_vec(),
        },
        output_schema: combined_output_schema(request.output_schemas),
        policy: request.policy.to_wire(),
    }
}

/// Collects the votes of the quorum's named verifiers, or `None` when the policy has no
/// quorum. A quorum that names no verifiers gets an empty vote set, which cannot reach
/// `min_verifiers` (fail-closed).
pub async fn collect_votes(
    store: &Store,
    client: &OutboundClient,
    request: &VoteRequest<'_>,
) -> Option<VoteSet> {
    let quorum = request.policy.quorum()?;
    let body = verify_request(request);
    let asks = quorum
        .verifiers
        .iter()
        .map(|verifier| ask(store, client, verifier, &body, request.timeout));
    let votes = futures::future::join_all(asks).await;
    Some(VoteSet {
        requested_policy_hash: request.policy.policy_hash(),
        votes,
    })
}

/// One verifier's vote, or `Missing` with the reason logged (no secrets: ids and statuses).
async fn ask(
    store: &Store,
    client: &OutboundClient,
    verifier: &str,
    body: &VerifyRequest,
    timeout: Duration,
) -> VerifierVote {
    match cast(store, client, verifier, body, timeout).await {
        Ok((response, declared)) => VerifierVote::Cast {
            verifier: verifier.to_owned(),
            response,
            declared,
        },
        Err(reason) => {
            tracing::warn!(verifier, reason, "verifier vote missing");
            VerifierVote::Missing {
                verifier: verifier.to_owned(),
            }
        }
    }
}

/// The verifier's vote, with the runtime its `/capabilities` declare (`None` when they cannot
/// be read: the vote then does not count, but is kept for the record).
async fn cast(
    store: &Store,
    client: &OutboundClient,
    verifier: &str,
    body: &VerifyRequest,
    timeout: Duration,
) -> Result<(VerifyResponse, Option<VerifierIdentity>), String> {
    let id = WorkerId::from_str(verifier).map_err(|_| "not a worker id".to_owned())?;
    let listing = store
        .get_worker(&id)
        .await
        .map_err(|e| format!("store: {e}"))?
        .ok_or_else(|| "no such listing".to_owned())?;
    if listing.retired_at.is_some() {
        return Err("listing retired".to_owned());
    }
    let url = listing.endpoint.join("verify");
    let work = async {
        let builder = client
            .request(Method::POST, &url)
            .map_err(|e| e.to_string())?
            .timeout(timeout)
            .header(header::ACCEPT, "application/json")
            .json(body);
        let response = client.send(builder).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = client
            .read_body(response, MAX_VOTE_BYTES)
            .await
            .map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("/verify answered {status}"));
        }
        serde_json::from_slice::<VerifyResponse>(&bytes)
            .map_err(|e| format!("not a VerifyResponse: {e}"))
    };
    let declared = async {
        match read_capabilities::<DeclaredRuntime>(client, &listing.endpoint).await {
            Ok(runtime) => runtime.identity(),
            Err(why) => {
                tracing::warn!(verifier, reason = why, "verifier capabilities unreadable");
                None
            }
        }
    };
    // The per-request timeout covers each read; this bounds the whole exchange.
    let (response, declared) = tokio::time::timeout(timeout, futures::future::join(work, declared))
        .await
        .map_err(|_| "late".to_owned())?;
    Ok((response?, declared))
}

/// One line per vote for the contract's event log: who voted what, with the vote's
/// `verifier_result_hash` (`null` without a quorum).
#[must_use]
pub fn vote_summaries(votes: Option<&VoteSet>) -> Value {
    let Some(votes) = votes else {
        return Value::Null;
    };
    votes
        .votes
        .iter()
        .map(|vote| match vote {
            VerifierVote::Cast {
                verifier,
                response,
                declared,
            } => json!({
                "verifier": verifier,
                "passed": response.passed,
                "score": response.score,
                "status": response.status(),
                "reason_codes": response.reason_codes,
                "verifier_result_hash": response.verifier_result_hash,
                "provider_family": response.provider_family,
                "model_id": response.model_id,
                "declared": declared,
            }),
            VerifierVote::Missing { verifier } => json!({"verifier": verifier, "missing": true}),
        })
        .collect()
}
