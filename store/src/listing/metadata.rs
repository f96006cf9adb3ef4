//! What a listing tells seekers about itself: a display name, a description, a JSON Schema for
//! task inputs and sample inputs. All optional, so listings registered before these existed
//! keep working.
//!
//! The input schema is admitted like an output schema (the `contracts` crate's limits and
//! compile check) when an operator sends it, so the same rules bound what an operator can make
//! the gateway evaluate. Read back from the store it is taken as stored (listings are read on
//! every execute; re-admitting there would waste CPU) and admitted again, once per distinct
//! schema, only when something is validated against it. Examples are checked against it at
//! registration and update; inputs at proposal.

use std::{fmt, sync::LazyLock};

use hiregate_contracts::schema::{
    OutputSchema, SchemaCache, SchemaError, SchemaLimits, SchemaViolation,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::invalid::InvalidField;

/// Longest listing name, in characters.
pub const MAX_NAME_CHARS: usize = 100;
/// Longest listing description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4_000;
/// Most sample inputs per listing.
pub const MAX_EXAMPLES: usize = 16;

/// Distinct input schemas kept admitted and compiled, shared by registration and proposals: a
/// listing's schema is admitted and compiled once, not on every contract proposed to it.
const CACHED_SCHEMAS: usize = 512;

/// Admitted schemas by their JSON text.
static ADMITTED: LazyLock<quick_cache::sync::Cache<String, OutputSchema>> =
    LazyLock::new(|| quick_cache::sync::Cache::new(CACHED_SCHEMAS));
/// Compiled validators by schema digest.
static VALIDATORS: LazyLock<SchemaCache> = LazyLock::new(|| SchemaCache::new(CACHED_SCHEMAS));

/// A JSON Schema task inputs must satisfy.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "Value", try_from = "Value")]
pub struct InputSchema(Value);

impl InputSchema {
    /// Admit `document` under the `contracts` crate's schema limits.
    pub fn parse(document: Value) -> Result<Self, SchemaError> {
        admit(&document)?;
        Ok(Self(document))
    }

    /// Rebuild from the store, which only holds schemas that passed [`Self::parse`].
    pub(crate) fn from_stored(document: Value) -> Self {
        Self(document)
    }

    /// The schema document.
    pub fn as_json(&self) -> &Value {
        &self.0
    }

    /// Where `input` breaks this schema; empty when it satisfies it.
    pub fn violations(&self, input: &Value) -> Result<Vec<SchemaViolation>, SchemaError> {
        VALIDATORS.validate(&admit(&self.0)?, input)
    }
}

fn admit(document: &Value) -> Result<OutputSchema, SchemaError> {
    let key = document.to_string();
    ADMITTED.get_or_insert_with(&key, || {
        OutputSchema::parse(document.clone(), &SchemaLimits::default())
    })
}

impl fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InputSchema").field(&self.0).finish()
    }
}

impl TryFrom<Value> for InputSchema {
    type Error = String;

    fn try_from(document: Value) -> Result<Self, Self::Error> {
        Self::parse(document)
            .map_err(|e| format!("input_schema is not an admissible JSON Schema: {e}"))
    }
}

impl From<InputSchema> for Value {
    fn from(schema: InputSchema) -> Self {
        schema.0
    }
}

/// A listing's self-description.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ListingMetadata {
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What the worker does, for seekers choosing one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema every task input must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub input_schema: Option<InputSchema>,
    /// Sample inputs, each valid against `input_schema`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub examples: Vec<Value>,
}

impl ListingMetadata {
    /// Checks lengths and that every example satisfies the input schema.
    pub fn check(&self) -> Result<(), InvalidField> {
        check_text("name", self.name.as_deref(), MAX_NAME_CHARS)?;
        check_text(
            "description",
            self.description.as_deref(),
            MAX_DESCRIPTION_CHARS,
        )?;
        if self.examples.len() > MAX_EXAMPLES {
            return Err(InvalidField::new(
                "examples",
                format!("at most {MAX_EXAMPLES} examples"),
            ));
        }
        for (index, example) in self.examples.iter().enumerate() {
            let violations = self.input_violations(example)?;
            if let Some(first) = violations.first() {
                return Err(InvalidField::new(
                    format!("examples/{index}"),
                    format!(
                        "does not satisfy input_schema at `{}`: {}",
                        first.instance_path, first.message
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Where `input` breaks the input schema; empty when it has none or the input satisfies it.
    pub fn input_violations(&self, input: &Value) -> Result<Vec<SchemaViolation>, InvalidField> {
        let Some(schema) = &self.input_schema else {
            return Ok(Vec::new());
        };
        schema
            .violations(input)
            .map_err(|e| InvalidField::new("input_schema", format!("cannot be evaluated: {e}")))
    }
}

fn check_text(field: &str, text: Option<&str>, max_chars: usize) -> Result<(), InvalidField> {
    let Some(text) = text else { return Ok(()) };
    if text.trim().is_empty() {
        return Err(InvalidField::new(field, "must not be blank"));
    }
    if text.chars().count() > max_chars {
        return Err(InvalidField::new(
            field,
            format!("must be at most {max_chars} characters"),
        ));
    }
    // No text column holds U+0000 on every backend (see the `store` module docs).
    if text.contains('\0') {
        return Err(InvalidField::new(field, "must not contain U+0000"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with_schema(examples: &[Value]) -> ListingMetadata {
        serde_json::from_value(json!({
            "input_schema": {
                "type": "object",
                "required": ["text"],
                "properties": {"text": {"type": "string"}}
            },
            "examples": examples,
        }))
        .unwrap()
    }

    #[test]
    fn examples_must_satisfy_the_input_schema() {
        assert!(with_schema(&[json!({"text": "hi"})]).check().is_ok());
        let error = with_schema(&[json!({"text": "hi"}), json!({"text": 3})])
            .check()
            .unwrap_err();
        assert_eq!(error.field, "examples/1");
        assert!(error.reason.contains("/text"), "{}", error.reason);
    }

    #[test]
    fn inputs_report_failing_paths() {
        let metadata = with_schema(&[]);
        let violations = metadata.input_violations(&json!({"text": 1})).unwrap();
        assert_eq!(violations[0].instance_path, "/text");
        assert!(
            ListingMetadata::default()
                .input_violations(&json!(1))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn texts_are_bounded() {
        let long = ListingMetadata {
            name: Some("x".repeat(MAX_NAME_CHARS + 1)),
            ..ListingMetadata::default()
        };
        assert_eq!(long.check().unwrap_err().field, "name");
        let nul = ListingMetadata {
            description: Some("a\0b".into()),
            ..ListingMetadata::default()
        };
        assert_eq!(nul.check().unwrap_err().field, "description");
        assert!(
            serde_json::from_value::<ListingMetadata>(json!({"input_schema": {"type": 12}}))
                .is_err()
        );
    }
}
