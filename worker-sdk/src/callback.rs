//! Completion callbacks: when work that was reported `pending` ends, the worker POSTs the
//! final report to the gateway's `/v1/callbacks/{contract_id}`, signed with its per-worker
//! secret (Standard Webhooks, see [`crate::webhook`]).
//!
//! Delivery is best effort with a few retries: the gateway also polls `poll_url`, so a lost
//! callback delays the result but never loses it.

use std::fmt;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::ids::ContractId;
use crate::protocol::{TaskReport, headers};
use crate::webhook::WebhookSecret;

const DEFAULT_MAX_ATTEMPTS: u32 = 5;
const DEFAULT_FIRST_RETRY_DELAY: Duration = Duration::from_secs(1);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(60);
const CALLBACK_TIMEOUT: Duration = Duration::from_secs(10);

/// Body of a completion callback: the final [`TaskReport`] (its fields at top level) plus
/// `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionCallback {
    /// Which end the task reached.
    pub event: CallbackEvent,
    /// The final report, flattened into the body.
    #[serde(flatten)]
    pub report: TaskReport,
}

impl CompletionCallback {
    /// The callback announcing `report`.
    #[must_use]
    pub fn new(report: TaskReport) -> Self {
        let event = match &report {
            TaskReport::Completed(_) => CallbackEvent::TaskCompleted,
            TaskReport::Failed(_) => CallbackEvent::TaskFailed,
            TaskReport::Pending(_) | TaskReport::Partial(_) => CallbackEvent::TaskPartial,
        };
        Self { event, report }
    }
}

/// How a completion callback body is shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallbackShape {
    /// The report with its `status` plus `event` ([`CompletionCallback`]); the default.
    #[default]
    ReportWithEvent,
    /// HIRE's webhook exactly as its document shows it: `event`, `contract_id`, `task_id` and
    /// the report's payload (`output`/`metadata`, or `error`), no `status`. A gateway that only
    /// reads task reports will not understand it; hiregate reads both.
    HireWebhook,
}

impl CallbackShape {
    /// The body of the callback announcing `report` in this shape.
    pub fn body(self, report: TaskReport) -> Result<Vec<u8>, serde_json::Error> {
        let mut value = serde_json::to_value(CompletionCallback::new(report))?;
        if self == Self::HireWebhook
            && let Some(object) = value.as_object_mut()
        {
            object.remove("status");
        }
        serde_json::to_vec(&value)
    }
}

/// The `event` of a completion callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackEvent {
    /// The task completed; the body carries the output.
    TaskCompleted,
    /// The task failed; the body carries the error.
    TaskFailed,
    /// The task ended with only part of its deliverable.
    TaskPartial,
}

/// Where and how the worker calls the gateway back.
#[derive(Clone)]
pub struct CallbackConfig {
    gateway_url: Url,
    secret: WebhookSecret,
    shape: CallbackShape,
    max_attempts: u32,
    first_retry_delay: Duration,
    client: Option<reqwest::Client>,
}

impl CallbackConfig {
    /// Callbacks to `<gateway_url>/v1/callbacks/{contract_id}`, signed with `secret` (the
    /// per-worker secret the gateway issued at registration).
    #[must_use]
    pub fn new(gateway_url: Url, secret: WebhookSecret) -> Self {
        Self {
            gateway_url,
            secret,
            shape: CallbackShape::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            first_retry_delay: DEFAULT_FIRST_RETRY_DELAY,
            client: None,
        }
    }

    /// Shapes the callback bodies (default [`CallbackShape::ReportWithEvent`]).
    #[must_use]
    pub fn shape(mut self, shape: CallbackShape) -> Self {
        self.shape = shape;
        self
    }

    /// Delivery attempts before giving up (at least 1; default 5).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Delay before the first retry; doubles each retry up to a minute (default 1 s).
    #[must_use]
    pub fn first_retry_delay(mut self, delay: Duration) -> Self {
        self.first_retry_delay = delay;
        self
    }

    /// Uses this HTTP client.
    #[must_use]
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    pub(crate) fn into_sender(self) -> Result<CallbackSender, reqwest::Error> {
        let client = match self.client {
            Some(client) => client,
            None => reqwest::Client::builder()
                .timeout(CALLBACK_TIMEOUT)
                .build()?,
        };
        Ok(CallbackSender {
            gateway_url: self.gateway_url,
            secret: self.secret,
            shape: self.shape,
            max_attempts: self.max_attempts,
            first_retry_delay: self.first_retry_delay,
            client,
        })
    }
}

impl fmt::Debug for CallbackConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackConfig")
            .field("gateway_url", &self.gateway_url.as_str())
            .field("secret", &self.secret)
            .field("shape", &self.shape)
            .field("max_attempts", &self.max_attempts)
            .field("first_retry_delay", &self.first_retry_delay)
            .finish_non_exhaustive()
    }
}

/// The gateway endpoint receiving callbacks for `contract_id`.
#[must_use]
pub fn callback_url(gateway_url: &Url, contract_id: &ContractId) -> Url {
    let mut url = gateway_url.clone();
    if let Ok(mut segments) = url.path_segments_mut() {
        segments
            .pop_if_empty()
            .extend(["v1", "callbacks", contract_id.as_str()]);
    }
    url
}

