//! `delivered` → `verifying` → `accepted` | `rejected`: the pinned verification policy applied to the stored deliverable.

use hiregate_contracts::id::{DeliverableId, VerificationId};
use std::time::Duration;

use chrono::SubsecRound;

use hiregate_contracts::{
    canonical::Digest,
    deliverable::Deliverable,
    id::AttemptId,
    state::{ContractEvent, ContractState},
    verify::{VerificationRequest, VerificationResult, VerificationStatus, VoteSet},
};
use serde_json::{Value, json};

use super::{
    HireService,
    crosscheck::Proposal,
    error::HireError,
    evidence::{self, FetchedEvidence},
    execute::{Ctx, Step, internal},
};
use hiregate_store::states::{Actor, EventKind, PieceKind};
use hiregate_store::{
    ContractStep, NewDeliverable, NewVerification, SideWrite, Store, StoreError, Transition,
};

impl HireService {
    pub(super) async fn verify_delivery(
        &self,
        ctx: &Ctx,
        attempt_id: &AttemptId,
        deliverable: &Deliverable,
        digest: Digest,
    ) -> Result<Step, HireError> {
        let policy = ctx.terms.verification();
        if !self
            .transition(
                ctx,
                ContractState::Delivered,
                &ContractEvent::VerificationStarted,
                &Actor::Gateway,
                json!({"policy_id": policy.policy_id(), "policy_hash": policy.policy_hash()}),
                None,
            )
            .await?
        {
            return Ok(Step::Again);
        }
        self.judge(ctx, attempt_id, deliverable, digest).await
    }

    /// Apply the pinned policy to `deliverable` (the contract in `verifying`) and move the
    /// contract to `accepted` or `rejected`. Deterministic on the stored bytes, so a takeover
    /// after a crash simply judges again.
    pub(super) async fn judge(
        &self,
        ctx: &Ctx,
        attempt_id: &AttemptId,
        deliverable: &Deliverable,
        digest: Digest,
    ) -> Result<Step, HireError> {
        let inner = &self.inner;
        let policy = ctx.terms.verification();
        let (result, result_json, votes) =
            self.verdict(ctx, attempt_id, deliverable, digest).await?;
        let verification = NewVerification {
            verification_id: VerificationId::generate(),
            contract_id: ctx.contract_id.clone(),
            attempt_id: attempt_id.to_string(),
            policy_id: policy.policy_id().as_str().to_owned(),
            policy_version: policy.policy_version().to_owned(),
            policy_hash: policy.policy_hash().to_string(),
            passed: result.passed,
            score: result.score,
            reason_codes: result.reason_codes.clone(),
            status: status_name(result.verification_status).to_owned(),
            verifier_result_hash: result.verifier_result_hash.to_string(),
            result: result_json,
            created_at: self.now(),
        };
        let event = match result.verification_status {
            VerificationStatus::Passed => ContractEvent::VerificationPassed,
            VerificationStatus::Failed => ContractEvent::VerificationFailed,
            VerificationStatus::Inconclusive => ContractEvent::VerificationInconclusive,
        };
        let window = ctx.terms.acceptance_window_s();
        // Escrowed money is locked: a rejection gets the same window for the operator's
        // dispute as an acceptance gets for the seeker's, then the escrow is voided.
        let escrowed = ctx.terms.escrow().is_some();
        let deadline = ((result.passed || escrowed) && window > 0).then(|| {
            self.now() + chrono::Duration::seconds(i64::try_from(window).unwrap_or(i64::MAX))
        });
        let to = ContractState::Verifying
            .transition(&event)
            .map_err(|e| internal(e.to_string()))?;
        let record = self.event(
            ctx,
            &Actor::Gateway,
            EventKind::of(&event),
            json!({
                "passed": result.passed,
                "score": result.score,
                "reason_codes": result.reason_codes,
                "verifier_result_hash": result.verifier_result_hash,
                "votes": super::crosscheck::vote_summaries(votes.as_ref()),
            }),
        );
        // Passed with no acceptance window: settlement begins in the verdict's own commit, so
        // a paid hire costs one commit fewer. The payment (and, escrowed, what capturing it
        // needs) is read first: nothing may fail between `settling` and the send.
        let payment = if result.passed && window == 0 {
            self.payment_of(ctx).await?
        } else {
            None
        };
        // A metered contract settles what was verified: the amount replaces the signed
        // maximum in the settlement's own commit.
        let metered_amount = super::meter::metered_amount(ctx, &result);
        let settle_now = match payment {
            Some(mut payment) => {
                if let Some(amount) = &metered_amount {
                    payment.amount.clone_from(amount);
                }
                let escrowed = self.escrow_of(ctx, &payment)?;
                let window_closed = self.event(
                    ctx,
                    &Actor::Gateway,
                    EventKind::AcceptanceWindowClosed,
                    json!({"payment_id": payment.payment_id}),
                );
                // The start the commit below stores (the store keeps an earlier one).
                payment.settle_started_at = payment
                    .settle_started_at
                    .or(Some(window_closed.at.trunc_subsecs(3)));
                Some((payment, escrowed, window_closed))
            }
            None => None,
        };
        let mut steps = vec![ContractStep {
            from: ContractState::Verifying,
            to,
            deadline_at: deadline,
            event: &record,
        }];
        let mut writes = vec![SideWrite::Verification(&verification)];
        if let Some((payment, _, event)) = &settle_now {
            steps.push(ContractStep {
                from: to,
                to: ContractState::Settling,
                deadline_at: None,
                event,
            });
            writes.push(SideWrite::SettlementBegun {
                contract_id: ctx.contract_id.as_str(),
                payment_id: &payment.payment_id,
                at: event.at,
                amount: metered_amount.as_deref(),
            });
        }
        // The verdict and the state it leads to in one commit.
        let judged = inner
            .store
            .advance_contract(ctx.contract_id.as_str(), &steps, &writes)
            .await?;
        if !matches!(judged, Transition::Applied { .. }) {
            return Ok(Step::Again);
        }
        let _ = ctx
            .written
            .verification
            .set((verification.passed, verification.result));
        inner.metrics.record_verification(
            policy.policy_id().as_str(),
            status_name(result.verification_status),
            &result.reason_codes,
        );
        tracing::info!(contract_id = %ctx.contract_id, passed = result.passed, "deliverable verified");
        if let Some((payment, escrowed, _)) = &settle_now {
            // Boxed: the settlement's future would otherwise sit inside every caller's.
            return Box::pin(self.send_settlement(ctx, payment, escrowed.as_ref())).await;
        }
        if escrowed && !result.passed && window == 0 {
            self.void_rejected(ctx).await?;
        }
        Ok(Step::Again)
    }

