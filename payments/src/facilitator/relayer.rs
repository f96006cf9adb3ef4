//! The relayer: sends settlement transactions from one key with one nonce sequence.
//!
//! - [`Relayer::send`]: one call as its own transaction (escrow calls, which the escrow only
//!   takes from the operator itself, so they cannot ride in a Multicall3 batch).
//! - [`Relayer::submit`]: a call that may share its transaction. Calls submitted while the
//!   relayer is busy sending, or while other settlements [announced](Relayer::announce) are still
//!   being verified (for at most the batch window), leave together as one Multicall3
//!   `aggregate3` with `allowFailure` on every call, so one failing call never reverts the others.
//!   Whether a call succeeded is read from the receipt by the caller, never assumed.
//! - [`Relayer::fund`]: native currency to a payer whose signed ERC-20 approval needs gas.
//! - [`Broadcast`]: the transaction at one nonce, watched until that nonce is used. When no
//!   receipt comes within the resend bound, the same call is sent again at the same nonce with
//!   higher fees: a stuck transaction is replaced and a dropped one restored, never doubled, as a
//!   nonce is used once and every version carries the same calls. Whichever version is mined is
//!   the outcome.
//!
//! Nonces are assigned here rather than by a provider filler: the next nonce sits behind an
//! async mutex held only for the `eth_sendRawTransaction` round trip, so sends queue for a nonce
//! but wait for their receipts in parallel: on a chain that mines every few seconds, every
//! settlement that arrives within a block is sent before the next one, at consecutive nonces,
//! however many are in flight. A failed send forgets the cached nonce, and the next send
//! re-reads the node's pending count, which resynchronises after a "nonce too low" or after
//! another process used the same key. Senders that share a key can take [turns](super::turns)
//! instead, so they never conflict.
//!
//! The relayer follows the chain head (`follower`): one task per relayer watches every
//! broadcast. While the chain mines a transaction at once (anvil's automine, fast L2s), each new
//! broadcast is looked up by hash within milliseconds; on a chain that mines on a schedule it
//! reads the head instead and, per new block, that block's receipts (`eth_getBlockReceipts`), so
//! the cost of watching does not grow with the transactions in flight.
//!
//! A relayer that sends each call alone can measure a call's gas ahead of its send
//! ([`Relayer::prepare`]): the settlement of a deliverable being judged is measured while it is
//! judged, and its send, moments later, takes that measurement instead of asking the node again.
//!
//! On a chain that mines in milliseconds the relayer can send with
//! `eth_sendRawTransactionSync`: the node answers with the receipt, so nothing polls for it. The
//! nonce is then held until the answer, which queues the next sends behind the block and grows
//! the batches, but for at most [`SYNC_SEND_HOLD`]: an answer that has not come by then means the
//! chain mines on a schedule, and holding the nonce for a block would allow one transaction per
//! block. The relayer then lets the next send go, watches the transaction like any other, and
//! sends plainly until the chain is seen mining at once again. A node without the method gets
//! plain sends from then on.

mod follower;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use alloy::eips::eip1559::Eip1559Estimation;
use alloy::eips::eip2718::Encodable2718;
use alloy::network::{EthereumWallet, NetworkTransactionBuilder, TransactionBuilder};
use alloy::primitives::{Address, Bytes, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionInput, TransactionReceipt, TransactionRequest};
use alloy::sol_types::SolCall;
use alloy::transports::{RpcError, TransportError};
use tokio::sync::{Mutex, MutexGuard, Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use self::follower::Follower;
use super::turns::SendTurns;
use crate::exact::onchain::revert_message;
use crate::multicall::IMulticall3;

/// Attempts per send when the node reports a nonce conflict (another sender used the key, or a
/// previous send's fate was unknown).
const NONCE_ATTEMPTS: u32 = 4;

/// Longest a sync send holds the nonce. A chain that mines at once answers within
/// milliseconds (a batch of 32 transfers on a busy 2-core devnet in tens of them); one that has
/// not answered by then mines on a schedule, and the next send must not wait for its block.
const SYNC_SEND_HOLD: Duration = Duration::from_millis(250);

/// How long the answer of a sync send is awaited at all (the node's own wait may be longer).
/// A transaction still unmined is watched by the follower either way.
const SYNC_SEND_WAIT: Duration = Duration::from_secs(1);

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// How long a fee estimate (`eth_feeHistory`) serves first sends. A base fee rises at most an
/// eighth per block and the estimate's max fee leaves room for it to double, so an estimate
/// this old still gets a transaction mined; one whose fees fall behind all the same is sent
/// again with fees asked anew (see [`Core::resend`]). At 200 settlements a second this is two
/// fee requests a second instead of one per transaction.
const FEE_ESTIMATE_REUSE: Duration = Duration::from_millis(500);

/// How long a gas measurement made ahead of its send ([`Relayer::prepare`]) may serve that send,
/// from the node's answer. The measurement is the send's own simulation, run earlier: the chain
/// may move in between (the payer spends the balance), and a call measured before that is sent
/// and reverts on chain at the relayer's cost, where a measurement at the send would have
/// refused it unsent. So the head start is kept short: a settlement prepared as its deliverable
/// arrives is sent about a millisecond later (after its verification and two store writes, on a
/// 2-core devnet), and one whose judging takes longer than this is measured again.
const PREPARED_MAX_AGE: Duration = Duration::from_millis(500);

/// Most measurements waiting for their sends. Each is one call's calldata; one never sent (its
/// deliverable was rejected) leaves after [`PREPARED_MAX_AGE`].
const PREPARED_MAX: usize = 1024;

/// Why a transaction was not sent.
#[derive(Debug)]
pub(crate) enum SendError {
    /// Gas estimation reverted: the call would fail if mined now.
    Reverted(String),
    /// The node could not be asked, or refused for a reason that is not about the call.
    Rpc(TransportError),
}

impl From<TransportError> for SendError {
    fn from(error: TransportError) -> Self {
        Self::Rpc(error)
    }
}

impl SendError {
    /// The same error for another caller (transport errors are not `Clone`).
    fn duplicate(&self) -> Self {
        match self {
            Self::Reverted(message) => Self::Reverted(message.clone()),
            Self::Rpc(RpcError::ErrorResp(payload)) => {
                Self::Rpc(RpcError::ErrorResp(payload.clone()))
            }
            Self::Rpc(error) => Self::Rpc(TransportError::local_usage_str(&error.to_string())),
        }
    }
}

/// One contract call to make from the relayer.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) to: Address,
    pub(crate) calldata: Bytes,
}

