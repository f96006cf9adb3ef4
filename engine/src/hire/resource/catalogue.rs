//! The discovery side of the stable x402 resources: a listing's resources described for the
//! catalogue (`/discovery/resources`, the bazaar extension), filtered and priced per scheme.

use hiregate_contracts::{metering::Metering, money::AtomicAmount};

use super::*;

/// The catalogue description of a listing's task type: the listing's description, or one
/// made from its name, within [`MAX_DESCRIPTION_CHARS`].
pub fn resource_description(listing: &WorkerListing, task_type: &str) -> String {
    let text = match (
        listing.metadata.description.as_deref(),
        listing.metadata.name.as_deref(),
    ) {
        (Some(description), _) => description.to_owned(),
        (None, Some(name)) => format!(
            "{name}: `{task_type}` through hiregate, the deliverable verified before payment settles"
        ),
        (None, None) => format!(
            "hiregate worker {}: `{task_type}`, the deliverable verified before payment settles",
            listing.id
        ),
    };
    text.chars().take(MAX_DESCRIPTION_CHARS).collect()
}

/// Filters of `GET /discovery/resources` (the x402 bazaar discovery list's).
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CatalogueFilter {
    /// Resource type: only `http` is served here.
    #[serde(rename = "type")]
    pub resource_type: Option<String>,
    /// Payment recipient address.
    #[serde(rename = "payTo")]
    pub pay_to: Option<String>,
    /// Payment scheme (`exact`, `auth-capture`).
    pub scheme: Option<String>,
    /// CAIP-2 network (`eip155:8453`).
    pub network: Option<String>,
    /// An extension key each resource must carry (`bazaar`).
    pub extensions: Option<String>,
    /// Page size, 1–200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u32>,
    /// Resources to skip.
    #[param(minimum = 0, maximum = 1_000_000)]
    pub offset: Option<u32>,
}

/// Listings read per store page while building the catalogue, and the most it reads.
const CATALOGUE_PAGE: u32 = 200;
const CATALOGUE_MAX_LISTINGS: usize = 5_000;

