//! Verification policies pinned in a contract: [`PolicyId`], typed parameters and the
//! [`PolicyBinding`] `{policy_id, policy_version, policy_hash, policy_params}` with
//! `policy_hash = sha256(policy_id ‖ canonical(policy_params))`.
//!
//! Parameters are parsed into typed form when the binding is made, so a contract can never
//! pin a policy that would fail to evaluate later.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::canonical::{CanonicalError, Digest, to_canonical_vec};

/// The only policy version hiregate implements.
pub const POLICY_VERSION: &str = "1";
/// Most thresholds or reference values in one binding.
pub const MAX_POLICY_RULES: usize = 64;
/// Most verifiers a quorum may require.
pub const MAX_QUORUM_VERIFIERS: u32 = 32;

/// A built-in verification policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PolicyId {
    /// `vp.schema_only.v1`: the deliverable validates against the output schema.
    SchemaOnlyV1,
    /// `vp.schema_thresholds.v1`: schema, plus thresholds by JSON Pointer and byte limits.
    SchemaThresholdsV1,
    /// `vp.crosscheck.v1`: schema, plus agreement with reference values and/or a verifier
    /// quorum.
    CrosscheckV1,
}

impl PolicyId {
    /// Every built-in policy.
    pub const ALL: [Self; 3] = [
        Self::SchemaOnlyV1,
        Self::SchemaThresholdsV1,
        Self::CrosscheckV1,
    ];

    /// The wire identifier.
    #[must_use]
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::SchemaOnlyV1 => "vp.schema_only.v1",
            Self::SchemaThresholdsV1 => "vp.schema_thresholds.v1",
            Self::CrosscheckV1 => "vp.crosscheck.v1",
        }
    }
}

/// Why a binding or its parameters were refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Not one of the built-in policy ids.
    #[error(
        "unknown policy {0:?}; built-ins are vp.schema_only.v1, vp.schema_thresholds.v1, vp.crosscheck.v1"
    )]
    UnknownPolicy(String),
    /// The version is not `"1"`.
    #[error("policy {policy} has version \"1\", not {version:?}")]
    UnsupportedVersion {
        /// The policy id.
        policy: &'static str,
        /// The version asked for.
        version: String,
    },
    /// The given `policy_hash` is not the hash of the given id and parameters.
    #[error("policy_hash {given} does not match the policy id and params (expected {expected})")]
    HashMismatch {
        /// The hash that came with the binding.
        given: Digest,
        /// The hash of the id and parameters.
        expected: Digest,
    },
    /// The parameters do not fit the policy.
    #[error("invalid params for {policy}: {message}")]
    InvalidParams {
        /// The policy id.
        policy: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The parameters could not be canonicalised.
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

impl FromStr for PolicyId {
    type Err = PolicyError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "vp.schema_only.v1" => Ok(Self::SchemaOnlyV1),
            "vp.schema_thresholds.v1" => Ok(Self::SchemaThresholdsV1),
            "vp.crosscheck.v1" => Ok(Self::CrosscheckV1),
            other => Err(PolicyError::UnknownPolicy(other.to_owned())),
        }
    }
}

impl TryFrom<String> for PolicyId {
    type Error = PolicyError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<PolicyId> for String {
    fn from(id: PolicyId) -> Self {
        id.as_str().to_owned()
    }
}

impl fmt::Display for PolicyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `sha256(policy_id ‖ canonical(policy_params))`: the UTF-8 id immediately followed by the
/// RFC 8785 bytes of the parameters (always an object, so the boundary is unambiguous).
pub fn policy_hash(policy_id: PolicyId, params: &Value) -> Result<Digest, CanonicalError> {
    let mut hasher = Sha256::new();
    hasher.update(policy_id.as_str().as_bytes());
    hasher.update(to_canonical_vec(params)?);
    Ok(Digest::from_raw(hasher.finalize().into()))
}

/// An RFC 6901 JSON Pointer (`""` is the whole document, `/a/0/b~1c` a path).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JsonPointer(String);

/// Why a JSON Pointer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPointerError {
    /// A non-empty pointer must start with `/`.
    #[error("JSON Pointer must be empty or start with '/'")]
    MissingLeadingSlash,
    /// `~` must be followed by `0` or `1`.
    #[error("JSON Pointer has '~' not followed by '0' or '1'")]
    BadEscape,
}

