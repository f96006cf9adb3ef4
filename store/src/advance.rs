//! Moving a contract through one or more lifecycle steps together with the rows those steps
//! write ([`Store::advance_contract`]): the commit every step of a paid hire ends in.
//!
//! PostgreSQL runs them as one statement: a data-modifying CTE (`moved`) does the
//! compare-and-set for the whole chain of steps, and every event and side write is a sibling
//! CTE that writes only when `moved` returned the row. A single statement is atomic on its
//! own, so it needs no `BEGIN`/`COMMIT`: a paid hire's four commits (payment, delivery, verdict,
//! settlement) cost four round trips there instead of twenty. SQLite, which has no
//! data-modifying CTEs, runs the same statements as one script in its own transaction (see
//! `store::script`): the compare-and-set, then `moved` filled from the row only if it changed,
//! then the events and side writes, read from and guarded by `moved` as on PostgreSQL.
//!
//! Each side write's SQL is written once, as a template with a `{guard}` condition: `true` on
//! its own, `exists (select 1 from moved)` after a compare-and-set, where its placeholders
//! are also moved past the ones taken before it.

use chrono::{DateTime, Utc};

use super::hire_values::{
    AttemptEnd, AuthorizationOutcome, NewDeliverable, NewVerification, SettlementOutcome,
};
use hiregate_contracts::{id::PaymentId, state::ContractState};
use sqlx::{Database, Encode, Executor, IntoArguments, Type};

use super::script::Scripts as _;
use super::{
    NewContractEvent, NewDispute, NewPayment, Store, StoreError, Transition, json::JsonText,
    on_writer, to_millis, transaction::compare_and_set,
};

/// One step of [`Store::advance_contract`].
#[derive(Debug, Clone, Copy)]
pub struct ContractStep<'a> {
    /// The state the contract must be in.
    pub from: ContractState,
    /// The state it moves to.
    pub to: ContractState,
    /// Its new `deadline_at`.
    pub deadline_at: Option<DateTime<Utc>>,
    /// The event recorded with the step.
    pub event: &'a NewContractEvent,
}

