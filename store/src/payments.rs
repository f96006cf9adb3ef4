//! `payment`: x402 authorizations held for contracts.
//!
//! The database enforces the money rules: an authorization `(network, asset, payer, nonce)`
//! is stored at most once (so it pays at most one contract), a `payment_identifier` at most
//! once, and at most one payment per contract ever enters settlement.
//!
//! A read payment's state is a [`PaymentState`] (a row holding another spelling is corrupt).

use super::json::JsonText;
use alloy::primitives::Address;
use chrono::{DateTime, Utc};
use hiregate_contracts::{
    id::{ContractId, PaymentId},
    money::Network,
};

use super::{
    Store, StoreError, from_millis, from_millis_opt, on_backend, on_writer, parse_address,
    parse_id, parse_network, states::PaymentState, stored_address, to_millis,
};

const ENTITY: &str = "payment";

/// A payment to record after the facilitator verified it.
#[derive(Clone)]
pub struct NewPayment {
    /// Payment id.
    pub payment_id: PaymentId,
    /// Contract it pays.
    pub contract_id: ContractId,
    /// CAIP-2 network (any id the x402 wire may carry; stored as written).
    pub network: Network,
    /// Token contract (stored EIP-55).
    pub asset: Address,
    /// Payer address (stored EIP-55).
    pub payer: Address,
    /// EIP-3009 nonce.
    pub nonce: String,
    /// Atomic units, decimal.
    pub amount: String,
    /// Authorization validity start, Unix seconds.
    pub valid_after: i64,
    /// Authorization validity end, Unix seconds; for an escrowed payment the escrow's capture
    /// deadline (what the gateway must act by once the money is locked).
    pub valid_before: i64,
    /// The x402 payment payload (signature included; never logged).
    pub payload: serde_json::Value,
    /// Hash of the payload, to tell "same payment" from "same id, other payment".
    pub payload_hash: String,
    /// x402 `payment-identifier` extension value.
    pub payment_identifier: Option<String>,
    /// Initial state ([`PaymentState::Verified`], or [`PaymentState::Authorizing`] for an
    /// escrowed payment).
    pub state: PaymentState,
    /// Creation time.
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for NewPayment {
    // The payload carries the payer's signature: keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewPayment")
            .field("payment_id", &self.payment_id)
            .field("contract_id", &self.contract_id)
            .field("network", &self.network)
            .field("payer", &self.payer)
            .field("amount", &self.amount)
            .field("state", &self.state)
            .field("payload", &"[REDACTED]")
            .finish_non_exhaustive()
    }
}

/// A stored payment (the payload is loaded too: settlement resubmits it).
#[derive(Clone, PartialEq)]
pub struct PaymentRecord {
    /// Payment id.
    pub payment_id: PaymentId,
    /// Contract it pays.
    pub contract_id: ContractId,
    /// CAIP-2 network (any id the x402 wire may carry; stored as written).
    pub network: Network,
    /// Token contract (stored EIP-55).
    pub asset: Address,
    /// Payer address (stored EIP-55).
    pub payer: Address,
    /// EIP-3009 nonce.
    pub nonce: String,
    /// Atomic units, decimal.
    pub amount: String,
    /// Authorization validity start, Unix seconds.
    pub valid_after: i64,
    /// Authorization validity end, Unix seconds.
    pub valid_before: i64,
    /// The x402 payment payload.
    pub payload: serde_json::Value,
    /// Hash of the payload.
    pub payload_hash: String,
    /// x402 `payment-identifier`.
    pub payment_identifier: Option<String>,
    /// Current state.
    pub state: PaymentState,
    /// When settlement began, if it did.
    pub settle_started_at: Option<DateTime<Utc>>,
    /// Settlement transaction hash.
    pub settle_tx: Option<String>,
    /// Facilitator settle response (the `PAYMENT-RESPONSE` content).
    pub settle_response: Option<serde_json::Value>,
    /// Escrowed payments: the `authorize` transaction that locked the money.
    pub authorize_tx: Option<String>,
    /// Escrowed payments: the transaction that returned it (void, refund or reclaim).
    pub release_tx: Option<String>,
    /// Metered escrowed payments: the void of what the capture of the verified `amount` left
    /// locked.
    pub remainder_tx: Option<String>,
    /// Escrowed payments: what an arbiter's refund returns, atomic units (`None`: all of
    /// `amount`); stored with the refund's intent.
    pub refunded_amount: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl std::fmt::Debug for PaymentRecord {
    // The payload carries the payer's signature: keep it out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentRecord")
            .field("payment_id", &self.payment_id)
            .field("contract_id", &self.contract_id)
            .field("network", &self.network)
            .field("payer", &self.payer)
            .field("amount", &self.amount)
            .field("state", &self.state)
            .field("settle_tx", &self.settle_tx)
            .field("payload", &"[REDACTED]")
            .finish_non_exhaustive()
    }
}

