//! The paid hire: contracts are proposed and signed, paid with x402, forwarded to the worker,
//! judged, and settled only when the deliverable passed.
//!
//! | module | role |
//! |---|---|
//! | this module | [`HireService`]: its parts, `POST /v1/contracts` ([`HireService::create_contract`]) and the contract view |
//! | [`execute`] | the execute flow: one lock, one loop over the contract's state, duplicates, stored answers |
//! | `payment` | `offered`: the 402 and the payment (prechecks, facilitator /verify, `paid`) |
//! | `authorize` | escrowed payments: `offered` → `authorizing` → `paid` once the escrow's `authorize` is mined |
//! | `submission` | a payment between its checks and its row: the escrowed submission, stored key spellings, the refused-authorization state, the facilitator-unavailable answer (shared by `payment` and `authorize`) |
//! | `forward` | `paid` → `executing`: an attempt at the worker, and its answer (delivered, pending, failed) |
//! | `hireable` | whether the listing can work now: asked when the payment arrives (retired, task type withdrawn, unhealthy, full: refused before anything is held) and before each attempt (an unhealthy worker is waited for within the SLA, else the attempt ends without calling it) |
//! | `stream` | stream outputs: the worker's SSE read to its end (relayed, resumed with `Last-Event-ID`, bounded) and assembled into the deliverable before `delivered` |
//! | `judge` | `delivered` → `verifying` → `accepted`/`rejected`: the pinned policy on the stored deliverable |
//! | `settle` | `accepted`/`settlement_unknown` → `settling` → `settled`/`settlement_failed`, decided by the chain (escrowed: the escrow's capture, decided by its events) |
//! | `release` | escrowed money back to the payer: void, the payer's reclaim, the arbiter's refund after capture; their sweep |
//! | [`escrow`] | the gateway as escrow operator of `auth-capture` contracts: one operator per chain, `PaymentInfo` from the stored offer, the capture order of the terms |
//! | [`bazaar`] | x402 discovery metadata of an offer: the `bazaar` extension and `resource.serviceName`/`tags` from the listing |
//! | [`offer`] | the x402 offer and the authorization window arithmetic |
//! | [`offered`] | the unpaid execute's hot path: offered contracts' 402s served from memory |
//! | [`evidence`] | fetching files and evidence a deliverable names, for verification and disputes |
//! | [`crosscheck`] | `vp.crosscheck.v1` quorums: the named verifiers' eligibility at proposal (independent, healthy, serving `/verify`), their `/verify` votes, fail-closed |
//! | [`relay`] | worker events (Superwire SSE, stream output events, HIRE progress reports) appended to the contract's event log |
//! | [`locks`] | one in-process lock per contract |
//! | [`queue`] | a worker's queue beyond `max_parallel`: a short wait is held and answered with the result, a long one 202 with the position (forwarded in order when a slot frees); 429 past it |
//! | `slots` | each worker's slots as this instance sees them: the slot time (EWMA), held executes woken in queue order the moment a slot frees |
//! | [`error`] | [`error::HireError`]: the engine's refusals and faults, with a stable [`error::ErrorCode`] |
//! | [`outcome`] | [`outcome::Outcome`]: what a hire came to (payment required, accepted, pending, queued, failed), for each transport to render |
//! | [`pending`] | pending work: durable poll jobs, worker callbacks, SLA deadlines; the first terminal report wins |
//! | [`deadlines`] | authorizations settled or voided before `validBefore`, stale `settling` rescued; the background runner |
//! | [`disputes`] | disputes of accepted (seeker) and rejected (operator) contracts: replay, arbiter decisions, the silent arbiter's void |
//! | [`protocol_terms`] | protocol choices pinned in the terms at proposal: WattSwarm profile and runtime, Superwire workflow digest and cache reuse |
//! | [`listing`] | `GET /v1/contracts`: the caller's contracts, filtered, newest first, cursor pages |
//! | [`cancel`] | `POST /v1/contracts/{id}/cancel`: before delivery → `cancelled`, authorization voided |
//! | [`receipts`] | signed receipts of terminal contracts (issued once per outcome, stored) and the JSON-lines export of the event log |
//! | `recovery` | crash recovery: contracts left in a working state past its time bound are taken over by one instance and resumed |
//! | [`resource`] | the stable x402 resource of a listing's task type: the unpaid 402 signed in memory (nothing stored), the paid offer made a contract once and driven by execute, the contract's capability token |
//! | [`sweep`] | background settlement of accepted contracts whose acceptance window ended, and reconciliation of unknown outcomes |
//!
//! Flow of a contract: [`HireService::create_contract`] checks the worker (listed, healthy, not
//! retired, offers the task type, speaks a protocol we have an adapter for), checks the input
//! against the listing's `input_schema` (422 `input_schema_violation` with the failing paths), reads the token's
//! EIP-712 domain, builds [`ContractTerms`] with the contracts crate (schemas admitted under
//! the hostile-schema limits, policy bound, input digested), sizes the authorization window,
//! signs the contract token and stores contract + offer + first event. Execute is in
//! [`execute`].

