//! Serving a router on a socket with graceful shutdown, bound before it runs so callers
//! (tests especially) can use port 0 and learn the real address.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use axum::Router;
use tokio::task::JoinHandle;
use url::Url;

/// A router being served in the background.
#[derive(Debug)]
pub struct RunningServer {
    local_addr: SocketAddr,
    task: JoinHandle<io::Result<()>>,
}

impl RunningServer {
    /// The bound address (with the real port when 0 was asked for).
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://<local_addr>/`.
    #[must_use]
    pub fn base_url(&self) -> Url {
        // An IP socket address always forms a valid http URL.
        Url::parse(&format!("http://{}/", self.local_addr))
            .unwrap_or_else(|_| unreachable!("socket addresses are valid URL hosts"))
    }

    /// Waits until the server has stopped (after the shutdown future resolved and open
    /// connections finished).
    ///
    /// # Errors
    /// The server's I/O error, or an error if its task panicked.
    pub async fn wait(self) -> io::Result<()> {
        self.task.await.map_err(io::Error::other)?
    }
}

/// Binds `addr` and serves `router` on a background task until `shutdown` resolves.
///
/// # Errors
/// The bind error (address in use, permission denied…).
pub async fn serve(
    router: Router,
    addr: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<RunningServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        // Resolved once, not per connection (see the gateway's `App::run_until_stopped`).
        axum::serve(listener, router.into_make_service())
            .with_graceful_shutdown(shutdown)
            .await
    });
    Ok(RunningServer { local_addr, task })
}
