//! Gateway signatures: compact JWS with EdDSA (Ed25519) and a `kid`, verifiable offline
//! against the gateway's JWKS.
//!
//! - [`KeyRing`]: the gateway's signing keys. The active key signs; after [`KeyRing::rotate`]
//!   the previous keys stay in the JWKS (so tokens they signed keep verifying) until
//!   [`KeyRing::retire`] removes them.
//! - Contract tokens ([`ContractTokenClaims`]): bind contract id, `terms_hash`, seeker, worker
//!   and expiry. The gateway sends one with every call to a worker; workers and seekers check
//!   it with [`verify_contract_token`].
//! - [`KeyRing::sign_json`] / [`verify_signed_json`]: the same signature for any JSON payload
//!   (receipts), told apart by the JWS `typ` header so one kind can never pass as another.
//!
//! Verification takes the current time as an argument; nothing here reads a clock.

use std::fmt;
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::EncodePrivateKey as _;
use jsonwebtoken::jwk::{
    AlgorithmParameters, CommonParameters, EllipticCurve, Jwk, JwkSet, KeyAlgorithm,
    OctetKeyPairParameters, OctetKeyPairType, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::canonical::{CanonicalError, Digest};
use crate::id::{ContractId, SeekerId, WorkerId};
use crate::terms::ContractTerms;
use crate::time::Timestamp;

/// JWS `typ` of contract tokens.
pub const CONTRACT_TOKEN_TYPE: &str = "hiregate-contract+jwt";
/// JWS `typ` for signed receipts (issue 7), so a receipt can never pass as a contract token.
pub const RECEIPT_TOKEN_TYPE: &str = "hiregate-receipt+jwt";
/// JWS `typ` of signed reputation snapshots, so a snapshot never passes as a receipt.
pub const REPUTATION_TOKEN_TYPE: &str = "hiregate-reputation+jwt";
/// JWS `typ` of A2A Agent Card signatures: `JOSE`, as A2A v1.0 §8.4.2 says it should be. Still
/// apart from every other gateway signature, whose `typ` names its kind.
pub const AGENT_CARD_TOKEN_TYPE: &str = "JOSE";
/// `iss` of every gateway token.
pub const ISSUER: &str = "hiregate";
/// Clock skew tolerated when checking `exp` and `iat`, seconds.
pub const CLOCK_SKEW_LEEWAY_S: i64 = 30;

/// Why signing or verification failed.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The key id is not `[A-Za-z0-9._-]{1,64}`.
    #[error("key id must be 1-64 characters of [A-Za-z0-9._-]")]
    InvalidKeyId,
    /// The token is not a compact JWS, or its header or claims do not parse.
    #[error("malformed token: {0}")]
    Malformed(String),
    /// The header names another algorithm than EdDSA.
    #[error("token algorithm must be EdDSA")]
    WrongAlgorithm,
    /// The header `typ` is not the expected one (e.g. a receipt offered as a contract token).
    #[error("token type is {found:?}, expected {expected:?}")]
    WrongType {
        /// What the header says.
        found: Option<String>,
        /// What was expected.
        expected: String,
    },
    /// The header has no `kid`.
    #[error("token header has no kid")]
    MissingKeyId,
    /// No key with this `kid` in the JWKS (never published, or retired).
    #[error("no key {0:?} in the JWKS")]
    UnknownKeyId(String),
    /// The JWKS entry is not an Ed25519 public key.
    #[error("JWKS key {0:?} is not a 32-byte Ed25519 (OKP) key")]
    UnusableKey(String),
    /// The signature does not verify: the token was altered or signed by another key.
    #[error("token signature is invalid")]
    InvalidSignature,
    /// `exp` is in the past.
    #[error("token expired at {0}")]
    Expired(Timestamp),
    /// `iat` is in the future.
    #[error("token is not valid yet")]
    NotYetValid,
    /// `iss` is not the gateway.
    #[error("token issuer is not {ISSUER:?}")]
    WrongIssuer,
    /// `sub` and `contract_id` disagree.
    #[error("token subject does not match its contract_id")]
    SubjectMismatch,
    /// Expiry before issue.
    #[error("token would expire before it is issued")]
    ExpiryBeforeIssue,
    /// A key with this id is already in the ring.
    #[error("key {0:?} is already in the key ring")]
    DuplicateKeyId(String),
    /// The active key cannot be retired; rotate first.
    #[error("key {0:?} is the active signing key; rotate before retiring it")]
    RetiringActiveKey(String),
    /// Signing failed inside the JWS library.
    #[error("signing failed: {0}")]
    Signing(String),
    /// Terms could not be hashed.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// A JWS key id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KeyId(String);

impl KeyId {
    /// The key id string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for KeyId {
    type Err = TokenError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let ok = !raw.is_empty()
            && raw.len() <= 64
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(TokenError::InvalidKeyId)
        }
    }
}

