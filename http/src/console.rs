//! `/console`: the web console for seekers, operators and arbiters, served from assets compiled
//! into the binary (`http/assets/console/`; plain HTML, CSS and JS modules, no build step).
//!
//! The console is a client of the public JSON API with the caller's own API key, so it adds no
//! authority of its own. A seeker pays from the browser's own wallet (EIP-1193, `wallet.js`): the
//! wallet signs the x402 authorization and the page sends it like any x402 client, so the
//! console never holds a payment key either. Without an account (`#/wallet-hire`), the page
//! hires over a listing's stable x402 resource like any x402 client, sending no key; the
//! answer's capability token is the only credential it then uses. Every answer carries a Content-Security-Policy that allows only this
//! origin (no inline script or style, no other host), so a console page cannot load or send
//! anything elsewhere even if an API value were to carry markup.

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

use super::{
    extract::AppPath,
    routes::{ErrorBody, Routes, get},
};
use crate::error::ApiError;

/// Everything the page may load or call: this origin only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; \
    form-action 'none'; frame-ancestors 'none'";

/// The console's files: name under `/console/`, media type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../assets/console/index.html"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../assets/console/favicon.svg"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("../assets/console/console.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/api.js"),
    ),
    (
        "dom.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/dom.js"),
    ),
    (
        "receipt.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/receipt.js"),
    ),
    (
        "seeker.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/seeker.js"),
    ),
    (
        "hire.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/hire.js"),
    ),
    (
        "wallethire.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/wallethire.js"),
    ),
    (
        "wallet.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/wallet.js"),
    ),
    (
        "inputcheck.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/inputcheck.js"),
    ),
    (
        "keccak.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/keccak.js"),
    ),
    (
        "operator.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/operator.js"),
    ),
    (
        "arbiter.js",
        "text/javascript; charset=utf-8",
        include_str!("../assets/console/arbiter.js"),
    ),
];

/// `/console`, `/console/` and `/console/{file}`.
pub fn router() -> Routes {
    Routes::new()
        .route("/console", get(index))
        .route("/console/", get(index_slash))
        .route("/console/{file}", get(asset))
}

/// The names of the console's files, for tests that fetch every one.
pub fn asset_names() -> impl Iterator<Item = &'static str> {
    ASSETS.iter().map(|(name, _, _)| *name)
}

/// The console's page.
#[utoipa::path(
    get,
    path = "/console",
    tag = "console",
    responses((status = 200, description = "The web console (HTML; uses this API with the caller's key)", content_type = "text/html", body = String)),
)]
pub(crate) async fn index() -> Response {
    serve("index.html").unwrap_or_else(IntoResponse::into_response)
}

/// The console's page, at the directory path relative asset URLs resolve against.
#[utoipa::path(
    get,
    path = "/console/",
    tag = "console",
    responses((status = 200, description = "The web console (HTML)", content_type = "text/html", body = String)),
)]
pub(crate) async fn index_slash() -> Response {
    index().await
}

/// One of the console's files.
#[utoipa::path(
    get,
    path = "/console/{file}",
    tag = "console",
    params(("file" = String, Path, description = "`index.html`, `console.css`, `app.js`, … (the console's own files)")),
    responses(
        (status = 200, description = "The file, with a self-only Content-Security-Policy", body = String),
        (status = 404, description = "`route_not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn asset(AppPath(file): AppPath<String>) -> Response {
    serve(&file).unwrap_or_else(IntoResponse::into_response)
}

fn serve(name: &str) -> Result<Response, ApiError> {
    let &(_, media_type, body) = ASSETS
        .iter()
        .find(|(asset, _, _)| *asset == name)
        .ok_or(ApiError::RouteNotFound)?;
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The assets change with the binary; revalidating is cheap and never shows a stale page.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
