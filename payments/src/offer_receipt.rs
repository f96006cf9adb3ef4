//! The `offer-receipt` extension (x402 `extensions/extension-offer-and-receipt.md`): the resource
//! server signs the terms it offers in `accepts[]` and, after a paid delivery, a receipt, so a
//! client holds evidence for disputes and reviews that outlives the HTTP exchange.
//!
//! - Offers ride in `PaymentRequired.extensions["offer-receipt"].info.offers[]`
//!   ([`offers_extension`], [`offers_in`]), one per `accepts[]` entry, matched by their fields
//!   ([`OfferPayload::matches`]), never by `acceptIndex` alone.
//! - A receipt rides in the settlement response's `extensions["offer-receipt"].info.receipt`
//!   ([`receipt_extension`], [`receipt_in`]), only on success.
//! - Both are a [`SignedArtifact`] `{format, payload?, signature, acceptIndex?}` in one of two
//!   formats: `eip712` (payload in the clear, 65-byte ECDSA signature over the spec's fixed types
//!   under the domain `{name: "x402 offer" | "x402 receipt", version: "1", chainId: 1}`), or
//!   `jws` (compact JWS carrying the payload; `alg` and a `kid` in its header). EIP-712 artifacts
//!   are signed and verified here ([`sign_offer`], [`verify_offer`], [`sign_receipt`],
//!   [`verify_receipt`]); for JWS this module builds the signing input and reads the parts
//!   ([`jws_signing_input`], [`jws_artifact`], [`JwsParts::decode`]) so any key type can sign and
//!   check it (hiregate's gateway keys are Ed25519).
//!
//! Who may sign for a resource is the verifier's policy (the spec's §4.5.1): the recovered
//! address is returned, and the caller compares it with `payTo`, a published key, or a registry.
//! The spec marks the wire placement as not yet stable; the payloads and signatures are normative.

use alloy::primitives::{Address, Bytes, U256};
use alloy::signers::Signer;
use alloy::sol_types::{Eip712Domain, SolStruct};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::wire::{Extensions, PaymentRequirements, UnknownFields, same_address};

/// The extension's key in `extensions`.
pub const OFFER_RECEIPT: &str = "offer-receipt";

/// The payload version this module signs and reads.
pub const PAYLOAD_VERSION: u64 = 1;

mod typed {
    alloy::sol! {
        /// The spec's canonical EIP-712 offer type.
        #[derive(Debug)]
        struct Offer {
            uint256 version;
            string resourceUrl;
            string scheme;
            string network;
            string asset;
            string payTo;
            string amount;
            uint256 validUntil;
        }

        /// The spec's canonical EIP-712 receipt type.
        #[derive(Debug)]
        struct Receipt {
            uint256 version;
            string network;
            string resourceUrl;
            string payer;
            uint256 issuedAt;
            string transaction;
        }
    }
}

/// Why an artifact could not be read or verified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OfferReceiptError {
    /// Not the extension's shape, or a payload with missing, mistyped or unknown fields.
    #[error("malformed offer-receipt artifact: {0}")]
    Malformed(String),
    /// A payload version this module does not know.
    #[error("unsupported offer-receipt payload version {0}")]
    UnsupportedVersion(u64),
    /// The artifact is in the other format.
    #[error("artifact format is not {0}")]
    WrongFormat(&'static str),
    /// The signature is not 65 bytes or does not recover.
    #[error("signature does not verify")]
    BadSignature,
    /// A JWS `kid` that names no key the verifier trusts for the resource.
    #[error("JWS kid {0:?} names no key of this server")]
    UnknownKey(String),
}

fn malformed(what: impl std::fmt::Display) -> OfferReceiptError {
    OfferReceiptError::Malformed(what.to_string())
}

