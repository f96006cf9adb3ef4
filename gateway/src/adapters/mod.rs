//! Worker protocol adapters: how a paid contract is forwarded to its worker and how the answer
//! is read, per the listing's `protocol`. Seekers never see the difference.
//!
//! [`WorkerProtocol`] is the seam: [`hire::HireProtocol`] is the native one (worker-sdk);
//! WattSwarm and Superwire adapters plug in through [`ProtocolAdapters::with`] without touching
//! the execute flow, which only sees a [`WorkerAnswer`].

pub mod hire;

use std::{collections::HashMap, fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use hiregate_contracts::deliverable::Deliverable;
use serde_json::Value;
use url::Url;

use crate::{
    outbound::OutboundClient,
    registry::model::{Protocol, WorkerEndpoint},
};

/// One forward of a paid contract to its worker.
#[derive(Debug, Clone, Copy)]
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
    /// How long the worker may take to answer (the contract's SLA).
    pub timeout: Duration,
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
}

impl FailureKind {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reported => "worker_reported_failure",
            Self::Refused => "worker_refused",
            Self::Unreachable => "worker_unreachable",
            Self::BadResponse => "worker_bad_response",
        }
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
    },
}

/// A worker protocol: forward a paid contract and classify the answer. Implementations never
/// panic on hostile answers; everything unexpected is a [`WorkerAnswer::Failed`].
#[async_trait]
pub trait WorkerProtocol: Send + Sync + 'static {
    /// Send `request` through `client` (the SSRF-filtering outbound client).
    async fn execute(&self, client: &OutboundClient, request: &ForwardRequest<'_>) -> WorkerAnswer;
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
    /// `hire` only; the other protocols come with their adapters.
    fn default() -> Self {
        Self {
            adapters: HashMap::from([(
                Protocol::Hire,
                Arc::new(hire::HireProtocol) as Arc<dyn WorkerProtocol>,
            )]),
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
