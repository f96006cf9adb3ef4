//! Output schemas: admitted once at contract creation under [`SchemaLimits`], compiled by the
//! `jsonschema` crate (draft 2020-12 unless `$schema` names another known draft), and cached
//! by schema digest in a [`SchemaCache`].
//!
//! A schema comes from a seeker or an operator, so it is hostile until proven otherwise. Every
//! way we know for a schema to make verification slow is refused up front, with an error that
//! names the place in the schema:
//!
//! - size and nesting depth of the document;
//! - huge `enum`s (per keyword and in total);
//! - regular expressions: compiled with the `regex` engine (linear time, no backtracking) under
//!   a compiled-size limit, and patterns that need backtracking (look-around, back-references)
//!   are refused by name;
//! - combinator blow-up: `anyOf`/`oneOf`/`allOf`/`$ref` chains that make one instance node be
//!   evaluated exponentially many times (e.g. `{"anyOf":[{"items":{"$ref":"#"}},{"items":{"$ref":"#"}}]}`
//!   doubles per nesting level). [`SchemaLimits::max_fanout`] bounds how many schema nodes can
//!   apply to one instance value, following `$ref`s through the document, for the worst
//!   instance path.
//! - `$ref` cycles that never descend into the instance (infinite recursion).
//!
//! References are resolved offline: a `$ref` must point inside the schema document (JSON
//! Pointer or anchor, possibly through embedded `$id`s). Remote references are refused.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{CanonicalError, Digest, to_canonical_vec};

/// Deepest instance nesting verification accepts; the same as `serde_json`'s parser limit, so
/// anything parsed from text already satisfies it.
pub const MAX_INSTANCE_DEPTH: usize = 128;

/// Most instance-node states the fan-out analysis explores before giving up on a schema.
const MAX_ANALYSIS_STATES: usize = 50_000;
/// Compiled size limit per regular expression (bytes of the compiled program).
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Lazy-DFA cache limit per regular expression.
const REGEX_DFA_SIZE_LIMIT: usize = 1 << 20;

mod fanout;

use fanout::FanOutAnalysis;

/// Bounds applied when a schema is admitted. The defaults are the most permissive values the
/// gateway accepts; configuration may only tighten them (stored schemas are re-admitted with
/// the defaults when contract terms are loaded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Largest canonical JSON size of the schema document, in bytes.
    pub max_bytes: usize,
    /// Deepest JSON nesting of the schema document.
    pub max_depth: usize,
    /// Most values in one `enum`.
    pub max_enum_values: usize,
    /// Most `enum` values in the whole document.
    pub max_total_enum_values: usize,
    /// Longest `pattern` / `patternProperties` regular expression, in characters.
    pub max_pattern_len: usize,
    /// Most schema nodes that may apply to a single instance value (see module docs).
    pub max_fanout: u64,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        Self {
            max_bytes: 256 * 1024,
            max_depth: 64,
            max_enum_values: 1_000,
            max_total_enum_values: 10_000,
            max_pattern_len: 1_000,
            max_fanout: 10_000,
        }
    }
}

