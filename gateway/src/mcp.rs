//! The MCP server: hiregate's seeker side as Model Context Protocol tools, served over
//! streamable HTTP at `/mcp` (behind the seeker's API key) and over stdio by `hiregate mcp`.
//!
//! The tools are a facade over the gateway's own public HTTP API, called with the caller's
//! seeker key through the worker SDK's [`SeekerClient`], so every rule of the API applies to
//! them. Only `hire` pays, from the wallet of the `[mcp]` section; before signing anything it
//! checks the 402's amount against `mcp.max_per_hire` and, with the wallet's payments of the last
//! 24 hours as recorded in the store, against `mcp.max_per_day`. A refusal is a tool error
//! (`isError: true`) whose code is `spending_limit_exceeded` and whose message and
//! `details.setting` name the limit's configuration key; nothing is signed then. The hires
//! of one process are serialized from that check until their payment is recorded, so concurrent
//! calls cannot pass the day limit together; instances sharing one wallet each hold their own
//! lock, so give each instance its own wallet.
//!
//! Tool errors carry the API's shape, `{"error": {"code", "message", "details"}}`, arguments that
//! do not fit a tool's input schema included (`invalid_argument`, see [`Arguments`]).

use std::{fmt, str::FromStr, sync::Arc, time::Duration};

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use axum::http::{header, request::Parts};
use chrono::Utc;
use hiregate_worker_sdk::seeker::{SeekerClient, SeekerError};
use rmcp::{
    ErrorData, ServerHandler,
    handler::server::{
        common::{FromContextPart, schema_for_input},
        tool::ToolCallContext,
    },
    model::{
        CallToolResult, Extensions, Implementation, JsonObject, ServerCapabilities, ServerConfig,
    },
    schemars::{self, JsonSchema},
    tool, tool_handler, tool_router,
};
use secrecy::ExposeSecret as _;
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};
use url::Url;

use crate::{
    config::McpSettings,
    seeker_cli::{ACCEPTED, hire_report, in_progress, with_trailing_slash},
    store::Store,
};

/// How often `hire` looks at a paid contract still in progress.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How long `hire` waits for a verdict before answering with the contract as it stands.
const HIRE_WAIT: Duration = Duration::from_secs(120);
/// Window of the per-day limit.
const DAY: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The paying wallet and its limits (atomic units of the contract's asset).
#[derive(Clone)]
pub struct McpWallet {
    signer: Arc<PrivateKeySigner>,
    max_per_hire: U256,
    max_per_day: U256,
    /// Held from the day-limit check until the payment is recorded, so two hires of this
    /// process cannot both pass the check with room for only one.
    spending: Arc<tokio::sync::Mutex<()>>,
}

impl fmt::Debug for McpWallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpWallet")
            .field("address", &self.signer.address())
            .field("max_per_hire", &self.max_per_hire)
            .field("max_per_day", &self.max_per_day)
            .finish_non_exhaustive()
    }
}

impl McpWallet {
    /// The wallet of `[mcp]`, if one is configured (the key was validated with the config).
    pub fn from_settings(settings: &McpSettings) -> Option<Self> {
        let key = settings.wallet_private_key.as_ref()?;
        let signer = PrivateKeySigner::from_str(key.expose_secret().trim()).ok()?;
        Some(Self {
            signer: Arc::new(signer),
            max_per_hire: U256::from(settings.max_per_hire),
            max_per_day: U256::from(settings.max_per_day),
            spending: Arc::new(tokio::sync::Mutex::new(())),
        })
    }
}

/// Where the seeker key of a tool call comes from.
#[derive(Clone)]
enum SeekerKey {
    /// `/mcp`: the `Authorization` header the request was authenticated with.
    FromRequest,
    /// stdio: the key `hiregate mcp` was started with.
    Fixed(String),
}

/// The tool handler; one per MCP session, cheap to clone.
#[derive(Clone)]
pub struct HiregateMcp {
    gateway: Url,
    key: SeekerKey,
    wallet: Option<McpWallet>,
    store: Store,
    http: reqwest::Client,
}

impl fmt::Debug for HiregateMcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HiregateMcp")
            .field("gateway", &self.gateway.as_str())
            .field("wallet", &self.wallet)
            .finish_non_exhaustive()
    }
}

/// A tool's failure, answered as `isError: true` with the API's error shape.
struct ToolError {
    code: &'static str,
    message: String,
    details: Value,
}

impl ToolError {
    fn new(code: &'static str, message: impl Into<String>, details: Value) -> Self {
        Self {
            code,
            message: message.into(),
            details,
        }
    }

    fn into_result(self) -> CallToolResult {
        CallToolResult::structured_error(json!({"error": {
            "code": self.code,
            "message": self.message,
            "details": self.details,
        }}))
    }
}

