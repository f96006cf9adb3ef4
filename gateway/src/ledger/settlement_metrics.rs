//! Settlement metrics from the store's event bus, so every path that ends a settlement (execute,
//! the sweep, dispute decisions, recovery) is counted without each one calling the metrics.
//!
//! The outcome is the state the contract moved into (`settled`, `settlement_failed`,
//! `settlement_unknown`), whatever the event was called; the settled amount comes from the
//! payment that entered settlement. The bus is in-process, so each instance counts what it
//! settled (Prometheus sums instances); a receiver that lags past the bus buffer loses counts,
//! which is logged. Exact totals are `hiregate reconcile`'s job, not the metrics'.

use std::{str::FromStr, sync::Arc};

use alloy::primitives::Address;
use tokio::sync::broadcast::{Receiver, error::RecvError};
use tokio_util::sync::CancellationToken;

use crate::{
    events::LiveEvent,
    metrics::{AssetLabels, Metrics, SettlementLabels, SettlementResult},
    store::Store,
};

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
    let Some(outcome) = event
        .to_state
        .as_deref()
        .and_then(SettlementResult::from_state)
    else {
        return;
    };
    metrics
        .settlements
        .get_or_create(&SettlementLabels { outcome })
        .inc();
    if outcome != SettlementResult::Settled {
        return;
    }
    let payment = match store
        .settlement_payment_of_contract(&event.contract_id)
        .await
    {
        Ok(Some(payment)) => payment,
        Ok(None) => {
            tracing::warn!(contract_id = %event.contract_id, "settled contract without a settling payment; amount not counted");
            return;
        }
        Err(error) => {
            tracing::warn!(contract_id = %event.contract_id, %error, "cannot read the settled payment; amount not counted");
            return;
        }
    };
    let Ok(amount) = payment.amount.parse::<f64>() else {
        tracing::warn!(payment_id = %payment.payment_id, "stored amount is not a number; not counted");
        return;
    };
    // One label value per token whatever spelling the payment stored.
    let asset =
        Address::from_str(&payment.asset).map_or(payment.asset.clone(), |a| a.to_checksum(None));
    metrics
        .settled_amount
        .get_or_create(&AssetLabels {
            network: payment.network,
            asset,
        })
        .inc_by(amount);
}
