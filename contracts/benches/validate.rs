//! Validation throughput of a ~100 KB deliverable against a realistic nested schema.
//!
//! - `schema/validate_100kb`: the compiled (cached) validator alone.
//! - `verify/schema_thresholds_100kb`: a whole [`Verifier::verify`] call: deliverable digest
//!   (RFC 8785 over 100 KB), schema validation, thresholds, result hash.
//! - `schema/admit`: admitting the schema at contract creation (limits, fan-out analysis,
//!   compilation).
//!
//! Run: `cargo bench -p hiregate-contracts --bench validate`.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hiregate_contracts::deliverable::{Deliverable, Output};
use hiregate_contracts::policy::{PolicyBinding, PolicyId};
use hiregate_contracts::schema::{OutputSchema, SchemaCache, SchemaLimits};
use hiregate_contracts::verify::{EvidenceSet, VerificationRequest, Verifier};
use serde_json::{Value, json};

/// A code-review report: files → issues, with refs, enums, patterns, bounds and
/// `additionalProperties: false` at every level.
fn report_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["summary", "files", "generated_at"],
        "additionalProperties": false,
        "properties": {
            "generated_at": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}T"},
            "summary": {
                "type": "object",
                "required": ["score", "confidence", "counts"],
                "additionalProperties": false,
                "properties": {
                    "score": {"type": "number", "minimum": 0, "maximum": 10},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "headline": {"type": "string", "maxLength": 280},
                    "counts": {
                        "type": "object",
                        "propertyNames": {"$ref": "#/$defs/severity"},
                        "additionalProperties": {"type": "integer", "minimum": 0}
                    }
                }
            },
            "files": {"type": "array", "maxItems": 500, "items": {"$ref": "#/$defs/file"}}
        },
        "$defs": {
            "severity": {"enum": ["info", "warning", "error", "critical"]},
            "file": {
                "type": "object",
                "required": ["path", "language", "issues", "metrics"],
                "additionalProperties": false,
                "properties": {
                    "path": {"type": "string", "pattern": "^[A-Za-z0-9_./-]+$", "maxLength": 256},
                    "language": {"enum": ["rust", "python", "typescript", "go", "java"]},
                    "metrics": {
                        "type": "object",
                        "required": ["loc", "complexity"],
                        "properties": {
                            "loc": {"type": "integer", "minimum": 0},
                            "complexity": {"type": "number", "minimum": 0},
                            "coverage": {"type": ["number", "null"], "minimum": 0, "maximum": 1}
                        }
                    },
                    "issues": {"type": "array", "items": {"$ref": "#/$defs/issue"}}
                }
            },
            "issue": {
                "type": "object",
                "required": ["line", "severity", "rule", "message"],
                "additionalProperties": false,
                "properties": {
                    "line": {"type": "integer", "minimum": 1},
                    "column": {"type": "integer", "minimum": 1},
                    "severity": {"$ref": "#/$defs/severity"},
                    "rule": {"type": "string", "pattern": "^[A-Z]{2,4}[0-9]{3,4}$"},
                    "message": {"type": "string", "minLength": 1, "maxLength": 500},
                    "suggestion": {"type": "string"},
                    "tags": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}
                },
                "if": {"properties": {"severity": {"const": "critical"}}},
                "then": {"required": ["suggestion"]}
            }
        }
    })
}

/// A valid report of about `target_bytes` of JSON.
fn report(target_bytes: usize) -> Value {
    let severities = ["info", "warning", "error", "critical"];
    let languages = ["rust", "python", "typescript", "go", "java"];
    let mut files = Vec::new();
    let mut size = 0;
    let mut n = 0usize;
    while size < target_bytes {
        let issues: Vec<Value> = (0..8)
            .map(|i| {
                let severity = severities[(n + i) % 4];
                let mut issue = json!({
                    "line": 10 + i * 7,
                    "column": 1 + i,
                    "severity": severity,
                    "rule": format!("RS{:03}", (n * 8 + i) % 1000),
                    "message": format!("Issue {i} in module {n}: value may be used after move in this branch"),
                    "tags": ["correctness", format!("module-{n}")]
                });
                if severity == "critical" {
                    issue["suggestion"] = json!("clone the value before the branch or restructure ownership");
                }
                issue
            })
            .collect();
        let file = json!({
            "path": format!("src/module_{n}/mod.rs"),
            "language": languages[n % 5],
            "metrics": {"loc": 120 + n, "complexity": 3.5 + (n % 7) as f64, "coverage": 0.8},
            "issues": issues
        });
        size += file.to_string().len();
        files.push(file);
        n += 1;
    }
    json!({
        "generated_at": "2025-01-30T12:00:00Z",
        "summary": {
            "score": 7.5,
            "confidence": 0.92,
            "headline": "Mostly sound; ownership issues in several modules",
            "counts": {"info": 10, "warning": 20, "error": 5, "critical": 1}
        },
        "files": files
    })
}

fn benches(c: &mut Criterion) {
    let schema = OutputSchema::parse(report_schema(), &SchemaLimits::default()).unwrap();
    let instance = report(100 * 1024);
    let bytes = serde_json::to_vec(&instance).unwrap().len() as u64;
    let cache = SchemaCache::default();
    assert!(
        cache.validate(&schema, &instance).unwrap().is_empty(),
        "fixture must be valid"
    );

    let mut group = c.benchmark_group("schema");
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("validate_100kb", |b| {
        b.iter(|| {
            cache
                .validate(&schema, std::hint::black_box(&instance))
                .unwrap()
        })
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("admit", |b| {
        b.iter(|| OutputSchema::parse(report_schema(), &SchemaLimits::default()).unwrap())
    });
    group.finish();

    let deliverable = Deliverable::completed(Output::Json {
        content: instance.clone(),
    })
    .unwrap();
    let policy = PolicyBinding::new(
        PolicyId::SchemaThresholdsV1,
        json!({"max_len": 200_000, "thresholds": [
            {"pointer": "/summary/score", "op": ">=", "value": 5},
            {"pointer": "/summary/confidence", "op": ">=", "value": 0.8},
            {"pointer": "/summary/headline", "op": "max_bytes", "value": 280}
        ]}),
    )
    .unwrap();
    let verifier = Verifier::default();
    let schemas = [schema];
    let evidence = EvidenceSet::new();
    let request = VerificationRequest {
        candidate_id: "bench",
        execution_id: "bench",
        deliverable: &deliverable,
        output_schemas: &schemas,
        policy: &policy,
        evidence: &evidence,
        votes: None,
    };
    let result = verifier.verify(&request).unwrap();
    assert!(
        result.passed,
        "fixture must pass: {:?}",
        result.reason_codes
    );
    let mut group = c.benchmark_group("verify");
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("schema_thresholds_100kb", |b| {
        b.iter(|| verifier.verify(std::hint::black_box(&request)).unwrap())
    });
    group.finish();
    eprintln!("deliverable size: {bytes} bytes");
}

criterion_group! {
    name = validate;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(6));
    targets = benches
}
criterion_main!(validate);
