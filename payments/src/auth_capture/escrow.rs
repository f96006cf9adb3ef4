//! The escrow as the operator (`captureAuthorizer`) drives it, and what the chain says about a
//! payment.
//!
//! | item | what |
//! |---|---|
//! | [`revert_reason`] | a revert (escrow custom error, collector or token error, or revert string) → stable [`Reason`] |
//! | [`EscrowOperator`] | `authorize`, `charge`, `capture`, `void`, `refund` from the operator's wallet: simulated first (a refusal sends nothing; an escrow address without code is refused), then sent through the operator's relayer and awaited; each [`EscrowReceipt`] carries the escrow events and token transfers it caused; [`EscrowOperator::capture_and_void`] captures part and releases the rest |
//! | [`EscrowOperator::simulate_refund`] | the whole refund (the collector's approval included, in one simulated block) before anything is sent |
//! | [`EscrowOperator::payment_state`] | `paymentState(getHash(info))` |
//! | [`EscrowOperator::events`] | the payment's `PaymentAuthorized` / `Charged` / `Captured` / `Voided` / `Reclaimed` / `Refunded` logs, oldest first |
//! | [`decode_payment_event`], [`PAYMENT_EVENT_SIGNATURES`] | one such log → (payment hash, event), for readers that scan many payments at once |
//! | [`EscrowTotals::of`] | those events summed per kind: what the chain says happened to the money |
//!
//! `paymentState` never resets (voided, reclaimed and fully refunded all read `(true, 0, 0)`),
//! so an outcome is decided from the events; the state says what can still happen.
//!
//! The operator sends through the same relayer as the facilitator's settlements
//! (`facilitator::relayer`): it numbers the transactions itself, so any number of escrow calls
//! are in flight at once, at consecutive nonces, several in one block, each watched by the
//! relayer's head follower and sent again at its own nonce (never doubled) when stuck. They are
//! not batched into one transaction: the escrow takes these calls only from the operator itself
//! (`onlySender(paymentInfo.operator)`), and a Multicall3 would be the sender. Calls that may
//! run concurrently must not depend on each other's state (two refunds sharing one collector
//! approval do: the caller orders those).
//!
//! Refunds go through the operator refund collector, which pulls the refunded amount from the
//! operator's own wallet (the receiver is never clawed back): the operator must hold the
//! tokens and have approved the collector ([`EscrowOperator::ensure_refund_allowance`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use alloy::network::EthereumWallet;
use alloy::primitives::{Address, B256, Bytes, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::simulate::{SimBlock, SimulatePayload};
use alloy::rpc::types::{TransactionInput, TransactionRequest};
use alloy::sol_types::{SolCall, SolEvent, SolInterface};
use alloy::transports::{RpcError, TransportError, TransportErrorKind};

use super::abi::{IAuthCaptureEscrow, ICollectorReverts, IErc20Allowance};
use super::{EscrowAddresses, PaymentInfo, Refusal};
use crate::facilitator::config;
use crate::facilitator::relayer::{Call, Fate, Relayer, RelayerOptions, SendError, SyncSend};
use crate::facilitator::turns::SendTurns;
use crate::reason::Reason;

mod events;

pub use events::{
    EscrowEvent, EscrowEventKind, EscrowTotals, PAYMENT_EVENT_SIGNATURES, decode_payment_event,
    payment_events,
};

/// The stable reason for a revert, from its data when the node returned it (escrow custom
/// errors, which the spec maps to codes; the collector's and the token's errors, which the
/// escrow passes through unchanged) and else from the revert text (FiatToken-style strings).
#[must_use]
pub fn revert_reason(data: Option<&[u8]>, message: &str) -> Reason {
    use IAuthCaptureEscrow::IAuthCaptureEscrowErrors as E;
    use ICollectorReverts::ICollectorRevertsErrors as C;
    if let Some(data) = data {
        if let Ok(error) = E::abi_decode(data) {
            return match error {
                E::AfterPreApprovalExpiry(_) => Reason::ValidBefore,
                E::InvalidExpiries(_) => Reason::InvalidDeadlineOrdering,
                E::ExceedsMaxAmount(_) | E::ZeroAmount(_) => Reason::ValueMismatch,
                E::AmountOverflow(_) => Reason::AmountOverflow,
                E::PaymentAlreadyCollected(_) => Reason::PaymentAlreadyCollected,
                E::TokenCollectionFailed(_) => Reason::TokenCollectionFailed,
                E::InvalidCollectorForOperation(_) => Reason::InvalidCollector,
                E::InvalidSender(_) => Reason::InvalidCaptureAuthorizer,
                E::FeeBpsOverflow(_) => Reason::InvalidFeeBps,
                E::InvalidFeeBpsRange(_) => Reason::InvalidFeeBpsRange,
                E::FeeBpsOutOfRange(_) => Reason::FeeBpsOutOfRange,
                E::ZeroFeeReceiver(_) => Reason::ZeroFeeReceiver,
                E::InvalidFeeReceiver(_) => Reason::InvalidFeeReceiver,
                E::AfterAuthorizationExpiry(_) => Reason::CaptureDeadlineExpired,
                E::InsufficientAuthorization(_) => Reason::InsufficientAuthorization,
                E::ZeroAuthorization(_) => Reason::ZeroAuthorization,
                E::BeforeAuthorizationExpiry(_) => Reason::BeforeCaptureDeadline,
                E::AfterRefundExpiry(_) => Reason::RefundDeadlineExpired,
                E::RefundExceedsCapture(_) => Reason::RefundExceedsCapture,
            };
        }
        if let Ok(error) = C::abi_decode(data) {
            return match error {
                C::InsufficientBalance(_) | C::ERC20InsufficientBalance(_) => {
                    Reason::InsufficientBalance
                }
                C::InsufficientAllowance(_) | C::ERC20InsufficientAllowance(_) => {
                    Reason::RefundNotFunded
                }
                C::AuthorizationNotYetValid(_) => Reason::ValidAfter,
                C::AuthorizationExpired(_) => Reason::ValidBefore,
                C::AuthorizationUsedOrCanceled(_) => Reason::NonceAlreadyUsed,
                C::InvalidSignature(_) => Reason::Signature,
                C::OnlyAuthCaptureEscrow(_) => Reason::InvalidCollector,
                C::CallerMustBePayee(_) => Reason::TokenCollectorMismatch,
                C::SafeERC20FailedOperation(_)
                | C::TransferFromFailed(_)
                | C::TransferFailed(_) => Reason::TokenCollectionFailed,
            };
        }
    }
    let text = message.to_ascii_lowercase();
    let table: [(&str, Reason); 8] = [
        ("invalid signature", Reason::Signature),
        (
            "authorization is used or canceled",
            Reason::NonceAlreadyUsed,
        ),
        ("authorization is expired", Reason::ValidBefore),
        ("authorization is not yet valid", Reason::ValidAfter),
        ("caller must be the payee", Reason::TokenCollectorMismatch),
        (
            "transfer amount exceeds balance",
            Reason::InsufficientBalance,
        ),
        ("transfer amount exceeds allowance", Reason::RefundNotFunded),
        ("transfer_from_failed", Reason::TokenCollectionFailed),
    ];
    table
        .into_iter()
        .find(|(needle, _)| text.contains(needle))
        .map_or(Reason::SimulationFailed, |(_, reason)| reason)
}

/// The node's answer to a call that reverted, as a refusal; `None` when the error is not a
/// revert (the node failed: the outcome is unknown).
#[must_use]
pub fn revert_refusal(error: &TransportError) -> Option<Refusal> {
    let RpcError::ErrorResp(payload) = error else {
        return None;
    };
    let reverted = payload.code == 3 || payload.message.to_ascii_lowercase().contains("revert");
    reverted.then(|| Refusal {
        reason: revert_reason(
            payload.as_revert_data().as_ref().map(|data| data.as_ref()),
            &payload.message,
        ),
        message: Some(payload.message.clone().into_owned()),
    })
}

/// `eth_call` of `calldata` to `to` from `from`: `Ok(Ok(bytes))` returned, `Ok(Err(refusal))`
/// reverted, `Err` the node could not be asked.
pub(crate) async fn simulate(
    provider: &DynProvider,
    from: Address,
    to: Address,
    calldata: Vec<u8>,
) -> Result<Result<Bytes, Refusal>, TransportError> {
    let request = TransactionRequest::default()
        .from(from)
        .to(to)
        .input(TransactionInput::new(calldata.into()));
    match provider.call(request).await {
        Ok(bytes) => Ok(Ok(bytes)),
        Err(error) => match revert_refusal(&error) {
            Some(refusal) => Ok(Err(refusal)),
            None => Err(error),
        },
    }
}

/// `paymentState` of one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentState {
    /// Authorized or charged, ever (never resets).
    pub has_collected_payment: bool,
    /// Held in escrow, capturable (or voidable, or reclaimable after `captureDeadline`).
    pub capturable_amount: U256,
    /// Captured and not yet refunded.
    pub refundable_amount: U256,
}

