//! Outputs the worker hosts itself, so a handler never runs its own web server:
//!
//! - **files** ([`TaskContext::host_file`](crate::TaskContext::host_file)): the bytes are kept
//!   in memory and served at `GET /files/{task_id}/{name}`; the handler gets a `file` output
//!   with the URL, media type, size and `sha256:` checksum (the gateway fetches the file and
//!   checks that digest before judging). Unauthenticated, like any HIRE file URL ("URLs MUST
//!   be accessible to seeker"); the task id in the path is an unguessable ULID.
//! - **streams** ([`TaskOutcome::stream`](crate::TaskOutcome::stream)): the handler returns a
//!   stream of [`StreamEvent`]s; the SDK answers `completed` with a `stream` output naming
//!   `GET /streams/{task_id}` and serves the events there as Server-Sent Events, numbered
//!   `1, 2, …` (`id:`), while the handler produces them. A reader that reconnects with
//!   `Last-Event-ID: n` gets the events after `n`, so nothing is lost or repeated. When the
//!   handler's stream ends the SDK sends the closing `done` event
//!   ([`STREAM_END_EVENT`]); a [`StreamEvent::error`] ends it as a failure instead. Reading
//!   needs the same contract token and `X-Contract-ID` as `GET /tasks/{id}`.
//!
//! Hosted outputs live as long as the worker's execution records (`retention`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt as _};
pub use hiregate_contracts::wire::hire::{STREAM_END_EVENT, STREAM_ERROR_EVENT};
use serde_json::json;
use tokio::sync::watch;

use crate::ids::TaskId;

/// What a handler's stream yields.
pub type EventSource = Pin<Box<dyn Stream<Item = StreamEvent> + Send + 'static>>;

/// One event of a streamed output. Its `data` is output (the gateway assembles the data of
/// all events, in order, into the deliverable), except for the closing events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    event: Option<String>,
    data: String,
}

impl StreamEvent {
    /// An unnamed (`message`) event carrying `data`. SSE cannot carry carriage returns:
    /// `\r\n` and `\r` become `\n`.
    #[must_use]
    pub fn data(data: impl Into<String>) -> Self {
        Self {
            event: None,
            data: without_carriage_returns(data.into()),
        }
    }

    /// An event named `name` carrying `data` (still output; `done` and `error` are reserved).
    /// Line breaks in `name` are dropped.
    #[must_use]
    pub fn named(name: impl Into<String>, data: impl Into<String>) -> Self {
        let name: String = name
            .into()
            .chars()
            .filter(|c| !matches!(c, '\r' | '\n'))
            .collect();
        Self {
            event: (!name.is_empty()).then_some(name),
            data: without_carriage_returns(data.into()),
        }
    }

    /// The closing event of a failed stream: the gateway fails the attempt with `code`.
    #[must_use]
    pub fn error(code: &str, message: &str) -> Self {
        Self::named(
            STREAM_ERROR_EVENT,
            json!({"code": code, "message": message}).to_string(),
        )
    }

    fn is_error(&self) -> bool {
        self.event.as_deref() == Some(STREAM_ERROR_EVENT)
    }
}

fn without_carriage_returns(data: String) -> String {
    if data.contains('\r') {
        data.replace("\r\n", "\n").replace('\r', "\n")
    } else {
        data
    }
}

/// A hosted file.
#[derive(Debug, Clone)]
pub(crate) struct HostedFile {
    pub(crate) mime: String,
    pub(crate) bytes: Arc<Vec<u8>>,
}

/// The events of one streamed output, as far as the handler produced them.
#[derive(Debug, Default)]
struct StreamLog {
    events: Vec<StreamEvent>,
    ended: bool,
}

#[derive(Debug)]
struct HostedStream {
    log: Arc<Mutex<StreamLog>>,
    /// Bumped on every append (and at the end), so readers wake.
    changed: watch::Sender<usize>,
    contract_id: String,
}

