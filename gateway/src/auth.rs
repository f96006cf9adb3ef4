//! API keys: generation, format and hashing. The HTTP extractors that use them live in
//! `http::extract`.
//!
//! A key is `hg_sk_<64 hex>` (seeker) or `hg_op_<64 hex>` (operator): 256 random bits, so a
//! plain SHA-256 of the whole key is a sound lookup hash (no password stretching needed) and
//! only the hash is stored.

use std::{fmt, str::FromStr};

use chrono::Utc;
use rand::RngCore;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{
    ids::{ApiKeyId, PrincipalId},
    store::{ApiKeyInfo, ApiKeyRecord, NewApiKey, Store, StoreError},
};

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
        let random = raw
            .strip_prefix(Self::SEEKER_PREFIX)
            .or_else(|| raw.strip_prefix(Self::OPERATOR_PREFIX))
            .ok_or(MalformedApiKey)?;
        if random.len() != Self::RANDOM_HEX_LEN || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(MalformedApiKey);
        }
        Ok(Self(SecretString::from(raw)))
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

/// Hex SHA-256 of an API key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiKeyHash(String);

impl ApiKeyHash {
    /// Hash any presented secret (also the admin key from configuration).
    pub fn of(secret: &str) -> Self {
        Self(hex::encode(Sha256::digest(secret.as_bytes())))
    }

    /// A digest read back from the store.
    pub(crate) fn from_stored(hex: String) -> Self {
        Self(hex)
    }

