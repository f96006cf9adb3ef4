//! Worker registry: operators list workers, seekers discover them, and a background loop keeps
//! their health current.
//!
//! Flow: `register` probes the endpoint with the protocol's [`probe::WorkerProbe`] and stores
//! the listing only if the probe passes; `update` re-probes when the endpoint or the catalog
//! changes; `retire` hides a listing from discovery without deleting it (contracts keep
//! referring to it). [`health::run_health_checks`] probes every live listing each
//! `health.interval_ms`, marking it unhealthy after `health.miss_threshold` misses in a row and
//! healthy again after one pass; missed probes never delete anything.

pub mod health;
pub mod probe;

use std::sync::Arc;

use serde::Deserialize;

use self::probe::{ProbeFailure, ProbeRegistry};
use crate::{clock::Clock, metrics::Metrics, outbound::OutboundClient, settings::HealthSettings};
use hiregate_contracts::id::{PrincipalId, WorkerId};
use hiregate_store::listing::{
    invalid,
    metadata::{self, ListingMetadata},
    model::{
        self, EvmAddress, FeePolicy, HealthState, ListingPaymentFlow, MaxParallel, Network,
        PaymentSchemes, Protocol, ProtocolOptions, TaskCatalog, WorkerEndpoint, WorkerListing,
    },
};
use hiregate_store::{Store, StoreError, WorkerQuery, keys::CallbackSecret};

/// A registration request, parsed.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWorker {
    /// Base URL of the worker.
    #[schema(value_type = String)]
    pub endpoint: WorkerEndpoint,
    /// Protocol spoken there.
    pub protocol: Protocol,
    /// Payout address (EIP-55 or lowercase hex).
    #[schema(value_type = String)]
    pub pay_to: EvmAddress,
    /// Payment chain (CAIP-2, e.g. `eip155:84532`).
    #[schema(value_type = String)]
    pub network: Network,
    /// Payment token.
    #[schema(value_type = String)]
    pub asset: EvmAddress,
    /// Offered task types with price and output schema (at least one).
    #[schema(value_type = std::collections::BTreeMap<String, model::TaskOffer>)]
    pub tasks: TaskCatalog,
    /// Concurrent contracts allowed.
    #[schema(value_type = u32, minimum = 1)]
    pub max_parallel: MaxParallel,
    /// Protocol-specific settings (Superwire: `workflow_source_base64`).
    #[serde(default)]
    pub protocol_options: ProtocolOptions,
    /// Accepted x402 schemes, preferred first (default `["exact"]`).
    #[serde(default)]
    #[schema(value_type = Option<Vec<String>>)]
    pub payment_schemes: PaymentSchemes,
    /// Marketplace fee for escrowed contracts (default: `escrow.default_fee_bps`).
    #[serde(default)]
    pub fee_policy: Option<FeePolicy>,
    /// When `exact` contracts are paid: `authorization` (the default: after the work, only
    /// for a passing deliverable) or `upfront` (settled on chain before the worker is called;
    /// a rejected deliverable stays paid). `upfront` needs `payment_schemes` `["exact"]`.
    #[serde(default)]
    pub payment_flow: ListingPaymentFlow,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// What the worker does.
    #[serde(default)]
    pub description: Option<String>,
    /// JSON Schema task inputs must satisfy (checked at proposal).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<metadata::InputSchema>,
    /// Sample inputs, each valid against `input_schema`.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    pub examples: Option<Vec<serde_json::Value>>,
}

