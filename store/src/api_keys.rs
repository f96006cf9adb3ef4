//! `api_key`: hashed API keys and the principal each belongs to.

use chrono::{DateTime, Utc};

use super::{Store, StoreError, from_millis, on_backend, on_writer, to_millis};
use crate::keys::{ApiKeyHash, Role};
use hiregate_contracts::id::{ApiKeyId, PrincipalId};

const ENTITY: &str = "api_key";

/// A key to store (the key itself is never stored, only its hash).
#[derive(Debug, Clone)]
pub struct NewApiKey {
    /// Key id.
    pub id: ApiKeyId,
    /// SHA-256 of the key.
    pub hash: ApiKeyHash,
    /// First characters of the key, for display.
    pub display_prefix: String,
    /// What the key may do.
    pub role: Role,
    /// Owning account.
    pub principal_id: PrincipalId,
    /// Free-form note.
    pub label: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// A stored, unrevoked key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// Key id.
    pub id: ApiKeyId,
    /// What the key may do.
    pub role: Role,
    /// Owning account.
    pub principal_id: PrincipalId,
    /// First characters of the key.
    pub display_prefix: String,
    /// Free-form note.
    pub label: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct ApiKeyRow {
    api_key_id: String,
    role: String,
    principal_id: String,
    key_prefix: String,
    label: Option<String>,
    created_at: i64,
}

impl TryFrom<ApiKeyRow> for ApiKeyRecord {
    type Error = StoreError;