/// A token `Transfer` a transaction emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenTransfer {
    /// The token.
    pub token: Address,
    /// Sender.
    pub from: Address,
    /// Recipient.
    pub to: Address,
    /// Atomic units.
    pub value: U256,
    /// The log's index in the block.
    pub log_index: Option<u64>,
}

/// A mined, successful escrow transaction, with what it did: the escrow's payment events and
/// the token transfers, read from its receipt (what a ledger reconciles against).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscrowReceipt {
    /// The transaction.
    pub tx_hash: TxHash,
    /// Its block.
    pub block_number: Option<u64>,
    /// Gas it used.
    pub gas_used: u64,
    /// The escrow's payment events in it (`PaymentCaptured`, `PaymentVoided`, …).
    pub events: Vec<EscrowEvent>,
    /// The ERC-20 `Transfer`s in it, in log order.
    pub transfers: Vec<TokenTransfer>,
}

/// What [`EscrowOperator::capture_and_void`] did: the capture (none for 0) and the void of the
/// rest (none when nothing was left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalized {
    /// The capture's receipt.
    pub capture: Option<EscrowReceipt>,
    /// The void's receipt.
    pub void: Option<EscrowReceipt>,
}

/// A [`EscrowOperator::capture_and_void`] that failed, with the capture it made first, if any.
#[derive(Debug, thiserror::Error)]
#[error("finalizing the payment failed after {}: {error}", if .captured.is_some() { "capturing" } else { "nothing" })]
pub struct FinalizeError {
    /// The capture that went through before the failure.
    pub captured: Option<EscrowReceipt>,
    /// What failed.
    #[source]
    pub error: EscrowError,
}

