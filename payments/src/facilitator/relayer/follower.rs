//! The relayer's watch over its broadcasts: one task per relayer follows the chain head and
//! concludes each broadcast when a version of it is mined, or sends it again at its nonce.
//!
//! How a broadcast is found depends on how the chain mines, which the follower learns from the
//! broadcasts themselves:
//!
//! | chain | lookups |
//! |---|---|
//! | mines a transaction at once (automine, fast L2s) | by hash after 1, 2, 4 … 32 ms (in parallel for all new broadcasts), as fast as the chain is |
//! | mines on a schedule | one lookup by hash after a millisecond (which notices when the chain mines at once again), then per new head the receipts of the new blocks (`eth_getBlockReceipts`, one call per block for every broadcast in flight) |
//!
//! A broadcast further behind than [`MOST_BLOCKS_SCANNED`], or on a node without
//! `eth_getBlockReceipts`, is looked up by hash. The head is read every poll interval while a
//! broadcast waits for it. A broadcast without a receipt past the resend bound is sent again at
//! its nonce (see [`Core::resend_unmined`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use alloy::eips::BlockId;
use alloy::primitives::TxHash;
use alloy::providers::Provider;
use alloy::rpc::types::TransactionReceipt;
use alloy::transports::TransportError;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Broadcast, Core, Draft, Fate, is_method_not_found};

/// When a new broadcast is first looked up by hash.
const FIRST_LOOKUP: Duration = Duration::from_millis(1);

/// Lookups by hash stop once the wait between them would pass this: a transaction not mined
/// within about 60 ms was not mined at once.
const QUICK_LOOKUPS_UNTIL: Duration = Duration::from_millis(32);

/// Most blocks whose receipts are read for a broadcast in one round; a broadcast further behind
/// (the follower was idle, or the node was unreachable for a while) is looked up by hash.
const MOST_BLOCKS_SCANNED: u64 = 8;

pub(super) struct Follower {
    /// How often the head is read while a broadcast waits for it.
    poll_interval: Duration,
    watched: StdMutex<Vec<Watched>>,
    wake: Notify,
    running: AtomicBool,
    /// Whether the chain was last seen mining a transaction at once.
    at_once: AtomicBool,
    /// Cleared when the node does not know `eth_getBlockReceipts`.
    block_receipts: AtomicBool,
}

struct Watched {
    broadcast: Arc<Broadcast>,
    draft: Draft,
    /// When its latest version was sent (or its watch began).
    sent_at: Instant,
    /// Its next lookup by hash, while those go on.
    quick: Option<Quick>,
    /// The block up to which it is known not to be mined; `None` before its first lookup.
    searched_to: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Quick {
    due: Instant,
    /// The wait before this lookup; the next one waits twice as long.
    delay: Duration,
}

impl Follower {
    pub(super) fn new(poll_interval: Duration) -> Self {
        Self {
            poll_interval: poll_interval.max(Duration::from_millis(1)),
            watched: StdMutex::new(Vec::new()),
            wake: Notify::new(),
            running: AtomicBool::new(false),
            at_once: AtomicBool::new(true),
            block_receipts: AtomicBool::new(true),
        }
    }

    /// Whether the chain was last seen mining a transaction at once.
    pub(super) fn mines_at_once(&self) -> bool {
        self.at_once.load(Ordering::Relaxed)
    }

    /// A transaction was seen not mined at once: the chain mines on a schedule.
    pub(super) fn mined_later(&self) {
        self.at_once.store(false, Ordering::Relaxed);
    }

    /// Has the follower look at its broadcasts now (one was refused late).
    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Watches `broadcast` until it is concluded; starts the follower on first use.
    pub(super) fn watch(&self, core: &Arc<Core>, broadcast: Arc<Broadcast>, draft: Draft) {
        // On a scheduled chain one lookup is enough to notice a chain that mines at once again.
        let delay = if self.mines_at_once() {
            FIRST_LOOKUP
        } else {
            QUICK_LOOKUPS_UNTIL
        };
        let now = Instant::now();
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Watched {
                broadcast,
                draft,
                sent_at: now,
                quick: Some(Quick {
                    due: now + FIRST_LOOKUP,
                    delay,
                }),
                searched_to: None,
            });
        self.wake.notify_one();
        if !self.running.swap(true, Ordering::AcqRel) {
            tokio::spawn(follow(Arc::clone(core)));
        }
    }

