//! # hiregate-store
//!
//! Persistence: one [`Store`] over SQLite or PostgreSQL, chosen by the database URL's scheme.
//! Every SQL statement of the gateway lives in this crate, with the migrations it embeds
//! (`migrations/sqlite`, `migrations/postgres`), the in-process event bus of committed events,
//! and the records the tables hold. It sits on the contracts crate (and the payments crate's x402
//! wire types, which a contract's stored offer is made of) and knows nothing of HTTP or
//! of the hire's rules: the engine (`hiregate-engine`) drives it.
//!
//! | module | what it holds |
//! |---|---|
//! | [`settings`] | `[database]`: [`settings::DatabaseSettings`], the URL and its backend |
//! | [`states`] | the stored vocabularies as enums: [`states::PaymentState`], [`states::AttemptState`], [`states::DeliveryState`], [`states::EventKind`], [`states::Actor`], [`states::DisputeState`], [`states::DecidedVia`], [`states::PieceKind`] (a row with another spelling is corrupt) |
//! | [`keys`] | API keys (`hg_sk_`/`hg_op_`, only their SHA-256 stored), [`keys::Role`], worker callback secrets |
//! | [`listing`] | a worker listing: its model (endpoint, protocol, tasks and prices, schemes, fee, health), its shown metadata, [`listing::invalid::InvalidField`] |
//! | [`offer`] | [`offer::StoredOffer`]: what a contract keeps of its x402 offer |
//! | [`bus`] | the in-process [`EventBus`] of committed events and their public [`LiveEvent`] view |
//! | this module | [`Store`], [`StoreError`], the backend macros, and the tables below |
//!
//! Queries are runtime-checked (`sqlx::query_as`), written once with `$n` placeholders, which
//! both drivers accept; `on_backend!` expands each body once per driver's connection type, so
//! both are type-checked. Writes use `on_writer!`, whose SQLite connection is the store's one
//! writer, held outside any pool as the process's write turn (see `sqlite`). Dialect differences
//! (`FOR UPDATE SKIP LOCKED`) are separate constants.
//! Times are stored as Unix milliseconds. JSON is stored as its serialized text in TEXT columns
//! on both backends, bound through `json::JsonText`, so a value reads back exactly as written
//! on either (PostgreSQL's jsonb refuses U+0000 and rewrites numbers; see `json` for why text).
//!
//! Text that is not JSON: identifiers, states, URLs (serialized by `url`, which never leaves a
//! NUL) and API-checked free text (key labels, dispute reasons refuse U+0000 with 422
//! `validation_failed` on both backends) are bound as they are; the gateway's own diagnostic
//! texts (`last_error`, `last_probe_error`, webhook attempt errors) go through
//! `json::diagnostic`, which turns U+0000 into U+FFFD.
//!
//! | private module | tables |
//! |---|---|
//! | `api_keys` | `api_key` |
//! | `workers` | `worker`, `worker_task`, `worker_probe` (the newest probes per listing) |
//! | `worker_stats` | read-only: one listing's contracts by state, settled earnings, failures, rejections, probe history |
//! | `contracts` | `contract`, `contract_document` (its signed terms, JWS and offer, written once), `contract_event`; the caller's contract listing |
//! | `payments` | `payment` |
//! | `execution` | the paid hire's transactions: `payment` + `contract`, `attempt`, `deliverable`, `verification` |
//! | `hire_values` | none: the values the paid hire's steps write (attempt end, deliverable, verification, authorization and settlement outcomes), shared by `execution` and `advance` |
//! | `jobs` | `job` |
//! | `webhooks` | `webhook_secret`, `webhook_endpoint`, `webhook_delivery`, `webhook_attempt` (outbox filled by a trigger on `contract_event`) |
//! | `reputation` | read-only: one listing's ended paid contracts as reputation facts (payment, first verdict, last attempt, dispute, self-dealing) |
//! | `receipts` | `contract_receipt` (write-once per outcome, migrations 0006 and 0018; `contract_event` is append-only by trigger) |
//! | `disputes` | `dispute` (one per contract; the other party's answer and the decision are each written once); the arbiter's queue by state |
//! | `bus` | none: the in-process [`EventBus`] of committed events and their public [`LiveEvent`] view |
//! | `json` | none: the JSON binding and diagnostic-text rule every table uses |
//! | `key_locks` | none: PostgreSQL advisory locks, the instances' claims on chain keys and their turns to send from them |
//! | `script` | none: SQLite writes sent as one script that carries its own transaction (the temporary table `moved`) |
//! | `sqlite` | none: a SQLite database's connections, the writer held outside any pool and the readers' pool |
//! | `long_running` | `callback_receipt`; deadline-sweep queries over `contract` + `payment` |
//! | `ledger` | read-only audit queries over `payment` + `contract_document` terms and `worker` payout addresses |
//! | `transaction` | none: the statements of a contract's transaction (compare-and-set, state after a miss, event append) as functions over either driver |
//! | `capabilities` | `contract_capability`: SHA-256 of the capability tokens of contracts hired over the stable x402 resource; the payer of such a wallet-seeker contract; `siwx_nonce`: sign-in-with-x nonces claimed once |
//!
//! Every event append publishes the committed event on the store's [`EventBus`] (SSE streams and
//! the webhook loop listen), after the commit so listeners never see an event that rolled back.
//!
//! A transition's transaction is written with the functions of `transaction`, generic over the
//! driver so one body serves both: `compare_and_set` (move the state and append its event, or
//! say what the contract is in), `state_after_miss` (its second half) and `insert_event`; each
//! returns what it found and the caller decides. An event's seq is the contract row's `event_seq` (migration 0019), bumped by whichever update
//! locks the row in the event's transaction.

