//! Seeker secrets: sensitive runtime values (provider API keys, MCP credentials) a seeker hands
//! to a Superwire executor for one execute.
//!
//! They travel on the execute request in the [`SECRETS_HEADER`] header as
//! `base64(JSON object)`, never in the proposal or the body: the task input is part of the
//! signed terms and stored, secrets must not be. The gateway parses the header at the edge into
//! a [`SeekerSecrets`], keeps it in memory for that execute's forward only, and the Superwire
//! adapter writes it into the executor's `/execute` body. The type has no `Serialize` and a
//! redacting `Debug`, so it cannot reach the store, the event log, webhooks or logs by accident.

use std::fmt;

use base64::{
    Engine as _,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use serde_json::{Map, Value};

/// Request header carrying the seeker's secrets: `base64(JSON object)`.
pub const SECRETS_HEADER: &str = "x-hiregate-secrets";

/// Largest accepted header value, bytes (before decoding).
pub const MAX_SECRETS_HEADER_BYTES: usize = 16 * 1024;

/// Why a secrets header was refused. Messages never quote the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsHeaderError {
    /// The header is larger than [`MAX_SECRETS_HEADER_BYTES`].
    #[error("the secrets header exceeds {MAX_SECRETS_HEADER_BYTES} bytes")]
    TooLarge,
    /// The header is not base64.
    #[error("the secrets header is not base64")]
    NotBase64,
    /// The decoded header is not a JSON object.
    #[error("the secrets header does not decode to a JSON object")]
    NotAnObject,
}

/// The secrets object of one execute. Valid by construction: a JSON object.
#[derive(Clone, PartialEq)]
pub struct SeekerSecrets(Map<String, Value>);

impl SeekerSecrets {
    /// Parses a header value: standard base64 (padded) or URL-safe base64 (unpadded) of a JSON
    /// object.
    ///
    /// # Errors
    /// [`SecretsHeaderError`] when the value is too large, not base64 or not a JSON object.
    pub fn from_header(raw: &[u8]) -> Result<Self, SecretsHeaderError> {
        if raw.len() > MAX_SECRETS_HEADER_BYTES {
            return Err(SecretsHeaderError::TooLarge);
        }
        let raw = raw.trim_ascii();
        let decoded = STANDARD
            .decode(raw)
            .or_else(|_| URL_SAFE_NO_PAD.decode(raw))
            .map_err(|_| SecretsHeaderError::NotBase64)?;
        match serde_json::from_slice::<Value>(&decoded) {
            Ok(Value::Object(map)) => Ok(Self(map)),
            // The serde error may quote the decoded bytes, i.e. a secret: it is dropped.
            _ => Err(SecretsHeaderError::NotAnObject),
        }
    }

    /// Wraps an object (tests, in-process callers).
    #[must_use]
    pub fn new(secrets: Map<String, Value>) -> Self {
        Self(secrets)
    }

    /// The secret values, for the one place allowed to send them: the executor's request body.
    #[must_use]
    pub fn expose(&self) -> &Map<String, Value> {
        &self.0
    }

    /// Number of secrets.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when the object is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SeekerSecrets {
    // Even key names can say which providers a seeker uses: only the count is printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeekerSecrets")
            .field("count", &self.0.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_standard_and_url_safe_base64_objects() {
        let json = br#"{"api_key":"sk-1/+?"}"#;
        for encoded in [STANDARD.encode(json), URL_SAFE_NO_PAD.encode(json)] {
            let secrets = SeekerSecrets::from_header(encoded.as_bytes()).unwrap();
            assert_eq!(secrets.expose()["api_key"], "sk-1/+?");
        }
    }

    #[test]
    fn refuses_malformed_values() {
        assert_eq!(
            SeekerSecrets::from_header(b"not base64!"),
            Err(SecretsHeaderError::NotBase64)
        );
        assert_eq!(
            SeekerSecrets::from_header(STANDARD.encode("[1]").as_bytes()),
            Err(SecretsHeaderError::NotAnObject)
        );
        assert_eq!(
            SeekerSecrets::from_header(STANDARD.encode("{").as_bytes()),
            Err(SecretsHeaderError::NotAnObject)
        );
        assert_eq!(
            SeekerSecrets::from_header(&vec![b'A'; MAX_SECRETS_HEADER_BYTES + 1]),
            Err(SecretsHeaderError::TooLarge)
        );
    }

    #[test]
    fn debug_prints_no_key_and_no_value() {
        let secrets = SeekerSecrets::from_header(
            STANDARD
                .encode(br#"{"api_key":"sk-very-secret"}"#)
                .as_bytes(),
        )
        .unwrap();
        let printed = format!("{secrets:?}");
        assert!(!printed.contains("sk-very-secret"), "{printed}");
        assert!(!printed.contains("api_key"), "{printed}");
        assert!(printed.contains("count: 1"), "{printed}");
    }
}
