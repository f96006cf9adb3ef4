//! x402 payments over Uniswap's Permit2: `exact` with `assetTransferMethod: "permit2"` (any
//! ERC-20, not only EIP-3009 tokens) and `upto` (the payer authorizes a maximum, the server
//! settles what it verified, possibly nothing).
//!
//! The payer signs Permit2's EIP-712 `PermitWitnessTransferFrom` with the x402 proxy of its scheme
//! as `spender`; the witness binds the recipient (`to`), the earliest settlement time
//! (`validAfter`) and, for `upto`, the one `facilitator` allowed to choose the amount. A
//! facilitator settles by calling the proxy, which calls Permit2, which moves the tokens with the
//! allowance the payer gave Permit2 once (directly, in the same transaction through the
//! `eip2612GasSponsoring` extension, or by a signed `approve` the facilitator broadcasts first,
//! the `erc20ApprovalGasSponsoring` extension). Permit2 nonces are unordered: one bit per nonce in the
//! payer's bitmap, flipped when used, so an authorization moves money at most once.
//!
//! | module | what |
//! |---|---|
//! | this module | addresses, the wire payload ([`Permit2Payload`]), the EIP-712 structs and digests, [`Permit2Payment::parse`] (the chain-free checks against the server's requirements), offers |
//! | [`approval`] | `erc20ApprovalGasSponsoring`: the payer's signed `approve(Permit2)` transaction, its checks (decoded with alloy) with and without a node |
//! | [`extension`] | `eip2612GasSponsoring`: the payer's EIP-2612 permit approving Permit2, submitted with the settlement |
//! | [`onchain`] | the facilitator's checks against a node (signature, allowance, balance, nonce bitmap, simulation through the proxy), the settlement call, and what a receipt says moved |
//! | [`ledger`] | what the chain says about one Permit2 authorization (used, by which transaction, moving what), for reconciliation |
//! | [`sign`] | the client side, signing exactly as the official `@x402/evm` 2.27 client does |
//! | [`upto`] | the `upto` offer and the settle request for a verified amount |

pub mod approval;
pub mod extension;
pub mod ledger;
pub mod onchain;
pub mod sign;
pub mod upto;

use crate::clock::Now;
use std::fmt;

use alloy::primitives::{Address, B256, Bytes, U256, address};
use alloy::sol_types::{Eip712Domain, SolStruct};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use self::approval::{Erc20ApprovalGasSponsoring, SignedApproval};
use self::extension::Eip2612GasSponsoring;
use crate::exact::{PaymentKey, VALID_BEFORE_BUFFER_SECS};
use crate::reason::Reason;
use crate::wire::{
    DecimalU256, EXACT_SCHEME, Network, PaymentPayload, PaymentRequirements, TokenDomain,
    UnknownFields, same_address,
};

pub use crate::wire::METHOD_PERMIT2;

/// Uniswap's canonical Permit2, the same address on every chain.
pub const PERMIT2_ADDRESS: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");
/// The canonical `x402ExactPermit2Proxy`: the `spender` of `exact` Permit2 payments.
pub const EXACT_PERMIT2_PROXY: Address = address!("402085c248EeA27D92E8b30b2C58ed07f9E20001");
/// The canonical `x402UptoPermit2Proxy`: the `spender` of `upto` payments.
pub const UPTO_PERMIT2_PROXY: Address = address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// The `upto` scheme's name.
pub const UPTO_SCHEME: &str = "upto";

/// The typed data of an `exact` Permit2 payment. The struct names are the EIP-712 type names.
pub mod exact_typed {
    alloy::sol! {
        /// What may be moved.
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        /// The `exact` witness: the recipient and the earliest settlement time.
        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            address to;
            uint256 validAfter;
        }

        /// What the payer signs.
        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// The typed data of an `upto` payment: the witness also names the facilitator.
pub mod upto_typed {
    alloy::sol! {
        /// What may be moved, at most.
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        /// The `upto` witness: recipient, the one facilitator allowed to settle, earliest time.
        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }

