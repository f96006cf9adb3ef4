//! Permit2 payments in the local facilitator: `exact` over Permit2 (told from EIP-3009 by the
//! payload's `permit2Authorization`) and `upto`. Verification runs the official facilitator's
//! checks; settlement calls the scheme's proxy from the chain's relayer, which for `upto` must be
//! the witness's `facilitator` (the address `/supported` advertises). A payment carrying a signed
//! ERC-20 approval has it funded, broadcast and mined first ([`super::approval`]).
//!
//! Per payment key (network, asset, payer, Permit2 nonce):
//!
//! | situation | `/settle` answers |
//! |---|---|
//! | first settle, mined | `success: true` with the transaction (`upto`: and the `amount` moved) |
//! | `upto` settle of 0 | `success: true`, `transaction: ""`, `amount: "0"`, nothing sent; the authorization counts as settled here |
//! | concurrent settles of one payment | queued on the payment-key lock: one sends, the others are refused as already used |
//! | receipt not seen in time | `settlement_pending` with the hash (`success: false`); remembered |
//! | retry after `settlement_pending` | waits on that broadcast (re-sent at the same nonce while unmined), never sends another: mined → its outcome; nonce taken by a transaction not sent here → settles afresh |
//! | retry after a success (any amount, zero included), in this process | `invalid_exact_evm_nonce_already_used`, `transaction: ""`, the original transaction named in `errorMessage` |
//! | settle of a permit whose nonce is spent on chain (a restart, another facilitator) | the same refusal, the original settlement found from the chain ([`crate::permit2::ledger`]) |
//!
//! A zero settlement leaves the Permit2 nonce unused on chain (nobody but the payer can burn
//! it), so after a restart only the resource server's own record refuses a second settle of a
//! zero-settled `upto` authorization.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use alloy::primitives::{Address, TxHash, U256};
use alloy::transports::TransportError;

use super::{Chain, LocalFacilitator, REMEMBERED_SETTLEMENTS};
use crate::exact::PaymentKey;
use crate::exact::onchain::Refusal;
use crate::facilitator::FacilitatorError;
use crate::facilitator::relayer::{Broadcast, Call, Fate, SendError};
use crate::permit2::ledger::{Permit2OnChain, Permit2Ref, permit_on_chain};
use crate::permit2::onchain::{revert_reason, settlement_call, transfer_in_receipt, verify};
use crate::permit2::{Permit2Payment, Permit2Scheme, UPTO_SCHEME, is_permit2_shaped};
use crate::reason::Reason;
use crate::wire::{EXACT_SCHEME, SettleResponse, VerifyRequest, VerifyResponse};

/// Whether the bundled facilitator handles `request` as a Permit2 payment.
pub(super) fn is_permit2_request(request: &VerifyRequest) -> bool {
    match request.payment_requirements.scheme.as_str() {
        UPTO_SCHEME => true,
        EXACT_SCHEME => is_permit2_shaped(&request.payment_payload.payload),
        _ => false,
    }
}

/// What a settle of one Permit2 payment left behind.
#[derive(Clone)]
enum Remembered {
    /// `success: true` was answered; `None` for a zero `upto` settlement.
    Settled(Option<TxHash>),
    /// Broadcast, moving `amount`; no success answered yet.
    Pending(Arc<Broadcast>, U256),
}

/// Bounded memory of settled and pending Permit2 payments, oldest forgotten first.
#[derive(Default)]
pub(super) struct Permit2Book {
    inner: StdMutex<BookInner>,
}

#[derive(Default)]
struct BookInner {
    entries: HashMap<PaymentKey, Remembered>,
    order: VecDeque<PaymentKey>,
}

