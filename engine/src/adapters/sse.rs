//! Reading a worker's Server-Sent Events, shared by the Superwire adapter (its run events) and
//! HIRE `stream` outputs ([`crate::hire`]'s `stream` step): one size-bounded event reader, one
//! resume request with `Last-Event-ID`, one replay filter ([`EventCursor`]), and the withheld
//! summary of an event that is relayed to the seeker (nothing unpaid is shown: the seeker learns
//! that an event came, its size and digest, not its content).
//!
//! The reader is our own rather than a generic SSE parser because deduping needs one thing the
//! WHATWG event model hides: whether an event carried its own `id` field. In that model every
//! event reports the stream's *last* event id, so an id-less event after `id: 7` looks like a
//! second event 7, and a replay filter would drop it.

use std::time::Duration;

use futures::{Stream, StreamExt as _};
use hiregate_contracts::canonical::Digest;
use reqwest::{Method, Response, header};
use serde_json::{Value, json};
use url::Url;

use crate::outbound::OutboundClient;

/// Code of an attempt whose resumed stream replayed other events than the ones relayed.
pub const STREAM_DIVERGED: &str = "stream_diverged";
/// Longest event id kept (what a reconnect sends back as `Last-Event-ID`).
const MAX_ID_CHARS: usize = 256;
/// UTF-8 byte-order mark, which may open a stream and is not part of its first line.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One block of an SSE stream, read by the WHATWG rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event` field (empty when the block had none).
    pub event: String,
    /// The `data` lines, joined by newlines.
    pub data: String,
    /// This block's own `id` field, when it had one (an empty one resets the stream's last
    /// event id). Never inherited from an earlier block: [`EventCursor`] keeps the last id.
    pub id: Option<String>,
    /// Whether the block is an event. A block without `data` dispatches nothing, yet its `id`
    /// still moves the last event id, so such blocks are read too (and never relayed).
    pub dispatched: bool,
}

/// An incremental SSE parser: feed it chunks as they come; it answers the blocks they complete.
/// An unterminated block at the end of the stream is never answered (the spec discards it).
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being read (lines are split on bytes: CR and LF never occur inside
    /// a UTF-8 sequence, so a chunk boundary inside a character is harmless).
    line: Vec<u8>,
    /// The last chunk ended in CR: a LF opening the next one belongs to the same line end.
    after_cr: bool,
    /// Whether the stream's first bytes were looked at for a byte-order mark.
    started: bool,
    block: SseEvent,
}

impl SseParser {
    /// The blocks `chunk` completes, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        if chunk.is_empty() {
            return Vec::new();
        }
        if !self.started {
            self.line.extend_from_slice(chunk);
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                // Too short yet to tell a byte-order mark from text.
                return Vec::new();
            }
            self.started = true;
            let pending = std::mem::take(&mut self.line);
            return self.split_lines(pending.strip_prefix(BOM).unwrap_or(&pending));
        }
        let chunk = if std::mem::take(&mut self.after_cr) {
            chunk.strip_prefix(b"\n").unwrap_or(chunk)
        } else {
            chunk
        };
        self.split_lines(chunk)
    }

    fn split_lines(&mut self, mut rest: &[u8]) -> Vec<SseEvent> {
        let mut blocks = Vec::new();
        while let Some(end) = rest.iter().position(|b| matches!(b, b'\r' | b'\n')) {
            self.line.extend_from_slice(&rest[..end]);
            let line = std::mem::take(&mut self.line);
            if let Some(block) = self.line_ended(&String::from_utf8_lossy(&line)) {
                blocks.push(block);
            }
            let cr = rest[end] == b'\r';
            if cr && end + 1 == rest.len() {
                self.after_cr = true;
            }
            let crlf = cr && rest.get(end + 1) == Some(&b'\n');
            rest = &rest[end + if crlf { 2 } else { 1 }..];
        }
        self.line.extend_from_slice(rest);
        blocks
    }

    fn line_ended(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let mut block = std::mem::take(&mut self.block);
            if block.data.is_empty() {
                // Nothing to dispatch; only an `id` field is worth reporting.
                block.event.clear();
                return block.id.is_some().then_some(block);
            }
            block.data.pop();
            block.dispatched = true;
            return Some(block);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.block.event),
            "data" => {
                self.block.data.push_str(value);
                self.block.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                self.block.id = Some(value.chars().take(MAX_ID_CHARS).collect());
            }
            // `retry` is the worker's wish for the reconnection delay; the gateway keeps its
            // own pacing and reconnect budget.
            _ => {}
        }
        None
    }
}

