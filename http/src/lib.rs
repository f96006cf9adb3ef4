//! hiregate HTTP edge: the axum API over the engine (`hiregate-engine`), one router per
//! resource merged here under the shared middleware stack, its errors and extractors, the
//! OpenAPI document and its viewer, the console and docs assets, A2A and the MCP server.
//! Engine answers ([`hiregate_engine::hire::outcome::Outcome`], [`hiregate_engine::hire::error::HireError`])
//! become HTTP here ([`answers`]) and nowhere below.
//!
//! | module | role |
//! |---|---|
//! | [`state`] | [`state::AppState`]: the engine's services and the HTTP-only parts, shared by handlers |
//! | [`error`] | [`error::ApiError`]: stable codes, `{"error":{code,message,details}}` |
//! | [`answers`] | engine outcomes and errors rendered as the REST API's answers, byte for byte |
//! | [`routes`], [`openapi`], [`docs`] | routes registered with their OpenAPI description (`/openapi.json`), the viewer (`/docs`) |
//! | [`extract`], [`siwx`] | JSON bodies, paths and queries; API keys, contract capability tokens, sign-in-with-x wallet proofs |
//! | [`layers`] | request id, trace, CORS, metrics, timeout, body limit |
//! | [`ops`], [`admin`], [`keys`], [`workers`], [`contracts`], [`cancel`], [`disputes`], [`receipts`], [`reputation`], [`webhooks`], [`callbacks`], [`events`], [`agent_cards`] | the REST API's routers |
//! | [`event_stream`] | the SSE body of `GET /v1/contracts/{id}/events`: replay, then live events |
//! | [`x402_resource`] | the stable x402 resources (`/x402/workers/{id}/{task}`) and their discovery list |
//! | [`a2a`] | A2A v1.0 JSON-RPC interfaces with the a2a-x402 extension, and the signed agent cards ([`a2a::cards`]) |
//! | [`mcp`] | the MCP server: `/mcp` over streamable HTTP, its tools ([`mcp::tools`], also served over stdio by `hiregate mcp`) |
//! | [`console`], [`assets`] | the web console (`/console`, embedded assets) |
//!
//! Layers, outermost first (see [`layers`]): request id (`x-request-id`, generated if absent),
//! trace span (the request id, at debug) and the id on the answer → CORS (requests with
//! `Origin`) → metrics and the access log line, timeout (`http.request_timeout_s`, answered as
//! 503 `request_timeout`) → body limit (`http.body_limit_bytes`, enforced by the body extractors so the 413 is a JSON
//! error) → the sign-in-with-x challenge on a contract route's 401 ([`siwx::DeclareLayer`]).

pub mod a2a;
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
pub mod error;
pub mod event_stream;
pub mod events;
pub mod extract;
pub mod keys;
pub mod layers;
pub mod mcp;
pub mod openapi;
pub mod ops;
pub mod receipts;
pub mod reputation;
pub mod routes;
pub mod siwx;
pub mod state;
pub mod webhooks;
pub mod workers;
pub mod x402_resource;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::{HeaderName, HeaderValue, Method, header},
};
use tower::ServiceBuilder;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::{error::ApiError, state::AppState};

/// x402 v2 headers (plus the request id) that browsers must be allowed to send or read.
const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
const PAYMENT_SIGNATURE: HeaderName = HeaderName::from_static("payment-signature");
const X_CONTRACT_ID: HeaderName = HeaderName::from_static("x-contract-id");
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
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
        // One `layer` call: axum boxes each route once per call and clones every box for each
        // request it serves.
        .layer(
            ServiceBuilder::new()
                .layer(layers::Identify)
                .layer(layers::BrowserCors::new(cors))
                .layer(layers::Observe::new(Arc::clone(&state.metrics), timeout))
                .layer(DefaultBodyLimit::max(body_limit))
                .layer(siwx::DeclareLayer::new(state.clone())),
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
        .merge(a2a::router())
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
            siwx::HEADER,
            X_CONTRACT_ID,
            IDEMPOTENCY_KEY,
            LAST_EVENT_ID,
            HeaderName::from_static(hiregate_engine::adapters::secrets::SECRETS_HEADER),
            // @x402/fetch sets this (odd) request header on its paid retry; without it a
            // browser's preflight of that retry would fail.
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            // A2A clients in a browser (the JSON-RPC interfaces, `a2a`).
            a2a::VERSION_HEADER,
            a2a::EXTENSIONS_HEADER,
            HeaderName::from_static("x-a2a-extensions"),
        ])
        .expose_headers(
            [
                PAYMENT_REQUIRED,
                PAYMENT_RESPONSE,
                X_REQUEST_ID,
                header::RETRY_AFTER,
                header::LOCATION,
                a2a::EXTENSIONS_HEADER,
            ]
            .into_iter()
            .chain(answers::INFORMATIONAL_HEADERS)
            .chain(answers::HIRE_TRACKING_HEADERS)
            .collect::<Vec<_>>(),
        )
        .max_age(Duration::from_secs(600))
}

async fn route_not_found() -> ApiError {
    ApiError::RouteNotFound
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
