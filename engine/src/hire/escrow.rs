//! The gateway as escrow operator (`captureAuthorizer`) of escrowed (`auth-capture`) contracts:
//! one [`EscrowOperator`] per chain that has an `operator_private_key`, and the arithmetic that
//! ties a contract's signed terms to the escrow calls.
//!
//! | item | role |
//! |---|---|
//! | [`EscrowOperators`] | per chain id: the operator (wallet provider + the configured escrow, collectors), sending through its own relayer (nonces pipelined, several calls per block) and taking turns on its key with the other instances |
//! | [`payment_info`] | the on-chain `PaymentInfo` of a stored escrowed payment, rebuilt from the contract's own offer (never the client's copy) |
//! | [`CaptureOrder`] | what a capture of a contract sends: the price (a metered contract's verified amount), the terms' fee bps and the treasury |
//!
//! The lifecycle that drives these (authorize on payment, capture after the acceptance window,
//! void on rejection, refund by an arbiter, the payer's reclaim) decides every outcome from
//! `paymentState` and the escrow's events, as settlement does for `exact`.

use std::collections::HashMap;

use alloy::{
    network::EthereumWallet,
    primitives::{Address, B256, TxHash, U256},
    providers::{Provider as _, ProviderBuilder},
};
use hiregate_contracts::terms::ContractTerms;
use hiregate_payments::{
    AuthCapturePayment, EscrowAddresses, EscrowOperator, PaymentInfo, PaymentPayload,
    PaymentRequirements, SyncSendMode,
    auth_capture::{
        Refusal,
        escrow::{EscrowEvent, EscrowEventKind, EscrowTotals},
    },
    facilitator::turns::KeyTurns,
};

use crate::settings::Settings;
use hiregate_store::PaymentRecord;

/// The escrow operators of the configured chains, by chain id.
#[derive(Debug, Clone, Default)]
pub struct EscrowOperators {
    by_chain: HashMap<u64, std::sync::Arc<ChainOperator>>,
}

/// The operator of one chain.
///
/// Its calls (authorize, capture, void) go out concurrently: the operator's relayer numbers
/// them, so any number are in flight at once and several are mined per block, and one that
/// stays unmined is sent again at its own nonce. Refunds alone take turns: each approves the
/// refund collector for its amount and then spends that approval, and a refund running beside
/// it could find the approval sufficient and spend it first.
#[derive(Debug)]
pub struct ChainOperator {
    operator: EscrowOperator,
    refunds: tokio::sync::Mutex<()>,
}

impl ChainOperator {
    /// The operator: reads (`paymentState`, events) and calls.
    pub fn escrow(&self) -> &EscrowOperator {
        &self.operator
    }

    /// Waits for this process's turn to refund; hold the guard from the approval to the refund.
    pub async fn refund_turn(&self) -> (tokio::sync::MutexGuard<'_, ()>, &EscrowOperator) {
        (self.refunds.lock().await, &self.operator)
    }
}

impl EscrowOperators {
    /// An operator for every chain of `settings` with an `operator_private_key`, taking turns
    /// on its key from `turns` when given. Building one makes no network call (the chain id
    /// comes from the validated config).
    pub fn from_settings(settings: &Settings, turns: Option<&dyn KeyTurns>) -> Self {
        let mut by_chain = HashMap::new();
        for chain in settings.chains.values() {
            let (Some(key), Some(chain_id)) = (&chain.operator_private_key, chain.chain_id())
            else {
                continue;
            };
            let signer = key.signer().clone();
            let operator = signer.address();
            let wallet = EthereumWallet::from(signer);
            // Nonces, gas and fees come from the operator's relayer; the provider only signs.
            let provider = ProviderBuilder::new()
                .disable_recommended_fillers()
                .with_chain_id(chain_id)
                .wallet(wallet.clone())
                .connect_http(chain.rpc_url.clone())
                .erased();
            let addresses = EscrowAddresses {
                escrow: chain.auth_capture_escrow,
                erc3009_collector: chain.erc3009_token_collector,
                operator_refund_collector: chain.operator_refund_collector,
            };
            let mut escrow = EscrowOperator::new(provider, chain_id, addresses, operator)
                .with_receipt_timeout(
                    settings.facilitator.settle_timeout(),
                    std::time::Duration::from_millis(100),
                );
            // `auto` as `true`: building makes no network call, and the relayer sends
            // plainly from its first answer of a node without the method.
            if chain.sync_send != SyncSendMode::Off {
                escrow = escrow.with_sync_send(wallet);
            }
            if let Some(turns) = turns {
                escrow = escrow.with_turns(turns.join(chain_id, operator));
            }
            by_chain.insert(
                chain_id,
                std::sync::Arc::new(ChainOperator {
                    operator: escrow,
                    refunds: tokio::sync::Mutex::new(()),
                }),
            );
        }
        Self { by_chain }
    }

