//! The OpenAPI 3.1 document of the API, generated from the handlers' `#[utoipa::path]`
//! attributes and the types' `ToSchema` derives, served at `GET /openapi.json`.
//!
//! Every route is registered through [`Routes`] (see [`super::routes`]), which records the method
//! and path it hands to axum. [`undocumented_routes`] compares that record with the document, so a route added
//! without documentation fails the coverage test (`tests/api/openapi.rs`) instead of silently
//! missing from the document.
//!
//! Types from other crates (contract terms, x402 payloads, receipts) are described as JSON
//! objects (`value_type = Object`) with a pointer to where their shape is defined, rather than
//! re-declared here where they could drift from the crate that owns them.

use std::sync::LazyLock;

use axum::{
    http::{HeaderValue, Method, header},
    response::{IntoResponse, Response},
};
use utoipa::{
    Modify, OpenApi,
    openapi::{
        HttpMethod, OpenApi as Document,
        security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme},
    },
};

use super::routes::{ErrorBody, ErrorDetail, Routes, get, schemes};

/// Served `(method, path)` pairs that the document does not describe.
pub fn undocumented_routes(routes: &Routes, doc: &Document) -> Vec<(Method, String)> {
    routes
        .served()
        .iter()
        .filter(|(method, path)| {
            let Some(method) = http_method(method) else {
                return true;
            };
            doc.paths.get_path_operation(path, method).is_none()
        })
        .cloned()
        .collect()
}

/// Documented `(method, path)` pairs that nothing serves.
pub fn unserved_operations(routes: &Routes, doc: &Document) -> Vec<(Method, String)> {
    let mut missing = Vec::new();
    for (path, item) in &doc.paths.paths {
        let operations = [
            (Method::GET, item.get.is_some()),
            (Method::POST, item.post.is_some()),
            (Method::PATCH, item.patch.is_some()),
            (Method::DELETE, item.delete.is_some()),
            (Method::PUT, item.put.is_some()),
        ];
        for (method, documented) in operations {
            if documented
                && !routes
                    .served()
                    .iter()
                    .any(|(m, p)| *m == method && p == path)
            {
                missing.push((method, path.clone()));
            }
        }
    }
    missing
}

fn http_method(method: &Method) -> Option<HttpMethod> {
    Some(match *method {
        Method::GET => HttpMethod::Get,
        Method::POST => HttpMethod::Post,
        Method::PATCH => HttpMethod::Patch,
        Method::DELETE => HttpMethod::Delete,
        Method::PUT => HttpMethod::Put,
        _ => return None,
    })
}

/// The answers every operation of a kind can give, added where the handler's own list leaves
/// them out, so the document names every status the extractors can answer:
/// a required JSON body → 400 `malformed_json`, 413 `payload_too_large`, 415
/// `unsupported_media_type` (no body, or not JSON), 422 `invalid_body`; query parameters → 400
/// `invalid_query`. A handler's own description of a status wins.
struct ExtractorAnswers;

impl ExtractorAnswers {
    const BODY: [(&'static str, &'static str); 4] = [
        ("400", "`malformed_json`: the body is not JSON"),
        (
            "413",
            "`payload_too_large`: the body is larger than `http.body_limit_bytes`",
        ),
        (
            "415",
            "`unsupported_media_type`: no body, or a body not sent as `Content-Type: \
             application/json`",
        ),
        (
            "422",
            "`invalid_body`: the JSON does not fit the body's schema",
        ),
    ];
    const QUERY: (&'static str, &'static str) = (
        "400",
        "`invalid_query`: an unknown parameter, or a value outside its documented constraints",
    );
}

