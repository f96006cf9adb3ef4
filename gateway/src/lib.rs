//! hiregate gateway: the HTTP API, store, background loops, configuration and CLI of the
//! `hiregate` binary.
//!
//! | module | role |
//! |---|---|
//! | [`allocator`] | glibc malloc for a long-running server: capped arenas, freed memory handed back periodically |
//! | [`cli`] | `hiregate serve / migrate / keys create / check-config / facilitator / reconcile / demo / seeker` |
//! | [`seeker_cli`] | `hiregate seeker workers / hire / contracts / contract / dispute` over the SDK's seeker client, with the spending guard |
//! | [`config`] | layered settings (`config.default.toml` → file → `HIREGATE_*`), validation |
//! | `demo` (feature `devnet`, on by default) | `hiregate demo`: anvil + gateway + example workers, a paid hire and a rejected one |
//! | `devnet_cli` (feature `devnet`) | `hiregate devnet up / balance`: a local chain and a configuration for your own gateway |
//! | [`telemetry`] | tracing subscriber (pretty/JSON, env filter), test subscriber |
//! | [`shutdown`] | SIGINT/SIGTERM → one `CancellationToken` |
//! | [`startup`] | [`startup::App`]: build (store, migrations, client, router, bound listener), run |
//! | [`state`] | [`state::AppState`] shared by handlers and loops |
//! | [`error`] | [`error::ApiError`]: stable codes, `{"error":{code,message,details}}` |
//! | [`http`] | routers (`ops`, `admin`, `keys`, `workers`, `contracts`, …) registered through `openapi::Routes`, the OpenAPI document (`/openapi.json`) and its viewer (`/docs`), the web console (`/console`, embedded assets), the stable x402 resources (`/x402/workers/{id}/{task}`) and their discovery list (`/discovery/resources`), the A2A JSON-RPC interfaces with the a2a-x402 extension (`/a2a`, `/a2a/workers/{id}`), middleware, extractors (JSON, auth: API keys, contract capability tokens and sign-in-with-x wallet proofs, `http::siwx`) |
//! | [`auth`] | issuing, revoking and rotating API keys, the key cache (the key values, roles and callback secrets are `hiregate_store::keys`) |
//! | [`registry`] | worker listings: register/probe/update/retire, discovery, health loop; listing metadata (name, description, input schema, examples) |
//! | [`agent_cards`] | A2A v1.0 Agent Cards of healthy listings and of the marketplace, naming their A2A JSON-RPC interfaces, signed by the gateway (detached JWS) |
//! | [`reputation`] | signed reputation snapshots of worker listings from verified, paid outcomes (cached briefly); discovery's reputation sort and filters |
//! | [`outbound`] | the one SSRF-filtering HTTP client for every outbound call |
//! | [`readiness`] | `/readyz` check trait |
//! | [`facilitator`] | `facilitator.mode` → embedded `LocalFacilitator` or HTTP client; its `/readyz` check |
//! | [`key_turns`] | the chain keys this gateway sends from (relayer, escrow operator): which other instances send from them too (PostgreSQL advisory locks) and the turns their sends take then |
//! | [`assets`] | token metadata (EIP-712 domain, decimals, symbol) and how `exact` payments move the token (EIP-3009, or Permit2 for any ERC-20) from config or the chain |
//! | [`signing`] | the gateway's Ed25519 signing key (file or ephemeral) → JWKS |
//! | [`adapters`] | worker protocols behind `WorkerProtocol`: hire, wattswarm (ExecuteRequest, transport retries on one execution_id), superwire (SSE relay with Last-Event-ID resume, cancel, seeker secrets from `X-Hiregate-Secrets` into the executor body only) |
//! | [`hire`] | `POST /v1/contracts`, the contract view, and execute: 402 → pay → forward → verify → settle; the stable x402 resource per listing and task type (a signed offer in the 402, the contract made when it is paid); disputes (replay, arbiter decisions, the silent arbiter's void) |
//! | [`metrics`] | per-app Prometheus registry |
//! | [`ledger`] | the audit of money: `hiregate reconcile` / `GET /v1/admin/reconcile` (store vs chain for a block range), settlement metrics from the event bus |
//! | [`mcp`] | the MCP server (`/mcp` over streamable HTTP, `hiregate mcp` over stdio): `hire_worker`, the stable x402 resource as a tool paid by the caller's own wallet per the x402 MCP transport (no key), and discovery; with a seeker key the account tools, where `hire` pays from the `[mcp]` wallet within its spending limits |
//! | [`events`] | the SSE stream of `GET /v1/contracts/{id}/events`: replay from the store, then live events from its bus |
//! | [`webhooks`] | seeker webhooks: secrets, signed messages, the leased delivery loop, retries and dead letters |
//!
//! Main flow: `main` parses the CLI → [`config::Settings::load`] → [`telemetry::init`] →
//! [`startup::App::build`] (connect + migrate, bind) → [`startup::App::run_until_stopped`]
//! (axum server + [`registry::health::run_health_checks`]) until the shutdown token fires.
//! A request passes request-id → trace → CORS → metrics → timeout → body limit → handler;
//! handlers authenticate through extractors ([`http::extract::Seeker`], `Operator`, `Admin`),
//! call a service ([`registry::WorkerRegistry`], [`hire::HireService`]) that uses the
//! [`hiregate_store::Store`], the [`outbound::OutboundClient`] and the facilitator, and answer JSON or an
//! [`error::ApiError`].
//!
//! The paid hire: `POST /v1/contracts` signs terms (contracts crate) and fixes the x402 offer;
//! `POST /v1/contracts/{id}/execute` answers 402, takes `PAYMENT-SIGNATURE`, verifies it with the
//! facilitator, stores payment + `paid` atomically, forwards to the worker through its protocol
//! adapter, stores and verifies the deliverable, then settles with the same payload and answers
//! with `PAYMENT-RESPONSE` (see [`hire::execute`]).

pub mod adapters;
pub mod agent_cards;
pub mod allocator;
pub mod assets;
pub mod auth;
pub mod cli;
pub mod config;
#[cfg(feature = "devnet")]
pub mod demo;
#[cfg(feature = "devnet")]
pub mod devnet_cli;
pub mod error;
pub mod events;
pub mod facilitator;
pub mod hire;
pub mod http;
pub mod key_turns;
pub mod ledger;
pub mod mcp;
pub mod metrics;
pub mod outbound;
pub mod readiness;
pub mod registry;
pub mod reputation;
pub mod seeker_cli;
pub mod shutdown;
pub mod signing;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod webhooks;