    /// The chains the gateway operates an escrow on.
    pub fn chain_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_chain.keys().copied()
    }

    /// The operator of `chain_id`, if the gateway has a key there.
    pub fn get(&self, chain_id: u64) -> Option<&ChainOperator> {
        self.by_chain.get(&chain_id).map(AsRef::as_ref)
    }
}

/// The `PaymentInfo` of an escrowed payment, rebuilt from `payload` against the contract's own
/// offer `requirements` on `addresses`: what `authorize`, `capture`, `void` and `refund` take
/// and whose `getHash` keys `paymentState` and the events.
pub fn payment_info(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    addresses: EscrowAddresses,
) -> Result<PaymentInfo, Refusal> {
    AuthCapturePayment::parse(payload, requirements, addresses).map(|payment| payment.info)
}

/// What capturing an escrowed contract sends: the amount to pay (everything authorized at a
/// fixed price; the verified amount of a metered contract, the rest then voided), at the fee
/// the terms pin, to the fee recipient the terms (and the payer's signature) name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureOrder {
    /// What is captured.
    pub amount: U256,
    /// The terms' fee, basis points.
    pub fee_bps: u16,
    /// The treasury named in the terms.
    pub fee_receiver: Address,
}

impl CaptureOrder {
    /// The capture of `amount` under `terms` (a payment's stored amount: the price, or what a
    /// metered contract verified); `None` for a contract without escrow.
    pub fn of(terms: &ContractTerms, amount: U256) -> Option<Self> {
        let escrow = terms.escrow()?;
        Some(Self {
            amount,
            fee_bps: escrow.capture_fee_bps(),
            fee_receiver: Address::from(*escrow.fee_recipient().as_bytes()),
        })
    }

    /// The fee the escrow takes (rounded down, as the escrow does).
    pub fn fee(&self) -> U256 {
        self.amount * U256::from(self.fee_bps) / U256::from(10_000u32)
    }

    /// What reaches the worker's payout address.
    pub fn to_worker(&self) -> U256 {
        self.amount - self.fee()
    }
}

/// An escrowed payment as the chain knows it: the operator of its chain and its `PaymentInfo`,
/// rebuilt from the stored payload against the contract's own offer.
pub(super) struct EscrowedPayment<'a> {
    pub(super) operator: &'a ChainOperator,
    pub(super) payment: AuthCapturePayment,
}

impl EscrowedPayment<'_> {
    /// `getHash(paymentInfo)`: the key of `paymentState` and of the escrow's events.
    pub(super) fn hash(&self) -> B256 {
        self.operator.escrow().payment_hash(&self.payment.info)
    }
}

/// What the escrow's events say about one payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EscrowView {
    /// Never authorized (nothing locked); `chain_time` is the latest block's timestamp.
    NotAuthorized { chain_time: u64 },
    /// Locked and still capturable (or voidable): `authorize` was mined in `authorized_in`.
    Held {
        authorized_in: Option<TxHash>,
        chain_time: u64,
    },
    /// Captured (the worker and the treasury were paid) in `transaction`, `captured` in all;
    /// `held` is still locked (a metered contract's remainder until its void, in
    /// `remainder_released_in`, or the payer's reclaim); `refunded` of it went back to the
    /// payer since.
    Captured {
        transaction: Option<TxHash>,
        captured: U256,
        held: U256,
        remainder_released_in: Option<TxHash>,
        refunded: U256,
        refund_transaction: Option<TxHash>,
    },
    /// Returned to the payer by the operator's `void`.
    Voided { transaction: Option<TxHash> },
    /// Returned to the payer by the payer's own `reclaim` after the capture deadline.
    Reclaimed { transaction: Option<TxHash> },
}

impl EscrowView {
    /// The view of a payment's `events` at `chain_time`.
    pub(super) fn of(events: &[EscrowEvent], chain_time: u64) -> Self {
        let last = |wanted: fn(&EscrowEventKind) -> bool| {
            events
                .iter()
                .rev()
                .find(|event| wanted(&event.kind))
                .and_then(|event| event.tx_hash)
        };
        let totals = EscrowTotals::of(events);
        if totals.authorized.is_zero() && totals.charged.is_zero() {
            return Self::NotAuthorized { chain_time };
        }
        // A capture comes first: what a partial capture left, voided or reclaimed afterwards, is
        // the remainder of a paid contract, not an unpaid one.
        let captured = totals.captured + totals.charged;
        if !captured.is_zero() {
            return Self::Captured {
                transaction: last(|kind| {
                    matches!(
                        kind,
                        EscrowEventKind::Captured { .. } | EscrowEventKind::Charged { .. }
                    )
                }),
                captured,
                held: totals.held(),
                remainder_released_in: last(|kind| {
                    matches!(
                        kind,
                        EscrowEventKind::Voided { .. } | EscrowEventKind::Reclaimed { .. }
                    )
                }),
                refunded: totals.refunded,
                refund_transaction: last(|kind| matches!(kind, EscrowEventKind::Refunded { .. })),
            };
        }
        if !totals.reclaimed.is_zero() {
            return Self::Reclaimed {
                transaction: last(|kind| matches!(kind, EscrowEventKind::Reclaimed { .. })),
            };
        }
        if !totals.voided.is_zero() {
            return Self::Voided {
                transaction: last(|kind| matches!(kind, EscrowEventKind::Voided { .. })),
            };
        }
        Self::Held {
            authorized_in: last(|kind| matches!(kind, EscrowEventKind::Authorized { .. })),
            chain_time,
        }
    }
}

