//! [`Timestamp`]: a UTC instant with millisecond precision and exactly one string spelling.
//!
//! Timestamps are part of hashed contract terms, so two spellings of the same instant
//! (`+02:00` offsets, extra sub-millisecond digits) must serialise identically.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

/// A UTC instant, truncated to milliseconds, written as RFC 3339 `YYYY-MM-DDTHH:MM:SS.mmmZ`.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Timestamp(DateTime<Utc>);

/// Why a timestamp was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimestampError {
    /// Not an RFC 3339 date-time.
    #[error("timestamp is not RFC 3339 (e.g. 2025-01-30T12:00:00Z)")]
    NotRfc3339,
    /// Outside the representable range.
    #[error("timestamp is out of range")]
    OutOfRange,
}

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn from_unix_millis(millis: i64) -> Result<Self, TimestampError> {
        Utc.timestamp_millis_opt(millis)
            .single()
            .map(Self)
            .ok_or(TimestampError::OutOfRange)
    }

    /// Whole seconds since the Unix epoch.
    pub fn from_unix_seconds(seconds: i64) -> Result<Self, TimestampError> {
        Utc.timestamp_opt(seconds, 0)
            .single()
            .map(Self)
            .ok_or(TimestampError::OutOfRange)
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub fn unix_millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// Whole seconds since the Unix epoch (rounded down).
    #[must_use]
    pub fn unix_seconds(&self) -> i64 {
        self.0.timestamp()
    }

    /// The instant `seconds` later.
    pub fn plus_seconds(&self, seconds: u64) -> Result<Self, TimestampError> {
        let delta = i64::try_from(seconds)
            .ok()
            .and_then(chrono::TimeDelta::try_seconds)
            .ok_or(TimestampError::OutOfRange)?;
        self.0
            .checked_add_signed(delta)
            .map(Self)
            .ok_or(TimestampError::OutOfRange)
    }

    /// The instant as a chrono value.
    #[must_use]
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(instant: DateTime<Utc>) -> Self {
        // Truncation (not rounding) so that re-parsing our own output is the identity.
        let millis = instant.timestamp_millis();
        Self(Utc.timestamp_millis_opt(millis).single().unwrap_or(instant))
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let parsed = DateTime::parse_from_rfc3339(raw).map_err(|_| TimestampError::NotRfc3339)?;
        Ok(Self::from(parsed.with_timezone(&Utc)))
    }
}

impl TryFrom<String> for Timestamp {
    type Error = TimestampError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<Timestamp> for String {
    fn from(ts: Timestamp) -> Self {
        ts.to_string()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_precision_normalise_to_one_spelling() {
        let a: Timestamp = "2025-01-30T14:00:00+02:00".parse().unwrap();
        let b: Timestamp = "2025-01-30T12:00:00.000123Z".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "2025-01-30T12:00:00.000Z");
        assert_eq!(a.unix_seconds(), 1_738_238_400);
    }

    #[test]
    fn garbage_and_overflow_are_refused() {
        assert_eq!(
            "yesterday".parse::<Timestamp>(),
            Err(TimestampError::NotRfc3339)
        );
        let ts = Timestamp::from_unix_seconds(0).unwrap();
        assert_eq!(ts.plus_seconds(u64::MAX), Err(TimestampError::OutOfRange));
        assert_eq!(
            ts.plus_seconds(90).unwrap().to_string(),
            "1970-01-01T00:01:30.000Z"
        );
    }
}
