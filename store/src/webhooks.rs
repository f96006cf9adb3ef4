//! Seeker webhooks: signing secrets, endpoints disabled by a 410, the delivery outbox and its
//! attempt log.
//!
//! Deliveries are created by the `contract_event_webhook_outbox` trigger (migration 0003) in
//! the transaction that appends the event, so nothing here enqueues. Claiming works like
//! `job`: a lease set in one statement (`FOR UPDATE SKIP LOCKED` on PostgreSQL), and every
//! outcome is written only by the lease holder, so an instance whose lease ran out cannot
//! overwrite what the new holder decided.

use std::time::Duration;

use super::json::{JsonText, diagnostic};
use chrono::{DateTime, Utc};
use hiregate_contracts::{
    id::{ContractId, PrincipalId},
    state::ContractState,
};

use super::{
    Backend, Store, StoreError, from_millis, from_millis_opt, on_backend, on_writer, parse_id,
    placeholders,
    states::{Actor, DeliveryState, EventKind},
    to_millis,
};

const ENTITY: &str = "webhook_delivery";

/// A seeker's stored signing secret.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecretRecord {
    /// The seeker.
    pub seeker_id: PrincipalId,
    /// `whsec_<base64>`.
    pub secret: String,
    /// When it was created (rotation time).
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for WebhookSecretRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSecretRecord")
            .field("seeker_id", &self.seeker_id)
            .field("secret", &"[redacted]")
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// A delivery leased to this instance, with the event it announces.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedDelivery {
    /// The event (and delivery) id.
    pub event_id: i64,
    /// Contract.
    pub contract_id: ContractId,
    /// Owner of the webhook.
    pub seeker_id: PrincipalId,
    /// Target URL (from the contract terms).
    pub url: String,
    /// Try number in the current round, this one included.
    pub attempts: u32,
    /// Tries ever, this one included.
    pub total_attempts: u32,
    /// The endpoint answered 410 earlier: send nothing.
    pub endpoint_disabled: bool,
    /// Event seq.
    pub seq: i64,
    /// Event time.
    pub at: DateTime<Utc>,
    /// Who caused the event.
    pub actor: Actor,
    /// What happened.
    pub kind: EventKind,
    /// State before.
    pub from_state: Option<ContractState>,
    /// State after.
    pub to_state: Option<ContractState>,
    /// Event details.
    pub details: serde_json::Value,
    /// The hire's correlation id, as the event recorded it.
    pub correlation_id: String,
}

/// How a try ended, as the lease holder records it.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryFinish {
    /// 2xx: done.
    Delivered,
    /// Try again at the given time.
    Retry {
        /// Next try.
        at: DateTime<Utc>,
    },
    /// Give up: a dead letter (listed, redeliverable).
    Dead,
    /// 410 Gone: disable the endpoint and park the delivery as a dead letter.
    EndpointGone,
}

/// One HTTP try, for the attempt log.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryAttemptRecord {
    /// Tries ever, this one included.
    pub attempt_no: u32,
    /// When the try started.
    pub at: DateTime<Utc>,
    /// Response status, if any response came.
    pub http_status: Option<u16>,
    /// Transport error or a short reason.
    pub error: Option<String>,
    /// Time to the response (or the failure), ms.
    pub duration_ms: u64,
}

/// A delivery with its attempt log.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    /// The event (and delivery) id.
    pub event_id: i64,
    /// Contract.
    pub contract_id: ContractId,
    /// Owner.
    pub seeker_id: PrincipalId,
    /// Target URL.
    pub url: String,
    /// Event seq.
    pub seq: i64,
    /// What happened.
    pub kind: EventKind,
    /// Where the delivery is.
    pub state: DeliveryState,
    /// Tries in the current round.
    pub attempts: u32,
    /// Tries ever.
    pub total_attempts: u32,
    /// Next try, while pending.
    pub next_attempt_at: DateTime<Utc>,
    /// Status of the last response.
    pub last_status: Option<u16>,
    /// Last failure.
    pub last_error: Option<String>,
    /// When it became delivered or dead.
    pub finished_at: Option<DateTime<Utc>>,
    /// When it was enqueued (the event time).
    pub created_at: DateTime<Utc>,
    /// The endpoint is disabled (410).
    pub endpoint_disabled: bool,
    /// Tries, oldest first (filled by [`Store::list_webhook_deliveries`]).
    pub attempt_log: Vec<DeliveryAttemptRecord>,
}

