//! The stable x402 resource of a listing's task type: `POST /x402/workers/{worker_id}/{task_type}`
//! with the task input as body, paid by any x402 client with no account and nothing
//! hiregate-specific.
//!
//! ```text
//! unpaid ──input checked against the listing──► terms built and signed in memory ──► 402
//!          (nothing stored: the signed offer travels in accepts[0].extra.hiregate)
//! paid   ──echoed offer: gateway signature, this listing + task type, this input (its digest
//!          is in the signed terms), not expired ──► contract row `offered` (idempotent: the
//!          contract id is the offer's) ──► the execute engine, unchanged ──► the verified
//!          deliverable + PAYMENT-RESPONSE + a capability token for the contract's read routes
//! ```
//!
//! Identity: such a contract has no API-key seeker. Its terms name a seeker id minted for that
//! one offer (`skr_…`, which no key belongs to); the payer's wallet, recorded with the payment,
//! is who the seeker is. The capability token ([`HireService::capability_of`]) is what proves
//! it afterwards: the contract view, events, receipts and disputes accept it as the bearer
//! credential of that seeker, which owns exactly one contract. The token is derived from the
//! gateway's signing key and the contract id, so every paid answer of the same contract
//! (duplicates, replays) carries the same token; it is stored only as its SHA-256.
//!
//! Webhooks: a wallet seeker names its webhook URL with the request header
//! [`WEBHOOK_URL_HEADER`] (`Hiregate-Webhook-Url`), checked exactly as a proposal's
//! `webhook_url` (an http(s) URL; https when `outbound.require_https`), else 400 before anything
//! is looked at further. The URL goes into the signed offer's terms, so the paid request (which
//! x402 clients send with the same headers) must name the same one (409 `input_mismatch`
//! otherwise). The contract's signing secret ([`HireService::webhook_secret_of`]) is derived
//! like the capability token, from the gateway's signing key and the contract id, so every paid
//! answer shows the same one; it is written, before the contract row, to the per-seeker
//! `webhook_secret` table every seeker's secret lives in (in clear there, as HMAC signing needs
//! the key), and the delivery loop signs with it unchanged. The capability token also reads
//! the contract's webhook deliveries and its seeker's dead letters (`hiregate_http::webhooks`).

mod catalogue;

pub use catalogue::{CatalogueFilter, resource_description};

use hiregate_store::offer::StoredOffer;
use std::str::FromStr;

use bytes::Bytes;
use hiregate_contracts::money::PaymentScheme;
use hiregate_contracts::{
    id::{PrincipalId, WorkerId},
    terms::{ContractTerms, WebhookUrl},
    time::Timestamp,
    token::{DetachedSignature, verify_detached},
    webhook::WebhookSecret,
};
use hiregate_payments::{
    AuthCapturePayment, PaymentPayload, auth_capture::verify::check_signature, decode_header,
};
use serde_json::{Value, json};

use super::{
    ContractRequest, HireService, OfferBounds,
    bazaar::ListingDiscovery,
    error::{ErrorCode, HireError},
    execute::ExecuteRequest,
    outcome::{Execution, Outcome, PaymentDemand},
};
use crate::assets::AssetInfo;
use hiregate_store::{StoreError, keys::ApiKeyHash, listing::model::WorkerListing};

/// The key of `accepts[].extra` that carries the signed offer.
pub const OFFER_EXTRA_KEY: &str = "hiregate";
/// JWS `typ` of the offer's detached signature.
pub const OFFER_SIGNATURE_TYPE: &str = "hiregate-x402-offer+jws";
/// JWS `typ` of the signature a capability token is derived from.
const CAPABILITY_SIGNATURE_TYPE: &str = "hiregate-capability+jws";
/// Prefix of capability tokens (`Authorization: Bearer hg_cap_…`).
pub const CAPABILITY_PREFIX: &str = "hg_cap_";
/// JWS `typ` of the signature a wallet seeker's webhook secret is derived from.
const WEBHOOK_SECRET_SIGNATURE_TYPE: &str = "hiregate-webhook-secret+jws";
/// The request header a wallet seeker names its webhook URL with.
pub const WEBHOOK_URL_HEADER: &str = "hiregate-webhook-url";
/// Longest `resource.description` the Coinbase facilitator catalogues.
pub const MAX_DESCRIPTION_CHARS: usize = 500;