/// How a relayer sends.
#[derive(Debug, Clone)]
pub(crate) struct RelayerOptions {
    /// The Multicall3 to batch through; `None` sends every call on its own.
    pub(crate) multicall: Option<Address>,
    /// Most calls in one batch.
    pub(crate) batch_max: usize,
    /// Longest wait for announced calls to join a batch.
    pub(crate) batch_window: Duration,
    /// How long a transaction may go without a receipt before it is sent again.
    pub(crate) resend_after: Duration,
    /// Longest wait between receipt polls.
    pub(crate) poll_interval: Duration,
    /// Send with `eth_sendRawTransactionSync`, signing with this wallet for this chain id.
    pub(crate) sync_send: Option<SyncSend>,
    /// Turns on the key, when other senders may use it too.
    pub(crate) turns: Option<Arc<dyn SendTurns>>,
}

/// What a sync send needs to sign its transaction itself: the hash must be known before the
/// node answers, to watch the transaction when the answer does not come.
#[derive(Debug, Clone)]
pub(crate) struct SyncSend {
    pub(crate) wallet: EthereumWallet,
    pub(crate) chain_id: u64,
}

/// Sends transactions from one relayer key.
pub(crate) struct Relayer {
    core: Arc<Core>,
    batcher: Option<Batcher>,
    /// Stops the batcher and every watcher when the relayer goes away.
    _stop: DropGuard,
}

impl std::fmt::Debug for Relayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relayer")
            .field("address", &self.core.address)
            .field("batching", &self.batcher.is_some())
            .finish_non_exhaustive()
    }
}

struct Core {
    provider: DynProvider,
    address: Address,
    next_nonce: Mutex<Option<u64>>,
    /// The last fee estimate and when it was asked for (see [`FEE_ESTIMATE_REUSE`]).
    fees: StdMutex<Option<(Instant, Eip1559Estimation)>>,
    resend_after: Duration,
    sync_send: Option<SyncSend>,
    /// Cleared when the node turns out not to know `eth_sendRawTransactionSync`.
    sync_supported: AtomicBool,
    turns: Option<Arc<dyn SendTurns>>,
    /// Gas measurements started ahead of their sends ([`Relayer::prepare`]), by call.
    prepared: StdMutex<HashMap<(Address, Bytes), Arc<Prepared>>>,
    /// Watches every broadcast until its nonce is used.
    follower: Follower,
    stop: CancellationToken,
}

/// A call's gas measurement, started before its send.
struct Prepared {
    started: Instant,
    /// The gas limit and when the node answered; `None` when the call would revert or the node
    /// could not be asked (the send then measures again, and answers for it).
    measured: tokio::sync::OnceCell<Option<(u64, Instant)>>,
}

impl Prepared {
    /// The measurement of `call`: made here unless it is already under way, then awaited.
    async fn measure(&self, core: &Core, call: &Call) -> Option<(u64, Instant)> {
        *self
            .measured
            .get_or_init(|| async {
                let gas = core.gas_limit(call.to, call.calldata.clone()).await.ok()?;
                Some((gas, Instant::now()))
            })
            .await
    }
}

/// What the node said to a send.
enum Sent {
    /// It holds the transaction, not yet mined.
    Accepted(TxHash),
    /// It mined the transaction (a sync send).
    Mined(Arc<TransactionReceipt>),
    /// A sync send not answered within [`SYNC_SEND_HOLD`]: the node holds the transaction (or
    /// may: the answer may still say otherwise).
    Unanswered(TxHash, JoinHandle<SyncAnswer>),
}

