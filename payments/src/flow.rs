//! `extra.paymentFlow`: when a payment settles relative to the work it pays for.
//!
//! The official `@x402/core` 2.27 server decides, per offer, whether it verifies before the
//! handler runs, settles before it, after it, or both (its `paymentFlow.ts` phase table, read by
//! the TS and Python SDKs); the auth-capture v1.1 binding gives the flows their meaning for
//! escrowed payments. The key sits in an offer's `extra`; the SDK omits it for the default
//! `authorization` and writes it out otherwise, and clients drop offers whose flow they do not
//! recognise.
//!
//! | flow | before the work | after the work | what a rejected deliverable costs the payer |
//! |---|---|---|---|
//! | `authorization` | verify | settle | nothing: no settlement |
//! | `upfront` | settle | — | the full price: the money moved before the work |
//! | `escrow` | settle (`authorize`: funds locked) | settle (`capture`, or `void` back to the payer) | nothing: the lock is voided |

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::reason::Reason;
use crate::wire::PaymentRequirements;

/// The key in `PaymentRequirements.extra`.
pub const PAYMENT_FLOW_KEY: &str = "paymentFlow";

/// When a payment settles relative to the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PaymentFlow {
    /// Verify before the work, settle after it (the default).
    Authorization,
    /// Settle before the work, nothing after.
    Upfront,
    /// Lock before the work, capture or release after it.
    Escrow,
}

/// The phases a flow runs, as the official server's phase table names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowPhases {
    /// `/verify` before the work.
    pub verify_before_work: bool,
    /// `/settle` before the work.
    pub settle_before_work: bool,
    /// `/settle` after the work.
    pub settle_after_work: bool,
}

impl PaymentFlow {
    /// The flow's wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Authorization => "authorization",
            Self::Upfront => "upfront",
            Self::Escrow => "escrow",
        }
    }

    /// What the flow runs, and when.
    #[must_use]
    pub fn phases(self) -> FlowPhases {
        match self {
            Self::Authorization => FlowPhases {
                verify_before_work: true,
                settle_before_work: false,
                settle_after_work: true,
            },
            Self::Upfront => FlowPhases {
                verify_before_work: false,
                settle_before_work: true,
                settle_after_work: false,
            },
            Self::Escrow => FlowPhases {
                verify_before_work: false,
                settle_before_work: true,
                settle_after_work: true,
            },
        }
    }
}

impl fmt::Display for PaymentFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PaymentFlow {
    type Err = Reason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "authorization" => Ok(Self::Authorization),
            "upfront" => Ok(Self::Upfront),
            "escrow" => Ok(Self::Escrow),
            _ => Err(Reason::UnsupportedPaymentFlow),
        }
    }
}

impl PaymentRequirements {
    /// `extra.paymentFlow`: `Ok(None)` when absent (each scheme has its default), an error for
    /// a value that is not one of the three flows.
    pub fn payment_flow(&self) -> Result<Option<PaymentFlow>, Reason> {
        match self.extra.get(PAYMENT_FLOW_KEY) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(flow)) => flow.parse().map(Some),
            Some(_) => Err(Reason::UnsupportedPaymentFlow),
        }
    }

    /// Writes `extra.paymentFlow` as the official server does: `authorization` (the default of
    /// `exact` and `upto`) is left out, any other flow written.
    pub fn set_payment_flow(&mut self, flow: PaymentFlow) {
        match flow {
            PaymentFlow::Authorization => {
                self.extra.remove(PAYMENT_FLOW_KEY);
            }
            other => {
                self.extra.insert(
                    PAYMENT_FLOW_KEY.into(),
                    Value::String(other.as_str().into()),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Network, TokenDomain};
    use alloy::primitives::{Address, U256};

    fn offer() -> PaymentRequirements {
        PaymentRequirements::exact_evm(
            Network::eip155(8453).unwrap(),
            U256::from(1u8),
            Address::ZERO,
            Address::ZERO,
            60,
            &TokenDomain {
                name: "USD Coin".into(),
                version: "2".into(),
            },
        )
    }

    #[test]
    fn flows_round_trip_through_extra_the_way_the_official_server_writes_them() {
        let mut offer = offer();
        assert_eq!(offer.payment_flow(), Ok(None));
        offer.set_payment_flow(PaymentFlow::Upfront);
        assert_eq!(offer.extra[PAYMENT_FLOW_KEY], "upfront");
        assert_eq!(offer.payment_flow(), Ok(Some(PaymentFlow::Upfront)));
        offer.set_payment_flow(PaymentFlow::Escrow);
        assert_eq!(offer.payment_flow(), Ok(Some(PaymentFlow::Escrow)));
        offer.set_payment_flow(PaymentFlow::Authorization);
        assert!(!offer.extra.contains_key(PAYMENT_FLOW_KEY));

        offer.extra.insert(PAYMENT_FLOW_KEY.into(), "later".into());
        assert_eq!(offer.payment_flow(), Err(Reason::UnsupportedPaymentFlow));
        offer
            .extra
            .insert(PAYMENT_FLOW_KEY.into(), Value::Bool(true));
        assert_eq!(offer.payment_flow(), Err(Reason::UnsupportedPaymentFlow));
    }

    #[test]
    fn phases_follow_the_official_table() {
        let upfront = PaymentFlow::Upfront.phases();
        assert!(upfront.settle_before_work && !upfront.settle_after_work);
        assert!(!upfront.verify_before_work);
        let escrow = PaymentFlow::Escrow.phases();
        assert!(escrow.settle_before_work && escrow.settle_after_work);
        let authorization = PaymentFlow::Authorization.phases();
        assert!(authorization.verify_before_work && authorization.settle_after_work);
        assert!(!authorization.settle_before_work);
    }
}
