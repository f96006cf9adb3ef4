//! The server's completion of a v1.1 `charge` (`paymentFlow: authorization`): the client signs
//! its token authorization for the maximum; before `/settle` the resource server adds the amount
//! it charges (any amount up to the maximum: pay for what was delivered), the fee and its
//! receiver, and the receiver authorizer's EIP-712 `Charge` signature over exactly those values
//! (`scheme_auth_capture_evm.md`, "Completing the payload for settlement" and "Authorizer
//! signatures"). `/verify` takes the raw form; `/settle` requires the completed one.
//!
//! The escrow in use here is the v1.0 deployment, whose `charge` takes `uint16 feeBps`; the v1.1
//! `feeAmount` field is refused as the wrong fee field for this deployment, as the spec asks.

use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::signers::Signer;
use alloy::sol_types::{Eip712Domain, SolStruct};
use serde_json::Value;

use super::{AuthCapturePayment, Refusal};
use crate::reason::Reason;
use crate::wire::{DecimalU256, PaymentPayload};

alloy::sol! {
    /// The v1.0 operator `Charge` type the receiver authorizer signs.
    #[derive(Debug)]
    struct Charge {
        bytes32 paymentInfoHash;
        uint256 amount;
        address tokenCollector;
        bytes32 collectorDataHash;
        uint16 feeBps;
        address feeReceiver;
    }
}

const COMPLETION_KEYS: [&str; 5] = [
    "amount",
    "feeBps",
    "feeAmount",
    "feeReceiver",
    "authorizerSignature",
];

/// The server-added fields of a completed `charge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeCompletion {
    /// What to charge: more than 0, at most the signed maximum.
    pub amount: U256,
    /// The fee, in `[minFeeBps, maxFeeBps]`.
    pub fee_bps: u16,
    /// Who gets the fee: the offer's `feeRecipient` when it names one.
    pub fee_receiver: Address,
    /// The receiver authorizer's `Charge` signature.
    pub authorizer_signature: Bytes,
}

/// The operator EIP-712 domain: `{name: "x402 Auth Capture Operator", version: "1", chainId,
/// verifyingContract: captureAuthorizer}`.
#[must_use]
pub fn operator_domain(chain_id: u64, capture_authorizer: Address) -> Eip712Domain {
    Eip712Domain::new(
        Some("x402 Auth Capture Operator".into()),
        Some("1".into()),
        Some(U256::from(chain_id)),
        Some(capture_authorizer),
        None,
    )
}

impl ChargeCompletion {
    /// The completion in a payload: `Ok(None)` when none of its fields is there, an error for
    /// a partial group, a mistyped field, or the v1.1 `feeAmount` (this deployment takes bps).
    pub fn from_payload(payload: &Value) -> Result<Option<Self>, Reason> {
        let present: Vec<_> = COMPLETION_KEYS
            .iter()
            .filter(|key| payload.get(**key).is_some())
            .collect();
        if present.is_empty() {
            return Ok(None);
        }
        if payload.get("feeAmount").is_some() {
            return Err(Reason::InvalidPayload);
        }
        let bad = || Reason::InvalidPayload;
        let text = |key: &str| payload.get(key).and_then(Value::as_str).ok_or_else(bad);
        let amount: DecimalU256 = text("amount")?.parse().map_err(|_| bad())?;
        let fee_bps = payload
            .get("feeBps")
            .and_then(Value::as_u64)
            .and_then(|bps| u16::try_from(bps).ok())
            .ok_or_else(bad)?;
        Ok(Some(Self {
            amount: amount.get(),
            fee_bps,
            fee_receiver: text("feeReceiver")?.parse().map_err(|_| bad())?,
            authorizer_signature: text("authorizerSignature")?.parse().map_err(|_| bad())?,
        }))
    }

    /// The digest the receiver authorizer signs for this charge of `payment`.
    #[must_use]
    pub fn signing_hash(&self, payment: &AuthCapturePayment) -> B256 {
        Charge {
            paymentInfoHash: payment.payment_hash(),
            amount: self.amount,
            tokenCollector: payment.addresses.erc3009_collector,
            collectorDataHash: keccak256(&payment.payload.signature),
            feeBps: self.fee_bps,
            feeReceiver: self.fee_receiver,
        }
        .eip712_signing_hash(&operator_domain(
            payment.chain_id,
            payment.extra.capture_authorizer,
        ))
    }

    /// The spec's checks of a completed charge: a receiver authorizer exists and signed exactly
    /// these values (ECDSA), the amount is positive and within the signed maximum, the fee
    /// within the offer's bounds, the fee receiver the offer's when it names one (and never
    /// zero with a fee).
    pub fn check(&self, payment: &AuthCapturePayment) -> Result<(), Refusal> {
        let Some(authorizer) = payment.extra.receiver_authorizer else {
            return Err(Reason::MissingReceiverAuthorizer.into());
        };
        if self.amount.is_zero() || self.amount > payment.info.max_amount() {
            return Err(Reason::ValueMismatch.into());
        }
        let extra = &payment.extra;
        if self.fee_bps < extra.min_fee_bps || self.fee_bps > extra.max_fee_bps {
            return Err(Reason::FeeBpsOutOfRange.into());
        }
        if extra.fee_recipient != Address::ZERO && self.fee_receiver != extra.fee_recipient {
            return Err(Reason::InvalidFeeReceiver.into());
        }
        if self.fee_receiver == Address::ZERO && self.fee_bps > 0 {
            return Err(Reason::ZeroFeeReceiver.into());
        }
        let recovered = alloy::primitives::Signature::from_raw(&self.authorizer_signature)
            .ok()
            .and_then(|parsed| {
                parsed
                    .recover_address_from_prehash(&self.signing_hash(payment))
                    .ok()
            });
        if recovered != Some(authorizer) {
            return Err(Reason::AuthorizerSignature.into());
        }
        Ok(())
    }
}

/// The server side: completes the client's `charge` payload with `amount`, `fee_bps` and
/// `fee_receiver`, signed by `authorizer` (the offer's `receiverAuthorizer`), for the payment
/// `payment` parsed from it.
pub async fn complete_charge<S>(
    payload: &mut PaymentPayload,
    payment: &AuthCapturePayment,
    authorizer: &S,
    amount: U256,
    fee_bps: u16,
    fee_receiver: Address,
) -> Result<(), alloy::signers::Error>
where
    S: Signer + Send + Sync + ?Sized,
{
    let mut completion = ChargeCompletion {
        amount,
        fee_bps,
        fee_receiver,
        authorizer_signature: Bytes::new(),
    };
    let signature = authorizer
        .sign_hash(&completion.signing_hash(payment))
        .await?;
    completion.authorizer_signature = Bytes::copy_from_slice(&signature.as_bytes());
    if let Value::Object(fields) = &mut payload.payload {
        fields.insert("amount".into(), Value::String(amount.to_string()));
        fields.insert("feeBps".into(), Value::from(fee_bps));
        fields.insert(
            "feeReceiver".into(),
            Value::String(fee_receiver.to_checksum(None)),
        );
        fields.insert(
            "authorizerSignature".into(),
            Value::String(completion.authorizer_signature.to_string()),
        );
    }
    Ok(())
}
