//! Contract terms: what a seeker and a worker agree on, valid by construction, and
//! `terms_hash = sha256(canonical(terms))`.
//!
//! The gateway builds terms with [`ContractTerms::from_proposal`] from the seeker's
//! [`ContractProposal`] (the `POST /v1/contracts` body) and the worker's [`WorkerOffer`] (its
//! listing for that task type). Deserialising stored terms re-checks every invariant,
//! including the input digest and the policy hash.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

use crate::canonical::{CanonicalError, Digest, to_canonical_vec};
use crate::escrow::{EscrowError, EscrowPolicy, EscrowTerms};
use crate::id::{ContractId, SeekerId, WorkerId};
use crate::metering::Metering;
use crate::money::{EvmAddress, PaymentScheme, Price};
use crate::payment_flow::{PaymentFlow, UpfrontTerms};
use crate::policy::{PolicyBinding, PolicyError, PolicyRequest};
use crate::schema::{OutputSchema, SchemaError, SchemaLimits};
use crate::time::{Timestamp, TimestampError};

/// Version tag inside every terms document; a different shape gets a different tag.
pub const TERMS_VERSION: &str = "hiregate.terms.v1";

/// Limits applied when terms are made. Defaults are the most permissive values accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermsLimits {
    /// Largest canonical task input, in bytes.
    pub max_input_bytes: usize,
    /// Limits for output schemas.
    pub schema: SchemaLimits,
    /// Longest acceptance window.
    pub max_acceptance_window_s: u64,
    /// Longest offer lifetime.
    pub max_offer_ttl_s: u64,
}

impl Default for TermsLimits {
    fn default() -> Self {
        Self {
            max_input_bytes: 1024 * 1024,
            schema: SchemaLimits::default(),
            max_acceptance_window_s: 30 * 24 * 3600,
            max_offer_ttl_s: 7 * 24 * 3600,
        }
    }
}

/// Why terms (or a part of them) were refused.
#[derive(Debug, thiserror::Error)]
pub enum TermsError {
    /// The task type is not `[a-z0-9][a-z0-9_.:-]{0,63}`.
    #[error("task_type must match [a-z0-9][a-z0-9_.:-]{{0,63}}")]
    InvalidTaskType,
    /// A URL is not http(s) with a host.
    #[error("{field} must be an http(s) URL with a host")]
    InvalidUrl {
        /// Which URL.
        field: &'static str,
    },
    /// The payout address is the zero address.
    #[error("payout_address must not be the zero address")]
    ZeroPayoutAddress,
    /// The proposal names another worker than the offer.
    #[error("proposal is for worker {proposed} but the offer is from {offered}")]
    WorkerMismatch {
        /// Worker in the proposal.
        proposed: WorkerId,
        /// Worker of the offer.
        offered: WorkerId,
    },
    /// The worker does not offer this task type.
    #[error("proposal is for task type {proposed} but the offer is for {offered}")]
    TaskTypeMismatch {
        /// Task type in the proposal.
        proposed: TaskType,
        /// Task type of the offer.
        offered: TaskType,
    },
    /// The task input is too large.
    #[error("task input is {bytes} bytes; the limit is {limit}")]
    InputTooLarge {
        /// Canonical size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The stored input digest is not the digest of the stored input.
    #[error("input_digest does not match the input")]
    InputDigestMismatch,
    /// More output schemas than the two parties can contribute.
    #[error("at most two output schemas (the listing's and the seeker's)")]
    TooManySchemas,
    /// The seeker's output schema was refused.
    #[error("output_schema: {0}")]
    Schema(#[source] SchemaError),
    /// The verification binding was refused.
    #[error("verification: {0}")]
    Policy(#[from] PolicyError),
    /// SLA out of range.
    #[error("sla.max_latency_ms must be 1..={max}, sla.poll_window_s at most {max_poll}")]
    InvalidSla {
        /// Upper bound of `max_latency_ms`.
        max: u64,
        /// Upper bound of `poll_window_s`.
        max_poll: u64,
    },
    /// Retry policy out of range.
    #[error("retry_policy.max_attempts must be 1..={0}")]
    InvalidRetryPolicy(u32),
    /// Acceptance window too long.
    #[error("acceptance_window_s must be at most {limit}")]
    AcceptanceWindowTooLong {
        /// The limit.
        limit: u64,
    },
    /// Offer lifetime zero or too long.
    #[error("offer lifetime must be 1..={limit} seconds")]
    InvalidOfferTtl {
        /// The limit.
        limit: u64,
    },
    /// The offer expires before it is created.
    #[error("offer_expires_at must be after created_at")]
    ExpiryBeforeCreation,
    /// The terms document has another version tag.
    #[error("terms_version must be {TERMS_VERSION:?}")]
    UnknownVersion,
    /// A timestamp computation overflowed.
    #[error(transparent)]
    Timestamp(#[from] TimestampError),
    /// The escrow terms were refused.
    #[error("escrow: {0}")]
    Escrow(#[from] EscrowError),
    /// An `auth-capture` price without escrow terms, or escrow terms on an `exact` price.
    #[error("escrow terms must be present exactly when the price's scheme is auth-capture")]
    EscrowSchemeMismatch,
    /// An `upto` price without metering, or metering on an `exact` one.
    #[error(
        "metering must be present when the price's scheme is upto, and only with upto or \
         auth-capture"
    )]
    MeteringSchemeMismatch,
    /// A metered price that is not `unit_price × max_units`.
    #[error("a metered price must be metering.unit_price × metering.max_units")]
    MeteringPriceMismatch,
    /// The upfront flow on a price that is not `exact`.
    #[error(
        "payment_flow upfront is for exact prices only: upto settles what was verified after the work, auth-capture locks in escrow"
    )]
    PaymentFlowSchemeMismatch,
    /// Something could not be canonicalised.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// A task type such as `code_review` or `topic_interpretation`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskType(String);

impl TaskType {
    /// The task type string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TaskType {
    type Err = TermsError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let mut bytes = raw.bytes();
        let first_ok = bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b':' | b'-')
        });
        if first_ok && rest_ok && raw.len() <= 64 {
            Ok(Self(raw.to_owned()))
        } else {
            Err(TermsError::InvalidTaskType)
        }
    }
}

