//! The values the paid hire's steps write ([`super::execution`], [`super::advance`]): how an
//! attempt ended, a delivered piece, a verification result, and the outcomes of an
//! authorization and a settlement. Plain data, so that the steps' SQL in both modules can take
//! them without the two modules importing each other.

use chrono::{DateTime, Utc};

use hiregate_contracts::{
    id::{AttemptId, ContractId, DeliverableId, VerificationId},
    state::ContractState,
};

use crate::states::{AttemptState, PaymentState, PieceKind};

/// How an attempt ended (or paused).
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    /// New attempt state.
    pub state: AttemptState,
    /// HTTP status the worker answered.
    pub http_status: Option<u16>,
    /// Error details for a failed attempt.
    pub error: Option<serde_json::Value>,
    /// The worker's task id (pending work).
    pub worker_task_id: Option<String>,
    /// The worker's poll URL (pending work).
    pub poll_url: Option<String>,
    /// The worker's free-form `metadata` (a delivery).
    pub worker_metadata: Option<serde_json::Value>,
    /// When pending work expects to finish, as the worker wrote it.
    pub estimated_completion: Option<String>,
    /// End time; `None` while the work is pending.
    pub finished_at: Option<DateTime<Utc>>,
}

/// One stored piece of a delivery: the deliverable document itself (position 0) or a fetched
/// evidence file (positions 1…).
#[derive(Clone, PartialEq)]
pub struct NewDeliverable {
    /// Deliverable id (`dlv_…`).
    pub deliverable_id: DeliverableId,
    /// Contract.
    pub contract_id: ContractId,
    /// Attempt that produced it.
    pub attempt_id: AttemptId,
    /// Order within the attempt.
    pub position: u32,
    /// File name, when known.
    pub name: Option<String>,
    /// The document, or a fetched evidence file.
    pub kind: PieceKind,
    /// Media type.
    pub media_type: Option<String>,
    /// `sha256:<hex>` of `content`.
    pub digest: String,
    /// The bytes, kept for dispute replay.
    pub content: Vec<u8>,
    /// Where evidence was fetched from.
    pub source_url: Option<String>,
    /// When stored.
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for NewDeliverable {
    // The bytes are the parties' data and can be large: show their size only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewDeliverable")
            .field("deliverable_id", &self.deliverable_id)
            .field("contract_id", &self.contract_id)
            .field("position", &self.position)
            .field("kind", &self.kind)
            .field("digest", &self.digest)
            .field("content_bytes", &self.content.len())
            .finish_non_exhaustive()
    }
}

/// A stored deliverable piece.
pub type DeliverableRecord = NewDeliverable;

/// A verification result to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewVerification {
    /// Verification id (`vrf_…`).
    pub verification_id: VerificationId,
    /// Contract.
    pub contract_id: ContractId,
    /// Attempt judged.
    pub attempt_id: String,
    /// Policy applied.
    pub policy_id: String,
    /// Its version.
    pub policy_version: String,
    /// Its hash.
    pub policy_hash: String,
    /// Verdict.
    pub passed: bool,
    /// Score.
    pub score: f64,
    /// Reason codes.
    pub reason_codes: Vec<u16>,
    /// `passed`, `failed` or `inconclusive`.
    pub status: String,
    /// Hash binding the verdict.
    pub verifier_result_hash: String,
    /// The full result document.
    pub result: serde_json::Value,
    /// When judged.
    pub created_at: DateTime<Utc>,
}

/// A stored verification result.
pub type VerificationRecord = NewVerification;

/// A settlement outcome to record with [`Store::finish_settlement`](super::Store::finish_settlement).
#[derive(Debug, Clone)]
pub struct SettlementOutcome {
    /// Contract state after: `settled`, `settlement_failed` or `settlement_unknown`.
    pub contract_state: ContractState,
    /// Payment state after (the same names; see [`PaymentState::after_settlement`]).
    pub payment_state: PaymentState,
    /// Transaction hash, when one is known.
    pub transaction: Option<String>,
    /// The facilitator's settle response, when it answered.
    pub response: Option<serde_json::Value>,
    /// A metered escrowed payment's void of what its capture left locked.
    pub remainder_transaction: Option<String>,
}

/// What [`Store::finish_authorization`](super::Store::finish_authorization) records.
#[derive(Debug, Clone, Copy)]
pub struct AuthorizationOutcome<'a> {
    /// `paid` or `offered`.
    pub contract_state: ContractState,
    /// [`PaymentState::Authorized`] or [`PaymentState::AuthorizationRefused`].
    pub payment_state: PaymentState,
    /// The `authorize` transaction, when one was mined.
    pub transaction: Option<&'a str>,
}