/// The blocks of `response`'s SSE body, refusing the stream once it carried more than
/// `max_bytes` in total (an error item, after which the stream should be dropped).
pub fn bounded_events(
    response: Response,
    max_bytes: usize,
) -> impl Stream<Item = Result<SseEvent, String>> + Send + Unpin {
    let mut read_bytes = 0_usize;
    let mut parser = SseParser::default();
    response
        .bytes_stream()
        .map(move |chunk| {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(error) => return vec![Err(error.to_string())],
            };
            read_bytes = read_bytes.saturating_add(chunk.len());
            if read_bytes > max_bytes {
                return vec![Err(format!("stream exceeds {max_bytes} bytes"))];
            }
            parser.feed(&chunk).into_iter().map(Ok).collect()
        })
        .flat_map(futures::stream::iter)
}

/// `GET url` as an event stream with `headers`, resuming after `last_event_id` when there is
/// one; `timeout` bounds the whole connection. A non-2xx answer is an error.
pub async fn reconnect(
    client: &OutboundClient,
    url: &Url,
    last_event_id: Option<&str>,
    timeout: Option<Duration>,
    headers: &[(&str, &str)],
) -> Result<Response, String> {
    let mut builder = client
        .request(Method::GET, url)
        .map_err(|e| e.to_string())?
        .header(header::ACCEPT, "text/event-stream");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    if let Some(timeout) = timeout {
        builder = builder.timeout(timeout);
    }
    if let Some(last) = last_event_id {
        builder = builder.header("Last-Event-ID", last);
    }
    let response = client.send(builder).await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the stream answered {}", response.status()));
    }
    Ok(response)
}

/// Whether `response` declares an SSE body.
#[must_use]
pub fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// What [`EventCursor::admit`] makes of a block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// A new event: relay it.
    New,
    /// Not to relay: a replay of an event already relayed, or a block that is no event.
    Skip,
    /// A resumed stream replays something other than what was relayed before the cut: its
    /// content cannot be trusted to continue the relayed one (the message says where).
    Diverged(String),
}

/// What was relayed of one event, to recognise its replay.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Relayed {
    name: String,
    digest: Digest,
}

impl Relayed {
    fn of(event: &SseEvent) -> Self {
        Self {
            name: event_name(event),
            digest: Digest::of_bytes(event.data.as_bytes()),
        }
    }
}

/// Where a stream is, across the reconnects of one read, so each of its events is relayed
/// exactly once.
///
/// A reconnect sends the stream's last event id (the WHATWG "last event ID string": the last
/// `id` field seen, an empty one clearing it) as `Last-Event-ID`; the worker then resumes
/// after that event. With no id to send, an SSE server can only replay the stream from the
/// start. Either way the events relayed after the resume point (all of them, for a stream
/// without ids) are expected first, in order, and are skipped by position; each skipped
/// event's name and data digest must be the relayed one's, else the stream diverged. Events
/// with their own id at or before the last id (compared as numbers when both are; other ids
/// cannot be ordered, so only a repeat of the last id) are replays too: a worker may resume
/// from earlier than asked.
#[derive(Debug, Clone, Default)]
pub struct EventCursor {
    last_id: Option<String>,
    /// Every event let through, in order.
    relayed: Vec<Relayed>,
    /// Index in `relayed` where a resumed stream restarts: just after the event that set
    /// `last_id`, or 0 when there is no last id.
    resume_at: usize,
    /// Index in `relayed` of the next event the current connection is expected to replay
    /// (`relayed.len()` when none is).
    replayed: usize,
}

impl EventCursor {
    /// The id to send as `Last-Event-ID` on a reconnect, if the worker sent any.
    #[must_use]
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Events relayed so far.
    #[must_use]
    pub fn relayed(&self) -> usize {
        self.relayed.len()
    }

    /// A new connection is about to resume the stream: expect the events relayed after the
    /// resume point again. Answers the `Last-Event-ID` to send with it.
    pub fn resume(&mut self) -> Option<&str> {
        self.replayed = self.resume_at;
        self.last_id()
    }