/// Why a schema was refused. Each variant names where in the schema the problem is.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A schema must be a JSON object or a boolean.
    #[error("a JSON Schema must be an object or a boolean")]
    NotASchema,
    /// The canonical document is larger than allowed.
    #[error("schema is {bytes} bytes; the limit is {limit}")]
    TooLarge {
        /// Canonical size of the schema.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The document nests deeper than allowed.
    #[error("schema nests deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
    /// One `enum` has too many values.
    #[error("enum at {pointer} has {values} values; the limit is {limit}")]
    EnumTooLarge {
        /// JSON Pointer of the enum keyword.
        pointer: String,
        /// Number of values.
        values: usize,
        /// The limit.
        limit: usize,
    },
    /// The enums of the document have too many values together.
    #[error("schema enums hold {values} values in total; the limit is {limit}")]
    TooManyEnumValues {
        /// Number of values.
        values: usize,
        /// The limit.
        limit: usize,
    },
    /// A regular expression is longer than allowed.
    #[error("pattern at {pointer} is {len} characters; the limit is {limit}")]
    PatternTooLong {
        /// Where the pattern is.
        pointer: String,
        /// Its length in characters.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// A regular expression needs a backtracking engine (look-around, back-references).
    #[error(
        "pattern at {pointer} uses {feature}, which needs backtracking; only linear-time patterns are accepted"
    )]
    BacktrackingPattern {
        /// Where the pattern is.
        pointer: String,
        /// The offending construct.
        feature: &'static str,
    },
    /// `$schema` names a meta-schema other than the known drafts.
    #[error("unsupported $schema {uri:?}; use draft 2020-12 (default), 2019-09, 7, 6 or 4")]
    UnknownDraft {
        /// The declared URI.
        uri: String,
    },
    /// A `$ref` does not resolve inside the document.
    #[error(
        "reference {reference:?} at {pointer} does not resolve inside the schema (remote references are not fetched)"
    )]
    UnresolvableRef {
        /// Where the reference is.
        pointer: String,
        /// The reference.
        reference: String,
    },
    /// References loop back to the same instance without descending into it.
    #[error(
        "schema at {pointer} refers back to itself without descending into the instance (infinite recursion)"
    )]
    RecursionWithoutProgress {
        /// A schema node on the loop.
        pointer: String,
    },
    /// Too many schema nodes can apply to one instance node.
    #[error(
        "schema combinators let up to {fanout} subschemas apply to one instance value; the limit is {limit} (nested anyOf/oneOf/allOf/$ref fan-out)"
    )]
    FanOutTooLarge {
        /// The computed bound (saturating).
        fanout: u64,
        /// The limit.
        limit: u64,
    },
    /// The schema's reference structure is too intricate to bound its evaluation cost.
    #[error(
        "schema references are too intricate to analyse (more than {MAX_ANALYSIS_STATES} distinct evaluation states)"
    )]
    TooComplex,
    /// The `jsonschema` crate refused the schema (meta-schema violation, bad regex, …).
    #[error("invalid JSON Schema: {message}")]
    Invalid {
        /// The validator's message.
        message: String,
    },
    /// The schema could not be canonicalised.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

/// The JSON Schema draft a schema is evaluated under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaDraft {
    /// Draft 4.
    Draft4,
    /// Draft 6.
    Draft6,
    /// Draft 7.
    Draft7,
    /// Draft 2019-09.
    Draft201909,
    /// Draft 2020-12 (the default when `$schema` is absent).
    Draft202012,
}

impl SchemaDraft {
    fn detect(schema: &Value) -> Result<Self, SchemaError> {
        let Some(uri) = schema.get("$schema") else {
            return Ok(Self::Draft202012);
        };
        let Some(uri) = uri.as_str() else {
            return Err(SchemaError::UnknownDraft {
                uri: uri.to_string(),
            });
        };
        let trimmed = uri.trim_end_matches('#');
        let without_scheme = trimmed
            .strip_prefix("https://")
            .or_else(|| trimmed.strip_prefix("http://"))
            .unwrap_or("");
        match without_scheme {
            "json-schema.org/draft/2020-12/schema" | "json-schema.org/schema" => {
                Ok(Self::Draft202012)
            }
            "json-schema.org/draft/2019-09/schema" => Ok(Self::Draft201909),
            "json-schema.org/draft-07/schema" => Ok(Self::Draft7),
            "json-schema.org/draft-06/schema" => Ok(Self::Draft6),
            "json-schema.org/draft-04/schema" => Ok(Self::Draft4),
            _ => Err(SchemaError::UnknownDraft {
                uri: uri.to_owned(),
            }),
        }
    }

    fn id_keyword(self) -> &'static str {
        if self == Self::Draft4 { "id" } else { "$id" }
    }

    fn has_anchor_keyword(self) -> bool {
        matches!(self, Self::Draft201909 | Self::Draft202012)
    }
}

