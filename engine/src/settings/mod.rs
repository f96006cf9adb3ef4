//! The gateway's settings: the sections of `config.default.toml` as types, and the rules serde
//! cannot express ([`Settings::validate`]). The binary layers the sources (the compiled-in
//! defaults, an optional file, `HIREGATE_*` variables) and hands the result to
//! [`Settings::from_figment`].
//!
//! Values are parsed into the types they mean as they are read: networks into [`Network`],
//! addresses into [`Address`], private keys into [`PrivateKey`], URLs and socket addresses
//! into theirs; durations are read through accessors (`request_timeout()`…). A value that does
//! not parse is a [`ConfigError::Load`] naming its key; a value that parses but breaks a rule
//! (one that needs other keys, or a bound) is a [`ConfigError::Invalid`] naming its key.
//! Secrets are held in [`SecretString`], [`PrivateKey`] (or
//! [`DatabaseUrl`](hiregate_store::settings::DatabaseUrl)), so a `Debug` of the settings never
//! prints them.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use alloy::primitives::Address;
use figment::{
    Figment,
    providers::{Format, Toml},
};
pub use hiregate_contracts::money::Network;
pub use hiregate_payments::PrivateKey;
use hiregate_payments::SyncSendMode;
use hiregate_store::settings::DatabaseSettings;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};
use url::Url;

mod validate;

/// The commented defaults, compiled in; also the configuration reference.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../../config.default.toml");

/// How an `exact` payment moves a token: x402's `extra.assetTransferMethod`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransferMethod {
    /// EIP-3009 `transferWithAuthorization` (USDC and tokens like it).
    #[default]
    Eip3009,
    /// Permit2's `permitWitnessTransferFrom` through the x402 exact proxy: any ERC-20 whose
    /// holder approved Permit2 once (or signs an EIP-2612 permit the settlement submits).
    Permit2,
}

impl TransferMethod {
    /// The wire name (`eip3009`, `permit2`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Eip3009 => "eip3009",
            Self::Permit2 => "permit2",
        }
    }
}

/// Shared, cheap-to-clone handle on validated settings.
pub type Config = Arc<Settings>;

/// Configuration that could not be loaded or is invalid. Each variant names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A layer could not be read or a value has the wrong type (figment names the key and the
    /// layer it came from).
    #[error("invalid configuration: {}", describe_figment_error(.0))]
    Load(Box<figment::Error>),
    /// The file named with `--config`/`HIREGATE_CONFIG` does not exist.
    #[error("configuration file `{}` does not exist", path.display())]
    MissingFile {
        /// The path as given.
        path: PathBuf,
    },
    /// A value parsed but breaks a rule.
    #[error("invalid configuration key `{key}`: {reason}")]
    Invalid {
        /// Dotted key path, e.g. `database.max_connections`.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Each underlying error as "key `a.b` (from <layer>): <problem>", with the key spelled as in
/// the TOML files whatever layer the bad value came from.
fn describe_figment_error(error: &figment::Error) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let layer = e
                .metadata
                .as_ref()
                .map(|m| format!(" (from {})", m.name))
                .unwrap_or_default();
            if key.is_empty() {
                format!("{}{layer}", e.kind)
            } else {
                format!("key `{key}`{layer}: {}", e.kind)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// Not `#[from]`: that would also make the figment error the `source`, and printing the chain
// would repeat the message (figment's error is already part of our `Display`).
impl From<figment::Error> for ConfigError {
    fn from(error: figment::Error) -> Self {
        Self::Load(Box::new(error))
    }
}

impl ConfigError {
    fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// All gateway settings. Field docs live in `config.default.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// HTTP server.
    pub http: HttpSettings,
    /// Database connection.
    pub database: DatabaseSettings,
    /// Logging.
    pub log: LogSettings,
    /// x402 facilitator.
    pub facilitator: FacilitatorSettings,
    /// Chains for the embedded facilitator, keyed by a free-form name.
    #[serde(default)]
    pub chains: BTreeMap<String, ChainSettings>,
    /// Gateway signing key.
    pub signing_key: SigningKeySettings,
    /// Admin credentials.
    pub admin: AdminSettings,
    /// Outbound HTTP (workers, poll URLs, webhooks, files).
    pub outbound: OutboundSettings,
    /// Worker health checks.
    pub health: HealthSettings,
    /// Contract defaults and bounds.
    pub contracts: ContractSettings,
    /// Escrowed (`auth-capture`) contracts: treasury, fees, deadlines.
    pub escrow: EscrowSettings,
    /// Seeker webhook delivery.
    pub webhooks: WebhookSettings,
    /// Contract event streams (SSE).
    pub events: EventStreamSettings,
    /// The MCP server's paying wallet and spending limits (`/mcp`, `hiregate mcp`).
    #[serde(default)]
    pub mcp: McpSettings,
}

/// `[http]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Address the API binds to.
    pub listen_address: SocketAddr,
    /// Public URL of this gateway; `None` derives it from the bound address.
    #[serde(deserialize_with = "empty_as_none")]
    pub public_base_url: Option<Url>,
    /// Per-request time limit, seconds.
    pub request_timeout_s: u64,
    /// Largest request body, bytes.
    pub body_limit_bytes: usize,
    /// CORS origins; `["*"]` for any.
    pub cors_allowed_origins: Vec<String>,
    /// How long a key found valid is trusted without asking the store again, ms.
    pub api_key_cache_ttl_ms: u64,
}

impl HttpSettings {
    /// Per-request time limit.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_s)
    }

    /// How long a key found valid is trusted without asking the store again.
    pub fn api_key_cache_ttl(&self) -> Duration {
        Duration::from_millis(self.api_key_cache_ttl_ms)
    }
}

