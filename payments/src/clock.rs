//! Which clock judges a payment's times: the chain's, for everything the chain itself will
//! judge.
//!
//! An EIP-3009 token refuses a transfer while `block.timestamp <= validAfter` or once
//! `block.timestamp >= validBefore`, and the escrow judges its capture and refund deadlines by
//! `block.timestamp` too. A gateway or facilitator whose clock differs from the chain's (a
//! devnet whose last block is minutes old because anvil mints blocks only for transactions, a
//! chain whose clock runs ahead, a host whose clock drifted) would otherwise accept a payment the
//! chain then refuses, or send a call the chain reverts. So every such check takes a [`Now`]:
//!
//! | check | clock | why |
//! |---|---|---|
//! | `validAfter <= now` | [`Now::block_time`] | a simulation or a settlement at the chain's present sees no later time than its latest block (a facilitator may simulate at `latest`) |
//! | `validBefore`, capture, refund and reclaim deadlines, window bounds | [`Now::latest`] | the later of the two: the chain may mint the settlement's block at the wall clock's time (an idle devnet), or already be past it (a chain ahead) |
//!
//! [`ChainClock`] reads the chain's time cheaply for hot paths: the latest block's timestamp,
//! read at most once per [`ChainClock::MAX_AGE`] and shared by every caller meanwhile (a paid
//! hire then costs no node round trip of its own; the one caller that finds the reading stale
//! pays one `eth_getBlockByNumber`, and callers arriving during that read wait for it instead of
//! sending their own). A reading never goes backwards, so a load-balanced node answering from a
//! replica one block behind cannot move the clock back.

use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use alloy::eips::BlockNumberOrTag;
use alloy::providers::{DynProvider, Provider};
use alloy::transports::{TransportError, TransportErrorKind};

/// The present as a payment's times are judged: the chain's latest block time and the judge's
/// own clock, unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    block_time: u64,
    local: u64,
}

impl Now {
    /// `block_time` is the chain's latest block timestamp, `local` the judge's own clock.
    #[must_use]
    pub fn new(block_time: u64, local: u64) -> Self {
        Self { block_time, local }
    }

    /// The judge's own clock read now, with the chain's `block_time`.
    #[must_use]
    pub fn at_block(block_time: u64) -> Self {
        Self::new(block_time, unix_now())
    }

    /// The chain's latest block time: what `validAfter` must not exceed.
    #[must_use]
    pub fn block_time(&self) -> u64 {
        self.block_time
    }

    /// The later of the chain's block time and the local clock: what `validBefore` and every
    /// deadline must stay ahead of.
    #[must_use]
    pub fn latest(&self) -> u64 {
        self.block_time.max(self.local)
    }
}

impl From<u64> for Now {
    /// Both clocks at `now` (tests, and callers with no chain to ask).
    fn from(now: u64) -> Self {
        Self::new(now, now)
    }
}

/// The local clock, unix seconds.
#[must_use]
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    block_time: u64,
    read_at: Instant,
}

/// One chain's time, from its latest block, cached for [`Self::MAX_AGE`].
pub struct ChainClock {
    provider: DynProvider,
    max_age: Duration,
    reading: RwLock<Option<Reading>>,
    /// Held while the node is asked: one read at a time, the others wait for its answer.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for ChainClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainClock")
            .field("max_age", &self.max_age)
            .field("reading", &self.cached().map(|r| r.block_time))
            .finish_non_exhaustive()
    }
}

impl ChainClock {
    /// How old a reading may be before the node is asked again. A second: block times are
    /// whole seconds, and a payment's window is judged with a 6 s buffer.
    pub const MAX_AGE: Duration = Duration::from_secs(1);

    /// The clock of the chain behind `provider`.
    #[must_use]
    pub fn new(provider: DynProvider) -> Self {
        Self::with_max_age(provider, Self::MAX_AGE)
    }

    /// The clock of the chain behind `provider`, re-read after `max_age`.
    #[must_use]
    pub fn with_max_age(provider: DynProvider, max_age: Duration) -> Self {
        Self {
            provider,
            max_age,
            reading: RwLock::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// The latest block's timestamp, at most [`Self::MAX_AGE`] old.
    pub async fn block_time(&self) -> Result<u64, TransportError> {
        if let Some(fresh) = self.fresh() {
            return Ok(fresh);
        }
        let _only_reader = self.refreshing.lock().await;
        // Another caller may have read it while this one waited.
        if let Some(fresh) = self.fresh() {
            return Ok(fresh);
        }
        let block = self
            .provider
            .get_block_by_number(BlockNumberOrTag::Latest)
            .await?
            .ok_or_else(|| TransportErrorKind::custom_str("the node has no latest block"))?;
        let previous = self.cached().map_or(0, |reading| reading.block_time);
        let block_time = block.header.timestamp.max(previous);
        *self.reading.write().unwrap_or_else(PoisonError::into_inner) = Some(Reading {
            block_time,
            read_at: Instant::now(),
        });
        Ok(block_time)
    }

    /// [`Now`] on this chain: its block time and the local clock.
    pub async fn now(&self) -> Result<Now, TransportError> {
        Ok(Now::at_block(self.block_time().await?))
    }

    fn cached(&self) -> Option<Reading> {
        *self.reading.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn fresh(&self) -> Option<u64> {
        self.cached()
            .filter(|reading| reading.read_at.elapsed() < self.max_age)
            .map(|reading| reading.block_time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_after_is_judged_by_the_block_and_deadlines_by_the_later_clock() {
        let behind = Now::new(1_000, 2_000);
        assert_eq!(behind.block_time(), 1_000);
        assert_eq!(behind.latest(), 2_000);
        let ahead = Now::new(3_000, 2_000);
        assert_eq!(ahead.block_time(), 3_000);
        assert_eq!(ahead.latest(), 3_000);
        assert_eq!(Now::from(5), Now::new(5, 5));
    }
}
