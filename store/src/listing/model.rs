//! Worker listing types, each valid by construction (parsed at the HTTP edge, re-parsed when
//! read back from the store).
//!
//! [`Network`] is `contracts`' own type, re-exported so there is one CAIP-2 parser, and
//! [`EvmAddress`] wraps `contracts`' address only to refuse the zero address at parse time.
//! [`AtomicAmount`] stays the gateway's: listings may price up to uint256 while contract terms
//! cap at u128 (the hire refuses larger prices explicitly); both write the same decimal string.

use std::{collections::BTreeMap, fmt, str::FromStr};

use alloy::primitives::{Address, U256};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use url::Url;

pub use hiregate_contracts::metering::MeterUnit;
use hiregate_contracts::money::EvmAddress as ContractAddress;
pub use hiregate_contracts::money::{Network, PaymentScheme};

use super::invalid::InvalidField;
use hiregate_contracts::id::{PrincipalId, WorkerId};

/// How the gateway talks to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// The native HIRE execution protocol (worker-sdk).
    Hire,
    /// A WattSwarm executor.
    Wattswarm,
    /// A Superwire executor.
    Superwire,
}

impl Protocol {
    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hire => "hire",
            Self::Wattswarm => "wattswarm",
            Self::Superwire => "superwire",
        }
    }
}

impl FromStr for Protocol {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "hire" => Ok(Self::Hire),
            "wattswarm" => Ok(Self::Wattswarm),
            "superwire" => Ok(Self::Superwire),
            _ => Err(InvalidField::new(
                "protocol",
                "expected hire, wattswarm or superwire",
            )),
        }
    }
}

/// A task type name: 1–64 characters of `[A-Za-z0-9._:-]`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskType(String);

impl TaskType {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TaskType {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
        let starts_well = raw
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
        if raw.is_empty() || raw.len() > 64 || !starts_well || !raw.chars().all(valid_char) {
            return Err(InvalidField::new(
                "task_type",
                "1-64 characters of letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
            ));
        }
        Ok(Self(raw.to_owned()))
    }
}

impl TryFrom<String> for TaskType {
    type Error = InvalidField;

    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<TaskType> for String {
    fn from(task: TaskType) -> Self {
        task.0
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A listing's payee or token address: a `contracts` [`ContractAddress`] that is not the zero
/// address (paying it burns funds). Parsing, the EIP-55 mixed-case check and display are
/// `contracts`'; only the non-zero rule and the lowercase `0x` prefix are the gateway's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EvmAddress(ContractAddress);

impl EvmAddress {
    /// The alloy address, for chain and asset-directory calls.
    pub fn address(self) -> Address {
        Address::from(*self.0.as_bytes())
    }

    /// The `contracts` address, for signed terms.
    pub fn as_contract_address(self) -> ContractAddress {
        self.0
    }
}

impl FromStr for EvmAddress {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let refused = |reason: String| InvalidField::new("address", reason);
        if !raw.starts_with("0x") {
            return Err(refused(
                "expected a non-zero 0x-prefixed EVM address".to_owned(),
            ));
        }
        let address = ContractAddress::from_str(raw).map_err(|e| refused(e.to_string()))?;
        if address.is_zero() {
            return Err(refused("must not be the zero address".to_owned()));
        }
        Ok(Self(address))
    }
}

impl TryFrom<String> for EvmAddress {
    type Error = InvalidField;

    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<EvmAddress> for String {
    fn from(address: EvmAddress) -> Self {
        address.0.into()
    }
}

impl fmt::Display for EvmAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A token amount in atomic units (uint256), written as a decimal string on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AtomicAmount(U256);

impl AtomicAmount {
    /// Digits in `U256::MAX`; [`Self::sort_key`] pads to this width.
    const MAX_DIGITS: usize = 78;

    /// The amount.
    pub fn value(self) -> U256 {
        self.0
    }

    /// Zero-padded decimal whose byte order equals numeric order, so both SQLite and
    /// PostgreSQL compare prices in SQL without a 256-bit integer type.
    pub fn sort_key(self) -> String {
        format!("{:0>width$}", self.0.to_string(), width = Self::MAX_DIGITS)
    }
}

impl From<U256> for AtomicAmount {
    fn from(value: U256) -> Self {
        Self(value)
    }
}

impl FromStr for AtomicAmount {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let error = || {
            InvalidField::new(
                "amount",
                "expected a decimal integer string of atomic units",
            )
        };
        if raw.is_empty()
            || raw.len() > Self::MAX_DIGITS
            || !raw.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(error());
        }
        if raw.len() > 1 && raw.starts_with('0') {
            return Err(error());
        }
        U256::from_str_radix(raw, 10).map(Self).map_err(|_| error())
    }
}

impl TryFrom<String> for AtomicAmount {
    type Error = InvalidField;

    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<AtomicAmount> for String {
    fn from(amount: AtomicAmount) -> Self {
        amount.0.to_string()
    }
}

impl fmt::Display for AtomicAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A compiled-and-checked JSON Schema document for a task's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "serde_json::Value", try_from = "serde_json::Value")]
pub struct OutputSchema(serde_json::Value);

impl OutputSchema {
    /// Accept `schema` only if it compiles as a JSON Schema (draft 2020-12 unless `$schema`
    /// says otherwise). Remote `$ref`s are not fetched (the gateway builds jsonschema without
    /// network resolvers), so they fail here rather than at verification time.
    pub fn parse(schema: serde_json::Value) -> Result<Self, InvalidField> {
        if !(schema.is_object() || schema.is_boolean()) {
            return Err(InvalidField::new(
                "output_schema",
                "must be a JSON Schema object",
            ));
        }
        jsonschema::validator_for(&schema).map_err(|e| {
            InvalidField::new("output_schema", format!("not a valid JSON Schema: {e}"))
        })?;
        Ok(Self(schema))
    }