        /// What the payer signs.
        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

/// Which x402 use of Permit2 a payment is: it fixes the proxy, the witness and whether the
/// settled amount may be less than the signed one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permit2Scheme {
    /// `exact`: the proxy moves exactly `permitted.amount`.
    Exact,
    /// `upto`: the witness's facilitator moves any amount up to `permitted.amount`.
    Upto,
}

impl Permit2Scheme {
    /// The scheme named by `requirements.scheme`, if it is one paid over Permit2.
    #[must_use]
    pub fn of_scheme(scheme: &str) -> Option<Self> {
        match scheme {
            EXACT_SCHEME => Some(Self::Exact),
            UPTO_SCHEME => Some(Self::Upto),
            _ => None,
        }
    }

    /// The scheme's wire name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => EXACT_SCHEME,
            Self::Upto => UPTO_SCHEME,
        }
    }

    /// The proxy the payer names as `spender`.
    #[must_use]
    pub fn proxy(self) -> Address {
        match self {
            Self::Exact => EXACT_PERMIT2_PROXY,
            Self::Upto => UPTO_PERMIT2_PROXY,
        }
    }
}

/// Permit2's EIP-712 domain on `chain_id`: `{name: "Permit2", chainId, verifyingContract}`, no
/// version.
#[must_use]
pub fn permit2_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some("Permit2".into()),
        None,
        Some(U256::from(chain_id)),
        Some(PERMIT2_ADDRESS),
        None,
    )
}

/// A uint256 written as a decimal string, as the official client writes Permit2 nonces; a
/// `0x` hex spelling (the `upto` spec's example) is read too.
fn decimal_or_hex_u256<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<DecimalU256, D::Error> {
    let raw = String::deserialize(deserializer)?;
    if let Some(hex) = raw.strip_prefix("0x") {
        if hex.is_empty() || hex.len() > 64 {
            return Err(serde::de::Error::custom("nonce is not a uint256"));
        }
        return U256::from_str_radix(hex, 16)
            .map(DecimalU256::new)
            .map_err(serde::de::Error::custom);
    }
    raw.parse().map_err(serde::de::Error::custom)
}

/// Addresses written EIP-55 checksummed, as the official client writes them.
fn checksummed<S: serde::Serializer>(address: &Address, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&address.to_checksum(None))
}

fn checksummed_option<S: serde::Serializer>(
    address: &Option<Address>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match address {
        Some(address) => checksummed(address, serializer),
        None => serializer.serialize_none(),
    }
}

/// `permit2Authorization.permitted`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Permitted {
    /// The token.
    #[serde(serialize_with = "checksummed")]
    pub token: Address,
    /// Atomic units: exactly what `exact` moves, the most `upto` may move.
    pub amount: DecimalU256,
}

/// `permit2Authorization.witness`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Witness {
    /// The recipient; must be the requirements' `payTo`.
    #[serde(serialize_with = "checksummed")]
    pub to: Address,
    /// `upto` only: the facilitator allowed to settle (and choose the amount).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "checksummed_option"
    )]
    pub facilitator: Option<Address>,
    /// Unix seconds from which the proxy accepts the settlement.
    pub valid_after: DecimalU256,
}

/// `payload.permit2Authorization`: the permit's fields and the payer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Authorization {
    /// The payer (Permit2's `owner`).
    #[serde(serialize_with = "checksummed")]
    pub from: Address,
    /// Token and amount.
    pub permitted: Permitted,
    /// The proxy of the scheme.
    #[serde(serialize_with = "checksummed")]
    pub spender: Address,
    /// An unordered Permit2 nonce (random 256 bits from the official client).
    #[serde(deserialize_with = "decimal_or_hex_u256")]
    pub nonce: DecimalU256,
    /// Unix seconds after which Permit2 refuses the permit.
    pub deadline: DecimalU256,
    /// The proxy's witness.
    pub witness: Permit2Witness,
}