/// Why an escrow call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum EscrowError {
    /// The call would revert now: nothing was sent.
    #[error("escrow call refused: {}", .0.reason)]
    Refused(Refusal),
    /// Sent, mined, reverted (state changed between simulation and inclusion).
    #[error("escrow transaction {tx_hash} reverted")]
    Reverted {
        /// The reverted transaction.
        tx_hash: TxHash,
    },
    /// Sent, no receipt within the timeout: ask the chain (`payment_state`, `events`) later.
    #[error("escrow transaction {0} not mined in time")]
    Pending(TxHash),
    /// The node could not be asked: the outcome is unknown.
    #[error("chain RPC failed")]
    Rpc(#[from] TransportError),
}

impl EscrowError {
    /// The stable reason of a refusal or failure, `None` for unknown outcomes.
    #[must_use]
    pub fn reason(&self) -> Option<&Reason> {
        match self {
            Self::Refused(refusal) => Some(&refusal.reason),
            Self::Reverted { .. } => Some(&Reason::TransactionFailed),
            Self::Pending(_) | Self::Rpc(_) => None,
        }
    }
}

/// The operator (`captureAuthorizer`) of one escrow deployment on one chain.
///
/// `provider` must sign for `operator` (a wallet filler with the operator key, as
/// `ProviderBuilder::new().wallet(key)` gives); nonces, gas and fees are set by the operator's
/// relayer. Clones share the relayer, hence one nonce sequence.
#[derive(Clone)]
pub struct EscrowOperator {
    provider: DynProvider,
    chain_id: u64,
    addresses: EscrowAddresses,
    operator: Address,
    receipt_timeout: Duration,
    sending: RelayerOptions,
    relayer: Arc<Relayer>,
    /// Set once the escrow address was seen holding code (a deployment never goes away).
    escrow_seen: Arc<AtomicBool>,
}

impl std::fmt::Debug for EscrowOperator {
    // The provider holds the operator's key: print only what identifies the operator.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EscrowOperator")
            .field("chain_id", &self.chain_id)
            .field("addresses", &self.addresses)
            .field("operator", &self.operator)
            .finish_non_exhaustive()
    }
}

impl EscrowOperator {
    /// An operator with a 60 s receipt timeout (the spec's figure), reading the head every
    /// 100 ms while a call waits for its block and sending a call again at its nonce after 15 s
    /// without a receipt (the facilitator's defaults).
    #[must_use]
    pub fn new(
        provider: DynProvider,
        chain_id: u64,
        addresses: EscrowAddresses,
        operator: Address,
    ) -> Self {
        let sending = RelayerOptions {
            // The escrow takes its calls from the operator only: nothing to batch through.
            multicall: None,
            batch_max: 1,
            batch_window: Duration::ZERO,
            resend_after: Duration::from_millis(config::default_resend_after_ms()),
            poll_interval: Duration::from_millis(config::default_receipt_poll_interval_ms()),
            sync_send: None,
            turns: None,
        };
        let relayer = Arc::new(Relayer::new(provider.clone(), operator, &sending));
        Self {
            provider,
            chain_id,
            addresses,
            operator,
            receipt_timeout: Duration::from_secs(60),
            sending,
            relayer,
            escrow_seen: Arc::default(),
        }
    }

