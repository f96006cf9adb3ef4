//! The settlement sweep: settles accepted contracts whose acceptance window is over, and
//! retries settlements whose outcome was unknown, so no verified payment is left to expire.
//!
//! Safe with several instances: each settlement starts with the database's compare-and-set
//! into `settling`, and each retry of a `settlement_unknown` one with a claim that counts it in
//! place (no event; see `settle`), so one instance settles or retries a contract at a time; a
//! retry resubmits the same payload, which the facilitator settles at most once (the EIP-3009
//! nonce can be used once on chain).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::HireService;
use hiregate_store::StoreError;

/// Contracts settled per sweep round.
const BATCH: u32 = 50;

impl HireService {
    /// One sweep round; returns how many contracts it tried to settle.
    pub async fn sweep_settlements(&self) -> Result<usize, StoreError> {
        let now = self.now();
        // A `settlement_unknown` contract rests for the recovery grace before the chain is
        // asked again: whatever made it unknown seldom clears at once.
        let reconcile_before = now
            - chrono::Duration::from_std(self.inner.config.contracts.recovery_grace())
                .unwrap_or(chrono::Duration::zero());
        let due = self
            .inner
            .store
            .contracts_due_for_settlement(now, reconcile_before, BATCH)
            .await?;
        let mut tried = 0;
        for contract in &due {
            let correlation_id = format!("sweep_{}", ulid::Ulid::new());
            match self.settle_if_due(contract, correlation_id).await {
                Ok(Some(state)) => {
                    tried += 1;
                    tracing::info!(contract_id = %contract.contract_id, %state, "sweep settled");
                }
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(contract_id = %contract.contract_id, code = %error.code, "sweep could not settle");
                }
            }
        }
        Ok(tried)
    }
}

/// Run [`HireService::sweep_settlements`] every `interval` until `shutdown`.
pub async fn run_settlement_sweep(
    hire: HireService,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = ticker.tick() => {
                if let Err(error) = hire.sweep_settlements().await {
                    tracing::warn!(error = %error, "settlement sweep failed");
                }
            }
        }
    }
}
