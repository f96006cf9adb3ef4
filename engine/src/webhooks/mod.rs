//! Seeker webhooks: every event of a contract that names a `webhook_url` is POSTed there,
//! signed with the Standard Webhooks scheme under the seeker's `whsec_` secret.
//!
//! | module | role |
//! |---|---|
//! | this module | secrets ([`seeker_secret`], [`rotate_secret`]), the message body ([`message_body`]) and id ([`message_id`]) |
//! | [`delivery`] | the delivery loop: claim due deliveries with a lease, send, record the outcome |
//! | [`retry`] | exponential backoff with jitter, `Retry-After` within a cap |
//!
//! Flow: appending a contract event inserts its `webhook_delivery` row in the same transaction
//! (a database trigger, see `store::webhooks`), so a delivery exists exactly once per event and
//! survives crashes. [`delivery::run_webhook_delivery`] (one per instance; instances share the
//! work through leases) claims due rows, signs `{type, timestamp, data}` with the seeker's
//! secret as it is at that moment, and sends it through the SSRF-filtering
//! [`OutboundClient`](crate::outbound::OutboundClient). 2xx → delivered; 410 → the endpoint is
//! disabled and the delivery parked; anything else → retried with backoff until
//! `webhooks.max_attempts`, then a dead letter. Dead letters are listed and redelivered through
//! `/v1/webhooks/dead-letters` (see `hiregate_http::webhooks`); each try is logged and shown
//! by `GET /v1/contracts/{id}/webhook-deliveries`.
//!
//! Secrets: one per seeker. `POST /v1/webhooks/secret` creates or rotates it and is the only
//! answer that shows it. A seeker who never asked gets one created at the first delivery (so
//! nothing goes out unsigned) and reads it by rotating.

pub mod delivery;
pub mod retry;

use chrono::{DateTime, Utc};
use hiregate_contracts::{id::PrincipalId, webhook::WebhookSecret};
use serde_json::{Value, json};

use hiregate_store::{Store, StoreError, WebhookSecretRecord, bus::LiveEvent};

/// A seeker's secret could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SecretLoadError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored text is not a valid `whsec_` secret (manual edit or a bug).
    #[error("stored webhook secret of seeker {seeker_id} is invalid")]
    Invalid {
        /// The seeker.
        seeker_id: String,
    },
}

/// The seeker's signing secret, created if it has none.
pub async fn seeker_secret(
    store: &Store,
    seeker_id: &PrincipalId,
    now: DateTime<Utc>,
) -> Result<WebhookSecret, SecretLoadError> {
    let candidate = WebhookSecret::generate().expose_whsec();
    let record = store
        .get_or_create_webhook_secret(seeker_id, &candidate, now)
        .await?;
    record.secret.parse().map_err(|_| SecretLoadError::Invalid {
        seeker_id: seeker_id.to_string(),
    })
}

/// Replace the seeker's secret with a new random one; the record holds the only copy the
/// seeker will ever be shown.
pub async fn rotate_secret(
    store: &Store,
    seeker_id: &PrincipalId,
    now: DateTime<Utc>,
) -> Result<WebhookSecretRecord, StoreError> {
    let secret = WebhookSecret::generate().expose_whsec();
    store.rotate_webhook_secret(seeker_id, &secret, now).await
}

/// The `webhook-id` of the delivery of event `event_id`: the same on every try and redelivery.
pub fn message_id(event_id: i64) -> String {
    format!("whd_{event_id}")
}

/// Parse a [`message_id`] back (path parameters); anything else is `None`.
pub fn parse_message_id(raw: &str) -> Option<i64> {
    raw.strip_prefix("whd_")?
        .parse()
        .ok()
        .filter(|id: &i64| *id > 0)
}

/// The JSON body of a webhook: Standard Webhooks' `{type, timestamp, data}` with the public
/// event as `data` (no secrets, no payment payloads), and the hire's `correlation_id` (also
/// sent as the `X-Correlation-ID` header) so a receiver can tie it to its own proposal.
pub fn message_body(event: &LiveEvent, correlation_id: &str) -> Value {
    json!({
        "type": format!("contract.{}", event.kind),
        "timestamp": event.at,
        "correlation_id": correlation_id,
        "data": event,
    })
}
