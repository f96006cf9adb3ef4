//! [`HireError`]: why the engine refused a request or could not finish it, in the engine's own
//! terms: a [`ErrorKind`] (what sort of refusal), a stable [`ErrorCode`], a message for people,
//! optional structured details and, when waiting helps, how long to wait.
//!
//! No transport type appears here: each transport maps a kind to its own answer (the REST API
//! to a status code and `{"error":{"code","message","details"}}`, see `http::answers`; MCP to a
//! tool error). Internal errors carry their cause for the log only; what is shown is opaque.

use std::{fmt, time::Duration};

use serde_json::Value;

use hiregate_store::StoreError;

/// What sort of refusal an error is; each transport answers each kind in its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A malformed part of the request other than its meaning (a body that is not JSON, a
    /// callback body that is not a report).
    BadRequest,
    /// A signed request whose signature is missing, stale or wrong (a worker's callback).
    Unauthenticated,
    /// An authenticated caller who is not a party of the contract it acts on.
    NotAParty,
    /// The resource does not exist, or is not the caller's to see.
    NotFound,
    /// The request conflicts with the resource's current state.
    Conflict,
    /// The resource existed but is over for good (an expired offer).
    Gone,
    /// A well-formed request the engine cannot act on (terms, options, input).
    Unprocessable,
    /// No capacity now: retry shortly, nothing was charged.
    Busy,
    /// Something the engine depends on is unavailable: retry later.
    Unavailable,
    /// A fault of the gateway: logged with its cause, answered opaquely.
    Internal,
}

/// Declares [`ErrorCode`] with the stable string of each variant, in one list.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident => $code:literal,)*) => {
        /// The stable, machine-readable code of a [`HireError`] (and of a failed hire's
        /// answer). Clients match on [`ErrorCode::as_str`]; it never changes for a variant.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* #[doc = concat!("`", $code, "`")] $variant,)*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The stable snake_case spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                }
            }
        }
    };
}

error_codes! {
    AcceptanceWindowTooLong => "acceptance_window_too_long",
    AmountOverflow => "amount_overflow",
    AssetNotSupported => "asset_not_supported",
    AuthorizationWindowTooLong => "authorization_window_too_long",
    CallbackReplayed => "callback_replayed",
    CallbackSignatureInvalid => "callback_signature_invalid",
    CallbackTaskMismatch => "callback_task_mismatch",
    CallbackTimestampOutOfWindow => "callback_timestamp_out_of_window",
    CallbackUnsigned => "callback_unsigned",
    ChainUnavailable => "chain_unavailable",
    ContractAlreadyDelivered => "contract_already_delivered",
    ContractCancelled => "contract_cancelled",
    ContractExpired => "contract_expired",
    ContractFinished => "contract_finished",
    ContractNotDisputable => "contract_not_disputable",
    ContractNotPending => "contract_not_pending",
    ContractNotTerminal => "contract_not_terminal",
    ContractRefunded => "contract_refunded",
    DisputeAlreadyAnswered => "dispute_already_answered",
    DisputeAlreadyDecided => "dispute_already_decided",
    DisputeAlreadyOpen => "dispute_already_open",
    DisputeOpenedByYou => "dispute_opened_by_you",
    DisputeWindowClosed => "dispute_window_closed",
    EscrowNotAvailable => "escrow_not_available",
    FacilitatorUnavailable => "facilitator_unavailable",
    FeePolicyOutOfBounds => "fee_policy_out_of_bounds",
    InputMismatch => "input_mismatch",
    InputSchemaViolation => "input_schema_violation",
    /// Opaque: the cause is logged, never shown.
    InternalError => "internal_error",
    InvalidAuthCaptureExtra => "invalid_auth_capture_extra",
    InvalidCallbackBody => "invalid_callback_body",
    InvalidCaptureAuthorizer => "invalid_capture_authorizer",
    InvalidCollector => "invalid_collector",
    InvalidCursor => "invalid_cursor",
    InvalidFilter => "invalid_filter",
    InvalidPaymentIdentifier => "invalid_payment_identifier",
    InvalidPaymentSignature => "invalid_payment_signature",
    MalformedJson => "malformed_json",
    MoneyReleased => "money_released",
    NotAParty => "not_a_party",
    NotFound => "not_found",
    OptionNotSupported => "option_not_supported",
    PaymentAlreadyUsed => "payment_already_used",
    PaymentIdentifierConflict => "payment_identifier_conflict",
    PaymentInvalid => "payment_invalid",
    PaymentMismatch => "payment_mismatch",
    PaymentRequired => "payment_required",
    PaymentSchemeNotAccepted => "payment_scheme_not_accepted",
    PaymentSettling => "payment_settling",
    PollWindowTooLong => "poll_window_too_long",
    ProfileNotDeclared => "profile_not_declared",
    ProtocolNotSupported => "protocol_not_supported",
    RefundExceedsCapture => "refund_exceeds_capture",
    RefundNotFunded => "refund_not_funded",
    RefundNotPossible => "refund_not_possible",
    RefundPending => "refund_pending",
    RefundRefused => "refund_refused",
    RefundWindowClosed => "refund_window_closed",
    SettlementFailed => "settlement_failed",
    TaskTypeNotOffered => "task_type_not_offered",
    TokenCollectionFailed => "token_collection_failed",
    TooManyRequests => "too_many_requests",
    ValidationFailed => "validation_failed",
    VerificationFailed => "verification_failed",
    VerifierCannotVerify => "verifier_cannot_verify",
    VerifierIsWorker => "verifier_is_worker",
    VerifierNotFound => "verifier_not_found",
    VerifierSameOperator => "verifier_same_operator",
    VerifierUnhealthy => "verifier_unhealthy",
    WebhookUrlNotHttps => "webhook_url_not_https",
    WorkerCapabilitiesUnavailable => "worker_capabilities_unavailable",
    WorkerFailed => "worker_failed",
    WorkerOfferUnusable => "worker_offer_unusable",
    WorkerRetired => "worker_retired",
    WorkerTimeout => "worker_timeout",
    WorkerUnavailable => "worker_unavailable",
    WorkerUnhealthy => "worker_unhealthy",
    ZeroAuthorization => "zero_authorization",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the engine refused a request or could not finish it.
#[derive(Debug)]
pub struct HireError {
    /// What sort of refusal.
    pub kind: ErrorKind,
    /// The stable code.
    pub code: ErrorCode,
    /// What happened, for people (`internal error` for internal ones).
    pub message: String,
    /// Structured details; `None` shows as an empty object.
    pub details: Option<Value>,
    /// How long to wait before trying again, when waiting helps.
    pub retry_after: Option<Duration>,
    /// The cause of an internal error, for the log; never shown to the caller.
    pub cause: Option<anyhow::Error>,
}

impl fmt::Display for HireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for HireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause.as_ref().map(|cause| cause.as_ref() as _)
    }
}