/// A partial update; absent fields stay as they are. The protocol cannot change (a different
/// protocol is a different worker).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerPatch {
    /// New base URL (re-probed).
    #[schema(value_type = Option<String>)]
    pub endpoint: Option<WorkerEndpoint>,
    /// New payout address (applies to new contracts).
    #[schema(value_type = Option<String>)]
    pub pay_to: Option<EvmAddress>,
    /// New payment chain.
    #[schema(value_type = Option<String>)]
    pub network: Option<Network>,
    /// New payment token.
    #[schema(value_type = Option<String>)]
    pub asset: Option<EvmAddress>,
    /// New catalog, replacing the old one (re-probed).
    #[schema(value_type = Option<std::collections::BTreeMap<String, model::TaskOffer>>)]
    pub tasks: Option<TaskCatalog>,
    /// New concurrency bound.
    #[schema(value_type = Option<u32>, minimum = 1)]
    pub max_parallel: Option<MaxParallel>,
    /// New accepted schemes (apply to new contracts).
    #[schema(value_type = Option<Vec<String>>)]
    pub payment_schemes: Option<PaymentSchemes>,
    /// New marketplace fee (applies to new contracts).
    pub fee_policy: Option<FeePolicy>,
    /// New payment flow (applies to new contracts; see [`NewWorker::payment_flow`]).
    pub payment_flow: Option<ListingPaymentFlow>,
    /// New display name.
    pub name: Option<String>,
    /// New description.
    pub description: Option<String>,
    /// New input schema (the examples are checked against it again).
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<metadata::InputSchema>,
    /// New sample inputs, replacing the old ones.
    #[schema(value_type = Option<Vec<Object>>)]
    pub examples: Option<Vec<serde_json::Value>>,
    /// New protocol settings, replacing the old ones (re-probed: a Superwire workflow is
    /// validated again). Contracts signed before keep the workflow they pinned by digest and
    /// refuse to run another one (`workflow_changed`).
    pub protocol_options: Option<ProtocolOptions>,
}

