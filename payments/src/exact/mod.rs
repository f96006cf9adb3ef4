//! The `exact` scheme on EVM chains with EIP-3009 `transferWithAuthorization`.
//!
//! - this module: the payload types, the EIP-712 domain and struct hash, the payment key and the
//!   chain-free checks ([`precheck`]) every party can run;
//! - [`sign`]: the client side, producing a [`PaymentPayload`];
//! - [`onchain`]: the facilitator side that needs a node (signature by EOA or EIP-1271, nonce
//!   state, balance, simulation, settlement log lookup);
//! - [`ledger`]: what the chain says about one authorization (used, by which transaction, moving
//!   what; cancelled; still usable as of the latest block), for whoever must decide a settlement
//!   outcome from the chain rather than from a facilitator's word.

pub mod ledger;
pub mod onchain;
pub mod sign;

use std::fmt;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::sol_types::{Eip712Domain, SolStruct};
use serde::{Deserialize, Serialize};

use crate::clock::Now;
use crate::reason::Reason;
use crate::wire::{
    DecimalU256, EXACT_SCHEME, Network, PaymentPayload, PaymentRequirements, UnknownFields,
    same_address,
};

/// Seconds that must remain before `validBefore` for a payment to be accepted: time for the
/// settlement transaction to be mined (the reference facilitator's figure).
pub const VALID_BEFORE_BUFFER_SECS: u64 = 6;

alloy::sol! {
    /// The EIP-3009 typed-data struct a payer signs.
    #[derive(Debug)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// The signed EIP-3009 authorization, numbers as decimal strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip3009Authorization {
    /// The payer (an EOA or a contract wallet).
    pub from: Address,
    /// The recipient; must be the requirements' `payTo`.
    pub to: Address,
    /// Atomic units; must equal the requirements' `amount` exactly.
    pub value: DecimalU256,
    /// Unix seconds after which the authorization is valid.
    pub valid_after: DecimalU256,
    /// Unix seconds before which the authorization is valid.
    pub valid_before: DecimalU256,
    /// 32 random bytes; unique per payer and token.
    pub nonce: B256,
}

impl Eip3009Authorization {
    /// The EIP-712 digest that `from` signs under `domain`.
    #[must_use]
    pub fn signing_hash(&self, domain: &Eip712Domain) -> B256 {
        self.as_sol().eip712_signing_hash(domain)
    }

    fn as_sol(&self) -> TransferWithAuthorization {
        TransferWithAuthorization {
            from: self.from,
            to: self.to,
            value: self.value.get(),
            validAfter: self.valid_after.get(),
            validBefore: self.valid_before.get(),
            nonce: self.nonce,
        }
    }
}

/// `PaymentPayload.payload` of the `exact` scheme with EIP-3009.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactEvmPayload {
    /// 65-byte ECDSA signature (EOA), or a contract wallet's signature of any length.
    pub signature: Bytes,
    /// What was signed.
    pub authorization: Eip3009Authorization,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl fmt::Debug for ExactEvmPayload {
    // A signed authorization can be settled by anyone who holds it: keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExactEvmPayload")
            .field("signature", &"<redacted>")
            .field("authorization", &self.authorization)
            .finish_non_exhaustive()
    }
}

/// What identifies one payment: EIP-3009 nonces are unique per (token, payer), so this key
/// names at most one transfer, ever.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentKey {
    /// CAIP-2 network.
    pub network: Network,
    /// Token contract.
    pub asset: Address,
    /// `authorization.from`.
    pub payer: Address,
    /// `authorization.nonce`.
    pub nonce: B256,
}

impl PaymentPayload {
    /// The payload as an EIP-3009 `exact` payment.
    pub fn exact_evm(&self) -> Result<ExactEvmPayload, Reason> {
        ExactEvmPayload::deserialize(&self.payload).map_err(|_| Reason::InvalidPayload)
    }
}

/// The EIP-712 domain of the token named by `requirements`: `{name, version}` from `extra`,
/// `chainId` from the `eip155` network, `verifyingContract` = `asset`.
pub fn token_eip712_domain(requirements: &PaymentRequirements) -> Result<Eip712Domain, Reason> {
    let chain_id = requirements
        .network
        .chain_id()
        .ok_or(Reason::InvalidNetwork)?;
    let asset = requirements.evm_asset()?;
    let domain = requirements.token_domain()?;
    Ok(Eip712Domain::new(
        Some(domain.name.into()),
        Some(domain.version.into()),
        Some(U256::from(chain_id)),
        Some(asset),
        None,
    ))
}

