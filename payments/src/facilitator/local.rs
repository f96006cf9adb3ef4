//! The in-process facilitator: verifies and settles `exact` EIP-3009 payments on the EVM
//! chains of its [`FacilitatorConfig`], paying gas from one relayer key per chain.
//!
//! Settlement is idempotent per payment key (network, asset, payer, nonce):
//! 1. concurrent settles of one payment queue on a per-key lock, so only one can broadcast;
//! 2. a settled payment is remembered with its response, and a retry gets that response;
//! 3. after a restart (or when another facilitator settled it) a payment whose nonce is used on
//!    chain is looked up by its `AuthorizationUsed` log, and reported settled with the original
//!    transaction when that transaction carries the matching `Transfer`;
//! 4. a broadcast whose receipt did not arrive in time answers `settlement_pending` with the
//!    hash, and a retry reconciles against that transaction instead of sending another.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex as StdMutex, PoisonError, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy::primitives::{Address, TxHash, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionReceipt;
use alloy::transports::TransportError;
use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedMutexGuard};

use super::config::FacilitatorConfig;
use super::relayer::{Relayer, SendError};
use super::{Facilitator, FacilitatorError};
use crate::exact::onchain::{
    Refusal, find_settlement, receipt_has_transfer, transfer_calldata, verify_onchain,
};
use crate::exact::{ExactPayment, PaymentKey};
use crate::reason::Reason;
use crate::wire::{
    EXACT_SCHEME, Network, SettleRequest, SettleResponse, SupportedKind, SupportedResponse,
    UnknownFields, VerifyRequest, VerifyResponse, X402Version2,
};

/// First wait between receipt polls; doubled up to the chain's configured poll interval.
const FIRST_RECEIPT_POLL: Duration = Duration::from_millis(5);

/// Settled payments remembered in memory; older ones fall back to the on-chain lookup.
const REMEMBERED_SETTLEMENTS: usize = 100_000;

/// Why a [`LocalFacilitator`] could not start. Never includes RPC URLs (they often embed keys).
#[derive(Debug, thiserror::Error)]
pub enum LocalFacilitatorError {
    /// The configuration lists no chain.
    #[error("facilitator configuration lists no chains")]
    NoChains,
    /// A network appears twice.
    #[error("network {0} is configured twice")]
    DuplicateNetwork(Network),
    /// A network is not `eip155:<id>`.
    #[error("network {0} is not an eip155 chain")]
    NotEvm(Network),
    /// The node did not answer `eth_chainId`.
    #[error("node for {network} is unreachable")]
    Unreachable {
        /// The configured network.
        network: Network,
        /// The failure.
        #[source]
        source: TransportError,
    },
    /// The node serves another chain than configured.
    #[error("node for {network} reports chain id {actual}")]
    ChainIdMismatch {
        /// The configured network.
        network: Network,
        /// What the node reported.
        actual: u64,
    },
}

/// In-process facilitator for `exact` EIP-3009 payments on configured EVM chains.
pub struct LocalFacilitator {
    chains: HashMap<Network, Arc<Chain>>,
    in_flight: KeyedLocks,
    book: SettlementBook,
}

