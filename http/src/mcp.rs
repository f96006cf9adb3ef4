//! `/mcp`: the MCP server ([`crate::mcp::tools`]) over streamable HTTP. Open to anyone: discovery and
//! `hire_worker` (paid per call by the caller's own x402 wallet) need no account; the tools that
//! act on a seeker account need its API key (`Authorization: Bearer hg_sk_…`).
//!
//! Not registered through [`super::routes::Routes`] and absent from the OpenAPI document on
//! purpose: it is one JSON-RPC endpoint whose methods and tool schemas MCP clients discover with
//! `tools/list`, not a REST resource an OpenAPI operation could describe. It is merged beside
//! the documented routes in [`super::router`], under the same middleware stack.
//!
//! Every refusal of a request that reached the transport is a JSON-RPC error object
//! (`{"jsonrpc":"2.0","id":…,"error":{"code","message"}}`, `Content-Type: application/json`),
//! which is what MCP clients read; rmcp's streamable HTTP server answers some with plain text
//! (a body that is not a JSON-RPC message was 415 `text/plain`). [`json_rpc_errors`] checks a
//! POST's body first: not JSON → 400 with -32700 (parse error); JSON that is not one JSON-RPC
//! message (another shape, a batch array: MCP 2025-06-18 dropped batches) → 400 with -32600
//! (invalid request); a content type other than JSON → 415 with -32600. Any other plain-text refusal of the transport (406 without an `Accept` of both JSON
//! and SSE, 404 for an unknown session, …) keeps its status and becomes a -32600 error object
//! carrying the transport's message. A request that sends credentials has them checked before
//! all of it (401/403, the API's error body for a wrong or non-seeker key); one without
//! credentials passes, and its tools act as nobody.

use std::sync::Arc;

pub mod report;
pub mod schemas;
pub mod tools;
pub mod wallet;

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    http::{Method, StatusCode, header, request::Parts},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};
use serde_json::{Value, json};

use super::extract::Seeker;
use crate::{
    mcp::tools::{HiregateMcp, McpSeeker, McpWallet},
    state::AppState,
};

/// The path MCP clients connect to.
pub const MCP_PATH: &str = "/mcp";

/// `/mcp`, answering 401/403 (the API's JSON error) to credentials that are not a seeker key.
pub fn router(state: &AppState) -> Router<AppState> {
    let wallet = McpWallet::from_settings(&state.config.mcp);
    let services = state.clone();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown.child_token())
        // Hosts are the reverse proxy's business.
        .disable_allowed_hosts();
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(HiregateMcp::over_http(services.clone(), wallet.clone())),
        sessions.clone(),
        config,
    );
    let cap = SessionCap {
        sessions,
        max: state.config.mcp.max_sessions,
    };
    // Layers run outermost last-added: the credentials check, then the JSON-RPC error answers,
    // then the session cap.
    Router::new()
        .route_service(MCP_PATH, service)
        .route_layer(middleware::from_fn_with_state(cap, capped_sessions))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            json_rpc_errors,
        ))
        .route_layer(middleware::from_fn_with_state(state.clone(), seeker_if_any))
}

/// The open sessions and how many may be open at once.
#[derive(Clone)]
struct SessionCap {
    sessions: Arc<LocalSessionManager>,
    max: usize,
}

/// Seconds a client refused a session is told to wait: rmcp closes a session idle for 5 min or
/// never initialized within 60 s, so room comes back within a minute under an `initialize`
/// flood.
const SESSION_RETRY_AFTER_S: u32 = 30;

/// JSON-RPC's implementation-defined server error, for a server too busy to open a session.
const SERVER_BUSY: i64 = -32000;

