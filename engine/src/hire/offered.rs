//! The unpaid execute's hot path: `POST …/execute` without `PAYMENT-SIGNATURE` on an offered
//! contract answers the same 402 every time, and a signed contract never changes. A contract
//! proposed on this instance is remembered as it is stored (the seeker's next call is its
//! unpaid execute, which a standard x402 client always makes first); any other is remembered
//! by its first 402, built the slow way (store read, offer encoded). Either way the entry keeps
//! what checking the next caller needs, and unpaid calls are answered from memory: no store
//! read, no task spawned, no JSON built. Entries are bounded by what they hold
//! ([`CAPACITY_BYTES`]), and a contract too large to remember always takes the slow path.
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

/// Offered contracts the cache expects to hold (it sizes its tables by this).
const EXPECTED_ENTRIES: usize = 8_192;

/// What the entries may weigh in all ([`entry_bytes`]); beyond this the least recently used
/// are dropped. An entry holds its contract's terms, whose input may be up to 1 MiB
/// (`TermsLimits::max_input_bytes`), so a bound by count alone (50,000 before) let a seeker who
/// proposes large inputs hold many gigabytes here. A typical entry (a short input and the
/// devnet's 402, whose challenge is about 4 KiB with its offer signature and extensions) weighs
/// about 21 KiB, so this keeps about 3,000 contracts between proposal and payment.
const CAPACITY_BYTES: u64 = 64 * 1024 * 1024;

/// Heavier entries are not remembered: their unpaid executes take the slow path, which is
/// correct for any contract, so a few large inputs cannot push out thousands of small ones.
const MAX_ENTRY_BYTES: u64 = 1024 * 1024;

/// Longest execute body kept to skip the next identical body's check; a longer one is checked
/// each time (its parse and digest are paid by the request that sends it).
const MAX_MATCHING_BODY: usize = 4 * 1024;

/// One offered contract, ready to answer unpaid executes.
#[derive(Debug)]
pub struct OfferedContract {
    seeker_id: String,
    /// The hire's correlation id, which its 402 carries.
    correlation_id: String,
    terms: Arc<ContractTerms>,
    /// Its 402: one demand, rendered once by the transport answering it.
    demand: Arc<PaymentDemand>,
    /// The last raw body found equal to the contract's input, up to [`MAX_MATCHING_BODY`]
    /// bytes: clients resend the same bytes, which then need no canonicalisation.
    matching_body: Mutex<Option<Bytes>>,
    /// What the entry is estimated to hold ([`entry_bytes`]), its weight in the cache.
    bytes: u64,
}

/// An entry's weight: the bytes it holds, estimated from the JSON text of what grows with the
/// contract. The input is held parsed in the terms (a `Value` tree, counted twice its text);
/// the challenge four times (the demand, its copy in the details, the rendered body and the
/// base64 header); plus room for the kept body ([`MAX_MATCHING_BODY`]) and the fixed parts.
fn entry_bytes(terms: &ContractTerms, demand: &PaymentDemand) -> u64 {
    // Counting stops once the entry is too heavy to remember: a contract whose input is, its
    // every unpaid execute weighs again, and need not write out the whole input to learn it.
    let input = json_bytes(terms.task().input(), MAX_ENTRY_BYTES / 2);
    let challenge = json_bytes(&demand.challenge, MAX_ENTRY_BYTES / 4);
    let fixed = 1024 + MAX_MATCHING_BODY as u64;
    input
        .saturating_mul(2)
        .saturating_add(challenge.saturating_mul(4))
        .saturating_add(fixed)
}

/// The length of `value`'s JSON text, counted as written (nothing is kept), or some count
/// above `limit` once the text is longer.
fn json_bytes(value: &impl serde::Serialize, limit: u64) -> u64 {
    struct Count {
        bytes: u64,
        limit: u64,
    }
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.bytes += bytes.len() as u64;
            if self.bytes > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count { bytes: 0, limit };
    // The only error is the limit's; a value that cannot be written weighs what it wrote.
    let _ = serde_json::to_writer(&mut count, value);
    count.bytes
}

#[derive(Clone)]
struct EntryBytes;

impl quick_cache::Weighter<String, Arc<OfferedContract>> for EntryBytes {
    fn weight(&self, _contract_id: &String, entry: &Arc<OfferedContract>) -> u64 {
        entry.bytes
    }
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
    entries: Arc<quick_cache::sync::Cache<String, Arc<OfferedContract>, EntryBytes>>,
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
            entries: Arc::new(quick_cache::sync::Cache::with_weighter(
                EXPECTED_ENTRIES,
                CAPACITY_BYTES,
                EntryBytes,
            )),
            clock,
        }
    }

    /// Remember the payment demand of an offered contract of `seeker_id`, hired under
    /// `correlation_id` (called as it is proposed, or by the slow path right after it made one),
    /// unless it weighs more than [`MAX_ENTRY_BYTES`].
    pub fn remember(
        &self,
        contract_id: &str,
        seeker_id: &str,
        correlation_id: &str,
        terms: &Arc<ContractTerms>,
        demand: Arc<PaymentDemand>,
    ) {
        let bytes = entry_bytes(terms, &demand);
        if bytes > MAX_ENTRY_BYTES {
            return;
        }
        self.entries.insert(
            contract_id.to_owned(),
            Arc::new(OfferedContract {
                seeker_id: seeker_id.to_owned(),
                correlation_id: correlation_id.to_owned(),
                terms: Arc::clone(terms),
                demand,
                matching_body: Mutex::new(None),
                bytes,
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
            if !body.is_empty() && body.len() <= MAX_MATCHING_BODY {
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
