//! `contract` and `contract_event`: contract rows, compare-and-set state transitions, and the
//! append-only event log.
//!
//! Seam: a read contract's state is the `contracts` crate's [`ContractState`] (a row holding
//! any other spelling is corrupt), and so are its ids (`ContractId`, `PrincipalId`, `WorkerId`,
//! parsed once when the row is read); the terms are JSON here, and the execute flow maps them to
//! that crate's `Terms` at its edge.
//!
//! Ordering: every write to a contract's events first updates the contract row, which takes
//! its row lock (PostgreSQL) or the write lock (SQLite). The next `seq` is computed after that,
//! so per contract `seq` is gap-free and commits in order: an SSE reader resuming after `n`
//! never misses an event that commits later with a smaller number.

use std::sync::{Arc, LazyLock};

use super::bus::LiveEvent;
use super::json::{self, JsonText};
use super::offer::StoredOffer;
use super::states::{Actor, EventKind};
use chrono::{DateTime, Utc};
use hiregate_contracts::{
    id::{ContractId, PrincipalId, WorkerId},
    state::ContractState,
    terms::ContractTerms,
};

use super::script::Scripts as _;
use super::transaction::{append_event, parse_state};
use super::{
    Store, StoreError, from_millis, from_millis_opt, on_backend, on_writer, parse_document,
    parse_id, to_millis,
};

const ENTITY: &str = "contract";
const EVENT_ENTITY: &str = "contract_event";

/// Signed documents already read, parsed, by their terms' hash. The hash is the documents'
/// identity: it is over the terms, which name the contract, and a contract's documents are
/// written once when it is proposed (migration 0026). A paid hire reads its contract at each
/// step, and each read parsed the terms document (validating it again compiled its output
/// schemas: 378 µs a parse, measured in a debug build) and the offer; so each contract's
/// documents are parsed at most once per process, and a contract proposed by this process not
/// even once: it is remembered with the terms it was written from. Weighed by their text's
/// bytes, so large task inputs cannot pile up; parsed, a document takes about three times its
/// bytes (in `serde_json::Value`s).
static SIGNED_DOCUMENTS: LazyLock<
    quick_cache::sync::Cache<String, SignedDocuments, DocumentBytes>,
> = LazyLock::new(|| {
    quick_cache::sync::Cache::with_weighter(CACHED_TERMS, CACHED_TERMS_BYTES, DocumentBytes)
});

/// Documents the cache expects to hold, and the text bytes it holds at most. Only the
/// contracts in flight need their documents at hand (a paid hire reads its contract at each
/// step): 2 MiB is about 1,300 of the bench's terms alone, fewer with their offers. At 16 MiB every pending contract's terms
/// stayed parsed: with 10,000 pending contracts the gateway held 126.9 MiB RSS, against
/// 85.5 MiB at 2 MiB (`--bench scale`).
const CACHED_TERMS: usize = 1024;
const CACHED_TERMS_BYTES: u64 = 2 * 1024 * 1024;

/// A contract's signed documents, parsed, and the bytes of the text they were read from.
#[derive(Clone)]
struct SignedDocuments {
    terms: Arc<ContractTerms>,
    terms_document: Arc<serde_json::Value>,
    payment_offer: Option<Arc<StoredOffer>>,
    bytes: u64,
}

#[derive(Clone)]
struct DocumentBytes;

impl quick_cache::Weighter<String, SignedDocuments> for DocumentBytes {
    fn weight(&self, _hash: &String, documents: &SignedDocuments) -> u64 {
        documents.bytes
    }
}

/// The documents a row read holds (its terms signed under `terms_hash`), from the cache or
/// parsed. Text that does not parse is a corrupt row.
fn signed_documents(
    terms_hash: &str,
    terms: &str,
    payment_offer: Option<&str>,
) -> Result<SignedDocuments, StoreError> {
    if let Some(documents) = SIGNED_DOCUMENTS.get(terms_hash) {
        return Ok(documents);
    }
    let corrupt = |error: sqlx::error::BoxDynError| StoreError::corrupt(ENTITY, &error);
    let terms_document: serde_json::Value = json::parse(terms).map_err(corrupt)?;
    let offer_document: Option<serde_json::Value> = payment_offer
        .map(json::parse)
        .transpose()
        .map_err(corrupt)?;
    let documents = SignedDocuments {
        terms: Arc::new(parse_document(ENTITY, &terms_document)?),
        terms_document: Arc::new(terms_document),
        payment_offer: offer_document
            .map(|offer| parse_document(ENTITY, &offer).map(Arc::new))
            .transpose()?,
        bytes: text_bytes(terms, payment_offer),
    };
    SIGNED_DOCUMENTS.insert(terms_hash.to_owned(), documents.clone());
    Ok(documents)
}

