//! A SQLite database as the store holds it: one writing connection of its own, outside any
//! pool, and a pool of readers.
//!
//! sqlx's pool pings every connection on its way back (`PoolConnection`'s return, whatever
//! `test_before_acquire` says). A SQLite connection is a thread in this process, and the ping
//! is one more hand-over to that thread and back after every statement: in paid hires at c=8
//! the release path was 3.5 % of the gateway's samples on its own, the writer went back to its
//! pool only after that extra hand-over (so the next write waited for it), and a read that
//! found the writer busy with it went to a pool reader with a cold page cache. The writer is
//! therefore held here for the store's life, behind the process's write turn, and no release
//! follows its statements. Reads take it while it is idle and a pool reader otherwise.
//!
//! A writer outside the pool has no pool to clean it up: a script whose task was dropped
//! half-way leaves its transaction open on the connection (see `store::script`), so the next
//! user rolls it back first ([`SqliteBackend::unfinished`]).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use sqlx::{
    ConnectOptions as _, Executor as _, SqliteConnection, SqlitePool,
    pool::PoolConnection,
    sqlite::{Sqlite, SqliteConnectOptions},
};
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};

use super::script;

/// The writing connection while its holder uses it (the write turn).
pub(crate) type Writing<'a> = MappedMutexGuard<'a, SqliteConnection>;

/// A SQLite database: its writer and, on a file, its readers. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct SqliteBackend {
    /// `None` once the store is closed.
    writer: Arc<Mutex<Option<SqliteConnection>>>,
    /// Set by a script on the writer until it ends (see `store::script`): still set when the
    /// next user takes the writer, the script's task was dropped half-way, and its transaction
    /// may be open.
    unfinished: Arc<AtomicBool>,
    /// `None` in memory, where the one connection is the database.
    readers: Option<SqlitePool>,
}

/// Where a read runs: the writer while it was idle, else a pool reader.
pub(crate) enum Reading<'a> {
    Writer(Writing<'a>),
    Pool(PoolConnection<Sqlite>),
}

impl std::ops::Deref for Reading<'_> {
    type Target = SqliteConnection;
    fn deref(&self) -> &SqliteConnection {
        match self {
            Self::Writer(writing) => writing,
            Self::Pool(connection) => connection,
        }
    }
}

impl std::ops::DerefMut for Reading<'_> {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        match self {
            Self::Writer(writing) => writing,
            Self::Pool(connection) => connection,
        }
    }
}

impl SqliteBackend {
    /// Open the writer with `options` (and the temporary table scripts use); `readers` as made.
    pub(crate) async fn open(
        options: &SqliteConnectOptions,
        readers: Option<SqlitePool>,
    ) -> Result<Self, sqlx::Error> {
        let mut writer = options.connect().await?;
        writer.execute(script::CREATE_MOVED).await?;
        Ok(Self {
            writer: Arc::new(Mutex::new(Some(writer))),
            unfinished: Arc::default(),
            readers,
        })
    }

    /// The writer, once it is this caller's turn: in arrival order (tokio's mutex is fair).
    pub(crate) async fn write(&self) -> Result<Writing<'_>, sqlx::Error> {
        self.ready(self.writer.lock().await).await
    }

    /// The writer if it is idle, else a pool reader (the writer in memory, when its turn comes).
    /// In WAL mode a connection drops its page cache at the start of a read whenever another
    /// connection has written since, so a pool reader begins each read by fetching its pages
    /// again: the tables' upper levels, the row, and its overflow pages (a contract row, with
    /// its terms and token, spanned several before migration 0026). In paid hires that was
    /// 10.6 % of the gateway process's CPU at c=8 (`getPageNormal`, perf), and half the
    /// `pread64` calls of a c=1 run of 208 hires (60,844, then 31,272 with reads on the idle
    /// writer; strace). The writer's cache never goes cold: only it writes. A read that finds
    /// it busy takes the pool, so reads seldom wait for a write.
    pub(crate) async fn read(&self) -> Result<Reading<'_>, sqlx::Error> {
        if let Ok(idle) = self.writer.try_lock() {
            return Ok(Reading::Writer(self.ready(idle).await?));
        }
        match &self.readers {
            Some(readers) => Ok(Reading::Pool(readers.acquire().await?)),
            None => Ok(Reading::Writer(self.write().await?)),
        }
    }

    /// The flag a script on the writer sets while it runs.
    pub(crate) fn unfinished(&self) -> &AtomicBool {
        &self.unfinished
    }

    /// The readers' pool, if any.
    #[cfg(test)]
    pub(crate) fn readers(&self) -> Option<&SqlitePool> {
        self.readers.as_ref()
    }

    /// Close the readers and the writer; every later use fails with `PoolClosed`.
    pub(crate) async fn close(&self) {
        if let Some(readers) = &self.readers {
            readers.close().await;
        }
        if let Some(writer) = self.writer.lock().await.take() {
            let _ = sqlx::Connection::close(writer).await;
        }
    }

    /// `held`'s connection, with whatever a dropped script left open rolled back.
    async fn ready<'a>(
        &self,
        held: MutexGuard<'a, Option<SqliteConnection>>,
    ) -> Result<Writing<'a>, sqlx::Error> {
        let mut writing =
            MutexGuard::try_map(held, Option::as_mut).map_err(|_| sqlx::Error::PoolClosed)?;
        if self.unfinished.swap(false, Ordering::AcqRel) {
            // "No transaction is active" when the script got to its `commit`: the clean case.
            let _ = writing.execute("rollback").await;
        }
        Ok(writing)
    }
}