impl std::fmt::Debug for LocalFacilitator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFacilitator")
            .field("chains", &self.chains.values().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

struct Chain {
    network: Network,
    provider: DynProvider,
    relayer: Relayer,
    tokens: Option<HashSet<Address>>,
    receipt_timeout: Duration,
    poll_interval: Duration,
    lookback_blocks: Option<u64>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("network", &self.network)
            .field("relayer", &self.relayer.address())
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl LocalFacilitator {
    /// Connects to every configured chain and checks that each node serves the configured
    /// chain id.
    pub async fn connect(config: FacilitatorConfig) -> Result<Self, LocalFacilitatorError> {
        if config.chains.is_empty() {
            return Err(LocalFacilitatorError::NoChains);
        }
        let mut chains = HashMap::new();
        for chain in config.chains {
            let network = chain.network.clone();
            if chains.contains_key(&network) {
                return Err(LocalFacilitatorError::DuplicateNetwork(network));
            }
            let expected = network
                .eip155_chain_id()
                .ok_or_else(|| LocalFacilitatorError::NotEvm(network.clone()))?;
            let provider = ProviderBuilder::new()
                .wallet(chain.relayer_key.signer().clone())
                .connect_http(chain.rpc_url.clone())
                .erased();
            let actual = provider.get_chain_id().await.map_err(|source| {
                LocalFacilitatorError::Unreachable {
                    network: network.clone(),
                    source,
                }
            })?;
            if actual != expected {
                return Err(LocalFacilitatorError::ChainIdMismatch { network, actual });
            }
            let entry = Chain {
                network: network.clone(),
                relayer: Relayer::new(provider.clone(), chain.relayer_key.address()),
                provider,
                tokens: chain.tokens.as_ref().map(|t| t.iter().copied().collect()),
                receipt_timeout: chain.receipt_timeout(),
                poll_interval: chain.receipt_poll_interval(),
                lookback_blocks: chain.settlement_lookback_blocks,
            };
            chains.insert(network, Arc::new(entry));
        }
        Ok(Self {
            chains,
            in_flight: KeyedLocks::default(),
            book: SettlementBook::default(),
        })
    }

    /// The relayer address that settles on `network`.
    #[must_use]
    pub fn relayer_address(&self, network: &Network) -> Option<Address> {
        self.chains
            .get(network)
            .map(|chain| chain.relayer.address())
    }

    /// Parses the payment and finds its chain; a refusal is the verdict reason.
    fn locate(&self, request: &VerifyRequest) -> Result<(Arc<Chain>, ExactPayment), Reason> {
        let payment = ExactPayment::parse(&request.payment_payload, &request.payment_requirements)?;
        let chain = self
            .chains
            .get(&payment.network)
            .ok_or(Reason::InvalidNetwork)?;
        if let Some(tokens) = &chain.tokens
            && !tokens.contains(&payment.asset)
        {
            return Err(Reason::UnsupportedAsset);
        }
        Ok((Arc::clone(chain), payment))
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// The payer named by a payload, for verdicts on payloads that failed other checks.
fn payer_hint(request: &VerifyRequest) -> Option<Address> {
    request
        .payment_payload
        .exact_evm()
        .ok()
        .map(|payload| payload.authorization.from)
}

#[async_trait]
impl Facilitator for LocalFacilitator {
    async fn verify(&self, request: &VerifyRequest) -> Result<VerifyResponse, FacilitatorError> {
        let (chain, payment) = match self.locate(request) {
            Ok(located) => located,
            Err(reason) => return Ok(VerifyResponse::invalid(reason, payer_hint(request), None)),
        };
        let payer = payment.payer();
        if let Err(reason) = payment.check_window(unix_now()) {
            return Ok(VerifyResponse::invalid(reason, Some(payer), None));
        }
        let verdict = verify_onchain(&chain.provider, chain.relayer.address(), &payment).await?;
        Ok(match verdict {
            Ok(_) => VerifyResponse::valid(payer),
            Err(Refusal { reason, message }) => {
                tracing::debug!(network = %chain.network, %payer, %reason, "payment refused");
                VerifyResponse::invalid(reason, Some(payer), message)
            }
        })
    }

    async fn settle(&self, request: &SettleRequest) -> Result<SettleResponse, FacilitatorError> {
        let network = request.payment_requirements.network.as_str();
        let (chain, payment) = match self.locate(request) {
            Ok(located) => located,
            Err(reason) => {
                return Ok(SettleResponse::failed(
                    network,
                    reason,
                    payer_hint(request),
                    None,
                    None,
                ));
            }
        };
        let key = payment.key();
        let _only_settler = self.in_flight.lock(key.clone()).await;

        // The key names the nonce; the remembered transfer only answers for an authorization
        // with the same terms (another one reusing the nonce is refused on chain instead).
        let terms = TransferTerms::of(&payment);
        match self.book.get(&key).filter(|entry| entry.terms == terms) {
            Some(Entry {
                state: Remembered::Settled(response),
                ..
            }) => return Ok(response),
            Some(Entry {
                state: Remembered::Pending(tx_hash),
                ..
            }) => {
                if let Some(outcome) = chain.reconcile(&payment, tx_hash).await? {
                    return Ok(self.book.record(key, terms, outcome));
                }
                // The pending transaction vanished from the node: settle afresh.
                self.book.forget(&key);
            }
            None => {}
        }
        let outcome = chain.settle_fresh(&payment).await?;
        Ok(self.book.record(key, terms, outcome))
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let mut networks: Vec<&Network> = self.chains.keys().collect();
        networks.sort();
        let kinds = networks
            .into_iter()
            .map(|network| SupportedKind {
                x402_version: X402Version2::VALUE,
                scheme: EXACT_SCHEME.to_owned(),
                network: network.to_string(),
                extra: None,
                unknown: UnknownFields::new(),
            })
            .collect();
        let relayers: BTreeSet<String> = self
            .chains
            .values()
            .map(|chain| chain.relayer.address().to_checksum(None))
            .collect();
        let mut response = SupportedResponse {
            kinds,
            ..SupportedResponse::default()
        };
        response
            .signers
            .insert("eip155:*".to_owned(), relayers.into_iter().collect());
        Ok(response)
    }
}

/// What a settlement attempt produced, and whether it must be remembered.
enum Outcome {
    /// Final success: remembered, every retry gets it back.
    Settled(SettleResponse),
    /// Broadcast, unconfirmed: remembered so a retry reconciles instead of resending.
    Pending(SettleResponse, TxHash),
    /// Refused or failed without consuming the authorization: a retry re-runs everything.
    Failed(SettleResponse),
}

impl Chain {
    fn settled(&self, payment: &ExactPayment, tx_hash: TxHash) -> Outcome {
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %tx_hash, "payment settled");
        Outcome::Settled(SettleResponse::settled(
            &self.network,
            payment.payer(),
            tx_hash,
        ))
    }

    fn failed(&self, payment: &ExactPayment, refusal: Refusal, tx_hash: Option<TxHash>) -> Outcome {
        tracing::info!(network = %self.network, payer = %payment.payer(), reason = %refusal.reason, "settlement refused");
        Outcome::Failed(SettleResponse::failed(
            self.network.as_str(),
            refusal.reason,
            Some(payment.payer()),
            tx_hash.map(|hash| hash.to_string()),
            refusal.message,
        ))
    }

    /// Reports an earlier settlement of this payment when the chain has one, else `refusal`.
    async fn settled_before_or(
        &self,
        payment: &ExactPayment,
        refusal: Refusal,
    ) -> Result<Outcome, TransportError> {
        Ok(
            match find_settlement(&self.provider, payment, self.lookback_blocks).await? {
                Some(tx_hash) => self.settled(payment, tx_hash),
                None => self.failed(payment, refusal, None),
            },
        )
    }

    async fn settle_fresh(&self, payment: &ExactPayment) -> Result<Outcome, TransportError> {
        let verdict = match payment.check_window(unix_now()) {
            Err(reason) => Err(Refusal::from(reason)),
            Ok(()) => verify_onchain(&self.provider, self.relayer.address(), payment).await?,
        };
        let facts = match verdict {
            Ok(facts) => facts,
            // These are what an already-settled payment looks like to verification: its nonce
            // is spent, the simulation reverts, the balance may be gone, the window may have
            // closed since.
            Err(refusal)
                if matches!(
                    refusal.reason,
                    Reason::NonceAlreadyUsed
                        | Reason::SimulationFailed
                        | Reason::InsufficientBalance
                        | Reason::ValidBefore
                ) =>
            {
                return self.settled_before_or(payment, refusal).await;
            }
            Err(refusal) => return Ok(self.failed(payment, refusal, None)),
        };

        let calldata = transfer_calldata(payment, facts.has_code);
        let tx_hash = match self.relayer.send(payment.asset, calldata).await {
            Ok(tx_hash) => tx_hash,
            // Verified a moment ago, reverts now: maybe someone settled it in between.
            Err(SendError::Reverted(message)) => {
                let refusal = Refusal {
                    reason: Reason::SimulationFailed,
                    message: Some(message),
                };
                return self.settled_before_or(payment, refusal).await;
            }
            Err(SendError::Rpc(error)) => return Err(error),
        };
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %tx_hash, "settlement broadcast");
        match self.wait_for_receipt(tx_hash).await? {
            Some(receipt) => self.conclude(payment, &receipt).await,
            None => Ok(self.pending(payment, tx_hash)),
        }
    }

    /// A retry of a payment whose transaction was broadcast but unconfirmed. `None` when the
    /// node no longer knows the transaction (dropped), so it is safe to send again.
    async fn reconcile(
        &self,
        payment: &ExactPayment,
        tx_hash: TxHash,
    ) -> Result<Option<Outcome>, TransportError> {
        if let Some(receipt) = self.wait_for_receipt(tx_hash).await? {
            return self.conclude(payment, &receipt).await.map(Some);
        }
        let known = self
            .provider
            .get_transaction_by_hash(tx_hash)
            .await?
            .is_some();
        Ok(known.then(|| self.pending(payment, tx_hash)))
    }

    fn pending(&self, payment: &ExactPayment, tx_hash: TxHash) -> Outcome {
        tracing::warn!(network = %self.network, tx = %tx_hash, "settlement not confirmed in time");
        let response = SettleResponse::failed(
            self.network.as_str(),
            Reason::SettlementPending,
            Some(payment.payer()),
            Some(tx_hash.to_string()),
            None,
        );
        Outcome::Pending(response, tx_hash)
    }

    async fn conclude(
        &self,
        payment: &ExactPayment,
        receipt: &TransactionReceipt,
    ) -> Result<Outcome, TransportError> {
        let tx_hash = receipt.transaction_hash;
        if !receipt.status() {
            // Another settler (a second facilitator on the same payment) may have been mined
            // first, reverting ours; the payment is then settled, by their transaction.
            if let Some(original) =
                find_settlement(&self.provider, payment, self.lookback_blocks).await?
            {
                return Ok(self.settled(payment, original));
            }
            return Ok(self.failed(payment, Reason::TransactionFailed.into(), Some(tx_hash)));
        }
        if !receipt_has_transfer(receipt, payment) {
            return Ok(self.failed(payment, Reason::TransferEventMismatch.into(), Some(tx_hash)));
        }
        Ok(self.settled(payment, tx_hash))
    }

    /// Polls for the receipt until the timeout. The first polls come quickly (a devnet or a
    /// fast L2 mines within milliseconds), then back off to the configured interval.
    async fn wait_for_receipt(
        &self,
        tx_hash: TxHash,
    ) -> Result<Option<TransactionReceipt>, TransportError> {
        let deadline = Instant::now() + self.receipt_timeout;
        let mut delay = FIRST_RECEIPT_POLL.min(self.poll_interval);
        loop {
            if let Some(receipt) = self.provider.get_transaction_receipt(tx_hash).await? {
                return Ok(Some(receipt));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(self.poll_interval);
        }
    }
}

/// One async lock per payment key, created on demand and dropped with its last holder.
#[derive(Default)]
struct KeyedLocks {
    locks: StdMutex<LockTable>,
}

#[derive(Default)]
struct LockTable {
    by_key: HashMap<PaymentKey, Weak<Mutex<()>>>,
    sweep_at: usize,
}

impl KeyedLocks {
    async fn lock(&self, key: PaymentKey) -> OwnedMutexGuard<()> {
        let lock = {
            let mut table = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            // Sweep dead entries only when the table has doubled, so the cost stays amortised.
            if table.by_key.len() >= table.sweep_at {
                table.by_key.retain(|_, lock| lock.strong_count() > 0);
                table.sweep_at = (table.by_key.len() * 2).max(1024);
            }
            match table.by_key.get(&key).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(Mutex::new(()));
                    table.by_key.insert(key, Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

#[derive(Clone)]
enum Remembered {
    Settled(SettleResponse),
    Pending(TxHash),
}

/// What a transfer under a nonce moves: what a remembered settlement must match to answer
/// for a request.
#[derive(Clone, Copy, PartialEq, Eq)]
struct TransferTerms {
    to: Address,
    value: U256,
}

impl TransferTerms {
    fn of(payment: &ExactPayment) -> Self {
        Self {
            to: payment.payload.authorization.to,
            value: payment.payload.authorization.value.get(),
        }
    }
}

#[derive(Clone)]
struct Entry {
    terms: TransferTerms,
    state: Remembered,
}

/// Bounded memory of settled and pending payments, oldest forgotten first.
#[derive(Default)]
struct SettlementBook {
    inner: StdMutex<BookInner>,
}

#[derive(Default)]
struct BookInner {
    entries: HashMap<PaymentKey, Entry>,
    order: VecDeque<PaymentKey>,
}

impl SettlementBook {
    fn get(&self, key: &PaymentKey) -> Option<Entry> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.entries.get(key).cloned()
    }

    fn forget(&self, key: &PaymentKey) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.entries.remove(key);
    }

    /// Remembers what must be remembered and returns the response to send.
    fn record(&self, key: PaymentKey, terms: TransferTerms, outcome: Outcome) -> SettleResponse {
        let (response, remembered) = match outcome {
            Outcome::Settled(response) => {
                let remembered = Remembered::Settled(response.clone());
                (response, Some(remembered))
            }
            Outcome::Pending(response, tx_hash) => (response, Some(Remembered::Pending(tx_hash))),
            Outcome::Failed(response) => (response, None),
        };
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match remembered {
            Some(state) => {
                if inner
                    .entries
                    .insert(key.clone(), Entry { terms, state })
                    .is_none()
                {
                    inner.order.push_back(key);
                }
                while inner.entries.len() > REMEMBERED_SETTLEMENTS {
                    let Some(oldest) = inner.order.pop_front() else {
                        break;
                    };
                    inner.entries.remove(&oldest);
                }
            }
            None => {
                // A failure of one authorization must not erase another's settlement under the
                // same nonce.
                if inner
                    .entries
                    .get(&key)
                    .is_some_and(|entry| entry.terms == terms)
                {
                    inner.entries.remove(&key);
                }
            }
        }
        // Keys forgotten by `forget`/failures stay in `order` until popped; trim them lazily so
        // the queue cannot outgrow the map by much.
        if inner.order.len() > 2 * REMEMBERED_SETTLEMENTS {
            let BookInner { entries, order } = &mut *inner;
            order.retain(|key| entries.contains_key(key));
        }
        response
    }
}