impl JsonPointer {
    /// The pointer string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value this pointer names inside `document`, if any.
    #[must_use]
    pub fn resolve<'v>(&self, document: &'v Value) -> Option<&'v Value> {
        document.pointer(&self.0)
    }
}

impl FromStr for JsonPointer {
    type Err = JsonPointerError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        if !raw.is_empty() && !raw.starts_with('/') {
            return Err(JsonPointerError::MissingLeadingSlash);
        }
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                return Err(JsonPointerError::BadEscape);
            }
        }
        Ok(Self(raw.to_owned()))
    }
}

impl TryFrom<String> for JsonPointer {
    type Error = JsonPointerError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        raw.parse()
    }
}

impl From<JsonPointer> for String {
    fn from(pointer: JsonPointer) -> Self {
        pointer.0
    }
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A threshold operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ThresholdOp {
    /// Number at pointer `>=` value.
    #[serde(rename = ">=")]
    Gte,
    /// Number at pointer `>` value.
    #[serde(rename = ">")]
    Gt,
    /// Number at pointer `<=` value.
    #[serde(rename = "<=")]
    Lte,
    /// Number at pointer `<` value.
    #[serde(rename = "<")]
    Lt,
    /// Value at pointer equals value (canonical JSON equality, so `1 == 1.0`).
    #[serde(rename = "==")]
    Eq,
    /// Value at pointer differs from value.
    #[serde(rename = "!=")]
    Ne,
    /// Size of the value at pointer is at most `value` bytes (UTF-8 bytes for a string,
    /// canonical JSON bytes otherwise).
    #[serde(rename = "max_bytes")]
    MaxBytes,
    /// Size of the value at pointer is at least `value` bytes.
    #[serde(rename = "min_bytes")]
    MinBytes,
}

impl ThresholdOp {
    const fn is_numeric(self) -> bool {
        matches!(self, Self::Gte | Self::Gt | Self::Lte | Self::Lt)
    }
    const fn is_size(self) -> bool {
        matches!(self, Self::MaxBytes | Self::MinBytes)
    }
}

/// One threshold: `{"pointer": "/confidence", "op": ">=", "value": 0.8}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// Where in the output.
    pub pointer: JsonPointer,
    /// The comparison.
    pub op: ThresholdOp,
    /// The operand: a number for `>= > <= <`, a byte count for `max_bytes`/`min_bytes`, any
    /// JSON for `==`/`!=`.
    pub value: Value,
}

/// Partial acceptance, a parameter every built-in policy takes as `accept_partial`: a worker
/// that ends with HIRE status `partial` is judged like a completed one (schemas, thresholds,
/// references, evidence digests: everything it delivered must pass) when its output holds at
/// least `min_items` items (the items of a `multiple` output, which is also the form of a
/// `deliverables[]` list; any other output is one item). Fewer items, or no `accept_partial`
/// in the pinned parameters, and a final `partial` fails (reason 350). It is part of the
/// parameters, hence of `policy_hash` and of the signed terms. An accepted partial delivery
/// settles the contract's full price: the seeker agreed to that minimum when it signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialAcceptance {
    /// Fewest output items a final `partial` delivery must hold, `1..=64`.
    pub min_items: u32,
}

impl PartialAcceptance {
    fn check(self, policy: PolicyId) -> Result<Self, PolicyError> {
        let most = u32::try_from(crate::deliverable::MAX_ITEMS).unwrap_or(u32::MAX);
        if self.min_items == 0 || self.min_items > most {
            return Err(invalid(
                policy,
                format!("accept_partial.min_items must be 1..={most}"),
            ));
        }
        Ok(self)
    }
}

/// Parameters of `vp.schema_only.v1`: none but the optional partial acceptance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaOnlyParams {
    /// Partial acceptance, when the contract allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_partial: Option<PartialAcceptance>,
}

/// Parameters of `vp.schema_thresholds.v1`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThresholdParams {
    /// Thresholds by JSON Pointer.
    #[serde(default)]
    pub thresholds: Vec<Threshold>,
    /// WattSwarm's `min_confidence`: `/confidence >= value` (reason 102 when it fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_confidence: Option<f64>,
    /// WattSwarm's `max_len`: canonical output at most this many bytes (reason 103).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_len: Option<u64>,
    /// Partial acceptance, when the contract allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_partial: Option<PartialAcceptance>,
}

