//! `auth-capture` in the local facilitator: verify per the spec's order, settle with
//! `authorize` (or `charge` when `autoCapture`) sent by the chain's relayer, which must be the
//! offer's `captureAuthorizer`.
//!
//! Settlement is idempotent per PaymentInfo, keyed by its `getHash` (what the escrow keys
//! `paymentState` by):
//!
//! | situation | `/settle` answers |
//! |---|---|
//! | first settle, mined | `success: true` with the transaction |
//! | concurrent settles of one payment | queued on the payment-key lock: one sends, the others find it collected |
//! | receipt not seen in time | `settlement_pending` with the hash; remembered |
//! | retry after `settlement_pending` | waits on that broadcast (re-sent at the same nonce while unmined): mined → `success: true`; unmined → `settlement_pending`; nonce taken by a transaction not sent here → settles afresh |
//! | PaymentInfo already authorized or charged (earlier settle, a restart, another facilitator) | `success: false`, `payment_already_collected`, `transaction: ""`, the collecting transaction (from the escrow's `PaymentAuthorized`/`PaymentCharged` log) named in the message |

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, PoisonError};

use alloy::primitives::{B256, TxHash};
use alloy::providers::Provider;
use alloy::transports::TransportError;

use super::{Chain, LocalFacilitator};
use crate::auth_capture::escrow::{EscrowEventKind, payment_events, payment_state, revert_reason};
use crate::auth_capture::verify::{settlement_calldata, verify_onchain};
use crate::auth_capture::{AuthCapturePayment, Refusal};
use crate::facilitator::FacilitatorError;
use crate::facilitator::relayer::{Broadcast, Call, Fate, SendError};
use crate::reason::Reason;
use crate::wire::{SettleResponse, VerifyRequest, VerifyResponse};

/// Authorizations broadcast whose receipt was not seen in time, by payment hash.
#[derive(Default)]
pub(super) struct PendingAuthorizations {
    inner: StdMutex<HashMap<B256, Arc<Broadcast>>>,
}

impl PendingAuthorizations {
    fn get(&self, hash: &B256) -> Option<Arc<Broadcast>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.get(hash).cloned()
    }

    fn set(&self, hash: B256, broadcast: Option<Arc<Broadcast>>) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        match broadcast {
            Some(broadcast) => inner.insert(hash, broadcast),
            None => inner.remove(&hash),
        };
    }
}

fn payer_hint(request: &VerifyRequest) -> Option<alloy::primitives::Address> {
    request
        .payment_payload
        .auth_capture_evm()
        .ok()
        .map(|payload| payload.authorization.from)
}

impl LocalFacilitator {
    fn locate_auth_capture(
        &self,
        request: &VerifyRequest,
    ) -> Result<(Arc<Chain>, AuthCapturePayment), Refusal> {
        let requirements = &request.payment_requirements;
        // The chain decides the escrow deployment, so find it before parsing.
        let chain = requirements
            .network
            .chain_id()
            .and_then(|_| self.chains.get(&requirements.network))
            .ok_or(Reason::InvalidNetwork);
        let addresses = chain.as_ref().map(|chain| chain.escrow).unwrap_or_default();
        let payment = AuthCapturePayment::parse(&request.payment_payload, requirements, addresses)?;
        let chain = Arc::clone(chain?);
        if let Some(tokens) = &chain.tokens
            && !tokens.contains(&payment.info.token)
        {
            return Err(Reason::UnsupportedAsset.into());
        }
        Ok((chain, payment))
    }

    pub(super) async fn verify_auth_capture(
        &self,
        request: &VerifyRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        let (chain, payment) = match self.locate_auth_capture(request) {
            Ok(located) => located,
            Err(Refusal { reason, message }) => {
                return Ok(VerifyResponse::invalid(
                    reason,
                    payer_hint(request),
                    message,
                ));
            }
        };
        let payer = payment.payer();
        if let Err(reason) = payment.check_times(chain.clock.now().await?) {
            return Ok(VerifyResponse::invalid(reason, Some(payer), None));
        }
        Ok(
            match verify_onchain(&chain.provider, chain.relayer.address(), &payment).await? {
                Ok(()) => VerifyResponse::valid(payer),
                Err(Refusal { reason, message }) => {
                    tracing::debug!(network = %chain.network, %payer, %reason, "escrow payment refused");
                    VerifyResponse::invalid(reason, Some(payer), message)
                }
            },
        )
    }

