//! The paid hire's writes: paying a contract, starting and finishing attempts, deliverables,
//! verification results and settlement bookkeeping.
//!
//! Every money-relevant step is one transaction that moves the contract's state with a
//! compare-and-set and records the event with it, so concurrent executes (in one process or
//! across instances sharing a database) resolve to one winner:
//! - [`Store::pay_contract`]: the payment row and `offered → paid` commit together, and the
//!   payment's unique keys decide which of two concurrent payments wins;
//! - [`Store::start_attempt`]: `paid → executing` happens only while the worker has fewer than
//!   `max_parallel` contracts in flight, counted under the worker row's lock, and only in queue
//!   order: contracts queued before it (`queued_at`) take the free slots first;
//! - [`Store::begin_settlement`]: the contract enters `settling` and its payment is marked in the
//!   same transaction, before anyone calls the facilitator's `/settle`.

use super::json::JsonText;
use chrono::{DateTime, Utc};

use crate::listing::model::HealthState;
use crate::states::{AttemptState, PaymentState};
use hiregate_contracts::{
    id::{AttemptId, ContractId, PaymentId},
    state::ContractState,
};

use super::hire_values::{
    AttemptEnd, AuthorizationOutcome, DeliverableRecord, NewDeliverable, NewVerification,
    SettlementOutcome, VerificationRecord,
};
use super::script::Scripts as _;
use super::{
    NewContractEvent, NewPayment, PaymentRecord, Store, StoreError, Transition,
    advance::{ContractStep, SideWrite, apply_side_write},
    bind_event, from_millis, from_millis_opt, on_backend, on_writer, parse_id,
    payments::PAYMENT_COLUMNS,
    to_millis,
    transaction::append_event,
};

/// The contract states that will never pay: a payment held under one is released.
const NEVER_PAYS: &str = "('failed', 'cancelled', 'voided', 'expired')";

/// Which payments a sweep's query reads: those an `authorize` locked in escrow, or plain ones.
#[derive(Clone, Copy)]
enum Escrow {
    Locked,
    None,
}

const ATTEMPT_ENTITY: &str = "attempt";
const DELIVERABLE_ENTITY: &str = "deliverable";
const VERIFICATION_ENTITY: &str = "verification";

/// Contract states in which a worker holds the task; they count against `max_parallel`.
pub const IN_FLIGHT_STATES: [&str; 2] = ["executing", "pending"];

/// Outcome of [`Store::pay_contract`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayOutcome {
    /// The payment is stored and the contract moved (`paid`, or `authorizing`).
    Paid {
        /// Sequence number of the transition's event.
        seq: i64,
    },
    /// The authorization or payment identifier is already stored (for this contract or
    /// another); nothing was written.
    DuplicatePayment,
    /// The contract was not `offered` any more (another payment won); nothing was written.
    StateMismatch {
        /// Its actual state.
        actual: ContractState,
    },
    /// No such contract.
    NotFound,
}

/// An attempt to record when a contract is forwarded.
#[derive(Debug, Clone)]
pub struct NewAttempt {
    /// Attempt id (`att_…`).
    pub attempt_id: AttemptId,
    /// The payment the attempt runs under.
    pub payment_id: PaymentId,
    /// When the forward started.
    pub started_at: DateTime<Utc>,
}

/// Outcome of [`Store::start_attempt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAttempt {
    /// The contract is `executing`; this is attempt `attempt_no` (1-based).
    Started {
        /// Attempt number.
        attempt_no: u32,
    },
    /// The worker has no free slot for this contract: `in_flight` contracts are in flight
    /// and `ahead` paid contracts queued before this one wait for the free ones.
    WorkerBusy {
        /// Contracts in flight at the worker.
        in_flight: u32,
        /// Queued contracts ahead of this one.
        ahead: u32,
    },
    /// The contract was not `paid`.
    StateMismatch {
        /// Its actual state.
        actual: ContractState,
    },
    /// No such contract.
    NotFound,
}

/// A stored attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// Attempt id.
    pub attempt_id: AttemptId,
    /// Contract.
    pub contract_id: ContractId,
    /// 1-based number.
    pub attempt_no: u32,
    /// Payment it ran under.
    pub payment_id: Option<PaymentId>,
    /// Where the attempt is.
    pub state: AttemptState,
    /// The worker's task id (async work).
    pub worker_task_id: Option<String>,
    /// Where the worker said to poll (async work).
    pub poll_url: Option<String>,
    /// HTTP status the worker answered, if it answered.
    pub http_status: Option<u16>,
    /// What went wrong, for failed attempts.
    pub error: Option<serde_json::Value>,
    /// The worker's free-form `metadata` beside its deliverable (HIRE).
    pub worker_metadata: Option<serde_json::Value>,
    /// When pending work expects to finish, as the worker wrote it (HIRE).
    pub estimated_completion: Option<String>,
    /// Start.
    pub started_at: DateTime<Utc>,
    /// End.
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct AttemptRow {
    attempt_id: String,
    contract_id: String,
    attempt_no: i32,
    payment_id: Option<String>,
    state: String,
    worker_task_id: Option<String>,
    poll_url: Option<String>,
    http_status: Option<i32>,
    error: Option<JsonText<serde_json::Value>>,
    worker_metadata: Option<JsonText<serde_json::Value>>,
    estimated_completion: Option<String>,
    started_at: i64,
    finished_at: Option<i64>,
}

