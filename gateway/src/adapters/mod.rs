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
use hiregate_contracts::{deliverable::Deliverable, schema::OutputSchema};
use serde_json::Value;
use url::Url;

use crate::{
    outbound::OutboundClient,
    registry::model::{Protocol, ProtocolOptions, WorkerEndpoint},
};

/// Where an adapter relays the worker's own progress events (Superwire's SSE events), so they
/// land in the contract's event log and from there reach SSE and webhooks. Details must carry
/// no secrets.
#[async_trait]
pub trait UpstreamEvents: Send + Sync {
    /// Append one event of `kind` with `details`.
    async fn relay(&self, kind: &str, details: Value);
}

/// Drops relayed events (callers with no event log, unit tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardEvents;

#[async_trait]
impl UpstreamEvents for DiscardEvents {
    async fn relay(&self, _kind: &str, _details: Value) {}
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
    /// The seeker's secrets sent with this execute, held in memory for this forward only.
    /// Only the Superwire adapter sends them (its body's `secrets`); others ignore them.
    pub secrets: Option<&'a secrets::SeekerSecrets>,
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
        /// HTTP status of the answer.
        http_status: u16,
        /// What a progress report (HIRE `partial` while the work goes on) says, for the
        /// contract's event log: `{"progress", "items_ready"}`, never the items themselves.
        progress: Option<Value>,
    },
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
    /// How long this one poll may take.
    pub timeout: Duration,
}

/// What a cancel request to the worker achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The protocol has no way to tell the worker (the hire protocol has no cancel route).
    NotSupported,
    /// The worker acknowledged the cancel.
    Acknowledged,
    /// The worker could not be told; the contract is cancelled anyway.
    Failed(String),
}

impl CancelOutcome {
    /// Stable name for the event log.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NotSupported => "not_supported",
            Self::Acknowledged => "acknowledged",
            Self::Failed(_) => "failed",
        }
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
            http_status: 0,
            progress: None,
        }
    }

    /// Tell the worker the seeker cancelled `contract_id`. Default: the protocol cannot
    /// (superwire's `POST /execute/{run_id}/cancel` plugs in here).
    async fn cancel(
        &self,
        _client: &OutboundClient,
        _endpoint: &WorkerEndpoint,
        _contract_id: &str,
        _contract_token: &str,
    ) -> CancelOutcome {
        CancelOutcome::NotSupported
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