/// A registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No such listing, or not the caller's (the two are indistinguishable on purpose).
    #[error("worker not found")]
    NotFound,
    /// The listing is retired and can no longer change.
    #[error("worker is retired")]
    Retired,
    /// Someone else changed the listing between read and write.
    #[error("the worker changed during the update; read it again and retry")]
    ConcurrentUpdate,
    /// No probe exists for this protocol, so it cannot be listed yet.
    #[error("protocol `{}` cannot be registered yet: no probe for it", .0.as_str())]
    ProtocolNotSupported(Protocol),
    /// The endpoint failed its probe.
    #[error(transparent)]
    Probe(#[from] ProbeFailure),
    /// A plain `http` endpoint while `outbound.require_https` is on.
    #[error("the endpoint must be an https URL on this gateway (outbound.require_https)")]
    InsecureEndpoint {
        /// The endpoint given.
        endpoint: String,
    },
    /// A field breaks a rule of this gateway (e.g. a fee above `escrow.max_fee_bps`).
    #[error(transparent)]
    Invalid(#[from] invalid::InvalidField),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The registry service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct WorkerRegistry {
    store: Store,
    outbound: OutboundClient,
    probes: Arc<ProbeRegistry>,
    health: HealthSettings,
    metrics: Arc<Metrics>,
    clock: Clock,
    max_fee_bps: u16,
}

impl WorkerRegistry {
    /// Assemble the service from its parts.
    pub fn new(
        store: Store,
        outbound: OutboundClient,
        probes: Arc<ProbeRegistry>,
        health: HealthSettings,
        metrics: Arc<Metrics>,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            outbound,
            probes,
            health,
            metrics,
            clock,
            max_fee_bps: hiregate_contracts::escrow::MAX_FEE_BPS,
        }
    }

    /// Bounds listings' marketplace fees (`escrow.max_fee_bps`).
    #[must_use]
    pub fn with_max_fee_bps(mut self, max_fee_bps: u16) -> Self {
        self.max_fee_bps = max_fee_bps;
        self
    }

    /// HIRE: all communication over HTTPS. Checked before any probe, so nothing is sent to a
    /// plain http endpoint.
    fn check_https(&self, endpoint: &WorkerEndpoint) -> Result<(), RegistryError> {
        if self.outbound.requires_https() && endpoint.url().scheme() != "https" {
            return Err(RegistryError::InsecureEndpoint {
                endpoint: endpoint.url().to_string(),
            });
        }
        Ok(())
    }

    fn check_fee(&self, fee: Option<&FeePolicy>) -> Result<(), invalid::InvalidField> {
        let Some(fee) = fee else { return Ok(()) };
        fee.check()?;
        if fee.fee_bps > self.max_fee_bps {
            return Err(invalid::InvalidField::new(
                "fee_policy.fee_bps",
                format!(
                    "must be at most {} (this gateway's escrow.max_fee_bps)",
                    self.max_fee_bps
                ),
            ));
        }
        Ok(())
    }

    /// Probe and list a new worker for `operator`. Returns the listing and its callback secret
    /// (the only time the secret is shown).
    pub async fn register(
        &self,
        operator: &PrincipalId,
        new: NewWorker,
    ) -> Result<(WorkerListing, CallbackSecret), RegistryError> {
        self.check_https(&new.endpoint)?;
        self.check_fee(new.fee_policy.as_ref())?;
        new.payment_flow.check(&new.payment_schemes)?;
        let metadata = ListingMetadata {
            name: new.name,
            description: new.description,
            input_schema: new.input_schema,
            examples: new.examples.unwrap_or_default(),
        };
        metadata.check()?;
        let report = self
            .probe(
                new.protocol,
                &new.endpoint,
                &new.tasks,
                &new.protocol_options,
            )
            .await?;
        let now = self.clock.now();
        let listing = WorkerListing {
            id: WorkerId::generate(),
            operator_id: operator.clone(),
            endpoint: new.endpoint,
            protocol: new.protocol,
            pay_to: new.pay_to,
            network: new.network,
            asset: new.asset,
            tasks: new.tasks,
            max_parallel: new.max_parallel,
            protocol_options: new.protocol_options,
            payment_schemes: new.payment_schemes,
            fee_policy: new.fee_policy,
            payment_flow: new.payment_flow,
            metadata,
            health: HealthState::Healthy,
            consecutive_misses: 0,
            last_probe_at: Some(now),
            last_probe_error: None,
            created_at: now,
            updated_at: now,
            retired_at: None,
            probe_diagnostics: report.diagnostics,
        };
        let secret = CallbackSecret::generate();
        self.store
            .insert_worker(&listing, &secret, now + self.health_interval())
            .await?;
        self.track_asset_of(&listing);
        tracing::info!(worker_id = %listing.id, operator_id = %operator, protocol = listing.protocol.as_str(), "worker registered");
        Ok((listing, secret))
    }

    /// `operator`'s listing `id` (retired ones included).
    pub async fn get_owned(
        &self,
        operator: &PrincipalId,
        id: &WorkerId,
    ) -> Result<WorkerListing, RegistryError> {
        match self.store.get_worker(id).await? {
            Some(listing) if &listing.operator_id == operator => Ok(listing),
            _ => Err(RegistryError::NotFound),
        }
    }

    /// Apply `patch` to `operator`'s live listing, re-probing if the endpoint or the catalog
    /// changes.
    pub async fn update(
        &self,
        operator: &PrincipalId,
        id: &WorkerId,
        patch: WorkerPatch,
    ) -> Result<WorkerListing, RegistryError> {
        let current = self.get_owned(operator, id).await?;
        if current.retired_at.is_some() {
            return Err(RegistryError::Retired);
        }
        let reprobe =
            patch.endpoint.is_some() || patch.tasks.is_some() || patch.protocol_options.is_some();
        let mut next = current.clone();
        if let Some(endpoint) = patch.endpoint {
            self.check_https(&endpoint)?;
            next.endpoint = endpoint;
        }
        if let Some(pay_to) = patch.pay_to {
            next.pay_to = pay_to;
        }
        if let Some(network) = patch.network {
            next.network = network;
        }
        if let Some(asset) = patch.asset {
            next.asset = asset;
        }
        if let Some(tasks) = patch.tasks {
            next.tasks = tasks;
        }
        if let Some(options) = patch.protocol_options {
            next.protocol_options = options;
        }
        if let Some(max_parallel) = patch.max_parallel {
            next.max_parallel = max_parallel;
        }
        if let Some(schemes) = patch.payment_schemes {
            next.payment_schemes = schemes;
        }
        if patch.fee_policy.is_some() {
            self.check_fee(patch.fee_policy.as_ref())?;
            next.fee_policy = patch.fee_policy;
        }
        if let Some(flow) = patch.payment_flow {
            next.payment_flow = flow;
        }
        // Either may have changed: an upfront listing stays `exact`-only.
        next.payment_flow.check(&next.payment_schemes)?;
        if let Some(name) = patch.name {
            next.metadata.name = Some(name);
        }
        if let Some(description) = patch.description {
            next.metadata.description = Some(description);
        }
        if let Some(schema) = patch.input_schema {
            next.metadata.input_schema = Some(schema);
        }
        if let Some(examples) = patch.examples {
            next.metadata.examples = examples;
        }
        next.metadata.check()?;
        // Never equal to the previous value, so the optimistic check below cannot pass twice.
        let now = self
            .clock
            .now()
            .max(current.updated_at + chrono::Duration::milliseconds(1));
        if reprobe {
            let report = self
                .probe(
                    next.protocol,
                    &next.endpoint,
                    &next.tasks,
                    &next.protocol_options,
                )
                .await?;
            next.probe_diagnostics = report.diagnostics;
            next.health = HealthState::Healthy;
            next.consecutive_misses = 0;
            next.last_probe_at = Some(now);
            next.last_probe_error = None;
        }
        next.updated_at = now;
        if !self.store.update_worker(&next, current.updated_at).await? {
            return Err(RegistryError::ConcurrentUpdate);
        }
        Ok(next)
    }

    /// Retire `operator`'s listing: it leaves discovery, existing contracts finish. Idempotent.
    pub async fn retire(
        &self,
        operator: &PrincipalId,
        id: &WorkerId,
    ) -> Result<WorkerListing, RegistryError> {
        let listing = self
            .store
            .retire_worker(id, operator, self.clock.now())
            .await?
            .ok_or(RegistryError::NotFound)?;
        tracing::info!(worker_id = %id, "worker retired");
        Ok(listing)
    }

    /// Listings matching `query`.
    pub async fn discover(&self, query: &WorkerQuery) -> Result<Vec<WorkerListing>, RegistryError> {
        Ok(self.store.list_workers(query).await?)
    }

    /// Claim the listings whose probe is due, probe them concurrently and record the results.
    /// Returns how many were probed.
    pub async fn probe_due_workers(&self, batch: u32) -> Result<usize, StoreError> {
        use futures::StreamExt as _;

        let now = self.clock.now();
        let due = self
            .store
            .claim_workers_due_for_probe(now, now + self.health_interval(), batch)
            .await?;
        let count = due.len();
        let results: Vec<Result<(), StoreError>> = futures::stream::iter(due)
            .map(|listing| async move { self.probe_and_record(&listing).await })
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(count)
    }

    /// The listing's token gets its per-asset metric series (at zero until money moves), so
    /// alerts on a listed token's outcomes work before its first payment.
    fn track_asset_of(&self, listing: &WorkerListing) {
        self.metrics.track_asset(
            &listing.network.to_string(),
            &listing.asset.address().to_string(),
        );
    }

    async fn probe_and_record(&self, listing: &WorkerListing) -> Result<(), StoreError> {
        self.track_asset_of(listing);
        let result = match self
            .probe(
                listing.protocol,
                &listing.endpoint,
                &listing.tasks,
                &listing.protocol_options,
            )
            .await
        {
            Ok(_) => hiregate_store::ProbeResult::Passed,
            Err(error) => hiregate_store::ProbeResult::Failed {
                reason: error.to_string(),
            },
        };
        let outcome = match result {
            hiregate_store::ProbeResult::Passed => crate::metrics::ProbeOutcome::Passed,
            hiregate_store::ProbeResult::Failed { .. } => crate::metrics::ProbeOutcome::Failed,
        };
        self.metrics
            .worker_probes
            .get_or_create(&crate::metrics::ProbeLabels { outcome })
            .inc();
        let recorded = self
            .store
            .record_probe(
                &listing.id,
                &result,
                self.health.miss_threshold,
                self.clock.now(),
            )
            .await?;
        if let Some((health, misses)) = recorded
            && health != listing.health
        {
            match health {
                HealthState::Unhealthy => {
                    self.metrics.workers_marked_unhealthy.inc();
                    tracing::warn!(worker_id = %listing.id, misses, "worker marked unhealthy");
                }
                HealthState::Healthy => {
                    self.metrics.workers_marked_healthy.inc();
                    tracing::info!(worker_id = %listing.id, "worker healthy again");
                }
            }
        }
        Ok(())
    }

    async fn probe(
        &self,
        protocol: Protocol,
        endpoint: &WorkerEndpoint,
        tasks: &TaskCatalog,
        options: &ProtocolOptions,
    ) -> Result<probe::ProbeReport, RegistryError> {
        let probe = self
            .probes
            .get(protocol)
            .ok_or(RegistryError::ProtocolNotSupported(protocol))?;
        Ok(probe
            .probe(
                &self.outbound,
                endpoint,
                &tasks.task_types(),
                options,
                self.health.probe_timeout(),
            )
            .await?)
    }

    fn health_interval(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.health.interval()).unwrap_or(chrono::Duration::MAX)
    }
}
