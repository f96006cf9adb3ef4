//! `GET /v1/contracts`: the contracts a caller may see, newest first, in cursor pages.
//!
//! A seeker sees its own contracts, an operator those of its workers, the admin all. The cursor
//! is the last row's `(created_at, contract_id)` position, base64url-encoded so clients treat it
//! as opaque; a tampered or foreign cursor is refused with 422 `invalid_cursor` rather than
//! silently restarting from the top.

use std::str::FromStr;

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use chrono::{DateTime, Utc};
use hiregate_contracts::{id::ContractId, state::ContractState};
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{ErrorCode, HireError};
use hiregate_contracts::id::{PrincipalId, WorkerId};
use hiregate_store::{ContractQuery, ContractRecord, Store};

/// Default page size.
pub const DEFAULT_LIMIT: u32 = 50;
/// Largest page size.
pub const MAX_LIMIT: u32 = 200;

/// Whose contracts a caller may list.
#[derive(Debug, Clone)]
pub enum ListScope {
    /// Every contract (admin).
    All,
    /// This seeker's contracts.
    Seeker(PrincipalId),
    /// Contracts with this operator's workers.
    Operator(PrincipalId),
}

/// The filters as received; each is checked here so a bad one is a 422 naming its field.
#[derive(Debug, Clone, Default)]
pub struct ListFilters {
    /// A contract state name.
    pub state: Option<String>,
    /// A worker id.
    pub worker_id: Option<String>,
    /// RFC 3339 time, inclusive.
    pub created_after: Option<String>,
    /// RFC 3339 time, exclusive.
    pub created_before: Option<String>,
    /// Page size.
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One contract in a listing: enough to choose one, without terms or deliverables (those are in
/// `GET /v1/contracts/{id}`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ContractSummary {
    /// Contract id (`ctr_…`).
    #[schema(value_type = String)]
    pub contract_id: ContractId,
    /// Current state.
    pub state: String,
    /// The seeker account.
    #[schema(value_type = String)]
    pub seeker_id: PrincipalId,
    /// The worker listing.
    #[schema(value_type = String)]
    pub worker_id: WorkerId,
    /// Task type hired.
    pub task_type: String,
    /// The price from the signed terms (amount, asset, network).
    #[schema(value_type = Object)]
    pub price: Value,
    /// Canonical hash of the signed terms.
    pub terms_hash: String,
    /// Worker attempts used.
    pub attempts_used: u32,
    /// Next time-based transition, if any.
    pub deadline_at: Option<DateTime<Utc>>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

/// A page of contracts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ContractPage {
    /// Newest first.
    pub contracts: Vec<ContractSummary>,
    /// Pass as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

fn invalid_filter(field: &str, reason: impl Into<String>) -> HireError {
    HireError::unprocessable(
        ErrorCode::InvalidFilter,
        format!("{field}: {}", reason.into()),
    )
    .with_details(json!({ "field": field }))
}

fn invalid_cursor() -> HireError {
    HireError::unprocessable(
        ErrorCode::InvalidCursor,
        "cursor is not a next_cursor this endpoint returned".to_owned(),
    )
    .with_details(json!({ "field": "cursor" }))
}

fn parse_time(field: &str, raw: Option<&str>) -> Result<Option<DateTime<Utc>>, HireError> {
    raw.map(|raw| {
        DateTime::parse_from_rfc3339(raw)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| invalid_filter(field, "expected an RFC 3339 time"))
    })
    .transpose()
}

fn encode_cursor(contract: &ContractRecord) -> String {
    URL_SAFE_NO_PAD.encode(format!(
        "{}:{}",
        contract.created_at.timestamp_millis(),
        contract.contract_id
    ))
}

fn decode_cursor(raw: &str) -> Result<(DateTime<Utc>, ContractId), HireError> {
    let bytes = URL_SAFE_NO_PAD.decode(raw).map_err(|_| invalid_cursor())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid_cursor())?;
    let (millis, id) = text.split_once(':').ok_or_else(invalid_cursor)?;
    let at = millis
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(invalid_cursor)?;
    let id = ContractId::from_str(id).map_err(|_| invalid_cursor())?;
    Ok((at, id))
}

/// The page of contracts `scope` may see that match `filters`.
pub async fn list_contracts(
    store: &Store,
    scope: ListScope,
    filters: &ListFilters,
) -> Result<ContractPage, HireError> {
    let limit = filters.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid_filter(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let state = filters
        .state
        .as_deref()
        .map(|raw| {
            ContractState::from_str(raw)
                .map(|state| state.to_string())
                .map_err(|_| invalid_filter("state", "not a contract state"))
        })
        .transpose()?;
    let worker_id = filters
        .worker_id
        .as_deref()
        .map(|raw| {
            WorkerId::from_str(raw)
                .map_err(|_| invalid_filter("worker_id", "not a worker id (wk_…)"))
        })
        .transpose()?;
    let created_after = parse_time("created_after", filters.created_after.as_deref())?;
    let created_before = parse_time("created_before", filters.created_before.as_deref())?;
    let after = filters.cursor.as_deref().map(decode_cursor).transpose()?;
    let (seeker_id, operator_id) = match scope {
        ListScope::All => (None, None),
        ListScope::Seeker(id) => (Some(id), None),
        ListScope::Operator(id) => (None, Some(id)),
    };
    let records = store
        .list_contracts(&ContractQuery {
            seeker_id,
            operator_id,
            state,
            worker_id,
            created_after,
            created_before,
            after,
            limit,
        })
        .await?;
    let next_cursor = (records.len() == limit as usize)
        .then(|| records.last().map(encode_cursor))
        .flatten();
    let contracts = records
        .into_iter()
        .map(|record| ContractSummary {
            price: record
                .terms_document
                .get("price")
                .cloned()
                .unwrap_or(Value::Null),
            contract_id: record.contract_id,
            state: record.state.to_string(),
            seeker_id: record.seeker_id,
            worker_id: record.worker_id,
            task_type: record.task_type,
            terms_hash: record.terms_hash,
            attempts_used: record.attempts_used,
            deadline_at: record.deadline_at,
            created_at: record.created_at,
            updated_at: record.updated_at,
        })
        .collect();
    Ok(ContractPage {
        contracts,
        next_cursor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_tampering() {
        let id = ContractId::generate();
        let at = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let raw = URL_SAFE_NO_PAD.encode(format!("{}:{id}", at.timestamp_millis()));
        assert_eq!(decode_cursor(&raw).unwrap(), (at, id));
        for bad in [
            "",
            "!!",
            &URL_SAFE_NO_PAD.encode("12:wk_01J9ZQ4X1V8E6W0M3C5T7B2N4K"),
            &URL_SAFE_NO_PAD.encode("x:ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K"),
        ] {
            assert_eq!(
                decode_cursor(bad).unwrap_err().code.as_str(),
                "invalid_cursor"
            );
        }
    }
}
