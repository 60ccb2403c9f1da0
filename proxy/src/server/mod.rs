//! The in-process Toxiproxy-compatible server: start it, find its API address, stop it.

mod api;
mod pipe;
mod precise;
mod state;
mod toxic;

pub use api::VERSION;
pub(crate) use precise::sleep_until as precise_sleep_until;

use crate::error::ProxyError;
use state::Shared;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long a graceful shutdown may take before tasks are aborted.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A running server. Dropping it aborts the API listener, every proxy listener and every
/// proxied connection; [`ProxyServer::shutdown`] does the same and waits for it.
pub struct ProxyServer {
    api_addr: SocketAddr,
    shared: Arc<Shared>,
    api_stop: Option<oneshot::Sender<()>>,
    api_task: Option<JoinHandle<()>>,
}

/// Bind the API on `listen` (port 0 picks a free port) and serve it on the current runtime.
pub async fn start(listen: SocketAddr) -> Result<ProxyServer, ProxyError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| ProxyError::BindApi {
            addr: listen,
            source,
        })?;
    let api_addr = listener.local_addr().map_err(ProxyError::LocalAddr)?;
    let shared = Arc::new(Shared::new());
    let (stop_tx, stop_rx) = oneshot::channel();
    let api_task = tokio::spawn(api::serve_api(listener, shared.clone(), stop_rx));
    Ok(ProxyServer {
        api_addr,
        shared,
        api_stop: Some(stop_tx),
        api_task: Some(api_task),
    })
}

/// Standalone mode (`chaos proxy --listen ADDR`): serve until Ctrl-C, then shut down.
pub async fn serve_forever(listen: SocketAddr) -> Result<(), ProxyError> {
    let server = start(listen).await?;
    eprintln!(
        "chaos-proxy: Toxiproxy-compatible API on http://{}",
        server.api_addr()
    );
    let r = tokio::signal::ctrl_c().await.map_err(ProxyError::Signal);
    server.shutdown().await;
    r
}

impl ProxyServer {
    /// The bound API address (give this to [`crate::client::ToxiproxyClient::new`]).
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// Close the API listener, every proxy listener and every proxied connection, and wait.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.api_stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.api_task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_TIMEOUT, task).await.is_err() {
                abort.abort();
            }
        }
        let mut proxies = self.shared.proxies.lock().await;
        for p in proxies.values_mut() {
            p.stop(&self.shared).await;
        }
        proxies.clear();
        drop(proxies);
        self.shared.abort_all();
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        if let Some(task) = self.api_task.take() {
            task.abort();
        }
        self.shared.abort_all();
    }
}
