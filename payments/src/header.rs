//! The header codec: standard, padded base64 (RFC 4648 `+/` alphabet) of the UTF-8 JSON.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::reason::Reason;
use crate::wire::{PaymentPayload, PaymentRequired, SettleResponse, X402Version2};

/// Header carrying the 402 challenge ([`PaymentRequired`]).
pub const PAYMENT_REQUIRED: &str = "PAYMENT-REQUIRED";
/// Header carrying the client's payment ([`PaymentPayload`]).
pub const PAYMENT_SIGNATURE: &str = "PAYMENT-SIGNATURE";
/// Header carrying the settlement outcome ([`SettleResponse`]).
pub const PAYMENT_RESPONSE: &str = "PAYMENT-RESPONSE";

/// Longest header value accepted, in bytes. An EIP-3009 payment is about 1 KiB; the cap keeps a
/// hostile header from costing more than a bounded decode.
pub const MAX_HEADER_LEN: usize = 64 * 1024;

/// Encoding is padded (what the spec and SDKs emit); decoding also takes unpadded input, which
/// some hand-written clients produce, since padding carries no information.
const ENGINE: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A message that travels base64-encoded in an x402 header.
pub trait HeaderMessage: Serialize + DeserializeOwned {
    /// Whether the JSON carries a top-level `x402Version` that must be 2.
    const VERSIONED: bool;
}

impl HeaderMessage for PaymentRequired {
    const VERSIONED: bool = true;
}

impl HeaderMessage for PaymentPayload {
    const VERSIONED: bool = true;
}

impl HeaderMessage for SettleResponse {
    const VERSIONED: bool = false;
}