impl Permit2Book {
    fn get(&self, key: &PaymentKey) -> Option<Remembered> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.entries.get(key).cloned()
    }

    fn set(&self, key: PaymentKey, state: Option<Remembered>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match state {
            Some(state) => {
                if inner.entries.insert(key.clone(), state).is_none() {
                    inner.order.push_back(key);
                }
                while inner.entries.len() > REMEMBERED_SETTLEMENTS {
                    let Some(oldest) = inner.order.pop_front() else {
                        break;
                    };
                    inner.entries.remove(&oldest);
                }
            }
            None => {
                inner.entries.remove(&key);
            }
        }
        if inner.order.len() > 2 * REMEMBERED_SETTLEMENTS {
            let BookInner { entries, order } = &mut *inner;
            order.retain(|key| entries.contains_key(key));
        }
    }
}

/// The payer named by a payload, for verdicts on payloads that failed other checks.
fn payer_hint(request: &VerifyRequest) -> Option<Address> {
    request
        .payment_payload
        .permit2_evm()
        .ok()
        .map(|payload| payload.permit2_authorization.from)
}

/// An outcome of a settle and what to remember of it.
struct Outcome {
    response: SettleResponse,
    remember: Option<Remembered>,
}

impl LocalFacilitator {
    /// Parses the payment against the requirements (for settlement: the amount to move) and
    /// finds its chain; an `upto` witness must name this chain's relayer.
    fn locate_permit2(
        &self,
        request: &VerifyRequest,
        for_settlement: bool,
    ) -> Result<(Arc<Chain>, Permit2Payment, U256), Reason> {
        let (payment, amount) = if for_settlement {
            Permit2Payment::parse_for_settlement(
                &request.payment_payload,
                &request.payment_requirements,
            )?
        } else {
            let payment =
                Permit2Payment::parse(&request.payment_payload, &request.payment_requirements)?;
            let amount = payment.max_amount();
            (payment, amount)
        };
        let chain = self
            .chains
            .get(&payment.network)
            .ok_or(Reason::InvalidNetwork)?;
        if let Some(tokens) = &chain.tokens
            && !tokens.contains(&payment.asset)
        {
            return Err(Reason::UnsupportedAsset);
        }
        if payment.scheme == Permit2Scheme::Upto
            && payment.payload.permit2_authorization.witness.facilitator
                != Some(chain.relayer.address())
        {
            return Err(Reason::UptoFacilitatorMismatch);
        }
        Ok((Arc::clone(chain), payment, amount))
    }

    pub(super) async fn verify_permit2(
        &self,
        request: &VerifyRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let (chain, payment, amount) = match self.locate_permit2(request, false) {
            Ok(located) => located,
            Err(reason) => return Ok(VerifyResponse::invalid(reason, payer_hint(request), None)),
        };
        let payer = payment.payer();
        if let Err(reason) = payment.check_window(chain.clock.now().await?) {
            return Ok(VerifyResponse::invalid(reason, Some(payer), None));
        }
        Ok(
            match verify(&chain.provider, chain.relayer.address(), &payment, amount).await? {
                Ok(()) => VerifyResponse::valid(payer),
                Err(Refusal { reason, message }) => {
                    tracing::debug!(network = %chain.network, %payer, %reason, "permit2 payment refused");
                    VerifyResponse::invalid(reason, Some(payer), message)
                }
            },
        )
    }

