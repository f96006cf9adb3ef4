//! `worker` and `worker_task`: listings, discovery, health bookkeeping.

use std::{
    collections::{BTreeMap, HashMap},
    sync::LazyLock,
};

use super::json::{JsonText, diagnostic};
use chrono::{DateTime, Utc};
use sqlx::FromRow as _;

use super::{
    Store, StoreError, from_millis, from_millis_opt, on_backend, on_writer, placeholders, to_millis,
};
use crate::{
    keys::CallbackSecret,
    listing::{
        metadata::{InputSchema, ListingMetadata},
        model::{
            AtomicAmount, FeePolicy, HealthState, MaxParallel, OutputSchema, PaymentSchemes,
            TaskCatalog, TaskOffer, TaskType, WorkerListing,
        },
    },
};
use hiregate_contracts::id::{PrincipalId, WorkerId};

const ENTITY: &str = "worker";

/// Probes kept per listing in `worker_probe` (the operator's health history).
pub const PROBE_HISTORY_KEPT: i64 = 50;

const WORKER_COLUMNS: &str = "worker_id, operator_id, endpoint, protocol, pay_to, network, \
    asset, max_parallel, health, consecutive_misses, last_probe_at, last_probe_error, \
    created_at, updated_at, retired_at, protocol_options, payment_schemes, fee_bps, name, \
    description, input_schema, examples, probe_diagnostics, payment_flow";

/// Discovery and listing filters. `None` means "don't filter on this".
#[derive(Debug, Clone, Default)]
pub struct WorkerQuery {
    /// Only workers offering this task type.
    pub task_type: Option<TaskType>,
    /// Only workers charging at most this (for `task_type` if set, else for any task type).
    pub max_price: Option<AtomicAmount>,
    /// Only workers in this health state.
    pub health: Option<HealthState>,
    /// Only this operator's workers.
    pub operator_id: Option<PrincipalId>,
    /// Also return retired listings.
    pub include_retired: bool,
    /// Keyset pagination: only ids greater than this.
    pub after: Option<WorkerId>,
    /// Page size (callers bound it).
    pub limit: u32,
}

/// Outcome of one health probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeResult {
    /// `/health` and `/capabilities` answered as required.
    Passed,
    /// Either failed; `reason` is kept on the listing for the operator.
    Failed {
        /// Short, secret-free description.
        reason: String,
    },
}

#[derive(sqlx::FromRow)]
struct WorkerRow {
    worker_id: String,
    operator_id: String,
    endpoint: String,
    protocol: String,
    pay_to: String,
    network: String,
    asset: String,
    max_parallel: i32,
    health: String,
    consecutive_misses: i32,
    last_probe_at: Option<i64>,
    last_probe_error: Option<String>,
    created_at: i64,
    updated_at: i64,
    retired_at: Option<i64>,
    protocol_options: JsonText<serde_json::Value>,
    payment_schemes: String,
    fee_bps: Option<i32>,
    name: Option<String>,
    description: Option<String>,
    input_schema: Option<JsonText<serde_json::Value>>,
    examples: Option<JsonText<Vec<serde_json::Value>>>,
    probe_diagnostics: Option<JsonText<serde_json::Value>>,
    payment_flow: String,
}

#[derive(sqlx::FromRow)]
struct TaskRow {
    worker_id: String,
    task_type: String,
    price: String,
    output_schema: JsonText<serde_json::Value>,
    metering: Option<JsonText<serde_json::Value>>,
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::corrupt(ENTITY, &e)
}

