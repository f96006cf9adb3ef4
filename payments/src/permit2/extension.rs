//! The `eip2612GasSponsoring` extension (x402 `extensions/eip2612_gas_sponsoring.md`): a payer
//! who has not approved Permit2 on a token with EIP-2612 signs a `permit(owner, Permit2, amount,
//! deadline)` instead, and the facilitator submits it in the settlement transaction
//! (`settleWithPermit` on the proxy), paying the gas. The server offers the extension in
//! `PaymentRequired.extensions` ([`eip2612_gas_sponsoring_offer`]); the official client signs
//! the permit only when offered and when its allowance to Permit2 is short.
//!
//! The sibling for tokens without EIP-2612, `erc20ApprovalGasSponsoring` (a raw signed `approve`
//! transaction the facilitator broadcasts, funding its gas), is [`super::approval`].

use alloy::primitives::{Address, Bytes, U256};
use serde_json::{Value, json};

use super::PERMIT2_ADDRESS;
use crate::exact::VALID_BEFORE_BUFFER_SECS;
use crate::reason::Reason;
use crate::wire::Extensions;

/// The extension's key in `extensions`.
pub const EIP2612_GAS_SPONSORING: &str = "eip2612GasSponsoring";
pub use super::approval::ERC20_APPROVAL_GAS_SPONSORING;

/// What the server puts under [`EIP2612_GAS_SPONSORING`] in `PaymentRequired.extensions`: the
/// spec's `{info, schema}`, where `info` only describes the offer (the client fills in the rest).
#[must_use]
pub fn eip2612_gas_sponsoring_offer() -> Value {
    let address = json!({"type": "string", "pattern": "^0x[a-fA-F0-9]{40}$"});
    let number = json!({"type": "string", "pattern": "^[0-9]+$"});
    json!({
        "info": {
            "description": "The facilitator accepts an EIP-2612 permit to the canonical Permit2 contract and submits it with the settlement.",
            "version": "1",
        },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "from": address,
                "asset": address,
                "spender": address,
                "amount": number,
                "nonce": number,
                "deadline": number,
                "signature": {"type": "string", "pattern": "^0x[a-fA-F0-9]+$"},
                "version": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)*$"},
            },
            "required": ["from", "asset", "spender", "amount", "nonce", "deadline", "signature", "version"],
        },
    })
}

/// The payer's EIP-2612 permit approving Permit2, from `extensions.eip2612GasSponsoring.info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eip2612GasSponsoring {
    /// The token holder (must be the payer).
    pub from: Address,
    /// The token (must be the payment's asset).
    pub asset: Address,
    /// The approved spender (must be Permit2).
    pub spender: Address,
    /// The approved amount (must be the permit's `permitted.amount`, as the proxy requires).
    pub amount: U256,
    /// The holder's EIP-2612 nonce the signature is for.
    pub nonce: U256,
    /// Unix seconds after which the token refuses the permit.
    pub deadline: U256,
    /// 65 bytes, r ‖ s ‖ v.
    pub signature: Bytes,
    /// The extension's schema version.
    pub version: String,
}

/// The `info` a payer filled in for a gas-sponsoring extension (this one or
/// [`super::approval`]'s): present only when every field is there and not empty (otherwise it
/// is the server's declaration echoed back, which the official facilitator ignores too), each
/// read as the spec types it; a malformed one is the extension's `invalid` reason.
pub(super) struct FilledInfo<'a> {
    info: &'a Value,
    invalid: Reason,
}

impl<'a> FilledInfo<'a> {
    /// `extensions[key].info` when every one of `fields` is filled in.
    pub(super) fn of(
        extensions: &'a Extensions,
        key: &str,
        fields: &[&str],
        invalid: Reason,
    ) -> Option<Self> {
        let info = extensions
            .get(key)
            .and_then(|extension| extension.get("info"))?;
        let filled = |field: &&str| {
            info.get(*field)
                .is_some_and(|value| !value.is_null() && value.as_str() != Some(""))
        };
        fields.iter().all(filled).then_some(Self { info, invalid })
    }

    /// The extension's reason for a malformed field.
    pub(super) fn invalid(&self) -> Reason {
        self.invalid.clone()
    }

    /// `field` as a string.
    pub(super) fn text(&self, field: &str) -> Result<&'a str, Reason> {
        self.info
            .get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| self.invalid())
    }

    /// `field` as a `0x` address of 40 hex digits.
    pub(super) fn address(&self, field: &str) -> Result<Address, Reason> {
        let raw = self.text(field)?;
        (raw.len() == 42 && raw.starts_with("0x"))
            .then(|| raw.parse().ok())
            .flatten()
            .ok_or_else(|| self.invalid())
    }

    /// `field` as a decimal uint256.
    pub(super) fn number(&self, field: &str) -> Result<U256, Reason> {
        let raw = self.text(field)?;
        (!raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()))
            .then(|| U256::from_str_radix(raw, 10).ok())
            .flatten()
            .ok_or_else(|| self.invalid())
    }

    /// `version`, dotted decimal numbers (`1`, `1.0`).
    pub(super) fn version(&self) -> Result<&'a str, Reason> {
        let version = self.text("version")?;
        let dotted = !version.is_empty()
            && version
                .split('.')
                .all(|part| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()));
        dotted.then_some(version).ok_or_else(|| self.invalid())
    }
}

