//! `hiregate`: the binary. It loads the configuration, assembles the engine
//! (`hiregate-engine`) and its HTTP edge (`hiregate-http`) and runs them; it also carries the
//! commands that are not the server: migrations, keys, reconcile, the demo, the local devnet,
//! the seeker CLI and the MCP server over stdio.
//!
//! | module | role |
//! |---|---|
//! | [`cli`] | `hiregate serve / migrate / keys create / check-config / facilitator / reconcile / demo / devnet / seeker / mcp` |
//! | [`config`] | where settings come from: `config.default.toml` → file → `HIREGATE_*`, validated by the engine |
//! | [`startup`] | [`startup::App`]: build (store, migrations, services, router, bound listener), run |
//! | [`telemetry`] | tracing subscriber (pretty/JSON, env filter), test subscriber |
//! | [`shutdown`] | SIGINT/SIGTERM → one `CancellationToken` |
//! | [`allocator`] | glibc malloc for a long-running server: capped arenas, freed memory handed back periodically |
//! | [`seeker_cli`] | `hiregate seeker workers / hire / contracts / contract / dispute` over the SDK's seeker client, with the spending guard |
//! | `demo` (feature `devnet`, on by default) | `hiregate demo`: anvil + gateway + example workers, a paid hire and a rejected one |
//! | `devnet_cli` (feature `devnet`) | `hiregate devnet up / balance`: a local chain and a configuration for your own gateway |
//!
//! The crates, top down (each depends only on those below it):
//!
//! ```text
//! hiregate (this crate: CLI, config loading, startup, telemetry, demo, seeker CLI)
//!   └─ hiregate-http (axum API, errors, extractors, OpenAPI, console, A2A, MCP)
//!        └─ hiregate-engine (hire lifecycle, adapters, registry, ledger, webhooks, settings)
//!             └─ hiregate-store (SQL for SQLite and PostgreSQL, migrations, event bus)
//!                  └─ hiregate-contracts (pure types, state machine) · hiregate-payments (x402, chain)
//! ```
//!
//! Main flow: `main` parses the CLI → [`config::load`] → [`telemetry::init`] →
//! [`startup::App::build`] (connect + migrate, bind) → [`startup::App::run_until_stopped`]
//! (axum server + the engine's background loops) until the shutdown token fires.

pub mod allocator;
pub mod cli;
pub mod config;
#[cfg(feature = "devnet")]
pub mod demo;
#[cfg(feature = "devnet")]
pub mod devnet_cli;
pub mod seeker_cli;
pub mod shutdown;
pub mod startup;
pub mod telemetry;
