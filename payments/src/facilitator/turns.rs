//! Turns on a sending key that more than one sender uses.
//!
//! A relayer numbers its transactions itself (see [`super::relayer`]): it keeps the next nonce
//! in memory and reads the node's count only after a failed send. That is right while it is the
//! key's only sender. When other senders use the key too (gateway instances configured with one
//! relayer key, the escrow operator's key that every instance of a marketplace shares, or two
//! relayers of one process on one key), their sends take each other's nonces: the node refuses
//! the loser ("nonce too low", "already known", "replacement underpriced"), which resynchronises
//! and sends again. Correct, since a nonce is used once, but each conflict costs a refused send.
//!
//! [`SendTurns`] removes the conflicts: before each send the relayer asks for a turn; with one,
//! nobody else sends from the key until it ends, and the relayer reads the node's pending count
//! (which includes the others' sends) instead of trusting its own. [`KeyTurns`] hands out the
//! turns of every key a process sends from; the gateway's implementation knows whether anyone
//! else uses a key and takes a PostgreSQL advisory lock only then.
//!
//! Correctness never rests on a turn: a sender that gets none (the database is unreachable, or
//! another process does not take turns) falls back to resynchronising on a refused send.

use std::fmt::Debug;
use std::sync::Arc;

use alloy::primitives::Address;
use async_trait::async_trait;

/// The turns of one sending key on one chain, for one sender.
#[async_trait]
pub trait SendTurns: Send + Sync + Debug {
    /// Waits for this sender's turn. `None`: nobody else sends from the key now (or no turn
    /// could be had), send at once. `Some`: others send from it too; nobody else sends until
    /// the turn [ends](SendTurn::end), and the next nonce must be read from the node.
    async fn take(&self) -> Option<Box<dyn SendTurn>>;
}

/// A turn taken from [`SendTurns::take`]. Dropping it without [`SendTurn::end`] must end it
/// too (perhaps later: a database lock is released when its connection is next used).
#[async_trait]
pub trait SendTurn: Send {
    /// Ends the turn: the node holds this sender's transaction, the next sender may go.
    async fn end(self: Box<Self>);
}

/// Hands out [`SendTurns`] to the senders of one process.
pub trait KeyTurns: Send + Sync + Debug {
    /// The turns of `sender` on chain `chain_id`, for one more sender of it in this process
    /// (asked once per relayer, when it is built).
    fn join(&self, chain_id: u64, sender: Address) -> Arc<dyn SendTurns>;
}