/// A call of the stable resource.
#[derive(Clone)]
pub struct ResourceRequest {
    /// The listing (`wk_…`) from the path.
    pub worker_id: WorkerId,
    /// The task type from the path.
    pub task_type: String,
    /// The task input.
    pub body: Bytes,
    /// `PAYMENT-SIGNATURE`, if sent.
    pub payment_signature: Option<String>,
    /// [`WEBHOOK_URL_HEADER`] as sent (checked by the service), if sent.
    pub webhook_url: Option<String>,
    /// The request id.
    pub correlation_id: String,
}

impl ResourceRequest {
    /// The proposal a call of the stable resource stands for: `input` for the listing's task
    /// type with the listing's defaults for everything else (the URL has no room for more).
    fn proposal(&self, input: Value, webhook_url: Option<WebhookUrl>) -> ContractRequest {
        ContractRequest {
            worker_id: self.worker_id.clone(),
            task_type: self.task_type.clone(),
            input,
            output_schema: None,
            verification: None,
            sla: None,
            retry_policy: None,
            webhook_url,
            acceptance_window_s: None,
            payment_scheme: None,
            profile: None,
            reuse_cached_outputs: None,
        }
    }
}

impl std::fmt::Debug for ResourceRequest {
    // PAYMENT-SIGNATURE is a bearer instrument until settled: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceRequest")
            .field("worker_id", &self.worker_id)
            .field("task_type", &self.task_type)
            .field("body_bytes", &self.body.len())
            .field("paid", &self.payment_signature.is_some())
            .field("webhook_url", &self.webhook_url)
            .finish_non_exhaustive()
    }
}

impl ResourceRequest {
    /// The webhook URL the request names, checked as a proposal's `webhook_url` is parsed; a
    /// malformed one is 400 `validation_failed` (the https rule is the listing check's).
    fn webhook(&self) -> Result<Option<WebhookUrl>, HireError> {
        let Some(raw) = self.webhook_url.as_deref() else {
            return Ok(None);
        };
        raw.trim().parse::<WebhookUrl>().map(Some).map_err(|error| {
            HireError::bad_request(
                ErrorCode::ValidationFailed,
                format!("{WEBHOOK_URL_HEADER}: {error}"),
            )
            .with_details(json!({"field": WEBHOOK_URL_HEADER}))
        })
    }
}

/// What a call of the stable resource came to: the engine's execution and, once a contract
/// was paid, its id and the capability token of its read routes.
#[derive(Debug)]
pub struct ResourceExecution {
    /// The engine's answer.
    pub execution: Execution,
    /// The contract the payment created (or found).
    pub contract_id: Option<String>,
    /// The contract's capability token; only with an answer past the payment.
    pub capability: Option<String>,
    /// The contract's webhook: its URL and signing secret (`whsec_…`); only with an answer
    /// past the payment of a contract that names one.
    pub webhook: Option<(String, String)>,
}

impl ResourceExecution {
    fn unpaid(result: Result<Outcome, HireError>) -> Self {
        Self {
            execution: Execution {
                result,
                duplicate_of: None,
                correlation_id: None,
            },
            contract_id: None,
            capability: None,
            webhook: None,
        }
    }
}

/// The offer as it travels in `accepts[0].extra.hiregate`: the signed terms without the input
/// (the caller sends it again as the body; its digest is in the terms), their hash, the
/// resource they are for, when the offer expires, and the gateway's detached signature over
/// the rest.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct SignedOffer {
    resource: String,
    terms: Value,
    terms_hash: String,
    expires_at: Timestamp,
    signature: DetachedSignature,
}

