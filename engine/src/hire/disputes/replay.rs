//! Resolving a dispute by replay: the stored deliverable judged again under the pinned policy;
//! a verdict that cannot be reached again escalates to the arbiter.

use super::*;
use hiregate_store::states::{Actor, EventKind, PieceKind};

impl HireService {
    /// Replay the pinned policy on the stored deliverable and decide where the replay can
    /// (see the module table); otherwise escalate. `disputed` is the state the dispute opened
    /// from.
    pub(in crate::hire) async fn resolve_by_replay(
        &self,
        ctx: &Ctx,
        dispute_id: &str,
        disputed: ContractState,
    ) -> Result<(), HireError> {
        let store = &self.inner.store;
        if disputed == ContractState::Failed {
            let skipped = json!({
                "skipped": "the contract failed before a verdict: there is nothing to replay",
            });
            store
                .record_dispute_replay(dispute_id, &skipped, "", DisputeState::Escalated)
                .await?;
            self.escalated_event(ctx, dispute_id, &skipped).await?;
            return Ok(());
        }
        let original = store
            .latest_verification(ctx.contract_id.as_str())
            .await?
            .ok_or_else(|| internal("a disputed contract has no verification"))?;
        let replay = match Box::pin(self.replay(ctx)).await? {
            Ok(replay) => replay,
            Err(why) => {
                // Stored bytes that are not what was judged: nothing a machine may judge.
                let refused = json!({
                    "error": {"code": why.code(), "message": why.to_string()},
                    "original_verification_status": original.status,
                });
                store
                    .record_dispute_replay(dispute_id, &refused, "", DisputeState::Escalated)
                    .await?;
                self.escalated_event(ctx, dispute_id, &refused).await?;
                tracing::warn!(contract_id = %ctx.contract_id, dispute_id, error = %why, "replay refused: stored bytes fail their digest");
                return Ok(());
            }
        };
        let status = status_name(replay.result.verification_status);
        let decision = match (disputed, replay.result.verification_status) {
            // The seeker disputes an acceptance: a failing replay upholds the seeker; a passing
            // one only repeats the verdict the claim disputes, so a person decides.
            (ContractState::Accepted, VerificationStatus::Failed) => Some(DisputeDecision::Void),
            (ContractState::Rejected, VerificationStatus::Passed) => Some(DisputeDecision::Settle),
            // The rejection was for want of evidence; with the evidence it fails outright.
            (ContractState::Rejected, VerificationStatus::Failed)
                if original.status == "inconclusive" =>
            {
                Some(DisputeDecision::Void)
            }
            _ => None,
        };
        let replay_evidence = json!({
            "from_store": replay.from_store,
            "refetched": replay.refetched,
        });
        let replay = replay.result;
        let mut replay_json =
            serde_json::to_value(&replay).map_err(|e| internal(format!("replay: {e}")))?;
        replay_json["original_verification_status"] = json!(original.status);
        replay_json["original_verifier_result_hash"] = json!(original.verifier_result_hash);
        replay_json["evidence"] = replay_evidence;
        store
            .record_dispute_replay(
                dispute_id,
                &replay_json,
                &replay.verifier_result_hash.to_string(),
                if decision.is_some() {
                    DisputeState::Open
                } else {
                    DisputeState::Escalated
                },
            )
            .await?;
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &Actor::Gateway,
                    EventKind::DisputeReplayed,
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
                &Actor::Replay,
                &reason,
                DecidedVia::Replay,
            )
            .await?;
        }
        Ok(())
    }

    /// The pinned policy run again on the stored deliverable and the evidence stored at the
    /// original verdict; only evidence that was unreachable then is fetched again.
    /// `Ok(Err(why))` when stored bytes fail their digest check.
    pub(super) async fn replay(
        &self,
        ctx: &Ctx,
    ) -> Result<Result<Replay, StoredBytesError>, HireError> {
        let inner = &self.inner;
        let (attempt_id, deliverable, digest) =
            match crate::hire::judge::stored_deliverable(&inner.store, ctx.contract_id.as_str())
                .await?
            {
                Ok(stored) => stored,
                Err(why) => return Ok(Err(why)),
            };
        let stored_evidence: Vec<_> = inner
            .store
            .latest_deliverables(ctx.contract_id.as_str())
            .await?
            .into_iter()
            .filter(|piece| piece.kind == PieceKind::Evidence && piece.attempt_id == attempt_id)
            .collect();
        let requests = deliverable.evidence_requests();
        let mut kept = Vec::new();
        let mut missing = Vec::new();
        for request in &requests {
            let stored = stored_evidence
                .iter()
                .find(|piece| piece.source_url.as_deref() == Some(request.uri.as_str()));
            match stored {
                Some(piece) => {
                    let computed = Digest::of_bytes(&piece.content).to_string();
                    if computed != piece.digest {
                        return Ok(Err(StoredBytesError::DigestMismatch {
                            what: format!("evidence {}", request.uri),
                            recorded: piece.digest.clone(),
                            computed,
                        }));
                    }
                    kept.push((request.uri.clone(), piece.content.clone()));
                }
                None => missing.push(request.clone()),
            }
        }
        let policy = ctx.terms.verification();
        let budget = Duration::from_secs(inner.config.contracts.verification_budget_s.max(1));
        let (mut evidence, _) = evidence::fetch_all(
            &inner.outbound,
            &missing,
            budget,
            inner.config.outbound.max_response_bytes,
        )
        .await;
        let from_store: Vec<String> = kept.iter().map(|(uri, _)| uri.to_string()).collect();
        for (uri, bytes) in kept {
            evidence.insert(&uri, EvidenceFetch::Fetched(bytes));
        }
        let candidate_id = digest.to_string();
        let proposal =
            crate::hire::crosscheck::Proposal::of_attempt(&inner.store, &ctx.terms, &attempt_id)
                .await?;
        let votes = crate::hire::crosscheck::collect_votes(
            &inner.store,
            &inner.outbound,
            &crate::hire::crosscheck::VoteRequest {
                candidate_id: &candidate_id,
                proposal: &proposal,
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
                execution_id: &proposal.execution_id,
                deliverable: &deliverable,
                output_schemas: ctx.terms.task().output_schemas(),
                policy,
                evidence: &evidence,
                votes: votes.as_ref(),
            })
            .map_err(|e| internal(format!("replay could not run: {e}")))?;
        Ok(Ok(Replay {
            result,
            from_store,
            refetched: missing.iter().map(|r| r.uri.to_string()).collect(),
        }))
    }

    /// The `dispute_escalated` event: the dispute waits for the arbiter.
    pub(in crate::hire) async fn escalated_event(
        &self,
        ctx: &Ctx,
        dispute_id: &str,
        replay: &Value,
    ) -> Result<(), HireError> {
        self.inner
            .store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    &Actor::Gateway,
                    EventKind::DisputeEscalated,
                    json!({"dispute_id": dispute_id, "replay": replay}),
                ),
            )
            .await?;
        Ok(())
    }
}
