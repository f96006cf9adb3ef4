//! Money on the wire: CAIP-2 [`Network`], EVM [`EvmAddress`], [`AtomicAmount`] and the
//! contract [`Price`].
//!
//! No alloy here on purpose (`contracts` stays light for workers); `payments` converts these
//! into alloy types at its edge.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A CAIP-2 chain identifier (`namespace:reference`): the one network type of the workspace,
/// used by contract terms, listings, settings, store rows and the x402 wire alike.
///
/// It can hold any CAIP-2 id, not only EVM chains, because x402 messages may name chains
/// hiregate does not settle on (a client may list `solana:…` in `accepts`, a facilitator
/// answers for them in `/supported`): such a message must still decode, so that it is refused
/// with a clear reason (`invalid_network`) instead of failing as malformed. hiregate itself
/// settles only on EVM chains, so the *default* parse ([`FromStr`], `Deserialize`) accepts
/// only `eip155:<chain id>` in canonical form: that is what terms, listings, settings and
/// stored rows hold, and what a bad configuration or request is refused against. The x402
/// wire opts in to any CAIP-2 id field by field ([`Network::parse_caip2`],
/// [`Network::deserialize_caip2`]); [`Network::chain_id`] then says whether it is an EVM
/// chain hiregate can use.
///
/// The text is kept as written (`eip155:01` read off the wire stays `eip155:01` and is no
/// EVM chain) and inline: a CAIP-2 id has at most 41 bytes, so the type is `Copy` and needs
/// no allocation. Networks compare and order as their text, as the store's columns do.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Network {
    len: u8,
    text: [u8; Network::MAX_LEN],
}

/// Why a network string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// Not of the form `eip155:<decimal chain id>`.
    #[error("network must be CAIP-2 \"eip155:<chain id>\", e.g. \"eip155:8453\"")]
    NotEip155,
    /// The chain id has leading zeros, is zero or does not fit in 64 bits.
    #[error("chain id must be a positive decimal integer without leading zeros")]
    BadChainId,
    /// Not `namespace:reference` as CAIP-2 defines it (the x402 wire's parse).
    #[error("`{0}` is not a CAIP-2 network id (namespace:reference)")]
    NotCaip2(String),
}

impl Network {
    /// The longest CAIP-2 id: an 8-byte namespace, `:` and a 32-byte reference.
    pub const MAX_LEN: usize = 41;

    /// The CAIP-2 network of an EVM chain; refuses chain id 0.
    pub fn eip155(chain_id: u64) -> Result<Self, NetworkError> {
        if chain_id == 0 {
            return Err(NetworkError::BadChainId);
        }
        Ok(Self::from_checked_text(&format!("eip155:{chain_id}")))
    }

    /// Any CAIP-2 id (namespace `[-a-z0-9]{3,8}`, reference `[-_a-zA-Z0-9]{1,32}`), as the
    /// x402 wire may carry it; [`Self::chain_id`] tells whether hiregate can settle on it.
    pub fn parse_caip2(raw: &str) -> Result<Self, NetworkError> {
        let valid = raw.split_once(':').is_some_and(|(namespace, reference)| {
            (3..=8).contains(&namespace.len())
                && namespace
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && (1..=32).contains(&reference.len())
                && reference
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
        if valid {
            Ok(Self::from_checked_text(raw))
        } else {
            Err(NetworkError::NotCaip2(raw.to_owned()))
        }
    }

    /// Serde's `deserialize_with` for x402 wire fields: any CAIP-2 id ([`Self::parse_caip2`]).
    pub fn deserialize_caip2<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Self::parse_caip2(&raw).map_err(serde::de::Error::custom)
    }

    /// `text` was checked to be CAIP-2 (ASCII, at most [`Self::MAX_LEN`] bytes).
    fn from_checked_text(text: &str) -> Self {
        let mut inline = [0u8; Self::MAX_LEN];
        let len = text.len().min(Self::MAX_LEN);
        inline[..len].copy_from_slice(&text.as_bytes()[..len]);
        Self {
            len: u8::try_from(len).unwrap_or(u8::MAX),
            text: inline,
        }
    }

    /// The EVM chain id when this is `eip155:<chain id>` in canonical form (no leading zero,
    /// not zero, fits 64 bits); `None` for any other network, which hiregate cannot settle on.
    #[must_use]
    pub fn chain_id(&self) -> Option<u64> {
        let reference = self.as_str().strip_prefix("eip155:")?;
        if reference.starts_with('0') || !reference.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        reference.parse().ok()
    }

    /// The id as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only checked ASCII is ever stored, so this never falls back.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl FromStr for Network {
    type Err = NetworkError;
    /// Only an EVM chain in canonical form: `eip155:<chain id>` (see the type's docs).
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let reference = raw.strip_prefix("eip155:").ok_or(NetworkError::NotEip155)?;
        if reference.is_empty()
            || reference.starts_with('0')
            || !reference.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(NetworkError::BadChainId);
        }
        let chain_id = reference.parse().map_err(|_| NetworkError::BadChainId)?;
        Self::eip155(chain_id)
    }
}

