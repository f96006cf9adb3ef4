//! Verification reason codes (`u16`), numbered as WattSwarm numbers them: 1xx schema and
//! thresholds, 2xx evidence, 3xx task, 999 custom.
//!
//! Codes 100–105, 200–203 and 300–303 are WattSwarm's own (`crates/protocol/src/reason_codes.rs`)
//! and mean the same here. hiregate's additions sit at x50 and above inside the same blocks, so
//! a WattSwarm peer reads at least the right category, and WattSwarm can grow its own codes
//! below x50 without colliding.

/// Output matches schema and policy checks (WattSwarm `SCHEMA_OK`).
pub const SCHEMA_OK: u16 = 100;
/// Output schema validation failed.
pub const SCHEMA_INVALID: u16 = 101;
/// Candidate confidence below threshold (`min_confidence`).
pub const CONFIDENCE_TOO_LOW: u16 = 102;
/// Candidate output larger than threshold (`max_len` / byte limits).
pub const OUTPUT_TOO_LARGE: u16 = 103;
/// Cross-check summary is missing (WattSwarm; not emitted by hiregate policies).
pub const CHECK_SUMMARY_MISSING: u16 = 104;
/// Cross-check score below threshold.
pub const SCORE_TOO_LOW: u16 = 105;
/// hiregate: a threshold comparison did not hold.
pub const THRESHOLD_NOT_MET: u16 = 150;
/// hiregate: a threshold or reference points at a value the output does not have.
pub const VALUE_MISSING: u16 = 151;
/// hiregate: the output disagrees with a fixed reference value of the cross-check.
pub const REFERENCE_MISMATCH: u16 = 152;
/// hiregate: verifier votes did not reach the pass ratio of the quorum.
pub const QUORUM_NOT_MET: u16 = 153;
/// hiregate: fewer decisive verifier votes than the quorum's `min_verifiers`.
pub const INSUFFICIENT_VERIFIERS: u16 = 154;

/// Verifier cannot reach external evidence.
pub const EVIDENCE_UNREACHABLE: u16 = 200;
/// Verifier timed out while fetching external evidence.
pub const EVIDENCE_TIMEOUT: u16 = 201;
/// Evidence source denied access.
pub const EVIDENCE_AUTH_DENIED: u16 = 202;
/// Fetched evidence digest does not match its declared digest.
pub const EVIDENCE_DIGEST_MISMATCH: u16 = 203;
/// hiregate: evidence exceeded the gateway's fetch size limit.
pub const EVIDENCE_TOO_LARGE: u16 = 250;

/// Runtime execution or verification timeout.
pub const TASK_TIMEOUT: u16 = 300;
/// Runtime produced invalid output (e.g. a JSON file that is not JSON).
pub const INVALID_OUTPUT: u16 = 301;
/// Task reached expiry before finalisation.
pub const TASK_EXPIRED: u16 = 302;
/// Runtime crashed or failed unexpectedly.
pub const RUNTIME_CRASH: u16 = 303;
/// hiregate: the worker ended with status `partial` and the contract does not accept it (no
/// `accept_partial` in the policy parameters, or fewer items than its `min_items`).
pub const PARTIAL_DELIVERY: u16 = 350;

/// Runtime-specific custom error.
pub const CUSTOM_ERROR: u16 = 999;

const TABLE: &[(u16, &str)] = &[
    (SCHEMA_OK, "SCHEMA_OK"),
    (SCHEMA_INVALID, "SCHEMA_INVALID"),
    (CONFIDENCE_TOO_LOW, "CONFIDENCE_TOO_LOW"),
    (OUTPUT_TOO_LARGE, "OUTPUT_TOO_LARGE"),
    (CHECK_SUMMARY_MISSING, "CHECK_SUMMARY_MISSING"),
    (SCORE_TOO_LOW, "SCORE_TOO_LOW"),
    (THRESHOLD_NOT_MET, "THRESHOLD_NOT_MET"),
    (VALUE_MISSING, "VALUE_MISSING"),
    (REFERENCE_MISMATCH, "REFERENCE_MISMATCH"),
    (QUORUM_NOT_MET, "QUORUM_NOT_MET"),
    (INSUFFICIENT_VERIFIERS, "INSUFFICIENT_VERIFIERS"),
    (EVIDENCE_UNREACHABLE, "EVIDENCE_UNREACHABLE"),
    (EVIDENCE_TIMEOUT, "EVIDENCE_TIMEOUT"),
    (EVIDENCE_AUTH_DENIED, "EVIDENCE_AUTH_DENIED"),
    (EVIDENCE_DIGEST_MISMATCH, "EVIDENCE_DIGEST_MISMATCH"),
    (EVIDENCE_TOO_LARGE, "EVIDENCE_TOO_LARGE"),
    (TASK_TIMEOUT, "TASK_TIMEOUT"),
    (INVALID_OUTPUT, "INVALID_OUTPUT"),
    (TASK_EXPIRED, "TASK_EXPIRED"),
    (RUNTIME_CRASH, "RUNTIME_CRASH"),
    (PARTIAL_DELIVERY, "PARTIAL_DELIVERY"),
    (CUSTOM_ERROR, "CUSTOM_ERROR"),
];

/// The symbolic name of a code, `"UNKNOWN"` for codes nobody defined.
#[must_use]
pub fn name(code: u16) -> &'static str {
    TABLE
        .iter()
        .find(|(known, _)| *known == code)
        .map_or("UNKNOWN", |(_, name)| name)
}

/// True for the evidence block (2xx): these make a result inconclusive rather than failed,
/// except a digest mismatch or oversize evidence, which are the worker's fault.
#[must_use]
pub fn is_evidence_unavailable(code: u16) -> bool {
    matches!(
        code,
        EVIDENCE_UNREACHABLE | EVIDENCE_TIMEOUT | EVIDENCE_AUTH_DENIED
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wattswarm_numbers_are_kept() {
        assert_eq!(SCHEMA_INVALID, 101);
        assert_eq!(EVIDENCE_DIGEST_MISMATCH, 203);
        assert_eq!(name(203), "EVIDENCE_DIGEST_MISMATCH");
        assert_eq!(name(4242), "UNKNOWN");
        assert!(is_evidence_unavailable(EVIDENCE_TIMEOUT));
        assert!(!is_evidence_unavailable(EVIDENCE_DIGEST_MISMATCH));
    }

    #[test]
    fn codes_are_unique_and_in_their_block() {
        let mut seen = std::collections::HashSet::new();
        for (code, name) in TABLE {
            assert!(seen.insert(code), "duplicate {code}");
            let block = code / 100;
            let expected = if name.starts_with("EVIDENCE") {
                2
            } else if [
                "TASK_TIMEOUT",
                "INVALID_OUTPUT",
                "TASK_EXPIRED",
                "RUNTIME_CRASH",
                "PARTIAL_DELIVERY",
            ]
            .contains(name)
            {
                3
            } else if *name == "CUSTOM_ERROR" {
                9
            } else {
                1
            };
            assert_eq!(block, expected, "{name}");
        }
    }
}
