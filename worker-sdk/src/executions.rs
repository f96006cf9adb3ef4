//! In-memory registry of handler runs: the worker's idempotency store.
//!
//! Keyed by contract id (the gateway's idempotency key). Admission decides, under one lock,
//! whether a request starts a run or gets the state of the run that exists, which is what
//! makes concurrent duplicates safe. Finished runs are kept for a retention period so late
//! duplicates and polls still get the stored report; after it they are forgotten (and a
//! restart forgets everything — state lives in this process only).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::ids::{Attempt, ContractId, TaskId};
use crate::protocol::{Output, PartialReport, PendingReport, Progress, TaskReport};

/// Where a run is, as seen by the request that started it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Phase {
    /// The handler is running and has not said it went async.
    Running,
    /// The handler answered `pending`; its work continues in the background.
    Background,
    /// The final report (also carried here so the waiting caller gets it even if the
    /// registry has already forgotten the run).
    Finished(Box<TaskReport>),
}

/// The decision for one `/execute` request.
#[derive(Debug)]
pub(crate) enum Admission {
    /// This request starts a run: the caller must spawn the handler.
    Start(StartedRun),
    /// A run exists for this contract (and attempt): answer with its current report.
    Existing(Box<TaskReport>),
    /// All handler slots are taken.
    Busy,
}

/// A run the caller must now perform.
#[derive(Debug)]
pub(crate) struct StartedRun {
    pub(crate) task_id: TaskId,
    pub(crate) poll_url: Url,
    pub(crate) phase: watch::Receiver<Phase>,
    /// Cancelled by `POST /tasks/{id}/cancel`; the handler sees it in its context.
    pub(crate) cancel: CancellationToken,
    /// Held until the run ends, so `max_concurrent_tasks` counts background work too.
    pub(crate) permit: Option<OwnedSemaphorePermit>,
}

#[derive(Debug)]
enum TaskState {
    Running {
        progress: Option<Progress>,
        estimated_completion: Option<DateTime<Utc>>,
        /// Items already done, reported with the progress (boxed: most runs have none).
        partial_output: Option<Box<Output>>,
    },
    Finished {
        report: Box<TaskReport>,
        at: Instant,
    },
}

#[derive(Debug)]
struct TaskRecord {
    contract_id: ContractId,
    poll_url: Url,
    state: TaskState,
    /// Someone was told `pending`/`partial`, so the end must be announced by callback.
    answered_running: bool,
    phase: watch::Sender<Phase>,
    cancel: CancellationToken,
}

/// What a cancel request found.
#[derive(Debug)]
pub(crate) enum CancelRequest {
    /// The run was still going and is now told to stop; its end arrives on this channel.
    Signalled(watch::Receiver<Phase>),
    /// The run had already ended with this report.
    Ended(Box<TaskReport>),
}

impl TaskRecord {
    fn current_report(&self, task_id: &TaskId) -> TaskReport {
        match &self.state {
            TaskState::Finished { report, .. } => (**report).clone(),
            TaskState::Running {
                progress: None,
                estimated_completion,
                ..
            } => TaskReport::Pending(PendingReport {
                contract_id: self.contract_id.clone(),
                task_id: task_id.clone(),
                poll_url: self.poll_url.clone(),
                estimated_completion: *estimated_completion,
            }),
            TaskState::Running {
                progress: Some(progress),
                estimated_completion,
                partial_output,
            } => TaskReport::Partial(PartialReport {
                contract_id: self.contract_id.clone(),
                task_id: task_id.clone(),
                poll_url: Some(self.poll_url.clone()),
                progress: Some(progress.clone()),
                output: partial_output.as_deref().cloned(),
                estimated_completion: *estimated_completion,
            }),
        }
    }

    /// The report to give a caller now; remembers that a running state was shown.
    fn answer(&mut self, task_id: &TaskId) -> TaskReport {
        if matches!(self.state, TaskState::Running { .. }) {
            self.answered_running = true;
        }
        self.current_report(task_id)
    }

    /// Whether a new attempt may run the handler again after this run.
    fn allows_retry(&self) -> bool {
        match &self.state {
            TaskState::Finished { report, .. } => {
                matches!(**report, TaskReport::Failed(_) | TaskReport::Partial(_))
            }
            TaskState::Running { .. } => false,
        }
    }
}