impl HireService {
    /// One x402 discovery resource per healthy listing and task type, in the bazaar discovery
    /// list's shape (`{x402Version, items, pagination}`): the stable URL, what one payment of
    /// it asks for (the 402 of a call adds the signed offer), its schemas and description.
    pub async fn resource_catalogue(&self, filter: &CatalogueFilter) -> Result<Value, HireError> {
        use hiregate_store::listing::model::HealthState;
        let mut listings = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .inner
                .store
                .list_workers(&hiregate_store::WorkerQuery {
                    task_type: None,
                    max_price: None,
                    health: Some(HealthState::Healthy),
                    operator_id: None,
                    include_retired: false,
                    after: after.clone(),
                    limit: CATALOGUE_PAGE,
                })
                .await?;
            let full = page.len() == CATALOGUE_PAGE as usize;
            after = page.last().map(|listing| listing.id.clone());
            listings.extend(page);
            if !full || listings.len() >= CATALOGUE_MAX_LISTINGS {
                break;
            }
        }
        let mut items = Vec::new();
        // Per network: the facilitator an `upto` payer authorizes (`None`: `upto` cannot be paid
        // there, so metered listings on it are left out, as the 402 would refuse them).
        let mut upto_facilitators = std::collections::HashMap::new();
        for listing in &listings {
            if self.inner.adapters.get(listing.protocol).is_none() {
                continue;
            }
            // A token the gateway cannot describe cannot be paid either: left out.
            let Ok(asset) = self
                .inner
                .assets
                .lookup(listing.network, listing.asset.address())
                .await
            else {
                continue;
            };
            let upto_facilitator =
                if listing.payment_schemes.default_scheme() == PaymentScheme::Upto {
                    let facilitator = match upto_facilitators.get(&listing.network) {
                        Some(known) => *known,
                        None => {
                            let found = self.upto_facilitator_on(listing.network).await.ok();
                            upto_facilitators.insert(listing.network, found);
                            found
                        }
                    };
                    if facilitator.is_none() {
                        continue;
                    }
                    facilitator
                } else {
                    None
                };
            for (task_type, task) in listing.tasks.offers() {
                let Some(item) = self.catalogue_item(
                    listing,
                    task_type.as_str(),
                    task,
                    &asset,
                    upto_facilitator,
                ) else {
                    continue;
                };
                if catalogue_matches(&item, filter) {
                    items.push(item);
                }
            }
        }
        let total = items.len();
        let limit = filter.limit.unwrap_or(50).clamp(1, 200) as usize;
        let offset = filter.offset.unwrap_or(0) as usize;
        let page: Vec<Value> = items.into_iter().skip(offset).take(limit).collect();
        Ok(json!({
            "x402Version": 2,
            "items": page,
            "pagination": {"limit": limit, "offset": offset, "total": total},
        }))
    }

    /// The catalogue's resource for one task type of `listing`; `None` when a metered task
    /// cannot be priced (a maximum beyond 2^128 - 1, or `upto` without `upto_facilitator`).
    fn catalogue_item(
        &self,
        listing: &WorkerListing,
        task_type: &str,
        task: &hiregate_store::listing::model::TaskOffer,
        asset: &AssetInfo,
        upto_facilitator: Option<alloy::primitives::Address>,
    ) -> Option<Value> {
        let scheme = listing.payment_schemes.default_scheme();
        let network = listing.network;
        let metering = match task.metering {
            Some(metering) => {
                let unit_price = u128::try_from(task.price.value()).ok()?;
                Some(
                    Metering::new(
                        metering.unit,
                        AtomicAmount::new(unit_price),
                        metering.max_units,
                    )
                    .ok()?,
                )
            }
            None => None,
        };
        let requirements = if scheme == PaymentScheme::Upto {
            // What one call asks the payer to authorize: the most the pinned metering can bill.
            hiregate_payments::PaymentRequirements::upto_evm(
                network,
                alloy::primitives::U256::from(metering?.maximum().units()),
                asset.address,
                listing.pay_to.address(),
                self.default_max_timeout_s(scheme),
                asset.domain().as_ref(),
                upto_facilitator?,
            )
        } else if scheme == PaymentScheme::Exact
            && asset.transfer_method == crate::assets::TransferMethod::Permit2
        {
            hiregate_payments::PaymentRequirements::exact_permit2_evm(
                network,
                task.price.value(),
                asset.address,
                listing.pay_to.address(),
                self.default_max_timeout_s(scheme),
                asset.domain().as_ref(),
            )
        } else {
            let domain = hiregate_payments::TokenDomain {
                name: asset.name.clone(),
                version: asset.version.clone(),
            };
            let mut requirements = hiregate_payments::PaymentRequirements::exact_evm(
                network,
                task.price.value(),
                asset.address,
                listing.pay_to.address(),
                self.default_max_timeout_s(scheme),
                &domain,
            );
            requirements.scheme = scheme.as_str().to_owned();
            requirements
        };
        let mut requirements = requirements;
        // The flow a call's contract will pin (an upfront listing is `exact`-only), written as
        // the contract's own offer writes it.
        if listing.payment_flow == hiregate_store::listing::model::ListingPaymentFlow::Upfront
            && scheme == PaymentScheme::Exact
        {
            requirements.set_payment_flow(hiregate_payments::PaymentFlow::Upfront);
        }
        let discovery = ListingDiscovery {
            name: listing.metadata.name.as_deref(),
            description: listing.metadata.description.as_deref(),
            input_schema: listing.metadata.input_schema.as_ref().map(|s| s.as_json()),
        };
        let example = listing
            .metadata
            .examples
            .first()
            .cloned()
            .unwrap_or_else(|| json!({}));
        let output_schema = task.output_schema.as_json();
        let mut resource = json!({
            "resource": self.resource_url(listing.id.as_str(), task_type),
            "type": "http",
            "x402Version": 2,
            "accepts": [requirements],
            "lastUpdated": listing.updated_at,
            "description": resource_description(listing, task_type),
            "mimeType": "application/json",
            "extensions": {
                "bazaar": crate::hire::bazaar::extension(&discovery, &example, Some(output_schema)),
            },
            "metadata": {
                "worker_id": listing.id,
                "task_type": task_type,
                "protocol": listing.protocol.as_str(),
                "payment_schemes": listing.payment_schemes.as_slice(),
                "payment_flow": crate::hire::offer::payment_flow_of(&requirements),
                "price": {
                    "amount": task.price.value().to_string(),
                    "asset": asset.address,
                    "network": listing.network.to_string(),
                    "decimals": asset.decimals,
                    "symbol": asset.symbol,
                },
                "input_schema": discovery.input_schema,
                "output_schema": output_schema,
            },
        });
        let fields = crate::hire::bazaar::service_fields(&discovery, task_type);
        if let Some(metadata) = resource["metadata"].as_object_mut() {
            metadata.extend(fields);
        }
        // A metered task: the price is the most one call can bill, at the pinned unit price.
        if let Some(metering) = metering {
            resource["metadata"]["price"]["amount"] = json!(metering.maximum().units().to_string());
            resource["metadata"]["price"]["metering"] = json!(metering);
        }
        Some(resource)
    }

    /// `maxTimeoutSeconds` of a default proposal (the SLA and retries a call of the resource
    /// gets): the authorization window for `exact`, the escrow's payment window otherwise.
    fn default_max_timeout_s(&self, scheme: PaymentScheme) -> u64 {
        use hiregate_contracts::terms::{RetryPolicy, Sla};
        let config = &self.inner.config;
        if scheme == PaymentScheme::AuthCapture {
            return config.escrow.payment_window_s;
        }
        let sla = Sla::default();
        let attempts = u64::from(RetryPolicy::default().max_attempts());
        let settings = &config.contracts;
        (sla.max_latency_ms().div_ceil(1000) + sla.poll_window_s()) * attempts
            + settings.verification_budget_s
            + settings.default_acceptance_window_s
            + settings.settlement_margin_s
    }
}

/// Whether a catalogue item passes the list's filters.
fn catalogue_matches(item: &Value, filter: &CatalogueFilter) -> bool {
    let accepts = &item["accepts"][0];
    let same = |wanted: &Option<String>, actual: &Value| {
        wanted.as_deref().is_none_or(|wanted| {
            actual
                .as_str()
                .is_some_and(|a| a.eq_ignore_ascii_case(wanted))
        })
    };
    same(&filter.resource_type, &item["type"])
        && same(&filter.pay_to, &accepts["payTo"])
        && same(&filter.scheme, &accepts["scheme"])
        && same(&filter.network, &accepts["network"])
        && filter
            .extensions
            .as_deref()
            .is_none_or(|key| item["extensions"].get(key).is_some())
}