/// What came of a sync send: the receipt, the node's refusal, or nothing within
/// [`SYNC_SEND_WAIT`].
type SyncAnswer = Result<Result<TransactionReceipt, TransportError>, tokio::time::error::Elapsed>;

struct Batcher {
    queue: mpsc::UnboundedSender<Queued>,
    verifying: Arc<Verifying>,
}

/// How many announced settlements are still being verified: while any are, a batch waits for
/// them (up to the window) instead of leaving without them.
#[derive(Default)]
struct Verifying {
    count: AtomicUsize,
    changed: Notify,
}

struct Queued {
    call: Call,
    reply: oneshot::Sender<Result<Arc<Broadcast>, SendError>>,
}

/// A settlement being verified that will probably [`Relayer::submit`] soon. Dropping it (the
/// payment was refused) or submitting withdraws it.
pub(crate) struct Announcement {
    verifying: Option<Arc<Verifying>>,
}

impl Drop for Announcement {
    fn drop(&mut self) {
        if let Some(verifying) = self.verifying.take() {
            verifying.count.fetch_sub(1, Ordering::AcqRel);
            verifying.changed.notify_waiters();
        }
    }
}

/// The transaction at one nonce, in all the versions sent.
pub(crate) struct Broadcast {
    nonce: u64,
    first: TxHash,
    /// Hashes of the versions sent again at this nonce, the latest last.
    resent: StdMutex<Vec<TxHash>>,
    fate: watch::Sender<Option<Fate>>,
    /// Set when the node turned the first version down after the relayer had moved on (a sync
    /// send's late refusal): the follower sends it again at once, so no later nonce waits on a
    /// gap.
    refused: AtomicBool,
    /// The relayer's stop: nobody waits for a fate once it is shutting down.
    stop: CancellationToken,
}

impl std::fmt::Debug for Broadcast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broadcast")
            .field("nonce", &self.nonce)
            .field("hashes", &self.hashes())
            .finish_non_exhaustive()
    }
}

/// How a broadcast ended.
#[derive(Debug, Clone)]
pub(crate) enum Fate {
    /// One of its versions was mined (successful or reverted: read the receipt).
    Mined(Arc<TransactionReceipt>),
    /// Its nonce was used by a transaction this relayer did not send here: none of its calls ran.
    Superseded,
}

impl Broadcast {
    /// The most recent version's hash.
    pub(crate) fn latest(&self) -> TxHash {
        let resent = self.resent.lock().unwrap_or_else(PoisonError::into_inner);
        resent.last().copied().unwrap_or(self.first)
    }

    /// Every version's hash, the first first.
    fn hashes(&self) -> Vec<TxHash> {
        let resent = self.resent.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::once(self.first)
            .chain(resent.iter().copied())
            .collect()
    }

    fn add(&self, hash: TxHash) {
        self.resent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hash);
    }

    /// Records how it ended; the first fate stays.
    fn conclude(&self, fate: Fate) {
        self.fate.send_if_modified(|known| {
            if known.is_some() {
                return false;
            }
            *known = Some(fate);
            true
        });
    }

    fn concluded(&self) -> bool {
        self.fate.borrow().is_some()
    }

    /// Its fate, once known within `timeout`; `None` while still unmined.
    pub(crate) async fn fate_within(&self, timeout: Duration) -> Option<Fate> {
        let mut fate = self.fate.subscribe();
        tokio::select! {
            known = tokio::time::timeout(timeout, fate.wait_for(Option::is_some)) => match known {
                Ok(Ok(known)) => known.clone(),
                Ok(Err(_)) | Err(_) => None,
            },
            // The relayer is shutting down: nobody watches any more, the fate stays unknown.
            () = self.stop.cancelled() => self.fate.borrow().clone(),
        }
    }
}

impl Relayer {
    /// `provider` must sign for `address` (a wallet filler with the relayer key). Batching needs
    /// `options.multicall` and `options.batch_max > 1`; must run inside a tokio runtime.
    pub(crate) fn new(provider: DynProvider, address: Address, options: &RelayerOptions) -> Self {
        let stop = CancellationToken::new();
        let core = Arc::new(Core {
            provider,
            address,
            next_nonce: Mutex::new(None),
            fees: StdMutex::new(None),
            resend_after: options.resend_after,
            sync_send: options.sync_send.clone(),
            sync_supported: AtomicBool::new(true),
            turns: options.turns.clone(),
            prepared: StdMutex::default(),
            follower: Follower::new(options.poll_interval),
            stop: stop.clone(),
        });
        let batcher = match options.multicall {
            Some(multicall) if options.batch_max > 1 => {
                let (queue, calls) = mpsc::unbounded_channel();
                let verifying = Arc::new(Verifying::default());
                tokio::spawn(batch_loop(
                    Arc::clone(&core),
                    BatchLoop {
                        multicall,
                        max: options.batch_max,
                        window: options.batch_window,
                        calls,
                        verifying: Arc::clone(&verifying),
                    },
                ));
                Some(Batcher { queue, verifying })
            }
            _ => None,
        };
        Self {
            core,
            batcher,
            _stop: stop.drop_guard(),
        }
    }

