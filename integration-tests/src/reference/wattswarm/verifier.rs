//! The reference WattSwarm verifier: `/health`, `/capabilities`, `/verify` with scripted votes.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::routing::{get, post};
use axum::{Json, Router};
use url::Url;

use super::wire::{Capabilities, Health, VerificationStatus, VerifyRequest, VerifyResponse};
use super::{Refusal, ResultHashPreimage, policy_hash};
use crate::reference::lock;
use crate::reference::server::Listening;

/// Reason code of a scripted dissent ([`VerifierBehaviour::VoteFail`]): WattSwarm's "custom".
pub const SCRIPTED_DISSENT_REASON: u16 = 999;
/// Reason code of a schema failure ([`VerifierBehaviour::Honest`]): WattSwarm's 101.
pub const SCHEMA_INVALID_REASON: u16 = 101;
/// Reason code of an inconclusive vote ([`VerifierBehaviour::Inconclusive`]): WattSwarm's 200
/// (evidence unreachable).
pub const EVIDENCE_UNREACHABLE_REASON: u16 = 200;

/// How the verifier votes on the next `/verify` calls.
///
/// Every behaviour that answers first checks the request like a real runtime would: the body
/// must be a VerifyRequest and `policy.policy_hash` must equal `sha256(policy_id ‖
/// canonical(policy_params))`, else `400`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum VerifierBehaviour {
    /// Validates `candidate.output` against `output_schema` (JSON Schema, `$schema` honoured,
    /// 2020-12 default): pass with score 1.0, or fail with reason 101 and score 1.0. Policy
    /// params (thresholds, references) are not evaluated.
    Honest,
    /// `passed: true`, score 1.0, no reason codes.
    VotePass,
    /// `passed: false`, score 1.0 (confident dissent), reason 999.
    VoteFail,
    /// `passed: true` with this score (meant to be below a quorum's `min_score`).
    LowScore(f64),
    /// `passed: false`, `verification_status: inconclusive`, score 0.0, reason 200.
    Inconclusive,
    /// Votes pass, but `verifier_result_hash` binds a different policy hash than the one
    /// requested: the verifier evaluated another policy. The response has no separate policy
    /// hash field (the seed defines none); a gateway detects this by recomputing the result
    /// hash with the policy hash it sent.
    WrongPolicyHash,
    /// The port refuses connections.
    Down,
    /// Sleeps this long, then votes pass (for a caller whose timeout is shorter).
    Late(Duration),
    /// Votes pass, but names another `model_id` than `/capabilities` declare
    /// (`<model_id>-impostor`), with a `verifier_result_hash` that binds the model it names:
    /// self-consistent, and still not the runtime the listing declared.
    NamesAnotherModel,
}

/// How a verifier writes its `verifier_result_hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResultHashing {
    /// `sha256:<hex>` of the RFC 8785 form of the eight fields (DESIGN §7): a score of 1 is `1`.
    #[default]
    Rfc8785,
    /// As the verify seed's reference handler: bare hex of SHA-256 over
    /// `serde_json::to_vec(&json!({...}))` (keys sorted, serde_json numbers: 1 is `1.0`).
    SeedRuntime,
}

/// How to start a [`Verifier`].
#[derive(Debug, Clone)]
pub struct VerifierConfig {
    /// Served at `/capabilities`; its `provider_family` and `model_id` sign every vote (but
    /// [`VerifierBehaviour::NamesAnotherModel`]'s).
    pub capabilities: Capabilities,
    /// Initial behaviour.
    pub behaviour: VerifierBehaviour,
    /// How its votes are hashed.
    pub hashing: ResultHashing,
}

impl VerifierConfig {
    /// A verifier named `reference-verifier`/`<model_id>` with `behaviour`. Give each verifier
    /// of a quorum its own `model_id` so their votes are distinguishable.
    #[must_use]
    pub fn named(model_id: &str, behaviour: VerifierBehaviour) -> Self {
        Self {
            capabilities: Capabilities {
                task_types: vec!["swarm".to_owned()],
                profiles: vec!["default".to_owned()],
                provider_family: "reference-verifier".to_owned(),
                model_id: model_id.to_owned(),
            },
            behaviour,
            hashing: ResultHashing::default(),
        }
    }

