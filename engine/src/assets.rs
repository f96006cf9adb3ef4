//! Payment assets: what the gateway must know about a worker's token to ask for payment in it.
//!
//! The x402 offer needs the token's EIP-712 domain (`extra {name, version}`: a wrong name makes
//! every signature fail to recover), and the HIRE informational headers need its decimals and
//! symbol. [`AssetDirectory::lookup`] answers from `chains.<name>.tokens` when the token is
//! listed there, else reads `name()`, `version()`, `decimals()` and `symbol()` from the chain
//! once and caches the answer (token metadata does not change).
//!
//! It also says how an `exact` payment moves the token ([`TransferMethod`]): EIP-3009 when the
//! token has it, else Permit2, which works for any ERC-20 (x402 `extra.assetTransferMethod =
//! "permit2"`). A listed token says so in its `transfer_method` (so USDC can be paid over
//! Permit2 too); an unlisted one is asked `authorizationState(address,bytes32)`, EIP-3009's
//! view: a token that answers it is paid with EIP-3009, one that reverts with Permit2.
//!
//! It also holds each chain's node and clock ([`AssetDirectory::chain_now`]): payment windows
//! and escrow deadlines are judged by the chain's block time, as the chain judges them (see
//! [`hiregate_payments::clock`]).

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

use alloy::{
    primitives::{Address, U256},
    providers::{DynProvider, Provider, ProviderBuilder},
};

use hiregate_contracts::money::Network;
use hiregate_payments::{ChainClock, Now};

use crate::settings::ChainSettings;
pub use crate::settings::TransferMethod;

alloy::sol! {
    /// The metadata calls of an EIP-3009 (USDC-like) token; a plain ERC-20 may lack `version()`
    /// and `authorizationState()`.
    #[sol(rpc)]
    interface Eip3009Metadata {
        function name() external view returns (string);
        function version() external view returns (string);
        function decimals() external view returns (uint8);
        function symbol() external view returns (string);
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
    }
}

/// What the gateway knows about one token on one chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetInfo {
    /// EVM chain id.
    pub chain_id: u64,
    /// Token contract.
    pub address: Address,
    /// EIP-712 domain name.
    pub name: String,
    /// EIP-712 domain version; empty for a Permit2-paid token that has none (no EIP-2612).
    pub version: String,
    /// ERC-20 decimals.
    pub decimals: u8,
    /// ERC-20 symbol.
    pub symbol: String,
    /// How `exact` payments move it.
    pub transfer_method: TransferMethod,
}

/// `atomic` units of a token with `decimals` as a plain decimal in whole units (`5000000` with 6
/// decimals → `"5"`, `10000` → `"0.01"`), for the HIRE `X-Payment-Amount` header.
pub fn whole_units(atomic: U256, decimals: u8) -> String {
    let digits = atomic.to_string();
    let decimals = usize::from(decimals);
    if decimals == 0 {
        return digits;
    }
    let padded = format!("{digits:0>width$}", width = decimals + 1);
    let (whole, fraction) = padded.split_at(padded.len() - decimals);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        whole.to_owned()
    } else {
        format!("{whole}.{fraction}")
    }
}

impl AssetInfo {
    /// `atomic` in whole units of this token (see [`whole_units`]).
    pub fn whole_units(&self, atomic: U256) -> String {
        whole_units(atomic, self.decimals)
    }

    /// The token's EIP-712 domain (`extra {name, version}`), when it has one: always for
    /// EIP-3009, and for a Permit2-paid token with EIP-2612 (which the `eip2612GasSponsoring`
    /// extension signs for).
    pub fn domain(&self) -> Option<hiregate_payments::TokenDomain> {
        (!self.name.is_empty() && !self.version.is_empty()).then(|| {
            hiregate_payments::TokenDomain {
                name: self.name.clone(),
                version: self.version.clone(),
            }
        })
    }
}

/// Why a token's metadata is unavailable.
#[derive(Debug, thiserror::Error)]
pub enum AssetLookupError {
    /// No `[chains]` entry for this chain, so the gateway cannot describe payments on it.
    #[error("network {0} is not configured under [chains]")]
    NetworkNotConfigured(Network),
    /// The contract does not answer the metadata calls of an EIP-3009 token.
    #[error("{address} on eip155:{chain_id} does not look like an EIP-3009 token: {reason}")]
    NotAToken {
        /// Chain.
        chain_id: u64,
        /// The address.
        address: Address,
        /// Which call failed.
        reason: String,
    },
    /// The chain's node could not be asked.
    #[error("the node of eip155:{chain_id} is unreachable")]
    Unreachable {
        /// Chain.
        chain_id: u64,
        /// The RPC failure.
        #[source]
        source: alloy::transports::TransportError,
    },
}

