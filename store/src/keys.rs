//! The credentials the store keeps, as values: API keys (`hg_sk_`/`hg_op_` followed by 64 hex
//! digits: 256 random bits, so a plain SHA-256 of the whole key is a sound lookup hash and only
//! the hash is stored), the [`Role`] a key grants, and worker callback secrets. Issuing,
//! revoking and rotating keys is the engine's (`hiregate_engine::auth`).

use std::{fmt, str::FromStr};

use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a key holder may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Hires workers.
    Seeker,
    /// Lists and runs workers.
    Operator,
    /// Arbiter and key management.
    Admin,
}

impl Role {
    /// Stable lowercase name (stored, and used on the wire).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seeker => "seeker",
            Self::Operator => "operator",
            Self::Admin => "admin",
        }
    }

    /// Key prefix for roles that get generated keys.
    fn key_prefix(self) -> Option<&'static str> {
        match self {
            Self::Seeker => Some(ApiKey::SEEKER_PREFIX),
            Self::Operator => Some(ApiKey::OPERATOR_PREFIX),
            Self::Admin => None,
        }
    }
}

/// Not a known role name.
#[derive(Debug, thiserror::Error)]
#[error("unknown role `{0}` (expected seeker, operator or admin)")]
pub struct UnknownRole(String);

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "seeker" => Ok(Self::Seeker),
            "operator" => Ok(Self::Operator),
            "admin" => Ok(Self::Admin),
            other => Err(UnknownRole(other.chars().take(32).collect())),
        }
    }
}

/// A presented or generated API key. The value is secret: `Debug` shows only the prefix.
#[derive(Clone)]
pub struct ApiKey(SecretString);

/// The presented string is not shaped like a hiregate API key.
#[derive(Debug, thiserror::Error)]
#[error("malformed API key")]
pub struct MalformedApiKey;

impl ApiKey {
    /// Prefix of seeker keys.
    pub const SEEKER_PREFIX: &'static str = "hg_sk_";
    /// Prefix of operator keys.
    pub const OPERATOR_PREFIX: &'static str = "hg_op_";
    const RANDOM_HEX_LEN: usize = 64;

    /// A fresh random key for `role`; `None` for roles without generated keys (admin, whose key
    /// comes from configuration).
    pub fn generate(role: Role) -> Option<Self> {
        let prefix = role.key_prefix()?;
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Some(Self(SecretString::from(format!(
            "{prefix}{}",
            hex::encode(bytes)
        ))))
    }

    /// Check the shape of a presented key (prefix and length), not whether it exists.
    pub fn parse(raw: &str) -> Result<Self, MalformedApiKey> {
        Self::check_shape(raw)?;
        Ok(Self(SecretString::from(raw)))
    }

    /// [`Self::parse`]'s check alone, copying nothing: what a request's authentication needs
    /// before it looks the key's [`ApiKeyHash`] up.
    pub fn check_shape(raw: &str) -> Result<(), MalformedApiKey> {
        let random = raw
            .strip_prefix(Self::SEEKER_PREFIX)
            .or_else(|| raw.strip_prefix(Self::OPERATOR_PREFIX))
            .ok_or(MalformedApiKey)?;
        if random.len() != Self::RANDOM_HEX_LEN || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MalformedApiKey);
        }
        Ok(())
    }

    /// The role the prefix claims. The stored record is authoritative; this is for display.
    pub fn claimed_role(&self) -> Role {
        if self.0.expose_secret().starts_with(Self::SEEKER_PREFIX) {
            Role::Seeker
        } else {
            Role::Operator
        }
    }

    /// Lookup hash stored instead of the key.
    pub fn hash(&self) -> ApiKeyHash {
        ApiKeyHash::of(self.0.expose_secret())
    }

    /// The first characters, safe to store and show so a user can tell keys apart.
    pub fn display_prefix(&self) -> String {
        self.0.expose_secret().chars().take(10).collect()
    }

    /// The full key. Shown to its owner exactly once, at creation.
    pub fn reveal(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}…)", self.display_prefix())
    }
}