impl TryFrom<String> for TaskType {
    type Error = TermsError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<TaskType> for String {
    fn from(task_type: TaskType) -> Self {
        task_type.0
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! http_url {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "Url", into = "Url")]
        pub struct $name(Url);

        impl $name {
            /// The URL.
            #[must_use]
            pub fn as_url(&self) -> &Url {
                &self.0
            }
        }

        impl TryFrom<Url> for $name {
            type Error = TermsError;
            fn try_from(url: Url) -> Result<Self, Self::Error> {
                // Whether the host is public is the outbound HTTP client's call (it knows the
                // deployment); here only the shape is checked.
                if matches!(url.scheme(), "http" | "https") && url.host().is_some() {
                    Ok(Self(url))
                } else {
                    Err(TermsError::InvalidUrl { field: $field })
                }
            }
        }

        impl FromStr for $name {
            type Err = TermsError;
            fn from_str(raw: &str) -> Result<Self, Self::Err> {
                let url = Url::parse(raw).map_err(|_| TermsError::InvalidUrl { field: $field })?;
                url.try_into()
            }
        }

        impl From<$name> for Url {
            fn from(url: $name) -> Self {
                url.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0.as_str())
            }
        }
    };
}

http_url!(
    /// Base URL of a worker's endpoint.
    EndpointUrl,
    "endpoint"
);
http_url!(
    /// Where the seeker wants lifecycle webhooks.
    WebhookUrl,
    "webhook_url"
);

/// How the gateway talks to the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerProtocol {
    /// HIRE (native; `worker-sdk`).
    Hire,
    /// WattSwarm executor.
    Wattswarm,
    /// Superwire executor.
    Superwire,
}

/// The worker side of a contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WorkerPartyWire")]
pub struct WorkerParty {
    id: WorkerId,
    endpoint: EndpointUrl,
    protocol: WorkerProtocol,
    payout_address: EvmAddress,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkerPartyWire {
    id: WorkerId,
    endpoint: EndpointUrl,
    protocol: WorkerProtocol,
    payout_address: EvmAddress,
}

impl TryFrom<WorkerPartyWire> for WorkerParty {
    type Error = TermsError;
    fn try_from(wire: WorkerPartyWire) -> Result<Self, Self::Error> {
        Self::new(wire.id, wire.endpoint, wire.protocol, wire.payout_address)
    }
}

impl WorkerParty {
    /// The worker party; refuses the zero payout address.
    pub fn new(
        id: WorkerId,
        endpoint: EndpointUrl,
        protocol: WorkerProtocol,
        payout_address: EvmAddress,
    ) -> Result<Self, TermsError> {
        if payout_address.is_zero() {
            return Err(TermsError::ZeroPayoutAddress);
        }
        Ok(Self {
            id,
            endpoint,
            protocol,
            payout_address,
        })
    }
    /// Worker id.
    #[must_use]
    pub fn id(&self) -> &WorkerId {
        &self.id
    }
    /// Endpoint base URL.
    #[must_use]
    pub fn endpoint(&self) -> &EndpointUrl {
        &self.endpoint
    }
    /// Protocol.
    #[must_use]
    pub const fn protocol(&self) -> WorkerProtocol {
        self.protocol
    }
    /// Where payment goes (x402 `payTo`).
    #[must_use]
    pub const fn payout_address(&self) -> EvmAddress {
        self.payout_address
    }
}

/// The task: type, input (with its digest) and the output schemas the deliverable must meet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TaskWire")]
pub struct Task {
    task_type: TaskType,
    input: Value,
    input_digest: Digest,
    output_schemas: Vec<OutputSchema>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskWire {
    task_type: TaskType,
    input: Value,
    input_digest: Digest,
    output_schemas: Vec<OutputSchema>,
}

impl TryFrom<TaskWire> for Task {
    type Error = TermsError;
    fn try_from(wire: TaskWire) -> Result<Self, Self::Error> {
        let task = Self::new(
            wire.task_type,
            wire.input,
            wire.output_schemas,
            &TermsLimits::default(),
        )?;
        if task.input_digest != wire.input_digest {
            return Err(TermsError::InputDigestMismatch);
        }
        Ok(task)
    }
}

impl Task {
    /// A task; computes the input digest. `output_schemas` are the listing's then the
    /// seeker's (each is required; empty means any output).
    pub fn new(
        task_type: TaskType,
        input: Value,
        output_schemas: Vec<OutputSchema>,
        limits: &TermsLimits,
    ) -> Result<Self, TermsError> {
        if output_schemas.len() > 2 {
            return Err(TermsError::TooManySchemas);
        }
        let canonical = to_canonical_vec(&input)?;
        if canonical.len() > limits.max_input_bytes {
            return Err(TermsError::InputTooLarge {
                bytes: canonical.len(),
                limit: limits.max_input_bytes,
            });
        }
        Ok(Self {
            task_type,
            input,
            input_digest: Digest::of_bytes(&canonical),
            output_schemas,
        })
    }
    /// Task type.
    #[must_use]
    pub fn task_type(&self) -> &TaskType {
        &self.task_type
    }
    /// Task input.
    #[must_use]
    pub fn input(&self) -> &Value {
        &self.input
    }
    /// `sha256(canonical(input))`.
    #[must_use]
    pub const fn input_digest(&self) -> Digest {
        self.input_digest
    }
    /// Schemas the deliverable must satisfy, all of them.
    #[must_use]
    pub fn output_schemas(&self) -> &[OutputSchema] {
        &self.output_schemas
    }
    /// True when `body` is this task's input (in any JSON spelling): the check behind
    /// `409 input_mismatch` on execute.
    pub fn matches_input(&self, body: &Value) -> Result<bool, CanonicalError> {
        Ok(Digest::of_canonical(body)? == self.input_digest)
    }
}

/// Service levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "SlaWire")]
pub struct Sla {
    max_latency_ms: u64,
    poll_window_s: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SlaWire {
    max_latency_ms: u64,
    #[serde(default = "default_poll_window_s")]
    poll_window_s: u64,
}

const fn default_poll_window_s() -> u64 {
    Sla::DEFAULT_POLL_WINDOW_S
}

impl TryFrom<SlaWire> for Sla {
    type Error = TermsError;
    fn try_from(wire: SlaWire) -> Result<Self, Self::Error> {
        Self::new(wire.max_latency_ms, wire.poll_window_s)
    }
}

impl Sla {
    /// Longest `max_latency_ms`: one hour for a synchronous answer.
    pub const MAX_LATENCY_MS: u64 = 3_600_000;
    /// Longest poll window: HIRE's long-running default, 24 hours.
    pub const MAX_POLL_WINDOW_S: u64 = 86_400;
    /// Default poll window when the seeker gives none: none, pending work must end within
    /// `max_latency_ms`. Long-running work asks for one (and pays with a scheme that can hold
    /// the money that long).
    pub const DEFAULT_POLL_WINDOW_S: u64 = 0;

