//! What the chain says about one EIP-3009 authorization: whether it moved money, in which
//! transaction, and whether it still can.
//!
//! A facilitator's answer is a claim; the token contract is the ledger. A resource server that
//! lost a `/settle` answer (timeout, 5xx, garbage, a crash) or got a refusal on a retry asks
//! here before deciding, so it never records as failed a payment that moved, and never pays
//! twice. "Can it still move?" is judged by the latest block's timestamp, because that is
//! the clock `transferWithAuthorization` checks `validBefore` against, not the caller's.

use alloy::primitives::{Address, B256, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{BlockNumberOrTag, Filter, TransactionReceipt};
use alloy::sol_types::{SolCall, SolEvent};
use alloy::transports::TransportError;

use super::onchain::{IEip3009Token, authorization_transfer};

alloy::sol! {
    /// EIP-3009's cancellation event: a cancelled nonce reads as used but moved nothing.
    interface IEip3009Cancel {
        event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
    }
}

/// The authorization one question is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthorizationRef {
    /// The EIP-3009 token.
    pub asset: Address,
    /// The authorizer (`from`).
    pub payer: Address,
    /// The authorization's nonce.
    pub nonce: B256,
}

/// A token movement found on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferFacts {
    /// Sender.
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// Atomic units.
    pub value: U256,
}

/// The chain's answer about an authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorizationOnChain {
    /// The authorization was used. `transaction` is `None` when the nonce reads as used but no
    /// `AuthorizationUsed` log was found within the searched blocks (a lookback too short).
    Used {
        /// The transaction that used it.
        transaction: Option<TxHash>,
        /// Its block.
        block_number: Option<u64>,
        /// The payer's `Transfer` of the token in that transaction, if any.
        transfer: Option<TransferFacts>,
    },
    /// The payer cancelled it: it never moved and never will.
    Canceled,
    /// Not used as of the latest block, whose timestamp is given.
    Unused {
        /// Unix seconds of the latest block.
        block_timestamp: u64,
    },
}

/// Asks the token whether `authorization` was used and, if so, finds the transaction and the
/// transfer it made. `lookback_blocks` bounds the log search (`None`: from genesis).
///
/// # Errors
/// The node could not be asked: the answer is unknown, never "unused".
pub async fn authorization_on_chain(
    provider: &DynProvider,
    authorization: AuthorizationRef,
    lookback_blocks: Option<u64>,
) -> Result<AuthorizationOnChain, TransportError> {
    let latest = provider
        .get_block_by_number(BlockNumberOrTag::Latest)
        .await?
        .ok_or_else(|| TransportError::local_usage_str("the node returned no latest block"))?;
    let latest_number = latest.header.number;
    // Read the state at the block whose timestamp we report, so "unused at time T" is one fact.
    let state = IEip3009Token::authorizationStateCall {
        authorizer: authorization.payer,
        nonce: authorization.nonce,
    };
    let returned = provider
        .call(
            alloy::rpc::types::TransactionRequest::default()
                .to(authorization.asset)
                .input(alloy::rpc::types::TransactionInput::new(
                    state.abi_encode().into(),
                )),
        )
        .block(latest_number.into())
        .await?;
    let used = IEip3009Token::authorizationStateCall::abi_decode_returns(&returned)
        .map_err(|e| TransportError::local_usage_str(&format!("authorizationState: {e}")))?;
    if !used {
        return Ok(AuthorizationOnChain::Unused {
            block_timestamp: latest.header.timestamp,
        });
    }
    let from_block = lookback_blocks.map_or(0, |lookback| latest_number.saturating_sub(lookback));
    let logs_of = |signature: B256| {
        Filter::new()
            .address(authorization.asset)
            .event_signature(signature)
            .topic1(B256::from(authorization.payer.into_word()))
            .topic2(authorization.nonce)
            .from_block(from_block)
            .to_block(latest_number)
    };
    let used_logs = provider
        .get_logs(&logs_of(IEip3009Token::AuthorizationUsed::SIGNATURE_HASH))
        .await?;
    if let Some(tx_hash) = used_logs.iter().find_map(|log| log.transaction_hash) {
        let receipt = provider.get_transaction_receipt(tx_hash).await?;
        return Ok(AuthorizationOnChain::Used {
            transaction: Some(tx_hash),
            block_number: receipt.as_ref().and_then(|r| r.block_number),
            transfer: receipt
                .as_ref()
                .and_then(|r| payer_transfer(r, authorization)),
        });
    }
    let canceled = provider
        .get_logs(&logs_of(
            IEip3009Cancel::AuthorizationCanceled::SIGNATURE_HASH,
        ))
        .await?;
    if !canceled.is_empty() {
        return Ok(AuthorizationOnChain::Canceled);
    }
    Ok(AuthorizationOnChain::Used {
        transaction: None,
        block_number: None,
        transfer: None,
    })
}

