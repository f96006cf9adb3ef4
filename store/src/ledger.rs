//! Reads for the ledger audit ([`crate::ledger`]): `exact` payments with the payout address
//! their contract fixed, escrowed (`auth-capture`) payments with what rebuilds their escrow
//! `PaymentInfo`, the payout addresses and assets of listings, and the payment a settlement
//! moved. Read-only: reconciliation reports, it never repairs.

use alloy::primitives::Address;
use hiregate_contracts::{
    id::{ContractId, PaymentId},
    money::Network,
    terms::ContractTerms,
};

use super::{
    Backend, Store, StoreError, json::JsonText, offer::StoredOffer, parse_address, parse_document,
    parse_id, parse_network, states::PaymentState,
};

const ENTITY: &str = "payment";

/// A payment as the ledger audit sees it: the authorization, where its contract says the money
/// goes, and what the store records about its settlement. No payload (no signature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerPayment {
    /// Payment id.
    pub payment_id: PaymentId,
    /// Contract it pays.
    pub contract_id: ContractId,
    /// CAIP-2 network.
    pub network: Network,
    /// Token contract.
    pub asset: Address,
    /// Payer address.
    pub payer: Address,
    /// EIP-3009 nonce (0x-hex, 32 bytes).
    pub nonce: String,
    /// Atomic units, decimal.
    pub amount: String,
    /// Payment state.
    pub state: PaymentState,
    /// Settlement transaction hash, when the store knows one.
    pub settle_tx: Option<String>,
    /// The worker payout address in the contract's signed terms; `None` if the terms lack it.
    pub pay_to: Option<String>,
}

#[derive(sqlx::FromRow)]
struct LedgerPaymentRow {
    payment_id: String,
    contract_id: String,
    network: String,
    asset: String,
    payer: String,
    nonce: String,
    amount: String,
    state: String,
    settle_tx: Option<String>,
    pay_to: Option<String>,
}

impl TryFrom<LedgerPaymentRow> for LedgerPayment {
    type Error = StoreError;

    fn try_from(row: LedgerPaymentRow) -> Result<Self, Self::Error> {
        Ok(Self {
            payment_id: parse_id(ENTITY, &row.payment_id)?,
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            network: parse_network(ENTITY, &row.network)?,
            asset: parse_address(ENTITY, &row.asset)?,
            payer: parse_address(ENTITY, &row.payer)?,
            nonce: row.nonce,
            amount: row.amount,
            state: row
                .state
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            settle_tx: row.settle_tx,
            pay_to: row.pay_to,
        })
    }
}

/// The payout address sits in the signed terms (`worker.payout_address`), not in a column:
/// the listing's `pay_to` may have changed since the contract was signed, the terms cannot.
/// PostgreSQL reads it through `json`, not `jsonb`: the stored text may hold `\u0000`
/// elsewhere in the terms, which `json` tolerates and `jsonb` refuses.
const LEDGER_COLUMNS_SQLITE: &str = "p.payment_id, p.contract_id, p.network, p.asset, p.payer, \
    p.nonce, p.amount, p.state, p.settle_tx, \
    json_extract(d.terms, '$.worker.payout_address') as pay_to";
const LEDGER_COLUMNS_POSTGRES: &str = "p.payment_id, p.contract_id, p.network, p.asset, \
    p.payer, p.nonce, p.amount, p.state, p.settle_tx, \
    d.terms::json -> 'worker' ->> 'payout_address' as pay_to";

/// Whether a contract is escrowed: its signed terms' price scheme (absent in terms signed before
/// schemes existed, which are all `exact`).
const ESCROWED_SQLITE: &str =
    "coalesce(json_extract(d.terms, '$.price.scheme'), 'exact') = 'auth-capture'";
const ESCROWED_POSTGRES: &str =
    "coalesce(d.terms::json -> 'price' ->> 'scheme', 'exact') = 'auth-capture'";

fn escrowed(backend: &Backend) -> &'static str {
    match backend {
        Backend::Sqlite(_) => ESCROWED_SQLITE,
        Backend::Postgres(_) => ESCROWED_POSTGRES,
    }
}

/// An escrowed payment as the ledger audit sees it: the store's claims (state and the
/// transactions of authorize, capture and release) and what rebuilds its `PaymentInfo` (the
/// payload against the contract's own offer) and its capture (the signed terms' fee).
#[derive(Clone)]
pub struct LedgerEscrowPayment {
    /// Payment id.
    pub payment_id: PaymentId,
    /// Contract it pays.
    pub contract_id: ContractId,
    /// CAIP-2 network.
    pub network: Network,
    /// Token contract.
    pub asset: Address,
    /// Payer address.
    pub payer: Address,
    /// Atomic units, decimal.
    pub amount: String,
    /// Payment state.
    pub state: PaymentState,
    /// The `authorize` transaction (not null once authorized).
    pub authorize_tx: Option<String>,
    /// The `capture` transaction.
    pub settle_tx: Option<String>,
    /// The `void`, `refund` or `reclaim` transaction.
    pub release_tx: Option<String>,
    /// A metered payment's `void` of what its capture left locked.
    pub remainder_tx: Option<String>,
    /// What the refund returned, atomic units, decimal (`None`: all of `amount`).
    pub refunded_amount: Option<String>,
    /// The x402 payment payload (holds the payer's signature: never log it).
    pub payload: serde_json::Value,
    /// The contract's signed terms.
    pub terms: ContractTerms,
    /// The contract's stored x402 offer.
    pub payment_offer: Option<StoredOffer>,
}