/// An output JSON Schema admitted under [`SchemaLimits`]: valid, compilable, bounded.
///
/// Serialises as the schema document itself. Deserialising re-admits it with the default
/// limits, so a stored schema is as trustworthy as a fresh one.
#[derive(Clone)]
pub struct OutputSchema {
    document: Arc<Value>,
    digest: Digest,
    draft: SchemaDraft,
}

impl OutputSchema {
    /// Admits `document` as an output schema: checks every limit, then compiles it once.
    pub fn parse(document: Value, limits: &SchemaLimits) -> Result<Self, SchemaError> {
        if !(document.is_object() || document.is_boolean()) {
            return Err(SchemaError::NotASchema);
        }
        let draft = SchemaDraft::detect(&document)?;
        check_document_shape(&document, limits)?;
        let canonical = to_canonical_vec(&document)?;
        if canonical.len() > limits.max_bytes {
            return Err(SchemaError::TooLarge {
                bytes: canonical.len(),
                limit: limits.max_bytes,
            });
        }
        FanOutAnalysis::new(&document, draft)?.check(limits.max_fanout)?;
        compile(&document)?;
        Ok(Self {
            document: Arc::new(document),
            digest: Digest::of_bytes(&canonical),
            draft,
        })
    }

    /// The schema that accepts everything (`true`), used when neither party set one.
    #[must_use]
    pub fn accept_all() -> Self {
        let document = Value::Bool(true);
        Self {
            digest: Digest::of_bytes(b"true"),
            document: Arc::new(document),
            draft: SchemaDraft::Draft202012,
        }
    }

    /// The schema document.
    #[must_use]
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// `sha256` of the canonical schema: the cache key and the identity of the schema.
    #[must_use]
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The draft it is evaluated under.
    #[must_use]
    pub fn draft(&self) -> SchemaDraft {
        self.draft
    }
}

impl fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputSchema")
            .field("digest", &self.digest)
            .field("draft", &self.draft)
            .finish_non_exhaustive()
    }
}

impl PartialEq for OutputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.digest == other.digest
    }
}

impl Eq for OutputSchema {}

impl Serialize for OutputSchema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.document.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for OutputSchema {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let document = Value::deserialize(deserializer)?;
        Self::parse(document, &SchemaLimits::default()).map_err(serde::de::Error::custom)
    }
}

