//! Worker protocol adapters: how a paid contract is forwarded to its worker and how the answer
//! is read, per the listing's `protocol`. Seekers never see the difference.
//!
//! [`WorkerProtocol`] is the seam: [`hire::HireProtocol`] is the native one (worker-sdk);
//! WattSwarm and Superwire adapters plug in through [`ProtocolAdapters::with`] without touching
//! the execute flow, which only sees a [`WorkerAnswer`].

pub mod hire;
pub mod secrets;
pub mod sse;
pub mod superwire;
pub mod wattswarm;

use std::{collections::HashMap, fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use hiregate_contracts::{deliverable::Deliverable, schema::OutputSchema, terms::ContractTerms};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::outbound::OutboundClient;
use hiregate_store::listing::model::{Protocol, ProtocolOptions, WorkerEndpoint};
use hiregate_store::states::EventKind;

/// Where an adapter relays the worker's own progress events (Superwire's SSE events), so they
/// land in the contract's event log and from there reach SSE and webhooks. Details must carry
/// no secrets.
#[async_trait]
pub trait UpstreamEvents: Send + Sync {
    /// Append one event of `kind` with `details`.
    async fn relay(&self, kind: EventKind, details: Value);
}

/// Drops relayed events (callers with no event log, unit tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

#[async_trait]
impl UpstreamEvents for DiscardEvents {
    async fn relay(&self, _kind: EventKind, _details: Value) {}
}

/// The header naming the hire's correlation id on every call to a worker.
pub const CORRELATION_HEADER: &str = "X-Correlation-ID";

/// The name of attempt `attempt` of `contract_id` as the worker runs it
/// (`<contract>-attempt-<n>`): WattSwarm's `execution_id` (stable, so every transport retry of
/// the attempt names the same execution and the executor can dedupe it), Superwire's
/// per-attempt `cache_key`, and the `candidate.execution_id` cross-check verifiers are asked
/// about.
#[must_use]
pub fn execution_id(contract_id: &str, attempt: u32) -> String {
    format!("{contract_id}-attempt-{attempt}")
}

/// One forward of a paid contract to its worker.
#[derive(Clone, Copy)]
pub struct ForwardRequest<'a> {
    /// The worker's base URL.
    pub endpoint: &'a WorkerEndpoint,
    /// Contract id: also the worker's idempotency key.
    pub contract_id: &'a str,
    /// 1-based attempt number (a retry is a higher number).
    pub attempt: u32,
    /// The gateway's signed contract token for this contract.
    pub contract_token: &'a str,
    /// Task type hired.
    pub task_type: &'a str,
    /// The task input.
    pub input: &'a Value,
    /// Every schema the output must satisfy (the listing's, then the seeker's).
    pub output_schemas: &'a [OutputSchema],
    /// The listing's protocol settings (Superwire's workflow source).
    pub protocol_options: &'a ProtocolOptions,
    /// Where the worker's own progress events go.
    pub events: &'a dyn UpstreamEvents,
    /// How long the worker may take to answer (the contract's SLA).
    pub timeout: Duration,
    /// The hire's correlation id, sent as `X-Correlation-ID` by every adapter.
    pub correlation_id: &'a str,
    /// The seeker's secrets sent with this execute, held in memory for this forward only.
    /// Only the Superwire adapter sends them (its body's `secrets`); others ignore them.
    pub secrets: Option<&'a secrets::SeekerSecrets>,
    /// The signed terms (policy, price, retry policy, pinned protocol choices).
    pub terms: &'a ContractTerms,
    /// Fires when the contract is cancelled, on whichever instance took the cancel (the
    /// forward step watches the contract's state in the store). Adapters holding a run open
    /// across the call (Superwire streams) stop it and tell the worker.
    pub cancelled: &'a CancellationToken,
}

/// Why an attempt failed, as the contract's event log and the seeker see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The worker answered `failed`.
    Reported,
    /// The worker refused the call (4xx), e.g. it rejected the contract token.
    Refused,
    /// The worker could not be reached or answered 5xx.
    Unreachable,
    /// The worker's answer does not follow its protocol.
    BadResponse,
    /// The answer names another contract (HIRE `contract_id`, WattSwarm `task_id` /
    /// `execution_id`, another Superwire run): whatever it carries is not this contract's work.
    ContractMismatch,
    /// The answer names a plain `http` URL (poll URL, file, stream) while
    /// `outbound.require_https` is on: nothing it names may be fetched.
    InsecureUrl,
}

