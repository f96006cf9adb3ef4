//! Disputes: `POST /v1/contracts/{id}/disputes`, their resolution by replay, the arbiter's
//! `POST /v1/disputes/{id}/decision`, and the silent arbiter's default.
//!
//! Who may dispute what:
//!
//! | party | contract state | while |
//! |---|---|---|
//! | seeker | `accepted` | its acceptance window is open (settlement waits: `disputed` is never swept for settlement); the dispute carries a claim `{text, failing_paths?}` |
//! | worker operator | `rejected` | the authorization is valid: `validBefore - settlement_margin_s` is in the future |
//! | worker operator | `failed` (e.g. an SLA breach the gateway's own outage caused) | the money is still held: an `exact` authorization before `validBefore - settlement_margin_s`, an escrowed one neither voided nor reclaimed; else 409 `money_released` |
//!
//! Anyone else authenticated as a seeker or operator gets 403 `not_a_party`; the wrong state
//! 409 `contract_not_disputable`, a closed window 409 `dispute_window_closed`. A contract has at
//! most one dispute (unique in the database).
//!
//! Resolution, right when the dispute opens: the pinned policy is replayed on the stored
//! deliverable bytes (their digest checked first) and on the evidence stored at the original
//! verdict (digest-checked too); only evidence that was unreachable then is fetched again
//! through the outbound client. Stored bytes that fail their digest check are never judged:
//! the replay records the error (`stored_digest_mismatch`) and the dispute goes to the arbiter.
//! The replay's `verifier_result_hash` is recorded; the same evidence and policy give the same
//! hash.
//!
//! | dispute of | replay | decision |
//! |---|---|---|
//! | `accepted` (seeker) | passed | escalated to the arbiter with the seeker's claim: the machine agrees with itself, which is not an answer to the claim |
//! | `accepted` (seeker) | failed | `void` by `replay` |
//! | `rejected` (operator) | passed | `settle` by `replay` |
//! | `rejected` (operator) | failed again | escalated (nothing new for a machine to decide) |
//! | any | inconclusive, or stored bytes unusable | escalated |
//! | `failed` (operator) | — (no verdict to replay) | escalated |
//!
//! The arbiter's queue is `GET /v1/disputes?state=escalated`, oldest first, each with its
//! `deadline_at`: when the silent arbiter's default applies.
//!
//! The arbiter (admin key) decides an escalated dispute once, with a reason; the decision is
//! final and audited as a `dispute_decided` contract event (who, why, when).
//!
//! **Silent arbiter**: the gateway never lets an authorization lapse undecided. The deadline
//! sweep treats a still-`disputed` contract like a rejected one: before `validBefore -
//! settlement_margin_s` it records the decision `void` by `system` with reason
//! `arbiter_silent` and voids the authorization: the seeker keeps the money.

mod decisions;

pub use decisions::MAX_QUEUE_PAGE;
mod replay;

use std::time::Duration;

use chrono::Utc;
use hiregate_contracts::{
    canonical::Digest,
    id::{DisputeId, PrincipalId},
    state::{ContractEvent, ContractState, DisputeDecision, Party},
    verify::{EvidenceFetch, VerificationRequest, VerificationStatus},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    HireService,
    error::{ErrorCode, HireError},
    evidence,
    execute::{Ctx, internal},
    judge::StoredBytesError,
};
use hiregate_store::states::{Actor, DecidedVia, DisputeState, EventKind};
use hiregate_store::{
    ContractRecord, ContractStep, DisputeDecisionRecord, DisputeRecord, DisputeResponse,
    NewContractEvent, NewDispute, PaymentRecord, SideWrite, StoreError, Transition,
    states::PaymentState,
};

/// Longest accepted dispute or decision reason, in bytes.
const MAX_REASON_BYTES: usize = 2_000;
/// Longest accepted claim, in bytes of JSON.
const MAX_CLAIM_BYTES: usize = 16_000;

/// `POST /v1/contracts/{id}/disputes` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisputeRequest {
    /// Why the party disputes: 1 to 2000 bytes, not blank, without U+0000 (the schema's 500
    /// characters always fit in 2000 bytes).
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
    )]
    pub reason: String,
    /// What the party claims. A seeker's dispute requires `{"text": "…" (1 to 4000 bytes),
    /// "failing_paths": ["/json/pointer", …] (optional, at most 32)}` (other members are kept);
    /// an operator's is free-form JSON.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub claim: Option<Value>,
}

