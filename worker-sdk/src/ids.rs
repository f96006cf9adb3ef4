//! Identifiers that travel in hire-protocol headers and paths, valid by construction.
//! Contract and worker ids are the gateway's own (`ctr_<ULID>`, `wk_<ULID>`, from
//! `hiregate-contracts`).

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

pub use hiregate_contracts::id::{ContractId, WorkerId};
use serde::{Deserialize, Serialize};

/// Longest identifier accepted from a header or path; generous for ULID/UUID based ids
/// and short enough that a hostile caller cannot make us store megabytes per key.
const MAX_ID_LEN: usize = 128;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The identifier was empty.
    #[error("identifier is empty")]
    Empty,
    /// The identifier was longer than 128 bytes.
    #[error("identifier is longer than {MAX_ID_LEN} bytes")]
    TooLong,
    /// The identifier contained a character outside `[A-Za-z0-9_.:-]`.
    #[error("identifier contains the character {0:?}; allowed are letters, digits and _ . : -")]
    InvalidCharacter(char),
}

fn check_identifier(raw: &str) -> Result<(), IdError> {
    if raw.is_empty() {
        return Err(IdError::Empty);
    }
    if raw.len() > MAX_ID_LEN {
        return Err(IdError::TooLong);
    }
    // A closed character set keeps ids safe to echo into URLs, headers and logs.
    match raw
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        Some(bad) => Err(IdError::InvalidCharacter(bad)),
        None => Ok(()),
    }
}

/// A task type this worker performs (e.g. `summarize`), as listed in `/capabilities`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskType(String);

impl TaskType {
    /// Parses a task type.
    ///
    /// # Errors
    /// [`IdError`] when the id is empty, longer than 128 bytes or has characters outside
    /// `[A-Za-z0-9_.:-]`.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        check_identifier(raw)?;
        Ok(Self(raw.to_owned()))
    }

    /// The task type as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TaskType {
    type Err = IdError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::parse(raw)
    }
}

impl TryFrom<String> for TaskType {
    type Error = IdError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        check_identifier(&raw)?;
        Ok(Self(raw))
    }
}

impl From<TaskType> for String {
    fn from(task_type: TaskType) -> Self {
        task_type.0
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Identifier of one handler run (one attempt of one contract) on this worker; the last
/// segment of its `poll_url`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TaskId(String);

impl TaskId {
    /// A fresh, time-ordered task id (`task_<ulid>`).
    #[must_use]
    pub fn generate() -> Self {
        Self(format!(
            "task_{}",
            ulid::Ulid::new().to_string().to_ascii_lowercase()
        ))
    }

    /// Parses a task id received from elsewhere (a poll URL, a report).
    ///
    /// # Errors
    /// [`IdError`] when the id is empty, longer than 128 bytes or has characters outside
    /// `[A-Za-z0-9_.:-]`.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        check_identifier(raw)?;
        Ok(Self(raw.to_owned()))
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for TaskId {
    type Err = IdError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        Self::parse(raw)
    }
}

impl TryFrom<String> for TaskId {
    type Error = IdError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        check_identifier(&raw)?;
        Ok(Self(raw))
    }
}

impl From<TaskId> for String {
    fn from(id: TaskId) -> Self {
        id.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The gateway's attempt number for a contract (`X-Attempt`), starting at 1. A new number
/// means the gateway is retrying after a failure; the same number is a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Attempt(NonZeroU32);

impl Attempt {
    /// The first attempt, assumed when the gateway sends no `X-Attempt`.
    pub const FIRST: Self = Self(NonZeroU32::MIN);

    /// The attempt with this number, if it is at least 1.
    #[must_use]
    pub fn new(number: u32) -> Option<Self> {
        NonZeroU32::new(number).map(Self)
    }

    /// The attempt number (1-based).
    #[must_use]
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

/// Why an `X-Attempt` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("attempt must be a whole number from 1 to {max}", max = u32::MAX)]
pub struct AttemptError;

impl FromStr for Attempt {
    type Err = AttemptError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        raw.trim()
            .parse::<u32>()
            .ok()
            .and_then(Self::new)
            .ok_or(AttemptError)
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_types_accept_identifiers_and_refuse_junk() {
        assert_eq!(TaskType::parse("summarize").unwrap().as_str(), "summarize");
        assert_eq!(TaskType::parse(""), Err(IdError::Empty));
        assert_eq!(TaskType::parse(&"a".repeat(129)), Err(IdError::TooLong));
        assert_eq!(
            TaskType::parse("a/../x"),
            Err(IdError::InvalidCharacter('/'))
        );
        assert_eq!(TaskType::parse("a b"), Err(IdError::InvalidCharacter(' ')));
    }

    #[test]
    fn generated_task_ids_are_unique_and_parse_back() {
        let a = TaskId::generate();
        let b = TaskId::generate();
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("task_"));
        assert_eq!(TaskId::parse(a.as_str()).unwrap(), a);
    }

    #[test]
    fn attempts_start_at_one() {
        assert_eq!("1".parse::<Attempt>().unwrap(), Attempt::FIRST);
        assert_eq!(" 3 ".parse::<Attempt>().unwrap().get(), 3);
        assert!("0".parse::<Attempt>().is_err());
        assert!("-1".parse::<Attempt>().is_err());
        assert!("two".parse::<Attempt>().is_err());
    }
}
