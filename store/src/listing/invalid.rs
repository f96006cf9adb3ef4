//! The one error every parse of a listing's values answers with: [`InvalidField`], the JSON
//! field at fault and why. Both the listing's model ([`super::model`]) and its shown metadata
//! ([`super::metadata`]) refuse with it.

/// A value in a listing is malformed. `field` is the JSON field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidField {
    /// JSON path of the field, e.g. `tasks.summarize.price`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl InvalidField {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
