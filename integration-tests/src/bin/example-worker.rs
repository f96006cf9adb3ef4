//! One of the worker-sdk example workers as a child process for the end-to-end tests.
//!
//! | variable | meaning |
//! |---|---|
//! | `EXAMPLE_WORKER` | `echo` (default), `faulty` or `conformance` |
//! | `WORKER_LISTEN` | address to bind (default `127.0.0.1:0`) |
//! | `FAULTY_MODE`, `FAULTY_DELAY_MS` | the faulty worker's default behaviour |
//! | `WORKER_GATEWAY_JWKS_URL`, … | see `hiregate_worker_sdk::example_workers::configure_from_env` |
//! | `WORKER_JWKS_MIN_REFRESH_MS` | `conformance` only: time between JWKS refetches for unknown key ids |
//!
//! `conformance` is the Rust worker of the SDK conformance suite (`sdks/conformance/`): the faulty
//! worker's task types (`summarize`, `echo`, behaviour per input `mode`), the outputs worker's
//! (`output_text` … `output_partial`) and a verifier (`POST /verify`: passes a candidate whose
//! output has a string `summary`, else fails it with reason 101). The Python and TypeScript
//! conformance workers implement the same behaviour with their SDKs.
//!
//! Prints `listening on http://<addr>/` on stdout once bound. Besides the worker's own routes it
//! serves `GET /test/executions` → `{"executions": n}`: how many times the task handler ran, so a
//! test in another process can prove the gateway never called the worker.

use std::net::SocketAddr;

use axum::{Json, Router, routing::get};
use hiregate_worker_sdk::example_workers::{
    OUTPUT_TASK_TYPES, configure_from_env, echo_builder, echo_handler, faulty_behaviour_from_env,
    faulty_builder, faulty_handler, outputs_handler,
};
use hiregate_worker_sdk::verify::{Verdict, VerifyRequest};
use hiregate_worker_sdk::{GatewayKeys, TaskContext, TaskHandler, Worker, WorkerBuilder};
use serde_json::{Value, json};

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
        "conformance" => conformance_worker()?,
        other => {
            return Err(format!(
                "EXAMPLE_WORKER must be echo, faulty or conformance, not {other:?}"
            )
            .into());
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

/// The conformance worker: faulty + outputs task types, and a verifier.
fn conformance_worker() -> Result<Worker, Box<dyn std::error::Error>> {
    let mut builder: WorkerBuilder = OUTPUT_TASK_TYPES
        .iter()
        .fold(faulty_builder(), |builder, task_type| {
            builder.task_type(*task_type)
        })
        .verifier(
            "conformance-runtime",
            "conformance-model-v1",
            |request: VerifyRequest| async move {
                if request
                    .candidate
                    .output
                    .get("summary")
                    .is_some_and(Value::is_string)
                {
                    Verdict::pass(1.0)
                } else {
                    Verdict::fail(1.0, vec![101])
                }
            },
        );
    builder = configure_from_env(builder)?;
    if let (Ok(url), Ok(ms)) = (
        std::env::var("WORKER_GATEWAY_JWKS_URL"),
        std::env::var("WORKER_JWKS_MIN_REFRESH_MS"),
    ) {
        builder = builder.gateway_keys(
            GatewayKeys::remote(url.parse()?)
                .min_refresh_interval(std::time::Duration::from_millis(ms.parse()?)),
        );
    }
    let faulty = faulty_handler(faulty_behaviour_from_env()?);
    let outputs = outputs_handler();
    Ok(builder.build(move |ctx: TaskContext, input: Value| {
        let is_output_task = ctx
            .task_type()
            .is_some_and(|task_type| task_type.as_str().starts_with("output_"));
        if is_output_task {
            outputs.handle(ctx, input)
        } else {
            faulty.handle(ctx, input)
        }
    })?)
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