#[derive(sqlx::FromRow)]
pub(crate) struct PaymentRow {
    payment_id: String,
    contract_id: String,
    network: String,
    asset: String,
    payer: String,
    nonce: String,
    amount: String,
    valid_after: i64,
    valid_before: i64,
    payload: JsonText<serde_json::Value>,
    payload_hash: String,
    payment_identifier: Option<String>,
    state: String,
    settle_started_at: Option<i64>,
    settle_tx: Option<String>,
    settle_response: Option<JsonText<serde_json::Value>>,
    authorize_tx: Option<String>,
    release_tx: Option<String>,
    remainder_tx: Option<String>,
    refunded_amount: Option<String>,
    created_at: i64,
    updated_at: i64,
}

impl PaymentRecord {
    /// The row [`Store::pay_contract`] writes for `payment`, as a read would return it right
    /// after (times at the store's millisecond precision).
    pub fn as_stored(payment: &NewPayment) -> Self {
        let created_at = DateTime::from_timestamp_millis(to_millis(payment.created_at))
            .unwrap_or(payment.created_at);
        Self {
            payment_id: payment.payment_id.clone(),
            contract_id: payment.contract_id.clone(),
            network: payment.network,
            asset: payment.asset,
            payer: payment.payer,
            nonce: payment.nonce.clone(),
            amount: payment.amount.clone(),
            valid_after: payment.valid_after,
            valid_before: payment.valid_before,
            payload: payment.payload.clone(),
            payload_hash: payment.payload_hash.clone(),
            payment_identifier: payment.payment_identifier.clone(),
            state: payment.state,
            settle_started_at: None,
            settle_tx: None,
            settle_response: None,
            authorize_tx: None,
            release_tx: None,
            remainder_tx: None,
            refunded_amount: None,
            created_at,
            updated_at: created_at,
        }
    }
}

impl TryFrom<PaymentRow> for PaymentRecord {
    type Error = StoreError;

    fn try_from(row: PaymentRow) -> Result<Self, Self::Error> {
        Ok(Self {
            payment_id: parse_id(ENTITY, &row.payment_id)?,
            contract_id: parse_id(ENTITY, &row.contract_id)?,
            network: parse_network(ENTITY, &row.network)?,
            asset: parse_address(ENTITY, &row.asset)?,
            payer: parse_address(ENTITY, &row.payer)?,
            nonce: row.nonce,
            amount: row.amount,
            valid_after: row.valid_after,
            valid_before: row.valid_before,
            payload: row.payload.0,
            payload_hash: row.payload_hash,
            payment_identifier: row.payment_identifier,
            state: row
                .state
                .parse()
                .map_err(|e| StoreError::corrupt(ENTITY, &e))?,
            settle_started_at: from_millis_opt(ENTITY, row.settle_started_at)?,
            settle_tx: row.settle_tx,
            settle_response: row.settle_response.map(|j| j.0),
            authorize_tx: row.authorize_tx,
            release_tx: row.release_tx,
            remainder_tx: row.remainder_tx,
            refunded_amount: row.refunded_amount,
            created_at: from_millis(ENTITY, row.created_at)?,
            updated_at: from_millis(ENTITY, row.updated_at)?,
        })
    }
}

pub(crate) const PAYMENT_COLUMNS: &str = "payment_id, contract_id, network, asset, payer, nonce, amount, \
    valid_after, valid_before, payload, payload_hash, payment_identifier, state, \
    settle_started_at, settle_tx, settle_response, authorize_tx, release_tx, remainder_tx, \
    refunded_amount, created_at, updated_at";

impl Store {
    /// Record a verified payment. An authorization or payment identifier seen before is
    /// [`StoreError::Duplicate`]: the caller then looks up which contract holds it.
    pub async fn insert_payment(&self, payment: &NewPayment) -> Result<(), StoreError> {
        on_writer!(self, conn => {
            super::advance::apply_side_write(conn, super::SideWrite::Payment(payment)).await?;
        });
        Ok(())
    }

