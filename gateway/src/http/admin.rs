//! Admin endpoints (admin key only).

use axum::{Json, Router, extract::State, http::StatusCode, routing::post};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::extract::{Admin, AppJson};
use crate::{
    auth::{IssueKeyError, Role, issue_api_key},
    error::{ApiError, ApiResult},
    ids::{ApiKeyId, PrincipalId},
    state::AppState,
};

/// `/v1/admin/*`.
pub fn router() -> Router<AppState> {
    Router::new().route("/v1/admin/keys", post(create_key))
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
