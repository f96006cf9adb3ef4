//! The unpaid execute's hot path: `POST …/execute` without `PAYMENT-SIGNATURE` on an offered
//! contract answers the same 402 every time, and a signed contract never changes. A contract
//! proposed on this instance is remembered as it is stored (the seeker's next call is its
//! unpaid execute, which a standard x402 client always makes first); any other is remembered
//! by its first 402, built the slow way (store read, offer encoded). Either way the entry keeps
//! what checking the next caller needs, and unpaid calls are answered from memory: no store
//! read, no task spawned, no JSON built.
//!
//! Correctness across states: the cache only ever holds contracts this instance saw `offered`.
//! Every committed event of a contract on this instance removes its entry (a listener on the
//! store's [`EventBus`](hiregate_store::bus::EventBus); a lagging listener clears everything),
//! except the `contract_offered` that creates it, which changes nothing a 402 says, so an
//! instance never serves a 402 for a contract it knows is no longer offered. Another instance's
//! payment is not seen here until the entry is rebuilt, so a 402 may be stale across instances;
//! that is harmless: a payment signed for it reaches the slow path, which reads the stored state
//! and never charges a contract that is not `offered`. An expired offer also takes the slow path,
//! which records the expiry.

use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::Clock;
use bytes::Bytes;
use hiregate_contracts::terms::ContractTerms;
use serde_json::Value;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

use super::{
    error::{ErrorCode, HireError},
    outcome::{HireResult, Outcome, PaymentDemand},
};
use hiregate_contracts::id::ContractId;
use hiregate_store::{bus::LiveEvent, offer::StoredOffer, states::EventKind};

/// Offered contracts kept per instance; beyond this the least recently used are dropped.
const CAPACITY: usize = 50_000;

/// One offered contract, ready to answer unpaid executes.
#[derive(Debug)]
pub struct OfferedContract {
    seeker_id: String,
    /// The hire's correlation id, which its 402 carries.
    correlation_id: String,
    terms: Arc<ContractTerms>,
    /// Its 402: one demand, rendered once by the transport answering it.
    demand: Arc<PaymentDemand>,
    /// The last raw body found equal to the contract's input: clients resend the same bytes,
    /// which then need no canonicalisation.
    matching_body: Mutex<Option<Bytes>>,
}

/// What the cache says about one unpaid execute.
#[derive(Debug)]
pub enum Cached {
    /// Not cached (or expired): take the slow path.
    Miss,
    /// Answer this, with the hire's correlation id if the caller may see it (its seeker, sent
    /// its 402).
    Answer(HireResult, Option<String>),
}

/// Offered contracts by id. Cheap to clone.
#[derive(Clone)]
pub struct OfferCache {
    entries: Arc<quick_cache::sync::Cache<String, Arc<OfferedContract>>>,
    clock: Clock,
}

impl std::fmt::Debug for OfferCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferCache")
            .field("entries", &self.entries.len())
            .finish()
    }
}

impl OfferCache {
    /// An empty cache; offers expire by `clock`.
    pub fn new(clock: Clock) -> Self {
        Self {
            entries: Arc::new(quick_cache::sync::Cache::new(CAPACITY)),
            clock,
        }
    }

    /// Remember the payment demand of an offered contract of `seeker_id`, hired under
    /// `correlation_id` (called as it is proposed, or by the slow path right after it made one).
    pub fn remember(
        &self,
        contract_id: &str,
        seeker_id: &str,
        correlation_id: &str,
        terms: &Arc<ContractTerms>,
        demand: Arc<PaymentDemand>,
    ) {
        self.entries.insert(
            contract_id.to_owned(),
            Arc::new(OfferedContract {
                seeker_id: seeker_id.to_owned(),
                correlation_id: correlation_id.to_owned(),
                terms: Arc::clone(terms),
                demand,
                matching_body: Mutex::new(None),
            }),
        );
    }

    /// The answer to an unpaid execute of `contract_id` by `seeker_id` with `body`, if the
    /// cache can give it.
    pub fn answer(&self, contract_id: &str, seeker_id: &str, body: &Bytes) -> Cached {
        let Some(entry) = self.entries.get(contract_id) else {
            return Cached::Miss;
        };
        if entry.seeker_id != seeker_id {
            return Cached::Answer(Err(HireError::not_found("contract")), None);
        }
        if entry.terms.offer_expired(self.clock.now().into()) {
            self.entries.remove(contract_id);
            return Cached::Miss;
        }
        let seen = entry
            .matching_body
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|seen| seen == body);
        if !seen {
            if let Err(error) = check_body(&entry.terms, body) {
                return Cached::Answer(Err(error), None);
            }
            if !body.is_empty() {
                *entry
                    .matching_body
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(body.clone());
            }
        }
        Cached::Answer(
            Ok(Outcome::PaymentRequired(Arc::clone(&entry.demand))),
            Some(entry.correlation_id.clone()),
        )
    }

    /// Forget `contract_id` (something happened to it).
    pub fn forget(&self, contract_id: &str) {
        self.entries.remove(contract_id);
    }

    /// Forget each contract as events of it commit on this instance, until `shutdown`.
    /// `events` is subscribed by the caller before the API serves, so no event is missed.
    pub async fn follow(
        self,
        mut events: broadcast::Receiver<Arc<LiveEvent>>,
        shutdown: CancellationToken,
    ) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                received = events.recv() => match received {
                    // The event that creates an offered contract, whose entry is its proposal's.
                    Ok(event) if event.kind == EventKind::ContractOffered => {}
                    Ok(event) => self.forget(event.contract_id.as_str()),
                    // Missed events could be transitions: nothing cached can be trusted.
                    Err(RecvError::Lagged(_)) => self.entries.clear(),
                    Err(RecvError::Closed) => break,
                },
            }
        }
    }
}

/// The 402 of an offered contract with `offer`: what its every unpaid execute is answered.
pub(super) fn payment_required(offer: &StoredOffer, contract_id: &ContractId) -> PaymentDemand {
    PaymentDemand::new(
        offer,
        ErrorCode::PaymentRequired,
        "this contract must be paid: send PAYMENT-SIGNATURE as PAYMENT-REQUIRED describes",
        None,
        serde_json::json!({"contract_id": contract_id}),
    )
}

/// An execute body must be empty or the contract's input (in any JSON spelling).
/// Checked on both paths: from memory here, and on the slow path of `execute`.
pub(super) fn check_body(terms: &ContractTerms, body: &Bytes) -> Result<(), HireError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let value: Value =
        serde_json::from_slice(body).map_err(|e| HireError::malformed_json(e.to_string()))?;
    let same = terms
        .task()
        .matches_input(&value)
        .map_err(|e| HireError::internal_msg(format!("input digest: {e}")))?;
    if !same {
        return Err(HireError::conflict(
            ErrorCode::InputMismatch,
            "the body is not this contract's input; send it unchanged or send no body".to_owned(),
        ));
    }
    Ok(())
}