    fn take(&self) -> Vec<Watched> {
        std::mem::take(&mut *self.watched.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn put_back(&self, mut watching: Vec<Watched>) {
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        // Those added meanwhile go after the ones already watched.
        watching.append(&mut watched);
        *watched = watching;
    }

    /// The receipts of blocks `wanted`, by transaction hash, and which blocks were read (in
    /// order, stopping at the first that could not be).
    async fn block_receipts(
        &self,
        core: &Core,
        wanted: &BTreeSet<u64>,
    ) -> (HashMap<TxHash, TransactionReceipt>, BTreeSet<u64>) {
        let mut receipts = HashMap::new();
        let mut read = BTreeSet::new();
        if !self.block_receipts.load(Ordering::Relaxed) {
            return (receipts, read);
        }
        for &number in wanted {
            match core
                .provider
                .get_block_receipts(BlockId::number(number))
                .await
            {
                Ok(Some(block)) => {
                    read.insert(number);
                    receipts.extend(
                        block
                            .into_iter()
                            .map(|receipt| (receipt.transaction_hash, receipt)),
                    );
                }
                // A node behind its own head: the next round reads it.
                Ok(None) => break,
                Err(error) if is_method_not_found(&error) => {
                    tracing::debug!(relayer = %core.address, "the node has no eth_getBlockReceipts; looking transactions up one by one");
                    self.block_receipts.store(false, Ordering::Relaxed);
                    break;
                }
                Err(error) => {
                    tracing::debug!(relayer = %core.address, block = number, %error, "block receipts unavailable");
                    break;
                }
            }
        }
        (receipts, read)
    }
}

/// The follower's task: runs while the relayer does, idle while nothing is watched.
async fn follow(core: Arc<Core>) {
    let follower = &core.follower;
    let mut next_head = Instant::now();
    loop {
        let mut watching = follower.take();
        watching.retain(|watched| !watched.broadcast.concluded());
        if watching.is_empty() {
            tokio::select! {
                () = core.stop.cancelled() => return,
                () = follower.wake.notified() => continue,
            }
        }
        quick_lookups(&core, &mut watching).await;
        let scan_due = watching.iter().any(|watched| {
            watched.quick.is_none() || watched.broadcast.refused.load(Ordering::Acquire)
        });
        if scan_due && Instant::now() >= next_head {
            scan_head(&core, &mut watching).await;
            next_head = Instant::now() + follower.poll_interval;
        }
        watching.retain(|watched| !watched.broadcast.concluded());
        let scan_at = if watching.iter().any(|watched| watched.quick.is_none()) {
            next_head
        } else {
            Instant::now() + follower.poll_interval
        };
        let wake_at = watching
            .iter()
            .filter_map(|watched| watched.quick.map(|quick| quick.due))
            .fold(scan_at, Instant::min);
        follower.put_back(watching);
        tokio::select! {
            () = core.stop.cancelled() => return,
            () = tokio::time::sleep_until(wake_at) => {}
            () = follower.wake.notified() => {}
        }
    }
}

/// The lookups by hash that are due, all at once.
async fn quick_lookups(core: &Arc<Core>, watching: &mut [Watched]) {
    let now = Instant::now();
    let due: Vec<usize> = (0..watching.len())
        .filter(|&index| watching[index].quick.is_some_and(|quick| quick.due <= now))
        .collect();
    if due.is_empty() {
        return;
    }
    let found = lookup_all(core, due.iter().map(|&index| &watching[index].broadcast)).await;
    for (index, found) in due.into_iter().zip(found) {
        let watched = &mut watching[index];
        match found {
            Ok(Some(receipt)) => {
                core.follower.at_once.store(true, Ordering::Relaxed);
                watched.broadcast.conclude(Fate::Mined(Arc::new(receipt)));
                continue;
            }
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(relayer = %core.address, nonce = watched.broadcast.nonce, %error, "receipt lookup failed");
            }
        }
        let Some(quick) = watched.quick else {
            continue;
        };
        let delay = quick.delay * 2;
        watched.quick = if delay <= QUICK_LOOKUPS_UNTIL {
            Some(Quick {
                due: Instant::now() + delay,
                delay,
            })
        } else {
            core.follower.mined_later();
            None
        };
    }
}

/// Reads the head, then finds the broadcasts mined in the blocks since each was last looked
/// for; sends again those past the resend bound (or refused late).
async fn scan_head(core: &Arc<Core>, watching: &mut [Watched]) {
    let head = match core.provider.get_block_number().await {
        Ok(head) => head,
        Err(error) => {
            tracing::debug!(relayer = %core.address, %error, "head unavailable");
            return;
        }
    };
    let scanning = |watched: &&mut Watched| watched.quick.is_none();
    let wanted: BTreeSet<u64> = watching
        .iter_mut()
        .filter(scanning)
        .filter_map(|watched| watched.searched_to)
        .filter(|&from| from < head && head - from <= MOST_BLOCKS_SCANNED)
        .flat_map(|from| from + 1..=head)
        .collect();
    let (mut mined, read) = core.follower.block_receipts(core, &wanted).await;
    let mut by_hash = Vec::new();
    for (index, watched) in watching.iter_mut().enumerate() {
        if watched.quick.is_some() {
            continue;
        }
        match watched.searched_to {
            Some(from) if from >= head => {}
            Some(from) if (from + 1..=head).all(|number| read.contains(&number)) => {
                let receipt = watched
                    .broadcast
                    .hashes()
                    .iter()
                    .rev()
                    .find_map(|hash| mined.remove(hash));
                match receipt {
                    Some(receipt) => watched.broadcast.conclude(Fate::Mined(Arc::new(receipt))),
                    None => watched.searched_to = Some(head),
                }
            }
            _ => by_hash.push(index),
        }
    }
    let found = lookup_all(
        core,
        by_hash.iter().map(|&index| &watching[index].broadcast),
    )
    .await;
    for (index, found) in by_hash.into_iter().zip(found) {
        let watched = &mut watching[index];
        match found {
            Ok(Some(receipt)) => watched.broadcast.conclude(Fate::Mined(Arc::new(receipt))),
            // The head was read before the lookup: it covers every block up to the head.
            Ok(None) => watched.searched_to = Some(head),
            Err(error) => {
                tracing::debug!(relayer = %core.address, nonce = watched.broadcast.nonce, %error, "receipt lookup failed");
            }
        }
    }
    for watched in watching.iter_mut() {
        if watched.broadcast.concluded() {
            continue;
        }
        let refused = watched.broadcast.refused.swap(false, Ordering::AcqRel);
        if refused || watched.sent_at.elapsed() >= core.resend_after {
            watched.sent_at = Instant::now();
            core.resend_unmined(&watched.broadcast, &mut watched.draft)
                .await;
        }
    }
}

/// A receipt of any version of each broadcast, looked up in parallel.
async fn lookup_all<'a>(
    core: &Arc<Core>,
    broadcasts: impl Iterator<Item = &'a Arc<Broadcast>>,
) -> Vec<Result<Option<TransactionReceipt>, TransportError>> {
    let mut lookups = JoinSet::new();
    let mut count = 0;
    for (index, broadcast) in broadcasts.enumerate() {
        let core = Arc::clone(core);
        let broadcast = Arc::clone(broadcast);
        lookups.spawn(async move { (index, core.find_receipt(&broadcast).await) });
        count += 1;
    }
    let mut found: Vec<_> = (0..count).map(|_| Ok(None)).collect();
    while let Some(joined) = lookups.join_next().await {
        if let Ok((index, result)) = joined {
            found[index] = result;
        }
    }
    found
}
