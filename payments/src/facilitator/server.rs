//! The facilitator over HTTP: `POST /verify`, `POST /settle`, `GET /supported`, `GET /health`.
//!
//! | situation | status | body |
//! |---|---|---|
//! | a verdict (valid or not; a replayed settle is `success: false`, `invalid_exact_evm_nonce_already_used`) | 200 | the verdict |
//! | body is not a v2 request | 400 | a verdict with `invalid_x402_version` / `invalid_payload`, so any x402 client reads the reason |
//! | the chain could not be asked: outcome unknown | 503 | `{"error": {"code": "facilitator_outcome_unknown", "message": …}}` |
//!
//! The unknown outcome deliberately carries no verdict: clients (ours included) read a verdict
//! whatever the status, and this one must not be read as a refusal.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, serve as axum_serve};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::config::FacilitatorConfig;
use super::local::{LocalFacilitator, LocalFacilitatorError};
use super::{Facilitator, FacilitatorError};
use crate::reason::Reason;
use crate::wire::{SettleResponse, VerifyRequest, VerifyResponse, X402Version2};

/// The facilitator's routes around any [`Facilitator`].
pub fn router(facilitator: Arc<dyn Facilitator>) -> Router {
    Router::new()
        .route("/verify", post(verify))
        .route("/settle", post(settle))
        .route("/supported", get(supported))
        .route("/health", get(health))
        .with_state(facilitator)
}

/// Why [`serve`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The facilitator could not start.
    #[error("facilitator could not start")]
    Start(#[from] LocalFacilitatorError),
    /// The HTTP server failed.
    #[error("facilitator HTTP server failed")]
    Io(#[from] std::io::Error),
}

/// Runs the bundled facilitator for `config` on `listener` until `shutdown` is cancelled.
pub async fn serve(
    config: FacilitatorConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let facilitator = LocalFacilitator::connect(config).await?;
    tracing::info!(address = ?listener.local_addr().ok(), ?facilitator, "facilitator listening");
    // Resolved once, not per connection (axum rebuilds a plain `Router`'s routes for each).
    axum_serve(listener, router(Arc::new(facilitator)).into_make_service())
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await?;
    Ok(())
}

/// Parses a request body; a refusal is the reason and a message for the 400 verdict.
fn parse_request(body: &[u8]) -> Result<VerifyRequest, (Reason, String)> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| (Reason::InvalidPayload, format!("body is not JSON: {e}")))?;
    let is_v2 = |v: Option<&Value>| v.and_then(Value::as_u64) == Some(X402Version2::VALUE);
    // x402-rs requires the top-level version but the TS client does not always send it; the
    // payload's own version is what matters.
    let top_ok = value.get("x402Version").is_none_or(|v| is_v2(Some(v)));
    let payload_ok = is_v2(value.pointer("/paymentPayload/x402Version"));
    if !top_ok || !payload_ok {
        return Err((
            Reason::InvalidX402Version,
            "only x402Version 2 is supported".to_owned(),
        ));
    }
    let mut value = value;
    if let Some(object) = value.as_object_mut() {
        object
            .entry("x402Version")
            .or_insert(Value::from(X402Version2::VALUE));
    }
    serde_json::from_value(value).map_err(|e| (Reason::InvalidPayload, e.to_string()))
}

/// 503 with a body that is not a verdict.
fn unknown_outcome(error: &FacilitatorError) -> Response {
    tracing::error!(error.message = %error, error.cause_chain = ?error, "facilitator outcome unknown");
    let body = json!({
        "error": { "code": "facilitator_outcome_unknown", "message": error.to_string() }
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// `POST /verify`: 200 with the verdict; 400 with an `isValid: false` verdict for a body that
/// is not a v2 request; 503 without a verdict when the chain could not be asked.
async fn verify(State(facilitator): State<Arc<dyn Facilitator>>, body: Bytes) -> Response {
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err((reason, message)) => {
            let verdict = VerifyResponse::invalid(reason, None, Some(message));
            return (StatusCode::BAD_REQUEST, Json(verdict)).into_response();
        }
    };
    match facilitator.verify(&request).await {
        Ok(verdict) => (StatusCode::OK, Json(verdict)).into_response(),
        Err(error) => unknown_outcome(&error),
    }
}

/// `POST /settle`: 200 with the outcome (including `success: false`); 400 with a failed outcome
/// for a body that is not a v2 request; 503 without a verdict when the outcome is unknown.
async fn settle(State(facilitator): State<Arc<dyn Facilitator>>, body: Bytes) -> Response {
    let request = match parse_request(&body) {
        Ok(request) => request,
        Err((reason, message)) => {
            let network = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| {
                    v.pointer("/paymentRequirements/network")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            let outcome = SettleResponse::failed(&network, reason, None, None, Some(message));
            return (StatusCode::BAD_REQUEST, Json(outcome)).into_response();
        }
    };
    match facilitator.settle(&request).await {
        Ok(outcome) => (StatusCode::OK, Json(outcome)).into_response(),
        Err(error) => unknown_outcome(&error),
    }
}

/// `GET /supported`: the kinds and relayer addresses.
async fn supported(State(facilitator): State<Arc<dyn Facilitator>>) -> Response {
    match facilitator.supported().await {
        Ok(supported) => (StatusCode::OK, Json(supported)).into_response(),
        Err(error) => unknown_outcome(&error),
    }
}

/// `GET /health`: liveness.
async fn health() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}
