//! The reason vocabulary of x402 verdicts (`invalidReason`, `errorReason`).
//!
//! Spellings follow the TypeScript `@x402/evm` facilitator (the reference implementation),
//! plus the core spec's generic names. Facilitators disagree on the vocabulary, so parsing is
//! open: any string this crate does not know is kept as [`Reason::Other`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! reasons {
    ($( $(#[$doc:meta])* $variant:ident => $wire:literal, )*) => {
        /// Why a payment was refused or a settlement failed.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Reason {
            $( $(#[$doc])* $variant, )*
            /// A reason outside this vocabulary, kept verbatim.
            Other(String),
        }

        impl Reason {
            /// The reason as written on the wire.
            #[must_use]
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $wire, )*
                    Self::Other(other) => other,
                }
            }
        }

        impl FromStr for Reason {
            type Err = std::convert::Infallible;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Ok(match s {
                    $( $wire => Self::$variant, )*
                    other => Self::Other(other.to_owned()),
                })
            }
        }
    };
}

reasons! {
    /// `x402Version` is not 2.
    InvalidX402Version => "invalid_x402_version",
    /// The scheme is not `exact`.
    InvalidScheme => "invalid_scheme",
    /// The facilitator does not serve this network.
    InvalidNetwork => "invalid_network",
    /// The payload is not decodable or does not have the scheme's shape.
    InvalidPayload => "invalid_payload",
    /// The requirements are unusable (e.g. `asset` or `payTo` is not an address).
    InvalidPaymentRequirements => "invalid_payment_requirements",
    /// `accepted.network` differs from the requirements' network.
    NetworkMismatch => "invalid_exact_evm_network_mismatch",
    /// `accepted.asset` differs from the requirements' asset.
    AssetMismatch => "invalid_exact_evm_asset_mismatch",
    /// The facilitator is configured with a token list and this asset is not on it.
    UnsupportedAsset => "invalid_exact_evm_asset_not_supported",
    /// The asset address holds no contract.
    AssetNotDeployed => "asset_not_deployed_contract",
    /// `extra.name` / `extra.version` are missing.
    MissingEip712Domain => "invalid_exact_evm_missing_eip712_domain",
    /// `authorization.to` is not `payTo`.
    RecipientMismatch => "invalid_exact_evm_recipient_mismatch",
    /// `authorization.value` is not exactly `amount`.
    ValueMismatch => "invalid_exact_evm_payload_authorization_value_mismatch",
    /// `validBefore` is past, or too close to now to be mined.
    ValidBefore => "invalid_exact_evm_payload_authorization_valid_before",
    /// `validAfter` is in the future.
    ValidAfter => "invalid_exact_evm_payload_authorization_valid_after",
    /// The signature does not authorize this transfer for `from`.
    Signature => "invalid_exact_evm_signature",
    /// An ERC-6492 signature for a wallet that is not deployed (not supported).
    UndeployedSmartWallet => "invalid_exact_evm_payload_undeployed_smart_wallet",
    /// The EIP-3009 nonce was used or cancelled.
    NonceAlreadyUsed => "invalid_exact_evm_nonce_already_used",
    /// The asset does not answer EIP-3009 `authorizationState` / ERC-20 `balanceOf`.
    Eip3009NotSupported => "invalid_exact_evm_eip3009_not_supported",
    /// The payer holds less than the amount.
    InsufficientBalance => "invalid_exact_evm_insufficient_balance",
    /// `eth_call` of `transferWithAuthorization` reverted.
    SimulationFailed => "invalid_exact_evm_transaction_simulation_failed",
    /// The settlement transaction reverted.
    TransactionFailed => "invalid_exact_evm_transaction_failed",
    /// The settlement transaction has no matching `Transfer` event.
    TransferEventMismatch => "invalid_exact_evm_transfer_event_mismatch",
    /// Broadcast, but not yet confirmed: retry `/settle` with the same payload to reconcile.
    SettlementPending => "settlement_pending",
    /// The payer's funds do not cover the payment (spec and x402-rs spelling).
    InsufficientFunds => "insufficient_funds",
    /// The facilitator failed while verifying.
    UnexpectedVerifyError => "unexpected_verify_error",
    /// The facilitator failed while settling.
    UnexpectedSettleError => "unexpected_settle_error",
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Reason {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        let Ok(reason) = raw.parse();
        Ok(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_reasons_round_trip_and_unknown_ones_are_kept() {
        for reason in [
            Reason::RecipientMismatch,
            Reason::ValueMismatch,
            Reason::NonceAlreadyUsed,
            Reason::SettlementPending,
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), reason);
        }
        assert_eq!(
            Reason::ValidBefore.as_str(),
            "invalid_exact_evm_payload_authorization_valid_before"
        );
        let unknown: Reason = serde_json::from_str("\"permit2_allowance_required\"").unwrap();
        assert_eq!(unknown, Reason::Other("permit2_allowance_required".into()));
        assert_eq!(
            serde_json::to_string(&unknown).unwrap(),
            "\"permit2_allowance_required\""
        );
    }
}
