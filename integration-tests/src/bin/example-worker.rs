//! One of the worker-sdk example workers as a child process for the end-to-end tests.
//!
//! | variable | meaning |
//! |---|---|
//! | `EXAMPLE_WORKER` | `echo` (default) or `faulty` |
//! | `WORKER_LISTEN` | address to bind (default `127.0.0.1:0`) |
//! | `FAULTY_MODE`, `FAULTY_DELAY_MS` | the faulty worker's default behaviour |
//! | `WORKER_GATEWAY_JWKS_URL`, … | see `hiregate_worker_sdk::example_workers::configure_from_env` |
//!
//! Prints `listening on http://<addr>/` on stdout once bound. Besides the worker's own routes it
//! serves `GET /test/executions` → `{"executions": n}`: how many times the task handler ran, so a
//! test in another process can prove the gateway never called the worker.

use std::net::SocketAddr;

use axum::{Json, Router, routing::get};
use hiregate_worker_sdk::example_workers::{
    configure_from_env, echo_builder, echo_handler, faulty_behaviour_from_env, faulty_builder,
    faulty_handler,
};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen: SocketAddr = std::env::var("WORKER_LISTEN")
        .unwrap_or_else(|_| "127.0.0.1:0".to_owned())
        .parse()?;
    let kind = std::env::var("EXAMPLE_WORKER").unwrap_or_else(|_| "echo".to_owned());
    let worker = match kind.as_str() {
        "echo" => configure_from_env(echo_builder())?.build(echo_handler())?,
        "faulty" => {
            let behaviour = faulty_behaviour_from_env()?;
            configure_from_env(faulty_builder())?.build(faulty_handler(behaviour))?
        }
        other => {
            return Err(format!("EXAMPLE_WORKER must be echo or faulty, not {other:?}").into());
        }
    };
    let executions = worker.execution_counter();
    let router = worker.router().merge(Router::new().route(
        "/test/executions",
        get(move || {
            let executions = executions.clone();
            async move { Json(json!({"executions": executions.get()})) }
        }),
    ));
    let server = hiregate_worker_sdk::serve(router, listen, shutdown_signal()).await?;
    println!("listening on {}", server.base_url());
    server.wait().await?;
    Ok(())
}

/// SIGINT or SIGTERM: the tests stop workers with either.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