/// A signed offer's terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OfferPayload {
    /// Payload version, 1.
    pub version: u64,
    /// The paid resource.
    pub resource_url: String,
    /// Payment scheme.
    pub scheme: String,
    /// CAIP-2 network.
    pub network: String,
    /// Token address (or `native`).
    pub asset: String,
    /// Recipient.
    pub pay_to: String,
    /// Atomic units, as in the requirements.
    pub amount: String,
    /// Unix seconds until which the server stands by the offer; absent (or 0) for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<u64>,
}

impl OfferPayload {
    /// The offer of `requirements` for `resource_url`.
    #[must_use]
    pub fn for_requirements(
        resource_url: impl Into<String>,
        requirements: &PaymentRequirements,
        valid_until: Option<u64>,
    ) -> Self {
        Self {
            version: PAYLOAD_VERSION,
            resource_url: resource_url.into(),
            scheme: requirements.scheme.clone(),
            network: requirements.network.to_string(),
            asset: requirements.asset.clone(),
            pay_to: requirements.pay_to.clone(),
            amount: requirements.amount.to_string(),
            valid_until,
        }
    }

    /// Whether this offer's signed terms are `requirements`' (addresses compared as addresses).
    #[must_use]
    pub fn matches(&self, requirements: &PaymentRequirements) -> bool {
        self.scheme == requirements.scheme
            && self.network == requirements.network.as_str()
            && same_address(&self.asset, &requirements.asset)
            && same_address(&self.pay_to, &requirements.pay_to)
            && self.amount == requirements.amount.to_string()
    }

    fn typed(&self) -> typed::Offer {
        typed::Offer {
            version: U256::from(self.version),
            resourceUrl: self.resource_url.clone(),
            scheme: self.scheme.clone(),
            network: self.network.clone(),
            asset: self.asset.clone(),
            payTo: self.pay_to.clone(),
            amount: self.amount.clone(),
            // The spec: an absent optional field is signed as 0.
            validUntil: U256::from(self.valid_until.unwrap_or(0)),
        }
    }

    /// The EIP-712 digest an `eip712` offer signs.
    #[must_use]
    pub fn signing_hash(&self) -> alloy::primitives::B256 {
        self.typed().eip712_signing_hash(&domain("x402 offer"))
    }
}

/// A signed receipt's statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiptPayload {
    /// Payload version, 1.
    pub version: u64,
    /// CAIP-2 network.
    pub network: String,
    /// The paid resource.
    pub resource_url: String,
    /// The payer (commonly its address).
    pub payer: String,
    /// Unix seconds of issue.
    pub issued_at: u64,
    /// The settlement transaction, when the server trades privacy for verifiability; `""`
    /// counts as absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction: Option<String>,
}

impl ReceiptPayload {
    fn typed(&self) -> typed::Receipt {
        typed::Receipt {
            version: U256::from(self.version),
            network: self.network.clone(),
            resourceUrl: self.resource_url.clone(),
            payer: self.payer.clone(),
            issuedAt: U256::from(self.issued_at),
            transaction: self.transaction.clone().unwrap_or_default(),
        }
    }

    /// The EIP-712 digest an `eip712` receipt signs.
    #[must_use]
    pub fn signing_hash(&self) -> alloy::primitives::B256 {
        self.typed().eip712_signing_hash(&domain("x402 receipt"))
    }
}

fn domain(name: &'static str) -> Eip712Domain {
    Eip712Domain::new(
        Some(name.into()),
        Some("1".into()),
        Some(U256::from(1u8)),
        None,
        None,
    )
}

/// How an artifact is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SignatureFormat {
    /// EIP-712 typed data, payload in the clear.
    Eip712,
    /// JWS compact serialization carrying the payload.
    Jws,
}

/// An offer or a receipt as it travels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedArtifact {
    /// `eip712` or `jws`.
    pub format: SignatureFormat,
    /// The payload (EIP-712 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// `0x` hex ECDSA signature (EIP-712) or the compact JWS.
    pub signature: String,
    /// Offers only: a hint to the matching `accepts[]` entry, not signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_index: Option<usize>,
    /// Other keys, kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

