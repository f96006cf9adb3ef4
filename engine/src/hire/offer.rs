//! The x402 offer of a contract: what it asks for (fixed when the contract is signed) and how
//! long the payment authorization must stay valid.
//!
//! `maxTimeoutSeconds` = (SLA max latency + poll window) × max attempts + verification budget +
//! acceptance window + settlement margin: pending HIRE work may run `sla.poll_window_s` past
//! its answer, and the authorization must outlive that wait. Clients set `validBefore = now + maxTimeoutSeconds`, so the
//! authorization outlives every attempt, the verdict, the dispute window and the settlement
//! transaction. A contract that would need more than `contracts.max_authorization_window_s` is
//! refused when it is proposed.
//!
//! An `auth-capture` offer (escrowed contract) is different: the payment only has to be
//! authorized on chain, so `maxTimeoutSeconds` is `escrow.payment_window_s`; how long the money
//! stays locked is the signed terms' capture deadline, carried in `extra` with the rest of the
//! x402 `auth-capture` EVM fields (see [`auth_capture_extra`]).
//!
//! An `exact` offer in a token paid over Permit2 ([`TransferMethod::Permit2`]: any ERC-20, or an
//! EIP-3009 token configured so) carries `extra.assetTransferMethod = "permit2"` (and the
//! token's EIP-712 domain when it has one), which is what the official `@x402/evm` client reads
//! to sign a Permit2 `PermitWitnessTransferFrom` instead of an EIP-3009 authorization. With the
//! embedded facilitator, which sponsors Permit2 approvals, the 402 also declares the
//! `eip2612GasSponsoring` extension for tokens with a domain and `erc20ApprovalGasSponsoring`
//! for every token: a payer who never approved Permit2 (and may hold no ETH) signs an EIP-2612
//! permit, or, for a token without EIP-2612, an `approve(Permit2)` transaction the facilitator
//! funds and broadcasts before settling. The official client prefers the permit when both are
//! declared and the offer names the token's domain.
//!
//! An `upto` offer (metered contract) is over Permit2 for any token: `amount` is the terms'
//! maximum (`unit_price × max_units`) and `extra.facilitatorAddress` the facilitator the payer
//! lets choose the amount, at most that maximum; after verification only the verified units'
//! amount is settled (see `settle`).
//!
//! Every offer names its payment flow ([`payment_flow_of`], in the HIRE informational view as
//! `payment_flow`). In x402 `extra.paymentFlow` it is written as the official 2.27 server
//! writes it: `upfront` (an `exact` contract of an upfront listing, settled before the worker
//! is called, see `upfront`) is named; `authorization`, the default of `exact` and `upto`, is
//! left out.

use alloy::primitives::{Address, U256};
use hiregate_contracts::{
    escrow::EscrowTerms, money::PaymentScheme, payment_flow::PaymentFlow, terms::ContractTerms,
};
use hiregate_payments::{
    PaymentRequired, PaymentRequirements, ResourceInfo, TokenDomain,
    extension::{PAYMENT_IDENTIFIER, declare_payment_identifier},
    permit2::{
        approval::{ERC20_APPROVAL_GAS_SPONSORING, erc20_approval_gas_sponsoring_offer},
        extension::{EIP2612_GAS_SPONSORING, eip2612_gas_sponsoring_offer},
    },
    wire::{Extensions, UnknownFields, X402Version2},
};
use hiregate_store::offer::StoredOffer;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    bazaar::{self, ListingDiscovery},
    error::{ErrorCode, HireError},
};
use crate::{
    assets::{AssetInfo, TransferMethod},
    settings::ContractSettings,
};

/// Refuses terms whose scheme cannot move `asset`: the `auth-capture` escrow's collector takes
/// EIP-3009 authorizations only, so a token paid over Permit2 is offered `exact`.
pub fn check_transfer_method(terms: &ContractTerms, asset: &AssetInfo) -> Result<(), HireError> {
    if terms.escrow().is_some() && asset.transfer_method == TransferMethod::Permit2 {
        return Err(HireError::unprocessable(
            ErrorCode::PaymentSchemeNotAccepted,
            format!(
                "`{}` needs an EIP-3009 token; {} is paid over Permit2: ask for payment_scheme \
                 \"exact\"",
                terms.scheme(),
                asset.symbol
            ),
        )
        .with_details(serde_json::json!({
            "asset": asset.address.to_checksum(None),
            "asset_transfer_method": asset.transfer_method.as_str(),
        })));
    }
    Ok(())
}

/// Seconds of tolerance when checking a payment's `validBefore` against the offer's
/// `maxTimeoutSeconds`: clients compute it from their own clock at signing time, a little before
/// the payment reaches us.
pub const SIGNING_SLACK_S: u64 = 30;