    /// Service levels within bounds.
    pub fn new(max_latency_ms: u64, poll_window_s: u64) -> Result<Self, TermsError> {
        if max_latency_ms == 0
            || max_latency_ms > Self::MAX_LATENCY_MS
            || poll_window_s > Self::MAX_POLL_WINDOW_S
        {
            return Err(TermsError::InvalidSla {
                max: Self::MAX_LATENCY_MS,
                max_poll: Self::MAX_POLL_WINDOW_S,
            });
        }
        Ok(Self {
            max_latency_ms,
            poll_window_s,
        })
    }
    /// How long a synchronous answer may take.
    #[must_use]
    pub const fn max_latency_ms(&self) -> u64 {
        self.max_latency_ms
    }
    /// How long the gateway waits for pending work (polling or callback) beyond
    /// `max_latency_ms`.
    #[must_use]
    pub const fn poll_window_s(&self) -> u64 {
        self.poll_window_s
    }
}

impl Default for Sla {
    fn default() -> Self {
        Self {
            max_latency_ms: 60_000,
            poll_window_s: Self::DEFAULT_POLL_WINDOW_S,
        }
    }
}

/// How many times the work may be attempted under one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RetryPolicyWire")]
pub struct RetryPolicy {
    max_attempts: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryPolicyWire {
    max_attempts: u32,
}

impl TryFrom<RetryPolicyWire> for RetryPolicy {
    type Error = TermsError;
    fn try_from(wire: RetryPolicyWire) -> Result<Self, Self::Error> {
        Self::new(wire.max_attempts)
    }
}

impl RetryPolicy {
    /// Most attempts one contract may make.
    pub const MAX_ATTEMPTS: u32 = 10;