impl Permit2Authorization {
    /// The EIP-712 digest the payer signs on `chain_id` for `scheme`; `None` for an `upto`
    /// authorization without a facilitator.
    #[must_use]
    pub fn signing_hash(&self, scheme: Permit2Scheme, chain_id: u64) -> Option<B256> {
        let domain = permit2_domain(chain_id);
        Some(match scheme {
            Permit2Scheme::Exact => exact_typed::PermitWitnessTransferFrom {
                permitted: exact_typed::TokenPermissions {
                    token: self.permitted.token,
                    amount: self.permitted.amount.get(),
                },
                spender: self.spender,
                nonce: self.nonce.get(),
                deadline: self.deadline.get(),
                witness: exact_typed::Witness {
                    to: self.witness.to,
                    validAfter: self.witness.valid_after.get(),
                },
            }
            .eip712_signing_hash(&domain),
            Permit2Scheme::Upto => upto_typed::PermitWitnessTransferFrom {
                permitted: upto_typed::TokenPermissions {
                    token: self.permitted.token,
                    amount: self.permitted.amount.get(),
                },
                spender: self.spender,
                nonce: self.nonce.get(),
                deadline: self.deadline.get(),
                witness: upto_typed::Witness {
                    to: self.witness.to,
                    facilitator: self.witness.facilitator?,
                    validAfter: self.witness.valid_after.get(),
                },
            }
            .eip712_signing_hash(&domain),
        })
    }

    /// The nonce as the 32 bytes a [`PaymentKey`] holds.
    #[must_use]
    pub fn nonce_word(&self) -> B256 {
        B256::from(self.nonce.get())
    }
}

/// `PaymentPayload.payload` of a Permit2 payment (`exact` or `upto`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Payload {
    /// 65-byte ECDSA (or 64-byte compact) signature, or a contract wallet's EIP-1271 signature.
    pub signature: Bytes,
    /// What was signed.
    pub permit2_authorization: Permit2Authorization,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl fmt::Debug for Permit2Payload {
    // A signed permit can be settled by anyone holding it (for `exact`): keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit2Payload")
            .field("signature", &"<redacted>")
            .field("permit2_authorization", &self.permit2_authorization)
            .finish_non_exhaustive()
    }
}

/// Whether a scheme payload has the Permit2 shape (a `permit2Authorization` object), which is
/// how a facilitator tells an `exact` Permit2 payment from an EIP-3009 one.
#[must_use]
pub fn is_permit2_shaped(payload: &Value) -> bool {
    payload
        .get("permit2Authorization")
        .is_some_and(Value::is_object)
}

impl PaymentPayload {
    /// The payload as a Permit2 payment.
    pub fn permit2_evm(&self) -> Result<Permit2Payload, Reason> {
        Permit2Payload::deserialize(&self.payload).map_err(|_| Reason::InvalidPayload)
    }
}

impl PaymentRequirements {
    /// The requirements of an `exact` payment over Permit2 for any ERC-20, addresses
    /// checksummed: `extra.assetTransferMethod` is `"permit2"`; `domain` (the token's EIP-712
    /// `name`/`version`) is needed only for the EIP-2612 approval extension.
    #[must_use]
    pub fn exact_permit2_evm(
        network: Network,
        amount: U256,
        asset: Address,
        pay_to: Address,
        max_timeout_seconds: u64,
        domain: Option<&TokenDomain>,
    ) -> Self {
        let mut extra = serde_json::Map::new();
        extra.insert(
            "assetTransferMethod".into(),
            Value::String(METHOD_PERMIT2.into()),
        );
        if let Some(domain) = domain {
            extra.insert("name".into(), Value::String(domain.name.clone()));
            extra.insert("version".into(), Value::String(domain.version.clone()));
        }
        Self {
            scheme: EXACT_SCHEME.to_owned(),
            network,
            amount: amount.into(),
            asset: asset.to_checksum(None),
            pay_to: pay_to.to_checksum(None),
            max_timeout_seconds,
            extra,
            unknown: UnknownFields::new(),
        }
    }

