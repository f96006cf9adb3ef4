//! The gateway's settings: the sections of `config.default.toml` as types, and the rules serde
//! cannot express ([`Settings::validate`]). The binary layers the sources (the compiled-in
//! defaults, an optional file, `HIREGATE_*` variables) and hands the result to
//! [`Settings::from_figment`].
//!
//! Every error names the offending key (figment's own errors carry the key path; ours use
//! [`ConfigError::Invalid`]). Secrets are held in [`SecretString`] (or [`DatabaseUrl`](hiregate_store::settings::DatabaseUrl)) so a
//! `Debug` of the settings never prints them.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use alloy::primitives::Address;
use figment::{
    Figment,
    providers::{Format, Toml},
};
use hiregate_payments::SyncSendMode;
use hiregate_store::settings::DatabaseSettings;
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer};
use url::Url;

/// The commented defaults, compiled in; also the configuration reference.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config.default.toml");

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
    /// CAIP-2 network id, `eip155:<chain id>`.
    pub network: String,
    /// JSON-RPC endpoint.
    pub rpc_url: Url,
    /// Hex private key of the settlement relayer.
    #[serde(deserialize_with = "empty_secret_as_none", default)]
    pub relayer_private_key: Option<SecretString>,
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
    #[serde(deserialize_with = "empty_secret_as_none", default)]
    pub operator_private_key: Option<SecretString>,
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
    /// The escrow operator's address, when [`Self::operator_private_key`] is set (validated at
    /// load).
    pub fn operator_address(&self) -> Option<Address> {
        let key = self.operator_private_key.as_ref()?;
        key.expose_secret()
            .parse::<alloy::signers::local::PrivateKeySigner>()
            .ok()
            .map(|signer| signer.address())
    }

    /// The EVM chain id of [`Self::network`] (validated at load).
    pub fn chain_id(&self) -> Option<u64> {
        self.network
            .strip_prefix("eip155:")
            .and_then(|id| id.parse::<u64>().ok())
            .filter(|id| *id > 0)
    }
}

/// One entry of `chains.<name>.tokens`: a token, its metadata and how `exact` payments move it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    /// Token contract address.
    pub address: String,
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
    pub transfer_method: crate::assets::TransferMethod,
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
}

