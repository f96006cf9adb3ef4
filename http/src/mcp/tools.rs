//! The MCP server: hiregate's seeker side as Model Context Protocol tools, served over
//! streamable HTTP at `/mcp` and over stdio by `hiregate mcp`.
//!
//! Two ways to pay. `hire_worker` needs no account: it is the stable x402 resource of a
//! listing's task type ([`hiregate_engine::hire::resource`]) as a tool, paid per call by the caller's own
//! wallet as the x402 MCP transport says. Called without payment it answers the
//! `PaymentRequired` (the gateway-signed offer in `accepts[0].extra.hiregate`) as a tool result
//! with `isError: true`, in `structuredContent` and, JSON-encoded, in `content[0].text`; nothing
//! is stored. Called again with the same arguments and `_meta["x402/payment"]` (the
//! `PaymentPayload` the caller's x402 client signed), it makes the contract from the offer,
//! executes, verifies and settles it, and answers the verified deliverable with
//! `_meta["x402/payment-response"]` (the settlement), the contract id and a capability token for
//! the contract's read routes. A refused payment is a fresh `PaymentRequired` whose `error` says
//! why; a hire that failed after payment (a deliverable rejected by verification, a worker that
//! failed) is the spec's settlement failure: `isError`, the `PaymentRequired` shape with the
//! payment's own `accepted` and the API's error as `failure`, no deliverable, nothing settled.
//! The discovery tools need no account either. The other tools act on a seeker account: over
//! `/mcp` the seeker whose API key the request sends, over stdio the key `hiregate mcp` was
//! started with (optional: without one only those tools are refused).
//!
//! The tools call the engine directly (the hire service, the registry's discovery, the
//! reputation book) as the caller's seeker, the same calls the REST handlers make, so every rule
//! of the API applies to them; nothing goes through HTTP. Over `/mcp` the caller is the seeker
//! the request was authenticated as; `hiregate mcp` runs the engine in its own process on the
//! gateway's configuration (database, chains, signing key) and authenticates its seeker key on
//! every call. `hire` pays from the wallet of the `[mcp]` section (the gateway-wallet mode,
//! custodial: for a trusted local agent over stdio); before signing anything it
//! checks the 402's amount against `mcp.max_per_hire` and, with the wallet's payments of the last
//! 24 hours as recorded in the store, against `mcp.max_per_day`. A refusal is a tool error
//! (`isError: true`) whose code is `spending_limit_exceeded` and whose message and
//! `details.setting` name the limit's configuration key; nothing is signed then. The hires
//! of one process are serialized from that check until their payment is recorded, so concurrent
//! calls cannot pass the day limit together; instances sharing one wallet each hold their own
//! lock, so give each instance its own wallet.
//!
//! Tool errors carry the API's shape, `{"error": {"code", "message", "details"}}`, arguments that
//! do not fit a tool's input schema included (`invalid_argument`, see [`Arguments`]). What the
//! engine refuses is `gateway_error`, with the API's `status` and `error` in its details, as
//! the API would have answered it.

use std::{fmt, str::FromStr, sync::Arc, time::Duration};

use base64::Engine as _;