/// `[log]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    /// Default level for hiregate and tower_http.
    pub level: LogLevel,
    /// Output format.
    pub format: LogFormat,
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// The level as an env-filter directive.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Trace => "trace",
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per event.
    Json,
}

/// `[facilitator]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilitatorSettings {
    /// Embedded or external facilitator.
    pub mode: FacilitatorMode,
    /// External facilitator base URL (`mode = "http"`).
    #[serde(deserialize_with = "empty_as_none")]
    pub url: Option<Url>,
    /// Name of the auth header sent to the external facilitator.
    pub auth_header_name: String,
    /// Value of that header; `None` sends no header.
    #[serde(deserialize_with = "empty_secret_as_none")]
    pub auth_header_value: Option<SecretString>,
    /// `/verify` time limit, ms.
    pub verify_timeout_ms: u64,
    /// `/settle` time limit, ms.
    pub settle_timeout_ms: u64,
    /// Where `hiregate facilitator` listens.
    pub listen_address: SocketAddr,
}

impl FacilitatorSettings {
    /// `/verify` time limit.
    pub fn verify_timeout(&self) -> Duration {
        Duration::from_millis(self.verify_timeout_ms)
    }

    /// `/settle` time limit.
    pub fn settle_timeout(&self) -> Duration {
        Duration::from_millis(self.settle_timeout_ms)
    }
}

/// Where payments are verified and settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FacilitatorMode {
    /// In-process, on the configured chains.
    Embedded,
    /// An external facilitator over HTTP.
    Http,
}