#[derive(sqlx::FromRow)]
struct LedgerEscrowRow {
    payment_id: String,
    contract_id: String,
    network: String,
    asset: String,
    payer: String,
    amount: String,
    state: String,
    authorize_tx: Option<String>,
    settle_tx: Option<String>,
    release_tx: Option<String>,
    remainder_tx: Option<String>,
    refunded_amount: Option<String>,
    payload: JsonText<serde_json::Value>,
    terms: JsonText<serde_json::Value>,
    payment_offer: Option<JsonText<serde_json::Value>>,
}

impl TryFrom<LedgerEscrowRow> for LedgerEscrowPayment {
    type Error = StoreError;

    fn try_from(row: LedgerEscrowRow) -> Result<Self, Self::Error> {
        Ok(Self {
            payment_id: parse_id(ENTITY, &row.payment_id)?,
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            network: parse_network(ENTITY, &row.network)?,
            asset: parse_address(ENTITY, &row.asset)?,
            payer: parse_address(ENTITY, &row.payer)?,
            amount: row.amount,
            state: row
                .state
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            authorize_tx: row.authorize_tx,
            settle_tx: row.settle_tx,
            release_tx: row.release_tx,
            remainder_tx: row.remainder_tx,
            refunded_amount: row.refunded_amount,
            payload: row.payload.0,
            terms: parse_document(ENTITY, &row.terms.0)?,
            payment_offer: row
                .payment_offer
                .map(|offer| parse_document(ENTITY, &offer.0))
                .transpose()?,
        })
    }
}

impl std::fmt::Debug for LedgerEscrowPayment {
    // The payload carries the payer's signature: keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerEscrowPayment")
            .field("payment_id", &self.payment_id)
            .field("contract_id", &self.contract_id)
            .field("network", &self.network)
            .field("state", &self.state)
            .field("amount", &self.amount)
            .field("payload", &"[REDACTED]")
            .finish_non_exhaustive()
    }
}

const LEDGER_ESCROW_COLUMNS: &str = "p.payment_id, p.contract_id, p.network, p.asset, p.payer, \
    p.amount, p.state, p.authorize_tx, p.settle_tx, p.release_tx, p.remainder_tx, \
    p.refunded_amount, p.payload, d.terms, d.payment_offer";

fn ledger_select(backend: &Backend, condition: &str) -> String {
    let columns = match backend {
        Backend::Sqlite(_) => LEDGER_COLUMNS_SQLITE,
        Backend::Postgres(_) => LEDGER_COLUMNS_POSTGRES,
    };
    format!(
        "select {columns} from payment p join contract_document d \
         on d.contract_id = p.contract_id where {condition}"
    )
}

impl Store {
    /// `exact` payments on `network` in any state, by payment id, `limit` at a time after
    /// `after_payment_id` (keyset paging, so a large ledger is read in bounded pieces).
    pub async fn ledger_payments(
        &self,
        network: &Network,
        after_payment_id: Option<&PaymentId>,
        limit: u32,
    ) -> Result<Vec<LedgerPayment>, StoreError> {
        let condition = format!(
            "p.network = $1 and p.payment_id > $2 and not ({})",
            escrowed(&self.backend)
        );
        let sql = format!(
            "{} order by p.payment_id limit $3",
            ledger_select(&self.backend, &condition)
        );
        let rows: Vec<LedgerPaymentRow> = super::on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(network.as_str())
                .bind(after_payment_id.map_or("", PaymentId::as_str))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter().map(LedgerPayment::try_from).collect()
    }

    /// Escrowed (`auth-capture`) payments on `network` in any state, paged like
    /// [`Self::ledger_payments`].
    pub async fn ledger_escrow_payments(
        &self,
        network: &Network,
        after_payment_id: Option<&PaymentId>,
        limit: u32,
    ) -> Result<Vec<LedgerEscrowPayment>, StoreError> {
        let sql = format!(
            "select {LEDGER_ESCROW_COLUMNS} from payment p join contract_document d \
             on d.contract_id = p.contract_id \
             where p.network = $1 and p.payment_id > $2 and {} \
             order by p.payment_id limit $3",
            escrowed(&self.backend)
        );
        let rows: Vec<LedgerEscrowRow> = super::on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(network.as_str())
                .bind(after_payment_id.map_or("", PaymentId::as_str))
                .bind(i64::from(limit))
                .fetch_all(conn)
                .await?
        });
        rows.into_iter()
            .map(LedgerEscrowPayment::try_from)
            .collect()
    }

    /// `(asset, pay_to)` of every listing on `network`, retired ones included (their contracts
    /// may still settle, and money sent to them later is still money the audit must see).
    pub async fn listing_payout_addresses(
        &self,
        network: &str,
    ) -> Result<Vec<(String, String)>, StoreError> {
        const SQL: &str = "select distinct asset, pay_to from worker where network = $1";
        let rows: Vec<(String, String)> = super::on_backend!(self, conn => {
            sqlx::query_as(SQL).bind(network).fetch_all(conn).await?
        });
        Ok(rows)
    }
}