pub(crate) struct CallbackSender {
    gateway_url: Url,
    secret: WebhookSecret,
    shape: CallbackShape,
    max_attempts: u32,
    first_retry_delay: Duration,
    client: reqwest::Client,
}

impl fmt::Debug for CallbackSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallbackSender")
            .field("gateway_url", &self.gateway_url.as_str())
            .finish_non_exhaustive()
    }
}

enum AttemptResult {
    Delivered,
    Refused(StatusCode),
    Retry(String),
}

impl CallbackSender {
    /// Delivers the callback for a finished task, retrying transient failures.
    pub(crate) async fn deliver(&self, report: TaskReport) {
        let contract_id = report.contract_id().clone();
        let task_id = match &report {
            TaskReport::Completed(r) => r.task_id.clone(),
            TaskReport::Failed(r) => r.task_id.clone(),
            TaskReport::Pending(r) => Some(r.task_id.clone()),
            TaskReport::Partial(r) => Some(r.task_id.clone()),
        };
        // One id per task: the gateway dedupes retries of the same callback by it.
        let msg_id = match &task_id {
            Some(task_id) => format!("cb_{task_id}"),
            None => format!("cb_{contract_id}"),
        };
        let body = match self.shape.body(report) {
            Ok(body) => body,
            Err(error) => {
                tracing::error!(%error, %contract_id, "cannot serialise completion callback");
                return;
            }
        };
        let url = callback_url(&self.gateway_url, &contract_id);
        let mut delay = self.first_retry_delay;
        for attempt in 1..=self.max_attempts {
            match self.attempt(&url, &msg_id, &contract_id, &body).await {
                AttemptResult::Delivered => {
                    tracing::info!(%contract_id, attempt, "completion callback delivered");
                    return;
                }
                AttemptResult::Refused(status) => {
                    // The gateway understood and said no (e.g. already resolved by polling);
                    // retrying would not change its mind.
                    tracing::warn!(%contract_id, %status, "completion callback refused");
                    return;
                }
                AttemptResult::Retry(reason) => {
                    tracing::warn!(%contract_id, attempt, %reason, "completion callback failed");
                }
            }
            if attempt < self.max_attempts {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_RETRY_DELAY);
            }
        }
        tracing::warn!(%contract_id, "completion callback given up; the gateway can still poll");
    }

    async fn attempt(
        &self,
        url: &Url,
        msg_id: &str,
        contract_id: &ContractId,
        body: &[u8],
    ) -> AttemptResult {
        let signed = match self.secret.sign_headers(msg_id, Utc::now(), body) {
            Ok(headers) => headers,
            Err(error) => return AttemptResult::Retry(error.to_string()),
        };
        let mut request = self
            .client
            .post(url.clone())
            .headers(signed)
            .header(
                reqwest::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(body.to_vec());
        if let Ok(value) = HeaderValue::from_str(contract_id.as_str()) {
            request = request.header(headers::CONTRACT_ID, value);
        }
        match request.send().await {
            Ok(response) if response.status().is_success() => AttemptResult::Delivered,
            Ok(response) => {
                let status = response.status();
                let transient = status.is_server_error()
                    || matches!(
                        status,
                        StatusCode::REQUEST_TIMEOUT
                            | StatusCode::TOO_EARLY
                            | StatusCode::TOO_MANY_REQUESTS
                    );
                if transient {
                    AttemptResult::Retry(format!("HTTP {status}"))
                } else {
                    AttemptResult::Refused(status)
                }
            }
            Err(error) => AttemptResult::Retry(error.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_callback_body_is_the_report_plus_event() {
        let report: TaskReport = serde_json::from_value(json!({
            "status": "completed",
            "contract_id": ContractId::generate(),
            "task_id": "task_1",
            "output": {"type": "text", "content": "done"}
        }))
        .unwrap();
        let body = serde_json::to_value(CompletionCallback::new(report.clone())).unwrap();
        assert_eq!(body["event"], "task_completed");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"]["content"], "done");
        let parsed: CompletionCallback = serde_json::from_value(body).unwrap();
        assert_eq!(parsed.report, report);
        assert_eq!(parsed.event, CallbackEvent::TaskCompleted);
    }

    #[test]
    fn the_hire_webhook_shape_has_no_status() {
        let contract_id = ContractId::generate();
        let report: TaskReport = serde_json::from_value(json!({
            "status": "failed",
            "contract_id": contract_id,
            "task_id": "task_abc123",
            "error": {"code": "INVALID_INPUT", "message": "Color format not recognized"}
        }))
        .unwrap();
        let body: serde_json::Value =
            serde_json::from_slice(&CallbackShape::HireWebhook.body(report).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "event": "task_failed",
                "contract_id": contract_id,
                "task_id": "task_abc123",
                "error": {"code": "INVALID_INPUT", "message": "Color format not recognized"}
            })
        );
    }

    #[test]
    fn callback_urls_extend_the_gateway_path() {
        let contract = ContractId::generate();
        assert_eq!(
            callback_url(&Url::parse("http://gw:8080").unwrap(), &contract).as_str(),
            format!("http://gw:8080/v1/callbacks/{contract}")
        );
        assert_eq!(
            callback_url(&Url::parse("https://x.example/hg/").unwrap(), &contract).as_str(),
            format!("https://x.example/hg/v1/callbacks/{contract}")
        );
    }
}
