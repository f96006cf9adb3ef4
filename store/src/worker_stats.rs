//! Read-only views of one listing's work for its operator: contracts by state, settled earnings
//! per asset, recent failed attempts, recent verification rejections and the probe history
//! (`worker_probe`, written by `record_probe`).
//!
//! Amounts are uint256 decimal text, which neither backend can sum portably; the settled
//! payments are read as rows and added here with `U256`, so both backends give the same totals.

use std::collections::BTreeMap;

use alloy::primitives::U256;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Store, StoreError, from_millis, json::JsonText, on_backend, parse_id};
use hiregate_contracts::id::{ContractId, WorkerId};

const ENTITY: &str = "worker stats";

/// How many of the newest failures, rejections and probes a [`WorkerStats`] holds.
#[derive(Debug, Clone, Copy)]
pub struct StatsLimits {
    /// Failed or timed-out attempts.
    pub failures: u32,
    /// Failed or inconclusive verifications.
    pub rejections: u32,
    /// Health probes.
    pub probes: u32,
}

/// Settled money of one asset on one network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledTotal {
    /// CAIP-2 network.
    pub network: String,
    /// Token address.
    pub asset: String,
    /// Sum of the settled payments, atomic units.
    pub amount: U256,
    /// How many payments.
    pub payments: u64,
}

/// A failed or timed-out attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedAttempt {
    /// Its contract.
    pub contract_id: ContractId,
    /// 1-based.
    pub attempt_no: i64,
    /// `failed` or `timed_out`.
    pub state: String,
    /// What the worker answered, if it answered.
    pub http_status: Option<i64>,
    /// What went wrong.
    pub error: Option<Value>,
    /// Start.
    pub started_at: DateTime<Utc>,
}

/// A verification that did not pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// Its contract.
    pub contract_id: ContractId,
    /// `failed` or `inconclusive`.
    pub status: String,
    /// Reason codes.
    pub reason_codes: Vec<u16>,
    /// The result's `details` (schema violations with their paths, threshold failures, …).
    pub details: Value,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// One health probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRecord {
    /// When.
    pub at: DateTime<Utc>,
    /// Whether `/health` and `/capabilities` answered as required.
    pub passed: bool,
    /// The listing's health after it.
    pub health: String,
    /// Why it failed.
    pub error: Option<String>,
}

/// What [`Store::worker_stats`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerStats {
    /// Contract counts by state.
    pub contracts_by_state: BTreeMap<String, i64>,
    /// Settled payments per (network, asset).
    pub settled: Vec<SettledTotal>,
    /// Newest first.
    pub recent_failures: Vec<FailedAttempt>,
    /// Newest first.
    pub recent_rejections: Vec<Rejection>,
    /// Newest first.
    pub probes: Vec<ProbeRecord>,
}

/// The five reads of [`Store::worker_stats`], as fetched.
struct StatsRows {
    by_state: Vec<(String, i64)>,
    /// `(network, asset, amount)` of each settled payment.
    settled: Vec<(String, String, String)>,
    failures: Vec<FailureRow>,
    rejections: Vec<RejectionRow>,
    probes: Vec<ProbeRow>,
}

#[derive(sqlx::FromRow)]
struct FailureRow {
    contract_id: String,
    attempt_no: i32,
    state: String,
    http_status: Option<i32>,
    error: Option<JsonText<Value>>,
    started_at: i64,
}

#[derive(sqlx::FromRow)]
struct RejectionRow {
    contract_id: String,
    status: String,
    reason_codes: JsonText<Vec<u16>>,
    result: JsonText<Value>,
    created_at: i64,
}

#[derive(sqlx::FromRow)]
struct ProbeRow {
    at: i64,
    passed: bool,
    health: String,
    error: Option<String>,
}

