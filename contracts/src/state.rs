//! The contract lifecycle of DESIGN §3 as a type.
//!
//! ```text
//! offered ─payment_verified─► paid ─forwarded─► executing ─deliverable_received─► delivered
//!    │ offer_expired            │ authorization_expired │ worker_pending              │ verification_started
//!    ▼                          ▼                       ▼                             ▼
//!  expired                    expired                pending ─deliverable_received─► delivered … verifying
//!
//!  executing/pending ─worker_failed (retries left)─► paid      (retry under the same payment)
//!  executing/pending ─worker_failed (exhausted) / sla_breached─► failed (void)
//!  offered/paid/executing/pending ─seeker_cancelled─► cancelled (void)
//!  verifying ─verification_passed─► accepted ─acceptance_window_closed─► settling
//!  verifying ─verification_failed / verification_inconclusive─► rejected ─void_recorded─► voided
//!  accepted ─dispute_opened (seeker)─► disputed;  rejected ─dispute_opened (operator)─► disputed
//!  disputed ─dispute_resolved settle─► settling;  disputed ─dispute_resolved void─► voided
//!  settling ─settlement_succeeded─► settled │ ─settlement_failed─► settlement_failed
//!           │ ─settlement_outcome_unknown─► settlement_unknown ─settlement_retried─► settling
//!  settlement_unknown ─settlement_succeeded / settlement_failed─► settled / settlement_failed
//!  offered ─authorization_sent─► authorizing ─payment_authorized─► paid   (auth-capture: the
//!           escrow's authorize is persisted as intent, sent, and mined before work starts)
//!  authorizing ─authorization_refused─► offered   (the chain refused it: nothing is held)
//!  (any state holding the payment) ─payment_reclaimed─► voided   (auth-capture: the payer took
//!                                   the escrowed funds back on chain after captureDeadline)
//! ```
//!
//! For escrowed (`auth-capture`) contracts `paid` means *authorized on chain* (reached through
//! `authorizing`), settlement is the escrow's capture and every void is the escrow's void; the
//! other states are the same. Only the payer's reclaim is an outside event: the chain already moved the money, so
//! the contract ends `voided` whatever it was doing.
//!
//! A pending task that completes goes through `delivered` like a synchronous one, so every
//! deliverable is recorded before it is judged. Terminal states (`settled`,
//! `settlement_failed`, `voided`, `expired`, `failed`, `cancelled`, `refunded`) accept no event,
//! but for one: an escrowed capture (`settled`) can still be refunded by an arbiter before the
//! escrow's refund deadline (`refund_issued` → `refunded`).
//! Settlement is reachable only from `accepted` (directly or through a dispute decided
//! "settle"), which is the "settle only from accepted" rule.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::terms::RetryPolicy;

/// Where a contract is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractState {
    /// Signed and offered; unpaid.
    Offered,
    /// An escrowed (`auth-capture`) payment was checked and its on-chain `authorize` is being
    /// sent; not paid until it is mined.
    Authorizing,
    /// Payment verified (authorization held); waiting to be forwarded.
    Paid,
    /// Forwarded to the worker; waiting for its answer.
    Executing,
    /// The worker accepted the task asynchronously (202 / `pending`).
    Pending,
    /// A deliverable arrived.
    Delivered,
    /// The verification policy is being applied.
    Verifying,
    /// Verification passed; settlement waits for the acceptance window.
    Accepted,
    /// Verification failed or was inconclusive; nothing will be settled unless a dispute says
    /// otherwise.
    Rejected,
    /// A party disputes the outcome; settlement waits for the decision.
    Disputed,
    /// Settlement has been requested from the facilitator.
    Settling,
    /// Paid out. Terminal.
    Settled,
    /// The facilitator reported a definitive settlement failure. Terminal.
    SettlementFailed,
    /// The settlement outcome is unknown (timeout, pending); to be reconciled.
    SettlementUnknown,
    /// The unpaid offer or the payment authorization lapsed. Terminal.
    Expired,
    /// The worker failed with no retries left, or breached the SLA; void. Terminal.
    Failed,
    /// The seeker cancelled before delivery; void. Terminal.
    Cancelled,
    /// Rejected (or disputed and decided "void") and the void recorded. Terminal.
    Voided,
    /// Escrowed and captured, then refunded to the payer by an arbiter's decision before the
    /// refund deadline. Terminal.
    Refunded,
}

