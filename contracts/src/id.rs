//! Prefixed, time-sortable identifiers: `<prefix>_<ULID>`, e.g. `ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K`.
//!
//! The prefix makes an id self-describing in logs and URLs (a worker id pasted where a contract
//! id belongs is refused at parse time); the ULID makes ids sort by creation time, which keeps
//! database indexes append-mostly.

use std::fmt;
use std::str::FromStr;

use ulid::Ulid;

/// Why an identifier string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdParseError {
    /// The string does not start with the expected `<prefix>_`.
    #[error("identifier must start with \"{expected}_\"")]
    WrongPrefix {
        /// The prefix this id type requires.
        expected: &'static str,
    },
    /// The part after the prefix is not a 26-character Crockford base32 ULID.
    #[error("identifier body is not a valid ULID")]
    InvalidUlid,
}

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The prefix (without the underscore) of this id type.
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id from the system clock and the thread RNG.
            #[must_use]
            pub fn generate() -> Self {
                Self::from_ulid(Ulid::new())
            }

            /// The id for a given ULID (deterministic; for tests and replays).
            #[must_use]
            pub fn from_ulid(ulid: Ulid) -> Self {
                Self(format!("{}_{}", $prefix, ulid))
            }

            /// The ULID inside the id.
            #[must_use]
            pub fn ulid(&self) -> Ulid {
                // The body was checked at construction, so this parse cannot fail; fall back to
                // nil rather than panic to honour the no-panic rule.
                Ulid::from_string(&self.0[$prefix.len() + 1..]).unwrap_or_default()
            }

            /// The id as a string slice.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;

            fn from_str(raw: &str) -> Result<Self, Self::Err> {
                let body = raw
                    .strip_prefix($prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .ok_or(IdParseError::WrongPrefix { expected: $prefix })?;
                if body.len() != ulid::ULID_LEN {
                    return Err(IdParseError::InvalidUlid);
                }
                let ulid = Ulid::from_string(body).map_err(|_| IdParseError::InvalidUlid)?;
                // Re-render so lower-case input maps to one canonical spelling (ids are hashed
                // inside contract terms).
                Ok(Self::from_ulid(ulid))
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdParseError;
            fn try_from(raw: String) -> Result<Self, Self::Error> {
                raw.parse()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> Self {
                id.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

prefixed_id!(
    /// A contract between a seeker and a worker; also the idempotency key of its execution.
    ContractId,
    "ctr"
);
prefixed_id!(
    /// A worker listing (one agent endpoint registered by an operator).
    WorkerId,
    "wk"
);
prefixed_id!(
    /// A seeker account (hires workers and pays).
    SeekerId,
    "skr"
);
prefixed_id!(
    /// A worker operator account (registers workers).
    OperatorId,
    "op"
);
prefixed_id!(
    /// A dispute opened on a contract.
    DisputeId,
    "dsp"
);
prefixed_id!(
    /// One execution attempt of a contract (a retry is a new attempt).
    AttemptId,
    "att"
);
prefixed_id!(
    /// A signed receipt issued for a terminal contract.
    ReceiptId,
    "rct"
);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn generated_ids_carry_their_prefix_and_parse_back() {
        let id = ContractId::generate();
        assert!(id.as_str().starts_with("ctr_"));
        assert_eq!(id.as_str().len(), 4 + 26);
        assert_eq!(id.as_str().parse::<ContractId>().unwrap(), id);
        let worker = WorkerId::generate();
        assert!(worker.as_str().starts_with("wk_"));
    }

    #[test]
    fn wrong_prefix_and_bad_bodies_are_refused() {
        let worker = WorkerId::generate();
        assert_eq!(
            worker.as_str().parse::<ContractId>(),
            Err(IdParseError::WrongPrefix { expected: "ctr" })
        );
        assert_eq!(
            "ctr_xyz789".parse::<ContractId>(),
            Err(IdParseError::InvalidUlid)
        );
        assert_eq!(
            "ctr01J9ZQ4X1V8E6W0M3C5T7B2N4K".parse::<ContractId>(),
            Err(IdParseError::WrongPrefix { expected: "ctr" })
        );
        assert!(
            "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4KX"
                .parse::<ContractId>()
                .is_err()
        );
        assert!(serde_json::from_str::<ContractId>("\"ctr_nope\"").is_err());
    }

    #[test]
    fn ids_sort_by_creation_time() {
        let earlier = ContractId::from_ulid(Ulid::from_parts(1_000, 5));
        let later = ContractId::from_ulid(Ulid::from_parts(2_000, 1));
        assert!(earlier < later);
    }

    #[test]
    fn lower_case_input_normalises_to_one_spelling() {
        let id = ContractId::from_ulid(Ulid::from_parts(1_700_000_000_000, 42));
        let lower = id.as_str().to_lowercase();
        assert_eq!(lower.parse::<ContractId>().unwrap(), id);
    }

    proptest! {
        #[test]
        fn any_ulid_round_trips_through_json(ms in 0u64..(1u64 << 48), random: u128) {
            let id = DisputeId::from_ulid(Ulid::from_parts(ms, random));
            let json = serde_json::to_string(&id).unwrap();
            let back: DisputeId = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back.ulid(), id.ulid());
            prop_assert_eq!(back, id);
        }
    }
}
