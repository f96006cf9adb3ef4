//! The periodic health-check loop.
//!
//! Each wake-up claims the listings whose probe is due (a lease in the `worker` row, so several
//! gateway instances share the work instead of multiplying probes) and probes them. The loop
//! wakes more often than the probe interval so that a listing is probed close to when it is
//! due, and stops when the shutdown token is cancelled.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::WorkerRegistry;

/// Listings claimed per store round trip.
const BATCH: u32 = 64;

/// Run until `shutdown` is cancelled.
pub async fn run_health_checks(
    registry: WorkerRegistry,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let tick = (interval / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    tracing::debug!(?interval, ?tick, "worker health checks started");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(tick) => {}
        }
        // Drain everything that is due, batch by batch.
        loop {
            let round = tokio::select! {
                () = shutdown.cancelled() => return,
                round = registry.probe_due_workers(BATCH) => round,
            };
            match round {
                Ok(probed) if probed == BATCH as usize => continue,
                Ok(_) => break,
                Err(error) => {
                    tracing::error!(error.message = %error, error.cause_chain = ?error, "worker health round failed");
                    break;
                }
            }
        }
    }
    tracing::debug!("worker health checks stopped");
}
