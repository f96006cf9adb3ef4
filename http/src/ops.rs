//! Operations endpoints: liveness, readiness, metrics. Unauthenticated by design (scrapers and
//! orchestrators call them); they reveal no data.

use axum::{
    Json,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Map, Value, json};

use super::routes::{Routes, get};
use crate::{error::ApiError, state::AppState};
use hiregate_engine::metrics;

/// `/healthz`, `/readyz`, `/metrics`.
pub fn router() -> Routes {
    Routes::new()
        .route("/healthz", get(get_healthz))
        .route("/readyz", get(get_readyz))
        .route("/metrics", get(get_metrics))
}

/// `GET /healthz`: 200 while the process serves requests.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "ops",
    responses(
        (status = 200, description = "`{\"status\":\"ok\"}` while the process serves requests", body = Object),
    ),
)]
pub(crate) async fn get_healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when the database and every registered dependency answer, else 503 with
/// the failing checks named.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "ops",
    responses(
        (status = 200, description = "Ready: `status` and each check (`database`, facilitator, chains)", body = Object),
        (status = 503, description = "Not ready: the failing checks named", body = Object),
    ),
)]
pub(crate) async fn get_readyz(State(state): State<AppState>) -> Response {
    let mut checks = Map::new();
    let mut ready = true;
    match state.store.ping().await {
        Ok(()) => {
            checks.insert("database".into(), json!({ "status": "ok" }));
        }
        Err(error) => {
            ready = false;
            tracing::warn!(error.message = %error, "readiness: database unreachable");
            checks.insert(
                "database".into(),
                json!({ "status": "failed", "reason": "database unreachable" }),
            );
        }
    }
    for check in state.readiness_checks.iter() {
        let entry = match check.check().await {
            Ok(()) => json!({ "status": "ok" }),
            Err(reason) => {
                ready = false;
                json!({ "status": "failed", "reason": reason })
            }
        };
        checks.insert(check.name().into(), entry);
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "checks": checks,
    });
    (status, Json(body)).into_response()
}

/// `GET /metrics`: Prometheus (OpenMetrics text) exposition.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "ops",
    responses(
        (status = 200, description = "Prometheus / OpenMetrics text exposition", content_type = "application/openmetrics-text", body = String),
    ),
)]
pub(crate) async fn get_metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state.metrics.render().map_err(ApiError::internal)?;
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}