/// One `[chains.<name>]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainSettings {
    /// CAIP-2 network id, `eip155:<chain id>` (no other namespace parses).
    #[serde(deserialize_with = "evm_network")]
    pub network: Network,
    /// JSON-RPC endpoint.
    pub rpc_url: Url,
    /// Hex private key of the settlement relayer.
    #[serde(deserialize_with = "empty_key_as_none", default)]
    pub relayer_private_key: Option<PrivateKey>,
    /// Tokens known without asking the chain.
    #[serde(default)]
    pub tokens: Vec<TokenSettings>,
    /// How many blocks back the gateway (and the embedded facilitator) search for the
    /// transaction that used an authorization; unset searches from genesis, which suits a
    /// devnet but not most hosted RPCs of a real chain.
    #[serde(default)]
    pub settlement_lookback_blocks: Option<u64>,
    /// The embedded facilitator (and the escrow operator) send with `eth_sendRawTransactionSync`
    /// (EIP-7966) and take the receipt from the answer instead of polling for it: `true`,
    /// `false`, or `"auto"` (the default: when the node has the method). A sync send holds the
    /// relayer's next nonce until it is mined, at most a quarter second: a chain that does not
    /// mine at once is noticed and gets plain sends.
    #[serde(default)]
    pub sync_send: SyncSendMode,
    /// Hex private key of the gateway's escrow operator on this chain: the `captureAuthorizer`
    /// of `auth-capture` offers, which sends capture, void and refund. Empty: this chain offers
    /// `exact` only.
    #[serde(deserialize_with = "empty_key_as_none", default)]
    pub operator_private_key: Option<PrivateKey>,
    /// base/commerce-payments `AuthCaptureEscrow` on this chain.
    #[serde(default = "canonical_auth_capture_escrow")]
    pub auth_capture_escrow: Address,
    /// Its ERC-3009 token collector (the payer's `receiveWithAuthorization` names it).
    #[serde(default = "canonical_erc3009_token_collector")]
    pub erc3009_token_collector: Address,
    /// Its operator refund collector (refunds are paid from the operator's wallet through it).
    #[serde(default = "canonical_operator_refund_collector")]
    pub operator_refund_collector: Address,
}

/// `AuthCaptureEscrow` v1.0 of base/commerce-payments, the same address on every chain it is on.
pub const CANONICAL_AUTH_CAPTURE_ESCROW: Address =
    alloy::primitives::address!("0xBdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff");
/// The v1.0 ERC-3009 token collector.
pub const CANONICAL_ERC3009_TOKEN_COLLECTOR: Address =
    alloy::primitives::address!("0x0E3dF9510de65469C4518D7843919c0b8C7A7757");
/// The v1.0 operator refund collector.
pub const CANONICAL_OPERATOR_REFUND_COLLECTOR: Address =
    alloy::primitives::address!("0x934907bffd0901b6A21e398B9C53A4A38F02fa5d");

const fn canonical_auth_capture_escrow() -> Address {
    CANONICAL_AUTH_CAPTURE_ESCROW
}
const fn canonical_erc3009_token_collector() -> Address {
    CANONICAL_ERC3009_TOKEN_COLLECTOR
}
const fn canonical_operator_refund_collector() -> Address {
    CANONICAL_OPERATOR_REFUND_COLLECTOR
}

impl ChainSettings {
    /// The escrow operator's address, when [`Self::operator_private_key`] is set.
    pub fn operator_address(&self) -> Option<Address> {
        self.operator_private_key.as_ref().map(PrivateKey::address)
    }

    /// The EVM chain id of [`Self::network`] (always `Some`: the settings parse no other
    /// network).
    pub fn chain_id(&self) -> Option<u64> {
        self.network.chain_id()
    }
}

/// One entry of `chains.<name>.tokens`: a token, its metadata and how `exact` payments move it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    /// Token contract address.
    #[serde(deserialize_with = "prefixed_address")]
    pub address: Address,
    /// EIP-712 domain name (x402 `extra.name`).
    pub name: String,
    /// EIP-712 domain version (x402 `extra.version`); may be empty for a `permit2` token
    /// without EIP-2612.
    #[serde(default)]
    pub version: String,
    /// `"eip3009"` (the default) or `"permit2"`: x402 `extra.assetTransferMethod` of its
    /// `exact` offers. Permit2 works for any ERC-20; an EIP-3009 token may be listed as
    /// `permit2` too.
    #[serde(default)]
    pub transfer_method: TransferMethod,
    /// ERC-20 decimals.
    pub decimals: u8,
    /// ERC-20 symbol (HIRE `X-Payment-Currency`).
    pub symbol: String,
}