    pub(crate) fn address(&self) -> Address {
        self.core.address
    }

    /// Starts measuring the gas of the call `call` makes (if any) now, for its
    /// [`Relayer::submit`] expected within [`PREPARED_MAX_AGE`], which then sends without
    /// asking the node again. Only a relayer that sends each call alone measures ahead (a batch
    /// measures itself whole); `call` is not even made otherwise.
    pub(crate) fn prepare(&self, call: impl FnOnce() -> Option<Call>) {
        if self.batcher.is_some() {
            return;
        }
        let Some(call) = call() else {
            return;
        };
        let prepared = Arc::new(Prepared {
            started: Instant::now(),
            measured: tokio::sync::OnceCell::new(),
        });
        {
            let mut waiting = self
                .core
                .prepared
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            waiting.retain(|_, waiting| waiting.started.elapsed() < PREPARED_MAX_AGE);
            let key = (call.to, call.calldata.clone());
            if waiting.len() >= PREPARED_MAX || waiting.contains_key(&key) {
                return;
            }
            waiting.insert(key, Arc::clone(&prepared));
        }
        let core = Arc::clone(&self.core);
        tokio::spawn(async move { prepared.measure(&core, &call).await });
    }

    /// Says a settlement is being verified and will likely [`Relayer::submit`].
    pub(crate) fn announce(&self) -> Announcement {
        let verifying = self.batcher.as_ref().map(|batcher| {
            batcher.verifying.count.fetch_add(1, Ordering::AcqRel);
            Arc::clone(&batcher.verifying)
        });
        Announcement { verifying }
    }

    /// Sends `call` on its own; returns once the node accepted it.
    pub(crate) async fn send(&self, call: Call) -> Result<Arc<Broadcast>, SendError> {
        self.core.send_alone(call).await
    }

    /// Sends `wei` to `to` (the gas an `erc20ApprovalGasSponsoring` payer lacks); returns once
    /// the node accepted it.
    pub(crate) async fn fund(&self, to: Address, wei: U256) -> Result<Arc<Broadcast>, SendError> {
        let request = TransactionRequest::default()
            .from(self.core.address)
            .to(to)
            .value(wei);
        let (gas, fees) = tokio::join!(self.core.provider.estimate_gas(request), self.core.fees());
        let (gas, fees) = (gas?, fees?);
        self.core
            .broadcast(Draft {
                to,
                calldata: Bytes::new(),
                value: wei,
                gas,
                max_fee_per_gas: fees.max_fee_per_gas,
                max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            })
            .await
    }

