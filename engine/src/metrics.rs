//! Prometheus metrics, one registry per app (`hiregate::startup::App`).
//!
//! | metric | labels | set by |
//! |---|---|---|
//! | `hiregate_http_requests_total`, `hiregate_http_request_duration_seconds` | method, route, status | the HTTP middleware |
//! | `hiregate_worker_probes_total`, `hiregate_workers_marked_{un,}healthy_total` | outcome | the health loop |
//! | `hiregate_settlements_total` | outcome (`settled`, `settlement_failed`, `settlement_unknown`) | [`crate::ledger::run_settlement_metrics`] (event bus) |
//! | `hiregate_settled_amount_atomic_total` | network, asset | the same, from the settled payment row |
//! | `hiregate_escrow_outcomes_total`, `hiregate_escrow_amount_atomic_total` | outcome (`authorized`, `captured`, `voided`, `refunded`, `reclaimed`), network, asset | the same, for escrowed (`auth-capture`) payments |
//! | `hiregate_escrow_fees_atomic_total` | network, asset | the same: the treasury's fee of each capture |
//! | `hiregate_facilitator_request_duration_seconds` | operation (`verify`, `settle`) | [`crate::facilitator::MeteredFacilitator`] |
//! | `hiregate_facilitator_errors_total` | operation, kind (`unknown`, `refused`) | the same |
//! | `hiregate_facilitator_calls_total` | operation, outcome (`ok`, `refused`, `unknown`) | the same: every call, by verdict |
//! | `hiregate_contract_transitions_total` | from, to (contract states) | [`crate::ledger::run_settlement_metrics`] (event bus): every stored transition |
//! | `hiregate_verifications_total` | policy, outcome (`passed`, `failed`, `inconclusive`), reason_code (the verdict's codes comma-joined, `none` without any) | the judgement of a deliverable ([`Metrics::record_verification`]) |
//! | `hiregate_worker_request_duration_seconds` | worker_id | each forwarded attempt: the worker's answer to the execute call (a pending worker's 202, not the whole work) |
//! | `hiregate_reconciliation_mismatches` | kind | each reconciliation run ([`Metrics::record_reconciliation`]) |
//! | `hiregate_reconciliations_total` | result (`ok`, `mismatch`, `error`) | the same |
//!
//! Outcome series start at zero: every label value known when the gateway starts (settlement
//! outcomes, facilitator verdicts and errors, verification outcomes per built-in policy with
//! `reason_code="none"`, probe results, reconciliation results and mismatch kinds, and the escrow
//! outcomes and amounts of every token under `[chains.*.tokens]`) is present from the first scrape,
//! so `rate(...)` and alerts work without `or vector(0)`. Series whose labels only exist at run
//! time start when first seen: a listing's token when it is registered or probed
//! ([`Metrics::track_asset`]), contract transitions, HTTP routes and worker latency.
//!
//! Why `prometheus-client` rather than the `metrics` facade + exporter: the facade installs a
//! process-global recorder, and tests run many gateways in one process; a registry per app keeps
//! their counters apart. Rendered in the OpenMetrics text format, which Prometheus scrapes.

use std::{fmt::Write as _, str::FromStr as _, sync::atomic::AtomicU64};

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use alloy::primitives::Address;
use hiregate_contracts::policy::PolicyId;
use hiregate_contracts::state::ContractState;

use crate::ledger::{reconcile::ReconcileReport, report::MismatchKind};

/// Content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels of HTTP request metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// Request method.
    pub method: String,
    /// Matched route template (`/v1/workers/{id}`), or `unmatched`; never the raw path, which
    /// would make label cardinality unbounded.
    pub route: String,
    /// Response status code.
    pub status: u16,
}

/// Labels of HTTP latency.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Request method.
    pub method: String,
    /// Matched route template.
    pub route: String,
}

/// Result of a worker probe.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ProbeOutcome {
    /// Probe passed.
    Passed,
    /// Probe failed.
    Failed,
}

impl ProbeOutcome {
    /// Every outcome.
    pub const ALL: [Self; 2] = [Self::Passed, Self::Failed];
}

/// Labels of probe counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// Probe result.
    pub outcome: ProbeOutcome,
}

