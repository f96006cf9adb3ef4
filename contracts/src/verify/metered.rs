//! Metered (`upto`) verdicts: what a contract priced per unit pays is what the gateway
//! verified, counted by [`Verifier::verify_metered`] in the unit the terms pin (see
//! [`crate::metering`] for what each unit counts).

use super::{
    Findings, VerificationDetails, VerificationRequest, VerificationResult, VerificationStatus,
    Verifier, VerifyError, status_word,
};
use crate::deliverable::{Deliverable, DeliveryStatus, Output};
use crate::metering::{MeterReadings, MeterUnit, Metering};
use crate::reason;
use crate::verify::MeteredCount;

impl Verifier {
    /// Judges a metered (`upto`) contract's deliverable in the unit its terms pin;
    /// `readings` are what the gateway measured of the attempt (used by every unit but
    /// `item`). [`VerificationDetails::metered`] holds the count; the units billed are the
    /// verified count, at most the terms' `max_units`. Nothing the worker claims is counted
    /// beyond what the gateway measured.
    pub fn verify_metered(
        &self,
        request: &VerificationRequest<'_>,
        metering: &Metering,
        readings: &MeterReadings,
    ) -> Result<VerificationResult, VerifyError> {
        match readings.count(metering.unit(), request.deliverable.output()) {
            None => self.verify_items(request, metering),
            Some((measured, counted)) => {
                self.verify_measured(request, metering, readings, measured, counted)
            }
        }
    }

    /// [`MeterUnit::Item`]: every item of the output (a `multiple`'s items, a single output as
    /// one) is verified on its own against the contract's schemas and policy, with the
    /// deliverable's evidence. The verdict passes when at least one item (or the policy's
    /// `accept_partial.min_items`) passed, whatever status the worker ended with: partial work
    /// is paid pro rata. [`VerificationDetails::metered`] counts what passed; the units billed
    /// are that count, at most the terms' `max_units`. Nothing the worker claims is counted.
    fn verify_items(
        &self,
        request: &VerificationRequest<'_>,
        metering: &Metering,
    ) -> Result<VerificationResult, VerifyError> {
        let items: Vec<&Output> = match request.deliverable.output() {
            Output::Multiple { items } => items.iter().collect(),
            single => vec![single],
        };
        let mut findings = Findings::default();
        findings.details.deliverable_digest = Some(request.deliverable.digest()?);
        let mut passed_items = Vec::new();
        let mut item_codes = Vec::new();
        let mut undecidable = false;
        for (index, item) in items.iter().enumerate() {
            let Ok(one) = Deliverable::new(
                DeliveryStatus::Completed,
                (*item).clone(),
                request.deliverable.evidence_inline().to_vec(),
                request.deliverable.evidence_refs().to_vec(),
            ) else {
                item_codes.push(reason::INVALID_OUTPUT);
                findings
                    .details
                    .notes
                    .push(format!("item {index}: not a deliverable on its own"));
                continue;
            };
            let result = self.verify(&VerificationRequest {
                candidate_id: request.candidate_id,
                execution_id: request.execution_id,
                deliverable: &one,
                output_schemas: request.output_schemas,
                policy: request.policy,
                evidence: request.evidence,
                votes: request.votes,
            })?;
            let details = result.details;
            if findings.details.evidence.is_empty() {
                findings.details.evidence = details.evidence;
            }
            if findings.details.quorum.is_none() {
                findings.details.quorum = details.quorum;
            }
            if result.passed {
                passed_items.push(u32::try_from(index).unwrap_or(u32::MAX));
                findings.details.notes.push(format!("item {index}: passed"));
                continue;
            }
            undecidable |= result.verification_status == VerificationStatus::Inconclusive;
            findings.details.notes.push(format!(
                "item {index}: {} (reason codes {:?})",
                status_word(result.verification_status),
                result.reason_codes
            ));
            item_codes.extend(result.reason_codes);
            findings
                .details
                .schema_violations
                .extend(details.schema_violations);
            findings
                .details
                .threshold_failures
                .extend(details.threshold_failures);
            findings
                .details
                .reference_mismatches
                .extend(details.reference_mismatches);
        }
        let delivered = u32::try_from(items.len()).unwrap_or(u32::MAX);
        let verified = u32::try_from(passed_items.len()).unwrap_or(u32::MAX);
        let required = request
            .policy
            .accept_partial()
            .map_or(1, |allowed| allowed.min_items.max(1));
        if verified < required {
            // Too few units to accept: the items' own reasons say why.
            findings.codes.extend(item_codes);
            if verified > 0 || findings.codes.is_empty() {
                findings.codes.push(reason::PARTIAL_DELIVERY);
            }
            findings.undecidable = undecidable;
        } else if delivered > 0 {
            findings.quorum_ratio = Some(f64::from(verified) / f64::from(delivered));
        }
        findings.details.metered = Some(MeteredCount {
            unit: metering.unit(),
            delivered,
            verified,
            billable: metering.billable_units(verified),
            passed_items,
            reported: None,
            measured: None,
        });
        self.conclude(request, findings)
    }

