//! A payment between its checks and its row: the checked escrowed submission, the stored
//! spellings of its key and bounds, the reason a refused `authorize` is answered with, and the answer
//! when the facilitator cannot be asked. Shared by the plain (`payment`) and the escrowed
//! (`authorize`) paths, which otherwise know nothing of each other.

use alloy::primitives::{Address, U256};
use hiregate_contracts::money::Network;
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

/// A payment key as the store holds it: the network, asset and payer typed (the store writes
/// their spelling), the nonce in its stored `0x` spelling.
pub(super) struct StoredKey {
    pub(super) network: Network,
    pub(super) asset: Address,
    pub(super) payer: Address,
    pub(super) nonce: String,
}

impl StoredKey {
    pub(super) fn of(key: &hiregate_payments::PaymentKey) -> Self {
        Self {
            network: key.network,
            asset: key.asset,
            payer: key.payer,
            nonce: key.nonce.to_string(),
        }
    }
}
