//! The closed vocabularies stored as text: a payment's, an attempt's and a webhook delivery's
//! state. Each is an enum
//! whose spelling in the database (and on the wire, where it is shown) is its
//! [`as_str`](PaymentState::as_str); a row is parsed once when it is read, and a row holding any
//! other spelling is corrupt ([`StoreError::Corrupt`](crate::StoreError::Corrupt)). The
//! spellings are those the gateway has always written, so no stored data changes.
//!
//! (The contract's own state is the contracts crate's `ContractState`.)

use std::{fmt, str::FromStr};

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
    }

    #[test]
    fn another_spelling_is_refused_by_name() {
        let error = "Settled".parse::<PaymentState>().unwrap_err();
        assert_eq!(error.to_string(), "`Settled` is not a payment state");
        assert!("timedout".parse::<AttemptState>().is_err());
        assert!("".parse::<AttemptState>().is_err());
    }
}