/// An `exact` EVM payment that passed the time-independent checks against the server's
/// requirements: everything needed to check it on chain and settle it.
#[derive(Debug, Clone)]
pub struct ExactPayment {
    /// The requirements' network.
    pub network: Network,
    /// The chain id of `network`.
    pub chain_id: u64,
    /// The token.
    pub asset: Address,
    /// The token's EIP-712 domain.
    pub domain: Eip712Domain,
    /// The signed payload.
    pub payload: ExactEvmPayload,
}

impl ExactPayment {
    /// Checks everything about `payload` that needs neither a clock nor a node, in the order of
    /// the reference facilitator: scheme, network, asset, EIP-712 domain, payload shape,
    /// recipient, amount.
    pub fn parse(
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
    ) -> Result<Self, Reason> {
        if requirements.scheme != EXACT_SCHEME || payload.accepted.scheme != EXACT_SCHEME {
            return Err(Reason::InvalidScheme);
        }
        let chain_id = requirements
            .network
            .chain_id()
            .ok_or(Reason::InvalidNetwork)?;
        if payload.accepted.network != requirements.network {
            return Err(Reason::NetworkMismatch);
        }
        let asset = requirements.evm_asset()?;
        if !same_address(&payload.accepted.asset, &requirements.asset) {
            return Err(Reason::AssetMismatch);
        }
        let pay_to = requirements.evm_pay_to()?;
        let domain = token_eip712_domain(requirements)?;
        let exact = payload.exact_evm()?;
        let authorization = &exact.authorization;
        if authorization.to != pay_to {
            return Err(Reason::RecipientMismatch);
        }
        if authorization.value != requirements.amount {
            return Err(Reason::ValueMismatch);
        }
        Ok(Self {
            network: requirements.network,
            chain_id,
            asset,
            domain,
            payload: exact,
        })
    }

    /// Checks the validity window at `now` (see [`crate::clock`] for which clock judges what):
    /// `validBefore` at least [`VALID_BEFORE_BUFFER_SECS`] ahead of the later clock,
    /// `validAfter` not after the chain's latest block.
    pub fn check_window(&self, now: impl Into<Now>) -> Result<(), Reason> {
        let now = now.into();
        let authorization = &self.payload.authorization;
        let earliest_valid_before = U256::from(now.latest()) + U256::from(VALID_BEFORE_BUFFER_SECS);
        if authorization.valid_before.get() < earliest_valid_before {
            return Err(Reason::ValidBefore);
        }
        if authorization.valid_after.get() > U256::from(now.block_time()) {
            return Err(Reason::ValidAfter);
        }
        Ok(())
    }

    /// The payer.
    #[must_use]
    pub fn payer(&self) -> Address {
        self.payload.authorization.from
    }

    /// The EIP-712 digest the payer signed.
    #[must_use]
    pub fn signing_hash(&self) -> B256 {
        self.payload.authorization.signing_hash(&self.domain)
    }

    /// This payment's key.
    #[must_use]
    pub fn key(&self) -> PaymentKey {
        PaymentKey {
            network: self.network,
            asset: self.asset,
            payer: self.payer(),
            nonce: self.payload.authorization.nonce,
        }
    }
}