    /// The verdict on `deliverable` (attempt `attempt_id`, digest `digest`) by the contract's
    /// pinned policy: the evidence it names fetched (and stored), the quorum's votes for a
    /// `vp.crosscheck.v1` policy, the verifier run. Returns the result, its JSON as stored (with
    /// the votes) and the votes.
    async fn verdict(
        &self,
        ctx: &Ctx,
        attempt_id: &AttemptId,
        deliverable: &Deliverable,
        digest: Digest,
    ) -> Result<(VerificationResult, Value, Option<VoteSet>), HireError> {
        let inner = &self.inner;
        let policy = ctx.terms.verification();
        let requests = deliverable.evidence_requests();
        let (evidence, fetched) = evidence::fetch_all(
            &inner.outbound,
            &requests,
            Duration::from_secs(inner.config.contracts.verification_budget_s.max(1)),
            inner.config.outbound.max_response_bytes,
        )
        .await;
        if !fetched.is_empty() {
            match inner
                .store
                .insert_deliverables(&evidence_pieces(ctx, attempt_id, &fetched, self.now()))
                .await
            {
                // Stored by a judgement that a crash cut short; the bytes are the digest's.
                Ok(()) | Err(StoreError::Duplicate { .. }) => {}
                Err(other) => return Err(other.into()),
            }
        }
        let candidate_id = digest.to_string();
        let proposal = match ctx.written.proposal.get() {
            Some((closed, proposal)) if closed == attempt_id => proposal.clone(),
            _ => Proposal::of_attempt(&inner.store, &ctx.terms, attempt_id).await?,
        };
        // vp.crosscheck.v1 quorums: the named verifier workers vote (fail-closed), bounded by
        // half the verification budget (the other half is for evidence fetches).
        let votes = super::crosscheck::collect_votes(
            &inner.store,
            &inner.outbound,
            &super::crosscheck::VoteRequest {
                candidate_id: &candidate_id,
                proposal: &proposal,
                deliverable,
                output_schemas: ctx.terms.task().output_schemas(),
                policy,
                timeout: Duration::from_millis(
                    inner.config.contracts.verification_budget_s.max(1) * 500,
                ),
            },
        )
        .await;
        let request = VerificationRequest {
            candidate_id: &candidate_id,
            execution_id: &proposal.execution_id,
            deliverable,
            output_schemas: ctx.terms.task().output_schemas(),
            policy,
            evidence: &evidence,
            votes: votes.as_ref(),
        };
        // A metered contract is judged unit by unit: what it pays is what passed.
        let result = match ctx.terms.metering() {
            Some(metering) => {
                let readings = self
                    .meter_readings(ctx, attempt_id, metering.unit())
                    .await?;
                inner.verifier.verify_metered(&request, metering, &readings)
            }
            None => inner.verifier.verify(&request),
        }
        .map_err(|e| internal(format!("verification could not run: {e}")))?;
        let mut result_json =
            serde_json::to_value(&result).map_err(|e| internal(format!("verification: {e}")))?;
        // Each vote with its verifier_result_hash, for the audit trail and dispute replay.
        if let (Some(votes), Some(object)) = (&votes, result_json.as_object_mut()) {
            object.insert(
                "votes".to_owned(),
                serde_json::to_value(votes).map_err(|e| internal(format!("votes: {e}")))?,
            );
        }
        Ok((result, result_json, votes))
    }
}