    /// [`MeterUnit::Event`], [`MeterUnit::Second`], [`MeterUnit::Token`]: the whole output is
    /// verified once (whatever status the worker ended with: a stream cut short is a partial
    /// that is paid for what it holds), and when it passes, every unit the gateway counted
    /// (`counted`, within its own measurement `measured`) is verified. A passing output with no
    /// unit counted (no event relayed, no figure reported) is rejected as a partial delivery:
    /// a settlement of nothing would move nothing.
    fn verify_measured(
        &self,
        request: &VerificationRequest<'_>,
        metering: &Metering,
        readings: &MeterReadings,
        measured: u64,
        counted: u64,
    ) -> Result<VerificationResult, VerifyError> {
        let unit = metering.unit();
        // Judged as completed: a partial's units are paid for what they are. (The copy holds
        // what the delivered deliverable held, so it cannot be refused; if it were, the
        // partial is judged as it is and fails.)
        let completed = (request.deliverable.status() != DeliveryStatus::Completed)
            .then(|| {
                Deliverable::new(
                    DeliveryStatus::Completed,
                    request.deliverable.output().clone(),
                    request.deliverable.evidence_inline().to_vec(),
                    request.deliverable.evidence_refs().to_vec(),
                )
                .ok()
            })
            .flatten();
        let judged = self.verify(&VerificationRequest {
            deliverable: completed.as_ref().unwrap_or(request.deliverable),
            ..*request
        })?;
        let mut findings = Findings {
            codes: judged.reason_codes,
            details: VerificationDetails {
                // The digest of what was delivered, not of the completed copy judged.
                deliverable_digest: Some(request.deliverable.digest()?),
                ..judged.details
            },
            undecidable: judged.verification_status == VerificationStatus::Inconclusive,
            quorum_ratio: judged.passed.then_some(judged.score),
        };
        if request.deliverable.status() == DeliveryStatus::Partial {
            findings.details.notes.push(format!(
                "the worker ended with status partial: paid for the {}s counted",
                unit.as_str()
            ));
        }
        let delivered = u32::try_from(counted).unwrap_or(u32::MAX);
        findings.details.notes.push(match unit {
            MeterUnit::Event => format!("{counted} stream event(s) relayed"),
            _ => format!(
                "{} {}(s) reported, {measured} measured: {counted} counted",
                readings
                    .reported
                    .map_or_else(|| "no".to_owned(), |n| n.to_string()),
                unit.as_str()
            ),
        });
        let verified = if judged.passed { delivered } else { 0 };
        if judged.passed && delivered == 0 {
            findings.codes.push(reason::PARTIAL_DELIVERY);
            findings.quorum_ratio = None;
        } else if !judged.passed {
            findings.details.notes.push(format!(
                "the output {}: no {} is paid",
                status_word(judged.verification_status),
                unit.as_str()
            ));
        }
        findings.details.metered = Some(MeteredCount {
            unit,
            delivered,
            verified,
            billable: metering.billable_units(verified),
            passed_items: Vec::new(),
            reported: (unit != MeterUnit::Event)
                .then_some(readings.reported)
                .flatten(),
            measured: Some(measured),
        });
        self.conclude(request, findings)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::money::AtomicAmount;
    use crate::policy::PolicyBinding;
    use crate::schema::{OutputSchema, SchemaLimits};
    use crate::verify::EvidenceSet;

    fn judge(
        output: Output,
        status: DeliveryStatus,
        unit: MeterUnit,
        max_units: u32,
        readings: MeterReadings,
        schema: serde_json::Value,
    ) -> VerificationResult {
        let deliverable = Deliverable::new(status, output, Vec::new(), Vec::new()).unwrap();
        let schemas = [OutputSchema::parse(schema, &SchemaLimits::default()).unwrap()];
        let metering = Metering::new(unit, AtomicAmount::new(10), max_units).unwrap();
        Verifier::default()
            .verify_metered(
                &VerificationRequest {
                    candidate_id: "cand-1",
                    execution_id: "att-1",
                    deliverable: &deliverable,
                    output_schemas: &schemas,
                    policy: &PolicyBinding::schema_only(),
                    evidence: &EvidenceSet::new(),
                    votes: None,
                },
                &metering,
                &readings,
            )
            .unwrap()
    }

    fn text(content: &str) -> Output {
        Output::Text {
            content: content.to_owned(),
        }
    }

    fn count(result: &VerificationResult) -> (u32, u32, u32, Option<u64>, Option<u64>) {
        let count = result.details.metered.clone().unwrap();
        (
            count.delivered,
            count.verified,
            count.billable,
            count.reported,
            count.measured,
        )
    }

    #[test]
    fn a_stream_cut_short_pays_the_events_relayed_whatever_the_worker_claims() {
        let readings = MeterReadings {
            relayed_events: 40,
            wall_time_ms: 1_000,
            reported: Some(100),
        };
        let cut = judge(
            text(&"x".repeat(40)),
            DeliveryStatus::Partial,
            MeterUnit::Event,
            100,
            readings,
            json!({"type": "string"}),
        );
        assert!(cut.passed, "{cut:?}");
        assert_eq!(count(&cut), (40, 40, 40, None, Some(40)));
        // Fewer pinned than relayed: the maximum.
        let capped = judge(
            text("x"),
            DeliveryStatus::Completed,
            MeterUnit::Event,
            25,
            readings,
            json!({"type": "string"}),
        );
        assert_eq!(count(&capped).2, 25);
        // An assembled output failing the schema pays no event.
        let bad = judge(
            text("x"),
            DeliveryStatus::Completed,
            MeterUnit::Event,
            100,
            readings,
            json!({"type": "string", "minLength": 5}),
        );
        assert!(!bad.passed);
        assert_eq!(count(&bad), (40, 0, 0, None, Some(40)));
        // Nothing relayed: nothing to pay, rejected.
        let none = judge(
            text("x"),
            DeliveryStatus::Completed,
            MeterUnit::Event,
            100,
            MeterReadings::default(),
            json!({"type": "string"}),
        );
        assert!(!none.passed);
        assert_eq!(none.reason_codes, vec![reason::PARTIAL_DELIVERY]);
    }

    #[test]
    fn over_reported_tokens_and_seconds_pay_what_the_gateway_measured() {
        let output = text("twelve bytes");
        let over = MeterReadings {
            relayed_events: 0,
            wall_time_ms: 1_200,
            reported: Some(5_000),
        };
        let tokens = judge(
            output.clone(),
            DeliveryStatus::Completed,
            MeterUnit::Token,
            1_000,
            over,
            json!({"type": "string"}),
        );
        assert!(tokens.passed);
        assert_eq!(count(&tokens), (12, 12, 12, Some(5_000), Some(12)));
        let seconds = judge(
            output.clone(),
            DeliveryStatus::Completed,
            MeterUnit::Second,
            60,
            over,
            json!({"type": "string"}),
        );
        assert_eq!(count(&seconds), (2, 2, 2, Some(5_000), Some(2)));
        // An honest figure below the bound is paid as reported.
        let honest = judge(
            output.clone(),
            DeliveryStatus::Completed,
            MeterUnit::Token,
            1_000,
            MeterReadings {
                reported: Some(4),
                ..over
            },
            json!({"type": "string"}),
        );
        assert_eq!(count(&honest), (4, 4, 4, Some(4), Some(12)));
        // No figure: nothing counted, rejected (a settlement of nothing would move nothing).
        let silent = judge(
            output,
            DeliveryStatus::Completed,
            MeterUnit::Second,
            60,
            MeterReadings {
                reported: None,
                ..over
            },
            json!({"type": "string"}),
        );
        assert!(!silent.passed);
        assert_eq!(count(&silent).2, 0);
    }
}