impl TryFrom<String> for KeyId {
    type Error = TokenError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<KeyId> for String {
    fn from(kid: KeyId) -> Self {
        kid.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One Ed25519 signing key of the gateway. Its `Debug` shows the key id and public key only.
#[derive(Clone)]
pub struct GatewayKey {
    kid: KeyId,
    signing: SigningKey,
    encoding: EncodingKey,
}

impl fmt::Debug for GatewayKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewayKey")
            .field("kid", &self.kid)
            .field("public_key", &self.public_key_b64())
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl GatewayKey {
    /// The key whose 32-byte Ed25519 seed is `seed` (how keys are loaded from configuration).
    pub fn from_seed(kid: KeyId, seed: [u8; 32]) -> Result<Self, TokenError> {
        let signing = SigningKey::from_bytes(&seed);
        let der = signing
            .to_pkcs8_der()
            .map_err(|e| TokenError::Signing(e.to_string()))?;
        Ok(Self {
            kid,
            encoding: EncodingKey::from_ed_der(der.as_bytes()),
            signing,
        })
    }

    /// A fresh random key.
    pub fn generate(kid: KeyId) -> Result<Self, TokenError> {
        use rand::RngCore as _;
        let mut seed = [0u8; 32];
        rand::rng().fill_bytes(&mut seed);
        Self::from_seed(kid, seed)
    }

    /// The key id.
    #[must_use]
    pub fn kid(&self) -> &KeyId {
        &self.kid
    }

    /// The 32-byte seed, for storing the key. Treat it as the secret it is.
    #[must_use]
    pub fn to_seed(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    fn public_key_b64(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.signing.verifying_key().as_bytes())
    }

    /// The 32-byte Ed25519 public key (what `did:key` identifiers encode, see [`crate::did`]).
    #[must_use]
    pub fn public_key_bytes(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The raw Ed25519 signature of `message`: for JWS whose header is not a gateway token's
    /// (the x402 `offer-receipt` artifacts, whose `kid` is a DID URL).
    #[must_use]
    pub fn sign_bytes(&self, message: &[u8]) -> [u8; 64] {
        use ed25519_dalek::Signer as _;
        self.signing.sign(message).to_bytes()
    }

    /// The public key as a JWK (`kty: OKP, crv: Ed25519, alg: EdDSA, use: sig`).
    #[must_use]
    pub fn public_jwk(&self) -> Jwk {
        Jwk {
            common: CommonParameters {
                public_key_use: Some(PublicKeyUse::Signature),
                key_algorithm: Some(KeyAlgorithm::EdDSA),
                key_id: Some(self.kid.0.clone()),
                ..CommonParameters::default()
            },
            algorithm: AlgorithmParameters::OctetKeyPair(OctetKeyPairParameters {
                key_type: OctetKeyPairType::OctetKeyPair,
                curve: EllipticCurve::Ed25519,
                x: self.public_key_b64(),
            }),
        }
    }
}

/// The gateway's public keys, served at `/.well-known/jwks.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Jwks(JwkSet);

impl Jwks {
    /// The keys.
    #[must_use]
    pub fn keys(&self) -> &[Jwk] {
        &self.0.keys
    }

    /// The key ids, in order.
    #[must_use]
    pub fn key_ids(&self) -> Vec<&str> {
        self.0
            .keys
            .iter()
            .filter_map(|jwk| jwk.common.key_id.as_deref())
            .collect()
    }

    /// The Ed25519 public key published as `kid`, if it is one.
    #[must_use]
    pub fn ed25519_public_key(&self, kid: &str) -> Option<[u8; 32]> {
        let jwk = self.0.find(kid)?;
        let AlgorithmParameters::OctetKeyPair(params) = &jwk.algorithm else {
            return None;
        };
        if params.curve != EllipticCurve::Ed25519 {
            return None;
        }
        URL_SAFE_NO_PAD
            .decode(params.x.as_bytes())
            .ok()?
            .try_into()
            .ok()
    }

    fn decoding_key(&self, kid: &str) -> Result<DecodingKey, TokenError> {
        let jwk = self
            .0
            .find(kid)
            .ok_or_else(|| TokenError::UnknownKeyId(kid.to_owned()))?;
        let unusable = || TokenError::UnusableKey(kid.to_owned());
        let AlgorithmParameters::OctetKeyPair(params) = &jwk.algorithm else {
            return Err(unusable());
        };
        if params.curve != EllipticCurve::Ed25519
            || jwk
                .common
                .key_algorithm
                .is_some_and(|alg| alg != KeyAlgorithm::EdDSA)
        {
            return Err(unusable());
        }
        // Check the length ourselves: the JWS library slices the first 32 bytes and would
        // panic on a shorter key from a hostile JWKS.
        let raw = URL_SAFE_NO_PAD
            .decode(params.x.as_bytes())
            .map_err(|_| unusable())?;
        if raw.len() != 32 {
            return Err(unusable());
        }
        DecodingKey::from_ed_components(&params.x).map_err(|_| unusable())
    }
}

/// The gateway's signing keys: one active, older ones still published until retired.
#[derive(Debug, Clone)]
pub struct KeyRing {
    active: GatewayKey,
    /// Older keys, most recent first; still in the JWKS.
    previous: Vec<GatewayKey>,
}

impl KeyRing {
    /// A ring with one (active) key.
    #[must_use]
    pub fn new(active: GatewayKey) -> Self {
        Self {
            active,
            previous: Vec::new(),
        }
    }

    /// Makes `next` the signing key; the current one keeps verifying until retired.
    pub fn rotate(&mut self, next: GatewayKey) -> Result<(), TokenError> {
        if self.contains(next.kid()) {
            return Err(TokenError::DuplicateKeyId(next.kid.0.clone()));
        }
        let previous = std::mem::replace(&mut self.active, next);
        self.previous.insert(0, previous);
        Ok(())
    }

    /// Removes an old key from the ring and the JWKS: tokens it signed stop verifying.
    pub fn retire(&mut self, kid: &KeyId) -> Result<(), TokenError> {
        if self.active.kid() == kid {
            return Err(TokenError::RetiringActiveKey(kid.0.clone()));
        }
        let before = self.previous.len();
        self.previous.retain(|key| key.kid() != kid);
        if self.previous.len() == before {
            return Err(TokenError::UnknownKeyId(kid.0.clone()));
        }
        Ok(())
    }

    fn contains(&self, kid: &KeyId) -> bool {
        self.active.kid() == kid || self.previous.iter().any(|key| key.kid() == kid)
    }

    /// The key id that signs now.
    #[must_use]
    pub fn active_kid(&self) -> &KeyId {
        self.active.kid()
    }

    /// The key that signs now.
    #[must_use]
    pub fn active_key(&self) -> &GatewayKey {
        &self.active
    }

    /// The JWKS: the active key first, then the unretired older keys.
    #[must_use]
    pub fn jwks(&self) -> Jwks {
        Jwks(JwkSet {
            keys: std::iter::once(&self.active)
                .chain(&self.previous)
                .map(GatewayKey::public_jwk)
                .collect(),
        })
    }

    /// Signs `payload` as a compact JWS with the active key and JWS `typ` = `token_type`.
    pub fn sign_json<T: Serialize>(
        &self,
        token_type: &str,
        payload: &T,
    ) -> Result<String, TokenError> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some(token_type.to_owned());
        header.kid = Some(self.active.kid.0.clone());
        jsonwebtoken::encode(&header, payload, &self.active.encoding)
            .map_err(|e| TokenError::Signing(e.to_string()))
    }

    /// Signs the RFC 8785 canonical form of `document` as a JWS with a detached payload (RFC 7515
    /// appendix F; EdDSA, `kid`, `typ` = `token_type`): the form A2A Agent Card signatures take,
    /// so the signed document can be served as plain JSON next to its signature.
    pub fn sign_detached(
        &self,
        token_type: &str,
        document: &serde_json::Value,
    ) -> Result<DetachedSignature, TokenError> {
        let mut header = Header::new(Algorithm::EdDSA);
        header.typ = Some(token_type.to_owned());
        header.kid = Some(self.active.kid.0.clone());
        let header = serde_json::to_vec(&header).map_err(|e| TokenError::Signing(e.to_string()))?;
        let protected = URL_SAFE_NO_PAD.encode(header);
        let message = detached_signing_input(&protected, document)?;
        let signature =
            jsonwebtoken::crypto::sign(message.as_bytes(), &self.active.encoding, Algorithm::EdDSA)
                .map_err(|e| TokenError::Signing(e.to_string()))?;
        Ok(DetachedSignature {
            protected,
            signature,
        })
    }

    /// Issues the contract token for `terms`, valid from `issued_at` until `expires_at`.
    pub fn issue_contract_token(
        &self,
        terms: &ContractTerms,
        issued_at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<String, TokenError> {
        if expires_at <= issued_at {
            return Err(TokenError::ExpiryBeforeIssue);
        }
        let claims = ContractTokenClaims {
            iss: ISSUER.to_owned(),
            sub: terms.contract_id().clone(),
            iat: issued_at.unix_seconds(),
            exp: expires_at.unix_seconds(),
            contract_id: terms.contract_id().clone(),
            terms_hash: terms.terms_hash()?,
            seeker: terms.seeker().clone(),
            worker: terms.worker().id().clone(),
        };
        self.sign_json(CONTRACT_TOKEN_TYPE, &claims)
    }
}

/// Claims of a contract token. Unknown claims are ignored, so a newer gateway can add claims
/// without breaking workers built against this version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractTokenClaims {
    /// Always `hiregate`.
    pub iss: String,
    /// The contract id (JWT subject).
    pub sub: ContractId,
    /// Issued at, Unix seconds.
    pub iat: i64,
    /// Expires at, Unix seconds.
    pub exp: i64,
    /// The contract.
    pub contract_id: ContractId,
    /// `sha256(canonical(terms))`.
    pub terms_hash: Digest,
    /// The seeker.
    pub seeker: SeekerId,
    /// The worker.
    pub worker: WorkerId,
}

impl ContractTokenClaims {
    /// True when this token is for `contract_id` and `worker` (what a worker checks against
    /// the `X-Contract-ID` it was called with and its own id).
    #[must_use]
    pub fn is_for(&self, contract_id: &ContractId, worker: &WorkerId) -> bool {
        self.contract_id == *contract_id && self.worker == *worker
    }
}

/// A JWS over a document that travels separately: its base64url protected header and signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachedSignature {
    /// The base64url-encoded protected header (`alg`, `kid`, `typ`).
    pub protected: String,
    /// The base64url-encoded signature.
    pub signature: String,
}

/// `protected || '.' || base64url(JCS(document))`.
fn detached_signing_input(
    protected: &str,
    document: &serde_json::Value,
) -> Result<String, TokenError> {
    let canonical = serde_jcs::to_vec(document).map_err(|e| TokenError::Signing(e.to_string()))?;
    Ok(format!("{protected}.{}", URL_SAFE_NO_PAD.encode(canonical)))
}

/// Checks a detached-payload JWS made by [`KeyRing::sign_detached`] over `document`: EdDSA,
/// `typ`, and the signature by the key `kid` names in `jwks`.
pub fn verify_detached(
    document: &serde_json::Value,
    signature: &DetachedSignature,
    jwks: &Jwks,
    token_type: &str,
) -> Result<(), TokenError> {
    let header = URL_SAFE_NO_PAD
        .decode(&signature.protected)
        .map_err(|e| TokenError::Malformed(e.to_string()))?;
    let header: Header =
        serde_json::from_slice(&header).map_err(|e| TokenError::Malformed(e.to_string()))?;
    let key = signing_key_of(header, jwks, token_type)?;
    let message = detached_signing_input(&signature.protected, document)?;
    match jsonwebtoken::crypto::verify(
        &signature.signature,
        message.as_bytes(),
        &key,
        Algorithm::EdDSA,
    ) {
        Ok(true) => Ok(()),
        Ok(false) => Err(TokenError::InvalidSignature),
        Err(e) => Err(TokenError::Malformed(e.to_string())),
    }
}

/// Checks an A2A Agent Card signed by the gateway: `signatures[0]` must be a detached JWS
/// (`typ` = [`AGENT_CARD_TOKEN_TYPE`]) over the card without its `signatures`.
pub fn verify_agent_card(card: &serde_json::Value, jwks: &Jwks) -> Result<(), TokenError> {
    let signature: DetachedSignature = card
        .get("signatures")
        .and_then(|signatures| signatures.get(0))
        .cloned()
        .ok_or_else(|| TokenError::Malformed("the card has no signature".to_owned()))
        .and_then(|first| {
            serde_json::from_value(first).map_err(|e| TokenError::Malformed(e.to_string()))
        })?;
    let mut unsigned = card.clone();
    if let Some(fields) = unsigned.as_object_mut() {
        fields.remove("signatures");
    }
    verify_detached(&unsigned, &signature, jwks, AGENT_CARD_TOKEN_TYPE)
}

/// The key in `jwks` that a gateway JWS header names, once the header is one the gateway writes:
/// EdDSA, `typ` = `token_type`, a `kid`.
fn signing_key_of(
    header: Header,
    jwks: &Jwks,
    token_type: &str,
) -> Result<DecodingKey, TokenError> {
    if header.alg != Algorithm::EdDSA {
        return Err(TokenError::WrongAlgorithm);
    }
    if header.typ.as_deref() != Some(token_type) {
        return Err(TokenError::WrongType {
            found: header.typ,
            expected: token_type.to_owned(),
        });
    }
    let kid = header.kid.ok_or(TokenError::MissingKeyId)?;
    jwks.decoding_key(&kid)
}

/// Checks the signature, key and `typ` of a compact JWS and returns its payload.
pub fn verify_signed_json<T: DeserializeOwned>(
    token: &str,
    jwks: &Jwks,
    token_type: &str,
) -> Result<T, TokenError> {
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
    let key = signing_key_of(header, jwks, token_type)?;
    let mut validation = Validation::new(Algorithm::EdDSA);
    // Time claims are checked by the caller against the time it passes in.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    jsonwebtoken::decode::<T>(token, &key, &validation)
        .map(|data| data.claims)
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidSignature => TokenError::InvalidSignature,
            _ => TokenError::Malformed(e.to_string()),
        })
}

