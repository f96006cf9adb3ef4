//! x402 discovery metadata of an offer, so x402 catalogues can index hiregate's workers: the
//! `bazaar` extension of the x402 specs (`extensions/bazaar.md`) and the service fields of the
//! 402's `resource` (`serviceName`, `tags`), filled from the listing when the contract is signed.
//!
//! `extensions.bazaar.info` says how to call the resource: `POST` with the contract's pinned input
//! as JSON body (execute accepts exactly that body, or none). `extensions.bazaar.schema` is a
//! draft 2020-12 schema that `info` validates against, in which the body is described by the
//! listing's `input_schema` and the output by the task's output schema.
//!
//! The whole challenge also travels base64-encoded in the `PAYMENT-REQUIRED` header, and common
//! HTTP stacks refuse response headers beyond 16 KiB (Node's default among them). So the listing's
//! schemas and the input example are only embedded while the extension stays within
//! [`MAX_EXTENSION_BYTES`], and only when they stand alone (no `$ref`/`$id`/anchors, which would
//! resolve against the wrong document once embedded); otherwise the extension says only what it
//! can say for sure.

use serde_json::{Map, Value, json};

/// Largest serialized `bazaar` extension embedded in an offer.
pub const MAX_EXTENSION_BYTES: usize = 6 * 1024;

/// Longest `serviceName` and tag the bazaar rules accept.
const MAX_NAME_CHARS: usize = 32;

/// The extension key.
pub const BAZAAR: &str = "bazaar";

/// What a listing tells catalogues about a contract's resource.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListingDiscovery<'a> {
    /// The listing's display name.
    pub name: Option<&'a str>,
    /// The listing's description.
    pub description: Option<&'a str>,
    /// The listing's input schema.
    pub input_schema: Option<&'a Value>,
}

/// The `serviceName` (if the listing's name passes the bazaar rules) and the `tags` of a resource.
#[must_use]
pub fn service_fields(discovery: &ListingDiscovery<'_>, task_type: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    if let Some(name) = discovery.name.map(str::trim).filter(|n| catalogue_text(n)) {
        fields.insert("serviceName".to_owned(), json!(name));
    }
    let tags: Vec<&str> = ["hiregate", task_type]
        .into_iter()
        .filter(|tag| catalogue_text(tag))
        .collect();
    fields.insert("tags".to_owned(), json!(tags));
    fields
}

/// Non-empty printable ASCII of at most 32 characters (the bazaar rule for names and tags).
fn catalogue_text(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_NAME_CHARS
        && text.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// The `bazaar` extension of an offer whose task input is `input` and whose deliverable must
/// satisfy `output_schema`.
#[must_use]
pub fn extension(
    discovery: &ListingDiscovery<'_>,
    input: &Value,
    output_schema: Option<&Value>,
) -> Value {
    let body_schema = discovery
        .input_schema
        .and_then(standalone)
        .unwrap_or_else(|| json!({}));
    let output_schema = output_schema
        .and_then(standalone)
        .unwrap_or_else(|| json!({}));
    let full = declare(input, &body_schema, &output_schema);
    if full.to_string().len() <= MAX_EXTENSION_BYTES {
        return full;
    }
    // An empty object body is what a catalogue can always show; the schema then accepts any body.
    let empty = json!({});
    declare(&empty, &empty, &empty)
}

fn declare(body: &Value, body_schema: &Value, output_schema: &Value) -> Value {
    json!({
        "info": {
            "input": {"type": "http", "method": "POST", "bodyType": "json", "body": body},
            "output": {"type": "json"},
        },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "input": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "const": "http"},
                        "method": {"type": "string", "enum": ["POST"]},
                        "bodyType": {"type": "string", "enum": ["json"]},
                        "body": body_schema,
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    },
                    "required": ["type", "method", "bodyType", "body"],
                    "additionalProperties": false,
                },
                "output": {
                    "type": "object",
                    "properties": {"type": {"type": "string"}, "example": output_schema},
                    "required": ["type"],
                },
            },
            "required": ["input"],
        },
    })
}

/// `schema` without its top-level `$schema`, if nothing in it refers to its own document.
fn standalone(schema: &Value) -> Option<Value> {
    fn refers_to_its_document(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.iter().any(|(key, value)| {
                matches!(
                    key.as_str(),
                    "$ref" | "$id" | "$anchor" | "$dynamicRef" | "$dynamicAnchor" | "$recursiveRef"
                ) || refers_to_its_document(value)
            }),
            Value::Array(items) => items.iter().any(refers_to_its_document),
            _ => false,
        }
    }
    if refers_to_its_document(schema) {
        return None;
    }
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
    }
    Some(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(extension: &Value) -> bool {
        jsonschema::validator_for(&extension["schema"])
            .unwrap()
            .is_valid(&extension["info"])
    }

    #[test]
    fn info_validates_against_its_schema_with_the_listing_schemas_inside() {
        let input_schema = json!({"$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}});
        let discovery = ListingDiscovery {
            input_schema: Some(&input_schema),
            ..ListingDiscovery::default()
        };
        let output = json!({"type": "object", "required": ["summary"]});
        let declared = extension(&discovery, &json!({"text": "hello"}), Some(&output));
        assert!(valid(&declared));
        assert_eq!(declared["info"]["input"]["body"], json!({"text": "hello"}));
        assert_eq!(
            declared["schema"]["properties"]["input"]["properties"]["body"]["required"],
            json!(["text"])
        );
        assert_eq!(
            declared["schema"]["properties"]["output"]["properties"]["example"],
            output
        );
        // The schema really constrains the body.
        let mut wrong = declared.clone();
        wrong["info"]["input"]["body"] = json!({"text": 7});
        assert!(!valid(&wrong));
    }

    #[test]
    fn oversized_or_self_referring_schemas_are_left_out() {
        let referring = json!({"$defs": {"t": {"type": "string"}},
            "type": "object", "properties": {"text": {"$ref": "#/$defs/t"}}});
        let discovery = ListingDiscovery {
            input_schema: Some(&referring),
            ..ListingDiscovery::default()
        };
        let declared = extension(&discovery, &json!({"text": "x"}), None);
        assert!(valid(&declared));
        assert_eq!(
            declared["schema"]["properties"]["input"]["properties"]["body"],
            json!({})
        );

        let big = json!({"text": "x".repeat(MAX_EXTENSION_BYTES)});
        let declared = extension(&ListingDiscovery::default(), &big, None);
        assert!(valid(&declared));
        assert_eq!(declared["info"]["input"]["body"], json!({}));
        assert!(declared.to_string().len() <= MAX_EXTENSION_BYTES);
    }

    #[test]
    fn service_fields_follow_the_catalogue_rules() {
        let named = ListingDiscovery {
            name: Some("Summarizer"),
            ..ListingDiscovery::default()
        };
        let fields = service_fields(&named, "summarize");
        assert_eq!(fields["serviceName"], "Summarizer");
        assert_eq!(fields["tags"], json!(["hiregate", "summarize"]));
        for bad in [
            "",
            "Zusammenfassungsdienst für alle",
            &"n".repeat(33),
            "tab\tname",
        ] {
            let fields = service_fields(
                &ListingDiscovery {
                    name: Some(bad),
                    ..ListingDiscovery::default()
                },
                "summarize",
            );
            assert!(fields.get("serviceName").is_none(), "{bad:?}");
        }
    }
}