    /// `extra.assetTransferMethod`, `"eip3009"` when absent.
    #[must_use]
    pub fn asset_transfer_method(&self) -> &str {
        self.extra
            .get("assetTransferMethod")
            .and_then(Value::as_str)
            .unwrap_or(crate::wire::METHOD_EIP3009)
    }
}

/// A Permit2 payment that passed the checks needing neither a clock nor a node against the
/// server's requirements: everything needed to check it on chain and settle it.
#[derive(Debug, Clone)]
pub struct Permit2Payment {
    /// `exact` or `upto`.
    pub scheme: Permit2Scheme,
    /// The requirements' network.
    pub network: Network,
    /// Its chain id.
    pub chain_id: u64,
    /// The token.
    pub asset: Address,
    /// The recipient.
    pub pay_to: Address,
    /// The signed payload.
    pub payload: Permit2Payload,
    /// The payer's EIP-2612 permit approving Permit2, when the payload carries the extension.
    pub eip2612: Option<Eip2612GasSponsoring>,
    /// The payer's signed `approve(Permit2)` transaction, when the payload carries the
    /// `erc20ApprovalGasSponsoring` extension (and no EIP-2612 permit, which the official
    /// facilitator prefers too).
    pub erc20_approval: Option<SignedApproval>,
}

impl Permit2Payment {
    /// Checks everything about `payload` that needs neither a clock nor a node, in the order
    /// of the official facilitator: scheme, network, payload shape, spender (the scheme's
    /// proxy), recipient, amount (`permitted.amount == requirements.amount`, the maximum for
    /// `upto`), token; for `upto` a facilitator named in the witness; the EIP-2612 extension's
    /// shape when present, else the ERC-20 approval extension's chain-free checks.
    pub fn parse(
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
    ) -> Result<Self, Reason> {
        let payment = Self::parse_terms(payload, requirements)?;
        if payment.payload.permit2_authorization.permitted.amount != requirements.amount {
            return Err(Reason::ValueMismatch);
        }
        Ok(payment)
    }

    /// [`Self::parse`] for settlement: `requirements.amount` is the amount to settle, which for
    /// `upto` may be less than the signed maximum (checked against that maximum, never
    /// compared for equality) and for `exact` must equal it. Returns the amount to move.
    pub fn parse_for_settlement(
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
    ) -> Result<(Self, U256), Reason> {
        let payment = Self::parse_terms(payload, requirements)?;
        let amount = requirements.amount.get();
        let maximum = payment.max_amount();
        match payment.scheme {
            Permit2Scheme::Exact if amount != maximum => Err(Reason::ValueMismatch),
            Permit2Scheme::Upto if amount > maximum => Err(Reason::UptoSettlementExceedsAmount),
            _ => Ok((payment, amount)),
        }
    }