/// Implements `EncodeLabelValue` with the snake_case name the rest of the API uses (the derive
/// would print the Rust variant name).
macro_rules! snake_case_label {
    ($type:ty) => {
        impl EncodeLabelValue for $type {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

/// How a settlement ended, as the contract's state says.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum SettlementResult {
    /// Money moved.
    Settled,
    /// Refused for good.
    SettlementFailed,
    /// Not known yet (timeout, pending); retried later.
    SettlementUnknown,
}

impl SettlementResult {
    /// Every outcome.
    pub const ALL: [Self; 3] = [
        Self::Settled,
        Self::SettlementFailed,
        Self::SettlementUnknown,
    ];

    /// The contract state name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Settled => "settled",
            Self::SettlementFailed => "settlement_failed",
            Self::SettlementUnknown => "settlement_unknown",
        }
    }

    /// The outcome a transition into `state` records, if it is one.
    pub fn from_state(state: ContractState) -> Option<Self> {
        match state {
            ContractState::Settled => Some(Self::Settled),
            ContractState::SettlementFailed => Some(Self::SettlementFailed),
            ContractState::SettlementUnknown => Some(Self::SettlementUnknown),
            _ => None,
        }
    }
}
snake_case_label!(SettlementResult);

/// Labels of the settlement counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SettlementLabels {
    /// How it ended.
    pub outcome: SettlementResult,
}

/// Labels of amounts: where the money is.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AssetLabels {
    /// CAIP-2 network.
    pub network: String,
    /// Token contract (EIP-55).
    pub asset: String,
}

impl AssetLabels {
    /// The labels of `asset` on `network`, the address spelled EIP-55 whatever spelling it came
    /// in, so one token is one series.
    pub fn new(network: impl Into<String>, asset: &str) -> Self {
        let asset = Address::from_str(asset.trim())
            .map_or_else(|_| asset.to_owned(), |address| address.to_checksum(None));
        Self {
            network: network.into(),
            asset,
        }
    }
}

/// What happened to an escrowed payment's money.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum EscrowOutcome {
    /// Locked in the escrow (`authorize` mined).
    Authorized,
    /// Paid out to the worker and the treasury (`capture`).
    Captured,
    /// Returned to the payer by the gateway (`void`).
    Voided,
    /// Returned to the payer from the operator's wallet after a capture (`refund`).
    Refunded,
    /// Taken back by the payer after the capture deadline (`reclaim`).
    Reclaimed,
}

impl EscrowOutcome {
    /// Every outcome.
    pub const ALL: [Self; 5] = [
        Self::Authorized,
        Self::Captured,
        Self::Voided,
        Self::Refunded,
        Self::Reclaimed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorized => "authorized",
            Self::Captured => "captured",
            Self::Voided => "voided",
            Self::Refunded => "refunded",
            Self::Reclaimed => "reclaimed",
        }
    }
}
snake_case_label!(EscrowOutcome);

/// Labels of escrow outcomes: what happened, and to which money.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EscrowLabels {
    /// What happened.
    pub outcome: EscrowOutcome,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract (EIP-55).
    pub asset: String,
}

/// A facilitator call.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum FacilitatorOperation {
    /// `/verify`.
    Verify,
    /// `/settle`.
    Settle,
}

impl FacilitatorOperation {
    /// Every operation.
    pub const ALL: [Self; 2] = [Self::Verify, Self::Settle];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Verify => "verify",
            Self::Settle => "settle",
        }
    }
}
snake_case_label!(FacilitatorOperation);

/// What went wrong with a facilitator call.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum FacilitatorErrorKind {
    /// No verdict: unreachable, timed out, unparseable, or a settlement still pending.
    Unknown,
    /// A verdict against the payment (`isValid: false` / `success: false`).
    Refused,
}

impl FacilitatorErrorKind {
    /// Every kind.
    pub const ALL: [Self; 2] = [Self::Unknown, Self::Refused];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Refused => "refused",
        }
    }
}
snake_case_label!(FacilitatorErrorKind);

/// Labels of facilitator latency.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FacilitatorLabels {
    /// The call.
    pub operation: FacilitatorOperation,
}

/// Labels of facilitator errors.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FacilitatorErrorLabels {
    /// The call.
    pub operation: FacilitatorOperation,
    /// What went wrong.
    pub kind: FacilitatorErrorKind,
}

/// How a facilitator call ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum FacilitatorCallOutcome {
    /// A positive verdict (`isValid` / `success`).
    Ok,
    /// A verdict against the payment.
    Refused,
    /// No verdict.
    Unknown,
}