/// Outcome of [`Store::redeliver_webhook`].
#[derive(Debug, Clone, PartialEq)]
pub enum Redelivery {
    /// Queued again (and its endpoint re-enabled): the delivery as requeued, read in the same
    /// transaction, so a dispatcher that claims it right after the commit cannot show through.
    Requeued(Box<DeliveryRecord>),
    /// Not a dead letter: `pending` or `delivered`.
    NotDead {
        /// Its state.
        state: DeliveryState,
    },
    /// No such delivery for this seeker.
    NotFound,
}

#[derive(sqlx::FromRow)]
struct SecretRow {
    seeker_id: String,
    secret: String,
    created_at: i64,
}

#[derive(sqlx::FromRow)]
struct ClaimedRow {
    event_id: i64,
    contract_id: String,
    seeker_id: String,
    url: String,
    attempts: i32,
    total_attempts: i32,
    endpoint_disabled: i64,
    seq: i64,
    at: i64,
    actor: String,
    kind: String,
    from_state: Option<String>,
    to_state: Option<String>,
    details: JsonText<serde_json::Value>,
    correlation_id: String,
}

#[derive(sqlx::FromRow)]
struct DeliveryRow {
    event_id: i64,
    contract_id: String,
    seeker_id: String,
    url: String,
    seq: i64,
    kind: String,
    state: String,
    attempts: i32,
    total_attempts: i32,
    next_attempt_at: i64,
    last_status: Option<i32>,
    last_error: Option<String>,
    finished_at: Option<i64>,
    created_at: i64,
    endpoint_disabled: i64,
}

#[derive(sqlx::FromRow)]
struct AttemptRow {
    event_id: i64,
    attempt_no: i32,
    at: i64,
    http_status: Option<i32>,
    error: Option<String>,
    duration_ms: i64,
}

/// A delivered event's state column, parsed once; another spelling is corrupt.
fn parse_state(stored: &str) -> Result<ContractState, StoreError> {
    stored.parse().map_err(|e| StoreError::corrupt(ENTITY, &e))
}

fn count(value: i32) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|e| StoreError::corrupt(ENTITY, &e))
}

fn status(value: Option<i32>) -> Result<Option<u16>, StoreError> {
    value
        .map(|v| u16::try_from(v).map_err(|e| StoreError::corrupt(ENTITY, &e)))
        .transpose()
}

impl TryFrom<ClaimedRow> for ClaimedDelivery {
    type Error = StoreError;

    fn try_from(row: ClaimedRow) -> Result<Self, Self::Error> {
        Ok(Self {
            event_id: row.event_id,
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            seeker_id: parse_id(ENTITY, &row.seeker_id)?,
            url: row.url,
            attempts: count(row.attempts)?,
            total_attempts: count(row.total_attempts)?,
            endpoint_disabled: row.endpoint_disabled != 0,
            seq: row.seq,
            at: from_millis(ENTITY, row.at)?,
            actor: row
                .actor
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            kind: row
                .kind
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            from_state: row.from_state.as_deref().map(parse_state).transpose()?,
            to_state: row.to_state.as_deref().map(parse_state).transpose()?,
            details: row.details.0,
            correlation_id: row.correlation_id,
        })
    }
}

impl TryFrom<DeliveryRow> for DeliveryRecord {
    type Error = StoreError;

    fn try_from(row: DeliveryRow) -> Result<Self, Self::Error> {
        Ok(Self {
            event_id: row.event_id,
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            seeker_id: parse_id(ENTITY, &row.seeker_id)?,
            url: row.url,
            seq: row.seq,
            kind: row
                .kind
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            state: row
                .state
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            attempts: count(row.attempts)?,
            total_attempts: count(row.total_attempts)?,
            next_attempt_at: from_millis(ENTITY, row.next_attempt_at)?,
            last_status: status(row.last_status)?,
            last_error: row.last_error,
            finished_at: from_millis_opt(ENTITY, row.finished_at)?,
            created_at: from_millis(ENTITY, row.created_at)?,
            endpoint_disabled: row.endpoint_disabled != 0,
            attempt_log: Vec::new(),
        })
    }
}

impl TryFrom<AttemptRow> for DeliveryAttemptRecord {
    type Error = StoreError;

    fn try_from(row: AttemptRow) -> Result<Self, Self::Error> {
        Ok(Self {
            attempt_no: count(row.attempt_no)?,
            at: from_millis(ENTITY, row.at)?,
            http_status: status(row.http_status)?,
            error: row.error,
            duration_ms: u64::try_from(row.duration_ms)
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
        })
    }
}

