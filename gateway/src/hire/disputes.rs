//! Disputes: `POST /v1/contracts/{id}/disputes`, their resolution by replay, the arbiter's
//! `POST /v1/disputes/{id}/decision`, and the silent arbiter's default.
//!
//! Who may dispute what:
//!
//! | party | contract state | while |
//! |---|---|---|
//! | seeker | `accepted` | its acceptance window is open (settlement waits: `disputed` is never swept for settlement) |
//! | worker operator | `rejected` | the authorization is valid: `validBefore - settlement_margin_s` is in the future |
//!
//! Anyone else authenticated as a seeker or operator gets 403 `not_a_party`; the wrong state
//! 409 `contract_not_disputable`, a closed window 409 `dispute_window_closed`. A contract has at
//! most one dispute (unique in the database).
//!
//! Resolution, right when the dispute opens: the pinned policy is replayed on the stored
//! deliverable bytes (their digest checked first) with the evidence fetched again through the
//! outbound client (a file unreachable at delivery may be reachable now). The replay's
//! `verifier_result_hash` is recorded; the same evidence and policy give the same hash.
//!
//! | replay | original | decision |
//! |---|---|---|
//! | passed | any | `settle` by `replay`: the contract settles with the stored payment. A seeker's dispute of an acceptance that passes again is *upheld acceptance*: the replay confirms it, the dispute closes, and the contract settles right after. |
//! | failed | passed or inconclusive | `void` by `replay` |
//! | failed | failed | escalated to the arbiter (nothing new for a machine to decide) |
//! | inconclusive | any | escalated to the arbiter |
//!
//! The arbiter (admin key) decides an escalated dispute once, with a reason; the decision is
//! final and audited as a `dispute_decided` contract event (who, why, when).
//!
//! **Silent arbiter**: the gateway never lets an authorization lapse undecided. The deadline
//! sweep treats a still-`disputed` contract like a rejected one: before `validBefore -
//! settlement_margin_s` it records the decision `void` by `system` with reason
//! `arbiter_silent` and voids the authorization: the seeker keeps the money.

use std::{str::FromStr, time::Duration};

use chrono::Utc;
use hiregate_contracts::{
    state::{ContractEvent, ContractState, DisputeDecision, Party},
    verify::{VerificationRequest, VerificationStatus},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    HireService, evidence,
    execute::{Ctx, internal},
    reply::Reply,
};
use crate::{
    error::ApiError,
    ids::{PrincipalId, WorkerId},
    store::{
        ContractRecord, ContractStep, DisputeDecisionRecord, DisputeRecord, NewDispute,
        PaymentRecord, SideWrite, StoreError, Transition,
    },
};

/// Longest accepted dispute or decision reason, in bytes.
const MAX_REASON_BYTES: usize = 2_000;
/// Longest accepted claim, in bytes of JSON.
const MAX_CLAIM_BYTES: usize = 16_000;

/// `POST /v1/contracts/{id}/disputes` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisputeRequest {
    /// Why the party disputes.
    pub reason: String,
    /// What the party claims (free-form JSON).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub claim: Option<Value>,
}

/// `POST /v1/disputes/{id}/decision` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `settle` or `void`.
    #[schema(value_type = String, example = "void")]
    pub decision: DisputeDecision,
    /// Why.
    pub reason: String,
}

/// Who takes a decision, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DecidedVia {
    Replay,
    Arbiter,
    Timeout,
}

impl DecidedVia {
    fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Arbiter => "arbiter",
            Self::Timeout => "timeout",
        }
    }
}

fn decision_name(decision: DisputeDecision) -> &'static str {
    match decision {
        DisputeDecision::Settle => "settle",
        DisputeDecision::Void => "void",
    }
}

