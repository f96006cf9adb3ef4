//! The webhook delivery loop: claim due deliveries with a lease, send them concurrently,
//! record each outcome (only while still holding the lease).
//!
//! Several instances run this loop on one database; the lease decides who sends a given try.
//! A crashed instance's leases run out (`webhooks.lease_ms`) and another instance retries;
//! the receiver may then see the same `webhook-id` twice, which is what Standard Webhooks
//! ids are for (at-least-once delivery, receivers dedupe by id).

use std::time::{Duration, Instant};

use reqwest::{
    Method,
    header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER},
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use url::Url;

use super::{message_body, message_id, retry::next_delay, seeker_secret};
use crate::{clock::Clock, outbound::OutboundClient, settings::WebhookSettings};
use hiregate_store::{
    ClaimedDelivery, DeliveryAttemptRecord, DeliveryFinish, Store, StoreError, bus::LiveEvent,
};

/// What the loop needs. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WebhookDelivery {
    store: Store,
    outbound: OutboundClient,
    settings: WebhookSettings,
    clock: Clock,
    owner: String,
}

impl WebhookDelivery {
    /// A delivery worker with a fresh lease-owner id, leasing and scheduling retries by `clock`.
    pub fn new(
        store: Store,
        outbound: OutboundClient,
        settings: WebhookSettings,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            outbound,
            settings,
            clock,
            owner: format!("webhooks-{}", ulid::Ulid::new()),
        }
    }

    /// Claim and send one batch; returns how many deliveries were claimed.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        let claimed = self
            .store
            .claim_webhook_deliveries(
                &self.owner,
                self.clock.now(),
                self.settings.lease(),
                self.settings.batch_size,
            )
            .await?;
        let count = claimed.len();
        futures::future::join_all(claimed.into_iter().map(|d| self.deliver(d))).await;
        Ok(count)
    }

    async fn deliver(&self, delivery: ClaimedDelivery) {
        let event_id = delivery.event_id;
        let contract_id = delivery.contract_id.clone();
        if let Err(error) = self.try_deliver(delivery).await {
            // The lease runs out and the delivery is tried again; nothing is lost.
            tracing::warn!(event_id, %contract_id, %error, "webhook delivery not recorded");
        }
    }

    async fn try_deliver(&self, delivery: ClaimedDelivery) -> Result<(), StoreError> {
        let now = self.clock.now();
        if delivery.endpoint_disabled {
            self.store
                .skip_webhook_delivery(
                    delivery.event_id,
                    &self.owner,
                    "endpoint disabled: it answered 410 Gone",
                    now,
                )
                .await?;
            return Ok(());
        }
        let started = Instant::now();
        let sent = self.send(&delivery).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let finished_at = self.clock.now();
        let (http_status, error, finish) = match sent {
            Ok(Sent { status, .. }) if (200..300).contains(&status) => {
                (Some(status), None, DeliveryFinish::Delivered)
            }
            Ok(Sent { status: 410, .. }) => (
                Some(410),
                Some("410 Gone: endpoint disabled".to_owned()),
                DeliveryFinish::EndpointGone,
            ),
            Ok(Sent {
                status,
                retry_after,
            }) => (
                Some(status),
                Some(format!("receiver answered {status}")),
                self.retry_or_give_up(&delivery, retry_after.as_deref()),
            ),
            Err(Unsendable::Permanent(reason)) => (None, Some(reason), DeliveryFinish::Dead),
            Err(Unsendable::Transient(reason)) => {
                (None, Some(reason), self.retry_or_give_up(&delivery, None))
            }
        };
        let recorded = self
            .store
            .finish_webhook_attempt(
                delivery.event_id,
                &self.owner,
                &finish,
                &DeliveryAttemptRecord {
                    attempt_no: delivery.total_attempts,
                    at: now,
                    http_status,
                    error,
                    duration_ms,
                },
                finished_at,
            )
            .await?;
        if !recorded {
            tracing::warn!(
                event_id = delivery.event_id,
                contract_id = %delivery.contract_id,
                "webhook lease lost before the outcome was recorded; another instance retries"
            );
        }
        match finish {
            DeliveryFinish::Delivered => {
                tracing::debug!(event_id = delivery.event_id, contract_id = %delivery.contract_id, "webhook delivered")
            }
            DeliveryFinish::EndpointGone => {
                tracing::info!(event_id = delivery.event_id, contract_id = %delivery.contract_id, seeker_id = %delivery.seeker_id, "webhook endpoint answered 410: disabled")
            }
            DeliveryFinish::Dead => {
                tracing::info!(event_id = delivery.event_id, contract_id = %delivery.contract_id, "webhook delivery dead-lettered")
            }
            DeliveryFinish::Retry { at } => {
                tracing::debug!(event_id = delivery.event_id, contract_id = %delivery.contract_id, %at, "webhook delivery will be retried")
            }
        }
        Ok(())
    }

    fn retry_or_give_up(
        &self,
        delivery: &ClaimedDelivery,
        retry_after: Option<&str>,
    ) -> DeliveryFinish {
        if delivery.attempts >= self.settings.max_attempts {
            return DeliveryFinish::Dead;
        }
        let now = self.clock.now();
        let delay = next_delay(&self.settings, delivery.attempts, retry_after, now);
        DeliveryFinish::Retry {
            at: now + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX),
        }
    }

    async fn send(&self, delivery: &ClaimedDelivery) -> Result<Sent, Unsendable> {
        let url = Url::parse(&delivery.url)
            .map_err(|e| Unsendable::Permanent(format!("invalid webhook URL: {e}")))?;
        let secret = seeker_secret(&self.store, &delivery.seeker_id, self.clock.now())
            .await
            .map_err(|e| Unsendable::Transient(format!("signing secret unavailable: {e}")))?;
        let event = LiveEvent {
            contract_id: delivery.contract_id.clone(),
            seq: delivery.seq,
            kind: delivery.kind,
            at: delivery.at,
            actor: delivery.actor.clone(),
            from_state: delivery.from_state,
            to_state: delivery.to_state,
            details: delivery.details.clone(),
        };
        let body = serde_json::to_vec(&message_body(&event, &delivery.correlation_id))
            .map_err(|e| Unsendable::Permanent(format!("cannot encode the event: {e}")))?;
        let headers = secret
            .sign_headers(&message_id(delivery.event_id), self.clock.now(), &body)
            .map_err(|e| Unsendable::Permanent(format!("cannot sign: {e}")))?;
        let request = self
            .outbound
            .request(Method::POST, &url)
            // A refused target (private address, bad scheme) stays refused: no point retrying.
            .map_err(|e| Unsendable::Permanent(e.to_string()))?
            .headers(headers)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(
                crate::adapters::CORRELATION_HEADER,
                delivery.correlation_id.as_str(),
            )
            .timeout(self.settings.request_timeout())
            .body(body);
        let response = self.outbound.send(request).await.map_err(|e| match e {
            crate::outbound::OutboundError::BlockedTarget { .. }
            | crate::outbound::OutboundError::UnsupportedScheme { .. }
            | crate::outbound::OutboundError::InsecureScheme { .. } => {
                Unsendable::Permanent(e.to_string())
            }
            other => Unsendable::Transient(other.to_string()),
        })?;
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(Sent {
            status: response.status().as_u16(),
            retry_after,
        })
    }
}

