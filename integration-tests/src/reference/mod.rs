//! Reference protocol peers: servers that speak the seeds' executor protocols literally, for
//! testing the gateway's protocol adapters against the protocol rather than against the
//! gateway's own wire types.
//!
//! | module | what |
//! |---|---|
//! | [`wattswarm`] | WattSwarm [`Executor`](wattswarm::Executor) (`/health`, `/capabilities`, `/execute`, evidence artifacts) and [`Verifier`](wattswarm::Verifier) (`/verify`) |
//! | [`superwire`] | Superwire [`Executor`](superwire::Executor) (`/execute` JSON or SSE, resume, cancel, `/validate`) |
//! | `server` | the loopback listener they share: port 0, an off switch that makes the port refuse connections |
//!
//! Each server is spawned in-process with `spawn(config).await`, answers on `base_url()`,
//! exposes `counters()` and what it received, and takes a scripted behaviour (at spawn or
//! later) to produce the faults the adapters must survive. Dropping the handle stops it.
#![doc = include_str!("README.md")]

mod server;
pub mod superwire;
pub mod wattswarm;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// How long a server pauses before breaking a response on purpose: hyper only flushes what a
/// body yielded when the body next returns `Pending`, so without the pause the bytes meant to
/// reach the client before the break would be dropped with the connection.
const FLUSH_PAUSE: Duration = Duration::from_millis(25);

/// Locks a mutex of the reference servers' bookkeeping.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded values are records and counters, each written in one statement: a panic
    // elsewhere cannot leave one half-written, so a poisoned lock is still sound to use.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