mod advance;
mod api_keys;
pub mod bus;
mod capabilities;
mod contracts;
mod disputes;
mod execution;
mod hire_values;
mod jobs;
mod json;
mod key_locks;
pub mod keys;
mod ledger;
pub mod listing;
mod long_running;
pub mod offer;
mod payments;
mod receipts;
mod reputation;
mod script;
pub mod settings;
mod sqlite;
pub mod states;
mod transaction;
mod webhooks;
mod worker_stats;
mod workers;

use std::str::FromStr;

use alloy::primitives::Address;
use chrono::{DateTime, TimeZone, Utc};
use hiregate_contracts::{money::Network, state::ContractState};
use sqlx::{
    migrate::Migrator,
    postgres::{PgConnectOptions, PgPool, PgPoolOptions},
    sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous},
};

pub use advance::{ContractStep, SideWrite};
pub use api_keys::{ApiKeyInfo, ApiKeyRecord, NewApiKey, RevokedApiKey};
pub use contracts::{
    ContractEvent, ContractQuery, ContractRecord, NewContract, NewContractEvent, Transition,
};
pub use disputes::{DisputeDecisionRecord, DisputeRecord, DisputeResponse, NewDispute};
pub use execution::{
    AttemptRecord, IN_FLIGHT_STATES, NewAttempt, PayOutcome, StartAttempt, WorkerLoad,
    WorkerStanding,
};
pub use hire_values::{
    AttemptEnd, AuthorizationOutcome, DeliverableRecord, NewDeliverable, NewVerification,
    SettlementOutcome, VerificationRecord,
};
pub use jobs::{Enqueued, JobRecord, NewJob};
pub use key_locks::{KeyLocks, SendLock};
pub use ledger::{LedgerEscrowPayment, LedgerPayment};
pub use long_running::AUTHORIZATION_SWEEP_STATES;
pub use payments::{NewPayment, PaymentRecord};
pub use receipts::ReceiptRecord;
pub use webhooks::{
    ClaimedDelivery, DeliveryAttemptRecord, DeliveryFinish, DeliveryRecord, Redelivery,
    WebhookSecretRecord,
};
pub use worker_stats::{
    FailedAttempt, ProbeRecord, Rejection, SettledTotal, StatsLimits, WorkerStats,
};
pub use workers::{PROBE_HISTORY_KEPT, ProbeResult, WorkerQuery};