impl TryFrom<AttemptRow> for AttemptRecord {
    type Error = StoreError;

    fn try_from(row: AttemptRow) -> Result<Self, Self::Error> {
        Ok(Self {
            attempt_id: parse_id(ATTEMPT_ENTITY, &row.attempt_id)?,
            contract_id: parse_id(ATTEMPT_ENTITY, &row.contract_id)?,
            attempt_no: u32::try_from(row.attempt_no)
                .map_err(|e| StoreError::corrupt(ATTEMPT_ENTITY, &e))?,
            payment_id: row
                .payment_id
                .map(|id| parse_id(ATTEMPT_ENTITY, &id))
                .transpose()?,
            state: row
                .state
                .parse()
                .map_err(|e| StoreError::corrupt(ATTEMPT_ENTITY, &e))?,
            worker_task_id: row.worker_task_id,
            poll_url: row.poll_url,
            http_status: row
                .http_status
                .map(u16::try_from)
                .transpose()
                .map_err(|e| StoreError::corrupt(ATTEMPT_ENTITY, &e))?,
            error: row.error.map(|json| json.0),
            worker_metadata: row.worker_metadata.map(|json| json.0),
            estimated_completion: row.estimated_completion,
            started_at: from_millis(ATTEMPT_ENTITY, row.started_at)?,
            finished_at: from_millis_opt(ATTEMPT_ENTITY, row.finished_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct DeliverableRow {
    deliverable_id: String,
    contract_id: String,
    attempt_id: String,
    position: i32,
    name: Option<String>,
    kind: String,
    media_type: Option<String>,
    digest: String,
    content: Option<Vec<u8>>,
    source_url: Option<String>,
    created_at: i64,
}

impl TryFrom<DeliverableRow> for DeliverableRecord {
    type Error = StoreError;

    fn try_from(row: DeliverableRow) -> Result<Self, Self::Error> {
        Ok(Self {
            deliverable_id: parse_id(DELIVERABLE_ENTITY, &row.deliverable_id)?,
            contract_id: parse_id(DELIVERABLE_ENTITY, &row.contract_id)?,
            attempt_id: parse_id(DELIVERABLE_ENTITY, &row.attempt_id)?,
            position: u32::try_from(row.position)
                .map_err(|e| StoreError::corrupt(DELIVERABLE_ENTITY, &e))?,
            name: row.name,
            kind: row
                .kind
                .parse()
                .map_err(|e| StoreError::corrupt(DELIVERABLE_ENTITY, &e))?,
            media_type: row.media_type,
            digest: row.digest,
            content: row.content.unwrap_or_default(),
            source_url: row.source_url,
            created_at: from_millis(DELIVERABLE_ENTITY, row.created_at)?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct VerificationRow {
    verification_id: String,
    contract_id: String,
    attempt_id: Option<String>,
    policy_id: String,
    policy_version: String,
    policy_hash: String,
    passed: bool,
    score: f64,
    reason_codes: JsonText<Vec<u16>>,
    status: String,
    verifier_result_hash: String,
    result: JsonText<serde_json::Value>,
    created_at: i64,
}

impl TryFrom<VerificationRow> for VerificationRecord {
    type Error = StoreError;

    fn try_from(row: VerificationRow) -> Result<Self, Self::Error> {
        Ok(Self {
            verification_id: parse_id(VERIFICATION_ENTITY, &row.verification_id)?,
            contract_id: parse_id(VERIFICATION_ENTITY, &row.contract_id)?,
            attempt_id: row.attempt_id.unwrap_or_default(),
            policy_id: row.policy_id,
            policy_version: row.policy_version,
            policy_hash: row.policy_hash,
            passed: row.passed,
            score: row.score,
            reason_codes: row.reason_codes.0,
            status: row.status,
            verifier_result_hash: row.verifier_result_hash,
            result: row.result.0,
            created_at: from_millis(VERIFICATION_ENTITY, row.created_at)?,
        })
    }
}

const ATTEMPT_COLUMNS: &str = "attempt_id, contract_id, attempt_no, payment_id, state, \
    worker_task_id, poll_url, http_status, error, worker_metadata, estimated_completion, \
    started_at, finished_at";

const DELIVERABLE_COLUMNS: &str = "deliverable_id, contract_id, attempt_id, position, name, kind, \
    media_type, digest, content, source_url, created_at";

const VERIFICATION_COLUMNS: &str = "verification_id, contract_id, attempt_id, policy_id, \
    policy_version, policy_hash, passed, score, reason_codes, status, verifier_result_hash, \
    result, created_at";

/// Touching the worker row takes its row lock (PostgreSQL) or the database write lock (SQLite),
/// so two executes for one worker count its in-flight contracts one after the other.
const LOCK_WORKER: &str = "update worker set max_parallel = max_parallel where worker_id = $1";

/// [`Store::start_attempt`]'s statements, after the worker's row is locked: the worker's load
/// (its slots in use, the paid contracts queued ahead of this one), then the move
/// `paid → executing` only if that load leaves a slot under `$14` (`max_parallel`), with the
/// attempt and the event. `$1`…`$8` are the event's (see `bind_event!`), then the attempt id,
/// payment id and start, the worker, the contract again, and `max_parallel`.
struct StartStatements {
    /// PostgreSQL's one statement: the load as a CTE read by the guarded move (the statement's
    /// snapshot is taken after the lock, so it counts every start committed before); returns
    /// the load and, when it started, `attempts_used, event_seq`.
    merged: String,
    /// SQLite's script, a transaction of its own (see `store::script`): the load, the guarded
    /// move, then the attempt and the event, each only if the statement before wrote its one
    /// row (`changes() = 1`). Returns the load's row, then the moved row's when it started.
    script: String,
}

static START: std::sync::LazyLock<StartStatements> = std::sync::LazyLock::new(|| {
    let busy = super::advance::shift_placeholders(&in_flight_sql(), 11).0;
    let ahead = super::advance::shift_placeholders(QUEUED_AHEAD, 11).0;
    let bump = |guard: &str| {
        format!(
            "update contract set state = 'executing', attempts_used = attempts_used + 1, \
             updated_at = $2, queued_at = null, event_seq = event_seq + 1 \
             where contract_id = $1 and state = $6 and {guard} < $14 \
             returning attempts_used, event_seq"
        )
    };
    let attempt = |source: &str| {
        format!(
            "insert into attempt (attempt_id, contract_id, attempt_no, payment_id, state, \
             started_at) select $9, $1, attempts_used, $10, 'running', $11 from {source}"
        )
    };
    let logged = |source: &str| {
        format!(
            "insert into contract_event (contract_id, seq, at, actor, correlation_id, kind, \
             from_state, to_state, details) select $1, event_seq, $2, $3, $4, $5, $6, $7, $8 \
             from {source}"
        )
    };
    let after_write = "contract where contract_id = $1 and changes() = 1";
    StartStatements {
        merged: format!(
            "with load as (select ({busy}) as busy, ({ahead}) as ahead), \
             bumped as ({}), started as ({}), logged as ({}) \
             select load.busy, load.ahead, bumped.attempts_used, bumped.event_seq \
             from load left join bumped on true",
            bump("(select busy + ahead from load)"),
            attempt("bumped"),
            logged("bumped"),
        ),
        script: [
            "begin immediate".to_owned(),
            format!("select ({busy}), ({ahead})"),
            bump(&format!("({busy}) + ({ahead})")),
            attempt(after_write),
            logged(after_write),
            "commit".to_owned(),
        ]
        .join(";\n"),
    }
});

fn in_flight_sql() -> String {
    let states = IN_FLIGHT_STATES
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("select count(*) from contract where worker_id = $1 and state in ({states})")
}

/// Paid contracts of worker `$1` queued before contract `$2` (all queued ones when `$2` is not
/// queued): they take free slots first. Ties on `queued_at` go by contract id.
const QUEUED_AHEAD: &str = "select count(*) from contract q where q.worker_id = $1 \
    and q.state = 'paid' and q.queued_at is not null and q.contract_id <> $2 \
    and not exists (select 1 from contract me where me.contract_id = $2 \
        and me.queued_at is not null \
        and (me.queued_at < q.queued_at \
             or (me.queued_at = q.queued_at and me.contract_id < q.contract_id)))";

/// A worker's load as the paid path sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerLoad {
    /// Contracts the worker holds (`executing`, `pending`).
    pub in_flight: u32,
    /// The listing's `max_parallel`.
    pub max_parallel: u32,
    /// Paid contracts waiting in its queue.
    pub queued: u32,
}

/// Whether a listing can take a paid contract now, as the payment sees it: its load and what
/// the health loop and its operator last said of it. Read in one query with the load, so the
/// paid path asks the store once for both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStanding {
    /// In flight, `max_parallel`, queued.
    pub load: WorkerLoad,
    /// What the health loop last decided.
    pub health: HealthState,
    /// The operator retired the listing.
    pub retired: bool,
    /// The listing's catalog still holds the contract's task type.
    pub offers_task: bool,
    /// When the health loop probes the listing next (the earliest it can be healthy again).
    pub next_probe_at: DateTime<Utc>,
}

impl Store {
    /// Store a verified payment and move its contract `offered → to_state` in one transaction
    /// (`paid` for an `exact` payment, `authorizing` for an escrowed one whose `authorize` is
    /// sent next). The payment's unique keys (authorization, payment identifier) make a second
    /// payment of anything already stored [`PayOutcome::DuplicatePayment`]; a contract that is
    /// no longer `offered` is [`PayOutcome::StateMismatch`]. Either way nothing is written.
    pub async fn pay_contract(
        &self,
        payment: &NewPayment,
        to_state: ContractState,
        event: &NewContractEvent,
    ) -> Result<PayOutcome, StoreError> {
        let moved = self
            .advance_contract(
                payment.contract_id.as_str(),
                &[ContractStep {
                    from: ContractState::Offered,
                    to: to_state,
                    deadline_at: None,
                    event,
                }],
                &[SideWrite::Payment(payment)],
            )
            .await;
        Ok(match moved {
            Ok(Transition::Applied { seq }) => PayOutcome::Paid { seq },
            Ok(Transition::StateMismatch { actual }) => PayOutcome::StateMismatch { actual },
            Ok(Transition::NotFound) => PayOutcome::NotFound,
            // Nothing was written: the steps and the payment commit together or not at all.
            Err(StoreError::Duplicate { .. }) => PayOutcome::DuplicatePayment,
            Err(other) => return Err(other),
        })
    }

    /// The payment that paid `contract_id` (at most one is ever stored per contract).
    pub async fn payment_of_contract(
        &self,
        contract_id: &str,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        self.payment_of_contract_where(contract_id, "order by created_at limit 1")
            .await
    }

    /// The payment that entered settlement for `contract_id` (at most one ever does, a
    /// unique index says so).
    pub async fn settlement_payment_of_contract(
        &self,
        contract_id: &str,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        self.payment_of_contract_where(contract_id, "and settle_started_at is not null")
            .await
    }

    /// The first payment of `contract_id` that `rest` (the rest of the query) selects.
    async fn payment_of_contract_where(
        &self,
        contract_id: &str,
        rest: &str,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let sql = format!("select {PAYMENT_COLUMNS} from payment where contract_id = $1 {rest}");
        let row: Option<super::payments::PaymentRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(contract_id).fetch_optional(conn).await?
        });
        row.map(PaymentRecord::try_from).transpose()
    }

    /// The load of `worker_id` in one query; `None` when the listing is gone. The paid path's
    /// capacity check, before a payment is verified.
    pub async fn worker_load(&self, worker_id: &str) -> Result<Option<WorkerLoad>, StoreError> {
        let sql = format!(
            "select ({}) as in_flight, cast(max_parallel as bigint) as max_parallel, \
             (select count(*) from contract where worker_id = $1 and state = 'paid' \
              and queued_at is not null) as queued \
             from worker where worker_id = $1",
            in_flight_sql()
        );
        let row: Option<(i64, i64, i64)> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(worker_id).fetch_optional(conn).await?
        });
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        Ok(row.map(|(in_flight, max, queued)| WorkerLoad {
            in_flight: count(in_flight),
            max_parallel: u32::try_from(max).unwrap_or(0),
            queued: count(queued),
        }))
    }

    /// [`Self::worker_load`] with the listing's health, retirement, next probe and whether its
    /// catalog still offers `task_type`, in one query; `None` when the listing is gone. What the
    /// paid path asks before a payment is verified, stored or locked.
    pub async fn worker_standing(
        &self,
        worker_id: &str,
        task_type: &str,
    ) -> Result<Option<WorkerStanding>, StoreError> {
        let sql = format!(
            "select ({}) as in_flight, cast(max_parallel as bigint) as max_parallel, \
             (select count(*) from contract where worker_id = $1 and state = 'paid' \
              and queued_at is not null) as queued, \
             health, retired_at, next_probe_at, \
             (select count(*) from worker_task where worker_id = $1 and task_type = $2) \
              as offers_task \
             from worker where worker_id = $1",
            in_flight_sql()
        );
        type Row = (i64, i64, i64, String, Option<i64>, i64, i64);
        let row: Option<Row> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(worker_id)
                .bind(task_type)
                .fetch_optional(conn)
                .await?
        });
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        row.map(
            |(in_flight, max, queued, health, retired_at, next_probe_at, offers_task)| {
                Ok(WorkerStanding {
                    load: WorkerLoad {
                        in_flight: count(in_flight),
                        max_parallel: u32::try_from(max).unwrap_or(0),
                        queued: count(queued),
                    },
                    health: health
                        .parse()
                        .map_err(|e| StoreError::corrupt("worker", &e))?,
                    retired: retired_at.is_some(),
                    offers_task: offers_task > 0,
                    next_probe_at: from_millis("worker", next_probe_at)?,
                })
            },
        )
        .transpose()
    }

    /// Put a paid contract in its worker's queue (keeping its place if it is queued already);
    /// returns its 1-based position, `None` when the contract is not `paid`.
    pub async fn queue_contract(
        &self,
        contract_id: &str,
        worker_id: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<u32>, StoreError> {
        const SQL: &str = "update contract set queued_at = coalesce(queued_at, $2) \
            where contract_id = $1 and state = 'paid'";
        let updated = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(contract_id)
                .bind(to_millis(at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        if updated == 0 {
            return Ok(None);
        }
        let ahead: i64 = on_backend!(self, conn => {
            sqlx::query_scalar(QUEUED_AHEAD)
                .bind(worker_id)
                .bind(contract_id)
                .fetch_one(conn)
                .await?
        });
        Ok(Some(
            u32::try_from(ahead).unwrap_or(u32::MAX).saturating_add(1),
        ))
    }

    /// Queued paid contracts of every worker, longest waiting first: what the dispatcher
    /// offers the free slots to.
    pub async fn queued_contracts(&self, limit: u32) -> Result<Vec<String>, StoreError> {
        const SQL: &str = "select contract_id from contract where state = 'paid' \
            and queued_at is not null order by queued_at, contract_id limit $1";
        Ok(on_backend!(self, conn => {
            sqlx::query_scalar(SQL).bind(i64::from(limit)).fetch_all(conn).await?
        }))
    }

    /// Forward a paid contract: if its worker has a free slot that no contract queued before it
    /// is waiting for, move it `paid → executing` (out of the queue), count the attempt and
    /// store it, all in one transaction.
    pub async fn start_attempt(
        &self,
        contract_id: &str,
        worker_id: &str,
        max_parallel: u32,
        attempt: &NewAttempt,
        event: &NewContractEvent,
    ) -> Result<StartAttempt, StoreError> {
        // The worker's load, the start and its rows in one go after the worker's row is
        // locked, on each dialect (see [`START`]): the lock is held until the commit, so every
        // round trip inside this transaction holds up the worker's other hires.
        let (load, bumped): ((i64, i64), Option<(i32, i64)>) = on_writer!(self, conn => {
            macro_rules! bind_start {
                ($query:expr) => {
                    bind_event!($query, contract_id, event, "paid", "executing")
                        .bind(attempt.attempt_id.as_str())
                        .bind(attempt.payment_id.as_str())
                        .bind(to_millis(attempt.started_at))
                        .bind(worker_id)
                        .bind(contract_id)
                        .bind(i64::from(max_parallel))
                };
            }
            if super::merges_statements(conn) {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                sqlx::query(LOCK_WORKER).bind(worker_id).execute(&mut *tx).await?;
                let (busy, ahead, attempts, seq): (i64, i64, Option<i32>, Option<i64>) =
                    bind_start!(sqlx::query_as(&START.merged))
                        .fetch_one(&mut *tx)
                        .await?;
                tx.commit().await?;
                ((busy, ahead), attempts.zip(seq))
            } else {
                let rows = conn.run_script(self.script_flag(), bind_start!(sqlx::query(&START.script)))
                    .await?;
                let Some(load) = rows.first() else {
                    return Err(StoreError::corrupt(ATTEMPT_ENTITY, &"a start that read no load"));
                };
                let load = (sqlx::Row::try_get(load, 0)?, sqlx::Row::try_get(load, 1)?);
                let bumped = match rows.get(1) {
                    Some(row) => Some((sqlx::Row::try_get(row, 0)?, sqlx::Row::try_get(row, 1)?)),
                    None => None,
                };
                (load, bumped)
            }
        });
        let count = |n: i64| u32::try_from(n).unwrap_or(u32::MAX);
        let (in_flight, ahead) = (count(load.0), count(load.1));
        let Some((attempts, seq)) = bumped else {
            if in_flight.saturating_add(ahead) >= max_parallel {
                return Ok(StartAttempt::WorkerBusy { in_flight, ahead });
            }
            return Ok(match self.contract_state(contract_id).await? {
                Some(actual) => StartAttempt::StateMismatch { actual },
                None => StartAttempt::NotFound,
            });
        };
        self.publish_event(
            contract_id,
            seq,
            event,
            Some(ContractState::Paid),
            Some(ContractState::Executing),
        );
        Ok(StartAttempt::Started {
            attempt_no: u32::try_from(attempts)
                .map_err(|e| StoreError::corrupt(ATTEMPT_ENTITY, &e))?,
        })
    }

    /// Record how an attempt ended (or that it went pending).
    pub async fn finish_attempt(
        &self,
        attempt_id: &str,
        end: &AttemptEnd,
    ) -> Result<(), StoreError> {
        on_writer!(self, conn => {
            apply_side_write(conn, SideWrite::AttemptEnd { attempt_id, end }).await?;
        });
        Ok(())
    }

    /// A contract's attempts, first first.
    pub async fn list_attempts(&self, contract_id: &str) -> Result<Vec<AttemptRecord>, StoreError> {
        let sql = format!(
            "select {ATTEMPT_COLUMNS} from attempt where contract_id = $1 order by attempt_no"
        );
        let rows: Vec<AttemptRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(contract_id).fetch_all(conn).await?
        });
        rows.into_iter().map(AttemptRecord::try_from).collect()
    }

    /// Store an attempt's deliverable pieces in one transaction; pieces stored before are
    /// left as they are.
    pub async fn insert_deliverables(&self, pieces: &[NewDeliverable]) -> Result<(), StoreError> {
        on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            for piece in pieces {
                apply_side_write(&mut *tx, SideWrite::Deliverable(piece)).await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The pieces of the latest attempt's delivery of `contract_id`, by position.
    pub async fn latest_deliverables(
        &self,
        contract_id: &str,
    ) -> Result<Vec<DeliverableRecord>, StoreError> {
        let sql = format!(
            "select {DELIVERABLE_COLUMNS} from deliverable where contract_id = $1 and attempt_id = \
             (select attempt_id from deliverable where contract_id = $1 \
              order by created_at desc, attempt_id desc limit 1) \
             order by position"
        );
        let rows: Vec<DeliverableRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(contract_id).fetch_all(conn).await?
        });
        rows.into_iter().map(DeliverableRecord::try_from).collect()
    }

    /// Store a verification result.
    pub async fn insert_verification(&self, result: &NewVerification) -> Result<(), StoreError> {
        on_writer!(self, conn => {
            apply_side_write(conn, SideWrite::Verification(result)).await?;
        });
        Ok(())
    }

    /// The most recent verification of `contract_id`.
    pub async fn latest_verification(
        &self,
        contract_id: &str,
    ) -> Result<Option<VerificationRecord>, StoreError> {
        let sql = format!(
            "select {VERIFICATION_COLUMNS} from verification where contract_id = $1 \
             order by created_at desc, verification_id desc limit 1"
        );
        let row: Option<VerificationRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(contract_id).fetch_optional(conn).await?
        });
        row.map(VerificationRecord::try_from).transpose()
    }