    pub(super) async fn settle_permit2(
        &self,
        request: &VerifyRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let network = request.payment_requirements.network.as_str();
        let (chain, payment, amount) = match self.locate_permit2(request, true) {
            Ok(located) => located,
            Err(reason) => {
                return Ok(SettleResponse::failed(
                    network,
                    reason,
                    payer_hint(request),
                    None,
                    None,
                ));
            }
        };
        let key = payment.key();
        let _only_settler = self.in_flight.lock(key.clone()).await;
        match self.permit2_book.get(&key) {
            Some(Remembered::Settled(original)) => {
                let message = match original {
                    Some(tx_hash) => format!("authorization already used by transaction {tx_hash}"),
                    None => "authorization already settled for 0 (nothing moved)".to_owned(),
                };
                return Ok(chain.permit2_failed(
                    &payment,
                    Refusal {
                        reason: Reason::NonceAlreadyUsed,
                        message: Some(message),
                    },
                    None,
                ));
            }
            // The broadcast decides, whatever amount this retry asks for: it is what can move.
            Some(Remembered::Pending(broadcast, sent_amount)) => {
                match broadcast.fate_within(chain.receipt_timeout).await {
                    // Its nonce went to a transaction not sent here, so it never ran.
                    Some(Fate::Superseded) => self.permit2_book.set(key.clone(), None),
                    Some(fate) => {
                        let outcome = chain.conclude_permit2(&payment, sent_amount, fate).await?;
                        self.permit2_book.set(key, outcome.remember);
                        return Ok(outcome.response);
                    }
                    None => {
                        return Ok(chain
                            .permit2_pending(&payment, &broadcast, sent_amount)
                            .response);
                    }
                }
            }
            None => {}
        }
        let outcome = chain.settle_permit2_fresh(&payment, amount).await?;
        if outcome.remember.is_some() {
            self.permit2_book.set(key, outcome.remember);
        }
        Ok(outcome.response)
    }
}

impl Chain {
    fn permit2_failed(
        &self,
        payment: &Permit2Payment,
        refusal: Refusal,
        broadcast: Option<TxHash>,
    ) -> SettleResponse {
        tracing::info!(network = %self.network, payer = %payment.payer(), reason = %refusal.reason, "permit2 settlement refused");
        SettleResponse::failed(
            self.network.as_str(),
            refusal.reason,
            Some(payment.payer()),
            broadcast.map(|hash| hash.to_string()),
            refusal.message,
        )
    }

