//! API keys: issuing, revoking and rotating them, and the cache of presented keys. The key
//! values themselves (format, hashing, roles, callback secrets) are the store's
//! ([`hiregate_store::keys`]); the HTTP extractors that use them live in `http::extract`.

use std::sync::Arc;

use crate::clock::Clock;
use hiregate_contracts::id::{ApiKeyId, PrincipalId};
use hiregate_store::{
    ApiKeyInfo, ApiKeyRecord, NewApiKey, Store, StoreError,
    keys::{ApiKey, ApiKeyHash, Role},
};

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
    clock: &Clock,
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
    let new = new_key_record(&key, role, principal_id, label, clock);
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
    clock: &Clock,
) -> NewApiKey {
    NewApiKey {
        id: ApiKeyId::generate(),
        hash: key.hash(),
        display_prefix: key.display_prefix(),
        role,
        principal_id,
        label,
        created_at: clock.now_millis(),
    }
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
    let Some(revoked) = store
        .revoke_api_key_by_id(id, owner, cache.clock.now_millis())
        .await?
    else {
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
        .rotate_api_key(id, owner, cache.clock.now_millis(), |old| {
            let key = ApiKey::generate(old.role)?;
            let new = new_key_record(
                &key,
                old.role,
                old.principal_id.clone(),
                old.label.clone(),
                &cache.clock,
            );
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
/// guessing cannot fill it. Records are shared, not copied: a hit is a reference count, where a
/// copy of the record's four strings was four allocations on every authenticated request.
#[derive(Debug, Clone)]
pub struct ApiKeyCache {
    ttl: std::time::Duration,
    clock: Clock,
    entries: Arc<quick_cache::sync::Cache<ApiKeyHash, (Arc<ApiKeyRecord>, std::time::Instant)>>,
}

/// Keys remembered at most; the least recently used go first.
const API_KEY_CACHE_CAPACITY: usize = 10_000;

impl ApiKeyCache {
    /// A cache whose entries live `ttl` by `clock` (zero: nothing is cached).
    pub fn new(ttl: std::time::Duration, clock: Clock) -> Self {
        Self {
            ttl,
            clock,
            entries: Arc::new(quick_cache::sync::Cache::new(API_KEY_CACHE_CAPACITY)),
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
    ) -> Result<Option<Arc<ApiKeyRecord>>, StoreError> {
        if let Some((record, seen)) = self.entries.get(hash)
            && self.clock.instant().saturating_duration_since(seen) < self.ttl
        {
            return Ok(Some(record));
        }
        let record = store.find_api_key(hash).await?.map(Arc::new);
        match &record {
            Some(record) if !self.ttl.is_zero() => {
                self.entries
                    .insert(*hash, (Arc::clone(record), self.clock.instant()));
            }
            _ => {
                self.entries.remove(hash);
            }
        }
        Ok(record)
    }
}
