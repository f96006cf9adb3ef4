//! What a worker author writes: a [`TaskHandler`] (usually an async closure) that receives a
//! [`TaskContext`] and the task input and returns a [`TaskOutcome`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use futures::Stream;
use url::Url;

use crate::executions::Executions;
use crate::hosted::{EventSource, HostedFile, HostedOutputs, StreamEvent};
use crate::ids::{Attempt, ContractId, TaskId, TaskType};
use crate::protocol::{FileOutput, Output, Progress, TaskError, file_output};

/// The future a handler returns.
pub type TaskFuture = Pin<Box<dyn Future<Output = TaskOutcome> + Send + 'static>>;

/// The code of the `failed` report the SDK writes when a handler panics.
pub const HANDLER_PANICKED: &str = "WORKER_PANICKED";
/// The code of the `failed` report the SDK writes when a handler returns an output the
/// protocol does not allow (nested `multiple`, non-http file URL, too many items…).
pub const INVALID_OUTPUT: &str = "WORKER_INVALID_OUTPUT";
/// The code of the `failed` report of a run stopped by `POST /tasks/{id}/cancel`.
pub const TASK_CANCELLED: &str = "TASK_CANCELLED";

/// Performs tasks. Implemented for every
/// `Fn(TaskContext, serde_json::Value) -> impl Future<Output = TaskOutcome>` that is
/// `Send + Sync + 'static`, so a closure is enough:
///
/// ```
/// use hiregate_worker_sdk::{TaskContext, TaskOutcome};
/// let handler = |_ctx: TaskContext, input: serde_json::Value| async move {
///     TaskOutcome::json(serde_json::json!({ "echo": input }))
/// };
/// # let _ = handler;
/// ```
pub trait TaskHandler: Send + Sync + 'static {
    /// Runs one task. Called at most once per (contract, attempt); the SDK runs the future
    /// on its own task so a caller hanging up does not cancel the work.
    fn handle(&self, ctx: TaskContext, input: Value) -> TaskFuture;
}

impl<F, Fut> TaskHandler for F
where
    F: Fn(TaskContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = TaskOutcome> + Send + 'static,
{
    fn handle(&self, ctx: TaskContext, input: Value) -> TaskFuture {
        Box::pin(self(ctx, input))
    }
}

/// What the handler knows about the run it performs.
#[derive(Clone)]
pub struct TaskContext {
    pub(crate) contract_id: ContractId,
    pub(crate) attempt: Attempt,
    pub(crate) task_id: TaskId,
    pub(crate) task_type: Option<TaskType>,
    pub(crate) correlation_id: Option<String>,
    pub(crate) executions: Arc<Executions>,
    pub(crate) cancel: CancellationToken,
    pub(crate) hosted: Arc<HostedOutputs>,
    /// Where this worker is reached (the base of `poll_url`).
    pub(crate) base_url: Url,
}

impl TaskContext {
    /// The contract being executed.
    #[must_use]
    pub fn contract_id(&self) -> &ContractId {
        &self.contract_id
    }

    /// The gateway's attempt number (1 unless the gateway is retrying after a failure).
    #[must_use]
    pub fn attempt(&self) -> Attempt {
        self.attempt
    }

    /// This run's task id (the last segment of its poll URL).
    #[must_use]
    pub fn task_id(&self) -> &TaskId {
        &self.task_id
    }

    /// The contract's task type, when the gateway sent it (`X-Task-Type`); always one of
    /// the worker's declared task types.
    #[must_use]
    pub fn task_type(&self) -> Option<&TaskType> {
        self.task_type.as_ref()
    }

    /// Fires when the gateway cancels the task (`POST /tasks/{id}/cancel`). A handler doing
    /// long work should watch it (`ctx.cancellation().cancelled().await` in a `select!`, or
    /// [`TaskContext::is_cancelled`] between steps) and stop: the SDK reports the run
    /// `failed` with [`TASK_CANCELLED`] and aborts a handler still running shortly after.
    #[must_use]
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Whether the task was cancelled.
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The hire's correlation id, when the gateway sent one (`X-Correlation-ID`): the same id
    /// the seeker, the gateway's events and its webhooks carry.
    #[must_use]
    pub fn correlation_id(&self) -> Option<&str> {
        self.correlation_id.as_deref()
    }

    /// Publishes progress: until the task ends, `GET /tasks/{id}` and duplicate executes
    /// answer `partial` with this progress instead of `pending`.
    pub fn report_progress(&self, progress: Progress) {
        self.executions.set_progress(&self.task_id, progress);
    }

    /// Publishes progress together with the items already done: until the task ends, polls
    /// answer `partial` with this progress and `items` as a `multiple` output (the gateway
    /// relays the progress and the number of items to the seeker, not the items).
    pub fn report_partial(&self, progress: Progress, items: Vec<Output>) {
        self.executions
            .set_partial(&self.task_id, progress, Output::Multiple { items });
    }

    /// Hosts `bytes` as file `name` of this task (served at `GET /files/{task_id}/{name}`)
    /// and returns the `file` output naming it, with its size and `sha256:` checksum.
    /// Characters other than ASCII letters, digits, `.`, `-` and `_` in `name` become `_`.
    #[must_use]
    pub fn host_file(&self, name: &str, mime: &str, bytes: impl Into<Vec<u8>>) -> FileOutput {
        let bytes = bytes.into();
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = if name.is_empty() || name.chars().all(|c| c == '.') {
            "file".to_owned()
        } else {
            name
        };
        let url = self
            .base_url
            .join(&format!("files/{}/{name}", self.task_id.as_str()))
            .unwrap_or_else(|_| self.base_url.clone());
        let mut output = file_output(url, mime, &bytes);
        output.name = Some(name.clone());
        self.hosted.add_file(
            &self.task_id,
            &name,
            HostedFile {
                mime: mime.to_owned(),
                bytes: Arc::new(bytes),
            },
        );
        output
    }
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("contract_id", &self.contract_id)
            .field("attempt", &self.attempt)
            .field("task_id", &self.task_id)
            .field("task_type", &self.task_type)
            .finish_non_exhaustive()
    }
}