/// `1` when the delivery's endpoint is disabled (`d` is the delivery alias).
const ENDPOINT_DISABLED: &str = "cast(case when exists (select 1 from webhook_endpoint w \
    where w.seeker_id = d.seeker_id and w.url = d.url) then 1 else 0 end as bigint) \
    as endpoint_disabled";

const CLAIM_SQLITE: &str = "update webhook_delivery set lease_owner = $1, lease_until = $2, \
    attempts = attempts + 1, total_attempts = total_attempts + 1, updated_at = $3 \
    where event_id in (select event_id from webhook_delivery where state = 'pending' \
        and next_attempt_at <= $3 and (lease_until is null or lease_until <= $3) \
        order by next_attempt_at limit $4) \
    returning event_id";
const CLAIM_POSTGRES: &str = "update webhook_delivery set lease_owner = $1, lease_until = $2, \
    attempts = attempts + 1, total_attempts = total_attempts + 1, updated_at = $3 \
    where event_id in (select event_id from webhook_delivery where state = 'pending' \
        and next_attempt_at <= $3 and (lease_until is null or lease_until <= $3) \
        order by next_attempt_at limit $4 for update skip locked) \
    returning event_id";

fn delivery_select() -> String {
    format!(
        "select d.event_id, d.contract_id, d.seeker_id, d.url, e.seq, e.kind, d.state, \
         d.attempts, d.total_attempts, d.next_attempt_at, d.last_status, d.last_error, \
         d.finished_at, d.created_at, {ENDPOINT_DISABLED} \
         from webhook_delivery d join contract_event e on e.event_id = d.event_id"
    )
}

impl Store {
    /// The seeker's secret; `candidate` (a fresh `whsec_…`) is stored first if it has none.
    pub async fn get_or_create_webhook_secret(
        &self,
        seeker_id: &PrincipalId,
        candidate: &str,
        now: DateTime<Utc>,
    ) -> Result<WebhookSecretRecord, StoreError> {
        const INSERT: &str = "insert into webhook_secret (seeker_id, secret, created_at) \
            values ($1, $2, $3) on conflict (seeker_id) do nothing";
        on_writer!(self, conn => {
            sqlx::query(INSERT)
                .bind(seeker_id.as_str())
                .bind(candidate)
                .bind(to_millis(now))
                .execute(conn)
                .await?;
        });
        self.webhook_secret(seeker_id)
            .await?
            .ok_or_else(|| StoreError::corrupt("webhook_secret", &"secret vanished after insert"))
    }

    /// Replace (or create) the seeker's secret.
    pub async fn rotate_webhook_secret(
        &self,
        seeker_id: &PrincipalId,
        secret: &str,
        now: DateTime<Utc>,
    ) -> Result<WebhookSecretRecord, StoreError> {
        const UPSERT: &str = "insert into webhook_secret (seeker_id, secret, created_at) \
            values ($1, $2, $3) on conflict (seeker_id) \
            do update set secret = excluded.secret, created_at = excluded.created_at";
        on_writer!(self, conn => {
            sqlx::query(UPSERT)
                .bind(seeker_id.as_str())
                .bind(secret)
                .bind(to_millis(now))
                .execute(conn)
                .await?;
        });
        Ok(WebhookSecretRecord {
            seeker_id: seeker_id.clone(),
            secret: secret.to_owned(),
            created_at: from_millis("webhook_secret", to_millis(now))?,
        })
    }

    /// The seeker's secret, if any.
    pub async fn webhook_secret(
        &self,
        seeker_id: &PrincipalId,
    ) -> Result<Option<WebhookSecretRecord>, StoreError> {
        const SQL: &str =
            "select seeker_id, secret, created_at from webhook_secret where seeker_id = $1";
        let row: Option<SecretRow> = on_backend!(self, conn => {
            sqlx::query_as(SQL).bind(seeker_id.as_str()).fetch_optional(conn).await?
        });
        row.map(|row| {
            Ok(WebhookSecretRecord {
                seeker_id: parse_id("webhook_secret", &row.seeker_id)?,
                secret: row.secret,
                created_at: from_millis("webhook_secret", row.created_at)?,
            })
        })
        .transpose()
    }