use bus::{EventBus, LiveEvent};

use crate::settings::{DatabaseKind, DatabaseSettings};

static SQLITE_MIGRATOR: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATOR: Migrator = sqlx::migrate!("../migrations/postgres");

/// A store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness constraint refused the write: the thing already exists.
    #[error("a {entity} with the same unique key already exists")]
    Duplicate {
        /// Table whose constraint fired.
        entity: &'static str,
    },
    /// A stored value no longer parses (manual edits, or a bug that wrote it).
    #[error("stored {entity} is invalid: {reason}")]
    Corrupt {
        /// Table of the bad row.
        entity: &'static str,
        /// What failed to parse.
        reason: String,
    },
    /// The database refused or could not be reached.
    #[error("database operation failed")]
    Database(#[source] sqlx::Error),
    /// Applying migrations failed.
    #[error("database migration failed")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

impl StoreError {
    /// Map a unique violation (by error kind: SQLite does not report constraint names) to
    /// [`StoreError::Duplicate`]; other errors stay database errors.
    pub(crate) fn unique_as_duplicate(entity: &'static str) -> impl Fn(sqlx::Error) -> Self {
        move |error| match error.as_database_error().map(|e| e.kind()) {
            Some(sqlx::error::ErrorKind::UniqueViolation) => Self::Duplicate { entity },
            _ => Self::Database(error),
        }
    }

    /// A stored value that no longer parses; callers that parse stored text answer with it too.
    pub fn corrupt(entity: &'static str, reason: &dyn std::fmt::Display) -> Self {
        Self::Corrupt {
            entity,
            reason: reason.to_string(),
        }
    }
}

#[derive(Debug, Clone)]
enum Backend {
    Sqlite(sqlite::SqliteBackend),
    Postgres(PgPool),
}

/// Run `$body` with `$connection` bound to a connection: on SQLite the one `SqliteBackend::$take`
/// gives (see [`on_backend!`], [`on_writer!`]), on PostgreSQL one of the pool's. The body is
/// compiled once per backend, so the same query text is type-checked against both drivers.
macro_rules! on_connection {
    ($store:expr, $take:ident, $connection:ident => $body:expr) => {{
        $store.count_round_trip();
        match &$store.backend {
            $crate::Backend::Sqlite(sqlite_backend) => {
                let mut taken = sqlite_backend.$take().await?;
                let $connection: &mut sqlx::SqliteConnection = &mut taken;
                $body
            }
            $crate::Backend::Postgres(postgres_pool) => {
                let mut held = postgres_pool.acquire().await?;
                let $connection: &mut sqlx::PgConnection = &mut held;
                $body
            }
        }
    }};
}
pub(crate) use on_connection;

/// Run `$body` with `$connection` bound to a connection to read from: on SQLite the writer
/// while it is idle, else a pool reader (see `store::sqlite`).
macro_rules! on_backend {
    ($store:expr, $connection:ident => $body:expr) => {
        $crate::on_connection!($store, read, $connection => $body)
    };
}
pub(crate) use on_backend;

/// [`on_backend!`] for a write: on SQLite `$connection` is the store's one writing connection,
/// held for the body as this process's turn to write (see [`Store::connect`]). SQLite lets one
/// connection write at a time and puts the others to sleep in its busy handler, backing off 1,
/// 2, 5, 10… ms: with 8 hires in flight that sleep was most of the tail (p99 222–407 ms
/// against a p50 of 40–60). This process's writers take turns on an async lock instead, in
/// arrival order, and SQLite's handler is left for writers in other processes.
macro_rules! on_writer {
    ($store:expr, $connection:ident => $body:expr) => {
        $crate::on_connection!($store, write, $connection => $body)
    };
}
pub(crate) use on_writer;

/// Whether a transition and its event go to the database as one statement (see
/// `store::advance`), by the connection's backend.
pub(crate) fn merges_statements<C: Dialect>(_: &C) -> bool {
    C::MERGES_TRANSITIONS
}

/// What differs between the two SQL dialects beyond the query text both accept, by the
/// connection the backend macros bind.
pub(crate) trait Dialect {
    /// The driver.
    type Database: sqlx::Database;
    /// Data-modifying CTEs (`with … as (update …) insert …`) are supported.
    const MERGES_TRANSITIONS: bool;
}

impl Dialect for sqlx::SqliteConnection {
    type Database = sqlx::Sqlite;
    const MERGES_TRANSITIONS: bool = false;
}

impl Dialect for sqlx::PgConnection {
    type Database = sqlx::Postgres;
    const MERGES_TRANSITIONS: bool = true;
}

/// Bind an event's columns as `$1`…`$8` (contract, at, actor, correlation id, kind, from, to,
/// details), the order of `contracts::INSERT_EVENT` (and of the attempt start's merged statement).
/// A macro (it neither returns nor locks) because it binds onto whichever query type it is
/// given (`query`, `query_as`, a script) of either driver, and a fn would have to name them all.
macro_rules! bind_event {
    ($query:expr, $contract_id:expr, $event:expr, $from:expr, $to:expr) => {
        $query
            .bind($contract_id)
            .bind($crate::to_millis($event.at))
            .bind($event.actor.to_string())
            .bind(&$event.correlation_id)
            .bind($event.kind.as_str())
            .bind($from)
            .bind($to)
            .bind($crate::json::JsonText(&$event.details))
    };
}
pub(crate) use bind_event;

/// Handle on the database; cheap to clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    events: EventBus,
    round_trips: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How long a PostgreSQL connection may sit idle before it is pinged on its way out of the pool.
const PING_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

impl Store {
    /// Open a pool for `settings.url`. SQLite files are created if missing and run in WAL mode
    /// with foreign keys on; an in-memory SQLite URL gets a single connection (each connection
    /// would otherwise see its own empty database).
    ///
    /// On a SQLite file, writes go through one connection of their own, kept open for the
    /// store's life, and reads through the pool. In WAL mode a connection drops its whole page
    /// cache at the start of a transaction whenever another connection has written since its
    /// last one, so with writes spread over the pool every write began by reading its pages
    /// (the tables' and indexes' upper levels) back from the file. With one writer, its cache
    /// stays warm: only it writes. Reads use it too while it is idle (see `store::sqlite`).
    pub async fn connect(settings: &DatabaseSettings) -> Result<Self, StoreError> {
        let url = settings.url.expose();
        let backend = match settings.url.kind() {
            DatabaseKind::Sqlite => {
                let options = SqliteConnectOptions::from_str(url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    // 256 KiB of page cache per connection instead of SQLite's 2 MiB: the hot
                    // rows are few (contracts in flight), a miss is a read from the OS page
                    // cache, and a pool of connections each holding its own cache is what a
                    // gateway's memory grows by (10,000 pending contracts on 16 connections:
                    // 73 MiB RSS with 1 MiB each).
                    .pragma("cache_size", "-256")
                    .foreign_keys(true)
                    .busy_timeout(std::time::Duration::from_secs(10));
                let in_memory = url.contains(":memory:") || url.contains("mode=memory");
                // The writer holds the pages every write touches (the hot rows' tables and
                // indexes); 2 MiB is one connection's share, not the pool's.
                let writer_options = options.clone().pragma("cache_size", "-2048");
                if in_memory {
                    // One connection is the database: reads wait for the writer.
                    Backend::Sqlite(sqlite::SqliteBackend::open(&writer_options, None).await?)
                } else {
                    let readers = SqlitePoolOptions::new()
                        // sqlx pings every connection it hands out by default. A SQLite connection
                        // is a thread in this process with nothing to hang up, and the ping is a
                        // hand-over to that thread and back: a wake-up of each, on every query.
                        .test_before_acquire(false)
                        .acquire_timeout(settings.acquire_timeout())
                        .max_connections(settings.max_connections)
                        .min_connections(settings.min_connections)
                        .connect_with(options)
                        .await?;
                    Backend::Sqlite(
                        sqlite::SqliteBackend::open(&writer_options, Some(readers)).await?,
                    )
                }
            }
            DatabaseKind::Postgres => {
                let options = PgConnectOptions::from_str(url)?;
                let pool = PgPoolOptions::new()
                    // A ping before every query doubles its round trips. A connection used
                    // within the last few seconds is known to work; one idle for longer (the
                    // server may have restarted or a middlebox dropped it) is still checked.
                    .test_before_acquire(false)
                    .before_acquire(|connection, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= PING_IDLE_AFTER {
                                sqlx::Connection::ping(connection).await?;
                            }
                            Ok(true)
                        })
                    })
                    .acquire_timeout(settings.acquire_timeout())
                    .max_connections(settings.max_connections)
                    .min_connections(settings.min_connections)
                    .connect_with(options)
                    .await?;
                Backend::Postgres(pool)
            }
        };
        Ok(Self {
            backend,
            events: EventBus::default(),
            round_trips: std::sync::Arc::default(),
        })
    }

    /// Store operations run so far by this store and its clones: each is one query or one
    /// transaction (a compare-and-set that misses adds a read to the same transaction). What
    /// the benchmark divides by the hires it ran.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The flag a SQLite script on the writer sets while it runs (see `store::script`); one
    /// that nothing reads on PostgreSQL, which runs no scripts.
    fn script_flag(&self) -> &std::sync::atomic::AtomicBool {
        static NO_SCRIPTS: std::sync::atomic::AtomicBool =
            std::sync::atomic::AtomicBool::new(false);
        match &self.backend {
            Backend::Sqlite(sqlite) => sqlite.unfinished(),
            Backend::Postgres(_) => &NO_SCRIPTS,
        }
    }

    fn count_round_trip(&self) {
        self.round_trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Events committed through this store (and its clones) from now on.
    pub fn subscribe_events(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<LiveEvent>> {
        self.events.subscribe()
    }

    /// Whether `event` may have queued a webhook delivery: `false` only when its contract was
    /// proposed through this store without a `webhook_url` (see [`EventBus::may_queue_webhook`]).
    pub fn may_queue_webhook(&self, event: &LiveEvent) -> bool {
        self.events.may_queue_webhook(&event.contract_id)
    }

    /// Announce an event after its transaction committed.
    pub(crate) fn publish_event(
        &self,
        contract_id: &str,
        seq: i64,
        event: &NewContractEvent,
        from_state: Option<ContractState>,
        to_state: Option<ContractState>,
    ) {
        // The id the write just matched a contract row by, so the stored (canonical) one; were
        // it ever not an id, nobody hears of the event now: the readers' poll still finds it.
        let Ok(contract_id) = contract_id.parse() else {
            return;
        };
        self.events.publish(LiveEvent {
            contract_id,
            seq,
            kind: event.kind,
            at: event.at,
            actor: event.actor.clone(),
            from_state,
            to_state,
            details: event.details.clone(),
        });
    }

    /// Apply pending migrations. Safe to run from several instances at once (sqlx takes a
    /// database lock on PostgreSQL; SQLite serializes writers).
    pub async fn migrate(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sqlite(sqlite) => SQLITE_MIGRATOR.run(&mut *sqlite.write().await?).await?,
            Backend::Postgres(pool) => POSTGRES_MIGRATOR.run(pool).await?,
        }
        Ok(())
    }

    /// Round-trip a trivial query (readiness).
    pub async fn ping(&self) -> Result<(), StoreError> {
        on_backend!(self, conn => {
            sqlx::query("select 1").execute(conn).await?;
        });
        Ok(())
    }

    /// Which backend this store talks to.
    pub fn kind(&self) -> DatabaseKind {
        match self.backend {
            Backend::Sqlite(_) => DatabaseKind::Sqlite,
            Backend::Postgres(_) => DatabaseKind::Postgres,
        }
    }

    /// Close the connections, waiting for checked-out ones to return.
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite(sqlite) => sqlite.close().await,
            Backend::Postgres(pool) => pool.close().await,
        }
    }

    /// `(version, description)` of the embedded migrations for each backend, for the parity
    /// check between the two trees.
    pub fn embedded_migrations() -> (MigrationList, MigrationList) {
        let list = |m: &Migrator| {
            m.iter()
                .map(|mig| (mig.version, mig.description.to_string()))
                .collect()
        };
        (list(&SQLITE_MIGRATOR), list(&POSTGRES_MIGRATOR))
    }
}