/// A row written with [`Store::advance_contract`]'s steps, in one statement.
#[derive(Debug, Clone, Copy)]
pub enum SideWrite<'a> {
    /// A deliverable piece; one stored before (same attempt and position) is left as it is.
    Deliverable(&'a NewDeliverable),
    /// How an attempt ended.
    AttemptEnd {
        /// The attempt.
        attempt_id: &'a str,
        /// Its end.
        end: &'a AttemptEnd,
    },
    /// A verification result.
    Verification(&'a NewVerification),
    /// A dispute opened (a second one of the contract is [`StoreError::Duplicate`]).
    Dispute(&'a NewDispute),
    /// A verified payment (one whose authorization or payment identifier is stored already is
    /// [`StoreError::Duplicate`]).
    Payment(&'a NewPayment),
    /// The contract's payment is being settled (`settling`, its first start kept): written
    /// with the step to `settling`, before anything is sent.
    SettlementBegun {
        /// The contract.
        contract_id: &'a str,
        /// Its payment.
        payment_id: &'a PaymentId,
        /// When.
        at: DateTime<Utc>,
        /// A metered (`upto`) payment: the amount to settle, what was verified, replacing the
        /// signed maximum as the payment's `amount` (the maximum stays in its payload). `None`
        /// keeps the amount.
        amount: Option<&'a str>,
    },
    /// How an escrowed payment's `authorize` ended: its state and transaction.
    AuthorizationFinished {
        /// The payment.
        payment_id: &'a PaymentId,
        /// The outcome.
        outcome: &'a AuthorizationOutcome<'a>,
        /// When.
        at: DateTime<Utc>,
    },
    /// How the payment's settlement ended: its state, transaction and the facilitator's answer.
    SettlementFinished {
        /// The payment.
        payment_id: &'a PaymentId,
        /// The outcome.
        outcome: &'a SettlementOutcome,
        /// When.
        at: DateTime<Utc>,
    },
}

/// A deliverable stored before (same attempt and position) is left as it is: reports of one
/// attempt can arrive twice (poll and callback, a takeover). SQLite needs the `where` before
/// `on conflict` of an `insert … select` to parse it.
const DELIVERABLE: &str = "insert into deliverable (deliverable_id, contract_id, \
    attempt_id, position, name, kind, media_type, digest, size_bytes, content, \
    source_url, created_at) \
    select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 where {guard} on conflict do nothing";
const ATTEMPT_END: &str = "update attempt set state = $2, http_status = $3, error = $4, \
    worker_task_id = $5, poll_url = $6, finished_at = $7, worker_metadata = $8, \
    estimated_completion = $9 where attempt_id = $1 and {guard}";
const VERIFICATION: &str = "insert into verification (verification_id, contract_id, \
    attempt_id, policy_id, policy_version, policy_hash, passed, score, reason_codes, \
    status, verifier_result_hash, result, created_at) \
    select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 where {guard}";
const DISPUTE: &str = "insert into dispute (dispute_id, contract_id, party, \
    opened_by, reason, claim, state, created_at) \
    select $1, $2, $3, $4, $5, $6, 'open', $7 where {guard}";
const PAYMENT: &str = "insert into payment (payment_id, contract_id, network, asset, payer, \
    nonce, amount, valid_after, valid_before, payload, payload_hash, payment_identifier, \
    state, created_at, updated_at) \
    select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14 where {guard}";
const SETTLEMENT_BEGUN: &str = "update payment set state = 'settling', \
    updated_at = $2, settle_started_at = coalesce(settle_started_at, $2), \
    amount = coalesce($4, amount) where payment_id = $1 and contract_id = $3 and {guard}";
const AUTHORIZATION_FINISHED: &str = "update payment set state = $2, \
    authorize_tx = coalesce($3, authorize_tx), updated_at = $4 where payment_id = $1 and {guard}";
const SETTLEMENT_FINISHED: &str = "update payment set state = $2, \
    settle_tx = coalesce($3, settle_tx), settle_response = coalesce($4, settle_response), \
    updated_at = $5, remainder_tx = coalesce($6, remainder_tx) where payment_id = $1 and {guard}";

/// The guard of a side write run as its own statement.
const ALONE: &str = "true";
/// The guard of a side write after the compare-and-set: write only if the steps applied.
const AFTER_MOVED: &str = "exists (select 1 from moved)";

impl SideWrite<'_> {
    fn template(&self) -> &'static str {
        match self {
            Self::Deliverable(_) => DELIVERABLE,
            Self::AttemptEnd { .. } => ATTEMPT_END,
            Self::Verification(_) => VERIFICATION,
            Self::Dispute(_) => DISPUTE,
            Self::Payment(_) => PAYMENT,
            Self::SettlementBegun { .. } => SETTLEMENT_BEGUN,
            Self::AuthorizationFinished { .. } => AUTHORIZATION_FINISHED,
            Self::SettlementFinished { .. } => SETTLEMENT_FINISHED,
        }
    }

    /// The statement run on its own.
    pub(crate) fn sql_alone(&self) -> String {
        fill(self.template(), ALONE, 0).0
    }

    /// What a unique violation of this statement means: a second dispute of the contract, a
    /// payment stored already, a second settling payment of the contract.
    fn duplicate_of(&self) -> Option<&'static str> {
        match self {
            Self::Dispute(_) => Some("dispute"),
            Self::Payment(_) | Self::SettlementBegun { .. } => Some("payment"),
            _ => None,
        }
    }

    /// Map a database error of a statement holding `writes`.
    pub(crate) fn error_of<'s>(
        writes: impl IntoIterator<Item = &'s SideWrite<'s>>,
    ) -> impl Fn(sqlx::Error) -> StoreError {
        let entity = writes.into_iter().find_map(SideWrite::duplicate_of);
        move |error| match entity {
            Some(entity) => StoreError::unique_as_duplicate(entity)(error),
            None => StoreError::Database(error),
        }
    }
}

/// `template` with `{guard}` filled in and every `$n` moved to `$(n + offset)`; also the
/// highest placeholder it holds (before the move), i.e. how many binds it takes.
fn fill(template: &str, guard: &str, offset: usize) -> (String, usize) {
    let template = template.replace("{guard}", guard);
    shift_placeholders(&template, offset)
}