    /// Lease up to `limit` due deliveries to `owner` for `lease_for`, with their events.
    pub async fn claim_webhook_deliveries(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        lease_for: Duration,
        limit: u32,
    ) -> Result<Vec<ClaimedDelivery>, StoreError> {
        let lease_until =
            now + chrono::Duration::from_std(lease_for).unwrap_or(chrono::Duration::MAX);
        let claim = match self.backend {
            Backend::Sqlite(_) => CLAIM_SQLITE,
            Backend::Postgres(_) => CLAIM_POSTGRES,
        };
        let ids: Vec<i64> = on_writer!(self, conn => {
            sqlx::query_scalar(claim)
                .bind(owner)
                .bind(to_millis(lease_until))
                .bind(to_millis(now))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "select d.event_id, d.contract_id, d.seeker_id, d.url, d.attempts, d.total_attempts, \
             {ENDPOINT_DISABLED}, e.seq, e.at, e.actor, e.kind, e.from_state, e.to_state, \
             e.details, e.correlation_id \
             from webhook_delivery d join contract_event e on e.event_id = d.event_id \
             where d.lease_owner = $1 and d.event_id in ({}) order by d.event_id",
            placeholders(2, ids.len())
        );
        let rows: Vec<ClaimedRow> = on_backend!(self, conn => {
            let mut query = sqlx::query_as(&sql).bind(owner);
            for id in &ids {
                query = query.bind(*id);
            }
            query.fetch_all(conn).await?
        });
        rows.into_iter().map(ClaimedDelivery::try_from).collect()
    }

    /// Record a try and its outcome, if `owner` still holds the lease. `false` when the lease
    /// was lost (nothing written).
    pub async fn finish_webhook_attempt(
        &self,
        event_id: i64,
        owner: &str,
        finish: &DeliveryFinish,
        attempt: &DeliveryAttemptRecord,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const UPDATE: &str = "update webhook_delivery set state = $3, next_attempt_at = \
            coalesce($4, next_attempt_at), last_status = $5, last_error = $6, finished_at = $7, \
            lease_owner = null, lease_until = null, updated_at = $8 \
            where event_id = $1 and lease_owner = $2 and state = 'pending'";
        const LOG: &str = "insert into webhook_attempt (event_id, attempt_no, at, http_status, \
            error, duration_ms) values ($1, $2, $3, $4, $5, $6)";
        const DISABLE: &str = "insert into webhook_endpoint (seeker_id, url, disabled_at, \
            disabled_status) select seeker_id, url, $2, $3 from webhook_delivery \
            where event_id = $1 on conflict (seeker_id, url) do nothing";
        let (state, next_at, finished_at) = match finish {
            DeliveryFinish::Delivered => ("delivered", None, Some(to_millis(now))),
            DeliveryFinish::Retry { at } => ("pending", Some(to_millis(*at)), None),
            DeliveryFinish::Dead | DeliveryFinish::EndpointGone => {
                ("dead", None, Some(to_millis(now)))
            }
        };
        let http_status = attempt.http_status.map(i32::from);
        let duration_ms = i64::try_from(attempt.duration_ms).unwrap_or(i64::MAX);
        let attempt_no = i32::try_from(attempt.attempt_no).unwrap_or(i32::MAX);
        on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let changed = sqlx::query(UPDATE)
                .bind(event_id)
                .bind(owner)
                .bind(state)
                .bind(next_at)
                .bind(http_status)
                .bind(attempt.error.as_deref().map(diagnostic))
                .bind(finished_at)
                .bind(to_millis(now))
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if changed == 0 {
                return Ok(false);
            }
            sqlx::query(LOG)
                .bind(event_id)
                .bind(attempt_no)
                .bind(to_millis(attempt.at))
                .bind(http_status)
                .bind(attempt.error.as_deref().map(diagnostic))
                .bind(duration_ms)
                .execute(&mut *tx)
                .await?;
            if *finish == DeliveryFinish::EndpointGone {
                sqlx::query(DISABLE)
                    .bind(event_id)
                    .bind(to_millis(now))
                    .bind(http_status.unwrap_or(410))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(true)
    }

    /// Park a delivery whose endpoint is disabled without sending (no attempt is logged), if
    /// `owner` still holds the lease.
    pub async fn skip_webhook_delivery(
        &self,
        event_id: i64,
        owner: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update webhook_delivery set state = 'dead', last_error = $3, \
            finished_at = $4, attempts = attempts - 1, total_attempts = total_attempts - 1, \
            lease_owner = null, lease_until = null, updated_at = $4 \
            where event_id = $1 and lease_owner = $2 and state = 'pending'";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(event_id)
                .bind(owner)
                .bind(diagnostic(reason))
                .bind(to_millis(now))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }

    /// The seeker's dead letters with `event_id > after`, oldest first, at most `limit`.
    pub async fn list_webhook_dead_letters(
        &self,
        seeker_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let sql = format!(
            "{} where d.seeker_id = $1 and d.state = 'dead' and d.event_id > $2 \
             order by d.event_id limit $3",
            delivery_select()
        );
        let rows: Vec<DeliveryRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(seeker_id)
                .bind(after)
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(DeliveryRecord::try_from).collect()
    }

    /// One delivery of the seeker's, without its attempt log.
    pub async fn get_webhook_delivery(
        &self,
        seeker_id: &str,
        event_id: i64,
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        let sql = format!(
            "{} where d.seeker_id = $1 and d.event_id = $2",
            delivery_select()
        );
        let row: Option<DeliveryRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(seeker_id)
                .bind(event_id)
                .fetch_optional(conn)
                .await?
        });
        row.map(DeliveryRecord::try_from).transpose()
    }