    /// Hex digest.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Equality that takes the same time wherever the digests differ, for comparing a presented
    /// key with the configured admin key.
    pub fn constant_time_eq(&self, other: &Self) -> bool {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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

/// A key could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueKeyError {
    /// Only seeker and operator keys are generated; the admin key comes from configuration.
    #[error("only seeker and operator keys can be created")]
    RoleNotIssuable,
    /// The principal id's prefix belongs to the other role.
    #[error("principal `{principal_id}` is not a {} account", role.as_str())]
    PrincipalRoleMismatch {
        /// The principal given.
        principal_id: PrincipalId,
        /// The role asked for.
        role: Role,
    },
    /// The label is longer than [`MAX_LABEL_CHARS`].
    #[error("label must be at most {MAX_LABEL_CHARS} characters")]
    LabelTooLong,
    /// The label holds U+0000, which no text column holds on every backend (see the `store`
    /// module docs); refused the same way whatever the database.
    #[error("label must not contain U+0000")]
    LabelHasNul,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Longest key label.
pub const MAX_LABEL_CHARS: usize = 100;

/// A freshly issued key: the secret (to show once) and what was stored.
#[derive(Debug)]
pub struct IssuedKey {
    /// The key itself.
    pub key: ApiKey,
    /// The stored record.
    pub record: ApiKeyRecord,
}

/// Create and store a key for `role`. Without `principal_id` a new account is created; with
/// one, the key is an additional key of that account.
pub async fn issue_api_key(
    store: &Store,
    role: Role,
    principal_id: Option<PrincipalId>,
    label: Option<String>,
) -> Result<IssuedKey, IssueKeyError> {
    let key = ApiKey::generate(role).ok_or(IssueKeyError::RoleNotIssuable)?;
    let principal_id = match principal_id {
        Some(id) => {
            let matches = match role {
                Role::Seeker => id.is_seeker(),
                Role::Operator => id.is_operator(),
                Role::Admin => false,
            };
            if !matches {
                return Err(IssueKeyError::PrincipalRoleMismatch {
                    principal_id: id,
                    role,
                });
            }
            id
        }
        None if role == Role::Seeker => PrincipalId::generate_seeker(),
        None => PrincipalId::generate_operator(),
    };
    if label
        .as_ref()
        .is_some_and(|l| l.chars().count() > MAX_LABEL_CHARS)
    {
        return Err(IssueKeyError::LabelTooLong);
    }
    if label.as_ref().is_some_and(|l| l.contains('\0')) {
        return Err(IssueKeyError::LabelHasNul);
    }
    let new = new_key_record(&key, role, principal_id, label);
    store.insert_api_key(&new).await?;
    Ok(IssuedKey {
        key,
        record: stored_record(new),
    })
}

fn new_key_record(
    key: &ApiKey,
    role: Role,
    principal_id: PrincipalId,
    label: Option<String>,
) -> NewApiKey {
    NewApiKey {
        id: ApiKeyId::generate(),
        hash: key.hash(),
        display_prefix: key.display_prefix(),
        role,
        principal_id,
        label,
        created_at: now_millis(),
    }
}

/// Stored at millisecond precision; truncated so a returned record equals a re-read.
fn now_millis() -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_else(Utc::now)
}

fn stored_record(new: NewApiKey) -> ApiKeyRecord {
    ApiKeyRecord {
        id: new.id,
        role: new.role,
        principal_id: new.principal_id,
        display_prefix: new.display_prefix,
        label: new.label,
        created_at: new.created_at,
    }
}

/// Revoke the live key `id` (only `owner`'s, when given) and drop it from this instance's
/// cache at once. Other instances stop accepting it within their `http.api_key_cache_ttl_ms`.
/// `None` if there is no such live key.
pub async fn revoke_api_key(
    store: &Store,
    cache: &ApiKeyCache,
    id: &ApiKeyId,
    owner: Option<&PrincipalId>,
) -> Result<Option<ApiKeyInfo>, StoreError> {
    let Some(revoked) = store.revoke_api_key_by_id(id, owner, now_millis()).await? else {
        return Ok(None);
    };
    cache.forget(&revoked.hash);
    Ok(Some(revoked.info))
}

/// Replace the live key `id` (only `owner`'s, when given) with a fresh key of the same account,
/// role and label; the old key is revoked in the same transaction and dropped from this
/// instance's cache. `None` if there is no such live key.
pub async fn rotate_api_key(
    store: &Store,
    cache: &ApiKeyCache,
    id: &ApiKeyId,
    owner: Option<&PrincipalId>,
) -> Result<Option<IssuedKey>, StoreError> {
    let mut fresh = None;
    let rotated = store
        .rotate_api_key(id, owner, now_millis(), |old| {
            let key = ApiKey::generate(old.role)?;
            let new = new_key_record(&key, old.role, old.principal_id.clone(), old.label.clone());
            fresh = Some(key);
            Some(new)
        })
        .await?;
    let (Some((revoked, new)), Some(key)) = (rotated, fresh) else {
        return Ok(None);
    };
    cache.forget(&revoked.hash);
    Ok(Some(IssuedKey {
        key,
        record: stored_record(new),
    }))
}

/// API keys recently found valid, so that a hot route does not query the store on every
/// call. An entry lives `ttl` (`http.api_key_cache_ttl_ms`): a key revoked elsewhere (another
/// instance, the CLI) keeps working here at most that long. Unknown keys are never cached, so
/// guessing cannot fill it.
#[derive(Debug, Clone)]
pub struct ApiKeyCache {
    ttl: std::time::Duration,
    entries:
        std::sync::Arc<quick_cache::sync::Cache<ApiKeyHash, (ApiKeyRecord, std::time::Instant)>>,
}

/// Keys remembered at most; the least recently used go first.
const API_KEY_CACHE_CAPACITY: usize = 10_000;

impl ApiKeyCache {
    /// A cache whose entries live `ttl` (zero: nothing is cached).
    pub fn new(ttl: std::time::Duration) -> Self {
        Self {
            ttl,
            entries: std::sync::Arc::new(quick_cache::sync::Cache::new(API_KEY_CACHE_CAPACITY)),
        }
    }

    /// Forget `hash` (a key just revoked here), so this instance refuses it from the next
    /// request on.
    pub fn forget(&self, hash: &ApiKeyHash) {
        self.entries.remove(hash);
    }

    /// The record of `hash`, from memory when fresh, else from `store` (and remembered).
    pub async fn find(
        &self,
        store: &Store,
        hash: &ApiKeyHash,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        if let Some((record, seen)) = self.entries.get(hash)
            && seen.elapsed() < self.ttl
        {
            return Ok(Some(record));
        }
        let record = store.find_api_key(hash).await?;
        match &record {
            Some(record) if !self.ttl.is_zero() => {
                self.entries
                    .insert(hash.clone(), (record.clone(), std::time::Instant::now()));
            }
            _ => {
                self.entries.remove(hash);
            }
        }
        Ok(record)
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
}
