//! What the chain says: EIP-3009 `Transfer` and `AuthorizationUsed` logs over a block range,
//! the escrow's payment events of known payments, and the receipts of settlement (and escrow)
//! transactions.
//!
//! Permit2 records a used nonce in a bitmap and logs nothing of its own, so a Permit2
//! settlement's "authorization use" is read from the transaction itself: a call of an x402
//! Permit2 proxy carrying the permit's owner and nonce ([`permit_in_calldata`]). It is reported
//! as an [`AuthorizationUse`] of the token the owner's `Transfer` moved, so EIP-3009 and Permit2
//! payments reconcile alike.
//!
//! Nodes and hosted RPCs cap `eth_getLogs` by block span and by result size, so logs are read
//! in windows of `chunk_blocks` and topic lists in groups of [`TOPICS_PER_QUERY`]; receipts are
//! fetched [`RECEIPT_CONCURRENCY`] at a time.

use std::collections::HashMap;

use alloy::{
    primitives::{Address, B256, TxHash, U256},
    providers::{DynProvider, Provider},
    rpc::types::{Filter, Log},
    sol_types::SolEvent,
    transports::TransportError,
};
use futures::{StreamExt as _, TryStreamExt as _};
use hiregate_payments::{
    EscrowEvent,
    auth_capture::escrow::{PAYMENT_EVENT_SIGNATURES, decode_payment_event},
    exact::onchain::IEip3009Token,
    permit2::onchain::permit_in_calldata,
};

/// Default block span of one `eth_getLogs` (what common hosted RPCs accept).
pub const DEFAULT_LOG_CHUNK_BLOCKS: u64 = 10_000;
/// Addresses per topic filter of one `eth_getLogs`.
pub const TOPICS_PER_QUERY: usize = 100;
/// Receipts fetched at once.
pub const RECEIPT_CONCURRENCY: usize = 8;

/// A token `Transfer` log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferLog {
    /// Token contract.
    pub asset: Address,
    /// Sender.
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// Atomic units.
    pub value: U256,
    /// Transaction.
    pub tx: TxHash,
    /// Block.
    pub block: u64,
    /// Position in the block (identifies the log).
    pub log_index: u64,
}

/// A token `AuthorizationUsed` log: an EIP-3009 authorization was consumed; or a Permit2
/// proxy settlement that used the permit of `authorizer` with `nonce` (as 32 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationUse {
    /// Token contract.
    pub asset: Address,
    /// Who signed the authorization (the payer).
    pub authorizer: Address,
    /// Its nonce.
    pub nonce: B256,
    /// Transaction.
    pub tx: TxHash,
    /// Block.
    pub block: u64,
}

/// A settlement transaction as mined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleTx {
    /// Mined in `block`.
    Mined {
        /// Block.
        block: u64,
        /// Status 1 (a reverted transaction moved nothing).
        success: bool,
        /// Its `Transfer` logs.
        transfers: Vec<TransferLog>,
        /// Its `AuthorizationUsed` logs.
        authorization_uses: Vec<AuthorizationUse>,
    },
    /// The node knows no such transaction (never sent, dropped, or another chain's).
    NotFound,
}

fn topic_of(address: Address) -> B256 {
    B256::from(address.into_word())
}

fn decode_transfer(log: &Log) -> Option<TransferLog> {
    let decoded = IEip3009Token::Transfer::decode_log(&log.inner).ok()?;
    Some(TransferLog {
        asset: log.address(),
        from: decoded.data.from,
        to: decoded.data.to,
        value: decoded.data.value,
        tx: log.transaction_hash?,
        block: log.block_number?,
        log_index: log.log_index?,
    })
}

fn decode_authorization_use(log: &Log) -> Option<AuthorizationUse> {
    let decoded = IEip3009Token::AuthorizationUsed::decode_log(&log.inner).ok()?;
    Some(AuthorizationUse {
        asset: log.address(),
        authorizer: decoded.data.authorizer,
        nonce: decoded.data.nonce,
        tx: log.transaction_hash?,
        block: log.block_number?,
    })
}