fn assemble(row: WorkerRow, tasks: Vec<TaskRow>) -> Result<WorkerListing, StoreError> {
    let mut offers = BTreeMap::new();
    for task in tasks {
        let task_type: TaskType = task.task_type.parse().map_err(corrupt)?;
        let offer = TaskOffer {
            price: task.price.parse().map_err(corrupt)?,
            output_schema: OutputSchema::from_stored(task.output_schema.0),
            metering: task
                .metering
                .map(|metering| serde_json::from_value(metering.0))
                .transpose()
                .map_err(corrupt)?,
        };
        offers.insert(task_type, offer);
    }
    Ok(WorkerListing {
        id: row.worker_id.parse().map_err(corrupt)?,
        operator_id: row.operator_id.parse().map_err(corrupt)?,
        endpoint: row.endpoint.parse().map_err(corrupt)?,
        protocol: row.protocol.parse().map_err(corrupt)?,
        pay_to: row.pay_to.parse().map_err(corrupt)?,
        network: row.network.parse().map_err(corrupt)?,
        asset: row.asset.parse().map_err(corrupt)?,
        tasks: TaskCatalog::new(offers).map_err(corrupt)?,
        max_parallel: MaxParallel::try_from(u32::try_from(row.max_parallel).map_err(corrupt)?)
            .map_err(corrupt)?,
        health: row.health.parse().map_err(corrupt)?,
        consecutive_misses: u32::try_from(row.consecutive_misses).map_err(corrupt)?,
        last_probe_at: from_millis_opt(ENTITY, row.last_probe_at)?,
        last_probe_error: row.last_probe_error,
        created_at: from_millis(ENTITY, row.created_at)?,
        updated_at: from_millis(ENTITY, row.updated_at)?,
        retired_at: from_millis_opt(ENTITY, row.retired_at)?,
        protocol_options: serde_json::from_value(row.protocol_options.0).map_err(corrupt)?,
        payment_schemes: PaymentSchemes::from_stored(&row.payment_schemes).map_err(corrupt)?,
        payment_flow: row.payment_flow.parse().map_err(corrupt)?,
        fee_policy: row
            .fee_bps
            .map(|bps| u16::try_from(bps).map(|fee_bps| FeePolicy { fee_bps }))
            .transpose()
            .map_err(corrupt)?,
        metadata: ListingMetadata {
            name: row.name,
            description: row.description,
            input_schema: row
                .input_schema
                .map(|schema| InputSchema::from_stored(schema.0)),
            examples: row.examples.map(|e| e.0).unwrap_or_default(),
        },
        probe_diagnostics: row.probe_diagnostics.map(|d| d.0),
    })
}

/// `null` rather than `[]` when there are none, so listings without examples look like the
/// ones stored before the column existed.
fn examples_column(metadata: &ListingMetadata) -> Option<JsonText<&Vec<serde_json::Value>>> {
    (!metadata.examples.is_empty()).then_some(JsonText(&metadata.examples))
}

fn to_i32(value: u32) -> i32 {
    // MaxParallel and miss counts are far below i32::MAX; saturate rather than wrap.
    i32::try_from(value).unwrap_or(i32::MAX)
}

const INSERT_WORKER_TASK: &str = "insert into worker_task \
    (worker_id, task_type, price, price_key, output_schema, metering) \
    values ($1, $2, $3, $4, $5, $6)";

/// Inside an `on_backend!` arm: insert one `worker_task` row per offer of `$listing` (a macro
/// because the transaction's type differs per backend).
macro_rules! insert_worker_tasks {
    ($tx:ident, $listing:expr) => {
        for (task_type, offer) in $listing.tasks.offers() {
            sqlx::query(INSERT_WORKER_TASK)
                .bind($listing.id.as_str())
                .bind(task_type.as_str())
                .bind(offer.price.to_string())
                .bind(offer.price.sort_key())
                .bind(JsonText(offer.output_schema.as_json()))
                .bind(offer.metering.as_ref().map(JsonText))
                .execute(&mut *$tx)
                .await?;
        }
    };
}