/// Verifies a contract token offline: signature by a key in `jwks`, type, issuer, subject,
/// and that `now` lies between `iat` and `exp` (with [`CLOCK_SKEW_LEEWAY_S`]).
pub fn verify_contract_token(
    token: &str,
    jwks: &Jwks,
    now: Timestamp,
) -> Result<ContractTokenClaims, TokenError> {
    let claims: ContractTokenClaims = verify_signed_json(token, jwks, CONTRACT_TOKEN_TYPE)?;
    if claims.iss != ISSUER {
        return Err(TokenError::WrongIssuer);
    }
    if claims.sub != claims.contract_id {
        return Err(TokenError::SubjectMismatch);
    }
    let now_s = now.unix_seconds();
    if now_s >= claims.exp.saturating_add(CLOCK_SKEW_LEEWAY_S) {
        let expired_at = Timestamp::from_unix_seconds(claims.exp)
            .map_err(|e| TokenError::Malformed(e.to_string()))?;
        return Err(TokenError::Expired(expired_at));
    }
    if now_s.saturating_add(CLOCK_SKEW_LEEWAY_S) < claims.iat {
        return Err(TokenError::NotYetValid);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::terms::tests::sample_terms;
    use serde_json::json;

    fn key(kid: &str, byte: u8) -> GatewayKey {
        GatewayKey::from_seed(kid.parse().unwrap(), [byte; 32]).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn issue(ring: &KeyRing) -> String {
        ring.issue_contract_token(
            &sample_terms(),
            at("2025-01-30T12:00:00Z"),
            at("2025-01-30T13:00:00Z"),
        )
        .unwrap()
    }

    #[test]
    fn a_contract_token_verifies_offline_against_the_jwks() {
        let ring = KeyRing::new(key("k1", 1));
        let token = issue(&ring);
        let jwks: Jwks =
            serde_json::from_str(&serde_json::to_string(&ring.jwks()).unwrap()).unwrap();
        let claims = verify_contract_token(&token, &jwks, at("2025-01-30T12:30:00Z")).unwrap();
        let terms = sample_terms();
        assert_eq!(claims.terms_hash, terms.terms_hash().unwrap());
        assert!(claims.is_for(terms.contract_id(), terms.worker().id()));
        assert_eq!(claims.seeker, *terms.seeker());
        let jwks_json = serde_json::to_value(&jwks).unwrap();
        assert_eq!(jwks_json["keys"][0]["kty"], "OKP");
        assert_eq!(jwks_json["keys"][0]["crv"], "Ed25519");
        assert_eq!(jwks_json["keys"][0]["kid"], "k1");
        assert_eq!(jwks_json["keys"][0]["alg"], "EdDSA");
    }

    #[test]
    fn a_token_from_a_key_not_in_the_jwks_fails() {
        let token = issue(&KeyRing::new(key("k1", 1)));
        let other = KeyRing::new(key("k2", 2)).jwks();
        assert!(matches!(
            verify_contract_token(&token, &other, at("2025-01-30T12:30:00Z")),
            Err(TokenError::UnknownKeyId(kid)) if kid == "k1"
        ));
        // Same kid, different key material: the signature does not verify.
        let impostor = KeyRing::new(key("k1", 9)).jwks();
        assert!(matches!(
            verify_contract_token(&token, &impostor, at("2025-01-30T12:30:00Z")),
            Err(TokenError::InvalidSignature)
        ));
    }

    #[test]
    fn a_tampered_payload_fails() {
        let ring = KeyRing::new(key("k1", 1));
        let token = issue(&ring);
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let mut claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[1]).unwrap()).unwrap();
        claims["terms_hash"] = json!(Digest::of_bytes(b"other terms").to_string());
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        let tampered = parts.join(".");
        assert!(matches!(
            verify_contract_token(&tampered, &ring.jwks(), at("2025-01-30T12:30:00Z")),
            Err(TokenError::InvalidSignature)
        ));
        assert!(matches!(
            verify_contract_token("not.a.token", &ring.jwks(), at("2025-01-30T12:30:00Z")),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn an_expired_token_fails_and_a_future_one_too() {
        let ring = KeyRing::new(key("k1", 1));
        let token = issue(&ring);
        assert!(matches!(
            verify_contract_token(&token, &ring.jwks(), at("2025-01-30T13:05:00Z")),
            Err(TokenError::Expired(_))
        ));
        // Within the skew allowance it still passes.
        assert!(verify_contract_token(&token, &ring.jwks(), at("2025-01-30T13:00:10Z")).is_ok());
        assert!(matches!(
            verify_contract_token(&token, &ring.jwks(), at("2025-01-30T11:00:00Z")),
            Err(TokenError::NotYetValid)
        ));
    }

    #[test]
    fn rotation_keeps_old_tokens_valid_until_the_key_is_retired() {
        let mut ring = KeyRing::new(key("k1", 1));
        let old_token = issue(&ring);
        ring.rotate(key("k2", 2)).unwrap();
        assert_eq!(ring.active_kid().as_str(), "k2");
        let new_token = issue(&ring);
        let jwks = ring.jwks();
        assert_eq!(jwks.key_ids(), vec!["k2", "k1"]);
        let now = at("2025-01-30T12:30:00Z");
        assert!(verify_contract_token(&old_token, &jwks, now).is_ok());
        assert!(verify_contract_token(&new_token, &jwks, now).is_ok());

        assert!(matches!(
            ring.retire(&"k2".parse().unwrap()),
            Err(TokenError::RetiringActiveKey(_))
        ));
        assert!(matches!(
            ring.rotate(key("k1", 3)),
            Err(TokenError::DuplicateKeyId(_))
        ));
        ring.retire(&"k1".parse().unwrap()).unwrap();
        let jwks = ring.jwks();
        assert_eq!(jwks.key_ids(), vec!["k2"]);
        assert!(matches!(
            verify_contract_token(&old_token, &jwks, now),
            Err(TokenError::UnknownKeyId(_))
        ));
        assert!(verify_contract_token(&new_token, &jwks, now).is_ok());
        assert!(matches!(
            ring.retire(&"k1".parse().unwrap()),
            Err(TokenError::UnknownKeyId(_))
        ));
    }

    #[test]
    fn signed_json_types_cannot_be_swapped() {
        let ring = KeyRing::new(key("k1", 1));
        let receipt = ring
            .sign_json(RECEIPT_TOKEN_TYPE, &json!({"outcome": "settled"}))
            .unwrap();
        let payload: serde_json::Value =
            verify_signed_json(&receipt, &ring.jwks(), RECEIPT_TOKEN_TYPE).unwrap();
        assert_eq!(payload["outcome"], "settled");
        assert!(matches!(
            verify_contract_token(&receipt, &ring.jwks(), at("2025-01-30T12:30:00Z")),
            Err(TokenError::WrongType { .. })
        ));
    }

    #[test]
    fn hostile_jwks_entries_are_refused_without_panicking() {
        let token = issue(&KeyRing::new(key("k1", 1)));
        let short_key: Jwks = serde_json::from_value(json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": "AAAA"}
        ]}))
        .unwrap();
        assert!(matches!(
            verify_contract_token(&token, &short_key, at("2025-01-30T12:30:00Z")),
            Err(TokenError::UnusableKey(_))
        ));
        let hmac_key: Jwks = serde_json::from_value(json!({"keys": [
            {"kty": "oct", "kid": "k1", "k": "c2VjcmV0"}
        ]}))
        .unwrap();
        assert!(matches!(
            verify_contract_token(&token, &hmac_key, at("2025-01-30T12:30:00Z")),
            Err(TokenError::UnusableKey(_))
        ));
    }

    #[test]
    fn debug_output_never_shows_the_secret() {
        let gateway_key = key("k1", 0xAB);
        let debug = format!("{:?}", KeyRing::new(gateway_key.clone()));
        assert!(debug.contains("<redacted>"));
        assert!(!debug.contains(&hex::encode(gateway_key.to_seed())));
    }
}