impl TryFrom<String> for Network {
    type Error = NetworkError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<Network> for String {
    fn from(network: Network) -> Self {
        network.to_string()
    }
}

impl Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Network {
    /// The default parse: EVM chains only ([`FromStr`]).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

impl PartialOrd for Network {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Network {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Network({self})")
    }
}

/// A 20-byte EVM address. Parsing accepts all-lower or all-upper hex, and mixed case only when
/// it is a valid EIP-55 checksum (a mistyped payout address is refused instead of paid).
/// Always written in EIP-55 checksummed form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EvmAddress([u8; 20]);

/// Why an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Not `0x` followed by 40 hex characters.
    #[error("address must be 0x followed by 40 hex characters")]
    Malformed,
    /// Mixed case that is not the EIP-55 checksum of the address.
    #[error("address has mixed case but fails its EIP-55 checksum (typo?)")]
    BadChecksum,
}

impl EvmAddress {
    /// Wraps 20 raw bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 20]) -> Self {
        Self(bytes)
    }

    /// The 20 raw bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// True for `0x0000…0000`, which burns funds and is never a valid payee or token.
    #[must_use]
    pub fn is_zero(&self) -> bool {
        self.0 == [0u8; 20]
    }

    /// The EIP-55 checksummed spelling.
    #[must_use]
    pub fn to_checksummed(&self) -> String {
        use sha3::Digest as _;
        let lower = hex::encode(self.0);
        let hash = sha3::Keccak256::digest(lower.as_bytes());
        let mut out = String::with_capacity(42);
        out.push_str("0x");
        for (i, c) in lower.chars().enumerate() {
            let nibble = (hash[i / 2] >> (if i % 2 == 0 { 4 } else { 0 })) & 0x0f;
            if c.is_ascii_alphabetic() && nibble >= 8 {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// The all-lowercase spelling (what chains and most JSON-RPC tools print).
    #[must_use]
    pub fn to_lowercase_hex(&self) -> String {
        format!("0x{}", hex::encode(self.0))
    }
}

impl FromStr for EvmAddress {
    type Err = AddressError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let body = raw
            .strip_prefix("0x")
            .or_else(|| raw.strip_prefix("0X"))
            .ok_or(AddressError::Malformed)?;
        if body.len() != 40 {
            return Err(AddressError::Malformed);
        }
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(body, &mut bytes).map_err(|_| AddressError::Malformed)?;
        let address = Self(bytes);
        let has_lower = body.bytes().any(|b| b.is_ascii_lowercase());
        let has_upper = body.bytes().any(|b| b.is_ascii_uppercase());
        if has_lower && has_upper && address.to_checksummed()[2..] != *body {
            return Err(AddressError::BadChecksum);
        }
        Ok(address)
    }
}

impl TryFrom<String> for EvmAddress {
    type Error = AddressError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<EvmAddress> for String {
    fn from(address: EvmAddress) -> Self {
        address.to_checksummed()
    }
}

impl fmt::Display for EvmAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_checksummed())
    }
}

impl fmt::Debug for EvmAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EvmAddress({self})")
    }
}

/// A token amount in atomic units (e.g. 1 USDC = `1000000`), written as a decimal string as
/// x402 does, so JSON number precision (and JCS, which writes numbers as doubles) never
/// touches money.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AtomicAmount(u128);