    /// Queue a dead letter of the seeker's again (a fresh round of tries, due now) and
    /// re-enable its endpoint: the seeker asking for it is the sign the endpoint is back.
    pub async fn redeliver_webhook(
        &self,
        seeker_id: &str,
        event_id: i64,
        now: DateTime<Utc>,
    ) -> Result<Redelivery, StoreError> {
        const REQUEUE: &str = "update webhook_delivery set state = 'pending', attempts = 0, \
            next_attempt_at = $3, finished_at = null, lease_owner = null, lease_until = null, \
            updated_at = $3 where event_id = $1 and seeker_id = $2 and state = 'dead'";
        const ENABLE: &str = "delete from webhook_endpoint where seeker_id = $1 and url = \
            (select url from webhook_delivery where event_id = $2)";
        const STATE: &str =
            "select state from webhook_delivery where event_id = $1 and seeker_id = $2";
        let read = format!(
            "{} where d.seeker_id = $1 and d.event_id = $2",
            delivery_select()
        );
        on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let changed = sqlx::query(REQUEUE)
                .bind(event_id)
                .bind(seeker_id)
                .bind(to_millis(now))
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if changed == 0 {
                let state: Option<String> = sqlx::query_scalar(STATE)
                    .bind(event_id)
                    .bind(seeker_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                return Ok(match state {
                    Some(state) => Redelivery::NotDead {
                        state: state.parse().map_err(|e| StoreError::corrupt(ENTITY, &e))?,
                    },
                    None => Redelivery::NotFound,
                });
            }
            sqlx::query(ENABLE)
                .bind(seeker_id)
                .bind(event_id)
                .execute(&mut *tx)
                .await?;
            let requeued: DeliveryRow = sqlx::query_as(&read)
                .bind(seeker_id)
                .bind(event_id)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Redelivery::Requeued(Box::new(DeliveryRecord::try_from(requeued)?)))
        })
    }

    /// Every delivery of a contract's events with its attempt log, in event order.
    pub async fn list_webhook_deliveries(
        &self,
        contract_id: &str,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        let sql = format!(
            "{} where d.contract_id = $1 order by d.event_id",
            delivery_select()
        );
        const ATTEMPTS: &str = "select a.event_id, a.attempt_no, a.at, a.http_status, a.error, \
            a.duration_ms from webhook_attempt a \
            join webhook_delivery d on d.event_id = a.event_id \
            where d.contract_id = $1 order by a.event_id, a.attempt_no";
        let (rows, attempts): (Vec<DeliveryRow>, Vec<AttemptRow>) = on_backend!(self, conn => {
            (
                sqlx::query_as(&sql).bind(contract_id).fetch_all(&mut *conn).await?,
                sqlx::query_as(ATTEMPTS).bind(contract_id).fetch_all(&mut *conn).await?,
            )
        });
        let mut deliveries = rows
            .into_iter()
            .map(DeliveryRecord::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        for row in attempts {
            let event_id = row.event_id;
            let attempt = DeliveryAttemptRecord::try_from(row)?;
            if let Some(delivery) = deliveries.iter_mut().find(|d| d.event_id == event_id) {
                delivery.attempt_log.push(attempt);
            }
        }
        Ok(deliveries)
    }
}