/// Files and streams hosted for tasks, by task id.
#[derive(Debug)]
pub(crate) struct HostedOutputs {
    retention: Duration,
    files: Mutex<HashMap<(String, String), (Instant, HostedFile)>>,
    streams: Mutex<HashMap<String, (Instant, Arc<HostedStream>)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section leaves the maps consistent, so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl HostedOutputs {
    pub(crate) fn new(retention: Duration) -> Self {
        Self {
            retention,
            files: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
        }
    }

    fn forget_expired(&self) {
        let now = Instant::now();
        let retention = self.retention;
        lock(&self.files).retain(|_, (at, _)| now.duration_since(*at) < retention);
        lock(&self.streams).retain(|_, (at, _)| now.duration_since(*at) < retention);
    }

    pub(crate) fn add_file(&self, task_id: &TaskId, name: &str, file: HostedFile) {
        self.forget_expired();
        lock(&self.files).insert(
            (task_id.as_str().to_owned(), name.to_owned()),
            (Instant::now(), file),
        );
    }

    pub(crate) fn file(&self, task_id: &str, name: &str) -> Option<HostedFile> {
        lock(&self.files)
            .get(&(task_id.to_owned(), name.to_owned()))
            .map(|(_, file)| file.clone())
    }

    /// Starts hosting `source` for `task_id`: a background task appends its events as they
    /// come and closes the stream with `done` (unless it closed with an error event).
    pub(crate) fn start_stream(
        &self,
        task_id: &TaskId,
        contract_id: &str,
        mut source: EventSource,
    ) {
        self.forget_expired();
        let (changed, _) = watch::channel(0);
        let stream = Arc::new(HostedStream {
            log: Arc::new(Mutex::new(StreamLog::default())),
            changed,
            contract_id: contract_id.to_owned(),
        });
        lock(&self.streams).insert(
            task_id.as_str().to_owned(),
            (Instant::now(), Arc::clone(&stream)),
        );
        tokio::spawn(async move {
            let mut closed_by_error = false;
            while let Some(event) = source.next().await {
                closed_by_error = event.is_error();
                stream.append(event);
                if closed_by_error {
                    break;
                }
            }
            if !closed_by_error {
                stream.append(StreamEvent::named(STREAM_END_EVENT, "{}"));
            }
            lock(&stream.log).ended = true;
            stream.changed.send_modify(|n| *n += 1);
        });
    }

    /// The SSE body of `task_id`'s stream after event number `after`, if `contract_id` owns
    /// such a stream.
    pub(crate) fn serve_stream(
        &self,
        task_id: &str,
        contract_id: &str,
        after: usize,
    ) -> Option<Sse<impl Stream<Item = Result<Event, Infallible>> + Send + use<>>> {
        let stream = lock(&self.streams)
            .get(task_id)
            .map(|(_, stream)| Arc::clone(stream))
            .filter(|stream| stream.contract_id == contract_id)?;
        let changes = stream.changed.subscribe();
        let events = futures::stream::unfold(
            (stream, changes, after),
            |(stream, mut changes, mut next)| async move {
                loop {
                    let (pending, ended) = {
                        let log = lock(&stream.log);
                        (log.events.get(next).cloned(), log.ended)
                    };
                    if let Some(event) = pending {
                        next += 1;
                        let mut sse = Event::default().id(next.to_string()).data(event.data);
                        if let Some(name) = event.event {
                            sse = sse.event(name);
                        }
                        return Some((Ok(sse), (stream, changes, next)));
                    }
                    if ended || changes.changed().await.is_err() {
                        return None;
                    }
                }
            },
        );
        Some(Sse::new(events).keep_alive(KeepAlive::default()))
    }
}

impl HostedStream {
    fn append(&self, event: StreamEvent) {
        lock(&self.log).events.push(event);
        self.changed.send_modify(|n| *n += 1);
    }
}
