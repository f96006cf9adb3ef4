//! Stream outputs (HIRE `{"type":"stream","url","format":"sse"}`), between the worker's answer
//! and `delivered`: the gateway reads the worker's SSE stream to its end, relays each event to
//! the contract's event log as it comes (`worker_stream_event`, in order, the data withheld:
//! nothing unpaid is shown), and replaces the stream output with the assembled one
//! ([`assemble_stream`]), which is then stored, digested and judged like any deliverable; so
//! settlement waits for the stream's verdict.
//!
//! The end of a stream follows the convention in `hiregate_contracts::wire::hire`: `done` ends
//! it, `error` fails the attempt, a connection that closes before either is broken. A broken
//! stream is resumed at the same URL with `Last-Event-ID` when the worker sent ids (events
//! already seen are dropped); without ids, the same URL is read again from the start and the
//! events already relayed and assembled are skipped by position, each checked against the one
//! relayed (name and data digest): a replay that differs fails the attempt (`stream_diverged`),
//! as do too many reconnects (`stream_lost`); the retry policy decides what follows.
//!
//! A contract metered by stream event (`metering.unit = "event"`) is paid for the events the
//! gateway relayed: when its stream is lost (too many reconnects) after at least one data
//! event, the attempt is not failed but delivered as a **partial** with the events read so far
//! assembled, and judged like any deliverable; the verdict counts the relayed events (a stream
//! cut after 40 of 100 events pays at most 40). Whatever the worker claims it sent is not
//! counted. A stream that ends with `error`, that diverges, or that runs past its deadline
//! still fails the attempt (the worker said it failed, or broke its word, or ran out of time).
//!
//! Bounds: `outbound.stream_max_bytes` over all connections, `outbound.stream_max_duration_ms`,
//! and the attempt's SLA deadline, whichever ends first (past it: a timed-out attempt).
//!
//! Crash safety: the stream is read while the contract is still `executing` (or `pending`),
//! before anything is stored. An instance that dies mid-stream leaves the contract there; the
//! takeover (`recovery`, within the SLA plus grace) asks the worker again for the same attempt,
//! gets the same stream output back and reads it again from the start, relaying only the events
//! past those the log already holds for that attempt; a pending contract's poll job does the
//! same once its lease ran out.

use std::time::Duration;

use futures::StreamExt as _;
use hiregate_contracts::{
    deliverable::{Deliverable, DeliveryStatus, Output},
    metering::MeterUnit,
    wire::hire::{STREAM_END_EVENT, STREAM_ERROR_EVENT, assemble_stream},
};
use serde_json::{Value, json};
use tokio::time::Instant;
use url::Url;

use super::{HireService, execute::Ctx, relay::ContractEventRelay};
use crate::adapters::{FailureKind, UpstreamEvents as _, WorkerAnswer, sse};
use hiregate_store::states::{Actor, EventKind};

/// Reconnects of a broken stream, at most, per read.
const MAX_RECONNECTS: u32 = 5;
/// Most log entries scanned for events an earlier read relayed.
const MAX_LOG_SCAN: u32 = 100_000;
/// Pause before a reconnect.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

fn failed(kind: FailureKind, code: &str, message: impl Into<String>) -> WorkerAnswer {
    WorkerAnswer::Failed {
        kind,
        http_status: None,
        code: code.to_owned(),
        message: message.into(),
        details: None,
    }
}

/// How reading one connection ended.
enum Connection {
    /// `done` or `error` came (or a limit was hit): the read's answer.
    Ended(Box<WorkerAnswer>),
    /// The connection closed or broke before the end.
    Broken(String),
}

/// One read of a stream output.
struct StreamRead<'a> {
    relay: &'a ContractEventRelay,
    attempt_no: u32,
    deliverable: &'a Deliverable,
    ctx: &'a Ctx,
    max_bytes: usize,
    cursor: sse::EventCursor,
    data: Vec<String>,
    data_bytes: usize,
    events: u64,
    /// Events of this attempt relayed by an earlier read (an instance that died mid-stream).
    already_relayed: u64,
    http_status: u16,
    /// The worker's `metadata`, kept with the assembled deliverable.
    metadata: Option<Value>,
}