/// Refuses a new session (a POST without `Mcp-Session-Id`) while `max` are open: 503 with a
/// JSON-RPC error and `Retry-After`. `/mcp` needs no credentials, and each session holds a
/// task and channels in memory until it closes or idles out, so without a cap a flood of
/// `initialize` calls would grow memory without bound. Requests of open sessions always pass.
/// The count is read before the session is made, so concurrent openings can pass it by as many
/// as arrive at once: a bound on memory, not an exact quota.
async fn capped_sessions(State(cap): State<SessionCap>, request: Request, next: Next) -> Response {
    let opens_a_session =
        request.method() == Method::POST && !request.headers().contains_key(SESSION_ID_HEADER);
    if opens_a_session && cap.sessions.sessions.read().await.len() >= cap.max {
        let mut refusal = rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &Value::Null,
            SERVER_BUSY,
            "too many MCP sessions are open; retry later or reuse an open session",
        );
        refusal
            .headers_mut()
            .insert(header::RETRY_AFTER, SESSION_RETRY_AFTER_S.into());
        return refusal;
    }
    next.run(request).await
}

/// The header naming a request's session (MCP streamable HTTP transport).
const SESSION_ID_HEADER: &str = "mcp-session-id";

/// JSON-RPC error codes (JSON-RPC 2.0 §5.1).
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// Longest plain-text refusal of the transport carried into an error's message.
const MAX_TRANSPORT_MESSAGE: usize = 4_096;

/// A JSON-RPC error object as the answer, with `status`.
fn rpc_error(status: StatusCode, id: &Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// Answers malformed POST bodies and the transport's plain-text refusals as JSON-RPC errors
/// (see the module doc); a well-formed request passes through unchanged.
async fn json_rpc_errors(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let request = if request.method() == Method::POST {
        match checked_post(request, state.config.http.body_limit_bytes).await {
            Ok(request) => request,
            Err(refusal) => return refusal,
        }
    } else {
        request
    };
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !response.status().is_client_error() || is_json {
        return response;
    }
    let status = response.status();
    let text = axum::body::to_bytes(response.into_body(), MAX_TRANSPORT_MESSAGE)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let message = if text.trim().is_empty() {
        status.canonical_reason().unwrap_or("refused").to_owned()
    } else {
        text
    };
    rpc_error(status, &Value::Null, INVALID_REQUEST, &message)
}

/// A POST whose body is one JSON-RPC message the transport can read, rebuilt for it; or the
/// JSON-RPC error that answers it.
async fn checked_post(request: Request, body_limit: usize) -> Result<Request, Response> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    if content_type.as_deref() != Some("application/json") {
        return Err(rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &Value::Null,
            INVALID_REQUEST,
            "Content-Type must be application/json: send one JSON-RPC message",
        ));
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, body_limit).await else {
        return Err(rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Value::Null,
            INVALID_REQUEST,
            &format!("the request body exceeds {body_limit} bytes"),
        ));
    };
    let value: Value = serde_json::from_slice(&bytes).map_err(|error| {
        rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            PARSE_ERROR,
            &format!("Parse error: the body is not JSON ({error})"),
        )
    })?;
    if let Err(error) = serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        return Err(not_a_message(&value, &error));
    }
    // The same bytes again, whole: the headers (Content-Length included) still describe them.
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

/// The error for JSON that is not a JSON-RPC message the server reads: -32600 (invalid
/// request), with the message's id when it has a well-formed one. (A request of a known method
/// whose params do not fit is read as a custom request and answered by the server itself.)
fn not_a_message(value: &Value, error: &serde_json::Error) -> Response {
    if value.is_array() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18 removed them); \
             send one message per request",
        );
    }
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64())
        .cloned()
        .unwrap_or(Value::Null);
    rpc_error(
        StatusCode::BAD_REQUEST,
        &id,
        INVALID_REQUEST,
        &format!(
            "Invalid Request: not a JSON-RPC 2.0 message (jsonrpc \"2.0\", method, id): {error}"
        ),
    )
}

/// Tells the tools which seeker they act as when the request sends a key; refuses a key that is
/// not a seeker's (as every seeker route does); lets a request without credentials through.
async fn seeker_if_any(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if !request.headers().contains_key(header::AUTHORIZATION) {
        return next.run(request).await;
    }
    let (mut parts, body): (Parts, Body) = request.into_parts();
    match <Seeker as axum::extract::FromRequestParts<AppState>>::from_request_parts(
        &mut parts, &state,
    )
    .await
    {
        Ok(seeker) => {
            parts.extensions.insert(McpSeeker(seeker.principal_id));
            next.run(Request::from_parts(parts, body)).await
        }
        Err(error) => error.into_response(),
    }
}