impl ContractState {
    /// Every state, in lifecycle order.
    pub const ALL: [Self; 19] = [
        Self::Offered,
        Self::Authorizing,
        Self::Paid,
        Self::Executing,
        Self::Pending,
        Self::Delivered,
        Self::Verifying,
        Self::Accepted,
        Self::Rejected,
        Self::Disputed,
        Self::Settling,
        Self::Settled,
        Self::SettlementFailed,
        Self::SettlementUnknown,
        Self::Expired,
        Self::Failed,
        Self::Cancelled,
        Self::Voided,
        Self::Refunded,
    ];

    /// The wire name (`snake_case`).
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Offered => "offered",
            Self::Authorizing => "authorizing",
            Self::Paid => "paid",
            Self::Executing => "executing",
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Verifying => "verifying",
            Self::Accepted => "accepted",
            Self::Rejected => "rejected",
            Self::Disputed => "disputed",
            Self::Settling => "settling",
            Self::Settled => "settled",
            Self::SettlementFailed => "settlement_failed",
            Self::SettlementUnknown => "settlement_unknown",
            Self::Expired => "expired",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Voided => "voided",
            Self::Refunded => "refunded",
        }
    }

    /// True when the contract's work is over: no event moves it any more, except an arbiter's
    /// refund of a settled (escrowed) contract and an operator's dispute of a failure.
    #[must_use]
    pub const fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Settled
                | Self::SettlementFailed
                | Self::Expired
                | Self::Failed
                | Self::Cancelled
                | Self::Voided
                | Self::Refunded
        )
    }

    /// True while a verified payment authorization is held and neither settled nor voided:
    /// the states the gateway must resolve before the authorization's `validBefore`.
    #[must_use]
    pub const fn holds_authorization(&self) -> bool {
        matches!(
            self,
            Self::Paid
                | Self::Executing
                | Self::Pending
                | Self::Delivered
                | Self::Verifying
                | Self::Accepted
                | Self::Rejected
                | Self::Disputed
                | Self::Settling
                | Self::SettlementUnknown
        )
    }

    /// The state after `event`, or why `event` cannot happen now.
    pub fn transition(self, event: &ContractEvent) -> Result<Self, IllegalTransition> {
        use ContractEvent as E;
        use ContractState as S;
        let next = match (self, event) {
            (S::Offered, E::PaymentVerified) => S::Paid,
            (S::Offered, E::AuthorizationSent) => S::Authorizing,
            (S::Authorizing, E::PaymentAuthorized) => S::Paid,
            (S::Authorizing, E::AuthorizationRefused) => S::Offered,
            (S::Offered, E::OfferExpired) => S::Expired,
            (S::Paid, E::AuthorizationExpired) => S::Expired,
            (S::Paid, E::Forwarded) => S::Executing,
            (S::Executing, E::WorkerPending) => S::Pending,
            (S::Executing | S::Pending, E::DeliverableReceived) => S::Delivered,
            (
                S::Executing | S::Pending,
                E::WorkerFailed {
                    attempts_made,
                    retry_policy,
                },
            ) => {
                if retry_policy.allows_retry_after(*attempts_made) {
                    S::Paid
                } else {
                    S::Failed
                }
            }
            (S::Executing | S::Pending, E::SlaBreached) => S::Failed,
            (S::Offered | S::Paid | S::Executing | S::Pending, E::SeekerCancelled) => S::Cancelled,
            (S::Delivered, E::VerificationStarted) => S::Verifying,
            (S::Verifying, E::VerificationPassed) => S::Accepted,
            (S::Verifying, E::VerificationFailed | E::VerificationInconclusive) => S::Rejected,
            (S::Accepted, E::AcceptanceWindowClosed) => S::Settling,
            // An operator may also dispute a failure it blames on the gateway (e.g. an SLA
            // breach during the gateway's own outage); the gateway lets it only while the
            // money is still held.
            (S::Accepted, E::DisputeOpened { by: Party::Seeker })
            | (
                S::Rejected | S::Failed,
                E::DisputeOpened {
                    by: Party::Operator,
                },
            ) => S::Disputed,
            (S::Rejected, E::VoidRecorded) => S::Voided,
            (S::Disputed, E::DisputeResolved { decision }) => match decision {
                DisputeDecision::Settle => S::Settling,
                DisputeDecision::Void => S::Voided,
            },
            (S::Settling | S::SettlementUnknown, E::SettlementSucceeded) => S::Settled,
            (S::Settling | S::SettlementUnknown, E::SettlementFailed) => S::SettlementFailed,
            (S::Settling, E::SettlementOutcomeUnknown) => S::SettlementUnknown,
            (S::SettlementUnknown, E::SettlementRetried) => S::Settling,
            (from, E::PaymentReclaimed) if from.holds_authorization() => S::Voided,
            // Settled is final for the work; only an escrowed capture can still be refunded.
            (S::Settled, E::RefundIssued) => S::Refunded,
            (from, event) => {
                return Err(IllegalTransition {
                    from,
                    event: event.name(),
                });
            }
        };
        Ok(next)
    }
}

