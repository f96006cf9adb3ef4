//! hiregate engine: the hire lifecycle and everything it runs on, with no HTTP server types.
//! Transports (the REST API, A2A and MCP in `hiregate-http`) call it and render its answers
//! ([`hire::outcome::Outcome`], [`hire::error::HireError`]); the `hiregate` binary assembles it.
//!
//! | module | role |
//! |---|---|
//! | [`services`] | [`services::Engine`]: the services above assembled from settings on a connected store, shared by every transport |
//! | [`settings`] | the validated settings (`config.default.toml` → file → `HIREGATE_*`, layered by the binary) |
//! | [`hire`] | the paid hire: offer → payment → forward → verify → settle, the stable x402 resource, disputes, recovery and the background sweeps; answers [`hire::outcome::Outcome`] or [`hire::error::HireError`] |
//! | [`adapters`] | worker protocols behind `WorkerProtocol`: hire, wattswarm (ExecuteRequest, transport retries on one execution_id), superwire (SSE relay with Last-Event-ID resume, cancel, seeker secrets into the executor body only) |
//! | [`registry`] | worker listings: register/probe/update/retire, discovery, health loop; listing metadata |
//! | [`reputation`] | signed reputation snapshots of listings from verified, paid outcomes (cached briefly) |
//! | [`ledger`] | the audit of money: store vs chain for a block range, settlement metrics from the event bus |
//! | [`webhooks`] | seeker webhooks: secrets, signed messages, the leased delivery loop, retries and dead letters |
//! | [`auth`] | issuing, revoking and rotating API keys, the key cache |
//! | [`clock`] | the wall clock the engine is given ([`clock::Clock`]; tests move a [`clock::TestClock`]); money deadlines read the chain's clock |
//! | [`assets`] | token metadata (EIP-712 domain, decimals, symbol) and how `exact` payments move the token (EIP-3009, or Permit2) |
//! | [`facilitator`] | `facilitator.mode` → embedded `LocalFacilitator` or HTTP client, metered; its readiness check |
//! | [`key_turns`] | the chain keys this gateway sends from and the turns their sends take across instances |
//! | [`signing`] | the gateway's Ed25519 signing key (file or ephemeral) → JWKS |
//! | [`outbound`] | the one SSRF-filtering HTTP client for every outbound call |
//! | [`metrics`] | per-app Prometheus registry |
//! | [`readiness`] | the `/readyz` check trait |
//!
//! Dependencies point down only: `hiregate-http` → this crate → `hiregate-store` →
//! `hiregate-contracts` / `hiregate-payments`.

pub mod adapters;
pub mod assets;
pub mod auth;
pub mod clock;
pub mod facilitator;
pub mod hire;
pub mod key_turns;
pub mod ledger;
pub mod metrics;
pub mod outbound;
pub mod readiness;
pub mod registry;
pub mod reputation;
pub mod services;
pub mod settings;
pub mod signing;
pub mod webhooks;
