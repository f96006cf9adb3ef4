//! Decisions on a dispute: the arbiter's (applied and carried out on the money), the worker's
//! answer to a seeker's claim, the silent arbiter's deadline, the arbiter's queue, and the
//! dispute's view.

use super::*;
use hiregate_store::states::{Actor, EventKind};

impl HireService {
    /// Record `decision` once and carry it out: settle with the stored payment, or void.
    pub(super) async fn apply_decision(
        &self,
        ctx: &Ctx,
        dispute_id: &str,
        decision: DisputeDecision,
        decided_by: &Actor,
        reason: &str,
        via: DecidedVia,
    ) -> Result<bool, HireError> {
        let store = &self.inner.store;
        let recorded = store
            .decide_dispute(
                dispute_id,
                &DisputeDecisionRecord {
                    decision,
                    decided_by: decided_by.clone(),
                    reason: reason.to_owned(),
                    via,
                    at: self.now(),
                },
            )
            .await?;
        if !recorded {
            return Ok(false);
        }
        store
            .append_contract_event(
                ctx.contract_id.as_str(),
                &self.event(
                    ctx,
                    decided_by,
                    EventKind::DisputeDecided,
                    json!({
                        "dispute_id": dispute_id,
                        "decision": decision,
                        "reason": reason,
                        "via": via,
                    }),
                ),
            )
            .await?;
        self.carry_out(ctx, decision, decided_by, dispute_id)
            .await?;
        Ok(true)
    }

