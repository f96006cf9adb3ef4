//! Turns on the chain keys this gateway sends from: the relayer key of each chain (the embedded
//! facilitator's settlements) and the escrow operator key.
//!
//! The policy (README "Several instances"): **each instance its own relayer key.** Then every
//! instance numbers its own transactions and nobody waits for anybody: no turn is taken, sends
//! need no database round trip, a stuck transaction holds up one instance only, and each
//! instance's gas spend is its own. A relayer key shared by several instances still works, and so
//! does the operator key, which every instance of a marketplace must share (it is the
//! `captureAuthorizer` that escrowed offers name, and any instance may capture what another
//! authorized): the instances then take turns to send from it.
//!
//! How an instance knows: on PostgreSQL each one claims every key it sends from with a shared
//! advisory lock, held on a connection of its own for its life, and counts the claimants
//! ([`REFRESH`] apart). A key claimed by another instance too, or used by two senders of this
//! process (a relayer key that is also the operator key), is shared; each send from a shared key
//! then takes the key's turn (in process a mutex, across instances a transaction-level advisory
//! lock) and reads the next nonce from the node within it. An unshared key takes no turn.
//!
//! Until a newly started instance is counted (at most [`REFRESH`]), or while the database is
//! unreachable, sends go without a turn: a conflict then costs a refused send and a resync,
//! never a double payment (a nonce is used once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};
use std::time::Duration;

use alloy::primitives::{Address, keccak256};
use async_trait::async_trait;
use hiregate_payments::facilitator::turns::{KeyTurns, SendTurn, SendTurns};
use tokio::sync::OwnedMutexGuard;
use tokio_util::sync::CancellationToken;

use hiregate_store::{KeyLocks, SendLock, Store};

/// How often the claimants of each key are counted again.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The keys this process sends from and who else does.
#[derive(Debug)]
pub struct GatewayKeyTurns {
    locks: Option<Arc<KeyLocks>>,
    keys: StdMutex<HashMap<(u64, Address), Arc<SharedKey>>>,
}

/// One chain key as this process sees it.
#[derive(Debug)]
struct SharedKey {
    chain_id: u64,
    address: Address,
    /// The second half of its advisory locks.
    lock_key: i32,
    /// Senders of this process (relayers) that use it.
    senders_here: AtomicUsize,
    /// Claimed by another instance at the last count.
    elsewhere: AtomicBool,
    /// The turn among this process's senders.
    turn_here: Arc<tokio::sync::Mutex<()>>,
}

impl SharedKey {
    fn shared_here(&self) -> bool {
        self.senders_here.load(Ordering::Acquire) > 1
    }
}

/// [`SendTurns`] of one key for one sender.
#[derive(Debug)]
struct KeySender {
    key: Arc<SharedKey>,
    locks: Option<Arc<KeyLocks>>,
}

/// A turn: this process's turn on the key and, when other instances use it, its send lock.
struct KeyTurn {
    _here: Option<OwnedMutexGuard<()>>,
    elsewhere: Option<SendLock>,
}

impl GatewayKeyTurns {
    /// Turns on `store`'s database: across instances on PostgreSQL, within this process only on
    /// SQLite.
    pub fn new(store: &Store) -> Self {
        Self {
            locks: store.key_locks().map(Arc::new),
            keys: StdMutex::default(),
        }
    }

    /// Claims every key joined so far and counts who else claims it; logs a key found shared.
    pub async fn refresh(&self) {
        let Some(locks) = &self.locks else {
            return;
        };
        let keys: Vec<Arc<SharedKey>> = self
            .keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        if keys.is_empty() {
            return;
        }
        let lock_keys: Vec<i32> = keys.iter().map(|key| key.lock_key).collect();
        match locks.claim_and_count(&lock_keys).await {
            Ok(counts) => {
                for (key, claimants) in keys.iter().zip(counts) {
                    let elsewhere = claimants > 1;
                    if key.elsewhere.swap(elsewhere, Ordering::AcqRel) != elsewhere {
                        if elsewhere {
                            tracing::info!(chain_id = key.chain_id, sender = %key.address, instances = claimants, "another gateway instance sends from this key: sends take turns through the database");
                        } else {
                            tracing::info!(chain_id = key.chain_id, sender = %key.address, "no other gateway instance sends from this key any more");
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "chain key claims not counted; sends go without turns until they are");
                for key in &keys {
                    key.elsewhere.store(false, Ordering::Release);
                }
            }
        }
    }

    /// Refreshes every [`REFRESH`] until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        if self.locks.is_none() {
            return;
        }
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(REFRESH) => self.refresh().await,
            }
        }
    }
}

impl KeyTurns for GatewayKeyTurns {
    fn join(&self, chain_id: u64, sender: Address) -> Arc<dyn SendTurns> {
        let key = Arc::clone(
            self.keys
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry((chain_id, sender))
                .or_insert_with(|| {
                    Arc::new(SharedKey {
                        chain_id,
                        address: sender,
                        lock_key: lock_key(chain_id, sender),
                        senders_here: AtomicUsize::new(0),
                        elsewhere: AtomicBool::new(false),
                        turn_here: Arc::default(),
                    })
                }),
        );
        if key.senders_here.fetch_add(1, Ordering::AcqRel) == 1 {
            tracing::info!(chain_id, %sender, "two senders of this gateway use one key (relayer and escrow operator?): they take turns");
        }
        Arc::new(KeySender {
            key,
            locks: self.locks.clone(),
        })
    }
}

#[async_trait]
impl SendTurns for KeySender {
    async fn take(&self) -> Option<Box<dyn SendTurn>> {
        let elsewhere = self.key.elsewhere.load(Ordering::Acquire);
        if !elsewhere && !self.key.shared_here() {
            return None;
        }
        // This process's senders queue here, so at most one of them waits on the database.
        let here = Arc::clone(&self.key.turn_here).lock_owned().await;
        let elsewhere = match (&self.locks, elsewhere) {
            (Some(locks), true) => match locks.lock_sending(self.key.lock_key).await {
                Ok(lock) => Some(lock),
                Err(error) => {
                    tracing::warn!(chain_id = self.key.chain_id, sender = %self.key.address, %error, "no turn on the shared key; sending without one");
                    None
                }
            },
            _ => None,
        };
        Some(Box::new(KeyTurn {
            _here: Some(here),
            elsewhere,
        }))
    }
}

#[async_trait]
impl SendTurn for KeyTurn {
    async fn end(self: Box<Self>) {
        if let Some(lock) = self.elsewhere
            && let Err(error) = lock.release().await
        {
            // The transaction ends with its connection at the latest; the lock with it.
            tracing::debug!(%error, "send lock not released cleanly");
        }
    }
}

/// The second half of a key's advisory locks: 31 bits of `keccak256(chain id ‖ address)`. Two
/// keys that meet here only share turns needlessly.
fn lock_key(chain_id: u64, address: Address) -> i32 {
    let mut preimage = chain_id.to_be_bytes().to_vec();
    preimage.extend_from_slice(address.as_slice());
    let digest = keccak256(preimage);
    let value = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) & 0x7fff_ffff;
    i32::try_from(value).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_differ_by_chain_and_address_and_stay_positive() {
        let address = Address::repeat_byte(0x11);
        let other = Address::repeat_byte(0x22);
        let keys = [
            lock_key(1, address),
            lock_key(2, address),
            lock_key(1, other),
        ];
        assert!(keys.iter().all(|key| *key >= 0));
        assert_ne!(keys[0], keys[1]);
        assert_ne!(keys[0], keys[2]);
        assert_eq!(lock_key(1, address), keys[0], "stable across processes");
    }
}
