//! Contracts: `POST /v1/contracts` (seeker), `GET /v1/contracts` (parties: own contracts, or
//! an operator's workers' contracts), `GET /v1/contracts/{id}` (parties), the two
//! execute routes (seeker) and `GET /.well-known/jwks.json` (anyone).
//!
//! Handlers only authenticate and parse; [`crate::hire::HireService`] does the work.

use axum::{
    Json, Router,
    body::Bytes,
    extract::{State, rejection::BytesRejection},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hiregate_contracts::id::ContractId;

use super::extract::{AppJson, AppPath, AppQuery, Party, Seeker};
use crate::{
    adapters::secrets::{SECRETS_HEADER, SeekerSecrets},
    auth::Role,
    error::{ApiError, ApiResult},
    hire::{
        ContractRequest,
        execute::ExecuteRequest,
        listing::{self, ContractPage, ListFilters, ListScope},
    },
    state::AppState,
};

/// Contract and execute routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/contracts", get(list_contracts).post(create_contract))
        .route("/v1/contracts/{id}", get(get_contract))
        .route("/v1/contracts/{id}/execute", post(execute_by_path))
        .route("/execute", post(execute_by_header))
        .route("/.well-known/jwks.json", get(jwks))
}

fn correlation_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(128).collect())
        .unwrap_or_else(|| format!("req_{}", ulid::Ulid::new()))
}

/// A contract id from a path or header; anything malformed names no contract (404).
fn parse_contract_id(raw: &str) -> ApiResult<String> {
    raw.trim()
        .parse::<ContractId>()
        .map(|id| id.to_string())
        .map_err(|_| ApiError::NotFound {
            resource: "contract",
        })
}

/// `POST /v1/contracts` (seeker): 201 with the signed terms, `terms_hash`, the gateway's contract
/// token (`gateway_jws`) and the x402 offer execute will ask for.
async fn create_contract(
    State(state): State<AppState>,
    seeker: Seeker,
    headers: HeaderMap,
    AppJson(request): AppJson<ContractRequest>,
) -> ApiResult<Response> {
    let created = state
        .hire
        .create_contract(&seeker.principal_id, request, &correlation_id(&headers))
        .await?;
    let location = format!("/v1/contracts/{}", created.contract_id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(created.body),
    )
        .into_response())
}

/// `?state=&worker_id=&limit=&cursor=` of `GET /v1/contracts`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    worker_id: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

/// `GET /v1/contracts` (seeker: its contracts; operator: its workers' contracts), newest first;
/// 422 `invalid_filter` / `invalid_cursor`.
async fn list_contracts(
    State(state): State<AppState>,
    party: Party,
    AppQuery(query): AppQuery<ListQuery>,
) -> ApiResult<Json<ContractPage>> {
    let scope = if party.role == Role::Operator {
        ListScope::Operator(party.principal_id)
    } else {
        ListScope::Seeker(party.principal_id)
    };
    let filters = ListFilters {
        state: query.state,
        worker_id: query.worker_id,
        limit: query.limit,
        cursor: query.cursor,
    };
    Ok(Json(
        listing::list_contracts(&state.store, scope, &filters).await?,
    ))
}

/// `GET /v1/contracts/{id}` (its seeker or its worker's operator).
async fn get_contract(
    State(state): State<AppState>,
    party: Party,
    AppPath(id): AppPath<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let id = parse_contract_id(&id)?;
    Ok(Json(
        state.hire.view_contract(&party.principal_id, &id).await?,
    ))
}

/// `POST /v1/contracts/{id}/execute` (seeker).
///
/// Optional `X-Hiregate-Secrets: base64(JSON object)`: runtime secrets for a Superwire worker
/// (its `/execute` body's `secrets`). They are not part of the signed terms, are sent to the
/// executor of this call only and are never stored, logged or sent in events or webhooks; a
/// seeker retry must resend them. Other protocols ignore them. A malformed value → 400
/// `invalid_secrets_header`, nothing changes.
async fn execute_by_path(
    State(state): State<AppState>,
    seeker: Seeker,
    AppPath(id): AppPath<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let id = match parse_contract_id(&id) {
        Ok(id) => id,
        Err(error) => return error.into_response(),
    };
    execute(state, seeker, id, headers, body).await
}

/// `POST /execute` with `X-Contract-ID` (seeker): the HIRE document's endpoint shape. Takes
/// `X-Hiregate-Secrets` as [`execute_by_path`] does.
async fn execute_by_header(
    State(state): State<AppState>,
    seeker: Seeker,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(raw) = headers.get("x-contract-id") else {
        return ApiError::BadRequest {
            code: "missing_contract_id",
            message: "send the contract id in X-Contract-ID (or use /v1/contracts/{id}/execute)"
                .to_owned(),
        }
        .into_response();
    };
    let id = match raw.to_str().map_err(|_| ApiError::NotFound {
        resource: "contract",
    }) {
        Ok(raw) => match parse_contract_id(raw) {
            Ok(id) => id,
            Err(error) => return error.into_response(),
        },
        Err(error) => return error.into_response(),
    };
    execute(state, seeker, id, headers, body).await
}

async fn execute(
    state: AppState,
    seeker: Seeker,
    contract_id: String,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::PayloadTooLarge.into_response();
        }
        Err(rejection) => return ApiError::InvalidBody(rejection.body_text()).into_response(),
    };
    let payment_signature = headers
        .get("payment-signature")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let secrets = match headers
        .get(SECRETS_HEADER)
        .map(|v| SeekerSecrets::from_header(v.as_bytes()))
        .transpose()
    {
        Ok(secrets) => secrets,
        Err(error) => {
            return ApiError::BadRequest {
                code: "invalid_secrets_header",
                message: format!("{error}; send X-Hiregate-Secrets as base64 of a JSON object"),
            }
            .into_response();
        }
    };
    state
        .hire
        .execute(ExecuteRequest {
            contract_id,
            seeker: seeker.principal_id,
            body,
            payment_signature,
            correlation_id: correlation_id(&headers),
            secrets,
        })
        .await
        .into_response()
}

/// `GET /.well-known/jwks.json`: the keys that verify contract tokens.
async fn jwks(State(state): State<AppState>) -> Response {
    let mut response = Json(state.hire.jwks()).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