    fn parse_terms(
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
    ) -> Result<Self, Reason> {
        let scheme = Permit2Scheme::of_scheme(&requirements.scheme).ok_or(Reason::InvalidScheme)?;
        if payload.accepted.scheme != requirements.scheme {
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
        let permit2 = payload.permit2_evm()?;
        let authorization = &permit2.permit2_authorization;
        if authorization.spender != scheme.proxy() {
            return Err(Reason::Permit2InvalidSpender);
        }
        if authorization.witness.to != pay_to {
            return Err(Reason::RecipientMismatch);
        }
        if authorization.permitted.token != asset {
            return Err(Reason::AssetMismatch);
        }
        if scheme == Permit2Scheme::Upto && authorization.witness.facilitator.is_none() {
            return Err(Reason::InvalidPayload);
        }
        let eip2612 = Eip2612GasSponsoring::from_extensions(&payload.extensions)?;
        // The proxy submits the permit only for exactly the permitted amount.
        if eip2612
            .as_ref()
            .is_some_and(|permit| permit.amount != authorization.permitted.amount.get())
        {
            return Err(Reason::Permit2612AmountMismatch);
        }
        let erc20_approval = match (
            &eip2612,
            Erc20ApprovalGasSponsoring::from_extensions(&payload.extensions)?,
        ) {
            (None, Some(approval)) => Some(approval.check(
                authorization.from,
                asset,
                chain_id,
                authorization.permitted.amount.get(),
            )?),
            _ => None,
        };
        Ok(Self {
            scheme,
            network: requirements.network,
            chain_id,
            asset,
            pay_to,
            payload: permit2,
            eip2612,
            erc20_approval,
        })
    }

    /// Checks the validity window at `now`, as the chain will judge it (see [`Now`]):
    /// `deadline` at least [`VALID_BEFORE_BUFFER_SECS`] ahead of the later clock,
    /// `witness.validAfter` not past the chain's latest block, and an EIP-2612 permit's deadline
    /// as far ahead.
    pub fn check_window(&self, now: impl Into<Now>) -> Result<(), Reason> {
        let now = now.into();
        let authorization = &self.payload.permit2_authorization;
        let soonest = U256::from(now.latest()) + U256::from(VALID_BEFORE_BUFFER_SECS);
        if authorization.deadline.get() < soonest {
            return Err(Reason::ValidBefore);
        }
        if authorization.witness.valid_after.get() > U256::from(now.block_time()) {
            return Err(Reason::ValidAfter);
        }
        if let Some(permit) = &self.eip2612 {
            permit.check(self.payer(), self.asset, now.latest())?;
        }
        Ok(())
    }

    /// The payer.
    #[must_use]
    pub fn payer(&self) -> Address {
        self.payload.permit2_authorization.from
    }

    /// The signed maximum (`exact`: the amount).
    #[must_use]
    pub fn max_amount(&self) -> U256 {
        self.payload.permit2_authorization.permitted.amount.get()
    }

    /// The EIP-712 digest the payer signed.
    #[must_use]
    pub fn signing_hash(&self) -> B256 {
        self.payload
            .permit2_authorization
            .signing_hash(self.scheme, self.chain_id)
            // `parse` refused an `upto` witness without a facilitator.
            .unwrap_or_default()
    }

    /// (network, asset, payer, nonce): Permit2 nonces are unique per payer, so this key names
    /// at most one transfer, ever.
    #[must_use]
    pub fn key(&self) -> PaymentKey {
        PaymentKey {
            network: self.network,
            asset: self.asset,
            payer: self.payer(),
            nonce: self.payload.permit2_authorization.nonce_word(),
        }
    }
}

/// The checks a resource server can run before calling the facilitator, with no node: those of
/// [`Permit2Payment::parse`] and the validity window at `now` (unix seconds, or the chain's
/// [`Now`]).
pub fn precheck(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    now: impl Into<Now>,
) -> Result<Permit2Payment, Reason> {
    let payment = Permit2Payment::parse(payload, requirements)?;
    payment.check_window(now)?;
    Ok(payment)
}

/// (network, asset, payer, nonce) of a Permit2 payload, read from the client's `accepted` and
/// the signed permit.
pub(crate) fn payment_key(payload: &PaymentPayload) -> Result<PaymentKey, Reason> {
    let permit2 = payload.permit2_evm()?;
    Ok(PaymentKey {
        network: payload.accepted.network,
        asset: payload
            .accepted
            .asset
            .parse()
            .map_err(|_| Reason::InvalidPayload)?,
        payer: permit2.permit2_authorization.from,
        nonce: permit2.permit2_authorization.nonce_word(),
    })
}

#[cfg(test)]
mod tests;
