//! The contract view: what a party may see of a contract (its terms, payment, attempts,
//! deliverable and verdict), shared by the REST API, MCP and disputes.

use super::*;

impl HireService {
    /// `GET /v1/contracts/{id}` for a party: the seeker who owns it or the operator of its
    /// worker. Anyone else gets 404.
    pub async fn view_contract(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
    ) -> Result<Value, HireError> {
        let store = &self.inner.store;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(HireError::not_found("contract"))?;
        let allowed = if caller.is_seeker() {
            &contract.seeker_id == caller
        } else {
            store
                .get_worker(&contract.worker_id)
                .await?
                .is_some_and(|listing| &listing.operator_id == caller)
        };
        if !allowed {
            return Err(HireError::not_found("contract"));
        }
        // The operator may see what its worker delivered; the seeker only what it paid for.
        let state = contract.state;
        let reveal = !caller.is_seeker() || self.seeker_may_see_content(&contract, state).await?;
        let mut view = self
            .contract_view(&contract, reveal)
            .await
            .map_err(HireError::from)?;
        if let Some(receipt) = self.receipt_of(&contract).await? {
            view["receipt"] = json!(receipt.token);
        }
        Ok(view)
    }

    /// [`execute::content_released`] for a stored contract.
    pub(super) async fn seeker_may_see_content(
        &self,
        contract: &ContractRecord,
        state: ContractState,
    ) -> Result<bool, HireError> {
        let scheme = contract.terms.scheme();
        // Only a dispute needs the verdict (whose dispute is it); skip the read otherwise.
        let passed = if state == ContractState::Disputed {
            self.inner
                .store
                .latest_verification(contract.contract_id.as_str())
                .await?
                .is_some_and(|v| v.passed)
        } else {
            false
        };
        Ok(execute::content_released(scheme, state, passed))
    }

    pub(super) async fn contract_view(
        &self,
        contract: &ContractRecord,
        reveal_content: bool,
    ) -> Result<Value, StoreError> {
        let store = &self.inner.store;
        let id = contract.contract_id.as_str();
        // Independent reads: on a pool they run side by side.
        let (attempts, payment, verification, pieces, dispute) = tokio::try_join!(
            store.list_attempts(id),
            store.payment_of_contract(id),
            store.latest_verification(id),
            store.latest_deliverables(id),
            store.dispute_of_contract(id),
        )?;
        let delivery = execute::delivery_view(&pieces, reveal_content);
        let offer = contract.payment_offer.as_ref();
        Ok(json!({
            "contract_id": contract.contract_id,
            "correlation_id": contract.correlation_id,
            "queued_at": contract.queued_at.filter(|_| contract.state == ContractState::Paid),
            "state": contract.state,
            "seeker_id": contract.seeker_id,
            "worker_id": contract.worker_id,
            "task_type": contract.task_type,
            "terms": *contract.terms_document,
            "terms_hash": contract.terms_hash,
            "gateway_jws": contract.gateway_jws,
            "payment_required": offer.map(|o| &o.payment_required),
            "attempts_used": contract.attempts_used,
            "attempts": attempts.iter().map(|a| json!({
                "attempt_id": a.attempt_id,
                "attempt_no": a.attempt_no,
                "state": a.state,
                "http_status": a.http_status,
                "error": a.error,
                "worker_task_id": a.worker_task_id,
                "estimated_completion": a.estimated_completion,
                "metadata": a.worker_metadata,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
            })).collect::<Vec<_>>(),
            // When the money moves relative to the work, as the signed terms pin it: an
            // upfront contract's payment is `settled` before the work, and stays so whatever
            // the verdict (`rejected` with a settled payment: paid, not refunded).
            "payment_flow": terms_flow(&contract.terms_document),
            "payment": payment.as_ref().map(|p| json!({
                "payment_id": p.payment_id,
                "network": p.network,
                "asset": p.asset.to_checksum(None),
                "payer": p.payer.to_checksum(None),
                "amount": p.amount,
                "valid_before": p.valid_before,
                "state": p.state,
                // Escrowed payments: the lock, and what returned the money (void, refund or
                // the payer's reclaim).
                "authorize_transaction": p.authorize_tx,
                "release_transaction": p.release_tx,
            })),
            "deliverable": delivery,
            // The worker's free-form facts about the run (HIRE `metadata`), not its work:
            // shown whether or not the content is released.
            "metadata": execute::worker_metadata(&attempts),
            "verification": verification.as_ref().map(|v| v.result.clone()),
            "settlement": payment.as_ref().and_then(|p| p.settle_started_at.map(|started| json!({
                "state": p.state,
                "transaction": p.settle_tx,
                "started_at": started,
                "response": p.settle_response,
                // Retries of an unknown outcome: counted here, not written to the event log.
                "retries": contract.settlement_retries,
            }))),
            "dispute": dispute.as_ref().map(disputes::dispute_view),
            "receipt": null,
            "links": {
                "execute": self.execute_url(id),
                "events": self.events_url(id),
            },
            "created_at": contract.created_at,
            "updated_at": contract.updated_at,
        }))
    }
}

/// The payment flow the stored terms pin (`upfront` when they say so, `escrow` for escrowed
/// terms, else `authorization`), read from the signed document.
fn terms_flow(terms: &Value) -> &'static str {
    if terms
        .get("payment_flow")
        .is_some_and(|flow| !flow.is_null())
    {
        "upfront"
    } else if terms.get("escrow").is_some_and(|escrow| !escrow.is_null()) {
        "escrow"
    } else {
        "authorization"
    }
}
