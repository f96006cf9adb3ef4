//! x402 v2 wire types: what travels in the `PAYMENT-REQUIRED`, `PAYMENT-SIGNATURE` and
//! `PAYMENT-RESPONSE` headers and in the facilitator's `/verify`, `/settle` and `/supported`
//! bodies.
//!
//! Every object keeps the keys it does not know in a `#[serde(flatten)]` map, and `extensions`
//! are kept as raw JSON, so a message decoded and re-encoded by hiregate loses nothing a newer
//! client or facilitator put in it (the spec forbids servers to drop extension data).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use alloy::primitives::{Address, U256};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::reason::Reason;

/// A JSON object of keys this crate does not interpret, kept so they survive a round trip.
pub type UnknownFields = Map<String, Value>;

/// The `extensions` object of x402 v2 messages, keyed by extension id
/// (each value is `{info, schema}` by convention).
pub type Extensions = Map<String, Value>;

/// The scheme name of the only scheme this crate implements.
pub const EXACT_SCHEME: &str = "exact";

/// The protocol version marker: serializes as `2` and refuses any other number.
///
/// Holding this type in a message means the message is x402 v2 by construction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct X402Version2;

impl X402Version2 {
    /// The numeric protocol version.
    pub const VALUE: u64 = 2;
}

impl Serialize for X402Version2 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(Self::VALUE)
    }
}

impl<'de> Deserialize<'de> for X402Version2 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let found = u64::deserialize(deserializer)?;
        if found == Self::VALUE {
            Ok(Self)
        } else {
            Err(serde::de::Error::custom(format!(
                "unsupported x402Version {found}, expected {}",
                Self::VALUE
            )))
        }
    }
}

/// The CAIP-2 network of every x402 message: the contracts crate's one [`Network`] type. Wire
/// fields read it with [`Network::deserialize_caip2`], which takes any CAIP-2 id, so a message
/// naming a chain hiregate does not settle on still decodes and is refused for its network.
pub use hiregate_contracts::money::{Network, NetworkError};

/// Why a string is not a valid [`DecimalU256`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a canonical non-negative decimal integer that fits 256 bits.
    #[error("`{0}` is not a decimal uint256 (digits only, no sign, no leading zeros)")]
    DecimalU256(String),
}

/// A uint256 written as a decimal string, the way x402 carries amounts and EIP-3009 times.
///
/// Parsing is strict (ASCII digits only, no sign, no leading zeros) so that one number has one
/// spelling and field-by-field comparisons cannot be fooled by `"0100"` versus `"100"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DecimalU256(U256);

impl DecimalU256 {
    /// Wraps a number.
    #[must_use]
    pub const fn new(value: U256) -> Self {
        Self(value)
    }

    /// The number.
    #[must_use]
    pub const fn get(self) -> U256 {
        self.0
    }
}

impl From<U256> for DecimalU256 {
    fn from(value: U256) -> Self {
        Self(value)
    }
}

impl From<u64> for DecimalU256 {
    fn from(value: u64) -> Self {
        Self(U256::from(value))
    }
}

impl FromStr for DecimalU256 {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let canonical = !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit())
            && (s == "0" || !s.starts_with('0'));
        if !canonical {
            return Err(ParseError::DecimalU256(s.to_owned()));
        }
        U256::from_str_radix(s, 10)
            .map(Self)
            .map_err(|_| ParseError::DecimalU256(s.to_owned()))
    }
}

impl fmt::Display for DecimalU256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Serialize for DecimalU256 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DecimalU256 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

/// `extra` is an object in v2, but v1-era senders write `null`; both mean "no extra".
fn object_or_null<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Map<String, Value>, D::Error> {
    Ok(Option::<Map<String, Value>>::deserialize(deserializer)?.unwrap_or_default())
}

/// The EIP-712 domain of an EIP-3009 token, carried in `extra.name` / `extra.version`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenDomain {
    /// The token's EIP-712 `name` (for USDC on Base mainnet `"USD Coin"`).
    pub name: String,
    /// The token's EIP-712 `version` (for USDC `"2"`).
    pub version: String,
}

