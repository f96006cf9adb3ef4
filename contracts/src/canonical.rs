//! Canonical JSON (RFC 8785, JCS) and the `sha256:<hex>` [`Digest`] used for every hash in
//! hiregate: `terms_hash`, input digests, deliverable digests, `policy_hash`,
//! `verifier_result_hash`.
//!
//! Hashing always goes through [`to_canonical_vec`], so key order, whitespace and the spelling
//! of numbers (`1`, `1.0`, `1e0`) never change a hash.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// Prefix of every digest string.
pub const DIGEST_PREFIX: &str = "sha256:";

/// A value could not be turned into canonical JSON.
#[derive(Debug, thiserror::Error)]
#[error("value cannot be canonicalised as RFC 8785 JSON: {0}")]
pub struct CanonicalError(#[source] pub(crate) serde_json::Error);

/// Serialises `value` as RFC 8785 canonical JSON (sorted keys by UTF-16 code units, no
/// whitespace, ECMAScript number formatting).
///
/// Integers are written as IEEE doubles, as JCS requires: integers above 2^53 lose precision,
/// which is why amounts travel as decimal strings everywhere in hiregate.
pub fn to_canonical_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    serde_jcs::to_vec(value).map_err(CanonicalError)
}

/// [`to_canonical_vec`] as a `String`.
pub fn to_canonical_string<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    serde_jcs::to_string(value).map_err(CanonicalError)
}

/// A SHA-256 digest, written `sha256:<64 lowercase hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest([u8; 32]);

impl Digest {
    /// Digest of raw bytes (fetched files, evidence artifacts).
    #[must_use]
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Digest of the canonical JSON of `value`.
    pub fn of_canonical<T: Serialize + ?Sized>(value: &T) -> Result<Self, CanonicalError> {
        Ok(Self::of_bytes(&to_canonical_vec(value)?))
    }

    /// Wraps 32 raw digest bytes.
    #[must_use]
    pub const fn from_raw(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 raw digest bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex characters, without the `sha256:` prefix.
    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// True when `bytes` hash to this digest.
    #[must_use]
    pub fn matches(&self, bytes: &[u8]) -> bool {
        Self::of_bytes(bytes) == *self
    }
}

/// Why a digest string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestParseError {
    /// The string does not start with `sha256:`.
    #[error("digest must start with \"sha256:\"")]
    MissingPrefix,
    /// The hex part is not exactly 64 hex characters.
    #[error("digest must have 64 hex characters after \"sha256:\", got {0}")]
    BadLength(usize),
    /// The hex part contains a non-hex character.
    #[error("digest contains a non-hex character")]
    NotHex,
}

impl FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let hex_part = raw
            .strip_prefix(DIGEST_PREFIX)
            .ok_or(DigestParseError::MissingPrefix)?;
        if hex_part.len() != 64 {
            return Err(DigestParseError::BadLength(hex_part.len()));
        }
        // Upper-case hex is accepted from peers; we always write lower case.
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|_| DigestParseError::NotHex)?;
        Ok(Self(bytes))
    }
}

impl TryFrom<String> for Digest {
    type Error = DigestParseError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> Self {
        digest.to_string()
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DIGEST_PREFIX}{}", self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc8785_sorts_keys_and_normalises_numbers() {
        let value: serde_json::Value = serde_json::from_str(
            r#"{ "b": 1.0, "a": [1e2, -0.0, "x\u0041"], "c": {"z":true,"y":null} }"#,
        )
        .unwrap();
        assert_eq!(
            to_canonical_string(&value).unwrap(),
            r#"{"a":[100,0,"xA"],"b":1,"c":{"y":null,"z":true}}"#
        );
    }

    #[test]
    fn rfc8785_orders_keys_by_utf16_code_units() {
        // From RFC 8785 §3.2.3: U+20AC sorts before U+1F600 in UTF-16 but not in UTF-8/code points.
        let value = json!({"\u{1F600}": 1, "\u{20AC}": 2, "a": 3});
        assert_eq!(
            to_canonical_string(&value).unwrap(),
            "{\"a\":3,\"\u{20AC}\":2,\"\u{1F600}\":1}"
        );
    }

    #[test]
    fn digest_round_trips_and_rejects_bad_strings() {
        let digest = Digest::of_bytes(b"abc");
        assert_eq!(
            digest.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(digest.to_string().parse::<Digest>().unwrap(), digest);
        let upper = format!("sha256:{}", digest.to_hex().to_uppercase());
        assert_eq!(upper.parse::<Digest>().unwrap(), digest);
        assert_eq!(
            "md5:00".parse::<Digest>(),
            Err(DigestParseError::MissingPrefix)
        );
        assert_eq!(
            "sha256:abc".parse::<Digest>(),
            Err(DigestParseError::BadLength(3))
        );
        assert_eq!(
            format!("sha256:{}", "g".repeat(64)).parse::<Digest>(),
            Err(DigestParseError::NotHex)
        );
        assert!(digest.matches(b"abc"));
        assert!(!digest.matches(b"abd"));
    }
}
