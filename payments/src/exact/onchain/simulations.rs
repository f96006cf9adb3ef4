//! Concurrent verifications' transfer simulations, coalesced into one `eth_call` of Multicall3's
//! `aggregate3`. Under load a verification is mostly waiting for the node, and a node answers
//! one call carrying a dozen simulations in far less time than a dozen calls: each call pays
//! for its HTTP request, its JSON and a fresh EVM environment.
//!
//! The calls of one `aggregate3` run one after another on one state, so a simulation could see
//! what an earlier one did. A batch therefore never holds two payments by one payer, nor a
//! payment whose payer is another's payee: no simulation in it then changes a balance or a
//! nonce another one reads, and each gets the answer it would get alone. Only successes are
//! taken from a batch. A simulation that fails in one is asked again alone, from the relayer,
//! so a refusal is always the node's own answer about that payment, revert message included.
//! Inside a batch the token sees Multicall3 as its caller, as it does when the relayer settles
//! a batch; `transferWithAuthorization` does not depend on who calls it.
//!
//! Batches form by themselves: at most [`IN_FLIGHT`] calls are at the node at once, and what
//! arrives meanwhile waits and leaves in the next one. One request alone goes as a plain call.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use alloy::primitives::{Address, Bytes};
use alloy::providers::{DynProvider, Provider};
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::{CallOutcome, call_request, simulate_transfer};
use crate::multicall::IMulticall3;

/// Calls at the node at once. Few, so that requests arriving meanwhile queue into batches.
const IN_FLIGHT: usize = 2;
/// Simulations per batch: about 2.5M gas of `transferWithAuthorization`, well within any
/// node's `eth_call` gas cap.
const BATCH_MAX: usize = 32;

/// The coalescing queue of one chain. Dropping it ends its loop once the queue drains.
pub(super) struct Simulations {
    queue: mpsc::UnboundedSender<Request>,
    node: Arc<Node>,
}

struct Node {
    provider: DynProvider,
    relayer: Address,
    multicall: Address,
}

struct Request {
    asset: Address,
    payer: Address,
    payee: Address,
    calldata: Bytes,
    reply: oneshot::Sender<Result<CallOutcome, TransportError>>,
}

impl Simulations {
    /// Starts the queue of the chain behind `provider`, whose Multicall3 is at `multicall`.
    pub(super) fn start(provider: DynProvider, relayer: Address, multicall: Address) -> Self {
        let (queue, requests) = mpsc::unbounded_channel();
        let node = Arc::new(Node {
            provider,
            relayer,
            multicall,
        });
        tokio::spawn(coalesce(Arc::clone(&node), requests));
        Self { queue, node }
    }

    /// The outcome of `calldata` (a transfer of `asset` from `payer` to `payee`) called from
    /// the relayer at the latest block, or a success the same call had inside a batch.
    pub(super) async fn simulate(
        &self,
        asset: Address,
        payer: Address,
        payee: Address,
        calldata: Vec<u8>,
    ) -> Result<CallOutcome, TransportError> {
        let calldata = Bytes::from(calldata);
        let (reply, answer) = oneshot::channel();
        let request = Request {
            asset,
            payer,
            payee,
            calldata: calldata.clone(),
            reply,
        };
        if self.queue.send(request).is_ok()
            && let Ok(outcome) = answer.await
        {
            return outcome;
        }
        self.node.alone(asset, calldata).await
    }
}

impl Node {
    async fn alone(&self, asset: Address, calldata: Bytes) -> Result<CallOutcome, TransportError> {
        simulate_transfer(&self.provider, self.relayer, asset, calldata).await
    }

    /// Answers every request of `batch`: the successes of one `aggregate3` call, the rest (and
    /// all of them, should that call fail) by a call of their own.
    ///
    /// A request alone is answered before this returns, so that it holds its slot meanwhile;
    /// the rare re-asks after a batch do not.
    async fn answer(self: Arc<Self>, mut batch: Vec<Request>) {
        if batch.len() == 1
            && let Some(request) = batch.pop()
        {
            let outcome = self.alone(request.asset, request.calldata).await;
            let _ = request.reply.send(outcome);
            return;
        }
        let results = self.aggregate(&batch).await;
        let mut passed = results.into_iter().map(|result| result.success);
        for request in batch {
            if passed.next().unwrap_or(false) {
                let _ = request.reply.send(Ok(CallOutcome::Returned(Bytes::new())));
                continue;
            }
            let node = Arc::clone(&self);
            tokio::spawn(async move {
                let outcome = node.alone(request.asset, request.calldata).await;
                let _ = request.reply.send(outcome);
            });
        }
    }

