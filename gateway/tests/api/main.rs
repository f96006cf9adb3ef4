//! Gateway integration tests: one binary, one module per area. Every test runs a real gateway
//! (port 0, own database) and, where workers matter, a real in-test worker over TCP.

mod agent_cards;
mod auth;
mod cli;
mod console;
mod disputes;
mod escrow;
mod escrow_env;
mod events;
mod helpers;
mod hire;
mod hire_env;
mod hire_wire;
mod hostile_answers;
mod ledger;
mod long_running;
mod mcp;
mod migrations;
mod money_truth;
mod observability;
mod openapi;
mod ops;
mod outbound;
mod outputs;
mod readme;
mod receipts;
mod reputation;
mod seeker_cli;
mod store;
mod superwire_wire;
mod surface;
mod sw4rm;
mod wattswarm_wire;
mod webhooks;
mod workers;
mod x402_discovery;