/// A fixed expected value of `vp.crosscheck.v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceValue {
    /// Where in the output.
    pub pointer: JsonPointer,
    /// The expected value.
    pub equals: Value,
    /// For numbers: the largest absolute difference still counted as agreement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<f64>,
}

/// How verifier votes are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// A passing vote adds its confidence `score`; every vote asked (missing ones too) adds 1
    /// to the denominator.
    #[default]
    ConfidenceWeighted,
    /// A passing vote adds 1.
    Count,
}

/// A verifier quorum of `vp.crosscheck.v1`. Fail-closed: votes that are missing,
/// inconclusive or fail their integrity check count against the candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quorum {
    /// Fewest decisive (passed or failed) votes needed to decide at all.
    pub min_verifiers: u32,
    /// Smallest passing share of the weight of all requested votes, in (0, 1].
    pub min_pass_ratio: f64,
    /// A passing vote counts as passing only with at least this score, in [0, 1].
    #[serde(default)]
    pub min_score: f64,
    /// How votes are weighed.
    #[serde(default)]
    pub aggregation: Aggregation,
    /// The verifier workers (gateway listing ids) whose `/verify` votes make the quorum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifiers: Vec<String>,
}

/// Parameters of `vp.crosscheck.v1`. At least one of `references` and `quorum` is required.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrosscheckParams {
    /// Fixed expected values.
    #[serde(default)]
    pub references: Vec<ReferenceValue>,
    /// Verifier votes to collect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorum: Option<Quorum>,
    /// Partial acceptance, when the contract allows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_partial: Option<PartialAcceptance>,
}

/// Typed parameters of a binding.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyParams {
    /// `vp.schema_only.v1`: only the optional partial acceptance.
    SchemaOnly(SchemaOnlyParams),
    /// `vp.schema_thresholds.v1`.
    Thresholds(ThresholdParams),
    /// `vp.crosscheck.v1`.
    Crosscheck(CrosscheckParams),
}

fn invalid(policy: PolicyId, message: impl Into<String>) -> PolicyError {
    PolicyError::InvalidParams {
        policy: policy.as_str(),
        message: message.into(),
    }
}