    /// The per-call results of one `aggregate3` of `batch`; none when the node could not run
    /// it or answered something else.
    async fn aggregate(&self, batch: &[Request]) -> Vec<IMulticall3::Result> {
        let call = IMulticall3::aggregate3Call {
            calls: batch
                .iter()
                .map(|request| IMulticall3::Call3 {
                    target: request.asset,
                    allowFailure: true,
                    callData: request.calldata.clone(),
                })
                .collect(),
        };
        let request = call_request(self.multicall, Some(self.relayer), call.abi_encode());
        match self.provider.call(request).await {
            Ok(returned) => IMulticall3::aggregate3Call::abi_decode_returns(&returned)
                .ok()
                .filter(|results| results.len() == batch.len())
                .unwrap_or_default(),
            Err(error) => {
                tracing::debug!(%error, calls = batch.len(), "coalesced simulation failed, asking each alone");
                Vec::new()
            }
        }
    }
}

/// One batch being formed, with the addresses its simulations touch.
struct Batch {
    requests: Vec<Request>,
    payers: HashSet<Address>,
    payees: HashSet<Address>,
}

impl Batch {
    fn of(first: Request) -> Self {
        let mut batch = Self {
            requests: Vec::with_capacity(BATCH_MAX),
            payers: HashSet::new(),
            payees: HashSet::new(),
        };
        batch.push(first);
        batch
    }

    fn full(&self) -> bool {
        self.requests.len() >= BATCH_MAX
    }

    /// Whether `request`'s simulation reads nothing another in the batch writes, and the
    /// reverse (see the module docs).
    fn independent_of(&self, request: &Request) -> bool {
        !self.payers.contains(&request.payer)
            && !self.payees.contains(&request.payer)
            && !self.payers.contains(&request.payee)
    }

    fn push(&mut self, request: Request) {
        self.payers.insert(request.payer);
        self.payees.insert(request.payee);
        self.requests.push(request);
    }

    /// Takes `request` if it fits; gives it back otherwise.
    fn offer(&mut self, request: Request) -> Option<Request> {
        if self.full() || !self.independent_of(&request) {
            return Some(request);
        }
        self.push(request);
        None
    }
}

async fn coalesce(node: Arc<Node>, mut requests: mpsc::UnboundedReceiver<Request>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // Requests that did not fit the last batch; they open the next one, in arrival order.
    let mut held_back = VecDeque::new();
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let first = match held_back.pop_front() {
            Some(request) => request,
            None => match requests.recv().await {
                Some(request) => request,
                None => return,
            },
        };
        let mut batch = Batch::of(first);
        held_back = std::mem::take(&mut held_back)
            .into_iter()
            .filter_map(|request| batch.offer(request))
            .collect();
        while !batch.full() {
            let Ok(request) = requests.try_recv() else {
                break;
            };
            held_back.extend(batch.offer(request));
        }
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            node.answer(batch.requests).await;
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(payer: u8, payee: u8) -> Request {
        Request {
            asset: Address::repeat_byte(0xaa),
            payer: Address::repeat_byte(payer),
            payee: Address::repeat_byte(payee),
            calldata: Bytes::new(),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_holds_no_payer_twice_and_no_payer_that_another_pays() {
        let mut batch = Batch::of(request(1, 9));
        assert!(
            batch.offer(request(2, 9)).is_none(),
            "a shared payee is fine"
        );
        assert!(batch.offer(request(1, 8)).is_some(), "the same payer twice");
        assert!(batch.offer(request(9, 7)).is_some(), "a payer another pays");
        assert!(
            batch.offer(request(3, 2)).is_some(),
            "a payee that pays in the batch"
        );
        assert!(batch.offer(request(3, 4)).is_none());
        assert_eq!(batch.requests.len(), 3);
    }

    #[test]
    fn a_batch_stops_at_its_maximum() {
        let mut batch = Batch::of(request(0, 255));
        for payer in 1..BATCH_MAX as u8 {
            assert!(batch.offer(request(payer, 255)).is_none());
        }
        assert!(batch.full());
        assert!(batch.offer(request(200, 255)).is_some());
    }
}
