//! Long-running work: worker callback receipts (`callback_receipt`) and the queries of the
//! deadline sweeps (authorizations close to `validBefore`) and of crash recovery (contracts left
//! in a working state past its time bound, taken over by one instance).
//!
//! Poll jobs themselves live in `job` (see `jobs`); these queries read the durable contract
//! and payment rows, and every change they lead to is made with the compare-and-set
//! transitions of `contracts`/`execution`, so several instances may run them at once.

use chrono::{DateTime, Utc};
use hiregate_contracts::state::ContractState;

use super::{
    ContractRecord, NewContractEvent, Store, StoreError,
    contracts::{ContractRow, SELECT_CONTRACTS},
    on_backend, on_writer, to_millis,
    transaction::insert_event,
};

const CALLBACK_ENTITY: &str = "callback_receipt";

/// Contract states whose held authorization the expiry sweep resolves before `validBefore`:
/// accepted ones are settled, the others voided (`disputed`: an arbiter who stayed silent).
pub const AUTHORIZATION_SWEEP_STATES: [&str; 6] = [
    "paid",
    "executing",
    "pending",
    "accepted",
    "rejected",
    "disputed",
];

impl Store {
    /// Whether `worker_id` already had a callback with `webhook_id` accepted.
    pub async fn callback_seen(
        &self,
        worker_id: &str,
        webhook_id: &str,
    ) -> Result<bool, StoreError> {
        const SQL: &str =
            "select count(*) from callback_receipt where worker_id = $1 and webhook_id = $2";
        let count: i64 = on_backend!(self, conn => {
            sqlx::query_scalar(SQL).bind(worker_id).bind(webhook_id).fetch_one(conn).await?
        });
        Ok(count > 0)
    }

    /// Remember an accepted callback. `false` when the id was already recorded (a concurrent
    /// delivery of the same callback).
    pub async fn record_callback(
        &self,
        worker_id: &str,
        webhook_id: &str,
        contract_id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "insert into callback_receipt (worker_id, webhook_id, contract_id, \
            received_at) values ($1, $2, $3, $4)";
        let inserted = on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(worker_id)
                .bind(webhook_id)
                .bind(contract_id)
                .bind(to_millis(at))
                .execute(conn)
                .await
                .map(|_| ())
                .map_err(StoreError::unique_as_duplicate(CALLBACK_ENTITY))
        });
        match inserted {
            Ok(()) => Ok(true),
            Err(StoreError::Duplicate { .. }) => Ok(false),
            Err(other) => Err(other),
        }
    }

    /// Contracts in [`AUTHORIZATION_SWEEP_STATES`] whose unsettled payment has
    /// `valid_before <= valid_before_at_most` (Unix seconds), oldest deadline first.
    pub async fn contracts_with_authorization_due(
        &self,
        valid_before_at_most: i64,
        limit: u32,
    ) -> Result<Vec<ContractRecord>, StoreError> {
        let states = AUTHORIZATION_SWEEP_STATES
            .iter()
            .map(|s| format!("'{s}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "{SELECT_CONTRACTS} where state in ({states}) and contract_id in \
             (select contract_id from payment where valid_before <= $1 \
              and settle_started_at is null) \
             order by updated_at limit $2"
        );
        let rows: Vec<ContractRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(valid_before_at_most)
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(ContractRecord::try_from).collect()
    }

    /// Contracts in `state` with no transition (and no takeover) since `untouched_since`,
    /// oldest first: the instance working on them died or hung past the step's time bound.
    pub async fn stale_contracts(
        &self,
        state: &str,
        untouched_since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ContractRecord>, StoreError> {
        let sql = format!(
            "{SELECT_CONTRACTS} where state = $1 and updated_at <= $2 \
             order by updated_at limit $3"
        );
        let rows: Vec<ContractRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(state)
                .bind(to_millis(untouched_since))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(ContractRecord::try_from).collect()
    }

    /// Take over a stale contract: still in `state` and untouched since `seen_updated_at`, its
    /// `updated_at` moves to the event's time (which restarts the staleness clock, the
    /// contract's lease) and the takeover is logged, in one transaction. `false` when the
    /// contract moved or another instance took it first: exactly one instance resumes it.
    pub async fn take_over_contract(
        &self,
        contract_id: &str,
        state: ContractState,
        seen_updated_at: DateTime<Utc>,
        event: &NewContractEvent,
    ) -> Result<bool, StoreError> {
        const CLAIM: &str = "update contract set updated_at = $4, event_seq = event_seq + 1 \
            where contract_id = $1 and state = $2 and updated_at = $3 returning event_seq";
        on_writer!(self, conn => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            let seq: Option<i64> = sqlx::query_scalar(CLAIM)
                .bind(contract_id)
                .bind(state.as_str())
                .bind(to_millis(seen_updated_at))
                .bind(to_millis(event.at))
                .fetch_optional(&mut *tx)
                .await?;
            let Some(seq) = seq else {
                return Ok(false);
            };
            insert_event(&mut tx, contract_id, seq, event, Some(state), Some(state)).await?;
            tx.commit().await?;
            self.publish_event(contract_id, seq, event, Some(state), Some(state));
            Ok(true)
        })
    }
}
