//! A fresh database on the test PostgreSQL server per test (`HIREGATE_TEST_DATABASE_URL`,
//! default `postgres://postgres@127.0.0.1:5432/postgres`), for tests that run gateway instances
//! on PostgreSQL (several sharing one database). Without a server the test is skipped with a
//! printed `SKIPPED`, except under `CI=true`, where that fails.

use std::time::Duration;

use sqlx::{Connection as _, Executor as _, PgConnection};

/// Default PostgreSQL for tests; override with `HIREGATE_TEST_DATABASE_URL`.
const DEFAULT_TEST_POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A fresh database on the test PostgreSQL server, dropped (forcibly) at the end.
pub struct PostgresDatabase {
    admin_url: String,
    name: String,
    /// Where the database is.
    pub url: String,
}

impl std::fmt::Debug for PostgresDatabase {
    // The URLs may carry the server's password: only the database name is printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresDatabase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PostgresDatabase {
    /// `None` (after printing SKIPPED) without a server; under `CI=true` a missing server fails.
    pub async fn create(test: &str) -> Option<Self> {
        let admin_url = std::env::var("HIREGATE_TEST_DATABASE_URL")
            .unwrap_or_else(|_| DEFAULT_TEST_POSTGRES.to_owned());
        let connect =
            tokio::time::timeout(Duration::from_secs(5), PgConnection::connect(&admin_url));
        let mut admin = match connect.await {
            Ok(Ok(connection)) => connection,
            outcome => {
                let reason = match outcome {
                    Ok(Err(error)) => error.to_string(),
                    _ => "connection timed out".to_owned(),
                };
                assert!(
                    !std::env::var("CI").is_ok_and(|v| v == "true"),
                    "{test}: PostgreSQL is required under CI=true but unreachable: {reason}"
                );
                eprintln!(
                    "SKIPPED: {test}: PostgreSQL unreachable ({reason}); set \
                     HIREGATE_TEST_DATABASE_URL or start PostgreSQL to run it"
                );
                return None;
            }
        };
        let name = format!("hiregate_test_{}", uuid::Uuid::new_v4().simple());
        admin
            .execute(format!("create database {name}").as_str())
            .await
            .expect("create test database");
        let mut url = url::Url::parse(&admin_url).expect("test database URL");
        url.set_path(&format!("/{name}"));
        Some(Self {
            admin_url,
            name,
            url: url.to_string(),
        })
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        // Drop may run during a panic and outside async context: a private runtime on its own
        // thread cleans up either way.
        let admin_url = self.admin_url.clone();
        let name = self.name.clone();
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                if let Ok(mut admin) = PgConnection::connect(&admin_url).await {
                    let _ = admin
                        .execute(format!("drop database if exists {name} with (force)").as_str())
                        .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}