/// `template` with every `$n` moved to `$(n + offset)`, for a statement whose binds follow
/// others'; also the highest placeholder it holds before the move.
pub(super) fn shift_placeholders(template: &str, offset: usize) -> (String, usize) {
    let mut sql = String::with_capacity(template.len() + 16);
    let mut highest = 0;
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        sql.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let n: usize = rest[..digits].parse().unwrap_or(0);
        highest = highest.max(n);
        sql.push_str(&(n + offset).to_string());
        rest = &rest[digits..];
    }
    sql.push_str(rest);
    (sql, highest)
}

/// Bind a [`SideWrite`]'s values, in its template's placeholder order, onto `$query`. A macro
/// (it neither returns nor locks) because it binds onto the query of the statement alone and
/// onto the merged statement and script of [`Store::advance_contract`], three query types.
macro_rules! bind_side_write {
    ($query:expr, $statement:expr) => {
        match $statement {
            $crate::SideWrite::Deliverable(piece) => $query
                .bind(piece.deliverable_id.as_str())
                .bind(piece.contract_id.as_str())
                .bind(piece.attempt_id.as_str())
                .bind(i32::try_from(piece.position).unwrap_or(i32::MAX))
                .bind(piece.name.as_deref())
                .bind(piece.kind.as_str())
                .bind(piece.media_type.as_deref())
                .bind(&piece.digest)
                .bind(i64::try_from(piece.content.len()).unwrap_or(i64::MAX))
                .bind(&piece.content)
                .bind(piece.source_url.as_deref())
                .bind($crate::to_millis(piece.created_at)),
            $crate::SideWrite::AttemptEnd { attempt_id, end } => $query
                .bind(attempt_id)
                .bind(end.state.as_str())
                .bind(end.http_status.map(i32::from))
                .bind(end.error.as_ref().map($crate::json::JsonText))
                .bind(end.worker_task_id.as_deref())
                .bind(end.poll_url.as_deref())
                .bind(end.finished_at.map($crate::to_millis))
                .bind(end.worker_metadata.as_ref().map($crate::json::JsonText))
                .bind(end.estimated_completion.as_deref()),
            $crate::SideWrite::Verification(result) => $query
                .bind(result.verification_id.as_str())
                .bind(result.contract_id.as_str())
                .bind(&result.attempt_id)
                .bind(&result.policy_id)
                .bind(&result.policy_version)
                .bind(&result.policy_hash)
                .bind(result.passed)
                .bind(result.score)
                .bind($crate::json::JsonText(&result.reason_codes))
                .bind(&result.status)
                .bind(&result.verifier_result_hash)
                .bind($crate::json::JsonText(&result.result))
                .bind($crate::to_millis(result.created_at)),
            $crate::SideWrite::Dispute(dispute) => $query
                .bind(dispute.dispute_id.as_str())
                .bind(dispute.contract_id.as_str())
                .bind(dispute.party.as_str())
                .bind(dispute.opened_by.to_string())
                .bind(&dispute.reason)
                .bind(dispute.claim.as_ref().map($crate::json::JsonText))
                .bind($crate::to_millis(dispute.created_at)),
            $crate::SideWrite::Payment(payment) => $query
                .bind(payment.payment_id.as_str())
                .bind(payment.contract_id.as_str())
                .bind(payment.network.as_str())
                .bind($crate::stored_address(&payment.asset))
                .bind($crate::stored_address(&payment.payer))
                .bind(&payment.nonce)
                .bind(&payment.amount)
                .bind(payment.valid_after)
                .bind(payment.valid_before)
                .bind($crate::json::JsonText(&payment.payload))
                .bind(&payment.payload_hash)
                .bind(payment.payment_identifier.as_deref())
                .bind(payment.state.as_str())
                .bind($crate::to_millis(payment.created_at)),
            $crate::SideWrite::SettlementBegun {
                contract_id,
                payment_id,
                at,
                amount,
            } => $query
                .bind(payment_id.as_str())
                .bind($crate::to_millis(at))
                .bind(contract_id)
                .bind(amount),
            $crate::SideWrite::AuthorizationFinished {
                payment_id,
                outcome,
                at,
            } => $query
                .bind(payment_id.as_str())
                .bind(outcome.payment_state.as_str())
                .bind(outcome.transaction)
                .bind($crate::to_millis(at)),
            $crate::SideWrite::SettlementFinished {
                payment_id,
                outcome,
                at,
            } => $query
                .bind(payment_id.as_str())
                .bind(outcome.payment_state.as_str())
                .bind(outcome.transaction.as_deref())
                .bind(outcome.response.as_ref().map($crate::json::JsonText))
                .bind($crate::to_millis(at))
                .bind(outcome.remainder_transaction.as_deref()),
        }
    };
}