/// A response arrived.
struct Sent {
    status: u16,
    retry_after: Option<String>,
}

/// No response.
enum Unsendable {
    /// Will never work (bad URL, refused target): dead letter at once.
    Permanent(String),
    /// May work later (connection refused, timeout).
    Transient(String),
}

/// Drop the events `events` holds (lagged ones included) without waiting.
fn drain<T: Clone>(events: &mut broadcast::Receiver<T>) {
    loop {
        match events.try_recv() {
            Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed) => {
                return;
            }
        }
    }
}

/// Run the delivery loop until `shutdown`: drain due deliveries, then sleep until the poll
/// interval passes or an event committed by this instance may have enqueued new ones.
pub async fn run_webhook_delivery(delivery: WebhookDelivery, shutdown: CancellationToken) {
    let mut events = delivery.store.subscribe_events();
    let idle = delivery.settings.poll_interval();
    loop {
        let claimed = tokio::select! {
            () = shutdown.cancelled() => return,
            claimed = delivery.run_once() => claimed,
        };
        match claimed {
            // A full batch suggests more are due: go again at once.
            Ok(n) if n > 0 && n >= delivery.settings.batch_size as usize => continue,
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "webhook delivery round failed"),
        }
        let wait = tokio::time::sleep(idle);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = &mut wait => break,
                received = events.recv() => match received {
                    // No more wake-ups (cannot happen while the store lives): poll only.
                    Err(broadcast::error::RecvError::Closed) => {
                        (&mut wait).await;
                        break;
                    }
                    // An event of a contract that names no webhook URL queued nothing: a round
                    // for it would be a claim (a write) that finds nothing. Without a seeker's
                    // webhook that was every round, about two claims per paid hire.
                    Ok(event) if !delivery.store.may_queue_webhook(&event) => {}
                    // This one may have (lagged: just look). A short pause batches a burst of
                    // events into one round, which looks at every due delivery: the events
                    // that came meanwhile need no round of their own. Taken one round each, a
                    // paid hire's eight events cost eight claims, and under load the loop fell
                    // ever further behind the bus.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        tokio::time::sleep(Duration::from_millis(5).min(idle)).await;
                        drain(&mut events);
                        break;
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_takes_every_held_event_lagged_ones_too() {
        let (sender, mut events) = broadcast::channel(4);
        for n in 0..10 {
            sender.send(n).unwrap();
        }
        // Six were lost to the bound: the receiver first reports the lag, then holds four.
        drain(&mut events);
        assert_eq!(
            events.try_recv(),
            Err(broadcast::error::TryRecvError::Empty)
        );
        // What comes after the drain is seen.
        sender.send(10).unwrap();
        assert_eq!(events.try_recv(), Ok(10));
    }
}