    /// Atomic amounts of the payments `payer` made since `since` (any state: a held or voided
    /// payment still counted against a spending limit when it was signed).
    pub async fn payment_amounts_by_payer_since(
        &self,
        payer: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<String>, StoreError> {
        const SQL: &str =
            "select amount from payment where lower(payer) = lower($1) and created_at >= $2";
        let rows: Vec<(String,)> = on_backend!(self, conn => {
            sqlx::query_as(SQL)
                .bind(payer)
                .bind(to_millis(since))
                .fetch_all(conn)
                .await?
        });
        Ok(rows.into_iter().map(|(amount,)| amount).collect())
    }

    /// The payment holding authorization `(network, asset, payer, nonce)`, if any.
    pub async fn find_payment_by_authorization(
        &self,
        network: &Network,
        asset: &Address,
        payer: &Address,
        nonce: &str,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let sql = format!(
            "select {PAYMENT_COLUMNS} from payment \
             where network = $1 and asset = $2 and payer = $3 and nonce = $4"
        );
        let row: Option<PaymentRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql)
                .bind(network.as_str())
                .bind(stored_address(asset))
                .bind(stored_address(payer))
                .bind(nonce)
                .fetch_optional(conn)
                .await?
        });
        row.map(PaymentRecord::try_from).transpose()
    }

    /// The payment with this x402 `payment-identifier`, if any.
    pub async fn find_payment_by_identifier(
        &self,
        payment_identifier: &str,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        let sql = format!("select {PAYMENT_COLUMNS} from payment where payment_identifier = $1");
        let row: Option<PaymentRow> = on_backend!(self, conn => {
            sqlx::query_as(&sql).bind(payment_identifier).fetch_optional(conn).await?
        });
        row.map(PaymentRecord::try_from).transpose()
    }

    /// What an upfront payment's settlement (sent before the work, see the engine's
    /// `upfront`) came to: the payment's state (`settled`, `settlement_failed` or
    /// `settlement_unknown`), transaction and the facilitator's answer. The contract is not
    /// touched: it stays `paid` until the worker is called.
    pub async fn record_upfront_settlement(
        &self,
        payment_id: &PaymentId,
        outcome: &crate::SettlementOutcome,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        on_writer!(self, conn => {
            super::advance::apply_side_write(
                conn,
                super::SideWrite::SettlementFinished { payment_id, outcome, at },
            )
            .await?;
        });
        Ok(())
    }

    /// Mark `payment_id` as entering settlement (state `settling`). At most one payment per
    /// contract can ever be marked: a second one is [`StoreError::Duplicate`]. Returns `false`
    /// if this payment was already marked (a retry of the same settlement) or voided by
    /// [`Self::void_unsent_payment`]: of the two claims on one unsent payment exactly one wins.
    pub async fn begin_settlement(
        &self,
        payment_id: &PaymentId,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update payment set settle_started_at = $2, state = 'settling', \
            updated_at = $2 where payment_id = $1 and settle_started_at is null \
            and state <> 'voided'";
        self.claim_unsent_payment(SQL, payment_id, at).await
    }

    /// Mark `payment_id` `voided` if its settlement never began, so it never will
    /// ([`Self::begin_settlement`] refuses it from then on). Returns `false` when the settlement
    /// began first (or the payment was voided before).
    pub async fn void_unsent_payment(
        &self,
        payment_id: &PaymentId,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        const SQL: &str = "update payment set state = 'voided', updated_at = $2 \
            where payment_id = $1 and settle_started_at is null and state <> 'voided'";
        self.claim_unsent_payment(SQL, payment_id, at).await
    }

    /// Runs one of the two claims on a payment whose settlement has not begun (both update the
    /// payment's row under a condition on it, so on either store one waits for the other and
    /// then finds the condition false): whether this one won.
    async fn claim_unsent_payment(
        &self,
        sql: &'static str,
        payment_id: &PaymentId,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let changed = on_writer!(self, conn => {
            sqlx::query(sql)
                .bind(payment_id.as_str())
                .bind(to_millis(at))
                .execute(conn)
                .await
                .map_err(StoreError::unique_as_duplicate(ENTITY))?
                .rows_affected()
        });
        Ok(changed == 1)
    }
}