mod authorize;
pub mod bazaar;
pub mod cancel;
pub mod crosscheck;
pub mod deadlines;
pub mod disputes;
pub mod error;
pub mod escrow;
pub mod evidence;
pub mod execute;
mod forward;
mod hireable;
mod judge;
pub mod listing;
pub mod locks;
pub mod offer;
pub mod offered;
pub mod outcome;
mod payment;
pub mod pending;
pub mod protocol_terms;
pub mod queue;
pub mod receipts;
mod recovery;
pub mod relay;
mod release;
pub mod resource;
mod settle;
mod slots;
mod stream;
mod submission;
pub mod sweep;

use std::{str::FromStr, sync::Arc};

use alloy::primitives::U256;
use chrono::Utc;
use hiregate_contracts::{
    escrow::EscrowPolicy,
    id::{ContractId, SeekerId},
    metering::Metering,
    money::{AtomicAmount as ContractAmount, EvmAddress as ContractAddress, PaymentScheme, Price},
    policy::PolicyRequest,
    schema::{OutputSchema, SchemaLimits},
    state::ContractState,
    terms::{
        ContractProposal, ContractTerms, EndpointUrl, OfferContext, RetryPolicy, Sla, TaskType,
        TermsError, TermsLimits, WebhookUrl, WorkerOffer, WorkerParty,
        WorkerProtocol as TermsProtocol,
    },
    time::Timestamp,
    token::KeyRing,
    verify::Verifier,
};
use hiregate_payments::Facilitator;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use self::{
    bazaar::ListingDiscovery,
    error::{ErrorCode, HireError},
    locks::ContractLocks,
    offer::{AuthorizationWindow, StoredOffer},
    offered::OfferCache,
};
use crate::{
    adapters::ProtocolAdapters,
    assets::{AssetDirectory, AssetInfo, AssetLookupError},
    clock::Clock,
    outbound::OutboundClient,
    settings::Config,
};
use hiregate_store::{
    ContractRecord, NewContract, NewContractEvent, Store, StoreError,
    ids::{PrincipalId, WorkerId},
    listing::model::{HealthState, Protocol, WorkerListing},
};

/// `POST /v1/contracts` body. In the OpenAPI document the `contracts` crate's types are JSON
/// objects; their fields are defined (and checked) by that crate.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContractRequest {
    /// The listing to hire (`wk_…`).
    #[schema(value_type = String)]
    pub worker_id: WorkerId,
    /// One of the listing's task types.
    pub task_type: String,
    /// The task input (part of the signed terms); must satisfy the listing's `input_schema`.
    #[schema(value_type = Object)]
    pub input: Value,
    /// A stricter output schema, required in addition to the listing's.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    /// Verification policy binding (default `vp.schema_only.v1`): `contracts::policy`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub verification: Option<PolicyRequest>,
    /// Service levels (default 60 s per attempt): `contracts::terms::Sla`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub sla: Option<Sla>,
    /// Attempts under one payment (default 3): `contracts::terms::RetryPolicy`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub retry_policy: Option<RetryPolicy>,
    /// Where lifecycle webhooks go (https).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub webhook_url: Option<WebhookUrl>,
    /// Dispute window after acceptance, seconds (default `contracts.default_acceptance_window_s`).
    #[serde(default)]
    pub acceptance_window_s: Option<u64>,
    /// `exact` or `auth-capture` (escrowed); default: the listing's first accepted scheme.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub payment_scheme: Option<PaymentScheme>,
    /// WattSwarm workers: the execution profile, one the executor declares in
    /// `/capabilities` (default: its first declared profile).
    #[serde(default)]
    pub profile: Option<String>,
    /// Superwire workers: a retry may reuse the agent outputs earlier attempts cached
    /// (default false: each attempt runs with its own `cache_key`).
    #[serde(default)]
    pub reuse_cached_outputs: Option<bool>,
}

/// Everything the hire needs. Cheap to clone.
#[derive(Clone)]
pub struct HireService {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    store: Store,
    outbound: OutboundClient,
    adapters: ProtocolAdapters,
    facilitator: Option<Arc<dyn Facilitator>>,
    keys: KeyRing,
    assets: AssetDirectory,
    verifier: Verifier,
    locks: ContractLocks,
    slots: slots::WorkerSlots,
    offers: OfferCache,
    escrow: escrow::EscrowOperators,
    base_url: Url,
    metrics: Arc<crate::metrics::Metrics>,
    clock: Clock,
}

impl std::fmt::Debug for HireService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HireService")
            .field("base_url", &self.inner.base_url.as_str())
            .field("facilitator", &self.inner.facilitator.is_some())
            .field("adapters", &self.inner.adapters)
            .field("assets", &self.inner.assets)
            .finish_non_exhaustive()
    }
}

/// The parts a [`HireService`] is built from.
pub struct HireParts {
    /// Validated settings.
    pub config: Config,
    /// Persistence.
    pub store: Store,
    /// The SSRF-filtering client.
    pub outbound: OutboundClient,
    /// Worker protocol adapters.
    pub adapters: ProtocolAdapters,
    /// Verifies and settles payments; `None` answers 503 to every payment.
    pub facilitator: Option<Arc<dyn Facilitator>>,
    /// The gateway's signing keys.
    pub keys: KeyRing,
    /// Token metadata.
    pub assets: AssetDirectory,
    /// The escrow operators (`captureAuthorizer`) of the chains with an operator key.
    pub escrow: escrow::EscrowOperators,
    /// Public URL of this gateway.
    pub base_url: Url,
    /// The app's metrics (worker latency, verification outcomes).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The wall clock (money deadlines read the chain's clock through `assets`).
    pub clock: Clock,
}