struct ChainEntry {
    provider: DynProvider,
    /// The chain's latest block time, read at most once a second and shared by every hire.
    clock: ChainClock,
    lookback_blocks: Option<u64>,
    listed: HashMap<Address, AssetInfo>,
}

/// Token metadata by (chain, address). Cheap to clone.
#[derive(Clone, Default)]
pub struct AssetDirectory {
    chains: Arc<HashMap<u64, ChainEntry>>,
    cache: Arc<Mutex<HashMap<(u64, Address), AssetInfo>>>,
}

impl fmt::Debug for AssetDirectory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut chains: Vec<&u64> = self.chains.keys().collect();
        chains.sort();
        f.debug_struct("AssetDirectory")
            .field("chains", &chains)
            .finish_non_exhaustive()
    }
}

impl AssetDirectory {
    /// A directory over the configured chains (their networks are EVM chains: the settings
    /// parse no other).
    pub fn from_settings<'a>(chains: impl IntoIterator<Item = &'a ChainSettings>) -> Self {
        let mut entries = HashMap::new();
        for chain in chains {
            let Some(chain_id) = chain.chain_id() else {
                continue;
            };
            let provider = ProviderBuilder::new()
                .connect_http(chain.rpc_url.clone())
                .erased();
            let listed = chain
                .tokens
                .iter()
                .map(|token| {
                    (
                        token.address,
                        AssetInfo {
                            chain_id,
                            address: token.address,
                            name: token.name.clone(),
                            version: token.version.clone(),
                            decimals: token.decimals,
                            symbol: token.symbol.clone(),
                            transfer_method: token.transfer_method,
                        },
                    )
                })
                .collect();
            entries.insert(
                chain_id,
                ChainEntry {
                    clock: ChainClock::new(provider.clone()),
                    provider,
                    lookback_blocks: chain.settlement_lookback_blocks,
                    listed,
                },
            );
        }
        Self {
            chains: Arc::new(entries),
            cache: Arc::default(),
        }
    }

    /// The node of `chain_id` and how far back its logs may be searched, for asking the chain
    /// about payments (the one truth about whether money moved).
    pub fn chain(&self, chain_id: u64) -> Option<(DynProvider, Option<u64>)> {
        self.chains
            .get(&chain_id)
            .map(|entry| (entry.provider.clone(), entry.lookback_blocks))
    }

    /// The present on `chain_id` as the chain will judge a payment's times: its latest block
    /// time (cached for [`ChainClock::MAX_AGE`], so a hire rarely waits for the node) and the
    /// local clock. A chain without a node here is judged by the local clock alone.
    pub async fn chain_now(&self, chain_id: u64) -> Result<Now, alloy::transports::TransportError> {
        match self.chains.get(&chain_id) {
            Some(entry) => entry.clock.now().await,
            None => Ok(Now::from(hiregate_payments::clock::unix_now())),
        }
    }

    /// The present on `chain_id` for a money deadline (`validBefore`, an escrow deadline), unix
    /// seconds: the later of its block time and the host's clock ([`Now::latest`]). A node that
    /// does not answer counts with the host's clock.
    pub async fn money_now(&self, chain_id: u64) -> i64 {
        let now = match self.chain_now(chain_id).await {
            Ok(now) => now.latest(),
            Err(error) => {
                tracing::warn!(chain_id, error = %error, "the chain's clock cannot be read; the local clock stands in");
                hiregate_payments::clock::unix_now()
            }
        };
        i64::try_from(now).unwrap_or(i64::MAX)
    }

    /// The latest of every configured chain's time and the local clock ([`Now::latest`]), for
    /// sweeps that compare one time against the deadlines of payments on any chain: each
    /// deadline is then reached no later than its own chain reaches it. A node that does not
    /// answer counts with the local clock.
    pub async fn latest_now(&self) -> i64 {
        let mut latest = hiregate_payments::clock::unix_now();
        for entry in self.chains.values() {
            match entry.clock.now().await {
                Ok(now) => latest = latest.max(now.latest()),
                Err(error) => {
                    tracing::warn!(error = %error, "the chain's clock cannot be read; the local clock stands in");
                }
            }
        }
        i64::try_from(latest).unwrap_or(i64::MAX)
    }

    /// Chain ids this directory can describe.
    pub fn chain_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.chains.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The metadata of `address` on `network`.
    pub async fn lookup(
        &self,
        network: Network,
        address: Address,
    ) -> Result<AssetInfo, AssetLookupError> {
        let Some((chain_id, chain)) = network
            .chain_id()
            .and_then(|chain_id| Some((chain_id, self.chains.get(&chain_id)?)))
        else {
            return Err(AssetLookupError::NetworkNotConfigured(network));
        };
        if let Some(listed) = chain.listed.get(&address) {
            return Ok(listed.clone());
        }
        if let Some(cached) = self.cached(chain_id, address) {
            return Ok(cached);
        }
        let info = read_metadata(&chain.provider, chain_id, address).await?;
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((chain_id, address), info.clone());
        Ok(info)
    }

    /// Every token described without asking a chain: the configured ones and those already
    /// read from a chain, ordered by chain and address.
    pub fn known(&self) -> Vec<AssetInfo> {
        let mut known: HashMap<(u64, Address), AssetInfo> = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for (chain_id, chain) in self.chains.iter() {
            for (address, info) in &chain.listed {
                known.insert((*chain_id, *address), info.clone());
            }
        }
        let mut known: Vec<(_, AssetInfo)> = known.into_iter().collect();
        known.sort_by_key(|(key, _)| *key);
        known.into_iter().map(|(_, info)| info).collect()
    }

    fn cached(&self, chain_id: u64, address: Address) -> Option<AssetInfo> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(chain_id, address))
            .cloned()
    }

    /// `eth_chainId` on every configured chain: `Err` names the first chain that does not
    /// answer (or answers for another chain).
    pub async fn ping(&self) -> Result<(), String> {
        for chain_id in self.chain_ids() {
            let Some(chain) = self.chains.get(&chain_id) else {
                continue;
            };
            match chain.provider.get_chain_id().await {
                Ok(actual) if actual == chain_id => {}
                Ok(actual) => {
                    return Err(format!(
                        "node of eip155:{chain_id} reports chain id {actual}"
                    ));
                }
                Err(_) => return Err(format!("node of eip155:{chain_id} is unreachable")),
            }
        }
        Ok(())
    }
}