/// `[signing_key]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningKeySettings {
    /// Key file; `None` means generate an ephemeral key at start.
    #[serde(deserialize_with = "empty_path_as_none")]
    pub path: Option<PathBuf>,
    /// Key files of earlier signing keys, newest first. They sign nothing any more, but their
    /// public halves stay in the JWKS so the contract tokens and receipts they signed keep
    /// verifying; remove a file from the list to retire its key.
    #[serde(default)]
    pub previous_paths: Vec<PathBuf>,
}

/// `[admin]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// Admin API key; `None` disables admin endpoints.
    #[serde(deserialize_with = "empty_secret_as_none")]
    pub api_key: Option<SecretString>,
}

/// `[outbound]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboundSettings {
    /// TCP/TLS connect time limit, ms.
    pub connect_timeout_ms: u64,
    /// Whole-request time limit, ms.
    pub request_timeout_ms: u64,
    /// Largest response body read, bytes.
    pub max_response_bytes: usize,
    /// Allow private/loopback/link-local targets (dev and tests only).
    pub allow_private_targets: bool,
    /// Refuse plain `http` for worker endpoints, poll URLs, deliverable files and webhooks
    /// (HIRE: all communication over HTTPS). Off only for local development and tests.
    pub require_https: bool,
    /// Largest HIRE `stream` output read, bytes over all its connections.
    pub stream_max_bytes: usize,
    /// Longest a HIRE `stream` output is read, ms (the contract's SLA may end it sooner).
    pub stream_max_duration_ms: u64,
}

impl OutboundSettings {
    /// Longest a stream output is read.
    pub fn stream_max_duration(&self) -> Duration {
        Duration::from_millis(self.stream_max_duration_ms)
    }

    /// Connect time limit.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// Whole-request time limit.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

/// `[health]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSettings {
    /// Probe period per worker, ms.
    pub interval_ms: u64,
    /// Consecutive misses before a worker is unhealthy.
    pub miss_threshold: u32,
    /// One probe's time limit, ms.
    pub probe_timeout_ms: u64,
}

impl HealthSettings {
    /// Probe period per worker.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }

    /// One probe's time limit.
    pub fn probe_timeout(&self) -> Duration {
        Duration::from_millis(self.probe_timeout_ms)
    }
}

/// `[contracts]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractSettings {
    /// Upper bound of an x402 authorization window, seconds.
    pub max_authorization_window_s: u64,
    /// Acceptance window when the contract sets none, seconds.
    pub default_acceptance_window_s: u64,
    /// Lifetime of an unpaid offer, seconds.
    pub offer_ttl_s: u64,
    /// Authorization time reserved for verification, seconds.
    pub verification_budget_s: u64,
    /// Authorization time reserved for settlement and clock skew, seconds.
    pub settlement_margin_s: u64,
    /// Wait of a duplicate execute for the one in flight, ms.
    pub duplicate_wait_ms: u64,
    /// Paid contracts that may wait for a free slot of one worker beyond its `max_parallel`;
    /// past it execute answers 429 before anyone pays. 0: no queue.
    pub worker_queue_depth: u32,
    /// Longest a paid execute holds its request for a slot of a full worker, ms, when the
    /// expected wait fits the contract's SLA; longer waits answer 202 `queued`. 0: never held.
    pub queue_hold_max_ms: u64,
    /// Period of the settlement sweep, ms.
    pub sweep_interval_ms: u64,
    /// First poll of pending work, ms after the worker answered `pending`; the delay doubles
    /// per poll up to `poll_max_interval_ms`.
    pub poll_interval_ms: u64,
    /// Longest delay between two polls of pending work, ms.
    pub poll_max_interval_ms: u64,
    /// How far a worker callback's `webhook-timestamp` may be from the gateway's clock, s.
    pub callback_tolerance_s: u64,
    /// Period of the background job runner (poll jobs, authorization deadlines), ms.
    pub jobs_interval_ms: u64,
    /// Lease of a claimed job, ms: another instance takes the job over after a crash once
    /// the lease ran out.
    pub job_lease_ms: u64,
    /// Slack after a working state's time bound before another instance takes the contract
    /// over, ms.
    pub recovery_grace_ms: u64,
}