    /// Move `contract_id` from `expected_state` to `settling` and mark `payment_id` as entering
    /// settlement, in one transaction: after this commits, a crash can no longer lose the fact
    /// that `/settle` may have been called. The payment table allows one settling payment per
    /// contract, so a different payment can never be settled for the same contract.
    pub async fn begin_settlement_of_contract(
        &self,
        contract_id: &str,
        expected_state: ContractState,
        payment_id: &PaymentId,
        amount: Option<&str>,
        event: &NewContractEvent,
    ) -> Result<Transition, StoreError> {
        self.advance_contract(
            contract_id,
            &[ContractStep {
                from: expected_state,
                to: ContractState::Settling,
                deadline_at: None,
                event,
            }],
            &[SideWrite::SettlementBegun {
                contract_id,
                payment_id,
                at: event.at,
                amount,
            }],
        )
        .await
    }

    /// Claim one retry of a `settlement_unknown` contract's settlement, if nothing touched the
    /// contract after `untouched_since`: its retry counter goes up and `updated_at` becomes
    /// `at` (the next retry waits from there). No event: a retry is not a state change, and one
    /// that cannot succeed yet must not grow the log. Returns the retry's number; `None` when
    /// the contract moved on or another retry claimed it since (then nothing may be sent).
    pub async fn claim_settlement_retry(
        &self,
        contract_id: &str,
        untouched_since: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> Result<Option<u32>, StoreError> {
        const SQL: &str = "update contract set settlement_retries = settlement_retries + 1, \
            updated_at = $3 where contract_id = $1 and state = 'settlement_unknown' \
            and updated_at <= $2 returning settlement_retries";
        let retries: Option<i32> = on_writer!(self, conn => {
            sqlx::query_scalar(SQL)
                .bind(contract_id)
                .bind(to_millis(untouched_since))
                .bind(to_millis(at))
                .fetch_optional(conn)
                .await?
        });
        Ok(retries.map(|n| u32::try_from(n).unwrap_or(0)))
    }

    /// What a settlement retry that decided nothing learned (a transaction the facilitator
    /// broadcast, its answer), kept on the `settlement_unknown` payment in place.
    pub async fn note_settlement_answer(
        &self,
        payment_id: &PaymentId,
        transaction: Option<&str>,
        response: Option<&serde_json::Value>,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const SQL: &str = "update payment set settle_tx = coalesce($2, settle_tx), \
            settle_response = coalesce($3, settle_response), updated_at = $4 \
            where payment_id = $1 and state = 'settlement_unknown'";
        on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(payment_id.as_str())
                .bind(transaction)
                .bind(response.map(JsonText))
                .bind(to_millis(at))
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Record a settlement outcome: the payment's state, transaction and response, and the
    /// contract's `from_state → outcome.contract_state` transition (`from_state` is `settling`,
    /// or `settlement_unknown` when the chain decided without another `/settle`), in one
    /// transaction.
    pub async fn finish_settlement(
        &self,
        contract_id: &str,
        from_state: ContractState,
        payment_id: &PaymentId,
        outcome: &SettlementOutcome,
        event: &NewContractEvent,
    ) -> Result<Transition, StoreError> {
        self.advance_contract(
            contract_id,
            &[ContractStep {
                from: from_state,
                to: outcome.contract_state,
                deadline_at: None,
                event,
            }],
            &[SideWrite::SettlementFinished {
                payment_id,
                outcome,
                at: event.at,
            }],
        )
        .await
    }

    /// Set a payment's state (e.g. `voided` when its contract failed), without touching the
    /// contract.
    pub async fn set_payment_state(
        &self,
        payment_id: &PaymentId,
        state: PaymentState,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const SQL: &str = "update payment set state = $2, updated_at = $3 where payment_id = $1";
        on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(payment_id.as_str())
                .bind(state.as_str())
                .bind(to_millis(at))
                .execute(conn)
                .await?;
        });
        Ok(())
    }