    /// `max_attempts` in `1..=10`.
    pub fn new(max_attempts: u32) -> Result<Self, TermsError> {
        if (1..=Self::MAX_ATTEMPTS).contains(&max_attempts) {
            Ok(Self { max_attempts })
        } else {
            Err(TermsError::InvalidRetryPolicy(Self::MAX_ATTEMPTS))
        }
    }
    /// Attempts allowed (the first one included).
    #[must_use]
    pub const fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
    /// True when another attempt may follow attempt number `attempts_made` (1-based).
    #[must_use]
    pub const fn allows_retry_after(&self, attempts_made: u32) -> bool {
        attempts_made < self.max_attempts
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 3 }
    }
}

/// The `terms_version` field: always [`TERMS_VERSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TermsVersion;

impl Serialize for TermsVersion {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(TERMS_VERSION)
    }
}

/// Default acceptance window when the seeker gives none.
pub const DEFAULT_ACCEPTANCE_WINDOW_S: u64 = 300;

/// The signed agreement. Every field is valid; `terms_hash` is over all of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TermsWire")]
pub struct ContractTerms {
    terms_version: TermsVersion,
    contract_id: ContractId,
    seeker: SeekerId,
    worker: WorkerParty,
    task: Task,
    price: Price,
    verification: PolicyBinding,
    sla: Sla,
    retry_policy: RetryPolicy,
    acceptance_window_s: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook_url: Option<WebhookUrl>,
    created_at: Timestamp,
    offer_expires_at: Timestamp,
    // Absent for `exact`, so the terms (and terms_hash) of exact contracts are as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    escrow: Option<EscrowTerms>,
    // Absent when no protocol-specific choice applies, so other contracts' terms (and
    // terms_hash) are as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    execution: Option<ExecutionTerms>,
    // Present exactly for `upto` (metered) prices, so other contracts' terms (and terms_hash)
    // are as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    metering: Option<Metering>,
    // Present exactly for upfront contracts (settled before the work), so other contracts'
    // terms (and terms_hash) are as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_flow: Option<UpfrontTerms>,
}

/// Protocol-specific choices about how the worker is asked, pinned at proposal so every
/// attempt (and a dispute replay) sees the same ones.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutionTerms {
    /// WattSwarm: the execution profile every `ExecuteRequest` carries, one the executor
    /// declared in `/capabilities`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// WattSwarm: the runtime family the executor declared; answers from another are not
    /// this contract's work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_family: Option<String>,
    /// WattSwarm: the model the executor declared, checked like `provider_family`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Superwire: `sha256:` of the decoded workflow source; an attempt whose listing holds
    /// another source is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_digest: Option<Digest>,
    /// Superwire: a retry may reuse the agent outputs an earlier attempt cached (one
    /// `cache_key` per contract instead of one per attempt).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reuse_cached_outputs: bool,
}

/// The parts of [`ContractTerms`], for [`ContractTerms::new`].
#[derive(Debug, Clone, PartialEq)]
pub struct TermsParts {
    /// Contract id.
    pub contract_id: ContractId,
    /// The seeker.
    pub seeker: SeekerId,
    /// The worker.
    pub worker: WorkerParty,
    /// The task.
    pub task: Task,
    /// The price.
    pub price: Price,
    /// The verification policy.
    pub verification: PolicyBinding,
    /// Service levels.
    pub sla: Sla,
    /// Retries.
    pub retry_policy: RetryPolicy,
    /// How long after acceptance the seeker may dispute before settlement.
    pub acceptance_window_s: u64,
    /// Seeker webhook.
    pub webhook_url: Option<WebhookUrl>,
    /// When the offer was made.
    pub created_at: Timestamp,
    /// When the unpaid offer lapses.
    pub offer_expires_at: Timestamp,
    /// Escrow terms: present exactly when the price's scheme is `auth-capture`.
    pub escrow: Option<EscrowTerms>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TermsWire {
    terms_version: String,
    contract_id: ContractId,
    seeker: SeekerId,
    worker: WorkerParty,
    task: Task,
    price: Price,
    verification: PolicyBinding,
    sla: Sla,
    retry_policy: RetryPolicy,
    acceptance_window_s: u64,
    #[serde(default)]
    webhook_url: Option<WebhookUrl>,
    created_at: Timestamp,
    offer_expires_at: Timestamp,
    #[serde(default)]
    escrow: Option<EscrowTerms>,
    #[serde(default)]
    execution: Option<ExecutionTerms>,
    #[serde(default)]
    metering: Option<Metering>,
    #[serde(default)]
    payment_flow: Option<UpfrontTerms>,
}

impl TryFrom<TermsWire> for ContractTerms {
    type Error = TermsError;
    fn try_from(wire: TermsWire) -> Result<Self, Self::Error> {
        if wire.terms_version != TERMS_VERSION {
            return Err(TermsError::UnknownVersion);
        }
        Self::new(
            TermsParts {
                contract_id: wire.contract_id,
                seeker: wire.seeker,
                worker: wire.worker,
                task: wire.task,
                price: wire.price,
                verification: wire.verification,
                sla: wire.sla,
                retry_policy: wire.retry_policy,
                acceptance_window_s: wire.acceptance_window_s,
                webhook_url: wire.webhook_url,
                created_at: wire.created_at,
                offer_expires_at: wire.offer_expires_at,
                escrow: wire.escrow,
            },
            &TermsLimits::default(),
        )
        .map(|terms| terms.with_execution(wire.execution.unwrap_or_default()))
        .and_then(|terms| match wire.metering {
            Some(metering) => terms.with_metering(metering),
            None if terms.scheme() == PaymentScheme::Upto => {
                Err(TermsError::MeteringSchemeMismatch)
            }
            None => Ok(terms),
        })
        .and_then(|terms| match wire.payment_flow {
            Some(_) => terms.with_upfront_payment(),
            None => Ok(terms),
        })
    }
}

/// What the gateway adds when it turns a proposal into an offer.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferContext {
    /// The new contract's id.
    pub contract_id: ContractId,
    /// The authenticated seeker.
    pub seeker: SeekerId,
    /// Now.
    pub created_at: Timestamp,
    /// How long the unpaid offer stays open.
    pub offer_ttl_s: u64,
    /// The gateway's escrow parameters; required when the offer's price is `auth-capture`,
    /// ignored for `exact`.
    pub escrow: Option<EscrowPolicy>,
}

/// The seeker's proposal: the `POST /v1/contracts` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractProposal {
    /// Which worker.
    pub worker_id: WorkerId,
    /// Which task type.
    pub task_type: TaskType,
    /// The task input.
    pub input: Value,
    /// An optional stricter output schema (the deliverable must satisfy it *and* the
    /// listing's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Verification policy (default `vp.schema_only.v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<PolicyRequest>,
    /// Service levels (default: 60 s latency, 1 h poll window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<Sla>,
    /// Retries (default: 3 attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_policy: Option<RetryPolicy>,
    /// Webhook for lifecycle events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<WebhookUrl>,
    /// Dispute window after acceptance (default 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acceptance_window_s: Option<u64>,
}

/// What a worker's listing offers for one task type.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOffer {
    /// The worker.
    pub worker: WorkerParty,
    /// The task type.
    pub task_type: TaskType,
    /// The price.
    pub price: Price,
    /// The listing's output schema for this task type, if any.
    pub output_schema: Option<OutputSchema>,
}

impl ContractTerms {
    /// Terms from parts; checks the cross-field rules.
    pub fn new(parts: TermsParts, limits: &TermsLimits) -> Result<Self, TermsError> {
        if parts.acceptance_window_s > limits.max_acceptance_window_s {
            return Err(TermsError::AcceptanceWindowTooLong {
                limit: limits.max_acceptance_window_s,
            });
        }
        if parts.offer_expires_at <= parts.created_at {
            return Err(TermsError::ExpiryBeforeCreation);
        }
        let escrowed = parts.price.scheme() == PaymentScheme::AuthCapture;
        if escrowed != parts.escrow.is_some() {
            return Err(TermsError::EscrowSchemeMismatch);
        }
        Ok(Self {
            terms_version: TermsVersion,
            contract_id: parts.contract_id,
            seeker: parts.seeker,
            worker: parts.worker,
            task: parts.task,
            price: parts.price,
            verification: parts.verification,
            sla: parts.sla,
            retry_policy: parts.retry_policy,
            acceptance_window_s: parts.acceptance_window_s,
            webhook_url: parts.webhook_url,
            created_at: parts.created_at,
            offer_expires_at: parts.offer_expires_at,
            escrow: parts.escrow,
            execution: None,
            metering: None,
            payment_flow: None,
        })
    }

