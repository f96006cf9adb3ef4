//! Long-running work: worker callback receipts (`callback_receipt`) and the queries of the
//! deadline sweeps (authorizations close to `validBefore`, settlements left in `settling`).
//!
//! Poll jobs themselves live in `job` (see `jobs`); these queries read the durable contract
//! and payment rows, and every change they lead to is made with the compare-and-set
//! transitions of `contracts`/`execution`, so several instances may run them at once.

use chrono::{DateTime, Utc};

use super::{
    ContractRecord, Store, StoreError,
    contracts::{CONTRACT_COLUMNS, ContractRow},
    on_backend, to_millis,
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
        let count: i64 = on_backend!(self, pool => {
            sqlx::query_scalar(SQL).bind(worker_id).bind(webhook_id).fetch_one(pool).await?
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
        let inserted = on_backend!(self, pool => {
            sqlx::query(SQL)
                .bind(worker_id)
                .bind(webhook_id)
                .bind(contract_id)
                .bind(to_millis(at))
                .execute(pool)
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
            "select {CONTRACT_COLUMNS} from contract where state in ({states}) and contract_id in \
             (select contract_id from payment where valid_before <= $1 \
              and settle_started_at is null) \
             order by updated_at limit $2"
        );
        let rows: Vec<ContractRow> = on_backend!(self, pool => {
            sqlx::query_as(&sql)
                .bind(valid_before_at_most)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        });
        rows.into_iter().map(ContractRecord::try_from).collect()
    }

    /// Contracts left in `settling` since before `untouched_since`: the instance that called
    /// `/settle` died (or hung) before recording the outcome.
    pub async fn stale_settling_contracts(
        &self,
        untouched_since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<ContractRecord>, StoreError> {
        let sql = format!(
            "select {CONTRACT_COLUMNS} from contract where state = 'settling' and updated_at <= $1 \
             order by updated_at limit $2"
        );
        let rows: Vec<ContractRow> = on_backend!(self, pool => {
            sqlx::query_as(&sql)
                .bind(to_millis(untouched_since))
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        });
        rows.into_iter().map(ContractRecord::try_from).collect()
    }
}