impl std::fmt::Debug for HireParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HireParts")
            .field("base_url", &self.base_url.as_str())
            .finish_non_exhaustive()
    }
}

/// A freshly signed contract.
#[derive(Debug, Clone)]
pub struct CreatedContract {
    /// Contract id.
    pub contract_id: ContractId,
    /// The 201 body.
    pub body: Value,
}

/// What an offer's authorization window allows: the window itself, the offer's
/// `maxTimeoutSeconds`, and when the contract token expires.
struct OfferBounds {
    window: AuthorizationWindow,
    max_timeout_s: u64,
    token_expiry: Timestamp,
}

impl HireService {
    /// Assemble the service.
    pub fn new(parts: HireParts) -> Self {
        Self {
            inner: Arc::new(Inner {
                config: parts.config,
                store: parts.store,
                outbound: parts.outbound,
                adapters: parts.adapters,
                facilitator: parts.facilitator,
                keys: parts.keys,
                assets: parts.assets,
                verifier: Verifier::default(),
                locks: ContractLocks::default(),
                slots: slots::WorkerSlots::default(),
                offers: OfferCache::new(parts.clock.clone()),
                escrow: parts.escrow,
                base_url: parts.base_url,
                metrics: parts.metrics,
                clock: parts.clock,
            }),
        }
    }

    /// The 402s of offered contracts this instance serves from memory; its
    /// [`OfferCache::follow`] loop runs with the app's background tasks.
    pub fn offer_cache(&self) -> OfferCache {
        self.inner.offers.clone()
    }

    /// The public keys that verify contract tokens (and, later, receipts).
    pub fn jwks(&self) -> hiregate_contracts::token::Jwks {
        self.inner.keys.jwks()
    }

    /// The wall clock the engine reads.
    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Now, by the engine's clock.
    fn now(&self) -> chrono::DateTime<Utc> {
        self.inner.clock.now()
    }