/// `[mcp]`: the wallet the MCP `hire` tool pays from, and the limits the gateway enforces
/// before it signs anything. Without a wallet `hire` is refused; the other tools still work.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    /// Hex private key of the paying wallet (never logged).
    #[serde(deserialize_with = "empty_secret_as_none", default)]
    pub wallet_private_key: Option<SecretString>,
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

    /// Rules serde cannot express. The first broken rule is reported, by key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_http()?;
        self.validate_database()?;
        self.validate_facilitator()?;
        self.validate_chains()?;
        self.validate_rest()
    }

    fn validate_http(&self) -> Result<(), ConfigError> {
        let http = &self.http;
        if let Some(url) = &http.public_base_url {
            check_http_url("http.public_base_url", url)?;
            if url.query().is_some() || url.fragment().is_some() {
                return Err(ConfigError::invalid(
                    "http.public_base_url",
                    "must not have a query or fragment",
                ));
            }
        }
        at_least("http.request_timeout_s", http.request_timeout_s, 1)?;
        at_least("http.body_limit_bytes", http.body_limit_bytes as u64, 1024)?;
        let origins = &http.cors_allowed_origins;
        if origins.iter().any(|o| o == "*") && origins.len() > 1 {
            return Err(ConfigError::invalid(
                "http.cors_allowed_origins",
                "\"*\" must be the only entry when present",
            ));
        }
        for origin in origins.iter().filter(|o| *o != "*") {
            let parsed = Url::parse(origin).map_err(|e| {
                ConfigError::invalid(
                    "http.cors_allowed_origins",
                    format!("`{origin}` is not an origin: {e}"),
                )
            })?;
            if parsed.origin().ascii_serialization() != origin.trim_end_matches('/') {
                return Err(ConfigError::invalid(
                    "http.cors_allowed_origins",
                    format!("`{origin}` must be scheme://host[:port] with no path"),
                ));
            }
        }
        Ok(())
    }

    fn validate_database(&self) -> Result<(), ConfigError> {
        let db = &self.database;
        at_least("database.max_connections", u64::from(db.max_connections), 1)?;
        if db.min_connections > db.max_connections {
            return Err(ConfigError::invalid(
                "database.min_connections",
                "must not exceed database.max_connections",
            ));
        }
        at_least("database.acquire_timeout_s", db.acquire_timeout_s, 1)
    }

    fn validate_facilitator(&self) -> Result<(), ConfigError> {
        let f = &self.facilitator;
        at_least("facilitator.verify_timeout_ms", f.verify_timeout_ms, 1)?;
        at_least("facilitator.settle_timeout_ms", f.settle_timeout_ms, 1)?;
        if f.auth_header_value.is_some() {
            reqwest::header::HeaderName::from_bytes(f.auth_header_name.as_bytes()).map_err(
                |_| ConfigError::invalid("facilitator.auth_header_name", "not a valid header name"),
            )?;
            let value = f.auth_header_value.as_ref().map(|v| v.expose_secret());
            if value.is_some_and(|v| reqwest::header::HeaderValue::from_str(v).is_err()) {
                // The value itself stays out of the message: it is a secret.
                return Err(ConfigError::invalid(
                    "facilitator.auth_header_value",
                    "not a valid header value",
                ));
            }
        }
        match (f.mode, &f.url) {
            (FacilitatorMode::Http, None) => Err(ConfigError::invalid(
                "facilitator.url",
                "required when facilitator.mode = \"http\"",
            )),
            (FacilitatorMode::Http, Some(url)) => check_http_url("facilitator.url", url),
            (FacilitatorMode::Embedded, _) => Ok(()),
        }
    }

    fn validate_chains(&self) -> Result<(), ConfigError> {
        let mut networks = BTreeSet::new();
        for (name, chain) in &self.chains {
            let key = |field: &str| format!("chains.{name}.{field}");
            let chain_id = chain
                .network
                .strip_prefix("eip155:")
                .and_then(|id| id.parse::<u64>().ok())
                .filter(|id| *id > 0);
            if chain_id.is_none() {
                return Err(ConfigError::invalid(
                    key("network"),
                    format!("`{}` is not a CAIP-2 eip155:<chain id>", chain.network),
                ));
            }
            if !networks.insert(chain.network.as_str()) {
                return Err(ConfigError::invalid(
                    key("network"),
                    format!("`{}` is configured twice", chain.network),
                ));
            }
            // The facilitator and the token reader speak JSON-RPC over HTTP.
            if !matches!(chain.rpc_url.scheme(), "http" | "https") {
                return Err(ConfigError::invalid(
                    key("rpc_url"),
                    "scheme must be http or https",
                ));
            }
            let mut seen = BTreeSet::new();
            for (index, token) in chain.tokens.iter().enumerate() {
                let field = |f: &str| format!("chains.{name}.tokens[{index}].{f}");
                let well_formed = token.address.len() == 42
                    && token.address.starts_with("0x")
                    && token.address[2..].bytes().all(|b| b.is_ascii_hexdigit());
                if !well_formed {
                    return Err(ConfigError::invalid(
                        field("address"),
                        "must be a 0x-prefixed 20-byte hex address",
                    ));
                }
                if !seen.insert(token.address.to_ascii_lowercase()) {
                    return Err(ConfigError::invalid(field("address"), "listed twice"));
                }
                let needs_version = token.transfer_method == crate::assets::TransferMethod::Eip3009;
                if token.name.is_empty()
                    || (needs_version && token.version.is_empty())
                    || token.symbol.is_empty()
                {
                    return Err(ConfigError::invalid(
                        field("name"),
                        "name, version and symbol must not be empty (version may be for a \
                         permit2 token)",
                    ));
                }
                if token.decimals > 77 {
                    return Err(ConfigError::invalid(field("decimals"), "at most 77"));
                }
            }
            match &chain.relayer_private_key {
                None if self.facilitator.mode == FacilitatorMode::Embedded => {
                    return Err(ConfigError::invalid(
                        key("relayer_private_key"),
                        "required when facilitator.mode = \"embedded\"",
                    ));
                }
                Some(secret) if !is_hex_private_key(secret.expose_secret()) => {
                    return Err(ConfigError::invalid(
                        key("relayer_private_key"),
                        "must be 32 bytes of hex (64 hex digits, optional 0x)",
                    ));
                }
                _ => {}
            }
            if let Some(secret) = &chain.operator_private_key {
                if !is_hex_private_key(secret.expose_secret()) {
                    return Err(ConfigError::invalid(
                        key("operator_private_key"),
                        "must be 32 bytes of hex (64 hex digits, optional 0x)",
                    ));
                }
                if self.escrow.treasury.is_none() {
                    return Err(ConfigError::invalid(
                        "escrow.treasury",
                        format!(
                            "required when chains.{name}.operator_private_key is set: escrowed \
                             contracts name it as their fee recipient"
                        ),
                    ));
                }
            }
            for (field, address) in [
                ("auth_capture_escrow", chain.auth_capture_escrow),
                ("erc3009_token_collector", chain.erc3009_token_collector),
                ("operator_refund_collector", chain.operator_refund_collector),
            ] {
                if address.is_zero() {
                    return Err(ConfigError::invalid(
                        key(field),
                        "must not be the zero address",
                    ));
                }
            }
        }
        self.validate_escrow()
    }

    fn validate_escrow(&self) -> Result<(), ConfigError> {
        let escrow = &self.escrow;
        if escrow.treasury.is_some_and(|t| t.is_zero()) {
            return Err(ConfigError::invalid(
                "escrow.treasury",
                "must not be the zero address (leave it empty for no escrow)",
            ));
        }
        if escrow.max_fee_bps > hiregate_contracts::escrow::MAX_FEE_BPS {
            return Err(ConfigError::invalid("escrow.max_fee_bps", "at most 10000"));
        }
        if escrow.default_fee_bps > escrow.max_fee_bps {
            return Err(ConfigError::invalid(
                "escrow.default_fee_bps",
                "must not exceed escrow.max_fee_bps",
            ));
        }
        // The seed's long-running bound: HIRE polls pending work for up to 24 hours.
        if escrow.max_pending_s > hiregate_contracts::terms::Sla::MAX_POLL_WINDOW_S {
            return Err(ConfigError::invalid(
                "escrow.max_pending_s",
                format!(
                    "at most {} (24 h)",
                    hiregate_contracts::terms::Sla::MAX_POLL_WINDOW_S
                ),
            ));
        }
        if escrow.max_acceptance_window_s
            > hiregate_contracts::terms::TermsLimits::default().max_acceptance_window_s
        {
            return Err(ConfigError::invalid(
                "escrow.max_acceptance_window_s",
                "at most 30 days",
            ));
        }
        at_least("escrow.payment_window_s", escrow.payment_window_s, 30)?;
        at_least("escrow.capture_margin_s", escrow.capture_margin_s, 60)?;
        // The deadline sweep acts `settlement_margin_s` before an escrowed payment's capture
        // deadline; a smaller capture margin would let it capture inside the seeker's window.
        if escrow.capture_margin_s <= self.contracts.settlement_margin_s {
            return Err(ConfigError::invalid(
                "escrow.capture_margin_s",
                "must exceed contracts.settlement_margin_s, or the deadline sweep would capture \
                 before an escrowed contract's acceptance window ends",
            ));
        }
        Ok(())
    }

    /// The longest a settlement may take when the instance running it dies at the worst
    /// moment: its `/settle` runs out its timeout, the contract turns stale after the same
    /// timeout plus the recovery grace, the next job round (one interval later) takes it over,
    /// asks the chain and calls `/settle` once more, which may take the timeout again.
    pub fn worst_case_settlement_recovery(&self) -> Duration {
        let settle = Duration::from_millis(self.facilitator.settle_timeout_ms);
        settle * 2 + self.contracts.recovery_grace() + self.contracts.jobs_interval()
    }

    fn validate_mcp(&self) -> Result<(), ConfigError> {
        let mcp = &self.mcp;
        if mcp.max_sessions == 0 {
            return Err(ConfigError::invalid(
                "mcp.max_sessions",
                "must be at least 1 (0 would refuse every MCP client)",
            ));
        }
        let Some(key) = &mcp.wallet_private_key else {
            return Ok(());
        };
        if key
            .expose_secret()
            .trim()
            .parse::<alloy::signers::local::PrivateKeySigner>()
            .is_err()
        {
            return Err(ConfigError::invalid(
                "mcp.wallet_private_key",
                "not a hex secp256k1 private key",
            ));
        }
        if mcp.max_per_hire == 0 {
            return Err(ConfigError::invalid(
                "mcp.max_per_hire",
                "must be above 0 when mcp.wallet_private_key is set",
            ));
        }
        if mcp.max_per_day < mcp.max_per_hire {
            return Err(ConfigError::invalid(
                "mcp.max_per_day",
                "must be at least mcp.max_per_hire",
            ));
        }
        Ok(())
    }

    fn validate_rest(&self) -> Result<(), ConfigError> {
        self.validate_webhooks_and_events()?;
        self.validate_mcp()?;
        if let Some(path) = &self.signing_key.path
            && path.exists()
            && !path.is_file()
        {
            return Err(ConfigError::invalid(
                "signing_key.path",
                format!("`{}` exists but is not a file", path.display()),
            ));
        }
        if let Some(key) = &self.admin.api_key
            && key.expose_secret().chars().count() < 32
        {
            return Err(ConfigError::invalid(
                "admin.api_key",
                "must be at least 32 characters",
            ));
        }
        let out = &self.outbound;
        at_least("outbound.connect_timeout_ms", out.connect_timeout_ms, 1)?;
        at_least("outbound.request_timeout_ms", out.request_timeout_ms, 1)?;
        at_least(
            "outbound.max_response_bytes",
            out.max_response_bytes as u64,
            1024,
        )?;
        at_least(
            "outbound.stream_max_bytes",
            out.stream_max_bytes as u64,
            1024,
        )?;
        at_least(
            "outbound.stream_max_duration_ms",
            out.stream_max_duration_ms,
            100,
        )?;
        let health = &self.health;
        at_least("health.interval_ms", health.interval_ms, 10)?;
        at_least("health.miss_threshold", u64::from(health.miss_threshold), 1)?;
        at_least("health.probe_timeout_ms", health.probe_timeout_ms, 1)?;
        let contracts = &self.contracts;
        at_least(
            "contracts.max_authorization_window_s",
            contracts.max_authorization_window_s,
            60,
        )?;
        at_least("contracts.offer_ttl_s", contracts.offer_ttl_s, 1)?;
        at_least("contracts.poll_interval_ms", contracts.poll_interval_ms, 10)?;
        at_least(
            "contracts.poll_max_interval_ms",
            contracts.poll_max_interval_ms,
            contracts.poll_interval_ms,
        )?;
        at_least(
            "contracts.callback_tolerance_s",
            contracts.callback_tolerance_s,
            1,
        )?;
        at_least("contracts.jobs_interval_ms", contracts.jobs_interval_ms, 10)?;
        at_least("contracts.job_lease_ms", contracts.job_lease_ms, 1000)?;
        if contracts.offer_ttl_s > 7 * 24 * 3600 {
            return Err(ConfigError::invalid(
                "contracts.offer_ttl_s",
                "must be at most 604800 (7 days)",
            ));
        }
        at_least(
            "contracts.settlement_margin_s",
            contracts.settlement_margin_s,
            10,
        )?;
        at_least(
            "contracts.sweep_interval_ms",
            contracts.sweep_interval_ms,
            10,
        )?;
        at_least(
            "contracts.recovery_grace_ms",
            contracts.recovery_grace_ms,
            100,
        )?;
        let recovery = self.worst_case_settlement_recovery();
        if Duration::from_secs(contracts.settlement_margin_s) < recovery {
            return Err(ConfigError::invalid(
                "contracts.settlement_margin_s",
                format!(
                    "must be at least {} s: a settlement begun at the margin by an instance \
                     that then dies is resumed by another within 2 × \
                     facilitator.settle_timeout_ms + contracts.recovery_grace_ms + \
                     contracts.jobs_interval_ms, all before validBefore",
                    recovery.as_secs_f64().ceil()
                ),
            ));
        }
        if contracts.default_acceptance_window_s >= contracts.max_authorization_window_s {
            return Err(ConfigError::invalid(
                "contracts.default_acceptance_window_s",
                "must be shorter than contracts.max_authorization_window_s, or settlement \
                 could not happen before the authorization expires",
            ));
        }
        Ok(())
    }
}

