//! Typed seeker client (discover workers, propose a contract, pay its 402, execute) —
//! PENDING, not built yet.
//!
//! It will sit on `hiregate-payments` (x402 v2 wire types and the `exact` EVM scheme signed
//! with an alloy signer) behind this crate's `seeker` feature. Until then seekers can use
//! any standard x402 v2 client against the gateway's `…/execute`, and
//! [`crate::webhook::WebhookSecret::verify`] for the gateway's webhooks.
