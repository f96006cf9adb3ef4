//! `GET /v1/contracts`: a seeker's own contracts, or an operator's workers' contracts, newest
//! first, in cursor pages, filtered by state and worker.
//!
//! The cursor is the last row's `(created_at, contract_id)`, base64url so clients treat it as
//! opaque. A cursor or filter that does not parse is a 422 naming the field, never a silent
//! restart from the first page.

use std::str::FromStr;

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use hiregate_contracts::{id::ContractId, state::ContractState};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    error::ApiError,
    ids::{PrincipalId, WorkerId},
    store::{ContractQuery, ContractRecord, Store},
};

/// Default page size.
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size.
pub const MAX_LIMIT: u32 = 200;

/// Whose contracts a caller may list.
#[derive(Debug, Clone)]
pub enum ListScope {
    /// This seeker's contracts.
    Seeker(PrincipalId),
    /// Contracts with this operator's workers.
    Operator(PrincipalId),
}

/// The query as received.
#[derive(Debug, Clone, Default)]
pub struct ListFilters {
    /// A contract state name.
    pub state: Option<String>,
    /// A worker id.
    pub worker_id: Option<String>,
    /// Page size.
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One contract of a page; the full view is `GET /v1/contracts/{id}`.
#[derive(Debug, Clone, Serialize)]
pub struct ContractSummary {
    /// `ctr_…`.
    pub contract_id: String,
    /// Current state.
    pub state: String,
    /// The seeker account.
    pub seeker_id: String,
    /// The worker listing.
    pub worker_id: String,
    /// Task type hired.
    pub task_type: String,
    /// The signed price (amount, asset, network, scheme).
    pub price: Value,
    /// Canonical hash of the signed terms.
    pub terms_hash: String,
    /// Worker attempts used.
    pub attempts_used: u32,
    /// Created.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A page.
#[derive(Debug, Clone, Serialize)]
pub struct ContractPage {
    /// Newest first.
    pub contracts: Vec<ContractSummary>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

fn invalid(field: &str, reason: &str) -> ApiError {
    ApiError::UnprocessableWithDetails {
        code: if field == "cursor" {
            "invalid_cursor"
        } else {
            "invalid_filter"
        },
        message: format!("{field}: {reason}"),
        details: json!({ "field": field }),
    }
}

fn encode_cursor(contract: &ContractRecord) -> String {
    URL_SAFE_NO_PAD.encode(format!(
        "{}:{}",
        contract.created_at.timestamp_millis(),
        contract.contract_id
    ))
}

fn decode_cursor(raw: &str) -> Result<(DateTime<Utc>, String), ApiError> {
    let bad = || invalid("cursor", "not a next_cursor this endpoint returned");
    let text = URL_SAFE_NO_PAD
        .decode(raw)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(bad)?;
    let (millis, id) = text.split_once(':').ok_or_else(bad)?;
    let at = millis
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(bad)?;
    let id = ContractId::from_str(id).map_err(|_| bad())?;
    Ok((at, id.to_string()))
}

/// The page `scope` may see that matches `filters`.
pub async fn list_contracts(
    store: &Store,
    scope: ListScope,
    filters: &ListFilters,
) -> Result<ContractPage, ApiError> {
    let limit = filters.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid("limit", &format!("must be 1 to {MAX_LIMIT}")));
    }
    let state = match filters.state.as_deref().filter(|s| !s.is_empty()) {
        Some(raw) => Some(
            ContractState::from_str(raw)
                .map_err(|_| invalid("state", "not a contract state"))?
                .to_string(),
        ),
        None => None,
    };
    let worker_id = match filters.worker_id.as_deref().filter(|s| !s.is_empty()) {
        Some(raw) => Some(
            WorkerId::from_str(raw)
                .map_err(|_| invalid("worker_id", "not a worker id (wk_…)"))?
                .to_string(),
        ),
        None => None,
    };
    let after = filters
        .cursor
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(decode_cursor)
        .transpose()?;
    let (seeker_id, operator_id) = match scope {
        ListScope::Seeker(id) => (Some(id.to_string()), None),
        ListScope::Operator(id) => (None, Some(id.to_string())),
    };
    let records = store
        .list_contracts(&ContractQuery {
            seeker_id,
            operator_id,
            state,
            worker_id,
            after,
            limit,
        })
        .await?;
    let next_cursor = (records.len() == limit as usize)
        .then(|| records.last().map(encode_cursor))
        .flatten();
    Ok(ContractPage {
        contracts: records
            .into_iter()
            .map(|record| ContractSummary {
                price: record.terms.get("price").cloned().unwrap_or(Value::Null),
                contract_id: record.contract_id,
                state: record.state,
                seeker_id: record.seeker_id,
                worker_id: record.worker_id,
                task_type: record.task_type,
                terms_hash: record.terms_hash,
                attempts_used: record.attempts_used,
                created_at: record.created_at,
                updated_at: record.updated_at,
            })
            .collect(),
        next_cursor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_forged_one_is_refused() {
        let id = ContractId::generate().to_string();
        let at = DateTime::from_timestamp_millis(1_800_000_000_000).unwrap();
        let raw = URL_SAFE_NO_PAD.encode(format!("{}:{id}", at.timestamp_millis()));
        assert_eq!(decode_cursor(&raw).unwrap(), (at, id));
        for forged in [
            "",
            "%%",
            &URL_SAFE_NO_PAD.encode("1:wk_x"),
            &URL_SAFE_NO_PAD.encode("x"),
        ] {
            assert_eq!(decode_cursor(forged).unwrap_err().code(), "invalid_cursor");
        }
    }
}