    /// The same operator sending with `edit`ed options, through a new relayer.
    fn resending(mut self, edit: impl FnOnce(&mut RelayerOptions)) -> Self {
        edit(&mut self.sending);
        self.relayer = Arc::new(Relayer::new(
            self.provider.clone(),
            self.operator,
            &self.sending,
        ));
        self
    }

    /// Overrides how long a call waits for its receipt and how often the head is read while it
    /// waits.
    #[must_use]
    pub fn with_receipt_timeout(mut self, timeout: Duration, poll_interval: Duration) -> Self {
        self.receipt_timeout = timeout;
        self.resending(|sending| {
            sending.poll_interval = poll_interval.max(Duration::from_millis(1))
        })
    }

    /// Overrides how long a call may go without a receipt before it is sent again at its
    /// nonce with higher fees.
    #[must_use]
    pub fn with_resend_after(self, resend_after: Duration) -> Self {
        self.resending(|sending| sending.resend_after = resend_after.max(Duration::from_millis(1)))
    }

    /// Sends with `eth_sendRawTransactionSync` (EIP-7966) where the chain mines at once,
    /// signing with `wallet` (the operator's key). See the facilitator's `sync_send`.
    #[must_use]
    pub fn with_sync_send(self, wallet: EthereumWallet) -> Self {
        let chain_id = self.chain_id;
        self.resending(|sending| sending.sync_send = Some(SyncSend { wallet, chain_id }))
    }

    /// Takes `turns` on the operator's key before each send: the key is shared with other
    /// senders (every instance of a marketplace operates its escrow with one key).
    #[must_use]
    pub fn with_turns(self, turns: Arc<dyn SendTurns>) -> Self {
        self.resending(|sending| sending.turns = Some(turns))
    }

    /// The operator's address.
    #[must_use]
    pub fn operator(&self) -> Address {
        self.operator
    }

    /// The deployment.
    #[must_use]
    pub fn addresses(&self) -> EscrowAddresses {
        self.addresses
    }

    /// `getHash(info)` on this chain and escrow.
    #[must_use]
    pub fn payment_hash(&self, info: &PaymentInfo) -> B256 {
        info.get_hash(self.chain_id, self.addresses.escrow)
    }

    /// `authorize(info, amount, collector, collectorData)`: payer → escrow.
    pub async fn authorize(
        &self,
        info: &PaymentInfo,
        amount: U256,
        collector: Address,
        collector_data: Bytes,
    ) -> Result<EscrowReceipt, EscrowError> {
        let call = IAuthCaptureEscrow::authorizeCall {
            paymentInfo: info.clone(),
            amount,
            tokenCollector: collector,
            collectorData: collector_data,
        };
        self.send(self.addresses.escrow, call.abi_encode()).await
    }

    /// `charge(info, amount, collector, collectorData, feeBps, feeReceiver)`: payer → receiver
    /// and fee receiver in one step.
    pub async fn charge(
        &self,
        info: &PaymentInfo,
        amount: U256,
        collector: Address,
        collector_data: Bytes,
        fee_bps: u16,
        fee_receiver: Address,
    ) -> Result<EscrowReceipt, EscrowError> {
        let call = IAuthCaptureEscrow::chargeCall {
            paymentInfo: info.clone(),
            amount,
            tokenCollector: collector,
            collectorData: collector_data,
            feeBps: fee_bps,
            feeReceiver: fee_receiver,
        };
        self.send(self.addresses.escrow, call.abi_encode()).await
    }

    /// `capture(info, amount, feeBps, feeReceiver)`: escrow → receiver (amount minus the fee,
    /// rounded down) and fee receiver. Strictly before `captureDeadline`. A `feeReceiver` named
    /// in `info` must be passed exactly, even at 0 bps.
    pub async fn capture(
        &self,
        info: &PaymentInfo,
        amount: U256,
        fee_bps: u16,
        fee_receiver: Address,
    ) -> Result<EscrowReceipt, EscrowError> {
        let call = IAuthCaptureEscrow::captureCall {
            paymentInfo: info.clone(),
            amount,
            feeBps: fee_bps,
            feeReceiver: fee_receiver,
        };
        self.send(self.addresses.escrow, call.abi_encode()).await
    }