    /// The gateway's public base URL.
    pub fn base_url(&self) -> &Url {
        &self.inner.base_url
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}{path}",
            self.inner.base_url.as_str().trim_end_matches('/')
        )
    }

    /// Whether the facilitator submits a payer's EIP-2612 permit with a Permit2 settlement (the
    /// `eip2612GasSponsoring` extension): the embedded one does; an external one is not assumed to.
    fn submits_eip2612_permits(&self) -> bool {
        self.inner.config.facilitator.mode == crate::settings::FacilitatorMode::Embedded
    }

    /// For an `upto` contract, the address its payer must name as the facilitator allowed to
    /// choose the settled amount: the one the facilitator's `/supported` advertises for `upto`
    /// on the contract's network. `None` for other schemes; a 422 when the facilitator does
    /// not settle `upto` there.
    async fn upto_facilitator(
        &self,
        terms: &ContractTerms,
    ) -> Result<Option<alloy::primitives::Address>, HireError> {
        if terms.scheme() != PaymentScheme::Upto {
            return Ok(None);
        }
        let network = format!("eip155:{}", terms.price().network().chain_id());
        let unavailable = |why: String| {
            HireError::unprocessable(
                ErrorCode::PaymentSchemeNotAccepted,
                format!("`upto` cannot be paid on {network} here: {why}"),
            )
        };
        let Some(facilitator) = &self.inner.facilitator else {
            return Err(unavailable("no facilitator is configured".to_owned()));
        };
        let supported = facilitator.supported().await.map_err(|error| {
            HireError::unavailable(
                ErrorCode::FacilitatorUnavailable,
                format!("the facilitator's /supported could not be read: {error}"),
                5,
            )
        })?;
        supported
            .kinds
            .iter()
            .filter(|kind| kind.scheme == "upto" && kind.network == network)
            .find_map(|kind| {
                kind.extra
                    .as_ref()?
                    .get(hiregate_payments::permit2::upto::FACILITATOR_ADDRESS_KEY)?
                    .as_str()?
                    .parse()
                    .ok()
            })
            .map(Some)
            .ok_or_else(|| unavailable("the facilitator does not settle it".to_owned()))
    }

    fn execute_url(&self, contract_id: &str) -> String {
        self.url(&format!("/v1/contracts/{contract_id}/execute"))
    }

    fn contract_url(&self, contract_id: &str) -> String {
        self.url(&format!("/v1/contracts/{contract_id}"))
    }

    fn events_url(&self, contract_id: &str) -> String {
        self.url(&format!("/v1/contracts/{contract_id}/events"))
    }

    /// Propose, check and sign a contract for `seeker`: the listing and the proposal checked,
    /// the terms built and bounded, the contract stored `offered` with its x402 offer.
    pub async fn create_contract(
        &self,
        seeker: &PrincipalId,
        request: ContractRequest,
        correlation_id: &str,
    ) -> Result<CreatedContract, HireError> {
        let (listing, asset) = self.hireable_listing(&request).await?;
        let now = Timestamp::from(self.now());
        let terms = self.proposed_terms(&listing, request, seeker, now).await?;
        offer::check_transfer_method(&terms, &asset)?;
        let bounds = self.bounded_window(&terms)?;
        let contract_id = terms.contract_id().clone();
        let upto_facilitator = self.upto_facilitator(&terms).await?;
        let stored_offer = StoredOffer::build(
            &terms,
            &asset,
            listing.pay_to.address(),
            &self.execute_url(contract_id.as_str()),
            bounds.max_timeout_s,
            &ListingDiscovery {
                name: listing.metadata.name.as_deref(),
                description: listing.metadata.description.as_deref(),
                input_schema: listing.metadata.input_schema.as_ref().map(|s| s.as_json()),
            },
            self.submits_eip2612_permits(),
            upto_facilitator,
        );
        let signed = self.sign_and_store(
            &terms,
            &stored_offer,
            &bounds,
            &listing,
            seeker,
            now,
            correlation_id,
        );
        let (token, terms_hash, terms_json) = signed.await?;
        tracing::info!(contract_id = %contract_id, worker_id = %listing.id, seeker_id = %seeker, "contract offered");
        let body = json!({
            "contract_id": contract_id,
            "correlation_id": correlation_id,
            "state": "offered",
            "terms": terms_json,
            "terms_hash": terms_hash,
            "gateway_jws": token,
            "jwks_url": self.url("/.well-known/jwks.json"),
            "payment": {
                "x402": stored_offer.payment_required,
                "informational": stored_offer.informational(),
                "authorization_window": bounds.window,
            },
            "links": {
                "self": self.contract_url(contract_id.as_str()),
                "execute": self.execute_url(contract_id.as_str()),
                "events": self.events_url(contract_id.as_str()),
            },
            "offer_expires_at": terms.offer_expires_at(),
        });
        Ok(CreatedContract { contract_id, body })
    }

    /// The listing `request` names, if it can be hired as asked (listed, hireable, the input
    /// fits, a webhook it can reach, a protocol with an adapter), and its payment asset.
    async fn hireable_listing(
        &self,
        request: &ContractRequest,
    ) -> Result<(WorkerListing, AssetInfo), HireError> {
        let inner = &self.inner;
        let listing = inner
            .store
            .get_worker(&request.worker_id)
            .await?
            .ok_or(HireError::not_found("worker"))?;
        check_hireable(&listing, &request.task_type)?;
        check_input(&listing, &request.input)?;
        if let Some(webhook) = &request.webhook_url
            && inner.outbound.requires_https()
            && webhook.as_url().scheme() != "https"
        {
            // Refused now rather than every delivery failing later.
            return Err(HireError::unprocessable(
                ErrorCode::WebhookUrlNotHttps,
                "webhook_url must be an https URL on this gateway (outbound.require_https)",
            )
            .with_details(json!({
                "field": "webhook_url",
                "required_scheme": "https",
                "setting": "outbound.require_https",
            })));
        }
        if inner.adapters.get(listing.protocol).is_none() {
            return Err(HireError::protocol_not_supported(format!(
                "workers speaking `{}` cannot be hired yet",
                listing.protocol.as_str()
            )));
        }
        let asset = inner
            .assets
            .lookup(listing.network.chain_id(), listing.asset.address())
            .await
            .map_err(|error| match error {
                AssetLookupError::Unreachable { .. } => {
                    HireError::unavailable(ErrorCode::ChainUnavailable, error.to_string(), 5)
                }
                other => HireError::unprocessable(
                    ErrorCode::AssetNotSupported,
                    format!("the worker's payment asset cannot be used: {other}"),
                ),
            })?;
        Ok((listing, asset))
    }

    /// The terms of `request` with `listing`'s worker: the payment scheme it accepts (escrow
    /// policy included), its offer, the protocol choices pinned, the proposal admitted by the
    /// contracts crate, and the crosscheck verifiers it names eligible.
    async fn proposed_terms(
        &self,
        listing: &WorkerListing,
        request: ContractRequest,
        seeker: &PrincipalId,
        now: Timestamp,
    ) -> Result<ContractTerms, HireError> {
        let inner = &self.inner;
        let scheme = request
            .payment_scheme
            .unwrap_or_else(|| listing.payment_schemes.default_scheme());
        if !listing.payment_schemes.accepts(scheme) {
            return Err(HireError::unprocessable(
                ErrorCode::PaymentSchemeNotAccepted,
                format!("the worker does not accept `{scheme}` payments"),
            )
            .with_details(json!({ "accepted": listing.payment_schemes.as_slice() })));
        }
        let escrow = match scheme {
            PaymentScheme::Exact | PaymentScheme::Upto => None,
            PaymentScheme::AuthCapture => Some(self.escrow_policy(listing)?),
        };
        let (offer, metering) = worker_offer(listing, &request.task_type, scheme)?;
        let execution = protocol_terms::pin(
            &inner.outbound,
            listing,
            protocol_terms::ExecutionChoices {
                profile: request.profile.as_deref(),
                reuse_cached_outputs: request.reuse_cached_outputs,
            },
        )
        .await?;
        let settings = &inner.config.contracts;
        let proposal = ContractProposal {
            worker_id: offer.worker.id().clone(),
            task_type: offer.task_type.clone(),
            input: request.input,
            output_schema: request.output_schema,
            verification: request.verification,
            sla: request.sla,
            retry_policy: request.retry_policy,
            webhook_url: request.webhook_url,
            acceptance_window_s: Some(
                request
                    .acceptance_window_s
                    .unwrap_or(settings.default_acceptance_window_s),
            ),
        };
        let seeker_id = SeekerId::from_str(seeker.as_str()).map_err(HireError::internal)?;
        let context = OfferContext {
            contract_id: ContractId::generate(),
            seeker: seeker_id,
            created_at: now,
            offer_ttl_s: settings.offer_ttl_s,
            escrow,
        };
        let mut terms =
            ContractTerms::from_proposal(proposal, &offer, context, &TermsLimits::default())
                .map_err(|e| terms_error(&e))?
                .with_execution(execution);
        if scheme == PaymentScheme::Upto {
            // Checked by `worker_offer`: an `upto` offer is a metered one.
            let metering =
                metering.ok_or_else(|| HireError::internal_msg("upto offer without metering"))?;
            terms = terms.with_metering(metering).map_err(|e| terms_error(&e))?;
        }
        crosscheck::check_verifiers(&inner.store, &inner.outbound, listing, terms.verification())
            .await?;
        Ok(terms)
    }

    /// The authorization window of `terms`, checked against the gateway's bounds (the escrow's
    /// for `auth-capture`, one authorization's for `exact`), and the offer's `maxTimeoutSeconds`
    /// and contract token expiry it implies.
    fn bounded_window(&self, terms: &ContractTerms) -> Result<OfferBounds, HireError> {
        let config = &self.inner.config;
        let window = AuthorizationWindow::for_terms(terms, &config.contracts);
        match terms.escrow() {
            Some(_) => self.check_escrow_bounds(terms)?,
            None => check_exact_bounds(terms, &window, &config.contracts)?,
        }
        let max_timeout_s = match terms.escrow() {
            Some(_) => config.escrow.payment_window_s,
            None => window.total_s,
        };
        let token_expiry = match terms.escrow() {
            Some(escrow) => escrow.capture_deadline(),
            None => terms
                .offer_expires_at()
                .plus_seconds(window.total_s)
                .map_err(HireError::internal)?,
        };
        Ok(OfferBounds {
            window,
            max_timeout_s,
            token_expiry,
        })
    }

    /// Sign the contract token and store the contract `offered` with its offer and first
    /// event. Returns the token, the terms hash and the terms as stored.
    #[allow(clippy::too_many_arguments)]
    async fn sign_and_store(
        &self,
        terms: &ContractTerms,
        stored_offer: &StoredOffer,
        bounds: &OfferBounds,
        listing: &WorkerListing,
        seeker: &PrincipalId,
        now: Timestamp,
        correlation_id: &str,
    ) -> Result<(String, hiregate_contracts::canonical::Digest, Value), HireError> {
        let inner = &self.inner;
        let token = inner
            .keys
            .issue_contract_token(terms, now, bounds.token_expiry)
            .map_err(HireError::internal)?;
        let terms_hash = terms.terms_hash().map_err(HireError::internal)?;
        let terms_json = serde_json::to_value(terms).map_err(HireError::internal)?;
        let offer_json = serde_json::to_value(stored_offer).map_err(HireError::internal)?;
        inner
            .store
            .insert_contract(
                &NewContract {
                    contract_id: terms.contract_id().to_string(),
                    seeker_id: seeker.to_string(),
                    worker_id: listing.id.to_string(),
                    task_type: terms.task().task_type().to_string(),
                    terms: terms_json.clone(),
                    terms_hash: terms_hash.to_string(),
                    gateway_jws: token.clone(),
                    state: "offered".to_owned(),
                    payment_offer: Some(offer_json),
                    deadline_at: Some(terms.offer_expires_at().as_datetime()),
                    created_at: now.as_datetime(),
                },
                &NewContractEvent {
                    at: now.as_datetime(),
                    actor: format!("seeker:{seeker}"),
                    correlation_id: correlation_id.to_owned(),
                    kind: "contract_offered".to_owned(),
                    details: json!({
                        "worker_id": listing.id,
                        "task_type": terms.task().task_type(),
                        "price": terms.price(),
                        "terms_hash": terms_hash,
                        "max_timeout_seconds": bounds.max_timeout_s,
                        "payment_scheme": terms.scheme(),
                    }),
                },
            )
            .await?;
        Ok((token, terms_hash, terms_json))
    }

    /// The gateway's escrow parameters for a contract with `listing`'s worker: the escrow and
    /// operator of the listing's chain, the listing's fee (or the default) and the treasury.
    fn escrow_policy(&self, listing: &WorkerListing) -> Result<EscrowPolicy, HireError> {
        let config = &self.inner.config;
        let chain_id = listing.network.chain_id();
        let unavailable = |why: String| {
            HireError::unprocessable(
                ErrorCode::EscrowNotAvailable,
                format!(
                    "auth-capture payments are not available on {}: {why}",
                    listing.network
                ),
            )
        };
        let chain = config
            .chains
            .values()
            .find(|chain| chain.chain_id() == Some(chain_id))
            .ok_or_else(|| unavailable("the gateway has no [chains] entry for it".to_owned()))?;
        let operator = chain.operator_address().ok_or_else(|| {
            unavailable("the gateway has no escrow operator key for that chain".to_owned())
        })?;
        let treasury = config
            .escrow
            .treasury
            .ok_or_else(|| unavailable("escrow.treasury is not configured".to_owned()))?;
        let fee_bps = listing
            .fee_policy
            .map_or(config.escrow.default_fee_bps, |fee| fee.fee_bps);
        if fee_bps > config.escrow.max_fee_bps {
            // A listing stored under a looser bound than the one configured now.
            return Err(HireError::unprocessable(
                ErrorCode::FeePolicyOutOfBounds,
                format!(
                    "the worker's marketplace fee of {fee_bps} bps exceeds this gateway's escrow.max_fee_bps of {}",
                    config.escrow.max_fee_bps
                ),
            ));
        }
        let contract_address =
            |a: alloy::primitives::Address| ContractAddress::from_bytes(a.into_array());
        Ok(EscrowPolicy {
            escrow: contract_address(chain.auth_capture_escrow),
            capture_authorizer: contract_address(operator),
            fee_bps,
            fee_recipient: contract_address(treasury),
            payment_window_s: config.escrow.payment_window_s,
            reserve_s: config
                .contracts
                .verification_budget_s
                .saturating_add(config.escrow.capture_margin_s),
            refund_window_s: config.escrow.refund_window_s,
        })
    }

    /// Escrowed contracts may run long, within the `[escrow]` bounds.
    fn check_escrow_bounds(&self, terms: &ContractTerms) -> Result<(), HireError> {
        let escrow = &self.inner.config.escrow;
        if terms.acceptance_window_s() > escrow.max_acceptance_window_s {
            return Err(HireError::unprocessable(ErrorCode::AcceptanceWindowTooLong, format!(
                    "acceptance_window_s {} exceeds escrow.max_acceptance_window_s ({} s) for auth-capture contracts",
                    terms.acceptance_window_s(),
                    escrow.max_acceptance_window_s
                )).with_details(json!({
                    "limit": "escrow.max_acceptance_window_s",
                    "requested_s": terms.acceptance_window_s(),
                    "max_s": escrow.max_acceptance_window_s,
                })));
        }
        if terms.sla().poll_window_s() > escrow.max_pending_s {
            return Err(HireError::unprocessable(ErrorCode::PollWindowTooLong, format!(
                    "sla.poll_window_s {} exceeds escrow.max_pending_s ({} s) for auth-capture contracts",
                    terms.sla().poll_window_s(),
                    escrow.max_pending_s
                )).with_details(json!({
                    "limit": "escrow.max_pending_s",
                    "requested_s": terms.sla().poll_window_s(),
                    "max_s": escrow.max_pending_s,
                })));
        }
        Ok(())
    }

    /// `GET /v1/contracts/{id}` for a party: the seeker who owns it or the operator of its
    /// worker. Anyone else gets 404.
    pub async fn view_contract(
        &self,
        caller: &PrincipalId,
        contract_id: &str,
    ) -> Result<Value, HireError> {
        let store = &self.inner.store;
        let contract = store
            .get_contract(contract_id)
            .await?
            .ok_or(HireError::not_found("contract"))?;
        let allowed = if caller.is_seeker() {
            contract.seeker_id == caller.as_str()
        } else {
            let worker_id = WorkerId::from_str(&contract.worker_id).map_err(HireError::internal)?;
            store
                .get_worker(&worker_id)
                .await?
                .is_some_and(|listing| &listing.operator_id == caller)
        };
        if !allowed {
            return Err(HireError::not_found("contract"));
        }
        // The operator may see what its worker delivered; the seeker only what it paid for.
        let state = contract.state;
        let reveal = !caller.is_seeker() || self.seeker_may_see_content(&contract, state).await?;
        let mut view = self
            .contract_view(&contract, reveal)
            .await
            .map_err(HireError::from)?;
        if let Some(receipt) = self.receipt_of(&contract).await? {
            view["receipt"] = json!(receipt.token);
        }
        Ok(view)
    }

    /// [`execute::content_released`] for a stored contract.
    async fn seeker_may_see_content(
        &self,
        contract: &ContractRecord,
        state: ContractState,
    ) -> Result<bool, HireError> {
        let scheme = contract
            .terms
            .pointer("/price/scheme")
            .and_then(Value::as_str)
            .and_then(|name| PaymentScheme::from_str(name).ok())
            .ok_or_else(|| {
                HireError::internal(anyhow::anyhow!("stored terms have no payment scheme"))
            })?;
        // Only a dispute needs the verdict (whose dispute is it); skip the read otherwise.
        let passed = if state == ContractState::Disputed {
            self.inner
                .store
                .latest_verification(&contract.contract_id)
                .await?
                .is_some_and(|v| v.passed)
        } else {
            false
        };
        Ok(execute::content_released(scheme, state, passed))
    }

    async fn contract_view(
        &self,
        contract: &ContractRecord,
        reveal_content: bool,
    ) -> Result<Value, StoreError> {
        let store = &self.inner.store;
        let id = contract.contract_id.as_str();
        // Independent reads: on a pool they run side by side.
        let (attempts, payment, verification, pieces, dispute) = tokio::try_join!(
            store.list_attempts(id),
            store.payment_of_contract(id),
            store.latest_verification(id),
            store.latest_deliverables(id),
            store.dispute_of_contract(id),
        )?;
        let delivery = execute::delivery_view(&pieces, reveal_content);
        let offer = contract
            .payment_offer
            .clone()
            .and_then(|v| serde_json::from_value::<StoredOffer>(v).ok());
        Ok(json!({
            "contract_id": contract.contract_id,
            "correlation_id": contract.correlation_id,
            "queued_at": contract.queued_at.filter(|_| contract.state == ContractState::Paid),
            "state": contract.state,
            "seeker_id": contract.seeker_id,
            "worker_id": contract.worker_id,
            "task_type": contract.task_type,
            "terms": contract.terms,
            "terms_hash": contract.terms_hash,
            "gateway_jws": contract.gateway_jws,
            "payment_required": offer.as_ref().map(|o| &o.payment_required),
            "attempts_used": contract.attempts_used,
            "attempts": attempts.iter().map(|a| json!({
                "attempt_id": a.attempt_id,
                "attempt_no": a.attempt_no,
                "state": a.state,
                "http_status": a.http_status,
                "error": a.error,
                "worker_task_id": a.worker_task_id,
                "estimated_completion": a.estimated_completion,
                "metadata": a.worker_metadata,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
            })).collect::<Vec<_>>(),
            "payment": payment.as_ref().map(|p| json!({
                "payment_id": p.payment_id,
                "network": p.network,
                "asset": p.asset,
                "payer": p.payer,
                "amount": p.amount,
                "valid_before": p.valid_before,
                "state": p.state,
                // Escrowed payments: the lock, and what returned the money (void, refund or
                // the payer's reclaim).
                "authorize_transaction": p.authorize_tx,
                "release_transaction": p.release_tx,
            })),
            "deliverable": delivery,
            // The worker's free-form facts about the run (HIRE `metadata`), not its work:
            // shown whether or not the content is released.
            "metadata": execute::worker_metadata(&attempts),
            "verification": verification.as_ref().map(|v| v.result.clone()),
            "settlement": payment.as_ref().and_then(|p| p.settle_started_at.map(|started| json!({
                "state": p.state,
                "transaction": p.settle_tx,
                "started_at": started,
                "response": p.settle_response,
                // Retries of an unknown outcome: counted here, not written to the event log.
                "retries": contract.settlement_retries,
            }))),
            "dispute": dispute.as_ref().map(disputes::dispute_view),
            "receipt": null,
            "links": {
                "execute": self.execute_url(id),
                "events": self.events_url(id),
            },
            "created_at": contract.created_at,
            "updated_at": contract.updated_at,
        }))
    }
}