/// What documents read from `terms` and `payment_offer` weigh in [`SIGNED_DOCUMENTS`].
fn text_bytes(terms: &str, payment_offer: Option<&str>) -> u64 {
    u64::try_from(terms.len() + payment_offer.map_or(0, str::len)).unwrap_or(u64::MAX)
}

/// A contract to create, with its first event.
#[derive(Debug, Clone)]
pub struct NewContract {
    /// Contract id.
    pub contract_id: ContractId,
    /// Seeker principal.
    pub seeker_id: PrincipalId,
    /// Worker listing id.
    pub worker_id: WorkerId,
    /// Task type hired.
    pub task_type: String,
    /// The signed terms document.
    pub terms: serde_json::Value,
    /// The terms `terms` was written from, when the caller has them (the engine does): the
    /// contract's first read then shares them instead of parsing the stored text again, which
    /// also compiles the terms' output schemas (a paid hire's first read of its contract was
    /// 3.4 % of the gateway's CPU at c=8, `--bench official_client`).
    pub parsed_terms: Option<Arc<ContractTerms>>,
    /// Canonical hash of the terms.
    pub terms_hash: String,
    /// Gateway signature over the terms.
    pub gateway_jws: String,
    /// Initial state (normally `offered`).
    pub state: ContractState,
    /// The x402 offer (`PaymentRequired` without `error`) fixed at signing.
    pub payment_offer: Option<StoredOffer>,
    /// Next time-based transition, if any.
    pub deadline_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

/// A stored contract.
#[derive(Debug, Clone, PartialEq)]
pub struct ContractRecord {
    /// Contract id.
    pub contract_id: ContractId,
    /// Seeker principal.
    pub seeker_id: PrincipalId,
    /// Worker listing id.
    pub worker_id: WorkerId,
    /// Task type hired.
    pub task_type: String,
    /// The signed terms, parsed once when the row is read (shared: every step's context holds
    /// them, and inline they would make each future that holds a record kilobytes larger).
    pub terms: Arc<ContractTerms>,
    /// The signed terms document as stored: what the API shows and `terms_hash` is over (kept
    /// beside the parsed terms so a document signed by an older release shows byte for byte;
    /// shared, as the terms are).
    pub terms_document: Arc<serde_json::Value>,
    /// Canonical hash of the terms.
    pub terms_hash: String,
    /// Gateway signature over the terms.
    pub gateway_jws: String,
    /// Current state.
    pub state: ContractState,
    /// Worker attempts used so far.
    pub attempts_used: u32,
    /// The x402 offer fixed at signing (shared, as the terms are).
    pub payment_offer: Option<Arc<StoredOffer>>,
    /// Next time-based transition.
    pub deadline_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// The id that follows this hire from proposal to receipt (`None`: proposed before it was
    /// kept).
    pub correlation_id: Option<String>,
    /// Since when a paid contract waits in its worker's queue (`None`: not queued).
    pub queued_at: Option<DateTime<Utc>>,
    /// Retries of a settlement whose outcome was unknown (each one in place: no event).
    pub settlement_retries: u32,
}

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewContractEvent {
    /// When it happened (UTC).
    pub at: DateTime<Utc>,
    /// Who caused it.
    pub actor: Actor,
    /// Request or job id that caused it.
    pub correlation_id: String,
    /// What happened, e.g. `payment_verified`.
    pub kind: EventKind,
    /// Structured details.
    pub details: serde_json::Value,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq)]