/// Why a header value could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// Longer than [`MAX_HEADER_LEN`].
    #[error("header value is {len} bytes, over the {MAX_HEADER_LEN}-byte limit")]
    TooLarge {
        /// Length of the rejected value.
        len: usize,
    },
    /// Not standard base64.
    #[error("header value is not standard base64")]
    MalformedBase64(#[source] base64::DecodeError),
    /// Base64 of something that is not a JSON object of the expected shape.
    #[error("header value is not the expected JSON: {0}")]
    MalformedJson(#[source] serde_json::Error),
    /// `x402Version` missing or not 2.
    #[error("unsupported x402Version {found}, only 2 is supported")]
    UnsupportedVersion {
        /// The value found (`null` when absent).
        found: Value,
    },
}

impl HeaderError {
    /// The verdict reason for a refused header.
    #[must_use]
    pub fn reason(&self) -> Reason {
        match self {
            Self::UnsupportedVersion { .. } => Reason::InvalidX402Version,
            Self::TooLarge { .. } | Self::MalformedBase64(_) | Self::MalformedJson(_) => {
                Reason::InvalidPayload
            }
        }
    }
}

/// Encodes `message` as a header value.
#[must_use]
pub fn encode_header<T: HeaderMessage>(message: &T) -> String {
    // These types hold only JSON-native data with string keys, which serde_json cannot fail
    // to write; an error here would be a bug in this crate, not bad input.
    let json = serde_json::to_vec(message).expect("x402 wire types always serialize to JSON");
    ENGINE.encode(json)
}

/// Decodes a header value into `T`, checking `x402Version` before the shape so that a v1
/// payload is reported as a version problem rather than as malformed JSON.
pub fn decode_header<T: HeaderMessage>(value: &str) -> Result<T, HeaderError> {
    let value = value.trim();
    if value.len() > MAX_HEADER_LEN {
        return Err(HeaderError::TooLarge { len: value.len() });
    }
    let bytes = ENGINE.decode(value).map_err(HeaderError::MalformedBase64)?;
    let json: Value = serde_json::from_slice(&bytes).map_err(HeaderError::MalformedJson)?;
    if T::VERSIONED {
        let found = json.get("x402Version").cloned().unwrap_or(Value::Null);
        if found.as_u64() != Some(X402Version2::VALUE) {
            return Err(HeaderError::UnsupportedVersion { found });
        }
    }
    serde_json::from_value(json).map_err(HeaderError::MalformedJson)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUIRED_JSON: &str = r#"{"x402Version":2,"resource":{"url":"https://api.example.com/premium"},"accepts":[{"scheme":"exact","network":"eip155:84532","amount":"10000","asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,"extra":{"name":"USDC","version":"2"}}]}"#;

    #[test]
    fn encodes_standard_padded_base64_of_the_json() {
        let required: PaymentRequired = serde_json::from_str(REQUIRED_JSON).unwrap();
        let encoded = encode_header(&required);
        assert!(
            encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        );
        assert_eq!(
            encoded.len() % 4,
            0,
            "padded base64 has a multiple of 4 chars"
        );
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&encoded)
            .unwrap();
        let back: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(REQUIRED_JSON).unwrap());
    }

    #[test]
    fn decodes_padded_and_unpadded() {
        let padded = base64::engine::general_purpose::STANDARD.encode(REQUIRED_JSON);
        let unpadded = padded.trim_end_matches('=');
        let a: PaymentRequired = decode_header(&padded).unwrap();
        let b: PaymentRequired = decode_header(unpadded).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.accepts[0].amount.to_string(), "10000");
    }

    #[test]
    fn malformed_base64_is_its_own_error() {
        for bad in ["not base64!", "eyJ4NDAy-_", "====", "a"] {
            let err = decode_header::<PaymentPayload>(bad).unwrap_err();
            assert!(
                matches!(err, HeaderError::MalformedBase64(_)),
                "{bad}: {err}"
            );
            assert_eq!(err.reason(), Reason::InvalidPayload);
        }
    }

    #[test]
    fn malformed_json_is_its_own_error() {
        let not_json = base64::engine::general_purpose::STANDARD.encode("{\"x402Version\":2,");
        let err = decode_header::<PaymentPayload>(&not_json).unwrap_err();
        assert!(matches!(err, HeaderError::MalformedJson(_)), "{err}");

        let wrong_shape =
            base64::engine::general_purpose::STANDARD.encode(r#"{"x402Version":2,"accepted":7}"#);
        let err = decode_header::<PaymentPayload>(&wrong_shape).unwrap_err();
        assert!(matches!(err, HeaderError::MalformedJson(_)), "{err}");
        assert_eq!(err.reason(), Reason::InvalidPayload);
    }

    #[test]
    fn version_one_and_missing_version_are_version_errors() {
        let v1 = base64::engine::general_purpose::STANDARD
            .encode(r#"{"x402Version":1,"scheme":"exact","network":"base-sepolia","payload":{}}"#);
        let err = decode_header::<PaymentPayload>(&v1).unwrap_err();
        assert!(
            matches!(&err, HeaderError::UnsupportedVersion { found } if found == 1),
            "{err}"
        );
        assert_eq!(err.reason(), Reason::InvalidX402Version);

        let missing = base64::engine::general_purpose::STANDARD.encode(r#"{"accepts":[]}"#);
        let err = decode_header::<PaymentRequired>(&missing).unwrap_err();
        assert!(matches!(err, HeaderError::UnsupportedVersion { found } if found.is_null()));
    }

    #[test]
    fn oversized_header_is_refused_before_decoding() {
        let huge = "A".repeat(MAX_HEADER_LEN + 4);
        assert!(matches!(
            decode_header::<PaymentPayload>(&huge),
            Err(HeaderError::TooLarge { .. })
        ));
    }

    #[test]
    fn settle_response_has_no_version_to_check() {
        let json = r#"{"success":true,"transaction":"0xabc","network":"eip155:8453","payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#;
        let encoded = base64::engine::general_purpose::STANDARD.encode(json);
        let response: SettleResponse = decode_header(&encoded).unwrap();
        assert!(response.success);
        assert_eq!(response.transaction, "0xabc");
    }
}
