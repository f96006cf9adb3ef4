//! A2A Agent Cards (A2A v1.0): each healthy listing published as a card
//! (`GET /v1/workers/{id}/agent-card.json`) and the marketplace's own card
//! (`/.well-known/agent-card.json`) whose skills are the task types on offer.
//!
//! A card states what an agent needs to decide and to pay: the skills (task types, with the
//! listing's examples), the input schema and per-skill output schema and price (in the
//! `urn:hiregate:a2a:contract:v1` extension), and the x402 payment requirement (in the
//! `a2a-x402` extension the x402 A2A transport names, marked required). The interface is A2A
//! v1.0's JSON-RPC binding (`JSONRPC`, the parent module `a2a`): a listing's card names
//! `/a2a/workers/{id}`, the marketplace's `/a2a` (where a message names the listing in its
//! metadata); `SendMessage` answers the x402 requirements, the next message pays them, and no
//! account is needed. `GetTask` reads a paid task with the capability token its answer carries
//! (the `contract_capability` scheme); sending a message needs no credential, so the cards state
//! no security requirement.
//!
//! Cards claim only what the gateway serves: `SendStreamingMessage` and `SubscribeToTask`
//! stream (`streaming: true`); nothing pushes notifications (`pushNotifications: false`).
//!
//! Every card is signed by the gateway as A2A v1.0 §8.4 defines it: `signatures[0]` is a JWS
//! (EdDSA, `kid`, `typ` `JOSE`) with a detached payload over the RFC 8785 form of the card
//! without `signatures` and without default values (§8.4.1), verifiable offline with
//! `/.well-known/jwks.json` ([`hiregate_contracts::token::verify_agent_card`]) and by the
//! official A2A SDK's verifier. Verifiers do not agree on what counts as a default: the
//! specification drops unset fields and implicit protobuf defaults (`"required": false`, an
//! empty repeated field), the SDK also drops every empty string, list or object and every
//! `null`, at any depth, extension `params` included. So a served card holds none of those
//! ([`without_empty_values`]): the card as served, the specification's canonical form and the
//! SDK's are then the same JSON, and every verifier checks the bytes that were signed. A JSON
//! Schema that would lose meaning that way (`"enum": []`, `"const": ""`, an integer beyond
//! 2^53 that the SDK's `Struct` cannot hold) is left out of the card rather than shown
//! altered ([`travels_unchanged`]); discovery (`/v1/workers`) serves it.

use std::collections::BTreeMap;

use hiregate_contracts::token::{AGENT_CARD_TOKEN_TYPE, KeyRing};
use serde_json::{Value, json};
use url::Url;

use crate::error::ApiError;
use hiregate_store::listing::model::{TaskType, WorkerListing};

/// The A2A protocol version the cards follow.
pub const A2A_PROTOCOL_VERSION: &str = "1.0";
/// Message metadata naming the listing, on the marketplace interface.
pub const WORKER_KEY: &str = "hiregate.workerId";
/// Message metadata naming the task type (the skill), when the listing offers several.
pub const TASK_TYPE_KEY: &str = "hiregate.taskType";
/// The x402 extension URI of the x402 A2A transport.
pub const X402_EXTENSION: &str = "https://github.com/google-a2a/a2a-x402/v0.1";
/// hiregate's own extension: schemas, prices and the contract API.
pub const CONTRACT_EXTENSION: &str = "urn:hiregate:a2a:contract:v1";
/// The interface binding: A2A v1.0 JSON-RPC (the parent module, `a2a`).
pub const BINDING: &str = "JSONRPC";
/// Largest integer a JSON number (an IEEE double, as in protobuf's `Struct`) holds exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Builds and signs agent cards. Cheap to clone.
#[derive(Clone)]
pub struct AgentCards {
    keys: KeyRing,
    base_url: String,
}

