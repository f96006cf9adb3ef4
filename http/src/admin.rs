//! Admin endpoints (admin key only).
//!
//! | route | what |
//! |---|---|
//! | `POST /v1/admin/keys` | create a seeker or operator key |
//! | `GET /v1/admin/keys?principal_id=&include_revoked=&after=&limit=` | list keys (never a secret or a hash) |
//! | `DELETE /v1/admin/keys/{id}` | revoke a key (at once here; other instances within `http.api_key_cache_ttl_ms`) |
//! | `POST /v1/admin/keys/{id}/rotate` | a new secret for the key's account, role and label, shown once; the old key revoked |
//! | `GET /v1/admin/reconcile?from_block=&to_block=&network=` | the store's settlements against the chain for a block range ([`hiregate_engine::ledger::reconcile`]); 200 with the report whether or not it found mismatches (`ok`), and the mismatch metrics updated |

use axum::{Json, extract::State, http::StatusCode};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{
    extract::{Admin, AppJson, AppPath, AppQuery},
    keys::{self, KeyPage, KeyView, RotatedKey},
    routes::{ErrorBody, Routes, delete, get, post},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use hiregate_contracts::id::{ApiKeyId, PrincipalId};
use hiregate_engine::{
    auth::{IssueKeyError, issue_api_key},
    ledger::{ReconcileError, ReconcileReport, ReconcileRequest, reconcile},
};
use hiregate_store::keys::Role;

/// `/v1/admin/*`.
pub fn router() -> Routes {
    Routes::new()
        .route("/v1/admin/keys", post(create_key).get(list_keys))
        .route("/v1/admin/keys/{id}", delete(revoke_key))
        .route("/v1/admin/keys/{id}/rotate", post(rotate_key))
        .route("/v1/admin/reconcile", get(reconcile_ledger))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReconcileQuery {
    /// First block (default 0).
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    from_block: Option<u64>,
    /// Last block (default: the chain head).
    #[param(minimum = 0, maximum = 9_223_372_036_854_775_807_i64)]
    to_block: Option<u64>,
    /// One CAIP-2 network (default: every configured chain).
    #[param(pattern = r"^eip155:[1-9][0-9]{0,18}$")]
    network: Option<String>,
}

/// `GET /v1/admin/reconcile`: 200 with the report; 422 `validation_failed` for a reversed
/// range, 422 `network_not_configured` for a network without `[chains]` entry, 503
/// `chain_unavailable` when a node cannot be asked.
#[utoipa::path(
    get,
    path = "/v1/admin/reconcile",
    tag = "admin",
    params(ReconcileQuery),
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "The reconciliation report (`ok` false when mismatches were found); see `ledger::ReconcileReport`", body = Object),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 422, description = "`validation_failed` / `network_not_configured`", body = ErrorBody),
        (status = 503, description = "`chain_unavailable`", body = ErrorBody),
    ),
)]
pub(crate) async fn reconcile_ledger(
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

/// `POST /v1/admin/keys` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKeyRequest {
    /// `seeker` or `operator`.
    #[schema(value_type = String, example = "seeker", pattern = r"^(seeker|operator)$")]
    role: Role,
    /// Add a key to this existing account (`skr_…` / `opr_…`); omitted: a new account.
    #[schema(value_type = Option<String>, pattern = r"^(skr|opr)_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    principal_id: Option<PrincipalId>,
    /// Free-form note, at most 100 characters, without U+0000.
    #[schema(max_length = 100, pattern = r"^[^\u0000]*$")]
    label: Option<String>,
}

/// A created key.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct CreatedKey {
    /// Shown once; only its hash is stored.
    api_key: String,
    /// Key id.
    #[schema(value_type = String)]
    key_id: ApiKeyId,
    /// `seeker` or `operator`.
    #[schema(value_type = String)]
    role: Role,
    /// The owning account.
    #[schema(value_type = String)]
    principal_id: PrincipalId,
    /// Free-form note.
    label: Option<String>,
    /// Creation time.
    created_at: DateTime<Utc>,
}

/// `POST /v1/admin/keys`: create a seeker or operator key (a new account, or another key for
/// `principal_id`). 201 with the key, shown once; 422 `validation_failed` for an admin role, a
/// principal of the other role, an over-long label or one holding U+0000.
#[utoipa::path(
    post,
    path = "/v1/admin/keys",
    tag = "keys",
    request_body = CreateKeyRequest,
    security(("admin_key" = [])),
    responses(
        (status = 201, description = "The key, shown once", body = CreatedKey),
        (status = 400, description = "`malformed_json`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 422, description = "`invalid_body` / `validation_failed`", body = ErrorBody),
    ),
)]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    _admin: Admin,
    AppJson(request): AppJson<CreateKeyRequest>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    let issued = issue_api_key(
        &state.store,
        state.hire.clock(),
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

/// `GET /v1/admin/keys` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeysQuery {
    /// Only this account's keys.
    #[param(value_type = Option<String>, pattern = r"^(skr|opr)_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    principal_id: Option<PrincipalId>,
    /// Also list revoked keys (default false).
    include_revoked: Option<bool>,
    /// `next_after` of the previous page.
    #[param(value_type = Option<String>, pattern = r"^key_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    after: Option<ApiKeyId>,
    /// Page size, 1–500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// Every key (or one account's), in creation order; never a secret or a hash.
#[utoipa::path(
    get,
    path = "/v1/admin/keys",
    tag = "keys",
    params(KeysQuery),
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "A page of keys", body = KeyPage),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
    ),
)]
pub(crate) async fn list_keys(
    State(state): State<AppState>,
    _admin: Admin,
    AppQuery(query): AppQuery<KeysQuery>,
) -> ApiResult<Json<KeyPage>> {
    let limit = keys::check_page(query.limit)?;
    let found = state
        .store
        .list_api_keys(
            query.principal_id.as_ref(),
            query.include_revoked.unwrap_or(false),
            query.after.as_ref(),
            limit,
        )
        .await?;
    Ok(Json(KeyPage::new(found, limit)))
}

/// Revoke any key. Takes effect at once on this instance; other instances stop accepting it
/// within `http.api_key_cache_ttl_ms`.
#[utoipa::path(
    delete,
    path = "/v1/admin/keys/{id}",
    tag = "keys",
    params(("id" = String, Path, description = "Key id (`key_…`)")),
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "The revoked key", body = KeyView),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such live key", body = ErrorBody),
    ),
)]
pub(crate) async fn revoke_key(
    State(state): State<AppState>,
    _admin: Admin,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<KeyView>> {
    keys::revoke(&state, &id, None).await
}

/// Replace any key with a new secret of the same account, role and label; the old key is
/// revoked in the same transaction. The new secret is in this answer only.
#[utoipa::path(
    post,
    path = "/v1/admin/keys/{id}/rotate",
    tag = "keys",
    params(("id" = String, Path, description = "Key id (`key_…`)")),
    security(("admin_key" = [])),
    responses(
        (status = 200, description = "The new key, shown once", body = RotatedKey),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such live key", body = ErrorBody),
    ),
)]
pub(crate) async fn rotate_key(
    State(state): State<AppState>,
    _admin: Admin,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<RotatedKey>> {
    keys::rotate(&state, &id, None).await
}