    /// Record the outcome of an escrowed payment's `authorize`: the contract moves
    /// `authorizing → contract_state` (`paid` once mined, `offered` when the chain refused it)
    /// and the payment takes `payment_state` and the transaction, in one transaction.
    pub async fn finish_authorization(
        &self,
        contract_id: &str,
        payment_id: &PaymentId,
        outcome: &AuthorizationOutcome<'_>,
        event: &NewContractEvent,
    ) -> Result<Transition, StoreError> {
        self.advance_contract(
            contract_id,
            &[ContractStep {
                from: ContractState::Authorizing,
                to: outcome.contract_state,
                deadline_at: None,
                event,
            }],
            &[SideWrite::AuthorizationFinished {
                payment_id,
                outcome,
                at: event.at,
            }],
        )
        .await
    }

    /// An escrowed payment's money went back to the payer (or is on its way): its state
    /// (`voiding` before the void is sent, then `voided`, `reclaimed` or `refunded`) and the
    /// transaction that returned it, when known. A released payment never goes back to
    /// `voiding`, so a late retry cannot undo what the chain already recorded. `false` when
    /// nothing changed (already in that state: another instance recorded it first).
    pub async fn set_payment_release(
        &self,
        payment_id: &PaymentId,
        state: PaymentState,
        transaction: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update payment set state = $2, release_tx = coalesce($3, release_tx), \
            updated_at = $4 where payment_id = $1 and (state <> $2 or $2 = 'voiding') \
            and not ($2 = 'voiding' and state in ('voided', 'reclaimed', 'refunded'))";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(payment_id.as_str())
                .bind(state.as_str())
                .bind(transaction)
                .bind(to_millis(at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }

    /// An arbiter's refund of `amount` (atomic units, decimal) of a captured payment is about
    /// to be sent: `settled → refunding`, the amount kept for the sweep that resumes it and for
    /// reconciliation. `false` when the payment was not `settled` (or is `refunding` already:
    /// the amount then stays the first intent's).
    pub async fn begin_refund(
        &self,
        payment_id: &PaymentId,
        amount: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update payment set state = 'refunding', refunded_amount = $2, \
            updated_at = $3 where payment_id = $1 and state = 'settled'";
        let changed = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(payment_id.as_str())
                .bind(amount)
                .bind(to_millis(at))
                .execute(conn)
                .await?
                .rows_affected()
        });
        Ok(changed == 1)
    }