/// Apply one [`SideWrite`] as its own statement on `executor` (a pool, or a transaction's
/// connection) of either driver; a unique violation is what [`SideWrite::error_of`] says. The
/// `where` clause lists the types the side writes bind, which both drivers encode (each its own
/// `Option`s).
pub(crate) async fn apply_side_write<'e, DB, E>(
    executor: E,
    write: SideWrite<'_>,
) -> Result<(), StoreError>
where
    DB: Database,
    E: Executor<'e, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    bool: Type<DB> + for<'q> Encode<'q, DB>,
    i32: Type<DB> + for<'q> Encode<'q, DB>,
    i64: Type<DB> + for<'q> Encode<'q, DB>,
    f64: Type<DB> + for<'q> Encode<'q, DB>,
    String: Type<DB> + for<'q> Encode<'q, DB>,
    Vec<u8>: Type<DB> + for<'q> Encode<'q, DB>,
    for<'q> &'q str: Type<DB> + Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    Option<i32>: for<'q> Encode<'q, DB>,
    Option<i64>: for<'q> Encode<'q, DB>,
    for<'q> Option<JsonText<&'q serde_json::Value>>: Encode<'q, DB>,
{
    let sql = write.sql_alone();
    bind_side_write!(sqlx::query(&sql), write)
        .execute(executor)
        .await
        .map_err(SideWrite::error_of([&write]))?;
    Ok(())
}

/// The compare-and-set of a whole chain of steps: `$1` contract, `$2` first `from`, `$3` last
/// `to`, `$4` last deadline, `$5` last event's time, `$6` the step count. Returns the last
/// event's seq, no row when the contract is not in the first step's `from`.
const CHAIN_CAS: &str = "update contract set state = $3, deadline_at = $4, updated_at = $5, \
    event_seq = event_seq + $6 where contract_id = $1 and state = $2 returning event_seq";
/// Binds [`CHAIN_CAS`] takes, before the events'.
const STEP_BINDS: usize = 6;
/// Binds each event takes: its time, actor, correlation id, kind, from, to and details.
const EVENT_BINDS: usize = 7;

/// The statements that follow [`CHAIN_CAS`]: each step's event, numbered back from the
/// `event_seq` in `moved`, then each side write, guarded by `moved` holding the row; their
/// placeholders follow the compare-and-set's, in the order [`Store::advance_contract`] binds
/// them.
fn following_statements(steps: usize, writes: &[SideWrite<'_>]) -> Vec<String> {
    let mut statements = Vec::with_capacity(steps + writes.len());
    let mut taken = STEP_BINDS;
    for step in 0..steps {
        let p = |k: usize| taken + k;
        statements.push(format!(
            "insert into contract_event (contract_id, seq, at, actor, correlation_id, kind, \
             from_state, to_state, details) select $1, event_seq - {back}, ${}, ${}, ${}, ${}, \
             ${}, ${}, ${} from moved",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7),
            back = steps - 1 - step,
        ));
        taken += EVENT_BINDS;
    }
    for write in writes {
        let (filled, binds) = fill(write.template(), AFTER_MOVED, taken);
        statements.push(filled);
        taken += binds;
    }
    statements
}