impl Store {
    /// The operator's view of `worker_id`'s work (see the module docs).
    pub async fn worker_stats(
        &self,
        worker_id: &WorkerId,
        limits: StatsLimits,
    ) -> Result<WorkerStats, StoreError> {
        const BY_STATE: &str = "select state, count(*) from contract where worker_id = $1 \
            group by state";
        const SETTLED: &str = "select p.network, p.asset, p.amount from payment p \
            join contract c on c.contract_id = p.contract_id \
            where c.worker_id = $1 and p.state = 'settled'";
        const FAILURES: &str = "select a.contract_id, a.attempt_no, a.state, a.http_status, \
            a.error, a.started_at from attempt a \
            join contract c on c.contract_id = a.contract_id \
            where c.worker_id = $1 and a.state in ('failed', 'timed_out') \
            order by a.started_at desc, a.attempt_id desc limit $2";
        const REJECTIONS: &str = "select v.contract_id, v.status, v.reason_codes, v.result, \
            v.created_at from verification v \
            join contract c on c.contract_id = v.contract_id \
            where c.worker_id = $1 and v.status in ('failed', 'inconclusive') \
            order by v.created_at desc, v.verification_id desc limit $2";
        const PROBES: &str = "select at, passed, health, error from worker_probe \
            where worker_id = $1 order by probe_id desc limit $2";
        let id = worker_id.as_str();
        let rows: StatsRows = on_backend!(self, conn => {
            StatsRows {
                by_state: sqlx::query_as(BY_STATE).bind(id).fetch_all(&mut *conn).await?,
                settled: sqlx::query_as(SETTLED).bind(id).fetch_all(&mut *conn).await?,
                failures: sqlx::query_as(FAILURES)
                    .bind(id)
                    .bind(i64::from(limits.failures))
                    .fetch_all(&mut *conn)
                    .await?,
                rejections: sqlx::query_as(REJECTIONS)
                    .bind(id)
                    .bind(i64::from(limits.rejections))
                    .fetch_all(&mut *conn)
                    .await?,
                probes: sqlx::query_as(PROBES)
                    .bind(id)
                    .bind(i64::from(limits.probes))
                    .fetch_all(&mut *conn)
                    .await?,
            }
        });
        let StatsRows {
            by_state,
            settled,
            failures,
            rejections,
            probes,
        } = rows;
        let mut totals: BTreeMap<(String, String), (U256, u64)> = BTreeMap::new();
        for (network, asset, amount) in settled {
            let amount = U256::from_str_radix(&amount, 10)
                .map_err(|e| StoreError::corrupt("payment", &e))?;
            let entry = totals.entry((network, asset)).or_default();
            entry.0 = entry.0.saturating_add(amount);
            entry.1 += 1;
        }
        Ok(WorkerStats {
            contracts_by_state: by_state.into_iter().collect(),
            settled: totals
                .into_iter()
                .map(|((network, asset), (amount, payments))| SettledTotal {
                    network,
                    asset,
                    amount,
                    payments,
                })
                .collect(),
            recent_failures: failures
                .into_iter()
                .map(|row| {
                    Ok(FailedAttempt {
                        contract_id: parse_id(ENTITY, &row.contract_id)?,
                        attempt_no: i64::from(row.attempt_no),
                        state: row.state,
                        http_status: row.http_status.map(i64::from),
                        error: row.error.map(|e| e.0),
                        started_at: from_millis(ENTITY, row.started_at)?,
                    })
                })
                .collect::<Result<_, StoreError>>()?,
            recent_rejections: rejections
                .into_iter()
                .map(|row| {
                    Ok(Rejection {
                        contract_id: parse_id(ENTITY, &row.contract_id)?,
                        status: row.status,
                        reason_codes: row.reason_codes.0,
                        details: row.result.0.get("details").cloned().unwrap_or(Value::Null),
                        created_at: from_millis(ENTITY, row.created_at)?,
                    })
                })
                .collect::<Result<_, StoreError>>()?,
            probes: probes
                .into_iter()
                .map(|row| {
                    Ok(ProbeRecord {
                        at: from_millis(ENTITY, row.at)?,
                        passed: row.passed,
                        health: row.health,
                        error: row.error,
                    })
                })
                .collect::<Result<_, StoreError>>()?,
        })
    }
}
