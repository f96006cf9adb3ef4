//! A payment between its checks and its row: the checked escrowed submission, the stored
//! spellings of its key and bounds, the reason a refused `authorize` is answered with, and the answer
//! when the facilitator cannot be asked. Shared by the plain (`payment`) and the escrowed
//! (`authorize`) paths, which otherwise know nothing of each other.

use alloy::primitives::U256;
use hiregate_payments::{PaymentIdentifier, PaymentPayload};
use serde_json::Value;

use super::error::{ErrorCode, HireError};

/// The reason a payment whose `authorize` the chain refused is answered with (the stored
/// state is [`PaymentState::AuthorizationRefused`](hiregate_store::states::PaymentState)).
pub(super) const AUTHORIZATION_REFUSED: &str = "authorization_refused";

/// A checked escrowed payment, ready to be stored.
pub(super) struct EscrowedSubmission<'a> {
    pub(super) payload: &'a PaymentPayload,
    pub(super) payload_json: Value,
    pub(super) payload_hash: String,
    pub(super) identifier: Option<PaymentIdentifier>,
}

pub(super) fn facilitator_unavailable(why: &str) -> HireError {
    HireError::unavailable(
        ErrorCode::FacilitatorUnavailable,
        format!(
            "the payment could not be verified right now ({why}); nothing was executed or \
             charged, retry later"
        ),
        5,
    )
}

pub(super) fn to_i64(value: U256) -> i64 {
    u64::try_from(value)
        .ok()
        .and_then(|v| i64::try_from(v).ok())
        .unwrap_or(i64::MAX)
}

/// The stored spelling of a payment key: CAIP-2 network, EIP-55 asset and payer, `0x` nonce.
pub(super) struct StoredKey {
    pub(super) network: String,
    pub(super) asset: String,
    pub(super) payer: String,
    pub(super) nonce: String,
}

impl StoredKey {
    pub(super) fn of(key: &hiregate_payments::PaymentKey) -> Self {
        Self {
            network: key.network.as_str().to_owned(),
            asset: key.asset.to_checksum(None),
            payer: key.payer.to_checksum(None),
            nonce: key.nonce.to_string(),
        }
    }
}