impl fmt::Display for ContractState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown state name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown contract state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for ContractState {
    type Err = UnknownState;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == raw)
            .ok_or_else(|| UnknownState(raw.to_owned()))
    }
}

/// Who opened a dispute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Party {
    /// The seeker (disputes an acceptance).
    Seeker,
    /// The worker's operator (disputes a rejection).
    Operator,
}

/// How a dispute ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisputeDecision {
    /// Pay the worker.
    Settle,
    /// Pay nothing.
    Void,
}

/// A name that is none of its vocabulary's (a [`Party`] or a [`DisputeDecision`] read as text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {vocabulary} {raw:?}")]
pub struct UnknownName {
    vocabulary: &'static str,
    raw: String,
}

/// `ALL`, `as_str` (the serialized name) and `FromStr` of a dispute vocabulary, so that text
/// stored or sent with these names reads back into the same value.
macro_rules! dispute_names {
    ($name:ident, $vocabulary:literal { $($variant:ident = $spelling:literal,)+ }) => {
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The name, as serialized (and stored).
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $spelling,)+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(raw: &str) -> Result<Self, Self::Err> {
                match raw {
                    $($spelling => Ok(Self::$variant),)+
                    _ => Err(UnknownName {
                        vocabulary: $vocabulary,
                        raw: raw.chars().take(64).collect(),
                    }),
                }
            }
        }
    };
}

dispute_names!(Party, "dispute party" {
    Seeker = "seeker",
    Operator = "operator",
});

dispute_names!(DisputeDecision, "dispute decision" {
    Settle = "settle",
    Void = "void",
});

/// Something that happened to a contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ContractEvent {
    /// The facilitator verified the seeker's payment.
    PaymentVerified,
    /// An escrowed payment was checked and its `authorize` is about to be sent.
    AuthorizationSent,
    /// The escrow's `authorize` is mined: the money is locked.
    PaymentAuthorized,
    /// The chain refused the `authorize` (or it can never be mined): nothing is held.
    AuthorizationRefused,
    /// The unpaid offer lapsed.
    OfferExpired,
    /// The held authorization lapsed before work started.
    AuthorizationExpired,
    /// The task was sent to the worker.
    Forwarded,
    /// The worker answered `pending` / 202.
    WorkerPending,
    /// A deliverable arrived (sync answer, poll or callback).
    DeliverableReceived,
    /// The worker failed this attempt.
    WorkerFailed {
        /// Attempts made so far, this one included (1-based).
        attempts_made: u32,
        /// The contract's retry policy.
        retry_policy: RetryPolicy,
    },
    /// The SLA ran out.
    SlaBreached,
    /// The seeker cancelled.
    SeekerCancelled,
    /// The policy is being applied.
    VerificationStarted,
    /// Verification passed.
    VerificationPassed,
    /// Verification failed.
    VerificationFailed,
    /// Verification was inconclusive.
    VerificationInconclusive,
    /// The acceptance window ended without a dispute.
    AcceptanceWindowClosed,
    /// A party opened a dispute.
    DisputeOpened {
        /// Who.
        by: Party,
    },
    /// A dispute was decided (by replay or by the arbiter).
    DisputeResolved {
        /// The decision.
        decision: DisputeDecision,
    },
    /// The void of a rejected contract was recorded.
    VoidRecorded,
    /// The facilitator confirmed settlement.
    SettlementSucceeded,
    /// The facilitator reported a definitive failure.
    SettlementFailed,
    /// The settlement outcome is unknown (timeout, `settlement_pending`).
    SettlementOutcomeUnknown,
    /// Reconciliation retries settlement with the same payload.
    SettlementRetried,
    /// The payer reclaimed an escrowed payment on chain (`PaymentReclaimed`, possible once the
    /// capture deadline passed): nothing can be captured any more.
    PaymentReclaimed,
    /// An arbiter decided for the seeker after an escrowed capture, and the escrow's refund
    /// returned the price to the payer.
    RefundIssued,
}

