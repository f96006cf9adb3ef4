//! Configuration of the bundled facilitator: one entry per `eip155:<id>` chain.

use std::time::Duration;

use alloy::primitives::Address;
use serde::{Deserialize, Deserializer};
use url::Url;

use crate::auth_capture::EscrowAddresses;
pub use crate::key::{InvalidPrivateKey, PrivateKey};
use crate::wire::Network;

/// The bundled facilitator's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilitatorConfig {
    /// The chains it verifies and settles on; each network at most once.
    pub chains: Vec<ChainConfig>,
}

/// One chain the facilitator serves.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    /// `eip155:<chain id>`; checked against the node's `eth_chainId` at startup. Any CAIP-2 id
    /// reads, so that another namespace is refused as no EVM chain
    /// ([`LocalFacilitatorError::NotEvm`](crate::facilitator::local::LocalFacilitatorError::NotEvm)).
    #[serde(deserialize_with = "Network::deserialize_caip2")]
    pub network: Network,
    /// JSON-RPC endpoint of a node of that chain.
    pub rpc_url: Url,
    /// Key of the account that sends settlement transactions and pays their gas.
    pub relayer_key: RelayerKey,
    /// Tokens accepted; `None` accepts any EIP-3009 token.
    #[serde(default)]
    pub tokens: Option<Vec<Address>>,
    /// How long settlement waits for a receipt before answering `settlement_pending`.
    #[serde(default = "default_receipt_timeout_secs")]
    pub receipt_timeout_secs: u64,
    /// How often settlement polls for the receipt.
    #[serde(default = "default_receipt_poll_interval_ms")]
    pub receipt_poll_interval_ms: u64,
    /// How many blocks back to search for a payment's earlier settlement; `None` searches from
    /// genesis (fine on a devnet, too wide for most hosted RPCs on a real chain).
    #[serde(default)]
    pub settlement_lookback_blocks: Option<u64>,
    /// Most `exact` settlements sent in one transaction (a Multicall3 `aggregate3`); 1 sends
    /// each on its own.
    #[serde(default = "default_settle_batch_max")]
    pub settle_batch_max: usize,
    /// How long a settlement ready to send waits for others still being verified to join its
    /// transaction. Nobody waits when no other settlement is under way.
    #[serde(default = "default_settle_batch_window_ms")]
    pub settle_batch_window_ms: u64,
    /// The Multicall3 that batches go through; `None` is the canonical deployment
    /// (0xcA11bde05977b3631167028862bE2a173976CA11). Without code there, each settlement is
    /// its own transaction.
    #[serde(default)]
    pub multicall3: Option<Address>,
    /// How long a sent transaction may go without a receipt before it is sent again at the same
    /// nonce with higher fees (replacing it if stuck, restoring it if dropped).
    #[serde(default = "default_resend_after_ms")]
    pub resend_after_ms: u64,
    /// Send settlement transactions with `eth_sendRawTransactionSync` (EIP-7966), whose answer
    /// is the receipt, instead of sending and polling for it. For chains that mine in
    /// milliseconds (anvil with instant mining, L2s with sub-second blocks): each transaction
    /// holds the relayer's next nonce until it is mined (at most a quarter second; a chain that
    /// has not mined it by then is seen mining on a schedule and gets plain sends until it
    /// mines at once again). `auto` (the default) asks the node at start whether it has the
    /// method; a node without it gets plain sends in every mode.
    #[serde(default)]
    pub sync_send: SyncSendMode,
    /// `auth-capture`: the `AuthCaptureEscrow`; `None` is the canonical v1.0 deployment
    /// (also what the devnet places its look-alike at).
    #[serde(default)]
    pub escrow: Option<Address>,
    /// `auth-capture`: the escrow's ERC-3009 token collector; `None` is the canonical v1.0 one.
    #[serde(default)]
    pub erc3009_collector: Option<Address>,
    /// `auth-capture`: the escrow's operator refund collector; `None` is the canonical v1.0 one.
    #[serde(default)]
    pub operator_refund_collector: Option<Address>,
}

fn default_receipt_timeout_secs() -> u64 {
    30
}

pub(crate) fn default_receipt_poll_interval_ms() -> u64 {
    100
}

fn default_settle_batch_max() -> usize {
    32
}

fn default_settle_batch_window_ms() -> u64 {
    2
}

pub(crate) fn default_resend_after_ms() -> u64 {
    // Several blocks on the chains x402 settles on (2 s on Base, 12 s on Ethereum): a
    // transaction still unmined by then is underpriced or was dropped.
    15_000
}

/// Whether settlements are sent with `eth_sendRawTransactionSync` (see
/// [`ChainConfig::sync_send`]): `true`, `false` or `"auto"` in configuration files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncSendMode {
    /// Plain sends, the receipt looked up.
    Off,
    /// Sync sends (plain ones on a node without the method).
    On,
    /// Sync sends when the node has the method, asked once at start.
    #[default]
    Auto,
}

impl<'de> Deserialize<'de> for SyncSendMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Flag(bool),
            Word(String),
        }
        match Wire::deserialize(deserializer)? {
            Wire::Flag(true) => Ok(Self::On),
            Wire::Flag(false) => Ok(Self::Off),
            // Environment variables arrive as text.
            Wire::Word(word) => match word.to_ascii_lowercase().as_str() {
                "auto" => Ok(Self::Auto),
                "true" => Ok(Self::On),
                "false" => Ok(Self::Off),
                other => Err(serde::de::Error::custom(format!(
                    "sync_send is true, false or \"auto\", not {other:?}"
                ))),
            },
        }
    }
}