impl SignedOffer {
    fn document(resource: &str, terms: &Value, terms_hash: &str, expires_at: Timestamp) -> Value {
        json!({
            "resource": resource,
            "terms": terms,
            "terms_hash": terms_hash,
            "expires_at": expires_at,
        })
    }

    /// The terms again, with what the offer leaves out put back: `input` (the body) and the
    /// worker's `endpoint` (the listing's; never shown to callers). `Ok(Err(reason))` when
    /// they are not the signed ones: the body is another input (409), or the listing's endpoint
    /// changed since the offer was signed (a fresh offer answers).
    fn terms_with(
        &self,
        input: &Value,
        endpoint: &str,
    ) -> Result<Result<ContractTerms, String>, HireError> {
        let mut terms = self.terms.clone();
        let Some(task) = terms.get_mut("task").and_then(Value::as_object_mut) else {
            return Err(offer_unreadable("the signed terms have no task"));
        };
        task.insert("input".to_owned(), input.clone());
        let Some(worker) = terms.get_mut("worker").and_then(Value::as_object_mut) else {
            return Err(offer_unreadable("the signed terms have no worker"));
        };
        worker.insert("endpoint".to_owned(), Value::String(endpoint.to_owned()));
        let terms: ContractTerms = serde_json::from_value(terms).map_err(|_| {
            HireError::conflict(
                ErrorCode::InputMismatch,
                "the body is not the input this offer was signed for; send the same body as \
                 the unpaid request",
            )
        })?;
        let hash = terms.terms_hash().map_err(HireError::internal)?;
        if hash.to_string() != self.terms_hash {
            return Ok(Err(
                "offer_outdated: the listing changed since this offer was signed".to_owned(),
            ));
        }
        Ok(Ok(terms))
    }
}

fn offer_unreadable(why: &str) -> HireError {
    HireError::bad_request(
        ErrorCode::PaymentMismatch,
        format!("accepted.extra.{OFFER_EXTRA_KEY}: {why}"),
    )
}

/// The input of a body: JSON, or 400 `malformed_json`.
fn input_of(body: &Bytes) -> Result<Value, HireError> {
    serde_json::from_slice(body).map_err(|e| HireError::malformed_json(e.to_string()))
}

/// A refused input (or webhook URL) is the caller's malformed request, which x402 answers 400
/// (nothing is signed, nothing stored).
fn input_refusal_as_bad_request(mut error: HireError) -> HireError {
    if matches!(
        error.code,
        ErrorCode::InputSchemaViolation | ErrorCode::WebhookUrlNotHttps
    ) {
        error.kind = super::error::ErrorKind::BadRequest;
    }
    error
}

fn is_duplicate(error: &HireError) -> bool {
    error
        .cause
        .as_ref()
        .and_then(|cause| cause.downcast_ref::<StoreError>())
        .is_some_and(|e| matches!(e, StoreError::Duplicate { .. }))
}

impl HireService {
    /// The stable URL of `worker_id`'s `task_type`.
    pub fn resource_url(&self, worker_id: &str, task_type: &str) -> String {
        self.url(&format!("/x402/workers/{worker_id}/{task_type}"))
    }