    /// These terms with the protocol-specific `execution` choices (none: the field stays
    /// absent). Set before the terms are hashed and signed.
    #[must_use]
    pub fn with_execution(mut self, execution: ExecutionTerms) -> Self {
        self.execution = (execution != ExecutionTerms::default()).then_some(execution);
        self
    }

    /// These terms priced per verified unit: the price (an `upto` one, or an `auth-capture`
    /// one whose escrow captures the verified amount and voids the rest) must be the
    /// metering's maximum. Set before the terms are hashed and signed.
    pub fn with_metering(mut self, metering: Metering) -> Result<Self, TermsError> {
        if self.scheme() == PaymentScheme::Exact {
            return Err(TermsError::MeteringSchemeMismatch);
        }
        if self.price.amount() != metering.maximum() {
            return Err(TermsError::MeteringPriceMismatch);
        }
        self.metering = Some(metering);
        Ok(self)
    }

    /// These terms paid upfront: settled on chain before the worker is called, a rejected
    /// deliverable staying paid (the consequence is pinned word for word, see
    /// [`crate::payment_flow`]). `exact` prices only. Set before the terms are hashed and signed.
    pub fn with_upfront_payment(mut self) -> Result<Self, TermsError> {
        if self.scheme() != PaymentScheme::Exact {
            return Err(TermsError::PaymentFlowSchemeMismatch);
        }
        self.payment_flow = Some(UpfrontTerms::new());
        Ok(self)
    }

    /// When the payment moves relative to the work: `upfront` when pinned, `escrow` for an
    /// escrowed price, else `authorization`.
    #[must_use]
    pub fn payment_flow(&self) -> PaymentFlow {
        match (&self.payment_flow, &self.escrow) {
            (Some(_), _) => PaymentFlow::Upfront,
            (None, Some(_)) => PaymentFlow::Escrow,
            (None, None) => PaymentFlow::Authorization,
        }
    }

    /// Whether the payment settles before the work (the upfront flow).
    #[must_use]
    pub fn settles_before_work(&self) -> bool {
        self.payment_flow.is_some()
    }

    /// How a metered (`upto`, or metered `auth-capture`) contract is paid; `None` for a fixed
    /// price.
    #[must_use]
    pub fn metering(&self) -> Option<&Metering> {
        self.metering.as_ref()
    }

    /// Protocol-specific execution choices, when any were pinned.
    #[must_use]
    pub fn execution(&self) -> Option<&ExecutionTerms> {
        self.execution.as_ref()
    }

    /// Terms from a seeker's proposal and the worker's offer for that task type.
    pub fn from_proposal(
        proposal: ContractProposal,
        offer: &WorkerOffer,
        context: OfferContext,
        limits: &TermsLimits,
    ) -> Result<Self, TermsError> {
        if proposal.worker_id != *offer.worker.id() {
            return Err(TermsError::WorkerMismatch {
                proposed: proposal.worker_id,
                offered: offer.worker.id().clone(),
            });
        }
        if proposal.task_type != offer.task_type {
            return Err(TermsError::TaskTypeMismatch {
                proposed: proposal.task_type,
                offered: offer.task_type.clone(),
            });
        }
        if context.offer_ttl_s == 0 || context.offer_ttl_s > limits.max_offer_ttl_s {
            return Err(TermsError::InvalidOfferTtl {
                limit: limits.max_offer_ttl_s,
            });
        }
        let mut schemas: Vec<OutputSchema> = offer.output_schema.iter().cloned().collect();
        if let Some(document) = proposal.output_schema {
            let seeker_schema =
                OutputSchema::parse(document, &limits.schema).map_err(TermsError::Schema)?;
            if !schemas.contains(&seeker_schema) {
                schemas.push(seeker_schema);
            }
        }
        let verification = match proposal.verification {
            Some(request) => request.into_binding()?,
            None => PolicyBinding::schema_only(),
        };
        let task = Task::new(proposal.task_type, proposal.input, schemas, limits)?;
        let sla = proposal.sla.unwrap_or_default();
        let retry_policy = proposal.retry_policy.unwrap_or_default();
        let acceptance_window_s = proposal
            .acceptance_window_s
            .unwrap_or(DEFAULT_ACCEPTANCE_WINDOW_S);
        let offer_expires_at = context.created_at.plus_seconds(context.offer_ttl_s)?;
        let escrow = match (offer.price.scheme(), context.escrow) {
            (PaymentScheme::Exact | PaymentScheme::Upto, _) => None,
            (PaymentScheme::AuthCapture, None) => return Err(TermsError::EscrowSchemeMismatch),
            (PaymentScheme::AuthCapture, Some(policy)) => Some(policy.terms_for(
                offer_expires_at,
                worst_case_work_s(sla, retry_policy),
                acceptance_window_s,
            )?),
        };
        Self::new(
            TermsParts {
                contract_id: context.contract_id,
                seeker: context.seeker,
                worker: offer.worker.clone(),
                task,
                price: offer.price.clone(),
                verification,
                sla,
                retry_policy,
                acceptance_window_s,
                webhook_url: proposal.webhook_url,
                created_at: context.created_at,
                offer_expires_at,
                escrow,
            },
            limits,
        )
    }

