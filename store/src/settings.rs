//! `[database]`: where the data lives and how the pool is sized. Loaded with the rest of the
//! configuration by the binary; the store reads it to connect.

use std::{fmt, str::FromStr, time::Duration};

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};

/// `[database]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// Where the data lives; the scheme picks the backend.
    pub url: DatabaseUrl,
    /// Pool upper bound.
    pub max_connections: u32,
    /// Pool lower bound.
    pub min_connections: u32,
    /// Wait for a pooled connection, seconds.
    pub acquire_timeout_s: u64,
    /// Run migrations when `serve` starts.
    pub migrate_on_start: bool,
}

impl DatabaseSettings {
    /// Wait for a pooled connection.
    pub fn acquire_timeout(&self) -> Duration {
        Duration::from_secs(self.acquire_timeout_s)
    }
}

/// Database backend, chosen by the URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseKind {
    /// `sqlite://…`
    Sqlite,
    /// `postgres://…` or `postgresql://…`
    Postgres,
}

/// A database URL with a known scheme. It may carry a password, so `Debug` and `Display` show
/// only the scheme.
#[derive(Clone)]
pub struct DatabaseUrl {
    kind: DatabaseKind,
    url: SecretString,
}

/// The database URL's scheme is neither `sqlite` nor `postgres`/`postgresql`.
#[derive(Debug, thiserror::Error)]
#[error("database URL must start with sqlite:// or postgres:// (got scheme `{scheme}`)")]
pub struct UnsupportedDatabaseScheme {
    scheme: String,
}

impl DatabaseUrl {
    /// Which backend the URL selects.
    pub fn kind(&self) -> DatabaseKind {
        self.kind
    }

    /// The full URL, password included. Only for opening connections.
    pub fn expose(&self) -> &str {
        self.url.expose_secret()
    }
}

impl FromStr for DatabaseUrl {
    type Err = UnsupportedDatabaseScheme;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let scheme = s.split_once(':').map(|(scheme, _)| scheme).unwrap_or("");
        let kind = match scheme {
            "sqlite" => DatabaseKind::Sqlite,
            "postgres" | "postgresql" => DatabaseKind::Postgres,
            other => {
                return Err(UnsupportedDatabaseScheme {
                    scheme: other.chars().take(16).collect(),
                });
            }
        };
        Ok(Self {
            kind,
            url: SecretString::from(s),
        })
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({:?}, [REDACTED])", self.kind)
    }
}

impl<'de> Deserialize<'de> for DatabaseUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}
