//! Verifier votes for `vp.crosscheck.v1` quorums (`seeds/wattswarm-verify-endpoint.txt`).
//!
//! After delivery, every verifier worker named in `policy_params.quorum.verifiers` (gateway
//! listing ids) gets the seed's VerifyRequest on `POST <endpoint>/verify`, all at once, each
//! with the same bounded timeout. Whatever does not come back as a well-formed VerifyResponse
//! in time (unknown or retired listing, refused connection, 4xx/5xx, malformed body, timeout)
//! is a [`VerifierVote::Missing`], which the contracts crate's quorum counts against the
//! candidate: fail-closed. The echoed policy is checked there too, by recomputing each
//! vote's `verifier_result_hash` with the policy hash the gateway sent.
//!
//! Before a contract naming verifiers is signed, [`check_verifiers`] makes sure each named
//! listing can cast an independent vote: it exists and is not retired, is not the hired
//! worker, belongs to another operator (an operator must not verify its own work), is
//! healthy, and serves `/verify` — every WattSwarm runtime does (the seed requires it), a
//! hire worker must declare `"verify": true` in `/capabilities` (the worker-sdk's
//! `WorkerBuilder::verifier`), Superwire executors cannot. Each refusal is a 422 with a
//! stable code and the verifier's id in the details.

use std::{str::FromStr, time::Duration};

use hiregate_contracts::{
    deliverable::{Deliverable, Output},
    policy::PolicyBinding,
    schema::OutputSchema,
    verify::{VerifierVote, VoteSet},
    wire::wattswarm::{Candidate, VerifyRequest, VerifyResponse},
};
use reqwest::{Method, header};
use serde_json::{Value, json};

use crate::{
    adapters::read_capabilities,
    error::ApiError,
    ids::WorkerId,
    outbound::OutboundClient,
    registry::model::{HealthState, Protocol, WorkerListing},
    store::Store,
};

/// Refuses a contract whose quorum names a verifier that cannot cast an independent vote
/// on `worker`'s work (see the module docs for the rules and codes).
pub async fn check_verifiers(
    store: &Store,
    client: &OutboundClient,
    worker: &WorkerListing,
    policy: &PolicyBinding,
) -> Result<(), ApiError> {
    let Some(quorum) = policy.quorum() else {
        return Ok(());
    };
    for verifier in &quorum.verifiers {
        let refuse = |code: &'static str, message: String| ApiError::UnprocessableWithDetails {
            code,
            message,
            details: json!({"verifier": verifier}),
        };
        let listing = match WorkerId::from_str(verifier) {
            Ok(id) => store.get_worker(&id).await?,
            Err(_) => None,
        };
        let Some(listing) = listing.filter(|l| l.retired_at.is_none()) else {
            return Err(refuse(
                "verifier_not_found",
                format!("verifier `{verifier}` is not a listed worker"),
            ));
        };
        if listing.id == worker.id {
            return Err(refuse(
                "verifier_is_worker",
                "the hired worker cannot verify its own work".to_owned(),
            ));
        }
        if listing.operator_id == worker.operator_id {
            return Err(refuse(
                "verifier_same_operator",
                format!(
                    "verifier `{verifier}` belongs to the hired worker's operator; its vote                      would not be independent"
                ),
            ));
        }
        if listing.health != HealthState::Healthy {
            return Err(refuse(
                "verifier_unhealthy",
                format!("verifier `{verifier}` is failing its health checks"),
            ));
        }
        if let Err(why) = serves_verify(client, &listing).await {
            return Err(refuse(
                "verifier_cannot_verify",
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
            if body.get("verify") == Some(&Value::Bool(true)) {
                Ok(())
            } else {
                Err("its /capabilities do not declare \"verify\": true".to_owned())
            }
        }
    }
}

/// Largest `/verify` answer read.
const MAX_VOTE_BYTES: usize = 64 * 1024;

/// What the verifiers are asked about.
#[derive(Debug, Clone, Copy)]
pub struct VoteRequest<'a> {
    /// WattSwarm `candidate_id` (the verification's candidate id).
    pub candidate_id: &'a str,
    /// WattSwarm `execution_id` (the verification's execution id).
    pub execution_id: &'a str,
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

/// The seed's VerifyRequest for `request`.
#[must_use]
pub fn verify_request(request: &VoteRequest<'_>) -> VerifyRequest {
    VerifyRequest {
        candidate: Candidate {
            candidate_id: request.candidate_id.to_owned(),
            execution_id: request.execution_id.to_owned(),
            output_ref: None,
            output: output_value(request.deliverable.output()),
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
        Ok(response) => VerifierVote::Cast {
            verifier: verifier.to_owned(),
            response,
        },
        Err(reason) => {
            tracing::warn!(verifier, reason, "verifier vote missing");
            VerifierVote::Missing {
                verifier: verifier.to_owned(),
            }
        }
    }
}

async fn cast(
    store: &Store,
    client: &OutboundClient,
    verifier: &str,
    body: &VerifyRequest,
    timeout: Duration,
) -> Result<VerifyResponse, String> {
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
    // The per-request timeout covers each read; this bounds the whole exchange.
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| "late".to_owned())?
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
            VerifierVote::Cast { verifier, response } => json!({
                "verifier": verifier,
                "passed": response.passed,
                "score": response.score,
                "status": response.status(),
                "reason_codes": response.reason_codes,
                "verifier_result_hash": response.verifier_result_hash,
            }),
            VerifierVote::Missing { verifier } => json!({"verifier": verifier, "missing": true}),
        })
        .collect()
}
