//! `GET /v1/contracts/{id}/events` (parties): the contract's event log as Server-Sent Events.
//!
//! The stream starts after `Last-Event-ID` (header; what a reconnecting `EventSource` sends)
//! or `?after=` (first connection), replays the log from the store, then follows live events
//! (see [`crate::event_stream::event_stream`]). Event ids are the per-contract `seq`. Heartbeat
//! comments (`: heartbeat`) go out every `events.heartbeat_interval_ms`. A terminal contract's
//! stream ends once its log has been sent.

use std::str::FromStr;

use axum::{
    extract::State,
    http::{HeaderMap, HeaderValue, header},
    response::{
        IntoResponse, Response,
        sse::{KeepAlive, Sse},
    },
};
use hiregate_contracts::id::ContractId;
use serde::Deserialize;

use super::extract::{AppPath, AppQuery, Party};
use super::routes::{ErrorBody, Routes, get};
use crate::{
    error::{ApiError, ApiResult},
    event_stream::{StreamTiming, event_stream},
    state::AppState,
};
use hiregate_contracts::id::PrincipalId;
use hiregate_store::{ContractRecord, Store};

/// The event stream route.
pub fn router() -> Routes {
    Routes::new().route("/v1/contracts/{id}/events", get(contract_events))
}

/// `?after=<seq>`: start after this event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    after: Option<i64>,
}

/// The contract `raw` names, if `caller` is its seeker or its worker's operator; anyone else
/// gets the same 404 as for a contract that does not exist.
pub(crate) async fn contract_for_party(
    store: &Store,
    caller: &PrincipalId,
    raw: &str,
) -> ApiResult<ContractRecord> {
    let not_found = || ApiError::NotFound {
        resource: "contract",
    };
    let id = ContractId::from_str(raw.trim()).map_err(|_| not_found())?;
    let contract = store
        .get_contract(id.as_str())
        .await?
        .ok_or_else(not_found)?;
    let allowed = if caller.is_seeker() {
        &contract.seeker_id == caller
    } else {
        store
            .get_worker(&contract.worker_id)
            .await?
            .is_some_and(|listing| &listing.operator_id == caller)
    };
    if allowed {
        Ok(contract)
    } else {
        Err(not_found())
    }
}

fn start_after(headers: &HeaderMap, query: &EventsQuery) -> ApiResult<i64> {
    let invalid = |what: &str| ApiError::BadRequest {
        code: "invalid_event_id",
        message: format!("{what} must be a non-negative event id (a contract event seq)"),
    };
    if let Some(value) = headers.get("last-event-id") {
        let text = value.to_str().map_err(|_| invalid("Last-Event-ID"))?.trim();
        if text.is_empty() {
            return Ok(0);
        }
        return text
            .parse::<i64>()
            .ok()
            .filter(|seq| *seq >= 0)
            .ok_or_else(|| invalid("Last-Event-ID"));
    }
    match query.after {
        Some(after) if after < 0 => Err(invalid("after")),
        Some(after) => Ok(after),
        None => Ok(0),
    }
}

/// One Server-Sent Event of the contract's stream, as a client's SSE parser reads it.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct ContractSseEvent {
    /// The contract event's seq (what `Last-Event-ID` resumes after).
    #[schema(pattern = r"^[0-9]+$")]
    id: String,
    /// The contract event's kind, e.g. `contract_offered`, `payment_verified`.
    event: String,
    /// The contract event as JSON: `contract_id`, `seq`, `kind`, `at`, `actor`, `from_state`,
    /// `to_state`, `details`.
    data: String,
}

#[utoipa::path(
    get,
    path = "/v1/contracts/{id}/events",
    tag = "contracts",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)"), ("after" = Option<i64>, Query, description = "Start after this seq (first connection)", minimum = 0), ("Last-Event-ID" = Option<String>, Header, description = "Resume after this seq (what a reconnecting EventSource sends); wins over `after`", pattern = r"^[0-9]{0,18}$")),
    security(("seeker_key" = []), ("operator_key" = []), ("wallet_sign_in" = [])),
    responses(
        (status = 200, description = "Server-Sent Events: one event per contract event (`id` = its seq), `: heartbeat` comments; ends after a terminal contract's log", content_type = "text/event-stream", body = ContractSseEvent),
        (status = 400, description = "`invalid_event_id`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`; a refused `SIGN-IN-WITH-X`: `invalid_siwx_header`, `invalid_siwx_domain_mismatch`, `invalid_siwx_uri_mismatch`, `invalid_siwx_version`, `invalid_siwx_chain_id`, `invalid_siwx_unsupported_chain`, `invalid_siwx_nonce` (malformed or already used), `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future`, `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid`, `invalid_siwx_malformed_signature`, `invalid_siwx_signature`. `PAYMENT-REQUIRED` carries the `sign-in-with-x` challenge", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn contract_events(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
    AppQuery(query): AppQuery<EventsQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let after = start_after(&headers, &query)?;
    // Subscribe before anything is read, so no event can fall between replay and live.
    let live = state.store.subscribe_events();
    let contract = contract_for_party(&state.store, &party.principal_id, &id).await?;
    let settings = &state.config.events;
    let stream = event_stream(
        state.store.clone(),
        contract.contract_id.into(),
        after,
        live,
        StreamTiming {
            poll_interval: settings.poll_interval(),
            replay_batch: settings.replay_batch,
        },
        state.shutdown.clone(),
    );
    let mut response = Sse::new(stream)
        .keep_alive(
            KeepAlive::new()
                .interval(settings.heartbeat_interval())
                .text("heartbeat"),
        )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Proxies such as nginx buffer responses unless told not to; a buffered stream is no stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
