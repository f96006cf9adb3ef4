//! `POST /v1/contracts/{id}/disputes` (parties), `GET /v1/disputes/{id}` (parties, admin),
//! `GET /v1/disputes?state=escalated` (admin: the arbiter's queue),
//! `POST /v1/disputes/{id}/response` (the party that did not open it: its side, once) and
//! `POST /v1/disputes/{id}/decision` (admin, the arbiter); see [`hiregate_engine::hire::disputes`]. And
//! `POST /v1/contracts/{id}/refund` (admin, the arbiter): an escrowed capture refunded before
//! the escrow's refund deadline.

use axum::{
    Json,
    extract::State,
    http::{HeaderMap, StatusCode},
};
use hiregate_contracts::id::ContractId;
use hiregate_store::states::DisputeState;
use serde_json::Value;

use super::contracts::correlation_id;
use super::extract::{Admin, AppPath, AppQuery, DeferredJson, Party};
use super::routes::{ErrorBody, Routes, get, post};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_engine::hire::disputes::{
    DecisionRequest, DisputeAnswer, DisputeRequest, MAX_QUEUE_PAGE,
};

/// Longest dispute id accepted in a path (`dsp_` + a ULID is 30).
const MAX_DISPUTE_ID_LEN: usize = 64;

/// The dispute routes.
pub fn router() -> Routes {
    Routes::new()
        .route("/v1/contracts/{id}/disputes", post(open_dispute))
        .route("/v1/disputes", get(dispute_queue))
        .route("/v1/disputes/{id}", get(view_dispute))
        .route("/v1/disputes/{id}/response", post(answer_dispute))
        .route("/v1/disputes/{id}/decision", post(decide_dispute))
        .route("/v1/contracts/{id}/refund", post(refund_contract))
}

/// `?state=&after=&limit=` of the arbiter's queue.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueQuery {
    /// `open`, `escalated` (the default) or `decided`.
    state: Option<String>,
    /// `next_after` of the previous page.
    after: Option<String>,
    limit: Option<u32>,
}

/// 200 `{disputes: [{dispute, contract}], next_after}`, oldest first; 400 `invalid_query` for
/// an unknown state, a malformed `after` or a limit outside 1..=100.
#[utoipa::path(
    get,
    path = "/v1/disputes",
    tag = "disputes",
    params(
        ("state" = Option<String>, Query, description = "`open`, `escalated` (default) or `decided`", pattern = r"^(open|escalated|decided)$"),
        ("after" = Option<String>, Query, description = "`next_after` of the previous page (a dispute id; empty: the first page)", pattern = r"^(dsp_[0-9A-Za-z_]{1,60})?$"),
        ("limit" = Option<u32>, Query, description = "1..=100, default 50", minimum = 1, maximum = 100),
    ),
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "The arbiter's queue, oldest first: each dispute with its contract", body = Object),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: not the admin key", body = ErrorBody),
    ),
)]
pub(crate) async fn dispute_queue(
    State(state): State<AppState>,
    _admin: Admin,
    AppQuery(query): AppQuery<QueueQuery>,
) -> ApiResult<Json<Value>> {
    let wanted = match query.state.as_deref() {
        None => DisputeState::Escalated,
        Some(state) => state.parse().map_err(|_| {
            ApiError::InvalidQuery("state must be open, escalated or decided".to_owned())
        })?,
    };
    let limit = query.limit.unwrap_or(50);
    if !(1..=MAX_QUEUE_PAGE).contains(&limit) {
        return Err(ApiError::InvalidQuery(format!(
            "limit must be between 1 and {MAX_QUEUE_PAGE}"
        )));
    }
    let after = match query.after.as_deref().filter(|a| !a.is_empty()) {
        Some(raw) => Some(
            dispute_id(raw)
                .map_err(|_| ApiError::InvalidQuery("after must be a dispute id".to_owned()))?,
        ),
        None => None,
    };
    Ok(Json(state.hire.dispute_queue(wanted, after, limit).await?))
}