/// `(version, description)` of each embedded migration, in order.
pub type MigrationList = Vec<(i64, String)>;

/// Unix milliseconds of a UTC time (the stored time format).
pub(crate) fn to_millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

/// Inverse of [`to_millis`]; out-of-range values are reported as corrupt rows.
pub(crate) fn from_millis(entity: &'static str, millis: i64) -> Result<DateTime<Utc>, StoreError> {
    Utc.timestamp_millis_opt(millis).single().ok_or_else(|| {
        StoreError::corrupt(entity, &format_args!("timestamp {millis} out of range"))
    })
}

pub(crate) fn from_millis_opt(
    entity: &'static str,
    millis: Option<i64>,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    millis.map(|m| from_millis(entity, m)).transpose()
}

/// `$first, $first+1, …` for an `IN (…)` list of `count` values.
pub(crate) fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A stored CAIP-2 network: whatever id a payment's x402 payload named, so the wire's parse
/// ([`Network::parse_caip2`]), not the EVM-only default one; text that is no CAIP-2 id is a
/// corrupt row.
pub(crate) fn parse_network(entity: &'static str, raw: &str) -> Result<Network, StoreError> {
    Network::parse_caip2(raw).map_err(|error| StoreError::corrupt(entity, &error))
}

/// A stored EVM address, written EIP-55 ([`stored_address`]) and read in any case; text that is
/// no address is a corrupt row.
pub(crate) fn parse_address(entity: &'static str, raw: &str) -> Result<Address, StoreError> {
    raw.parse()
        .map_err(|error| StoreError::corrupt(entity, &error))
}