/// Listed, not retired, healthy, and offering the task type.
/// The input must satisfy the listing's input schema before anything is signed, so a seeker
/// learns of a malformed task before paying for it.
fn check_input(listing: &WorkerListing, input: &Value) -> Result<(), HireError> {
    let violations = listing
        .metadata
        .input_violations(input)
        .map_err(HireError::internal)?;
    if violations.is_empty() {
        return Ok(());
    }
    Err(HireError::unprocessable(
        ErrorCode::InputSchemaViolation,
        format!(
            "the input does not satisfy the worker's input_schema (first failing path: `{}`)",
            violations[0].instance_path
        ),
    )
    .with_details(json!({
        "violations": violations
            .iter()
            .map(|v| json!({
                "instance_path": v.instance_path,
                "schema_path": v.schema_path,
                "message": v.message,
            }))
            .collect::<Vec<_>>(),
    })))
}

fn check_hireable(listing: &WorkerListing, task_type: &str) -> Result<(), HireError> {
    if listing.retired_at.is_some() {
        return Err(HireError::conflict(
            ErrorCode::WorkerRetired,
            "the worker is retired and takes no new contracts".to_owned(),
        ));
    }
    if listing.health != HealthState::Healthy {
        return Err(HireError::conflict(
            ErrorCode::WorkerUnhealthy,
            "the worker is failing its health checks and takes no new contracts".to_owned(),
        ));
    }
    let offered = hiregate_store::listing::model::TaskType::from_str(task_type)
        .ok()
        .is_some_and(|t| listing.tasks.get(&t).is_some());
    if !offered {
        return Err(HireError::unprocessable(
            ErrorCode::TaskTypeNotOffered,
            format!("the worker does not offer task type `{task_type}`"),
        ));
    }
    Ok(())
}