/// Longest claim text of a seeker's dispute, in bytes.
const MAX_CLAIM_TEXT_BYTES: usize = 4_000;
/// Most failing paths a claim may name.
const MAX_FAILING_PATHS: usize = 32;
/// Longest failing path, in bytes.
const MAX_FAILING_PATH_BYTES: usize = 512;

/// A seeker's claim: the text the arbiter reads and, optionally, where the deliverable fails
/// (JSON Pointers into it).
fn check_seeker_claim(claim: Option<&Value>) -> Result<(), HireError> {
    let invalid = |reason: String| HireError::validation("claim".to_owned(), reason);
    let Some(claim) = claim.and_then(Value::as_object) else {
        return Err(invalid(
            "a seeker's dispute needs a claim {\"text\": …, \"failing_paths\": [...]}".to_owned(),
        ));
    };
    match claim.get("text").and_then(Value::as_str) {
        Some(text)
            if !text.trim().is_empty()
                && text.len() <= MAX_CLAIM_TEXT_BYTES
                && !text.contains('\0') => {}
        _ => {
            return Err(invalid(format!(
                "claim.text must be 1 to {MAX_CLAIM_TEXT_BYTES} bytes of text, without U+0000"
            )));
        }
    }
    if let Some(paths) = claim.get("failing_paths") {
        let paths = paths
            .as_array()
            .filter(|paths| paths.len() <= MAX_FAILING_PATHS)
            .ok_or_else(|| {
                invalid(format!(
                    "claim.failing_paths must be an array of at most {MAX_FAILING_PATHS} JSON Pointers"
                ))
            })?;
        for path in paths {
            let pointer = path.as_str().filter(|p| {
                (p.is_empty() || p.starts_with('/')) && p.len() <= MAX_FAILING_PATH_BYTES
            });
            if pointer.is_none() {
                return Err(invalid(format!(
                    "claim.failing_paths holds JSON Pointers (\"\" or starting with '/', at most \
                     {MAX_FAILING_PATH_BYTES} bytes): {path}"
                )));
            }
        }
    }
    Ok(())
}

/// `POST /v1/disputes/{id}/response` body: the other party's side.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisputeAnswer {
    /// What the other party says: 1 to 2000 bytes, not blank, without U+0000.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
    )]
    pub statement: String,
    /// Its claim (free-form JSON).
    #[serde(default)]
    pub claim: Option<Value>,
}

/// `POST /v1/disputes/{id}/decision` body.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `settle` or `void`.
    #[schema(value_type = String, example = "void", pattern = r"^(settle|void)$")]
    pub decision: DisputeDecision,
    /// Why: 1 to 2000 bytes, not blank, without U+0000.
    #[schema(
        min_length = 1,
        max_length = 500,
        pattern = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
    )]
    pub reason: String,
}

/// A replay's verdict and where its evidence came from.
struct Replay {
    result: hiregate_contracts::verify::VerificationResult,
    /// Evidence judged from the bytes stored at the original verdict.
    from_store: Vec<String>,
    /// Evidence unreachable then, fetched again.
    refetched: Vec<String>,
}

fn status_name(status: VerificationStatus) -> &'static str {
    match status {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

fn check_reason(reason: &str) -> Result<(), HireError> {
    if reason.trim().is_empty() || reason.len() > MAX_REASON_BYTES {
        return Err(HireError::validation(
            "reason".to_owned(),
            format!("a reason of 1 to {MAX_REASON_BYTES} bytes is required"),
        ));
    }
    // A reason is text for people and is stored in a text column, which cannot hold NUL on
    // PostgreSQL; refused alike on both backends (the JSON `claim` carries anything).
    if reason.contains('\0') {
        return Err(HireError::validation(
            "reason".to_owned(),
            "a reason must not contain U+0000".to_owned(),
        ));
    }
    Ok(())
}

/// A lifecycle step a dispute runs failed: whatever it said, the dispute request cannot be
/// answered as the caller's fault, so it is a fault of the gateway (logged with its cause).
#[allow(clippy::needless_pass_by_value)] // used as `map_err(step_failed)`
fn step_failed(error: HireError) -> HireError {
    let code = error.code;
    HireError::internal(anyhow::Error::new(error).context(format!("dispute step failed ({code})")))
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
        "response": dispute.response.as_ref().map(|r| json!({
            "statement": r.statement,
            "claim": r.claim,
            "by": r.by,
            "at": r.at,
        })),
    })
}