fn compile(document: &Value) -> Result<jsonschema::Validator, SchemaError> {
    jsonschema::options()
        .offline()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_DFA_SIZE_LIMIT),
        )
        .build(document)
        .map_err(|error| SchemaError::Invalid {
            message: truncate(&error.to_string(), 500),
        })
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Walks the whole document once: depth, enum sizes, regex patterns.
fn check_document_shape(document: &Value, limits: &SchemaLimits) -> Result<(), SchemaError> {
    // Explicit stack: the document may come from code rather than the depth-limited parser.
    let mut stack: Vec<(&Value, String, usize)> = vec![(document, String::new(), 1)];
    let mut total_enum_values = 0usize;
    while let Some((value, pointer, depth)) = stack.pop() {
        if depth > limits.max_depth {
            return Err(SchemaError::TooDeep {
                limit: limits.max_depth,
            });
        }
        match value {
            Value::Object(map) => {
                if let Some(Value::Array(values)) = map.get("enum") {
                    if values.len() > limits.max_enum_values {
                        return Err(SchemaError::EnumTooLarge {
                            pointer: format!("{pointer}/enum"),
                            values: values.len(),
                            limit: limits.max_enum_values,
                        });
                    }
                    total_enum_values += values.len();
                    if total_enum_values > limits.max_total_enum_values {
                        return Err(SchemaError::TooManyEnumValues {
                            values: total_enum_values,
                            limit: limits.max_total_enum_values,
                        });
                    }
                }
                if let Some(Value::String(pattern)) = map.get("pattern") {
                    check_pattern(pattern, &format!("{pointer}/pattern"), limits)?;
                }
                if let Some(Value::Object(patterns)) = map.get("patternProperties") {
                    for pattern in patterns.keys() {
                        let at = format!(
                            "{pointer}/patternProperties/{}",
                            escape_pointer_token(pattern)
                        );
                        check_pattern(pattern, &at, limits)?;
                    }
                }
                for (key, child) in map {
                    if child.is_object() || child.is_array() {
                        stack.push((
                            child,
                            format!("{pointer}/{}", escape_pointer_token(key)),
                            depth + 1,
                        ));
                    }
                }
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    if child.is_object() || child.is_array() {
                        stack.push((child, format!("{pointer}/{index}"), depth + 1));
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_pattern(pattern: &str, pointer: &str, limits: &SchemaLimits) -> Result<(), SchemaError> {
    let len = pattern.chars().count();
    if len > limits.max_pattern_len {
        return Err(SchemaError::PatternTooLong {
            pointer: pointer.to_owned(),
            len,
            limit: limits.max_pattern_len,
        });
    }
    // The linear-time engine would refuse these too, but with a message about syntax; saying
    // why is kinder to whoever wrote the schema.
    let bytes = pattern.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if i + 1 < bytes.len() => {
                let next = bytes[i + 1];
                if (next.is_ascii_digit() && next != b'0') || next == b'k' {
                    return Err(SchemaError::BacktrackingPattern {
                        pointer: pointer.to_owned(),
                        feature: "a back-reference",
                    });
                }
                i += 2;
                continue;
            }
            b'(' if bytes.get(i + 1) == Some(&b'?') => {
                let rest = &bytes[i + 2..];
                if rest.starts_with(b"=")
                    || rest.starts_with(b"!")
                    || rest.starts_with(b"<=")
                    || rest.starts_with(b"<!")
                {
                    return Err(SchemaError::BacktrackingPattern {
                        pointer: pointer.to_owned(),
                        feature: "look-around",
                    });
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// RFC 6901 token escaping.
pub(crate) fn escape_pointer_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

// ---------------------------------------------------------------------------------------------
// Cache and validation
// ---------------------------------------------------------------------------------------------

/// One place where a deliverable breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaViolation {
    /// Digest of the schema that was broken (a contract may carry two).
    pub schema: Digest,
    /// JSON Pointer into the deliverable.
    pub instance_path: String,
    /// JSON Pointer into the schema (keyword location).
    pub schema_path: String,
    /// Human-readable message (truncated).
    pub message: String,
}

/// Most violations reported per schema; enough to fix a deliverable, bounded for storage.
pub const MAX_REPORTED_VIOLATIONS: usize = 32;

/// Compiled validators keyed by schema digest, compiled once and shared.
///
/// Bounded: when full, the oldest entry is dropped (a recompile is only a cost, never a
/// correctness issue).
pub struct SchemaCache {
    capacity: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    validators: HashMap<Digest, Arc<jsonschema::Validator>>,
    order: VecDeque<Digest>,
}

impl fmt::Debug for SchemaCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

impl Default for SchemaCache {
    fn default() -> Self {
        Self::new(1024)
    }
}

impl SchemaCache {
    /// A cache holding at most `capacity` compiled validators (at least one).
    #[must_use]
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner::default()),
        }
    }

    /// Number of cached validators.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().validators.len()
    }

    /// True when nothing is cached.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A panic elsewhere while holding the lock cannot leave the map inconsistent (every
        // mutation is a single insert/remove), so a poisoned lock is safe to reuse.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The compiled validator for `schema`, compiling it on first use.
    pub fn validator(
        &self,
        schema: &OutputSchema,
    ) -> Result<Arc<jsonschema::Validator>, SchemaError> {
        if let Some(found) = self.lock().validators.get(&schema.digest()) {
            return Ok(Arc::clone(found));
        }
        // Compile outside the lock; two threads racing compile twice, which is harmless.
        let compiled = Arc::new(compile(schema.document())?);
        let mut inner = self.lock();
        if !inner.validators.contains_key(&schema.digest()) {
            while inner.validators.len() >= self.capacity {
                match inner.order.pop_front() {
                    Some(oldest) => {
                        inner.validators.remove(&oldest);
                    }
                    None => break,
                }
            }
            inner
                .validators
                .insert(schema.digest(), Arc::clone(&compiled));
            inner.order.push_back(schema.digest());
        }
        Ok(compiled)
    }

    /// Validates `instance` against `schema`; empty when valid.
    pub fn validate(
        &self,
        schema: &OutputSchema,
        instance: &Value,
    ) -> Result<Vec<SchemaViolation>, SchemaError> {
        let validator = self.validator(schema)?;
        if validator.is_valid(instance) {
            return Ok(Vec::new());
        }
        Ok(validator
            .iter_errors(instance)
            .take(MAX_REPORTED_VIOLATIONS)
            .map(|error| SchemaViolation {
                schema: schema.digest(),
                instance_path: error.instance_path().as_str().to_owned(),
                schema_path: error.schema_path().as_str().to_owned(),
                message: truncate(&error.to_string(), 300),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Instant;

    fn admit(schema: Value) -> Result<OutputSchema, SchemaError> {
        OutputSchema::parse(schema, &SchemaLimits::default())
    }

    #[test]
    fn a_realistic_schema_is_admitted_and_validates() {
        let schema = admit(json!({
            "type": "object",
            "required": ["score", "issues"],
            "properties": {
                "score": {"type": "number", "minimum": 0, "maximum": 10},
                "issues": {"type": "array", "items": {"$ref": "#/$defs/issue"}}
            },
            "$defs": {"issue": {
                "type": "object",
                "required": ["line", "severity"],
                "properties": {
                    "line": {"type": "integer", "minimum": 1},
                    "severity": {"enum": ["info", "warning", "error"]},
                    "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}
                }
            }}
        }))
        .unwrap();
        let cache = SchemaCache::default();
        let good =
            json!({"score": 8, "issues": [{"line": 42, "severity": "warning", "code": "AB123"}]});
        assert!(cache.validate(&schema, &good).unwrap().is_empty());
        let bad = json!({"score": 8, "issues": [{"line": 0, "severity": "fatal"}]});
        let violations = cache.validate(&schema, &bad).unwrap();
        let paths: Vec<&str> = violations
            .iter()
            .map(|v| v.instance_path.as_str())
            .collect();
        assert!(paths.contains(&"/issues/0/line"), "{paths:?}");
        assert!(paths.contains(&"/issues/0/severity"), "{paths:?}");
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn draft_2020_12_is_the_default_and_declared_drafts_are_honoured() {
        // prefixItems is a 2020-12 keyword; draft 7 ignores it (unknown keyword).
        let tuple = json!({"prefixItems": [{"type": "string"}]});
        let default_draft = admit(tuple.clone()).unwrap();
        assert_eq!(default_draft.draft(), SchemaDraft::Draft202012);
        let mut draft7_doc = tuple;
        draft7_doc["$schema"] = json!("http://json-schema.org/draft-07/schema#");
        let draft7 = admit(draft7_doc).unwrap();
        assert_eq!(draft7.draft(), SchemaDraft::Draft7);
        let cache = SchemaCache::default();
        let instance = json!([1]);
        assert!(
            !cache
                .validate(&default_draft, &instance)
                .unwrap()
                .is_empty()
        );
        assert!(cache.validate(&draft7, &instance).unwrap().is_empty());
    }

    #[test]
    fn unknown_meta_schemas_and_remote_refs_are_refused() {
        assert!(matches!(
            admit(json!({"$schema": "https://example.com/my-meta", "type": "object"})),
            Err(SchemaError::UnknownDraft { .. })
        ));
        assert!(matches!(
            admit(json!({"$ref": "https://example.com/remote.json"})),
            Err(SchemaError::UnresolvableRef { .. })
        ));
        assert!(matches!(
            admit(json!({"$ref": "#/$defs/missing"})),
            Err(SchemaError::UnresolvableRef { .. })
        ));
        assert!(matches!(admit(json!(42)), Err(SchemaError::NotASchema)));
        assert!(matches!(
            admit(json!({"type": "strung"})),
            Err(SchemaError::Invalid { .. })
        ));
    }

    #[test]
    fn references_through_ids_and_anchors_resolve() {
        let schema = json!({
            "$id": "https://example.com/root.json",
            "type": "object",
            "properties": {
                "a": {"$ref": "item.json"},
                "b": {"$ref": "#thing"},
                "c": {"$ref": "https://example.com/root.json#/$defs/plain"}
            },
            "$defs": {
                "item": {"$id": "item.json", "type": "integer"},
                "thing": {"$anchor": "thing", "type": "string"},
                "plain": {"type": "boolean"}
            }
        });
        let admitted = admit(schema).unwrap();
        let cache = SchemaCache::default();
        assert!(
            cache
                .validate(&admitted, &json!({"a": 1, "b": "x", "c": true}))
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            cache
                .validate(&admitted, &json!({"a": "1", "b": "x", "c": true}))
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn oversized_deep_and_enum_heavy_schemas_are_refused() {
        let limits = SchemaLimits::default();
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"properties": {"x": deep}});
        }
        assert!(matches!(admit(deep), Err(SchemaError::TooDeep { .. })));

        let huge_enum: Vec<Value> = (0..5_000).map(Value::from).collect();
        assert!(matches!(
            admit(json!({"enum": huge_enum})),
            Err(SchemaError::EnumTooLarge { values: 5_000, .. })
        ));

        let many_enums: serde_json::Map<String, Value> = (0..20)
            .map(|i| {
                let values: Vec<Value> = (0..900).map(Value::from).collect();
                (format!("p{i}"), json!({"enum": values}))
            })
            .collect();
        assert!(matches!(
            admit(json!({"properties": many_enums})),
            Err(SchemaError::TooManyEnumValues { .. })
        ));

        let big: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("property_{i}"), json!({"type": "string"})))
            .collect();
        assert!(matches!(
            OutputSchema::parse(json!({"properties": big}), &limits),
            Err(SchemaError::TooLarge { .. })
        ));
    }

    #[test]
    fn backtracking_patterns_are_refused_by_name() {
        for (pattern, feature) in [
            (r"^(?=.*\d)\w+$", "look-around"),
            (r"(?<!x)y", "look-around"),
            (r"^(a)\1$", "a back-reference"),
        ] {
            match admit(json!({"type": "string", "pattern": pattern})) {
                Err(SchemaError::BacktrackingPattern {
                    feature: got,
                    pointer,
                }) => {
                    assert_eq!(got, feature);
                    assert_eq!(pointer, "/pattern");
                }
                other => panic!("{pattern}: {other:?}"),
            }
        }
        match admit(json!({"patternProperties": {"^(?!x)": {}}})) {
            Err(SchemaError::BacktrackingPattern { pointer, .. }) => {
                assert_eq!(pointer, "/patternProperties/^(?!x)");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            admit(json!({"pattern": "a".repeat(2_000)})),
            Err(SchemaError::PatternTooLong { .. })
        ));
    }

    #[test]
    fn regexes_that_compile_huge_are_refused_at_admission() {
        let started = Instant::now();
        match admit(json!({"type": "string", "pattern": "((a{100}){100}){100}"})) {
            Err(SchemaError::Invalid { message }) => {
                assert!(message.contains("regex"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed().as_secs() < 5);
    }

    #[test]
    fn catastrophic_regex_runs_in_linear_time() {
        // (a+)+$ is the classic exponential case for backtracking engines; with the linear
        // engine it is admitted and validates a long near-miss immediately.
        let schema = admit(json!({"type": "string", "pattern": "^(a+)+$"})).unwrap();
        let cache = SchemaCache::default();
        let near_miss = format!("{}!", "a".repeat(50_000));
        let started = Instant::now();
        let violations = cache.validate(&schema, &json!(near_miss)).unwrap();
        assert_eq!(violations.len(), 1);
        // Generous bound: a backtracking engine would take longer than the universe.
        assert!(started.elapsed().as_secs() < 5);
    }

    #[test]
    fn combinator_blow_up_is_refused() {
        // Each level doubles the schema nodes that apply to the same instance node.
        let mut defs = serde_json::Map::new();
        for level in 0..20 {
            let next = format!("#/$defs/l{}", level + 1);
            defs.insert(
                format!("l{level}"),
                json!({"anyOf": [{"$ref": next}, {"$ref": next}]}),
            );
        }
        defs.insert("l20".to_owned(), json!({"type": "integer"}));
        let schema = json!({"$ref": "#/$defs/l0", "$defs": defs});
        assert!(matches!(
            admit(schema),
            Err(SchemaError::FanOutTooLarge { .. })
        ));

        // The recursive variant doubles per instance depth.
        let recursive = json!({"anyOf": [{"items": {"$ref": "#"}}, {"items": {"$ref": "#"}}]});
        assert!(matches!(
            admit(recursive),
            Err(SchemaError::FanOutTooLarge { .. })
        ));
    }

    #[test]
    fn linear_recursion_is_admitted() {
        let tree = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#"}}
            }
        });
        let schema = admit(tree).unwrap();
        let cache = SchemaCache::default();
        let instance = json!({"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]});
        let violations = cache.validate(&schema, &instance).unwrap();
        assert_eq!(violations[0].instance_path, "/children/0/children/0/name");
    }

    #[test]
    fn branching_recursive_schemas_are_admitted_when_each_value_sees_few_subschemas() {
        // A binary tree: each instance node is judged by one schema node per level, however
        // many nodes the tree has.
        let tree = json!({
            "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "left": {"$ref": "#"},
                "right": {"$ref": "#"}
            }
        });
        let schema = admit(tree).unwrap();
        let cache = SchemaCache::default();
        let instance = json!({"value": 1, "left": {"value": 2, "right": {"value": "3"}}});
        let violations = cache.validate(&schema, &instance).unwrap();
        assert_eq!(violations[0].instance_path, "/left/right/value");

        // Hundreds of recursive members: still linear, and analysed quickly.
        let members: serde_json::Map<String, Value> = (0..2_000)
            .map(|i| (format!("m{i}"), json!({"$ref": "#"})))
            .collect();
        let started = Instant::now();
        admit(json!({"type": "object", "properties": members})).unwrap();
        assert!(started.elapsed().as_secs() < 10);

        // Doubling along one member path is refused.
        let doubling = json!({"properties": {"next": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}]}}});
        assert!(matches!(
            admit(doubling),
            Err(SchemaError::FanOutTooLarge { .. })
        ));
    }

    #[test]
    fn recursion_without_progress_is_refused() {
        assert!(matches!(
            admit(json!({"anyOf": [{"type": "string"}, {"$ref": "#"}]})),
            Err(SchemaError::RecursionWithoutProgress { .. })
        ));
        assert!(matches!(
            admit(
                json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})
            ),
            Err(SchemaError::RecursionWithoutProgress { .. })
        ));
    }

    #[test]
    fn cache_compiles_once_and_stays_bounded() {
        let cache = SchemaCache::new(2);
        let schemas: Vec<OutputSchema> = (0..3)
            .map(|i| admit(json!({"type": "integer", "minimum": i})).unwrap())
            .collect();
        let first = cache.validator(&schemas[0]).unwrap();
        let again = cache.validator(&schemas[0]).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        cache.validator(&schemas[1]).unwrap();
        cache.validator(&schemas[2]).unwrap();
        assert_eq!(cache.len(), 2);
        let recompiled = cache.validator(&schemas[0]).unwrap();
        assert!(!Arc::ptr_eq(&first, &recompiled));
    }

    #[test]
    fn deserialising_re_admits_the_schema() {
        assert!(serde_json::from_str::<OutputSchema>(r#"{"type":"object"}"#).is_ok());
        assert!(
            serde_json::from_str::<OutputSchema>(r#"{"$ref":"https://evil.example/x"}"#).is_err()
        );
        let schema = admit(json!({"type": "object", "b": 1, "a": 2})).unwrap();
        let reordered = admit(json!({"a": 2, "type": "object", "b": 1})).unwrap();
        assert_eq!(schema.digest(), reordered.digest());
    }
}
