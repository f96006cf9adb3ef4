//! Standard Webhooks signatures (<https://www.standardwebhooks.com>), symmetric `v1` scheme.
//!
//! The signed content is `{webhook-id}.{webhook-timestamp}.{body}`, MAC'd with HMAC-SHA256
//! under the shared secret (`whsec_<base64>`), and sent as
//! `webhook-signature: v1,<base64 mac>`. The signature header may list several
//! space-separated signatures (key rotation); one match is enough.
//!
//! Workers use [`WebhookSecret::sign_headers`] for completion callbacks to the gateway; the
//! gateway and seekers use [`WebhookSecret::verify`] on what they receive. It lives here, below
//! both ends: the gateway signs its seeker webhooks and checks worker callbacks with it, and the
//! worker SDK re-exports it as `hiregate_worker_sdk::webhook`. Replay protection
//! beyond the timestamp window (remembering seen `webhook-id`s) is the receiver's job.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue};
use rand::RngCore as _;
use sha2::Sha256;

/// Header carrying the message id, stable across delivery retries.
pub const HEADER_ID: &str = "webhook-id";
/// Header carrying the send time in Unix seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// Header carrying one or more `v1,<base64>` signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// How far a timestamp may be from the receiver's clock, either way, by default
/// (the Standard Webhooks recommendation).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

const SECRET_PREFIX: &str = "whsec_";
/// Secret size bounds recommended by Standard Webhooks.
const MIN_SECRET_BYTES: usize = 24;
const MAX_SECRET_BYTES: usize = 64;
const GENERATED_SECRET_BYTES: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A shared signing secret. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret {
    key: Vec<u8>,
}

/// Why a secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The text form must start with `whsec_`.
    #[error("webhook secret must start with \"whsec_\"")]
    MissingPrefix,
    /// The part after the prefix is not standard base64.
    #[error("webhook secret is not valid base64 after \"whsec_\"")]
    InvalidBase64,
    /// Too short or too long.
    #[error("webhook secret must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, got {0}")]
    InvalidLength(usize),
}

impl WebhookSecret {
    /// A new random 32-byte secret.
    #[must_use]
    pub fn generate() -> Self {
        let mut key = vec![0_u8; GENERATED_SECRET_BYTES];
        rand::rng().fill_bytes(&mut key);
        Self { key }
    }

    /// A secret from raw key bytes (24 to 64 bytes).
    ///
    /// # Errors
    /// [`SecretError::InvalidLength`] outside those bounds.
    pub fn from_bytes(key: Vec<u8>) -> Result<Self, SecretError> {
        if (MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            Ok(Self { key })
        } else {
            Err(SecretError::InvalidLength(key.len()))
        }
    }

    /// The text form `whsec_<base64>`, to hand to the other party. Treat it as a secret.
    #[must_use]
    pub fn expose_whsec(&self) -> String {
        format!("{SECRET_PREFIX}{}", BASE64.encode(&self.key))
    }

