//! SQLite writes sent as one script that begins and commits its own transaction.
//!
//! sqlx runs each SQLite connection on a thread of its own and hands it one command at a time:
//! `begin`, each query, `commit`. Each hand-over is a wake-up of that thread and then of the
//! waiting task, about 0.25 ms once both cores of a small machine are busy, and all of them
//! are paid inside this process's writer turn (see `on_writer!`): a commit of four
//! hand-overs kept every other writer waiting for about a millisecond. As one script the
//! whole commit is one hand-over.
//!
//! The catch is a script that stops half-way, because a statement failed or because the task
//! awaiting it was dropped: its transaction is left open on the connection, and whoever uses
//! that connection next would write inside it. [`Scripts::run_script`] rolls a failed script back
//! at once, and marks a running one so that the writer's next user rolls it back if its task was
//! dropped.
//!
//! A compare-and-set whose followers must write only if it changed its row records that in
//! `moved`, a temporary table the writer creates when it opens ([`CREATE_MOVED`]): the
//! same name and guard the PostgreSQL statement's CTE has (see `store::advance`).

use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::query::Query;
use sqlx::{Database, Executor};

use super::Dialect;

/// Run by the SQLite writer when it opens. Temporary, so it is the connection's own, and empty
/// outside a script: a script fills it after its compare-and-set and empties it before its
/// `commit` (a rollback empties it too).
pub(crate) const CREATE_MOVED: &str =
    "create temp table if not exists moved (event_seq bigint not null)";

/// A future that can move between threads, boxed.
type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs a script (see [`Scripts::run_script`]).
pub(crate) trait Scripts: Dialect {
    /// Run `script`, which starts with `begin immediate` and ends with `commit`, on this
    /// connection (the store's writer); the rows its statements return, in order. `unfinished`
    /// stays set if the awaiting task is dropped before the script ends: the writer's next user
    /// then rolls back what the script left open (see `store::sqlite`). Implemented for both
    /// drivers only so that it type-checks in both arms of `on_writer!`: PostgreSQL takes one
    /// statement per query with binds, and runs merged statements instead. Boxed, and
    /// implemented per driver rather than generically: a generic `async fn` here made every
    /// store future fail the `Send` check that `tokio::spawn` needs.
    fn run_script<'a, 'q: 'a>(
        &'a mut self,
        unfinished: &'a AtomicBool,
        script: Query<'q, Self::Database, <Self::Database as Database>::Arguments<'q>>,
    ) -> BoxFuture<'a, Result<Vec<<Self::Database as Database>::Row>, sqlx::Error>>;
}

macro_rules! scripts_for {
    ($connection:ty) => {
        impl Scripts for $connection {
            fn run_script<'a, 'q: 'a>(
                &'a mut self,
                unfinished: &'a AtomicBool,
                script: Query<'q, Self::Database, <Self::Database as Database>::Arguments<'q>>,
            ) -> BoxFuture<'a, Result<Vec<<Self::Database as Database>::Row>, sqlx::Error>> {
                Box::pin(async move {
                    unfinished.store(true, Ordering::Release);
                    let rows = script.fetch_all(&mut *self).await;
                    if rows.is_err() {
                        // "No transaction is active" when the script never began one.
                        let _ = self.execute("rollback").await;
                    }
                    unfinished.store(false, Ordering::Release);
                    rows
                })
            }
        }
    };
}
scripts_for!(sqlx::SqliteConnection);
scripts_for!(sqlx::PgConnection);