/// How a handler run ended (or that it continues in the background).
pub enum TaskOutcome {
    /// The deliverable is ready.
    Completed {
        /// The deliverable.
        output: Output,
        /// Free-form facts about the run, reported as `metadata`.
        metadata: Option<Value>,
    },
    /// The task could not be done.
    Failed(TaskError),
    /// The work continues in the background: the SDK answers `pending` (task id, poll URL,
    /// estimated completion) and runs [`PendingWork`] to its end.
    Pending(PendingWork),
    /// The output is a stream of events the SDK serves as SSE (see [`crate::hosted`]); the
    /// task is `completed` with a `stream` output at once.
    Stream(EventSource),
    /// The run ended with only part of the deliverable (the gateway judges it on what it
    /// delivered; by default that is a failure, unless the contract accepts partial
    /// deliveries of enough items).
    Partial {
        /// How far the work came.
        progress: Option<Progress>,
        /// The part that is ready.
        output: Option<Output>,
    },
}

impl TaskOutcome {
    /// Completed with a `json` output.
    #[must_use]
    pub fn json(content: Value) -> Self {
        Self::output(Output::Json { content })
    }

    /// Completed with a `text` output.
    #[must_use]
    pub fn text(content: impl Into<String>) -> Self {
        Self::output(Output::Text {
            content: content.into(),
        })
    }

    /// Completed with any output.
    #[must_use]
    pub fn output(output: Output) -> Self {
        Self::Completed {
            output,
            metadata: None,
        }
    }

    /// Completed with a `stream` output: the SDK serves `events` as SSE while they come.
    #[must_use]
    pub fn stream(events: impl Stream<Item = StreamEvent> + Send + 'static) -> Self {
        Self::Stream(Box::pin(events))
    }

    /// Ended with only part of the work: `items` as a `multiple` output (the gateway accepts
    /// it only when the contract's policy allows partial deliveries of that many items).
    #[must_use]
    pub fn partial(progress: Option<Progress>, items: Vec<Output>) -> Self {
        Self::Partial {
            progress,
            output: (!items.is_empty()).then_some(Output::Multiple { items }),
        }
    }

    /// Failed with a code (e.g. `INVALID_INPUT`) and a message.
    #[must_use]
    pub fn failed(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Failed(TaskError::new(code, message))
    }

    /// Continues `work` in the background; `estimated_completion` is reported to pollers.
    #[must_use]
    pub fn pending(
        estimated_completion: Option<DateTime<Utc>>,
        work: impl Future<Output = TaskOutcome> + Send + 'static,
    ) -> Self {
        Self::Pending(PendingWork {
            estimated_completion,
            work: Box::pin(work),
        })
    }

    /// Adds `metadata` to a completed outcome (other outcomes are returned unchanged).
    #[must_use]
    pub fn with_metadata(self, metadata: Value) -> Self {
        match self {
            Self::Completed { output, .. } => Self::Completed {
                output,
                metadata: Some(metadata),
            },
            other => other,
        }
    }
}

impl fmt::Debug for TaskOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Completed { output, metadata } => f
                .debug_struct("Completed")
                .field("output", output)
                .field("metadata", metadata)
                .finish(),
            Self::Failed(error) => f.debug_tuple("Failed").field(error).finish(),
            Self::Pending(work) => f.debug_tuple("Pending").field(work).finish(),
            Self::Stream(_) => f.write_str("Stream"),
            Self::Partial { progress, output } => f
                .debug_struct("Partial")
                .field("progress", progress)
                .field("output", output)
                .finish(),
        }
    }
}

/// Background work of a pending task.
pub struct PendingWork {
    pub(crate) estimated_completion: Option<DateTime<Utc>>,
    pub(crate) work: TaskFuture,
}

impl fmt::Debug for PendingWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingWork")
            .field("estimated_completion", &self.estimated_completion)
            .finish_non_exhaustive()
    }
}