    /// Partial acceptance: captures `amount` (nothing for 0) at `fee_bps` to `fee_receiver`,
    /// then voids whatever is still held back to the payer, in two transactions. When nothing
    /// is left to void (a full capture, or a race that emptied the hold) no void is sent.
    ///
    /// # Errors
    /// The capture's refusal (nothing moved), or the void's failure with the capture that went
    /// through before it.
    pub async fn capture_and_void(
        &self,
        info: &PaymentInfo,
        amount: U256,
        fee_bps: u16,
        fee_receiver: Address,
    ) -> Result<Finalized, FinalizeError> {
        let capture = if amount.is_zero() {
            None
        } else {
            Some(
                self.capture(info, amount, fee_bps, fee_receiver)
                    .await
                    .map_err(|error| FinalizeError {
                        captured: None,
                        error,
                    })?,
            )
        };
        let remaining = match self.payment_state(info).await {
            Ok(state) => state.capturable_amount,
            Err(error) => {
                return Err(FinalizeError {
                    captured: capture,
                    error: error.into(),
                });
            }
        };
        if remaining.is_zero() {
            return Ok(Finalized {
                capture,
                void: None,
            });
        }
        match self.void(info).await {
            Ok(void) => Ok(Finalized {
                capture,
                void: Some(void),
            }),
            Err(error) => Err(FinalizeError {
                captured: capture,
                error,
            }),
        }
    }

    /// `void(info)`: everything still held goes back to the payer (works after
    /// `captureDeadline` too).
    pub async fn void(&self, info: &PaymentInfo) -> Result<EscrowReceipt, EscrowError> {
        let call = IAuthCaptureEscrow::voidCall {
            paymentInfo: info.clone(),
        };
        self.send(self.addresses.escrow, call.abi_encode()).await
    }

    /// `refund(info, amount, collector, collectorData)`: `collector` funds `amount` back to the
    /// payer; strictly before `refundDeadline`, at most what was captured and not refunded.
    /// With the operator refund collector the funds come from the operator's wallet (see
    /// [`Self::ensure_refund_allowance`]); a shortfall there is [`Reason::RefundNotFunded`].
    pub async fn refund(
        &self,
        info: &PaymentInfo,
        amount: U256,
        collector: Address,
        collector_data: Bytes,
    ) -> Result<EscrowReceipt, EscrowError> {
        let call = IAuthCaptureEscrow::refundCall {
            paymentInfo: info.clone(),
            amount,
            tokenCollector: collector,
            collectorData: collector_data,
        };
        let outcome = self.send(self.addresses.escrow, call.abi_encode()).await;
        match outcome {
            Err(EscrowError::Refused(refusal)) => {
                Err(EscrowError::Refused(operator_funds(refusal)))
            }
            other => other,
        }
    }