    /// Sends `call`, possibly in one transaction with others; returns once the node accepted
    /// the transaction that carries it. `Err(Reverted)` means this call alone would revert now.
    pub(crate) async fn submit(
        &self,
        call: Call,
        announcement: Announcement,
    ) -> Result<Arc<Broadcast>, SendError> {
        let Some(batcher) = &self.batcher else {
            drop(announcement);
            return self.core.send_alone(call).await;
        };
        let (reply, answer) = oneshot::channel();
        let queued = batcher.queue.send(Queued { call, reply });
        // Withdrawn only once queued, so a waiting batch sees the call before the count drops.
        drop(announcement);
        if queued.is_err() {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }
}

fn stopped() -> SendError {
    SendError::Rpc(TransportError::local_usage_str(
        "the relayer is shutting down",
    ))
}

struct BatchLoop {
    multicall: Address,
    max: usize,
    window: Duration,
    calls: mpsc::UnboundedReceiver<Queued>,
    verifying: Arc<Verifying>,
}

/// Forms batches: the first queued call opens one, which takes whatever else is queued and,
/// while announced settlements are still being verified, waits for them until the window closes
/// or the batch is full. A batch is sent before the next is formed, so calls queue up while the
/// relayer is busy and the batches grow with the load.
async fn batch_loop(core: Arc<Core>, mut batches: BatchLoop) {
    loop {
        let first = tokio::select! {
            queued = batches.calls.recv() => match queued {
                Some(queued) => queued,
                None => return,
            },
            () = core.stop.cancelled() => return,
        };
        let mut batch = vec![first];
        let deadline = Instant::now() + batches.window;
        loop {
            while batch.len() < batches.max {
                match batches.calls.try_recv() {
                    Ok(queued) => batch.push(queued),
                    Err(_) => break,
                }
            }
            if batch.len() >= batches.max {
                break;
            }
            let changed = batches.verifying.changed.notified();
            tokio::pin!(changed);
            // Registered before reading the count, so a withdrawal in between still wakes us.
            changed.as_mut().enable();
            if batches.verifying.count.load(Ordering::Acquire) == 0 {
                break;
            }
            tokio::select! {
                queued = batches.calls.recv() => match queued {
                    Some(queued) => batch.push(queued),
                    None => break,
                },
                () = &mut changed => {}
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        core.send_batch(batches.multicall, batch).await;
    }
}

/// A transaction ready to sign but for its nonce.
#[derive(Debug, Clone)]
struct Draft {
    to: Address,
    calldata: Bytes,
    /// Wei sent along: zero for calls, the amount for a gas funding ([`Relayer::fund`]).
    value: U256,
    gas: u64,
    max_fee_per_gas: u128,
    max_priority_fee_per_gas: u128,
}

impl Draft {
    fn request(&self, from: Address, nonce: u64) -> TransactionRequest {
        TransactionRequest::default()
            .from(from)
            .to(self.to)
            .input(TransactionInput::new(self.calldata.clone()))
            .value(self.value)
            .gas_limit(self.gas)
            .max_fee_per_gas(self.max_fee_per_gas)
            .max_priority_fee_per_gas(self.max_priority_fee_per_gas)
            .nonce(nonce)
    }

    /// The fees of a replacement: a quarter above the last (nodes want at least a tenth more to
    /// replace a pending transaction), or what the chain asks now if that is more.
    fn bump(&mut self, current: Option<(u128, u128)>) {
        let up = |fee: u128| fee.saturating_add(fee / 4).saturating_add(1);
        let (max_fee, priority) = current.unwrap_or_default();
        self.max_priority_fee_per_gas = up(self.max_priority_fee_per_gas).max(priority);
        self.max_fee_per_gas = up(self.max_fee_per_gas)
            .max(max_fee)
            .max(self.max_priority_fee_per_gas);
    }
}

impl Core {
    /// Fees for a first send: the last estimate while it is recent, else a new one.
    async fn fees(&self) -> Result<Eip1559Estimation, TransportError> {
        let recent = *self.fees.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((asked, fees)) = recent
            && asked.elapsed() < FEE_ESTIMATE_REUSE
        {
            return Ok(fees);
        }
        let asked = Instant::now();
        let fees = self.provider.estimate_eip1559_fees().await?;
        *self.fees.lock().unwrap_or_else(PoisonError::into_inner) = Some((asked, fees));
        Ok(fees)
    }

    /// Estimates `call` from the relayer: `Reverted` when it would revert now.
    async fn estimate(&self, to: Address, calldata: Bytes) -> Result<u64, SendError> {
        let request = TransactionRequest::default()
            .from(self.address)
            .to(to)
            .input(TransactionInput::new(calldata));
        self.provider
            .estimate_gas(request)
            .await
            .map_err(|error| match revert_message(&error) {
                Some(message) => SendError::Reverted(message),
                None => error.into(),
            })
    }

    /// The gas limit for a call, from one run of it: `eth_createAccessList` reports the gas a
    /// call used, where `eth_estimateGas` runs it again and again in a search (several times
    /// slower, most of all for a batch of signature checks). Nodes without the method get the
    /// search. `Reverted` when the call would revert now.
    async fn gas_limit(&self, to: Address, calldata: Bytes) -> Result<u64, SendError> {
        let request = TransactionRequest::default()
            .from(self.address)
            .to(to)
            .input(TransactionInput::new(calldata.clone()));
        match self.provider.create_access_list(&request).await {
            Ok(result) => match result.error {
                Some(message) => Err(SendError::Reverted(message)),
                None => Ok(limit_for_used(
                    u64::try_from(result.gas_used).unwrap_or(u64::MAX),
                )),
            },
            Err(error) => match revert_message(&error) {
                Some(message) => Err(SendError::Reverted(message)),
                None => {
                    tracing::debug!(relayer = %self.address, %error, "eth_createAccessList failed, estimating instead");
                    self.estimate(to, calldata).await.map(with_margin)
                }
            },
        }
    }

    /// The gas limit for `call`: its measurement made ahead ([`Relayer::prepare`]), awaited if
    /// still under way, when that found the call would not revert and is recent; else measured
    /// now.
    async fn gas_for(&self, call: &Call) -> Result<u64, SendError> {
        let prepared = self
            .prepared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(call.to, call.calldata.clone()));
        if let Some(prepared) = prepared
            && let Some((gas, answered)) = prepared.measure(self, call).await
            && answered.elapsed() < PREPARED_MAX_AGE
        {
            return Ok(gas);
        }
        self.gas_limit(call.to, call.calldata.clone()).await
    }

    async fn send_alone(self: &Arc<Self>, call: Call) -> Result<Arc<Broadcast>, SendError> {
        // Estimation and fees happen before taking the nonce lock, so only the send itself is
        // serialised.
        let (gas, fees) = tokio::join!(self.gas_for(&call), self.fees());
        let (gas, fees) = (gas?, fees?);
        self.broadcast(Draft {
            to: call.to,
            calldata: call.calldata,
            value: U256::ZERO,
            gas,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
        })
        .await
    }

    /// Sends a batch and answers each of its callers.
    async fn send_batch(self: &Arc<Self>, multicall: Address, batch: Vec<Queued>) {
        if batch.len() == 1 {
            let Some(Queued { call, reply }) = batch.into_iter().next() else {
                return;
            };
            let _ = reply.send(self.send_alone(call).await);
            return;
        }
        let calls = |allow_failure: bool| {
            IMulticall3::aggregate3Call {
                calls: batch
                    .iter()
                    .map(|queued| IMulticall3::Call3 {
                        target: queued.call.to,
                        allowFailure: allow_failure,
                        callData: queued.call.calldata.clone(),
                    })
                    .collect(),
            }
            .abi_encode()
        };
        // The gas is measured with every call required to succeed: with failures allowed, a
        // node's gas search may settle on a limit at which the outer call completes while inner
        // calls run out of gas. A revert here means some call fails now, alone or after its
        // siblings (one payer's two payments exceeding the balance): then every call goes
        // alone, and the ones that revert get their own refusal.
        let (gas, fees) = tokio::join!(self.gas_limit(multicall, calls(false).into()), self.fees());
        let sent = match (gas, fees) {
            (Err(SendError::Reverted(message)), _) => {
                tracing::debug!(relayer = %self.address, calls = batch.len(), %message, "batch would revert, sending its calls alone");
                for Queued { call, reply } in batch {
                    let core = Arc::clone(self);
                    tokio::spawn(async move {
                        let _ = reply.send(core.send_alone(call).await);
                    });
                }
                return;
            }
            (Err(error), _) => Err(error),
            (_, Err(error)) => Err(error.into()),
            (Ok(gas), Ok(fees)) => {
                self.broadcast(Draft {
                    to: multicall,
                    calldata: calls(true).into(),
                    value: U256::ZERO,
                    gas,
                    max_fee_per_gas: fees.max_fee_per_gas,
                    max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
                })
                .await
            }
        };
        tracing::debug!(relayer = %self.address, calls = batch.len(), "batch sent");
        for Queued { reply, .. } in batch {
            let answer = match &sent {
                Ok(broadcast) => Ok(Arc::clone(broadcast)),
                Err(error) => Err(error.duplicate()),
            };
            let _ = reply.send(answer);
        }
    }

    /// Takes the next nonce (and the key's turn, when others send from it), sends, and starts
    /// watching the transaction.
    async fn broadcast(self: &Arc<Self>, draft: Draft) -> Result<Arc<Broadcast>, SendError> {
        let mut next_nonce = self.next_nonce.lock().await;
        let turn = match &self.turns {
            Some(turns) => turns.take().await,
            None => None,
        };
        let sent = self
            .send_at_next_nonce(&mut next_nonce, &draft, turn.is_some())
            .await;
        if let Some(turn) = turn {
            turn.end().await;
        }
        drop(next_nonce);
        let (nonce, sent) = sent?;
        Ok(self.track(nonce, sent, draft))
    }

    /// Sends `draft` at the next nonce, retrying on nonce conflicts. Within a turn on a shared
    /// key the node's pending count is read first: the others' sends moved it.
    async fn send_at_next_nonce(
        &self,
        next_nonce: &mut MutexGuard<'_, Option<u64>>,
        draft: &Draft,
        in_turn: bool,
    ) -> Result<(u64, Sent), SendError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let nonce = match **next_nonce {
                Some(nonce) if !in_turn => nonce,
                cached => {
                    let pending = self
                        .provider
                        .get_transaction_count(self.address)
                        .pending()
                        .await?;
                    // A node behind a load balancer may not count this sender's own last send
                    // yet: never go below what this sender used.
                    cached.map_or(pending, |cached| cached.max(pending))
                }
            };
            let request = draft.request(self.address, nonce);
            let sent = match &self.sync_send {
                Some(sync)
                    if self.sync_supported.load(Ordering::Relaxed)
                        && self.follower.mines_at_once() =>
                {
                    self.send_and_wait(sync, request).await
                }
                _ => self
                    .provider
                    .send_transaction(request)
                    .await
                    .map(|pending| Sent::Accepted(*pending.tx_hash())),
            };
            match sent {
                Ok(sent) => {
                    **next_nonce = Some(nonce + 1);
                    return Ok((nonce, sent));
                }
                Err(error) => {
                    // Whether the node kept the transaction is unknown; ask it next time.
                    **next_nonce = None;
                    if is_nonce_conflict(&error) && attempt < NONCE_ATTEMPTS {
                        tracing::warn!(relayer = %self.address, nonce, attempt, "nonce conflict, resyncing");
                        continue;
                    }
                    return Err(error.into());
                }
            }
        }
    }