impl Modify for ExtractorAnswers {
    fn modify(&self, doc: &mut Document) {
        use utoipa::openapi::{
            ContentBuilder, Ref, RefOr, Required, path::ParameterIn, response::ResponseBuilder,
        };
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in doc.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.post,
                &mut item.patch,
                &mut item.delete,
                &mut item.put,
            ];
            for operation in operations.into_iter().flatten() {
                let json_body = operation.request_body.as_ref().is_some_and(|body| {
                    matches!(body, RefOr::T(body)
                        if matches!(body.required, Some(Required::True))
                            && body.content.contains_key("application/json"))
                });
                let query = operation.parameters.iter().flatten().any(|parameter| {
                    matches!(parameter, RefOr::T(p) if p.parameter_in == ParameterIn::Query)
                });
                for parameter in operation.parameters.iter_mut().flatten() {
                    if let RefOr::T(parameter) = parameter {
                        never_null(parameter);
                    }
                }
                let mut wanted: Vec<(&str, &str)> = Vec::new();
                if json_body {
                    wanted.extend(Self::BODY);
                }
                if query {
                    wanted.push(Self::QUERY);
                }
                for (status, description) in wanted {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error(description));
                }
            }
        }
    }
}

/// An optional query, header or path parameter may be absent; it is never JSON `null` (the
/// wire has no such value, and a client sending the text `null` gets a 400). utoipa spells an
/// `Option<T>` parameter as `type: [T, "null"]`; this keeps `T`.
fn never_null(parameter: &mut utoipa::openapi::path::Parameter) {
    use utoipa::openapi::{
        RefOr,
        schema::{Schema, SchemaType, Type},
    };
    let Some(RefOr::T(Schema::Object(schema))) = parameter.schema.as_mut() else {
        return;
    };
    if let SchemaType::Array(types) = &schema.schema_type {
        let kept: Vec<Type> = types
            .iter()
            .filter(|t| **t != Type::Null)
            .cloned()
            .collect();
        schema.schema_type = match kept.as_slice() {
            [single] => SchemaType::Type(single.clone()),
            _ => SchemaType::Array(kept),
        };
    }
}

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("API key")
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            schemes::SEEKER,
            bearer(
                "A seeker API key, `hg_sk_` followed by 64 hex digits (created by an admin with \
                 `POST /v1/admin/keys` or `hiregate keys create`).",
            ),
        );
        components.add_security_scheme(
            schemes::OPERATOR,
            bearer("An operator API key, `hg_op_` followed by 64 hex digits."),
        );
        components.add_security_scheme(
            schemes::ADMIN,
            bearer("The admin key from configuration (`admin.api_key`)."),
        );
        components.add_security_scheme(
            schemes::CALLBACK,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "webhook-signature",
                "Standard Webhooks signature (`v1,<base64 HMAC-SHA256>` over \
                 `webhook-id.webhook-timestamp.body`) under the worker's callback secret \
                 (`whsec_…`, shown once at registration); `webhook-id` and \
                 `webhook-timestamp` headers are required too.",
            ))),
        );
        components.add_security_scheme(
            schemes::WALLET,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "SIGN-IN-WITH-X",
                "The x402 `sign-in-with-x` extension (CAIP-122): base64 of the JSON proof \
                 (`domain`, `address`, `uri`, `version`, `chainId`, `type`, `nonce`, `issuedAt`, \
                 optional `expirationTime`, `notBefore`, `statement`, `resources`, and \
                 `signature`, the EIP-191 signature of the EIP-4361 message of those fields, or \
                 one the wallet contract's EIP-1271 `isValidSignature` accepts) by the wallet that \
                 paid for the contract over the stable x402 resource. Bound to this gateway's \
                 domain and origin and a configured chain; issued less than 5 minutes ago; each \
                 nonce accepted once. A 401 of these routes carries the challenge in \
                 `PAYMENT-REQUIRED` (`extensions[\"sign-in-with-x\"]`).",
            ))),
        );
    }
}