/// SHA-256 of an API key. Held as the digest itself: every authenticated request hashes its key
/// and looks it up in the key cache, which compares and hashes these 32 bytes; the hex form the
/// store keeps is written only when the store is asked.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ApiKeyHash([u8; 32]);

impl ApiKeyHash {
    /// Hash any presented secret (also the admin key from configuration).
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    /// A digest read back from the store (its hex form).
    pub(crate) fn from_stored(hex: &str) -> Option<Self> {
        let mut digest = [0u8; 32];
        hex::decode_to_slice(hex, &mut digest).ok()?;
        Some(Self(digest))
    }

    /// Lowercase hex digest, as stored.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Equality that takes the same time wherever the digests differ, for comparing a presented
    /// key with the configured admin key.
    pub fn constant_time_eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// Never the digest: it is as good as the key for a lookup.
impl fmt::Debug for ApiKeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKeyHash(…)")
    }
}

/// Secret a worker uses to sign its callbacks to the gateway (HMAC-SHA256, Standard Webhooks
/// `whsec_<base64>` form). Stored as is because verifying an HMAC needs the key; shown to the
/// operator once.
#[derive(Clone)]
pub struct CallbackSecret(SecretString);

impl CallbackSecret {
    /// Prefix of the serialized secret.
    pub const PREFIX: &'static str = "whsec_";

    /// 32 fresh random bytes.
    pub fn generate() -> Self {
        use base64::Engine as _;
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        Self(SecretString::from(format!(
            "{}{}",
            Self::PREFIX,
            base64::engine::general_purpose::STANDARD.encode(bytes)
        )))
    }

    /// Rebuild from a stored value.
    pub(crate) fn from_stored(raw: String) -> Self {
        Self(SecretString::from(raw))
    }

    /// The serialized secret.
    pub fn reveal(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for CallbackSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallbackSecret([REDACTED])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_and_hash_stably() {
        let key = ApiKey::generate(Role::Seeker).unwrap();
        assert!(key.reveal().starts_with("hg_sk_"));
        let parsed = ApiKey::parse(key.reveal()).unwrap();
        assert_eq!(parsed.hash(), key.hash());
        assert_eq!(parsed.claimed_role(), Role::Seeker);
        let other = ApiKey::generate(Role::Operator).unwrap();
        assert_ne!(other.hash(), key.hash());
        assert_eq!(other.claimed_role(), Role::Operator);
        assert!(ApiKey::generate(Role::Admin).is_none());
    }

    #[test]
    fn malformed_keys_are_refused() {
        for bad in [
            "",
            "hg_sk_",
            "hg_sk_zz",
            "sk_live_abc",
            &format!("hg_xx_{}", "a".repeat(64)),
        ] {
            assert!(ApiKey::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_hides_key_material() {
        let key = ApiKey::generate(Role::Operator).unwrap();
        let debug = format!("{key:?}");
        assert!(!debug.contains(&key.reveal()[12..]), "{debug}");
        let secret = CallbackSecret::generate();
        assert!(secret.reveal().starts_with("whsec_"));
        assert!(!format!("{secret:?}").contains(&secret.reveal()[6..]));
    }

    #[test]
    fn hash_equality_is_exact() {
        let a = ApiKeyHash::of("one");
        assert!(a.constant_time_eq(&ApiKeyHash::of("one")));
        assert!(!a.constant_time_eq(&ApiKeyHash::of("two")));
    }

    #[test]
    fn the_stored_hex_is_the_sha256_of_the_key_and_reads_back() {
        // SHA-256("abc"), FIPS 180-2 appendix B.1: the form rows written before the digest
        // was held as bytes still hold.
        let expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let hash = ApiKeyHash::of("abc");
        assert_eq!(hash.to_hex(), expected);
        assert_eq!(ApiKeyHash::from_stored(expected), Some(hash));
        assert_eq!(
            ApiKeyHash::from_stored(&expected.to_uppercase()),
            Some(hash)
        );
        assert_eq!(ApiKeyHash::from_stored("not hex"), None);
        assert_eq!(ApiKeyHash::from_stored(&expected[..62]), None);
    }
}