    /// Signs `request` and sends it with `eth_sendRawTransactionSync`. `Err` only when the node
    /// refused it; an answer that does not come within [`SYNC_SEND_HOLD`] leaves the
    /// transaction to be watched while the answer is still awaited, and one that is lost leaves
    /// it watched (and sent again at its nonce if the node never had it).
    async fn send_and_wait(
        &self,
        sync: &SyncSend,
        request: TransactionRequest,
    ) -> Result<Sent, TransportError> {
        let envelope = request
            .with_chain_id(sync.chain_id)
            .build(&sync.wallet)
            .await
            .map_err(|error| TransportError::local_usage_str(&format!("signing: {error}")))?;
        let hash = *envelope.tx_hash();
        let encoded = Bytes::from(envelope.encoded_2718());
        let provider = self.provider.clone();
        let raw = encoded.clone();
        // Its own task, so the request is not cut off when the relayer stops holding the nonce.
        let mut answer = tokio::spawn(async move {
            tokio::time::timeout(SYNC_SEND_WAIT, provider.send_raw_transaction_sync(&raw)).await
        });
        let Ok(joined) = tokio::time::timeout(SYNC_SEND_HOLD, &mut answer).await else {
            tracing::debug!(relayer = %self.address, tx = %hash, "sync send not mined at once: the chain mines on a schedule, sending plainly");
            self.follower.mined_later();
            return Ok(Sent::Unanswered(hash, answer));
        };
        match joined {
            Ok(Ok(Ok(receipt))) => Ok(Sent::Mined(Arc::new(receipt))),
            Ok(Ok(Err(error))) if is_method_not_found(&error) => {
                tracing::warn!(relayer = %self.address, "the node has no eth_sendRawTransactionSync; sending without it");
                self.sync_supported.store(false, Ordering::Relaxed);
                let pending = self.provider.send_raw_transaction(&encoded).await?;
                Ok(Sent::Accepted(*pending.tx_hash()))
            }
            Ok(Ok(Err(error @ RpcError::ErrorResp(_)))) if !is_sync_wait_over(&error) => Err(error),
            Ok(Ok(Err(error))) => {
                tracing::debug!(relayer = %self.address, tx = %hash, %error, "sync send unanswered, watching");
                Ok(Sent::Accepted(hash))
            }
            Ok(Err(_)) | Err(_) => {
                tracing::debug!(relayer = %self.address, tx = %hash, "sync send not mined in time, watching");
                Ok(Sent::Accepted(hash))
            }
        }
    }