pub struct ContractEvent {
    /// Global order across contracts.
    pub event_id: i64,
    /// Contract.
    pub contract_id: ContractId,
    /// 1, 2, 3… per contract; the SSE event id.
    pub seq: i64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// Who caused it.
    pub actor: Actor,
    /// Request or job id that caused it.
    pub correlation_id: String,
    /// What happened.
    pub kind: EventKind,
    /// State before, for transitions.
    pub from_state: Option<ContractState>,
    /// State after, for transitions.
    pub to_state: Option<ContractState>,
    /// Structured details.
    pub details: serde_json::Value,
}

/// The public view of a stored event (SSE `data:`, the webhook `data` field).
impl From<ContractEvent> for LiveEvent {
    fn from(event: ContractEvent) -> Self {
        Self {
            contract_id: event.contract_id,
            seq: event.seq,
            kind: event.kind,
            at: event.at,
            actor: event.actor,
            from_state: event.from_state,
            to_state: event.to_state,
            details: event.details,
        }
    }
}

/// Outcome of [`Store::transition_contract`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The state changed; the event got this `seq`.
    Applied {
        /// Sequence number of the recorded event.
        seq: i64,
    },
    /// The contract was not in the expected state (someone else moved it first).
    StateMismatch {
        /// Its actual state.
        actual: ContractState,
    },
    /// No such contract.
    NotFound,
}

#[derive(sqlx::FromRow)]
pub(crate) struct ContractRow {
    contract_id: String,
    seeker_id: String,
    worker_id: String,
    task_type: String,
    // The documents as text: parsed only when the cache does not hold them.
    terms: String,
    terms_hash: String,
    gateway_jws: String,
    state: String,
    attempts_used: i32,
    payment_offer: Option<String>,
    deadline_at: Option<i64>,
    created_at: i64,
    updated_at: i64,
    correlation_id: Option<String>,
    queued_at: Option<i64>,
    settlement_retries: i32,
}

impl TryFrom<ContractRow> for ContractRecord {
    type Error = StoreError;

    fn try_from(row: ContractRow) -> Result<Self, Self::Error> {
        let documents =
            signed_documents(&row.terms_hash, &row.terms, row.payment_offer.as_deref())?;
        Ok(Self {
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            seeker_id: parse_id(ENTITY, &row.seeker_id)?,
            worker_id: parse_id(ENTITY, &row.worker_id)?,
            task_type: row.task_type,
            terms: documents.terms,
            terms_document: documents.terms_document,
            terms_hash: row.terms_hash,
            gateway_jws: row.gateway_jws,
            state: row
                .state
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            attempts_used: u32::try_from(row.attempts_used)
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            payment_offer: documents.payment_offer,
            deadline_at: from_millis_opt(ENTITY, row.deadline_at)?,
            created_at: from_millis(ENTITY, row.created_at)?,
            updated_at: from_millis(ENTITY, row.updated_at)?,
            correlation_id: row.correlation_id,
            queued_at: from_millis_opt(ENTITY, row.queued_at)?,
            settlement_retries: u32::try_from(row.settlement_retries)
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
        })
    }
}

#[derive(sqlx::FromRow)]
struct EventRow {
    event_id: i64,
    contract_id: String,
    seq: i64,
    at: i64,
    actor: String,
    correlation_id: String,
    kind: String,
    from_state: Option<String>,
    to_state: Option<String>,
    details: JsonText<serde_json::Value>,
}

impl TryFrom<EventRow> for ContractEvent {
    type Error = StoreError;

    fn try_from(row: EventRow) -> Result<Self, Self::Error> {
        Ok(Self {
            event_id: row.event_id,
            contract_id: parse_id(EVENT_ENTITY, &row.contract_id)?,
            seq: row.seq,
            at: from_millis(EVENT_ENTITY, row.at)?,
            actor: row
                .actor
                .parse()
                .map_err(|e| StoreError::corrupt(EVENT_ENTITY, &e))?,
            correlation_id: row.correlation_id,
            kind: row
                .kind
                .parse()
                .map_err(|e| StoreError::corrupt(EVENT_ENTITY, &e))?,
            from_state: row
                .from_state
                .as_deref()
                .map(parse_event_state)
                .transpose()?,
            to_state: row.to_state.as_deref().map(parse_event_state).transpose()?,
            details: row.details.0,
        })
    }
}