#[derive(Debug)]
struct LatestRun {
    attempt: Attempt,
    task_id: TaskId,
}

#[derive(Debug)]
struct Registry {
    latest_by_contract: HashMap<ContractId, LatestRun>,
    tasks: HashMap<TaskId, TaskRecord>,
    last_sweep: Instant,
}

/// Upper bound on how often expired runs are swept, so admission stays cheap with many
/// stored runs.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// The registry shared by the router, the running tasks and their contexts.
#[derive(Debug)]
pub(crate) struct Executions {
    registry: Mutex<Registry>,
    retention: Duration,
    slots: Option<Arc<Semaphore>>,
}

impl Executions {
    pub(crate) fn new(retention: Duration, max_concurrent_tasks: Option<usize>) -> Self {
        Self {
            registry: Mutex::new(Registry {
                latest_by_contract: HashMap::new(),
                tasks: HashMap::new(),
                last_sweep: Instant::now(),
            }),
            retention,
            slots: max_concurrent_tasks.map(|n| Arc::new(Semaphore::new(n))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding this lock cannot leave the maps half-updated (every
        // critical section is a few infallible map operations), so poisoning is ignored.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a run for (contract, attempt) or returns the existing run's report.
    ///
    /// Rules: no run yet → start. Same or older attempt → the latest run's report. Newer
    /// attempt → start again only if the latest run ended `failed` or `partial`; a
    /// completed or still running contract is never run twice.
    pub(crate) fn admit(
        &self,
        contract_id: &ContractId,
        attempt: Attempt,
        poll_base: &Url,
    ) -> Admission {
        let mut registry = self.lock();
        self.forget_expired(&mut registry);
        let Registry {
            latest_by_contract,
            tasks,
            ..
        } = &mut *registry;

        if let Some(latest) = latest_by_contract.get(contract_id)
            && let Some(record) = tasks.get_mut(&latest.task_id)
            && !(attempt > latest.attempt && record.allows_retry())
        {
            return Admission::Existing(Box::new(record.answer(&latest.task_id)));
        }

        let permit = match &self.slots {
            Some(slots) => match Arc::clone(slots).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => return Admission::Busy,
            },
            None => None,
        };
        let task_id = TaskId::generate();
        let poll_url = poll_url_for(poll_base, &task_id);
        let (phase_tx, phase_rx) = watch::channel(Phase::Running);
        let cancel = CancellationToken::new();
        tasks.insert(
            task_id.clone(),
            TaskRecord {
                contract_id: contract_id.clone(),
                poll_url: poll_url.clone(),
                state: TaskState::Running {
                    progress: None,
                    estimated_completion: None,
                    partial_output: None,
                },
                answered_running: false,
                phase: phase_tx,
                cancel: cancel.clone(),
            },
        );
        latest_by_contract.insert(
            contract_id.clone(),
            LatestRun {
                attempt,
                task_id: task_id.clone(),
            },
        );
        Admission::Start(StartedRun {
            task_id,
            poll_url,
            phase: phase_rx,
            cancel,
            permit,
        })
    }

    /// The current report of a task, if it exists and belongs to `contract_id`. A caller
    /// shown a running state is owed a completion callback.
    pub(crate) fn answer(&self, task_id: &TaskId, contract_id: &ContractId) -> Option<TaskReport> {
        let mut registry = self.lock();
        let record = registry.tasks.get_mut(task_id)?;
        // A task of another contract is reported as absent, not as forbidden, so task ids
        // cannot be probed across contracts.
        (record.contract_id == *contract_id).then(|| record.answer(task_id))
    }

    /// The task of the latest run of `contract_id`, if it is still known.
    pub(crate) fn latest_task(&self, contract_id: &ContractId) -> Option<TaskId> {
        self.lock()
            .latest_by_contract
            .get(contract_id)
            .map(|latest| latest.task_id.clone())
    }

    /// Tells a running task of `contract_id` to stop. `None` for an unknown task or one of
    /// another contract (reported as absent, like [`Executions::answer`]).
    pub(crate) fn cancel(
        &self,
        task_id: &TaskId,
        contract_id: &ContractId,
    ) -> Option<CancelRequest> {
        let mut registry = self.lock();
        let record = registry.tasks.get_mut(task_id)?;
        if record.contract_id != *contract_id {
            return None;
        }
        match &record.state {
            TaskState::Finished { report, .. } => Some(CancelRequest::Ended(report.clone())),
            TaskState::Running { .. } => {
                record.cancel.cancel();
                Some(CancelRequest::Signalled(record.phase.subscribe()))
            }
        }
    }

    pub(crate) fn set_progress(&self, task_id: &TaskId, progress: Progress) {
        let mut registry = self.lock();
        if let Some(TaskRecord {
            state: TaskState::Running { progress: slot, .. },
            ..
        }) = registry.tasks.get_mut(task_id)
        {
            *slot = Some(progress);
        }
    }

    pub(crate) fn set_partial(&self, task_id: &TaskId, progress: Progress, output: Output) {
        let mut registry = self.lock();
        if let Some(TaskRecord {
            state:
                TaskState::Running {
                    progress: slot,
                    partial_output,
                    ..
                },
            ..
        }) = registry.tasks.get_mut(task_id)
        {
            *slot = Some(progress);
            *partial_output = Some(Box::new(output));
        }
    }

    /// The handler answered `pending`: record its estimate and release the waiting caller.
    pub(crate) fn move_to_background(
        &self,
        task_id: &TaskId,
        estimated_completion: Option<DateTime<Utc>>,
    ) {
        let mut registry = self.lock();
        if let Some(record) = registry.tasks.get_mut(task_id) {
            if let TaskState::Running {
                estimated_completion: slot,
                ..
            } = &mut record.state
            {
                *slot = estimated_completion;
            }
            record.phase.send_replace(Phase::Background);
        }
    }

    /// Stores the final report. Returns whether anyone was shown a running state (and so
    /// must be told of the end by callback).
    pub(crate) fn finish(&self, task_id: &TaskId, report: TaskReport) -> bool {
        let mut registry = self.lock();
        let Some(record) = registry.tasks.get_mut(task_id) else {
            return false;
        };
        let report = Box::new(report);
        record.phase.send_replace(Phase::Finished(report.clone()));
        record.state = TaskState::Finished {
            report,
            at: Instant::now(),
        };
        record.answered_running
    }

    /// Handler runs in progress (sync or background).
    pub(crate) fn in_flight(&self) -> usize {
        self.lock()
            .tasks
            .values()
            .filter(|r| matches!(r.state, TaskState::Running { .. }))
            .count()
    }

    fn forget_expired(&self, registry: &mut Registry) {
        let retention = self.retention;
        if registry.last_sweep.elapsed() < retention.min(MAX_SWEEP_INTERVAL) {
            return;
        }
        registry.last_sweep = Instant::now();
        registry.tasks.retain(|_, record| match record.state {
            TaskState::Finished { at, .. } => at.elapsed() < retention,
            TaskState::Running { .. } => true,
        });
        let Registry {
            latest_by_contract,
            tasks,
            ..
        } = registry;
        latest_by_contract.retain(|_, latest| tasks.contains_key(&latest.task_id));
    }
}

fn poll_url_for(base: &Url, task_id: &TaskId) -> Url {
    let mut url = base.clone();
    // Task ids are URL-safe by construction, so pushing a segment cannot fail for an
    // http(s) base; a base that cannot be a base falls back to being used as-is.
    if let Ok(mut segments) = url.path_segments_mut() {
        segments.pop_if_empty().push("tasks").push(task_id.as_str());
    }
    url
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::{CompletedReport, FailedReport, Output, TaskError};

    fn contract() -> ContractId {
        ContractId::generate()
    }

    fn base() -> Url {
        Url::parse("http://127.0.0.1:9/").unwrap()
    }

    fn attempt(n: u32) -> Attempt {
        Attempt::new(n).unwrap()
    }

    fn started(admission: Admission) -> StartedRun {
        match admission {
            Admission::Start(run) => run,
            other => panic!("expected a start, got {other:?}"),
        }
    }

    fn existing(admission: Admission) -> TaskReport {
        match admission {
            Admission::Existing(report) => *report,
            other => panic!("expected an existing run, got {other:?}"),
        }
    }

    fn completed(contract_id: &ContractId, task_id: &TaskId) -> TaskReport {
        TaskReport::Completed(CompletedReport {
            contract_id: contract_id.clone(),
            task_id: Some(task_id.clone()),
            output: Output::Json {
                content: json!({"ok": true}),
            },
            metadata: None,
        })
    }

    fn failed(contract_id: &ContractId, task_id: &TaskId) -> TaskReport {
        TaskReport::Failed(FailedReport {
            contract_id: contract_id.clone(),
            task_id: Some(task_id.clone()),
            error: TaskError::new("BOOM", "boom"),
        })
    }

    #[test]
    fn a_duplicate_gets_the_running_state_then_the_stored_result() {
        let executions = Executions::new(Duration::from_secs(60), None);
        let c = contract();
        let run = started(executions.admit(&c, attempt(1), &base()));
        assert_eq!(
            run.poll_url.as_str(),
            format!("http://127.0.0.1:9/tasks/{}", run.task_id)
        );

        let TaskReport::Pending(pending) = existing(executions.admit(&c, attempt(1), &base()))
        else {
            panic!("duplicate while running must get pending")
        };
        assert_eq!(pending.task_id, run.task_id);

        let owed_callback = executions.finish(&run.task_id, completed(&c, &run.task_id));
        assert!(owed_callback, "a caller was shown pending");
        assert!(matches!(*run.phase.borrow(), Phase::Finished(_)));
        let report = existing(executions.admit(&c, attempt(2), &base()));
        assert!(
            report.is_completed(),
            "a completed contract never runs again, whatever the attempt"
        );
    }

    #[test]
    fn a_new_attempt_reruns_only_after_a_failure() {
        let executions = Executions::new(Duration::from_secs(60), None);
        let c = contract();
        let first = started(executions.admit(&c, attempt(1), &base()));
        assert!(!executions.finish(&first.task_id, failed(&c, &first.task_id)));

        assert!(matches!(
            existing(executions.admit(&c, attempt(1), &base())),
            TaskReport::Failed(_)
        ));
        let second = started(executions.admit(&c, attempt(2), &base()));
        assert_ne!(second.task_id, first.task_id);
        // A stale attempt number sees the latest run, not the old failure.
        assert!(matches!(
            existing(executions.admit(&c, attempt(1), &base())),
            TaskReport::Pending(_)
        ));
        // The first run stays readable under its own task id.
        assert!(matches!(
            executions.answer(&first.task_id, &c),
            Some(TaskReport::Failed(_))
        ));
    }

    #[test]
    fn tasks_are_invisible_to_other_contracts() {
        let executions = Executions::new(Duration::from_secs(60), None);
        let (a, b) = (contract(), contract());
        let run = started(executions.admit(&a, attempt(1), &base()));
        assert!(executions.answer(&run.task_id, &b).is_none());
        assert!(executions.answer(&run.task_id, &a).is_some());
    }

    #[test]
    fn progress_turns_pending_into_partial() {
        let executions = Executions::new(Duration::from_secs(60), None);
        let c = contract();
        let run = started(executions.admit(&c, attempt(1), &base()));
        executions.set_progress(&run.task_id, Progress::default());
        assert!(matches!(
            executions.answer(&run.task_id, &c),
            Some(TaskReport::Partial(_))
        ));
    }

    #[test]
    fn slots_limit_concurrent_runs_and_free_up() {
        let executions = Executions::new(Duration::from_secs(60), Some(1));
        let (x, y) = (contract(), contract());
        let run = started(executions.admit(&x, attempt(1), &base()));
        assert!(matches!(
            executions.admit(&y, attempt(1), &base()),
            Admission::Busy
        ));
        drop(run.permit);
        started(executions.admit(&y, attempt(1), &base()));
    }

    #[test]
    fn finished_runs_are_forgotten_after_retention() {
        let executions = Executions::new(Duration::ZERO, None);
        let c = contract();
        let run = started(executions.admit(&c, attempt(1), &base()));
        executions.finish(&run.task_id, completed(&c, &run.task_id));
        started(executions.admit(&c, attempt(1), &base()));
        assert!(executions.answer(&run.task_id, &c).is_none());
    }

    #[test]
    fn poll_urls_keep_a_base_path() {
        let task_id = TaskId::parse("task_1").unwrap();
        let base = Url::parse("https://w.example.com/agents/a/").unwrap();
        assert_eq!(
            poll_url_for(&base, &task_id).as_str(),
            "https://w.example.com/agents/a/tasks/task_1"
        );
    }
}

/// Number of handler runs so far (shared, cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct ExecutionCounter(Arc<AtomicUsize>);

impl ExecutionCounter {
    /// Handler runs so far.
    #[must_use]
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    pub(crate) fn increment(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