impl ContractSettings {
    /// Wait of a duplicate execute for the one in flight.
    pub fn duplicate_wait(&self) -> Duration {
        Duration::from_millis(self.duplicate_wait_ms)
    }

    /// Period of the settlement sweep.
    pub fn sweep_interval(&self) -> Duration {
        Duration::from_millis(self.sweep_interval_ms)
    }

    /// Period of the background job runner.
    pub fn jobs_interval(&self) -> Duration {
        Duration::from_millis(self.jobs_interval_ms)
    }

    /// Lease of a claimed job.
    pub fn job_lease(&self) -> Duration {
        Duration::from_millis(self.job_lease_ms)
    }

    /// Slack after a working state's time bound before a takeover.
    pub fn recovery_grace(&self) -> Duration {
        Duration::from_millis(self.recovery_grace_ms)
    }

    /// Authorization time reserved for verification.
    pub fn verification_budget(&self) -> Duration {
        Duration::from_secs(self.verification_budget_s)
    }

    /// Longest a paid execute holds its request for a slot of a full worker.
    pub fn queue_hold_max(&self) -> Duration {
        Duration::from_millis(self.queue_hold_max_ms)
    }

    /// How far a worker callback's `webhook-timestamp` may be from the gateway's clock.
    pub fn callback_tolerance(&self) -> Duration {
        Duration::from_secs(self.callback_tolerance_s)
    }
}

/// `[escrow]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EscrowSettings {
    /// Fee recipient of every escrowed contract (x402 `feeRecipient`); `None` when empty.
    #[serde(deserialize_with = "empty_address_as_none")]
    pub treasury: Option<Address>,
    /// Fee of listings without a fee policy, basis points.
    pub default_fee_bps: u16,
    /// Largest fee a listing may set, basis points.
    pub max_fee_bps: u16,
    /// Longest acceptance window of an escrowed contract, seconds.
    pub max_acceptance_window_s: u64,
    /// Longest time an escrowed contract may keep a worker pending (per attempt), seconds.
    pub max_pending_s: u64,
    /// Refunds stay possible this long after the capture deadline, seconds.
    pub refund_window_s: u64,
    /// x402 `maxTimeoutSeconds` of an `auth-capture` offer: from signing until the
    /// authorization is mined, seconds.
    pub payment_window_s: u64,
    /// Reserve of the capture deadline after the acceptance window, seconds: the capture
    /// transaction, its retries and clock skew (verification has its own budget).
    pub capture_margin_s: u64,
}

/// `[webhooks]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    /// Period of the delivery loop when it has nothing to do, ms.
    pub poll_interval_ms: u64,
    /// Deliveries one instance claims (and sends concurrently) at a time.
    pub batch_size: u32,
    /// Lease on a claimed delivery, ms; longer than `request_timeout_ms`.
    pub lease_ms: u64,
    /// Time limit of one delivery request, ms.
    pub request_timeout_ms: u64,
    /// Tries before a delivery becomes a dead letter.
    pub max_attempts: u32,
    /// Delay before the first retry, ms; doubles per try.
    pub backoff_initial_ms: u64,
    /// Largest delay between tries, ms.
    pub backoff_max_ms: u64,
    /// Largest `Retry-After` honoured, seconds.
    pub retry_after_max_s: u64,
}

impl WebhookSettings {
    /// Period of the idle delivery loop.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }

    /// Lease on a claimed delivery.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// Time limit of one delivery request.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Largest `Retry-After` honoured.
    pub fn retry_after_max(&self) -> Duration {
        Duration::from_secs(self.retry_after_max_s)
    }
}