impl std::fmt::Debug for AgentCards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentCards")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl AgentCards {
    /// Cards naming the gateway at `base_url`, signed with `keys`.
    #[must_use]
    pub fn new(keys: KeyRing, base_url: &Url) -> Self {
        Self {
            keys,
            base_url: base_url.as_str().trim_end_matches('/').to_owned(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    fn common(&self, name: &str, description: &str, version: &str, interface: &str) -> Value {
        json!({
            "name": name,
            "description": description,
            "supportedInterfaces": [{
                "url": self.url(interface),
                "protocolBinding": BINDING,
                "protocolVersion": A2A_PROTOCOL_VERSION,
            }],
            "provider": {"organization": "hiregate", "url": self.base_url},
            "version": version,
            "documentationUrl": self.url("/docs"),
            // What `GetTask` takes; `SendMessage` needs no credential (the payment is what
            // counts), so no requirement is stated.
            "securitySchemes": {
                "contract_capability": {"httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "hg_cap_…",
                    "description": "The capability token of a paid task (its answer's \
                                    metadata[\"hiregate.access\"]): reads that task with \
                                    GetTask, and its contract's REST routes",
                }},
            },
            "defaultInputModes": ["application/json"],
            "defaultOutputModes": ["application/json"],
        })
    }

    /// The card of `listing`.
    pub fn listing_card(&self, listing: &WorkerListing) -> Result<Value, ApiError> {
        let id = listing.id.as_str();
        let name = listing
            .metadata
            .name
            .clone()
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| format!("hiregate worker {id}"));
        let description = listing
            .metadata
            .description
            .clone()
            .filter(|description| !description.trim().is_empty())
            .unwrap_or_else(|| {
            "A worker listed on hiregate: hired under a signed contract, paid with x402, and paid \
             out only for a deliverable that passed its pinned verification."
                .to_owned()
        });
        let mut card = self.common(
            &name,
            &description,
            &listing.updated_at.to_rfc3339(),
            &format!("/a2a/workers/{id}"),
        );
        let network = serde_json::to_value(listing.network).map_err(ApiError::internal)?;
        let pay_to = listing.pay_to.to_string();
        let asset = listing.asset.to_string();
        let examples: Vec<String> = listing
            .metadata
            .examples
            .iter()
            .map(Value::to_string)
            .collect();
        let offers = listing.tasks.offers();
        let skills: Vec<Value> = offers
            .iter()
            .map(|(task_type, offer)| {
                json!({
                    "id": task_type.as_str(),
                    "name": task_type.as_str(),
                    "description": format!(
                        "{task_type} for {price} atomic units of {asset} on {network}, under a \
                         contract whose deliverable must satisfy the output schema before payout",
                        price = offer.price,
                        network = network.as_str().unwrap_or_default(),
                    ),
                    "tags": ["hiregate", "x402", task_type.as_str()],
                    "examples": examples,
                    "inputModes": ["application/json"],
                    "outputModes": ["application/json"],
                })
            })
            .collect();
        let accepts: Vec<Value> = offers
            .iter()
            .map(|(task_type, offer)| {
                json!({
                    "taskType": task_type.as_str(),
                    "schemes": listing.payment_schemes,
                    "network": network,
                    "asset": asset,
                    "payTo": pay_to,
                    "amount": offer.price.to_string(),
                })
            })
            .collect();
        let tasks: BTreeMap<&str, Value> = offers
            .iter()
            .map(|(task_type, offer): (&TaskType, _)| {
                let mut task = json!({"price": offer.price.to_string()});
                let schema = offer.output_schema.as_json();
                if travels_unchanged(schema) {
                    task["outputSchema"] = schema.clone();
                }
                (task_type.as_str(), task)
            })
            .collect();
        let input_schema = listing
            .metadata
            .input_schema
            .as_ref()
            .map(|schema| schema.as_json())
            .filter(|schema| travels_unchanged(schema));
        card["capabilities"] = json!({
            "streaming": true,
            "pushNotifications": false,
            "extensions": [
                {
                    "uri": X402_EXTENSION,
                    "description": "Paid with x402 v2 (a2a-x402, standalone flow): SendMessage \
                                    with the task input answers TASK_STATE_INPUT_REQUIRED with \
                                    x402.payment.required; the task's next message pays it in \
                                    x402.payment.payload and gets the verified deliverable.",
                    "required": true,
                    "params": {"x402Version": 2, "accepts": accepts},
                },
                {
                    "uri": CONTRACT_EXTENSION,
                    "description": "The listing's input schema, and per skill its output schema \
                                    and price, as pinned in every contract. A message names its \
                                    skill in metadata[\"hiregate.taskType\"] when the listing \
                                    has several.",
                    "params": {
                        "workerId": id,
                        "taskTypeMetadataKey": TASK_TYPE_KEY,
                        "proposeUrl": self.url("/v1/contracts"),
                        "discoveryUrl": self.url("/v1/workers"),
                        "reputationUrl": self.url(&format!("/v1/workers/{id}/reputation")),
                        "inputSchema": input_schema,
                        "tasks": tasks,
                    },
                },
            ],
        });
        card["skills"] = Value::Array(skills);
        self.sign(card)
    }

    /// The marketplace's card: one skill per task type the healthy `listings` offer.
    pub fn gateway_card(&self, listings: &[WorkerListing]) -> Result<Value, ApiError> {
        let mut by_task: BTreeMap<&str, Vec<&WorkerListing>> = BTreeMap::new();
        for listing in listings {
            for task_type in listing.tasks.task_types() {
                by_task.entry(task_type.as_str()).or_default().push(listing);
            }
        }
        let hire = json!({
            "id": "hire",
            "name": "Hire a worker",
            "description": "Discover a worker, propose a contract that pins the task, the price \
                            and the acceptance criteria, pay its 402, and receive the verified \
                            deliverable with a signed receipt.",
            "tags": ["hiregate", "x402", "marketplace"],
            "inputModes": ["application/json"],
            "outputModes": ["application/json"],
        });
        let skills: Vec<Value> = std::iter::once(hire)
            .chain(by_task.iter().map(|(task_type, listings)| {
                json!({
                    "id": task_type,
                    "name": task_type,
                    "description": format!(
                        "{task_type}: {count} healthy worker listing(s); find them at \
                         /v1/workers?task_type={task_type}, each with its own signed agent card",
                        count = listings.len(),
                    ),
                    "tags": ["hiregate", "x402", task_type],
                    "inputModes": ["application/json"],
                    "outputModes": ["application/json"],
                })
            }))
            .collect();
        let mut card = self.common(
            "hiregate",
            "An open gateway for paying AI agents: hire a worker under a signed contract, pay \
             with x402, and money moves only for work that passed its pinned verification.",
            env!("CARGO_PKG_VERSION"),
            "/a2a",
        );
        card["capabilities"] = json!({
            "streaming": true,
            "pushNotifications": false,
            "extensions": [{
                "uri": X402_EXTENSION,
                "description": "Every hire is paid with x402 v2 (a2a-x402, standalone flow): \
                                SendMessage answers TASK_STATE_INPUT_REQUIRED with \
                                x402.payment.required; the task's next message pays it.",
                "required": true,
                "params": {"x402Version": 2},
            }, {
                "uri": CONTRACT_EXTENSION,
                "description": "Where to discover workers and propose contracts. A message \
                                names the listing in metadata[\"hiregate.workerId\"] and, when \
                                it has several, the skill in metadata[\"hiregate.taskType\"].",
                "params": {
                    "workerIdMetadataKey": WORKER_KEY,
                    "taskTypeMetadataKey": TASK_TYPE_KEY,
                    "discoveryUrl": self.url("/v1/workers"),
                    "proposeUrl": self.url("/v1/contracts"),
                    "jwksUrl": self.url("/.well-known/jwks.json"),
                },
            }],
        });
        card["skills"] = Value::Array(skills);
        self.sign(card)
    }

    /// Signs `card` as served: without empty values (see the module docs), so what is signed,
    /// what is served and what every verifier canonicalizes are the same JSON.
    fn sign(&self, card: Value) -> Result<Value, ApiError> {
        let mut card = without_empty_values(card).unwrap_or_else(|| json!({}));
        let signature = self
            .keys
            .sign_detached(AGENT_CARD_TOKEN_TYPE, &card)
            .map_err(ApiError::internal)?;
        card["signatures"] = json!([{
            "protected": signature.protected,
            "signature": signature.signature,
        }]);
        Ok(card)
    }
}