/// One way to pay: an entry of `PaymentRequired.accepts` and `PaymentPayload.accepted`.
///
/// It has exactly the seven fields of the v2 spec; keys a sender added beyond them are kept in
/// [`unknown`](Self::unknown) but hiregate never emits any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// Payment scheme, `"exact"` for the one hiregate implements.
    pub scheme: String,
    /// CAIP-2 network, e.g. `eip155:8453`; any CAIP-2 id decodes (see [`Network`]).
    #[serde(deserialize_with = "Network::deserialize_caip2")]
    pub network: Network,
    /// Price in the asset's atomic units.
    pub amount: DecimalU256,
    /// Token contract address (EVM) or mint; kept as written.
    pub asset: String,
    /// Recipient address; kept as written.
    pub pay_to: String,
    /// How long the payment authorization must stay valid, in seconds.
    pub max_timeout_seconds: u64,
    /// Scheme-specific data; for EVM `exact`: `{name, version}` of the token's EIP-712 domain.
    #[serde(default, deserialize_with = "object_or_null")]
    pub extra: Map<String, Value>,
    /// Keys beyond the seven, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl PaymentRequirements {
    /// The requirements of an EIP-3009 `exact` payment on an EVM chain, addresses checksummed.
    #[must_use]
    pub fn exact_evm(
        network: Network,
        amount: U256,
        asset: Address,
        pay_to: Address,
        max_timeout_seconds: u64,
        domain: &TokenDomain,
    ) -> Self {
        let mut extra = Map::new();
        extra.insert("name".into(), Value::String(domain.name.clone()));
        extra.insert("version".into(), Value::String(domain.version.clone()));
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

    /// The token contract, when `asset` is an EVM address.
    pub fn evm_asset(&self) -> Result<Address, Reason> {
        self.asset
            .parse()
            .map_err(|_| Reason::InvalidPaymentRequirements)
    }

    /// The recipient, when `payTo` is an EVM address.
    pub fn evm_pay_to(&self) -> Result<Address, Reason> {
        self.pay_to
            .parse()
            .map_err(|_| Reason::InvalidPaymentRequirements)
    }

    /// The token's EIP-712 domain from `extra.name` and `extra.version`.
    pub fn token_domain(&self) -> Result<TokenDomain, Reason> {
        let field = |key: &str| {
            self.extra
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(Reason::MissingEip712Domain)
        };
        Ok(TokenDomain {
            name: field("name")?,
            version: field("version")?,
        })
    }

    /// Names (wire spelling) of the fields where `accepted` differs from this offer.
    ///
    /// `self` is the server's own offer and `accepted` the client's copy. The comparison follows
    /// the reference server: every one of the seven fields must match; EVM addresses compare as
    /// addresses (case-insensitive); under `extra` every key the offer declares must be present
    /// and equal, while keys the client added are tolerated. Keys beyond the seven are ignored
    /// because the facilitator is always sent the offer, never the client's copy.
    #[must_use]
    pub fn mismatched_fields(&self, accepted: &Self) -> Vec<&'static str> {
        let mut mismatched = Vec::new();
        if self.scheme != accepted.scheme {
            mismatched.push("scheme");
        }
        if self.network != accepted.network {
            mismatched.push("network");
        }
        if self.amount != accepted.amount {
            mismatched.push("amount");
        }
        if !same_address(&self.asset, &accepted.asset) {
            mismatched.push("asset");
        }
        if !same_address(&self.pay_to, &accepted.pay_to) {
            mismatched.push("payTo");
        }
        if self.max_timeout_seconds != accepted.max_timeout_seconds {
            mismatched.push("maxTimeoutSeconds");
        }
        let extra_matches = self
            .extra
            .iter()
            .all(|(key, value)| accepted.extra.get(key) == Some(value));
        if !extra_matches {
            mismatched.push("extra");
        }
        mismatched
    }
}

/// Two address strings name the same account: EVM addresses compare case-insensitively (EIP-55
/// checksums are only a spelling), anything else compares byte for byte.
pub(crate) fn same_address(a: &str, b: &str) -> bool {
    match (a.parse::<Address>(), b.parse::<Address>()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// What is being paid for (`PaymentRequired.resource`, optionally echoed in the payload).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// URL of the resource; in hiregate it names the contract.
    pub url: String,
    /// Human-readable description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type of the resource's response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Other keys (`serviceName`, `tags`, `iconUrl`, future ones), kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl ResourceInfo {
    /// A resource with only its URL.
    #[must_use]
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            description: None,
            mime_type: None,
            unknown: UnknownFields::new(),
        }
    }
}

/// The 402 challenge, base64-encoded in the `PAYMENT-REQUIRED` header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    /// Always 2.
    pub x402_version: X402Version2,
    /// Why payment is (still) required, e.g. the facilitator's `invalidReason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What is being paid for.
    pub resource: ResourceInfo,
    /// The ways to pay.
    pub accepts: Vec<PaymentRequirements>,
    /// Extensions the server offers (e.g. `payment-identifier`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Extensions,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

