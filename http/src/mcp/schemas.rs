//! The MCP tools' input types (their JSON Schemas are derived) and output schemas, apart from
//! the tools themselves ([`super::tools`]) so the tool code reads as what each tool does.

use std::sync::Arc;

use rmcp::{
    model::JsonObject,
    schemars::{self, JsonSchema},
};
use serde::Deserialize;
use serde_json::{Value, json};

/// `find_workers` input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FindWorkersInput {
    /// Only workers offering this task type.
    pub task_type: Option<String>,
    /// Only workers at or below this price, atomic units of the listing's asset.
    pub max_price: Option<String>,
    /// Only workers whose verification pass rate over 30 days is at least this (0–1).
    pub min_reputation: Option<f64>,
}

/// `describe_worker` input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WorkerIdInput {
    /// Worker id (`wk_…`).
    pub worker_id: String,
}

/// `hire_worker` input: the stable x402 resource of a listing's task type and its body.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct HireWorkerInput {
    /// Worker id (`wk_…`), as find_workers lists it.
    pub worker_id: String,
    /// One of the worker's task types.
    pub task_type: String,
    /// The task input, checked against the listing's input schema. The paid call must send
    /// the same input as the unpaid one: the offer is signed for its digest.
    pub input: Value,
}

/// `propose_contract` and `hire` input: the proposal of `POST /v1/contracts`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ProposalInput {
    /// Worker id (`wk_…`).
    pub worker_id: String,
    /// Task type the worker offers.
    pub task_type: String,
    /// Task input, checked against the task's input schema.
    pub input: Value,
    /// A stricter JSON Schema the deliverable must satisfy.
    pub output_schema: Option<Value>,
    /// Seconds the seeker may dispute a passed deliverable before settlement.
    pub acceptance_window_s: Option<u64>,
}

impl ProposalInput {
    pub(super) fn to_json(&self) -> Value {
        let mut proposal = json!({
            "worker_id": self.worker_id,
            "task_type": self.task_type,
            "input": self.input,
        });
        if let Some(schema) = &self.output_schema {
            proposal["output_schema"] = schema.clone();
        }
        if let Some(window) = self.acceptance_window_s {
            proposal["acceptance_window_s"] = json!(window);
        }
        proposal
    }
}

/// `get_contract` input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ContractIdInput {
    /// Contract id (`ctr_…`).
    pub contract_id: String,
}

/// `open_dispute` input.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct DisputeInput {
    /// Contract id (`ctr_…`).
    pub contract_id: String,
    /// Why.
    pub reason: String,
    /// What is claimed.
    pub claim: Option<Value>,
}

/// An output schema: `properties` (all optional) plus the `error` a failed call answers.
pub(super) fn output_schema(properties: Value) -> Arc<JsonObject> {
    let mut properties = properties;
    properties["error"] = json!({
        "type": "object",
        "description": "Set when the call failed (isError); the gateway API's error shape.",
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "details": {}
        },
        "required": ["code", "message"]
    });
    let Value::Object(schema) = json!({"type": "object", "properties": properties}) else {
        unreachable!("a JSON object literal");
    };
    Arc::new(schema)
}

pub(super) fn find_workers_output() -> Arc<JsonObject> {
    output_schema(json!({
        "workers": {
            "type": "array",
            "description": "Listings as GET /v1/workers shows them (tasks with price and output \
                            schema, input schema, reputation).",
            "items": {"type": "object"}
        },
        "next_after": {"type": ["string", "null"]}
    }))
}

pub(super) fn describe_worker_output() -> Arc<JsonObject> {
    output_schema(json!({
        "listing": {"type": "object", "description": "The listing as discovery shows it."},
        "reputation": {"type": "object", "description": "The signed reputation snapshot."}
    }))
}

pub(super) fn contract_output() -> Arc<JsonObject> {
    output_schema(json!({
        "contract_id": {"type": "string"},
        "state": {"type": "string"},
        "terms": {"type": "object"},
        "payment": {"type": "object"}
    }))
}

pub(super) fn hire_output() -> Arc<JsonObject> {
    output_schema(json!({
        "contract_id": {"type": "string"},
        "state": {"type": "string", "description": "Contract state when the hire ended."},
        "accepted": {"type": "boolean", "description": "The deliverable passed verification."},
        "paid_from": {"type": "string", "description": "The MCP wallet's address."},
        "deliverable": {"description": "What the worker delivered."},
        "verification": {},
        "payment": {},
        "settlement": {},
        "payment_response": {"description": "The x402 settlement response."},
        "receipt": {"description": "The gateway-signed receipt (compact JWS)."}
    }))
}

/// `hire_worker`'s output: the paid answer (execute's, with `contract_id`, `links`, `access`) or,
/// on `isError`, the x402 `PaymentRequired` (whose `error` is x402's string) or the API's error.
/// Every one of them fits it: the TypeScript MCP SDK checks error results against it too.
pub(super) fn hire_worker_output() -> Arc<JsonObject> {
    let Value::Object(schema) = json!({
        "type": "object",
        "properties": {
            "contract_id": {"type": "string"},
            "status": {"type": "string", "description": "completed, partial, pending, …"},
            "output": {"description": "The verified deliverable (HIRE's output)."},
            "deliverable": {"description": "The deliverable with its digest."},
            "verification": {},
            "settlement": {},
            "links": {"type": "object", "description": "The contract, its events and receipt."},
            "access": {
                "type": "object",
                "description": "The capability token of the contract's read routes \
                                (Authorization: Bearer hg_cap_…)."
            },
            "x402Version": {"description": "Set on a payment-required or failed call (isError)."},
            "accepts": {"type": "array"},
            "resource": {"type": "object"},
            "error": {"description": "x402's reason (string), or the API's error object."},
            "failure": {"description": "The API's error of a hire that failed after payment."},
            "http_status": {
                "type": "integer",
                "description": "The status the stable x402 resource answers a failed hire with."
            }
        }
    }) else {
        unreachable!("a JSON object literal");
    };
    Arc::new(schema)
}

pub(super) fn dispute_output() -> Arc<JsonObject> {
    output_schema(json!({
        "dispute_id": {"type": "string"},
        "state": {"type": "string"}
    }))
}
