//! The closed vocabularies stored as text: a payment's, an attempt's and a webhook delivery's
//! state, a contract event's kind and its [`Actor`], a dispute's state and how it was decided,
//! and what a stored delivery piece is.
//! Each is an enum
//! whose spelling in the database (and on the wire, where it is shown) is its
//! [`as_str`](PaymentState::as_str); a row is parsed once when it is read, and a row holding any
//! other spelling is corrupt ([`StoreError::Corrupt`](crate::StoreError::Corrupt)). The
//! spellings are those the gateway has always written, so no stored data changes.
//!
//! (The contract's own state is the contracts crate's `ContractState`; a dispute's party and
//! decision are its `Party` and `DisputeDecision`, read with their own `FromStr`.)

use std::{fmt, str::FromStr};

use hiregate_contracts::{
    id::{PrincipalId, WorkerId},
    state::ContractEvent as LifecycleEvent,
};

/// A stored text is none of the spellings of its vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{raw}` is not a {vocabulary}")]
pub struct UnknownSpelling {
    vocabulary: &'static str,
    raw: String,
}

/// An enum with one stored spelling per variant: `ALL`, `as_str`, `FromStr` (failing with
/// [`UnknownSpelling`]), `Display`, and `Serialize` as the spelling (so JSON built from it is
/// what the string was).
macro_rules! stored_names {
    (
        $(#[$meta:meta])*
        $name:ident, $vocabulary:literal {
            $($(#[$variant_meta:meta])* $variant:ident = $spelling:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The stored spelling.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $spelling,)+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownSpelling;
            fn from_str(raw: &str) -> Result<Self, Self::Err> {
                match raw {
                    $($spelling => Ok(Self::$variant),)+
                    _ => Err(UnknownSpelling {
                        vocabulary: $vocabulary,
                        raw: raw.chars().take(64).collect(),
                    }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

stored_names! {
    /// Where a stored x402 payment is. `exact` payments go `verified → settling → settled`
    /// (or `settlement_failed` / `settlement_unknown`, or `voided` when the contract failed);
    /// escrowed (`auth-capture`) payments start `authorizing`, become `authorized` (or
    /// `authorization_refused`), and after a capture can be `refunding` / `refunded`, or go
    /// back to the payer through `voiding` → `voided` or `reclaimed`.
    PaymentState, "payment state" {
        /// An `exact` authorization the facilitator verified; held until settlement.
        Verified = "verified",
        /// An escrowed payment whose on-chain `authorize` is being sent.
        Authorizing = "authorizing",
        /// An escrowed payment locked on chain.
        Authorized = "authorized",
        /// The `authorize` failed: nothing was locked.
        AuthorizationRefused = "authorization_refused",
        /// Settlement (or capture) has begun.
        Settling = "settling",
        /// Settled (captured). Money moved to the worker.
        Settled = "settled",
        /// The settlement failed definitively.
        SettlementFailed = "settlement_failed",
        /// The settlement's outcome is unknown; to be reconciled.
        SettlementUnknown = "settlement_unknown",
        /// An escrowed payment's void is on its way.
        Voiding = "voiding",
        /// Voided: the authorization will never be used (or the escrow returned it).
        Voided = "voided",
        /// The payer reclaimed an escrow the gateway let lapse.
        Reclaimed = "reclaimed",
        /// A captured escrowed payment's refund is on its way.
        Refunding = "refunding",
        /// Refunded to the payer after a capture.
        Refunded = "refunded",
    }
}

stored_names! {
    /// Where one forward of a paid contract to its worker is.
    AttemptState, "attempt state" {
        /// Sent to the worker; no answer yet.
        Running = "running",
        /// The worker accepted the work asynchronously and it is not done.
        Pending = "pending",
        /// The worker delivered.
        Completed = "completed",
        /// The worker failed (or its answer was unusable).
        Failed = "failed",
        /// The worker did not answer within the SLA.
        TimedOut = "timed_out",
    }
}

stored_names! {
    /// Where the delivery of one event to a seeker's webhook endpoint is.
    DeliveryState, "webhook delivery state" {
        /// Waiting for its next try.
        Pending = "pending",
        /// The endpoint accepted it.
        Delivered = "delivered",
        /// Out of tries (or the endpoint is gone): a dead letter until redelivered.
        Dead = "dead",
    }
}

stored_names! {
    /// Where a dispute is (`dispute.state`, the `state` of its view and of the arbiter's queue).
    DisputeState, "dispute state" {
        /// Opened; its replay is running or decided it.
        Open = "open",
        /// The replay could not decide: waiting for the arbiter.
        Escalated = "escalated",
        /// Decided (once, for good).
        Decided = "decided",
    }
}

stored_names! {
    /// How a dispute was decided (`dispute.decided_via`, the decision's `via`).
    DecidedVia, "dispute decision route" {
        /// The pinned policy's replay reached a verdict.
        Replay = "replay",
        /// The arbiter decided.
        Arbiter = "arbiter",
        /// The arbiter stayed silent until the authorization's deadline: void.
        Timeout = "timeout",
    }
}

stored_names! {
    /// What one stored piece of a delivery is (`deliverable.kind`).
    PieceKind, "delivery piece kind" {
        /// The deliverable document itself (position 0).
        Deliverable = "deliverable",
        /// An evidence file fetched at the verdict, kept for dispute replay.
        Evidence = "evidence",
    }
}

stored_names! {
    /// What a contract event records (`contract_event.kind`, the `kind` of SSE events, webhook
    /// messages and the event list endpoints). The lifecycle's own events are named after the
    /// contracts crate's `ContractEvent` ([`EventKind::of`]); the others are the gateway's notes
    /// along the way and the worker's relayed events.
    EventKind, "contract event kind" {
        /// The contract was signed and offered (its first event).
        ContractOffered = "contract_offered",
        /// An `exact` payment was verified.
        PaymentVerified = "payment_verified",
        /// An escrowed payment's `authorize` is being sent.
        AuthorizationSent = "authorization_sent",
        /// An escrowed payment was locked on chain.
        PaymentAuthorized = "payment_authorized",
        /// An escrowed payment's `authorize` failed.
        AuthorizationRefused = "authorization_refused",
        /// The unpaid offer lapsed.
        OfferExpired = "offer_expired",
        /// The payment authorization lapsed.
        AuthorizationExpired = "authorization_expired",
        /// Forwarded to the worker.
        Forwarded = "forwarded",
        /// The worker accepted the task asynchronously.
        WorkerPending = "worker_pending",
        /// A deliverable arrived.
        DeliverableReceived = "deliverable_received",
        /// The worker failed.
        WorkerFailed = "worker_failed",
        /// The worker breached the SLA.
        SlaBreached = "sla_breached",
        /// The seeker cancelled.
        SeekerCancelled = "seeker_cancelled",
        /// Verification began.
        VerificationStarted = "verification_started",
        /// Verification passed.
        VerificationPassed = "verification_passed",
        /// Verification failed.
        VerificationFailed = "verification_failed",
        /// Verification was inconclusive.
        VerificationInconclusive = "verification_inconclusive",
        /// The acceptance window closed.
        AcceptanceWindowClosed = "acceptance_window_closed",
        /// A party opened a dispute.
        DisputeOpened = "dispute_opened",
        /// A dispute's decision was carried out.
        DisputeResolved = "dispute_resolved",
        /// A void was recorded.
        VoidRecorded = "void_recorded",
        /// Settlement succeeded.
        SettlementSucceeded = "settlement_succeeded",
        /// Settlement failed.
        SettlementFailed = "settlement_failed",
        /// The settlement's outcome is unknown.
        SettlementOutcomeUnknown = "settlement_outcome_unknown",
        /// A settlement of unknown outcome was retried.
        SettlementRetried = "settlement_retried",
        /// The payer reclaimed a lapsed escrow.
        PaymentReclaimed = "payment_reclaimed",
        /// A captured escrowed payment was refunded.
        RefundIssued = "refund_issued",
        /// The held payment was voided (no state change).
        PaymentVoided = "payment_voided",
        /// An upfront payment settled on chain before the work (no state change).
        PaymentSettledUpfront = "payment_settled_upfront",
        /// The authorization deadline came close and the sweep acted.
        AuthorizationDeadlineReached = "authorization_deadline_reached",
        /// The paid contract waits in its worker's queue.
        Queued = "queued",
        /// The paid contract waits for its worker to become hireable.
        WaitingForWorker = "waiting_for_worker",
        /// An instance took over a stale contract.
        RecoveryTakeover = "recovery_takeover",
        /// A worker's result arrived after the contract had moved on.
        LateResult = "late_result",
        /// The gateway asked the worker to cancel the task.
        WorkerCancelRequested = "worker_cancel_requested",
        /// The other party answered a dispute.
        DisputeAnswered = "dispute_answered",
        /// The arbiter decided a dispute.
        DisputeDecided = "dispute_decided",
        /// A dispute's verification was replayed.
        DisputeReplayed = "dispute_replayed",
        /// A dispute was escalated to the arbiter.
        DisputeEscalated = "dispute_escalated",
        /// The worker reported progress.
        WorkerProgress = "worker_progress",
        /// An event of the worker's stream, relayed.
        WorkerStreamEvent = "worker_stream_event",
        /// A WattSwarm runtime event, relayed.
        WorkerRuntime = "worker_runtime",
        /// A Superwire worker event, relayed.
        WorkerEvent = "worker_event",
        /// A Superwire run began (its run id, which a later cancel names).
        WorkerRunStarted = "worker_run_started",
        /// The worker's stream was read again after a cut (from its last event id, or the start).
        WorkerStreamResumed = "worker_stream_resumed",
    }
}

impl EventKind {
    /// The kind of the lifecycle event `event`: its name in the contracts crate.
    #[must_use]
    pub const fn of(event: &LifecycleEvent) -> Self {
        match event {
            LifecycleEvent::PaymentVerified => Self::PaymentVerified,
            LifecycleEvent::AuthorizationSent => Self::AuthorizationSent,
            LifecycleEvent::PaymentAuthorized => Self::PaymentAuthorized,
            LifecycleEvent::AuthorizationRefused => Self::AuthorizationRefused,
            LifecycleEvent::OfferExpired => Self::OfferExpired,
            LifecycleEvent::AuthorizationExpired => Self::AuthorizationExpired,
            LifecycleEvent::Forwarded => Self::Forwarded,
            LifecycleEvent::WorkerPending => Self::WorkerPending,
            LifecycleEvent::DeliverableReceived => Self::DeliverableReceived,
            LifecycleEvent::WorkerFailed { .. } => Self::WorkerFailed,
            LifecycleEvent::SlaBreached => Self::SlaBreached,
            LifecycleEvent::SeekerCancelled => Self::SeekerCancelled,
            LifecycleEvent::VerificationStarted => Self::VerificationStarted,
            LifecycleEvent::VerificationPassed => Self::VerificationPassed,
            LifecycleEvent::VerificationFailed => Self::VerificationFailed,
            LifecycleEvent::VerificationInconclusive => Self::VerificationInconclusive,
            LifecycleEvent::AcceptanceWindowClosed => Self::AcceptanceWindowClosed,
            LifecycleEvent::DisputeOpened { .. } => Self::DisputeOpened,
            LifecycleEvent::DisputeResolved { .. } => Self::DisputeResolved,
            LifecycleEvent::VoidRecorded => Self::VoidRecorded,
            LifecycleEvent::SettlementSucceeded => Self::SettlementSucceeded,
            LifecycleEvent::SettlementFailed => Self::SettlementFailed,
            LifecycleEvent::SettlementOutcomeUnknown => Self::SettlementOutcomeUnknown,
            LifecycleEvent::SettlementRetried => Self::SettlementRetried,
            LifecycleEvent::PaymentReclaimed => Self::PaymentReclaimed,
            LifecycleEvent::RefundIssued => Self::RefundIssued,
        }
    }
}

/// Who caused a contract event (`contract_event.actor`, the `actor` of SSE events, webhook
/// messages and receipts' event logs). A dispute's opener, its decider and the other party's
/// answer are named the same way, since each is also the actor of the event it records.
///
/// Stored (and shown) as its [`Display`](fmt::Display): one word for the gateway's own roles,
/// `<role>:<id>` for an account or listing. A row holding any other text is corrupt; so is an id
/// of the wrong kind (`seeker:opr_…`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Actor {
    /// `gateway`: the gateway's own steps (background work, sweeps, verification).
    Gateway,
    /// `payer`: the payer's own call on chain (reclaiming a lapsed escrow).
    Payer,
    /// `admin`: the arbiter's decision on a dispute.
    Admin,
    /// `arbiter`: a refund the arbiter ordered.
    Arbiter,
    /// `replay`: a dispute decided by replaying the pinned policy.
    Replay,
    /// `system`: a dispute decided by the silent arbiter's deadline.
    System,
    /// `seeker:<skr_ id>`: the contract's seeker.
    Seeker(PrincipalId),
    /// `operator:<opr_ id>`: the operator of the contract's worker.
    Operator(PrincipalId),
    /// `worker:<wk_ id>`: the contract's worker listing.
    Worker(WorkerId),
}

impl Actor {
    /// The words that stand alone, with their values.
    const ROLES: [(&'static str, Self); 6] = [
        ("gateway", Self::Gateway),
        ("payer", Self::Payer),
        ("admin", Self::Admin),
        ("arbiter", Self::Arbiter),
        ("replay", Self::Replay),
        ("system", Self::System),
    ];

    /// The account `principal` acting as the party it is: a seeker or an operator (its id's
    /// prefix says which).
    #[must_use]
    pub fn party(principal: PrincipalId) -> Self {
        if principal.is_seeker() {
            Self::Seeker(principal)
        } else {
            Self::Operator(principal)
        }
    }

    /// The word of a role that stands alone (`None` for an account or a listing).
    fn word(&self) -> Option<&'static str> {
        Self::ROLES
            .iter()
            .find(|(_, role)| role == self)
            .map(|(word, _)| *word)
    }
}

impl fmt::Display for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Seeker(id) => write!(f, "seeker:{id}"),
            Self::Operator(id) => write!(f, "operator:{id}"),
            Self::Worker(id) => write!(f, "worker:{id}"),
            role => f.write_str(role.word().unwrap_or_default()),
        }
    }
}

impl FromStr for Actor {
    type Err = UnknownSpelling;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let parsed = match raw.split_once(':') {
            None => Self::ROLES
                .iter()
                .find(|(word, _)| *word == raw)
                .map(|(_, role)| role.clone()),
            Some(("seeker", id)) => id
                .parse::<PrincipalId>()
                .ok()
                .filter(PrincipalId::is_seeker)
                .map(Self::Seeker),
            Some(("operator", id)) => id
                .parse::<PrincipalId>()
                .ok()
                .filter(PrincipalId::is_operator)
                .map(Self::Operator),
            Some(("worker", id)) => id.parse().ok().map(Self::Worker),
            Some(_) => None,
        };
        parsed.ok_or_else(|| UnknownSpelling {
            vocabulary: "contract event actor",
            raw: raw.chars().take(64).collect(),
        })
    }
}

impl serde::Serialize for Actor {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_parses_back_to_its_value() {
        for state in PaymentState::ALL {
            assert_eq!(state.as_str().parse::<PaymentState>(), Ok(*state));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::json!(state.as_str())
            );
        }
        for state in AttemptState::ALL {
            assert_eq!(state.as_str().parse::<AttemptState>(), Ok(*state));
        }
        for state in DeliveryState::ALL {
            assert_eq!(state.as_str().parse::<DeliveryState>(), Ok(*state));
        }
        for kind in EventKind::ALL {
            assert_eq!(kind.as_str().parse::<EventKind>(), Ok(*kind));
        }
        for state in DisputeState::ALL {
            assert_eq!(state.as_str().parse::<DisputeState>(), Ok(*state));
        }
        for via in DecidedVia::ALL {
            assert_eq!(via.as_str().parse::<DecidedVia>(), Ok(*via));
        }
        for kind in PieceKind::ALL {
            assert_eq!(kind.as_str().parse::<PieceKind>(), Ok(*kind));
        }
    }

    #[test]
    fn another_spelling_is_refused_by_name() {
        let error = "Settled".parse::<PaymentState>().unwrap_err();
        assert_eq!(error.to_string(), "`Settled` is not a payment state");
        assert!("timedout".parse::<AttemptState>().is_err());
        assert!("".parse::<AttemptState>().is_err());
        let error = "Escalated".parse::<DisputeState>().unwrap_err();
        assert_eq!(error.to_string(), "`Escalated` is not a dispute state");
        assert!("admin".parse::<DecidedVia>().is_err());
        assert!("Evidence".parse::<PieceKind>().is_err());
    }

    fn every_kind_of_actor() -> Vec<Actor> {
        let mut actors: Vec<Actor> = Actor::ROLES.iter().map(|(_, role)| role.clone()).collect();
        actors.extend([
            Actor::Seeker(PrincipalId::generate_seeker()),
            Actor::Operator(PrincipalId::generate_operator()),
            Actor::Worker(WorkerId::generate()),
        ]);
        actors
    }

    #[test]
    fn an_actor_is_spelled_as_it_always_was_and_parses_back() {
        let seeker = PrincipalId::generate_seeker();
        let worker = WorkerId::generate();
        assert_eq!(Actor::Gateway.to_string(), "gateway");
        assert_eq!(Actor::Payer.to_string(), "payer");
        assert_eq!(Actor::Admin.to_string(), "admin");
        assert_eq!(Actor::Arbiter.to_string(), "arbiter");
        assert_eq!(Actor::Replay.to_string(), "replay");
        assert_eq!(Actor::System.to_string(), "system");
        assert_eq!(
            Actor::party(seeker.clone()).to_string(),
            format!("seeker:{seeker}")
        );
        assert_eq!(
            Actor::Worker(worker.clone()).to_string(),
            format!("worker:{worker}")
        );
        let operator = PrincipalId::generate_operator();
        assert_eq!(
            Actor::party(operator.clone()),
            Actor::Operator(operator.clone())
        );
        assert_eq!(
            Actor::Operator(operator.clone()).to_string(),
            format!("operator:{operator}")
        );
        for actor in every_kind_of_actor() {
            let spelled = actor.to_string();
            assert_eq!(spelled.parse::<Actor>(), Ok(actor.clone()));
            assert_eq!(
                serde_json::to_value(&actor).unwrap(),
                serde_json::json!(spelled)
            );
        }
    }

    #[test]
    fn another_actor_spelling_is_refused_by_name() {
        let seeker = PrincipalId::generate_seeker();
        let operator = PrincipalId::generate_operator();
        let worker = WorkerId::generate();
        for raw in [
            String::new(),
            "Gateway".to_owned(),
            "gateway ".to_owned(),
            "facilitator".to_owned(),
            "seeker".to_owned(),
            "seeker:".to_owned(),
            format!("seeker:{operator}"),
            format!("operator:{seeker}"),
            format!("worker:{seeker}"),
            format!("seeker:{}", seeker.as_str().to_lowercase()),
            format!("payer:{seeker}"),
            "admin:key_01J9ZQ4X1V8E6W0M3C5T7B2N4K".to_owned(),
            format!("Worker:{worker}"),
        ] {
            let error = raw.parse::<Actor>().unwrap_err();
            assert_eq!(
                error.to_string(),
                format!("`{raw}` is not a contract event actor"),
                "{raw:?}"
            );
        }
    }
}