    /// The same verifier hashing its votes with `hashing`.
    #[must_use]
    pub fn hashing(mut self, hashing: ResultHashing) -> Self {
        self.hashing = hashing;
        self
    }
}

impl Default for VerifierConfig {
    fn default() -> Self {
        Self::named("reference-verifier-v1", VerifierBehaviour::Honest)
    }
}

/// What the verifier has seen so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifierCounters {
    /// `GET /health` calls.
    pub health_checks: u64,
    /// `GET /capabilities` calls.
    pub capability_checks: u64,
    /// `POST /verify` calls that reached the server (well-formed or not).
    pub verify_calls: u64,
    /// Votes actually answered (late ones included once their sleep ended).
    pub votes_answered: u64,
}

/// A running reference WattSwarm verifier on `127.0.0.1`. Dropping it stops the server.
#[derive(Debug)]
pub struct Verifier {
    listening: Listening,
    state: Arc<VerifierState>,
}

impl Verifier {
    /// Starts the verifier on a free loopback port (and takes it down at once when the
    /// initial behaviour is [`VerifierBehaviour::Down`]; its base URL stays valid).
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn spawn(config: VerifierConfig) -> io::Result<Self> {
        let state = Arc::new(VerifierState {
            capabilities: config.capabilities,
            hashing: config.hashing,
            behaviour: Mutex::new(config.behaviour),
            requests: Mutex::new(Vec::new()),
            responses: Mutex::new(Vec::new()),
            counters: AtomicCounters::default(),
        });
        let router = Router::new()
            .route("/health", get(health))
            .route("/capabilities", get(capabilities))
            .route("/verify", post(verify))
            .with_state(Arc::clone(&state));
        let listening = Listening::spawn(router).await?;
        if config.behaviour == VerifierBehaviour::Down {
            listening.go_down().await;
        }
        Ok(Self { listening, state })
    }

    /// `http://127.0.0.1:<port>/`.
    #[must_use]
    pub fn base_url(&self) -> &Url {
        self.listening.base_url()
    }

    /// What `/capabilities` answers.
    #[must_use]
    pub fn capabilities(&self) -> &Capabilities {
        &self.state.capabilities
    }

    /// Changes how the next calls are answered. [`VerifierBehaviour::Down`] closes the port
    /// (connections are refused once this returns); any other behaviour reopens it.
    ///
    /// # Errors
    /// When a closed port cannot be bound again.
    pub async fn set_behaviour(&self, behaviour: VerifierBehaviour) -> io::Result<()> {
        *lock(&self.state.behaviour) = behaviour;
        if behaviour == VerifierBehaviour::Down {
            self.listening.go_down().await;
            Ok(())
        } else {
            self.listening.come_up().await
        }
    }

    /// Snapshot of the counters.
    #[must_use]
    pub fn counters(&self) -> VerifierCounters {
        self.state.counters.snapshot()
    }

    /// Every well-formed VerifyRequest received, in arrival order.
    #[must_use]
    pub fn requests(&self) -> Vec<VerifyRequest> {
        lock(&self.state.requests).clone()
    }

    /// Every vote answered, in answer order.
    #[must_use]
    pub fn responses(&self) -> Vec<VerifyResponse> {
        lock(&self.state.responses).clone()
    }
}

#[derive(Debug)]
struct VerifierState {
    capabilities: Capabilities,
    hashing: ResultHashing,
    behaviour: Mutex<VerifierBehaviour>,
    requests: Mutex<Vec<VerifyRequest>>,
    responses: Mutex<Vec<VerifyResponse>>,
    counters: AtomicCounters,
}

#[derive(Debug, Default)]
struct AtomicCounters {
    health_checks: AtomicU64,
    capability_checks: AtomicU64,
    verify_calls: AtomicU64,
    votes_answered: AtomicU64,
}