impl From<SeekerError> for ToolError {
    fn from(error: SeekerError) -> Self {
        match error {
            SeekerError::Api {
                status,
                code,
                message,
                body,
            } => Self::new(
                "gateway_error",
                format!("{code}: {message}"),
                json!({"status": status, "gateway_error": body.get("error")}),
            ),
            other => Self::new("gateway_unreachable", other.to_string(), Value::Null),
        }
    }
}

/// A tool's arguments, read by the tool itself: arguments that do not fit its input schema are
/// the tool's error in the API's shape (`invalid_argument`, `details.arguments` saying what
/// did not fit), like every other tool failure, where rmcp's `Parameters` would answer a
/// JSON-RPC error with a bare message. The input schema a client lists comes from `T` (see
/// [`input_schema`]).
pub(crate) struct Arguments<T>(Result<T, ToolError>);

impl<T> Arguments<T> {
    fn parsed(self) -> Result<T, ToolError> {
        self.0
    }
}

impl<S, T: DeserializeOwned> FromContextPart<ToolCallContext<'_, S>> for Arguments<T> {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let arguments = context.arguments.take().unwrap_or_default();
        Ok(Self(
            serde_json::from_value(Value::Object(arguments)).map_err(|error| {
                ToolError::new(
                    "invalid_argument",
                    format!("the arguments do not fit this tool's input schema: {error}"),
                    json!({"arguments": error.to_string()}),
                )
            }),
        ))
    }
}

/// The input schema of a tool taking [`Arguments<T>`]: `T`'s, as rmcp derives it for
/// `Parameters<T>`.
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    schema_for_input::<T>()
        .unwrap_or_else(|error| panic!("input schema of {}: {error}", std::any::type_name::<T>()))
}

fn answer(outcome: Result<Value, ToolError>) -> Result<CallToolResult, ErrorData> {
    Ok(match outcome {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => error.into_result(),
    })
}

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
    fn to_json(&self) -> Value {
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

#[tool_router]
impl HiregateMcp {
    /// The handler of `/mcp`: seeker keys come from each request's `Authorization` header.
    pub fn over_http(gateway: Url, wallet: Option<McpWallet>, store: Store) -> Self {
        Self::new(gateway, SeekerKey::FromRequest, wallet, store)
    }

    /// The handler of `hiregate mcp`: every call uses `seeker_key`.
    pub fn over_stdio(
        gateway: Url,
        seeker_key: String,
        wallet: Option<McpWallet>,
        store: Store,
    ) -> Self {
        Self::new(gateway, SeekerKey::Fixed(seeker_key), wallet, store)
    }

    fn new(gateway: Url, key: SeekerKey, wallet: Option<McpWallet>, store: Store) -> Self {
        Self {
            gateway: with_trailing_slash(gateway),
            key,
            wallet,
            store,
            http: reqwest::Client::new(),
        }
    }

    #[tool(
        input_schema = input_schema::<FindWorkersInput>(),
        output_schema = find_workers_output(),
        description = "Find listed workers by task type, maximum price (atomic units) and minimum \
                       reputation (verification pass rate, 0-1)."
    )]
    async fn find_workers(
        &self,
        arguments: Arguments<FindWorkersInput>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(task_type) = input.task_type {
            query.push(("task_type", task_type));
        }
        if let Some(max_price) = input.max_price {
            query.push(("max_price", max_price));
        }
        if let Some(min) = input.min_reputation {
            query.push(("min_pass_rate", min.to_string()));
        }
        answer(self.get_json("v1/workers", &query, &extensions).await)
    }

    #[tool(
        input_schema = input_schema::<WorkerIdInput>(),
        output_schema = describe_worker_output(),
        description = "Describe one worker: its listing (tasks with prices, input and output \
                       schemas) and its signed reputation."
    )]
    async fn describe_worker(
        &self,
        arguments: Arguments<WorkerIdInput>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let id = input.worker_id.as_str();
        let outcome = async {
            let listing = self.find_listing(id, &extensions).await?;
            let reputation = self
                .get_json(&format!("v1/workers/{id}/reputation"), &[], &extensions)
                .await?;
            Ok(json!({"listing": listing, "reputation": reputation}))
        }
        .await;
        answer(outcome)
    }

    #[tool(
        input_schema = input_schema::<ProposalInput>(),
        output_schema = contract_output(),
        description = "Propose a contract (POST /v1/contracts) without paying; answers the \
                       offered contract with its price."
    )]
    async fn propose_contract(
        &self,
        arguments: Arguments<ProposalInput>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let outcome = async {
            let client = SeekerClient::without_wallet(self.gateway.clone(), self.key(&extensions)?);
            Ok(client.propose(&input.to_json()).await?.body)
        }
        .await;
        answer(outcome)
    }

    #[tool(
        input_schema = input_schema::<ProposalInput>(),
        output_schema = hire_output(),
        description = "Hire a worker: propose, pay from the MCP session's wallet within its \
                       per-hire and per-day spending limits (refused with \
                       spending_limit_exceeded before anything is signed), wait for the verdict, \
                       and answer the deliverable with its receipt."
    )]
    async fn hire(
        &self,
        arguments: Arguments<ProposalInput>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        answer(Box::pin(self.hire_inner(&input, &extensions)).await)
    }

    #[tool(
        input_schema = input_schema::<ContractIdInput>(),
        output_schema = contract_output(),description = "Show one of the seeker's contracts (GET /v1/contracts/{id}).")]
    async fn get_contract(
        &self,
        arguments: Arguments<ContractIdInput>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let outcome = async {
            let client = SeekerClient::without_wallet(self.gateway.clone(), self.key(&extensions)?);
            Ok(client.contract(&input.contract_id).await?.body)
        }
        .await;
        answer(outcome)
    }

    #[tool(
        input_schema = input_schema::<DisputeInput>(),
        output_schema = dispute_output(),description = "Open a dispute on a contract (POST /v1/contracts/{id}/disputes).")]
    async fn open_dispute(
        &self,
        arguments: Arguments<DisputeInput>,
        extensions: Extensions,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let outcome = async {
            let client = SeekerClient::without_wallet(self.gateway.clone(), self.key(&extensions)?);
            Ok(client
                .open_dispute(&input.contract_id, &input.reason, input.claim.as_ref())
                .await?)
        }
        .await;
        answer(outcome)
    }
}

