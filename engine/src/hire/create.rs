//! `POST /v1/contracts` in the engine: the listing must be hireable for the task, the seeker's
//! proposal becomes terms within the gateway's bounds (authorization window, escrow fees and
//! deadlines, exact amounts), which are signed and stored with the x402 offer. The stable x402
//! resource makes its contracts through the same steps (`resource`).

use super::*;
use hiregate_store::listing::model::ListingPaymentFlow;
use hiregate_store::states::{Actor, EventKind};

impl HireService {
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
        let terms = Arc::new(self.proposed_terms(&listing, request, seeker, now).await?);
        offer::check_transfer_method(&terms, &asset)?;
        let bounds = self.bounded_window(&terms)?;
        let contract_id = terms.contract_id().clone();
        let upto_facilitator = self.upto_facilitator(&terms).await?;
        let mut stored_offer = offer::stored_offer(
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
        // Signed once, stored with the offer: every 402 of the contract serves these bytes.
        self.offer_receipt_signer().sign_offers(
            &mut stored_offer.payment_required,
            u64::try_from(terms.offer_expires_at().unix_seconds()).ok(),
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
        // The seeker's next call is the unpaid execute (a standard x402 client makes it before
        // it pays): its 402 is ready without reading back what was just stored.
        self.inner.offers.remember(
            contract_id.as_str(),
            seeker.as_str(),
            correlation_id,
            &terms,
            Arc::new(offered::payment_required(&stored_offer, &contract_id)),
        );
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
                "informational": offer::informational(&stored_offer),
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
    pub(super) async fn hireable_listing(
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
            .lookup(listing.network, listing.asset.address())
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
    pub(super) async fn proposed_terms(
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
        let seeker_id = seeker
            .seeker()
            .ok_or_else(|| HireError::internal_msg(format!("{seeker} is not a seeker account")))?;
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
        // A metered task type is paid for its verified units with `upto` (checked by
        // `worker_offer`: an `upto` offer is a metered one) and with `auth-capture`, whose
        // escrow captures the verified amount and voids the rest; `exact` moves the maximum.
        match (scheme, metering) {
            (PaymentScheme::Upto | PaymentScheme::AuthCapture, Some(metering)) => {
                terms = terms.with_metering(metering).map_err(|e| terms_error(&e))?;
            }
            (PaymentScheme::Upto, None) => {
                return Err(HireError::internal_msg("upto offer without metering"));
            }
            _ => {}
        }
        // An upfront listing is `exact`-only (checked when listed): its contracts are settled
        // before the worker is called, and the terms say what that means for rejected work.
        if listing.payment_flow == ListingPaymentFlow::Upfront && scheme == PaymentScheme::Exact {
            terms = terms.with_upfront_payment().map_err(|e| terms_error(&e))?;
        }
        crosscheck::check_verifiers(&inner.store, &inner.outbound, listing, terms.verification())
            .await?;
        Ok(terms)
    }

    /// The authorization window of `terms`, checked against the gateway's bounds (the escrow's
    /// for `auth-capture`, one authorization's for `exact`), and the offer's `maxTimeoutSeconds`
    /// and contract token expiry it implies.
    pub(super) fn bounded_window(&self, terms: &ContractTerms) -> Result<OfferBounds, HireError> {
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
    pub(super) async fn sign_and_store(
        &self,
        terms: &Arc<ContractTerms>,
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
        inner
            .store
            .insert_contract(
                &NewContract {
                    contract_id: terms.contract_id().clone(),
                    seeker_id: seeker.clone(),
                    worker_id: listing.id.clone(),
                    task_type: terms.task().task_type().to_string(),
                    terms: terms_json.clone(),
                    parsed_terms: Some(Arc::clone(terms)),
                    terms_hash: terms_hash.to_string(),
                    gateway_jws: token.clone(),
                    state: ContractState::Offered,
                    payment_offer: Some(stored_offer.clone()),
                    deadline_at: Some(terms.offer_expires_at().as_datetime()),
                    created_at: now.as_datetime(),
                },
                &NewContractEvent {
                    at: now.as_datetime(),
                    actor: Actor::Seeker(seeker.clone()),
                    correlation_id: correlation_id.to_owned(),
                    kind: EventKind::ContractOffered,
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
    pub(super) fn escrow_policy(&self, listing: &WorkerListing) -> Result<EscrowPolicy, HireError> {
        let config = &self.inner.config;
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
            .find(|chain| chain.network == listing.network)
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
    pub(super) fn check_escrow_bounds(&self, terms: &ContractTerms) -> Result<(), HireError> {
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
/// maximum (`unit price × max_units`) whatever the scheme; `upto` and `auth-capture` pay less
/// for fewer verified units (`exact` moves the maximum), and `upto` is offered only for
/// metered task types.
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
    let endpoint = EndpointUrl::try_from(listing.endpoint.url().clone())
        .map_err(|e| unusable(e.to_string()))?;
    let protocol = match listing.protocol {
        Protocol::Hire => TermsProtocol::Hire,
        Protocol::Wattswarm => TermsProtocol::Wattswarm,
        Protocol::Superwire => TermsProtocol::Superwire,
    };
    let pay_to = listing.pay_to.as_contract_address();
    let worker = WorkerParty::new(listing.id.clone(), endpoint, protocol, pay_to)
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
