//! SQLite writes sent as one script that begins and commits its own transaction.
//!
//! sqlx runs each SQLite connection on a thread of its own and hands it one command at a time:
//! `begin`, each query, `commit`. Each hand-over is a wake-up of that thread and then of the
//! waiting task, about 0.25 ms once both cores of a small machine are busy, and all of them
//! are paid inside this process's writer turn (see `Store::write_turn`): a commit of four
//! hand-overs kept every other writer waiting for about a millisecond. As one script the
//! whole commit is one hand-over.
//!
//! The catch is a script that stops half-way, because a statement failed or because the task
//! awaiting it was dropped: its transaction is left open on the connection, and whoever uses
//! that connection next would write inside it. [`run`] rolls it back before the connection
//! goes back to the pool.
//!
//! A compare-and-set whose followers must write only if it changed its row records that in
//! `moved`, a temporary table each connection creates when it opens ([`CREATE_MOVED`]): the
//! same name and guard the PostgreSQL statement's CTE has (see `store::advance`).

use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Database, Executor, Pool};

/// Run by every new SQLite connection. Temporary, so it is the connection's own, and empty
/// outside a script: a script fills it after its compare-and-set and empties it before its
/// `commit` (a rollback empties it too).
pub(crate) const CREATE_MOVED: &str =
    "create temp table if not exists moved (event_seq bigint not null)";

/// Run `script`, which starts with `begin immediate` and ends with `commit`, on one
/// connection of `pool`; the rows its statements return, in order. Generic only so that it
/// type-checks in both arms of `on_backend!`: PostgreSQL takes one statement per query with
/// binds, and runs merged statements instead.
pub(crate) async fn run<'q, DB>(
    pool: &Pool<DB>,
    script: Query<'q, DB, <DB as Database>::Arguments<'q>>,
) -> Result<Vec<DB::Row>, sqlx::Error>
where
    DB: Database,
    <DB as Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let mut unfinished = Unfinished(Some(pool.acquire().await?));
    let Some(connection) = unfinished.0.as_deref_mut() else {
        return Err(sqlx::Error::PoolClosed);
    };
    let rows = script.fetch_all(&mut *connection).await;
    if rows.is_err() {
        roll_back(connection).await;
    }
    drop(unfinished.0.take());
    rows
}

/// A connection whose script may have stopped inside its transaction: dropped while it still
/// holds one (the awaiting task was cancelled), it rolls the transaction back before the
/// connection is reused.
struct Unfinished<DB>(Option<PoolConnection<DB>>)
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>;

impl<DB> Drop for Unfinished<DB>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    fn drop(&mut self) {
        let Some(mut connection) = self.0.take() else {
            return;
        };
        // The connection goes back to the pool only when this task drops it, after the
        // rollback. Without a runtime the process is ending and nothing can be sent.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { roll_back(&mut *connection).await });
        }
    }
}

/// Roll back whatever transaction `connection` holds. SQLite answers "no transaction is
/// active" when the script never began one or got to its `commit`; that is the clean case.
async fn roll_back<DB>(connection: &mut DB::Connection)
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let _ = connection.execute("rollback").await;
}