impl StreamRead<'_> {
    async fn read(&mut self, response: reqwest::Response) -> Connection {
        if !sse::is_event_stream(&response) {
            return Connection::Ended(Box::new(failed(
                FailureKind::BadResponse,
                "stream_not_sse",
                "the worker's stream URL did not answer text/event-stream",
            )));
        }
        let mut events = sse::bounded_events(response, self.max_bytes);
        while let Some(next) = events.next().await {
            let event = match next {
                Ok(event) => event,
                Err(error) => return Connection::Broken(error),
            };
            match self.cursor.admit(&event) {
                sse::Admission::New => {}
                sse::Admission::Skip => continue,
                sse::Admission::Diverged(why) => {
                    return Connection::Ended(Box::new(failed(
                        FailureKind::BadResponse,
                        sse::STREAM_DIVERGED,
                        why,
                    )));
                }
            }
            let name = sse::event_name(&event);
            self.events += 1;
            if self.events > self.already_relayed {
                // The event's own id only: an id-less event has none, whatever came before it.
                let upstream_id = event.id.as_deref().filter(|id| !id.is_empty());
                let details = json!({
                    "attempt_no": self.attempt_no,
                    "seq": self.events,
                    "upstream_event": name,
                    "upstream_id": upstream_id,
                    "data": sse::withheld(&event.data),
                });
                self.relay
                    .relay(EventKind::WorkerStreamEvent, details)
                    .await;
            }
            match name.as_str() {
                STREAM_END_EVENT => return Connection::Ended(Box::new(self.assembled())),
                STREAM_ERROR_EVENT => {
                    let error = serde_json::from_str::<Value>(&event.data).unwrap_or(Value::Null);
                    let text = |field: &str, fallback: &str, max: usize| -> String {
                        error
                            .get(field)
                            .and_then(Value::as_str)
                            .unwrap_or(fallback)
                            .chars()
                            .take(max)
                            .collect()
                    };
                    return Connection::Ended(Box::new(WorkerAnswer::Failed {
                        kind: FailureKind::Reported,
                        http_status: Some(self.http_status),
                        code: text("code", "stream_error", 64),
                        message: text("message", "the worker's stream ended with an error", 500),
                        details: error.get("details").cloned(),
                    }));
                }
                _ => {
                    self.data_bytes = self.data_bytes.saturating_add(event.data.len());
                    if self.data_bytes > self.max_bytes {
                        return Connection::Ended(Box::new(failed(
                            FailureKind::BadResponse,
                            "stream_too_large",
                            format!("the stream carried more than {} bytes", self.max_bytes),
                        )));
                    }
                    self.data.push(event.data);
                }
            }
        }
        Connection::Broken("the stream closed before its `done` event".to_owned())
    }

    /// The deliverable with the assembled output in place of the stream.
    fn assembled(&mut self) -> WorkerAnswer {
        self.assembled_as(self.deliverable.status())
    }

    /// A lost stream of a contract metered by event, with events read: the events so far,
    /// delivered as a partial (see the module docs). `None` for any other contract.
    fn cut_short(&mut self) -> Option<WorkerAnswer> {
        let by_event = self
            .ctx
            .terms
            .metering()
            .is_some_and(|metering| metering.unit() == MeterUnit::Event);
        (by_event && !self.data.is_empty()).then(|| self.assembled_as(DeliveryStatus::Partial))
    }

    fn assembled_as(&mut self, status: DeliveryStatus) -> WorkerAnswer {
        let output = assemble_stream(&self.data, self.ctx.terms.task().output_schemas());
        match Deliverable::new(
            status,
            output,
            self.deliverable.evidence_inline().to_vec(),
            self.deliverable.evidence_refs().to_vec(),
        ) {
            Ok(deliverable) => WorkerAnswer::Delivered {
                deliverable,
                http_status: self.http_status,
                metadata: self.metadata.clone(),
            },
            Err(error) => failed(
                FailureKind::BadResponse,
                "invalid_deliverable",
                error.to_string(),
            ),
        }
    }
}