    /// Rebuild from the store, which only ever holds schemas that passed [`Self::parse`]
    /// (compiling every schema on every discovery read would waste CPU).
    pub(crate) fn from_stored(schema: serde_json::Value) -> Self {
        Self(schema)
    }

    /// The schema document.
    pub fn as_json(&self) -> &serde_json::Value {
        &self.0
    }
}

impl TryFrom<serde_json::Value> for OutputSchema {
    type Error = InvalidField;

    fn try_from(schema: serde_json::Value) -> Result<Self, Self::Error> {
        Self::parse(schema)
    }
}

impl From<OutputSchema> for serde_json::Value {
    fn from(schema: OutputSchema) -> Self {
        schema.0
    }
}

/// What a worker charges for a task type and what its output must look like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskOffer {
    /// Price per contract, atomic units of the listing's asset (decimal string).
    #[schema(value_type = String, example = "1000000")]
    pub price: AtomicAmount,
    /// Schema every deliverable for this task type must satisfy.
    #[schema(value_type = Object)]
    pub output_schema: OutputSchema,
    /// Priced per verified unit (x402 `upto`): `price` is then the price of one unit, and a
    /// contract pays for the units the gateway verified, at most `max_units`. Absent: `price`
    /// is per contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metering: Option<TaskMetering>,
}

/// How a metered task type counts: the unit and the most units one contract pays for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskMetering {
    /// `item`: an item of the delivered `multiple` output that passes verification on its own.
    #[schema(value_type = String, example = "item")]
    pub unit: MeterUnit,
    /// The most units one contract pays for (`1..=64` items).
    #[schema(example = 5)]
    pub max_units: u32,
}

/// The task types a worker offers: never empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    into = "BTreeMap<TaskType, TaskOffer>",
    try_from = "BTreeMap<TaskType, TaskOffer>"
)]
pub struct TaskCatalog(BTreeMap<TaskType, TaskOffer>);

impl TaskCatalog {
    /// Upper bound on task types per listing.
    pub const MAX_TASK_TYPES: usize = 64;

