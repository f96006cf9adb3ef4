//! `contract_capability`: the capability tokens of contracts hired over the stable x402
//! resource (migration 0021), stored as the SHA-256 of the token. Each grants the parties' read
//! routes of one contract to the seeker the contract's terms name (see `hire::resource`).
//! The other proof of such a seeker is a sign-in-with-x message signed by the payer's wallet:
//! [`Store::wallet_seeker_of`] names the payer, and `siwx_nonce` (migration 0022) lets each
//! message be accepted once, on every instance sharing the database.

use chrono::{DateTime, Utc};

use super::{Store, StoreError, on_backend, on_writer, to_millis};

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
        on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(token_hash)
                .bind(contract_id)
                .bind(to_millis(at))
                .execute(conn)
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
        Ok(on_backend!(self, conn => {
            sqlx::query_scalar(SQL).bind(token_hash).fetch_optional(conn).await?
        }))
    }

    /// The seeker id and the payer (checksummed address) of `contract_id` when it is a wallet
    /// seeker's contract: paid, and its seeker is no API key's principal (hired over the stable
    /// x402 resource). `None` for an unknown, unpaid or API-key seeker's contract, so a wallet
    /// proof never reaches a contract an account owns.
    pub async fn wallet_seeker_of(
        &self,
        contract_id: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        const SQL: &str = "select c.seeker_id, p.payer from contract c \
            join payment p on p.contract_id = c.contract_id \
            where c.contract_id = $1 \
            and not exists (select 1 from api_key k where k.principal_id = c.seeker_id) \
            order by p.created_at limit 1";
        Ok(on_backend!(self, conn => {
            sqlx::query_as(SQL).bind(contract_id).fetch_optional(conn).await?
        }))
    }

    /// Claim a sign-in-with-x nonce until `expires_at`: `true` the first time, `false` when it
    /// was claimed before and has not expired (a replay). Expired claims are purged first, so
    /// the table holds only the proofs still acceptable.
    pub async fn claim_siwx_nonce(
        &self,
        nonce: &str,
        expires_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const PURGE: &str = "delete from siwx_nonce where expires_at < $1";
        const CLAIM: &str = "insert into siwx_nonce (nonce, expires_at) values ($1, $2) \
            on conflict (nonce) do nothing";
        let claimed = on_writer!(self, conn => {
            sqlx::query(PURGE).bind(to_millis(now)).execute(&mut *conn).await?;
            sqlx::query(CLAIM)
                .bind(nonce)
                .bind(to_millis(expires_at))
                .execute(&mut *conn)
                .await?
                .rows_affected()
        });
        Ok(claimed == 1)
    }

    /// The wallet seeker contracts `payer` paid for (the address as stored: checksummed, or
    /// lowercase), newest first, at most `limit`: `(contract_id, state, created_at)`.
    pub async fn wallet_contracts(
        &self,
        payer: &str,
        limit: i64,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
        const SQL: &str = "select c.contract_id, c.state, c.created_at from payment p \
            join contract c on c.contract_id = p.contract_id \
            where p.payer in ($1, $2) \
            and not exists (select 1 from api_key k where k.principal_id = c.seeker_id) \
            order by c.created_at desc, c.contract_id desc limit $3";
        let rows: Vec<(String, String, i64)> = on_backend!(self, conn => {
            sqlx::query_as(SQL)
                .bind(payer)
                .bind(payer.to_lowercase())
                .bind(limit)
                .fetch_all(conn)
                .await?
        });
        rows.into_iter()
            .map(|(id, state, at)| Ok((id, state, super::from_millis("contract", at)?)))
            .collect()
    }
}