impl Store {
    /// Store a new listing with its task catalog and callback secret (one transaction).
    pub async fn insert_worker(
        &self,
        listing: &WorkerListing,
        callback_secret: &CallbackSecret,
        next_probe_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const SQL: &str = "insert into worker (worker_id, operator_id, endpoint, protocol, \
            pay_to, network, asset, max_parallel, health, consecutive_misses, last_probe_at, \
            last_probe_error, next_probe_at, callback_secret, created_at, updated_at, retired_at, \
            protocol_options, payment_schemes, fee_bps, name, description, input_schema, examples, \
            probe_diagnostics, payment_flow) \
            values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
            $19, $20, $21, $22, $23, $24, $25, $26)";
        on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            sqlx::query(SQL)
                .bind(listing.id.as_str())
                .bind(listing.operator_id.as_str())
                .bind(listing.endpoint.to_string())
                .bind(listing.protocol.as_str())
                .bind(listing.pay_to.to_string())
                .bind(listing.network.to_string())
                .bind(listing.asset.to_string())
                .bind(to_i32(listing.max_parallel.get()))
                .bind(listing.health.as_str())
                .bind(to_i32(listing.consecutive_misses))
                .bind(listing.last_probe_at.map(to_millis))
                .bind(listing.last_probe_error.as_deref().map(diagnostic))
                .bind(to_millis(next_probe_at))
                .bind(callback_secret.reveal())
                .bind(to_millis(listing.created_at))
                .bind(to_millis(listing.updated_at))
                .bind(listing.retired_at.map(to_millis))
                .bind(JsonText(&listing.protocol_options))
                .bind(listing.payment_schemes.to_stored())
                .bind(listing.fee_policy.map(|fee| i32::from(fee.fee_bps)))
                .bind(listing.metadata.name.as_deref())
                .bind(listing.metadata.description.as_deref())
                .bind(listing.metadata.input_schema.as_ref().map(|s| JsonText(s.as_json())))
                .bind(examples_column(&listing.metadata))
                .bind(listing.probe_diagnostics.as_ref().map(JsonText))
                .bind(listing.payment_flow.as_str())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::unique_as_duplicate(ENTITY))?;
            insert_worker_tasks!(tx, listing);
            tx.commit().await?;
        });
        Ok(())
    }

    /// One listing, retired or not.
    ///
    /// One statement: the listing's row joined to each task it offers, the listing's columns
    /// decoded from the first. A paid hire reads its listing twice (proposing, forwarding), and
    /// on SQLite each statement is a hand-over to the connection's thread and back. A listing
    /// with no task (which the store never writes) takes the two-statement path, which tells
    /// it from a missing one.
    pub async fn get_worker(&self, id: &WorkerId) -> Result<Option<WorkerListing>, StoreError> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "select {WORKER_COLUMNS}, task_type, price, output_schema, metering \
                 from worker join worker_task using (worker_id) \
                 where worker_id = $1 order by task_type"
            )
        });
        let joined = on_backend!(self, conn => {
            let rows = sqlx::query(&SQL).bind(id.as_str()).fetch_all(conn).await?;
            match rows.first() {
                Some(first) => Some((
                    WorkerRow::from_row(first)?,
                    rows.iter().map(TaskRow::from_row).collect::<Result<Vec<_>, _>>()?,
                )),
                None => None,
            }
        });
        match joined {
            Some((row, tasks)) => assemble(row, tasks).map(Some),
            None => Ok(self
                .load_workers(std::slice::from_ref(id))
                .await?
                .into_iter()
                .next()),
        }
    }

    /// Listings matching `query`, ordered by id (creation order), at most `query.limit`.
    pub async fn list_workers(
        &self,
        query: &WorkerQuery,
    ) -> Result<Vec<WorkerListing>, StoreError> {
        let sql = format!(
            "select {WORKER_COLUMNS} from worker w \
             where ($1 or w.retired_at is null) \
               and ($2 is null or w.health = $2) \
               and ($3 is null or w.operator_id = $3) \
               and ($4 is null or w.worker_id > $4) \
               and ($5 is null or exists (select 1 from worker_task t \
                    where t.worker_id = w.worker_id and t.task_type = $5 \
                      and ($6 is null or t.price_key <= $6))) \
               and ($5 is not null or $6 is null or exists (select 1 from worker_task t \
                    where t.worker_id = w.worker_id and t.price_key <= $6)) \
             order by w.worker_id limit $7"
        );
        let rows: Vec<WorkerRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(query.include_retired)
                .bind(query.health.map(HealthState::as_str))
                .bind(query.operator_id.as_ref().map(PrincipalId::as_str))
                .bind(query.after.as_ref().map(WorkerId::as_str))
                .bind(query.task_type.as_ref().map(TaskType::as_str))
                .bind(query.max_price.map(AtomicAmount::sort_key))
                .bind(i64::from(query.limit))
                .fetch_all(conn)
                .await?
        });
        self.with_tasks(rows).await
    }

    /// Replace a live listing's mutable fields and task catalog, if it still has the
    /// `expected_updated_at` it was read with (optimistic concurrency). Returns whether it was
    /// written; `false` means it changed or was retired meanwhile.
    pub async fn update_worker(
        &self,
        listing: &WorkerListing,
        expected_updated_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update worker set endpoint = $2, pay_to = $3, network = $4, \
            asset = $5, max_parallel = $6, health = $7, consecutive_misses = $8, \
            last_probe_at = $9, last_probe_error = $10, updated_at = $11, \
            payment_schemes = $13, fee_bps = $14, name = $15, description = $16, \
            input_schema = $17, examples = $18, probe_diagnostics = $19, protocol_options = $20, \
            payment_flow = $21 \
            where worker_id = $1 and updated_at = $12 and retired_at is null";
        let written = on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let updated = sqlx::query(SQL)
                .bind(listing.id.as_str())
                .bind(listing.endpoint.to_string())
                .bind(listing.pay_to.to_string())
                .bind(listing.network.to_string())
                .bind(listing.asset.to_string())
                .bind(to_i32(listing.max_parallel.get()))
                .bind(listing.health.as_str())
                .bind(to_i32(listing.consecutive_misses))
                .bind(listing.last_probe_at.map(to_millis))
                .bind(listing.last_probe_error.as_deref().map(diagnostic))
                .bind(to_millis(listing.updated_at))
                .bind(to_millis(expected_updated_at))
                .bind(listing.payment_schemes.to_stored())
                .bind(listing.fee_policy.map(|fee| i32::from(fee.fee_bps)))
                .bind(listing.metadata.name.as_deref())
                .bind(listing.metadata.description.as_deref())
                .bind(listing.metadata.input_schema.as_ref().map(|s| JsonText(s.as_json())))
                .bind(examples_column(&listing.metadata))
                .bind(listing.probe_diagnostics.as_ref().map(JsonText))
                .bind(JsonText(&listing.protocol_options))
                .bind(listing.payment_flow.as_str())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if updated == 1 {
                sqlx::query("delete from worker_task where worker_id = $1")
                    .bind(listing.id.as_str())
                    .execute(&mut *tx)
                    .await?;
                insert_worker_tasks!(tx, listing);
                tx.commit().await?;
            }
            updated == 1
        });
        Ok(written)
    }

    /// Retire `operator_id`'s listing (idempotent: an already retired listing keeps its first
    /// retirement time). `None` if no such listing belongs to that operator.
    pub async fn retire_worker(
        &self,
        id: &WorkerId,
        operator_id: &PrincipalId,
        at: DateTime<Utc>,
    ) -> Result<Option<WorkerListing>, StoreError> {
        const SQL: &str = "update worker set retired_at = coalesce(retired_at, $3), \
            updated_at = case when retired_at is null then $3 else updated_at end \
            where worker_id = $1 and operator_id = $2";
        let updated = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(id.as_str())
                .bind(operator_id.as_str())
                .bind(to_millis(at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        if updated == 0 {
            return Ok(None);
        }
        self.get_worker(id).await
    }

    /// Every (network, asset) a listing names or named (retired listings included), without
    /// repeats: the tokens the gateway's answers may mention.
    pub async fn listing_assets(&self) -> Result<Vec<(String, String)>, StoreError> {
        const SQL: &str = "select distinct network, asset from worker order by network, asset";
        Ok(on_backend!(self, conn => {
            sqlx::query_as(SQL).fetch_all(conn).await?
        }))
    }

    /// The secret the worker signs callbacks with.
    pub async fn worker_callback_secret(
        &self,
        id: &WorkerId,
    ) -> Result<Option<CallbackSecret>, StoreError> {
        const SQL: &str = "select callback_secret from worker where worker_id = $1";
        let secret: Option<String> = on_backend!(self, conn => {
            sqlx::query_scalar(SQL).bind(id.as_str()).fetch_optional(conn).await?
        });
        Ok(secret.map(CallbackSecret::from_stored))
    }

    /// Claim up to `limit` live listings whose probe is due at `now`, pushing their next probe
    /// to `next_probe_at` in the same statement. Several gateway instances can call this
    /// concurrently: each due listing goes to exactly one of them (PostgreSQL skips rows
    /// another instance has locked; SQLite serializes the writes).
    pub async fn claim_workers_due_for_probe(
        &self,
        now: DateTime<Utc>,
        next_probe_at: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<WorkerListing>, StoreError> {
        const SQLITE: &str = "update worker set next_probe_at = $2 where worker_id in \
            (select worker_id from worker where retired_at is null and next_probe_at <= $1 \
             order by next_probe_at limit $3) returning worker_id";
        const POSTGRES: &str = "update worker set next_probe_at = $2 where worker_id in \
            (select worker_id from worker where retired_at is null and next_probe_at <= $1 \
             order by next_probe_at limit $3 for update skip locked) returning worker_id";
        let claim = match self.backend {
            super::Backend::Sqlite(_) => SQLITE,
            super::Backend::Postgres(_) => POSTGRES,
        };
        let ids: Vec<String> = on_writer!(self, conn => {
            sqlx::query_scalar(claim)
                .bind(to_millis(now))
                .bind(to_millis(next_probe_at))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        let ids = ids
            .into_iter()
            .map(|id| id.parse().map_err(corrupt))
            .collect::<Result<Vec<WorkerId>, _>>()?;
        self.load_workers(&ids).await
    }

    /// Record a probe on a live listing. A pass heals at once; a miss increments the counter and
    /// turns the worker unhealthy when it reaches `miss_threshold`. Returns the new health and
    /// miss count, or `None` if the listing is gone or retired.
    pub async fn record_probe(
        &self,
        id: &WorkerId,
        result: &ProbeResult,
        miss_threshold: u32,
        at: DateTime<Utc>,
    ) -> Result<Option<(HealthState, u32)>, StoreError> {
        // Both dialects evaluate every SET expression against the row as it was before the
        // update, so `consecutive_misses + 1` is the new count in both places.
        const PASSED: &str = "update worker set consecutive_misses = 0, health = 'healthy', \
            last_probe_at = $2, last_probe_error = null \
            where worker_id = $1 and retired_at is null \
            returning health, consecutive_misses";
        const FAILED: &str = "update worker set consecutive_misses = consecutive_misses + 1, \
            health = case when consecutive_misses + 1 >= $3 then 'unhealthy' else health end, \
            last_probe_at = $2, last_probe_error = $4 \
            where worker_id = $1 and retired_at is null \
            returning health, consecutive_misses";
        // The probe joins the listing's history in the same transaction; only the newest
        // PROBE_HISTORY_KEPT rows stay.
        const HISTORY: &str = "insert into worker_probe (worker_id, at, passed, health, error) \
            values ($1, $2, $3, $4, $5)";
        const PRUNE: &str = "delete from worker_probe where worker_id = $1 and probe_id <= \
            (select probe_id from worker_probe where worker_id = $1 \
             order by probe_id desc limit 1 offset $2)";
        let row: Option<(String, i32)> = on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let row: Option<(String, i32)> = match result {
                ProbeResult::Passed => sqlx::query_as(PASSED)
                    .bind(id.as_str())
                    .bind(to_millis(at))
                    .fetch_optional(&mut *tx)
                    .await?,
                ProbeResult::Failed { reason } => sqlx::query_as(FAILED)
                    .bind(id.as_str())
                    .bind(to_millis(at))
                    .bind(to_i32(miss_threshold))
                    .bind(diagnostic(reason))
                    .fetch_optional(&mut *tx)
                    .await?,
            };
            if let Some((health, _)) = &row {
                let error = match result {
                    ProbeResult::Passed => None,
                    ProbeResult::Failed { reason } => Some(diagnostic(reason)),
                };
                sqlx::query(HISTORY)
                    .bind(id.as_str())
                    .bind(to_millis(at))
                    .bind(matches!(result, ProbeResult::Passed))
                    .bind(health.as_str())
                    .bind(error)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(PRUNE)
                    .bind(id.as_str())
                    .bind(PROBE_HISTORY_KEPT)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            row
        });
        row.map(|(health, misses)| {
            Ok((
                health.parse().map_err(corrupt)?,
                u32::try_from(misses).map_err(corrupt)?,
            ))
        })
        .transpose()
    }

    async fn load_workers(&self, ids: &[WorkerId]) -> Result<Vec<WorkerListing>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "select {WORKER_COLUMNS} from worker where worker_id in ({}) order by worker_id",
            placeholders(1, ids.len())
        );
        let rows: Vec<WorkerRow> = on_backend!(self, conn => {
            let mut query = sqlx::query_as(&sql);
            for id in ids {
                query = query.bind(id.as_str());
            }
            query.fetch_all(conn).await?
        });
        self.with_tasks(rows).await
    }

    async fn with_tasks(&self, rows: Vec<WorkerRow>) -> Result<Vec<WorkerListing>, StoreError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "select worker_id, task_type, price, output_schema, metering from worker_task \
             where worker_id in ({}) order by worker_id, task_type",
            placeholders(1, rows.len())
        );
        let task_rows: Vec<TaskRow> = on_backend!(self, conn => {
            let mut query = sqlx::query_as(&sql);
            for row in &rows {
                query = query.bind(row.worker_id.as_str());
            }
            query.fetch_all(conn).await?
        });
        let mut tasks_by_worker: HashMap<String, Vec<TaskRow>> = HashMap::new();
        for task in task_rows {
            tasks_by_worker
                .entry(task.worker_id.clone())
                .or_default()
                .push(task);
        }
        rows.into_iter()
            .map(|row| {
                let tasks = tasks_by_worker.remove(&row.worker_id).unwrap_or_default();
                assemble(row, tasks)
            })
            .collect()
    }
}