    /// Build a catalog; empty or oversized catalogs are refused.
    pub fn new(offers: BTreeMap<TaskType, TaskOffer>) -> Result<Self, InvalidField> {
        if offers.is_empty() {
            return Err(InvalidField::new(
                "tasks",
                "at least one task type is required",
            ));
        }
        if offers.len() > Self::MAX_TASK_TYPES {
            return Err(InvalidField::new(
                "tasks",
                format!("at most {} task types", Self::MAX_TASK_TYPES),
            ));
        }
        for (task_type, offer) in &offers {
            if let Some(metering) = offer.metering
                && (metering.max_units == 0 || metering.max_units > metering.unit.max_units())
            {
                return Err(InvalidField::new(
                    "tasks",
                    format!(
                        "{task_type}: metering.max_units must be 1..={} for unit `{}`",
                        metering.unit.max_units(),
                        metering.unit.as_str()
                    ),
                ));
            }
        }
        Ok(Self(offers))
    }

    /// Offers by task type.
    pub fn offers(&self) -> &BTreeMap<TaskType, TaskOffer> {
        &self.0
    }

    /// The offer for one task type.
    pub fn get(&self, task_type: &TaskType) -> Option<&TaskOffer> {
        self.0.get(task_type)
    }

    /// The offered task types.
    pub fn task_types(&self) -> Vec<&TaskType> {
        self.0.keys().collect()
    }
}

impl TryFrom<BTreeMap<TaskType, TaskOffer>> for TaskCatalog {
    type Error = InvalidField;

    fn try_from(offers: BTreeMap<TaskType, TaskOffer>) -> Result<Self, Self::Error> {
        Self::new(offers)
    }
}

impl From<TaskCatalog> for BTreeMap<TaskType, TaskOffer> {
    fn from(catalog: TaskCatalog) -> Self {
        catalog.0
    }
}

/// Whether a worker currently gets new contracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// Probes pass (or fewer than the threshold failed in a row).
    Healthy,
    /// `miss_threshold` probes in a row failed.
    Unhealthy,
}

impl HealthState {
    /// Stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
        }
    }
}

impl FromStr for HealthState {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "healthy" => Ok(Self::Healthy),
            "unhealthy" => Ok(Self::Unhealthy),
            _ => Err(InvalidField::new("health", "expected healthy or unhealthy")),
        }
    }
}

/// Bounds on a worker's concurrent contracts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct MaxParallel(u32);

impl MaxParallel {
    /// Largest accepted value.
    pub const MAX: u32 = 10_000;

    /// The bound.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for MaxParallel {
    type Error = InvalidField;

    fn try_from(value: u32) -> Result<Self, Self::Error> {
        if value == 0 || value > Self::MAX {
            return Err(InvalidField::new(
                "max_parallel",
                format!("must be between 1 and {}", Self::MAX),
            ));
        }
        Ok(Self(value))
    }
}

impl From<MaxParallel> for u32 {
    fn from(value: MaxParallel) -> Self {
        value.0
    }
}

/// A worker's public endpoint: an absolute http(s) URL without credentials, query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct WorkerEndpoint(Url);

impl WorkerEndpoint {
    /// The base URL.
    pub fn url(&self) -> &Url {
        &self.0
    }

    /// `<endpoint>/<path>`, keeping any path prefix the endpoint has.
    pub fn join(&self, path: &str) -> Url {
        let mut url = self.0.clone();
        let base = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base}/{}", path.trim_start_matches('/')));
        url
    }
}