    fn permit2_settled(
        &self,
        payment: &Permit2Payment,
        transaction: Option<TxHash>,
        amount: U256,
    ) -> Outcome {
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = ?transaction, %amount, "permit2 payment settled");
        let mut response = match transaction {
            Some(tx_hash) => SettleResponse::settled(&self.network, payment.payer(), tx_hash),
            None => SettleResponse::settled(&self.network, payment.payer(), ""),
        };
        if payment.scheme == Permit2Scheme::Upto {
            response.amount = Some(amount.to_string());
        }
        Outcome {
            response,
            remember: Some(Remembered::Settled(transaction)),
        }
    }

    fn permit2_pending(
        &self,
        payment: &Permit2Payment,
        broadcast: &Arc<Broadcast>,
        amount: U256,
    ) -> Outcome {
        let tx_hash = broadcast.latest();
        tracing::warn!(network = %self.network, tx = %tx_hash, "permit2 settlement not confirmed in time");
        Outcome {
            response: SettleResponse::failed(
                self.network.as_str(),
                Reason::SettlementPending,
                Some(payment.payer()),
                Some(tx_hash.to_string()),
                None,
            ),
            remember: Some(Remembered::Pending(Arc::clone(broadcast), amount)),
        }
    }

    /// `refusal`, unless the permit's nonce is spent on chain: then the used-nonce refusal
    /// naming the settlement that spent it, when found.
    async fn permit2_used_or(
        &self,
        payment: &Permit2Payment,
        refusal: Refusal,
        broadcast: Option<TxHash>,
    ) -> Result<Outcome, TransportError> {
        let authorization = &payment.payload.permit2_authorization;
        let permit = Permit2Ref {
            token: payment.asset,
            owner: payment.payer(),
            to: authorization.witness.to,
            nonce: authorization.nonce.get(),
        };
        // The lookup only improves the message: a log search the node refuses must not turn a
        // known refusal into an unknown.
        let on_chain = match permit_on_chain(&self.provider, permit, self.lookback_blocks).await {
            Ok(on_chain) => on_chain,
            Err(error) if refusal.reason == Reason::NonceAlreadyUsed => {
                tracing::warn!(network = %self.network, error = %error, "permit2 settlement lookup failed");
                Permit2OnChain::UsedUntraced
            }
            Err(error) => return Err(error),
        };
        let message = match on_chain {
            Permit2OnChain::Unused { .. } => {
                return Ok(Outcome {
                    response: self.permit2_failed(payment, refusal, broadcast),
                    remember: None,
                });
            }
            Permit2OnChain::Settled(transfer) => format!(
                "authorization already used by transaction {}",
                transfer.transaction
            ),
            Permit2OnChain::Invalidated => "the payer invalidated the permit's nonce".to_owned(),
            Permit2OnChain::UsedUntraced => "authorization already used".to_owned(),
        };
        Ok(Outcome {
            response: self.permit2_failed(
                payment,
                Refusal {
                    reason: Reason::NonceAlreadyUsed,
                    message: Some(message),
                },
                broadcast,
            ),
            remember: None,
        })
    }

    async fn settle_permit2_fresh(
        &self,
        payment: &Permit2Payment,
        amount: U256,
    ) -> Result<Outcome, TransportError> {
        let verdict = match payment.check_window(self.clock.now().await?) {
            Err(reason) => Err(Refusal::from(reason)),
            Ok(()) => verify(&self.provider, self.relayer.address(), payment, amount).await?,
        };
        if let Err(refusal) = verdict {
            // What an already-settled permit looks like to verification.
            return if matches!(
                refusal.reason,
                Reason::NonceAlreadyUsed
                    | Reason::SimulationFailed
                    | Reason::InsufficientBalance
                    | Reason::Permit2AllowanceRequired
                    | Reason::ValidBefore
            ) {
                self.permit2_used_or(payment, refusal, None).await
            } else {
                Ok(Outcome {
                    response: self.permit2_failed(payment, refusal, None),
                    remember: None,
                })
            };
        }
        if amount.is_zero() {
            return Ok(self.permit2_settled(payment, None, amount));
        }
        if let Err(refusal) = self.apply_erc20_approval(payment, amount).await? {
            return Ok(Outcome {
                response: self.permit2_failed(payment, refusal, None),
                remember: None,
            });
        }
        let (proxy, calldata) = settlement_call(payment, amount);
        let call = Call {
            to: proxy,
            calldata: calldata.into(),
        };
        let broadcast = match self.relayer.send(call).await {
            Ok(broadcast) => broadcast,
            // Verified a moment ago, reverts now: maybe someone settled it in between.
            Err(SendError::Reverted(message)) => {
                let refusal = Refusal {
                    reason: revert_reason(None, &message),
                    message: Some(message),
                };
                return self.permit2_used_or(payment, refusal, None).await;
            }
            Err(SendError::Rpc(error)) => return Err(error),
        };
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %broadcast.latest(), "permit2 settlement broadcast");
        match broadcast.fate_within(self.receipt_timeout).await {
            Some(fate) => self.conclude_permit2(payment, amount, fate).await,
            None => Ok(self.permit2_pending(payment, &broadcast, amount)),
        }
    }

    /// The payment's outcome from what the chain shows its transaction did.
    async fn conclude_permit2(
        &self,
        payment: &Permit2Payment,
        amount: U256,
        fate: Fate,
    ) -> Result<Outcome, TransportError> {
        let receipt = match fate {
            Fate::Mined(receipt) => receipt,
            Fate::Superseded => {
                return self
                    .permit2_used_or(payment, Reason::TransactionFailed.into(), None)
                    .await;
            }
        };
        let tx_hash = receipt.transaction_hash;
        let to = payment.payload.permit2_authorization.witness.to;
        match transfer_in_receipt(&receipt, payment.asset, payment.payer(), to) {
            Some(transfer) if transfer.amount == amount => {
                self.mined.remember(Arc::clone(&receipt));
                Ok(self.permit2_settled(payment, Some(tx_hash), amount))
            }
            Some(_) => Ok(Outcome {
                response: self.permit2_failed(
                    payment,
                    Reason::TransferEventMismatch.into(),
                    Some(tx_hash),
                ),
                remember: None,
            }),
            // Reverted: another settler may have been mined first.
            None => {
                self.permit2_used_or(payment, Reason::TransactionFailed.into(), Some(tx_hash))
                    .await
            }
        }
    }
}