/// A state column of `contract_event`, parsed once; another spelling is corrupt.
fn parse_event_state(stored: &str) -> Result<ContractState, StoreError> {
    stored
        .parse()
        .map_err(|e| StoreError::corrupt(EVENT_ENTITY, &e))
}

/// `select` a [`ContractRow`]: the contract row and its signed documents (migration 0026), to
/// be followed by `where …`.
pub(crate) const SELECT_CONTRACTS: &str = "select contract_id, seeker_id, worker_id, task_type, \
    terms, terms_hash, gateway_jws, state, attempts_used, payment_offer, deadline_at, created_at, \
    updated_at, correlation_id, queued_at, settlement_retries \
    from contract join contract_document using (contract_id)";

/// Append an event as seq `$9`: `$1` contract, `$2` at, `$3` actor, `$4` correlation id, `$5`
/// kind, `$6` from, `$7` to, `$8` details. Seqs count 1, 2, 3… per contract; each comes from the
/// contract row's `event_seq`, bumped by the update that locks the row in the same transaction.
pub(crate) const INSERT_EVENT: &str = "insert into contract_event \
    (contract_id, seq, at, actor, correlation_id, kind, from_state, to_state, details) \
    values ($1, $9, $2, $3, $4, $5, $6, $7, $8)";

/// `update contract set state = $3 … where contract_id = $1 and state = $2`, the compare-and-set
/// every transition starts with (see `transaction::compare_and_set`); returns the seq of the
/// transition's event, no row when the contract is not in `$2`.
pub(crate) const CONTRACT_CAS: &str = "update contract set state = $3, deadline_at = $4, \
    updated_at = $5, event_seq = event_seq + 1 where contract_id = $1 and state = $2 \
    returning event_seq";

/// `update contract set event_seq = event_seq + 1 … returning event_seq`: the seq of an event
/// that moves nothing, taking the row lock a transition takes (see the module docs).
pub(crate) const COUNT_EVENT: &str = "update contract set event_seq = event_seq + 1 \
    where contract_id = $1 returning event_seq";

/// [`Store::insert_contract`]'s three inserts (the contract row, its documents, its first
/// event) as one statement on each dialect, bound in that order: as three statements in a
/// transaction they were five hand-overs to a SQLite connection's thread (see `store::script`),
/// five round trips to PostgreSQL.
struct InsertContract {
    /// PostgreSQL's: the row and the documents as data-modifying CTEs of the event's insert
    /// (the constraints and the webhook outbox trigger see all three at the statement's end).
    merged: String,
    /// SQLite's script, a transaction of its own.
    script: String,
}

static INSERT_CONTRACT: LazyLock<InsertContract> = LazyLock::new(|| {
    const CONTRACT: &str = "insert into contract (contract_id, seeker_id, worker_id, task_type, \
        terms_hash, state, attempts_used, deadline_at, created_at, updated_at, webhook_url, \
        correlation_id, event_seq) \
        values ($1, $2, $3, $4, $5, $6, 0, $7, $8, $8, $9, $10, 1)";
    const DOCUMENTS: &str = "insert into contract_document \
        (contract_id, terms, gateway_jws, payment_offer) values ($1, $2, $3, $4)";
    let documents = super::advance::shift_placeholders(DOCUMENTS, 10).0;
    let event = super::advance::shift_placeholders(INSERT_EVENT, 14).0;
    InsertContract {
        merged: format!("with offered as ({CONTRACT}), documents as ({documents}) {event}"),
        script: format!("begin immediate;\n{CONTRACT};\n{documents};\n{event};\ncommit"),
    }
});

