//! The `EXTENSION-RESPONSES` header (x402 `extensions/bazaar.md`, "Verify and Settlement
//! Response Header"; read by `@x402/core` 2.27's HTTP facilitator client): a facilitator tells
//! the resource server, on its `/verify` or `/settle` answer, what became of each extension the
//! payment carried. The value is base64 of a JSON object keyed by extension, each entry a
//! `status` (`success`, `processing`, `rejected`) and, when rejected, a `rejectedReason`.
//!
//! Encode and decode with [`crate::encode_header`] / [`crate::decode_header`] like the other
//! x402 headers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::header::HeaderMessage;
use crate::wire::UnknownFields;

/// The header's name.
pub const EXTENSION_RESPONSES: &str = "EXTENSION-RESPONSES";

/// What became of one extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExtensionStatus {
    /// Processed.
    Success,
    /// Accepted, being processed asynchronously.
    Processing,
    /// Refused; see `rejectedReason`.
    Rejected,
}

/// One extension's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionResponse {
    /// The outcome.
    pub status: ExtensionStatus,
    /// Why it was rejected (only with [`ExtensionStatus::Rejected`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_reason: Option<String>,
    /// Other keys (e.g. a `code`), kept for the round trip.
    #[serde(flatten)]
    pub unknown: UnknownFields,
}

impl ExtensionResponse {
    /// A success.
    #[must_use]
    pub fn success() -> Self {
        Self {
            status: ExtensionStatus::Success,
            rejected_reason: None,
            unknown: UnknownFields::new(),
        }
    }

    /// A rejection, with why.
    #[must_use]
    pub fn rejected(reason: impl Into<String>) -> Self {
        Self {
            status: ExtensionStatus::Rejected,
            rejected_reason: Some(reason.into()),
            unknown: UnknownFields::new(),
        }
    }
}

/// The header's content: outcomes by extension key.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExtensionResponses(pub BTreeMap<String, ExtensionResponse>);

impl HeaderMessage for ExtensionResponses {
    const VERSIONED: bool = false;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::header::{decode_header, encode_header};

    #[test]
    fn the_specs_examples_decode_and_encode_back() {
        // base64 of {"bazaar":{"status":"success"}}, from the spec.
        let success: ExtensionResponses =
            decode_header("eyJiYXphYXIiOnsic3RhdHVzIjoic3VjY2VzcyJ9fQ==").unwrap();
        assert_eq!(success.0["bazaar"], ExtensionResponse::success());
        assert_eq!(
            encode_header(&success),
            "eyJiYXphYXIiOnsic3RhdHVzIjoic3VjY2VzcyJ9fQ=="
        );
        let rejected: ExtensionResponses = decode_header(
            "eyJiYXphYXIiOnsic3RhdHVzIjoicmVqZWN0ZWQiLCJyZWplY3RlZFJlYXNvbiI6ImluZm8gZmFpbGVkIHNjaGVtYSB2YWxpZGF0aW9uIn19",
        )
        .unwrap();
        assert_eq!(
            rejected.0["bazaar"],
            ExtensionResponse::rejected("info failed schema validation")
        );
    }

    #[test]
    fn a_malformed_header_is_an_error_not_a_panic() {
        assert!(decode_header::<ExtensionResponses>("not base64!").is_err());
        // base64 of {"bazaar":{"status":"maybe"}}
        assert!(
            decode_header::<ExtensionResponses>("eyJiYXphYXIiOnsic3RhdHVzIjoibWF5YmUifX0=")
                .is_err()
        );
        // base64 of [1]
        assert!(decode_header::<ExtensionResponses>("WzFd").is_err());
    }
}