/// The signed payment, base64-encoded in the `PAYMENT-SIGNATURE` header.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// Always 2.
    pub x402_version: X402Version2,
    /// The resource as the client saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The client's copy of the requirements it chose (never trusted by the server).
    pub accepted: PaymentRequirements,
    /// The scheme-specific signed payload; for EVM `exact` see
    /// [`ExactEvmPayload`](crate::exact::ExactEvmPayload).
    pub payload: Value,
    /// The server's extensions echoed back, plus the client's additions.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Extensions,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl fmt::Debug for PaymentPayload {
    // The payload is a bearer instrument until settled: never print the signature.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentPayload")
            .field("resource", &self.resource)
            .field("accepted", &self.accepted)
            .field("payload", &"<redacted>")
            .field("extensions", &self.extensions.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Body of `POST /verify` (and, as [`SettleRequest`], of `POST /settle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyRequest {
    /// Always 2 (x402-rs refuses requests without it).
    pub x402_version: X402Version2,
    /// The client's signed payment.
    pub payment_payload: PaymentPayload,
    /// The server's own copy of the matched requirements.
    pub payment_requirements: PaymentRequirements,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl VerifyRequest {
    /// A v2 request for `payload` against the server's `requirements`.
    #[must_use]
    pub fn new(payment_payload: PaymentPayload, payment_requirements: PaymentRequirements) -> Self {
        Self {
            x402_version: X402Version2,
            payment_payload,
            payment_requirements,
            unknown: UnknownFields::new(),
        }
    }
}

/// Body of `POST /settle`: the same shape as `/verify`.
pub type SettleRequest = VerifyRequest;

/// The facilitator's verdict on `/verify`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment would settle.
    pub is_valid: bool,
    /// Why not, when `is_valid` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<Reason>,
    /// Free-text detail (TS `invalidMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// The paying address, when known. Kept as a string: some facilitators send `""`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Extension data returned by the facilitator.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Extensions,
    /// Other keys (x402-rs `invalidReasonDetails`, …), kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl VerifyResponse {
    /// A positive verdict.
    #[must_use]
    pub fn valid(payer: Address) -> Self {
        Self {
            is_valid: true,
            invalid_reason: None,
            invalid_message: None,
            payer: Some(payer.to_checksum(None)),
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }

    /// A negative verdict.
    #[must_use]
    pub fn invalid(reason: Reason, payer: Option<Address>, message: Option<String>) -> Self {
        Self {
            is_valid: false,
            invalid_reason: Some(reason),
            invalid_message: message,
            payer: payer.map(|p| p.to_checksum(None)),
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }
}

/// The facilitator's outcome of `/settle`; also the `PAYMENT-RESPONSE` header's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the transfer happened.
    pub success: bool,
    /// Why not, when `success` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<Reason>,
    /// Free-text detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The paying address, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Transaction hash; `""` when nothing was broadcast.
    #[serde(default)]
    pub transaction: String,
    /// CAIP-2 network. A string, not a [`Network`]: failing facilitators send `""`.
    #[serde(default)]
    pub network: String,
    /// Amount actually settled (`upto` scheme).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<String>,
    /// Extension data returned by the facilitator.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Extensions,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl SettleResponse {
    /// A successful settlement by `transaction`.
    #[must_use]
    pub fn settled(network: &Network, payer: Address, transaction: impl fmt::Display) -> Self {
        Self {
            success: true,
            error_reason: None,
            error_message: None,
            payer: Some(payer.to_checksum(None)),
            transaction: transaction.to_string(),
            network: network.to_string(),
            amount: None,
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }

    /// A failed settlement. `transaction` is `""` unless something was broadcast.
    #[must_use]
    pub fn failed(
        network: &str,
        reason: Reason,
        payer: Option<Address>,
        transaction: Option<String>,
        message: Option<String>,
    ) -> Self {
        Self {
            success: false,
            error_reason: Some(reason),
            error_message: message,
            payer: payer.map(|p| p.to_checksum(None)),
            transaction: transaction.unwrap_or_default(),
            network: network.to_owned(),
            amount: None,
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }
}

/// One `(version, scheme, network)` a facilitator can handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// Protocol version of this kind (1 or 2); a plain number because facilitators list v1 too.
    pub x402_version: u64,
    /// Scheme name.
    pub scheme: String,
    /// Network id (CAIP-2 for v2, a name for v1).
    pub network: String,
    /// Scheme-specific data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

/// Body of `GET /supported`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct SupportedResponse {
    /// What the facilitator can verify and settle.
    pub kinds: Vec<SupportedKind>,
    /// Extension ids the facilitator understands.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Signer (relayer) addresses by CAIP family pattern, e.g. `"eip155:*"`.
    #[serde(default)]
    pub signers: BTreeMap<String, Vec<String>>,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

/// `extra.assetTransferMethod` for ERC-3009 (the default).
pub const METHOD_EIP3009: &str = "eip3009";
/// `extra.assetTransferMethod` for Permit2.
pub const METHOD_PERMIT2: &str = "permit2";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_carry_any_caip2_network_and_refuse_what_is_not_one() {
        let mut json = serde_json::to_value(offer()).unwrap();
        json["network"] = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".into();
        let solana: PaymentRequirements = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(solana.network.chain_id(), None);
        assert_eq!(serde_json::to_value(&solana).unwrap(), json);
        json["network"] = "eip155:01".into();
        let padded: PaymentRequirements = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(padded.network.chain_id(), None);
        assert_eq!(serde_json::to_value(&padded).unwrap(), json);
        json["network"] = "base".into();
        let error = serde_json::from_value::<PaymentRequirements>(json).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`base` is not a CAIP-2 network id (namespace:reference)"),
            "{error}"
        );
    }

    #[test]
    fn decimal_u256_is_strict_and_round_trips() {
        let max = U256::MAX.to_string();
        assert_eq!(max.parse::<DecimalU256>().unwrap().get(), U256::MAX);
        assert_eq!("0".parse::<DecimalU256>().unwrap().get(), U256::ZERO);
        for bad in [
            "",
            "-1",
            "+1",
            "01",
            "1.0",
            "1e6",
            " 1",
            "0x10",
            &format!("{max}0"),
        ] {
            assert!(bad.parse::<DecimalU256>().is_err(), "{bad:?} accepted");
        }
        let json = serde_json::to_string(&DecimalU256::from(10_000u64)).unwrap();
        assert_eq!(json, "\"10000\"");
        assert!(
            serde_json::from_str::<DecimalU256>("10000").is_err(),
            "JSON number accepted"
        );
    }

    #[test]
    fn version_marker_refuses_other_versions() {
        assert!(serde_json::from_str::<X402Version2>("2").is_ok());
        assert!(serde_json::from_str::<X402Version2>("1").is_err());
        assert!(serde_json::from_str::<X402Version2>("\"2\"").is_err());
    }

    fn offer() -> PaymentRequirements {
        PaymentRequirements::exact_evm(
            Network::eip155(84532).unwrap(),
            U256::from(10_000u64),
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
                .parse()
                .unwrap(),
            "0xfa3F54AE9C4287CA09a486dfaFaCe7d1d4095d93"
                .parse()
                .unwrap(),
            300,
            &TokenDomain {
                name: "USDC".into(),
                version: "2".into(),
            },
        )
    }

    #[test]
    fn mismatched_fields_names_each_differing_field() {
        let offer = offer();
        assert!(offer.mismatched_fields(&offer.clone()).is_empty());

        let mut lowercase = offer.clone();
        lowercase.pay_to = lowercase.pay_to.to_lowercase();
        lowercase.asset = lowercase.asset.to_lowercase();
        assert!(offer.mismatched_fields(&lowercase).is_empty());

        let mut added_extra = offer.clone();
        added_extra
            .extra
            .insert("clientHint".into(), Value::Bool(true));
        assert!(offer.mismatched_fields(&added_extra).is_empty());

        let mut tampered = offer.clone();
        tampered.scheme = "upto".into();
        tampered.network = Network::eip155(8453).unwrap();
        tampered.amount = DecimalU256::from(1u64);
        tampered.asset = "0x0000000000000000000000000000000000000001".into();
        tampered.pay_to = "0x0000000000000000000000000000000000000002".into();
        tampered.max_timeout_seconds = 1;
        tampered
            .extra
            .insert("name".into(), Value::String("USD Coin".into()));
        assert_eq!(
            offer.mismatched_fields(&tampered),
            vec![
                "scheme",
                "network",
                "amount",
                "asset",
                "payTo",
                "maxTimeoutSeconds",
                "extra"
            ]
        );

        let mut missing_extra = offer.clone();
        missing_extra.extra.remove("version");
        assert_eq!(offer.mismatched_fields(&missing_extra), vec!["extra"]);
    }

    #[test]
    fn requirements_serialize_exactly_seven_fields() {
        let value = serde_json::to_value(offer()).unwrap();
        let keys: Vec<_> = value.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys.len(),
            7,
            "requirements must carry exactly seven fields: {keys:?}"
        );
        assert_eq!(value["amount"], "10000");
        assert_eq!(value["payTo"], "0xfa3F54AE9C4287CA09a486dfaFaCe7d1d4095d93");
        assert_eq!(value["extra"]["name"], "USDC");
    }

    #[test]
    fn null_extra_reads_as_empty() {
        let mut value = serde_json::to_value(offer()).unwrap();
        value["extra"] = Value::Null;
        let parsed: PaymentRequirements = serde_json::from_value(value).unwrap();
        assert!(parsed.extra.is_empty());
        assert_eq!(parsed.token_domain(), Err(Reason::MissingEip712Domain));
    }

    #[test]
    fn payload_debug_never_shows_the_signature() {
        let payload = PaymentPayload {
            x402_version: X402Version2,
            resource: None,
            accepted: offer(),
            payload: serde_json::json!({"signature": "0xdeadbeefcafe"}),
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        };
        let printed = format!("{payload:?}");
        assert!(!printed.contains("deadbeef"), "{printed}");
    }
}