/// The checks a resource server can run before calling the facilitator, with no node: scheme,
/// network, asset, EIP-712 domain present, payload shape, `to == payTo`,
/// `value == amount` exactly, and the validity window at `now` (unix seconds, or a [`Now`]
/// holding the chain's block time).
///
/// `requirements` must be the server's own offer; `payload.accepted` is only compared on
/// scheme, network and asset here (use
/// [`PaymentRequirements::mismatched_fields`] for the full comparison).
pub fn precheck(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    now: impl Into<Now>,
) -> Result<(), Reason> {
    ExactPayment::parse(payload, requirements)?.check_window(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{address, b256, keccak256};
    use alloy::sol_types::SolStruct;
    use serde_json::json;

    use crate::wire::{Extensions, TokenDomain, X402Version2};

    const NOW: u64 = 1_750_000_000;

    fn requirements() -> PaymentRequirements {
        PaymentRequirements::exact_evm(
            Network::eip155(84532).unwrap(),
            U256::from(10_000u64),
            address!("036CbD53842c5426634e7929541eC2318f3dCF7e"),
            address!("209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            60,
            &TokenDomain {
                name: "USDC".into(),
                version: "2".into(),
            },
        )
    }

    fn payload_with(authorization: &serde_json::Value) -> PaymentPayload {
        PaymentPayload {
            x402_version: X402Version2,
            resource: None,
            accepted: requirements(),
            payload: json!({
                "signature": format!("0x{}", "11".repeat(65)),
                "authorization": authorization.clone(),
            }),
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }

    fn good_authorization() -> serde_json::Value {
        json!({
            "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "value": "10000",
            "validAfter": "0",
            "validBefore": (NOW + 60).to_string(),
            "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
        })
    }

    #[test]
    fn typehash_matches_the_eip3009_constant() {
        let typehash = keccak256(TransferWithAuthorization::eip712_encode_type().as_bytes());
        assert_eq!(
            typehash,
            b256!("7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267")
        );
    }

    #[test]
    fn domain_comes_from_extra_network_and_asset() {
        let domain = token_eip712_domain(&requirements()).unwrap();
        assert_eq!(domain.name.as_deref(), Some("USDC"));
        assert_eq!(domain.version.as_deref(), Some("2"));
        assert_eq!(domain.chain_id, Some(U256::from(84532u64)));
        assert_eq!(
            domain.verifying_contract,
            Some(address!("036CbD53842c5426634e7929541eC2318f3dCF7e"))
        );
    }

    #[test]
    fn precheck_accepts_a_well_formed_payment() {
        let payload = payload_with(&good_authorization());
        assert_eq!(precheck(&payload, &requirements(), NOW), Ok(()));
        let key = payload.payment_key().unwrap();
        assert_eq!(
            key.payer,
            address!("857b06519E91e3A54538791bDbb0E22373e36b66")
        );
        assert_eq!(key.network, Network::eip155(84532).unwrap());
    }

    #[test]
    fn precheck_names_each_refusal() {
        let requirements = requirements();
        let case = |edit: &dyn Fn(&mut serde_json::Value), expected: Reason| {
            let mut authorization = good_authorization();
            edit(&mut authorization);
            assert_eq!(
                precheck(&payload_with(&authorization), &requirements, NOW),
                Err(expected),
                "{authorization}"
            );
        };
        case(
            &|a| a["to"] = json!("0x0000000000000000000000000000000000000001"),
            Reason::RecipientMismatch,
        );
        case(&|a| a["value"] = json!("9999"), Reason::ValueMismatch);
        case(&|a| a["value"] = json!("10001"), Reason::ValueMismatch);
        case(
            &|a| a["validBefore"] = json!((NOW + 5).to_string()),
            Reason::ValidBefore,
        );
        case(
            &|a| a["validAfter"] = json!((NOW + 1).to_string()),
            Reason::ValidAfter,
        );
        case(&|a| a["nonce"] = json!("0x1234"), Reason::InvalidPayload);
        case(&|a| a["value"] = json!(10000), Reason::InvalidPayload);
    }

    #[test]
    fn precheck_checks_scheme_network_asset_and_domain() {
        let payload = payload_with(&good_authorization());

        let mut other = requirements();
        other.scheme = "upto".into();
        assert_eq!(precheck(&payload, &other, NOW), Err(Reason::InvalidScheme));

        let mut wrong_network = payload.clone();
        wrong_network.accepted.network = Network::eip155(8453).unwrap();
        assert_eq!(
            precheck(&wrong_network, &requirements(), NOW),
            Err(Reason::NetworkMismatch)
        );

        let mut wrong_asset = payload.clone();
        wrong_asset.accepted.asset = "0x0000000000000000000000000000000000000003".into();
        assert_eq!(
            precheck(&wrong_asset, &requirements(), NOW),
            Err(Reason::AssetMismatch)
        );

        let mut no_domain = requirements();
        no_domain.extra.clear();
        let mut payload_no_domain = payload.clone();
        payload_no_domain.accepted = no_domain.clone();
        assert_eq!(
            precheck(&payload_no_domain, &no_domain, NOW),
            Err(Reason::MissingEip712Domain)
        );

        let mut solana = requirements();
        solana.network = Network::parse_caip2("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp").unwrap();
        assert_eq!(
            precheck(&payload, &solana, NOW),
            Err(Reason::InvalidNetwork)
        );
    }

    #[test]
    fn window_boundaries_are_inclusive_as_in_the_reference() {
        let mut authorization = good_authorization();
        authorization["validBefore"] = json!((NOW + VALID_BEFORE_BUFFER_SECS).to_string());
        authorization["validAfter"] = json!(NOW.to_string());
        assert_eq!(
            precheck(&payload_with(&authorization), &requirements(), NOW),
            Ok(())
        );
    }

    #[test]
    fn exact_payload_debug_redacts_the_signature() {
        let exact = payload_with(&good_authorization()).exact_evm().unwrap();
        let printed = format!("{exact:?}");
        assert!(!printed.contains("1111"), "{printed}");
        assert!(printed.contains("authorization"));
    }
}