impl FailureKind {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reported => "worker_reported_failure",
            Self::Refused => "worker_refused",
            Self::Unreachable => "worker_unreachable",
            Self::BadResponse => "worker_bad_response",
            Self::ContractMismatch => "worker_contract_mismatch",
            Self::InsecureUrl => "worker_insecure_url",
        }
    }
}

/// Longest echoed id quoted back in a mismatch (the worker chose it).
const MAX_QUOTED_ID_CHARS: usize = 128;

/// The failed attempt for an answer whose `field` says `answered` where this call is
/// `expected`: code `contract_mismatch`, never a delivery. Answers that omit the field are
/// not mismatches (the seed protocols make these echoes optional); adapters only call this
/// for a field that is present.
pub fn contract_mismatch(
    http_status: Option<u16>,
    field: &str,
    expected: &str,
    answered: &str,
) -> WorkerAnswer {
    let answered: String = answered.chars().take(MAX_QUOTED_ID_CHARS).collect();
    WorkerAnswer::Failed {
        kind: FailureKind::ContractMismatch,
        http_status,
        code: "contract_mismatch".to_owned(),
        message: format!(
            "the worker's answer names {field} `{answered}`, not `{expected}` of this call; \
             it is not this contract's work"
        ),
        details: Some(serde_json::json!({
            "field": field,
            "expected": expected,
            "answered": answered,
        })),
    }
}

/// What came back from one forward.
#[derive(Debug, Clone)]
pub enum WorkerAnswer {
    /// A final deliverable.
    Delivered {
        /// The deliverable in the internal form.
        deliverable: Deliverable,
        /// HTTP status of the answer.
        http_status: u16,
        /// The worker's free-form `metadata` (HIRE: execution time, model), kept with the
        /// attempt and shown to the parties; not part of the deliverable digest.
        metadata: Option<Value>,
    },
    /// The attempt failed.
    Failed {
        /// How.
        kind: FailureKind,
        /// HTTP status, when the worker answered.
        http_status: Option<u16>,
        /// Machine code (the worker's, or ours).
        code: String,
        /// Human message.
        message: String,
        /// Extra details from the worker.
        details: Option<Value>,
    },
    /// No answer within the SLA.
    TimedOut,
    /// The worker took the task asynchronously.
    Pending {
        /// The worker's task id.
        task_id: Option<String>,
        /// Where the worker can be polled.
        poll_url: Option<Url>,
        /// HIRE `estimated_completion` as the worker wrote it (informational).
        estimated_completion: Option<String>,
        /// HTTP status of the answer.
        http_status: u16,
        /// What a progress report (HIRE `partial` while the work goes on) says, for the
        /// contract's event log: `{"progress", "items_ready"}`, never the items themselves.
        progress: Option<Value>,
    },
}

/// `answer` unless it names a plain `http` URL the gateway would have to call (a poll URL, a
/// file or stream of the deliverable) while `require_https` is on: then a failed attempt with
/// code `insecure_url`, so nothing is polled or fetched over plain http (HIRE Security: all
/// communication over HTTPS).
pub fn refuse_plain_http(answer: WorkerAnswer, require_https: bool) -> WorkerAnswer {
    if !require_https {
        return answer;
    }
    let plain = match &answer {
        WorkerAnswer::Pending {
            poll_url: Some(url),
            ..
        } if url.scheme() == "http" => Some(url.clone()),
        WorkerAnswer::Delivered { deliverable, .. } => deliverable
            .urls()
            .into_iter()
            .find(|url| url.scheme() == "http")
            .cloned(),
        _ => None,
    };
    let Some(mut url) = plain else {
        return answer;
    };
    url.set_query(None);
    let http_status = match &answer {
        WorkerAnswer::Pending { http_status, .. } | WorkerAnswer::Delivered { http_status, .. } => {
            Some(*http_status)
        }
        _ => None,
    };
    WorkerAnswer::Failed {
        kind: FailureKind::InsecureUrl,
        http_status,
        code: "insecure_url".to_owned(),
        message: format!(
            "the worker's answer names the plain http URL {url}; this gateway only calls https \
             URLs (outbound.require_https)"
        ),
        details: Some(serde_json::json!({"url": url.as_str(), "required_scheme": "https"})),
    }
}

/// One poll of work a worker took asynchronously.
#[derive(Debug, Clone, Copy)]
pub struct PollRequest<'a> {
    /// Where the worker said to look (already checked to be http(s); the outbound client
    /// applies the SSRF rules).
    pub poll_url: &'a Url,
    /// Contract id.
    pub contract_id: &'a str,
    /// The gateway's signed contract token for this contract.
    pub contract_token: &'a str,
    /// The hire's correlation id (`X-Correlation-ID`).
    pub correlation_id: &'a str,
    /// How long this one poll may take.
    pub timeout: Duration,
}

