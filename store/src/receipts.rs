//! `contract_receipt`: the signed receipt of each terminal outcome of a contract, written once.

use chrono::{DateTime, Utc};

use hiregate_contracts::{id::ContractId, state::ContractState};

use super::{Store, StoreError, from_millis, on_backend, on_writer, parse_id, to_millis};

/// How a receipt from before migration 0018 is stored: its outcome was not recorded.
const OUTCOME_NOT_RECORDED: &str = "";

const ENTITY: &str = "contract_receipt";

/// A stored receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRecord {
    /// Contract.
    pub contract_id: ContractId,
    /// The terminal state it vouches for; `None` for a receipt issued before receipts were kept
    /// per outcome (migration 0018), whose outcome is only in its signed token.
    pub outcome: Option<ContractState>,
    /// Key id that signed it.
    pub kid: String,
    /// The compact JWS.
    pub token: String,
    /// When it was issued.
    pub issued_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct ReceiptRow {
    contract_id: String,
    outcome: String,
    kid: String,
    token: String,
    issued_at: i64,
}

impl Store {
    /// Store `receipt` unless the contract already has one for its outcome, and return the one
    /// that is stored: two concurrent issuers end up handing out the same bytes.
    pub async fn insert_receipt_once(
        &self,
        receipt: &ReceiptRecord,
    ) -> Result<ReceiptRecord, StoreError> {
        const SQL: &str = "insert into contract_receipt (contract_id, outcome, kid, token, issued_at) \
            values ($1, $2, $3, $4, $5) on conflict (contract_id, outcome) do nothing";
        on_writer!(self, conn => {
            sqlx::query(SQL)
                .bind(receipt.contract_id.as_str())
                .bind(outcome_column(receipt.outcome))
                .bind(&receipt.kid)
                .bind(&receipt.token)
                .bind(to_millis(receipt.issued_at))
                .execute(conn)
                .await?;
        });
        self.get_receipt(receipt.contract_id.as_str(), receipt.outcome)
            .await?
            .ok_or_else(|| {
                StoreError::corrupt(ENTITY, &"receipt missing right after it was stored")
            })
    }

    /// The receipt of `contract_id` for `outcome` (`None`: the one issued before receipts were
    /// kept per outcome), if one was issued.
    pub async fn get_receipt(
        &self,
        contract_id: &str,
        outcome: Option<ContractState>,
    ) -> Result<Option<ReceiptRecord>, StoreError> {
        const SQL: &str = "select contract_id, outcome, kid, token, issued_at \
            from contract_receipt where contract_id = $1 and outcome = $2";
        let row: Option<ReceiptRow> = on_backend!(self, conn => {
            sqlx::query_as(SQL)
                .bind(contract_id)
                .bind(outcome_column(outcome))
                .fetch_optional(conn)
                .await?
        });
        row.map(|row| {
            let outcome = if row.outcome == OUTCOME_NOT_RECORDED {
                None
            } else {
                Some(row.outcome.parse().map_err(|_| {
                    StoreError::corrupt(ENTITY, &format!("unknown outcome {:?}", row.outcome))
                })?)
            };
            Ok(ReceiptRecord {
                issued_at: from_millis(ENTITY, row.issued_at)?,
                contract_id: parse_id(ENTITY, &row.contract_id)?,
                outcome,
                kid: row.kid,
                token: row.token,
            })
        })
        .transpose()
    }
}

fn outcome_column(outcome: Option<ContractState>) -> &'static str {
    outcome.map_or(OUTCOME_NOT_RECORDED, |state| state.as_str())
}