impl ContractEvent {
    /// The wire name, as written to the event log.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::PaymentVerified => "payment_verified",
            Self::AuthorizationSent => "authorization_sent",
            Self::PaymentAuthorized => "payment_authorized",
            Self::AuthorizationRefused => "authorization_refused",
            Self::OfferExpired => "offer_expired",
            Self::AuthorizationExpired => "authorization_expired",
            Self::Forwarded => "forwarded",
            Self::WorkerPending => "worker_pending",
            Self::DeliverableReceived => "deliverable_received",
            Self::WorkerFailed { .. } => "worker_failed",
            Self::SlaBreached => "sla_breached",
            Self::SeekerCancelled => "seeker_cancelled",
            Self::VerificationStarted => "verification_started",
            Self::VerificationPassed => "verification_passed",
            Self::VerificationFailed => "verification_failed",
            Self::VerificationInconclusive => "verification_inconclusive",
            Self::AcceptanceWindowClosed => "acceptance_window_closed",
            Self::DisputeOpened { .. } => "dispute_opened",
            Self::DisputeResolved { .. } => "dispute_resolved",
            Self::VoidRecorded => "void_recorded",
            Self::SettlementSucceeded => "settlement_succeeded",
            Self::SettlementFailed => "settlement_failed",
            Self::SettlementOutcomeUnknown => "settlement_outcome_unknown",
            Self::SettlementRetried => "settlement_retried",
            Self::PaymentReclaimed => "payment_reclaimed",
            Self::RefundIssued => "refund_issued",
        }
    }
}

/// An event that cannot happen in the current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event {event} is not allowed in state {from}")]
pub struct IllegalTransition {
    /// The state the contract is in.
    pub from: ContractState,
    /// The event that was refused.
    pub event: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContractEvent as E;
    use ContractState as S;
    use proptest::prelude::*;

    fn retry(max: u32) -> RetryPolicy {
        RetryPolicy::new(max).unwrap()
    }