/// What a cancel request to the worker achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The worker has no cancel route (none in its protocol, none declared in `/capabilities`).
    NotSupported,
    /// The worker acknowledged the cancel.
    Acknowledged,
    /// The worker could not be told; the contract is cancelled anyway.
    Failed(String),
    /// Another gateway instance holds the worker's run and tells it (it watches the
    /// contract's state in the store).
    Delegated,
}

impl CancelOutcome {
    /// Stable name for the event log.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotSupported => "not_supported",
            Self::Acknowledged => "acknowledged",
            Self::Failed(_) => "failed",
            Self::Delegated => "delegated",
        }
    }
}

/// How long each of the two calls of [`cancel_where_declared`] may take.
const CANCEL_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a [`read_capabilities`] may take.
const CAPABILITIES_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest `/capabilities` body read.
const MAX_CAPABILITIES_BYTES: usize = 256 * 1024;

/// `GET <endpoint>/capabilities`, read now as `T`: what the gateway checks after registration
/// (the `cancel` and `verify` declarations, WattSwarm profiles and runtime). The error says
/// why it could not be read, for the caller's own message.
pub async fn read_capabilities<T: serde::de::DeserializeOwned>(
    client: &OutboundClient,
    endpoint: &WorkerEndpoint,
) -> Result<T, String> {
    let response = client
        .get(&endpoint.join("capabilities"), CAPABILITIES_TIMEOUT)
        .await
        .map_err(|e| format!("/capabilities unreachable: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("/capabilities answered {}", response.status()));
    }
    let body = client
        .read_body(response, MAX_CAPABILITIES_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&body).map_err(|e| format!("/capabilities: {e}"))
}

/// The cancel of protocols whose seed has no cancel route (hire, WattSwarm), for workers
/// that declare one: `GET /capabilities` must say `"cancel": true` (the worker-sdk does),
/// then `POST /tasks/{contract_id}/cancel` with the contract token and `X-Contract-ID`
/// (the id path segment is the contract id, which names the contract's latest run). Best
/// effort: a worker that does not declare it is `NotSupported`, one that cannot be told is
/// `Failed`; the contract is cancelled either way.
pub async fn cancel_where_declared(
    client: &OutboundClient,
    endpoint: &WorkerEndpoint,
    contract_id: &str,
    contract_token: &str,
) -> CancelOutcome {
    match read_capabilities::<Value>(client, endpoint).await {
        Ok(body) if body.get("cancel") == Some(&Value::Bool(true)) => {}
        Ok(_) => return CancelOutcome::NotSupported,
        Err(why) => return CancelOutcome::Failed(why),
    }
    let url = endpoint.join(&format!("tasks/{contract_id}/cancel"));
    let told = async {
        let builder = client
            .request(reqwest::Method::POST, &url)
            .map_err(|e| e.to_string())?
            .timeout(CANCEL_CALL_TIMEOUT)
            .bearer_auth(contract_token)
            .header("X-Contract-ID", contract_id)
            .header(reqwest::header::ACCEPT, "application/json");
        client.send(builder).await.map_err(|e| e.to_string())
    };
    match told.await {
        Ok(response) if response.status().is_success() => CancelOutcome::Acknowledged,
        Ok(response) => CancelOutcome::Failed(format!("cancel answered {}", response.status())),
        Err(why) => CancelOutcome::Failed(why),
    }
}

/// A worker protocol: forward a paid contract and classify the answer. Implementations never
/// panic on hostile answers; everything unexpected is a [`WorkerAnswer::Failed`].
#[async_trait]
pub trait WorkerProtocol: Send + Sync + 'static {
    /// Send `request` through `client` (the SSRF-filtering outbound client).
    async fn execute(&self, client: &OutboundClient, request: &ForwardRequest<'_>) -> WorkerAnswer;

    /// Ask where pending work stands. `Pending` = still running; `Delivered`/`Failed` = its
    /// end; `TimedOut` or a `Failed` of kind `Unreachable`/`BadResponse` = this poll failed
    /// (the gateway polls again within the SLA). Protocols without polling keep the default,
    /// which reports the work as still pending so only the SLA (or a callback) ends it.
    async fn poll(&self, _client: &OutboundClient, _request: &PollRequest<'_>) -> WorkerAnswer {
        WorkerAnswer::Pending {
            task_id: None,
            poll_url: None,
            estimated_completion: None,
            http_status: 0,
            progress: None,
        }
    }

    /// Tell the worker the seeker cancelled `contract_id`. Default: [`cancel_where_declared`],
    /// for protocols whose seed has no cancel route (hire, WattSwarm); superwire's
    /// `POST /execute/{run_id}/cancel` overrides it.
    async fn cancel(
        &self,
        client: &OutboundClient,
        endpoint: &WorkerEndpoint,
        contract_id: &str,
        contract_token: &str,
    ) -> CancelOutcome {
        cancel_where_declared(client, endpoint, contract_id, contract_token).await
    }
}

impl fmt::Debug for ForwardRequest<'_> {
    // The contract token is a credential and the input may be large: neither is printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ForwardRequest")
            .field("endpoint", &self.endpoint)
            .field("contract_id", &self.contract_id)
            .field("attempt", &self.attempt)
            .field("task_type", &self.task_type)
            .field("timeout", &self.timeout)
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// Adapters by protocol.
#[derive(Clone)]
pub struct ProtocolAdapters {
    adapters: HashMap<Protocol, Arc<dyn WorkerProtocol>>,
}

impl fmt::Debug for ProtocolAdapters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtocolAdapters")
            .field("protocols", &self.adapters.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for ProtocolAdapters {
    /// `hire`, `wattswarm` and `superwire`.
    fn default() -> Self {
        Self {
            adapters: HashMap::from([
                (
                    Protocol::Hire,
                    Arc::new(hire::HireProtocol) as Arc<dyn WorkerProtocol>,
                ),
                (
                    Protocol::Wattswarm,
                    Arc::new(wattswarm::WattswarmProtocol) as Arc<dyn WorkerProtocol>,
                ),
                (
                    Protocol::Superwire,
                    Arc::new(superwire::SuperwireProtocol::default()) as Arc<dyn WorkerProtocol>,
                ),
            ]),
        }
    }
}

impl ProtocolAdapters {
    /// Add or replace the adapter for `protocol`.
    #[must_use]
    pub fn with(mut self, protocol: Protocol, adapter: Arc<dyn WorkerProtocol>) -> Self {
        self.adapters.insert(protocol, adapter);
        self
    }

    /// The adapter for `protocol`, if any.
    pub fn get(&self, protocol: Protocol) -> Option<&Arc<dyn WorkerProtocol>> {
        self.adapters.get(&protocol)
    }
}

#[cfg(test)]
mod tests {
    use hiregate_contracts::deliverable::{FileOutput, Output};

    use super::*;

    fn pending(poll_url: &str) -> WorkerAnswer {
        WorkerAnswer::Pending {
            task_id: Some("task_abc123".into()),
            poll_url: Some(poll_url.parse().unwrap()),
            estimated_completion: None,
            http_status: 202,
            progress: None,
        }
    }

    fn delivered(file_url: &str) -> WorkerAnswer {
        let file = Output::File(FileOutput {
            url: file_url.parse().unwrap(),
            mime: None,
            size: None,
            checksum: None,
            name: Some("logo_v1.svg".into()),
        });
        WorkerAnswer::Delivered {
            deliverable: Deliverable::completed(Output::Multiple {
                items: vec![
                    Output::Text {
                        content: "notes".into(),
                    },
                    file,
                ],
            })
            .unwrap(),
            http_status: 200,
            metadata: None,
        }
    }

    fn refused_url(answer: &WorkerAnswer) -> Option<String> {
        match answer {
            WorkerAnswer::Failed {
                kind: FailureKind::InsecureUrl,
                code,
                details: Some(details),
                ..
            } if code == "insecure_url" => details["url"].as_str().map(str::to_owned),
            _ => None,
        }
    }

    #[test]
    fn plain_http_poll_and_file_urls_are_refused_only_when_https_is_required() {
        let answer = refuse_plain_http(pending("http://w.example/tasks/t?token=secret"), true);
        // The query may carry a credential: it is not quoted back.
        assert_eq!(
            refused_url(&answer).as_deref(),
            Some("http://w.example/tasks/t")
        );
        let answer = refuse_plain_http(delivered("http://files.example/logo_v1.svg"), true);
        assert_eq!(
            refused_url(&answer).as_deref(),
            Some("http://files.example/logo_v1.svg")
        );
        for answer in [
            refuse_plain_http(pending("https://w.example/tasks/t"), true),
            refuse_plain_http(delivered("https://files.example/logo_v1.svg"), true),
            refuse_plain_http(pending("http://w.example/tasks/t"), false),
            refuse_plain_http(delivered("http://files.example/logo_v1.svg"), false),
        ] {
            assert!(refused_url(&answer).is_none(), "{answer:?}");
            assert!(!matches!(answer, WorkerAnswer::Failed { .. }));
        }
    }
}