async fn read_metadata(
    provider: &DynProvider,
    chain_id: u64,
    address: Address,
) -> Result<AssetInfo, AssetLookupError> {
    let token = Eip3009Metadata::new(address, provider);
    let classify = |call: &'static str| {
        move |error: alloy::contract::Error| match error {
            alloy::contract::Error::TransportError(source) if !is_revert(&source) => {
                AssetLookupError::Unreachable { chain_id, source }
            }
            other => AssetLookupError::NotAToken {
                chain_id,
                address,
                reason: format!("{call}() failed: {other}"),
            },
        }
    };
    let name = token.name().call().await.map_err(classify("name"))?;
    // EIP-3009's own view decides the transfer method: a token without it is paid over Permit2.
    let transfer_method = match token
        .authorizationState(Address::ZERO, alloy::primitives::B256::ZERO)
        .call()
        .await
    {
        Ok(_) => TransferMethod::Eip3009,
        Err(alloy::contract::Error::TransportError(source)) if !is_revert(&source) => {
            return Err(AssetLookupError::Unreachable { chain_id, source });
        }
        Err(_) => TransferMethod::Permit2,
    };
    let version = match token.version().call().await {
        Ok(version) => version,
        // A plain ERC-20 without EIP-2612 has no domain version; Permit2 does not need one.
        Err(alloy::contract::Error::TransportError(source)) if !is_revert(&source) => {
            return Err(AssetLookupError::Unreachable { chain_id, source });
        }
        Err(_) if transfer_method == TransferMethod::Permit2 => String::new(),
        Err(error) => return Err(classify("version")(error)),
    };
    let decimals = token
        .decimals()
        .call()
        .await
        .map_err(classify("decimals"))?;
    let symbol = token.symbol().call().await.map_err(classify("symbol"))?;
    Ok(AssetInfo {
        chain_id,
        address,
        name,
        version,
        decimals,
        symbol,
        transfer_method,
    })
}

/// An `eth_call` that reverted (the node answered with an error payload) is the contract's
/// answer, not an unreachable node.
fn is_revert(error: &alloy::transports::TransportError) -> bool {
    error.as_error_resp().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usdc(decimals: u8) -> AssetInfo {
        AssetInfo {
            chain_id: 1,
            address: Address::ZERO,
            name: "USD Coin".into(),
            version: "2".into(),
            decimals,
            symbol: "USDC".into(),
            transfer_method: TransferMethod::Eip3009,
        }
    }

    #[test]
    fn whole_units_are_plain_decimals() {
        let six = usdc(6);
        assert_eq!(six.whole_units(U256::from(5_000_000u64)), "5");
        assert_eq!(six.whole_units(U256::from(10_000u64)), "0.01");
        assert_eq!(six.whole_units(U256::from(1u64)), "0.000001");
        assert_eq!(six.whole_units(U256::from(12_345_678u64)), "12.345678");
        assert_eq!(six.whole_units(U256::ZERO), "0");
        assert_eq!(usdc(0).whole_units(U256::from(42u64)), "42");
    }
}
