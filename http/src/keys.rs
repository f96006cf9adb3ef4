//! API keys managed by their owners: a seeker or operator key lists, rotates and revokes the
//! keys of its own account. Another account's key is 404, as if it did not exist.
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/keys?include_revoked=` | the account's keys (never a secret or a hash) |
//! | `POST /v1/keys/{id}/rotate` | a new secret for the key's account, role and label, shown once; the old key is revoked |
//! | `DELETE /v1/keys/{id}` | revoke the key |
//!
//! Revocation takes effect at once on the instance that served it (its key cache forgets the
//! key); other instances stop accepting the key within `http.api_key_cache_ttl_ms`.

use super::{
    extract::{AppPath, AppQuery, Caller},
    routes::{ErrorBody, Routes, delete, get, post},
};
use crate::{
    error::{ApiError, ApiResult},
    state::AppState,
};
use axum::{Json, extract::State};
use chrono::{DateTime, Utc};
use hiregate_contracts::id::{ApiKeyId, PrincipalId};
use hiregate_engine::auth::{revoke_api_key, rotate_api_key};
use hiregate_store::{ApiKeyInfo, ApiKeyRecord, keys::Role};
use serde::{Deserialize, Serialize};

/// Most keys in one page.
pub(crate) const MAX_KEYS_PAGE: u32 = 500;
/// Default page size.
pub(crate) const DEFAULT_KEYS_PAGE: u32 = 100;

/// `/v1/keys*`.
pub fn router() -> Routes {
    Routes::new()
        .route("/v1/keys", get(list_own_keys))
        .route("/v1/keys/{id}", delete(revoke_own_key))
        .route("/v1/keys/{id}/rotate", post(rotate_own_key))
}

/// A key as listed: never its secret or its hash.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyView {
    /// Key id (`key_…`).
    #[schema(value_type = String, example = "key_01J9ZQ4X1V8E6W0M3C5T7B2N4K")]
    key_id: ApiKeyId,
    /// `seeker` or `operator`.
    #[schema(value_type = String, example = "seeker")]
    role: Role,
    /// The owning account (`skr_…` / `opr_…`).
    #[schema(value_type = String)]
    principal_id: PrincipalId,
    /// The key's first characters, to tell keys apart.
    #[schema(example = "hg_sk_3f9a")]
    display_prefix: String,
    /// Free-form note.
    label: Option<String>,
    /// Creation time.
    created_at: DateTime<Utc>,
    /// Revocation time (rotation revokes the old key); `null` while live.
    revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiKeyInfo> for KeyView {
    fn from(info: ApiKeyInfo) -> Self {
        Self {
            revoked_at: info.revoked_at,
            ..Self::live(info.record)
        }
    }
}

impl KeyView {
    fn live(record: ApiKeyRecord) -> Self {
        Self {
            key_id: record.id,
            role: record.role,
            principal_id: record.principal_id,
            display_prefix: record.display_prefix,
            label: record.label,
            created_at: record.created_at,
            revoked_at: None,
        }
    }
}

/// A page of keys.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyPage {
    /// In creation order.
    keys: Vec<KeyView>,
    /// Pass as `after` for the next page; `null` on the last page.
    #[schema(value_type = Option<String>)]
    next_after: Option<ApiKeyId>,
}

impl KeyPage {
    pub(crate) fn new(keys: Vec<ApiKeyInfo>, limit: u32) -> Self {
        let next_after = (keys.len() == limit as usize)
            .then(|| keys.last().map(|k| k.record.id.clone()))
            .flatten();
        Self {
            keys: keys.into_iter().map(KeyView::from).collect(),
            next_after,
        }
    }
}

/// A new key from a rotation: the secret is in this answer only.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RotatedKey {
    /// The new key. Shown once; only its hash is stored.
    api_key: String,
    /// The new key.
    #[serde(flatten)]
    key: KeyView,
    /// The key it replaces, now revoked.
    #[schema(value_type = String)]
    replaces: ApiKeyId,
}

/// Rotate `id` (of `owner` unless admin) into a [`RotatedKey`]; 404 for no such live key.
pub(crate) async fn rotate(
    state: &AppState,
    id: &str,
    owner: Option<&PrincipalId>,
) -> ApiResult<Json<RotatedKey>> {
    let id = parse_key_id(id)?;
    let issued = rotate_api_key(&state.store, &state.api_keys, &id, owner)
        .await?
        .ok_or(ApiError::NotFound { resource: "key" })?;
    tracing::info!(key_id = %issued.record.id, replaces = %id, "API key rotated");
    Ok(Json(RotatedKey {
        api_key: issued.key.reveal().to_owned(),
        key: KeyView::live(issued.record),
        replaces: id,
    }))
}

/// Revoke `id` (of `owner` unless admin); 404 for no such live key.
pub(crate) async fn revoke(
    state: &AppState,
    id: &str,
    owner: Option<&PrincipalId>,
) -> ApiResult<Json<KeyView>> {
    let id = parse_key_id(id)?;
    let info = revoke_api_key(&state.store, &state.api_keys, &id, owner)
        .await?
        .ok_or(ApiError::NotFound { resource: "key" })?;
    tracing::info!(key_id = %id, "API key revoked");
    Ok(Json(KeyView::from(info)))
}

fn parse_key_id(raw: &str) -> ApiResult<ApiKeyId> {
    raw.trim()
        .parse()
        .map_err(|_| ApiError::NotFound { resource: "key" })
}

pub(crate) fn check_page(limit: Option<u32>) -> ApiResult<u32> {
    let limit = limit.unwrap_or(DEFAULT_KEYS_PAGE);
    if (1..=MAX_KEYS_PAGE).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::InvalidQuery(format!(
            "limit must be between 1 and {MAX_KEYS_PAGE}"
        )))
    }
}

/// The account behind a seeker or operator key; the admin key has no stored keys of its own.
fn owner(caller: Caller) -> ApiResult<PrincipalId> {
    match caller {
        Caller::Key(record) => Ok(record.principal_id.clone()),
        Caller::Admin => Err(ApiError::Forbidden {
            required: Role::Seeker,
        }),
    }
}

/// `GET /v1/keys` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct OwnKeysQuery {
    /// Also list revoked keys (default false).
    include_revoked: Option<bool>,
    /// `next_after` of the previous page.
    #[param(value_type = Option<String>, pattern = r"^key_[0-7][0-9A-HJKMNP-TV-Z]{25}$")]
    after: Option<ApiKeyId>,
    /// Page size, 1–500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// The caller's account's keys, in creation order.
#[utoipa::path(
    get,
    path = "/v1/keys",
    tag = "keys",
    params(OwnKeysQuery),
    security(("seeker_key" = []), ("operator_key" = [])),
    responses(
        (status = 200, description = "The account's keys", body = KeyPage),
        (status = 400, description = "`invalid_query`", body = ErrorBody),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`: the admin key has no keys of its own", body = ErrorBody),
    ),
)]
pub(crate) async fn list_own_keys(
    State(state): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<OwnKeysQuery>,
) -> ApiResult<Json<KeyPage>> {
    let principal = owner(caller)?;
    let limit = check_page(query.limit)?;
    let keys = state
        .store
        .list_api_keys(
            Some(&principal),
            query.include_revoked.unwrap_or(false),
            query.after.as_ref(),
            limit,
        )
        .await?;
    Ok(Json(KeyPage::new(keys, limit)))
}