#[tool_handler]
impl ServerHandler for HiregateMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("hiregate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Hire AI workers through the hiregate gateway: find_workers, describe_worker, \
                 then hire (pays within the configured spending limits) or propose_contract.",
            )
    }
}

impl HiregateMcp {
    /// The seeker key of this call.
    fn key(&self, extensions: &Extensions) -> Result<String, ToolError> {
        match &self.key {
            SeekerKey::Fixed(key) => Ok(key.clone()),
            SeekerKey::FromRequest => extensions
                .get::<Parts>()
                .and_then(|parts| parts.headers.get(header::AUTHORIZATION))
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "))
                .map(|key| key.trim().to_owned())
                .ok_or_else(|| ToolError::new("unauthorized", "no seeker API key", Value::Null)),
        }
    }

    /// The listing `id` as discovery shows it to seekers (`GET /v1/workers/{id}` is the
    /// operator's view), page by page.
    async fn find_listing(&self, id: &str, extensions: &Extensions) -> Result<Value, ToolError> {
        let mut query = vec![("limit", "200".to_owned())];
        loop {
            let page = self.get_json("v1/workers", &query, extensions).await?;
            if let Some(listing) = page["workers"]
                .as_array()
                .and_then(|workers| workers.iter().find(|worker| worker["id"] == id))
            {
                return Ok(listing.clone());
            }
            let Some(after) = page["next_after"].as_str() else {
                return Err(ToolError::new(
                    "not_found",
                    format!("no listed worker {id}"),
                    json!({"worker_id": id}),
                ));
            };
            query = vec![("limit", "200".to_owned()), ("after", after.to_owned())];
        }
    }

    async fn get_json(
        &self,
        path: &str,
        query: &[(&str, String)],
        extensions: &Extensions,
    ) -> Result<Value, ToolError> {
        let url = self
            .gateway
            .join(path)
            .map_err(|error| ToolError::new("invalid_argument", error.to_string(), Value::Null))?;
        let response = self
            .http
            .get(url)
            .bearer_auth(self.key(extensions)?)
            .query(query)
            .send()
            .await
            .map_err(SeekerError::from)?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.map_err(SeekerError::from)?;
        if status >= 400 {
            return Err(api_error(status, body));
        }
        Ok(body)
    }

