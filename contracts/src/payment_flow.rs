//! When a contract's payment moves relative to its work (x402 `extra.paymentFlow`), and what
//! the signed terms say about it.
//!
//! | flow | when the money moves | a rejected or failed deliverable | pinned in the terms as |
//! |---|---|---|---|
//! | `authorization` | verified before the work, settled after it only when the deliverable passed | costs nothing: the authorization is never settled | nothing (the default) |
//! | `escrow` | locked in the escrow before the work, captured or voided after it | costs nothing: the lock is voided | the `escrow` terms |
//! | `upfront` | settled on chain before the worker is called | **stays paid**: the protocol refunds nothing | [`UpfrontTerms`], with [`UPFRONT_CONSEQUENCE`] |
//!
//! `upfront` is for `exact` prices only: an `upto` price settles what was verified, which is
//! known after the work, and an escrowed price locks instead of paying. The consequence is part
//! of the signed document (and so of `terms_hash`), word for word, so a seeker who pays an
//! upfront offer has signed for it.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Serialize};

/// When a contract's payment settles relative to its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentFlow {
    /// Verify before the work, settle after it when the deliverable passed (the default).
    Authorization,
    /// Settle before the work; nothing moves after it.
    Upfront,
    /// Lock in the escrow before the work; capture or void after it.
    Escrow,
}

impl PaymentFlow {
    /// Every flow, in the order above.
    pub const ALL: [Self; 3] = [Self::Authorization, Self::Upfront, Self::Escrow];

    /// The wire name (x402 `extra.paymentFlow`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Authorization => "authorization",
            Self::Upfront => "upfront",
            Self::Escrow => "escrow",
        }
    }
}

impl fmt::Display for PaymentFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a payment flow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown payment flow {0:?}: expected authorization, upfront or escrow")]
pub struct UnknownPaymentFlow(pub String);

impl FromStr for PaymentFlow {
    type Err = UnknownPaymentFlow;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|flow| flow.as_str() == raw)
            .ok_or_else(|| UnknownPaymentFlow(raw.chars().take(64).collect()))
    }
}

/// What an upfront contract's payer agrees to, word for word in the signed terms.
pub const UPFRONT_CONSEQUENCE: &str = "The price is settled on chain before the worker is \
    called. A deliverable that fails verification, a failed attempt or a breached SLA stays \
    paid: the protocol refunds nothing. A dispute is still decided and recorded (receipts, \
    reputation), but an arbiter's decision moves no money; any refund is for the parties to \
    make outside hiregate.";

/// The `payment_flow` member of upfront terms: the flow and its consequence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UpfrontWire")]
pub struct UpfrontTerms {
    flow: PaymentFlow,
    consequence: String,
}

impl UpfrontTerms {
    /// The terms of the upfront flow.
    #[must_use]
    pub fn new() -> Self {
        Self {
            flow: PaymentFlow::Upfront,
            consequence: UPFRONT_CONSEQUENCE.to_owned(),
        }
    }

    /// What the payer agreed to.
    #[must_use]
    pub fn consequence(&self) -> &str {
        &self.consequence
    }
}

impl Default for UpfrontTerms {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpfrontWire {
    flow: PaymentFlow,
    consequence: String,
}

/// Upfront terms that are not the upfront flow with its consequence word for word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "payment_flow must be {{\"flow\": \"upfront\", \"consequence\": <the upfront consequence>}}"
)]
pub struct NotUpfrontTerms;

impl TryFrom<UpfrontWire> for UpfrontTerms {
    type Error = NotUpfrontTerms;

    fn try_from(wire: UpfrontWire) -> Result<Self, Self::Error> {
        if wire.flow != PaymentFlow::Upfront || wire.consequence != UPFRONT_CONSEQUENCE {
            return Err(NotUpfrontTerms);
        }
        Ok(Self::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flows_read_and_write_their_wire_names() {
        for flow in PaymentFlow::ALL {
            assert_eq!(flow.as_str().parse::<PaymentFlow>(), Ok(flow));
            assert_eq!(serde_json::to_value(flow).unwrap(), json!(flow.as_str()));
        }
        assert!("later".parse::<PaymentFlow>().is_err());
    }

    #[test]
    fn upfront_terms_hold_the_consequence_word_for_word() {
        let terms = UpfrontTerms::new();
        let wire = serde_json::to_value(&terms).unwrap();
        assert_eq!(wire["flow"], "upfront");
        assert_eq!(wire["consequence"], UPFRONT_CONSEQUENCE);
        assert_eq!(
            serde_json::from_value::<UpfrontTerms>(wire.clone()).unwrap(),
            terms
        );

        let mut softened = wire.clone();
        softened["consequence"] = json!("refunds on request");
        assert!(serde_json::from_value::<UpfrontTerms>(softened).is_err());
        let mut other_flow = wire.clone();
        other_flow["flow"] = json!("authorization");
        assert!(serde_json::from_value::<UpfrontTerms>(other_flow).is_err());
        let mut extra = wire;
        extra["refund"] = json!(true);
        assert!(serde_json::from_value::<UpfrontTerms>(extra).is_err());
    }
}