/// The authorization window a contract needs, and what it is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AuthorizationWindow {
    /// Every attempt's SLA, back to back.
    pub work_s: u64,
    /// Every attempt's poll window (pending work), back to back.
    pub poll_window_s: u64,
    /// Verification of the deliverable.
    pub verification_s: u64,
    /// The seeker's dispute window before settlement.
    pub acceptance_window_s: u64,
    /// Settlement transaction and clock skew.
    pub settlement_margin_s: u64,
    /// The sum: x402 `maxTimeoutSeconds`.
    pub total_s: u64,
}

impl AuthorizationWindow {
    /// The window for `terms` under `settings`.
    pub fn for_terms(terms: &ContractTerms, settings: &ContractSettings) -> Self {
        let attempts = u64::from(terms.retry_policy().max_attempts());
        let work_s = terms
            .sla()
            .max_latency_ms()
            .div_ceil(1000)
            .saturating_mul(attempts);
        let poll_window_s = terms.sla().poll_window_s().saturating_mul(attempts);
        let acceptance_window_s = terms.acceptance_window_s();
        let total_s = work_s
            .saturating_add(poll_window_s)
            .saturating_add(settings.verification_budget_s)
            .saturating_add(acceptance_window_s)
            .saturating_add(settings.settlement_margin_s);
        Self {
            work_s,
            poll_window_s,
            verification_s: settings.verification_budget_s,
            acceptance_window_s,
            settlement_margin_s: settings.settlement_margin_s,
            total_s,
        }
    }

    /// Seconds of authorization validity one more attempt needs from now: its SLA and poll
    /// window, verification, the acceptance window and the settlement reserve.
    pub fn needed_for_one_attempt(terms: &ContractTerms, settings: &ContractSettings) -> u64 {
        terms
            .sla()
            .max_latency_ms()
            .div_ceil(1000)
            .saturating_add(terms.sla().poll_window_s())
            .saturating_add(settings.verification_budget_s)
            .saturating_add(terms.acceptance_window_s())
            .saturating_add(settings.settlement_margin_s.saturating_sub(SIGNING_SLACK_S))
    }
}

/// The x402 `auth-capture` EVM `extra` of an escrowed contract's offer: the token's EIP-712
/// domain and every `PaymentInfo` field the terms pin. `authCaptureEscrow` is always named so
/// the official client signs for the configured escrow (without it, it picks its own default
/// deployment, which may not be the one this chain uses).
pub fn auth_capture_extra(escrow: &EscrowTerms, domain: &TokenDomain) -> Map<String, Value> {
    let address = |a: hiregate_contracts::money::EvmAddress| Value::String(a.to_checksummed());
    let mut extra = Map::new();
    extra.insert("name".into(), json!(domain.name));
    extra.insert("version".into(), json!(domain.version));
    extra.insert(
        "captureAuthorizer".into(),
        address(escrow.capture_authorizer()),
    );
    extra.insert(
        "captureDeadline".into(),
        json!(escrow.capture_deadline_unix()),
    );
    extra.insert(
        "refundDeadline".into(),
        json!(escrow.refund_deadline_unix()),
    );
    extra.insert("minFeeBps".into(), json!(escrow.min_fee_bps()));
    extra.insert("maxFeeBps".into(), json!(escrow.max_fee_bps()));
    extra.insert("feeRecipient".into(), address(escrow.fee_recipient()));
    extra.insert("autoCapture".into(), json!(false));
    extra.insert("assetTransferMethod".into(), json!("eip3009"));
    extra.insert("authCaptureEscrow".into(), address(escrow.escrow()));
    extra
}

