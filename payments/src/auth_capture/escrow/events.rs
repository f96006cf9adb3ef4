//! What the chain says about an escrowed payment: its escrow events (`PaymentAuthorized`,
//! `Charged`, `Captured`, `Voided`, `Reclaimed`, `Refunded`), decoded from logs and summed.

use alloy::primitives::{Address, B256, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{Filter, Log};
use alloy::sol_types::SolEvent;
use alloy::transports::TransportError;

use super::super::abi::IAuthCaptureEscrow;

/// One escrow event of a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EscrowEventKind {
    /// Funds moved payer → escrow (the operator's token store).
    Authorized {
        /// Amount held.
        amount: U256,
        /// Collector that pulled the funds.
        token_collector: Address,
    },
    /// Funds moved payer → receiver and fee receiver in one step.
    Charged {
        /// Amount charged.
        amount: U256,
        /// Fee taken.
        fee_bps: u16,
        /// Who got the fee.
        fee_receiver: Address,
    },
    /// Escrow → receiver and fee receiver.
    Captured {
        /// Amount captured.
        amount: U256,
        /// Fee taken.
        fee_bps: u16,
        /// Who got the fee.
        fee_receiver: Address,
    },
    /// Escrow → payer, by the operator.
    Voided {
        /// Amount returned.
        amount: U256,
    },
    /// Escrow → payer, by the payer after `captureDeadline`.
    Reclaimed {
        /// Amount returned.
        amount: U256,
    },
    /// Refund collector → payer, after a capture.
    Refunded {
        /// Amount refunded.
        amount: U256,
        /// Collector that funded it.
        token_collector: Address,
    },
}

/// An escrow event with where it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowEvent {
    /// What happened.
    pub kind: EscrowEventKind,
    /// The transaction.
    pub tx_hash: Option<TxHash>,
    /// Its block.
    pub block_number: Option<u64>,
    /// Position in the block.
    pub log_index: Option<u64>,
}

/// What a payment's events add up to, in atomic units: the chain's verdict on its outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EscrowTotals {
    /// Locked by `authorize`.
    pub authorized: U256,
    /// Paid out by `charge` (authorize and capture in one).
    pub charged: U256,
    /// Paid out from escrow by `capture` (fees included).
    pub captured: U256,
    /// Fees within `captured` and `charged` (rounded down per capture, as the escrow does).
    pub fees: U256,
    /// Returned by the operator's `void`.
    pub voided: U256,
    /// Returned by the payer's `reclaim`.
    pub reclaimed: U256,
    /// Returned by `refund` after a capture.
    pub refunded: U256,
}

impl EscrowTotals {
    /// Sums `events` (of one payment).
    #[must_use]
    pub fn of(events: &[EscrowEvent]) -> Self {
        let fee = |amount: U256, bps: u16| amount * U256::from(bps) / U256::from(10_000u32);
        events.iter().fold(Self::default(), |mut totals, event| {
            match event.kind {
                EscrowEventKind::Authorized { amount, .. } => totals.authorized += amount,
                EscrowEventKind::Charged {
                    amount, fee_bps, ..
                } => {
                    totals.charged += amount;
                    totals.fees += fee(amount, fee_bps);
                }
                EscrowEventKind::Captured {
                    amount, fee_bps, ..
                } => {
                    totals.captured += amount;
                    totals.fees += fee(amount, fee_bps);
                }
                EscrowEventKind::Voided { amount } => totals.voided += amount,
                EscrowEventKind::Reclaimed { amount } => totals.reclaimed += amount,
                EscrowEventKind::Refunded { amount, .. } => totals.refunded += amount,
            }
            totals
        })
    }

    /// Still locked in escrow: authorized and not yet captured, voided or reclaimed.
    #[must_use]
    pub fn held(&self) -> U256 {
        self.authorized
            .saturating_sub(self.captured + self.voided + self.reclaimed)
    }
}

/// The escrow events a payment's outcome is read from, by signature (for log filters).
pub const PAYMENT_EVENT_SIGNATURES: [B256; 6] = [
    IAuthCaptureEscrow::PaymentAuthorized::SIGNATURE_HASH,
    IAuthCaptureEscrow::PaymentCharged::SIGNATURE_HASH,
    IAuthCaptureEscrow::PaymentCaptured::SIGNATURE_HASH,
    IAuthCaptureEscrow::PaymentVoided::SIGNATURE_HASH,
    IAuthCaptureEscrow::PaymentReclaimed::SIGNATURE_HASH,
    IAuthCaptureEscrow::PaymentRefunded::SIGNATURE_HASH,
];

/// One escrow log as the payment it concerns (`getHash(paymentInfo)`) and what happened;
/// `None` for any other log.
#[must_use]
pub fn decode_payment_event(log: &Log) -> Option<(B256, EscrowEvent)> {
    use IAuthCaptureEscrow as E;
    let (hash, kind) = if let Ok(event) = E::PaymentAuthorized::decode_log(&log.inner) {
        (
            event.paymentInfoHash,
            EscrowEventKind::Authorized {
                amount: event.amount,
                token_collector: event.tokenCollector,
            },
        )
    } else if let Ok(event) = E::PaymentCharged::decode_log(&log.inner) {
        (
            event.paymentInfoHash,
            EscrowEventKind::Charged {
                amount: event.amount,
                fee_bps: event.feeBps,
                fee_receiver: event.feeReceiver,
            },
        )
    } else if let Ok(event) = E::PaymentCaptured::decode_log(&log.inner) {
        (
            event.paymentInfoHash,
            EscrowEventKind::Captured {
                amount: event.amount,
                fee_bps: event.feeBps,
                fee_receiver: event.feeReceiver,
            },
        )
    } else if let Ok(event) = E::PaymentVoided::decode_log(&log.inner) {
        (
            event.paymentInfoHash,
            EscrowEventKind::Voided {
                amount: event.amount,
            },
        )
    } else if let Ok(event) = E::PaymentReclaimed::decode_log(&log.inner) {
        (
            event.paymentInfoHash,
            EscrowEventKind::Reclaimed {
                amount: event.amount,
            },
        )
    } else if let Ok(event) = E::PaymentRefunded::decode_log(&log.inner) {
        (
            event.paymentInfoHash,
            EscrowEventKind::Refunded {
                amount: event.amount,
                token_collector: event.tokenCollector,
            },
        )
    } else {
        return None;
    };
    Some((
        hash,
        EscrowEvent {
            kind,
            tx_hash: log.transaction_hash,
            block_number: log.block_number,
            log_index: log.log_index,
        },
    ))
}

/// The escrow events of the payment whose `getHash` is `payment_hash`, from `from_block` on,
/// oldest first.
pub async fn payment_events(
    provider: &DynProvider,
    escrow: Address,
    payment_hash: B256,
    from_block: u64,
) -> Result<Vec<EscrowEvent>, TransportError> {
    let filter = Filter::new()
        .address(escrow)
        .event_signature(PAYMENT_EVENT_SIGNATURES.to_vec())
        .topic1(payment_hash)
        .from_block(from_block);
    let mut logs = provider.get_logs(&filter).await?;
    logs.sort_by_key(|log| (log.block_number, log.log_index));
    Ok(logs
        .iter()
        .filter_map(decode_payment_event)
        .map(|(_, event)| event)
        .collect())
}