impl FacilitatorCallOutcome {
    /// Every outcome.
    pub const ALL: [Self; 3] = [Self::Ok, Self::Refused, Self::Unknown];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Refused => "refused",
            Self::Unknown => "unknown",
        }
    }
}
snake_case_label!(FacilitatorCallOutcome);

/// Labels of facilitator calls.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FacilitatorCallLabels {
    /// The call.
    pub operation: FacilitatorOperation,
    /// Its verdict.
    pub outcome: FacilitatorCallOutcome,
}

/// Labels of contract state transitions.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// State before.
    pub from: String,
    /// State after.
    pub to: String,
}

/// The `outcome` label values of verifications (a verdict's `verification_status`).
pub const VERIFICATION_OUTCOMES: [&str; 3] = ["passed", "failed", "inconclusive"];

/// Labels of verification outcomes.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerificationLabels {
    /// Policy id (`vp.schema_only.v1`, …).
    pub policy: String,
    /// `passed`, `failed` or `inconclusive`.
    pub outcome: String,
    /// The verdict's reason codes, ascending and comma-joined, or `none`.
    pub reason_code: String,
}

/// Labels of worker latency.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabels {
    /// Worker listing id.
    pub worker_id: String,
}

snake_case_label!(MismatchKind);

/// Labels of reconciliation mismatches.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MismatchLabels {
    /// Which disagreement.
    pub kind: MismatchKind,
}

/// How a reconciliation run ended.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Store and chain agree.
    Ok,
    /// At least one mismatch.
    Mismatch,
    /// The run could not finish (chain or database unavailable).
    Error,
}

impl ReconcileResult {
    /// Every result.
    pub const ALL: [Self; 3] = [Self::Ok, Self::Mismatch, Self::Error];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Mismatch => "mismatch",
            Self::Error => "error",
        }
    }
}
snake_case_label!(ReconcileResult);

/// Labels of reconciliation runs.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// How the run ended.
    pub result: ReconcileResult,
}