fn read_payload<T: DeserializeOwned>(value: &Value) -> Result<T, OfferReceiptError> {
    let version = value
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("payload has no numeric version"))?;
    if version != PAYLOAD_VERSION {
        return Err(OfferReceiptError::UnsupportedVersion(version));
    }
    serde_json::from_value(value.clone()).map_err(malformed)
}

async fn sign_eip712<S, P: Serialize>(
    signer: &S,
    hash: alloy::primitives::B256,
    payload: &P,
    accept_index: Option<usize>,
) -> Result<SignedArtifact, alloy::signers::Error>
where
    S: Signer + Send + Sync + ?Sized,
{
    let signature = signer.sign_hash(&hash).await?;
    Ok(SignedArtifact {
        format: SignatureFormat::Eip712,
        // Plain strings and numbers: always converts.
        payload: Some(serde_json::to_value(payload).expect("payload converts to JSON")),
        signature: Bytes::copy_from_slice(&signature.as_bytes()).to_string(),
        accept_index,
        unknown: UnknownFields::new(),
    })
}

fn recover_eip712(
    artifact: &SignedArtifact,
    hash: alloy::primitives::B256,
) -> Result<Address, OfferReceiptError> {
    let signature: Bytes = artifact
        .signature
        .parse()
        .map_err(|_| OfferReceiptError::BadSignature)?;
    if signature.len() != 65 {
        return Err(OfferReceiptError::BadSignature);
    }
    alloy::primitives::Signature::from_raw(&signature)
        .ok()
        .and_then(|parsed| parsed.recover_address_from_prehash(&hash).ok())
        .ok_or(OfferReceiptError::BadSignature)
}

fn eip712_payload(artifact: &SignedArtifact) -> Result<&Value, OfferReceiptError> {
    if artifact.format != SignatureFormat::Eip712 {
        return Err(OfferReceiptError::WrongFormat("eip712"));
    }
    artifact
        .payload
        .as_ref()
        .ok_or_else(|| malformed("eip712 artifact without payload"))
}

/// Signs `offer` in the `eip712` format; `accept_index` is the unsigned hint.
pub async fn sign_offer<S>(
    signer: &S,
    offer: &OfferPayload,
    accept_index: Option<usize>,
) -> Result<SignedArtifact, alloy::signers::Error>
where
    S: Signer + Send + Sync + ?Sized,
{
    sign_eip712(signer, offer.signing_hash(), offer, accept_index).await
}

/// Verifies an `eip712` offer over its payload exactly as transmitted; returns the terms and
/// the signer's address (whose authority over the resource is the caller's to judge).
pub fn verify_offer(
    artifact: &SignedArtifact,
) -> Result<(OfferPayload, Address), OfferReceiptError> {
    let offer: OfferPayload = read_payload(eip712_payload(artifact)?)?;
    let signer = recover_eip712(artifact, offer.signing_hash())?;
    Ok((offer, signer))
}

/// Signs `receipt` in the `eip712` format.
pub async fn sign_receipt<S>(
    signer: &S,
    receipt: &ReceiptPayload,
) -> Result<SignedArtifact, alloy::signers::Error>
where
    S: Signer + Send + Sync + ?Sized,
{
    sign_eip712(signer, receipt.signing_hash(), receipt, None).await
}

/// Verifies an `eip712` receipt; returns the statement and the signer's address.
pub fn verify_receipt(
    artifact: &SignedArtifact,
) -> Result<(ReceiptPayload, Address), OfferReceiptError> {
    let receipt: ReceiptPayload = read_payload(eip712_payload(artifact)?)?;
    let signer = recover_eip712(artifact, receipt.signing_hash())?;
    Ok((receipt, signer))
}

