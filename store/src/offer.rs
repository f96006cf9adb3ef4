//! What a contract's row keeps of its x402 offer: the `PaymentRequired` the contract was signed
//! with (without `error`) and the token facts the HIRE informational headers need. Written once
//! when the contract is made (the engine builds it), read back parsed with the contract.

use hiregate_payments::{PaymentRequired, PaymentRequirements};
use serde::{Deserialize, Serialize};

/// A contract's stored offer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredOffer {
    /// The x402 challenge body.
    pub payment_required: PaymentRequired,
    /// Token decimals.
    pub decimals: u8,
    /// Token symbol.
    pub symbol: String,
}

impl StoredOffer {
    /// The one way to pay this contract (the offer always has exactly one entry).
    #[must_use]
    pub fn requirements(&self) -> Option<&PaymentRequirements> {
        self.payment_required.accepts.first()
    }

    /// The challenge with `error` set.
    #[must_use]
    pub fn challenge(&self, error: Option<String>) -> PaymentRequired {
        let mut required = self.payment_required.clone();
        required.error = error;
        required
    }
}