/// The gateway's metric set.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests served.
    pub http_requests: Family<HttpLabels, Counter>,
    /// Request latency, seconds.
    pub http_request_duration: Family<RouteLabels, Histogram>,
    /// Worker health probes.
    pub worker_probes: Family<ProbeLabels, Counter>,
    /// Workers that turned unhealthy.
    pub workers_marked_unhealthy: Counter,
    /// Workers that recovered.
    pub workers_marked_healthy: Counter,
    /// Settlement outcomes recorded by this instance.
    pub settlements: Family<SettlementLabels, Counter>,
    /// Atomic units settled by this instance. A float counter because amounts are uint256 and
    /// Prometheus values are doubles anyway; exact totals come from `hiregate reconcile`.
    pub settled_amount: Family<AssetLabels, Counter<f64, AtomicU64>>,
    /// Escrowed payments by outcome, network and asset, recorded by this instance.
    pub escrow_outcomes: Family<EscrowLabels, Counter>,
    /// Atomic units of escrowed payments by outcome (float: see `settled_amount`).
    pub escrow_amount: Family<EscrowLabels, Counter<f64, AtomicU64>>,
    /// Atomic units of capture fees paid to the treasury.
    pub escrow_fees: Family<AssetLabels, Counter<f64, AtomicU64>>,
    /// Facilitator `/verify` and `/settle` latency, seconds, whatever the outcome.
    pub facilitator_duration: Family<FacilitatorLabels, Histogram>,
    /// Facilitator calls without a positive verdict.
    pub facilitator_errors: Family<FacilitatorErrorLabels, Counter>,
    /// Every facilitator call, by verdict.
    pub facilitator_calls: Family<FacilitatorCallLabels, Counter>,
    /// Contract state transitions stored (seen on this instance's event bus).
    pub contract_transitions: Family<TransitionLabels, Counter>,
    /// Verification verdicts.
    pub verifications: Family<VerificationLabels, Counter>,
    /// Latency of the worker's answer to a forwarded attempt, seconds.
    pub worker_request_duration: Family<WorkerLabels, Histogram>,
    /// Mismatches found by the latest reconciliation run, by kind.
    pub reconciliation_mismatches: Family<MismatchLabels, Gauge>,
    /// Reconciliation runs.
    pub reconciliations: Family<ReconcileLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hiregate");
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests served",
            http_requests.clone(),
        );
        let http_request_duration = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            // 1 ms … ~32 s.
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            http_request_duration.clone(),
        );
        let worker_probes = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "worker_probes",
            "Worker health probes",
            worker_probes.clone(),
        );
        let workers_marked_unhealthy = Counter::default();
        registry.register(
            "workers_marked_unhealthy",
            "Workers that crossed the miss threshold",
            workers_marked_unhealthy.clone(),
        );
        let workers_marked_healthy = Counter::default();
        registry.register(
            "workers_marked_healthy",
            "Unhealthy workers that passed a probe again",
            workers_marked_healthy.clone(),
        );
        let settlements = Family::<SettlementLabels, Counter>::default();
        registry.register(
            "settlements",
            "Settlement outcomes (the contract state a settlement ended in)",
            settlements.clone(),
        );
        let settled_amount = Family::<AssetLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "settled_amount_atomic",
            "Token amount settled, in atomic units of the asset",
            settled_amount.clone(),
        );
        let escrow_outcomes = Family::<EscrowLabels, Counter>::default();
        registry.register(
            "escrow_outcomes",
            "Escrowed (auth-capture) payments by outcome: authorized, captured, voided, refunded, reclaimed",
            escrow_outcomes.clone(),
        );
        let escrow_amount = Family::<EscrowLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "escrow_amount_atomic",
            "Token amount of escrowed payments by outcome, in atomic units of the asset",
            escrow_amount.clone(),
        );
        let escrow_fees = Family::<AssetLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "escrow_fees_atomic",
            "Capture fees paid to the treasury, in atomic units of the asset",
            escrow_fees.clone(),
        );
        let facilitator_duration =
            Family::<FacilitatorLabels, Histogram>::new_with_constructor(|| {
                // 5 ms … ~80 s: a settle waits for a mined transaction.
                Histogram::new(exponential_buckets(0.005, 2.0, 15))
            });
        registry.register(
            "facilitator_request_duration_seconds",
            "Facilitator verify/settle latency",
            facilitator_duration.clone(),
        );
        let facilitator_errors = Family::<FacilitatorErrorLabels, Counter>::default();
        registry.register(
            "facilitator_errors",
            "Facilitator calls that gave no verdict (unknown) or a negative one (refused)",
            facilitator_errors.clone(),
        );
        let facilitator_calls = Family::<FacilitatorCallLabels, Counter>::default();
        registry.register(
            "facilitator_calls",
            "Facilitator verify/settle calls by verdict: ok, refused, unknown (no verdict)",
            facilitator_calls.clone(),
        );
        let contract_transitions = Family::<TransitionLabels, Counter>::default();
        registry.register(
            "contract_transitions",
            "Contract state transitions, by state before and after",
            contract_transitions.clone(),
        );
        let verifications = Family::<VerificationLabels, Counter>::default();
        registry.register(
            "verifications",
            "Deliverable verifications by policy, outcome and reason code",
            verifications.clone(),
        );
        let worker_request_duration =
            Family::<WorkerLabels, Histogram>::new_with_constructor(|| {
                // 5 ms … ~160 s: SLAs range from sub-second to minutes.
                Histogram::new(exponential_buckets(0.005, 2.0, 16))
            });
        registry.register(
            "worker_request_duration_seconds",
            "Latency of workers' answers to forwarded attempts",
            worker_request_duration.clone(),
        );
        let reconciliation_mismatches = Family::<MismatchLabels, Gauge>::default();
        registry.register(
            "reconciliation_mismatches",
            "Mismatches between the store and the chain found by the latest reconciliation",
            reconciliation_mismatches.clone(),
        );
        let reconciliations = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "reconciliations",
            "Reconciliation runs by result",
            reconciliations.clone(),
        );
        let metrics = Self {
            registry,
            http_requests,
            http_request_duration,
            worker_probes,
            workers_marked_unhealthy,
            workers_marked_healthy,
            settlements,
            settled_amount,
            escrow_outcomes,
            escrow_amount,
            escrow_fees,
            facilitator_duration,
            facilitator_errors,
            facilitator_calls,
            contract_transitions,
            verifications,
            worker_request_duration,
            reconciliation_mismatches,
            reconciliations,
        };
        metrics.start_outcomes_at_zero();
        metrics
    }

    /// Creates every outcome series whose labels are known without any configuration, at zero
    /// (`get_or_create_owned` adds a series without counting anything; the handle it returns is
    /// dropped).
    fn start_outcomes_at_zero(&self) {
        for outcome in SettlementResult::ALL {
            self.settlements
                .get_or_create_owned(&SettlementLabels { outcome });
        }
        for operation in FacilitatorOperation::ALL {
            for outcome in FacilitatorCallOutcome::ALL {
                self.facilitator_calls
                    .get_or_create_owned(&FacilitatorCallLabels { operation, outcome });
            }
            for kind in FacilitatorErrorKind::ALL {
                self.facilitator_errors
                    .get_or_create_owned(&FacilitatorErrorLabels { operation, kind });
            }
        }
        for policy in PolicyId::ALL {
            for outcome in VERIFICATION_OUTCOMES {
                self.verifications.get_or_create_owned(&VerificationLabels {
                    policy: policy.as_str().to_owned(),
                    outcome: outcome.to_owned(),
                    reason_code: "none".to_owned(),
                });
            }
        }
        for outcome in ProbeOutcome::ALL {
            self.worker_probes
                .get_or_create_owned(&ProbeLabels { outcome });
        }
        for result in ReconcileResult::ALL {
            self.reconciliations
                .get_or_create_owned(&ReconcileLabels { result });
        }
        // No run yet has found anything: the gauges read 0 until the first run sets them.
        for kind in MismatchKind::ALL {
            self.reconciliation_mismatches
                .get_or_create_owned(&MismatchLabels { kind });
        }
    }

    /// Creates the per-asset outcome series of `asset` on `network` at zero (settled amount,
    /// escrow outcomes and amounts, capture fees), if they do not exist yet: called at start for
    /// every configured token and for each listing's token as the gateway learns of it.
    pub fn track_asset(&self, network: &str, asset: &str) {
        let labels = AssetLabels::new(network, asset);
        self.settled_amount.get_or_create_owned(&labels);
        self.escrow_fees.get_or_create_owned(&labels);
        for outcome in EscrowOutcome::ALL {
            let escrow = EscrowLabels {
                outcome,
                network: labels.network.clone(),
                asset: labels.asset.clone(),
            };
            self.escrow_outcomes.get_or_create_owned(&escrow);
            self.escrow_amount.get_or_create_owned(&escrow);
        }
    }

    /// Publish a finished reconciliation: the mismatch gauges take its counts (every kind, so
    /// a kind that went back to zero shows zero) and the run is counted.
    pub fn record_reconciliation(&self, report: &ReconcileReport) {
        for kind in MismatchKind::ALL {
            let count = report.mismatches.iter().filter(|m| m.kind == kind).count();
            self.reconciliation_mismatches
                .get_or_create(&MismatchLabels { kind })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        let result = if report.ok() {
            ReconcileResult::Ok
        } else {
            ReconcileResult::Mismatch
        };
        self.reconciliations
            .get_or_create(&ReconcileLabels { result })
            .inc();
    }

    /// Count a verdict on a deliverable, once: its reason codes, ascending and comma-joined,
    /// form one label value (`none` without any), so sums over labels count verdicts.
    pub fn record_verification(&self, policy: &str, outcome: &str, reason_codes: &[u16]) {
        let mut codes = reason_codes.to_vec();
        codes.sort_unstable();
        codes.dedup();
        let reason_code = if codes.is_empty() {
            "none".to_owned()
        } else {
            codes
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        self.verifications
            .get_or_create(&VerificationLabels {
                policy: policy.to_owned(),
                outcome: outcome.to_owned(),
                reason_code,
            })
            .inc();
    }

    /// Count a contract moving from `from` to `to`.
    pub fn record_transition(&self, from: ContractState, to: ContractState) {
        self.contract_transitions
            .get_or_create(&TransitionLabels {
                from: from.as_str().to_owned(),
                to: to.as_str().to_owned(),
            })
            .inc();
    }

    /// Count a reconciliation that could not finish; the gauges keep the last finished run.
    pub fn record_reconciliation_error(&self) {
        self.reconciliations
            .get_or_create(&ReconcileLabels {
                result: ReconcileResult::Error,
            })
            .inc();
    }

    /// The current values in OpenMetrics text.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