/// The stored offer of `terms` paid in `asset`, for the resource at `execute_url`. `max_timeout_s`
/// is the authorization window (`exact`) or the payment window (`auth-capture`). The
/// listing's `discovery` fields go where x402 catalogues read them ([`super::bazaar`]).
/// `gas_sponsoring`: the facilitator sponsors Permit2 approvals (EIP-2612 permits, declared
/// for Permit2 offers of tokens with a domain, and signed approval transactions, for all). `upto_facilitator`: for an `upto` contract, the facilitator
/// address the payer's witness must name (what the facilitator's `/supported` advertises);
/// an `upto` offer is over Permit2 whatever the token, for at most the terms' maximum.
#[allow(clippy::too_many_arguments)]
pub fn stored_offer(
    terms: &ContractTerms,
    asset: &AssetInfo,
    pay_to: Address,
    execute_url: &str,
    max_timeout_s: u64,
    discovery: &ListingDiscovery<'_>,
    gas_sponsoring: bool,
    upto_facilitator: Option<Address>,
) -> StoredOffer {
    let price = terms.price();
    let network = price.network();
    let amount = U256::from(price.amount().units());
    let domain = asset.domain();
    let permit2 = terms.escrow().is_none() && asset.transfer_method == TransferMethod::Permit2;
    let requirements =
        if let (PaymentScheme::Upto, Some(facilitator)) = (terms.scheme(), upto_facilitator) {
            PaymentRequirements::upto_evm(
                network,
                amount,
                asset.address,
                pay_to,
                max_timeout_s,
                domain.as_ref(),
                facilitator,
            )
        } else if permit2 {
            PaymentRequirements::exact_permit2_evm(
                network,
                amount,
                asset.address,
                pay_to,
                max_timeout_s,
                domain.as_ref(),
            )
        } else {
            let domain = domain.clone().unwrap_or_else(|| TokenDomain {
                name: asset.name.clone(),
                version: asset.version.clone(),
            });
            let mut requirements = PaymentRequirements::exact_evm(
                network,
                amount,
                asset.address,
                pay_to,
                max_timeout_s,
                &domain,
            );
            if let Some(escrow) = terms.escrow() {
                requirements.scheme = terms.scheme().as_str().to_owned();
                requirements.extra = auth_capture_extra(escrow, &domain);
            }
            requirements
        };
    let mut requirements = requirements;
    // As the official server writes it: `upfront` named, `authorization` (the default of
    // `exact` and `upto`) left out. Escrowed offers carry the auth-capture wire's own fields.
    if terms.payment_flow() == PaymentFlow::Upfront {
        requirements.set_payment_flow(hiregate_payments::PaymentFlow::Upfront);
    }
    let task = terms.task();
    let mut resource = ResourceInfo::new(execute_url);
    resource.description = Some(match discovery.description {
        Some(description) => description.to_owned(),
        None => format!(
            "hiregate contract {}: {}",
            terms.contract_id(),
            task.task_type()
        ),
    });
    resource.mime_type = Some("application/json".to_owned());
    resource
        .unknown
        .extend(bazaar::service_fields(discovery, task.task_type().as_str()));
    let mut extensions = Extensions::new();
    extensions.insert(
        PAYMENT_IDENTIFIER.to_owned(),
        declare_payment_identifier(false),
    );
    if permit2 && gas_sponsoring && domain.is_some() {
        extensions.insert(
            EIP2612_GAS_SPONSORING.to_owned(),
            eip2612_gas_sponsoring_offer(),
        );
    }
    if permit2 && gas_sponsoring {
        extensions.insert(
            ERC20_APPROVAL_GAS_SPONSORING.to_owned(),
            erc20_approval_gas_sponsoring_offer(),
        );
    }
    extensions.insert(
        bazaar::BAZAAR.to_owned(),
        bazaar::extension(
            discovery,
            task.input(),
            task.output_schemas()
                .first()
                .map(|schema| schema.document()),
        ),
    );
    StoredOffer {
        payment_required: PaymentRequired {
            x402_version: X402Version2,
            error: None,
            resource,
            accepts: vec![requirements],
            extensions,
            unknown: UnknownFields::new(),
        },
        decimals: asset.decimals,
        symbol: asset.symbol.clone(),
    }
}

/// The flow an offer names: its `extra.paymentFlow` when written, else the scheme's default
/// (`escrow` for `auth-capture`, whose older wire has no `paymentFlow`; `authorization` for
/// `exact` and `upto`, which the official server leaves unwritten).
pub fn payment_flow_of(requirements: &PaymentRequirements) -> &'static str {
    match requirements.payment_flow() {
        Ok(Some(flow)) => flow.as_str(),
        _ if requirements.scheme == PaymentScheme::AuthCapture.as_str() => {
            PaymentFlow::Escrow.as_str()
        }
        _ => PaymentFlow::Authorization.as_str(),
    }
}

/// The HIRE informational view of `offer`: address, whole-unit amount, currency, network.
pub fn informational(offer: &StoredOffer) -> Value {
    let Some(requirements) = offer.requirements() else {
        return Value::Null;
    };
    json!({
        "address": requirements.pay_to,
        "amount": crate::assets::whole_units(requirements.amount.get(), offer.decimals),
        "amount_atomic": requirements.amount.to_string(),
        "currency": offer.symbol,
        "network": requirements.network.as_str(),
        "asset": requirements.asset,
        "max_timeout_seconds": requirements.max_timeout_seconds,
        "payment_flow": payment_flow_of(requirements),
    })
}
