//! What the gateway benchmarks share: result type, latency series and percentiles, and a
//! throw-away PostgreSQL database per run.

#![allow(dead_code)] // each bench uses its own part of this module

use std::time::Duration;

use sqlx::{Connection as _, Executor as _, PgConnection};
use url::Url;

/// Default PostgreSQL server for the PostgreSQL runs.
pub const DEFAULT_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Latencies of one measured series and the wall time it took.
pub struct Series {
    pub latencies: Vec<Duration>,
    pub wall: Duration,
}

impl Series {
    pub fn percentile(&self, p: f64) -> Duration {
        percentile(&self.latencies, p)
    }

    pub fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }
}

pub fn percentile(values: &[Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// A database created for this run on the PostgreSQL server, dropped by [`Self::drop_now`].
pub struct PostgresDatabase {
    admin_url: String,
    name: String,
    /// Its URL.
    pub url: String,
}

impl PostgresDatabase {
    /// `Ok(None)` with the reason printed when no server answers.
    pub async fn create() -> BenchResult<Option<Self>> {
        let admin_url = std::env::var("HIREGATE_TEST_DATABASE_URL")
            .unwrap_or_else(|_| DEFAULT_POSTGRES.to_owned());
        let connected =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url)).await;
        let mut admin = match connected {
            Ok(Ok(connection)) => connection,
            Ok(Err(error)) => {
                println!("PostgreSQL skipped: {error}");
                return Ok(None);
            }
            Err(_) => {
                println!("PostgreSQL skipped: no answer within 5 s");
                return Ok(None);
            }
        };
        let name = format!("hiregate_bench_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute(format!("create database {name}").as_str())
            .await?;
        admin.close().await?;
        let mut url = Url::parse(&admin_url)?;
        url.set_path(&format!("/{name}"));
        Ok(Some(Self {
            admin_url,
            name,
            url: url.to_string(),
        }))
    }

    pub async fn drop_now(self) -> BenchResult<()> {
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        admin
            .execute(format!("drop database if exists {} with (force)", self.name).as_str())
            .await?;
        Ok(())
    }
}
