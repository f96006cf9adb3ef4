//! The faulty worker: misbehaves on request, per task input field `"mode"` (`ok`,
//! `invalid`, `fail`, `slow`, `pending`, `flaky`; `"delay_ms"` for `slow`/`pending`), or by
//! default per `FAULTY_MODE` / `FAULTY_DELAY_MS`.
//!
//! ```text
//! WORKER_LISTEN=127.0.0.1:8082 FAULTY_MODE=invalid \
//! WORKER_GATEWAY_JWKS_URL=http://127.0.0.1:8402/.well-known/jwks.json \
//!   cargo run -p hiregate-worker-sdk --example faulty_worker
//! ```
//! See `hiregate_worker_sdk::example_workers::configure_from_env` for the other variables.
//! Prints `listening on http://<addr>/` once bound (port 0 is allowed).

use std::net::SocketAddr;

use hiregate_worker_sdk::example_workers::{
    configure_from_env, faulty_behaviour_from_env, faulty_builder, faulty_handler,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen: SocketAddr = std::env::var("WORKER_LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:8082".to_owned())
        .parse()?;
    let behaviour = faulty_behaviour_from_env()?;
    let worker = configure_from_env(faulty_builder())?.build(faulty_handler(behaviour))?;
    let server = hiregate_worker_sdk::serve(worker.router(), listen, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    println!(
        "listening on {} (default mode {:?})",
        server.base_url(),
        behaviour.mode
    );
    server.wait().await?;
    Ok(())
}
