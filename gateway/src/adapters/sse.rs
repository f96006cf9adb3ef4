//! Reading a worker's Server-Sent Events, shared by the Superwire adapter (its run events) and
//! HIRE `stream` outputs ([`crate::hire`]'s `stream` step): one size-bounded event reader, one
//! resume request with `Last-Event-ID`, one replay filter, and the withheld summary of an
//! event that is relayed to the seeker (nothing unpaid is shown: the seeker learns that an
//! event came, its size and digest, not its content).

use std::time::Duration;

use eventsource_stream::{Event, Eventsource as _};
use futures::{Stream, StreamExt as _};
use hiregate_contracts::canonical::Digest;
use reqwest::{Method, Response, header};
use serde_json::{Value, json};
use url::Url;

use crate::outbound::OutboundClient;

/// The events of `response`'s SSE body, refusing the stream once it carried more than
/// `max_bytes` in total (an error item, after which the stream should be dropped).
pub fn bounded_events(
    response: Response,
    max_bytes: usize,
) -> impl Stream<Item = Result<Event, String>> + Send + Unpin {
    let mut read_bytes = 0_usize;
    response
        .bytes_stream()
        .map(move |chunk| {
            let chunk = chunk.map_err(|e| e.to_string())?;
            read_bytes = read_bytes.saturating_add(chunk.len());
            if read_bytes > max_bytes {
                return Err(format!("stream exceeds {max_bytes} bytes"));
            }
            Ok(chunk)
        })
        .eventsource()
        .map(|next| next.map_err(|e| e.to_string()))
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

/// The last event id seen on a stream, and the filter that drops events a resumed stream
/// replays. Ids are compared as numbers when both are numbers; other ids cannot be ordered, so
/// only a repeat of the very last id is dropped.
#[derive(Debug, Clone, Default)]
pub struct EventCursor {
    last_id: Option<String>,
}

impl EventCursor {
    /// The id to send as `Last-Event-ID` on a reconnect, if the worker sent any.
    #[must_use]
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Whether an event with `id` is new (and then remember it). An empty id (the worker
    /// never sent one) is always new.
    pub fn admit(&mut self, id: &str) -> bool {
        let id = id.trim();
        if id.is_empty() {
            return true;
        }
        if let Some(last) = &self.last_id {
            let replayed = match (id.parse::<u64>(), last.parse::<u64>()) {
                (Ok(id), Ok(last)) => id <= last,
                _ => id == last,
            };
            if replayed {
                return false;
            }
        }
        self.last_id = Some(id.chars().take(256).collect());
        true
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
pub fn event_name(event: &Event) -> String {
    if event.event.is_empty() {
        "message".to_owned()
    } else {
        event.event.chars().take(64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_are_dropped_and_ids_remembered() {
        let mut cursor = EventCursor::default();
        assert!(cursor.admit(""));
        assert_eq!(cursor.last_id(), None);
        assert!(cursor.admit("1"));
        assert!(cursor.admit("2"));
        assert!(!cursor.admit("2"));
        assert!(!cursor.admit("1"));
        assert_eq!(cursor.last_id(), Some("2"));
        assert!(cursor.admit("10"));
        assert!(cursor.admit("evt-a"));
        assert!(!cursor.admit("evt-a"));
        assert!(cursor.admit("evt-b"));
    }
}