/// `2.0` → `2` (recursively), so typed fields that want integers accept every spelling JCS
/// treats as equal.
fn integral_floats_as_integers(value: &Value) -> Value {
    match value {
        Value::Number(number) if number.is_f64() => {
            let float = number.as_f64().unwrap_or(f64::NAN);
            // 2^53: beyond it a double no longer names a single integer.
            if float.fract() == 0.0 && float.abs() <= 9_007_199_254_740_992.0 {
                // The range check above makes the cast exact.
                #[allow(clippy::cast_possible_truncation)]
                let integer = float as i64;
                Value::from(integer)
            } else {
                value.clone()
            }
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(integral_floats_as_integers).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), integral_floats_as_integers(item)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn unit_interval(value: f64) -> bool {
    (0.0..=1.0).contains(&value)
}

impl PolicyParams {
    /// Parses and checks `params` for `policy`. Integral numbers may be spelled as floats
    /// (`1000.0`): the hash is over canonical JSON, where they are the same number.
    pub fn parse(policy: PolicyId, params: &Value) -> Result<Self, PolicyError> {
        if !params.is_object() {
            return Err(invalid(policy, "policy_params must be a JSON object"));
        }
        let normalized = integral_floats_as_integers(params);
        let params = &normalized;
        match policy {
            PolicyId::SchemaOnlyV1 => {
                let parsed: SchemaOnlyParams =
                    serde_json::from_value(params.clone()).map_err(|_| {
                        invalid(policy, "this policy takes no parameters but accept_partial")
                    })?;
                if let Some(partial) = parsed.accept_partial {
                    partial.check(policy)?;
                }
                Ok(Self::SchemaOnly(parsed))
            }
            PolicyId::SchemaThresholdsV1 => {
                let parsed: ThresholdParams = serde_json::from_value(params.clone())
                    .map_err(|e| invalid(policy, e.to_string()))?;
                if parsed.thresholds.len() > MAX_POLICY_RULES {
                    return Err(invalid(
                        policy,
                        format!("at most {MAX_POLICY_RULES} thresholds"),
                    ));
                }
                if parsed.thresholds.is_empty()
                    && parsed.min_confidence.is_none()
                    && parsed.max_len.is_none()
                {
                    return Err(invalid(
                        policy,
                        "give at least one of thresholds, min_confidence, max_len",
                    ));
                }
                if let Some(partial) = parsed.accept_partial {
                    partial.check(policy)?;
                }
                for threshold in &parsed.thresholds {
                    let operand_ok = if threshold.op.is_numeric() {
                        threshold.value.is_number()
                    } else if threshold.op.is_size() {
                        threshold.value.is_u64()
                    } else {
                        true
                    };
                    if !operand_ok {
                        return Err(invalid(
                            policy,
                            format!(
                                "threshold at {:?} needs a {} value",
                                threshold.pointer.as_str(),
                                if threshold.op.is_size() {
                                    "non-negative integer"
                                } else {
                                    "numeric"
                                }
                            ),
                        ));
                    }
                }
                Ok(Self::Thresholds(parsed))
            }
            PolicyId::CrosscheckV1 => {
                let parsed: CrosscheckParams = serde_json::from_value(params.clone())
                    .map_err(|e| invalid(policy, e.to_string()))?;
                if parsed.references.is_empty() && parsed.quorum.is_none() {
                    return Err(invalid(policy, "give references and/or a quorum"));
                }
                if let Some(partial) = parsed.accept_partial {
                    partial.check(policy)?;
                }
                if parsed.references.len() > MAX_POLICY_RULES {
                    return Err(invalid(
                        policy,
                        format!("at most {MAX_POLICY_RULES} references"),
                    ));
                }
                for reference in &parsed.references {
                    if let Some(tolerance) = reference.tolerance
                        && (tolerance < 0.0 || !reference.equals.is_number())
                    {
                        return Err(invalid(
                            policy,
                            "tolerance must be non-negative and applies to numeric references only",
                        ));
                    }
                }
                if let Some(quorum) = &parsed.quorum {
                    if quorum.min_verifiers == 0 || quorum.min_verifiers > MAX_QUORUM_VERIFIERS {
                        return Err(invalid(
                            policy,
                            format!("quorum.min_verifiers must be 1..={MAX_QUORUM_VERIFIERS}"),
                        ));
                    }
                    if !(quorum.min_pass_ratio > 0.0 && quorum.min_pass_ratio <= 1.0) {
                        return Err(invalid(policy, "quorum.min_pass_ratio must be in (0, 1]"));
                    }
                    if !unit_interval(quorum.min_score) {
                        return Err(invalid(policy, "quorum.min_score must be in [0, 1]"));
                    }
                    let named = u32::try_from(quorum.verifiers.len()).unwrap_or(u32::MAX);
                    if named > MAX_QUORUM_VERIFIERS {
                        return Err(invalid(
                            policy,
                            format!("at most {MAX_QUORUM_VERIFIERS} quorum.verifiers"),
                        ));
                    }
                    if named > 0 && named < quorum.min_verifiers {
                        return Err(invalid(
                            policy,
                            "quorum.verifiers names fewer verifiers than quorum.min_verifiers",
                        ));
                    }
                }
                Ok(Self::Crosscheck(parsed))
            }
        }
    }
}

/// A policy pinned in a contract. Valid by construction: the id is known, the version is
/// supported, the parameters parse, and `policy_hash` is the hash of id and parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PolicyBindingWire", into = "PolicyBindingWire")]
pub struct PolicyBinding {
    policy_id: PolicyId,
    policy_hash: Digest,
    policy_params: Value,
    parsed: PolicyParams,
}

/// The wire form of a binding (also what WattSwarm sends in `VerifyRequest.policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyBindingWire {
    /// Policy identifier.
    pub policy_id: String,
    /// Policy version.
    pub policy_version: String,
    /// `sha256(policy_id ‖ canonical(policy_params))`.
    pub policy_hash: Digest,
    /// Policy parameters.
    pub policy_params: Value,
}

impl TryFrom<PolicyBindingWire> for PolicyBinding {
    type Error = PolicyError;
    fn try_from(wire: PolicyBindingWire) -> Result<Self, Self::Error> {
        PolicyRequest {
            policy_id: wire.policy_id.parse()?,
            policy_version: Some(wire.policy_version),
            policy_hash: Some(wire.policy_hash),
            policy_params: wire.policy_params,
        }
        .into_binding()
    }
}

impl From<PolicyBinding> for PolicyBindingWire {
    fn from(binding: PolicyBinding) -> Self {
        Self {
            policy_id: binding.policy_id.as_str().to_owned(),
            policy_version: POLICY_VERSION.to_owned(),
            policy_hash: binding.policy_hash,
            policy_params: binding.policy_params,
        }
    }
}

impl PolicyBinding {
    /// Pins `policy_id` with `params`, computing the hash.
    pub fn new(policy_id: PolicyId, params: Value) -> Result<Self, PolicyError> {
        let parsed = PolicyParams::parse(policy_id, &params)?;
        let policy_hash = policy_hash(policy_id, &params)?;
        Ok(Self {
            policy_id,
            policy_hash,
            policy_params: params,
            parsed,
        })
    }

    /// `vp.schema_only.v1` with no parameters: the default when a seeker names no policy.
    #[must_use]
    pub fn schema_only() -> Self {
        let params = Value::Object(serde_json::Map::new());
        Self {
            policy_id: PolicyId::SchemaOnlyV1,
            policy_hash: policy_hash(PolicyId::SchemaOnlyV1, &params)
                .unwrap_or_else(|_| Digest::of_bytes(PolicyId::SchemaOnlyV1.as_str().as_bytes())),
            policy_params: params,
            parsed: PolicyParams::SchemaOnly(SchemaOnlyParams::default()),
        }
    }

    /// The policy.
    #[must_use]
    pub const fn policy_id(&self) -> PolicyId {
        self.policy_id
    }
    /// Always `"1"`.
    #[must_use]
    pub const fn policy_version(&self) -> &'static str {
        POLICY_VERSION
    }
    /// The pinned hash.
    #[must_use]
    pub const fn policy_hash(&self) -> Digest {
        self.policy_hash
    }
    /// The parameters as given.
    #[must_use]
    pub const fn policy_params(&self) -> &Value {
        &self.policy_params
    }
    /// The parameters, typed.
    #[must_use]
    pub const fn params(&self) -> &PolicyParams {
        &self.parsed
    }
    /// The verifier quorum, when the policy asks for votes.
    #[must_use]
    pub fn quorum(&self) -> Option<&Quorum> {
        match &self.parsed {
            PolicyParams::Crosscheck(params) => params.quorum.as_ref(),
            _ => None,
        }
    }
    /// Partial acceptance, when the pinned parameters allow it.
    #[must_use]
    pub fn accept_partial(&self) -> Option<PartialAcceptance> {
        match &self.parsed {
            PolicyParams::SchemaOnly(params) => params.accept_partial,
            PolicyParams::Thresholds(params) => params.accept_partial,
            PolicyParams::Crosscheck(params) => params.accept_partial,
        }
    }
    /// The wire form.
    #[must_use]
    pub fn to_wire(&self) -> PolicyBindingWire {
        self.clone().into()
    }
}