impl Eip2612GasSponsoring {
    /// The permit in `extensions`, if the payload carries one with `info`. An `info` without
    /// every field of a permit is none: it is the server's declaration echoed back (the official
    /// client merges the 402's extensions into every payload, and signs a permit only when the
    /// payer's allowance to Permit2 is short), which the official facilitator ignores too.
    /// Present but malformed (not a decimal, not an address, a signature that is not 65 bytes)
    /// is [`Reason::Eip2612ExtensionInvalid`].
    pub fn from_extensions(extensions: &Extensions) -> Result<Option<Self>, Reason> {
        let Some(info) = FilledInfo::of(
            extensions,
            EIP2612_GAS_SPONSORING,
            &[
                "from",
                "asset",
                "spender",
                "amount",
                "nonce",
                "deadline",
                "signature",
                "version",
            ],
            Reason::Eip2612ExtensionInvalid,
        ) else {
            return Ok(None);
        };
        let signature: Bytes = info
            .text("signature")?
            .parse()
            .map_err(|_| info.invalid())?;
        if signature.len() != 65 {
            return Err(info.invalid());
        }
        let version = info.version()?;
        Ok(Some(Self {
            from: info.address("from")?,
            asset: info.address("asset")?,
            spender: info.address("spender")?,
            amount: info.number("amount")?,
            nonce: info.number("nonce")?,
            deadline: info.number("deadline")?,
            signature,
            version: version.to_owned(),
        }))
    }

    /// The official facilitator's checks: the holder is the payer, the token is the payment's,
    /// the spender is Permit2, the deadline at least [`VALID_BEFORE_BUFFER_SECS`] ahead of `now`.
    pub fn check(&self, payer: Address, asset: Address, now: u64) -> Result<(), Reason> {
        if self.from != payer {
            return Err(Reason::Eip2612FromMismatch);
        }
        if self.asset != asset {
            return Err(Reason::Eip2612AssetMismatch);
        }
        if self.spender != PERMIT2_ADDRESS {
            return Err(Reason::Eip2612SpenderNotPermit2);
        }
        if self.deadline < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
            return Err(Reason::Eip2612DeadlineExpired);
        }
        Ok(())
    }

    /// `(v, r, s)` of the signature, `v` as 27/28.
    #[must_use]
    pub fn vrs(&self) -> (u8, [u8; 32], [u8; 32]) {
        let mut r = [0u8; 32];
        let mut s = [0u8; 32];
        r.copy_from_slice(&self.signature[..32]);
        s.copy_from_slice(&self.signature[32..64]);
        let v = self.signature[64];
        (if v < 27 { v + 27 } else { v }, r, s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::address;

    fn extensions(info: &Value) -> Extensions {
        let mut extensions = Extensions::new();
        extensions.insert(EIP2612_GAS_SPONSORING.into(), json!({ "info": info }));
        extensions
    }

    fn info() -> Value {
        json!({
            "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "spender": "0x000000000022D473030F116dDEE9F6B43aC78BA3",
            "amount": "10000",
            "nonce": "0",
            "deadline": "1740672154",
            "signature": format!("0x{}1b", "11".repeat(64)),
            "version": "1",
        })
    }

    #[test]
    fn a_well_formed_permit_parses_and_is_checked_against_the_payment() {
        let permit = Eip2612GasSponsoring::from_extensions(&extensions(&info()))
            .unwrap()
            .unwrap();
        let payer = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
        let asset = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
        assert_eq!(permit.check(payer, asset, 1_740_672_148), Ok(()));
        assert_eq!(
            permit.check(payer, asset, 1_740_672_149),
            Err(Reason::Eip2612DeadlineExpired)
        );
        assert_eq!(
            permit.check(asset, asset, 0),
            Err(Reason::Eip2612FromMismatch)
        );
        assert_eq!(
            permit.check(payer, payer, 0),
            Err(Reason::Eip2612AssetMismatch)
        );
        assert_eq!(permit.vrs().0, 27);
        assert_eq!(
            Eip2612GasSponsoring::from_extensions(&Extensions::new()),
            Ok(None)
        );
    }

    #[test]
    fn a_malformed_permit_is_refused_with_the_extension_code() {
        for (key, value) in [
            ("amount", json!("1e6")),
            ("amount", json!(10_000)),
            ("from", json!("0x1234")),
            ("signature", json!("0x1234")),
            ("version", json!("v1")),
        ] {
            let mut info = info();
            info[key] = value;
            assert_eq!(
                Eip2612GasSponsoring::from_extensions(&extensions(&info)),
                Err(Reason::Eip2612ExtensionInvalid),
                "{key}"
            );
        }
    }
}
