//! Reads for the ledger audit ([`crate::ledger`]): payments with the payout address their
//! contract fixed, the payout addresses and assets of listings, and the payment a settlement
//! moved. Read-only: reconciliation reports, it never repairs.

use super::{Backend, Store, StoreError};

/// A payment as the ledger audit sees it: the authorization, where its contract says the money
/// goes, and what the store records about its settlement. No payload (no signature).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LedgerPayment {
    /// Payment id.
    pub payment_id: String,
    /// Contract it pays.
    pub contract_id: String,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract.
    pub asset: String,
    /// Payer address.
    pub payer: String,
    /// EIP-3009 nonce (0x-hex, 32 bytes).
    pub nonce: String,
    /// Atomic units, decimal.
    pub amount: String,
    /// Payment state (`paid`, `settling`, `settled`, `settlement_failed`, …).
    pub state: String,
    /// Settlement transaction hash, when the store knows one.
    pub settle_tx: Option<String>,
    /// The worker payout address in the contract's signed terms; `None` if the terms lack it.
    pub pay_to: Option<String>,
}

/// The payout address sits in the signed terms (`worker.payout_address`), not in a column:
/// the listing's `pay_to` may have changed since the contract was signed, the terms cannot.
/// PostgreSQL reads it through `json`, not `jsonb`: the stored text may hold `\u0000`
/// elsewhere in the terms, which `json` tolerates and `jsonb` refuses.
const LEDGER_COLUMNS_SQLITE: &str = "p.payment_id, p.contract_id, p.network, p.asset, p.payer, \
    p.nonce, p.amount, p.state, p.settle_tx, \
    json_extract(c.terms, '$.worker.payout_address') as pay_to";
const LEDGER_COLUMNS_POSTGRES: &str = "p.payment_id, p.contract_id, p.network, p.asset, \
    p.payer, p.nonce, p.amount, p.state, p.settle_tx, \
    c.terms::json -> 'worker' ->> 'payout_address' as pay_to";

fn ledger_select(backend: &Backend, condition: &str) -> String {
    let columns = match backend {
        Backend::Sqlite(_) => LEDGER_COLUMNS_SQLITE,
        Backend::Postgres(_) => LEDGER_COLUMNS_POSTGRES,
    };
    format!(
        "select {columns} from payment p join contract c on c.contract_id = p.contract_id \
         where {condition}"
    )
}

impl Store {
    /// Payments on `network` in any state, by payment id, `limit` at a time after
    /// `after_payment_id` (keyset paging, so a large ledger is read in bounded pieces).
    pub async fn ledger_payments(
        &self,
        network: &str,
        after_payment_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<LedgerPayment>, StoreError> {
        let sql = format!(
            "{} order by p.payment_id limit $3",
            ledger_select(&self.backend, "p.network = $1 and p.payment_id > $2")
        );
        let rows: Vec<LedgerPayment> = super::on_backend!(self, pool => {
            sqlx::query_as(&sql)
                .bind(network)
                .bind(after_payment_id.unwrap_or(""))
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }

    /// The payment that entered settlement for `contract_id` (at most one ever does).
    pub async fn settlement_payment_of_contract(
        &self,
        contract_id: &str,
    ) -> Result<Option<LedgerPayment>, StoreError> {
        let sql = ledger_select(
            &self.backend,
            "p.contract_id = $1 and p.settle_started_at is not null",
        );
        let row: Option<LedgerPayment> = super::on_backend!(self, pool => {
            sqlx::query_as(&sql).bind(contract_id).fetch_optional(pool).await?
        });
        Ok(row)
    }

    /// `(asset, pay_to)` of every listing on `network`, retired ones included (their contracts
    /// may still settle, and money sent to them later is still money the audit must see).
    pub async fn listing_payout_addresses(
        &self,
        network: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        const SQL: &str = "select distinct asset, pay_to from worker where network = $1";
        let rows: Vec<(String, String)> = super::on_backend!(self, pool => {
            sqlx::query_as(SQL).bind(network).fetch_all(pool).await?
        });
        Ok(rows)
    }
}