    /// The whole refund of `amount` through the operator refund collector, simulated from the
    /// operator and sent nowhere: the escrow's own checks (the refund deadline by the chain's
    /// clock, what was captured and not yet refunded, the operator), the collection from the
    /// operator's wallet and the transfer to the payer. `Ok(Ok(()))` when
    /// [`Self::ensure_refund_allowance`] then [`Self::refund`] would succeed now;
    /// `Ok(Err(refusal))` says why not (the escrow's custom errors by [`revert_reason`], a
    /// wallet that cannot fund it as [`Reason::RefundNotFunded`]); `Err` when the node could
    /// not be asked. Nothing is sent either way, so a refund that cannot happen costs no
    /// approval.
    ///
    /// With the collector's allowance already covering `amount`, one `eth_call` of `refund` is
    /// the whole refund. Otherwise the approval must run first, and `eth_simulateV1` runs both
    /// in one simulated block. A node without `eth_simulateV1` gets `refund` simulated without
    /// the approval: the escrow makes every check of its own before it collects, so a revert
    /// for want of allowance proves them passed, and the operator's balance says the rest.
    pub async fn simulate_refund(
        &self,
        info: &PaymentInfo,
        amount: U256,
    ) -> Result<Result<(), Refusal>, TransportError> {
        if let Err(refusal) = self.escrow_deployed().await? {
            return Ok(Err(refusal));
        }
        let collector = self.addresses.operator_refund_collector;
        let refund = IAuthCaptureEscrow::refundCall {
            paymentInfo: info.clone(),
            amount,
            tokenCollector: collector,
            collectorData: Bytes::new(),
        }
        .abi_encode();
        let allowance = match self.refund_allowance(info.token).await? {
            Ok(allowance) => allowance,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if allowance >= amount {
            let simulated =
                simulate(&self.provider, self.operator, self.addresses.escrow, refund).await?;
            return Ok(simulated.map(drop).map_err(operator_funds));
        }
        let approve = IErc20Allowance::approveCall {
            spender: collector,
            value: amount,
        }
        .abi_encode();
        let calls = [
            (info.token, approve),
            (self.addresses.escrow, refund.clone()),
        ];
        match simulate_in_one_block(&self.provider, self.operator, &calls).await {
            Ok(outcome) => Ok(outcome.map_err(operator_funds)),
            Err(error) if method_not_supported(&error) => {
                match simulate(&self.provider, self.operator, self.addresses.escrow, refund).await?
                {
                    Ok(_) => Ok(Ok(())),
                    Err(Refusal {
                        reason: Reason::RefundNotFunded | Reason::InsufficientBalance,
                        ..
                    }) => {
                        let balance = self.operator_balance(info.token).await?;
                        Ok(if balance >= amount {
                            Ok(())
                        } else {
                            Err(Reason::RefundNotFunded.into())
                        })
                    }
                    Err(refusal) => Ok(Err(refusal)),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// What the operator refund collector may pull from the operator's wallet.
    async fn refund_allowance(
        &self,
        token: Address,
    ) -> Result<Result<U256, Refusal>, TransportError> {
        let read = IErc20Allowance::allowanceCall {
            owner: self.operator,
            spender: self.addresses.operator_refund_collector,
        };
        Ok(
            simulate(&self.provider, self.operator, token, read.abi_encode())
                .await?
                .map(|bytes| {
                    IErc20Allowance::allowanceCall::abi_decode_returns(&bytes).unwrap_or(U256::ZERO)
                }),
        )
    }

    /// The operator's balance of `token` (zero when the token does not answer).
    async fn operator_balance(&self, token: Address) -> Result<U256, TransportError> {
        let read = IErc20Allowance::balanceOfCall {
            account: self.operator,
        };
        Ok(
            match simulate(&self.provider, self.operator, token, read.abi_encode()).await? {
                Ok(bytes) => {
                    IErc20Allowance::balanceOfCall::abi_decode_returns(&bytes).unwrap_or(U256::ZERO)
                }
                Err(_) => U256::ZERO,
            },
        )
    }

    /// Approves the operator refund collector for at least `amount` of `token` from the
    /// operator's wallet; `None` when the allowance already covers it.
    pub async fn ensure_refund_allowance(
        &self,
        token: Address,
        amount: U256,
    ) -> Result<Option<EscrowReceipt>, EscrowError> {
        let collector = self.addresses.operator_refund_collector;
        let current = self
            .refund_allowance(token)
            .await?
            .map_err(EscrowError::Refused)?;
        if current >= amount {
            return Ok(None);
        }
        let approve = IErc20Allowance::approveCall {
            spender: collector,
            value: amount,
        };
        self.send(token, approve.abi_encode()).await.map(Some)
    }

    /// `paymentState(getHash(info))`.
    pub async fn payment_state(&self, info: &PaymentInfo) -> Result<PaymentState, TransportError> {
        self.payment_state_by_hash(self.payment_hash(info)).await
    }

    /// `paymentState(hash)`.
    pub async fn payment_state_by_hash(&self, hash: B256) -> Result<PaymentState, TransportError> {
        payment_state(&self.provider, self.addresses.escrow, hash).await
    }

    /// The payment's escrow events from `from_block` on, oldest first.
    pub async fn events(
        &self,
        payment_hash: B256,
        from_block: u64,
    ) -> Result<Vec<EscrowEvent>, TransportError> {
        payment_events(
            &self.provider,
            self.addresses.escrow,
            payment_hash,
            from_block,
        )
        .await
    }

    /// Refused when the escrow address holds no code: a call to it would "succeed" doing
    /// nothing (asked once; a deployment never goes away).
    async fn escrow_deployed(&self) -> Result<Result<(), Refusal>, TransportError> {
        if self.escrow_seen.load(Ordering::Relaxed) {
            return Ok(Ok(()));
        }
        let escrow = self.addresses.escrow;
        if self.provider.get_code_at(escrow).await?.is_empty() {
            return Ok(Err(escrow_not_deployed(escrow)));
        }
        self.escrow_seen.store(true, Ordering::Relaxed);
        Ok(Ok(()))
    }

    /// Simulates from the operator, then sends through the operator's relayer and waits for the
    /// receipt.
    async fn send(&self, to: Address, calldata: Vec<u8>) -> Result<EscrowReceipt, EscrowError> {
        if to == self.addresses.escrow {
            self.escrow_deployed()
                .await?
                .map_err(EscrowError::Refused)?;
        }
        if let Err(refusal) = simulate(&self.provider, self.operator, to, calldata.clone()).await? {
            return Err(EscrowError::Refused(refusal));
        }
        let call = Call {
            to,
            calldata: calldata.clone().into(),
        };
        // Boxed: the relayer's send is a large future, and every escrow call awaits it.
        let broadcast = match Box::pin(self.relayer.send(call)).await {
            Ok(broadcast) => broadcast,
            // Its gas measurement reverted: state moved since the simulation. Asked again, the
            // node names the reason in the escrow's own errors.
            Err(SendError::Reverted(message)) => {
                return Err(EscrowError::Refused(
                    match simulate(&self.provider, self.operator, to, calldata).await? {
                        Err(refusal) => refusal,
                        Ok(_) => Refusal {
                            reason: revert_reason(None, &message),
                            message: Some(message),
                        },
                    },
                ));
            }
            Err(SendError::Rpc(error)) => {
                return Err(match revert_refusal(&error) {
                    Some(refusal) => EscrowError::Refused(refusal),
                    None => EscrowError::Rpc(error),
                });
            }
        };
        let receipt = match broadcast.fate_within(self.receipt_timeout).await {
            Some(Fate::Mined(receipt)) => receipt,
            // Unmined in time, or its nonce taken by a transaction sent elsewhere: either way
            // the chain says later what happened (the events of the payment).
            Some(Fate::Superseded) | None => return Err(EscrowError::Pending(broadcast.latest())),
        };
        let tx_hash = receipt.transaction_hash;
        if !receipt.status() {
            return Err(EscrowError::Reverted { tx_hash });
        }
        let events = receipt
            .logs()
            .iter()
            .filter(|log| log.address() == self.addresses.escrow)
            .filter_map(decode_payment_event)
            .map(|(_, event)| event)
            .collect();
        let transfers = receipt
            .logs()
            .iter()
            .filter_map(|log| {
                let transfer =
                    crate::exact::onchain::IEip3009Token::Transfer::decode_log(&log.inner).ok()?;
                Some(TokenTransfer {
                    token: log.address(),
                    from: transfer.from,
                    to: transfer.to,
                    value: transfer.value,
                    log_index: log.log_index,
                })
            })
            .collect();
        Ok(EscrowReceipt {
            tx_hash,
            block_number: receipt.block_number,
            gas_used: receipt.gas_used,
            events,
            transfers,
        })
    }
}

/// The refusal of a payment whose escrow address holds no code: the offer names an escrow
/// that is not deployed on this chain (the spec's extra check: not an escrow in use here).
#[must_use]
pub fn escrow_not_deployed(escrow: Address) -> Refusal {
    Refusal {
        reason: Reason::InvalidAuthCaptureExtra,
        message: Some(format!("no escrow is deployed at {escrow} on this chain")),
    }
}

/// A refund's refusal in the refund's terms: the operator's wallet is what runs short there, not
/// the payer's.
fn operator_funds(refusal: Refusal) -> Refusal {
    match refusal.reason {
        Reason::InsufficientBalance => Refusal {
            reason: Reason::RefundNotFunded,
            message: refusal.message,
        },
        _ => refusal,
    }
}

/// Whether the node answered that it does not know the method (so another way must be used).
fn method_not_supported(error: &TransportError) -> bool {
    let RpcError::ErrorResp(payload) = error else {
        return false;
    };
    let message = payload.message.to_ascii_lowercase();
    payload.code == -32601
        || message.contains("method not found")
        || message.contains("not supported")
        || message.contains("does not exist")
        || message.contains("not available")
}

/// `calls` (target, calldata) from `from`, one after another in one simulated block
/// (`eth_simulateV1`, on the latest block, no validation of gas or nonces): `Ok(Ok(()))` when
/// all succeed, `Ok(Err(refusal))` naming the first that reverts, `Err` when the node could not
/// run it (including a node without the method).
pub(crate) async fn simulate_in_one_block(
    provider: &DynProvider,
    from: Address,
    calls: &[(Address, Vec<u8>)],
) -> Result<Result<(), Refusal>, TransportError> {
    let block = calls
        .iter()
        .fold(SimBlock::default(), |block, (to, calldata)| {
            block.call(
                TransactionRequest::default()
                    .from(from)
                    .to(*to)
                    .input(TransactionInput::new(calldata.clone().into())),
            )
        });
    let payload = SimulatePayload::default().extend(block);
    let blocks = provider.simulate(&payload).await?;
    let results = blocks
        .into_iter()
        .flat_map(|block| block.calls)
        .collect::<Vec<_>>();
    if results.len() != calls.len() {
        return Err(TransportErrorKind::custom_str(
            "eth_simulateV1 answered another number of calls",
        ));
    }
    for result in results {
        if result.status {
            continue;
        }
        // Nodes put the revert data in the error's `data` or in `returnData`.
        let data = result
            .error
            .as_ref()
            .and_then(|error| error.data.clone())
            .filter(|data| !data.is_empty())
            .unwrap_or_else(|| result.return_data.clone());
        let message = result
            .error
            .map_or_else(|| "execution reverted".to_owned(), |error| error.message);
        return Ok(Err(Refusal {
            reason: revert_reason(Some(&data), &message),
            message: Some(message),
        }));
    }
    Ok(Ok(()))
}

/// `paymentState(hash)` of the escrow at `escrow`.
pub async fn payment_state(
    provider: &DynProvider,
    escrow: Address,
    hash: B256,
) -> Result<PaymentState, TransportError> {
    let call = IAuthCaptureEscrow::paymentStateCall {
        paymentInfoHash: hash,
    };
    let request = TransactionRequest::default()
        .to(escrow)
        .input(TransactionInput::new(call.abi_encode().into()));
    let bytes = provider.call(request).await?;
    // An address without the escrow's code answers nothing decodable: report "never collected"
    // rather than guess.
    Ok(
        match IAuthCaptureEscrow::paymentStateCall::abi_decode_returns(&bytes) {
            Ok(state) => PaymentState {
                has_collected_payment: state.hasCollectedPayment,
                capturable_amount: U256::from(state.capturableAmount),
                refundable_amount: U256::from(state.refundableAmount),
            },
            Err(_) => PaymentState {
                has_collected_payment: false,
                capturable_amount: U256::ZERO,
                refundable_amount: U256::ZERO,
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::sol_types::SolError;

    #[test]
    fn escrow_custom_errors_map_to_the_spec_codes() {
        use IAuthCaptureEscrow as E;
        let cases: [(Vec<u8>, Reason); 6] = [
            (
                E::PaymentAlreadyCollected {
                    paymentInfoHash: B256::ZERO,
                }
                .abi_encode(),
                Reason::PaymentAlreadyCollected,
            ),
            (
                E::InvalidSender {
                    sender: Address::ZERO,
                    expected: Address::ZERO,
                }
                .abi_encode(),
                Reason::InvalidCaptureAuthorizer,
            ),
            (
                E::AfterAuthorizationExpiry {
                    timestamp: Default::default(),
                    expiry: Default::default(),
                }
                .abi_encode(),
                Reason::CaptureDeadlineExpired,
            ),
            (
                E::ZeroAuthorization {
                    paymentInfoHash: B256::ZERO,
                }
                .abi_encode(),
                Reason::ZeroAuthorization,
            ),
            (
                E::TokenCollectionFailed {}.abi_encode(),
                Reason::TokenCollectionFailed,
            ),
            (
                ICollectorReverts::InvalidSignature {}.abi_encode(),
                Reason::Signature,
            ),
        ];
        for (data, reason) in cases {
            assert_eq!(revert_reason(Some(&data), "execution reverted"), reason);
        }
    }

    #[test]
    fn revert_strings_of_fiat_tokens_map_to_stable_codes() {
        assert_eq!(
            revert_reason(None, "execution reverted: FiatTokenV2: invalid signature"),
            Reason::Signature
        );
        assert_eq!(
            revert_reason(
                None,
                "execution reverted: ERC20: transfer amount exceeds balance"
            ),
            Reason::InsufficientBalance
        );
        assert_eq!(
            revert_reason(None, "execution reverted: TRANSFER_FROM_FAILED"),
            Reason::TokenCollectionFailed
        );
        assert_eq!(
            revert_reason(Some(&[1, 2, 3, 4]), "execution reverted"),
            Reason::SimulationFailed
        );
    }
}