impl FromStr for WorkerEndpoint {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let url = Url::parse(raw)
            .map_err(|e| InvalidField::new("endpoint", format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
            return Err(InvalidField::new(
                "endpoint",
                "must be an http(s) URL with a host",
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(InvalidField::new("endpoint", "must not carry credentials"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(InvalidField::new(
                "endpoint",
                "must not have a query or fragment",
            ));
        }
        Ok(Self(url))
    }
}

impl TryFrom<String> for WorkerEndpoint {
    type Error = InvalidField;

    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<WorkerEndpoint> for String {
    fn from(endpoint: WorkerEndpoint) -> Self {
        endpoint.0.into()
    }
}

impl fmt::Display for WorkerEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

/// The x402 schemes a listing accepts, in preference order: the first is what a proposal that
/// names none gets. Non-empty, no repeats; `["exact"]` when the operator says nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<PaymentScheme>", into = "Vec<PaymentScheme>")]
pub struct PaymentSchemes(Vec<PaymentScheme>);

impl PaymentSchemes {
    /// The schemes, preferred first.
    pub fn as_slice(&self) -> &[PaymentScheme] {
        &self.0
    }

    /// The scheme a proposal gets when it asks for none.
    pub fn default_scheme(&self) -> PaymentScheme {
        self.0.first().copied().unwrap_or(PaymentScheme::Exact)
    }

    /// True when the listing takes `scheme`.
    pub fn accepts(&self, scheme: PaymentScheme) -> bool {
        self.0.contains(&scheme)
    }

    /// The stored spelling: wire names joined by commas, e.g. `exact,auth-capture`.
    pub fn to_stored(&self) -> String {
        self.0
            .iter()
            .map(PaymentScheme::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Parses [`Self::to_stored`].
    pub fn from_stored(raw: &str) -> Result<Self, InvalidField> {
        let schemes = raw
            .split(',')
            .map(|name| {
                name.parse::<PaymentScheme>()
                    .map_err(|e| InvalidField::new("payment_schemes", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::try_from(schemes)
    }
}

impl Default for PaymentSchemes {
    fn default() -> Self {
        Self(vec![PaymentScheme::Exact])
    }
}

impl TryFrom<Vec<PaymentScheme>> for PaymentSchemes {
    type Error = InvalidField;
    fn try_from(schemes: Vec<PaymentScheme>) -> Result<Self, Self::Error> {
        if schemes.is_empty() {
            return Err(InvalidField::new(
                "payment_schemes",
                "must name at least one of \"exact\", \"auth-capture\"",
            ));
        }
        for (i, scheme) in schemes.iter().enumerate() {
            if schemes[..i].contains(scheme) {
                return Err(InvalidField::new(
                    "payment_schemes",
                    format!("`{scheme}` is listed twice"),
                ));
            }
        }
        Ok(Self(schemes))
    }
}

impl From<PaymentSchemes> for Vec<PaymentScheme> {
    fn from(schemes: PaymentSchemes) -> Self {
        schemes.0
    }
}

/// When a listing's `exact` contracts are paid (see [`hiregate_contracts::payment_flow`]).
/// `escrow` is not a listing choice: it is what `auth-capture` contracts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListingPaymentFlow {
    /// Verified before the work, settled after it when the deliverable passed.
    #[default]
    Authorization,
    /// Settled on chain before the worker is called; rejected work stays paid.
    Upfront,
}

impl ListingPaymentFlow {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorization => "authorization",
            Self::Upfront => "upfront",
        }
    }

    /// Checks the flow fits the listing's schemes: upfront settles a fixed price before the
    /// work, which an `upto` price (settled by what was verified after it) and an escrowed
    /// one (locked, captured or voided after it) cannot be.
    pub fn check(self, schemes: &PaymentSchemes) -> Result<(), InvalidField> {
        if self == Self::Upfront && schemes.as_slice() != [PaymentScheme::Exact] {
            return Err(InvalidField::new(
                "payment_flow",
                "\"upfront\" is for listings paid with \"exact\" only (payment_schemes                  [\"exact\"]): an \"upto\" price settles what was verified after the work,                  and \"auth-capture\" holds the money in escrow instead of paying before it",
            ));
        }
        Ok(())
    }
}

impl FromStr for ListingPaymentFlow {
    type Err = InvalidField;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "authorization" => Ok(Self::Authorization),
            "upfront" => Ok(Self::Upfront),
            _ => Err(InvalidField::new(
                "payment_flow",
                "expected \"authorization\" or \"upfront\"",
            )),
        }
    }
}

/// A listing's marketplace fee for escrowed (`auth-capture`) contracts: the share of the price
/// captured to the gateway's treasury instead of the worker. `exact` payments go to the worker
/// in full (they have no fee split). The gateway bounds it with `escrow.max_fee_bps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeePolicy {
    /// Basis points of the price, `0..=10000`.
    pub fee_bps: u16,
}

impl FeePolicy {
    /// Checks the basis points are a share of the price.
    pub fn check(&self) -> Result<(), InvalidField> {
        if self.fee_bps > hiregate_contracts::escrow::MAX_FEE_BPS {
            return Err(InvalidField::new(
                "fee_policy.fee_bps",
                "must be at most 10000 (100 %)",
            ));
        }
        Ok(())
    }
}

/// A worker listing as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerListing {
    /// Listing id.
    pub id: WorkerId,
    /// Owning operator.
    pub operator_id: PrincipalId,
    /// Where the worker is reached.
    pub endpoint: WorkerEndpoint,
    /// How it is talked to.
    pub protocol: Protocol,
    /// Payout address (x402 `payTo`).
    pub pay_to: EvmAddress,
    /// Chain of the payment.
    pub network: Network,
    /// Token contract of the payment.
    pub asset: EvmAddress,
    /// Offered task types.
    pub tasks: TaskCatalog,
    /// Concurrent contracts beyond which execute answers 429.
    pub max_parallel: MaxParallel,
    /// Protocol-specific settings (Superwire's workflow source).
    pub protocol_options: ProtocolOptions,
    /// Accepted x402 schemes, preferred first.
    pub payment_schemes: PaymentSchemes,
    /// Marketplace fee for escrowed contracts; `None` takes `escrow.default_fee_bps`.
    pub fee_policy: Option<FeePolicy>,
    /// When `exact` contracts of this listing are paid: `authorization` (after the work, only
    /// for a passing deliverable; the default) or `upfront` (settled before the worker is
    /// called; a rejected deliverable stays paid). Only an `exact`-only listing may be upfront.
    pub payment_flow: ListingPaymentFlow,
    /// Name, description, input schema and examples shown to seekers.
    pub metadata: super::metadata::ListingMetadata,
    /// Current health.
    pub health: HealthState,
    /// Failed probes in a row.
    pub consecutive_misses: u32,
    /// When the last probe ran.
    pub last_probe_at: Option<DateTime<Utc>>,
    /// Why the last probe failed, when it did.
    pub last_probe_error: Option<String>,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
    /// Set when the operator retired the listing; never cleared.
    pub retired_at: Option<DateTime<Utc>>,
    /// What the worker said about the listing at its last registration or update probe
    /// (Superwire `/validate` diagnostics), for the operator.
    pub probe_diagnostics: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amount_sort_key_orders_numerically() {
        let small: AtomicAmount = "9".parse().unwrap();
        let large: AtomicAmount = "10".parse().unwrap();
        assert!(small.sort_key() < large.sort_key());
        let max = AtomicAmount::from(U256::MAX);
        assert_eq!(max.sort_key().len(), 78);
        assert_eq!(max.to_string().parse::<AtomicAmount>().unwrap(), max);
    }

    #[test]
    fn amounts_refuse_non_canonical_text() {
        for bad in ["", "-1", "1.5", "0x10", "007", " 1", &"9".repeat(79)] {
            assert!(bad.parse::<AtomicAmount>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn addresses_parse_strictly() {
        let addr: EvmAddress = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"
            .parse()
            .unwrap();
        assert_eq!(
            addr.to_string(),
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
        );
        assert!(
            "0x0000000000000000000000000000000000000000"
                .parse::<EvmAddress>()
                .is_err()
        );
        assert!(
            "70997970c51812dc3a010c7d01b50e0d17dc79c8"
                .parse::<EvmAddress>()
                .is_err()
        );
        // Mixed case must be the EIP-55 checksum (last letter's case flipped here).
        assert!(
            "0x70997970C51812dc3A010C7d01b50e0d17dc79c8"
                .parse::<EvmAddress>()
                .is_err()
        );
        assert!(
            "0X70997970c51812dc3a010c7d01b50e0d17dc79c8"
                .parse::<EvmAddress>()
                .is_err()
        );
    }

    #[test]
    fn endpoint_join_keeps_path_prefix() {
        let endpoint: WorkerEndpoint = "https://w.example/agents/a1/".parse().unwrap();
        assert_eq!(
            endpoint.join("/health").as_str(),
            "https://w.example/agents/a1/health"
        );
        assert!(
            "https://user:pw@w.example"
                .parse::<WorkerEndpoint>()
                .is_err()
        );
        assert!("ftp://w.example".parse::<WorkerEndpoint>().is_err());
    }

    #[test]
    fn payment_schemes_are_non_empty_without_repeats() {
        let both: PaymentSchemes =
            serde_json::from_value(serde_json::json!(["auth-capture", "exact"])).unwrap();
        assert_eq!(both.default_scheme(), PaymentScheme::AuthCapture);
        assert!(both.accepts(PaymentScheme::Exact));
        assert_eq!(both.to_stored(), "auth-capture,exact");
        assert_eq!(
            PaymentSchemes::from_stored("auth-capture,exact").unwrap(),
            both
        );
        assert_eq!(
            PaymentSchemes::default().default_scheme(),
            PaymentScheme::Exact
        );
        for bad in [
            serde_json::json!([]),
            serde_json::json!(["exact", "exact"]),
            serde_json::json!(["batch-settlement"]),
        ] {
            assert!(
                serde_json::from_value::<PaymentSchemes>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let metered: PaymentSchemes = serde_json::from_value(serde_json::json!(["upto"])).unwrap();
        assert_eq!(metered.default_scheme(), PaymentScheme::Upto);
        assert!(FeePolicy { fee_bps: 10_001 }.check().is_err());
        assert!(FeePolicy { fee_bps: 250 }.check().is_ok());
    }

    #[test]
    fn output_schema_must_compile() {
        assert!(OutputSchema::parse(serde_json::json!({"type": "object"})).is_ok());
        assert!(OutputSchema::parse(serde_json::json!({"type": 12})).is_err());
        assert!(OutputSchema::parse(serde_json::json!("object")).is_err());
    }
}

/// Largest Superwire workflow source a listing holds, base64 characters.
pub const MAX_WORKFLOW_SOURCE_BASE64: usize = 512 * 1024;

/// A Superwire `.wire` workflow source, base64 as the executor API takes it
/// (`workflow_source_base64`). Valid by construction: non-empty, bounded, decodable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct WorkflowSource(String);

impl WorkflowSource {
    /// The base64 text sent to the executor.
    pub fn as_base64(&self) -> &str {
        &self.0
    }

    /// `sha256:` of the decoded source, as pinned in contract terms.
    pub fn digest(&self) -> hiregate_contracts::canonical::Digest {
        use base64::Engine as _;
        // Decodable by construction; an undecodable text would hash as empty and never
        // match a pinned digest.
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.0)
            .unwrap_or_default();
        hiregate_contracts::canonical::Digest::of_bytes(&bytes)
    }
}

impl TryFrom<String> for WorkflowSource {
    type Error = InvalidField;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        use base64::Engine as _;
        let field = "protocol_options.workflow_source_base64";
        if text.is_empty() || text.len() > MAX_WORKFLOW_SOURCE_BASE64 {
            return Err(InvalidField::new(
                field,
                format!("must be 1..={MAX_WORKFLOW_SOURCE_BASE64} base64 characters"),
            ));
        }
        base64::engine::general_purpose::STANDARD
            .decode(&text)
            .map_err(|_| InvalidField::new(field, "is not standard base64"))?;
        Ok(Self(text))
    }
}

impl From<WorkflowSource> for String {
    fn from(source: WorkflowSource) -> Self {
        source.0
    }
}

/// Protocol-specific settings of a listing (`protocol_options` in the API). Only Superwire
/// has any: the workflow every hire of the listing runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProtocolOptions {
    /// Superwire: the workflow source sent with every `/execute` and probed with `/validate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub workflow_source_base64: Option<WorkflowSource>,
}