    pub(super) async fn settle_auth_capture(
        &self,
        request: &VerifyRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let network = request.payment_requirements.network.as_str();
        let (chain, payment) = match self.locate_auth_capture(request) {
            Ok(located) => located,
            Err(Refusal { reason, message }) => {
                return Ok(SettleResponse::failed(
                    network,
                    reason,
                    payer_hint(request),
                    None,
                    message,
                ));
            }
        };
        // v1.1: the raw client payload verifies, but a charge settles only as the server
        // completed it (the amount it charges, signed by its receiver authorizer).
        if payment.extra.payment_flow == Some(crate::flow::PaymentFlow::Authorization)
            && payment.completion.is_none()
        {
            return Ok(chain.escrow_failed(
                &payment,
                Refusal {
                    reason: Reason::InvalidPayload,
                    message: Some("a charge settles only with the server's completion".into()),
                },
                None,
            ));
        }
        let _only_settler = self.in_flight.lock(payment.key()).await;
        let hash = payment.payment_hash();
        if let Some(broadcast) = self.escrow_pending.get(&hash) {
            match chain.reconcile_authorization(&payment, &broadcast).await? {
                Some(response) => {
                    if response.error_reason != Some(Reason::SettlementPending) {
                        self.escrow_pending.set(hash, None);
                    }
                    return Ok(response);
                }
                None => self.escrow_pending.set(hash, None),
            }
        }
        let (response, pending) = chain.authorize_fresh(&payment).await?;
        if let Some(broadcast) = pending {
            self.escrow_pending.set(hash, Some(broadcast));
        }
        Ok(response)
    }
}

impl Chain {
    fn escrow_failed(
        &self,
        payment: &AuthCapturePayment,
        refusal: Refusal,
        broadcast: Option<TxHash>,
    ) -> SettleResponse {
        tracing::info!(network = %self.network, payer = %payment.payer(), reason = %refusal.reason, "escrow settlement refused");
        SettleResponse::failed(
            self.network.as_str(),
            refusal.reason,
            Some(payment.payer()),
            broadcast.map(|hash| hash.to_string()),
            refusal.message,
        )
    }

    /// The transaction that authorized or charged this PaymentInfo, from the escrow's logs.
    async fn collecting_transaction(
        &self,
        payment: &AuthCapturePayment,
    ) -> Result<Option<TxHash>, TransportError> {
        let from_block = match self.lookback_blocks {
            Some(lookback) => self
                .provider
                .get_block_number()
                .await?
                .saturating_sub(lookback),
            None => 0,
        };
        let events = payment_events(
            &self.provider,
            payment.addresses.escrow,
            payment.payment_hash(),
            from_block,
        )
        .await?;
        Ok(events
            .into_iter()
            .find(|event| {
                matches!(
                    event.kind,
                    EscrowEventKind::Authorized { .. } | EscrowEventKind::Charged { .. }
                )
            })
            .and_then(|event| event.tx_hash))
    }

    /// `Some(refusal)` when the PaymentInfo is already collected on chain.
    async fn already_collected(
        &self,
        payment: &AuthCapturePayment,
        broadcast: Option<TxHash>,
    ) -> Result<Option<SettleResponse>, TransportError> {
        let state = payment_state(
            &self.provider,
            payment.addresses.escrow,
            payment.payment_hash(),
        )
        .await?;
        if !state.has_collected_payment {
            return Ok(None);
        }
        // The original transaction only improves the message: a refused log search must not
        // turn a known refusal into an unknown.
        let original = self
            .collecting_transaction(payment)
            .await
            .unwrap_or_else(|error| {
                tracing::warn!(network = %self.network, error = %error, "escrow log lookup failed");
                None
            });
        let message = match original {
            Some(tx_hash) => format!("payment already collected by transaction {tx_hash}"),
            None => "payment already collected".to_owned(),
        };
        Ok(Some(self.escrow_failed(
            payment,
            Refusal {
                reason: Reason::PaymentAlreadyCollected,
                message: Some(message),
            },
            broadcast,
        )))
    }