impl AtomicCounters {
    fn snapshot(&self) -> VerifierCounters {
        VerifierCounters {
            health_checks: self.health_checks.load(Ordering::SeqCst),
            capability_checks: self.capability_checks.load(Ordering::SeqCst),
            verify_calls: self.verify_calls.load(Ordering::SeqCst),
            votes_answered: self.votes_answered.load(Ordering::SeqCst),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::SeqCst);
}

async fn health(State(state): State<Arc<VerifierState>>) -> Json<Health> {
    bump(&state.counters.health_checks);
    Json(Health {
        status: "ok".to_owned(),
    })
}

async fn capabilities(State(state): State<Arc<VerifierState>>) -> Json<Capabilities> {
    bump(&state.counters.capability_checks);
    Json(state.capabilities.clone())
}

/// A vote before it is bound by its result hash.
struct Vote {
    passed: bool,
    score: f64,
    reason_codes: Vec<u16>,
    status: VerificationStatus,
}

impl Vote {
    const fn pass(score: f64) -> Self {
        Self {
            passed: true,
            score,
            reason_codes: Vec::new(),
            status: VerificationStatus::Passed,
        }
    }
}

async fn verify(
    State(state): State<Arc<VerifierState>>,
    body: Result<Json<VerifyRequest>, JsonRejection>,
) -> Result<Json<VerifyResponse>, Refusal> {
    bump(&state.counters.verify_calls);
    let Json(request) = body.map_err(|rejection| Refusal::BadBody {
        what: "VerifyRequest",
        detail: rejection.body_text(),
    })?;
    let requested_hash = policy_hash(&request.policy.policy_id, &request.policy.policy_params)?;
    if requested_hash != request.policy.policy_hash {
        return Err(Refusal::PolicyBinding(
            "policy_hash is not sha256(policy_id ‖ canonical(policy_params))",
        ));
    }
    lock(&state.requests).push(request.clone());

    let behaviour = *lock(&state.behaviour);
    let mut bound_policy_hash = request.policy.policy_hash.clone();
    let vote = match behaviour {
        VerifierBehaviour::Honest => {
            let validator = jsonschema::validator_for(&request.output_schema)
                .map_err(|_| Refusal::InvalidOutputSchema)?;
            if validator.is_valid(&request.candidate.output) {
                Vote::pass(1.0)
            } else {
                Vote {
                    passed: false,
                    score: 1.0,
                    reason_codes: vec![SCHEMA_INVALID_REASON],
                    status: VerificationStatus::Failed,
                }
            }
        }
        VerifierBehaviour::VotePass
        | VerifierBehaviour::Down
        | VerifierBehaviour::NamesAnotherModel => Vote::pass(1.0),
        VerifierBehaviour::VoteFail => Vote {
            passed: false,
            score: 1.0,
            reason_codes: vec![SCRIPTED_DISSENT_REASON],
            status: VerificationStatus::Failed,
        },
        VerifierBehaviour::LowScore(score) => Vote::pass(score),
        VerifierBehaviour::Inconclusive => Vote {
            passed: false,
            score: 0.0,
            reason_codes: vec![EVIDENCE_UNREACHABLE_REASON],
            status: VerificationStatus::Inconclusive,
        },
        VerifierBehaviour::WrongPolicyHash => {
            // The hash of the default policy with no params: a plausible "other policy".
            bound_policy_hash = policy_hash("vp.schema_only.v1", &serde_json::json!({}))?;
            if bound_policy_hash == request.policy.policy_hash {
                bound_policy_hash = policy_hash("vp.crosscheck.v1", &serde_json::json!({}))?;
            }
            Vote::pass(1.0)
        }
        VerifierBehaviour::Late(delay) => {
            tokio::time::sleep(delay).await;
            Vote::pass(1.0)
        }
    };

    let capabilities = &state.capabilities;
    let model_id = if behaviour == VerifierBehaviour::NamesAnotherModel {
        format!("{}-impostor", capabilities.model_id)
    } else {
        capabilities.model_id.clone()
    };
    let verifier_result_hash = ResultHashPreimage {
        candidate_id: &request.candidate.candidate_id,
        execution_id: &request.candidate.execution_id,
        passed: vote.passed,
        score: vote.score,
        reason_codes: &vote.reason_codes,
        provider_family: &capabilities.provider_family,
        model_id: &model_id,
        policy_hash: &bound_policy_hash,
    }
    .digest(state.hashing)?;
    let response = VerifyResponse {
        passed: vote.passed,
        score: vote.score,
        reason_codes: vote.reason_codes,
        verification_status: Some(vote.status),
        verifier_result_hash,
        provider_family: capabilities.provider_family.clone(),
        model_id,
    };
    bump(&state.counters.votes_answered);
    lock(&state.responses).push(response.clone());
    Ok(Json(response))
}