/// Reads one chain.
#[derive(Debug, Clone)]
pub struct ChainReader {
    provider: DynProvider,
    chunk_blocks: u64,
}

impl ChainReader {
    /// A reader over `provider`, asking for at most `chunk_blocks` blocks of logs at a time.
    pub fn new(provider: DynProvider, chunk_blocks: u64) -> Self {
        Self {
            provider,
            chunk_blocks: chunk_blocks.max(1),
        }
    }

    /// The node's chain id.
    pub async fn chain_id(&self) -> Result<u64, TransportError> {
        self.provider.get_chain_id().await
    }

    /// The latest block number.
    pub async fn head(&self) -> Result<u64, TransportError> {
        self.provider.get_block_number().await
    }

    /// `Transfer` logs of `assets` to any of `recipients` in `[from, to]`.
    pub async fn transfers_to(
        &self,
        assets: &[Address],
        recipients: &[Address],
        from: u64,
        to: u64,
    ) -> Result<Vec<TransferLog>, TransportError> {
        let logs = self
            .logs(
                assets,
                IEip3009Token::Transfer::SIGNATURE_HASH,
                TopicPosition::Second,
                recipients,
                from,
                to,
            )
            .await?;
        Ok(logs.iter().filter_map(decode_transfer).collect())
    }

    /// `AuthorizationUsed` logs of `assets` by any of `authorizers` in `[from, to]`.
    pub async fn authorization_uses_by(
        &self,
        assets: &[Address],
        authorizers: &[Address],
        from: u64,
        to: u64,
    ) -> Result<Vec<AuthorizationUse>, TransportError> {
        let logs = self
            .logs(
                assets,
                IEip3009Token::AuthorizationUsed::SIGNATURE_HASH,
                TopicPosition::First,
                authorizers,
                from,
                to,
            )
            .await?;
        Ok(logs.iter().filter_map(decode_authorization_use).collect())
    }

    /// Receipts of `txs`, [`RECEIPT_CONCURRENCY`] at a time.
    pub async fn settle_txs(
        &self,
        txs: impl IntoIterator<Item = TxHash>,
    ) -> Result<HashMap<TxHash, SettleTx>, TransportError> {
        futures::stream::iter(txs)
            .map(|tx| async move { Ok::<_, TransportError>((tx, self.settle_tx(tx).await?)) })
            .buffer_unordered(RECEIPT_CONCURRENCY)
            .try_collect()
            .await
    }

    async fn settle_tx(&self, tx: TxHash) -> Result<SettleTx, TransportError> {
        let Some(receipt) = self.provider.get_transaction_receipt(tx).await? else {
            return Ok(SettleTx::NotFound);
        };
        let Some(block) = receipt.block_number else {
            // A receipt without a block is not mined yet.
            return Ok(SettleTx::NotFound);
        };
        let transfers: Vec<TransferLog> =
            receipt.logs().iter().filter_map(decode_transfer).collect();
        let mut authorization_uses: Vec<AuthorizationUse> = receipt
            .logs()
            .iter()
            .filter_map(decode_authorization_use)
            .collect();
        // No EIP-3009 use: perhaps a Permit2 settlement, which only its calldata names.
        if authorization_uses.is_empty() && receipt.status() {
            authorization_uses.extend(self.permit_use(tx, &transfers).await?);
        }
        Ok(SettleTx::Mined {
            block,
            success: receipt.status(),
            transfers,
            authorization_uses,
        })
    }

    /// The Permit2 use of `tx`, a successful transaction whose token `transfers` are given:
    /// `Some` when it is a proxy settlement and its owner's transfer names the token.
    async fn permit_use(
        &self,
        tx: TxHash,
        transfers: &[TransferLog],
    ) -> Result<Option<AuthorizationUse>, TransportError> {
        let Some(sent) = self.provider.get_transaction_by_hash(tx).await? else {
            return Ok(None);
        };
        let Some((owner, nonce)) = permit_in_calldata(alloy::consensus::Transaction::input(&sent))
        else {
            return Ok(None);
        };
        Ok(transfers
            .iter()
            .find(|transfer| transfer.from == owner)
            .map(|transfer| AuthorizationUse {
                asset: transfer.asset,
                authorizer: owner,
                nonce: B256::from(nonce),
                tx,
                block: transfer.block,
            }))
    }

