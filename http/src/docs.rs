//! `GET /docs`: the API reference page (Swagger UI rendering `/openapi.json`), and its assets
//! under `/docs/{asset}`. The assets are vendored in `http/assets/docs/` (provenance and
//! licenses in its README) and compiled into the binary, so the page needs nothing but the
//! gateway: no CDN, works offline.

use axum::{
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
};

use super::{
    extract::AppPath,
    routes::{ErrorBody, Routes, get},
};
use crate::error::ApiError;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

const INDEX: &str = include_str!("../assets/docs/index.html");

/// Everything `index.html` loads.
const ASSETS: &[Asset] = &[
    Asset {
        name: "swagger-ui.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/docs/swagger-ui.css"),
    },
    Asset {
        name: "swagger-ui-bundle.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/docs/swagger-ui-bundle.js"),
    },
    Asset {
        name: "init.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/docs/init.js"),
    },
    Asset {
        name: "LICENSE",
        content_type: "text/plain; charset=utf-8",
        bytes: include_bytes!("../assets/docs/LICENSE"),
    },
    Asset {
        name: "NOTICE",
        content_type: "text/plain; charset=utf-8",
        bytes: include_bytes!("../assets/docs/NOTICE"),
    },
];

/// `/docs` and `/docs/{asset}`.
pub fn router() -> Routes {
    Routes::new()
        .route("/docs", get(docs_page))
        .route("/docs/{asset}", get(docs_asset))
}

/// The API reference page.
#[utoipa::path(
    get,
    path = "/docs",
    tag = "docs",
    responses((status = 200, description = "The API reference page (HTML; loads `/openapi.json`)", content_type = "text/html", body = String)),
)]
pub(crate) async fn docs_page() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        INDEX,
    )
        .into_response()
}

/// A file the page loads.
#[utoipa::path(
    get,
    path = "/docs/{asset}",
    tag = "docs",
    params(("asset" = String, Path, description = "`swagger-ui.css`, `swagger-ui-bundle.js`, `init.js`, `LICENSE` or `NOTICE`")),
    responses(
        (status = 200, description = "The file", body = String),
        (status = 404, description = "`not_found`", body = ErrorBody),
    ),
)]
pub(crate) async fn docs_asset(AppPath(name): AppPath<String>) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.name == name) else {
        return ApiError::NotFound { resource: "asset" }.into_response();
    };
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            ),
        ],
        asset.bytes,
    )
        .into_response()
}
