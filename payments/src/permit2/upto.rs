//! The `upto` scheme (x402 `schemes/upto`): the payer signs a Permit2 authorization for a
//! maximum; after the work the server settles the amount it verified, at most that maximum and
//! possibly zero, in one settlement that spends the authorization.
//!
//! On the wire the amount to settle travels as `paymentRequirements.amount` of the `/settle`
//! request (the spec's phase-dependent `amount`): at `/verify` it is the signed maximum, at
//! `/settle` what to move. [`settle_request`] builds that request from the server's own offer;
//! any facilitator (in-process, or remote such as the official TypeScript one) takes it through
//! [`crate::Facilitator::settle`]. A zero amount succeeds with `transaction: ""` and moves
//! nothing; the authorization is then spent as far as the facilitator is concerned, although
//! its Permit2 nonce stays unused on chain until the deadline passes, so the server must record
//! the zero settlement itself (its payment store is what refuses a later settle).

use alloy::primitives::{Address, U256};
use serde_json::Value;

use super::{METHOD_PERMIT2, UPTO_SCHEME};
use crate::reason::Reason;
use crate::wire::{
    Network, PaymentPayload, PaymentRequirements, SettleRequest, SettleResponse, TokenDomain,
    UnknownFields,
};

/// `extra.facilitatorAddress`: the facilitator an `upto` payer authorizes to choose the amount,
/// as the facilitator's `/supported` advertises it.
pub const FACILITATOR_ADDRESS_KEY: &str = "facilitatorAddress";

impl PaymentRequirements {
    /// The requirements of an `upto` payment of at most `max_amount`, settled by
    /// `facilitator` (the address its `/supported` kind names in `extra.facilitatorAddress`),
    /// addresses checksummed. `domain` (the token's EIP-712 `name`/`version`) is needed only
    /// for the EIP-2612 approval extension.
    #[must_use]
    pub fn upto_evm(
        network: Network,
        max_amount: U256,
        asset: Address,
        pay_to: Address,
        max_timeout_seconds: u64,
        domain: Option<&TokenDomain>,
        facilitator: Address,
    ) -> Self {
        let mut extra = serde_json::Map::new();
        if let Some(domain) = domain {
            extra.insert("name".into(), Value::String(domain.name.clone()));
            extra.insert("version".into(), Value::String(domain.version.clone()));
        }
        extra.insert(
            "assetTransferMethod".into(),
            Value::String(METHOD_PERMIT2.into()),
        );
        extra.insert(
            FACILITATOR_ADDRESS_KEY.into(),
            Value::String(facilitator.to_checksum(None)),
        );
        Self {
            scheme: UPTO_SCHEME.to_owned(),
            network,
            amount: max_amount.into(),
            asset: asset.to_checksum(None),
            pay_to: pay_to.to_checksum(None),
            max_timeout_seconds,
            extra,
            unknown: UnknownFields::new(),
        }
    }

    /// `extra.facilitatorAddress` of an `upto` offer.
    pub fn upto_facilitator(&self) -> Result<Address, Reason> {
        self.extra
            .get(FACILITATOR_ADDRESS_KEY)
            .and_then(Value::as_str)
            .and_then(|raw| raw.parse().ok())
            .ok_or(Reason::InvalidPaymentRequirements)
    }
}

/// The `/settle` request that settles `amount` of an `upto` payment: the server's own `offer`
/// (never the client's copy) with `amount` in place of the maximum.
///
/// # Errors
/// [`Reason::InvalidScheme`] when the offer is not `upto`, and
/// [`Reason::UptoSettlementExceedsAmount`] when `amount` exceeds the offer's maximum.
pub fn settle_request(
    payload: PaymentPayload,
    offer: &PaymentRequirements,
    amount: U256,
) -> Result<SettleRequest, Reason> {
    if offer.scheme != UPTO_SCHEME {
        return Err(Reason::InvalidScheme);
    }
    if amount > offer.amount.get() {
        return Err(Reason::UptoSettlementExceedsAmount);
    }
    let mut requirements = offer.clone();
    requirements.amount = amount.into();
    Ok(SettleRequest::new(payload, requirements))
}

/// The amount a settle response says was settled: its `amount` (`upto` facilitators always
/// send it; `"0"` for a zero settlement). `None` when absent or not a decimal.
#[must_use]
pub fn settled_amount(response: &SettleResponse) -> Option<U256> {
    let raw = response.amount.as_deref()?;
    raw.parse::<crate::wire::DecimalU256>()
        .ok()
        .map(crate::wire::DecimalU256::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::address;

    fn offer() -> PaymentRequirements {
        PaymentRequirements::upto_evm(
            Network::eip155(84532).unwrap(),
            U256::from(5_000_000u64),
            address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
            address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            300,
            None,
            address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
        )
    }

    #[test]
    fn the_offer_names_the_facilitator_and_permit2() {
        let offer = offer();
        let value = serde_json::to_value(&offer).unwrap();
        assert_eq!(value["scheme"], "upto");
        assert_eq!(value["extra"]["assetTransferMethod"], "permit2");
        assert_eq!(
            value["extra"]["facilitatorAddress"],
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
        );
        assert_eq!(
            offer.upto_facilitator(),
            Ok(address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"))
        );
        assert_eq!(value.as_object().unwrap().len(), 7);
    }

    #[test]
    fn the_settle_request_carries_the_verified_amount_never_more_than_the_maximum() {
        let offer = offer();
        let payload = PaymentPayload {
            x402_version: crate::wire::X402Version2,
            resource: None,
            accepted: offer.clone(),
            payload: serde_json::json!({}),
            extensions: crate::wire::Extensions::new(),
            unknown: UnknownFields::new(),
        };
        let request = settle_request(payload.clone(), &offer, U256::from(1858u64)).unwrap();
        assert_eq!(
            request.payment_requirements.amount.get(),
            U256::from(1858u64)
        );
        assert_eq!(request.payment_payload.accepted.amount, offer.amount);
        assert!(settle_request(payload.clone(), &offer, U256::ZERO).is_ok());
        assert_eq!(
            settle_request(payload.clone(), &offer, U256::from(5_000_001u64)).unwrap_err(),
            Reason::UptoSettlementExceedsAmount
        );
        let mut exact = offer.clone();
        exact.scheme = "exact".into();
        assert_eq!(
            settle_request(payload, &exact, U256::ZERO).unwrap_err(),
            Reason::InvalidScheme
        );
    }
}