impl Store {
    /// Create a contract and record its first event (seq 1) atomically. A second contract with
    /// the same id or terms hash is [`StoreError::Duplicate`]. The first event's correlation id
    /// becomes the contract's: every later step of the hire carries it.
    pub async fn insert_contract(
        &self,
        contract: &NewContract,
        event: &NewContractEvent,
    ) -> Result<(), StoreError> {
        // The webhook outbox trigger reads this column (migration 0008), not the terms.
        let webhook_url = contract
            .terms
            .get("webhook_url")
            .and_then(serde_json::Value::as_str);
        // The texts a `JsonText` binding writes (and fails as it fails), written here once:
        // their lengths weigh the documents remembered below.
        let unwritable =
            |error: serde_json::Error| StoreError::from(sqlx::Error::Encode(error.into()));
        let terms_text = serde_json::to_string(&contract.terms).map_err(unwritable)?;
        let offer_text = contract
            .payment_offer
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(unwritable)?;
        // The binds of `INSERT_CONTRACT`'s three inserts, in their placeholder order.
        macro_rules! bind_inserts {
            ($query:expr) => {
                crate::bind_event!(
                    $query
                        .bind(contract.contract_id.as_str())
                        .bind(contract.seeker_id.as_str())
                        .bind(contract.worker_id.as_str())
                        .bind(&contract.task_type)
                        .bind(&contract.terms_hash)
                        .bind(contract.state.as_str())
                        .bind(contract.deadline_at.map(to_millis))
                        .bind(to_millis(contract.created_at))
                        .bind(webhook_url)
                        .bind(&event.correlation_id)
                        .bind(contract.contract_id.as_str())
                        .bind(&terms_text)
                        .bind(&contract.gateway_jws)
                        .bind(offer_text.as_deref()),
                    contract.contract_id.as_str(),
                    event,
                    None::<&str>,
                    Some(contract.state.as_str())
                )
                .bind(1_i64)
            };
        }
        on_writer!(self, conn => {
            if super::merges_statements(conn) {
                bind_inserts!(sqlx::query(&INSERT_CONTRACT.merged))
                    .execute(conn)
                    .await
                    .map_err(StoreError::unique_as_duplicate(ENTITY))?;
            } else {
                let script = bind_inserts!(sqlx::query(&INSERT_CONTRACT.script));
                conn.run_script(self.script_flag(), script)
                    .await
                    .map_err(StoreError::unique_as_duplicate(ENTITY))?;
            }
            if let Some(terms) = &contract.parsed_terms {
                SIGNED_DOCUMENTS.insert(
                    contract.terms_hash.clone(),
                    SignedDocuments {
                        terms: Arc::clone(terms),
                        terms_document: Arc::new(contract.terms.clone()),
                        payment_offer: contract.payment_offer.clone().map(Arc::new),
                        bytes: text_bytes(&terms_text, offer_text.as_deref()),
                    },
                );
            }
            // Before its first event goes out: the webhook loop asks about every one.
            self.events.note_webhook(&contract.contract_id, webhook_url.is_some());
            self.publish_event(contract.contract_id.as_str(), 1, event, None, Some(contract.state));
        });
        Ok(())
    }