/// The JWS signing input `base64url(header).base64url(payload)` for `payload` with the header
/// `{alg, kid}` the spec requires; sign its bytes with the key `kid` names. The payload is in
/// its RFC 8785 canonical form (the spec's §10; what the official issuer signs too).
#[must_use]
pub fn jws_signing_input<P: Serialize>(alg: &str, kid: &str, payload: &P) -> String {
    let header = json!({"alg": alg, "kid": kid});
    // A JSON object of strings and integers: always canonicalizes.
    let payload = hiregate_contracts::canonical::to_canonical_vec(payload)
        .expect("payload converts to canonical JSON");
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload)
    )
}

/// The `jws` artifact for a signing input and its signature bytes.
#[must_use]
pub fn jws_artifact(
    signing_input: &str,
    signature: &[u8],
    accept_index: Option<usize>,
) -> SignedArtifact {
    SignedArtifact {
        format: SignatureFormat::Jws,
        payload: None,
        signature: format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)),
        accept_index,
        unknown: UnknownFields::new(),
    }
}

/// The parts of a `jws` artifact, for a verifier holding the key `kid` names.
#[derive(Debug, Clone, PartialEq)]
pub struct JwsParts<T> {
    /// The header's `alg`.
    pub alg: String,
    /// The header's `kid`.
    pub kid: String,
    /// The payload, read strictly.
    pub payload: T,
    /// What the signature covers: `header.payload` as transmitted.
    pub signing_input: String,
    /// The signature bytes.
    pub signature: Vec<u8>,
}

impl<T: DeserializeOwned> JwsParts<T> {
    /// Splits and decodes a `jws` artifact (checking nothing cryptographic).
    pub fn decode(artifact: &SignedArtifact) -> Result<Self, OfferReceiptError> {
        if artifact.format != SignatureFormat::Jws {
            return Err(OfferReceiptError::WrongFormat("jws"));
        }
        let mut parts = artifact.signature.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed("not a compact JWS"));
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(malformed);
        let header: Value = serde_json::from_slice(&decode(header)?).map_err(malformed)?;
        let field = |key: &str| {
            header
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| malformed(format!("JWS header has no {key}")))
        };
        let payload_json: Value = serde_json::from_slice(&decode(payload)?).map_err(malformed)?;
        Ok(Self {
            alg: field("alg")?,
            kid: field("kid")?,
            payload: read_payload(&payload_json)?,
            signing_input: artifact.signature[..artifact.signature.rfind('.').unwrap_or(0)]
                .to_owned(),
            signature: decode(signature)?,
        })
    }
}

/// `extensions["offer-receipt"]` of a `PaymentRequired` carrying `offers`, with the JSON
/// Schema of its `info` (the x402 v2 extension shape).
#[must_use]
pub fn offers_extension(offers: &[SignedArtifact]) -> Value {
    json!({ "info": { "offers": offers }, "schema": offers_schema() })
}

/// `extensions["offer-receipt"]` of a settlement response carrying `receipt`, with the JSON
/// Schema of its `info`.
#[must_use]
pub fn receipt_extension(receipt: &SignedArtifact) -> Value {
    json!({ "info": { "receipt": receipt }, "schema": receipt_schema() })
}

/// An artifact's schema: `format` and `signature` always, the payload's for `eip712`.
fn artifact_schema(payload_properties: &Value, payload_required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": {
            "format": {"type": "string", "enum": ["eip712", "jws"]},
            "acceptIndex": {"type": "integer"},
            "payload": {
                "type": "object",
                "properties": payload_properties,
                "required": payload_required,
            },
            "signature": {"type": "string"},
        },
        "required": ["format", "signature"],
    })
}

fn offers_schema() -> Value {
    let offer = artifact_schema(
        &json!({
            "version": {"type": "integer"},
            "resourceUrl": {"type": "string"},
            "scheme": {"type": "string"},
            "network": {"type": "string"},
            "asset": {"type": "string"},
            "payTo": {"type": "string"},
            "amount": {"type": "string"},
            "validUntil": {"type": "integer"},
        }),
        &[
            "version",
            "resourceUrl",
            "scheme",
            "network",
            "asset",
            "payTo",
            "amount",
        ],
    );
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"offers": {"type": "array", "items": offer}},
        "required": ["offers"],
    })
}

