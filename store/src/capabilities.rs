//! `contract_capability`: the capability tokens of contracts hired over the stable x402
//! resource (migration 0021), stored as the SHA-256 of the token. Each grants the parties' read
//! routes of one contract to the seeker the contract's terms name (see `hire::resource`).

use chrono::{DateTime, Utc};

use super::{Store, StoreError, on_backend, on_backend_write, to_millis};

impl Store {
    /// Record the token whose SHA-256 is `token_hash` for `contract_id`; recording it again
    /// changes nothing.
    pub async fn insert_capability(
        &self,
        token_hash: &str,
        contract_id: &str,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const SQL: &str = "insert into contract_capability (token_hash, contract_id, created_at) \
            values ($1, $2, $3) on conflict (token_hash) do nothing";
        on_backend_write!(self, pool => {
            sqlx::query(SQL)
                .bind(token_hash)
                .bind(contract_id)
                .bind(to_millis(at))
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// The seeker of the contract a capability token (by its SHA-256) was issued for.
    pub async fn seeker_of_capability(
        &self,
        token_hash: &str,
    ) -> Result<Option<String>, StoreError> {
        const SQL: &str = "select c.seeker_id from contract_capability k \
            join contract c on c.contract_id = k.contract_id where k.token_hash = $1";
        Ok(on_backend!(self, pool => {
            sqlx::query_scalar(SQL).bind(token_hash).fetch_optional(pool).await?
        }))
    }
}