    /// Settles afresh; the second value is a broadcast transaction left unconfirmed.
    async fn authorize_fresh(
        &self,
        payment: &AuthCapturePayment,
    ) -> Result<(SettleResponse, Option<Arc<Broadcast>>), TransportError> {
        if let Some(refusal) = self.already_collected(payment, None).await? {
            return Ok((refusal, None));
        }
        let verdict = match payment.check_times(self.clock.now().await?) {
            Err(reason) => Err(Refusal::from(reason)),
            Ok(()) => verify_onchain(&self.provider, self.relayer.address(), payment).await?,
        };
        if let Err(refusal) = verdict {
            return Ok((self.escrow_failed(payment, refusal, None), None));
        }
        let call = Call {
            to: payment.addresses.escrow,
            calldata: settlement_calldata(payment).into(),
        };
        let broadcast = match self.relayer.send(call).await {
            Ok(broadcast) => broadcast,
            // Verified a moment ago, reverts now: maybe someone collected it in between.
            Err(SendError::Reverted(message)) => {
                if let Some(refusal) = self.already_collected(payment, None).await? {
                    return Ok((refusal, None));
                }
                let refusal = Refusal {
                    reason: revert_reason(None, &message),
                    message: Some(message),
                };
                return Ok((self.escrow_failed(payment, refusal, None), None));
            }
            Err(SendError::Rpc(error)) => return Err(error),
        };
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %broadcast.latest(), "escrow authorization broadcast");
        match broadcast.fate_within(self.receipt_timeout).await {
            Some(fate) => Ok((self.conclude_authorization(payment, fate).await?, None)),
            None => Ok((
                self.authorization_pending(payment, broadcast.latest()),
                Some(broadcast),
            )),
        }
    }

    /// A retry after `settlement_pending`; `None` when the nonce went to a transaction not sent
    /// here, so the authorization never ran.
    async fn reconcile_authorization(
        &self,
        payment: &AuthCapturePayment,
        broadcast: &Broadcast,
    ) -> Result<Option<SettleResponse>, TransportError> {
        match broadcast.fate_within(self.receipt_timeout).await {
            Some(Fate::Superseded) => Ok(None),
            Some(fate) => self.conclude_authorization(payment, fate).await.map(Some),
            None => Ok(Some(
                self.authorization_pending(payment, broadcast.latest()),
            )),
        }
    }

    fn authorization_pending(
        &self,
        payment: &AuthCapturePayment,
        tx_hash: TxHash,
    ) -> SettleResponse {
        tracing::warn!(network = %self.network, tx = %tx_hash, "escrow authorization not confirmed in time");
        SettleResponse::failed(
            self.network.as_str(),
            Reason::SettlementPending,
            Some(payment.payer()),
            Some(tx_hash.to_string()),
            None,
        )
    }

    async fn conclude_authorization(
        &self,
        payment: &AuthCapturePayment,
        fate: Fate,
    ) -> Result<SettleResponse, TransportError> {
        let receipt = match fate {
            Fate::Mined(receipt) => receipt,
            // Nothing sent here ran; someone else may have collected it meanwhile.
            Fate::Superseded => {
                if let Some(refusal) = self.already_collected(payment, None).await? {
                    return Ok(refusal);
                }
                return Ok(self.escrow_failed(payment, Reason::TransactionFailed.into(), None));
            }
        };
        let tx_hash = receipt.transaction_hash;
        if !receipt.status() {
            // Another settler may have been mined first, reverting ours.
            if let Some(refusal) = self.already_collected(payment, Some(tx_hash)).await? {
                return Ok(refusal);
            }
            return Ok(self.escrow_failed(
                payment,
                Reason::TransactionFailed.into(),
                Some(tx_hash),
            ));
        }
        let hash = payment.payment_hash();
        let collected_here = receipt.logs().iter().any(|log| {
            log.address() == payment.addresses.escrow && log.topics().get(1) == Some(&hash)
        });
        if !collected_here {
            return Ok(self.escrow_failed(
                payment,
                Reason::TransferEventMismatch.into(),
                Some(tx_hash),
            ));
        }
        tracing::info!(network = %self.network, payer = %payment.payer(), tx = %tx_hash, "escrow payment authorized");
        Ok(SettleResponse::settled(
            &self.network,
            payment.payer(),
            tx_hash,
        ))
    }
}
