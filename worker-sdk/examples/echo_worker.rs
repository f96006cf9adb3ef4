//! The echo worker: answers `summarize` and `echo` tasks with
//! `{"summary": …, "confidence": 0.9}`.
//!
//! ```text
//! WORKER_LISTEN=127.0.0.1:8081 \
//! WORKER_GATEWAY_JWKS_URL=http://127.0.0.1:8402/.well-known/jwks.json \
//!   cargo run -p hiregate-worker-sdk --example echo_worker
//! ```
//! See `hiregate_worker_sdk::example_workers::configure_from_env` for the other variables.
//! Prints `listening on http://<addr>/` once bound (port 0 is allowed).

use std::net::SocketAddr;

use hiregate_worker_sdk::example_workers::{configure_from_env, echo_builder, echo_handler};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen: SocketAddr = std::env::var("WORKER_LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:8081".to_owned())
        .parse()?;
    let worker = configure_from_env(echo_builder())?.build(echo_handler())?;
    let server = hiregate_worker_sdk::serve(worker.router(), listen, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    println!("listening on {}", server.base_url());
    server.wait().await?;
    Ok(())
}
