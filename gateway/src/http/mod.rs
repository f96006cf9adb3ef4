//! The HTTP API: one router per resource, merged here under the shared middleware stack.
//! Routes are registered through [`routes::Routes`] (see there why); `/openapi.json` describes
//! them all ([`openapi`]) and `/docs` shows that description.
//!
//! Layers, outermost first: request id (`x-request-id`, generated if absent) → trace span
//! (method, matched route, request id) → request-id propagation to the response → CORS →
//! metrics and the access log line → timeout (`http.request_timeout_s`, answered as 503
//! `request_timeout`) → body limit (`http.body_limit_bytes`, enforced by the body extractors so
//! the 413 is a JSON error).

pub mod admin;
pub mod agent_cards;
pub mod answers;
pub mod assets;
pub mod callbacks;
pub mod cancel;
pub mod console;
pub mod contracts;
pub mod disputes;
pub mod docs;
pub mod events;
pub mod extract;
pub mod keys;
pub mod mcp;
pub mod openapi;
pub mod ops;
pub mod receipts;
pub mod reputation;
pub mod routes;
pub mod webhooks;
pub mod workers;
pub mod x402_resource;

use std::time::{Duration, Instant};

use axum::{
    Router,
    error_handling::HandleErrorLayer,
    extract::{DefaultBodyLimit, MatchedPath, Request, State},
    http::{HeaderName, HeaderValue, Method, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use tower::{BoxError, ServiceBuilder, timeout::TimeoutLayer};
use tower_http::{
    cors::{AllowOrigin, CorsLayer},
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

use crate::{
    error::ApiError,
    metrics::{HttpLabels, RouteLabels},
    state::AppState,
};

/// x402 v2 headers (plus the request id) that browsers must be allowed to send or read.
const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
const PAYMENT_SIGNATURE: HeaderName = HeaderName::from_static("payment-signature");
const X_CONTRACT_ID: HeaderName = HeaderName::from_static("x-contract-id");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The complete application router.
pub fn router(state: AppState) -> Router {
    let http = &state.config.http;
    let timeout = http.request_timeout();
    let body_limit = http.body_limit_bytes;
    let cors = cors_layer(&http.cors_allowed_origins);

    api_routes()
        .into_router()
        .merge(mcp::router(&state))
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::new(X_REQUEST_ID, MakeRequestUuid))
                .layer(TraceLayer::new_for_http().make_span_with(make_span))
                .layer(PropagateRequestIdLayer::new(X_REQUEST_ID))
                .layer(cors)
                .layer(middleware::from_fn_with_state(state.clone(), observe))
                .layer(HandleErrorLayer::new(timeout_to_error))
                .layer(TimeoutLayer::new(timeout))
                .layer(DefaultBodyLimit::max(body_limit)),
        )
        .with_state(state)
}

/// Every route of the API, registered through [`routes::Routes`] so the OpenAPI coverage test
/// sees exactly what is served.
pub fn api_routes() -> routes::Routes {
    routes::Routes::new()
        .merge(ops::router())
        .merge(openapi::router())
        .merge(docs::router())
        .merge(console::router())
        .merge(admin::router())
        .merge(keys::router())
        .merge(workers::router())
        .merge(reputation::router())
        .merge(agent_cards::router())
        .merge(assets::router())
        .merge(contracts::router())
        .merge(callbacks::router())
        .merge(cancel::router())
        .merge(disputes::router())
        .merge(receipts::router())
        .merge(events::router())
        .merge(webhooks::router())
        .merge(x402_resource::router())
}

fn make_span(request: &Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let request_id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    tracing::info_span!("http", method = %request.method(), route, request_id)
}

fn cors_layer(origins: &[String]) -> CorsLayer {
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        // Validated at config load; anything unparsable is skipped rather than panicking.
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    CorsLayer::new()
        .allow_origin(allow_origin)
        .allow_methods([Method::GET, Method::POST, Method::PATCH, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            PAYMENT_SIGNATURE,
            X_CONTRACT_ID,
            IDEMPOTENCY_KEY,
            LAST_EVENT_ID,
            HeaderName::from_static(crate::adapters::secrets::SECRETS_HEADER),
            // @x402/fetch sets this (odd) request header on its paid retry; without it a
            // browser's preflight of that retry would fail.
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
        ])
        .expose_headers(
            [
                PAYMENT_REQUIRED,
                PAYMENT_RESPONSE,
                X_REQUEST_ID,
                header::RETRY_AFTER,
                header::LOCATION,
            ]
            .into_iter()
            .chain(answers::INFORMATIONAL_HEADERS)
            .chain(answers::HIRE_TRACKING_HEADERS)
            .collect::<Vec<_>>(),
        )
        .max_age(Duration::from_secs(600))
}

/// Request metrics, and one access log line per request at info (target
/// `hiregate_gateway::access`): method, matched route (never the raw path or query, which may
/// carry ids and tokens), status, latency and request id. Headers and bodies are never logged:
/// they carry API keys and payment signatures.
async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    // Set by `SetRequestIdLayer` (outer), so always present; a client's own id is kept.
    let request_id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .chars()
        .take(128)
        .collect::<String>();
    let started = Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    tracing::info!(
        target: "hiregate_gateway::access",
        method = %method,
        route = %route,
        status,
        latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        request_id = %request_id,
        "request served"
    );
    state
        .metrics
        .http_request_duration
        .get_or_create(&RouteLabels {
            method: method.clone(),
            route: route.clone(),
        })
        .observe(elapsed.as_secs_f64());
    state
        .metrics
        .http_requests
        .get_or_create(&HttpLabels {
            method,
            route,
            status,
        })
        .inc();
    response
}

async fn timeout_to_error(error: BoxError) -> Response {
    if error.is::<tower::timeout::error::Elapsed>() {
        ApiError::RequestTimeout.into_response()
    } else {
        ApiError::Internal(anyhow::anyhow!("middleware error: {error}")).into_response()
    }
}

async fn route_not_found() -> ApiError {
    ApiError::RouteNotFound
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