use alloy::{primitives::U256, signers::local::PrivateKeySigner};
use axum::http::request::Parts;
use chrono::Utc;
use hiregate_payments::{
    AUTH_CAPTURE_SCHEME, AuthCaptureSignOptions, PaymentPayload, PaymentRequired,
    Permit2SignOptions, encode_header, permit2::METHOD_PERMIT2, sign_auth_capture_payment,
    sign_exact_payment, sign_permit2_payment,
};
use rmcp::{
    ErrorData, ServerHandler,
    handler::server::{
        common::{FromContextPart, schema_for_input},
        tool::ToolCallContext,
    },
    model::{
        CallToolResult, Extensions, Implementation, JsonObject, MetaObject, RequestMetaObject,
        ServerCapabilities, ServerConfig,
    },
    schemars::JsonSchema,
    tool, tool_handler, tool_router,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

pub use super::report::{ACCEPTED, hire_report, in_progress};
use super::schemas::*;
pub use super::wallet::McpWallet;
use crate::{
    answers, error::ApiError, reputation::reputation_view, state::AppState,
    workers::discovery_page, x402_resource::access_fields,
};
use hiregate_contracts::id::{PrincipalId, WorkerId};
use hiregate_engine::hire::{
    ContractRequest,
    disputes::DisputeRequest,
    execute::ExecuteRequest,
    outcome::{Execution, FailureKind, Outcome},
    resource::{ResourceExecution, ResourceRequest},
};
use hiregate_store::keys::{ApiKey, Role};

/// The `_meta` key of the `PaymentPayload` on a paid tool call (x402 MCP transport).
pub const PAYMENT_META_KEY: &str = "x402/payment";
/// The `_meta` key of the settlement response on a paid tool result (x402 MCP transport).
pub const PAYMENT_RESPONSE_META_KEY: &str = "x402/payment-response";

/// How often `hire` looks at a paid contract still in progress.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How long `hire` waits for a verdict before answering with the contract as it stands.
const HIRE_WAIT: Duration = Duration::from_secs(120);
/// How often `hire_worker` asks again about paid work still under way.
const HIRE_WORKER_POLL: Duration = Duration::from_secs(1);
/// Window of the per-day limit.
const DAY: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The seeker an `/mcp` request was authenticated as, put in the request's extensions by the
/// route's seeker check for the tools to act as.
#[derive(Debug, Clone)]
pub struct McpSeeker(pub PrincipalId);

/// Who the tools act as.
#[derive(Clone)]
enum SeekerKey {
    /// `/mcp`: the seeker each request was authenticated as ([`McpSeeker`]).
    FromRequest,
    /// stdio: the key `hiregate mcp` was started with, if any, authenticated on every call.
    Fixed(Option<String>),
}

/// The tool handler; one per MCP session, cheap to clone.
#[derive(Clone)]
pub struct HiregateMcp {
    services: AppState,
    key: SeekerKey,
    wallet: Option<McpWallet>,
}

impl fmt::Debug for HiregateMcp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HiregateMcp")
            .field("gateway", &self.services.hire.base_url().as_str())
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

impl From<ApiError> for ToolError {
    /// What the API would have answered: `gateway_error` with its status and error object.
    fn from(error: ApiError) -> Self {
        error.log_if_fault();
        let status = error.status().as_u16();
        let object = error.error_object();
        api_error(status, &json!({ "error": object }))
    }
}

impl From<hiregate_engine::hire::error::HireError> for ToolError {
    fn from(error: hiregate_engine::hire::error::HireError) -> Self {
        ApiError::from(error).into()
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

#[tool_router]
impl HiregateMcp {
    /// The handler of `/mcp`: each call acts as the seeker its request was authenticated as.
    pub fn over_http(services: AppState, wallet: Option<McpWallet>) -> Self {
        Self {
            services,
            key: SeekerKey::FromRequest,
            wallet,
        }
    }

    /// The handler of `hiregate mcp`: every call acts as the seeker of `seeker_key` (without
    /// one, only the tools that need no account answer).
    pub fn over_stdio(
        services: AppState,
        seeker_key: Option<String>,
        wallet: Option<McpWallet>,
    ) -> Self {
        Self {
            services,
            key: SeekerKey::Fixed(seeker_key),
            wallet,
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
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let mut query = serde_json::Map::new();
        if let Some(task_type) = input.task_type {
            query.insert("task_type".to_owned(), json!(task_type));
        }
        if let Some(max_price) = input.max_price {
            query.insert("max_price".to_owned(), json!(max_price));
        }
        if let Some(min) = input.min_reputation {
            query.insert("min_pass_rate".to_owned(), json!(min));
        }
        answer(self.discover(query).await)
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
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        let id = input.worker_id.as_str();
        let outcome = async {
            let listing = self.find_listing(id).await?;
            let reputation = reputation_view(&self.services, id).await?;
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
            let seeker = self.seeker(&extensions).await?;
            Ok(self.propose(&seeker, &input).await?.1)
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
        input_schema = input_schema::<HireWorkerInput>(),
        output_schema = hire_worker_output(),
        description = "Hire a worker, paid by your own wallet with x402 (no account, no API \
                       key). Call it without payment: the result is the x402 PaymentRequired \
                       (isError, structuredContent), nothing is stored. Call it again with the \
                       same arguments and _meta[\"x402/payment\"] = the PaymentPayload your x402 \
                       client signed for accepts[0] (its extra echoed unchanged): the contract \
                       is made, executed and verified, the payment settled only for a verified \
                       deliverable; the result is the deliverable with \
                       _meta[\"x402/payment-response\"], contract_id and a capability token."
    )]
    async fn hire_worker(
        &self,
        arguments: Arguments<HireWorkerInput>,
        meta: RequestMetaObject,
    ) -> Result<CallToolResult, ErrorData> {
        let input = match arguments.parsed() {
            Ok(input) => input,
            Err(error) => return answer(Err(error)),
        };
        Ok(Box::pin(self.hire_worker_inner(input, &meta)).await)
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
            let seeker = self.seeker(&extensions).await?;
            self.contract_view(&seeker, &input.contract_id).await
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
            let seeker = self.seeker(&extensions).await?;
            self.dispute(&seeker, &input).await
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
                 then hire_worker, paid per call by your own wallet with x402 (no account). \
                 With a seeker API key: propose_contract, get_contract, open_dispute, and hire \
                 (pays from the server's configured wallet within its spending limits).",
            )
    }
}

impl HiregateMcp {
    /// The seeker this call acts as.
    async fn seeker(&self, extensions: &Extensions) -> Result<PrincipalId, ToolError> {
        let unauthorized = || {
            ToolError::new(
                "unauthorized",
                "this tool acts on a seeker account: send its API key (Authorization: Bearer \
                 hg_sk_…; HIREGATE_SEEKER_KEY for hiregate mcp). hire_worker and the \
                 discovery tools need none",
                Value::Null,
            )
        };
        match &self.key {
            SeekerKey::FromRequest => extensions
                .get::<Parts>()
                .and_then(|parts| parts.extensions.get::<McpSeeker>())
                .map(|seeker| seeker.0.clone())
                .ok_or_else(unauthorized),
            // As the API checks a bearer key: malformed or unknown 401, another role 403.
            SeekerKey::Fixed(None) => Err(unauthorized()),
            SeekerKey::Fixed(Some(key)) => {
                let key = ApiKey::parse(key).map_err(|_| ApiError::InvalidCredentials)?;
                let record = self
                    .services
                    .api_keys
                    .find(&self.services.store, &key.hash())
                    .await
                    .map_err(ApiError::from)?
                    .ok_or(ApiError::InvalidCredentials)?;
                if record.role != Role::Seeker {
                    return Err(ApiError::Forbidden {
                        required: Role::Seeker,
                    }
                    .into());
                }
                Ok(record.principal_id.clone())
            }
        }
    }

    /// One discovery page, as `GET /v1/workers` with `query` answers it.
    async fn discover(&self, query: serde_json::Map<String, Value>) -> Result<Value, ToolError> {
        let query = serde_json::from_value(Value::Object(query))
            .map_err(|error| ApiError::InvalidQuery(error.to_string()))?;
        let page = discovery_page(&self.services, query).await?;
        serde_json::to_value(page).map_err(|error| ApiError::internal(error).into())
    }

    /// The listing `id` as discovery shows it to seekers (`GET /v1/workers/{id}` is the
    /// operator's view), page by page.
    async fn find_listing(&self, id: &str) -> Result<Value, ToolError> {
        let mut after: Option<String> = None;
        loop {
            let mut query = serde_json::Map::new();
            query.insert("limit".to_owned(), json!(200));
            if let Some(after) = &after {
                query.insert("after".to_owned(), json!(after));
            }
            let page = self.discover(query).await?;
            if let Some(listing) = page["workers"]
                .as_array()
                .and_then(|workers| workers.iter().find(|worker| worker["id"] == id))
            {
                return Ok(listing.clone());
            }
            let Some(next) = page["next_after"].as_str() else {
                return Err(ToolError::new(
                    "not_found",
                    format!("no listed worker {id}"),
                    json!({"worker_id": id}),
                ));
            };
            after = Some(next.to_owned());
        }
    }

    /// `POST /v1/contracts` for `seeker`: the contract id and the created contract's JSON.
    async fn propose(
        &self,
        seeker: &PrincipalId,
        input: &ProposalInput,
    ) -> Result<(String, Value), ToolError> {
        let request: ContractRequest = serde_json::from_value(input.to_json())
            .map_err(|error| ApiError::InvalidBody(error.to_string()))?;
        let created = self
            .services
            .hire
            .create_contract(seeker, request, &correlation_id())
            .await?;
        Ok((created.contract_id.to_string(), created.body))
    }

    /// `GET /v1/contracts/{id}` for `seeker`.
    async fn contract_view(&self, seeker: &PrincipalId, id: &str) -> Result<Value, ToolError> {
        let id = parse_contract_id(id)?;
        Ok(self.services.hire.view_contract(seeker, &id).await?)
    }

    /// `POST /v1/contracts/{id}/disputes` for `seeker`: the dispute's JSON.
    async fn dispute(
        &self,
        seeker: &PrincipalId,
        input: &DisputeInput,
    ) -> Result<Value, ToolError> {
        let id = parse_contract_id(&input.contract_id)?;
        let hire = &self.services.hire;
        hire.authorize_dispute(seeker, &id).await?;
        let request: DisputeRequest =
            serde_json::from_value(json!({"reason": input.reason, "claim": input.claim}))
                .map_err(|error| ApiError::InvalidBody(error.to_string()))?;
        Ok(hire
            .open_dispute(seeker, &id, request, &correlation_id())
            .await?)
    }

    /// An execute of `contract_id` by `seeker`, with `payment` if any.
    async fn execute(
        &self,
        seeker: &PrincipalId,
        contract_id: &str,
        payment: Option<String>,
    ) -> Execution {
        self.services
            .hire
            .execute(ExecuteRequest {
                contract_id: contract_id.to_owned(),
                seeker: seeker.clone(),
                body: bytes::Bytes::new(),
                payment_signature: payment,
                correlation_id: correlation_id(),
                secrets: None,
            })
            .await
    }

    /// The payment the unpaid execute of `contract_id` demands.
    async fn challenge(
        &self,
        seeker: &PrincipalId,
        contract_id: &str,
    ) -> Result<PaymentRequired, ToolError> {
        match self.execute(seeker, contract_id, None).await.result {
            Ok(Outcome::PaymentRequired(demand)) => Ok(demand.challenge.clone()),
            Ok(other) => Err(unexpected(other)),
            Err(error) => Err(error.into()),
        }
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
        let seeker = self.seeker(extensions).await?;
        let (contract_id, _) = self.propose(&seeker, input).await?;
        let challenge = self.challenge(&seeker, &contract_id).await?;
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

        let payment = sign_for(&wallet.signer, &challenge).await?;
        let paid = self
            .execute(&seeker, &contract_id, Some(encode_header(&payment)))
            .await;
        // The payment row exists once execute answered: the next hire's check counts it.
        drop(spending);
        let payment_response = match paid.result {
            // Accepted, work under way, or rejected by verification: the contract tells the rest.
            Ok(Outcome::Accepted(work)) => work.payment_response,
            Ok(Outcome::Pending(_) | Outcome::InProgress(_) | Outcome::Queued(_)) => None,
            Ok(Outcome::Failed(failure)) if failure.kind == FailureKind::Rejected => None,
            Ok(other) => return Err(unexpected(other)),
            Err(error) => return Err(error.into()),
        };
        let started = tokio::time::Instant::now();
        let view = loop {
            let body = self.contract_view(&seeker, &contract_id).await?;
            let state = body["state"].as_str().unwrap_or_default().to_owned();
            if !in_progress(&state, &body) || started.elapsed() > HIRE_WAIT {
                break (state, body);
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        };
        let (state, body) = view;
        let mut report = hire_report(&contract_id, &state, &body, payment_response.as_ref());
        report["accepted"] = json!(ACCEPTED.contains(&state.as_str()));
        report["paid_from"] = json!(payer);
        Ok(report)
    }

    /// `hire_worker`: the stable resource's call with the payment of `_meta`, if any; while the
    /// paid work is under way the same call is made again (the engine answers a repeat from
    /// what is stored and never runs the work twice), up to [`HIRE_WAIT`].
    async fn hire_worker_inner(
        &self,
        input: HireWorkerInput,
        meta: &RequestMetaObject,
    ) -> CallToolResult {
        let Ok(worker_id) = input.worker_id.trim().parse::<WorkerId>() else {
            return ToolError::from(ApiError::NotFound { resource: "worker" }).into_result();
        };
        let payment = meta.get(PAYMENT_META_KEY).filter(|v| !v.is_null()).cloned();
        let body = match serde_json::to_vec(&input.input) {
            Ok(body) => bytes::Bytes::from(body),
            Err(error) => return ToolError::from(ApiError::internal(error)).into_result(),
        };
        let request = ResourceRequest {
            worker_id,
            task_type: input.task_type,
            body,
            payment_signature: payment.as_ref().map(payment_header),
            webhook_url: None,
            correlation_id: correlation_id(),
        };
        let started = tokio::time::Instant::now();
        let mut hired = self.services.hire.hire_resource(request.clone()).await;
        while under_way(&hired) && started.elapsed() < HIRE_WAIT {
            tokio::time::sleep(HIRE_WORKER_POLL).await;
            hired = self.services.hire.hire_resource(request.clone()).await;
        }
        self.hire_worker_answer(hired, &request, payment.as_ref())
    }

    /// A call of the stable resource as the x402 MCP transport answers it (see the module doc).
    fn hire_worker_answer(
        &self,
        hired: ResourceExecution,
        request: &ResourceRequest,
        payment: Option<&Value>,
    ) -> CallToolResult {
        let ResourceExecution {
            execution,
            contract_id,
            capability,
            ..
        } = hired;
        let access = match (&contract_id, &capability) {
            (Some(contract_id), Some(token)) => access_fields(&self.services, contract_id, token),
            _ => serde_json::Map::new(),
        };
        let outcome = match execution.result {
            Ok(outcome) => outcome,
            Err(error) => return ToolError::from(error).into_result(),
        };
        match outcome {
            Outcome::PaymentRequired(demand) => payment_required_result(&demand.challenge),
            Outcome::Accepted(work) => {
                let settlement = work.payment_response.clone();
                let (_, mut body) = answers::status_and_body(Outcome::Accepted(work));
                if let Some(object) = body.as_object_mut() {
                    object.extend(access);
                }
                // Settled now, or (an acceptance window) later: the response only once it is.
                with_payment_response(CallToolResult::structured(body), settlement)
            }
            outcome @ (Outcome::Pending(_) | Outcome::InProgress(_) | Outcome::Queued(_)) => {
                // Paid, the verdict not in yet after HIRE_WAIT: the contract to follow with the
                // capability token; nothing is settled before the deliverable is verified.
                let (_, mut body) = answers::status_and_body(outcome);
                if let Some(object) = body.as_object_mut() {
                    object.extend(access);
                }
                CallToolResult::structured(body)
            }
            outcome @ (Outcome::Failed(_) | Outcome::SettlementFailed(_)) => {
                let settlement = match &outcome {
                    Outcome::SettlementFailed(failure) => failure.settlement.clone(),
                    _ => None,
                };
                let (status, body) = answers::status_and_body(outcome);
                let failure = body.get("error").cloned().unwrap_or(Value::Null);
                let reason = format!(
                    "{}: {}",
                    failure["code"].as_str().unwrap_or("hire_failed"),
                    failure["message"].as_str().unwrap_or_default()
                );
                let resource = payment
                    .and_then(|payment| payment.get("resource"))
                    .filter(|resource| resource.is_object())
                    .cloned()
                    .unwrap_or_else(|| {
                        json!({"url": self.services.hire.resource_url(
                            request.worker_id.as_str(),
                            &request.task_type,
                        )})
                    });
                let accepts: Vec<Value> = payment
                    .and_then(|payment| payment.get("accepted"))
                    .cloned()
                    .into_iter()
                    .collect();
                let mut object = json!({
                    "x402Version": 2,
                    "error": reason,
                    "resource": resource,
                    "accepts": accepts,
                    "http_status": status.as_u16(),
                    "failure": failure,
                });
                if let Some(fields) = object.as_object_mut() {
                    fields.extend(access);
                }
                with_payment_response(CallToolResult::structured_error(object), settlement)
            }
        }
    }

    /// What the wallet paid in the last 24 hours, by the store (so it holds across restarts
    /// and instances).
    async fn spent_today(&self, payer: &str) -> Result<U256, ToolError> {
        let amounts = self
            .services
            .store
            .payment_amounts_by_payer_since(payer, self.services.hire.clock().now() - DAY)
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

/// Whether a paid hire is still under way (the worker works, or the engine is between steps).
fn under_way(hired: &ResourceExecution) -> bool {
    matches!(
        hired.execution.result,
        Ok(Outcome::Pending(_) | Outcome::InProgress(_) | Outcome::Queued(_))
    )
}

/// `PAYMENT-SIGNATURE` of the `PaymentPayload` a tool call carries in `_meta["x402/payment"]`:
/// base64 of its JSON, which the engine reads as it reads the HTTP header. Python's `x402.mcp`
/// sends its pydantic dump with explicit `null`s for unset optional fields (`extensions` when the
/// offer had none, `resource.mimeType`, …), and the wire type refuses `extensions: null`; those
/// `null`s are dropped here, on the payload's own fields and on `resource` and `accepted` only:
/// `accepted.extra` (the signed offer) and `payload` (the signature) stay as sent.
fn payment_header(payment: &Value) -> String {
    let mut payment = payment.clone();
    if let Some(object) = payment.as_object_mut() {
        object.retain(|_, value| !value.is_null());
        for key in ["resource", "accepted"] {
            if let Some(inner) = object.get_mut(key).and_then(Value::as_object_mut) {
                inner.retain(|_, value| !value.is_null());
            }
        }
    }
    base64::engine::general_purpose::STANDARD.encode(payment.to_string())
}

/// The x402 MCP transport's payment-required result: `isError`, the `PaymentRequired` as
/// `structuredContent` and as the JSON text of `content[0]`.
fn payment_required_result(challenge: &PaymentRequired) -> CallToolResult {
    match serde_json::to_value(challenge) {
        Ok(value) => CallToolResult::structured_error(value),
        Err(error) => ToolError::from(ApiError::internal(error)).into_result(),
    }
}

/// `result` with `settlement`, if any, as `_meta["x402/payment-response"]`.
fn with_payment_response(
    mut result: CallToolResult,
    settlement: Option<hiregate_payments::SettleResponse>,
) -> CallToolResult {
    if let Some(settlement) = settlement
        && let Ok(settlement) = serde_json::to_value(settlement)
    {
        let mut meta = MetaObject::new();
        meta.insert(PAYMENT_RESPONSE_META_KEY.to_owned(), settlement);
        result.meta = Some(meta);
    }
    result
}

/// An answer of the API (its status and body) as a tool error: `gateway_error`, the API's code
/// and message in the message, its status and `error` in the details.
fn api_error(status: u16, body: &Value) -> ToolError {
    let text = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    ToolError::new(
        "gateway_error",
        format!("{}: {}", text("/error/code"), text("/error/message")),
        json!({"status": status, "gateway_error": body.get("error")}),
    )
}

/// An outcome the tool did not ask for (a payment refused, a failed hire), as the API answers
/// it.
fn unexpected(outcome: Outcome) -> ToolError {
    let (status, body) = answers::status_and_body(outcome);
    api_error(status.as_u16(), &body)
}

/// The contract id of a path, or the API's 404 for one that is not a contract id.
fn parse_contract_id(raw: &str) -> Result<String, ApiError> {
    raw.trim()
        .parse::<hiregate_contracts::id::ContractId>()
        .map(|id| id.to_string())
        .map_err(|_| ApiError::NotFound {
            resource: "contract",
        })
}

/// A correlation id for the engine calls of one tool call.
fn correlation_id() -> String {
    format!("mcp_{}", ulid::Ulid::new())
}

/// A payment for the first `exact` or `auth-capture` offer of `challenge` on an EVM network,
/// signed by `signer` as the official `@x402/evm` client signs it, echoing its extensions.
async fn sign_for(
    signer: &PrivateKeySigner,
    challenge: &PaymentRequired,
) -> Result<PaymentPayload, ToolError> {
    let offer = challenge
        .accepts
        .iter()
        .find(|offer| {
            (offer.scheme == "exact" || offer.scheme == AUTH_CAPTURE_SCHEME)
                && offer.network.as_str().starts_with("eip155:")
        })
        .ok_or_else(|| {
            ToolError::new(
                "no_payable_offer",
                "the contract offers no exact or auth-capture payment on an EVM network",
                Value::Null,
            )
        })?;
    let now = u64::try_from(Utc::now().timestamp()).unwrap_or_default();
    let resource = Some(challenge.resource.clone());
    let signed = if offer.scheme == AUTH_CAPTURE_SCHEME {
        sign_auth_capture_payment(
            signer,
            offer,
            resource,
            now,
            &AuthCaptureSignOptions::default(),
        )
        .await
    } else if offer.asset_transfer_method() == METHOD_PERMIT2 {
        // Any ERC-20: the wallet must have approved Permit2 on the token once.
        sign_permit2_payment(signer, offer, resource, now, &Permit2SignOptions::default()).await
    } else {
        sign_exact_payment(signer, offer, resource, now).await
    };
    let mut payment = signed
        .map_err(|error| ToolError::new("payment_not_signed", error.to_string(), Value::Null))?;
    payment.extensions = challenge.extensions.clone();
    Ok(payment)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payment_meta_becomes_the_header_without_pydantic_nulls_but_with_the_offer_intact() {
        let sent = json!({
            "x402Version": 2,
            "extensions": null,
            "resource": {"url": "https://gw/x402/workers/wk_1/summarize", "mimeType": null},
            "accepted": {
                "scheme": "exact",
                "network": "eip155:31337",
                "amount": "1",
                "asset": "0x0000000000000000000000000000000000000001",
                "payTo": "0x0000000000000000000000000000000000000002",
                "maxTimeoutSeconds": 60,
                "extra": {"name": "USD", "version": "2", "hiregate": {"terms": {"note": null}}}
            },
            "payload": {"signature": "0x00", "authorization": {"nonce": null}}
        });
        let header = payment_header(&sent);
        let decoded: Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(&header)
                .unwrap(),
        )
        .unwrap();
        assert!(decoded.get("extensions").is_none());
        assert!(decoded["resource"].get("mimeType").is_none());
        // The signed offer and the signature are the caller's, null or not.
        assert_eq!(decoded["accepted"]["extra"], sent["accepted"]["extra"]);
        assert_eq!(decoded["payload"], sent["payload"]);
        // And the engine reads it as the wire type.
        let payload: PaymentPayload = hiregate_payments::decode_header(&header).unwrap();
        assert_eq!(payload.accepted.scheme, "exact");
        // Without the clean-up the wire type refuses `extensions: null`.
        let raw = base64::engine::general_purpose::STANDARD.encode(sent.to_string());
        assert!(hiregate_payments::decode_header::<PaymentPayload>(&raw).is_err());
    }
}