fn receipt_schema() -> Value {
    let receipt = artifact_schema(
        &json!({
            "version": {"type": "integer"},
            "network": {"type": "string"},
            "resourceUrl": {"type": "string"},
            "payer": {"type": "string"},
            "issuedAt": {"type": "integer"},
            "transaction": {"type": "string"},
        }),
        &["version", "network", "resourceUrl", "payer", "issuedAt"],
    );
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"receipt": receipt},
        "required": ["receipt"],
    })
}

/// The signed offers in `extensions` (empty when the extension is absent).
pub fn offers_in(extensions: &Extensions) -> Result<Vec<SignedArtifact>, OfferReceiptError> {
    match extensions
        .get(OFFER_RECEIPT)
        .and_then(|extension| extension.get("info"))
        .and_then(|info| info.get("offers"))
    {
        None => Ok(Vec::new()),
        Some(offers) => serde_json::from_value(offers.clone()).map_err(malformed),
    }
}

/// The signed receipt in `extensions`, if any.
pub fn receipt_in(extensions: &Extensions) -> Result<Option<SignedArtifact>, OfferReceiptError> {
    extensions
        .get(OFFER_RECEIPT)
        .and_then(|extension| extension.get("info"))
        .and_then(|info| info.get("receipt"))
        .map(|receipt| serde_json::from_value(receipt.clone()).map_err(malformed))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Network, TokenDomain};
    use alloy::primitives::keccak256;
    use alloy::signers::local::PrivateKeySigner;

    fn requirements() -> PaymentRequirements {
        PaymentRequirements::exact_evm(
            Network::eip155(8453).unwrap(),
            U256::from(10_000u64),
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
                .parse()
                .unwrap(),
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
                .parse()
                .unwrap(),
            60,
            &TokenDomain {
                name: "USD Coin".into(),
                version: "2".into(),
            },
        )
    }

    #[test]
    fn types_are_the_specs_canonical_ones() {
        assert_eq!(
            typed::Offer::eip712_encode_type(),
            "Offer(uint256 version,string resourceUrl,string scheme,string network,string asset,string payTo,string amount,uint256 validUntil)"
        );
        assert_eq!(
            typed::Receipt::eip712_encode_type(),
            "Receipt(uint256 version,string network,string resourceUrl,string payer,uint256 issuedAt,string transaction)"
        );
        // The domain has no verifyingContract: name, version, chainId 1.
        let separator = domain("x402 offer").separator();
        let expected = keccak256(
            [
                keccak256("EIP712Domain(string name,string version,uint256 chainId)").as_slice(),
                keccak256("x402 offer").as_slice(),
                keccak256("1").as_slice(),
                U256::from(1u8).to_be_bytes::<32>().as_slice(),
            ]
            .concat(),
        );
        assert_eq!(separator, expected);
    }

    #[tokio::test]
    async fn a_signed_offer_verifies_to_its_signer_and_matches_its_accepts_entry() {
        let server = PrivateKeySigner::random();
        let requirements = requirements();
        let offer = OfferPayload::for_requirements(
            "https://gw.example/v1/contracts/c_1/execute",
            &requirements,
            Some(1_703_123_516),
        );
        let artifact = sign_offer(&server, &offer, Some(0)).await.unwrap();
        let mut extensions = Extensions::new();
        extensions.insert(
            OFFER_RECEIPT.into(),
            offers_extension(std::slice::from_ref(&artifact)),
        );
        let wire = serde_json::to_value(&extensions).unwrap();
        assert_eq!(
            wire["offer-receipt"]["info"]["offers"][0]["format"],
            "eip712"
        );
        assert_eq!(wire["offer-receipt"]["info"]["offers"][0]["acceptIndex"], 0);

        let offers = offers_in(&extensions).unwrap();
        let (terms, signer) = verify_offer(&offers[0]).unwrap();
        assert_eq!(signer, server.address());
        assert!(terms.matches(&requirements));

        let mut cheaper = requirements.clone();
        cheaper.amount = U256::from(9_999u64).into();
        assert!(!terms.matches(&cheaper));

        // A payload altered after signing recovers to someone else.
        let mut tampered = artifact.clone();
        tampered.payload.as_mut().unwrap()["amount"] = "1".into();
        let (_, other) = verify_offer(&tampered).unwrap();
        assert_ne!(other, server.address());
        // Unknown payload fields and other versions are refused, not guessed at.
        let mut extra_field = artifact.clone();
        extra_field.payload.as_mut().unwrap()["discount"] = "10".into();
        assert!(matches!(
            verify_offer(&extra_field),
            Err(OfferReceiptError::Malformed(_))
        ));
        let mut v2 = artifact;
        v2.payload.as_mut().unwrap()["version"] = 2.into();
        assert_eq!(
            verify_offer(&v2).unwrap_err(),
            OfferReceiptError::UnsupportedVersion(2)
        );
    }

    #[tokio::test]
    async fn a_receipt_signs_the_empty_transaction_as_absent() {
        let server = PrivateKeySigner::random();
        let receipt = ReceiptPayload {
            version: 1,
            network: "eip155:8453".into(),
            resource_url: "https://gw.example/v1/contracts/c_1/execute".into(),
            payer: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
            issued_at: 1_703_123_456,
            transaction: None,
        };
        let artifact = sign_receipt(&server, &receipt).await.unwrap();
        let mut extensions = Extensions::new();
        extensions.insert(OFFER_RECEIPT.into(), receipt_extension(&artifact));
        let read = receipt_in(&extensions).unwrap().unwrap();
        let (statement, signer) = verify_receipt(&read).unwrap();
        assert_eq!(signer, server.address());
        assert_eq!(statement, receipt);
        let with_empty = ReceiptPayload {
            transaction: Some(String::new()),
            ..receipt
        };
        assert_eq!(with_empty.signing_hash(), statement.signing_hash());
    }

    #[test]
    fn a_jws_artifact_splits_into_what_its_key_holder_verifies() {
        let receipt = ReceiptPayload {
            version: 1,
            network: "eip155:8453".into(),
            resource_url: "https://gw.example/r".into(),
            payer: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
            issued_at: 1_703_123_456,
            transaction: Some("0xabc".into()),
        };
        let input = jws_signing_input(
            "EdDSA",
            "https://gw.example/.well-known/jwks.json#k1",
            &receipt,
        );
        let artifact = jws_artifact(&input, &[7u8; 64], None);
        assert!(artifact.payload.is_none());
        // The payload travels in its canonical form: keys sorted, no whitespace.
        let payload_part = input.split('.').nth(1).unwrap();
        let payload_text =
            String::from_utf8(URL_SAFE_NO_PAD.decode(payload_part).unwrap()).unwrap();
        assert!(
            payload_text.starts_with(r#"{"issuedAt":1703123456,"network":"eip155:8453","payer":"#),
            "{payload_text}"
        );
        let parts = JwsParts::<ReceiptPayload>::decode(&artifact).unwrap();
        assert_eq!(parts.alg, "EdDSA");
        assert_eq!(parts.payload, receipt);
        assert_eq!(parts.signing_input, input);
        assert_eq!(parts.signature, vec![7u8; 64]);
        assert_eq!(
            verify_receipt(&artifact).unwrap_err(),
            OfferReceiptError::WrongFormat("eip712")
        );
        let mut broken = artifact;
        broken.signature.push_str(".extra");
        assert!(JwsParts::<ReceiptPayload>::decode(&broken).is_err());
    }
}
