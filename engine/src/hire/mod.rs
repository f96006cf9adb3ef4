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
//! | `meter` | metered contracts (`upto`, metered `auth-capture`): what the gateway measured of an attempt (events relayed, wall time, the worker's reported figure) for the verdict, and the amount a verdict settles |
//! | `settle` | `accepted`/`settlement_unknown` → `settling` → `settled`/`settlement_failed`, decided by the chain (escrowed: the escrow's capture, decided by its events; upfront: the transfer made before the work, nothing sent) |
//! | `upfront` | the upfront flow: a `paid` contract's `exact` payment settled on chain before the worker is called (crash-safe: the chain first), and kept through rejections, failures and voids |
//! | `release` | escrowed money back to the payer: void, the payer's reclaim, the arbiter's refund after capture; their sweep |
//! | [`escrow`] | the gateway as escrow operator of `auth-capture` contracts: one operator per chain, `PaymentInfo` from the stored offer, the capture order of the terms |
//! | [`bazaar`] | x402 discovery metadata of an offer: the `bazaar` extension and `resource.serviceName`/`tags` from the listing |
//! | [`offer`] | the x402 offer and the authorization window arithmetic |
//! | [`offer_receipt`] | x402's `offer-receipt` extension: a signed offer per `accepts[]` entry in every 402 (signed once per offer), a signed receipt in every settled answer's settlement response; JWS by the gateway key, `kid` a DID URL (`did:web` over https, else `did:key`) |
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
mod create;
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
mod meter;
pub mod offer;
pub mod offer_receipt;
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
mod upfront;
mod view;

use hiregate_store::offer::StoredOffer;
use std::{str::FromStr, sync::Arc};

use alloy::primitives::U256;
use chrono::Utc;
use hiregate_contracts::{
    escrow::EscrowPolicy,
    id::ContractId,
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
    offer::AuthorizationWindow,
    offered::OfferCache,
};
use crate::{
    adapters::ProtocolAdapters,
    assets::{AssetDirectory, AssetInfo, AssetLookupError},
    clock::Clock,
    outbound::OutboundClient,
    settings::Config,
};
use hiregate_contracts::id::{PrincipalId, WorkerId};
use hiregate_store::{
    ContractRecord, NewContract, NewContractEvent, Store, StoreError,
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

    /// Whether the facilitator sponsors a payer's approval of Permit2 (the
    /// `eip2612GasSponsoring` and `erc20ApprovalGasSponsoring` extensions): the embedded one
    /// does; an external one is not assumed to.
    fn submits_eip2612_permits(&self) -> bool {
        self.inner.config.facilitator.mode == crate::settings::FacilitatorMode::Embedded
    }

    /// For an `upto` contract, the address its payer must name as the facilitator allowed to
    /// choose the settled amount ([`Self::upto_facilitator_on`] its network). `None` for other
    /// schemes.
    async fn upto_facilitator(
        &self,
        terms: &ContractTerms,
    ) -> Result<Option<alloy::primitives::Address>, HireError> {
        if terms.scheme() != PaymentScheme::Upto {
            return Ok(None);
        }
        self.upto_facilitator_on(terms.price().network())
            .await
            .map(Some)
    }

    /// The facilitator an `upto` payer on `network` authorizes to choose the settled amount:
    /// the one the facilitator's `/supported` advertises for `upto` there. A 422 when the
    /// facilitator does not settle `upto` there.
    async fn upto_facilitator_on(
        &self,
        network: hiregate_contracts::money::Network,
    ) -> Result<alloy::primitives::Address, HireError> {
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
            .filter(|kind| kind.scheme == "upto" && kind.network == network.as_str())
            .find_map(|kind| {
                kind.extra
                    .as_ref()?
                    .get(hiregate_payments::permit2::upto::FACILITATOR_ADDRESS_KEY)?
                    .as_str()?
                    .parse()
                    .ok()
            })
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
}