pub(super) fn status_name(status: VerificationStatus) -> &'static str {
    match status {
        VerificationStatus::Passed => "passed",
        VerificationStatus::Failed => "failed",
        VerificationStatus::Inconclusive => "inconclusive",
    }
}

pub(super) fn evidence_pieces(
    ctx: &Ctx,
    attempt_id: &AttemptId,
    fetched: &[FetchedEvidence],
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<NewDeliverable> {
    fetched
        .iter()
        .enumerate()
        .map(|(index, piece)| NewDeliverable {
            deliverable_id: DeliverableId::generate(),
            contract_id: ctx.contract_id.clone(),
            attempt_id: attempt_id.clone(),
            position: u32::try_from(index + 1).unwrap_or(u32::MAX),
            name: None,
            kind: PieceKind::Evidence,
            media_type: piece.media_type.clone(),
            digest: piece.digest.to_string(),
            content: piece.bytes.clone(),
            source_url: Some(piece.url.to_string()),
            created_at: now,
        })
        .collect()
}

/// Why stored bytes cannot be judged again. Never a verdict: the bytes are not what was judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum StoredBytesError {
    /// Nothing was delivered.
    #[error("no stored deliverable")]
    Missing,
    /// The stored deliverable is not a deliverable any more.
    #[error("the stored deliverable does not parse")]
    Unreadable,
    /// The stored bytes hash to another digest than the one recorded when they were judged.
    #[error("the stored {what}'s digest {computed} differs from the recorded {recorded}")]
    DigestMismatch {
        /// `deliverable`, or `evidence <url>`.
        what: String,
        /// Recorded at delivery.
        recorded: String,
        /// Of the bytes stored now.
        computed: String,
    },
}

impl StoredBytesError {
    /// Stable code.
    pub(super) fn code(&self) -> &'static str {
        match self {
            Self::Missing => "no_stored_deliverable",
            Self::Unreadable => "stored_deliverable_unreadable",
            Self::DigestMismatch { .. } => "stored_digest_mismatch",
        }
    }
}

/// The contract's latest deliverable as stored, digest-checked: `(attempt_id, deliverable,
/// digest)`, or why it cannot be judged again (`Ok(Err(why))`). What disputes replay and what a
/// takeover judges after a crash.
pub(super) async fn stored_deliverable(
    store: &Store,
    contract_id: &str,
) -> Result<Result<(AttemptId, Deliverable, Digest), StoredBytesError>, HireError> {
    let stored = store.latest_deliverables(contract_id).await?;
    let Some(record) = stored.iter().find(|d| d.kind == PieceKind::Deliverable) else {
        return Ok(Err(StoredBytesError::Missing));
    };
    let Ok(deliverable) = serde_json::from_slice::<Deliverable>(&record.content) else {
        return Ok(Err(StoredBytesError::Unreadable));
    };
    let digest = deliverable
        .digest()
        .map_err(|e| internal(format!("deliverable digest: {e}")))?;
    if digest.to_string() != record.digest {
        return Ok(Err(StoredBytesError::DigestMismatch {
            what: "deliverable".to_owned(),
            recorded: record.digest.clone(),
            computed: digest.to_string(),
        }));
    }
    Ok(Ok((record.attempt_id.clone(), deliverable, digest)))
}