    /// Whether `block` is new (then it is counted as relayed), a replay, or the proof that
    /// the stream diverged.
    pub fn admit(&mut self, block: &SseEvent) -> Admission {
        let own_id = block.id.as_deref();
        let replayed_by_id = own_id.is_some_and(|id| self.is_replayed_id(id));
        if !block.dispatched {
            // A bare `id` line block: it moves the resume point unless it is a replay.
            if let Some(id) = own_id
                && self.replayed == self.relayed.len()
                && !replayed_by_id
            {
                self.set_last_id(id);
            }
            return Admission::Skip;
        }
        let seen = Relayed::of(block);
        if let Some(expected) = self.relayed.get(self.replayed) {
            if *expected == seen {
                self.replayed += 1;
                return Admission::Skip;
            }
            if replayed_by_id {
                return Admission::Skip;
            }
            return Admission::Diverged(format!(
                "the resumed stream sent `{}` ({}) where event {} of the stream was `{}` ({})",
                seen.name,
                seen.digest,
                self.replayed + 1,
                expected.name,
                expected.digest,
            ));
        }
        if replayed_by_id {
            return Admission::Skip;
        }
        self.relayed.push(seen);
        self.replayed = self.relayed.len();
        if let Some(id) = own_id {
            self.set_last_id(id);
        }
        Admission::New
    }

    fn set_last_id(&mut self, id: &str) {
        if id.is_empty() {
            self.last_id = None;
            self.resume_at = 0;
        } else {
            self.last_id = Some(id.to_owned());
            self.resume_at = self.relayed.len();
        }
    }

    fn is_replayed_id(&self, id: &str) -> bool {
        let Some(last) = &self.last_id else {
            return false;
        };
        match (id.trim().parse::<u64>(), last.trim().parse::<u64>()) {
            (Ok(id), Ok(last)) => id <= last,
            _ => id == last,
        }
    }
}

/// What the seeker's event stream shows of an upstream event's `data` before it is paid for.
#[must_use]
pub fn withheld(data: &str) -> Value {
    json!({
        "withheld": true,
        "bytes": data.len(),
        "digest": Digest::of_bytes(data.as_bytes()).to_string(),
    })
}