    /// A call of the stable resource to its answer: the 402 with a freshly signed offer when
    /// unpaid, else the contract the echoed offer describes, created once and driven by the
    /// execute engine.
    pub async fn hire_resource(&self, request: ResourceRequest) -> ResourceExecution {
        let input = match input_of(&request.body) {
            Ok(input) => input,
            Err(error) => return ResourceExecution::unpaid(Err(error)),
        };
        let webhook = match request.webhook() {
            Ok(webhook) => webhook,
            Err(error) => return ResourceExecution::unpaid(Err(error)),
        };
        let Some(header) = request.payment_signature.clone() else {
            let demand = self
                .resource_demand(&request, input, ErrorCode::PaymentRequired, None)
                .await;
            return ResourceExecution::unpaid(demand);
        };
        let terms = match self.echoed_terms(&request, &header, &input).await {
            Ok(Ok(terms)) => terms,
            Ok(Err(refusal)) => return ResourceExecution::unpaid(Ok(refusal)),
            Err(error) => return ResourceExecution::unpaid(Err(error)),
        };
        if terms.webhook_url().map(ToString::to_string) != webhook.map(|url| url.to_string()) {
            return ResourceExecution::unpaid(Err(HireError::conflict(
                ErrorCode::InputMismatch,
                format!(
                    "{WEBHOOK_URL_HEADER} is not the webhook URL this offer was signed for; send \
                     the same headers as the unpaid request"
                ),
            )
            .with_details(json!({"field": WEBHOOK_URL_HEADER}))));
        }
        let contract_id = terms.contract_id().to_string();
        match self.contract_of_offer(&request, &terms, &header).await {
            Ok(None) => {}
            Ok(Some(refusal)) => return ResourceExecution::unpaid(Ok(refusal)),
            Err(error) => return ResourceExecution::unpaid(Err(error)),
        }
        let seeker = PrincipalId::from(terms.seeker().clone());
        let execution = self
            .execute(ExecuteRequest {
                contract_id: contract_id.clone(),
                seeker,
                body: request.body,
                payment_signature: Some(header),
                correlation_id: request.correlation_id,
                secrets: None,
            })
            .await;
        let paid = matches!(
            &execution.result,
            Ok(outcome) if !matches!(outcome, Outcome::PaymentRequired(_))
        );
        if !paid {
            return ResourceExecution {
                execution,
                contract_id: Some(contract_id),
                capability: None,
                webhook: None,
            };
        }
        let access = async {
            let token = self.capability_of(&contract_id).await?;
            let webhook = match terms.webhook_url() {
                Some(url) => Some((
                    url.to_string(),
                    self.webhook_secret_of(
                        &contract_id,
                        &PrincipalId::from(terms.seeker().clone()),
                    )
                    .await?,
                )),
                None => None,
            };
            Ok::<_, HireError>((token, webhook))
        };
        match access.await {
            Ok((token, webhook)) => ResourceExecution {
                execution,
                contract_id: Some(contract_id),
                capability: Some(token),
                webhook,
            },
            Err(error) => ResourceExecution {
                execution: Execution {
                    result: Err(error),
                    ..execution
                },
                contract_id: Some(contract_id),
                capability: None,
                webhook: None,
            },
        }
    }

    /// The 402 of an offer signed for this call (nothing stored), with `code` and x402's
    /// `error` set to `reason` when a payment was refused.
    async fn resource_demand(
        &self,
        request: &ResourceRequest,
        input: Value,
        code: ErrorCode,
        reason: Option<&str>,
    ) -> Result<Outcome, HireError> {
        let proposal = request.proposal(input, request.webhook()?);
        let (listing, asset) = self
            .hireable_listing(&proposal)
            .await
            .map_err(input_refusal_as_bad_request)?;
        // A seeker id of its own for each offer: the payer's wallet is the seeker, and the
        // capability token of the contract proves it (see the module comment).
        let seeker = PrincipalId::generate_seeker();
        let now = Timestamp::from(self.now());
        let terms = self
            .proposed_terms(&listing, proposal, &seeker, now)
            .await?;
        super::offer::check_transfer_method(&terms, &asset)?;
        let bounds = self.bounded_window(&terms)?;
        let signed = self.sign_offer(&terms)?;
        let upto_facilitator = self.upto_facilitator(&terms).await?;
        let offer =
            self.resource_offer(&terms, &asset, &listing, &bounds, &signed, upto_facilitator)?;
        let message = match reason {
            None => "this resource must be paid: send PAYMENT-SIGNATURE as PAYMENT-REQUIRED \
                     describes (an x402 client does this unchanged)"
                .to_owned(),
            Some(reason) => format!("the payment was refused ({reason}); pay this fresh offer"),
        };
        Ok(Outcome::PaymentRequired(std::sync::Arc::new(
            PaymentDemand::new(
                &offer,
                code,
                message,
                reason,
                json!({
                    "worker_id": listing.id,
                    "task_type": request.task_type,
                    "offer_expires_at": terms.offer_expires_at(),
                }),
            ),
        )))
    }