/// The stored spelling of an address: EIP-55, as payments have always been written (lookups
/// by authorization compare the text).
pub(crate) fn stored_address(address: &Address) -> String {
    address.to_checksum(None)
}

/// A stored JSON document read into the type it was written from (a contract's signed terms,
/// its offer); a document that does not parse is a corrupt row.
pub(crate) fn parse_document<T>(
    entity: &'static str,
    raw: &serde_json::Value,
) -> Result<T, StoreError>
where
    T: serde::de::DeserializeOwned,
{
    T::deserialize(raw).map_err(|error| StoreError::corrupt(entity, &error))
}

/// A stored id read into its type (the contracts crate's vocabulary); text that is not an id of
/// that kind is a corrupt row.
pub(crate) fn parse_id<Id>(entity: &'static str, raw: &str) -> Result<Id, StoreError>
where
    Id: FromStr,
    Id::Err: std::fmt::Display,
{
    raw.parse()
        .map_err(|error| StoreError::corrupt(entity, &error))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PRAGMA data_version` of `store`'s writer: it changes exactly when another connection
    /// has committed since the previous reading.
    async fn data_version(store: &Store) -> i64 {
        let Backend::Sqlite(sqlite) = &store.backend else {
            unreachable!("a SQLite store");
        };
        sqlx::query_scalar("pragma data_version")
            .fetch_one(&mut *sqlite.write().await.unwrap())
            .await
            .unwrap()
    }

    /// A migrated store on a SQLite file in a folder of its own, and the folder.
    async fn file_store() -> (Store, std::path::PathBuf) {
        let folder = std::env::temp_dir().join(format!("hiregate-store-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&folder).unwrap();
        let settings = DatabaseSettings {
            url: format!("sqlite://{}", folder.join("store.db").display())
                .parse()
                .unwrap(),
            max_connections: 4,
            min_connections: 0,
            acquire_timeout_s: 5,
            migrate_on_start: false,
        };
        let store = Store::connect(&settings).await.unwrap();
        store.migrate().await.unwrap();
        (store, folder)
    }

    /// Every write of a SQLite file store goes through its one writing connection, so that
    /// connection never sees another's commit and keeps its page cache.
    #[tokio::test]
    async fn a_sqlite_file_store_writes_through_one_connection() {
        let (store, folder) = file_store().await;
        let now = Utc::now();
        let writer_before = data_version(&store).await;

        for n in 0..3 {
            let job = NewJob {
                id: hiregate_contracts::id::JobId::generate(),
                kind: "test".to_owned(),
                dedupe_key: Some(format!("writer-{n}")),
                payload: serde_json::json!({"n": n}),
                run_at: now,
            };
            assert_eq!(
                store.enqueue_job(&job, now).await.unwrap(),
                Enqueued::Created
            );
            let claimed = store
                .claim_job("test", "owner", now, std::time::Duration::from_secs(60))
                .await
                .unwrap()
                .expect("the job just enqueued is due");
            assert!(store.complete_job(&claimed.id, "owner", now).await.unwrap());
        }
        assert_eq!(
            data_version(&store).await,
            writer_before,
            "another connection committed"
        );

        // What the check would see if a write went around the writer.
        let Backend::Sqlite(sqlite) = &store.backend else {
            unreachable!("a SQLite store");
        };
        let readers = sqlite.readers().expect("a file has readers");
        sqlx::query("update job set attempts = attempts + 1")
            .execute(readers)
            .await
            .unwrap();
        assert_ne!(data_version(&store).await, writer_before);
        store.close().await;
        std::fs::remove_dir_all(&folder).unwrap();
    }

    /// A script whose task was dropped half-way leaves its transaction open on the writer,
    /// which no pool cleans up: the writer's next user rolls it back before its own work.
    /// Without that, the next write would run inside the abandoned transaction and never
    /// commit.
    #[tokio::test]
    async fn the_writer_rolls_back_what_a_dropped_script_left_open() {
        let (store, folder) = file_store().await;
        let now = Utc::now();
        let job = NewJob {
            id: hiregate_contracts::id::JobId::generate(),
            kind: "test".to_owned(),
            dedupe_key: None,
            payload: serde_json::json!({}),
            run_at: now,
        };
        store.enqueue_job(&job, now).await.unwrap();
        let Backend::Sqlite(sqlite) = &store.backend else {
            unreachable!("a SQLite store");
        };
        {
            // What a script leaves when its task is dropped after its first statements.
            let mut writing = sqlite.write().await.unwrap();
            sqlite
                .unfinished()
                .store(true, std::sync::atomic::Ordering::Release);
            sqlx::query("begin immediate")
                .execute(&mut *writing)
                .await
                .unwrap();
            sqlx::query("update job set attempts = 99")
                .execute(&mut *writing)
                .await
                .unwrap();
        }

        let claimed = store
            .claim_job("test", "owner", now, std::time::Duration::from_secs(60))
            .await
            .unwrap()
            .expect("the job is due");
        assert_eq!(claimed.id, job.id);
        // Read on another connection: only what committed.
        let readers = sqlite.readers().expect("a file has readers");
        let attempts: i64 = sqlx::query_scalar("select attempts from job")
            .fetch_one(readers)
            .await
            .unwrap();
        assert_eq!(
            attempts, 1,
            "the claim committed, the abandoned update did not"
        );
        store.close().await;
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
