//! `job`: background work claimed with leases.
//!
//! A queued job is free when it is due (`run_at <= now`) and has no live lease. Claiming sets
//! `lease_owner`/`lease_until` in one statement (`FOR UPDATE SKIP LOCKED` on PostgreSQL so
//! instances never wait on each other; SQLite serializes writers). A crashed instance's lease
//! simply runs out and another instance claims the job. Completing or rescheduling requires
//! still holding the lease, so a worker whose lease expired cannot overwrite the new owner's
//! outcome.

use std::time::Duration;

use super::json::{JsonText, diagnostic};
use chrono::{DateTime, Utc};

use super::{Store, StoreError, from_millis, from_millis_opt, on_writer, to_millis};
use hiregate_contracts::id::JobId;

const ENTITY: &str = "job";

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// Job id.
    pub id: JobId,
    /// What to do (`settle`, `poll_worker`, `deliver_webhook`, …).
    pub kind: String,
    /// At most one job with this key exists, ever (e.g. `settle:<contract id>`).
    pub dedupe_key: Option<String>,
    /// Job input.
    pub payload: serde_json::Value,
    /// Earliest run time.
    pub run_at: DateTime<Utc>,
}

/// Outcome of [`Store::enqueue_job`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// A new job was stored.
    Created,
    /// A job with the same dedupe key already exists; nothing was stored.
    AlreadyExists,
}

/// A claimed job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Job id.
    pub id: JobId,
    /// What to do.
    pub kind: String,
    /// Dedupe key.
    pub dedupe_key: Option<String>,
    /// Job input.
    pub payload: serde_json::Value,
    /// When it became due.
    pub run_at: DateTime<Utc>,
    /// Claims so far, this one included.
    pub attempts: u32,
    /// Who holds the lease.
    pub lease_owner: Option<String>,
    /// Until when.
    pub lease_until: Option<DateTime<Utc>>,
    /// Error of the previous attempt.
    pub last_error: Option<String>,
}

#[derive(sqlx::FromRow)]
struct JobRow {
    job_id: String,
    kind: String,
    dedupe_key: Option<String>,
    payload: JsonText<serde_json::Value>,
    run_at: i64,
    attempts: i32,
    lease_owner: Option<String>,
    lease_until: Option<i64>,
    last_error: Option<String>,
}

impl TryFrom<JobRow> for JobRecord {
    type Error = StoreError;

    fn try_from(row: JobRow) -> Result<Self, Self::Error> {
        Ok(Self {
            id: row
                .job_id
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            kind: row.kind,
            dedupe_key: row.dedupe_key,
            payload: row.payload.0,
            run_at: from_millis(ENTITY, row.run_at)?,
            attempts: u32::try_from(row.attempts).map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            lease_owner: row.lease_owner,
            lease_until: from_millis_opt(ENTITY, row.lease_until)?,
            last_error: row.last_error,
        })
    }
}

const CLAIM_SQLITE: &str = "update job set lease_owner = $2, lease_until = $3, \
    attempts = attempts + 1, updated_at = $4 \
    where job_id = (select job_id from job where state = 'queued' and kind = $1 \
        and run_at <= $4 and (lease_until is null or lease_until <= $4) \
        order by run_at limit 1) \
    returning job_id, kind, dedupe_key, payload, run_at, attempts, lease_owner, lease_until, last_error";
const CLAIM_POSTGRES: &str = "update job set lease_owner = $2, lease_until = $3, \
    attempts = attempts + 1, updated_at = $4 \
    where job_id = (select job_id from job where state = 'queued' and kind = $1 \
        and run_at <= $4 and (lease_until is null or lease_until <= $4) \
        order by run_at limit 1 for update skip locked) \
    returning job_id, kind, dedupe_key, payload, run_at, attempts, lease_owner, lease_until, last_error";

impl Store {
    /// Store a job unless one with the same dedupe key exists.
    pub async fn enqueue_job(
        &self,
        job: &NewJob,
        now: DateTime<Utc>,
    ) -> Result<Enqueued, StoreError> {
        const SQL: &str = "insert into job (job_id, kind, dedupe_key, payload, state, run_at, \
            attempts, created_at, updated_at) values ($1, $2, $3, $4, 'queued', $5, 0, $6, $6)";
        let result = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(job.id.as_str())
                .bind(&job.kind)
                .bind(job.dedupe_key.as_deref())
                .bind(JsonText(&job.payload))
                .bind(to_millis(job.run_at))
                .bind(to_millis(now))
                .execute(conn)
                .await
                .map(|_| ())
                .map_err(StoreError::unique_as_duplicate(ENTITY))
        });
        match result {
            Ok(_) => Ok(Enqueued::Created),
            Err(StoreError::Duplicate { .. }) => Ok(Enqueued::AlreadyExists),
            Err(other) => Err(other),
        }
    }

    /// Lease the oldest due, free job of `kind` to `owner` for `lease_for`.
    pub async fn claim_job(
        &self,
        kind: &str,
        owner: &str,
        now: DateTime<Utc>,
        lease_for: Duration,
    ) -> Result<Option<JobRecord>, StoreError> {
        let lease_until =
            now + chrono::Duration::from_std(lease_for).unwrap_or(chrono::Duration::MAX);
        let claim = match self.backend {
            super::Backend::Sqlite(_) => CLAIM_SQLITE,
            super::Backend::Postgres(_) => CLAIM_POSTGRES,
        };
        let row: Option<JobRow> = on_writer!(self, conn => {
            sqlx::query_as(claim)
                .bind(kind)
                .bind(owner)
                .bind(to_millis(lease_until))
                .bind(to_millis(now))
                .fetch_optional(conn)
                .await?
        });
        row.map(JobRecord::try_from).transpose()
    }

    /// Mark a job done, if `owner` still holds its lease.
    pub async fn complete_job(
        &self,
        id: &JobId,
        owner: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update job set state = 'done', lease_owner = null, lease_until = null, \
            updated_at = $3 where job_id = $1 and lease_owner = $2 and state = 'queued'";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(id.as_str())
                .bind(owner)
                .bind(to_millis(now))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }

    /// Release a job for another try at `run_at`, if `owner` still holds its lease.
    pub async fn reschedule_job(
        &self,
        id: &JobId,
        owner: &str,
        now: DateTime<Utc>,
        run_at: DateTime<Utc>,
        error: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update job set run_at = $4, last_error = $5, lease_owner = null, \
            lease_until = null, updated_at = $3 \
            where job_id = $1 and lease_owner = $2 and state = 'queued'";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(id.as_str())
                .bind(owner)
                .bind(to_millis(now))
                .bind(to_millis(run_at))
                .bind(diagnostic(error))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }

    /// Give up on a job (kept as `dead` for inspection), if `owner` still holds its lease.
    pub async fn bury_job(
        &self,
        id: &JobId,
        owner: &str,
        now: DateTime<Utc>,
        error: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update job set state = 'dead', last_error = $4, lease_owner = null, \
            lease_until = null, updated_at = $3 \
            where job_id = $1 and lease_owner = $2 and state = 'queued'";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(id.as_str())
                .bind(owner)
                .bind(to_millis(now))
                .bind(diagnostic(error))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }
}
