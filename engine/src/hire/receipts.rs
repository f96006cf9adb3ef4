//! Receipts and the audit export: `GET /v1/contracts/{id}/receipt` and
//! `GET /v1/contracts/{id}/events.jsonl`, both for the contract's parties only.
//!
//! A receipt is issued the first time it is needed after the contract reached a terminal state
//! (the receipt route or the contract view), signed with the active key, and stored write-once
//! for that outcome: every later read hands out the same bytes, even after a key rotation. A
//! contract that leaves a terminal state (an operator's dispute settles a failure, an arbiter
//! refunds a settlement) gets a new receipt for its new outcome; the old one stays true of its
//! time (`iat`). What it binds is in [`hiregate_contracts::receipt::Receipt`]; it verifies
//! offline with the JWKS.

use std::str::FromStr;

use hiregate_contracts::{
    canonical::Digest,
    id::ContractId,
    receipt::{Receipt, ReceiptDispute, ReceiptPayment},
    state::ContractState,
    token::{ISSUER, RECEIPT_TOKEN_TYPE, verify_signed_json},
};

use super::HireService;
use super::error::{ErrorCode, HireError};
use hiregate_contracts::id::PrincipalId;
use hiregate_store::{ContractRecord, ReceiptRecord, StoreError};

/// Events read per query while exporting a log.
const EXPORT_PAGE: u32 = 500;

impl HireService {
    /// The contract `contract_id` if `caller` is its seeker or its worker's operator; anyone
    /// else learns nothing (404, as for the contract view).
    pub(crate) async fn contract_for_party(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
    ) -> Result<ContractRecord, HireError> {
        let store = &self.inner.store;
        let not_found = || HireError::not_found("contract");
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or_else(not_found)?;
        let allowed = if caller.is_seeker() {
            &contract.seeker_id == caller
        } else {
            store
                .get_worker(&contract.worker_id)
                .await?
                .is_some_and(|listing| &listing.operator_id == caller)
        };
        if allowed {
            Ok(contract)
        } else {
            Err(not_found())
        }
    }

    /// `GET /v1/contracts/{id}/receipt`: the signed receipt; 409 `contract_not_terminal` while
    /// the contract can still move.
    pub async fn contract_receipt(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
    ) -> Result<ReceiptRecord, HireError> {
        let contract = self.contract_for_party(caller, contract_id).await?;
        self.receipt_of(&contract).await?.ok_or_else(|| {
            HireError::conflict(
                ErrorCode::ContractNotTerminal,
                format!(
                    "contract is `{}`: a receipt is issued once it is settled, voided, failed, \
                     cancelled or expired",
                    contract.state
                ),
            )
        })
    }

    /// The receipt of `contract`, issuing and storing it on first use; `None` while the
    /// contract is not in a terminal state.
    pub(crate) async fn receipt_of(
        &self,
        contract: &ContractRecord,
    ) -> Result<Option<ReceiptRecord>, HireError> {
        let store = &self.inner.store;
        let state = contract.state;
        if !state.is_terminal() {
            return Ok(None);
        }
        if let Some(stored) = store
            .get_receipt(contract.contract_id.as_str(), Some(state))
            .await?
        {
            return Ok(Some(stored));
        }
        if let Some(legacy) = store
            .get_receipt(contract.contract_id.as_str(), None)
            .await?
        {
            let vouches_for_state = verify_signed_json::<Receipt>(
                &legacy.token,
                &self.inner.keys.jwks(),
                RECEIPT_TOKEN_TYPE,
            )
            .is_ok_and(|receipt| receipt.outcome == state);
            if vouches_for_state {
                return Ok(Some(legacy));
            }
        }
        let issued_at = self.now();
        let receipt = self
            .build_receipt(contract, state, issued_at.timestamp())
            .await?;
        let token = self
            .inner
            .keys
            .sign_json(RECEIPT_TOKEN_TYPE, &receipt)
            .map_err(HireError::internal)?;
        let stored = store
            .insert_receipt_once(&ReceiptRecord {
                contract_id: contract.contract_id.clone(),
                outcome: Some(state),
                kid: self.inner.keys.active_kid().to_string(),
                token,
                issued_at,
            })
            .await?;
        Ok(Some(stored))
    }

    async fn build_receipt(
        &self,
        contract: &ContractRecord,
        outcome: ContractState,
        iat: i64,
    ) -> Result<Receipt, HireError> {
        let store = &self.inner.store;
        let id = contract.contract_id.as_str();
        let payment = store.payment_of_contract(id).await?;
        let deliverables = store.latest_deliverables(id).await?;
        let verification = store.latest_verification(id).await?;
        let dispute = store.dispute_of_contract(id).await?;
        let corrupt = |what: &str| {
            HireError::from(StoreError::corrupt(
                "contract",
                &format!("{id}: stored {what} is not a valid digest"),
            ))
        };
        let digest = |raw: &str, what: &str| Digest::from_str(raw).map_err(|_| corrupt(what));
        Ok(Receipt {
            iss: ISSUER.to_owned(),
            sub: ContractId::from_str(id).map_err(HireError::internal)?,
            iat,
            terms_hash: digest(&contract.terms_hash, "terms_hash")?,
            outcome,
            payment: payment.map(|p| ReceiptPayment {
                network: p.network.to_string(),
                asset: p.asset.to_checksum(None),
                payer: p.payer.to_checksum(None),
                nonce: p.nonce,
                amount: p.amount,
                tx_hash: p.settle_tx,
            }),
            deliverable_digests: deliverables
                .iter()
                .map(|d| digest(&d.digest, "deliverable digest"))
                .collect::<Result<_, _>>()?,
            policy_hash: verification
                .as_ref()
                .map(|v| digest(&v.policy_hash, "policy_hash"))
                .transpose()?,
            verifier_result_hash: verification
                .as_ref()
                .map(|v| digest(&v.verifier_result_hash, "verifier_result_hash"))
                .transpose()?,
            verification_status: verification.map(|v| v.status),
            // `decided_by` names how it was decided: `replay`, `admin` (the arbiter) or `system`
            // (the arbiter stayed silent until the deadline: reason `arbiter_silent`).
            dispute: dispute.and_then(|d| {
                Some(ReceiptDispute {
                    dispute_id: d.dispute_id.into(),
                    decision: d.decision?,
                    decided_by: d.decided_by.map(|by| by.to_string()).unwrap_or_default(),
                    reason: d.decision_reason.unwrap_or_default(),
                })
            }),
        })
    }

    /// `GET /v1/contracts/{id}/events.jsonl`: the whole event log, oldest first, one JSON
    /// object per line: the SSE `data:` fields plus `correlation_id`.
    pub async fn export_events_jsonl(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
    ) -> Result<String, HireError> {
        let contract = self.contract_for_party(caller, contract_id).await?;
        let store = &self.inner.store;
        let mut out = String::new();
        let mut after = 0;
        loop {
            let page = store
                .list_contract_events(contract.contract_id.as_str(), after, EXPORT_PAGE)
                .await?;
            for event in &page {
                let line = serde_json::json!({
                    "contract_id": event.contract_id,
                    "seq": event.seq,
                    "at": event.at,
                    "actor": event.actor,
                    "correlation_id": event.correlation_id,
                    "kind": event.kind,
                    "from_state": event.from_state,
                    "to_state": event.to_state,
                    "details": event.details,
                });
                out.push_str(&line.to_string());
                out.push('\n');
                after = event.seq;
            }
            if page.len() < EXPORT_PAGE as usize {
                return Ok(out);
            }
        }
    }
}
