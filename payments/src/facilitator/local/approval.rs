//! Settling a Permit2 payment that carries the `erc20ApprovalGasSponsoring` extension
//! ([`crate::permit2::approval`]): before the settlement call, while the payer's allowance to
//! Permit2 is still short, fund the payer's gas if its native balance cannot pay for the approval
//! (gas limit × max fee), broadcast its signed approval, and wait until it is mined.
//!
//! The spec asks for funding, approval and settlement as one atomic bundle; a plain node
//! (anvil, most RPC endpoints) has none, so the steps are sequential, each waiting for the one
//! before. What that risks: between the funding and the approval the payer (or whoever holds its
//! key) may spend the funded ETH at the approval's nonce; the loss is bounded by the funding, at
//! most the approval's checked gas limit × max fee, and the payment then does not settle (the
//! allowance stays short). Between the approval and the settlement nothing can be stolen: the
//! permit names the proxy and the recipient.
//!
//! Safe to repeat, so a settle retried after a crash or a timeout never pays twice: every step
//! first reads the chain. An allowance already enough (the approval mined earlier, or the payer
//! approved otherwise) skips everything; a payer who already holds the gas, or whose funding
//! still waits in the node's pool, is not funded again;
//! re-broadcasting an approval the node already holds or mined is harmless (same hash), and one
//! whose nonce the payer used otherwise is refused by the chain, which then decides: the
//! settlement proceeds only if the allowance is there. The payment's own lock (the payment key)
//! keeps two settles of one payment apart; the Permit2 nonce keeps the transfer single.

use std::time::Duration;

use alloy::primitives::U256;
use alloy::providers::Provider;
use alloy::transports::TransportError;

use super::Chain;
use crate::exact::onchain::Refusal;
use crate::facilitator::relayer::{Fate, SendError};
use crate::permit2::approval::SignedApproval;
use crate::permit2::onchain::IErc20;
use crate::permit2::{PERMIT2_ADDRESS, Permit2Payment};
use crate::reason::Reason;

/// How often the approval's receipt is asked for while waiting.
const RECEIPT_POLL: Duration = Duration::from_millis(100);

fn broadcast_failed(message: String) -> Refusal {
    Refusal {
        reason: Reason::Erc20ApprovalBroadcastFailed,
        message: Some(message),
    }
}

impl Chain {
    /// Makes the payer's allowance to Permit2 cover `amount` with the payment's signed approval,
    /// when it carries one and the allowance is short (see the module docs). `Ok(Err(refusal))`:
    /// the approval did not happen (not broadcast, reverted, or not mined within the receipt
    /// timeout; a retry finds out from the chain); `Err`: the node could not be asked.
    pub(super) async fn apply_erc20_approval(
        &self,
        payment: &Permit2Payment,
        amount: U256,
    ) -> Result<Result<(), Refusal>, TransportError> {
        let Some(approval) = &payment.erc20_approval else {
            return Ok(Ok(()));
        };
        if amount.is_zero() || self.permit2_allowance(approval).await? >= amount {
            return Ok(Ok(()));
        }
        let balance = self.provider.get_balance(approval.signer).await?;
        let needed = approval.gas_cost();
        if balance < needed {
            // A funding sent before (a settle that timed out, a facilitator that restarted) and
            // still waiting in the node's pool shows in the `pending` balance: wait for it rather
            // than fund the same approval twice.
            let pending = self.provider.get_balance(approval.signer).pending().await?;
            if pending >= needed {
                return Ok(Err(broadcast_failed(
                    "the gas funding sent earlier is not mined yet".to_owned(),
                )));
            }
            let deficit = needed - pending;
            let funding = match self.relayer.fund(approval.signer, deficit).await {
                Ok(broadcast) => broadcast,
                Err(SendError::Reverted(message)) => {
                    return Ok(Err(broadcast_failed(format!("gas funding: {message}"))));
                }
                Err(SendError::Rpc(error)) => return Err(error),
            };
            tracing::info!(network = %self.network, payer = %approval.signer, wei = %deficit, tx = %funding.latest(), "funding the gas of an ERC-20 approval");
            match funding.fate_within(self.receipt_timeout).await {
                Some(Fate::Mined(receipt)) if receipt.status() => {}
                Some(_) => {
                    return Ok(Err(broadcast_failed(
                        "the gas funding transaction failed".to_owned(),
                    )));
                }
                None => {
                    return Ok(Err(broadcast_failed(format!(
                        "the gas funding transaction {} is not mined yet",
                        funding.latest()
                    ))));
                }
            }
        }
        self.broadcast_approval(approval).await
    }

    /// `owner`'s allowance to Permit2 on the approval's token.
    async fn permit2_allowance(&self, approval: &SignedApproval) -> Result<U256, TransportError> {
        use alloy::sol_types::SolCall as _;
        let read = IErc20::allowanceCall {
            owner: approval.signer,
            spender: PERMIT2_ADDRESS,
        };
        let returned = self
            .provider
            .call(
                alloy::rpc::types::TransactionRequest::default()
                    .to(approval.token)
                    .input(read.abi_encode().into()),
            )
            .await?;
        Ok(IErc20::allowanceCall::abi_decode_returns(&returned).unwrap_or_default())
    }

    /// Sends the signed approval (a node that already has it, or mined it, is fine) and waits
    /// for its receipt.
    async fn broadcast_approval(
        &self,
        approval: &SignedApproval,
    ) -> Result<Result<(), Refusal>, TransportError> {
        if let Err(error) = self.provider.send_raw_transaction(&approval.raw).await {
            let known = self
                .provider
                .get_transaction_by_hash(approval.hash)
                .await?
                .is_some();
            if !known {
                tracing::info!(network = %self.network, payer = %approval.signer, %error, "ERC-20 approval not broadcast");
                return Ok(Err(broadcast_failed(format!(
                    "the node refused the approval: {error}"
                ))));
            }
        }
        tracing::info!(network = %self.network, payer = %approval.signer, tx = %approval.hash, "ERC-20 approval broadcast");
        let deadline = tokio::time::Instant::now() + self.receipt_timeout;
        loop {
            if let Some(receipt) = self.provider.get_transaction_receipt(approval.hash).await? {
                return Ok(if receipt.status() {
                    Ok(())
                } else {
                    Err(Refusal {
                        reason: Reason::Erc20ApprovalTxFailed,
                        message: Some(format!("the approval {} reverted", approval.hash)),
                    })
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Err(broadcast_failed(format!(
                    "the approval {} is not mined yet",
                    approval.hash
                ))));
            }
            tokio::time::sleep(RECEIPT_POLL).await;
        }
    }
}
