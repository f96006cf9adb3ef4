//! The reason vocabulary of x402 verdicts (`invalidReason`, `errorReason`).
//!
//! Every reason has one stable code, written with the TypeScript `@x402/evm` facilitator's
//! spelling (the reference implementation) or the core spec's generic name. Facilitators
//! disagree on the vocabulary, so parsing also accepts the other spellings of the same reason
//! and maps them to that code:
//!
//! | source | examples → code |
//! |---|---|
//! | `@x402/evm` 2.27 exact/Permit2 | `invalid_exact_evm_scheme` → `invalid_scheme`, `invalid_exact_evm_authorization_value` → value mismatch, `permit2_deadline_expired` → valid-before |
//! | x402-rs `ErrorReason` | `invalid_format` → `invalid_payload`, `invalid_payment_early` → valid-after, `invalid_signature` → signature, `insufficient_funds` → insufficient balance, `unexpected_error` |
//!
//! Parsing is open: any string this crate does not know is kept verbatim as
//! [`Reason::Other`] and written back unchanged.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! reasons {
    (
        $( $(#[$doc:meta])* $variant:ident => $wire:literal, )*
        @aliases { $( $alias:literal => $target:ident, )* }
    ) => {
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
                    $( $alias => Self::$target, )*
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
    /// The token's EIP-712 `name` is not `extra.name`.
    TokenNameMismatch => "invalid_exact_evm_token_name_mismatch",
    /// The token's EIP-712 `version` is not `extra.version`.
    TokenVersionMismatch => "invalid_exact_evm_token_version_mismatch",
    /// `accepted` differs from the requirements the server sent (x402-rs; the TS facilitator
    /// names the differing field instead).
    AcceptedRequirementsMismatch => "accepted_requirements_mismatch",
    /// A Permit2 payment lacks the token allowance to the Permit2 contract.
    Permit2AllowanceRequired => "permit2_allowance_required",
    /// A Permit2 payment's `spender` is not its scheme's x402 proxy.
    Permit2InvalidSpender => "invalid_permit2_spender",
    /// The chain has no x402 Permit2 proxy (or no Permit2) at the canonical address.
    Permit2ProxyNotDeployed => "permit2_proxy_not_deployed",
    /// The EIP-2612 permit approves another amount than the Permit2 permit moves.
    Permit2612AmountMismatch => "permit2_2612_amount_mismatch",
    /// The `eip2612GasSponsoring` extension is present but malformed.
    Eip2612ExtensionInvalid => "invalid_eip2612_extension_format",
    /// The EIP-2612 permit's holder is not the payer.
    Eip2612FromMismatch => "eip2612_from_mismatch",
    /// The EIP-2612 permit is for another token.
    Eip2612AssetMismatch => "eip2612_asset_mismatch",
    /// The EIP-2612 permit approves a spender other than Permit2.
    Eip2612SpenderNotPermit2 => "eip2612_spender_not_permit2",
    /// The EIP-2612 permit expires too soon to be mined.
    Eip2612DeadlineExpired => "eip2612_deadline_expired",
    /// The `erc20ApprovalGasSponsoring` extension is present but malformed.
    Erc20ApprovalExtensionInvalid => "invalid_erc20_approval_extension_format",
    /// The approval's `from` is not the payer.
    Erc20ApprovalFromMismatch => "erc20_approval_from_mismatch",
    /// The approval is for another token.
    Erc20ApprovalAssetMismatch => "erc20_approval_asset_mismatch",
    /// The approval's `spender` is not Permit2.
    Erc20ApprovalSpenderNotPermit2 => "erc20_approval_spender_not_permit2",
    /// The signed approval transaction is not sent to the payment's token.
    Erc20ApprovalTxWrongTarget => "erc20_approval_tx_wrong_target",
    /// The signed approval transaction does not call `approve`.
    Erc20ApprovalTxWrongSelector => "erc20_approval_tx_wrong_selector",
    /// The signed approval transaction approves another spender than Permit2.
    Erc20ApprovalTxWrongSpender => "erc20_approval_tx_wrong_spender",
    /// The signed approval's calldata does not decode, or approves another amount than `amount`
    /// or less than the payment moves.
    Erc20ApprovalTxInvalidCalldata => "erc20_approval_tx_invalid_calldata",
    /// The signed approval transaction is signed by someone other than the payer.
    Erc20ApprovalTxSignerMismatch => "erc20_approval_tx_signer_mismatch",
    /// The signer of the approval transaction cannot be recovered.
    Erc20ApprovalTxInvalidSignature => "erc20_approval_tx_invalid_signature",
    /// The signed approval transaction does not decode (RLP / EIP-2718).
    Erc20ApprovalTxParseFailed => "erc20_approval_tx_parse_failed",
    /// The signed approval transaction is for another chain, sends value, or is of a kind a
    /// facilitator does not relay (blob, EIP-7702).
    Erc20ApprovalTxUnsupported => "erc20_approval_tx_unsupported",
    /// The signed approval's nonce is not the payer's next one.
    Erc20ApprovalTxNonceMismatch => "erc20_approval_tx_nonce_mismatch",
    /// The signed approval's gas limit or fees are below what the chain asks or far above it
    /// (the facilitator funds the gas).
    Erc20ApprovalTxFeesOutOfRange => "erc20_approval_tx_fees_out_of_range",
    /// The approval transaction reverted or would revert.
    Erc20ApprovalTxFailed => "erc20_approval_tx_failed",
    /// The approval (or the gas funding it needed) could not be broadcast or was not mined in
    /// time.
    Erc20ApprovalBroadcastFailed => "erc20_approval_broadcast_failed",
    /// An `upto` settlement of more than the signed maximum.
    UptoSettlementExceedsAmount => "invalid_upto_evm_payload_settlement_exceeds_amount",
    /// The `upto` witness names another facilitator than this one.
    UptoFacilitatorMismatch => "upto_facilitator_mismatch",
    /// The facilitator failed while verifying.
    UnexpectedVerifyError => "unexpected_verify_error",
    /// The facilitator failed while settling.
    UnexpectedSettleError => "unexpected_settle_error",
    /// The facilitator failed, without saying in which step (x402-rs answers this for RPC
    /// failures and for reverted simulations alike, e.g. a bad signature).
    UnexpectedError => "unexpected_error",

    // `auth-capture` (x402 `scheme_auth_capture_evm.md`): the spec's own codes; where the spec
    // names a reason `exact` already has (expired authorization, bad signature, amount), its
    // spelling is an alias of that code below.
    /// `extra` lacks a required auth-capture field or holds one of the wrong type or range.
    InvalidAuthCaptureExtra => "invalid_auth_capture_extra",
    /// `extra.assetTransferMethod` is unknown, or a method this facilitator does not support
    /// (Permit2, for now).
    UnsupportedAssetTransferMethod => "unsupported_asset_transfer_method",
    /// The payload's shape is not the one `assetTransferMethod` calls for.
    PayloadMethodMismatch => "payload_method_mismatch",
    /// `captureDeadline` is at most 6 s away, or past (escrow `AfterAuthorizationExpiry`).
    CaptureDeadlineExpired => "capture_deadline_expired",
    /// Not `validBefore <= captureDeadline <= refundDeadline` (escrow `InvalidExpiries`).
    InvalidDeadlineOrdering => "invalid_deadline_ordering",
    /// `authorization.to` is not the ERC-3009 token collector of the escrow in use.
    TokenCollectorMismatch => "token_collector_mismatch",
    /// The signed nonce is not the payer-agnostic hash of the PaymentInfo the requirements and
    /// the payload's salt make.
    NonceMismatch => "nonce_mismatch",
    /// This PaymentInfo was already authorized or charged (each one can be, once).
    PaymentAlreadyCollected => "payment_already_collected",
    /// The token collector failed to move the tokens (escrow `TokenCollectionFailed`).
    TokenCollectionFailed => "token_collection_failed",
    /// The collector cannot serve this operation (escrow `InvalidCollectorForOperation`).
    InvalidCollector => "invalid_collector",
    /// The sender is not the PaymentInfo's operator (`captureAuthorizer`), escrow `InvalidSender`.
    InvalidCaptureAuthorizer => "invalid_capture_authorizer",
    /// The amount exceeds uint120 (escrow `AmountOverflow`).
    AmountOverflow => "amount_overflow",
    /// A fee above 10 000 bps (escrow `FeeBpsOverflow`).
    InvalidFeeBps => "invalid_fee_bps",
    /// `minFeeBps > maxFeeBps` (escrow `InvalidFeeBpsRange`).
    InvalidFeeBpsRange => "invalid_fee_bps_range",
    /// The capture's fee is outside `[minFeeBps, maxFeeBps]` (escrow `FeeBpsOutOfRange`).
    FeeBpsOutOfRange => "fee_bps_out_of_range",
    /// A fee with no fee receiver (escrow `ZeroFeeReceiver`).
    ZeroFeeReceiver => "zero_fee_receiver",
    /// The fee receiver is not the one the PaymentInfo names (escrow `InvalidFeeReceiver`).
    InvalidFeeReceiver => "invalid_fee_receiver",
    /// A capture of more than is held in escrow (escrow `InsufficientAuthorization`).
    InsufficientAuthorization => "insufficient_authorization",
    /// Nothing is held in escrow: never authorized, or already captured, voided or reclaimed
    /// (escrow `ZeroAuthorization`).
    ZeroAuthorization => "zero_authorization",
    /// A reclaim before `captureDeadline` (escrow `BeforeAuthorizationExpiry`).
    BeforeCaptureDeadline => "before_capture_deadline",
    /// A refund at or after `refundDeadline` (escrow `AfterRefundExpiry`).
    RefundDeadlineExpired => "refund_deadline_expired",
    /// A refund of more than was captured and not yet refunded (escrow `RefundExceedsCapture`).
    RefundExceedsCapture => "refund_exceeds_capture",
    /// The operator lacks the token balance or allowance to fund a refund through the operator
    /// refund collector.
    RefundNotFunded => "refund_not_funded",

    // `auth-capture` scheme v1.1 (the `paymentFlow` wire): codes it adds.
    /// `extra.paymentFlow` is neither `escrow` nor `authorization`, `captureMode` does not fit
    /// the flow, or `extra` mixes `paymentFlow` with the removed `autoCapture: true`.
    UnsupportedPaymentFlow => "invalid_auth_capture_evm_unsupported_payment_flow",
    /// `extra.operatorType` is unknown or a type this facilitator does not implement.
    UnsupportedOperatorType => "invalid_auth_capture_evm_unsupported_operator_type",
    /// `extra.policy` is non-zero where the operator type requires none.
    InvalidPolicy => "invalid_auth_capture_evm_policy",
    /// A bound payload's `salt` is not the commitment to `receiverAuthorizer`, `policy` and
    /// `saltNonce`, or `saltNonce` is missing (bound) or present (unbound).
    SaltBindingMismatch => "invalid_auth_capture_evm_salt_binding_mismatch",
    /// A `charge` (the `authorization` flow) without a non-zero `receiverAuthorizer`, or without
    /// the server's completion.
    MissingReceiverAuthorizer => "invalid_auth_capture_evm_missing_receiver_authorizer",
    /// The receiver authorizer's signature does not recover to `extra.receiverAuthorizer`.
    AuthorizerSignature => "invalid_auth_capture_evm_authorizer_signature",

    @aliases {
        // @x402/evm 2.27 Permit2 proxy reverts and `upto` codes.
        "permit2_invalid_nonce" => NonceAlreadyUsed,
        "permit2_payment_too_early" => ValidAfter,
        "permit2_invalid_destination" => RecipientMismatch,
        "permit2_invalid_owner" => InvalidPayload,
        "permit2_invalid_amount" => ValueMismatch,
        "invalid_upto_evm_scheme" => InvalidScheme,
        "invalid_upto_evm_network_mismatch" => NetworkMismatch,
        "invalid_upto_evm_transaction_failed" => TransactionFailed,
        "upto_amount_exceeds_permitted" => UptoSettlementExceedsAmount,
        "upto_unauthorized_facilitator" => UptoFacilitatorMismatch,
        // x402 auth-capture v1.1 spells every code `invalid_auth_capture_evm_*`.
        "invalid_auth_capture_evm_payload_format" => InvalidPayload,
        "invalid_auth_capture_evm_scheme" => InvalidScheme,
        "invalid_auth_capture_evm_network_mismatch" => NetworkMismatch,
        "invalid_auth_capture_evm_extra" => InvalidAuthCaptureExtra,
        "invalid_auth_capture_evm_unsupported_asset_transfer_method" => UnsupportedAssetTransferMethod,
        "invalid_auth_capture_evm_payload_method_mismatch" => PayloadMethodMismatch,
        "invalid_auth_capture_evm_capture_deadline_expired" => CaptureDeadlineExpired,
        "invalid_auth_capture_evm_refund_deadline_expired" => RefundDeadlineExpired,
        "invalid_auth_capture_evm_deadline_ordering" => InvalidDeadlineOrdering,
        "invalid_auth_capture_evm_authorization_expired" => ValidBefore,
        "invalid_auth_capture_evm_authorization_not_yet_valid" => ValidAfter,
        "invalid_auth_capture_evm_signature" => Signature,
        "invalid_auth_capture_evm_amount_mismatch" => ValueMismatch,
        "invalid_auth_capture_evm_token_collector_mismatch" => TokenCollectorMismatch,
        "invalid_auth_capture_evm_token_mismatch" => AssetMismatch,
        "invalid_auth_capture_evm_nonce_mismatch" => NonceMismatch,
        "invalid_auth_capture_evm_insufficient_balance" => InsufficientBalance,
        "invalid_auth_capture_evm_simulation_failed" => SimulationFailed,
        "invalid_auth_capture_evm_payment_already_collected" => PaymentAlreadyCollected,
        "invalid_auth_capture_evm_token_collection_failed" => TokenCollectionFailed,
        "invalid_auth_capture_evm_collector" => InvalidCollector,
        "invalid_auth_capture_evm_operator_mismatch" => InvalidCaptureAuthorizer,
        "invalid_auth_capture_evm_operator_not_admitted" => InvalidCaptureAuthorizer,
        "invalid_auth_capture_evm_amount_overflow" => AmountOverflow,
        "invalid_auth_capture_evm_fee_bps" => InvalidFeeBps,
        "invalid_auth_capture_evm_fee_bps_range" => InvalidFeeBpsRange,
        "invalid_auth_capture_evm_fee_bps_out_of_range" => FeeBpsOutOfRange,
        "invalid_auth_capture_evm_zero_fee_receiver" => ZeroFeeReceiver,
        "invalid_auth_capture_evm_fee_receiver" => InvalidFeeReceiver,
        "invalid_auth_capture_evm_insufficient_authorization" => InsufficientAuthorization,
        "invalid_auth_capture_evm_zero_authorization" => ZeroAuthorization,
        "invalid_auth_capture_evm_refund_exceeds_capture" => RefundExceedsCapture,
        "invalid_auth_capture_evm_transaction_reverted" => TransactionFailed,
        // x402 auth-capture spec, codes naming reasons `exact` already has.
        "invalid_payload_format" => InvalidPayload,
        "network_mismatch" => NetworkMismatch,
        "authorization_expired" => ValidBefore,
        "authorization_not_yet_valid" => ValidAfter,
        "invalid_auth_capture_signature" => Signature,
        "amount_mismatch" => ValueMismatch,
        "token_mismatch" => AssetMismatch,
        "insufficient_balance" => InsufficientBalance,
        "simulation_failed" => SimulationFailed,
        "transaction_reverted" => TransactionFailed,
        // @x402/evm 2.27 `exact` facilitator.
        "invalid_exact_evm_scheme" => InvalidScheme,
        "invalid_exact_evm_authorization_value" => ValueMismatch,
        "invalid_exact_evm_failed_to_parse_signature" => Signature,
        "eip6492_factory_not_allowed" => UndeployedSmartWallet,
        "unsupported_payload_type" => InvalidPayload,
        // @x402/evm 2.27 Permit2 flavour of the same checks.
        "invalid_permit2_signature" => Signature,
        "invalid_permit2_recipient_mismatch" => RecipientMismatch,
        "permit2_deadline_expired" => ValidBefore,
        "permit2_not_yet_valid" => ValidAfter,
        "permit2_amount_mismatch" => ValueMismatch,
        "permit2_token_mismatch" => AssetMismatch,
        "permit2_insufficient_balance" => InsufficientBalance,
        "permit2_simulation_failed" => SimulationFailed,
        // x402-rs `ErrorReason` (snake_case of its variants).
        "invalid_format" => InvalidPayload,
        "invalid_payment_amount" => ValueMismatch,
        "invalid_payment_early" => ValidAfter,
        "invalid_payment_expired" => ValidBefore,
        "chain_id_mismatch" => NetworkMismatch,
        "recipient_mismatch" => RecipientMismatch,
        "asset_mismatch" => AssetMismatch,
        "invalid_signature" => Signature,
        "transaction_simulation" => SimulationFailed,
        "insufficient_funds" => InsufficientBalance,
        "unsupported_chain" => InvalidNetwork,
        "unsupported_scheme" => InvalidScheme,
    }
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

    fn parse(wire: &str) -> Reason {
        serde_json::from_value(serde_json::Value::String(wire.to_owned())).unwrap()
    }

    #[test]
    fn known_reasons_round_trip_and_unknown_ones_are_kept() {
        for reason in [
            Reason::RecipientMismatch,
            Reason::ValueMismatch,
            Reason::NonceAlreadyUsed,
            Reason::SettlementPending,
            Reason::UnexpectedError,
        ] {
            let json = serde_json::to_string(&reason).unwrap();
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), reason);
        }
        assert_eq!(
            Reason::ValidBefore.as_str(),
            "invalid_exact_evm_payload_authorization_valid_before"
        );
        let unknown: Reason =
            serde_json::from_str("\"invalid_batch_settlement_evm_scheme\"").unwrap();
        assert_eq!(
            unknown,
            Reason::Other("invalid_batch_settlement_evm_scheme".into())
        );
        assert_eq!(
            serde_json::to_string(&unknown).unwrap(),
            "\"invalid_batch_settlement_evm_scheme\""
        );
    }

    /// Every exact-EVM reason string of `@x402/evm` 2.27 (`src/exact/facilitator/errors.ts`,
    /// the EIP-3009 and Permit2 paths) and `@x402/core` 2.27.
    #[test]
    fn official_typescript_vocabulary_maps_to_stable_codes() {
        let table = [
            ("invalid_scheme", Reason::InvalidScheme),
            ("invalid_exact_evm_scheme", Reason::InvalidScheme),
            (
                "invalid_exact_evm_network_mismatch",
                Reason::NetworkMismatch,
            ),
            ("asset_not_deployed_contract", Reason::AssetNotDeployed),
            (
                "invalid_exact_evm_missing_eip712_domain",
                Reason::MissingEip712Domain,
            ),
            (
                "invalid_exact_evm_recipient_mismatch",
                Reason::RecipientMismatch,
            ),
            ("invalid_exact_evm_signature", Reason::Signature),
            (
                "invalid_exact_evm_failed_to_parse_signature",
                Reason::Signature,
            ),
            (
                "invalid_exact_evm_payload_authorization_valid_before",
                Reason::ValidBefore,
            ),
            (
                "invalid_exact_evm_payload_authorization_valid_after",
                Reason::ValidAfter,
            ),
            (
                "invalid_exact_evm_authorization_value",
                Reason::ValueMismatch,
            ),
            (
                "invalid_exact_evm_payload_authorization_value_mismatch",
                Reason::ValueMismatch,
            ),
            (
                "invalid_exact_evm_transaction_failed",
                Reason::TransactionFailed,
            ),
            (
                "invalid_exact_evm_transfer_event_mismatch",
                Reason::TransferEventMismatch,
            ),
            (
                "invalid_exact_evm_token_name_mismatch",
                Reason::TokenNameMismatch,
            ),
            (
                "invalid_exact_evm_token_version_mismatch",
                Reason::TokenVersionMismatch,
            ),
            (
                "invalid_exact_evm_eip3009_not_supported",
                Reason::Eip3009NotSupported,
            ),
            (
                "invalid_exact_evm_nonce_already_used",
                Reason::NonceAlreadyUsed,
            ),
            (
                "invalid_exact_evm_insufficient_balance",
                Reason::InsufficientBalance,
            ),
            (
                "invalid_exact_evm_transaction_simulation_failed",
                Reason::SimulationFailed,
            ),
            ("eip6492_factory_not_allowed", Reason::UndeployedSmartWallet),
            ("unsupported_payload_type", Reason::InvalidPayload),
            ("settlement_pending", Reason::SettlementPending),
            ("invalid_permit2_signature", Reason::Signature),
            (
                "invalid_permit2_recipient_mismatch",
                Reason::RecipientMismatch,
            ),
            ("permit2_deadline_expired", Reason::ValidBefore),
            ("permit2_not_yet_valid", Reason::ValidAfter),
            ("permit2_amount_mismatch", Reason::ValueMismatch),
            ("permit2_token_mismatch", Reason::AssetMismatch),
            ("permit2_insufficient_balance", Reason::InsufficientBalance),
            ("permit2_simulation_failed", Reason::SimulationFailed),
            (
                "permit2_allowance_required",
                Reason::Permit2AllowanceRequired,
            ),
        ];
        for (wire, code) in table {
            assert_eq!(parse(wire), code, "{wire}");
        }
    }

    /// Every `ErrorReason` of x402-rs (`x402-types` `proto::ErrorReason`, snake_case).
    #[test]
    fn x402_rs_vocabulary_maps_to_stable_codes() {
        let table = [
            ("invalid_format", Reason::InvalidPayload),
            ("invalid_payment_amount", Reason::ValueMismatch),
            ("invalid_payment_early", Reason::ValidAfter),
            ("invalid_payment_expired", Reason::ValidBefore),
            ("chain_id_mismatch", Reason::NetworkMismatch),
            ("recipient_mismatch", Reason::RecipientMismatch),
            ("asset_mismatch", Reason::AssetMismatch),
            (
                "accepted_requirements_mismatch",
                Reason::AcceptedRequirementsMismatch,
            ),
            ("invalid_signature", Reason::Signature),
            ("transaction_simulation", Reason::SimulationFailed),
            ("insufficient_funds", Reason::InsufficientBalance),
            (
                "permit2_allowance_required",
                Reason::Permit2AllowanceRequired,
            ),
            ("unsupported_chain", Reason::InvalidNetwork),
            ("unsupported_scheme", Reason::InvalidScheme),
            ("unexpected_error", Reason::UnexpectedError),
        ];
        for (wire, code) in table {
            assert_eq!(parse(wire), code, "{wire}");
        }
    }

    #[test]
    fn spec_generic_names_are_their_own_codes() {
        for (wire, code) in [
            ("invalid_x402_version", Reason::InvalidX402Version),
            ("invalid_network", Reason::InvalidNetwork),
            ("invalid_payload", Reason::InvalidPayload),
            (
                "invalid_payment_requirements",
                Reason::InvalidPaymentRequirements,
            ),
            ("unexpected_verify_error", Reason::UnexpectedVerifyError),
            ("unexpected_settle_error", Reason::UnexpectedSettleError),
        ] {
            assert_eq!(parse(wire), code, "{wire}");
            assert_eq!(code.as_str(), wire);
        }
    }

    /// The verification and settlement codes of the x402 `auth-capture` EVM spec, and the
    /// escrow custom errors' reasons from its "typed simulation reverts" table.
    #[test]
    fn auth_capture_spec_vocabulary_maps_to_stable_codes() {
        let table = [
            ("invalid_payload_format", Reason::InvalidPayload),
            ("unsupported_scheme", Reason::InvalidScheme),
            ("network_mismatch", Reason::NetworkMismatch),
            ("invalid_network", Reason::InvalidNetwork),
            (
                "invalid_auth_capture_extra",
                Reason::InvalidAuthCaptureExtra,
            ),
            (
                "unsupported_asset_transfer_method",
                Reason::UnsupportedAssetTransferMethod,
            ),
            ("payload_method_mismatch", Reason::PayloadMethodMismatch),
            ("capture_deadline_expired", Reason::CaptureDeadlineExpired),
            ("invalid_deadline_ordering", Reason::InvalidDeadlineOrdering),
            ("authorization_expired", Reason::ValidBefore),
            ("authorization_not_yet_valid", Reason::ValidAfter),
            ("invalid_auth_capture_signature", Reason::Signature),
            ("amount_mismatch", Reason::ValueMismatch),
            ("token_collector_mismatch", Reason::TokenCollectorMismatch),
            ("token_mismatch", Reason::AssetMismatch),
            ("nonce_mismatch", Reason::NonceMismatch),
            ("insufficient_balance", Reason::InsufficientBalance),
            ("simulation_failed", Reason::SimulationFailed),
            ("payment_already_collected", Reason::PaymentAlreadyCollected),
            ("token_collection_failed", Reason::TokenCollectionFailed),
            ("invalid_collector", Reason::InvalidCollector),
            (
                "invalid_capture_authorizer",
                Reason::InvalidCaptureAuthorizer,
            ),
            ("amount_overflow", Reason::AmountOverflow),
            ("invalid_fee_bps", Reason::InvalidFeeBps),
            ("invalid_fee_bps_range", Reason::InvalidFeeBpsRange),
            ("fee_bps_out_of_range", Reason::FeeBpsOutOfRange),
            ("zero_fee_receiver", Reason::ZeroFeeReceiver),
            ("invalid_fee_receiver", Reason::InvalidFeeReceiver),
            (
                "insufficient_authorization",
                Reason::InsufficientAuthorization,
            ),
            ("zero_authorization", Reason::ZeroAuthorization),
            ("transaction_reverted", Reason::TransactionFailed),
        ];
        for (wire, code) in table {
            assert_eq!(parse(wire), code, "{wire}");
        }
        assert_eq!(
            parse("verification_failed"),
            Reason::Other("verification_failed".into())
        );
    }

    #[test]
    fn an_alias_is_written_back_as_its_stable_code() {
        assert_eq!(
            serde_json::to_string(&parse("invalid_signature")).unwrap(),
            "\"invalid_exact_evm_signature\""
        );
        assert_eq!(
            parse("insufficient_funds").as_str(),
            "invalid_exact_evm_insufficient_balance"
        );
    }

    /// The Permit2 and `upto` codes of `@x402/evm` 2.27 (`exact/facilitator/errors.ts`,
    /// `upto/facilitator/errors.ts`) and the `invalid_auth_capture_evm_*` spelling of the
    /// auth-capture v1.1 binding.
    #[test]
    fn permit2_upto_and_auth_capture_v1_1_vocabulary_maps_to_stable_codes() {
        let table = [
            ("invalid_permit2_spender", Reason::Permit2InvalidSpender),
            (
                "permit2_proxy_not_deployed",
                Reason::Permit2ProxyNotDeployed,
            ),
            ("permit2_invalid_nonce", Reason::NonceAlreadyUsed),
            ("permit2_payment_too_early", Reason::ValidAfter),
            (
                "permit2_2612_amount_mismatch",
                Reason::Permit2612AmountMismatch,
            ),
            (
                "invalid_eip2612_extension_format",
                Reason::Eip2612ExtensionInvalid,
            ),
            (
                "eip2612_spender_not_permit2",
                Reason::Eip2612SpenderNotPermit2,
            ),
            ("invalid_upto_evm_scheme", Reason::InvalidScheme),
            (
                "invalid_upto_evm_payload_settlement_exceeds_amount",
                Reason::UptoSettlementExceedsAmount,
            ),
            (
                "upto_amount_exceeds_permitted",
                Reason::UptoSettlementExceedsAmount,
            ),
            (
                "upto_unauthorized_facilitator",
                Reason::UptoFacilitatorMismatch,
            ),
            ("upto_facilitator_mismatch", Reason::UptoFacilitatorMismatch),
            (
                "invalid_upto_evm_transaction_failed",
                Reason::TransactionFailed,
            ),
            (
                "invalid_auth_capture_evm_nonce_mismatch",
                Reason::NonceMismatch,
            ),
            (
                "invalid_auth_capture_evm_extra",
                Reason::InvalidAuthCaptureExtra,
            ),
            (
                "invalid_auth_capture_evm_unsupported_payment_flow",
                Reason::UnsupportedPaymentFlow,
            ),
            (
                "invalid_auth_capture_evm_salt_binding_mismatch",
                Reason::SaltBindingMismatch,
            ),
        ];
        for (wire, code) in table {
            assert_eq!(parse(wire), code, "{wire}");
        }
    }
}