    /// The gateway's signature over `terms` (without their input) for the resource they are
    /// offered at.
    fn sign_offer(&self, terms: &ContractTerms) -> Result<Value, HireError> {
        let mut terms_json = serde_json::to_value(terms).map_err(HireError::internal)?;
        // The input comes back as the body; the worker's endpoint is not for callers to see
        // (the listing's is put back when the offer is paid). `terms_hash` covers both.
        if let Some(task) = terms_json.get_mut("task").and_then(Value::as_object_mut) {
            task.remove("input");
        }
        if let Some(worker) = terms_json.get_mut("worker").and_then(Value::as_object_mut) {
            worker.remove("endpoint");
        }
        let terms_hash = terms.terms_hash().map_err(HireError::internal)?.to_string();
        let resource = self.resource_url(
            terms.worker().id().as_str(),
            terms.task().task_type().as_str(),
        );
        let document = SignedOffer::document(
            &resource,
            &terms_json,
            &terms_hash,
            terms.offer_expires_at(),
        );
        let signature = self
            .inner
            .keys
            .sign_detached(OFFER_SIGNATURE_TYPE, &document)
            .map_err(HireError::internal)?;
        serde_json::to_value(SignedOffer {
            resource,
            terms: terms_json,
            terms_hash,
            expires_at: terms.offer_expires_at(),
            signature,
        })
        .map_err(HireError::internal)
    }

    /// The x402 offer of `terms` at the stable resource: the contract's own offer (same
    /// requirements, discovery metadata), its `resource.url` the stable URL, and the signed
    /// offer in `accepts[0].extra`.
    fn resource_offer(
        &self,
        terms: &ContractTerms,
        asset: &AssetInfo,
        listing: &WorkerListing,
        bounds: &OfferBounds,
        signed: &Value,
        upto_facilitator: Option<alloy::primitives::Address>,
    ) -> Result<StoredOffer, HireError> {
        let task_type = terms.task().task_type().as_str();
        let url = self.resource_url(listing.id.as_str(), task_type);
        let pay_to = alloy::primitives::Address::from(*terms.worker().payout_address().as_bytes());
        let mut offer = super::offer::stored_offer(
            terms,
            asset,
            pay_to,
            &url,
            bounds.max_timeout_s,
            &ListingDiscovery {
                name: listing.metadata.name.as_deref(),
                description: listing.metadata.description.as_deref(),
                input_schema: listing.metadata.input_schema.as_ref().map(|s| s.as_json()),
            },
            self.submits_eip2612_permits(),
            upto_facilitator,
        );
        offer.payment_required.resource.description =
            Some(resource_description(listing, task_type));
        let requirements = offer
            .payment_required
            .accepts
            .first_mut()
            .ok_or_else(|| HireError::internal_msg("an offer without requirements"))?;
        requirements
            .extra
            .insert(OFFER_EXTRA_KEY.to_owned(), signed.clone());
        self.offer_receipt_signer().sign_offers(
            &mut offer.payment_required,
            u64::try_from(terms.offer_expires_at().unix_seconds()).ok(),
        );
        Ok(offer)
    }