    /// Move a `disputed` contract per a recorded decision.
    pub(in crate::hire) async fn carry_out(
        &self,
        ctx: &Ctx,
        decision: DisputeDecision,
        decided_by: &Actor,
        dispute_id: &str,
    ) -> Result<(), HireError> {
        match decision {
            DisputeDecision::Settle => {
                // A metered contract with nothing billable (no unit delivered) has nothing to
                // settle: `upto` would "settle" zero without a transaction and leave the
                // permit unused on chain, so the decision is carried out as a void.
                let nothing_billable = self
                    .metered_amount_to_settle(ctx, ContractState::Disputed)
                    .await?
                    .is_some_and(|amount| amount.units() == 0);
                if !nothing_billable {
                    self.settle(ctx, ContractState::Disputed).await?;
                    return Ok(());
                }
                self.void_disputed(
                    ctx,
                    decided_by,
                    json!({"dispute_id": dispute_id, "decision": "settle",
                           "carried_out_as": "void", "reason": "nothing_billable"}),
                )
                .await?;
            }
            DisputeDecision::Void => {
                self.void_disputed(
                    ctx,
                    decided_by,
                    json!({"dispute_id": dispute_id, "decision": "void"}),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Move a `disputed` contract to `voided` (`details` on its event) and release its payment.
    async fn void_disputed(
        &self,
        ctx: &Ctx,
        decided_by: &Actor,
        details: Value,
    ) -> Result<(), HireError> {
        let payment = self
            .inner
            .store
            .payment_of_contract(ctx.contract_id.as_str())
            .await?
            .ok_or_else(|| internal("a disputed contract has no payment"))?;
        if self
            .transition(
                ctx,
                ContractState::Disputed,
                &ContractEvent::DisputeResolved {
                    decision: DisputeDecision::Void,
                },
                decided_by,
                details,
                None,
            )
            .await?
        {
            self.record_void(ctx, &payment, "dispute_void").await?;
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
    ) -> Result<Value, HireError> {
        let store = &self.inner.store;
        let dispute = store
            .get_dispute(dispute_id)
            .await?
            .ok_or(HireError::not_found("dispute"))?;
        check_reason(&request.reason)?;
        let lock = self.inner.locks.lock_of(dispute.contract_id.as_str());
        let _guard = lock.lock_owned().await;
        let already = || {
            HireError::conflict(
                ErrorCode::DisputeAlreadyDecided,
                "this dispute is decided; decisions are final".to_owned(),
            )
        };
        let current = store
            .get_dispute(dispute_id)
            .await?
            .ok_or(HireError::not_found("dispute"))?;
        if current.decided_at.is_some() {
            return Err(already());
        }
        let contract = store
            .get_contract(dispute.contract_id.as_str())
            .await?
            .ok_or(HireError::not_found("contract"))?;
        let ctx =
            Ctx::of(&contract, correlation_id.to_owned(), Actor::Admin).map_err(step_failed)?;
        let applied = self
            .apply_decision(
                &ctx,
                dispute_id,
                request.decision,
                &Actor::Admin,
                &request.reason,
                DecidedVia::Arbiter,
            )
            .await
            .map_err(step_failed)?;
        if !applied {
            return Err(already());
        }
        tracing::info!(
            dispute_id,
            decision = request.decision.as_str(),
            "arbiter decided"
        );
        let dispute = store
            .get_dispute(dispute_id)
            .await?
            .ok_or_else(|| HireError::internal(anyhow::anyhow!("dispute vanished")))?;
        Ok(dispute_view(&dispute))
    }

    /// `GET /v1/disputes/{id}`: for the admin (`caller` `None`) or a party of its contract.
    pub async fn view_dispute(
        &self,
        caller: Option<&PrincipalId>,
        dispute_id: &str,
    ) -> Result<Value, HireError> {
        let store = &self.inner.store;
        let not_found = || HireError::not_found("dispute");
        let dispute = store.get_dispute(dispute_id).await?.ok_or_else(not_found)?;
        if let Some(caller) = caller {
            let contract = store
                .get_contract(dispute.contract_id.as_str())
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
    pub(in crate::hire) async fn dispute_deadline(
        &self,
        ctx: &Ctx,
        payment: &PaymentRecord,
    ) -> Result<bool, HireError> {
        let Some(dispute) = self
            .inner
            .store
            .dispute_of_contract(ctx.contract_id.as_str())
            .await?
        else {
            return Ok(false);
        };
        if let Some(decision) = dispute.decision {
            let by = dispute.decided_by.unwrap_or(Actor::System);
            self.carry_out(ctx, decision, &by, dispute.dispute_id.as_str())
                .await?;
            return Ok(true);
        }
        tracing::info!(contract_id = %ctx.contract_id, valid_before = payment.valid_before, "arbiter silent: dispute voided before validBefore");
        self.apply_decision(
            ctx,
            dispute.dispute_id.as_str(),
            DisputeDecision::Void,
            &Actor::System,
            "arbiter_silent",
            DecidedVia::Timeout,
        )
        .await
    }
}

impl HireService {
    /// `POST /v1/disputes/{id}/response`: the party that did not open the dispute states its
    /// side, once, before the decision; recorded as a `dispute_answered` contract event. 404 for
    /// anyone not a party, 409 `dispute_opened_by_you` for the opening side,
    /// `dispute_already_answered` / `dispute_already_decided` when too late.
    pub async fn answer_dispute(
        &self,
        caller: &PrincipalId,
        dispute_id: &str,
        answer: DisputeAnswer,
        correlation_id: &str,
    ) -> Result<Value, HireError> {
        // Authorization before validation (404 for anyone not a party, as the view answers).
        self.view_dispute(Some(caller), dispute_id).await?;
        if answer.statement.trim().is_empty()
            || answer.statement.len() > MAX_REASON_BYTES
            || answer.statement.contains('\0')
        {
            return Err(HireError::validation(
                "statement".to_owned(),
                format!("a statement of 1 to {MAX_REASON_BYTES} bytes, without U+0000"),
            ));
        }
        if let Some(claim) = &answer.claim
            && claim.to_string().len() > MAX_CLAIM_BYTES
        {
            return Err(HireError::validation(
                "claim".to_owned(),
                format!("the claim may be at most {MAX_CLAIM_BYTES} bytes of JSON"),
            ));
        }
        let store = &self.inner.store;
        let not_found = || HireError::not_found("dispute");
        let dispute = store.get_dispute(dispute_id).await?.ok_or_else(not_found)?;
        let contract = store
            .get_contract(dispute.contract_id.as_str())
            .await?
            .ok_or_else(not_found)?;
        if !self.is_party(caller, &contract).await? {
            return Err(not_found());
        }
        let side = if caller.is_seeker() {
            Party::Seeker
        } else {
            Party::Operator
        };
        if side == dispute.party {
            return Err(HireError::conflict(
                ErrorCode::DisputeOpenedByYou,
                "the opening party stated its side when it opened the dispute".to_owned(),
            ));
        }
        if dispute.decided_at.is_some() {
            return Err(HireError::conflict(
                ErrorCode::DisputeAlreadyDecided,
                "this dispute is decided; decisions are final".to_owned(),
            ));
        }
        let by = Actor::party(caller.clone());
        let response = DisputeResponse {
            statement: answer.statement,
            claim: answer.claim,
            by: by.clone(),
            at: self.now(),
        };
        let lock = self.inner.locks.lock_of(dispute.contract_id.as_str());
        let _guard = lock.lock_owned().await;
        if !store.answer_dispute(dispute_id, &response).await? {
            let current = store.get_dispute(dispute_id).await?.ok_or_else(not_found)?;
            return Err(if current.decided_at.is_some() {
                HireError::conflict(
                    ErrorCode::DisputeAlreadyDecided,
                    "this dispute is decided; decisions are final".to_owned(),
                )
            } else {
                HireError::conflict(
                    ErrorCode::DisputeAlreadyAnswered,
                    "the other party's statement is recorded once".to_owned(),
                )
            });
        }
        store
            .append_contract_event(
                dispute.contract_id.as_str(),
                &NewContractEvent {
                    at: response.at,
                    actor: by,
                    correlation_id: correlation_id.to_owned(),
                    kind: EventKind::DisputeAnswered,
                    details: json!({"dispute_id": dispute_id, "statement": response.statement}),
                },
            )
            .await?;
        let dispute = store.get_dispute(dispute_id).await?.ok_or_else(not_found)?;
        Ok(dispute_view(&dispute))
    }
}

impl HireService {
    /// When the deadline sweep voids a still-undecided dispute of `contract_id` (the silent
    /// arbiter's default): `validBefore - settlement_margin_s` of its payment.
    pub(in crate::hire) async fn silent_arbiter_deadline(
        &self,
        contract_id: &str,
    ) -> Result<Option<chrono::DateTime<Utc>>, HireError> {
        let margin =
            i64::try_from(self.inner.config.contracts.settlement_margin_s).unwrap_or(i64::MAX);
        Ok(self
            .inner
            .store
            .payment_of_contract(contract_id)
            .await?
            .and_then(|payment| {
                chrono::DateTime::from_timestamp(payment.valid_before.saturating_sub(margin), 0)
            }))
    }
}

/// Longest page of the arbiter's queue.
pub const MAX_QUEUE_PAGE: u32 = 100;

impl HireService {
    /// `GET /v1/disputes?state=` (admin): disputes in `state`, oldest first, each with what the
    /// arbiter decides on: the contract view (terms, deliverable with its digest and content,
    /// verification result, payment) next to the dispute (the opening party's reason and
    /// claim, the replay's result), and `deadline_at`: when the silent arbiter's `void` applies.
    pub async fn dispute_queue(
        &self,
        state: DisputeState,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Value, HireError> {
        let store = &self.inner.store;
        let disputes = store.list_disputes(state, after, limit).await?;
        let mut items = Vec::with_capacity(disputes.len());
        for dispute in &disputes {
            let contract = store
                .get_contract(dispute.contract_id.as_str())
                .await?
                .ok_or_else(|| HireError::internal(anyhow::anyhow!("dispute without contract")))?;
            let view = self.contract_view(&contract, true).await?;
            let deadline_at = self
                .silent_arbiter_deadline(contract.contract_id.as_str())
                .await?;
            items.push(json!({
                "dispute": dispute_view(dispute),
                "contract": view,
                "deadline_at": deadline_at,
                "deadline_action": "void",
            }));
        }
        let next_after = (disputes.len() == limit as usize)
            .then(|| disputes.last().map(|d| d.dispute_id.clone()))
            .flatten();
        Ok(json!({ "disputes": items, "next_after": next_after }))
    }
}
