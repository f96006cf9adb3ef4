//! No table: PostgreSQL advisory locks through which the gateway instances on one database
//! learn who sends from a chain key and take turns on it (see `crate::key_turns`).
//!
//! | lock | mode | held |
//! |---|---|---|
//! | claim `(CLAIM_SPACE, key)` | shared | by every instance that sends from the key, for its life, on a connection of its own: `pg_locks` counts the claimants |
//! | send `(SEND_SPACE, key)` | exclusive, transaction-level | by the instance whose turn it is to send, for one send; a crash mid-send rolls the transaction back and frees it |
//!
//! SQLite has no such locks: gateway instances sharing a database are a PostgreSQL setup.

use sqlx::{Connection as _, PgConnection, PgPool, Postgres, Transaction};
use tokio::sync::Mutex;

use super::{Backend, Store, StoreError};

/// The first half of every claim lock: "HG" and 1, so the gateway's locks never meet another
/// application's on a shared server.
const CLAIM_SPACE: i32 = 0x4847_0001;
/// The first half of every send lock.
const SEND_SPACE: i32 = 0x4847_0002;

/// How many instances claim `(CLAIM_SPACE, $1)` on this database (this one included).
const CLAIMANTS: &str = "select count(distinct pid) from pg_locks \
     where locktype = 'advisory' and granted \
       and database = (select oid from pg_database where datname = current_database()) \
       and classid = ($1::int4)::oid and objid = ($2::int4)::oid and objsubid = 2";

/// The advisory locks of a PostgreSQL store.
#[derive(Debug)]
pub struct KeyLocks {
    pool: PgPool,
    /// The connection that holds this process's claims, and which keys it claims. Dropped on
    /// an error (with it the claims), so the next refresh claims anew on a fresh one.
    claims: Mutex<Option<(PgConnection, Vec<i32>)>>,
}

/// A turn to send from a key: the transaction holding its send lock.
#[derive(Debug)]
pub struct SendLock(Transaction<'static, Postgres>);

impl SendLock {
    /// Ends the turn.
    pub async fn release(self) -> Result<(), StoreError> {
        self.0.commit().await.map_err(StoreError::from)
    }
}

impl Store {
    /// The advisory locks of this database; `None` on SQLite.
    pub fn key_locks(&self) -> Option<KeyLocks> {
        match &self.backend {
            Backend::Postgres(pool) => Some(KeyLocks {
                pool: pool.clone(),
                claims: Mutex::new(None),
            }),
            Backend::Sqlite(_) => None,
        }
    }
}

impl KeyLocks {
    /// Claims every key of `keys` for this process (once per connection), then counts each
    /// one's claimants, in the order given.
    pub async fn claim_and_count(&self, keys: &[i32]) -> Result<Vec<i64>, StoreError> {
        let mut claims = self.claims.lock().await;
        let counted = async {
            if claims.is_none() {
                // Its own connection, outside the pool: the claims live as long as it does.
                let connection = self.pool.acquire().await?.detach();
                *claims = Some((connection, Vec::new()));
            }
            let Some((connection, claimed)) = claims.as_mut() else {
                return Err(StoreError::Database(sqlx::Error::PoolClosed));
            };
            for &key in keys {
                if !claimed.contains(&key) {
                    sqlx::query("select pg_advisory_lock_shared($1, $2)")
                        .bind(CLAIM_SPACE)
                        .bind(key)
                        .execute(&mut *connection)
                        .await?;
                    claimed.push(key);
                }
            }
            let mut counts = Vec::with_capacity(keys.len());
            for &key in keys {
                let count: i64 = sqlx::query_scalar(CLAIMANTS)
                    .bind(CLAIM_SPACE)
                    .bind(key)
                    .fetch_one(&mut *connection)
                    .await?;
                counts.push(count);
            }
            Ok(counts)
        }
        .await;
        if counted.is_err()
            && let Some((connection, _)) = claims.take()
        {
            // Closing ends the session, and with it whatever it still claimed.
            let _ = connection.close().await;
        }
        counted
    }

    /// Waits for the send lock of `key`; nobody else sends from the key until it is released.
    pub async fn lock_sending(&self, key: i32) -> Result<SendLock, StoreError> {
        let mut transaction = self.pool.begin().await?;
        sqlx::query("select pg_advisory_xact_lock($1, $2)")
            .bind(SEND_SPACE)
            .bind(key)
            .execute(&mut *transaction)
            .await?;
        Ok(SendLock(transaction))
    }
}
