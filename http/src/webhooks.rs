//! Seeker webhook management (see [`hiregate_engine::webhooks`]):
//!
//! | route | who | what |
//! |---|---|---|
//! | `POST /v1/webhooks/secret` | seeker | create or rotate the signing secret; 201 with `secret` (`whsec_…`), the only time it is shown |
//! | `GET /v1/webhooks/secret` | seeker | whether a secret exists and when it was made (never the secret) |
//! | `GET /v1/webhooks/dead-letters` | seeker, or a wallet seeker's capability token | own deliveries that exhausted their tries or hit a 410; `?after=<delivery id>&limit=` |
//! | `POST /v1/webhooks/dead-letters/{id}/redeliver` | seeker, or capability token | queue again (a fresh round of tries; re-enables the endpoint); 202 |
//! | `GET /v1/contracts/{id}/webhook-deliveries` | the contract's seeker (its key, or the contract's capability token) | every delivery of the contract's events with each try |
//!
//! A wallet seeker (a contract hired over the stable x402 resource, see
//! [`hiregate_engine::hire::resource`]) owns one contract and proves it with that contract's capability
//! token (`hg_cap_…`); its secret is derived from the contract and shown with every paid answer,
//! so the secret routes stay with API-key seekers (a rotation would part it from that answer).

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::routes::{ErrorBody, Routes, get, post};
use super::{
    events::contract_for_party,
    extract::{AppPath, AppQuery, Party, Seeker},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::PrincipalId;
use hiregate_engine::webhooks::{message_id, parse_message_id, rotate_secret};
use hiregate_store::{DeliveryRecord, Redelivery, keys::Role, states::DeliveryState};

const MAX_PAGE: u32 = 500;

/// The seeker a party is: an API-key seeker, or the wallet seeker of a capability token.
/// Operators are refused as the key-only [`Seeker`] refuses them.
fn seeker_of(party: Party) -> ApiResult<PrincipalId> {
    if party.role == Role::Seeker {
        Ok(party.principal_id)
    } else {
        Err(ApiError::Forbidden {
            required: Role::Seeker,
        })
    }
}

/// Webhook routes.
pub fn router() -> Routes {
    Routes::new()
        .route(
            "/v1/webhooks/secret",
            get(secret_status).post(create_secret),
        )
        .route("/v1/webhooks/dead-letters", get(dead_letters))
        .route("/v1/webhooks/dead-letters/{id}/redeliver", post(redeliver))
        .route(
            "/v1/contracts/{id}/webhook-deliveries",
            get(contract_deliveries),
        )
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/secret",
    tag = "webhooks",
    security(("seeker_key" = [])),
    responses(
        (status = 201, description = "The new signing secret (`whsec_…`), shown once; deliveries are signed with it from now on", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
    ),
)]
pub(crate) async fn create_secret(
    State(state): State<AppState>,
    seeker: Seeker,
) -> ApiResult<Response> {
    let record =
        rotate_secret(&state.store, &seeker.principal_id, state.hire.clock().now()).await?;
    tracing::info!(seeker_id = %seeker.principal_id, "webhook secret rotated");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "secret": record.secret,
            "created_at": record.created_at,
            "scheme": "standard-webhooks-v1",
            "note": "shown once; store it now. Deliveries are signed with the current secret.",
        })),
    )
        .into_response())
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/secret",
    tag = "webhooks",
    security(("seeker_key" = [])),
    responses(
        (status = 200, description = "`{configured, created_at}`; never the secret", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
    ),
)]
pub(crate) async fn secret_status(
    State(state): State<AppState>,
    seeker: Seeker,
) -> ApiResult<Json<Value>> {
    let record = state.store.webhook_secret(&seeker.principal_id).await?;
    Ok(Json(json!({
        "configured": record.is_some(),
        "created_at": record.map(|r| r.created_at),
    })))
}

/// `?after=&limit=` for dead letters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Page {
    after: Option<String>,
    limit: Option<u32>,
}

fn delivery_json(delivery: &DeliveryRecord) -> Value {
    json!({
        "delivery_id": message_id(delivery.event_id),
        "contract_id": delivery.contract_id,
        "seq": delivery.seq,
        "kind": delivery.kind,
        "url": delivery.url,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "total_attempts": delivery.total_attempts,
        "next_attempt_at": (delivery.state == DeliveryState::Pending).then_some(delivery.next_attempt_at),
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "endpoint_disabled": delivery.endpoint_disabled,
        "created_at": delivery.created_at,
        "finished_at": delivery.finished_at,
    })
}

