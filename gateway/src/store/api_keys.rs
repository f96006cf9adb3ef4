//! `api_key`: hashed API keys and the principal each belongs to.

use chrono::{DateTime, Utc};

use super::{Store, StoreError, from_millis, on_backend, to_millis};
use crate::{
    auth::{ApiKeyHash, Role},
    ids::{ApiKeyId, PrincipalId},
};

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
        on_backend!(self, pool => {
            sqlx::query(SQL)
                .bind(key.id.as_str())
                .bind(key.hash.as_str())
                .bind(&key.display_prefix)
                .bind(key.role.as_str())
                .bind(key.principal_id.as_str())
                .bind(key.label.as_deref())
                .bind(to_millis(key.created_at))
                .execute(pool)
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
        let row: Option<ApiKeyRow> = on_backend!(self, pool => {
            sqlx::query_as(SQL).bind(hash.as_str()).fetch_optional(pool).await?
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
        let result = on_backend!(self, pool => {
            sqlx::query(SQL)
                .bind(id.as_str())
                .bind(principal_id.as_str())
                .bind(to_millis(at))
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(result == 1)
    }
}
