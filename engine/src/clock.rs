//! The engine's wall clock: one [`Clock`] the engine is given, read wherever the engine asks
//! "what time is it" outside money deadlines.
//!
//! | time | read from | why |
//! |---|---|---|
//! | lifecycle and store timestamps, offer expiry, acceptance and dispute windows, SLA deadlines, sweeps and jobs, recovery grace, webhook retries and leases, registry health, cache ages | [`Clock::now`] / [`Clock::instant`] | the gateway's own decisions: tests move the clock instead of sleeping |
//! | `validAfter`/`validBefore`, escrow capture and refund deadlines | the chain's clock ([`crate::assets::AssetDirectory::chain_now`], [`crate::assets::AssetDirectory::money_now`], `latest_now`): its block time, the host's clock as a floor | the chain judges them by its block time; moving a test clock never moves money (tests move the chain: the devnet's `advance_time`) |
//! | elapsed time of one call (latency metrics, a worker's slot time, transport timeouts) | [`std::time::Instant`] | a duration measured across real I/O; moving a test clock must not bend it |
//!
//! The production clock is the system's ([`Clock::system`], the default). A [`TestClock`] is the
//! system's time plus an offset the test moves forward ([`TestClock::advance`]) or sets
//! ([`TestClock::set`]): real time keeps flowing underneath, so whole-app tests that also wait
//! on real I/O keep working, and a deadline a test would have slept for is reached at once.
//! A reading costs one system-clock read (and, for a test clock, one atomic load): no lock, no
//! allocation.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

/// The wall clock the engine reads. Cheap to clone.
#[derive(Clone, Default)]
pub struct Clock {
    /// `None`: the system clock. `Some`: a test clock's offset, in milliseconds.
    offset_ms: Option<Arc<AtomicI64>>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.offset_ms {
            None => f.write_str("Clock::system"),
            Some(offset) => write!(f, "Clock::test(+{} ms)", offset.load(Ordering::Relaxed)),
        }
    }
}

impl Clock {
    /// The system clock: what production runs on.
    #[must_use]
    pub fn system() -> Self {
        Self::default()
    }

    fn offset(&self) -> i64 {
        self.offset_ms
            .as_ref()
            .map_or(0, |offset| offset.load(Ordering::Relaxed))
    }

    /// Now.
    #[must_use]
    pub fn now(&self) -> DateTime<Utc> {
        let now = Utc::now();
        match self.offset() {
            0 => now,
            offset => now + chrono::Duration::milliseconds(offset),
        }
    }

    /// Now, whole milliseconds (what the store keeps).
    #[must_use]
    pub fn now_millis(&self) -> DateTime<Utc> {
        let now = self.now();
        DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
    }

    /// Now, unix seconds.
    #[must_use]
    pub fn unix_seconds(&self) -> i64 {
        self.now().timestamp()
    }

    /// A monotonic reading moved with the clock, for ages of cached entries: an entry cached
    /// at `clock.instant()` is as old as the clock says.
    #[must_use]
    pub fn instant(&self) -> Instant {
        let now = Instant::now();
        let offset = self.offset();
        let shift = Duration::from_millis(offset.unsigned_abs());
        if offset >= 0 {
            now.checked_add(shift).unwrap_or(now)
        } else {
            now.checked_sub(shift).unwrap_or(now)
        }
    }
}

/// A clock a test moves: the system's time plus an offset. Hand [`TestClock::clock`] to the
/// engine (the gateway's `AppOptions::clock`), then move it instead of sleeping.
#[derive(Debug, Clone, Default)]
pub struct TestClock {
    offset_ms: Arc<AtomicI64>,
}

impl TestClock {
    /// A test clock at the system's time.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The clock to give the engine; every copy moves with this one.
    #[must_use]
    pub fn clock(&self) -> Clock {
        Clock {
            offset_ms: Some(Arc::clone(&self.offset_ms)),
        }
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms.fetch_add(by, Ordering::Relaxed);
    }

    /// Set the clock to `to` (from then on it runs with the system's clock).
    pub fn set(&self, to: DateTime<Utc>) {
        let offset = (to - Utc::now()).num_milliseconds();
        self.offset_ms.store(offset, Ordering::Relaxed);
    }

    /// Now, by this clock.
    #[must_use]
    pub fn now(&self) -> DateTime<Utc> {
        self.clock().now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_reads_the_system_time() {
        let before = Utc::now();
        let read = Clock::system().now();
        assert!(read >= before && read <= Utc::now());
    }

    #[test]
    fn a_moved_test_clock_moves_every_copy_and_its_instants() {
        let test = TestClock::new();
        let clock = test.clock();
        let (wall, mono) = (clock.now(), clock.instant());
        test.advance(Duration::from_secs(3600));
        let moved = clock.now() - wall;
        assert!(moved >= chrono::Duration::seconds(3600), "{moved}");
        assert!(moved < chrono::Duration::seconds(3610), "{moved}");
        assert!(clock.instant().duration_since(mono) >= Duration::from_secs(3600));
        let copy = test.clone().clock().now() - wall;
        assert!(copy >= chrono::Duration::seconds(3600), "{copy}");
    }

    #[test]
    fn a_set_test_clock_reads_the_time_it_was_set_to() {
        let test = TestClock::new();
        let to = DateTime::from_timestamp(1_000_000_000, 0).unwrap();
        test.set(to);
        let read = test.clock().now();
        assert!(
            read >= to && read - to < chrono::Duration::seconds(10),
            "{read}"
        );
        assert_eq!(
            test.clock().now_millis().timestamp_subsec_micros() % 1000,
            0
        );
        // Behind the system clock, a cached entry's age still reads as the clock says.
        assert!(test.clock().instant() <= Instant::now());
    }
}
