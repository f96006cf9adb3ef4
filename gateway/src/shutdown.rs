//! One [`CancellationToken`] for the whole process, cancelled on SIGINT or SIGTERM. The server
//! and every background loop receive a child of it, so shutdown reaches all of them.

use tokio_util::sync::CancellationToken;

/// A token that is cancelled when the process receives SIGINT (Ctrl-C) or SIGTERM.
///
/// Must be called inside a tokio runtime.
pub fn token_cancelled_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, stopping");
        trigger.cancel();
    });
    token
}

async fn wait_for_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(error.message = %error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(error.message = %error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