#[utoipa::path(
    get,
    path = "/v1/webhooks/dead-letters",
    tag = "webhooks",
    params(("after" = Option<String>, Query, description = "`next_after` of the previous page (`whd_<n>`; empty: the first page)", pattern = r"^(whd_[1-9][0-9]{0,17})?$"), ("limit" = Option<u32>, Query, description = "Page size, 1–500 (default 100)", minimum = 1, maximum = 500)),
    security(("seeker_key" = [])),
    responses(
        (status = 200, description = "`{dead_letters: [...], next_after}`", body = Object),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
    ),
)]
pub(crate) async fn dead_letters(
    State(state): State<AppState>,
    party: Party,
    AppQuery(page): AppQuery<Page>,
) -> ApiResult<Json<Value>> {
    let seeker = seeker_of(party)?;
    let after = match page.after.as_deref() {
        None | Some("") => 0,
        Some(raw) => parse_message_id(raw).ok_or_else(|| {
            ApiError::InvalidQuery("`after` must be a delivery id (whd_<n>)".to_owned())
        })?,
    };
    let limit = page.limit.unwrap_or(100).clamp(1, MAX_PAGE);
    let letters = state
        .store
        .list_webhook_dead_letters(seeker.as_str(), after, limit)
        .await?;
    let next = (letters.len() == limit as usize)
        .then(|| letters.last().map(|d| message_id(d.event_id)))
        .flatten();
    Ok(Json(json!({
        "dead_letters": letters.iter().map(delivery_json).collect::<Vec<_>>(),
        "next_after": next,
    })))
}

#[utoipa::path(
    post,
    path = "/v1/webhooks/dead-letters/{id}/redeliver",
    tag = "webhooks",
    params(("id" = String, Path, description = "Delivery id (`whd_<n>`)")),
    security(("seeker_key" = [])),
    responses(
        (status = 202, description = "Queued again; the delivery as it now stands", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`not_a_dead_letter`", body = ErrorBody),
    ),
)]
pub(crate) async fn redeliver(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Response> {
    let seeker = seeker_of(party)?;
    let not_found = || ApiError::NotFound {
        resource: "dead letter",
    };
    let event_id = parse_message_id(&id).ok_or_else(not_found)?;
    let seeker_id = seeker.as_str();
    let delivery = match state
        .store
        .redeliver_webhook(seeker_id, event_id, state.hire.clock().now())
        .await?
    {
        Redelivery::Requeued(delivery) => delivery,
        Redelivery::NotFound => return Err(not_found()),
        Redelivery::NotDead { state } => {
            return Err(ApiError::Conflict {
                code: "not_a_dead_letter",
                message: format!("delivery {id} is {state}, not a dead letter"),
            });
        }
    };
    tracing::info!(
        event_id,
        seeker_id,
        "webhook dead letter queued for redelivery"
    );
    Ok((StatusCode::ACCEPTED, Json(delivery_json(&delivery))).into_response())
}

#[utoipa::path(
    get,
    path = "/v1/contracts/{id}/webhook-deliveries",
    tag = "webhooks",
    params(("id" = String, Path, description = "Contract id (`ctr_…`)")),
    security(("seeker_key" = [])),
    responses(
        (status = 200, description = "The contract's webhook deliveries with their attempt logs", body = Object),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn contract_deliveries(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<Value>> {
    let seeker = seeker_of(party)?;
    let contract = contract_for_party(&state.store, &seeker, &id).await?;
    let deliveries = state
        .store
        .list_webhook_deliveries(contract.contract_id.as_str())
        .await?;
    Ok(Json(json!({
        "contract_id": contract.contract_id,
        "deliveries": deliveries.iter().map(|d| {
            let mut view = delivery_json(d);
            view["attempt_log"] = d.attempt_log.iter().map(|a| json!({
                "attempt_no": a.attempt_no,
                "at": a.at,
                "http_status": a.http_status,
                "error": a.error,
                "duration_ms": a.duration_ms,
            })).collect();
            view
        }).collect::<Vec<_>>(),
    })))
}
