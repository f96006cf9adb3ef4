//! Each worker's slots as this instance sees them: how long a slot stays taken (an EWMA of the
//! attempts it started), and the paid executes holding their request open for the next free
//! slot, woken the moment one frees.
//!
//! ```text
//! start_attempt ──► attempt_started (the slot's clock starts)
//! delivered / attempt failed ──► slot_freed: the clock stops (EWMA), the first held execute in
//!                                queue order is woken, and parked (202) contracts dispatched
//! ```
//!
//! The store stays the judge of who gets a slot (see [`hiregate_store::Store::start_attempt`]):
//! a woken execute only asks it again. What lives here is a hint, per instance: a slot freed
//! on another instance (or an end this module does not hear of, a cancel) is seen at the held
//! execute's next look ([`RECHECK`]) or by the dispatcher's job round.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use tokio::sync::Notify;

/// How often a held execute asks the store again without being woken: slots freed on other
/// instances, or ends this instance does not hear of. A fallback, not the path.
pub(super) const RECHECK: Duration = Duration::from_millis(250);

/// Weight of the newest slot time in the EWMA.
const EWMA_WEIGHT: f64 = 0.2;

/// Started attempts tracked per worker beyond which the oldest (ends never heard of: cancels,
/// takeovers elsewhere) are dropped.
const TRACKED_STARTS: usize = 4096;

/// Every worker's line on this instance.
#[derive(Debug, Default)]
pub struct WorkerSlots {
    lines: Mutex<HashMap<String, Arc<WorkerLine>>>,
}

impl WorkerSlots {
    /// The line of `worker_id`, made on first use.
    pub(super) fn line(&self, worker_id: &str) -> Arc<WorkerLine> {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(lines.entry(worker_id.to_owned()).or_default())
    }
}

/// A place in the line: when the contract was queued (the store's `queued_at`, ms) and its id,
/// the store's own queue order.
pub(super) type Place = (i64, String);

/// One worker's slots, as seen from here.
#[derive(Debug, Default)]
pub(super) struct WorkerLine {
    state: Mutex<LineState>,
}

#[derive(Debug, Default)]
struct LineState {
    /// EWMA of how long an attempt held a slot, in seconds; `None` until one ended here.
    slot_time_s: Option<f64>,
    /// Attempts started here and not yet ended, by contract.
    started: HashMap<String, Instant>,
    /// Executes holding their request for a slot, in queue order.
    held: BTreeMap<Place, Arc<Notify>>,
    /// Whether contracts answered 202 `queued` may still wait: a freed slot then also runs
    /// the dispatcher, so they start at once instead of at its next round.
    parked: bool,
}

impl WorkerLine {
    fn state(&self) -> std::sync::MutexGuard<'_, LineState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An attempt of `contract_id` took a slot.
    pub(super) fn attempt_started(&self, contract_id: &str) {
        let mut state = self.state();
        if state.started.len() >= TRACKED_STARTS {
            let oldest = state.started.values().min().copied();
            state.started.retain(|_, at| Some(*at) != oldest);
        }
        state.started.insert(contract_id.to_owned(), Instant::now());
    }

    /// The attempt of `contract_id` gave its slot back: its time feeds the EWMA, the first
    /// held execute is woken. Returns whether parked contracts should be dispatched.
    pub(super) fn slot_freed(&self, contract_id: &str) -> bool {
        let mut state = self.state();
        if let Some(at) = state.started.remove(contract_id) {
            let took = at.elapsed().as_secs_f64();
            state.slot_time_s = Some(match state.slot_time_s {
                Some(average) => average + EWMA_WEIGHT * (took - average),
                None => took,
            });
        }
        // Taken out so a second free wakes the next one; a woken execute that finds no slot
        // after all comes back in its place.
        if let Some((_, first)) = state.held.pop_first() {
            first.notify_one();
        }
        state.parked
    }

    /// How long one slot is expected to stay taken: the EWMA, or longer when the attempts in
    /// flight here have all been running longer than that (a worker slower than it was).
    /// Zero when nothing is known yet: the hold's deadline bounds that guess.
    pub(super) fn slot_time(&self) -> Duration {
        let state = self.state();
        let youngest = state
            .started
            .values()
            .map(Instant::elapsed)
            .min()
            .unwrap_or_default();
        let average = Duration::from_secs_f64(state.slot_time_s.unwrap_or(0.0));
        average.max(youngest)
    }

    /// Hold `place` in line (again, after a wake that found no slot): `woken` is notified by
    /// the next [`Self::slot_freed`] that reaches it. The same `woken` every time, so a wake
    /// that came while its execute was asking the store is not lost.
    pub(super) fn hold(&self, place: &Place, woken: &Arc<Notify>) {
        self.state()
            .held
            .entry(place.clone())
            .or_insert_with(|| Arc::clone(woken));
    }

    /// `place` leaves the line (it got a slot, or gave up waiting).
    pub(super) fn leave(&self, place: &Place) {
        self.state().held.remove(place);
    }

    /// A contract was answered 202 `queued`: freed slots dispatch too from now on.
    pub(super) fn park(&self) {
        self.state().parked = true;
    }

    /// The dispatcher found this worker's queue empty.
    pub(super) fn unpark(&self) {
        self.state().parked = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_slot_wakes_the_first_held_in_queue_order() {
        let line = WorkerLine::default();
        let (later, first) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        line.hold(&(2, "ctr_b".to_owned()), &later);
        line.hold(&(1, "ctr_z".to_owned()), &first);
        line.attempt_started("ctr_running");
        assert!(!line.slot_freed("ctr_running"));
        tokio::time::timeout(Duration::from_secs(1), first.notified())
            .await
            .expect("the first in queue order is woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), later.notified())
                .await
                .is_err(),
            "one slot, one wake"
        );
        line.slot_freed("ctr_other");
        tokio::time::timeout(Duration::from_secs(1), later.notified())
            .await
            .expect("the next free wakes the next one");
    }

    #[test]
    fn slot_time_follows_the_ends_and_parking_is_reported() {
        let line = WorkerLine::default();
        assert_eq!(line.slot_time(), Duration::ZERO);
        line.attempt_started("ctr_a");
        std::thread::sleep(Duration::from_millis(5));
        line.park();
        assert!(line.slot_freed("ctr_a"));
        assert!(line.slot_time() >= Duration::from_millis(5));
        line.unpark();
        assert!(!line.slot_freed("ctr_a"));
    }
}