/// `[mcp]`: the wallet the MCP `hire` tool pays from, and the limits the gateway enforces
/// before it signs anything. Without a wallet `hire` is refused; the other tools still work.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    /// Hex private key of the paying wallet (never logged).
    #[serde(deserialize_with = "empty_key_as_none", default)]
    pub wallet_private_key: Option<PrivateKey>,
    /// The most one hire may cost, atomic units of the contract's asset (default 5 whole units of
    /// a 6-decimals token, from `config.default.toml`).
    #[serde(default)]
    pub max_per_hire: u64,
    /// The most the wallet may pay over any 24 hours, atomic units (default 50 whole units).
    #[serde(default)]
    pub max_per_day: u64,
    /// The most `/mcp` sessions open at once; a new one past it is refused with 503.
    #[serde(default = "default_mcp_max_sessions")]
    pub max_sessions: usize,
}

/// `[mcp] max_sessions` when a configuration leaves it out (`config.default.toml` sets it).
fn default_mcp_max_sessions() -> usize {
    1_000
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            wallet_private_key: None,
            max_per_hire: 0,
            max_per_day: 0,
            max_sessions: default_mcp_max_sessions(),
        }
    }
}

/// `[events]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventStreamSettings {
    /// Period of SSE heartbeat comments, ms.
    pub heartbeat_interval_ms: u64,
    /// Period of the database check that brings events written by other instances, ms.
    pub poll_interval_ms: u64,
    /// Events read from the database per query when replaying.
    pub replay_batch: u32,
}

impl EventStreamSettings {
    /// Period of SSE heartbeat comments.
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms)
    }

    /// Period of the database check.
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }
}

impl Settings {
    /// Extract from an assembled figment and validate. Tests assemble their own layers here
    /// instead of touching the process environment.
    pub fn from_figment(figment: &Figment) -> Result<Self, ConfigError> {
        let settings: Self = figment.extract()?;
        settings.validate()?;
        Ok(settings)
    }

    /// The embedded defaults merged with a TOML snippet (no file, no environment), validated.
    pub fn from_defaults_and(overrides_toml: &str) -> Result<Self, ConfigError> {
        Self::from_figment(
            &Figment::from(Toml::string(DEFAULT_CONFIG_TOML)).merge(Toml::string(overrides_toml)),
        )
    }
}

fn empty_as_none<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Url>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    if raw.trim().is_empty() {
        return Ok(None);
    }
    Url::parse(raw.trim())
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn empty_address_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Address>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    if raw.trim().is_empty() {
        return Ok(None);
    }
    raw.trim()
        .parse::<Address>()
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// `chains.<name>.network`: an EVM chain, refused in the words `check-config` always used.
fn evm_network<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Network, D::Error> {
    let raw = String::deserialize(deserializer)?;
    raw.parse()
        .map_err(|_| serde::de::Error::custom(format!("`{raw}` is not a CAIP-2 eip155:<chain id>")))
}

/// A token address: `0x` and 40 hex digits (any case: configured tokens are not checksummed).
fn prefixed_address<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Address, D::Error> {
    let raw = String::deserialize(deserializer)?;
    raw.strip_prefix("0x")
        .filter(|digits| digits.len() == 40)
        .and_then(|_| raw.parse().ok())
        .ok_or_else(|| serde::de::Error::custom("must be a 0x-prefixed 20-byte hex address"))
}

/// A private key, parsed once here; empty means none. The error never repeats the value.
fn empty_key_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<PrivateKey>, D::Error> {
    let raw = SecretString::from(String::deserialize(deserializer)?);
    let raw = raw.expose_secret();
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse().map(Some).map_err(serde::de::Error::custom)
}

fn empty_secret_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<SecretString>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    Ok((!raw.is_empty()).then(|| SecretString::from(raw)))
}

fn empty_path_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<PathBuf>, D::Error> {
    let raw = String::deserialize(deserializer)?;
    Ok((!raw.trim().is_empty()).then(|| PathBuf::from(raw.trim())))
}