impl HireError {
    /// An error of `kind` with `code` and `message`, no details.
    pub fn new(kind: ErrorKind, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            kind,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
            cause: None,
        }
    }

    /// With structured `details`.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// With a wait before trying again.
    #[must_use]
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// `{resource} not found`: it does not exist or is not the caller's.
    pub fn not_found(resource: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            ErrorCode::NotFound,
            format!("{resource} not found"),
        )
    }

    /// A conflict with the current state.
    pub fn conflict(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, message)
    }

    /// A request the engine cannot act on.
    pub fn unprocessable(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unprocessable, code, message)
    }

    /// A malformed request part.
    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, code, message)
    }

    /// Over for good.
    pub fn gone(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Gone, code, message)
    }

    /// The caller is not a party of the contract.
    pub fn not_a_party(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotAParty, ErrorCode::NotAParty, message)
    }

    /// A dependency is unavailable: retry after `retry_after_s` seconds, which the details
    /// repeat as `retry_after_s`.
    pub fn unavailable(code: ErrorCode, message: impl Into<String>, retry_after_s: u64) -> Self {
        Self::new(ErrorKind::Unavailable, code, message)
            .with_details(serde_json::json!({ "retry_after_s": retry_after_s }))
            .with_retry_after(Duration::from_secs(retry_after_s))
    }

    /// `{field}: {reason}`: a value breaks a rule its type cannot express.
    pub fn validation(field: impl Into<String>, reason: impl fmt::Display) -> Self {
        let field = field.into();
        Self::new(
            ErrorKind::Unprocessable,
            ErrorCode::ValidationFailed,
            format!("{field}: {reason}"),
        )
        .with_details(serde_json::json!({ "field": field }))
    }

    /// A body that is not JSON.
    pub fn malformed_json(error: impl fmt::Display) -> Self {
        Self::bad_request(
            ErrorCode::MalformedJson,
            format!("request body is not valid JSON: {error}"),
        )
    }

    /// The worker's protocol cannot do this.
    pub fn protocol_not_supported(message: impl Into<String>) -> Self {
        Self::unprocessable(ErrorCode::ProtocolNotSupported, message)
    }

    /// A fault of the gateway: `cause` is logged where the error is answered, never shown.
    pub fn internal(cause: impl Into<anyhow::Error>) -> Self {
        Self {
            cause: Some(cause.into()),
            ..Self::new(
                ErrorKind::Internal,
                ErrorCode::InternalError,
                "internal error",
            )
        }
    }

    /// [`Self::internal`] with a message for the log.
    pub fn internal_msg(message: impl Into<String>) -> Self {
        Self::internal(anyhow::anyhow!(message.into()))
    }

    /// The details as shown: an empty object when there are none.
    pub fn details_or_empty(&self) -> Value {
        self.details
            .clone()
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()))
    }
}

impl From<StoreError> for HireError {
    fn from(error: StoreError) -> Self {
        Self::internal(error)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn codes_are_distinct_snake_case() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} twice");
            assert!(
                text.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{text}"
            );
        }
    }

    #[test]
    fn internal_errors_hide_their_cause() {
        let error = HireError::internal_msg("the database is on fire");
        assert_eq!(error.to_string(), "internal error");
        assert_eq!(error.code, ErrorCode::InternalError);
        assert!(format!("{:#}", error.cause.unwrap()).contains("on fire"));
    }
}
