//! [`MinedReceipts`]: the receipts of this facilitator's own settlements, as the node gave them
//! when they were mined. The server that asked for a settlement confirms it on chain before it
//! counts it; in process, it can read the node's answer from here instead of asking the node
//! for the same receipt again ([`crate::Facilitator::mined_receipt`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use alloy::primitives::TxHash;
use alloy::rpc::types::TransactionReceipt;

/// Receipts kept. The caller reads its receipt right after its settle returns, so a short
/// memory is enough; a receipt forgotten is asked of the node instead.
const KEPT: usize = 1_024;

#[derive(Debug, Default)]
pub(super) struct MinedReceipts {
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    receipts: HashMap<TxHash, Arc<TransactionReceipt>>,
    order: VecDeque<TxHash>,
}

impl MinedReceipts {
    pub(super) fn remember(&self, receipt: Arc<TransactionReceipt>) {
        let mut kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let tx_hash = receipt.transaction_hash;
        if kept.receipts.insert(tx_hash, receipt).is_none() {
            kept.order.push_back(tx_hash);
        }
        while kept.order.len() > KEPT {
            if let Some(oldest) = kept.order.pop_front() {
                kept.receipts.remove(&oldest);
            }
        }
    }

    pub(super) fn get(&self, tx_hash: TxHash) -> Option<Arc<TransactionReceipt>> {
        let kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        kept.receipts.get(&tx_hash).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_receipts_are_forgotten_first() {
        let mined = MinedReceipts::default();
        let receipt = |n: u64| {
            let json = serde_json::json!({
                "transactionHash": TxHash::from(alloy::primitives::U256::from(n)),
                "transactionIndex": "0x0", "blockHash": TxHash::ZERO, "blockNumber": "0x1",
                "from": alloy::primitives::Address::ZERO, "to": null, "cumulativeGasUsed": "0x0",
                "gasUsed": "0x0", "contractAddress": null, "logs": [], "logsBloom": format!("0x{}", "0".repeat(512)),
                "type": "0x2", "status": "0x1", "effectiveGasPrice": "0x0",
            });
            Arc::new(serde_json::from_value::<TransactionReceipt>(json).unwrap())
        };
        for n in 0..=KEPT as u64 {
            mined.remember(receipt(n));
        }
        let hash = |n: u64| TxHash::from(alloy::primitives::U256::from(n));
        assert!(mined.get(hash(0)).is_none());
        assert!(mined.get(hash(1)).is_some());
        assert!(mined.get(hash(KEPT as u64)).is_some());
    }
}
