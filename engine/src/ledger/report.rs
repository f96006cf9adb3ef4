//! The words of a reconciliation report that both of its sections use: a mismatch and its
//! kinds, a tally, the error that stops a run, and how amounts are written (decimal strings:
//! uint256 does not fit JSON numbers). The `exact` section ([`super::reconcile`]) and the escrow
//! section ([`super::escrow`]) both speak them; this module knows neither.

use alloy::primitives::U256;
use serde::Serialize;

use hiregate_contracts::id::{ContractId, PaymentId};
use hiregate_store::{StoreError, states::PaymentState};

/// Reconciliation could not run. A mismatch is not an error: it is in the report.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// `network` names no `[chains]` entry.
    #[error("network {0} is not configured under [chains]")]
    NetworkNotConfigured(String),
    /// No chain to reconcile against.
    #[error("no [chains] configured: nothing to reconcile against")]
    NoChains,
    /// `from_block` is after `to_block`.
    #[error("from_block {from} is after to_block {to}")]
    InvalidRange {
        /// Requested first block.
        from: u64,
        /// Requested last block.
        to: u64,
    },
    /// The chain's node could not be asked.
    #[error("the node of {network} is unreachable")]
    Rpc {
        /// CAIP-2 network.
        network: String,
        /// The RPC failure.
        #[source]
        source: alloy::transports::TransportError,
    },
    /// The node serves another chain than the configuration says.
    #[error("the node configured for {network} reports chain id {actual}")]
    WrongChain {
        /// CAIP-2 network configured.
        network: String,
        /// Chain id the node reports.
        actual: u64,
    },
    /// A stored payment has a value that does not parse.
    #[error("stored payment {payment_id} has an invalid {field}")]
    CorruptPayment {
        /// Payment id.
        payment_id: PaymentId,
        /// Which field.
        field: &'static str,
    },
    /// The store failed.
    #[error("database unavailable")]
    Store(#[from] StoreError),
}

/// Kinds of disagreement between the store and the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MismatchKind {
    /// (a) A settled record without its on-chain transfer.
    SettledWithoutTransfer,
    /// (b) An authorization used on chain that the store does not record as settled there.
    UsedNotRecordedSettled,
    /// (c) A transfer to a payout address that no stored payment explains.
    OrphanTransfer,
    /// An escrow step the store records that the escrow's events do not show.
    EscrowRecordedWithoutEvent,
    /// An escrow event of a stored payment that the store does not record.
    EscrowEventNotRecorded,
    /// A stored escrowed payment whose `PaymentInfo` cannot be rebuilt.
    EscrowPaymentUnreadable,
}

impl MismatchKind {
    /// Every kind, in report order.
    pub const ALL: [Self; 6] = [
        Self::SettledWithoutTransfer,
        Self::UsedNotRecordedSettled,
        Self::OrphanTransfer,
        Self::EscrowRecordedWithoutEvent,
        Self::EscrowEventNotRecorded,
        Self::EscrowPaymentUnreadable,
    ];

    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SettledWithoutTransfer => "settled_without_transfer",
            Self::UsedNotRecordedSettled => "used_not_recorded_settled",
            Self::OrphanTransfer => "orphan_transfer",
            Self::EscrowRecordedWithoutEvent => "escrow_recorded_without_event",
            Self::EscrowEventNotRecorded => "escrow_event_not_recorded",
            Self::EscrowPaymentUnreadable => "escrow_payment_unreadable",
        }
    }
}

/// A count and a sum of atomic units.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// How many.
    pub count: u64,
    /// Atomic units, decimal (uint256 does not fit JSON numbers).
    #[serde(serialize_with = "decimal")]
    pub amount: U256,
}

impl Tally {
    pub(super) fn add(&mut self, amount: U256) {
        self.count += 1;
        self.amount = self.amount.saturating_add(amount);
    }
}

pub(super) fn decimal<S: serde::Serializer>(
    value: &U256,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

/// One disagreement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// Which kind.
    pub kind: MismatchKind,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract.
    pub asset: String,
    /// The stored payment concerned, if any (none for orphans).
    pub payment_id: Option<PaymentId>,
    /// Its contract.
    pub contract_id: Option<ContractId>,
    /// Its stored state.
    pub payment_state: Option<PaymentState>,
    /// Payer (stored, or the transfer's sender for orphans).
    pub payer: Option<String>,
    /// Payout address (stored, or the transfer's recipient).
    pub pay_to: Option<String>,
    /// Atomic units (stored, or transferred).
    #[serde(serialize_with = "optional_decimal")]
    pub amount: Option<U256>,
    /// The transaction concerned (stored for (a), on chain for (b) and (c)).
    pub transaction: Option<String>,
    /// Its block, when known.
    pub block: Option<u64>,
    /// Escrowed payments: `getHash(paymentInfo)`, when it could be rebuilt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_hash: Option<String>,
    /// What exactly disagrees.
    pub detail: String,
}

pub(super) fn optional_decimal<S: serde::Serializer>(
    value: &Option<U256>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serializer.collect_str(value),
        None => serializer.serialize_none(),
    }
}
