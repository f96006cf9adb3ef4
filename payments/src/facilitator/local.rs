//! The in-process facilitator: verifies and settles `exact` EIP-3009 payments on the EVM
//! chains of its [`FacilitatorConfig`], paying gas from one relayer key per chain; `exact` over
//! Permit2 and `upto` are in [`permit2`] (the `erc20ApprovalGasSponsoring` steps before a
//! Permit2 settlement in [`approval`]), `auth-capture` in [`auth_capture`].
//!
//! Settlement follows the reference facilitator (`@x402/evm`): an authorization moves money at
//! most once, and `success: true` is answered at most once per authorization. Per payment key
//! (network, asset, payer, nonce):
//!
//! | situation | `/settle` answers |
//! |---|---|
//! | first settle, transfer mined | `success: true` with the transaction |
//! | concurrent settles of one payment | they queue on a per-key lock: one broadcasts and gets `success: true`, the others `invalid_exact_evm_nonce_already_used` |
//! | receipt not seen in time | `settlement_pending` with the hash (`success: false`); the payment is remembered as pending |
//! | retry after `settlement_pending` | waits on that broadcast (which the relayer re-sends at the same nonce while it stays unmined), never sends another: mined → what its receipt shows (`success: true` the first time), still unmined → `settlement_pending` again, nonce taken by a transaction not sent here → settles afresh |
//! | retry after a success was answered, in this process | `invalid_exact_evm_nonce_already_used`, `transaction: ""`, the original transaction named in `errorMessage` |
//! | settle of an authorization used on chain (after a restart, or by another facilitator) | the same refusal; the original transaction is looked up by its `AuthorizationUsed` log (with the matching `Transfer`) for the message |
//!
//! Settlements in flight together share transactions (see [`super::relayer`]): each payment is
//! verified and simulated on its own first (a payment that would revert now gets its own
//! refusal), and after the shared transaction is mined each one's outcome is read from the
//! token's logs for its payer and nonce, so a sibling's failure never reads as a success or
//! sinks another. A call that failed inside a mined batch is re-verified to name the reason
//! (nonce used, balance short, …), with the batch named as the broadcast transaction.
//!
//! A duplicate settle must fail because resource servers such as `@x402/express` rely on it
//! to refuse a replayed payment header. Whoever needs to know whether a payment settled after
//! an unknown outcome asks the chain ([`crate::exact::onchain::find_settlement`]), as the
//! refusal itself does not say whether the earlier settle was theirs.

mod approval;
mod auth_capture;
mod mined;
mod permit2;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex as StdMutex, PoisonError, Weak};
use std::time::Duration;

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, TxHash, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::TransactionReceipt;
use alloy::transports::TransportError;
use async_trait::async_trait;
use tokio::sync::{Mutex, OwnedMutexGuard};

use self::mined::MinedReceipts;
use super::config::FacilitatorConfig;
use super::relayer::{Broadcast, Call, Fate, Relayer, RelayerOptions, SendError, SyncSend};
use super::turns::KeyTurns;
use super::{Facilitator, FacilitatorError};
use crate::auth_capture::{AUTH_CAPTURE_SCHEME, EscrowAddresses};
use crate::clock::ChainClock;
use crate::exact::onchain::{
    AuthorizationInReceipt, ExactVerifier, Refusal, authorization_in_receipt, find_settlement,
    nonce_used, transfer_calldata,
};
use crate::exact::{ExactPayment, PaymentKey};
use crate::reason::Reason;
use crate::wire::{
    EXACT_SCHEME, Network, SettleRequest, SettleResponse, SupportedKind, SupportedResponse,
    UnknownFields, VerifyRequest, VerifyResponse, X402Version2,
};

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

/// In-process facilitator for `exact` (EIP-3009 and Permit2), `upto` and `auth-capture` payments on
/// configured EVM chains.
pub struct LocalFacilitator {
    chains: HashMap<Network, Arc<Chain>>,
    in_flight: KeyedLocks,
    book: SettlementBook,
    escrow_pending: auth_capture::PendingAuthorizations,
    permit2_book: permit2::Permit2Book,
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
    lookback_blocks: Option<u64>,
    escrow: EscrowAddresses,
    exact: ExactVerifier,
    /// Receipts of this chain's settlements, for [`Facilitator::mined_receipt`].
    mined: MinedReceipts,
    /// The chain's time: payments' windows are judged by it, as the token judges them.
    clock: ChainClock,
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
    /// chain id. Each relayer is its key's only sender in this process; whether other
    /// processes use the key is not asked ([`Self::connect_with_turns`] does).
    pub async fn connect(config: FacilitatorConfig) -> Result<Self, LocalFacilitatorError> {
        Self::connect_with_turns(config, None).await
    }