/// The facts of a transaction the caller already holds a hash of (e.g. from a facilitator's
/// success answer): `Some` with the transfer when it is mined, succeeded and used
/// `authorization`; `None` when it is not mined (yet), reverted, or used something else.
///
/// # Errors
/// The node could not be asked.
pub async fn settlement_in_transaction(
    provider: &DynProvider,
    transaction: TxHash,
    authorization: AuthorizationRef,
) -> Result<Option<(u64, TransferFacts)>, TransportError> {
    Ok(provider
        .get_transaction_receipt(transaction)
        .await?
        .and_then(|receipt| settlement_in_receipt(&receipt, authorization)))
}

/// [`settlement_in_transaction`] for a receipt the caller already holds, such as the one an
/// in-process facilitator got from the node for its own settlement
/// ([`crate::Facilitator::mined_receipt`]).
#[must_use]
pub fn settlement_in_receipt(
    receipt: &TransactionReceipt,
    authorization: AuthorizationRef,
) -> Option<(u64, TransferFacts)> {
    if !receipt.status() || !uses_authorization(receipt, authorization) {
        return None;
    }
    payer_transfer(receipt, authorization)
        .map(|transfer| (receipt.block_number.unwrap_or_default(), transfer))
}

/// Whether the node still holds `transaction` unmined: a broadcast that may yet use the
/// authorization.
///
/// # Errors
/// The node could not be asked.
pub async fn transaction_pending(
    provider: &DynProvider,
    transaction: TxHash,
) -> Result<bool, TransportError> {
    Ok(provider
        .get_transaction_by_hash(transaction)
        .await?
        .is_some_and(|tx| tx.block_number.is_none()))
}

/// The token balance of `owner` at the latest block.
///
/// # Errors
/// The node could not be asked.
pub async fn token_balance(
    provider: &DynProvider,
    asset: Address,
    owner: Address,
) -> Result<U256, TransportError> {
    let call = IEip3009Token::balanceOfCall { account: owner };
    let returned = provider
        .call(
            alloy::rpc::types::TransactionRequest::default()
                .to(asset)
                .input(alloy::rpc::types::TransactionInput::new(
                    call.abi_encode().into(),
                )),
        )
        .await?;
    IEip3009Token::balanceOfCall::abi_decode_returns(&returned)
        .map_err(|e| TransportError::local_usage_str(&format!("balanceOf: {e}")))
}

fn uses_authorization(receipt: &TransactionReceipt, authorization: AuthorizationRef) -> bool {
    receipt.logs().iter().any(|log| {
        log.address() == authorization.asset
            && IEip3009Token::AuthorizationUsed::decode_log(&log.inner).is_ok_and(|used| {
                used.authorizer == authorization.payer && used.nonce == authorization.nonce
            })
    })
}

fn payer_transfer(
    receipt: &TransactionReceipt,
    authorization: AuthorizationRef,
) -> Option<TransferFacts> {
    if !receipt.status() {
        return None;
    }
    // Paired with the authorization's own `AuthorizationUsed`: a batch may hold the payer's
    // other payments too.
    let transfer = authorization_transfer(
        receipt,
        authorization.asset,
        authorization.payer,
        authorization.nonce,
    )??;
    Some(TransferFacts {
        from: transfer.from,
        to: transfer.to,
        value: transfer.value,
    })
}