impl HireService {
    /// `caller` may dispute `contract_id`: 404 when there is no such contract, 403
    /// `not_a_party` when it is not the contract's seeker or its worker's operator. Asked before
    /// the dispute's body is read, so a stranger never learns how its body was wrong.
    pub async fn authorize_dispute(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
    ) -> Result<(), HireError> {
        let contract = self
            .inner
            .store
            .get_contract(contract_id)
            .await?
            .ok_or(HireError::not_found("contract"))?;
        if !self.is_party(caller, &contract).await? {
            return Err(HireError::not_a_party(
                "only the contract's seeker or its worker's operator may dispute it".to_owned(),
            ));
        }
        Ok(())
    }

    /// Whether `caller` is the seeker of `contract` or the operator of its worker.
    async fn is_party(
        &self,
        caller: &PrincipalId,
        contract: &ContractRecord,
    ) -> Result<bool, HireError> {
        if caller.is_seeker() {
            return Ok(&contract.seeker_id == caller);
        }
        Ok(self
            .inner
            .store
            .get_worker(&contract.worker_id)
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
    ) -> Result<Value, HireError> {
        // Authorization before validation: a stranger learns nothing from its body's faults.
        self.authorize_dispute(caller, contract_id).await?;
        check_reason(&request.reason)?;
        if let Some(claim) = &request.claim
            && claim.to_string().len() > MAX_CLAIM_BYTES
        {
            return Err(HireError::validation(
                "claim".to_owned(),
                format!("the claim may be at most {MAX_CLAIM_BYTES} bytes of JSON"),
            ));
        }
        if caller.is_seeker() {
            check_seeker_claim(request.claim.as_ref())?;
        }
        let store = &self.inner.store;
        let lock = self.inner.locks.lock_of(contract_id);
        let _guard = lock.lock_owned().await;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(HireError::not_found("contract"))?;
        let state = contract.state;
        let party = if caller.is_seeker() {
            Party::Seeker
        } else {
            Party::Operator
        };
        self.check_disputable(&contract, state, party).await?;
        let actor = Actor::party(caller.clone());
        let dispute_id = DisputeId::generate();
        let ctx =
            Ctx::of(&contract, correlation_id.to_owned(), actor.clone()).map_err(step_failed)?;
        let event = ContractEvent::DisputeOpened { by: party };
        let to = state.transition(&event).map_err(HireError::internal)?;
        let record = self.event(
            &ctx,
            &actor,
            EventKind::of(&event),
            json!({"dispute_id": dispute_id, "reason": request.reason}),
        );
        // The dispute and the state it puts the contract in are one commit: another instance
        // closing the window (settling) either wins before it or finds the contract disputed.
        let opened = store
            .advance_contract(
                contract_id,
                &[ContractStep {
                    from: state,
                    to,
                    deadline_at: None,
                    event: &record,
                }],
                &[SideWrite::Dispute(&NewDispute {
                    dispute_id: dispute_id.clone(),
                    contract_id: contract.contract_id.clone(),
                    party,
                    opened_by: actor.clone(),
                    reason: request.reason.clone(),
                    claim: request.claim.clone(),
                    created_at: self.now(),
                })],
            )
            .await
            .map_err(|error| match error {
                StoreError::Duplicate { .. } => HireError::conflict(
                    ErrorCode::DisputeAlreadyOpen,
                    "this contract already has a dispute".to_owned(),
                ),
                other => HireError::from(other),
            })?;
        if !matches!(opened, Transition::Applied { .. }) {
            return Err(HireError::conflict(
                ErrorCode::ContractNotDisputable,
                "the contract changed state while the dispute was being opened".to_owned(),
            ));
        }
        tracing::info!(
            contract_id,
            %dispute_id,
            party = party.as_str(),
            "dispute opened"
        );
        self.resolve_by_replay(&ctx, dispute_id.as_str(), state)
            .await
            .map_err(step_failed)?;
        let dispute = store
            .get_dispute(dispute_id.as_str())
            .await?
            .ok_or_else(|| HireError::internal(anyhow::anyhow!("dispute vanished")))?;
        Ok(dispute_view(&dispute))
    }

    async fn check_disputable(
        &self,
        contract: &ContractRecord,
        state: ContractState,
        party: Party,
    ) -> Result<(), HireError> {
        let now = self.now();
        match (party, state) {
            (Party::Seeker, ContractState::Accepted) => {
                match contract.deadline_at.filter(|end| *end > now) {
                    Some(_) => Ok(()),
                    None => Err(HireError::conflict(
                        ErrorCode::DisputeWindowClosed,
                        "the acceptance window of this contract is over: it can no \
                                  longer be disputed"
                            .to_owned(),
                    )
                    .with_details(json!({"window_ended_at": contract.deadline_at, "now": now}))),
                }
            }
            // Escrowed: the window of a rejection is the acceptance window, in `deadline_at`.
            (Party::Operator, ContractState::Rejected) if contract.deadline_at.is_some() => {
                match contract.deadline_at.filter(|end| *end > now) {
                    Some(_) => Ok(()),
                    None => Err(HireError::conflict(
                        ErrorCode::DisputeWindowClosed,
                        "the dispute window of this rejection is over".to_owned(),
                    )
                    .with_details(json!({"window_ended_at": contract.deadline_at, "now": now}))),
                }
            }
            (Party::Operator, ContractState::Rejected) => {
                let payment = self
                    .inner
                    .store
                    .payment_of_contract(contract.contract_id.as_str())
                    .await?
                    .ok_or_else(|| HireError::internal(anyhow::anyhow!("rejected, no payment")))?;
                let margin = i64::try_from(self.inner.config.contracts.settlement_margin_s)
                    .unwrap_or(i64::MAX);
                let closes_at = payment.valid_before.saturating_sub(margin);
                if closes_at > self.chain_now_of(&payment).await {
                    Ok(())
                } else {
                    Err(HireError::conflict(
                        ErrorCode::DisputeWindowClosed,
                        "the payment authorization is about to expire: the rejection \
                                  can no longer be disputed"
                            .to_owned(),
                    )
                    .with_details(json!({
                        "valid_before": payment.valid_before,
                        "settlement_margin_s": margin,
                        "closed_at": closes_at,
                    })))
                }
            }
            (Party::Operator, ContractState::Failed) => self.check_money_held(contract).await,
            (party, state) => Err(HireError::conflict(
                ErrorCode::ContractNotDisputable,
                match party {
                    Party::Seeker => "a seeker may dispute an accepted contract only",
                    Party::Operator => "an operator may dispute a rejected or failed contract only",
                }
                .to_owned(),
            )
            .with_details(json!({"state": state.as_str()}))),
        }
    }

    /// Now on `payment`'s chain, unix seconds: `validBefore` is the chain's deadline, judged by
    /// its clock (a network that does not parse has no node here: the host's clock judges).
    async fn chain_now_of(&self, payment: &PaymentRecord) -> i64 {
        let chain_id = payment.network.chain_id().unwrap_or(0);
        self.inner.assets.money_now(chain_id).await
    }

    /// A failed contract may be disputed only while its money is still held: the arbiter
    /// could not settle money that went back to the payer. 409 `money_released` otherwise.
    async fn check_money_held(&self, contract: &ContractRecord) -> Result<(), HireError> {
        let payment = self
            .inner
            .store
            .payment_of_contract(contract.contract_id.as_str())
            .await?
            .ok_or_else(|| HireError::internal(anyhow::anyhow!("failed, no payment")))?;
        let margin =
            i64::try_from(self.inner.config.contracts.settlement_margin_s).unwrap_or(i64::MAX);
        let closes_at = payment.valid_before.saturating_sub(margin);
        let released = |why: &str, message: &str| {
            HireError::conflict(ErrorCode::MoneyReleased, message.to_owned()).with_details(json!({
                "reason": why,
                "payment_state": payment.state,
                "valid_before": payment.valid_before,
                "settlement_margin_s": margin,
            }))
        };
        if payment.authorize_tx.is_some() {
            // Escrowed: a failure voids the escrow at once; once voided (or reclaimed by the
            // payer) nothing is left to capture.
            if matches!(
                payment.state,
                PaymentState::Voiding
                    | PaymentState::Voided
                    | PaymentState::Reclaimed
                    | PaymentState::Refunded
            ) {
                return Err(released(
                    "escrow_released",
                    "the escrowed payment of this failed contract was returned to the payer: \
                     there is nothing left to settle",
                ));
            }
        }
        if closes_at <= self.chain_now_of(&payment).await {
            return Err(released(
                "authorization_expired",
                "the payment authorization of this failed contract is (about to be) expired: \
                 there is nothing left to settle",
            ));
        }
        Ok(())
    }
}
