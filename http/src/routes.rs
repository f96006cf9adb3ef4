//! What a handler module needs to serve and document its routes: [`Routes`], which records the
//! method and path of every route it hands to axum (so the OpenAPI coverage test can compare them
//! with the document, see [`super::openapi`]); the [`get`], [`post`], … endpoint builders; the
//! documented [`ErrorBody`]; and the security [`schemes`]' names. Handlers import this module; the
//! document ([`super::openapi`]) imports the handlers; neither imports the other's importer.

use axum::{
    Router,
    handler::Handler,
    http::Method,
    routing::{self, MethodRouter},
};

use crate::state::AppState;

/// Routes and the `(method, path)` pairs they serve, recorded as they are registered.
#[derive(Debug, Default)]
pub struct Routes {
    router: Router<AppState>,
    served: Vec<(Method, String)>,
}

impl Routes {
    /// No routes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serve `endpoint` at `path` (axum syntax, `{param}`, which is also OpenAPI's).
    #[must_use]
    pub fn route(mut self, path: &str, endpoint: Endpoint) -> Self {
        self.served.extend(
            endpoint
                .methods
                .into_iter()
                .map(|method| (method, path.to_owned())),
        );
        self.router = self.router.route(path, endpoint.router);
        self
    }

    /// Both sets of routes.
    #[must_use]
    pub fn merge(mut self, other: Routes) -> Self {
        self.served.extend(other.served);
        self.router = self.router.merge(other.router);
        self
    }

    /// What is served, in registration order.
    pub fn served(&self) -> &[(Method, String)] {
        &self.served
    }

    /// The axum router.
    pub fn into_router(self) -> Router<AppState> {
        self.router
    }
}

/// Handlers for one path, by method; built with [`get`], [`post`], … and chained.
#[derive(Debug)]
pub struct Endpoint {
    methods: Vec<Method>,
    router: MethodRouter<AppState>,
}

macro_rules! endpoint_methods {
    ($($name:ident => $method:ident),* $(,)?) => {
        $(
            #[doc = concat!("An endpoint answering `", stringify!($method), "` with `handler`.")]
            pub fn $name<H, T>(handler: H) -> Endpoint
            where
                H: Handler<T, AppState>,
                T: 'static,
            {
                Endpoint {
                    methods: vec![Method::$method],
                    router: routing::$name(handler),
                }
            }
        )*

        impl Endpoint {
            $(
                #[doc = concat!("Also answer `", stringify!($method), "` with `handler`.")]
                #[must_use]
                pub fn $name<H, T>(mut self, handler: H) -> Self
                where
                    H: Handler<T, AppState>,
                    T: 'static,
                {
                    self.methods.push(Method::$method);
                    self.router = self.router.$name(handler);
                    self
                }
            )*
        }
    };
}

endpoint_methods!(get => GET, post => POST, patch => PATCH, delete => DELETE);

/// The error body every failure answers with.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ErrorBody {
    error: ErrorDetail,
}

/// `error` of [`ErrorBody`].
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)]
pub struct ErrorDetail {
    /// Stable snake_case code, e.g. `not_found`, `validation_failed`, `invalid_filter`.
    #[schema(example = "not_found")]
    code: String,
    /// Human-readable explanation; may change between versions.
    message: String,
    /// Structured details (e.g. `field`, `violations`, `retry_after_s`); `{}` when none.
    #[schema(value_type = Object)]
    details: serde_json::Value,
}

/// Security scheme names. `#[utoipa::path(security(...))]` only takes string literals, so the
/// handlers spell these out; the OpenAPI test checks every requirement names a declared scheme.
pub mod schemes {
    /// `Authorization: Bearer hg_sk_…`.
    pub const SEEKER: &str = "seeker_key";
    /// `Authorization: Bearer hg_op_…`.
    pub const OPERATOR: &str = "operator_key";
    /// `Authorization: Bearer <admin.api_key>`.
    pub const ADMIN: &str = "admin_key";
    /// The worker callback's Standard Webhooks signature (`webhook-signature`).
    pub const CALLBACK: &str = "worker_callback_signature";
    /// A wallet's sign-in-with-x proof (`SIGN-IN-WITH-X`, see `http::siwx`).
    pub const WALLET: &str = "wallet_sign_in";
}