    /// [`Self::connect`], with each relayer taking turns on its key from `turns` (gateway
    /// instances that may share a relayer key).
    pub async fn connect_with_turns(
        config: FacilitatorConfig,
        turns: Option<&dyn KeyTurns>,
    ) -> Result<Self, LocalFacilitatorError> {
        if config.chains.is_empty() {
            return Err(LocalFacilitatorError::NoChains);
        }
        let mut chains = HashMap::new();
        for chain in config.chains {
            let network = chain.network;
            if chains.contains_key(&network) {
                return Err(LocalFacilitatorError::DuplicateNetwork(network));
            }
            let expected = network
                .chain_id()
                .ok_or_else(|| LocalFacilitatorError::NotEvm(network))?;
            let provider = ProviderBuilder::new()
                .wallet(chain.relayer_key.signer().clone())
                .connect_http(chain.rpc_url.clone())
                .erased();
            let actual = provider
                .get_chain_id()
                .await
                .map_err(|source| LocalFacilitatorError::Unreachable { network, source })?;
            if actual != expected {
                return Err(LocalFacilitatorError::ChainIdMismatch { network, actual });
            }
            let multicall = chain.multicall3_address();
            let batching = chain.settle_batch_max > 1;
            let has_multicall = !provider
                .get_code_at(multicall)
                .await
                .map_err(|source| LocalFacilitatorError::Unreachable { network, source })?
                .is_empty();
            if batching && !has_multicall {
                tracing::warn!(%network, %multicall, "no Multicall3 code: every settlement is its own transaction");
            }
            let options = RelayerOptions {
                multicall: (batching && has_multicall).then_some(multicall),
                batch_max: chain.settle_batch_max,
                batch_window: chain.settle_batch_window(),
                resend_after: chain.resend_after(),
                poll_interval: chain.receipt_poll_interval(),
                sync_send: chain.sync_send.resolve(&provider).await.then(|| SyncSend {
                    wallet: EthereumWallet::from(chain.relayer_key.signer().clone()),
                    chain_id: expected,
                }),
                turns: turns.map(|turns| turns.join(expected, chain.relayer_key.address())),
            };
            let exact = ExactVerifier::new(
                provider.clone(),
                chain.relayer_key.address(),
                has_multicall.then_some(multicall),
            );
            let entry = Chain {
                network,
                relayer: Relayer::new(provider.clone(), chain.relayer_key.address(), &options),
                clock: ChainClock::new(provider.clone()),
                provider,
                tokens: chain.tokens.as_ref().map(|t| t.iter().copied().collect()),
                receipt_timeout: chain.receipt_timeout(),
                lookback_blocks: chain.settlement_lookback_blocks,
                escrow: chain.escrow_addresses(),
                exact,
                mined: MinedReceipts::default(),
            };
            chains.insert(network, Arc::new(entry));
        }
        Ok(Self {
            chains,
            in_flight: KeyedLocks::default(),
            book: SettlementBook::default(),
            escrow_pending: auth_capture::PendingAuthorizations::default(),
            permit2_book: permit2::Permit2Book::default(),
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
        if request.payment_requirements.scheme == AUTH_CAPTURE_SCHEME {
            return self.verify_auth_capture(request).await;
        }
        if permit2::is_permit2_request(request) {
            return self.verify_permit2(request).await;
        }
        let (chain, payment) = match self.locate(request) {
            Ok(located) => located,
            Err(reason) => return Ok(VerifyResponse::invalid(reason, payer_hint(request), None)),
        };
        let payer = payment.payer();
        if let Err(reason) = payment.check_window(chain.clock.now().await?) {
            return Ok(VerifyResponse::invalid(reason, Some(payer), None));
        }
        let verdict = chain.exact.verify(&payment).await?;
        Ok(match verdict {
            Ok(_) => VerifyResponse::valid(payer),
            Err(Refusal { reason, message }) => {
                tracing::debug!(network = %chain.network, %payer, %reason, "payment refused");
                VerifyResponse::invalid(reason, Some(payer), message)
            }
        })
    }

    async fn settle(&self, request: &SettleRequest) -> Result<SettleResponse, FacilitatorError> {
        if request.payment_requirements.scheme == AUTH_CAPTURE_SCHEME {
            return self.settle_auth_capture(request).await;
        }
        if permit2::is_permit2_request(request) {
            return self.settle_permit2(request).await;
        }
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
                state: Remembered::Settled(tx_hash),
                ..
            }) => {
                // Kept in the book: the refusal must not erase the memory that answers it.
                return Ok(chain
                    .already_used(&payment, Some(tx_hash), None)
                    .into_response());
            }
            Some(Entry {
                state: Remembered::Pending(broadcast),
                ..
            }) => {
                if let Some(outcome) = chain.reconcile(&payment, &broadcast).await? {
                    return Ok(self.book.record(key, terms, outcome));
                }
                // Its nonce went to a transaction not sent here, so it never ran: settle afresh.
                self.book.forget(&key);
            }
            None => {}
        }
        let outcome = chain.settle_fresh(&payment).await?;
        Ok(self.book.record(key, terms, outcome))
    }

    /// An EIP-3009 `exact` settlement's gas is measured now (see `Relayer::prepare`); other
    /// schemes, and relayers that batch, are left to `settle`.
    fn prepare_settle(&self, request: &SettleRequest) {
        if request.payment_requirements.scheme == AUTH_CAPTURE_SCHEME
            || permit2::is_permit2_request(request)
        {
            return;
        }
        if let Ok((chain, payment)) = self.locate(request) {
            chain.prepare(&payment);
        }
    }

    fn mined_receipt(&self, transaction: TxHash) -> Option<Arc<TransactionReceipt>> {
        self.chains
            .values()
            .find_map(|chain| chain.mined.get(transaction))
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let mut networks: Vec<&Network> = self.chains.keys().collect();
        networks.sort();
        let kinds = networks
            .into_iter()
            .flat_map(|network| {
                let chain = &self.chains[network];
                let escrow = chain.escrow;
                [
                    SupportedKind {
                        x402_version: X402Version2::VALUE,
                        scheme: EXACT_SCHEME.to_owned(),
                        network: network.to_string(),
                        extra: None,
                        unknown: UnknownFields::new(),
                    },
                    SupportedKind {
                        x402_version: X402Version2::VALUE,
                        scheme: AUTH_CAPTURE_SCHEME.to_owned(),
                        network: network.to_string(),
                        // Where payers must sign for: offers name this escrow.
                        extra: Some(serde_json::json!({
                            "authCaptureEscrow": escrow.escrow.to_checksum(None),
                            "assetTransferMethods": ["eip3009"],
                        })),
                        unknown: UnknownFields::new(),
                    },
                    SupportedKind {
                        x402_version: X402Version2::VALUE,
                        scheme: crate::permit2::UPTO_SCHEME.to_owned(),
                        network: network.to_string(),
                        // The only address the payer's witness may name as settler.
                        extra: Some(serde_json::json!({
                            "facilitatorAddress": chain.relayer.address().to_checksum(None),
                        })),
                        unknown: UnknownFields::new(),
                    },
                ]
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
    /// Final success: remembered, so a retry is refused as a used nonce without asking the chain.
    Settled(SettleResponse, TxHash),
    /// Broadcast, unconfirmed: remembered so a retry reconciles instead of resending.
    Pending(SettleResponse, Arc<Broadcast>),
    /// Refused or failed: nothing to remember, a retry re-runs everything (and the chain
    /// refuses an authorization that was used meanwhile).
    Failed(SettleResponse),
}

impl Outcome {
    fn into_response(self) -> SettleResponse {
        match self {
            Self::Settled(response, _) | Self::Pending(response, _) | Self::Failed(response) => {
                response
            }
        }
    }
}

impl Chain {
    fn settled(&self, payment: &ExactPayment, tx_hash: TxHash) -> Outcome {
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %tx_hash, "payment settled");
        Outcome::Settled(
            SettleResponse::settled(&self.network, payment.payer(), tx_hash),
            tx_hash,
        )
    }

    /// The refusal of an authorization whose nonce is spent. Like the reference facilitator,
    /// `transaction` names only what this call broadcast (`broadcast`); the transaction that
    /// used the authorization, when known, is named in the message.
    fn already_used(
        &self,
        payment: &ExactPayment,
        original: Option<TxHash>,
        broadcast: Option<TxHash>,
    ) -> Outcome {
        let message = match original {
            Some(tx_hash) => format!("authorization already used by transaction {tx_hash}"),
            None => "authorization already used or cancelled".to_owned(),
        };
        self.failed(
            payment,
            Refusal {
                reason: Reason::NonceAlreadyUsed,
                message: Some(message),
            },
            broadcast,
        )
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

    /// `refusal`, unless the authorization's nonce is spent: then the used-nonce refusal, which
    /// is what the refusal really means (a spent nonce also fails simulation, may leave the
    /// balance short, and outlives the window).
    async fn used_or(
        &self,
        payment: &ExactPayment,
        refusal: Refusal,
        broadcast: Option<TxHash>,
    ) -> Result<Outcome, TransportError> {
        let used = refusal.reason == Reason::NonceAlreadyUsed
            || nonce_used(&self.provider, payment).await?;
        if !used {
            return Ok(self.failed(payment, refusal, broadcast));
        }
        // The original transaction only improves the message: a log search the node refuses
        // (range too large, pruned history) must not turn a known refusal into an unknown.
        let original = find_settlement(&self.provider, payment, self.lookback_blocks)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(network = %self.network, error = %error, "settlement log lookup failed");
                None
            });
        Ok(self.already_used(payment, original, broadcast))
    }

    /// Starts measuring the gas of `payment`'s transfer, as [`Self::settle_fresh`] will send it
    /// for a known plain payer (anyone else is verified first, and measured then).
    fn prepare(&self, payment: &ExactPayment) {
        self.relayer.prepare(|| {
            let facts = self.exact.known_plain_payer(payment)?;
            Some(Call {
                to: payment.asset,
                calldata: transfer_calldata(payment, facts.has_code).into(),
            })
        });
    }

    async fn settle_fresh(&self, payment: &ExactPayment) -> Result<Outcome, TransportError> {
        let announcement = self.relayer.announce();
        // A known plain payer's transfer is simulated by the relayer's gas measurement before
        // the send; a refusal there is named by the full verification below.
        let verdict = match payment.check_window(self.clock.now().await?) {
            Err(reason) => Err(Refusal::from(reason)),
            Ok(()) => match self.exact.known_plain_payer(payment) {
                Some(facts) => Ok(facts),
                None => self.exact.verify(payment).await?,
            },
        };
        let facts = match verdict {
            Ok(facts) => facts,
            Err(refusal) => {
                // Withdrawn at once: a batch waiting for this payment need not wait longer.
                drop(announcement);
                return self.refused(payment, refusal).await;
            }
        };

        let call = Call {
            to: payment.asset,
            calldata: transfer_calldata(payment, facts.has_code).into(),
        };
        let broadcast = match self.relayer.submit(call, announcement).await {
            Ok(broadcast) => broadcast,
            // Reverts now: maybe someone settled it, or the payer spent the balance, since it
            // was verified. Verification names which; a payment that passes it again (the
            // chain moved between the two calls) keeps the simulation's refusal.
            Err(SendError::Reverted(message)) => {
                let refusal = match self.exact.verify(payment).await? {
                    Err(refusal) => refusal,
                    Ok(_) => Refusal {
                        reason: Reason::SimulationFailed,
                        message: Some(message),
                    },
                };
                return self.refused(payment, refusal).await;
            }
            Err(SendError::Rpc(error)) => return Err(error),
        };
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %broadcast.latest(), "settlement broadcast");
        match broadcast.fate_within(self.receipt_timeout).await {
            Some(fate) => self.conclude(payment, fate).await,
            None => Ok(self.pending(payment, broadcast)),
        }
    }

    /// A payment refused before anything was sent for it.
    async fn refused(
        &self,
        payment: &ExactPayment,
        refusal: Refusal,
    ) -> Result<Outcome, TransportError> {
        // These are what an already-settled payment looks like to verification: its nonce is
        // spent, the simulation reverts, the balance may be gone, the window may have closed
        // since.
        if matches!(
            refusal.reason,
            Reason::NonceAlreadyUsed
                | Reason::SimulationFailed
                | Reason::InsufficientBalance
                | Reason::ValidBefore
        ) {
            self.used_or(payment, refusal, None).await
        } else {
            Ok(self.failed(payment, refusal, None))
        }
    }

    /// A retry of a payment whose transaction was broadcast but unconfirmed. `None` when its
    /// nonce was used by a transaction not sent here, so it never ran and may be sent again.
    async fn reconcile(
        &self,
        payment: &ExactPayment,
        broadcast: &Arc<Broadcast>,
    ) -> Result<Option<Outcome>, TransportError> {
        match broadcast.fate_within(self.receipt_timeout).await {
            Some(Fate::Superseded) => Ok(None),
            Some(fate) => self.conclude(payment, fate).await.map(Some),
            None => Ok(Some(self.pending(payment, Arc::clone(broadcast)))),
        }
    }

    fn pending(&self, payment: &ExactPayment, broadcast: Arc<Broadcast>) -> Outcome {
        let tx_hash = broadcast.latest();
        tracing::warn!(network = %self.network, tx = %tx_hash, "settlement not confirmed in time");
        let response = SettleResponse::failed(
            self.network.as_str(),
            Reason::SettlementPending,
            Some(payment.payer()),
            Some(tx_hash.to_string()),
            None,
        );
        Outcome::Pending(response, broadcast)
    }

    /// The payment's outcome from what the chain shows its transaction did.
    async fn conclude(
        &self,
        payment: &ExactPayment,
        fate: Fate,
    ) -> Result<Outcome, TransportError> {
        let receipt = match fate {
            Fate::Mined(receipt) => receipt,
            // Nothing of ours ran; the authorization may have been used by whoever took the
            // nonce's place (or by another facilitator).
            Fate::Superseded => {
                return self
                    .used_or(payment, Reason::TransactionFailed.into(), None)
                    .await;
            }
        };
        let tx_hash = receipt.transaction_hash;
        if !receipt.status() {
            // Another settler (a second facilitator on the same payment) may have been mined
            // first, reverting ours: the authorization is then used, by their transaction.
            return self
                .used_or(payment, Reason::TransactionFailed.into(), Some(tx_hash))
                .await;
        }
        match authorization_in_receipt(&receipt, payment) {
            AuthorizationInReceipt::Moved => {
                self.mined.remember(Arc::clone(&receipt));
                Ok(self.settled(payment, tx_hash))
            }
            AuthorizationInReceipt::UsedOtherwise => {
                Ok(self.failed(payment, Reason::TransferEventMismatch.into(), Some(tx_hash)))
            }
            AuthorizationInReceipt::Untouched => self.failed_in_batch(payment, &receipt).await,
        }
    }

    /// The refusal of a payment whose call failed inside a mined batch: what verification says
    /// now, or `transaction_failed` when it would pass now (a sibling ahead of it in the batch
    /// spent the balance it needed, which has come back since).
    async fn failed_in_batch(
        &self,
        payment: &ExactPayment,
        receipt: &TransactionReceipt,
    ) -> Result<Outcome, TransportError> {
        let tx_hash = receipt.transaction_hash;
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %tx_hash, "transfer failed inside a batch");
        let verdict = match payment.check_window(self.clock.now().await?) {
            Err(reason) => Err(Refusal::from(reason)),
            Ok(()) => self.exact.verify(payment).await?,
        };
        let refusal = match verdict {
            Err(refusal) => refusal,
            Ok(_) => Refusal {
                reason: Reason::TransactionFailed,
                message: Some(format!(
                    "the transfer failed inside batch transaction {tx_hash}"
                )),
            },
        };
        self.used_or(payment, refusal, Some(tx_hash)).await
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
    /// `success: true` was answered for this transaction.
    Settled(TxHash),
    /// Broadcast; no success answered yet.
    Pending(Arc<Broadcast>),
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

/// Bounded memory of settled and pending payments, oldest forgotten first. Forgetting a settled
/// payment changes nothing but cost: the chain then answers for it.
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
            Outcome::Settled(response, tx_hash) => (response, Some(Remembered::Settled(tx_hash))),
            Outcome::Pending(response, broadcast) => {
                (response, Some(Remembered::Pending(broadcast)))
            }
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
