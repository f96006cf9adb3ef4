//! The stable x402 resources: `POST /x402/workers/{worker_id}/{task_type}` (anyone with an x402
//! client: the body is the task input, the 402 is paid like any x402 resource) and their
//! catalogue `GET /discovery/resources` (the x402 bazaar discovery list). The capability token
//! a paid answer carries is accepted by [`super::extract::Party`]. A `Hiregate-Webhook-Url`
//! header names where the contract's events go; the paid answer then carries the webhook
//! signing secret (see [`hiregate_engine::hire::resource`]).
//!
//! Handlers only parse; [`hiregate_engine::hire::resource`] does the work, and the answer is execute's
//! ([`answers::execution`]) with the contract's id, links and capability token added.

use axum::{
    Json,
    body::{Bytes, to_bytes},
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    answers,
    extract::{AppPath, AppQuery},
    routes::{ErrorBody, Routes, get, post},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::WorkerId;
use hiregate_engine::hire::resource::{
    CatalogueFilter, ResourceExecution, ResourceRequest, WEBHOOK_URL_HEADER,
};

/// The contract an x402 resource payment made, on every answer past the offer.
pub const X_CONTRACT_ID: HeaderName = HeaderName::from_static("x-hiregate-contract-id");

/// The stable resources and their catalogue.
pub fn router() -> Routes {
    Routes::new()
        .route("/x402/workers/{worker_id}/{task_type}", post(hire_resource))
        .route("/discovery/resources", get(discovery_resources))
}

/// `POST /x402/workers/{worker_id}/{task_type}`: hire the listing's task type with any x402
/// client, no account needed.
///
/// Unpaid, the input (the body) is checked against the listing's `input_schema` and answered
/// with a standard x402 v2 402 whose `accepts[0].extra.hiregate` is the gateway-signed offer
/// (terms without the input, `terms_hash`, `expires_at`, detached JWS); nothing is stored.
/// Paid (the same request with `PAYMENT-SIGNATURE` echoing that offer in `accepted`), the
/// contract is made from the offer once and executed, verified and settled like
/// `POST /v1/contracts/{id}/execute`; the answer adds `contract_id`, `links` and `access`: a
/// capability token (`Authorization: Bearer hg_cap_…`) for the contract's view, events,
/// receipt, disputes and webhook deliveries.
///
/// Webhooks: send `Hiregate-Webhook-Url: <url>` on both calls (x402 clients repeat the request's
/// headers); the URL is part of the signed terms, and the paid answer's `webhook` holds the
/// Standard Webhooks secret (`whsec_…`) its events are signed with.
#[utoipa::path(
    post,
    path = "/x402/workers/{worker_id}/{task_type}",
    tag = "x402",
    params(
        ("worker_id" = String, Path, description = "Listing id (`wk_…`)"),
        ("task_type" = String, Path, description = "One of the listing's task types"),
        ("PAYMENT-SIGNATURE" = Option<String>, Header, description = "x402 v2: base64 JSON `PaymentPayload` answering the 402's `PAYMENT-REQUIRED`, its `accepted` the offer unchanged"),
        ("Hiregate-Webhook-Url" = Option<String>, Header, description = "Where the contract's lifecycle events are POSTed (Standard Webhooks), checked like a proposal's `webhook_url`; the same on the unpaid and the paid call"),
    ),
    request_body(content = Object, description = "The task input (JSON), checked against the listing's `input_schema`; the paid request must send the same input"),
    responses(
        (status = 200, description = "Paid, executed, verified: execute's answer (the deliverable, `verification`, `settlement`) with `contract_id`, `links` (`contract`, `events`, `receipt`) and `access` (`token_type: Bearer`, `token: hg_cap_…`); with a webhook URL, `webhook` (`url`, `secret: whsec_…`, `deliveries`)", body = Object,
            headers(("PAYMENT-RESPONSE" = String, description = "x402 v2: base64 JSON settlement response"),
                    ("X-Hiregate-Contract-Id" = String, description = "The contract the payment made"))),
        (status = 202, description = "Paid; the work goes on (`pending`, `in_progress`, `queued`): poll `Location` (the contract view) with the `access` token", body = Object,
            headers(("Location" = String, description = "The contract view, readable with the capability token"))),
        (status = 400, description = "`malformed_json`; `input_schema_violation` (details.violations); `validation_failed` / `webhook_url_not_https`: a bad `Hiregate-Webhook-Url`; `payment_mismatch`: `accepted.extra.hiregate` names no offer of this gateway", body = ErrorBody),
        (status = 402, description = "Payment required: a fresh signed offer in `PAYMENT-REQUIRED` (`payment_required`), or the payment was refused (`payment_mismatch`: no offer of this gateway, or one for another resource; `invalid_payment_signature`; `payment_invalid`), with x402's `error` saying why", body = ErrorBody,
            headers(("PAYMENT-REQUIRED" = String, description = "x402 v2: base64 JSON `PaymentRequired`; `accepts[0].extra.hiregate` is the signed offer to echo"))),
        (status = 404, description = "`not_found`: no such listing", body = ErrorBody),
        (status = 409, description = "`input_mismatch`: the body (or `Hiregate-Webhook-Url`) is not the one the echoed offer was signed for; `worker_retired`; `payment_already_used`", body = ErrorBody),
        (status = 410, description = "`contract_expired`: the echoed offer expired before it was paid", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 422, description = "`task_type_not_offered` and the offer's other refusals; `verification_failed`: the deliverable failed verification, nothing settled, nothing shown", body = ErrorBody),
        (status = 429, description = "`too_many_requests`: the worker's queue is full; nothing was paid", body = ErrorBody),
        (status = 502, description = "`worker_failed`", body = ErrorBody),
        (status = 503, description = "`facilitator_unavailable`, `chain_unavailable`, `worker_unavailable`: retry after `Retry-After`", body = ErrorBody),
        (status = 504, description = "`worker_timeout`", body = ErrorBody),
    ),
)]
pub(crate) async fn hire_resource(
    State(state): State<AppState>,
    AppPath((worker_id, task_type)): AppPath<(String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Ok(worker_id) = worker_id.parse::<WorkerId>() else {
        return ApiError::NotFound { resource: "worker" }.into_response();
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return ApiError::from(rejection).into_response(),
    };
    let payment_signature = super::extract::payment_signature(&headers);
    let webhook_url = match headers.get(WEBHOOK_URL_HEADER).map(HeaderValue::to_str) {
        None => None,
        Some(Ok(url)) => Some(url.to_owned()),
        Some(Err(_)) => {
            return ApiError::BadRequest {
                code: "validation_failed",
                message: format!("{WEBHOOK_URL_HEADER} must be a URL in visible ASCII"),
            }
            .into_response();
        }
    };
    let correlation_id = headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(128).collect())
        .unwrap_or_else(|| format!("req_{}", ulid::Ulid::new()));
    let hired = state
        .hire
        .hire_resource(ResourceRequest {
            worker_id,
            task_type,
            body,
            payment_signature,
            webhook_url,
            correlation_id,
        })
        .await;
    with_access(&state, hired).await
}