/// `value` without `null`s, empty strings, empty lists and empty objects, at any depth (an
/// object or list left empty by the removal goes too): what the A2A SDK's verifier drops before
/// canonicalizing. `None` when nothing is left.
fn without_empty_values(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(text) if text.is_empty() => None,
        Value::Array(items) => {
            let kept: Vec<Value> = items.into_iter().filter_map(without_empty_values).collect();
            (!kept.is_empty()).then_some(Value::Array(kept))
        }
        Value::Object(fields) => {
            let kept: serde_json::Map<String, Value> = fields
                .into_iter()
                .filter_map(|(key, value)| Some((key, without_empty_values(value)?)))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other),
    }
}

/// Whether `schema` reaches every A2A verifier unchanged: nothing [`without_empty_values`]
/// removes, and only numbers a protobuf `Struct` (IEEE doubles) holds exactly.
fn travels_unchanged(schema: &Value) -> bool {
    match schema {
        Value::Null => false,
        Value::String(text) => !text.is_empty(),
        Value::Number(number) => {
            number.is_f64()
                || number.as_u64().is_some_and(|n| n <= MAX_SAFE_INTEGER)
                || number
                    .as_i64()
                    .is_some_and(|n| n.unsigned_abs() <= MAX_SAFE_INTEGER)
        }
        Value::Bool(_) => true,
        Value::Array(items) => !items.is_empty() && items.iter().all(travels_unchanged),
        Value::Object(fields) => !fields.is_empty() && fields.values().all(travels_unchanged),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_values_go_at_any_depth_and_everything_else_stays() {
        let card = json!({
            "name": "n", "description": "", "flag": false, "zero": 0,
            "examples": [], "params": {"schema": {"properties": {}, "required": [], "x": null}},
            "list": [{"schemes": {"key": {"list": []}}}, "", 1],
        });
        assert_eq!(
            without_empty_values(card),
            Some(json!({"name": "n", "flag": false, "zero": 0, "list": [1]}))
        );
        assert_eq!(without_empty_values(json!({"a": [{}]})), None);
    }

    #[test]
    fn only_schemas_nothing_would_alter_are_shown() {
        for shown in [
            json!({"type": "object", "required": ["a"], "properties": {"a": {"const": false}}}),
            json!({"type": "integer", "minimum": -9_007_199_254_740_991_i64, "maximum": 0.5}),
        ] {
            assert!(travels_unchanged(&shown), "{shown}");
        }
        for altered in [
            json!({"type": "object", "properties": {}}),
            json!({"enum": []}),
            json!({"const": ""}),
            json!({"default": null}),
            json!({"maximum": 9_007_199_254_740_992_u64}),
            json!({}),
        ] {
            assert!(!travels_unchanged(&altered), "{altered}");
        }
    }
}