/// An upstream event's name, bounded (`message` when it has none).
#[must_use]
pub fn event_name(event: &SseEvent) -> String {
    if event.event.is_empty() {
        "message".to_owned()
    } else {
        event.event.chars().take(64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        chunks.iter().flat_map(|chunk| parser.feed(chunk)).collect()
    }

    fn event(name: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: name.to_owned(),
            data: data.to_owned(),
            id: id.map(str::to_owned),
            dispatched: true,
        }
    }

    #[test]
    fn blocks_are_read_by_the_whatwg_rules() {
        let stream: &[u8] = b"\xEF\xBB\xBF: comment\nevent: a\ndata: 1\ndata:2\nid: 7\n\n\
                              data\r\n\r\nid\rdata:  x\r\rid: 9\n\nid: \0bad\ndata: y\n\n\
                              event: ignored\n\ndata: cut";
        let expected = vec![
            event("a", "1\n2", Some("7")),
            event("", "", None),
            event("", " x", Some("")),
            SseEvent {
                id: Some("9".to_owned()),
                ..SseEvent::default()
            },
            event("", "y", None),
        ];
        assert_eq!(parse(&[stream]), expected);
        // The same bytes in one-byte chunks: CR LF, the byte-order mark and UTF-8 split anyhow.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse(&bytes), expected);
        assert_eq!(
            parse(&[b"data: \xC3", b"\xA9\r", b"\n\r", b"\n"]),
            [event("", "\u{e9}", None)]
        );
    }

    #[test]
    fn an_id_less_event_after_an_id_is_new_and_resumes_after_that_id() {
        let mut cursor = EventCursor::default();
        assert_eq!(cursor.admit(&event("a", "1", Some("1"))), Admission::New);
        // In the WHATWG model this event's lastEventId is still 1; it is a new event all the
        // same.
        assert_eq!(cursor.admit(&event("b", "2", None)), Admission::New);
        assert_eq!(cursor.admit(&event("b", "2", None)), Admission::New);
        assert_eq!(cursor.last_id(), Some("1"));
        // The worker resumes after 1: the two id-less events come again first.
        assert_eq!(cursor.resume(), Some("1"));
        assert_eq!(cursor.admit(&event("b", "2", None)), Admission::Skip);
        assert_eq!(cursor.admit(&event("b", "2", None)), Admission::Skip);
        assert_eq!(cursor.admit(&event("c", "3", Some("2"))), Admission::New);
        assert_eq!(cursor.relayed(), 4);
        // A worker replaying from before the last id: dropped by id.
        assert_eq!(cursor.resume(), Some("2"));
        assert_eq!(cursor.admit(&event("a", "1", Some("1"))), Admission::Skip);
        assert_eq!(cursor.admit(&event("c", "3", Some("2"))), Admission::Skip);
        assert_eq!(cursor.admit(&event("d", "4", Some("3"))), Admission::New);
    }

    #[test]
    fn a_stream_without_ids_is_resumed_from_its_start_by_position() {
        let mut cursor = EventCursor::default();
        for data in ["1", "2"] {
            assert_eq!(cursor.admit(&event("", data, None)), Admission::New);
        }
        assert_eq!(cursor.resume(), None);
        for data in ["1", "2"] {
            assert_eq!(cursor.admit(&event("", data, None)), Admission::Skip);
        }
        assert_eq!(cursor.admit(&event("", "3", None)), Admission::New);
        // Broken again before the replay caught up, then replayed once more from the start.
        assert_eq!(cursor.resume(), None);
        assert_eq!(cursor.admit(&event("", "1", None)), Admission::Skip);
        assert_eq!(cursor.resume(), None);
        for data in ["1", "2", "3"] {
            assert_eq!(cursor.admit(&event("", data, None)), Admission::Skip);
        }
        assert_eq!(cursor.admit(&event("", "4", None)), Admission::New);
        assert_eq!(cursor.relayed(), 4);
    }

    #[test]
    fn a_replay_unlike_what_was_relayed_diverges() {
        let mut cursor = EventCursor::default();
        assert_eq!(cursor.admit(&event("a", "1", None)), Admission::New);
        assert_eq!(cursor.admit(&event("b", "2", None)), Admission::New);
        cursor.resume();
        assert_eq!(cursor.admit(&event("a", "1", None)), Admission::Skip);
        let Admission::Diverged(why) = cursor.admit(&event("b", "two", None)) else {
            panic!("other data at event 2");
        };
        assert!(why.contains("event 2"), "{why}");
        cursor.resume();
        assert!(matches!(
            cursor.admit(&event("x", "1", None)),
            Admission::Diverged(_)
        ));
        // Resuming after an id, the worker skipping the id-less events relayed after it.
        let mut cursor = EventCursor::default();
        assert_eq!(cursor.admit(&event("a", "1", Some("1"))), Admission::New);
        assert_eq!(cursor.admit(&event("b", "2", None)), Admission::New);
        assert_eq!(cursor.resume(), Some("1"));
        assert!(matches!(
            cursor.admit(&event("c", "3", Some("2"))),
            Admission::Diverged(_)
        ));
    }

    #[test]
    fn ids_order_replays_and_an_empty_id_resets_the_resume_point() {
        let mut cursor = EventCursor::default();
        for (data, id) in [("1", "1"), ("2", "2")] {
            assert_eq!(cursor.admit(&event("", data, Some(id))), Admission::New);
        }
        assert_eq!(cursor.admit(&event("", "2", Some("2"))), Admission::Skip);
        assert_eq!(cursor.admit(&event("", "1", Some("1"))), Admission::Skip);
        assert_eq!(cursor.admit(&event("", "10", Some("10"))), Admission::New);
        assert_eq!(cursor.admit(&event("", "a", Some("evt-a"))), Admission::New);
        assert_eq!(
            cursor.admit(&event("", "a", Some("evt-a"))),
            Admission::Skip
        );
        assert_eq!(cursor.admit(&event("", "b", Some("evt-b"))), Admission::New);
        // A bare id moves the resume point; an empty one clears the last id.
        let bare = |id: &str| SseEvent {
            id: Some(id.to_owned()),
            ..SseEvent::default()
        };
        assert_eq!(cursor.admit(&bare("evt-c")), Admission::Skip);
        assert_eq!(cursor.resume(), Some("evt-c"));
        assert_eq!(cursor.admit(&event("", "c", None)), Admission::New);
        assert_eq!(cursor.admit(&event("", "d", Some(""))), Admission::New);
        assert_eq!(cursor.resume(), None);
        for data in ["1", "2", "10", "a", "b", "c", "d"] {
            assert_eq!(cursor.admit(&event("", data, None)), Admission::Skip);
        }
        assert_eq!(cursor.admit(&event("", "e", None)), Admission::New);
    }
}