fn at_least(key: &str, value: u64, min: u64) -> Result<(), ConfigError> {
    if value < min {
        return Err(ConfigError::invalid(
            key,
            format!("must be at least {min} (got {value})"),
        ));
    }
    Ok(())
}

fn check_http_url(key: &str, url: &Url) -> Result<(), ConfigError> {
    if !matches!(url.scheme(), "http" | "https") || !url.has_host() {
        return Err(ConfigError::invalid(
            key,
            "must be an http(s) URL with a host",
        ));
    }
    Ok(())
}

fn is_hex_private_key(raw: &str) -> bool {
    let digits = raw.strip_prefix("0x").unwrap_or(raw);
    digits.len() == 64 && digits.bytes().all(|b| b.is_ascii_hexdigit())
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

impl Settings {
    fn validate_webhooks_and_events(&self) -> Result<(), ConfigError> {
        let hooks = &self.webhooks;
        at_least("webhooks.poll_interval_ms", hooks.poll_interval_ms, 10)?;
        at_least("webhooks.batch_size", u64::from(hooks.batch_size), 1)?;
        at_least("webhooks.request_timeout_ms", hooks.request_timeout_ms, 1)?;
        at_least("webhooks.max_attempts", u64::from(hooks.max_attempts), 1)?;
        at_least("webhooks.backoff_initial_ms", hooks.backoff_initial_ms, 1)?;
        at_least(
            "webhooks.backoff_max_ms",
            hooks.backoff_max_ms,
            hooks.backoff_initial_ms,
        )?;
        // A lease that ran out mid-request would let another instance send the same try.
        at_least(
            "webhooks.lease_ms",
            hooks.lease_ms,
            hooks.request_timeout_ms.saturating_add(1000),
        )?;
        let events = &self.events;
        at_least(
            "events.heartbeat_interval_ms",
            events.heartbeat_interval_ms,
            10,
        )?;
        at_least("events.poll_interval_ms", events.poll_interval_ms, 10)?;
        at_least("events.replay_batch", u64::from(events.replay_batch), 1)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hiregate_store::settings::DatabaseKind;

    #[test]
    fn the_mcp_wallet_and_its_limits_are_validated() {
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let ok = Settings::from_defaults_and(&format!(
            "[mcp]\nwallet_private_key = \"{key}\"\nmax_per_hire = 5\nmax_per_day = 10\n"
        ))
        .unwrap();
        assert_eq!((ok.mcp.max_per_hire, ok.mcp.max_per_day), (5, 10));
        assert!(
            !format!("{ok:?}").contains(&key[2..]),
            "the wallet key is never shown"
        );
        assert!(
            Settings::from_defaults_and("")
                .unwrap()
                .mcp
                .wallet_private_key
                .is_none()
        );
        for (toml, field) in [
            (
                "wallet_private_key = \"0xnot-a-key\"\nmax_per_hire = 5\nmax_per_day = 10",
                "mcp.wallet_private_key",
            ),
            (
                &format!("wallet_private_key = \"{key}\"\nmax_per_hire = 0\nmax_per_day = 10"),
                "mcp.max_per_hire",
            ),
            ("max_sessions = 0", "mcp.max_sessions"),
            (
                &format!("wallet_private_key = \"{key}\"\nmax_per_hire = 5\nmax_per_day = 4"),
                "mcp.max_per_day",
            ),
        ] {
            let error = Settings::from_defaults_and(&format!("[mcp]\n{toml}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(field), "{field}: {error}");
            assert!(!error.contains("not-a-key"), "{error}");
        }
    }

    /// Setting only the wallet gives a working MCP `hire`: the limits have usable defaults
    /// (5 and 50 whole units of a 6-decimals token), not 0, which would refuse every hire.
    #[test]
    fn a_wallet_alone_gets_usable_spending_limits() {
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let settings =
            Settings::from_defaults_and(&format!("[mcp]\nwallet_private_key = \"{key}\"\n"))
                .expect("a wallet alone is a valid [mcp] section");
        assert_eq!(
            (settings.mcp.max_per_hire, settings.mcp.max_per_day),
            (5_000_000, 50_000_000)
        );
    }

    #[test]
    fn defaults_are_valid() {
        let settings = Settings::from_defaults_and("").unwrap();
        assert_eq!(settings.database.url.kind(), DatabaseKind::Sqlite);
        assert_eq!(settings.database.url.expose(), "sqlite://hiregate.db");
        assert!(!settings.outbound.allow_private_targets);
        assert!(settings.outbound.require_https);
        assert_eq!(settings.facilitator.mode, FacilitatorMode::Embedded);
        assert!(settings.admin.api_key.is_none());
    }

    fn invalid_key(overrides: &str) -> String {
        match Settings::from_defaults_and(overrides) {
            Err(ConfigError::Invalid { key, .. }) => key,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    #[test]
    fn rule_violations_name_the_key() {
        assert_eq!(
            invalid_key("[database]\nmin_connections = 50"),
            "database.min_connections"
        );
        assert_eq!(
            invalid_key("[facilitator]\nmode = \"http\""),
            "facilitator.url"
        );
        assert_eq!(invalid_key("[admin]\napi_key = \"short\""), "admin.api_key");
        assert_eq!(
            invalid_key("[health]\nmiss_threshold = 0"),
            "health.miss_threshold"
        );
        assert_eq!(
            invalid_key("[chains.devnet]\nnetwork = \"base\"\nrpc_url = \"http://127.0.0.1:8545\""),
            "chains.devnet.network"
        );
        assert_eq!(
            invalid_key(
                "[chains.devnet]\nnetwork = \"eip155:31337\"\nrpc_url = \"http://127.0.0.1:8545\""
            ),
            "chains.devnet.relayer_private_key"
        );
        assert_eq!(
            invalid_key("[contracts]\ndefault_acceptance_window_s = 99999"),
            "contracts.default_acceptance_window_s"
        );
        assert_eq!(
            invalid_key("[escrow]\ncapture_margin_s = 120"),
            "escrow.capture_margin_s"
        );
        assert_eq!(
            invalid_key("[http]\ncors_allowed_origins = [\"*\", \"https://a.example\"]"),
            "http.cors_allowed_origins"
        );
        let chain = "[chains.devnet]\nnetwork = \"eip155:31337\"\nrpc_url = \"http://127.0.0.1:8545\"\n\
            relayer_private_key = \"0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d\"\n";
        assert_eq!(
            invalid_key(&format!("{chain}operator_private_key = \"0x12\"")),
            "chains.devnet.operator_private_key"
        );
        assert_eq!(
            invalid_key(&format!(
                "{chain}operator_private_key = \"0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a\""
            )),
            "escrow.treasury"
        );
        assert_eq!(
            invalid_key(&format!(
                "{chain}auth_capture_escrow = \"0x0000000000000000000000000000000000000000\""
            )),
            "chains.devnet.auth_capture_escrow"
        );
        assert_eq!(
            invalid_key("[escrow]\ndefault_fee_bps = 600\nmax_fee_bps = 500"),
            "escrow.default_fee_bps"
        );
        assert_eq!(
            invalid_key("[escrow]\nmax_pending_s = 86401"),
            "escrow.max_pending_s"
        );
    }

    #[test]
    fn escrow_addresses_default_to_the_canonical_deployment() {
        let settings = Settings::from_defaults_and(
            r#"
            [chains.devnet]
            network = "eip155:31337"
            rpc_url = "http://127.0.0.1:8545"
            relayer_private_key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            operator_private_key = "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a"
            [escrow]
            treasury = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
            "#,
        )
        .unwrap();
        let chain = &settings.chains["devnet"];
        assert_eq!(chain.auth_capture_escrow, CANONICAL_AUTH_CAPTURE_ESCROW);
        assert_eq!(
            chain.erc3009_token_collector,
            CANONICAL_ERC3009_TOKEN_COLLECTOR
        );
        assert_eq!(
            chain.operator_refund_collector,
            CANONICAL_OPERATOR_REFUND_COLLECTOR
        );
        // anvil's account #2.
        assert_eq!(
            chain.operator_address().unwrap().to_string(),
            "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
        );
        assert!(!format!("{settings:?}").contains("5de4111afa1a4b94"));
    }

    #[test]
    fn a_token_may_be_paid_over_permit2_and_then_needs_no_domain_version() {
        let chain = "[chains.devnet]\nnetwork = \"eip155:31337\"\nrpc_url = \"http://127.0.0.1:8545\"\n\
            relayer_private_key = \"0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d\"\n";
        let token = |rest: &str| {
            format!(
                "{chain}[[chains.devnet.tokens]]\naddress = \"0x5FbDB2315678afecb367f032d93F642f64180aa3\"\n\
                 name = \"Plain\"\ndecimals = 18\nsymbol = \"PLN\"\n{rest}"
            )
        };
        let settings =
            Settings::from_defaults_and(&token("transfer_method = \"permit2\"")).unwrap();
        let listed = &settings.chains["devnet"].tokens[0];
        assert_eq!(
            listed.transfer_method,
            crate::assets::TransferMethod::Permit2
        );
        assert!(listed.version.is_empty());
        // EIP-3009 (the default) signs with the token's domain: its version is required.
        assert_eq!(invalid_key(&token("")), "chains.devnet.tokens[0].name");
        let settings =
            Settings::from_defaults_and(&token("version = \"2\"\ntransfer_method = \"eip3009\""))
                .unwrap();
        assert_eq!(
            settings.chains["devnet"].tokens[0].transfer_method,
            crate::assets::TransferMethod::Eip3009
        );
        let err = Settings::from_defaults_and(&token("transfer_method = \"erc7710\"")).unwrap_err();
        assert!(err.to_string().contains("transfer_method"), "{err}");
    }

    #[test]
    fn type_errors_name_the_key() {
        let err = Settings::from_defaults_and("[database]\nurl = \"mysql://x\"").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("database.url"), "{message}");
        let err = Settings::from_defaults_and("[http]\nlisten_address = \"nope\"").unwrap_err();
        assert!(err.to_string().contains("http.listen_address"), "{err}");
        let err = Settings::from_defaults_and("[health]\nbogus = 1").unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
    }

    #[test]
    fn debug_output_redacts_secrets() {
        let settings = Settings::from_defaults_and(
            r#"
            [database]
            url = "postgres://app:hunter2-db@db.example/hg"
            [admin]
            api_key = "admin-secret-admin-secret-admin-secret"
            [facilitator]
            auth_header_value = "Bearer facilitator-secret"
            [chains.devnet]
            network = "eip155:31337"
            rpc_url = "http://127.0.0.1:8545"
            relayer_private_key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d"
            "#,
        )
        .unwrap();
        let debug = format!("{settings:?}");
        for secret in [
            "hunter2-db",
            "admin-secret",
            "facilitator-secret",
            "59c6995e998f97a5",
        ] {
            assert!(!debug.contains(secret), "{secret} leaked in {debug}");
        }
        assert_eq!(settings.database.url.kind(), DatabaseKind::Postgres);
    }
}