/// Why an amount was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// Not a plain decimal integer string (no sign, no leading zeros, no exponent).
    #[error("amount must be a decimal integer string in atomic units, e.g. \"1000000\"")]
    NotDecimal,
    /// Larger than 2^128 - 1.
    #[error("amount is too large")]
    TooLarge,
}

impl AtomicAmount {
    /// Wraps a number of atomic units.
    #[must_use]
    pub const fn new(units: u128) -> Self {
        Self(units)
    }

    /// The number of atomic units.
    #[must_use]
    pub const fn units(&self) -> u128 {
        self.0
    }

    /// True for zero.
    #[must_use]
    pub const fn is_zero(&self) -> bool {
        self.0 == 0
    }
}

impl FromStr for AtomicAmount {
    type Err = AmountError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        if raw.is_empty()
            || !raw.bytes().all(|b| b.is_ascii_digit())
            || (raw.len() > 1 && raw.starts_with('0'))
        {
            return Err(AmountError::NotDecimal);
        }
        raw.parse().map(Self).map_err(|_| AmountError::TooLarge)
    }
}

impl TryFrom<String> for AtomicAmount {
    type Error = AmountError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<AtomicAmount> for String {
    fn from(amount: AtomicAmount) -> Self {
        amount.0.to_string()
    }
}

impl fmt::Display for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Debug for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AtomicAmount({})", self.0)
    }
}

/// The x402 payment scheme of a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PaymentScheme {
    /// x402 `exact`: an EIP-3009 `transferWithAuthorization` of exactly the price, settled
    /// after verification (the gateway holds a signature, not money).
    #[serde(rename = "exact")]
    Exact,
    /// x402 `auth-capture`: the price is locked in base/commerce-payments' `AuthCaptureEscrow`
    /// before the work starts, captured after verification, voided or refunded otherwise.
    #[serde(rename = "auth-capture")]
    AuthCapture,
    /// x402 `upto`: a Permit2 authorization of at most the price; after verification only the
    /// verified amount is settled, counted as the terms' [`Metering`](crate::metering::Metering)
    /// says (nothing for a rejection).
    #[serde(rename = "upto")]
    Upto,
}

/// An unknown scheme name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown payment scheme {0:?}: expected \"exact\", \"auth-capture\" or \"upto\"")]
pub struct UnknownScheme(pub String);

impl PaymentScheme {
    /// Every scheme, `exact` first (the default).
    pub const ALL: [Self; 3] = [Self::Exact, Self::AuthCapture, Self::Upto];

    /// The x402 wire name.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::AuthCapture => "auth-capture",
            Self::Upto => "upto",
        }
    }

    /// True when the money is locked in an escrow before the work starts.
    #[must_use]
    pub const fn is_escrowed(&self) -> bool {
        matches!(self, Self::AuthCapture)
    }
}

impl FromStr for PaymentScheme {
    type Err = UnknownScheme;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|scheme| scheme.as_str() == raw)
            .ok_or_else(|| UnknownScheme(raw.to_owned()))
    }
}

impl fmt::Display for PaymentScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a contract costs: scheme, chain, token and amount.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PriceWire")]
pub struct Price {
    scheme: PaymentScheme,
    network: Network,
    /// `network`'s chain id: a price is always on an EVM chain. Not written: the network says it.
    #[serde(skip)]
    chain_id: u64,
    asset: EvmAddress,
    amount: AtomicAmount,
}

/// Why a price was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriceError {
    /// The amount is zero: x402 cannot carry a free payment.
    #[error("price amount must be greater than zero")]
    ZeroAmount,
    /// The asset is the zero address.
    #[error("price asset must be a token contract, not the zero address")]
    ZeroAsset,
    /// The network is no EVM chain (only the x402 wire's parse lets such a network in).
    #[error("price network must be an EVM chain, eip155:<chain id>")]
    NotEvm,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceWire {
    scheme: PaymentScheme,
    network: Network,
    asset: EvmAddress,
    amount: AtomicAmount,
}

impl TryFrom<PriceWire> for Price {
    type Error = PriceError;
    fn try_from(wire: PriceWire) -> Result<Self, Self::Error> {
        Self::new(wire.scheme, wire.network, wire.asset, wire.amount)
    }
}