    /// The Permit2 uses of the transactions of `transfers` (successful, since they logged a
    /// transfer), one per transaction that is a proxy settlement, [`RECEIPT_CONCURRENCY`]
    /// transactions at a time.
    pub async fn permit_uses(
        &self,
        transfers: &[&TransferLog],
    ) -> Result<Vec<AuthorizationUse>, TransportError> {
        let mut by_tx: HashMap<TxHash, Vec<TransferLog>> = HashMap::new();
        for transfer in transfers {
            by_tx
                .entry(transfer.tx)
                .or_default()
                .push((*transfer).clone());
        }
        let found: Vec<Option<AuthorizationUse>> = futures::stream::iter(by_tx)
            .map(|(tx, transfers)| async move { self.permit_use(tx, &transfers).await })
            .buffer_unordered(RECEIPT_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// The escrow's payment events (`PaymentAuthorized`, `…Captured`, `…Voided`,
    /// `…Reclaimed`, `…Refunded`, `…Charged`) at `escrow` of the payments whose `getHash` is in
    /// `payment_hashes`, in `[from, to]`, as (payment hash, event) in chain order.
    pub async fn escrow_events(
        &self,
        escrow: Address,
        payment_hashes: &[B256],
        from: u64,
        to: u64,
    ) -> Result<Vec<(B256, EscrowEvent)>, TransportError> {
        let mut out = Vec::new();
        if payment_hashes.is_empty() || from > to {
            return Ok(out);
        }
        for group in payment_hashes.chunks(TOPICS_PER_QUERY) {
            let logs = self
                .windowed(from, to, |start, end| {
                    Filter::new()
                        .address(escrow)
                        .event_signature(PAYMENT_EVENT_SIGNATURES.to_vec())
                        .topic1(group.to_vec())
                        .from_block(start)
                        .to_block(end)
                })
                .await?;
            out.extend(logs.iter().filter_map(decode_payment_event));
        }
        out.sort_by_key(|(_, event)| (event.block_number, event.log_index));
        Ok(out)
    }

    async fn logs(
        &self,
        assets: &[Address],
        signature: B256,
        position: TopicPosition,
        addresses: &[Address],
        from: u64,
        to: u64,
    ) -> Result<Vec<Log>, TransportError> {
        let mut out = Vec::new();
        if assets.is_empty() || addresses.is_empty() || from > to {
            return Ok(out);
        }
        for group in addresses.chunks(TOPICS_PER_QUERY) {
            let topics: Vec<B256> = group.iter().copied().map(topic_of).collect();
            let logs = self
                .windowed(from, to, |start, end| {
                    let filter = Filter::new()
                        .address(assets.to_vec())
                        .event_signature(signature)
                        .from_block(start)
                        .to_block(end);
                    match position {
                        TopicPosition::First => filter.topic1(topics.clone()),
                        TopicPosition::Second => filter.topic2(topics.clone()),
                    }
                })
                .await?;
            out.extend(logs);
        }
        Ok(out)
    }

    /// The logs `filter(start, end)` matches over `[from, to]`, asked `chunk_blocks` at a time;
    /// logs of reorganised-away blocks are dropped.
    async fn windowed(
        &self,
        from: u64,
        to: u64,
        filter: impl Fn(u64, u64) -> Filter,
    ) -> Result<Vec<Log>, TransportError> {
        let mut out = Vec::new();
        let mut start = from;
        loop {
            let end = start.saturating_add(self.chunk_blocks - 1).min(to);
            let logs = self.provider.get_logs(&filter(start, end)).await?;
            out.extend(logs.into_iter().filter(|log| !log.removed));
            if end >= to {
                break;
            }
            start = end + 1;
        }
        Ok(out)
    }
}

/// Which indexed argument the address list filters.
#[derive(Debug, Clone, Copy)]
enum TopicPosition {
    /// `topic1`: `AuthorizationUsed.authorizer`.
    First,
    /// `topic2`: `Transfer.to`.
    Second,
}