/// An `exact` contract must fit in one EIP-3009 authorization: its window (every attempt's
/// SLA and poll window, verification, acceptance window, settlement margin) within
/// `contracts.max_authorization_window_s`. A poll window that alone is longer than that gets its
/// own code, `poll_window_too_long`, naming the limit. Longer work is what `auth-capture` is for
/// (held up to `escrow.max_pending_s`, by default HIRE's 24 hours), which the messages say.
fn check_exact_bounds(
    terms: &ContractTerms,
    window: &AuthorizationWindow,
    settings: &crate::settings::ContractSettings,
) -> Result<(), HireError> {
    let max_s = settings.max_authorization_window_s;
    let poll_window_s = terms.sla().poll_window_s();
    let without_polling_s = window.total_s.saturating_sub(window.poll_window_s);
    if window.poll_window_s > 0 && window.total_s > max_s && without_polling_s <= max_s {
        return Err(HireError::unprocessable(
            ErrorCode::PollWindowTooLong,
            format!(
                "sla.poll_window_s {poll_window_s} needs a payment authorization valid for {} s, \
                 longer than an exact payment authorization may live ({max_s} s, \
                 contracts.max_authorization_window_s): ask for payment_scheme \
                 \"auth-capture\" for long-running work, or a shorter poll window",
                window.total_s
            ),
        )
        .with_details(json!({
            "limit": "contracts.max_authorization_window_s",
            "requested_s": poll_window_s,
            "required_s": window.total_s,
            "max_s": max_s,
            "breakdown": window,
        })));
    }
    if window.total_s > max_s {
        return Err(HireError::unprocessable(
            ErrorCode::AuthorizationWindowTooLong,
            format!(
                "this contract needs a payment authorization valid for {} s (SLA × attempts + \
                 verification + acceptance window + settlement margin), more than the \
                 gateway's maximum of {max_s} s (contracts.max_authorization_window_s): lower \
                 sla.max_latency_ms, retry_policy.max_attempts or acceptance_window_s, or ask \
                 for payment_scheme \"auth-capture\" where the worker accepts it",
                window.total_s
            ),
        )
        .with_details(json!({
            "limit": "contracts.max_authorization_window_s",
            "required_s": window.total_s,
            "max_s": max_s,
            "breakdown": window,
        })));
    }
    Ok(())
}