    /// The broadcast of what was sent at `nonce`, watched until mined unless it already is.
    fn track(self: &Arc<Self>, nonce: u64, sent: Sent, draft: Draft) -> Arc<Broadcast> {
        let (first, fate, late_answer) = match sent {
            Sent::Accepted(hash) => (hash, None, None),
            Sent::Mined(receipt) => (receipt.transaction_hash, Some(Fate::Mined(receipt)), None),
            Sent::Unanswered(hash, answer) => (hash, None, Some(answer)),
        };
        let mined = fate.is_some();
        let broadcast = Arc::new(Broadcast {
            nonce,
            first,
            resent: StdMutex::new(Vec::new()),
            fate: watch::Sender::new(fate),
            refused: AtomicBool::new(false),
            stop: self.stop.clone(),
        });
        if !mined {
            self.follower.watch(self, Arc::clone(&broadcast), draft);
        }
        if let Some(answer) = late_answer {
            tokio::spawn(Arc::clone(self).late_sync_answer(Arc::clone(&broadcast), answer));
        }
        broadcast
    }

    /// The answer of a sync send that came after the relayer moved on: a receipt concludes the
    /// broadcast, a refusal has it sent again at once (later nonces wait on this one).
    async fn late_sync_answer(
        self: Arc<Self>,
        broadcast: Arc<Broadcast>,
        answer: JoinHandle<SyncAnswer>,
    ) {
        match answer.await {
            Ok(Ok(Ok(receipt))) => broadcast.conclude(Fate::Mined(Arc::new(receipt))),
            Ok(Ok(Err(error)))
                if is_method_not_found(&error)
                    || (matches!(error, RpcError::ErrorResp(_)) && !is_sync_wait_over(&error)) =>
            {
                if is_method_not_found(&error) {
                    self.sync_supported.store(false, Ordering::Relaxed);
                }
                tracing::warn!(relayer = %self.address, nonce = broadcast.nonce, %error, "a sync send was refused after the relayer moved on; sending it again");
                broadcast.refused.store(true, Ordering::Release);
                self.follower.wake();
            }
            // Lost or not mined within the wait: the follower watches it.
            _ => {}
        }
    }

    /// A receipt of any version of `broadcast`, newest version first.
    async fn find_receipt(
        &self,
        broadcast: &Broadcast,
    ) -> Result<Option<TransactionReceipt>, TransportError> {
        for hash in broadcast.hashes().into_iter().rev() {
            if let Some(receipt) = self.provider.get_transaction_receipt(hash).await? {
                return Ok(Some(receipt));
            }
        }
        Ok(None)
    }

    /// Sends `draft` again at the broadcast's nonce with bumped fees, unless the nonce is used.
    async fn resend(
        &self,
        broadcast: &Broadcast,
        draft: &mut Draft,
    ) -> Result<Resent, TransportError> {
        let mined_nonces = self
            .provider
            .get_transaction_count(self.address)
            .latest()
            .await?;
        if mined_nonces > broadcast.nonce {
            return Ok(Resent::NonceUsed);
        }
        let current = self
            .provider
            .estimate_eip1559_fees()
            .await
            .ok()
            .map(|fees| (fees.max_fee_per_gas, fees.max_priority_fee_per_gas));
        draft.bump(current);
        match self
            .provider
            .send_transaction(draft.request(self.address, broadcast.nonce))
            .await
        {
            Ok(pending) => {
                tracing::warn!(
                    relayer = %self.address,
                    nonce = broadcast.nonce,
                    replaced = %broadcast.latest(),
                    tx = %pending.tx_hash(),
                    max_fee_per_gas = draft.max_fee_per_gas,
                    "no receipt in time, sent again at the same nonce"
                );
                broadcast.add(*pending.tx_hash());
                Ok(Resent::Sent)
            }
            Err(error) if is_nonce_too_low(&error) => Ok(Resent::NonceUsed),
            Err(error) => Err(error),
        }
    }