/// The API description.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "hiregate",
        description = "A gateway for hiring AI agents: signed contracts, x402 payments, verified \
            deliverables, on-chain settlement.\n\nEvery error answers \
            `{\"error\":{\"code\",\"message\",\"details\"}}` with a stable `code`.\n\nx402 v2 \
            headers: a 402 answer carries `PAYMENT-REQUIRED` (base64 JSON `PaymentRequired`); \
            the paid retry sends `PAYMENT-SIGNATURE` (base64 JSON `PaymentPayload`); a paid \
            answer carries `PAYMENT-RESPONSE` (base64 JSON settlement response).",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&SecuritySchemes, &ExtractorAnswers),
    paths(
        super::ops::get_healthz,
        super::ops::get_readyz,
        super::ops::get_metrics,
        openapi_json,
        super::docs::docs_page,
        super::docs::docs_asset,
        super::console::index,
        super::console::index_slash,
        super::console::asset,
        super::admin::create_key,
        super::admin::list_keys,
        super::admin::revoke_key,
        super::admin::rotate_key,
        super::admin::reconcile_ledger,
        super::keys::list_own_keys,
        super::keys::revoke_own_key,
        super::keys::rotate_own_key,
        super::workers::own_workers,
        super::workers::worker_stats,
        super::workers::list_workers,
        super::workers::create_worker,
        super::workers::get_worker,
        super::workers::update_worker,
        super::workers::retire_worker,
        super::reputation::worker_reputation,
        super::agent_cards::gateway_card,
        super::agent_cards::listing_card,
        super::assets::list_assets,
        super::contracts::list_contracts,
        super::contracts::create_contract,
        super::contracts::get_contract,
        super::contracts::execute_by_path,
        super::contracts::wallet_contracts,
        super::contracts::execute_by_header,
        super::contracts::jwks,
        super::contracts::did_document,
        super::contracts::did_document_at_root,
        super::callbacks::worker_callback,
        super::cancel::cancel_contract,
        super::disputes::open_dispute,
        super::disputes::dispute_queue,
        super::disputes::answer_dispute,
        super::disputes::view_dispute,
        super::disputes::decide_dispute,
        super::disputes::refund_contract,
        super::receipts::receipt,
        super::receipts::events_jsonl,
        super::events::contract_events,
        super::webhooks::secret_status,
        super::webhooks::create_secret,
        super::webhooks::dead_letters,
        super::webhooks::redeliver,
        super::webhooks::contract_deliveries,
        super::x402_resource::hire_resource,
        super::x402_resource::discovery_resources,
        super::a2a::marketplace_rpc,
        super::a2a::listing_rpc,
    ),
    components(schemas(ErrorBody, ErrorDetail, super::workers::DiscoverySort)),
    tags(
        (name = "ops", description = "Liveness, readiness, metrics"),
        (name = "docs", description = "This document and its viewer"),
        (name = "console", description = "The web console (static files; it calls this API with the caller's key)"),
        (name = "keys", description = "API keys: admins manage all, owners their own"),
        (name = "workers", description = "Worker listings: registration and discovery"),
        (name = "contracts", description = "Proposal, payment (x402), execution, the contract view"),
        (name = "disputes", description = "Disputes, arbiter decisions, refunds"),
        (name = "receipts", description = "Signed receipts and the event log export"),
        (name = "webhooks", description = "Seeker webhooks: secrets and dead letters"),
        (name = "admin", description = "Admin-only operations"),
        (name = "x402", description = "Stable x402 resources per listing and task type (no account: any x402 client pays), and their discovery list"),
        (name = "a2a", description = "A2A v1.0 (JSON-RPC) interfaces named by the agent cards, paid per the a2a-x402 extension: no account needed"),
    ),
)]
pub struct ApiDoc;

/// Built once: the document only changes with the code.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    // Serializing plain maps and strings cannot fail; should it ever, the answer is still JSON.
    ApiDoc::openapi().to_json().unwrap_or_else(|error| {
        serde_json::json!({ "error": { "code": "internal_error", "message": error.to_string() } })
            .to_string()
    })
});

/// `/openapi.json`.
pub fn router() -> Routes {
    Routes::new().route("/openapi.json", get(openapi_json))
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "docs",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object)),
)]
pub(crate) async fn openapi_json() -> Response {
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT.as_str(),
    )
        .into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
