//! `contract_receipt`: the one signed receipt of each terminal contract, written once.

use chrono::{DateTime, Utc};

use super::{Store, StoreError, from_millis, on_backend, to_millis};

const ENTITY: &str = "contract_receipt";

/// A stored receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptRecord {
    /// Contract.
    pub contract_id: String,
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
    kid: String,
    token: String,
    issued_at: i64,
}

impl Store {
    /// Store `receipt` unless the contract already has one, and return the one that is stored:
    /// two concurrent issuers end up handing out the same bytes.
    pub async fn insert_receipt_once(
        &self,
        receipt: &ReceiptRecord,
    ) -> Result<ReceiptRecord, StoreError> {
        const SQL: &str = "insert into contract_receipt (contract_id, kid, token, issued_at) \
            values ($1, $2, $3, $4) on conflict (contract_id) do nothing";
        on_backend!(self, pool => {
            sqlx::query(SQL)
                .bind(&receipt.contract_id)
                .bind(&receipt.kid)
                .bind(&receipt.token)
                .bind(to_millis(receipt.issued_at))
                .execute(pool)
                .await?;
        });
        self.get_receipt(&receipt.contract_id)
            .await?
            .ok_or_else(|| {
                StoreError::corrupt(ENTITY, &"receipt missing right after it was stored")
            })
    }

    /// The receipt of `contract_id`, if one was issued.
    pub async fn get_receipt(
        &self,
        contract_id: &str,
    ) -> Result<Option<ReceiptRecord>, StoreError> {
        const SQL: &str = "select contract_id, kid, token, issued_at from contract_receipt \
            where contract_id = $1";
        let row: Option<ReceiptRow> = on_backend!(self, pool => {
            sqlx::query_as(SQL).bind(contract_id).fetch_optional(pool).await?
        });
        row.map(|row| {
            Ok(ReceiptRecord {
                issued_at: from_millis(ENTITY, row.issued_at)?,
                contract_id: row.contract_id,
                kid: row.kid,
                token: row.token,
            })
        })
        .transpose()
    }
}