    #[test]
    fn a_dispute_name_is_its_serialized_name_and_parses_back() {
        for party in Party::ALL {
            assert_eq!(party.as_str().parse::<Party>(), Ok(*party));
            assert_eq!(
                serde_json::to_value(party).unwrap(),
                serde_json::json!(party.as_str())
            );
        }
        for decision in DisputeDecision::ALL {
            assert_eq!(decision.as_str().parse::<DisputeDecision>(), Ok(*decision));
            assert_eq!(
                serde_json::to_value(decision).unwrap(),
                serde_json::json!(decision.to_string())
            );
        }
        let refused = "Settle".parse::<DisputeDecision>().unwrap_err();
        assert_eq!(refused.to_string(), r#"unknown dispute decision "Settle""#);
        for raw in ["", "seeker ", "worker", "Operator"] {
            assert!(raw.parse::<Party>().is_err(), "{raw:?}");
        }
    }

    /// One sample of every event variant (and every variant payload that changes the outcome).
    fn sample_events() -> Vec<ContractEvent> {
        vec![
            E::PaymentVerified,
            E::RefundIssued,
            E::AuthorizationSent,
            E::PaymentAuthorized,
            E::AuthorizationRefused,
            E::OfferExpired,
            E::AuthorizationExpired,
            E::Forwarded,
            E::WorkerPending,
            E::DeliverableReceived,
            E::WorkerFailed {
                attempts_made: 1,
                retry_policy: retry(3),
            },
            E::WorkerFailed {
                attempts_made: 3,
                retry_policy: retry(3),
            },
            E::SlaBreached,
            E::SeekerCancelled,
            E::VerificationStarted,
            E::VerificationPassed,
            E::VerificationFailed,
            E::VerificationInconclusive,
            E::AcceptanceWindowClosed,
            E::DisputeOpened { by: Party::Seeker },
            E::DisputeOpened {
                by: Party::Operator,
            },
            E::DisputeResolved {
                decision: DisputeDecision::Settle,
            },
            E::DisputeResolved {
                decision: DisputeDecision::Void,
            },
            E::VoidRecorded,
            E::SettlementSucceeded,
            E::SettlementFailed,
            E::SettlementOutcomeUnknown,
            E::SettlementRetried,
            E::PaymentReclaimed,
        ]
    }

    /// Every legal transition of DESIGN §3.
    fn legal() -> Vec<(ContractState, ContractEvent, ContractState)> {
        let mut table = vec![
            (S::Offered, E::PaymentVerified, S::Paid),
            (S::Offered, E::AuthorizationSent, S::Authorizing),
            (S::Authorizing, E::PaymentAuthorized, S::Paid),
            (S::Authorizing, E::AuthorizationRefused, S::Offered),
            (S::Settled, E::RefundIssued, S::Refunded),
            (S::Offered, E::OfferExpired, S::Expired),
            (S::Offered, E::SeekerCancelled, S::Cancelled),
            (S::Paid, E::AuthorizationExpired, S::Expired),
            (S::Paid, E::Forwarded, S::Executing),
            (S::Paid, E::SeekerCancelled, S::Cancelled),
            (S::Executing, E::WorkerPending, S::Pending),
            (S::Executing, E::DeliverableReceived, S::Delivered),
            (S::Executing, E::SlaBreached, S::Failed),
            (S::Executing, E::SeekerCancelled, S::Cancelled),
            (S::Pending, E::DeliverableReceived, S::Delivered),
            (S::Pending, E::SlaBreached, S::Failed),
            (S::Pending, E::SeekerCancelled, S::Cancelled),
            (S::Delivered, E::VerificationStarted, S::Verifying),
            (S::Verifying, E::VerificationPassed, S::Accepted),
            (S::Verifying, E::VerificationFailed, S::Rejected),
            (S::Verifying, E::VerificationInconclusive, S::Rejected),
            (S::Accepted, E::AcceptanceWindowClosed, S::Settling),
            (
                S::Accepted,
                E::DisputeOpened { by: Party::Seeker },
                S::Disputed,
            ),
            (
                S::Rejected,
                E::DisputeOpened {
                    by: Party::Operator,
                },
                S::Disputed,
            ),
            (
                S::Failed,
                E::DisputeOpened {
                    by: Party::Operator,
                },
                S::Disputed,
            ),
            (S::Rejected, E::VoidRecorded, S::Voided),
            (
                S::Disputed,
                E::DisputeResolved {
                    decision: DisputeDecision::Settle,
                },
                S::Settling,
            ),
            (
                S::Disputed,
                E::DisputeResolved {
                    decision: DisputeDecision::Void,
                },
                S::Voided,
            ),
            (S::Settling, E::SettlementSucceeded, S::Settled),
            (S::Settling, E::SettlementFailed, S::SettlementFailed),
            (
                S::Settling,
                E::SettlementOutcomeUnknown,
                S::SettlementUnknown,
            ),
            (S::SettlementUnknown, E::SettlementSucceeded, S::Settled),
            (
                S::SettlementUnknown,
                E::SettlementFailed,
                S::SettlementFailed,
            ),
            (S::SettlementUnknown, E::SettlementRetried, S::Settling),
        ];
        for from in ContractState::ALL
            .into_iter()
            .filter(ContractState::holds_authorization)
        {
            table.push((from, E::PaymentReclaimed, S::Voided));
        }
        for from in [S::Executing, S::Pending] {
            table.push((
                from,
                E::WorkerFailed {
                    attempts_made: 1,
                    retry_policy: retry(3),
                },
                S::Paid,
            ));
            table.push((
                from,
                E::WorkerFailed {
                    attempts_made: 3,
                    retry_policy: retry(3),
                },
                S::Failed,
            ));
        }
        table
    }

    #[test]
    fn every_legal_transition_lands_where_the_design_says() {
        for (from, event, to) in legal() {
            assert_eq!(
                from.transition(&event),
                Ok(to),
                "{from} --{}-->",
                event.name()
            );
        }
    }

    #[test]
    fn everything_else_is_a_typed_error() {
        let legal = legal();
        for from in ContractState::ALL {
            for event in sample_events() {
                let expected = legal
                    .iter()
                    .find(|(f, e, _)| *f == from && *e == event)
                    .map(|(_, _, to)| *to);
                match expected {
                    Some(to) => assert_eq!(from.transition(&event), Ok(to)),
                    None => assert_eq!(
                        from.transition(&event),
                        Err(IllegalTransition {
                            from,
                            event: event.name()
                        }),
                        "{from} --{}--> should be illegal",
                        event.name()
                    ),
                }
            }
        }
    }

    #[test]
    fn terminal_states_are_terminal() {
        for state in ContractState::ALL
            .into_iter()
            .filter(ContractState::is_terminal)
        {
            assert!(!state.holds_authorization());
            for event in sample_events() {
                // The two ways on: an arbiter's refund after a capture, and an operator's
                // dispute of a failure while the money is still held.
                let operator_dispute = E::DisputeOpened {
                    by: Party::Operator,
                };
                if (state == S::Settled && event == E::RefundIssued)
                    || (state == S::Failed && event == operator_dispute)
                {
                    continue;
                }
                assert!(
                    state.transition(&event).is_err(),
                    "{state} moved on {}",
                    event.name()
                );
            }
        }
        let terminal: Vec<_> = ContractState::ALL
            .into_iter()
            .filter(ContractState::is_terminal)
            .collect();
        assert_eq!(
            terminal,
            vec![
                S::Settled,
                S::SettlementFailed,
                S::Expired,
                S::Failed,
                S::Cancelled,
                S::Voided,
                S::Refunded
            ]
        );
    }

    #[test]
    fn settlement_is_only_reachable_through_accepted() {
        // Which states lead into `settling`? Only accepted and disputed (and the reconcile loop).
        let into_settling: std::collections::BTreeSet<_> = legal()
            .into_iter()
            .filter(|(_, _, to)| *to == S::Settling)
            .map(|(from, _, _)| from)
            .collect();
        assert_eq!(
            into_settling,
            [S::Accepted, S::Disputed, S::SettlementUnknown].into()
        );
        // And a dispute only exists after accepted (seeker) or rejected (operator).
        assert!(
            S::Verifying
                .transition(&E::DisputeOpened { by: Party::Seeker })
                .is_err()
        );
        assert!(
            S::Accepted
                .transition(&E::DisputeOpened {
                    by: Party::Operator
                })
                .is_err()
        );
    }

    #[test]
    fn a_payer_reclaim_ends_every_state_holding_the_payment_and_nothing_else() {
        let from: Vec<_> = ContractState::ALL
            .into_iter()
            .filter(|state| state.transition(&E::PaymentReclaimed).is_ok())
            .collect();
        assert_eq!(
            from,
            [
                S::Paid,
                S::Executing,
                S::Pending,
                S::Delivered,
                S::Verifying,
                S::Accepted,
                S::Rejected,
                S::Disputed,
                S::Settling,
                S::SettlementUnknown,
            ]
        );
        assert!(
            from.iter()
                .all(|state| state.transition(&E::PaymentReclaimed) == Ok(S::Voided))
        );
        // Money already captured (settled) or never locked (offered) cannot be reclaimed.
        assert!(S::Settled.transition(&E::PaymentReclaimed).is_err());
        assert!(S::Offered.transition(&E::PaymentReclaimed).is_err());
    }

    #[test]
    fn names_round_trip() {
        for state in ContractState::ALL {
            assert_eq!(state.as_str().parse::<ContractState>().unwrap(), state);
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
        assert!("paying".parse::<ContractState>().is_err());
        let event = E::WorkerFailed {
            attempts_made: 2,
            retry_policy: retry(3),
        };
        let json = serde_json::to_value(event).unwrap();
        assert_eq!(json["event"], "worker_failed");
        assert_eq!(
            serde_json::from_value::<ContractEvent>(json).unwrap(),
            event
        );
    }

    proptest! {
        #[test]
        fn any_event_sequence_only_takes_legal_steps(indices in proptest::collection::vec(0usize..32, 0..40)) {
            let events = sample_events();
            let legal = legal();
            let mut state = S::Offered;
            for index in indices {
                let event = events[index % events.len()];
                match state.transition(&event) {
                    Ok(next) => {
                        // Terminal for the work; only a refund, or an operator's dispute of a failure
                        // (decided only while the money is held), leads on.
                        let operator_dispute = E::DisputeOpened { by: Party::Operator };
                        let leads_on = (state, event) == (S::Settled, E::RefundIssued)
                            || (state, event) == (S::Failed, operator_dispute);
                        prop_assert!(!state.is_terminal() || leads_on);
                        prop_assert!(legal.contains(&(state, event, next)));
                        state = next;
                    }
                    Err(error) => prop_assert_eq!(error.from, state),
                }
            }
        }
    }
}