    async fn hire_inner(
        &self,
        input: &ProposalInput,
        extensions: &Extensions,
    ) -> Result<Value, ToolError> {
        let Some(wallet) = &self.wallet else {
            return Err(ToolError::new(
                "mcp_wallet_not_configured",
                "this MCP server has no paying wallet: set [mcp] wallet_private_key \
                 (HIREGATE_MCP__WALLET_PRIVATE_KEY)",
                json!({"setting": "mcp.wallet_private_key"}),
            ));
        };
        let client = SeekerClient::new(
            self.gateway.clone(),
            self.key(extensions)?,
            wallet.signer.clone(),
        );
        let offered = client.propose(&input.to_json()).await?;
        let contract_id = offered.id.clone();
        let challenge = client.challenge(&contract_id).await?;
        // The limits are checked against what could be signed: the largest of the 402's offers.
        let asked = challenge
            .accepts
            .iter()
            .filter_map(|offer| U256::from_str(&offer.amount.to_string()).ok())
            .max()
            .unwrap_or(U256::ZERO);
        let payer = wallet.signer.address().to_checksum(None);
        if asked > wallet.max_per_hire {
            return Err(limit_exceeded(
                &contract_id,
                format!(
                    "contract {contract_id} costs {asked} atomic units, above the per-hire limit \
                     of {} set by [mcp] max_per_hire (HIREGATE_MCP__MAX_PER_HIRE); nothing was \
                     signed or paid",
                    wallet.max_per_hire
                ),
                "mcp.max_per_hire",
                json!({"price": asked.to_string(), "max_per_hire": wallet.max_per_hire.to_string()}),
            ));
        }
        let spending = wallet.spending.lock().await;
        let spent = self.spent_today(&payer).await?;
        if spent.saturating_add(asked) > wallet.max_per_day {
            return Err(limit_exceeded(
                &contract_id,
                format!(
                    "contract {contract_id} costs {asked} atomic units; with {spent} paid in the \
                     last 24 hours that is above the per-day limit of {} set by [mcp] \
                     max_per_day (HIREGATE_MCP__MAX_PER_DAY); nothing was signed or paid",
                    wallet.max_per_day
                ),
                "mcp.max_per_day",
                json!({
                    "price": asked.to_string(),
                    "spent_last_24h": spent.to_string(),
                    "max_per_day": wallet.max_per_day.to_string(),
                }),
            ));
        }

        let payment = client.sign_for(&challenge).await?;
        let outcome = client.execute_with_payment(&contract_id, &payment).await?;
        // The payment row exists once execute answered: the next hire's check counts it.
        drop(spending);
        if !matches!(outcome.status, 200 | 202 | 422) {
            return Err(api_error(outcome.status, outcome.body));
        }
        let started = tokio::time::Instant::now();
        let view = loop {
            let view = client.contract(&contract_id).await?;
            if !in_progress(&view.state, &view.body) || started.elapsed() > HIRE_WAIT {
                break view;
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        };
        let mut report = hire_report(&view, outcome.payment_response.as_ref());
        report["accepted"] = json!(ACCEPTED.contains(&view.state.as_str()));
        report["paid_from"] = json!(payer);
        Ok(report)
    }

    /// What the wallet paid in the last 24 hours, by the store (so it holds across restarts
    /// and instances).
    async fn spent_today(&self, payer: &str) -> Result<U256, ToolError> {
        let amounts = self
            .store
            .payment_amounts_by_payer_since(payer, Utc::now() - DAY)
            .await
            .map_err(|error| {
                ToolError::new("internal_error", format!("store: {error}"), Value::Null)
            })?;
        Ok(amounts
            .iter()
            .filter_map(|amount| U256::from_str(amount).ok())
            .fold(U256::ZERO, U256::saturating_add))
    }
}

/// A gateway error answer as a tool error.
fn api_error(status: u16, body: Value) -> ToolError {
    let text = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    SeekerError::Api {
        status,
        code: text("/error/code"),
        message: text("/error/message"),
        body,
    }
    .into()
}

/// An output schema: `properties` (all optional) plus the `error` a failed call answers.
fn output_schema(properties: Value) -> Arc<JsonObject> {
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

fn find_workers_output() -> Arc<JsonObject> {
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

fn describe_worker_output() -> Arc<JsonObject> {
    output_schema(json!({
        "listing": {"type": "object", "description": "The listing as discovery shows it."},
        "reputation": {"type": "object", "description": "The signed reputation snapshot."}
    }))
}

fn contract_output() -> Arc<JsonObject> {
    output_schema(json!({
        "contract_id": {"type": "string"},
        "state": {"type": "string"},
        "terms": {"type": "object"},
        "payment": {"type": "object"}
    }))
}

fn hire_output() -> Arc<JsonObject> {
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

fn dispute_output() -> Arc<JsonObject> {
    output_schema(json!({
        "dispute_id": {"type": "string"},
        "state": {"type": "string"}
    }))
}

/// A refusal by a spending limit; `details.setting` names the configuration key that set it, so
/// an operator knows what to raise.
fn limit_exceeded(
    contract_id: &str,
    message: String,
    setting: &str,
    mut details: Value,
) -> ToolError {
    details["contract_id"] = json!(contract_id);
    details["setting"] = json!(setting);
    ToolError::new("spending_limit_exceeded", message, details)
}
