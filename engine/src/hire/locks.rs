//! One in-process lock per contract, so executes of the same contract in this process run one
//! at a time. Across instances the database's conditional transitions decide; the lock only
//! spares a duplicate the work (and lets it answer with the finished result instead of "in
//! progress").

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, Weak},
};

/// Locks by contract id; entries disappear when nobody holds or waits on them.
#[derive(Debug, Default)]
pub struct ContractLocks {
    locks: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

/// Above this many entries, dead ones are swept on the next insert.
const SWEEP_AT: usize = 1024;

impl ContractLocks {
    /// The lock of `contract_id`, shared with everyone currently holding or awaiting it.
    pub fn lock_of(&self, contract_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(live) = locks.get(contract_id).and_then(Weak::upgrade) {
            return live;
        }
        if locks.len() >= SWEEP_AT {
            locks.retain(|_, weak| weak.strong_count() > 0);
        }
        let fresh = Arc::new(tokio::sync::Mutex::new(()));
        locks.insert(contract_id.to_owned(), Arc::downgrade(&fresh));
        fresh
    }

    /// Entries currently tracked (live or not yet swept), for tests.
    pub fn tracked(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_contract_one_lock_and_dead_entries_are_swept() {
        let locks = ContractLocks::default();
        let a = locks.lock_of("ctr_a");
        let again = locks.lock_of("ctr_a");
        assert!(Arc::ptr_eq(&a, &again));
        let guard = a.try_lock().unwrap();
        assert!(again.try_lock().is_err(), "same contract, same lock");
        assert!(locks.lock_of("ctr_b").try_lock().is_ok());
        drop(guard);
        drop((a, again));
        for i in 0..SWEEP_AT + 1 {
            drop(locks.lock_of(&format!("ctr_{i}")));
        }
        assert!(locks.tracked() <= SWEEP_AT + 1);
    }
}