    /// One contract.
    pub async fn get_contract(
        &self,
        contract_id: &str,
    ) -> Result<Option<ContractRecord>, StoreError> {
        let sql = format!("{SELECT_CONTRACTS} where contract_id = $1");
        let row: Option<ContractRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(contract_id).fetch_optional(conn).await?
        });
        row.map(ContractRecord::try_from).transpose()
    }

    /// The state `contract_id` is in; `None` when it does not exist.
    /// A stored state of another spelling is [`StoreError::Corrupt`].
    pub async fn contract_state(
        &self,
        contract_id: &str,
    ) -> Result<Option<ContractState>, StoreError> {
        const SQL: &str = "select state from contract where contract_id = $1";
        let state: Option<String> = on_backend!(self, conn => {
            sqlx::query_scalar(SQL).bind(contract_id).fetch_optional(conn).await?
        });
        state.as_deref().map(parse_state).transpose()
    }

    /// Contracts whose settlement is due: `accepted` with the acceptance window over
    /// (`deadline_at <= now`), escrowed `rejected` ones whose operator dispute window is over
    /// (their void is due), and `settlement_unknown` untouched since `reconcile_before`.
    pub async fn contracts_due_for_settlement(
        &self,
        now: DateTime<Utc>,
        reconcile_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ContractRecord>, StoreError> {
        let sql = format!(
            "{SELECT_CONTRACTS} \
             where (state in ('accepted', 'rejected') and deadline_at <= $1) \
                or (state = 'settlement_unknown' and updated_at <= $2) \
             order by updated_at limit $3"
        );
        let rows: Vec<ContractRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(to_millis(now))
                .bind(to_millis(reconcile_before))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(ContractRecord::try_from).collect()
    }

    /// Move a contract from `expected_state` to `new_state` and record `event` with it, in one
    /// transaction. Concurrent callers racing on the same transition: exactly one gets
    /// [`Transition::Applied`], the others [`Transition::StateMismatch`].
    pub async fn transition_contract(
        &self,
        contract_id: &str,
        expected_state: ContractState,
        new_state: ContractState,
        new_deadline_at: Option<DateTime<Utc>>,
        event: &NewContractEvent,
    ) -> Result<Transition, StoreError> {
        self.advance_contract(
            contract_id,
            &[super::ContractStep {
                from: expected_state,
                to: new_state,
                deadline_at: new_deadline_at,
                event,
            }],
            &[],
        )
        .await
    }

    /// Record an event that does not change the state (e.g. `worker_progress`). Returns its
    /// `seq`, or `None` if the contract does not exist.
    pub async fn append_contract_event(
        &self,
        contract_id: &str,
        event: &NewContractEvent,
    ) -> Result<Option<i64>, StoreError> {
        // Both as one statement, where the dialect allows it (see `store::advance`):
        // stream relays append an event per worker event.
        const COUNT_WITH_EVENT: &str = "with counted as (update contract \
            set event_seq = event_seq + 1 where contract_id = $1 \
            returning contract_id, event_seq) \
            insert into contract_event \
            (contract_id, seq, at, actor, correlation_id, kind, from_state, to_state, details) \
            select contract_id, event_seq, $2, $3, $4, $5, null, null, $6 from counted \
            returning seq";
        let seq: Option<i64> = on_writer!(self, conn => {
            if super::merges_statements(conn) {
                sqlx::query_scalar(COUNT_WITH_EVENT)
                    .bind(contract_id)
                    .bind(to_millis(event.at))
                    .bind(event.actor.to_string())
                    .bind(&event.correlation_id)
                    .bind(event.kind.as_str())
                    .bind(JsonText(&event.details))
                    .fetch_optional(conn)
                    .await?
            } else {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let Some(seq) = append_event(&mut tx, contract_id, event).await? else {
                    return Ok(None);
                };
                tx.commit().await?;
                Some(seq)
            }
        });
        if let Some(seq) = seq {
            self.publish_event(contract_id, seq, event, None, None);
        }
        Ok(seq)
    }

    /// A contract's events with `seq > after_seq`, oldest first, at most `limit`.
    pub async fn list_contract_events(
        &self,
        contract_id: &str,
        after_seq: i64,
        limit: u32,
    ) -> Result<Vec<ContractEvent>, StoreError> {
        const SQL: &str = "select event_id, contract_id, seq, at, actor, correlation_id, kind, \
            from_state, to_state, details from contract_event \
            where contract_id = $1 and seq > $2 order by seq limit $3";
        let rows: Vec<EventRow> = on_backend!(self, conn => {
            sqlx::query_as(SQL)
                .bind(contract_id)
                .bind(after_seq)
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(ContractEvent::try_from).collect()
    }
}

/// Which contracts a listing may show: the caller's scope plus the optional filters of
/// `GET /v1/contracts`.
#[derive(Debug, Clone, Default)]
pub struct ContractQuery {
    /// Only this seeker's contracts.
    pub seeker_id: Option<PrincipalId>,
    /// Only contracts with workers of this operator.
    pub operator_id: Option<PrincipalId>,
    /// Only contracts in this state.
    pub state: Option<String>,
    /// Only contracts with this worker.
    pub worker_id: Option<WorkerId>,
    /// Created at or after this time.
    pub created_after: Option<DateTime<Utc>>,
    /// Created strictly before this time.
    pub created_before: Option<DateTime<Utc>>,
    /// Resume strictly after this `(created_at, contract_id)` position (newest first).
    pub after: Option<(DateTime<Utc>, ContractId)>,
    /// Page size.
    pub limit: u32,
}

impl Store {
    /// Contracts matching `query`, newest first (`created_at`, then `contract_id`, both
    /// descending, so rows created in the same millisecond keep a total order and a cursor never
    /// skips or repeats one). Contract ids are fixed-length prefixed ULIDs (digits and capitals),
    /// which every collation orders like bytes, so both backends page identically.
    pub async fn list_contracts(
        &self,
        query: &ContractQuery,
    ) -> Result<Vec<ContractRecord>, StoreError> {
        let sql = format!(
            "{SELECT_CONTRACTS} \
             where ($1 is null or seeker_id = $1) \
               and ($2 is null or worker_id in (select worker_id from worker where operator_id = $2)) \
               and ($3 is null or state = $3) \
               and ($4 is null or worker_id = $4) \
               and ($5 is null or created_at >= $5) \
               and ($6 is null or created_at < $6) \
               and ($7 is null or created_at < $7 or (created_at = $7 and contract_id < $8)) \
             order by created_at desc, contract_id desc limit $9"
        );
        let (after_at, after_id) = match &query.after {
            Some((at, id)) => (Some(to_millis(*at)), Some(id.as_str())),
            None => (None, None),
        };
        let rows: Vec<ContractRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(query.seeker_id.as_ref().map(PrincipalId::as_str))
                .bind(query.operator_id.as_ref().map(PrincipalId::as_str))
                .bind(query.state.as_deref())
                .bind(query.worker_id.as_ref().map(WorkerId::as_str))
                .bind(query.created_after.map(to_millis))
                .bind(query.created_before.map(to_millis))
                .bind(after_at)
                .bind(after_id)
                .bind(i64::from(query.limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(ContractRecord::try_from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Migration 0026 moves a stored contract's documents to `contract_document` byte for byte
    /// and leaves the rest of its row as it was: a gateway upgraded with contracts in flight
    /// reads them as they were signed.
    #[tokio::test]
    async fn an_upgrade_moves_a_contracts_documents_unchanged() {
        use sqlx::{
            Row as _,
            sqlite::{SqliteConnectOptions, SqlitePool},
        };
        let folder = std::env::temp_dir().join(format!("hiregate-upgrade-{}", ulid::Ulid::new()));
        let before = folder.join("migrations");
        std::fs::create_dir_all(&before).unwrap();
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/sqlite");
        for file in std::fs::read_dir(&shipped).unwrap() {
            let file = file.unwrap();
            if file.file_name().to_string_lossy().as_ref() < "0026" {
                std::fs::copy(file.path(), before.join(file.file_name())).unwrap();
            }
        }
        let options = SqliteConnectOptions::new()
            .filename(folder.join("gateway.db"))
            .create_if_missing(true)
            // The contract's listing is not part of what this test moves.
            .foreign_keys(false);
        let pool = SqlitePool::connect_with(options).await.unwrap();
        sqlx::migrate::Migrator::new(before.as_path())
            .await
            .unwrap()
            .run(&pool)
            .await
            .unwrap();
        let terms = r#"{"task":{"type":"summarize"},"input":{"text":"\u0000 and é"}}"#;
        let offer = r#"{"x402Version":2,"accepts":[]}"#;
        sqlx::query(
            "insert into contract (contract_id, seeker_id, worker_id, task_type, terms, \
             terms_hash, gateway_jws, state, attempts_used, payment_offer, deadline_at, \
             created_at, updated_at, webhook_url, correlation_id, event_seq) values \
             ('ct_1', 'sk_1', 'wk_1', 'summarize', $1, 'hash', 'jws.over.terms', 'executing', \
             1, $2, 7, 5, 6, 'https://seeker.example/hook', 'req_1', 4)",
        )
        .bind(terms)
        .bind(offer)
        .execute(&pool)
        .await
        .unwrap();

        // The shipped migrations find 0001 to 0025 applied and run the rest.
        crate::SQLITE_MIGRATOR.run(&pool).await.unwrap();
        let documents = sqlx::query("select * from contract_document")
            .fetch_all(&pool)
            .await
            .unwrap();
        assert_eq!(documents.len(), 1);
        assert_eq!(documents[0].get::<String, _>("contract_id"), "ct_1");
        assert_eq!(documents[0].get::<String, _>("terms"), terms);
        assert_eq!(
            documents[0].get::<String, _>("gateway_jws"),
            "jws.over.terms"
        );
        assert_eq!(
            documents[0]
                .get::<Option<String>, _>("payment_offer")
                .as_deref(),
            Some(offer)
        );
        let row = sqlx::query(
            "select state, attempts_used, deadline_at, created_at, updated_at, webhook_url, \
             correlation_id, event_seq, terms_hash from contract",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(row.get::<String, _>("state"), "executing");
        assert_eq!(
            (
                row.get::<i64, _>("attempts_used"),
                row.get::<i64, _>("deadline_at"),
                row.get::<i64, _>("created_at"),
                row.get::<i64, _>("updated_at"),
                row.get::<i64, _>("event_seq"),
            ),
            (1, 7, 5, 6, 4)
        );
        assert_eq!(row.get::<String, _>("terms_hash"), "hash");
        assert_eq!(row.get::<String, _>("correlation_id"), "req_1");
        assert_eq!(
            row.get::<String, _>("webhook_url"),
            "https://seeker.example/hook"
        );
        let columns: Vec<String> = sqlx::query("select name from pragma_table_info('contract')")
            .fetch_all(&pool)
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        for moved in ["terms", "gateway_jws", "payment_offer"] {
            assert!(!columns.iter().any(|c| c == moved), "{columns:?}");
        }
        pool.close().await;
        std::fs::remove_dir_all(&folder).unwrap();
    }

    fn event_row(from_state: Option<&str>, to_state: Option<&str>) -> EventRow {
        EventRow {
            event_id: 1,
            contract_id: ContractId::generate().to_string(),
            seq: 2,
            at: 0,
            actor: "gateway".to_owned(),
            correlation_id: "req_1".to_owned(),
            kind: "payment_verified".to_owned(),
            from_state: from_state.map(str::to_owned),
            to_state: to_state.map(str::to_owned),
            details: JsonText(serde_json::json!({})),
        }
    }

    #[test]
    fn an_event_row_is_parsed_once() {
        let event = ContractEvent::try_from(event_row(Some("offered"), Some("paid"))).unwrap();
        assert_eq!(event.from_state, Some(ContractState::Offered));
        assert_eq!(event.to_state, Some(ContractState::Paid));
        let note = ContractEvent::try_from(event_row(None, None)).unwrap();
        assert_eq!((note.from_state, note.to_state), (None, None));
    }

    /// `row` is refused as a corrupt event row; `what` names the spelling under test.
    fn assert_corrupt_event(row: EventRow, what: &str) {
        let error = ContractEvent::try_from(row).unwrap_err();
        assert!(
            matches!(
                error,
                StoreError::Corrupt {
                    entity: EVENT_ENTITY,
                    ..
                }
            ),
            "{what:?}: {error}"
        );
    }

    #[test]
    fn an_event_row_with_another_kind_spelling_is_corrupt() {
        let event = ContractEvent::try_from(event_row(None, None)).unwrap();
        assert_eq!(event.kind, EventKind::PaymentVerified);
        for kind in ["Payment_Verified", "payment_verified ", "state_changed", ""] {
            let row = EventRow {
                kind: kind.to_owned(),
                ..event_row(None, None)
            };
            assert_corrupt_event(row, kind);
        }
    }

    #[test]
    fn an_event_row_with_another_actor_spelling_is_corrupt() {
        let worker = WorkerId::generate();
        let row = EventRow {
            actor: format!("worker:{worker}"),
            ..event_row(None, None)
        };
        assert_eq!(
            ContractEvent::try_from(row).unwrap().actor,
            Actor::Worker(worker.clone())
        );
        for actor in [
            "Gateway".to_owned(),
            "facilitator".to_owned(),
            format!("seeker:{worker}"),
            "worker:wk_x".to_owned(),
            String::new(),
        ] {
            let row = EventRow {
                actor: actor.clone(),
                ..event_row(None, None)
            };
            assert_corrupt_event(row, &actor);
        }
    }

    #[test]
    fn an_event_row_with_another_state_spelling_is_corrupt() {
        for (from, to) in [
            (Some("Offered"), Some("paid")),
            (Some("offered"), Some("payed")),
        ] {
            let error = ContractEvent::try_from(event_row(from, to)).unwrap_err();
            assert!(
                matches!(
                    error,
                    StoreError::Corrupt {
                        entity: EVENT_ENTITY,
                        ..
                    }
                ),
                "{error}"
            );
        }
    }
}