    fn mac(&self, msg_id: &str, timestamp: i64, body: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail for our bounded keys.
        let mut mac = HmacSha256::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` value (`v1,<base64>`) for this message.
    #[must_use]
    pub fn sign(&self, msg_id: &str, timestamp: DateTime<Utc>, body: &[u8]) -> String {
        let tag = self
            .mac(msg_id, timestamp.timestamp(), body)
            .finalize()
            .into_bytes();
        format!("v1,{}", BASE64.encode(tag))
    }

    /// The three Standard Webhooks headers for this message.
    ///
    /// # Errors
    /// [`WebhookError::InvalidHeader`] when `msg_id` cannot be sent as a header value.
    pub fn sign_headers(
        &self,
        msg_id: &str,
        timestamp: DateTime<Utc>,
        body: &[u8],
    ) -> Result<HeaderMap, WebhookError> {
        let mut headers = HeaderMap::new();
        let id =
            HeaderValue::from_str(msg_id).map_err(|_| WebhookError::InvalidHeader(HEADER_ID))?;
        headers.insert(HEADER_ID, id);
        headers.insert(HEADER_TIMESTAMP, HeaderValue::from(timestamp.timestamp()));
        let signature = HeaderValue::from_str(&self.sign(msg_id, timestamp, body))
            .map_err(|_| WebhookError::InvalidHeader(HEADER_SIGNATURE))?;
        headers.insert(HEADER_SIGNATURE, signature);
        Ok(headers)
    }

    /// Verifies a received webhook with the default 5-minute timestamp tolerance.
    ///
    /// # Errors
    /// See [`WebhookSecret::verify_with_tolerance`].
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<VerifiedWebhook, WebhookError> {
        self.verify_with_tolerance(headers, body, now, DEFAULT_TOLERANCE)
    }

    /// Verifies a received webhook: headers present, timestamp within `tolerance` of `now`
    /// either way, and one `v1` signature matching (compared in constant time).
    ///
    /// # Errors
    /// [`WebhookError`] naming the first check that failed.
    pub fn verify_with_tolerance(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: DateTime<Utc>,
        tolerance: Duration,
    ) -> Result<VerifiedWebhook, WebhookError> {
        let header = |name: &'static str| -> Result<&str, WebhookError> {
            headers
                .get(name)
                .ok_or(WebhookError::MissingHeader(name))?
                .to_str()
                .map_err(|_| WebhookError::InvalidHeader(name))
        };
        self.verify_parts(
            header(HEADER_ID)?,
            header(HEADER_TIMESTAMP)?,
            header(HEADER_SIGNATURE)?,
            body,
            now,
            tolerance,
        )
    }

    /// [`WebhookSecret::verify_with_tolerance`] on header values already taken apart.
    ///
    /// # Errors
    /// [`WebhookError`] naming the first check that failed.
    pub fn verify_parts(
        &self,
        msg_id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
        now: DateTime<Utc>,
        tolerance: Duration,
    ) -> Result<VerifiedWebhook, WebhookError> {
        let seconds: i64 = timestamp
            .trim()
            .parse()
            .map_err(|_| WebhookError::InvalidHeader(HEADER_TIMESTAMP))?;
        let sent_at = DateTime::<Utc>::from_timestamp(seconds, 0)
            .ok_or(WebhookError::InvalidHeader(HEADER_TIMESTAMP))?;
        let tolerance_s = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
        let age_s = now.timestamp().saturating_sub(seconds);
        if age_s > tolerance_s {
            return Err(WebhookError::TimestampTooOld);
        }
        if age_s < -tolerance_s {
            return Err(WebhookError::TimestampTooNew);
        }

        let matched = signatures
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|b64| BASE64.decode(b64).ok())
            .any(|candidate| {
                self.mac(msg_id, seconds, body)
                    .verify_slice(&candidate)
                    .is_ok()
            });
        if matched {
            Ok(VerifiedWebhook {
                id: msg_id.to_owned(),
                timestamp: sent_at,
            })
        } else {
            Err(WebhookError::NoMatchingSignature)
        }
    }
}

impl FromStr for WebhookSecret {
    type Err = SecretError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let b64 = raw
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or(SecretError::MissingPrefix)?;
        let key = BASE64.decode(b64).map_err(|_| SecretError::InvalidBase64)?;
        Self::from_bytes(key)
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// What a successful verification vouches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedWebhook {
    /// The `webhook-id`; receivers remember it to refuse replays.
    pub id: String,
    /// The signed send time.
    pub timestamp: DateTime<Utc>,
}

/// Why a webhook was refused (or could not be signed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// A required header is absent.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header is not valid text / not a Unix timestamp.
    #[error("malformed header {0}")]
    InvalidHeader(&'static str),
    /// The timestamp is older than the tolerance.
    #[error("webhook timestamp is too old")]
    TimestampTooOld,
    /// The timestamp is further in the future than the tolerance.
    #[error("webhook timestamp is in the future")]
    TimestampTooNew,
    /// No `v1` signature matched the content.
    #[error("no webhook signature matched")]
    NoMatchingSignature,
}

#[cfg(test)]
mod tests {
    use super::*;

    // Test vector from the Standard Webhooks specification's reference libraries.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: i64 = 1_614_265_330;
    const SPEC_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(seconds, 0).unwrap()
    }

    #[test]
    fn matches_the_specification_vector() {
        let secret: WebhookSecret = SPEC_SECRET.parse().unwrap();
        assert_eq!(secret.sign(SPEC_ID, at(SPEC_TS), SPEC_BODY), SPEC_SIGNATURE);
        let verified = secret
            .verify_parts(
                SPEC_ID,
                &SPEC_TS.to_string(),
                SPEC_SIGNATURE,
                SPEC_BODY,
                at(SPEC_TS + 10),
                DEFAULT_TOLERANCE,
            )
            .unwrap();
        assert_eq!(verified.id, SPEC_ID);
        assert_eq!(verified.timestamp, at(SPEC_TS));
    }

    #[test]
    fn signed_headers_verify_and_tampering_is_caught() {
        let secret = WebhookSecret::generate();
        let now = Utc::now();
        let body = br#"{"status":"completed"}"#;
        let headers = secret.sign_headers("cb_1", now, body).unwrap();
        assert!(secret.verify(&headers, body, now).is_ok());

        assert_eq!(
            secret.verify(&headers, br#"{"status":"failed"}"#, now),
            Err(WebhookError::NoMatchingSignature)
        );
        let mut other_id = headers.clone();
        other_id.insert(HEADER_ID, HeaderValue::from_static("cb_2"));
        assert_eq!(
            secret.verify(&other_id, body, now),
            Err(WebhookError::NoMatchingSignature)
        );
        assert_eq!(
            WebhookSecret::generate().verify(&headers, body, now),
            Err(WebhookError::NoMatchingSignature)
        );
    }

    #[test]
    fn timestamps_outside_the_window_are_refused() {
        let secret = WebhookSecret::generate();
        let sent = at(1_700_000_000);
        let headers = secret.sign_headers("cb_1", sent, b"{}").unwrap();
        let six_minutes = chrono::Duration::minutes(6);
        assert_eq!(
            secret.verify(&headers, b"{}", sent + six_minutes),
            Err(WebhookError::TimestampTooOld)
        );
        assert_eq!(
            secret.verify(&headers, b"{}", sent - six_minutes),
            Err(WebhookError::TimestampTooNew)
        );
        assert!(
            secret
                .verify(&headers, b"{}", sent + chrono::Duration::minutes(4))
                .is_ok()
        );
    }

    #[test]
    fn any_of_several_signatures_may_match() {
        let old = WebhookSecret::generate();
        let new = WebhookSecret::generate();
        let now = Utc::now();
        let list = format!(
            "v1a,ignored {} {}",
            old.sign("m", now, b"x"),
            new.sign("m", now, b"x")
        );
        let ts = now.timestamp().to_string();
        assert!(
            new.verify_parts("m", &ts, &list, b"x", now, DEFAULT_TOLERANCE)
                .is_ok()
        );
        assert!(
            old.verify_parts("m", &ts, &list, b"x", now, DEFAULT_TOLERANCE)
                .is_ok()
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_named() {
        let secret = WebhookSecret::generate();
        let mut headers = secret.sign_headers("m", Utc::now(), b"").unwrap();
        headers.remove(HEADER_SIGNATURE);
        assert_eq!(
            secret.verify(&headers, b"", Utc::now()),
            Err(WebhookError::MissingHeader(HEADER_SIGNATURE))
        );
        headers.insert(HEADER_SIGNATURE, HeaderValue::from_static("v1,AAAA"));
        headers.insert(HEADER_TIMESTAMP, HeaderValue::from_static("yesterday"));
        assert_eq!(
            secret.verify(&headers, b"", Utc::now()),
            Err(WebhookError::InvalidHeader(HEADER_TIMESTAMP))
        );
    }

    #[test]
    fn secrets_parse_strictly_and_never_print() {
        let secret = WebhookSecret::generate();
        let text = secret.expose_whsec();
        assert_eq!(text.parse::<WebhookSecret>().unwrap(), secret);
        assert_eq!(format!("{secret:?}"), "WebhookSecret(<redacted>)");
        assert_eq!(
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".parse::<WebhookSecret>(),
            Err(SecretError::MissingPrefix)
        );
        assert_eq!(
            "whsec_!!".parse::<WebhookSecret>(),
            Err(SecretError::InvalidBase64)
        );
        assert_eq!(
            "whsec_AAAA".parse::<WebhookSecret>(),
            Err(SecretError::InvalidLength(3))
        );
    }
}