/// `POST /v1/contracts/{id}/refund` body.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefundRequest {
    /// Why the arbiter refunds (recorded in the event log): 1 to 2000 bytes, not blank.
    #[schema(min_length = 1, max_length = 500, pattern = r"\S")]
    reason: String,
    /// What to refund, atomic units as a decimal string: 1 up to what was captured (a partial
    /// refund, e.g. for work partly at fault). Absent: all that was captured.
    #[serde(default)]
    #[schema(pattern = r"^[0-9]{1,78}$", example = "500000")]
    amount: Option<String>,
}

/// The arbiter refunds a settled escrowed contract: 200 with the refund transaction; 409
/// `refund_not_possible` / `refund_window_closed` / `refund_not_funded`.
#[utoipa::path(
    post,
    path = "/v1/contracts/{id}/refund",
    tag = "disputes",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    request_body = RefundRequest,
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "The refund: its transaction and the contract's new state", body = Object),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`refund_not_possible` / `refund_window_closed` / `refund_not_funded`", body = ErrorBody),
        (status = 422, description = "`invalid_body`: reason must be 1 to 2000 characters, amount a decimal string; `validation_failed`: amount more than was captured", body = ErrorBody),
    ),
)]
pub(crate) async fn refund_contract(
    State(state): State<AppState>,
    _admin: Admin,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
    body: DeferredJson<RefundRequest>,
) -> ApiResult<Json<Value>> {
    let contract_id: ContractId = id.trim().parse().map_err(|_| ApiError::NotFound {
        resource: "contract",
    })?;
    // The contract first: 404 for none, whatever the body.
    state
        .store
        .get_contract(contract_id.as_str())
        .await?
        .ok_or(ApiError::NotFound {
            resource: "contract",
        })?;
    let request = body.parse()?;
    let reason = request.reason.trim();
    if reason.is_empty() || reason.len() > 2_000 {
        return Err(ApiError::Unprocessable {
            code: "invalid_body",
            message: "reason must be 1 to 2000 characters".to_owned(),
        });
    }
    let amount = request
        .amount
        .as_deref()
        .map(|amount| {
            amount
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| alloy::primitives::U256::from_str_radix(amount, 10).ok())
                .flatten()
                .ok_or_else(|| ApiError::Unprocessable {
                    code: "invalid_body",
                    message: "amount must be a decimal string of atomic units".to_owned(),
                })
        })
        .transpose()?;
    let body = state
        .hire
        .refund(
            contract_id.as_str(),
            reason,
            amount,
            correlation_id(&headers),
        )
        .await?;
    Ok(Json(body))
}

fn dispute_id(raw: &str) -> ApiResult<&str> {
    let raw = raw.trim();
    if raw.starts_with("dsp_")
        && raw.len() <= MAX_DISPUTE_ID_LEN
        && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        Ok(raw)
    } else {
        Err(ApiError::NotFound {
            resource: "dispute",
        })
    }
}

