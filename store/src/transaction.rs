//! The statements a contract's transaction is made of, as functions over either driver's
//! connection: the compare-and-set of one step ([`compare_and_set`]), what a missed one found
//! ([`state_after_miss`]), and the event's append ([`insert_event`], or [`append_event`] for an
//! event that moves nothing). Each sends exactly one statement (the compare-and-set two when it
//! misses, [`append_event`] two: the count, then the insert) and returns what it found; the
//! caller decides what a miss means, commits, and publishes.
//!
//! They are generic over the `sqlx` database so that one body serves both drivers; the `where`
//! clauses list what they bind and read (text, integers, and their `Option`s, whose encoding
//! each driver implements itself), which both drivers provide. A trait's `where` clause is not
//! implied where the trait is used, so each function states its own.

use hiregate_contracts::state::ContractState;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};

use crate::{
    NewContractEvent, StoreError, Transition,
    contracts::{CONTRACT_CAS, COUNT_EVENT, INSERT_EVENT},
    to_millis,
};

/// Entity named by a corrupt state read back after a miss.
const ENTITY: &str = "contract";

/// Move `contract_id` `from → to` (compare-and-set, with its new `deadline` in Unix
/// milliseconds) and append `event` to its log: [`Transition::Applied`] with the event's seq,
/// or, when the contract is not in `from`, what [`state_after_miss`] found (nothing written).
/// Two statements (`contracts::CONTRACT_CAS`, then [`insert_event`]); the seq comes from the
/// row the update locked. On PostgreSQL `Store::advance_contract` folds a chain of steps into
/// one statement instead (see `store::advance`).
pub(crate) async fn compare_and_set<DB>(
    transaction: &mut sqlx::Transaction<'_, DB>,
    contract_id: &str,
    from: ContractState,
    to: ContractState,
    deadline: Option<i64>,
    event: &NewContractEvent,
) -> Result<Transition, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    i64: Type<DB> + for<'r> Decode<'r, DB> + for<'q> Encode<'q, DB>,
    Option<i64>: for<'q> Encode<'q, DB>,
    String: Type<DB> + for<'r> Decode<'r, DB> + for<'q> Encode<'q, DB>,
    for<'q> &'q str: Type<DB> + Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
{
    let seq: Option<i64> = sqlx::query_scalar(CONTRACT_CAS)
        .bind(contract_id)
        .bind(from.as_str())
        .bind(to.as_str())
        .bind(deadline)
        .bind(to_millis(event.at))
        .fetch_optional(&mut **transaction)
        .await?;
    let Some(seq) = seq else {
        return state_after_miss(transaction, contract_id).await;
    };
    insert_event(transaction, contract_id, seq, event, Some(from), Some(to)).await?;
    Ok(Transition::Applied { seq })
}

/// After a compare-and-set on `contract` changed no row, in the same transaction: the state
/// the contract is in ([`Transition::StateMismatch`]), or [`Transition::NotFound`]. A stored
/// state of another spelling is [`StoreError::Corrupt`].
pub(crate) async fn state_after_miss<DB>(
    transaction: &mut sqlx::Transaction<'_, DB>,
    contract_id: &str,
) -> Result<Transition, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    String: Type<DB> + for<'r> Decode<'r, DB>,
    for<'q> &'q str: Type<DB> + Encode<'q, DB>,
{
    let actual: Option<String> =
        sqlx::query_scalar("select state from contract where contract_id = $1")
            .bind(contract_id)
            .fetch_optional(&mut **transaction)
            .await?;
    Ok(match actual {
        Some(actual) => Transition::StateMismatch {
            actual: parse_state(&actual)?,
        },
        None => Transition::NotFound,
    })
}

/// A stored contract state, parsed once; another spelling is [`StoreError::Corrupt`].
pub(crate) fn parse_state(stored: &str) -> Result<ContractState, StoreError> {
    stored.parse().map_err(|e| StoreError::corrupt(ENTITY, &e))
}

/// Append `event` to the contract's log as `seq` (taken from the contract row's `event_seq`,
/// bumped by the update that locked the row) with `contracts::INSERT_EVENT`; `from` / `to` are
/// the transition's states (`None` for an event that moves nothing).
pub(crate) async fn insert_event<DB>(
    transaction: &mut sqlx::Transaction<'_, DB>,
    contract_id: &str,
    seq: i64,
    event: &NewContractEvent,
    from: Option<ContractState>,
    to: Option<ContractState>,
) -> Result<(), StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    i64: Type<DB> + for<'q> Encode<'q, DB>,
    String: Type<DB> + for<'q> Encode<'q, DB>,
    for<'q> &'q str: Type<DB> + Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
{
    let query = sqlx::query(INSERT_EVENT);
    crate::bind_event!(
        query,
        contract_id,
        event,
        from.as_ref().map(ContractState::as_str),
        to.as_ref().map(ContractState::as_str)
    )
    .bind(seq)
    .execute(&mut **transaction)
    .await?;
    Ok(())
}

/// Append `event`, which moves nothing, to the contract's log: its seq, counted on the contract
/// row (`contracts::COUNT_EVENT`, which takes the row lock a transition takes), then
/// [`insert_event`]. `None` (nothing written) when the contract does not exist.
pub(crate) async fn append_event<DB>(
    transaction: &mut sqlx::Transaction<'_, DB>,
    contract_id: &str,
    event: &NewContractEvent,
) -> Result<Option<i64>, StoreError>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    i64: Type<DB> + for<'r> Decode<'r, DB> + for<'q> Encode<'q, DB>,
    String: Type<DB> + for<'q> Encode<'q, DB>,
    for<'q> &'q str: Type<DB> + Encode<'q, DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
{
    let seq: Option<i64> = sqlx::query_scalar(COUNT_EVENT)
        .bind(contract_id)
        .fetch_optional(&mut **transaction)
        .await?;
    if let Some(seq) = seq {
        insert_event(transaction, contract_id, seq, event, None, None).await?;
    }
    Ok(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_state_parses_once_and_another_spelling_is_corrupt() {
        assert_eq!(parse_state("executing").unwrap(), ContractState::Executing);
        for stored in ["Executing", "executing ", "paying", ""] {
            assert!(
                matches!(
                    parse_state(stored),
                    Err(StoreError::Corrupt {
                        entity: "contract",
                        ..
                    })
                ),
                "{stored:?}"
            );
        }
    }
}