    /// Escrowed payments (locked by an `authorize`) whose money must go back or whose refund
    /// is unconfirmed, untouched since `before`, oldest first: a void intent not confirmed
    /// (`voiding`), a payment still `authorized` or `settlement_failed` under a contract that
    /// will never pay (a crash before the intent), or a `refunding` one.
    pub async fn escrow_payments_to_release(
        &self,
        before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<PaymentRecord>, StoreError> {
        self.payments_where(
            Escrow::Locked,
            &format!(
                "updated_at <= $1 and (state in ('voiding', 'refunding', 'settlement_failed') \
                 or (state = 'authorized' and contract_id in (select contract_id from contract \
                 where state in {NEVER_PAYS}))) order by updated_at"
            ),
            to_millis(before),
            limit,
        )
        .await
    }

    /// Plain payments (never locked in escrow, never sent to settlement) still `verified` under
    /// a contract that will never pay (`failed`, `cancelled`, `voided`, `expired`) and has not
    /// moved since `before`. Each way into those states releases the payment in a commit of its
    /// own right after, so these were left by an instance that died between the two.
    pub async fn unreleased_plain_payments(
        &self,
        before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<PaymentRecord>, StoreError> {
        self.payments_where(
            Escrow::None,
            &format!(
                "settle_started_at is null and state = 'verified' \
                 and contract_id in (select contract_id from contract \
                 where state in {NEVER_PAYS} and updated_at <= $1) order by updated_at"
            ),
            to_millis(before),
            limit,
        )
        .await
    }

    /// `verified → voided` for a plain payment, with `event` appended to its contract's log, in
    /// one transaction; `false` (nothing written) when the payment was not `verified` any more,
    /// so of several instances releasing it one writes.
    pub async fn release_verified_payment(
        &self,
        contract_id: &str,
        payment_id: &PaymentId,
        event: &NewContractEvent,
    ) -> Result<bool, StoreError> {
        const RELEASE: &str = "update payment set state = 'voided', updated_at = $2 \
            where payment_id = $1 and contract_id = $3 and state = 'verified'";
        let seq: Option<i64> = on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let released = sqlx::query(RELEASE)
                .bind(payment_id.as_str())
                .bind(to_millis(event.at))
                .bind(contract_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if released != 1 {
                return Ok(false);
            }
            let seq = append_event(&mut tx, contract_id, event).await?;
            tx.commit().await?;
            seq
        });
        if let Some(seq) = seq {
            self.publish_event(contract_id, seq, event, None, None);
        }
        Ok(seq.is_some())
    }

    /// Escrowed payments still holding money past their capture deadline (`valid_before` <=
    /// `deadline_passed`), oldest first: whether the payer reclaimed them is for the chain to
    /// say.
    pub async fn escrow_payments_past_deadline(
        &self,
        deadline_passed: i64,
        limit: u32,
    ) -> Result<Vec<PaymentRecord>, StoreError> {
        self.payments_where(
            Escrow::Locked,
            "state in ('authorized', 'settling', 'settlement_unknown', 'voiding') \
             and valid_before <= $1 order by valid_before",
            deadline_passed,
            limit,
        )
        .await
    }

    /// Payments locked in escrow or not (`escrow`) matching `condition` (with its ordering),
    /// which binds `$1` to `bound`; at most `limit`.
    async fn payments_where(
        &self,
        escrow: Escrow,
        condition: &str,
        bound: i64,
        limit: u32,
    ) -> Result<Vec<PaymentRecord>, StoreError> {
        let locked = match escrow {
            Escrow::Locked => "authorize_tx is not null",
            Escrow::None => "authorize_tx is null",
        };
        let sql = format!(
            "select {PAYMENT_COLUMNS} from payment where {locked} and {condition} limit $2"
        );
        let rows: Vec<super::payments::PaymentRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(bound)
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(PaymentRecord::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::states::PieceKind;
    use hiregate_contracts::id::{AttemptId, ContractId, DeliverableId};

    fn piece_row(kind: &str) -> DeliverableRow {
        DeliverableRow {
            deliverable_id: DeliverableId::generate().to_string(),
            contract_id: ContractId::generate().to_string(),
            attempt_id: AttemptId::generate().to_string(),
            position: 1,
            name: None,
            kind: kind.to_owned(),
            media_type: None,
            digest: "sha256:00".to_owned(),
            content: None,
            source_url: None,
            created_at: 0,
        }
    }

    #[test]
    fn a_piece_row_with_another_kind_spelling_is_corrupt() {
        let piece = DeliverableRecord::try_from(piece_row("evidence")).unwrap();
        assert_eq!(piece.kind, PieceKind::Evidence);
        for kind in ["Evidence", "document", ""] {
            let error = DeliverableRecord::try_from(piece_row(kind)).unwrap_err();
            assert!(
                matches!(
                    error,
                    StoreError::Corrupt {
                        entity: DELIVERABLE_ENTITY,
                        ..
                    }
                ),
                "{kind:?}: {error}"
            );
        }
    }
}
