//! Worker SDK over real HTTP on 127.0.0.1:0, with real Ed25519-signed contract tokens.

mod auth;
mod callbacks;
mod discovery;
mod example_processes;
mod execute;
mod helpers;
mod hosted;
mod idempotency;
mod jwks;
mod verify_and_cancel;
