//! Metered (`upto`) contracts in the engine: what the gateway measured of an attempt, for the
//! verdict ([`MeterReadings`]: the stream events it relayed, the attempt's wall time, the
//! worker's reported figure), and the amount a verdict settles. Everything is read from the
//! gateway's own records (the attempt row, the contract's event log), written before the
//! deliverable was judged, so a takeover judging again counts the same.

use hiregate_contracts::{
    id::AttemptId,
    metering::{MeterReadings, MeterUnit, reported_usage},
    money::AtomicAmount,
    state::ContractState,
    verify::VerificationResult,
    wire::hire::{STREAM_END_EVENT, STREAM_ERROR_EVENT},
};
use hiregate_store::states::EventKind;
use serde_json::Value;

use super::{
    HireService,
    error::HireError,
    execute::{Ctx, internal},
};

/// Log entries read per page when counting relayed events.
const LOG_PAGE: u32 = 10_000;

impl HireService {
    /// What the gateway measured of attempt `attempt_id` for a contract metered in `unit`.
    pub(super) async fn meter_readings(
        &self,
        ctx: &Ctx,
        attempt_id: &AttemptId,
        unit: MeterUnit,
    ) -> Result<MeterReadings, HireError> {
        let attempts = self
            .inner
            .store
            .list_attempts(ctx.contract_id.as_str())
            .await?;
        let attempt = attempts
            .iter()
            .find(|attempt| &attempt.attempt_id == attempt_id)
            .ok_or_else(|| internal("the judged attempt is not stored"))?;
        // Delivery closes the attempt in the commit that stores the deliverable.
        let finished = attempt.finished_at.unwrap_or_else(|| self.now());
        let wall_time_ms =
            u64::try_from((finished - attempt.started_at).num_milliseconds()).unwrap_or(0);
        let relayed_events = if unit == MeterUnit::Event {
            self.relayed_data_events(ctx, attempt.attempt_no).await?
        } else {
            0
        };
        Ok(MeterReadings {
            relayed_events,
            wall_time_ms,
            reported: reported_usage(unit, attempt.worker_metadata.as_ref()),
        })
    }

    /// The stream events of attempt `attempt_no` the gateway relayed to the contract's log,
    /// `done` and `error` not counted. The log is the record of what was relayed: each event
    /// is appended once per attempt, also across a takeover that reads the stream again.
    async fn relayed_data_events(&self, ctx: &Ctx, attempt_no: u32) -> Result<u64, HireError> {
        let attempt = Value::from(attempt_no);
        let mut after = 0;
        let mut relayed = 0;
        loop {
            let page = self
                .inner
                .store
                .list_contract_events(ctx.contract_id.as_str(), after, LOG_PAGE)
                .await?;
            relayed += page
                .iter()
                .filter(|event| {
                    event.kind == EventKind::WorkerStreamEvent
                        && event.details["attempt_no"] == attempt
                        && !matches!(
                            event.details["upstream_event"].as_str(),
                            Some(STREAM_END_EVENT | STREAM_ERROR_EVENT)
                        )
                })
                .count() as u64;
            match page.last() {
                Some(last) if page.len() == LOG_PAGE as usize => after = last.seq,
                _ => return Ok(relayed),
            }
        }
    }
}

/// What a metered contract's verdict `result` pays, atomic units (`unit_price × billable
/// units`); `None` for a contract at a fixed price.
pub(super) fn metered_amount(ctx: &Ctx, result: &VerificationResult) -> Option<String> {
    let metering = ctx.terms.metering()?;
    let billable = result
        .details
        .metered
        .as_ref()
        .map_or(0, |count| count.billable);
    Some(metering.amount_for(billable).to_string())
}

impl HireService {
    /// What a metered (`upto`) contract settles when it leaves `from`: the billable units of
    /// its latest verdict at the terms' unit price, from what the gateway verified. When the
    /// arbiter settles a dispute of a rejection (the verdict billed nothing), the decision
    /// stands in for the verifier's on every unit the gateway counted: the delivered units, at
    /// most `max_units` (none when nothing was delivered or judged). `None` at a fixed price.
    pub(in crate::hire) async fn metered_amount_to_settle(
        &self,
        ctx: &Ctx,
        from: ContractState,
    ) -> Result<Option<AtomicAmount>, HireError> {
        let Some(metering) = ctx.terms.metering() else {
            return Ok(None);
        };
        let arbiter_settles = from == ContractState::Disputed;
        let Some(verification) = self
            .inner
            .store
            .latest_verification(ctx.contract_id.as_str())
            .await?
        else {
            if arbiter_settles {
                return Ok(Some(metering.amount_for(0)));
            }
            return Err(internal("a metered contract to settle has no verdict"));
        };
        let result: VerificationResult = serde_json::from_value(verification.result)
            .map_err(|e| internal(format!("stored verification: {e}")))?;
        let count = result.details.metered.as_ref();
        let billable = match count {
            Some(count) if arbiter_settles && count.billable == 0 => count.delivered,
            Some(count) => count.billable,
            None => 0,
        };
        Ok(Some(metering.amount_for(billable)))
    }
}
