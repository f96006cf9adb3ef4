//! The loopback HTTP listener every reference server runs on, with an off switch that makes
//! the port refuse connections (a peer that is *down*, not merely slow or erroring).

use std::io;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use url::Url;

/// How long [`Listening::go_down`] waits for the port to start refusing before giving up.
const GO_DOWN_DEADLINE: Duration = Duration::from_secs(2);

/// A router served on a fixed loopback port that can be switched off and on again.
#[derive(Debug)]
pub(crate) struct Listening {
    addr: SocketAddr,
    base_url: Url,
    router: Router,
    running: Mutex<Option<CancellationToken>>,
}

impl Listening {
    /// Binds `127.0.0.1:0` and starts serving `router`.
    pub(crate) async fn spawn(router: Router) -> io::Result<Self> {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let base_url = Url::parse(&format!("http://{addr}/"))
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
        let this = Self {
            addr,
            base_url,
            router,
            running: Mutex::new(None),
        };
        this.serve(listener);
        Ok(this)
    }

    /// `http://127.0.0.1:<port>/`.
    pub(crate) fn base_url(&self) -> &Url {
        &self.base_url
    }

    /// Whether the port currently accepts connections.
    pub(crate) fn is_up(&self) -> bool {
        self.lock_running().is_some()
    }

    /// Stops accepting: once this returns, connecting to the port is refused. Connections
    /// already open (an SSE stream, a slow request) are allowed to finish.
    pub(crate) async fn go_down(&self) {
        let Some(stop) = self.lock_running().take() else {
            return;
        };
        stop.cancel();
        // axum drops the listener asynchronously after the signal; wait until the kernel
        // actually refuses, so a caller's next request sees "down" and not a race.
        let deadline = tokio::time::Instant::now() + GO_DOWN_DEADLINE;
        while tokio::time::Instant::now() < deadline {
            match TcpStream::connect(self.addr).await {
                Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => return,
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// Serves again on the same port.
    pub(crate) async fn come_up(&self) -> io::Result<()> {
        if self.is_up() {
            return Ok(());
        }
        // tokio sets SO_REUSEADDR on Unix, so the port can be re-bound despite TIME_WAIT
        // connections left over from the previous run.
        let listener = TcpListener::bind(self.addr).await?;
        self.serve(listener);
        Ok(())
    }

    fn serve(&self, listener: TcpListener) {
        let stop = CancellationToken::new();
        let signal = stop.clone().cancelled_owned();
        let app = self.router.clone();
        tokio::spawn(async move {
            // The only error axum's serve reports is from the listener itself; the reference
            // server has nobody to report it to but the test, which will see refused requests.
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(signal)
                .await;
        });
        *self.lock_running() = Some(stop);
    }

    fn lock_running(&self) -> MutexGuard<'_, Option<CancellationToken>> {
        super::lock(&self.running)
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Some(stop) = self.lock_running().take() {
            stop.cancel();
        }
    }
}