    /// What comes of a broadcast that went without a receipt past the resend bound (or whose
    /// first version the node refused late): sent again at its nonce, or concluded when the
    /// nonce turns out used.
    async fn resend_unmined(&self, broadcast: &Broadcast, draft: &mut Draft) {
        match self.resend(broadcast, draft).await {
            Ok(Resent::Sent) => {}
            Ok(Resent::NonceUsed) => match self.find_receipt(broadcast).await {
                Ok(Some(receipt)) => broadcast.conclude(Fate::Mined(Arc::new(receipt))),
                Ok(None) => {
                    tracing::warn!(relayer = %self.address, nonce = broadcast.nonce, "nonce used by a transaction not sent here");
                    *self.next_nonce.lock().await = None;
                    broadcast.conclude(Fate::Superseded);
                }
                Err(_) => {}
            },
            Err(error) => {
                tracing::warn!(relayer = %self.address, nonce = broadcast.nonce, %error, "resend failed, retrying later");
            }
        }
    }
}

enum Resent {
    Sent,
    NonceUsed,
}

/// A fifth on top of the estimate: state can shift between estimate and inclusion.
fn with_margin(gas: u64) -> u64 {
    gas.saturating_add(gas / 5)
}

/// A gas limit that covers a run reported to use `used`: refunds (at most a fifth of the gas
/// spent, EIP-3529) come off `used` only at the end, each call leaves a 64th of the gas behind
/// in its caller (EIP-150), and the access list the node priced in is not sent. Gas left over is
/// not paid for, so the limit errs high.
fn limit_for_used(used: u64) -> u64 {
    let spent = used.saturating_add(used / 4);
    with_margin(spent.saturating_add(spent / 63))
}

fn error_message(error: &TransportError) -> Option<String> {
    let RpcError::ErrorResp(payload) = error else {
        return None;
    };
    Some(payload.message.to_ascii_lowercase())
}

fn is_nonce_conflict(error: &TransportError) -> bool {
    error_message(error).is_some_and(|message| {
        message.contains("nonce")
            || message.contains("already known")
            || message.contains("already imported")
            || message.contains("underpriced")
    })
}

fn is_nonce_too_low(error: &TransportError) -> bool {
    error_message(error).is_some_and(|message| message.contains("nonce too low"))
}

/// Whether the node behind `provider` has `eth_sendRawTransactionSync`: asked with an empty
/// transaction, which a node with the method refuses as undecodable and one without it as an
/// unknown method. A node that cannot be asked is taken as not having it (plain sends work on
/// every node).
pub(crate) async fn node_has_sync_send(provider: &DynProvider) -> bool {
    let asked = provider
        .raw_request::<_, serde_json::Value>("eth_sendRawTransactionSync".into(), ("0x",))
        .await;
    match asked {
        Ok(_) => true,
        Err(error) if is_method_not_found(&error) => false,
        Err(RpcError::ErrorResp(_)) => true,
        Err(_) => false,
    }
}

fn is_method_not_found(error: &TransportError) -> bool {
    matches!(error, RpcError::ErrorResp(payload) if payload.code == METHOD_NOT_FOUND)
}

/// The node's own wait for a sync send's receipt ran out: the transaction is in its pool.
/// EIP-7966 answers code 4; anvil an internal error about a timeout.
fn is_sync_wait_over(error: &TransportError) -> bool {
    matches!(error, RpcError::ErrorResp(payload) if payload.code == 4)
        || error_message(error).is_some_and(|message| message.contains("timeout"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_pays_at_least_a_quarter_more_and_never_less_than_the_chain_asks() {
        let mut draft = Draft {
            to: Address::ZERO,
            calldata: Bytes::new(),
            value: U256::ZERO,
            gas: 100_000,
            max_fee_per_gas: 2_000,
            max_priority_fee_per_gas: 1_000,
        };
        draft.bump(None);
        assert_eq!(
            (draft.max_fee_per_gas, draft.max_priority_fee_per_gas),
            (2_501, 1_251)
        );
        draft.bump(Some((10_000, 3_000)));
        assert_eq!(
            (draft.max_fee_per_gas, draft.max_priority_fee_per_gas),
            (10_000, 3_000)
        );
        // A priority fee above the cap would be refused: the cap follows it.
        let mut skewed = Draft {
            max_fee_per_gas: 10,
            max_priority_fee_per_gas: 100,
            ..draft
        };
        skewed.bump(None);
        assert!(skewed.max_fee_per_gas >= skewed.max_priority_fee_per_gas);
    }
}
