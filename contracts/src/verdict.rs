//! The outcome class of a verification, shared by the verifier ([`crate::verify`]) and the
//! WattSwarm verifier wire ([`crate::wire::wattswarm`]); it stands apart so that neither of the two
//! has to import the other for it.

use serde::{Deserialize, Serialize};

/// Outcome class of a verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationStatus {
    /// The deliverable satisfies the policy: settle.
    Passed,
    /// The deliverable breaks the policy: settle nothing.
    Failed,
    /// The policy could not be decided (evidence unreachable, too few verifiers): settle
    /// nothing, and a dispute replay may decide it later.
    Inconclusive,
}
