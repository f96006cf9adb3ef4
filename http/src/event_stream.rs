//! The SSE stream of a contract's log: [`event_stream`] turns it into the body of
//! `GET /v1/contracts/{id}/events`: replay after a cursor, then follow live events from the
//! store's [`EventBus`](hiregate_store::bus::EventBus), ids = per-contract `seq` (gap-free, so a
//! resumed stream has no gap and no duplicate), and end once the contract is terminal and its
//! log has been sent.

use std::{collections::VecDeque, convert::Infallible, sync::Arc, time::Duration};

use axum::response::sse::Event;
use futures::Stream;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use hiregate_store::{Store, StoreError, bus::LiveEvent};

/// Timing of an event stream.
#[derive(Debug, Clone, Copy)]
pub struct StreamTiming {
    /// Database check period (events from other instances, lagged receivers).
    pub poll_interval: Duration,
    /// Events per database read.
    pub replay_batch: u32,
}

/// What the stream does next.
enum Step {
    /// Read the database after the cursor (and close if the contract is terminal and caught up).
    CatchUp,
    /// Wait for a live event or the poll tick.
    Wait,
    /// Done.
    Closed,
}

struct StreamState {
    store: Store,
    contract_id: String,
    cursor: i64,
    buffer: VecDeque<LiveEvent>,
    live: broadcast::Receiver<Arc<LiveEvent>>,
    timing: StreamTiming,
    shutdown: CancellationToken,
    next: Step,
}

/// The SSE events of `contract_id` after `after_seq`: replayed from the store, then live.
///
/// `live` must be subscribed before the caller checked anything about the contract, so no
/// event can fall between the replay and the subscription. A store error ends the stream (the
/// client reconnects with `Last-Event-ID` and loses nothing).
pub fn event_stream(
    store: Store,
    contract_id: String,
    after_seq: i64,
    live: broadcast::Receiver<Arc<LiveEvent>>,
    timing: StreamTiming,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    let state = StreamState {
        store,
        contract_id,
        cursor: after_seq,
        buffer: VecDeque::new(),
        live,
        timing,
        shutdown,
        next: Step::CatchUp,
    };
    futures::stream::unfold(state, |mut state| async move {
        let event = state.next_event().await?;
        Some((Ok(sse_event(&event)), state))
    })
}

fn sse_event(event: &LiveEvent) -> Event {
    let data = serde_json::to_string(event).unwrap_or_else(|_| "{}".to_owned());
    Event::default()
        .id(event.seq.to_string())
        .event(event.kind.as_str())
        .data(data)
}

impl StreamState {
    async fn next_event(&mut self) -> Option<LiveEvent> {
        loop {
            if let Some(event) = self.buffer.pop_front() {
                self.cursor = event.seq;
                return Some(event);
            }
            match self.next {
                Step::Closed => return None,
                Step::CatchUp => match self.catch_up().await {
                    Ok(step) => self.next = step,
                    Err(error) => {
                        tracing::warn!(contract_id = %self.contract_id, %error, "event stream ends: store error");
                        return None;
                    }
                },
                Step::Wait => self.next = self.wait().await,
            }
        }
    }

    /// Fill the buffer from the database. The state is read before the events, so when it is
    /// terminal every event up to the terminal one is already visible to the read that follows.
    async fn catch_up(&mut self) -> Result<Step, StoreError> {
        let Some(contract) = self.store.get_contract(&self.contract_id).await? else {
            return Ok(Step::Closed);
        };
        let events = self
            .store
            .list_contract_events(&self.contract_id, self.cursor, self.timing.replay_batch)
            .await?;
        if !events.is_empty() {
            let full_batch = events.len() >= self.timing.replay_batch as usize;
            self.buffer.extend(events.into_iter().map(LiveEvent::from));
            // A full batch may have more behind it; otherwise the contract's state decides.
            return Ok(if full_batch || contract.state.is_terminal() {
                Step::CatchUp
            } else {
                Step::Wait
            });
        }
        Ok(if contract.state.is_terminal() {
            Step::Closed
        } else {
            Step::Wait
        })
    }

    async fn wait(&mut self) -> Step {
        let poll = tokio::time::sleep(self.timing.poll_interval);
        tokio::pin!(poll);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return Step::Closed,
                () = &mut poll => return Step::CatchUp,
                received = self.live.recv() => match received {
                    Ok(event) if event.contract_id.as_str() == self.contract_id => {
                        let expected = self.cursor + 1;
                        if event.seq < expected {
                            continue;
                        }
                        if event.seq > expected {
                            // Missed one (written elsewhere or not announced): the log decides.
                            return Step::CatchUp;
                        }
                        let terminal = event.is_terminal();
                        self.buffer.push_back(LiveEvent::clone(&event));
                        return if terminal { Step::CatchUp } else { Step::Wait };
                    }
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return Step::CatchUp,
                    Err(broadcast::error::RecvError::Closed) => {
                        // Cannot happen while the store lives; keep the database poll going.
                        poll.as_mut().await;
                        return Step::CatchUp;
                    }
                },
            }
        }
    }
}