/// What a seeker sends to choose a policy: the id and parameters, optionally with the version
/// and hash it expects (checked, never trusted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    /// The policy.
    pub policy_id: PolicyId,
    /// Expected version, if the seeker pins one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
    /// Expected hash, if the seeker computed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_hash: Option<Digest>,
    /// Parameters (default `{}`).
    #[serde(default = "empty_object")]
    pub policy_params: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl PolicyRequest {
    /// Builds the binding, checking any version and hash the request carried.
    pub fn into_binding(self) -> Result<PolicyBinding, PolicyError> {
        if let Some(version) = &self.policy_version
            && version != POLICY_VERSION
        {
            return Err(PolicyError::UnsupportedVersion {
                policy: self.policy_id.as_str(),
                version: version.clone(),
            });
        }
        let binding = PolicyBinding::new(self.policy_id, self.policy_params)?;
        if let Some(given) = self.policy_hash
            && given != binding.policy_hash
        {
            return Err(PolicyError::HashMismatch {
                given,
                expected: binding.policy_hash,
            });
        }
        Ok(binding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hash_is_id_then_canonical_params() {
        let params = json!({"min_confidence": 0.8});
        let by_hand = Digest::of_bytes(b"vp.schema_thresholds.v1{\"min_confidence\":0.8}");
        assert_eq!(
            policy_hash(PolicyId::SchemaThresholdsV1, &params).unwrap(),
            by_hand
        );
        let spelled_differently: Value =
            serde_json::from_str(r#"{ "min_confidence" : 8e-1 }"#).unwrap();
        assert_eq!(
            policy_hash(PolicyId::SchemaThresholdsV1, &spelled_differently).unwrap(),
            by_hand
        );
    }

    #[test]
    fn bindings_round_trip_and_reject_a_wrong_hash() {
        let binding = PolicyBinding::new(
            PolicyId::SchemaThresholdsV1,
            json!({"thresholds": [{"pointer": "/confidence", "op": ">=", "value": 0.8}]}),
        )
        .unwrap();
        let json = serde_json::to_value(&binding).unwrap();
        assert_eq!(json["policy_version"], "1");
        let back: PolicyBinding = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, binding);

        let mut tampered = json;
        tampered["policy_params"]["thresholds"][0]["value"] = json!(0.1);
        let err = serde_json::from_value::<PolicyBinding>(tampered).unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
    }

    #[test]
    fn unknown_policies_versions_and_params_are_refused() {
        assert!(matches!(
            "vp.vibes.v1".parse::<PolicyId>(),
            Err(PolicyError::UnknownPolicy(_))
        ));
        let request = PolicyRequest {
            policy_id: PolicyId::SchemaOnlyV1,
            policy_version: Some("2".to_owned()),
            policy_hash: None,
            policy_params: json!({}),
        };
        assert!(matches!(
            request.into_binding(),
            Err(PolicyError::UnsupportedVersion { .. })
        ));
        for (policy, params) in [
            (PolicyId::SchemaOnlyV1, json!({"x": 1})),
            (PolicyId::SchemaOnlyV1, json!([])),
            (PolicyId::SchemaThresholdsV1, json!({})),
            (
                PolicyId::SchemaThresholdsV1,
                json!({"thresholds": [{"pointer": "/a", "op": ">=", "value": "high"}]}),
            ),
            (
                PolicyId::SchemaThresholdsV1,
                json!({"thresholds": [{"pointer": "a", "op": ">=", "value": 1}]}),
            ),
            (
                PolicyId::SchemaThresholdsV1,
                json!({"thresholds": [{"pointer": "/a", "op": "max_bytes", "value": -1}]}),
            ),
            (
                PolicyId::SchemaThresholdsV1,
                json!({"thresholds": [{"pointer": "/a", "op": "~=", "value": 1}]}),
            ),
            (PolicyId::CrosscheckV1, json!({})),
            (
                PolicyId::CrosscheckV1,
                json!({"quorum": {"min_verifiers": 0, "min_pass_ratio": 0.5}}),
            ),
            (
                PolicyId::CrosscheckV1,
                json!({"quorum": {"min_verifiers": 2, "min_pass_ratio": 1.5}}),
            ),
            (
                PolicyId::CrosscheckV1,
                json!({"references": [{"pointer": "/a", "equals": "x", "tolerance": 0.1}]}),
            ),
            (
                PolicyId::CrosscheckV1,
                json!({"references": [], "quorum": {"min_verifiers": 1, "min_pass_ratio": 0.5, "extra": 1}}),
            ),
        ] {
            assert!(
                matches!(
                    PolicyBinding::new(policy, params.clone()),
                    Err(PolicyError::InvalidParams { .. })
                ),
                "{policy} {params}"
            );
        }
    }

    #[test]
    fn json_pointers_follow_rfc6901() {
        assert!("".parse::<JsonPointer>().is_ok());
        assert!("/a~0b/c~1d/0".parse::<JsonPointer>().is_ok());
        assert_eq!(
            "a/b".parse::<JsonPointer>(),
            Err(JsonPointerError::MissingLeadingSlash)
        );
        assert_eq!(
            "/a~2".parse::<JsonPointer>(),
            Err(JsonPointerError::BadEscape)
        );
        let doc = json!({"a/b": {"c~d": [10, 20]}});
        let pointer: JsonPointer = "/a~1b/c~0d/1".parse().unwrap();
        assert_eq!(pointer.resolve(&doc), Some(&json!(20)));
    }

    #[test]
    fn a_request_with_the_right_hash_is_accepted() {
        let params = json!({"references": [{"pointer": "/answer", "equals": 42}]});
        let expected = policy_hash(PolicyId::CrosscheckV1, &params).unwrap();
        let binding = PolicyRequest {
            policy_id: PolicyId::CrosscheckV1,
            policy_version: Some("1".to_owned()),
            policy_hash: Some(expected),
            policy_params: params,
        }
        .into_binding()
        .unwrap();
        assert_eq!(binding.policy_hash(), expected);
        assert!(binding.quorum().is_none());
    }
}