impl super::HireService {
    /// The escrowed payment behind `payment` of the contract `ctx`, or why it cannot be
    /// rebuilt (no operator for its chain, a stored payload that no longer parses).
    pub(super) fn escrowed_payment(
        &self,
        ctx: &super::execute::Ctx,
        payment: &PaymentRecord,
    ) -> Result<EscrowedPayment<'_>, String> {
        let chain_id = ctx.terms.price().chain_id();
        let operator = self
            .inner
            .escrow
            .get(chain_id)
            .ok_or_else(|| format!("no escrow operator is configured for chain {chain_id}"))?;
        let requirements = ctx
            .offer
            .requirements()
            .ok_or_else(|| "stored offer has no requirements".to_owned())?;
        let payload: PaymentPayload = serde_json::from_value(payment.payload.clone())
            .map_err(|e| format!("stored payment payload: {e}"))?;
        let payment =
            AuthCapturePayment::parse(&payload, requirements, operator.escrow().addresses())
                .map_err(|refusal| {
                    format!("stored escrowed payment: {}", refusal.reason.as_str())
                })?;
        Ok(EscrowedPayment { operator, payment })
    }

    /// What the escrow says about `escrowed` now (its events over the chain's settlement
    /// lookback, and the latest block's time).
    pub(super) async fn escrow_view(
        &self,
        escrowed: &EscrowedPayment<'_>,
    ) -> Result<EscrowView, String> {
        let rpc = |e: alloy::transports::TransportError| format!("chain RPC failed: {e}");
        let (provider, lookback) = self
            .inner
            .assets
            .chain(escrowed.payment.chain_id)
            .ok_or_else(|| format!("no node configured for chain {}", escrowed.payment.chain_id))?;
        let latest = provider
            .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
            .await
            .map_err(rpc)?
            .ok_or_else(|| "the node has no latest block".to_owned())?;
        let from_block = lookback.map_or(0, |blocks| latest.header.number.saturating_sub(blocks));
        let events = escrowed
            .operator
            .escrow()
            .events(escrowed.hash(), from_block)
            .await
            .map_err(rpc)?;
        Ok(EscrowView::of(&events, latest.header.timestamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EscrowEventKind, tx: u8) -> EscrowEvent {
        EscrowEvent {
            kind,
            tx_hash: Some(TxHash::repeat_byte(tx)),
            block_number: Some(u64::from(tx)),
            log_index: Some(0),
        }
    }

    fn authorized(amount: u64) -> EscrowEvent {
        event(
            EscrowEventKind::Authorized {
                amount: U256::from(amount),
                token_collector: Address::ZERO,
            },
            1,
        )
    }

    fn captured(amount: u64) -> EscrowEvent {
        event(
            EscrowEventKind::Captured {
                amount: U256::from(amount),
                fee_bps: 0,
                fee_receiver: Address::ZERO,
            },
            2,
        )
    }

    #[test]
    fn a_partial_capture_is_captured_with_its_remainder_held_until_voided() {
        let held = EscrowView::of(&[authorized(5), captured(3)], 10);
        assert_eq!(
            held,
            EscrowView::Captured {
                transaction: Some(TxHash::repeat_byte(2)),
                captured: U256::from(3),
                held: U256::from(2),
                remainder_released_in: None,
                refunded: U256::ZERO,
                refund_transaction: None,
            }
        );
        // The remainder's void does not turn a paid contract into a voided one.
        let voided = EscrowView::of(
            &[
                authorized(5),
                captured(3),
                event(
                    EscrowEventKind::Voided {
                        amount: U256::from(2),
                    },
                    3,
                ),
            ],
            10,
        );
        assert_eq!(
            voided,
            EscrowView::Captured {
                transaction: Some(TxHash::repeat_byte(2)),
                captured: U256::from(3),
                held: U256::ZERO,
                remainder_released_in: Some(TxHash::repeat_byte(3)),
                refunded: U256::ZERO,
                refund_transaction: None,
            }
        );
        // Nothing captured: a void is a void.
        assert_eq!(
            EscrowView::of(
                &[
                    authorized(5),
                    event(
                        EscrowEventKind::Voided {
                            amount: U256::from(5),
                        },
                        3,
                    ),
                ],
                10,
            ),
            EscrowView::Voided {
                transaction: Some(TxHash::repeat_byte(3)),
            }
        );
    }
}
