//! The relayer: sends settlement transactions from one key with one nonce sequence.

use alloy::primitives::{Address, TxHash};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionInput, TransactionRequest};
use alloy::transports::{RpcError, TransportError};
use tokio::sync::Mutex;

use crate::exact::onchain::revert_message;

/// Attempts per send when the node reports a nonce conflict (another sender used the key, or a
/// previous send's fate was unknown).
const NONCE_ATTEMPTS: u32 = 4;

/// Why a transaction was not sent.
#[derive(Debug)]
pub(crate) enum SendError {
    /// Gas estimation reverted: the call would fail if mined now.
    Reverted(String),
    /// The node could not be asked, or refused for a reason that is not about the call.
    Rpc(TransportError),
}

impl From<TransportError> for SendError {
    fn from(error: TransportError) -> Self {
        Self::Rpc(error)
    }
}

/// Sends transactions from one relayer key.
///
/// Nonces are assigned here rather than by a provider filler: the next nonce sits behind an
/// async mutex held only for the `eth_sendRawTransaction` round trip, so concurrent settlements
/// queue for a nonce but wait for their receipts in parallel. Any failed send forgets the cached
/// nonce, and the next send re-reads the node's pending count, which resynchronises after a
/// "nonce too low" or after another process used the same key.
pub(crate) struct Relayer {
    provider: DynProvider,
    address: Address,
    next_nonce: Mutex<Option<u64>>,
}

impl std::fmt::Debug for Relayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relayer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Relayer {
    /// `provider` must sign for `address` (a wallet filler with the relayer key).
    pub(crate) fn new(provider: DynProvider, address: Address) -> Self {
        Self {
            provider,
            address,
            next_nonce: Mutex::new(None),
        }
    }

    pub(crate) fn address(&self) -> Address {
        self.address
    }

    /// Sends a call to `to` with `calldata`; returns its hash once the node accepted it.
    pub(crate) async fn send(&self, to: Address, calldata: Vec<u8>) -> Result<TxHash, SendError> {
        let request = TransactionRequest::default()
            .from(self.address)
            .to(to)
            .input(TransactionInput::new(calldata.into()));
        // Estimation and fees happen before taking the nonce lock, so only the send itself is
        // serialised.
        let gas = match self.provider.estimate_gas(request.clone()).await {
            Ok(gas) => gas,
            Err(error) => {
                return Err(match revert_message(&error) {
                    Some(message) => SendError::Reverted(message),
                    None => error.into(),
                });
            }
        };
        let fees = self.provider.estimate_eip1559_fees().await?;
        // A fifth on top of the estimate: state can shift between estimate and inclusion.
        let request = request
            .gas_limit(gas.saturating_add(gas / 5))
            .max_fee_per_gas(fees.max_fee_per_gas)
            .max_priority_fee_per_gas(fees.max_priority_fee_per_gas);

        let mut next_nonce = self.next_nonce.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let nonce = match *next_nonce {
                Some(nonce) => nonce,
                None => {
                    self.provider
                        .get_transaction_count(self.address)
                        .pending()
                        .await?
                }
            };
            match self
                .provider
                .send_transaction(request.clone().nonce(nonce))
                .await
            {
                Ok(pending) => {
                    *next_nonce = Some(nonce + 1);
                    return Ok(*pending.tx_hash());
                }
                Err(error) => {
                    // Whether the node kept the transaction is unknown; ask it next time.
                    *next_nonce = None;
                    if is_nonce_conflict(&error) && attempt < NONCE_ATTEMPTS {
                        tracing::warn!(relayer = %self.address, nonce, attempt, "nonce conflict, resyncing");
                        continue;
                    }
                    return Err(error.into());
                }
            }
        }
    }
}

fn is_nonce_conflict(error: &TransportError) -> bool {
    let RpcError::ErrorResp(payload) = error else {
        return false;
    };
    let message = payload.message.to_ascii_lowercase();
    message.contains("nonce")
        || message.contains("already known")
        || message.contains("already imported")
        || message.contains("underpriced")
}