/// The PostgreSQL statement of [`Store::advance_contract`]: [`CHAIN_CAS`] as the CTE `moved`,
/// and every event and side write as a sibling CTE that writes only if `moved` returned the
/// row. Returns what the compare-and-set returns.
fn merged_statement(steps: usize, writes: &[SideWrite<'_>]) -> String {
    let mut sql = format!("with moved as ({CHAIN_CAS})");
    for (index, statement) in following_statements(steps, writes).iter().enumerate() {
        sql.push_str(&format!(", write_{index} as ({statement})"));
    }
    sql.push_str(" select event_seq from moved");
    sql
}

/// The SQLite script of [`Store::advance_contract`], a transaction of its own (see
/// `store::script`): [`CHAIN_CAS`], which returns what the merged statement returns; `moved`
/// filled with the contract's new `event_seq` only if it changed the row (`changes()` is the
/// count of the statement before); the merged statement's events and side writes, which read
/// and are guarded by `moved` as there; `moved` emptied for the connection's next script.
fn sqlite_script(steps: usize, writes: &[SideWrite<'_>]) -> String {
    let mut statements = vec![
        "begin immediate".to_owned(),
        CHAIN_CAS.to_owned(),
        "insert into moved (event_seq) select event_seq from contract \
         where contract_id = $1 and changes() = 1"
            .to_owned(),
    ];
    statements.extend(following_statements(steps, writes));
    statements.push("delete from moved".to_owned());
    statements.push("commit".to_owned());
    statements.join(";\n")
}

/// Whether each step starts where the one before ends: what lets the merged statement do the
/// whole chain as one compare-and-set.
fn chained(steps: &[ContractStep<'_>]) -> bool {
    steps.windows(2).all(|pair| pair[0].to == pair[1].from)
}

impl Store {
    /// Move `contract_id` through `steps` (each a compare-and-set from the previous step's
    /// state, with its event) and apply `writes`, atomically: what several lifecycle steps
    /// that follow each other at once (a deliverable stored, its attempt closed, `delivered`,
    /// `verifying`) cost as one commit. Nothing is written when the first compare-and-set
    /// misses ([`Transition::StateMismatch`]) or a write fails.
    pub async fn advance_contract(
        &self,
        contract_id: &str,
        steps: &[ContractStep<'_>],
        writes: &[SideWrite<'_>],
    ) -> Result<Transition, StoreError> {
        let (Some(first), Some(last)) = (steps.first(), steps.last()) else {
            return Err(StoreError::corrupt("contract", &"a move of no steps"));
        };
        let count = i64::try_from(steps.len()).unwrap_or(i64::MAX);
        macro_rules! bind_cas {
            ($query:expr) => {
                $query
                    .bind(contract_id)
                    .bind(first.from.as_str())
                    .bind(last.to.as_str())
                    .bind(last.deadline_at.map(to_millis))
                    .bind(to_millis(last.event.at))
                    .bind(count)
            };
        }
        // [`CHAIN_CAS`]'s binds, then each event's, then each side write's.
        macro_rules! bind_chain {
            ($query:expr) => {{
                let mut query = bind_cas!($query);
                for step in steps {
                    query = query
                        .bind(to_millis(step.event.at))
                        .bind(step.event.actor.to_string())
                        .bind(&step.event.correlation_id)
                        .bind(step.event.kind.as_str())
                        .bind(step.from.as_str())
                        .bind(step.to.as_str())
                        .bind(JsonText(&step.event.details));
                }
                for write in writes {
                    query = bind_side_write!(query, *write);
                }
                query
            }};
        }
        let seqs_up_to =
            |last_seq: i64| -> Vec<i64> { (1..=count).map(|k| last_seq - count + k).collect() };
        // `None`: the first compare-and-set missed; why is read once the writer is free.
        let seqs: Option<Vec<i64>> = on_writer!(self, conn => {
            if !chained(steps) {
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let mut seqs = Vec::with_capacity(steps.len());
                for step in steps {
                    let moved = compare_and_set(
                        &mut tx,
                        contract_id,
                        step.from,
                        step.to,
                        step.deadline_at.map(to_millis),
                        step.event,
                    )
                    .await?;
                    match moved {
                        Transition::Applied { seq } => seqs.push(seq),
                        // Dropping the transaction rolls back the steps before.
                        missed => return Ok(missed),
                    }
                }
                for write in writes {
                    apply_side_write(&mut *tx, *write).await?;
                }
                tx.commit().await?;
                Some(seqs)
            } else if super::merges_statements(conn) {
                let sql = merged_statement(steps.len(), writes);
                let last_seq = bind_chain!(sqlx::query_scalar::<_, i64>(&sql))
                    .fetch_optional(conn)
                    .await
                    .map_err(SideWrite::error_of(writes))?;
                last_seq.map(seqs_up_to)
            } else {
                let script = sqlite_script(steps.len(), writes);
                let rows = conn.run_script(self.script_flag(), bind_chain!(sqlx::query(&script)))
                    .await
                    .map_err(SideWrite::error_of(writes))?;
                match rows.first() {
                    Some(moved) => Some(seqs_up_to(sqlx::Row::try_get(moved, 0)?)),
                    None => None,
                }
            }
        });
        let Some(seqs) = seqs else {
            return self.state_mismatch(contract_id).await;
        };
        for (step, seq) in steps.iter().zip(&seqs) {
            self.publish_event(
                contract_id,
                *seq,
                step.event,
                Some(step.from),
                Some(step.to),
            );
        }
        Ok(Transition::Applied {
            seq: seqs.last().copied().unwrap_or_default(),
        })
    }

    /// Why a compare-and-set on `contract_id` changed nothing: the state it is in, or that it
    /// does not exist.
    async fn state_mismatch(&self, contract_id: &str) -> Result<Transition, StoreError> {
        Ok(match self.contract_state(contract_id).await? {
            Some(actual) => Transition::StateMismatch { actual },
            None => Transition::NotFound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_moves_every_placeholder_and_counts_them() {
        let (sql, binds) = fill(PAYMENT, AFTER_MOVED, 20);
        assert_eq!(binds, 14);
        assert!(sql.contains("select $21, $22,"), "{sql}");
        assert!(
            sql.ends_with("$34, $34 where exists (select 1 from moved)"),
            "{sql}"
        );
        assert!(!sql.contains("{guard}"));
    }

    #[test]
    fn fill_alone_keeps_the_placeholders() {
        let (sql, binds) = fill(SETTLEMENT_BEGUN, ALONE, 0);
        assert_eq!(binds, 4);
        assert!(
            sql.ends_with("where payment_id = $1 and contract_id = $3 and true"),
            "{sql}"
        );
    }

    #[test]
    fn the_merged_statement_numbers_events_then_writes() {
        let sql = merged_statement(2, &[]);
        // Two events of seven binds after the six of the compare-and-set.
        assert!(
            sql.contains("event_seq - 1, $7, $8, $9, $10, $11, $12, $13 from moved"),
            "{sql}"
        );
        assert!(
            sql.contains("event_seq - 0, $14, $15, $16, $17, $18, $19, $20 from moved"),
            "{sql}"
        );
        assert!(sql.ends_with("select event_seq from moved"));
    }

    #[test]
    fn the_sqlite_script_runs_the_merged_statements_in_its_own_transaction() {
        let payment = NewPayment {
            payment_id: PaymentId::generate(),
            contract_id: hiregate_contracts::id::ContractId::generate(),
            network: hiregate_contracts::money::Network::eip155(31337).unwrap(),
            asset: alloy::primitives::Address::repeat_byte(0xaa),
            payer: alloy::primitives::Address::repeat_byte(0x01),
            nonce: "0x01".to_owned(),
            amount: "1".to_owned(),
            valid_after: 0,
            valid_before: 1,
            payload: serde_json::json!({}),
            payload_hash: "hash".to_owned(),
            payment_identifier: None,
            state: crate::states::PaymentState::Verified,
            created_at: Utc::now(),
        };
        let writes = [SideWrite::Payment(&payment)];
        let script = sqlite_script(1, &writes);
        let statements: Vec<&str> = script.split(";\n").collect();
        assert_eq!(statements.len(), 7, "{script}");
        assert_eq!(statements[..2], ["begin immediate", CHAIN_CAS], "{script}");
        assert!(statements[2].starts_with("insert into moved"), "{script}");
        assert_eq!(statements[5..], ["delete from moved", "commit"], "{script}");
        // The event and the payment are the merged statement's, numbered alike.
        let merged = merged_statement(1, &writes);
        for statement in &statements[3..5] {
            assert!(
                merged.contains(&format!("({statement})")),
                "{statement}\n{merged}"
            );
        }
        assert!(
            statements[3].ends_with("$7, $8, $9, $10, $11, $12, $13 from moved"),
            "{script}"
        );
        assert!(
            statements[4].ends_with("$27, $27 where exists (select 1 from moved)"),
            "{script}"
        );
    }
}