impl SyncSendMode {
    /// Whether to send with `eth_sendRawTransactionSync` on the node behind `provider`
    /// (`auto` asks it).
    pub async fn resolve(self, provider: &alloy::providers::DynProvider) -> bool {
        match self {
            Self::Off => false,
            Self::On => true,
            Self::Auto => {
                let has = super::relayer::node_has_sync_send(provider).await;
                tracing::info!(
                    sync_send = has,
                    "sync_send = \"auto\": the node {} eth_sendRawTransactionSync",
                    if has { "has" } else { "lacks" }
                );
                has
            }
        }
    }
}

/// Multicall3's address on every chain that has it.
pub const MULTICALL3_CANONICAL: Address =
    alloy::primitives::address!("cA11bde05977b3631167028862bE2a173976CA11");

impl ChainConfig {
    /// A chain entry with the defaults for everything optional.
    #[must_use]
    pub fn new(network: Network, rpc_url: Url, relayer_key: RelayerKey) -> Self {
        Self {
            network,
            rpc_url,
            relayer_key,
            tokens: None,
            receipt_timeout_secs: default_receipt_timeout_secs(),
            receipt_poll_interval_ms: default_receipt_poll_interval_ms(),
            settlement_lookback_blocks: None,
            settle_batch_max: default_settle_batch_max(),
            settle_batch_window_ms: default_settle_batch_window_ms(),
            multicall3: None,
            resend_after_ms: default_resend_after_ms(),
            sync_send: SyncSendMode::default(),
            escrow: None,
            erc3009_collector: None,
            operator_refund_collector: None,
        }
    }

    /// The `auth-capture` escrow deployment on this chain, canonical v1.0 where not configured.
    #[must_use]
    pub fn escrow_addresses(&self) -> EscrowAddresses {
        let canonical = EscrowAddresses::default();
        EscrowAddresses {
            escrow: self.escrow.unwrap_or(canonical.escrow),
            erc3009_collector: self
                .erc3009_collector
                .unwrap_or(canonical.erc3009_collector),
            operator_refund_collector: self
                .operator_refund_collector
                .unwrap_or(canonical.operator_refund_collector),
        }
    }

    /// [`Self::receipt_timeout_secs`] as a duration.
    #[must_use]
    pub fn receipt_timeout(&self) -> Duration {
        Duration::from_secs(self.receipt_timeout_secs)
    }

    /// [`Self::settle_batch_window_ms`] as a duration.
    #[must_use]
    pub fn settle_batch_window(&self) -> Duration {
        Duration::from_millis(self.settle_batch_window_ms)
    }

    /// [`Self::resend_after_ms`] as a duration (at least a millisecond).
    #[must_use]
    pub fn resend_after(&self) -> Duration {
        Duration::from_millis(self.resend_after_ms.max(1))
    }

    /// [`Self::multicall3`], canonical where not configured.
    #[must_use]
    pub fn multicall3_address(&self) -> Address {
        self.multicall3.unwrap_or(MULTICALL3_CANONICAL)
    }

    /// [`Self::receipt_poll_interval_ms`] as a duration.
    #[must_use]
    pub fn receipt_poll_interval(&self) -> Duration {
        Duration::from_millis(self.receipt_poll_interval_ms.max(1))
    }
}

/// The key of the account a chain's settlements are sent from (and whose gas they spend).
pub type RelayerKey = PrivateKey;

/// Why a relayer key was refused. Never carries the key text.
pub type InvalidRelayerKey = InvalidPrivateKey;

#[cfg(test)]
mod tests {
    use super::*;

    // Anvil's public dev account 1: a well-known test key, never used outside local chains.
    const DEV_KEY: &str = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";

    #[test]
    fn relayer_key_parses_and_never_prints_the_key() {
        let key: RelayerKey = DEV_KEY.parse().unwrap();
        assert_eq!(
            key.address(),
            "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
                .parse::<Address>()
                .unwrap()
        );
        let printed = format!("{key:?}");
        assert!(!printed.contains("59c6995e"), "{printed}");
        assert!(
            DEV_KEY
                .trim_start_matches("0x")
                .parse::<RelayerKey>()
                .is_ok()
        );
        for bad in ["", "0x12", "zz", &"00".repeat(32)] {
            assert_eq!(bad.parse::<RelayerKey>().unwrap_err(), InvalidPrivateKey);
        }
    }

    #[test]
    fn config_deserializes_with_defaults() {
        let config: FacilitatorConfig = serde_json::from_value(serde_json::json!({
            "chains": [{
                "network": "eip155:31337",
                "rpc_url": "http://127.0.0.1:8545",
                "relayer_key": DEV_KEY,
            }]
        }))
        .unwrap();
        let chain = &config.chains[0];
        assert_eq!(chain.network.chain_id(), Some(31337));
        assert_eq!(chain.receipt_timeout(), Duration::from_secs(30));
        assert_eq!(chain.settle_batch_max, 32);
        assert_eq!(chain.settle_batch_window(), Duration::from_millis(2));
        assert_eq!(chain.resend_after(), Duration::from_secs(15));
        assert_eq!(chain.multicall3_address(), MULTICALL3_CANONICAL);
        assert!(chain.tokens.is_none());
        assert_eq!(chain.escrow_addresses(), EscrowAddresses::default());
        assert!(!format!("{config:?}").contains("59c6995e"));

        let typo = serde_json::from_value::<FacilitatorConfig>(serde_json::json!({
            "chains": [{"network": "eip155:1", "rpc_url": "http://x", "relayer_key": DEV_KEY, "rpc": 1}]
        }));
        assert!(typo.is_err(), "unknown keys must be refused");
    }
}
