//! Contract state transitions (`from` → `to`, every one the store published) and settlement
//! metrics from the store's event bus, so every path that ends a settlement (execute,
//! the sweep, dispute decisions, recovery) is counted without each one calling the metrics.
//!
//! The outcome is the state the contract moved into (`settled`, `settlement_failed`,
//! `settlement_unknown`), whatever the event was called; the settled amount comes from the
//! payment that entered settlement. The bus is in-process, so each instance counts what it
//! settled (Prometheus sums instances); a receiver that lags past the bus buffer loses counts,
//! which is logged. Exact totals are `hiregate reconcile`'s job, not the metrics'.
//!
//! Escrowed (`auth-capture`) payments are also counted by what happened to their money, from the
//! event that records it: `payment_authorized` → authorized, `settlement_succeeded` of a locked
//! payment → captured (and its fee), `payment_voided` with a transaction → voided (a void of
//! nothing locked, or of an `exact` authorization, moves no money), `payment_reclaimed` →
//! reclaimed, `refund_issued` → refunded; the amount is the payment's.

use std::sync::Arc;

use alloy::primitives::U256;
use tokio::sync::broadcast::{Receiver, error::RecvError};
use tokio_util::sync::CancellationToken;

use crate::{
    hire::escrow::CaptureOrder,
    metrics::{
        AssetLabels, EscrowLabels, EscrowOutcome, Metrics, SettlementLabels, SettlementResult,
    },
};
use hiregate_contracts::state::ContractState;
use hiregate_store::states::EventKind;
use hiregate_store::{PaymentRecord, Store, bus::LiveEvent};

/// Count settlement outcomes from `events` (subscribe before anything can settle) until
/// `shutdown`.
pub async fn run_settlement_metrics(
    store: Store,
    metrics: Arc<Metrics>,
    mut events: Receiver<Arc<LiveEvent>>,
    shutdown: CancellationToken,
) {
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            received = events.recv() => match received {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "settlement metrics lagged behind the event bus; some settlements are not counted");
                    continue;
                }
                Err(RecvError::Closed) => return,
            },
        };
        record(&store, &metrics, &event).await;
    }
}

async fn record(store: &Store, metrics: &Metrics, event: &LiveEvent) {
    // A settlement's payment is read once, for the settled amount and, escrowed, the capture.
    let settled = if event.to_state == Some(ContractState::Settled) {
        settled_payment(store, event).await
    } else {
        None
    };
    record_settlement(metrics, event, settled.as_ref());
    record_escrow(store, metrics, event, settled).await;
    // The transition is counted last: a scrape that sees it also sees the amounts
    // read from the store for the same event, so the series never disagree.
    if let (Some(from), Some(to)) = (event.from_state, event.to_state) {
        metrics.record_transition(from, to);
    }
}

/// The payment that entered settlement of `event`'s contract, `None` (logged) when unreadable.
async fn settled_payment(store: &Store, event: &LiveEvent) -> Option<PaymentRecord> {
    match store
        .settlement_payment_of_contract(event.contract_id.as_str())
        .await
    {
        Ok(Some(payment)) => Some(payment),
        Ok(None) => {
            tracing::warn!(contract_id = %event.contract_id, "settled contract without a settling payment; amount not counted");
            None
        }
        Err(error) => {
            tracing::warn!(contract_id = %event.contract_id, %error, "cannot read the settled payment; amount not counted");
            None
        }
    }
}

/// Counts `event`'s settlement outcome, with the amount of `settled` (its settled payment).
fn record_settlement(metrics: &Metrics, event: &LiveEvent, settled: Option<&PaymentRecord>) {
    let Some(outcome) = event.to_state.and_then(SettlementResult::from_state) else {
        return;
    };
    if let Some(payment) = settled {
        record_settled_amount(metrics, payment);
    }
    // After its amount, so a scrape that counts this settlement counts its amount too.
    metrics
        .settlements
        .get_or_create(&SettlementLabels { outcome })
        .inc();
}

fn record_settled_amount(metrics: &Metrics, payment: &PaymentRecord) {
    let Ok(amount) = payment.amount.parse::<f64>() else {
        tracing::warn!(payment_id = %payment.payment_id, "stored amount is not a number; not counted");
        return;
    };
    metrics
        .settled_amount
        .get_or_create(&AssetLabels::new(
            payment.network.as_str(),
            &payment.asset.to_string(),
        ))
        .inc_by(amount);
}

/// Counts what happened to escrowed money at `event`; `settled` is the payment of a
/// settlement, already read.
async fn record_escrow(
    store: &Store,
    metrics: &Metrics,
    event: &LiveEvent,
    settled: Option<PaymentRecord>,
) {
    let outcome = match event.kind {
        EventKind::PaymentAuthorized => EscrowOutcome::Authorized,
        EventKind::SettlementSucceeded => EscrowOutcome::Captured,
        EventKind::PaymentVoided if event.details["transaction"].is_string() => {
            EscrowOutcome::Voided
        }
        EventKind::PaymentReclaimed => EscrowOutcome::Reclaimed,
        EventKind::RefundIssued => EscrowOutcome::Refunded,
        _ => return,
    };
    let payment = match settled {
        Some(payment) => payment,
        None => match store.payment_of_contract(event.contract_id.as_str()).await {
            Ok(Some(payment)) => payment,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(contract_id = %event.contract_id, %error, "cannot read the escrowed payment; not counted");
                return;
            }
        },
    };
    // Only a locked payment is escrowed money (an exact settlement or void has no authorize).
    if payment.authorize_tx.is_none() {
        return;
    }
    // A refund returns what the arbiter refunded (all or part of the capture).
    let moved = match outcome {
        EscrowOutcome::Refunded => payment.refunded_amount.as_ref().unwrap_or(&payment.amount),
        _ => &payment.amount,
    };
    let Ok(amount) = moved.parse::<f64>() else {
        tracing::warn!(payment_id = %payment.payment_id, "stored amount is not a number; not counted");
        return;
    };
    // The fee is read before anything is counted, so a scrape sees a capture with its fee.
    let fee = if outcome == EscrowOutcome::Captured {
        capture_fee(store, event.contract_id.as_str(), &payment.amount).await
    } else {
        None
    };
    let money = AssetLabels::new(payment.network.as_str(), &payment.asset.to_string());
    if let Some(fee) = fee {
        metrics
            .escrow_fees
            .get_or_create(&money)
            .inc_by(f64::from(fee));
    }
    let labels = EscrowLabels {
        outcome,
        network: money.network,
        asset: money.asset,
    };
    metrics.escrow_amount.get_or_create(&labels).inc_by(amount);
    metrics.escrow_outcomes.get_or_create(&labels).inc();
}

/// The fee a captured contract's escrow terms take of the `captured` amount, or `None` (logged)
/// when it cannot be read.
async fn capture_fee(store: &Store, contract_id: &str, captured: &str) -> Option<U256> {
    let captured = U256::from_str_radix(captured, 10).ok()?;
    let fee = match store.get_contract(contract_id).await {
        Ok(Some(contract)) => CaptureOrder::of(&contract.terms, captured).map(|order| order.fee()),
        Ok(None) => None,
        Err(error) => {
            tracing::warn!(contract_id, %error, "cannot read the captured contract; fee not counted");
            return None;
        }
    };
    if fee.is_none() {
        tracing::warn!(
            contract_id,
            "captured contract without escrow terms; fee not counted"
        );
    }
    fee
}