    /// The terms of the offer a payment echoes, once the offer is this gateway's, for this
    /// resource and this input; a fresh 402 (as `Err`-free refusal) when the payment cannot be
    /// read or claims no offer of this gateway.
    async fn echoed_terms(
        &self,
        request: &ResourceRequest,
        header: &str,
        input: &Value,
    ) -> Result<Result<ContractTerms, Outcome>, HireError> {
        let refuse = |code: ErrorCode, reason: String| async move {
            self.resource_demand(request, input.clone(), code, Some(&reason))
                .await
        };
        let payload: PaymentPayload = match decode_header(header) {
            Ok(payload) => payload,
            Err(error) => {
                let reason = format!("invalid_payment_signature: {error}");
                return refuse(ErrorCode::InvalidPaymentSignature, reason)
                    .await
                    .map(Err);
            }
        };
        let signed = payload
            .accepted
            .extra
            .get(OFFER_EXTRA_KEY)
            .cloned()
            .and_then(|raw| serde_json::from_value::<SignedOffer>(raw).ok());
        let Some(signed) = signed else {
            let reason = format!(
                "accepted_requirements_mismatch: accepted.extra.{OFFER_EXTRA_KEY} is missing; \
                 echo the offer of PAYMENT-REQUIRED unchanged"
            );
            return refuse(ErrorCode::PaymentMismatch, reason).await.map(Err);
        };
        let document = SignedOffer::document(
            &signed.resource,
            &signed.terms,
            &signed.terms_hash,
            signed.expires_at,
        );
        if verify_detached(
            &document,
            &signed.signature,
            &self.inner.keys.jwks(),
            OFFER_SIGNATURE_TYPE,
        )
        .is_err()
        {
            let reason = format!(
                "accepted_requirements_mismatch: accepted.extra.{OFFER_EXTRA_KEY} is not an \
                 offer signed by this gateway"
            );
            return refuse(ErrorCode::PaymentMismatch, reason).await.map(Err);
        }
        let here = self.resource_url(request.worker_id.as_str(), &request.task_type);
        if signed.resource != here {
            // A payment signed for another listing's (or task type's) offer pays nothing here.
            let reason = format!(
                "accepted_requirements_mismatch: the offer was made for {}, not this resource",
                signed.resource
            );
            return refuse(ErrorCode::PaymentMismatch, reason).await.map(Err);
        }
        let listing = self
            .inner
            .store
            .get_worker(&request.worker_id)
            .await?
            .ok_or(HireError::not_found("worker"))?;
        let terms = match signed.terms_with(input, listing.endpoint.url().as_str())? {
            Ok(terms) => terms,
            Err(reason) => return refuse(ErrorCode::PaymentMismatch, reason).await.map(Err),
        };
        if terms.worker().id() != &request.worker_id
            || terms.task().task_type().as_str() != request.task_type
        {
            return Err(offer_unreadable("the signed terms name another resource"));
        }
        Ok(Ok(terms))
    }