    /// `sha256(canonical(terms))`, the value the contract token and receipts bind.
    pub fn terms_hash(&self) -> Result<Digest, CanonicalError> {
        Digest::of_canonical(self)
    }

    /// Contract id.
    #[must_use]
    pub fn contract_id(&self) -> &ContractId {
        &self.contract_id
    }
    /// Seeker.
    #[must_use]
    pub fn seeker(&self) -> &SeekerId {
        &self.seeker
    }
    /// Worker.
    #[must_use]
    pub fn worker(&self) -> &WorkerParty {
        &self.worker
    }
    /// Task.
    #[must_use]
    pub fn task(&self) -> &Task {
        &self.task
    }
    /// Price.
    #[must_use]
    pub fn price(&self) -> &Price {
        &self.price
    }
    /// Verification policy.
    #[must_use]
    pub fn verification(&self) -> &PolicyBinding {
        &self.verification
    }
    /// Service levels.
    #[must_use]
    pub const fn sla(&self) -> Sla {
        self.sla
    }
    /// Retry policy.
    #[must_use]
    pub const fn retry_policy(&self) -> RetryPolicy {
        self.retry_policy
    }
    /// Dispute window after acceptance, seconds.
    #[must_use]
    pub const fn acceptance_window_s(&self) -> u64 {
        self.acceptance_window_s
    }
    /// Seeker webhook.
    #[must_use]
    pub fn webhook_url(&self) -> Option<&WebhookUrl> {
        self.webhook_url.as_ref()
    }
    /// When the offer was made.
    #[must_use]
    pub const fn created_at(&self) -> Timestamp {
        self.created_at
    }
    /// When the unpaid offer lapses.
    #[must_use]
    pub const fn offer_expires_at(&self) -> Timestamp {
        self.offer_expires_at
    }
    /// True once `now` is at or past the offer expiry.
    #[must_use]
    pub fn offer_expired(&self, now: Timestamp) -> bool {
        now >= self.offer_expires_at
    }
    /// Seconds the work can take in the worst case from payment to a verdict, before the
    /// acceptance window: every attempt's latency plus the poll window. The gateway adds
    /// verification and a margin when it sizes the payment authorization.
    #[must_use]
    pub fn worst_case_work_s(&self) -> u64 {
        worst_case_work_s(self.sla, self.retry_policy)
    }
    /// The payment scheme the contract is paid with.
    #[must_use]
    pub const fn scheme(&self) -> PaymentScheme {
        self.price.scheme()
    }
    /// Escrow terms of an `auth-capture` contract; `None` for `exact`.
    #[must_use]
    pub const fn escrow(&self) -> Option<&EscrowTerms> {
        self.escrow.as_ref()
    }
}