impl Price {
    /// A price; refuses a zero amount, a zero asset address and a network that is no EVM chain.
    pub fn new(
        scheme: PaymentScheme,
        network: Network,
        asset: EvmAddress,
        amount: AtomicAmount,
    ) -> Result<Self, PriceError> {
        if amount.is_zero() {
            return Err(PriceError::ZeroAmount);
        }
        if asset.is_zero() {
            return Err(PriceError::ZeroAsset);
        }
        let chain_id = network.chain_id().ok_or(PriceError::NotEvm)?;
        Ok(Self {
            scheme,
            network,
            chain_id,
            asset,
            amount,
        })
    }

    /// The x402 scheme.
    #[must_use]
    pub const fn scheme(&self) -> PaymentScheme {
        self.scheme
    }
    /// The CAIP-2 network.
    #[must_use]
    pub const fn network(&self) -> Network {
        self.network
    }
    /// The EVM chain id of [`Self::network`].
    #[must_use]
    pub const fn chain_id(&self) -> u64 {
        self.chain_id
    }
    /// The token contract address.
    #[must_use]
    pub const fn asset(&self) -> EvmAddress {
        self.asset
    }
    /// The amount in atomic units.
    #[must_use]
    pub const fn amount(&self) -> AtomicAmount {
        self.amount
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // EIP-55 test vectors from the EIP text.
    const EIP55_VECTORS: [&str; 4] = [
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ];

    #[test]
    fn eip55_vectors_round_trip() {
        for vector in EIP55_VECTORS {
            let address: EvmAddress = vector.parse().unwrap();
            assert_eq!(address.to_string(), vector);
            let lower: EvmAddress = vector.to_lowercase().parse().unwrap();
            assert_eq!(lower, address);
        }
    }

    #[test]
    fn bad_checksum_and_malformed_addresses_are_refused() {
        // One letter's case flipped.
        let typo = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD";
        assert_eq!(typo.parse::<EvmAddress>(), Err(AddressError::BadChecksum));
        assert_eq!("0x1234".parse::<EvmAddress>(), Err(AddressError::Malformed));
        assert_eq!(
            "5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".parse::<EvmAddress>(),
            Err(AddressError::Malformed)
        );
        assert_eq!(
            "0xZZAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".parse::<EvmAddress>(),
            Err(AddressError::Malformed)
        );
    }

    #[test]
    fn networks_are_eip155_only() {
        let base: Network = "eip155:8453".parse().unwrap();
        assert_eq!(base.chain_id(), Some(8453));
        assert_eq!(base.to_string(), "eip155:8453");
        assert_eq!(
            "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".parse::<Network>(),
            Err(NetworkError::NotEip155)
        );
        assert_eq!(
            "eip155:08453".parse::<Network>(),
            Err(NetworkError::BadChainId)
        );
        assert_eq!("eip155:0".parse::<Network>(), Err(NetworkError::BadChainId));
        assert_eq!("eip155:".parse::<Network>(), Err(NetworkError::BadChainId));
        assert_eq!(
            "eip155:99999999999999999999999".parse::<Network>(),
            Err(NetworkError::BadChainId)
        );
    }

    #[test]
    fn the_wire_parse_takes_any_caip2_id_and_keeps_its_text() {
        let base = Network::parse_caip2("eip155:8453").unwrap();
        assert_eq!(base, "eip155:8453".parse::<Network>().unwrap());
        assert_eq!(base.chain_id(), Some(8453));
        let solana = Network::parse_caip2("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp").unwrap();
        assert_eq!(solana.chain_id(), None);
        assert_eq!(solana.as_str(), "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
        // A padded chain id is CAIP-2 but no EVM chain hiregate names: kept as written.
        let padded = Network::parse_caip2("eip155:01").unwrap();
        assert_eq!((padded.as_str(), padded.chain_id()), ("eip155:01", None));
        assert_eq!(Network::parse_caip2("eip155:0").unwrap().chain_id(), None);
        for bad in [
            "",
            "eip155",
            "eip155:",
            "EIP155:1",
            "ab:1",
            "eip155:1:2",
            "eip155: 1",
        ] {
            assert_eq!(
                Network::parse_caip2(bad),
                Err(NetworkError::NotCaip2(bad.to_owned())),
                "{bad:?} accepted"
            );
        }
        let longest = format!("abcdefgh:{}", "r".repeat(32));
        assert_eq!(Network::parse_caip2(&longest).unwrap().as_str(), longest);
        // Ordered as text, as the store's columns are.
        assert!(Network::eip155(31337).unwrap() < Network::eip155(8453).unwrap());
        let price = Price::new(
            PaymentScheme::Exact,
            solana,
            EIP55_VECTORS[0].parse().unwrap(),
            AtomicAmount::new(1),
        );
        assert_eq!(price, Err(PriceError::NotEvm));
    }

    #[test]
    fn amounts_are_strict_decimal_strings() {
        assert_eq!("0".parse::<AtomicAmount>().unwrap().units(), 0);
        assert_eq!(
            "1000000".parse::<AtomicAmount>().unwrap().units(),
            1_000_000
        );
        for bad in ["", "01", "-1", "+1", "1e6", "1.0", " 1"] {
            assert_eq!(
                bad.parse::<AtomicAmount>(),
                Err(AmountError::NotDecimal),
                "{bad:?}"
            );
        }
        assert_eq!(
            "340282366920938463463374607431768211456".parse::<AtomicAmount>(),
            Err(AmountError::TooLarge)
        );
        // A JSON number is not accepted: amounts are strings on the wire.
        assert!(serde_json::from_str::<AtomicAmount>("1000000").is_err());
    }

    #[test]
    fn price_refuses_zero_amount_and_zero_asset() {
        let network = Network::eip155(84532).unwrap();
        let usdc: EvmAddress = EIP55_VECTORS[0].parse().unwrap();
        assert_eq!(
            Price::new(PaymentScheme::Exact, network, usdc, AtomicAmount::new(0)),
            Err(PriceError::ZeroAmount)
        );
        assert_eq!(
            Price::new(
                PaymentScheme::Exact,
                network,
                EvmAddress::from_bytes([0; 20]),
                AtomicAmount::new(1)
            ),
            Err(PriceError::ZeroAsset)
        );
        let json = r#"{"scheme":"exact","network":"eip155:84532","asset":"0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed","amount":"0"}"#;
        assert!(serde_json::from_str::<Price>(json).is_err());
    }

    #[test]
    fn schemes_use_their_x402_names() {
        for scheme in PaymentScheme::ALL {
            let json = serde_json::to_value(scheme).unwrap();
            assert_eq!(json, serde_json::json!(scheme.as_str()));
            assert_eq!(
                serde_json::from_value::<PaymentScheme>(json).unwrap(),
                scheme
            );
            assert_eq!(scheme.as_str().parse::<PaymentScheme>().unwrap(), scheme);
        }
        assert_eq!(PaymentScheme::AuthCapture.as_str(), "auth-capture");
        assert!("auth_capture".parse::<PaymentScheme>().is_err());
        assert!(serde_json::from_str::<PaymentScheme>("\"batch-settlement\"").is_err());
        assert_eq!(PaymentScheme::Upto.as_str(), "upto");
        assert!(!PaymentScheme::Upto.is_escrowed());
        assert!(PaymentScheme::AuthCapture.is_escrowed());
        assert!(!PaymentScheme::Exact.is_escrowed());
    }

    proptest! {
        #[test]
        fn any_address_round_trips_in_every_case_form(bytes: [u8; 20]) {
            let address = EvmAddress::from_bytes(bytes);
            let checksummed = address.to_checksummed();
            prop_assert_eq!(checksummed.parse::<EvmAddress>().unwrap(), address);
            prop_assert_eq!(address.to_lowercase_hex().parse::<EvmAddress>().unwrap(), address);
            prop_assert_eq!(
                format!("0x{}", hex::encode_upper(bytes)).parse::<EvmAddress>().unwrap(),
                address
            );
        }

        #[test]
        fn any_amount_round_trips(units: u128) {
            let amount = AtomicAmount::new(units);
            prop_assert_eq!(amount.to_string().parse::<AtomicAmount>().unwrap(), amount);
        }
    }
}
