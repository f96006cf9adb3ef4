//! A2A Agent Cards (A2A v1.0): each healthy listing published as a card
//! (`GET /v1/workers/{id}/agent-card.json`) and the marketplace's own card
//! (`/.well-known/agent-card.json`) whose skills are the task types on offer.
//!
//! A card states what an agent needs to decide and to pay: the skills (task types, with the
//! listing's examples), the input schema and per-skill output schema and price (in the
//! `urn:hiregate:a2a:contract:v1` extension), and the x402 payment requirement (in the
//! `a2a-x402` extension the x402 A2A transport names, marked required). The interface is the
//! gateway's own contract API (binding `HIREGATE+HTTP`, documented at `/docs`), not an A2A
//! JSON-RPC endpoint, so a client that only speaks A2A bindings knows at once it cannot call it.
//!
//! Every card is signed by the gateway: `signatures[0]` is a JWS with a detached payload over the
//! RFC 8785 form of the card without `signatures` (the A2A card-signing rule), verifiable offline
//! with `/.well-known/jwks.json` ([`hiregate_contracts::token::verify_agent_card`]).

use std::collections::BTreeMap;

use hiregate_contracts::token::{AGENT_CARD_TOKEN_TYPE, KeyRing};
use serde_json::{Value, json};
use url::Url;

use crate::{
    error::ApiError,
    registry::model::{TaskType, WorkerListing},
};

/// The A2A protocol version the cards follow.
pub const A2A_PROTOCOL_VERSION: &str = "1.0";
/// The x402 extension URI of the x402 A2A transport.
pub const X402_EXTENSION: &str = "https://github.com/google-a2a/a2a-x402/v0.1";
/// hiregate's own extension: schemas, prices and the contract API.
pub const CONTRACT_EXTENSION: &str = "urn:hiregate:a2a:contract:v1";
/// The interface binding of the contract API.
pub const BINDING: &str = "HIREGATE+HTTP";

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

    fn common(&self, name: &str, description: &str, version: &str) -> Value {
        json!({
            "name": name,
            "description": description,
            "supportedInterfaces": [{
                "url": self.url("/v1/contracts"),
                "protocolBinding": BINDING,
                "protocolVersion": A2A_PROTOCOL_VERSION,
            }],
            "provider": {"organization": "hiregate", "url": self.base_url},
            "version": version,
            "documentationUrl": self.url("/docs"),
            "securitySchemes": {
                "seeker_key": {"httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "bearerFormat": "hg_sk_…",
                    "description": "A hiregate seeker API key",
                }},
            },
            "securityRequirements": [{"schemes": {"seeker_key": {"list": []}}}],
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
            .unwrap_or_else(|| format!("hiregate worker {id}"));
        let description = listing.metadata.description.clone().unwrap_or_else(|| {
            "A worker listed on hiregate: hired under a signed contract, paid with x402, and paid \
             out only for a deliverable that passed its pinned verification."
                .to_owned()
        });
        let mut card = self.common(&name, &description, &listing.updated_at.to_rfc3339());
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
                (
                    task_type.as_str(),
                    json!({
                        "price": offer.price.to_string(),
                        "outputSchema": offer.output_schema.as_json(),
                    }),
                )
            })
            .collect();
        card["capabilities"] = json!({
            "streaming": true,
            "pushNotifications": true,
            "extensions": [
                {
                    "uri": X402_EXTENSION,
                    "description": "Paid with x402 v2: propose a contract, then execute it and \
                                    pay the 402 it answers.",
                    "required": true,
                    "params": {"x402Version": 2, "accepts": accepts},
                },
                {
                    "uri": CONTRACT_EXTENSION,
                    "description": "The listing's input schema, and per skill its output schema \
                                    and price, as pinned in every contract.",
                    "required": false,
                    "params": {
                        "workerId": id,
                        "proposeUrl": self.url("/v1/contracts"),
                        "reputationUrl": self.url(&format!("/v1/workers/{id}/reputation")),
                        "inputSchema": listing.metadata.input_schema.as_ref().map(|s| s.as_json()),
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
        );
        card["capabilities"] = json!({
            "streaming": true,
            "pushNotifications": true,
            "extensions": [{
                "uri": X402_EXTENSION,
                "description": "Every hire is paid with x402 v2.",
                "required": true,
                "params": {"x402Version": 2},
            }, {
                "uri": CONTRACT_EXTENSION,
                "description": "Where to discover workers and propose contracts.",
                "required": false,
                "params": {
                    "discoveryUrl": self.url("/v1/workers"),
                    "proposeUrl": self.url("/v1/contracts"),
                    "jwksUrl": self.url("/.well-known/jwks.json"),
                },
            }],
        });
        card["skills"] = Value::Array(skills);
        self.sign(card)
    }

    fn sign(&self, mut card: Value) -> Result<Value, ApiError> {
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