/// The listing's offer for `task_type` in the contracts crate's terms, paid with `scheme`, and
/// its metering when the task type is priced per unit. A metered task type's price is its
/// maximum (`unit price × max_units`) whatever the scheme; only `upto` pays less for fewer
/// verified units, and `upto` is offered only for metered task types.
fn worker_offer(
    listing: &WorkerListing,
    task_type: &str,
    scheme: PaymentScheme,
) -> Result<(WorkerOffer, Option<Metering>), HireError> {
    let unusable =
        |message: String| HireError::unprocessable(ErrorCode::WorkerOfferUnusable, message);
    let listing_task = hiregate_store::listing::model::TaskType::from_str(task_type)
        .map_err(|e| unusable(e.to_string()))?;
    let task_offer = listing
        .tasks
        .get(&listing_task)
        .ok_or_else(|| unusable(format!("the worker does not offer task type `{task_type}`")))?;
    let task_type = TaskType::from_str(task_type).map_err(|_| {
        unusable(format!(
            "task type `{task_type}` cannot be contracted: contract task types are lower-case \
             [a-z0-9][a-z0-9_.:-]{{0,63}}"
        ))
    })?;
    let worker_id = hiregate_contracts::id::WorkerId::from_str(listing.id.as_str())
        .map_err(HireError::internal)?;
    let endpoint = EndpointUrl::try_from(listing.endpoint.url().clone())
        .map_err(|e| unusable(e.to_string()))?;
    let protocol = match listing.protocol {
        Protocol::Hire => TermsProtocol::Hire,
        Protocol::Wattswarm => TermsProtocol::Wattswarm,
        Protocol::Superwire => TermsProtocol::Superwire,
    };
    let pay_to = listing.pay_to.as_contract_address();
    let worker = WorkerParty::new(worker_id, endpoint, protocol, pay_to)
        .map_err(|e| unusable(e.to_string()))?;
    let price_units = task_offer.price.value();
    if price_units > U256::from(u128::MAX) {
        return Err(unusable(
            "the price is larger than hiregate can contract (2^128 - 1 atomic units)".to_owned(),
        ));
    }
    let unit_price = ContractAmount::new(price_units.to::<u128>());
    let metering = task_offer
        .metering
        .map(|metering| Metering::new(metering.unit, unit_price, metering.max_units))
        .transpose()
        .map_err(|e| unusable(format!("the metered price cannot be contracted: {e}")))?;
    if scheme == PaymentScheme::Upto && metering.is_none() {
        return Err(HireError::unprocessable(
            ErrorCode::PaymentSchemeNotAccepted,
            format!(
                "`upto` pays per verified unit: the worker prices `{task_type}` per contract, \
                 ask for payment_scheme \"exact\""
            ),
        ));
    }
    let amount = metering.as_ref().map_or(unit_price, Metering::maximum);
    let price = Price::new(
        scheme,
        listing.network,
        listing.asset.as_contract_address(),
        amount,
    )
    .map_err(|e| unusable(format!("the price cannot be paid with x402: {e}")))?;
    let output_schema = OutputSchema::parse(
        task_offer.output_schema.as_json().clone(),
        &SchemaLimits::default(),
    )
    .map_err(|e| unusable(format!("the listing's output schema is refused: {e}")))?;
    Ok((
        WorkerOffer {
            worker,
            task_type,
            price,
            output_schema: Some(output_schema),
        },
        metering,
    ))
}

/// A refused proposal as a 422 naming the field at fault.
fn terms_error(error: &TermsError) -> HireError {
    let field = match error {
        TermsError::Schema(_) | TermsError::TooManySchemas => "output_schema",
        TermsError::Policy(_) => "verification",
        TermsError::InvalidSla { .. } => "sla",
        TermsError::InvalidRetryPolicy(_) => "retry_policy",
        TermsError::AcceptanceWindowTooLong { .. } => "acceptance_window_s",
        TermsError::InputTooLarge { .. } | TermsError::InputDigestMismatch => "input",
        TermsError::InvalidUrl { field } => field,
        TermsError::InvalidTaskType | TermsError::TaskTypeMismatch { .. } => "task_type",
        TermsError::WorkerMismatch { .. } | TermsError::ZeroPayoutAddress => "worker_id",
        _ => "contract",
    };
    HireError::validation(field.to_owned(), error.to_string())
}