    fn try_from(row: ApiKeyRow) -> Result<Self, Self::Error> {
        let corrupt = |e: &dyn std::fmt::Display| StoreError::corrupt(ENTITY, e);
        Ok(Self {
            id: row.api_key_id.parse().map_err(|e| corrupt(&e))?,
            role: row.role.parse().map_err(|e| corrupt(&e))?,
            principal_id: row.principal_id.parse().map_err(|e| corrupt(&e))?,
            display_prefix: row.key_prefix,
            label: row.label,
            created_at: from_millis(ENTITY, row.created_at)?,
        })
    }
}

impl Store {
    /// Store a new key. A hash collision (the same key twice) is [`StoreError::Duplicate`].
    pub async fn insert_api_key(&self, key: &NewApiKey) -> Result<(), StoreError> {
        const SQL: &str = "insert into api_key \
            (api_key_id, key_hash, key_prefix, role, principal_id, label, created_at) \
            values ($1, $2, $3, $4, $5, $6, $7)";
        on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(key.id.as_str())
                .bind(key.hash.to_hex())
                .bind(&key.display_prefix)
                .bind(key.role.as_str())
                .bind(key.principal_id.as_str())
                .bind(key.label.as_deref())
                .bind(to_millis(key.created_at))
                .execute(conn)
                .await
                .map_err(StoreError::unique_as_duplicate(ENTITY))?;
        });
        Ok(())
    }

    /// The unrevoked key with this hash, if any.
    pub async fn find_api_key(
        &self,
        hash: &ApiKeyHash,
    ) -> Result<Option<ApiKeyRecord>, StoreError> {
        const SQL: &str = "select api_key_id, role, principal_id, key_prefix, label, created_at \
            from api_key where key_hash = $1 and revoked_at is null";
        let row: Option<ApiKeyRow> = on_backend!(self, conn => {
            sqlx::query_as(SQL).bind(hash.to_hex()).fetch_optional(conn).await?
        });
        row.map(ApiKeyRecord::try_from).transpose()
    }

    /// Revoke a key of `principal_id`. Returns whether a live key was revoked.
    pub async fn revoke_api_key(
        &self,
        id: &ApiKeyId,
        principal_id: &PrincipalId,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update api_key set revoked_at = $3 \
            where api_key_id = $1 and principal_id = $2 and revoked_at is null";
        let result = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(id.as_str())
                .bind(principal_id.as_str())
                .bind(to_millis(at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(result == 1)
    }
}

/// A key as listed to admins and owners: never the secret, never its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyInfo {
    /// The key's record.
    pub record: ApiKeyRecord,
    /// When it was revoked (rotation revokes the old key).
    pub revoked_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct ApiKeyInfoRow {
    #[sqlx(flatten)]
    key: ApiKeyRow,
    revoked_at: Option<i64>,
}

impl TryFrom<ApiKeyInfoRow> for ApiKeyInfo {
    type Error = StoreError;

    fn try_from(row: ApiKeyInfoRow) -> Result<Self, Self::Error> {
        Ok(Self {
            record: ApiKeyRecord::try_from(row.key)?,
            revoked_at: super::from_millis_opt(ENTITY, row.revoked_at)?,
        })
    }
}

/// A key revoked by id: what the caller's cache must forget.
#[derive(Debug, Clone)]
pub struct RevokedApiKey {
    /// Its lookup hash (for the in-memory cache only; never shown).
    pub hash: ApiKeyHash,
    /// The key as it now stands.
    pub info: ApiKeyInfo,
}

#[derive(sqlx::FromRow)]
struct RevokedRow {
    key_hash: String,
    #[sqlx(flatten)]
    info: ApiKeyInfoRow,
}

impl TryFrom<RevokedRow> for RevokedApiKey {
    type Error = StoreError;

    fn try_from(row: RevokedRow) -> Result<Self, Self::Error> {
        Ok(Self {
            hash: ApiKeyHash::from_stored(&row.key_hash)
                .ok_or_else(|| StoreError::corrupt(ENTITY, &"key_hash is not a hex SHA-256"))?,
            info: ApiKeyInfo::try_from(row.info)?,
        })
    }
}

/// Revokes a live key `$1`, of owner `$2` unless null, at `$3`.
const REVOKE_RETURNING: &str = "update api_key set revoked_at = $3 \
    where api_key_id = $1 and ($2 is null or principal_id = $2) and revoked_at is null \
    returning key_hash, api_key_id, role, principal_id, key_prefix, label, created_at, revoked_at";

impl Store {
    /// Keys ordered by id (creation order), after `after`, at most `limit`: all of them, or
    /// those of `principal_id`; revoked ones only with `include_revoked`.
    pub async fn list_api_keys(
        &self,
        principal_id: Option<&PrincipalId>,
        include_revoked: bool,
        after: Option<&ApiKeyId>,
        limit: u32,
    ) -> Result<Vec<ApiKeyInfo>, StoreError> {
        // Key ids are fixed-length prefixed ULIDs (digits and capitals), which every collation
        // orders like bytes, so both backends page identically.
        const SQL: &str = "select api_key_id, role, principal_id, key_prefix, label, created_at, \
            revoked_at from api_key \
            where ($1 is null or principal_id = $1) and ($2 or revoked_at is null) \
              and ($3 is null or api_key_id > $3) \
            order by api_key_id limit $4";
        let rows: Vec<ApiKeyInfoRow> = on_backend!(self, conn => {
            sqlx::query_as(SQL)
                .bind(principal_id.map(PrincipalId::as_str))
                .bind(include_revoked)
                .bind(after.map(ApiKeyId::as_str))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(ApiKeyInfo::try_from).collect()
    }

    /// Revoke the live key `id` (only if it belongs to `owner`, when given). `None` if there is
    /// no such live key.
    pub async fn revoke_api_key_by_id(
        &self,
        id: &ApiKeyId,
        owner: Option<&PrincipalId>,
        at: DateTime<Utc>,
    ) -> Result<Option<RevokedApiKey>, StoreError> {
        let row: Option<RevokedRow> = on_writer!(self, conn => {
            sqlx::query_as(REVOKE_RETURNING)
                .bind(id.as_str())
                .bind(owner.map(PrincipalId::as_str))
                .bind(to_millis(at))
                .fetch_optional(conn)
                .await?
        });
        row.map(RevokedApiKey::try_from).transpose()
    }

    /// Replace the live key `id` (of `owner`, when given) with `replacement`, in one
    /// transaction: the old key is revoked and the new one, built by `replacement` from the old
    /// key's record (same account, role and label), stored. `None` if there is no such live key
    /// or `replacement` declines (nothing changes then).
    pub async fn rotate_api_key(
        &self,
        id: &ApiKeyId,
        owner: Option<&PrincipalId>,
        at: DateTime<Utc>,
        replacement: impl FnOnce(&ApiKeyRecord) -> Option<NewApiKey>,
    ) -> Result<Option<(RevokedApiKey, NewApiKey)>, StoreError> {
        const INSERT: &str = "insert into api_key \
            (api_key_id, key_hash, key_prefix, role, principal_id, label, created_at) \
            values ($1, $2, $3, $4, $5, $6, $7)";
        on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let row: Option<RevokedRow> = sqlx::query_as(REVOKE_RETURNING)
                .bind(id.as_str())
                .bind(owner.map(PrincipalId::as_str))
                .bind(to_millis(at))
                .fetch_optional(&mut *tx)
                .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let revoked = RevokedApiKey::try_from(row)?;
            let Some(new) = replacement(&revoked.info.record) else {
                return Ok(None);
            };
            sqlx::query(INSERT)
                .bind(new.id.as_str())
                .bind(new.hash.to_hex())
                .bind(&new.display_prefix)
                .bind(new.role.as_str())
                .bind(new.principal_id.as_str())
                .bind(new.label.as_deref())
                .bind(to_millis(new.created_at))
                .execute(&mut *tx)
                .await
                .map_err(StoreError::unique_as_duplicate(ENTITY))?;
            tx.commit().await?;
            Ok(Some((revoked, new)))
        })
    }
}
