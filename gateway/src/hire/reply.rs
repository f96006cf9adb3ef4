//! [`Reply`]: what an execute answers. Besides the plain API errors it carries the x402 headers
//! (`PAYMENT-REQUIRED`, `PAYMENT-RESPONSE`), the HIRE informational headers of a 402 and the
//! bodies of 200/202/422/502/504.

use axum::{
    Json,
    body::Bytes,
    http::{HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use hiregate_payments::{SettleResponse, encode_header};
use serde_json::{Value, json};

use super::offer::StoredOffer;
use crate::error::ApiError;

const PAYMENT_REQUIRED: HeaderName = HeaderName::from_static("payment-required");
const PAYMENT_RESPONSE: HeaderName = HeaderName::from_static("payment-response");
const X_PAYMENT_ADDRESS: HeaderName = HeaderName::from_static("x-payment-address");
const X_PAYMENT_AMOUNT: HeaderName = HeaderName::from_static("x-payment-amount");
const X_PAYMENT_CURRENCY: HeaderName = HeaderName::from_static("x-payment-currency");
const X_PAYMENT_NETWORK: HeaderName = HeaderName::from_static("x-payment-network");

/// HIRE informational headers exposed to browsers with the x402 ones.
pub const INFORMATIONAL_HEADERS: [HeaderName; 4] = [
    X_PAYMENT_ADDRESS,
    X_PAYMENT_AMOUNT,
    X_PAYMENT_CURRENCY,
    X_PAYMENT_NETWORK,
];

/// The hire's correlation id on every execute answer (see [`crate::ids::CorrelationId`]).
pub const X_CORRELATION_ID: HeaderName = HeaderName::from_static("x-correlation-id");
/// `true` on the answer to a repeated execute (see [`Reply::duplicate`]).
pub const X_DUPLICATE: HeaderName = HeaderName::from_static("x-duplicate");

/// Headers of the hire's tracking, exposed to browsers.
pub const HIRE_TRACKING_HEADERS: [HeaderName; 2] = [X_CORRELATION_ID, X_DUPLICATE];

/// An execute answer: a plain API error, or a status, JSON body and headers. Boxed: replies
/// travel as `Err` values through the execute flow.
#[derive(Debug)]
pub struct Reply(Box<Parts>);

#[derive(Debug)]
struct Parts {
    status: StatusCode,
    body: Value,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Set when the reply is a plain API error (rendered by [`ApiError`] itself).
    api_error: Option<ApiError>,
    /// The body already serialized (a [`PreparedReply`]); `body` is then unused.
    serialized: Option<Bytes>,
}

/// A JSON reply serialized once and answered many times (the 402 of an offered contract):
/// answering it clones reference-counted bytes, it builds nothing.
#[derive(Debug)]
pub struct PreparedReply {
    status: StatusCode,
    body: Bytes,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl PreparedReply {
    /// `reply` frozen; `None` for plain API errors, which render themselves.
    pub fn of(reply: &Reply) -> Option<Self> {
        let parts = &reply.0;
        if parts.api_error.is_some() {
            return None;
        }
        let body = match &parts.serialized {
            Some(body) => body.clone(),
            None => Bytes::from(serde_json::to_vec(&parts.body).ok()?),
        };
        Some(Self {
            status: parts.status,
            body,
            headers: parts.headers.clone(),
        })
    }
}

impl From<ApiError> for Reply {
    fn from(error: ApiError) -> Self {
        Self(Box::new(Parts {
            status: error.status(),
            body: Value::Null,
            headers: Vec::new(),
            api_error: Some(error),
            serialized: None,
        }))
    }
}

impl Reply {
    /// A JSON reply.
    pub fn json(status: StatusCode, body: Value) -> Self {
        Self(Box::new(Parts {
            status,
            body,
            headers: Vec::new(),
            api_error: None,
            serialized: None,
        }))
    }

    /// A reply answering with `prepared`'s status, headers and bytes.
    pub fn prepared(prepared: &PreparedReply) -> Self {
        Self(Box::new(Parts {
            status: prepared.status,
            body: Value::Null,
            headers: prepared.headers.clone(),
            api_error: None,
            serialized: Some(prepared.body.clone()),
        }))
    }

    /// `{"error": {code, message, details}}` with `status`.
    #[allow(clippy::needless_pass_by_value)] // callers build `details` inline with json!
    pub fn error(
        status: StatusCode,
        code: &str,
        message: impl Into<String>,
        details: Value,
    ) -> Self {
        Self::json(
            status,
            json!({"error": {"code": code, "message": message.into(), "details": details}}),
        )
    }

    /// Add a header.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.0.headers.push((name, value));
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The body (`null` for plain API errors and prepared replies).
    pub fn body(&self) -> &Value {
        &self.0.body
    }

    /// 402 with `PAYMENT-REQUIRED` (its `error` set to `reason`), `Cache-Control: no-store`,
    /// the HIRE informational headers and a JSON body saying the same.
    pub fn payment_required(
        offer: &StoredOffer,
        code: &str,
        message: impl Into<String>,
        reason: Option<&str>,
        mut details: Value,
    ) -> Self {
        let challenge = offer.challenge(reason.map(str::to_owned));
        let encoded = encode_header(&challenge);
        let informational = offer.informational();
        if let Some(object) = details.as_object_mut() {
            object.insert("payment".to_owned(), informational.clone());
            object.insert(
                "payment_required".to_owned(),
                serde_json::to_value(&challenge).unwrap_or(Value::Null),
            );
            if let Some(reason) = reason {
                object.insert("reason".to_owned(), Value::String(reason.to_owned()));
            }
        }
        let mut reply =
            Self::error(StatusCode::PAYMENT_REQUIRED, code, message, details).no_store();
        if let Ok(value) = HeaderValue::from_str(&encoded) {
            reply = reply.header(PAYMENT_REQUIRED, value);
        }
        for (name, key) in [
            (X_PAYMENT_ADDRESS, "address"),
            (X_PAYMENT_AMOUNT, "amount"),
            (X_PAYMENT_CURRENCY, "currency"),
            (X_PAYMENT_NETWORK, "network"),
        ] {
            if let Some(value) = informational
                .get(key)
                .and_then(Value::as_str)
                .and_then(|v| HeaderValue::from_str(v).ok())
            {
                reply = reply.header(name, value);
            }
        }
        reply
    }

    /// Adds `PAYMENT-RESPONSE` carrying `settlement`.
    #[must_use]
    pub fn with_payment_response(self, settlement: &SettleResponse) -> Self {
        match HeaderValue::from_str(&encode_header(settlement)) {
            Ok(value) => self.header(PAYMENT_RESPONSE, value),
            Err(_) => self,
        }
    }

    /// Adds `Cache-Control: no-store`.
    #[must_use]
    pub fn no_store(self) -> Self {
        self.header(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))
    }

    /// Marks the answer to a repeated execute (SW4RM's `DUPLICATE_DETECTED`): header
    /// `X-Duplicate: true`, and in a JSON object body `duplicate: true` with `original`
    /// (the original attempt, its status and when it was recorded). Nothing ran again.
    #[must_use]
    pub fn duplicate(mut self, original: Value) -> Self {
        if self.0.api_error.is_none()
            && self.0.serialized.is_none()
            && let Some(body) = self.0.body.as_object_mut()
        {
            body.insert("duplicate".to_owned(), Value::Bool(true));
            body.insert("original".to_owned(), original);
        }
        self.header(X_DUPLICATE, HeaderValue::from_static("true"))
    }

    /// Adds `X-Correlation-ID` (skipped for an id no header can carry).
    #[must_use]
    pub fn correlated(self, correlation_id: &str) -> Self {
        match HeaderValue::from_str(correlation_id) {
            Ok(value) => self.header(X_CORRELATION_ID, value),
            Err(_) => self,
        }
    }

    /// Adds `Retry-After: seconds`.
    #[must_use]
    pub fn retry_after(self, seconds: u64) -> Self {
        self.header(header::RETRY_AFTER, HeaderValue::from(seconds))
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let parts = *self.0;
        let mut response = match (parts.api_error, parts.serialized) {
            (Some(error), _) => error.into_response(),
            (None, Some(body)) => (
                parts.status,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            (None, None) => (parts.status, Json(parts.body)).into_response(),
        };
        let headers = response.headers_mut();
        for (name, value) in parts.headers {
            headers.append(name, value);
        }
        response
    }
}
