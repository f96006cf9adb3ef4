//! Admin endpoints (admin key only).
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/admin/keys` | create a seeker or operator key |
//! | `GET /v1/admin/reconcile?from_block=&to_block=&network=` | the store's settlements against the chain for a block range ([`crate::ledger::reconcile`]); 200 with the report whether or not it found mismatches (`ok`), and the mismatch metrics updated |

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    routing::{get, post},
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::extract::{Admin, AppJson, AppQuery};
use crate::{
    auth::{IssueKeyError, Role, issue_api_key},
    error::{ApiError, ApiResult},
    ids::{ApiKeyId, PrincipalId},
    ledger::{ReconcileError, ReconcileReport, ReconcileRequest, reconcile},
    state::AppState,
};

/// `/v1/admin/*`.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/admin/keys", post(create_key))
        .route("/v1/admin/reconcile", get(reconcile_ledger))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileQuery {
    from_block: Option<u64>,
    to_block: Option<u64>,
    network: Option<String>,
}

/// `GET /v1/admin/reconcile`: 200 with the report; 422 `validation_failed` for a reversed
/// range, 422 `network_not_configured` for a network without `[chains]` entry, 503
/// `chain_unavailable` when a node cannot be asked.
async fn reconcile_ledger(
    State(state): State<AppState>,
    _admin: Admin,
    AppQuery(query): AppQuery<ReconcileQuery>,
) -> ApiResult<Json<ReconcileReport>> {
    let request = ReconcileRequest {
        from_block: query.from_block.unwrap_or(0),
        to_block: query.to_block,
        network: query.network,
        log_chunk_blocks: None,
    };
    match reconcile(&state.store, state.config.chains.values(), &request).await {
        Ok(report) => {
            state.metrics.record_reconciliation(&report);
            if !report.ok() {
                tracing::warn!(
                    mismatches = report.mismatches.len(),
                    "reconciliation found mismatches"
                );
            }
            Ok(Json(report))
        }
        Err(error) => {
            state.metrics.record_reconciliation_error();
            Err(reconcile_error(error))
        }
    }
}

fn reconcile_error(error: ReconcileError) -> ApiError {
    match error {
        ReconcileError::InvalidRange { .. } => ApiError::Validation {
            field: "from_block".into(),
            reason: error.to_string(),
        },
        ReconcileError::NetworkNotConfigured(_) | ReconcileError::NoChains => {
            ApiError::Unprocessable {
                code: "network_not_configured",
                message: error.to_string(),
            }
        }
        ReconcileError::Rpc { .. } | ReconcileError::WrongChain { .. } => ApiError::Unavailable {
            code: "chain_unavailable",
            message: error.to_string(),
            retry_after_s: 5,
        },
        ReconcileError::Store(store) => ApiError::Store(store),
        ReconcileError::CorruptPayment { .. } => ApiError::internal(error),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateKeyRequest {
    role: Role,
    principal_id: Option<PrincipalId>,
    label: Option<String>,
}

#[derive(Debug, Serialize)]
struct CreatedKey {
    /// Shown once; only its hash is stored.
    api_key: String,
    key_id: ApiKeyId,
    role: Role,
    principal_id: PrincipalId,
    label: Option<String>,
    created_at: DateTime<Utc>,
}

/// `POST /v1/admin/keys`: create a seeker or operator key (a new account, or another key for
/// `principal_id`). 201 with the key, shown once; 422 `validation_failed` for an admin role, a
/// principal of the other role, an over-long label or one holding U+0000.
async fn create_key(
    State(state): State<AppState>,
    _admin: Admin,
    AppJson(request): AppJson<CreateKeyRequest>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    let issued = issue_api_key(
        &state.store,
        request.role,
        request.principal_id,
        request.label,
    )
    .await
    .map_err(|error| match error {
        IssueKeyError::RoleNotIssuable => ApiError::Validation {
            field: "role".into(),
            reason: error.to_string(),
        },
        IssueKeyError::PrincipalRoleMismatch { .. } => ApiError::Validation {
            field: "principal_id".into(),
            reason: error.to_string(),
        },
        IssueKeyError::LabelTooLong | IssueKeyError::LabelHasNul => ApiError::Validation {
            field: "label".into(),
            reason: error.to_string(),
        },
        IssueKeyError::Store(store) => ApiError::Store(store),
    })?;
    tracing::info!(key_id = %issued.record.id, role = issued.record.role.as_str(), principal_id = %issued.record.principal_id, "API key created");
    let record = issued.record;
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            api_key: issued.key.reveal().to_owned(),
            key_id: record.id,
            role: record.role,
            principal_id: record.principal_id,
            label: record.label,
            created_at: record.created_at,
        }),
    ))
}
