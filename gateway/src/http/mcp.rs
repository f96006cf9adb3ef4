//! `/mcp`: the MCP server ([`crate::mcp`]) over streamable HTTP, for seekers only.
//!
//! Not registered through [`super::openapi::Routes`] and absent from the OpenAPI document on
//! purpose: it is one JSON-RPC endpoint whose methods and tool schemas MCP clients discover with
//! `tools/list`, not a REST resource an OpenAPI operation could describe. It is merged beside
//! the documented routes in [`super::router`], under the same middleware stack.

use std::sync::Arc;

use axum::{
    Router,
    extract::Request,
    middleware::{self, Next},
    response::Response,
};
use rmcp::transport::{
    StreamableHttpServerConfig, StreamableHttpService,
    streamable_http_server::session::local::LocalSessionManager,
};

use super::extract::Seeker;
use crate::{
    mcp::{HiregateMcp, McpWallet},
    state::AppState,
};

/// The path MCP clients connect to.
pub const MCP_PATH: &str = "/mcp";

/// `/mcp`, answering 401 (the API's JSON error) to anything without a valid seeker key.
pub fn router(state: &AppState) -> Router<AppState> {
    let gateway = state.hire.base_url().clone();
    let wallet = McpWallet::from_settings(&state.config.mcp);
    let store = state.store.clone();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(state.shutdown.child_token())
        // Hosts are the reverse proxy's business; every request here carries a seeker key.
        .disable_allowed_hosts();
    let service = StreamableHttpService::new(
        move || {
            Ok(HiregateMcp::over_http(
                gateway.clone(),
                wallet.clone(),
                store.clone(),
            ))
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(MCP_PATH, service)
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_seeker,
        ))
}

/// Lets only authenticated seekers through; the tools call the API again with the same key.
async fn require_seeker(_seeker: Seeker, request: Request, next: Next) -> Response {
    next.run(request).await
}
