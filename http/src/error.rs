//! [`ApiError`]: every error the HTTP API returns, with a stable snake_case `code`, rendered as
//! `{"error":{"code","message","details"}}`.
//!
//! Client errors say what is wrong; server errors (500) are logged with their cause chain inside
//! the request span and answered with an opaque message.

use axum::{
    Json,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use crate::answers;
use hiregate_engine::{
    hire::error::{ErrorKind, HireError},
    registry::{
        RegistryError,
        probe::{ProbeFailure, ProbeFailureKind},
    },
};
use hiregate_store::{StoreError, keys::Role};

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// An API error. Each variant has one HTTP status and one stable `code`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not syntactically valid JSON.
    #[error("request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// The JSON does not fit the expected shape or a value is invalid.
    #[error("{0}")]
    InvalidBody(String),
    /// The body is not declared as JSON.
    #[error("expected a request body with Content-Type: application/json")]
    UnsupportedMediaType,
    /// The body exceeds `http.body_limit_bytes`.
    #[error("request body is too large")]
    PayloadTooLarge,
    /// Query string parameters are invalid.
    #[error("invalid query string: {0}")]
    InvalidQuery(String),
    /// A parsed value breaks a rule the type system cannot express.
    #[error("{field}: {reason}")]
    Validation {
        /// JSON field at fault.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// No `Authorization: Bearer …` header.
    #[error("missing API key: send Authorization: Bearer <key>")]
    MissingCredentials,
    /// The presented key is malformed, unknown or revoked.
    #[error("invalid API key")]
    InvalidCredentials,
    /// A sign-in-with-x proof (`SIGN-IN-WITH-X`) is garbled, stale, bound elsewhere, replayed
    /// or not signed by its address (see `http::siwx`).
    #[error("{message}")]
    WalletProofRefused {
        /// One of the x402 SDK's `invalid_siwx_*` codes.
        code: &'static str,
        /// What is wrong (never the proof itself).
        message: String,
    },
    /// The key is valid but its role may not do this.
    #[error("this endpoint needs a {} key", required.as_str())]
    Forbidden {
        /// Role the endpoint requires.
        required: Role,
    },
    /// The resource does not exist or is not the caller's.
    #[error("{resource} not found")]
    NotFound {
        /// Kind of resource.
        resource: &'static str,
    },
    /// No route matches the path.
    #[error("no such endpoint")]
    RouteNotFound,
    /// The route exists, the method does not.
    #[error("method not allowed on this endpoint")]
    MethodNotAllowed,
    /// The request conflicts with the resource's current state.
    #[error("{message}")]
    Conflict {
        /// Stable code, e.g. `worker_retired`.
        code: &'static str,
        /// What conflicts.
        message: String,
    },
    /// Like [`ApiError::Conflict`], with structured details.
    #[error("{message}")]
    ConflictWithDetails {
        /// Stable code, e.g. `dispute_window_closed`.
        code: &'static str,
        /// What conflicts.
        message: String,
        /// Structured details.
        details: Value,
    },
    /// An authenticated caller who is not a party of the contract it acts on.
    #[error("{message}")]
    NotAParty {
        /// What was refused.
        message: String,
    },
    /// A well-formed request the gateway cannot act on, with a specific code.
    #[error("{message}")]
    Unprocessable {
        /// Stable code, e.g. `task_type_not_offered`.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Like [`ApiError::Unprocessable`], with structured details.
    #[error("{message}")]
    UnprocessableWithDetails {
        /// Stable code.
        code: &'static str,
        /// What is wrong.
        message: String,
        /// Structured details.
        details: Value,
    },
    /// A malformed request part other than the JSON body, e.g. a header.
    #[error("{message}")]
    BadRequest {
        /// Stable code, e.g. `invalid_payment_signature`.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The resource existed but is over for good (an expired offer or authorization).
    #[error("{message}")]
    Gone {
        /// Stable code, e.g. `contract_expired`.
        code: &'static str,
        /// What happened.
        message: String,
    },
    /// A worker endpoint failed its probe.
    #[error("worker endpoint failed its probe: {0}")]
    WorkerProbeFailed(ProbeFailure),
    /// The protocol has no probe, so it cannot be registered yet.
    #[error("{0}")]
    ProtocolNotSupported(String),
    /// The caller must slow down.
    #[error("{message}")]
    TooManyRequests {
        /// What limit was hit.
        message: String,
        /// Seconds to wait.
        retry_after_s: u64,
    },
    /// The request took longer than `http.request_timeout_s`.
    #[error("request timed out")]
    RequestTimeout,
    /// A dependency is unavailable; retry later.
    #[error("{message}")]
    Unavailable {
        /// Stable code, e.g. `facilitator_unavailable`.
        code: &'static str,
        /// What is unavailable.
        message: String,
        /// Seconds to wait.
        retry_after_s: u64,
    },
    /// Anything else: logged, answered opaquely.
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
    /// Storage failure: logged, answered opaquely.
    #[error("internal error")]
    Store(#[from] StoreError),
    /// The hire engine's refusal, answered as `http::answers` renders it.
    #[error("{0}")]
    Hire(#[from] HireError),
}

impl ApiError {
    /// Wrap any error as an internal one.
    pub fn internal(error: impl Into<anyhow::Error>) -> Self {
        Self::Internal(error.into())
    }

    /// HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MalformedJson(_) | Self::InvalidQuery(_) | Self::BadRequest { .. } => {
                StatusCode::BAD_REQUEST
            }
            Self::Gone { .. } => StatusCode::GONE,
            Self::InvalidBody(_)
            | Self::Unprocessable { .. }
            | Self::UnprocessableWithDetails { .. }
            | Self::Validation { .. }
            | Self::WorkerProbeFailed(_)
            | Self::ProtocolNotSupported(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::MissingCredentials
            | Self::InvalidCredentials
            | Self::WalletProofRefused { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::NotFound { .. } | Self::RouteNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict { .. } | Self::ConflictWithDetails { .. } => StatusCode::CONFLICT,
            Self::NotAParty { .. } => StatusCode::FORBIDDEN,
            Self::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::RequestTimeout | Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) | Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Hire(error) => answers::status_of(error.kind),
        }
    }

    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MalformedJson(_) => "malformed_json",
            Self::InvalidBody(_) => "invalid_body",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::PayloadTooLarge => "payload_too_large",
            Self::InvalidQuery(_) => "invalid_query",
            Self::Validation { .. } => "validation_failed",
            Self::MissingCredentials => "missing_api_key",
            Self::InvalidCredentials => "invalid_api_key",
            Self::Forbidden { .. } => "forbidden",
            Self::NotAParty { .. } => "not_a_party",
            Self::NotFound { .. } => "not_found",
            Self::RouteNotFound => "route_not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::Conflict { code, .. }
            | Self::ConflictWithDetails { code, .. }
            | Self::Unavailable { code, .. }
            | Self::Unprocessable { code, .. }
            | Self::UnprocessableWithDetails { code, .. }
            | Self::BadRequest { code, .. }
            | Self::WalletProofRefused { code, .. }
            | Self::Gone { code, .. } => code,
            Self::WorkerProbeFailed(failure) => match failure.kind {
                ProbeFailureKind::TargetNotAllowed => "endpoint_not_allowed",
                ProbeFailureKind::MissingTaskTypes(_) => "worker_capabilities_mismatch",
                _ => "worker_probe_failed",
            },
            Self::ProtocolNotSupported(_) => "protocol_not_supported",
            Self::TooManyRequests { .. } => "too_many_requests",
            Self::RequestTimeout => "request_timeout",
            Self::Internal(_) | Self::Store(_) => "internal_error",
            Self::Hire(error) => error.code.as_str(),
        }
    }

    fn details(&self) -> Value {
        match self {
            Self::Validation { field, .. } => json!({ "field": field }),
            Self::UnprocessableWithDetails { details, .. }
            | Self::ConflictWithDetails { details, .. } => details.clone(),
            Self::Forbidden { required } => json!({ "required_role": required.as_str() }),
            Self::WorkerProbeFailed(failure) => {
                let mut details =
                    json!({ "check": failure.check.as_str(), "reason": failure.detail });
                match &failure.kind {
                    ProbeFailureKind::BadStatus(status) => details["status"] = json!(status),
                    ProbeFailureKind::MissingTaskTypes(missing) => {
                        details["missing_task_types"] = json!(missing);
                    }
                    _ => {}
                }
                if let Some(diagnostics) = &failure.diagnostics {
                    details["diagnostics"] = diagnostics.clone();
                }
                details
            }
            Self::TooManyRequests { retry_after_s, .. }
            | Self::Unavailable { retry_after_s, .. } => {
                json!({ "retry_after_s": retry_after_s })
            }
            _ => json!({}),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            Self::TooManyRequests { retry_after_s, .. }
            | Self::Unavailable { retry_after_s, .. } => Some(*retry_after_s),
            Self::RequestTimeout => Some(1),
            _ => None,
        }
    }
}

impl ApiError {
    /// `{"code", "message", "details"}`, as the answer's `error` shows it (the MCP server's
    /// tool errors carry it too).
    pub fn error_object(&self) -> Value {
        match self {
            Self::Hire(error) => json!({
                "code": error.code.as_str(),
                "message": error.message,
                "details": error.details_or_empty(),
            }),
            other => json!({
                "code": other.code(),
                "message": other.to_string(),
                "details": other.details(),
            }),
        }
    }

    /// Log a fault of the gateway with its cause (the answer stays opaque): in the request's
    /// span, or the tool call's.
    pub fn log_if_fault(&self) {
        let status = self.status();
        if !status.is_server_error()
            || matches!(self, Self::RequestTimeout | Self::Unavailable { .. })
        {
            return;
        }
        let cause = match self {
            Self::Internal(error) => format!("{error:#}"),
            Self::Store(error) => error_chain(error),
            Self::Hire(error) if error.kind != ErrorKind::Internal => return,
            Self::Hire(error) => error
                .cause
                .as_ref()
                .map_or_else(|| error.message.clone(), |cause| format!("{cause:#}")),
            other => other.to_string(),
        };
        tracing::error!(error.message = %self, error.cause_chain = %cause, "request failed");
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Hire(error) = self {
            return answers::hire_error(&error);
        }
        let status = self.status();
        self.log_if_fault();
        let body = json!({ "error": self.error_object() });
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.retry_after() {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

impl From<RegistryError> for ApiError {
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::NotFound => Self::NotFound { resource: "worker" },
            RegistryError::Retired => Self::Conflict {
                code: "worker_retired",
                message: "the worker is retired and can no longer change".to_owned(),
            },
            RegistryError::ConcurrentUpdate => Self::Conflict {
                code: "concurrent_update",
                message: error.to_string(),
            },
            RegistryError::ProtocolNotSupported(_) => Self::ProtocolNotSupported(error.to_string()),
            RegistryError::Probe(failure) => Self::WorkerProbeFailed(failure),
            RegistryError::Invalid(invalid) => Self::Validation {
                field: invalid.field,
                reason: invalid.reason,
            },
            RegistryError::InsecureEndpoint { ref endpoint } => Self::UnprocessableWithDetails {
                code: "endpoint_not_https",
                message: error.to_string(),
                details: serde_json::json!({
                    "field": "endpoint",
                    "endpoint": endpoint,
                    "required_scheme": "https",
                    "setting": "outbound.require_https",
                }),
            },
            RegistryError::Store(store) => Self::Store(store),
        }
    }
}