/// 201 with the dispute, already decided when the replay could decide it.
#[utoipa::path(
    post,
    path = "/v1/contracts/{id}/disputes",
    tag = "disputes",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    request_body = DisputeRequest,
    security(("seeker_key" = []), ("operator_key" = []), ("wallet_sign_in" = [])),
    responses(
        (status = 201, description = "The dispute: decided when the replay could decide it, else `escalated` to the arbiter (a seeker's dispute the replay does not uphold, an operator's dispute of a failure, stored bytes failing their digest: `replay.error.code` `stored_digest_mismatch`)", body = Object),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`; a refused `SIGN-IN-WITH-X`: `invalid_siwx_header`, `invalid_siwx_domain_mismatch`, `invalid_siwx_uri_mismatch`, `invalid_siwx_version`, `invalid_siwx_chain_id`, `invalid_siwx_unsupported_chain`, `invalid_siwx_nonce` (malformed or already used), `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future`, `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid`, `invalid_siwx_malformed_signature`, `invalid_siwx_signature`. `PAYMENT-REQUIRED` carries the `sign-in-with-x` challenge", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`dispute_window_closed` / `dispute_already_open` / `contract_not_disputable` / `money_released` (an operator's dispute of a failure whose money went back to the payer: `details.reason` `escrow_released` or `authorization_expired`)", body = ErrorBody),
        (status = 422, description = "`invalid_body`; `validation_failed` (`details.field`: `reason`, `claim`: a seeker's claim needs `text` and may name `failing_paths`)", body = ErrorBody),
    ),
)]
pub(crate) async fn open_dispute(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
    body: DeferredJson<DisputeRequest>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let contract_id: ContractId = id.trim().parse().map_err(|_| ApiError::NotFound {
        resource: "contract",
    })?;
    state
        .hire
        .authorize_dispute(&party.principal_id, contract_id.as_str())
        .await?;
    let request = body.parse()?;
    let body = state
        .hire
        .open_dispute(
            &party.principal_id,
            contract_id.as_str(),
            request,
            &correlation_id(&headers),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(body)))
}

/// The dispute, for the admin or a party of its contract (404 for anyone else).
#[utoipa::path(
    get,
    path = "/v1/disputes/{id}",
    tag = "disputes",
    params(("id" = String, Path, description = "Dispute id (`dsp_…`)")),
    security(("admin_key" = []), ("seeker_key" = []), ("operator_key" = [])),
    responses(
        (status = 200, description = "The dispute with the replay result and the decision, once made", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such dispute of the caller", body = ErrorBody),
    ),
)]
pub(crate) async fn view_dispute(
    State(state): State<AppState>,
    admin: Result<Admin, ApiError>,
    party: Result<Party, ApiError>,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<Value>> {
    let id = dispute_id(&id)?;
    let body = match (admin, party) {
        (Ok(Admin), _) => state.hire.view_dispute(None, id).await?,
        (Err(_), Ok(party)) => {
            state
                .hire
                .view_dispute(Some(&party.principal_id), id)
                .await?
        }
        (Err(_), Err(error)) => return Err(error),
    };
    Ok(Json(body))
}

/// 200 with the dispute, the other party's statement recorded.
#[utoipa::path(
    post,
    path = "/v1/disputes/{id}/response",
    tag = "disputes",
    params(("id" = String, Path, description = "Dispute id (`dsp_…`)")),
    request_body = DisputeAnswer,
    security(("seeker_key" = []), ("operator_key" = [])),
    responses(
        (status = 200, description = "The dispute with the other party's statement", body = Object),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such dispute of the caller", body = ErrorBody),
        (status = 409, description = "already answered, answered by the party that opened it, or already decided", body = ErrorBody),
        (status = 422, description = "`validation_failed`", body = ErrorBody),
    ),
)]
pub(crate) async fn answer_dispute(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
    body: DeferredJson<DisputeAnswer>,
) -> ApiResult<Json<Value>> {
    let id = dispute_id(&id)?;
    // 404 for anyone not a party of the dispute's contract, whatever the body.
    state
        .hire
        .view_dispute(Some(&party.principal_id), id)
        .await?;
    let answer = body.parse()?;
    Ok(Json(
        state
            .hire
            .answer_dispute(&party.principal_id, id, answer, &correlation_id(&headers))
            .await?,
    ))
}

/// The arbiter's final decision; 409 `dispute_already_decided` when decided before.
#[utoipa::path(
    post,
    path = "/v1/disputes/{id}/decision",
    tag = "disputes",
    params(("id" = String, Path, description = "Dispute id (`dsp_…`)")),
    request_body = DecisionRequest,
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "The decided dispute", body = Object),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`dispute_already_decided`", body = ErrorBody),
        (status = 422, description = "`invalid_body`", body = ErrorBody),
    ),
)]
pub(crate) async fn decide_dispute(
    State(state): State<AppState>,
    _admin: Admin,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
    body: DeferredJson<DecisionRequest>,
) -> ApiResult<Json<Value>> {
    let id = dispute_id(&id)?;
    state.hire.view_dispute(None, id).await?;
    let request = body.parse()?;
    let body = state
        .hire
        .decide_dispute(id, request, &correlation_id(&headers))
        .await?;
    Ok(Json(body))
}
