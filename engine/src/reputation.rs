//! Worker reputation, earned only from verified, paid outcomes: the signed snapshot of
//! `GET /v1/workers/{id}/reputation` and the figures discovery sorts and filters by.
//!
//! What is counted and the self-dealing rule are in [`hiregate_contracts::reputation`]; the facts
//! come from [`Store::hire_facts`]. A snapshot is signed with the gateway's active key and kept
//! for [`SNAPSHOT_TTL`], so a discovery page sorted by reputation costs one query per listing per
//! TTL rather than per request; figures are at most that much behind the store.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use hiregate_contracts::{
    id::WorkerId,
    reputation::{ReputationSnapshot, compute},
    time::Timestamp,
    token::{KeyRing, REPUTATION_TOKEN_TYPE},
};

use crate::{clock::Clock, hire::error::HireError};
use hiregate_store::Store;

/// How long a computed snapshot is served before it is computed again.
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(30);

/// Listings whose snapshot is kept in memory at once.
const CAPACITY: usize = 10_000;

/// A snapshot and its compact JWS.
#[derive(Debug)]
pub struct SignedReputation {
    /// What the token states.
    pub snapshot: ReputationSnapshot,
    /// The snapshot signed by the gateway (`typ` = `hiregate-reputation+jwt`).
    pub token: String,
}

/// Computes, signs and caches reputation snapshots. Cheap to clone.
#[derive(Clone)]
pub struct ReputationBook {
    store: Store,
    keys: KeyRing,
    clock: Clock,
    snapshots: Arc<quick_cache::sync::Cache<String, (Instant, Arc<SignedReputation>)>>,
}

impl std::fmt::Debug for ReputationBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReputationBook")
            .field("cached", &self.snapshots.len())
            .finish_non_exhaustive()
    }
}

impl ReputationBook {
    /// A book over `store`, signing with `keys`, dating snapshots by `clock`.
    #[must_use]
    pub fn new(store: Store, keys: KeyRing, clock: Clock) -> Self {
        Self {
            store,
            keys,
            clock,
            snapshots: Arc::new(quick_cache::sync::Cache::new(CAPACITY)),
        }
    }

    /// The signed reputation of `worker`, at most [`SNAPSHOT_TTL`] old.
    pub async fn of(&self, worker: &WorkerId) -> Result<Arc<SignedReputation>, HireError> {
        if let Some((computed, signed)) = self.snapshots.get(worker.as_str())
            && self.clock.instant().saturating_duration_since(computed) < SNAPSHOT_TTL
        {
            return Ok(signed);
        }
        let facts = self.store.hire_facts(worker).await?;
        let snapshot = compute(worker, &facts, Timestamp::from(self.clock.now()));
        let token = self
            .keys
            .sign_json(REPUTATION_TOKEN_TYPE, &snapshot)
            .map_err(HireError::internal)?;
        let signed = Arc::new(SignedReputation { snapshot, token });
        self.snapshots.insert(
            worker.as_str().to_owned(),
            (self.clock.instant(), Arc::clone(&signed)),
        );
        Ok(signed)
    }
}