    /// The contract of a paid offer: created `offered` from the signed terms unless it exists
    /// (the contract id is the offer's, so concurrent payments of one offer make one
    /// contract). An offer that expired before its contract was made is refused with nothing
    /// stored, and so is a payment not worth a contract ([`Self::unworthy_payment`]): the
    /// answer is then `Some` refusal.
    async fn contract_of_offer(
        &self,
        request: &ResourceRequest,
        terms: &ContractTerms,
        header: &str,
    ) -> Result<Option<Outcome>, HireError> {
        let store = &self.inner.store;
        let contract_id = terms.contract_id().to_string();
        if store.contract_state(&contract_id).await?.is_some() {
            return Ok(None);
        }
        if terms.offer_expired(self.now().into()) {
            return Err(HireError::gone(
                ErrorCode::ContractExpired,
                "the offer this payment answers has expired; send the request unpaid for a \
                 fresh one",
            ));
        }
        let proposal = request.proposal(terms.task().input().clone(), terms.webhook_url().cloned());
        let (listing, asset) = self
            .hireable_listing(&proposal)
            .await
            .map_err(input_refusal_as_bad_request)?;
        let bounds = self.bounded_window(terms)?;
        // The signed offer as the payment echoed it: its signature was checked, and the
        // requirements then compare equal to what the payer signed for.
        let signed = decode_header::<PaymentPayload>(header)
            .ok()
            .and_then(|payload| payload.accepted.extra.get(OFFER_EXTRA_KEY).cloned())
            .ok_or_else(|| offer_unreadable("missing"))?;
        let upto_facilitator = self.upto_facilitator(terms).await?;
        let offer =
            self.resource_offer(terms, &asset, &listing, &bounds, &signed, upto_facilitator)?;
        if let Some(refusal) = self.unworthy_payment(&offer, header).await? {
            return Ok(Some(refusal));
        }
        let seeker = PrincipalId::from(terms.seeker().clone());
        if terms.webhook_url().is_some() {
            // Before the contract row: its first event's delivery signs with the seeker's
            // stored secret, and would otherwise make a random one the payer never sees.
            self.webhook_secret_of(&contract_id, &seeker).await?;
        }
        match self
            .sign_and_store(
                &std::sync::Arc::new(terms.clone()),
                &offer,
                &bounds,
                &listing,
                &seeker,
                terms.created_at(),
                &request.correlation_id,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(contract_id = %contract_id, worker_id = %listing.id, "contract made from a paid x402 resource offer");
                Ok(None)
            }
            Err(error) if is_duplicate(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Why a payment of `offer` is not worth making its contract, if it is not: it fails the
    /// local checks against the offer (payTo, amount, network, asset, domain; for
    /// `auth-capture` also the escrow, collector and payment info), or its signature (EIP-3009,
    /// Permit2 or the escrow's) is not its payer's. An EOA's signature is checked here; a
    /// contract wallet's (which only the chain can judge) by the facilitator's `/verify`
    /// (`exact`) or the wallet's `isValidSignature` (`auth-capture`). Offers are free, so
    /// without this a flood of forged payments would leave a contract row each. Whatever passes
    /// is judged again, in full, by the engine.
    async fn unworthy_payment(
        &self,
        offer: &StoredOffer,
        header: &str,
    ) -> Result<Option<Outcome>, HireError> {
        let Some(requirements) = offer.requirements() else {
            return Ok(None);
        };
        let Ok(payload) = decode_header::<PaymentPayload>(header) else {
            return Ok(None);
        };
        let refuse = |reason: &str| {
            Some(Outcome::PaymentRequired(std::sync::Arc::new(
                PaymentDemand::new(
                    offer,
                    ErrorCode::PaymentInvalid,
                    format!("the payment was refused: {reason}"),
                    Some(reason),
                    json!({}),
                ),
            )))
        };
        match PaymentScheme::from_str(&requirements.scheme) {
            // Both signed over Permit2 (or EIP-3009 for `exact`), as the offer says.
            Ok(PaymentScheme::Exact | PaymentScheme::Upto) => {}
            Ok(PaymentScheme::AuthCapture) => {
                let refusal = self
                    .escrowed_payment_refusal(requirements, &payload)
                    .await?;
                return Ok(refusal.and_then(|reason| refuse(reason.as_str())));
            }
            Err(_) => return Ok(None),
        }
        // What was signed, by whom: an EIP-3009 authorization, or a Permit2 permit when the
        // offer says so.
        let signed =
            if requirements.asset_transfer_method() == hiregate_payments::permit2::METHOD_PERMIT2 {
                hiregate_payments::Permit2Payment::parse(&payload, requirements).map(|payment| {
                    (
                        payment.payload.signature.clone(),
                        payment.signing_hash(),
                        payment.payer(),
                    )
                })
            } else {
                hiregate_payments::ExactPayment::parse(&payload, requirements).map(|payment| {
                    (
                        payment.payload.signature.clone(),
                        payment.signing_hash(),
                        payment.payer(),
                    )
                })
            };
        let (signature, hash, payer) = match signed {
            Ok(signed) => signed,
            Err(reason) => return Ok(refuse(reason.as_str())),
        };
        let signer = alloy::primitives::Signature::from_raw(&signature)
            .ok()
            .and_then(|signature| signature.recover_address_from_prehash(&hash).ok());
        if signer == Some(payer) {
            return Ok(None);
        }
        let Some(facilitator) = &self.inner.facilitator else {
            // The engine answers 503 for it, with nothing stored either.
            return Err(super::submission::facilitator_unavailable(
                "no facilitator is configured",
            ));
        };
        match facilitator
            .verify(&hiregate_payments::VerifyRequest::new(
                payload.clone(),
                requirements.clone(),
            ))
            .await
        {
            Ok(verdict) if verdict.is_valid => Ok(None),
            Ok(verdict) => Ok(refuse(
                verdict
                    .invalid_reason
                    .as_ref()
                    .map_or("invalid_payment", |r| r.as_str()),
            )),
            Err(error) => Err(super::submission::facilitator_unavailable(
                &error.to_string(),
            )),
        }
    }

    /// Why an escrowed payment of `offer` is refused before its contract is written, if it is:
    /// it does not parse against the offer's requirements on this gateway's escrow, or its signature is
    /// neither its EOA payer's nor accepted by its wallet contract. `None` also when this
    /// gateway has no operator or node for the chain: the engine answers that, storing nothing.
    async fn escrowed_payment_refusal(
        &self,
        requirements: &hiregate_payments::wire::PaymentRequirements,
        payload: &PaymentPayload,
    ) -> Result<Option<hiregate_payments::reason::Reason>, HireError> {
        let Some(chain_id) = requirements.network.chain_id() else {
            return Ok(None);
        };
        let (Some(operator), Some((provider, _))) = (
            self.inner.escrow.get(chain_id),
            self.inner.assets.chain(chain_id),
        ) else {
            return Ok(None);
        };
        let payment =
            match AuthCapturePayment::parse(payload, requirements, operator.escrow().addresses()) {
                Ok(payment) => payment,
                Err(refusal) => return Ok(Some(refusal.reason)),
            };
        match check_signature(&provider, &payment).await {
            Ok(verdict) => Ok(verdict.err().map(|refusal| refusal.reason)),
            Err(error) => Err(super::submission::facilitator_unavailable(&format!(
                "the chain could not be asked about the payer's wallet: {error}"
            ))),
        }
    }

    /// The capability token of `contract_id` (stored as its SHA-256 on first issue): the
    /// gateway's signature over the contract id, so any instance sharing the signing key
    /// issues the same token and every paid answer of the contract carries it.
    pub async fn capability_of(&self, contract_id: &str) -> Result<String, HireError> {
        let signature = self
            .inner
            .keys
            .sign_detached(
                CAPABILITY_SIGNATURE_TYPE,
                &json!({ "contract_id": contract_id }),
            )
            .map_err(HireError::internal)?;
        let token = format!("{CAPABILITY_PREFIX}{}", signature.signature);
        self.inner
            .store
            .insert_capability(&ApiKeyHash::of(&token).to_hex(), contract_id, self.now())
            .await?;
        Ok(token)
    }
}

impl HireService {
    /// The webhook signing secret (`whsec_…`) of the wallet seeker `seeker_id` of contract
    /// `contract_id`: 32 bytes, the SHA-256 of the gateway's signature over the contract id (so
    /// every instance and every paid answer gives the same), stored as that seeker's secret on
    /// first use like any seeker's. The stored one is returned: it is what deliveries sign with.
    pub async fn webhook_secret_of(
        &self,
        contract_id: &str,
        seeker_id: &PrincipalId,
    ) -> Result<String, HireError> {
        use sha2::Digest as _;
        let signature = self
            .inner
            .keys
            .sign_detached(
                WEBHOOK_SECRET_SIGNATURE_TYPE,
                &json!({ "contract_id": contract_id }),
            )
            .map_err(HireError::internal)?;
        let key = sha2::Sha256::digest(signature.signature.as_bytes()).to_vec();
        let secret = WebhookSecret::from_bytes(key).map_err(HireError::internal)?;
        let record = self
            .inner
            .store
            .get_or_create_webhook_secret(seeker_id, &secret.expose_whsec(), self.now())
            .await?;
        Ok(record.secret)
    }
}