impl HireService {
    /// `answer` with its stream output read to the end and replaced by the assembled output;
    /// any other answer as it is. `deadline` is the attempt's SLA deadline.
    pub(super) async fn collect_stream(
        &self,
        ctx: &Ctx,
        answer: WorkerAnswer,
        attempt_no: u32,
        worker_actor: &Actor,
        deadline: Instant,
    ) -> WorkerAnswer {
        let WorkerAnswer::Delivered {
            deliverable,
            http_status,
            metadata,
        } = &answer
        else {
            return answer;
        };
        let Output::Stream { url, .. } = deliverable.output() else {
            return answer;
        };
        let settings = &self.inner.config.outbound;
        let deadline = deadline.min(Instant::now() + settings.stream_max_duration());
        let relay = ContractEventRelay::new(
            self.inner.store.clone(),
            ctx.contract_id.as_str(),
            &ctx.correlation_id,
            worker_actor.clone(),
            self.inner.clock.clone(),
        );
        let already_relayed = self.relayed_stream_events(ctx, attempt_no).await;
        let mut read = StreamRead {
            relay: &relay,
            attempt_no,
            deliverable,
            ctx,
            max_bytes: settings.stream_max_bytes,
            cursor: sse::EventCursor::default(),
            data: Vec::new(),
            data_bytes: 0,
            events: 0,
            already_relayed,
            http_status: *http_status,
            metadata: metadata.clone(),
        };
        let reading = self.read_stream(&mut read, url, deadline);
        match tokio::time::timeout_at(deadline, reading).await {
            Ok(answer) => answer,
            Err(_) => WorkerAnswer::TimedOut,
        }
    }

    /// How many stream events of attempt `attempt_no` the contract's log already holds.
    async fn relayed_stream_events(&self, ctx: &Ctx, attempt_no: u32) -> u64 {
        let attempt = Value::from(attempt_no);
        match self
            .inner
            .store
            .list_contract_events(ctx.contract_id.as_str(), 0, MAX_LOG_SCAN)
            .await
        {
            Ok(events) => events
                .iter()
                .filter(|e| {
                    e.kind == EventKind::WorkerStreamEvent && e.details["attempt_no"] == attempt
                })
                .count() as u64,
            // Relaying twice is better than not reading the stream.
            Err(_) => 0,
        }
    }

    async fn read_stream(
        &self,
        read: &mut StreamRead<'_>,
        url: &Url,
        deadline: Instant,
    ) -> WorkerAnswer {
        let client = &self.inner.outbound;
        let remaining = || deadline.saturating_duration_since(Instant::now());
        // The worker checks these as it does on `/execute` and polls.
        let bearer = format!("Bearer {}", read.ctx.contract_token);
        let headers = [
            ("Authorization", bearer.as_str()),
            ("X-Contract-ID", read.ctx.contract_id.as_str()),
        ];
        let mut reconnects = 0_u32;
        let mut connection =
            match sse::reconnect(client, url, None, Some(remaining()), &headers).await {
                Ok(response) => read.read(response).await,
                Err(reason) => {
                    return failed(
                        FailureKind::Unreachable,
                        "stream_unreachable",
                        format!("the worker's stream could not be opened: {reason}"),
                    );
                }
            };
        loop {
            let reason = match connection {
                Connection::Ended(answer) => return *answer,
                Connection::Broken(reason) => reason,
            };
            if reconnects >= MAX_RECONNECTS {
                if let Some(partial) = read.cut_short() {
                    tracing::info!(contract_id = %read.ctx.contract_id, events = read.data.len(), reason, "stream output lost; the relayed events are delivered as a partial");
                    return partial;
                }
                return failed(
                    FailureKind::Unreachable,
                    "stream_lost",
                    format!("the worker's stream broke {reconnects} times: {reason}"),
                );
            }
            reconnects += 1;
            // Without an id to resume from, the worker replays the stream from the start and
            // the cursor skips what was relayed.
            let last_id = read.cursor.resume().map(str::to_owned);
            tracing::info!(contract_id = %read.ctx.contract_id, last_event_id = ?last_id, reconnects, reason, "stream output broke; resuming");
            read.relay
                .relay(
                    EventKind::WorkerStreamResumed,
                    json!({
                        "attempt_no": read.attempt_no,
                        "last_event_id": last_id,
                        "replay_from": if last_id.is_some() { "last_event_id" } else { "start" },
                        "reconnects": reconnects,
                    }),
                )
                .await;
            tokio::time::sleep(RECONNECT_PAUSE).await;
            connection =
                match sse::reconnect(client, url, last_id.as_deref(), Some(remaining()), &headers)
                    .await
                {
                    Ok(response) => read.read(response).await,
                    Err(reason) => Connection::Broken(reason),
                };
        }
    }
}
