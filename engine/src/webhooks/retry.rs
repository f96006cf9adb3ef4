//! When to try a failed webhook delivery again.
//!
//! Exponential backoff (`initial × 2^(try − 1)`, capped) with jitter: the delay is drawn
//! between half and all of that value, so receivers that failed together are not hit together
//! again. A receiver's `Retry-After` (seconds or an HTTP date) replaces the computed delay, but
//! never beyond `webhooks.retry_after_max_s`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng as _;

use crate::settings::WebhookSettings;

/// Delay before the next try after try number `attempt` (1-based) failed.
pub fn backoff_delay(settings: &WebhookSettings, attempt: u32) -> Duration {
    let exponent = attempt.saturating_sub(1).min(62);
    let full_ms = settings
        .backoff_initial_ms
        .saturating_mul(1_u64 << exponent)
        .min(settings.backoff_max_ms);
    let jitter: f64 = rand::rng().random_range(0.5..=1.0);
    // Precision loss is irrelevant at millisecond delays below 2^52.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let jittered_ms = (full_ms as f64 * jitter) as u64;
    Duration::from_millis(jittered_ms.max(1))
}

/// The delay a `Retry-After` value asks for, capped; `None` when absent or unparsable.
pub fn retry_after(value: Option<&str>, now: DateTime<Utc>, cap: Duration) -> Option<Duration> {
    let value = value?.trim();
    let asked = if let Ok(seconds) = value.parse::<u64>() {
        Duration::from_secs(seconds)
    } else {
        // HTTP dates are RFC 2822 dates in GMT.
        let at = DateTime::parse_from_rfc2822(value)
            .ok()?
            .with_timezone(&Utc);
        (at - now).to_std().unwrap_or(Duration::ZERO)
    };
    Some(asked.min(cap))
}

/// The delay before the next try: `Retry-After` if the receiver sent one, else backoff.
pub fn next_delay(
    settings: &WebhookSettings,
    attempt: u32,
    retry_after_header: Option<&str>,
    now: DateTime<Utc>,
) -> Duration {
    retry_after(retry_after_header, now, settings.retry_after_max())
        .unwrap_or_else(|| backoff_delay(settings, attempt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> WebhookSettings {
        WebhookSettings {
            poll_interval_ms: 1000,
            batch_size: 4,
            lease_ms: 60_000,
            request_timeout_ms: 1000,
            max_attempts: 5,
            backoff_initial_ms: 1000,
            backoff_max_ms: 10_000,
            retry_after_max_s: 60,
        }
    }

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let s = settings();
        for attempt in 1..=8_u32 {
            let full = (1000_u64 << (attempt - 1)).min(10_000);
            for _ in 0..50 {
                let ms = u64::try_from(backoff_delay(&s, attempt).as_millis()).unwrap();
                assert!(ms >= full / 2 && ms <= full, "attempt {attempt}: {ms} ms");
            }
        }
        assert!(backoff_delay(&s, u32::MAX) <= Duration::from_secs(10));
    }

    #[test]
    fn retry_after_seconds_and_dates_are_capped() {
        let now = DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let cap = Duration::from_secs(60);
        assert_eq!(
            retry_after(Some("7"), now, cap),
            Some(Duration::from_secs(7))
        );
        assert_eq!(retry_after(Some("9999"), now, cap), Some(cap));
        assert_eq!(
            retry_after(Some("Wed, 01 Jan 2025 00:00:30 GMT"), now, cap),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(Some("Tue, 31 Dec 2024 23:00:00 GMT"), now, cap),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after(Some("soon"), now, cap), None);
        assert_eq!(retry_after(None, now, cap), None);
        assert_eq!(
            next_delay(&settings(), 1, Some("3"), now),
            Duration::from_secs(3)
        );
    }
}