fn worst_case_work_s(sla: Sla, retry_policy: RetryPolicy) -> u64 {
    let per_attempt_s = sla.max_latency_ms.div_ceil(1000) + sla.poll_window_s;
    per_attempt_s.saturating_mul(u64::from(retry_policy.max_attempts))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::money::{AtomicAmount, Network, PaymentScheme};
    use crate::policy::PolicyId;
    use serde_json::json;
    use ulid::Ulid;

    pub(crate) fn sample_offer() -> WorkerOffer {
        WorkerOffer {
            worker: WorkerParty::new(
                WorkerId::from_ulid(Ulid::from_parts(1_700_000_000_000, 7)),
                "https://worker.example.com".parse().unwrap(),
                WorkerProtocol::Hire,
                "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
                    .parse()
                    .unwrap(),
            )
            .unwrap(),
            task_type: "code_review".parse().unwrap(),
            price: Price::new(
                PaymentScheme::Exact,
                Network::eip155(84532).unwrap(),
                "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
                    .parse()
                    .unwrap(),
                AtomicAmount::new(5_000_000),
            )
            .unwrap(),
            output_schema: Some(
                OutputSchema::parse(
                    json!({
                        "type": "object",
                        "required": ["score", "issues"],
                        "properties": {
                            "score": {"type": "number", "minimum": 0, "maximum": 10},
                            "issues": {"type": "array"}
                        }
                    }),
                    &SchemaLimits::default(),
                )
                .unwrap(),
            ),
        }
    }

    pub(crate) fn sample_context() -> OfferContext {
        OfferContext {
            contract_id: ContractId::from_ulid(Ulid::from_parts(1_738_238_400_000, 1)),
            seeker: SeekerId::from_ulid(Ulid::from_parts(1_700_000_000_000, 3)),
            created_at: "2025-01-30T12:00:00Z".parse().unwrap(),
            offer_ttl_s: 900,
            escrow: None,
        }
    }

    pub(crate) fn sample_proposal() -> ContractProposal {
        serde_json::from_value(json!({
            "worker_id": sample_offer().worker.id(),
            "task_type": "code_review",
            "input": {"repo": "https://git.example.com/app", "files": ["src/main.rs"], "depth": 2},
            "output_schema": {"type": "object", "properties": {"issues": {"maxItems": 50}}},
            "verification": {
                "policy_id": "vp.schema_thresholds.v1",
                "policy_params": {"thresholds": [{"pointer": "/score", "op": ">=", "value": 5}]}
            },
            "sla": {"max_latency_ms": 30000, "poll_window_s": 600},
            "retry_policy": {"max_attempts": 2},
            "webhook_url": "https://seeker.example.com/hooks/hiregate",
            "acceptance_window_s": 600
        }))
        .unwrap()
    }

    pub(crate) fn sample_terms() -> ContractTerms {
        ContractTerms::from_proposal(
            sample_proposal(),
            &sample_offer(),
            sample_context(),
            &TermsLimits::default(),
        )
        .unwrap()
    }

    #[test]
    fn a_proposal_and_an_offer_make_terms() {
        let terms = sample_terms();
        assert_eq!(terms.task().output_schemas().len(), 2);
        assert_eq!(
            terms.verification().policy_id(),
            PolicyId::SchemaThresholdsV1
        );
        assert_eq!(
            terms.offer_expires_at().to_string(),
            "2025-01-30T12:15:00.000Z"
        );
        assert_eq!(terms.worst_case_work_s(), 2 * (30 + 600));
        assert!(
            terms
                .task()
                .matches_input(
                    &json!({"depth": 2.0, "files": ["src/main.rs"], "repo": "https://git.example.com/app"})
                )
                .unwrap()
        );
        assert!(!terms.task().matches_input(&json!({"depth": 3})).unwrap());
        assert!(!terms.offer_expired("2025-01-30T12:14:59Z".parse().unwrap()));
        assert!(terms.offer_expired("2025-01-30T12:15:00Z".parse().unwrap()));
    }

    #[test]
    fn terms_round_trip_through_json_with_the_same_hash() {
        let terms = sample_terms();
        let json = serde_json::to_string(&terms).unwrap();
        let back: ContractTerms = serde_json::from_str(&json).unwrap();
        assert_eq!(back, terms);
        assert_eq!(back.terms_hash().unwrap(), terms.terms_hash().unwrap());
    }

    #[test]
    fn stored_terms_with_a_forged_input_digest_are_refused() {
        let mut json = serde_json::to_value(sample_terms()).unwrap();
        json["task"]["input"]["depth"] = json!(3);
        let err = serde_json::from_value::<ContractTerms>(json).unwrap_err();
        assert!(err.to_string().contains("input_digest"), "{err}");
    }

    #[test]
    fn mismatches_and_bad_parts_are_typed_errors() {
        let offer = sample_offer();
        let mut proposal = sample_proposal();
        proposal.worker_id = WorkerId::from_ulid(Ulid::from_parts(1, 1));
        assert!(matches!(
            ContractTerms::from_proposal(
                proposal,
                &offer,
                sample_context(),
                &TermsLimits::default()
            ),
            Err(TermsError::WorkerMismatch { .. })
        ));
        let mut proposal = sample_proposal();
        proposal.task_type = "translation".parse().unwrap();
        assert!(matches!(
            ContractTerms::from_proposal(
                proposal,
                &offer,
                sample_context(),
                &TermsLimits::default()
            ),
            Err(TermsError::TaskTypeMismatch { .. })
        ));
        let mut proposal = sample_proposal();
        proposal.output_schema = Some(json!({"pattern": "(?=x)"}));
        assert!(matches!(
            ContractTerms::from_proposal(
                proposal,
                &offer,
                sample_context(),
                &TermsLimits::default()
            ),
            Err(TermsError::Schema(SchemaError::BacktrackingPattern { .. }))
        ));
        let mut proposal = sample_proposal();
        proposal.input = json!({"blob": "x".repeat(2_000_000)});
        assert!(matches!(
            ContractTerms::from_proposal(
                proposal,
                &offer,
                sample_context(),
                &TermsLimits::default()
            ),
            Err(TermsError::InputTooLarge { .. })
        ));
        let mut context = sample_context();
        context.offer_ttl_s = 0;
        assert!(matches!(
            ContractTerms::from_proposal(
                sample_proposal(),
                &offer,
                context,
                &TermsLimits::default()
            ),
            Err(TermsError::InvalidOfferTtl { .. })
        ));
        let mut proposal = sample_proposal();
        proposal.acceptance_window_s = Some(365 * 24 * 3600);
        assert!(matches!(
            ContractTerms::from_proposal(
                proposal,
                &offer,
                sample_context(),
                &TermsLimits::default()
            ),
            Err(TermsError::AcceptanceWindowTooLong { .. })
        ));

        assert!("Code Review".parse::<TaskType>().is_err());
        assert!("".parse::<TaskType>().is_err());
        assert!("code_review.v2".parse::<TaskType>().is_ok());
        assert!("ftp://x.example".parse::<WebhookUrl>().is_err());
        assert!(Sla::new(0, 0).is_err());
        assert!(Sla::new(1000, Sla::MAX_POLL_WINDOW_S + 1).is_err());
        assert!(RetryPolicy::new(0).is_err());
        assert!(RetryPolicy::new(11).is_err());
        assert!(RetryPolicy::new(3).unwrap().allows_retry_after(2));
        assert!(!RetryPolicy::new(3).unwrap().allows_retry_after(3));
        assert!(matches!(
            WorkerParty::new(
                WorkerId::generate(),
                "https://w.example".parse().unwrap(),
                WorkerProtocol::Hire,
                EvmAddress::from_bytes([0; 20])
            ),
            Err(TermsError::ZeroPayoutAddress)
        ));
        for bad in [
            json!({"worker_id": "wk_01J9ZQ4X1V8E6W0M3C5T7B2N4K", "task_type": "x", "input": {}, "surprise": 1}),
            json!({"worker_id": "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K", "task_type": "x", "input": {}}),
            json!({"worker_id": "wk_01J9ZQ4X1V8E6W0M3C5T7B2N4K", "task_type": "x", "input": {}, "sla": {"max_latency_ms": 0}}),
            json!({"worker_id": "wk_01J9ZQ4X1V8E6W0M3C5T7B2N4K", "task_type": "x", "input": {}, "verification": {"policy_id": "vp.nope.v1"}}),
        ] {
            assert!(
                serde_json::from_value::<ContractProposal>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    fn escrow_policy() -> EscrowPolicy {
        EscrowPolicy {
            escrow: "0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff"
                .parse()
                .unwrap(),
            capture_authorizer: EvmAddress::from_bytes([2; 20]),
            fee_bps: 100,
            fee_recipient: EvmAddress::from_bytes([3; 20]),
            payment_window_s: 300,
            reserve_s: 150,
            refund_window_s: 86_400,
        }
    }

    fn escrowed_offer() -> WorkerOffer {
        let mut offer = sample_offer();
        let price = offer.price.clone();
        offer.price = Price::new(
            PaymentScheme::AuthCapture,
            price.network(),
            price.asset(),
            price.amount(),
        )
        .unwrap();
        offer
    }

    #[test]
    fn auth_capture_terms_pin_the_escrow_and_round_trip() {
        let mut context = sample_context();
        context.escrow = Some(escrow_policy());
        let terms = ContractTerms::from_proposal(
            sample_proposal(),
            &escrowed_offer(),
            context,
            &TermsLimits::default(),
        )
        .unwrap();
        assert_eq!(terms.scheme(), PaymentScheme::AuthCapture);
        let escrow = terms.escrow().unwrap();
        // Offer expiry 12:15:00 (+1 s rounding) + payment 300 + work 2 × (30 + 600) + acceptance
        // 600 + reserve 150.
        assert_eq!(
            escrow.capture_deadline().to_string(),
            "2025-01-30T12:53:31.000Z"
        );
        assert_eq!(escrow.capture_fee_bps(), 100);
        let json = serde_json::to_value(&terms).unwrap();
        assert_eq!(json["price"]["scheme"], "auth-capture");
        assert_eq!(json["escrow"]["min_fee_bps"], 100);
        let back: ContractTerms = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, terms);
        assert_ne!(
            terms.terms_hash().unwrap(),
            sample_terms().terms_hash().unwrap()
        );

        // Escrow terms on an exact price, or an auth-capture price without them, are refused.
        let mut exact_with_escrow = serde_json::to_value(sample_terms()).unwrap();
        exact_with_escrow["escrow"] = json["escrow"].clone();
        assert!(serde_json::from_value::<ContractTerms>(exact_with_escrow).is_err());
        let mut escrowed_without = json;
        escrowed_without.as_object_mut().unwrap().remove("escrow");
        assert!(serde_json::from_value::<ContractTerms>(escrowed_without).is_err());
        assert!(matches!(
            ContractTerms::from_proposal(
                sample_proposal(),
                &escrowed_offer(),
                sample_context(),
                &TermsLimits::default()
            ),
            Err(TermsError::EscrowSchemeMismatch)
        ));
    }

    #[test]
    fn upfront_terms_pin_the_flow_and_its_consequence_in_the_hash() {
        let plain = sample_terms();
        assert_eq!(plain.payment_flow(), PaymentFlow::Authorization);
        assert!(
            serde_json::to_value(&plain)
                .unwrap()
                .get("payment_flow")
                .is_none()
        );
        let upfront = sample_terms().with_upfront_payment().unwrap();
        assert_eq!(upfront.payment_flow(), PaymentFlow::Upfront);
        assert!(upfront.settles_before_work());
        assert_ne!(upfront.terms_hash().unwrap(), plain.terms_hash().unwrap());
        let json = serde_json::to_value(&upfront).unwrap();
        assert_eq!(json["payment_flow"]["flow"], "upfront");
        assert_eq!(
            json["payment_flow"]["consequence"],
            crate::payment_flow::UPFRONT_CONSEQUENCE
        );
        let back: ContractTerms = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, upfront);
        // The consequence cannot be reworded after signing.
        let mut reworded = json;
        reworded["payment_flow"]["consequence"] = serde_json::json!("refunded on request");
        assert!(serde_json::from_value::<ContractTerms>(reworded).is_err());
    }

    #[test]
    fn upfront_is_refused_for_metered_and_escrowed_prices() {
        let mut context = sample_context();
        context.escrow = Some(escrow_policy());
        let escrowed = ContractTerms::from_proposal(
            sample_proposal(),
            &escrowed_offer(),
            context,
            &TermsLimits::default(),
        )
        .unwrap();
        assert_eq!(escrowed.payment_flow(), PaymentFlow::Escrow);
        assert!(matches!(
            escrowed.with_upfront_payment(),
            Err(TermsError::PaymentFlowSchemeMismatch)
        ));
    }

    #[test]
    fn exact_terms_carry_no_escrow_even_with_a_policy() {
        let mut context = sample_context();
        context.escrow = Some(escrow_policy());
        let terms = ContractTerms::from_proposal(
            sample_proposal(),
            &sample_offer(),
            context,
            &TermsLimits::default(),
        )
        .unwrap();
        assert!(terms.escrow().is_none());
        assert_eq!(
            terms.terms_hash().unwrap(),
            sample_terms().terms_hash().unwrap()
        );
        assert!(
            serde_json::to_value(&terms)
                .unwrap()
                .get("escrow")
                .is_none()
        );
    }

    #[test]
    fn defaults_apply_when_the_seeker_names_none() {
        let proposal: ContractProposal = serde_json::from_value(json!({
            "worker_id": sample_offer().worker.id(),
            "task_type": "code_review",
            "input": {"x": 1}
        }))
        .unwrap();
        let terms = ContractTerms::from_proposal(
            proposal,
            &sample_offer(),
            sample_context(),
            &TermsLimits::default(),
        )
        .unwrap();
        assert_eq!(terms.verification().policy_id(), PolicyId::SchemaOnlyV1);
        assert_eq!(terms.sla(), Sla::default());
        assert_eq!(terms.retry_policy().max_attempts(), 3);
        assert_eq!(terms.acceptance_window_s(), DEFAULT_ACCEPTANCE_WINDOW_S);
        assert_eq!(terms.task().output_schemas().len(), 1);
        assert!(terms.webhook_url().is_none());
    }
}