/// Execute's answer, plus what a wallet seeker needs to follow its contract: the contract id
/// (header and body), its links, the capability token, and `Location` on a 202.
async fn with_access(state: &AppState, hired: ResourceExecution) -> Response {
    let ResourceExecution {
        execution,
        contract_id,
        capability,
        webhook,
    } = hired;
    let response = answers::execution(execution);
    let Some(contract_id) = contract_id else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    if let Ok(value) = HeaderValue::from_str(&contract_id) {
        parts.headers.insert(X_CONTRACT_ID, value);
    }
    let Some(token) = capability else {
        return Response::from_parts(parts, body);
    };
    let contract_url = contract_url(state, &contract_id);
    if parts.status == StatusCode::ACCEPTED
        && let Ok(value) = HeaderValue::from_str(&contract_url)
    {
        parts.headers.insert(header::LOCATION, value);
    }
    let bytes = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let mut json: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| json!({}));
    if let Some(object) = json.as_object_mut() {
        object.extend(access_fields(state, &contract_id, &token));
        if let Some((url, secret)) = webhook {
            let deliveries = format!("{contract_url}/webhook-deliveries");
            object.insert(
                "webhook".to_owned(),
                json!({
                    "url": url,
                    "secret": secret,
                    "scheme": "standard-webhooks-v1",
                    "deliveries": deliveries,
                    "note": "the contract's events are POSTed to `url`, signed with `secret`; \
                             the same secret comes with every paid answer of this request",
                }),
            );
            if let Some(grants) = object
                .get_mut("access")
                .and_then(|access| access.get_mut("grants"))
                .and_then(Value::as_array_mut)
            {
                grants.push(json!("webhook_deliveries"));
            }
        }
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(
        parts,
        axum::body::Body::from(serde_json::to_vec(&json).unwrap_or_default()),
    )
}

/// The contract view's URL.
pub(crate) fn contract_url(state: &AppState, contract_id: &str) -> String {
    let base = state.hire.base_url().as_str().trim_end_matches('/');
    format!("{base}/v1/contracts/{contract_id}")
}

/// What a paid answer of a stable resource adds for the wallet seeker to follow its contract:
/// `contract_id`, `links` and `access` (the capability token). The MCP hire tool answers the
/// same fields.
pub(crate) fn access_fields(
    state: &AppState,
    contract_id: &str,
    token: &str,
) -> serde_json::Map<String, Value> {
    let contract_url = contract_url(state, contract_id);
    let mut fields = serde_json::Map::new();
    fields.insert("contract_id".to_owned(), json!(contract_id));
    fields.insert(
        "links".to_owned(),
        json!({
            "contract": contract_url,
            "events": format!("{contract_url}/events"),
            "receipt": format!("{contract_url}/receipt"),
        }),
    );
    fields.insert(
        "access".to_owned(),
        json!({
            "token_type": "Bearer",
            "token": token,
            "grants": ["contract", "events", "receipt", "disputes"],
            "note": "send it as `Authorization: Bearer <token>` on the links; it is shown \
                     with every paid answer of this request and stored only hashed",
        }),
    );
    fields
}

/// `GET /discovery/resources`: one x402 resource per healthy listing and task type, in the
/// x402 bazaar discovery list's shape, filterable as the bazaar spec lists (`type`, `payTo`,
/// `scheme`, `network`, `extensions`, `limit`, `offset`).
#[utoipa::path(
    get,
    path = "/discovery/resources",
    tag = "x402",
    params(CatalogueFilter),
    responses(
        (status = 200, description = "`{x402Version: 2, items: [{resource, type, x402Version, accepts, lastUpdated, description, mimeType, extensions.bazaar, metadata}], pagination: {limit, offset, total}}`", body = Object),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
    ),
)]
pub(crate) async fn discovery_resources(
    State(state): State<AppState>,
    AppQuery(filter): AppQuery<CatalogueFilter>,
) -> ApiResult<Json<Value>> {
    Ok(Json(state.hire.resource_catalogue(&filter).await?))
}