/// Revoke one of the caller's account's keys (the one in use too). Takes effect at once on this
/// instance; other instances stop accepting it within `http.api_key_cache_ttl_ms`.
#[utoipa::path(
    delete,
    path = "/v1/keys/{id}",
    tag = "keys",
    params(("id" = String, Path, description = "Key id (`key_…`)")),
    security(("seeker_key" = []), ("operator_key" = [])),
    responses(
        (status = 200, description = "The revoked key", body = KeyView),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such live key of this account", body = ErrorBody),
    ),
)]
pub(crate) async fn revoke_own_key(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<KeyView>> {
    let principal = owner(caller)?;
    revoke(&state, &id, Some(&principal)).await
}

/// Replace one of the caller's account's keys with a new secret (same role and label); the old
/// key is revoked in the same transaction. The new secret is in this answer only.
#[utoipa::path(
    post,
    path = "/v1/keys/{id}/rotate",
    tag = "keys",
    params(("id" = String, Path, description = "Key id (`key_…`)")),
    security(("seeker_key" = []), ("operator_key" = [])),
    responses(
        (status = 200, description = "The new key, shown once", body = RotatedKey),
        (status = 401, description = "`missing_api_key` / `invalid_api_key`", body = ErrorBody),
        (status = 403, description = "`forbidden`", body = ErrorBody),
        (status = 404, description = "`not_found`: no such live key of this account", body = ErrorBody),
    ),
)]
pub(crate) async fn rotate_own_key(
    State(state): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<RotatedKey>> {
    let principal = owner(caller)?;
    rotate(&state, &id, Some(&principal)).await
}