fn status_name(status: VerificationStatus) -> &'static str {
    match status {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

fn check_reason(reason: &str) -> Result<(), ApiError> {
    if reason.trim().is_empty() || reason.len() > MAX_REASON_BYTES {
        return Err(ApiError::Validation {
            field: "reason".to_owned(),
            reason: format!("a reason of 1 to {MAX_REASON_BYTES} bytes is required"),
        });
    }
    // A reason is text for people and is stored in a text column, which cannot hold NUL on
    // PostgreSQL; refused alike on both backends (the JSON `claim` carries anything).
    if reason.contains('\0') {
        return Err(ApiError::Validation {
            field: "reason".to_owned(),
            reason: "a reason must not contain U+0000".to_owned(),
        });
    }
    Ok(())
}

fn reply_error(reply: &Reply) -> ApiError {
    ApiError::internal(anyhow::anyhow!(
        "dispute step failed with status {}",
        reply.status()
    ))
}

/// The JSON view of a dispute.
pub(crate) fn dispute_view(dispute: &DisputeRecord) -> Value {
    json!({
        "dispute_id": dispute.dispute_id,
        "contract_id": dispute.contract_id,
        "party": dispute.party,
        "opened_by": dispute.opened_by,
        "reason": dispute.reason,
        "claim": dispute.claim,
        "state": dispute.state,
        "replay": dispute.replay,
        "replay_verifier_result_hash": dispute.replay_verifier_result_hash,
        "decision": dispute.decision.as_ref().map(|decision| json!({
            "decision": decision,
            "decided_by": dispute.decided_by,
            "reason": dispute.decision_reason,
            "via": dispute.decided_via,
            "decided_at": dispute.decided_at,
        })),
        "created_at": dispute.created_at,
    })
}

impl HireService {
    /// Whether `caller` is the seeker of `contract` or the operator of its worker.
    async fn is_party(
        &self,
        caller: &PrincipalId,
        contract: &ContractRecord,
    ) -> Result<bool, ApiError> {
        if caller.is_seeker() {
            return Ok(contract.seeker_id == caller.as_str());
        }
        let worker_id = WorkerId::from_str(&contract.worker_id).map_err(ApiError::internal)?;
        Ok(self
            .inner
            .store
            .get_worker(&worker_id)
            .await?
            .is_some_and(|listing| &listing.operator_id == caller))
    }

    /// `POST /v1/contracts/{id}/disputes`: open a dispute and resolve it by replay where the
    /// replay decides; 201 with the dispute.
    pub async fn open_dispute(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
        request: DisputeRequest,
        correlation_id: &str,
    ) -> Result<Value, ApiError> {
        check_reason(&request.reason)?;
        if let Some(claim) = &request.claim
            && claim.to_string().len() > MAX_CLAIM_BYTES
        {
            return Err(ApiError::Validation {
                field: "claim".to_owned(),
                reason: format!("the claim may be at most {MAX_CLAIM_BYTES} bytes of JSON"),
            });
        }
        let store = &self.inner.store;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(ApiError::NotFound {
                resource: "contract",
            })?;
        if !self.is_party(caller, &contract).await? {
            return Err(ApiError::NotAParty {
                message: "only the contract's seeker or its worker's operator may dispute it"
                    .to_owned(),
            });
        }
        let lock = self.inner.locks.lock_of(contract_id);
        let _guard = lock.lock_owned().await;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(ApiError::NotFound {
                resource: "contract",
            })?;
        let state = ContractState::from_str(&contract.state).map_err(ApiError::internal)?;
        let party = if caller.is_seeker() {
            Party::Seeker
        } else {
            Party::Operator
        };
        self.check_disputable(&contract, state, party).await?;
        let (party_name, actor) = match party {
            Party::Seeker => ("seeker", format!("seeker:{caller}")),
            Party::Operator => ("operator", format!("operator:{caller}")),
        };
        let dispute_id = format!("dsp_{}", ulid::Ulid::new());
        let ctx = Ctx::of(&contract, correlation_id.to_owned(), actor.clone())
            .map_err(|r| reply_error(&r))?;
        let event = ContractEvent::DisputeOpened { by: party };
        let to = state.transition(&event).map_err(ApiError::internal)?;
        let record = self.event(
            &ctx,
            &actor,
            event.name(),
            json!({"dispute_id": dispute_id, "reason": request.reason}),
        );
        // The dispute and the state it puts the contract in are one commit: another instance
        // closing the window (settling) either wins before it or finds the contract disputed.
        let opened = store
            .advance_contract(
                contract_id,
                &[ContractStep {
                    from: state.as_str(),
                    to: to.as_str(),
                    deadline_at: None,
                    event: &record,
                }],
                &[SideWrite::Dispute(&NewDispute {
                    dispute_id: dispute_id.clone(),
                    contract_id: contract_id.to_owned(),
                    party: party_name.to_owned(),
                    opened_by: actor.clone(),
                    reason: request.reason.clone(),
                    claim: request.claim.clone(),
                    created_at: Utc::now(),
                })],
            )
            .await
            .map_err(|error| match error {
                StoreError::Duplicate { .. } => ApiError::Conflict {
                    code: "dispute_already_open",
                    message: "this contract already has a dispute".to_owned(),
                },
                other => ApiError::Store(other),
            })?;
        if !matches!(opened, Transition::Applied { .. }) {
            return Err(ApiError::Conflict {
                code: "contract_not_disputable",
                message: "the contract changed state while the dispute was being opened".to_owned(),
            });
        }
        tracing::info!(
            contract_id,
            dispute_id,
            party = party_name,
            "dispute opened"
        );
        self.resolve_by_replay(&ctx, &dispute_id)
            .await
            .map_err(|r| reply_error(&r))?;
        let dispute = store
            .get_dispute(&dispute_id)
            .await?
            .ok_or_else(|| ApiError::internal(anyhow::anyhow!("dispute vanished")))?;
        Ok(dispute_view(&dispute))
    }

    async fn check_disputable(
        &self,
        contract: &ContractRecord,
        state: ContractState,
        party: Party,
    ) -> Result<(), ApiError> {
        let now = Utc::now();
        match (party, state) {
            (Party::Seeker, ContractState::Accepted) => {
                match contract.deadline_at.filter(|end| *end > now) {
                    Some(_) => Ok(()),
                    None => Err(ApiError::ConflictWithDetails {
                        code: "dispute_window_closed",
                        message: "the acceptance window of this contract is over: it can no \
                                  longer be disputed"
                            .to_owned(),
                        details: json!({"window_ended_at": contract.deadline_at, "now": now}),
                    }),
                }
            }
            // Escrowed: the window of a rejection is the acceptance window, in `deadline_at`.
            (Party::Operator, ContractState::Rejected) if contract.deadline_at.is_some() => {
                match contract.deadline_at.filter(|end| *end > now) {
                    Some(_) => Ok(()),
                    None => Err(ApiError::ConflictWithDetails {
                        code: "dispute_window_closed",
                        message: "the dispute window of this rejection is over".to_owned(),
                        details: json!({"window_ended_at": contract.deadline_at, "now": now}),
                    }),
                }
            }
            (Party::Operator, ContractState::Rejected) => {
                let payment = self
                    .inner
                    .store
                    .payment_of_contract(&contract.contract_id)
                    .await?
                    .ok_or_else(|| ApiError::internal(anyhow::anyhow!("rejected, no payment")))?;
                let margin = i64::try_from(self.inner.config.contracts.settlement_margin_s)
                    .unwrap_or(i64::MAX);
                let closes_at = payment.valid_before.saturating_sub(margin);
                if closes_at > now.timestamp() {
                    Ok(())
                } else {
                    Err(ApiError::ConflictWithDetails {
                        code: "dispute_window_closed",
                        message: "the payment authorization is about to expire: the rejection \
                                  can no longer be disputed"
                            .to_owned(),
                        details: json!({
                            "valid_before": payment.valid_before,
                            "settlement_margin_s": margin,
                            "closed_at": closes_at,
                        }),
                    })
                }
            }
            (party, state) => Err(ApiError::ConflictWithDetails {
                code: "contract_not_disputable",
                message: match party {
                    Party::Seeker => "a seeker may dispute an accepted contract only",
                    Party::Operator => "an operator may dispute a rejected contract only",
                }
                .to_owned(),
                details: json!({"state": state.as_str()}),
            }),
        }
    }

    /// Replay the pinned policy on the stored deliverable and decide where the replay can
    /// (see the module table); otherwise escalate.
    async fn resolve_by_replay(&self, ctx: &Ctx, dispute_id: &str) -> Result<(), Reply> {
        let store = &self.inner.store;
        let original = store
            .latest_verification(&ctx.contract_id)
            .await?
            .ok_or_else(|| internal("a disputed contract has no verification"))?;
        let replay = match self.replay(ctx).await? {
            Ok(replay) => replay,
            Err(why) => {
                // The stored bytes no longer match their digest: nothing a machine may judge.
                store
                    .record_dispute_replay(dispute_id, &json!({"error": why}), "", "escalated")
                    .await?;
                return Ok(());
            }
        };
        let status = status_name(replay.verification_status);
        let decision = match (replay.verification_status, original.status.as_str()) {
            (VerificationStatus::Passed, _) => Some(DisputeDecision::Settle),
            (VerificationStatus::Failed, "passed" | "inconclusive") => Some(DisputeDecision::Void),
            _ => None,
        };
        let mut replay_json =
            serde_json::to_value(&replay).map_err(|e| internal(format!("replay: {e}")))?;
        replay_json["original_verification_status"] = json!(original.status);
        replay_json["original_verifier_result_hash"] = json!(original.verifier_result_hash);
        store
            .record_dispute_replay(
                dispute_id,
                &replay_json,
                &replay.verifier_result_hash.to_string(),
                if decision.is_some() {
                    "open"
                } else {
                    "escalated"
                },
            )
            .await?;
        store
            .append_contract_event(
                &ctx.contract_id,
                &self.event(
                    ctx,
                    "gateway",
                    "dispute_replayed",
                    json!({
                        "dispute_id": dispute_id,
                        "verification_status": status,
                        "original_verification_status": original.status,
                        "verifier_result_hash": replay.verifier_result_hash,
                        "escalated": decision.is_none(),
                    }),
                ),
            )
            .await?;
        if let Some(decision) = decision {
            let reason = format!(
                "replay of the pinned policy: {status} (originally {})",
                original.status
            );
            self.apply_decision(
                ctx,
                dispute_id,
                decision,
                "replay",
                &reason,
                DecidedVia::Replay,
            )
            .await?;
        }
        Ok(())
    }

    /// The pinned policy run again on the stored deliverable, with evidence fetched again.
    /// `Ok(Err(why))` when the stored bytes fail their digest check.
    async fn replay(
        &self,
        ctx: &Ctx,
    ) -> Result<Result<hiregate_contracts::verify::VerificationResult, String>, Reply> {
        let inner = &self.inner;
        let (attempt_id, deliverable, digest) =
            match super::judge::stored_deliverable(&inner.store, &ctx.contract_id).await? {
                Ok(stored) => stored,
                Err(why) => return Ok(Err(why)),
            };
        let policy = ctx.terms.verification();
        let budget = Duration::from_secs(inner.config.contracts.verification_budget_s.max(1));
        let (evidence, _) = evidence::fetch_all(
            &inner.outbound,
            &deliverable.evidence_requests(),
            budget,
            inner.config.outbound.max_response_bytes,
        )
        .await;
        let candidate_id = digest.to_string();
        let votes = super::crosscheck::collect_votes(
            &inner.store,
            &inner.outbound,
            &super::crosscheck::VoteRequest {
                candidate_id: &candidate_id,
                execution_id: &attempt_id,
                deliverable: &deliverable,
                output_schemas: ctx.terms.task().output_schemas(),
                policy,
                timeout: budget / 2,
            },
        )
        .await;
        let result = inner
            .verifier
            .verify(&VerificationRequest {
                candidate_id: &candidate_id,
                execution_id: &attempt_id,
                deliverable: &deliverable,
                output_schemas: ctx.terms.task().output_schemas(),
                policy,
                evidence: &evidence,
                votes: votes.as_ref(),
            })
            .map_err(|e| internal(format!("replay could not run: {e}")))?;
        Ok(Ok(result))
    }

    /// Record `decision` once and carry it out: settle with the stored payment, or void.
    async fn apply_decision(
        &self,
        ctx: &Ctx,
        dispute_id: &str,
        decision: DisputeDecision,
        decided_by: &str,
        reason: &str,
        via: DecidedVia,
    ) -> Result<bool, Reply> {
        let store = &self.inner.store;
        let recorded = store
            .decide_dispute(
                dispute_id,
                &DisputeDecisionRecord {
                    decision: decision_name(decision).to_owned(),
                    decided_by: decided_by.to_owned(),
                    reason: reason.to_owned(),
                    via: via.as_str().to_owned(),
                    at: Utc::now(),
                },
            )
            .await?;
        if !recorded {
            return Ok(false);
        }
        store
            .append_contract_event(
                &ctx.contract_id,
                &self.event(
                    ctx,
                    decided_by,
                    "dispute_decided",
                    json!({
                        "dispute_id": dispute_id,
                        "decision": decision_name(decision),
                        "reason": reason,
                        "via": via.as_str(),
                    }),
                ),
            )
            .await?;
        self.carry_out(ctx, decision, decided_by, dispute_id)
            .await?;
        Ok(true)
    }

    /// Move a `disputed` contract per a recorded decision.
    async fn carry_out(
        &self,
        ctx: &Ctx,
        decision: DisputeDecision,
        decided_by: &str,
        dispute_id: &str,
    ) -> Result<(), Reply> {
        match decision {
            DisputeDecision::Settle => {
                self.settle(ctx, ContractState::Disputed).await?;
            }
            DisputeDecision::Void => {
                let payment = self
                    .inner
                    .store
                    .payment_of_contract(&ctx.contract_id)
                    .await?
                    .ok_or_else(|| internal("a disputed contract has no payment"))?;
                if self
                    .transition(
                        ctx,
                        ContractState::Disputed,
                        &ContractEvent::DisputeResolved { decision },
                        decided_by,
                        json!({"dispute_id": dispute_id, "decision": "void"}),
                        None,
                    )
                    .await?
                {
                    self.record_void(ctx, &payment, "dispute_void").await?;
                }
            }
        }
        Ok(())
    }

    /// `POST /v1/disputes/{id}/decision` (admin): the arbiter's final decision; 409
    /// `dispute_already_decided` when it was decided before.
    pub async fn decide_dispute(
        &self,
        dispute_id: &str,
        request: DecisionRequest,
        correlation_id: &str,
    ) -> Result<Value, ApiError> {
        check_reason(&request.reason)?;
        let store = &self.inner.store;
        let dispute = store
            .get_dispute(dispute_id)
            .await?
            .ok_or(ApiError::NotFound {
                resource: "dispute",
            })?;
        let lock = self.inner.locks.lock_of(&dispute.contract_id);
        let _guard = lock.lock_owned().await;
        let already = || ApiError::Conflict {
            code: "dispute_already_decided",
            message: "this dispute is decided; decisions are final".to_owned(),
        };
        let current = store
            .get_dispute(dispute_id)
            .await?
            .ok_or(ApiError::NotFound {
                resource: "dispute",
            })?;
        if current.decided_at.is_some() {
            return Err(already());
        }
        let contract =
            store
                .get_contract(&dispute.contract_id)
                .await?
                .ok_or(ApiError::NotFound {
                    resource: "contract",
                })?;
        let ctx = Ctx::of(&contract, correlation_id.to_owned(), "admin".to_owned())
            .map_err(|r| reply_error(&r))?;
        let applied = self
            .apply_decision(
                &ctx,
                dispute_id,
                request.decision,
                "admin",
                &request.reason,
                DecidedVia::Arbiter,
            )
            .await
            .map_err(|r| reply_error(&r))?;
        if !applied {
            return Err(already());
        }
        tracing::info!(
            dispute_id,
            decision = decision_name(request.decision),
            "arbiter decided"
        );
        let dispute = store
            .get_dispute(dispute_id)
            .await?
            .ok_or_else(|| ApiError::internal(anyhow::anyhow!("dispute vanished")))?;
        Ok(dispute_view(&dispute))
    }

    /// `GET /v1/disputes/{id}`: for the admin (`caller` `None`) or a party of its contract.
    pub async fn view_dispute(
        &self,
        caller: Option<&PrincipalId>,
        dispute_id: &str,
    ) -> Result<Value, ApiError> {
        let store = &self.inner.store;
        let not_found = || ApiError::NotFound {
            resource: "dispute",
        };
        let dispute = store.get_dispute(dispute_id).await?.ok_or_else(not_found)?;
        if let Some(caller) = caller {
            let contract = store
                .get_contract(&dispute.contract_id)
                .await?
                .ok_or_else(not_found)?;
            if !self.is_party(caller, &contract).await? {
                return Err(not_found());
            }
        }
        Ok(dispute_view(&dispute))
    }

    /// The deadline sweep's action on a `disputed` contract whose authorization is about to
    /// lapse (the caller holds the contract's lock): carry out a decision already recorded
    /// (a crash between recording and acting), else record the silent arbiter's `void`.
    pub(super) async fn dispute_deadline(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Result<bool, Reply> {
        let Some(dispute) = self
            .inner
            .store
            .dispute_of_contract(&ctx.contract_id)
            .await?
        else {
            return Ok(false);
        };
        if let Some(decision) = dispute.decision.as_deref() {
            let decision = if decision == "settle" {
                DisputeDecision::Settle
            } else {
                DisputeDecision::Void
            };
            let by = dispute.decided_by.as_deref().unwrap_or("system");
            self.carry_out(ctx, decision, by, &dispute.dispute_id)
                .await?;
            return Ok(true);
        }
        tracing::info!(contract_id = %ctx.contract_id, valid_before = payment.valid_before, "arbiter silent: dispute voided before validBefore");
        self.apply_decision(
            ctx,
            &dispute.dispute_id,
            DisputeDecision::Void,
            "system",
            "arbiter_silent",
            DecidedVia::Timeout,
        )
        .await
    }
}
