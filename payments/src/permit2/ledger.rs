//! What the chain says about one Permit2 authorization: whether it moved money, in which
//! transaction and how much, or whether it still can.
//!
//! Permit2 records a used nonce as a bit in the payer's bitmap and emits nothing else; the
//! settlement's only trace is the token's `Transfer(payer → to)` in a transaction whose calldata
//! is a proxy `settle` carrying the permit. So a used nonce is traced back by reading the payer's
//! transfers to the recipient and decoding each transaction's permit; a nonce the payer burned
//! with `invalidateUnorderedNonces` reads as used with an `UnorderedNonceInvalidation` log and
//! no transfer. "Can it still move?" is judged at the latest block, whose timestamp is given,
//! because that is the clock Permit2 checks `deadline` against.

use std::collections::BTreeSet;

use alloy::primitives::{Address, B256, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{BlockNumberOrTag, Filter, TransactionReceipt};
use alloy::sol_types::SolEvent;
use alloy::transports::TransportError;

use super::PERMIT2_ADDRESS;
use super::onchain::{
    IErc20, IPermit2, Permit2Transfer, nonce_position, nonce_used, permit_in_calldata,
    transfer_in_receipt,
};

/// The Permit2 authorization one question is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit2Ref {
    /// The token.
    pub token: Address,
    /// The payer (Permit2's owner).
    pub owner: Address,
    /// The witness's recipient.
    pub to: Address,
    /// The permit's nonce.
    pub nonce: U256,
}

/// The chain's answer about a Permit2 authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit2OnChain {
    /// Settled: what moved, where.
    Settled(Permit2Transfer),
    /// The payer burned the nonce: it never moved and never will.
    Invalidated,
    /// The nonce reads as used, but neither its settlement nor its invalidation was found in
    /// the searched blocks (a lookback too short, or a settlement not sent straight to a proxy).
    UsedUntraced,
    /// Not used as of the latest block, whose timestamp is given.
    Unused {
        /// Unix seconds of the latest block.
        block_timestamp: u64,
    },
}

/// Asks Permit2 whether `permit` was used and, if so, finds the settlement and what it moved.
/// `lookback_blocks` bounds the log search (`None`: from genesis).
///
/// # Errors
/// The node could not be asked: the answer is unknown, never "unused".
pub async fn permit_on_chain(
    provider: &DynProvider,
    permit: Permit2Ref,
    lookback_blocks: Option<u64>,
) -> Result<Permit2OnChain, TransportError> {
    let latest = provider
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await?
        .ok_or_else(|| TransportError::local_usage_str("the node returned no latest block"))?;
    if !nonce_used(provider, permit.owner, permit.nonce).await? {
        return Ok(Permit2OnChain::Unused {
            block_timestamp: latest.header.timestamp,
        });
    }
    let from_block =
        lookback_blocks.map_or(0, |lookback| latest.header.number.saturating_sub(lookback));
    let transfers = Filter::new()
        .address(permit.token)
        .event_signature(IErc20::Transfer::SIGNATURE_HASH)
        .topic1(B256::from(permit.owner.into_word()))
        .topic2(B256::from(permit.to.into_word()))
        .from_block(from_block);
    let candidates: BTreeSet<TxHash> = provider
        .get_logs(&transfers)
        .await?
        .iter()
        .filter_map(|log| log.transaction_hash)
        .collect();
    for tx_hash in candidates {
        if let Some(transfer) = settlement_in_transaction(provider, tx_hash, permit).await? {
            return Ok(Permit2OnChain::Settled(transfer));
        }
    }
    let invalidations = Filter::new()
        .address(PERMIT2_ADDRESS)
        .event_signature(IPermit2::UnorderedNonceInvalidation::SIGNATURE_HASH)
        .topic1(B256::from(permit.owner.into_word()))
        .from_block(from_block);
    let (word, bit) = nonce_position(permit.nonce);
    let invalidated = provider.get_logs(&invalidations).await?.iter().any(|log| {
        IPermit2::UnorderedNonceInvalidation::decode_log(&log.inner)
            .is_ok_and(|event| event.word == word && event.mask & bit != U256::ZERO)
    });
    Ok(if invalidated {
        Permit2OnChain::Invalidated
    } else {
        Permit2OnChain::UsedUntraced
    })
}

/// The transfer `transaction` made with `permit`: `Some` when it is mined, succeeded, is a proxy
/// settlement carrying this permit (owner and nonce) and moved the token from the owner to the
/// recipient; `None` otherwise (not mined yet, reverted, or another payment).
///
/// # Errors
/// The node could not be asked.
pub async fn settlement_in_transaction(
    provider: &DynProvider,
    transaction: TxHash,
    permit: Permit2Ref,
) -> Result<Option<Permit2Transfer>, TransportError> {
    let Some(sent) = provider.get_transaction_by_hash(transaction).await? else {
        return Ok(None);
    };
    let carries_permit = permit_in_calldata(alloy::consensus::Transaction::input(&sent))
        == Some((permit.owner, permit.nonce));
    if !carries_permit {
        return Ok(None);
    }
    Ok(provider
        .get_transaction_receipt(transaction)
        .await?
        .and_then(|receipt| settlement_in_receipt(&receipt, permit)))
}

/// [`settlement_in_transaction`] for a receipt the caller holds and knows to be this permit's
/// settlement transaction (e.g. from an in-process facilitator's
/// [`crate::Facilitator::mined_receipt`]): a receipt carries no calldata, so it cannot tell
/// two settlements of one payer to one recipient apart.
#[must_use]
pub fn settlement_in_receipt(
    receipt: &TransactionReceipt,
    permit: Permit2Ref,
) -> Option<Permit2Transfer> {
    transfer_in_receipt(receipt, permit.token, permit.owner, permit.to)
}
