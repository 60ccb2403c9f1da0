//! The in-process Toxiproxy-compatible server: start it, find its API address, stop it.

mod api;
mod deadline;
mod gojson;
mod pipe;
mod precise;
mod priority;
mod sockets;
mod state;
mod tap;
mod toxic;
mod toxics;

pub use api::VERSION;
pub(crate) use deadline::Deadline;
pub(crate) use precise::sleep_until as precise_sleep_until;
pub use tap::{Tap, TapData, TapEvent, TapVerdict, Taps};

use crate::error::ProxyError;
use state::{Forwarding, Shared};
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

/// Bind the API on `listen` (port 0 picks a free port) and serve it, its listeners and its
/// connections on the current runtime.
pub async fn start(listen: SocketAddr) -> Result<ProxyServer, ProxyError> {
    start_with(listen, None).await
}

/// [`start`], with the listeners and connections on `forwarding` if given.
async fn start_with(
    listen: SocketAddr,
    forwarding: Option<Forwarding>,
) -> Result<ProxyServer, ProxyError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| ProxyError::BindApi {
            addr: listen,
            source,
        })?;
    let api_addr = listener.local_addr().map_err(ProxyError::LocalAddr)?;
    let shared = Arc::new(Shared::new(forwarding));
    let (stop_tx, stop_rx) = oneshot::channel();
    let api_task = tokio::spawn(api::serve_api(listener, shared.clone(), stop_rx));
    Ok(ProxyServer {
        api_addr,
        shared,
        api_stop: Some(stop_tx),
        api_task: Some(api_task),
    })
}

/// A server on threads of its own (the API on one, the forwarding on a runtime with `threads`
/// workers), so its API and its forwarding never wait behind the embedding program's work: in the harness, on a loaded
/// 2-core machine, a fault's HTTP change waited up to 8 ms for a worker busy with the ingest or
/// the history. Stopped by [`ProxyThread::shutdown`], or by dropping it.
pub struct ProxyThread {
    api_addr: SocketAddr,
    taps: Taps,
    stop: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<()>>,
}

/// Start a server on threads of its own: the API on one (named `chaos-proxy-api`), real-time
/// throughout, and its listeners and connections on `threads` more (named `chaos-proxy`),
/// real-time while a toxic or a tap listener makes some link timed and normal threads
/// otherwise (`priority`); each asks where permitted
/// ([`crate::realtime::raise_current_thread`]).
pub fn start_on_own_threads(listen: SocketAddr, threads: usize) -> Result<ProxyThread, ProxyError> {
    start_on_threads(listen, threads, true, REALTIME_THREAD_NAME)
}

/// The forwarding threads' name as [`start_on_own_threads`] starts them; the API thread's.
pub const REALTIME_THREAD_NAME: &str = "chaos-proxy";
pub const API_THREAD_NAME: &str = "chaos-proxy-api";

/// [`start_on_own_threads`], choosing whether the threads ever ask for a real-time priority
/// and naming the forwarding threads (at most 15 bytes, as Linux keeps them): the benchmark
/// compares ways and counts each one's CPU by that name.
pub fn start_on_threads(
    listen: SocketAddr,
    threads: usize,
    realtime: bool,
    name: &'static str,
) -> Result<ProxyThread, ProxyError> {
    let workers = Arc::new(priority::Workers::default());
    let (registry, leaving) = (workers.clone(), workers.clone());
    let forwarding_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(name)
        .on_thread_start(move || {
            if realtime {
                registry.register_current_thread();
            }
        })
        .on_thread_stop(move || leaving.unregister_current_thread())
        .enable_all()
        .build()
        .map_err(ProxyError::Runtime)?;
    let forwarding = Forwarding {
        handle: forwarding_rt.handle().clone(),
        workers,
    };
    let api_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ProxyError::Runtime)?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (done_tx, done_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name(API_THREAD_NAME.into())
        .spawn(move || {
            if realtime {
                crate::realtime::raise_current_thread();
            }
            api_rt.block_on(async move {
                let server = match start_with(listen, Some(forwarding)).await {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return;
                    }
                };
                let _ = addr_tx.send(Ok((server.api_addr(), server.taps())));
                // Ends on shutdown, or when the handle is dropped.
                let _ = stop_rx.await;
                server.shutdown().await;
            });
            drop(api_rt);
            forwarding_rt.shutdown_timeout(SHUTDOWN_TIMEOUT);
            let _ = done_tx.send(());
        })
        .map_err(ProxyError::Runtime)?;
    let (api_addr, taps) = addr_rx
        .recv()
        .map_err(|_| ProxyError::Runtime(std::io::Error::other("the proxy thread ended")))??;
    Ok(ProxyThread {
        api_addr,
        taps,
        stop: Some(stop_tx),
        done: Some(done_rx),
    })
}

impl ProxyThread {
    pub fn api_addr(&self) -> SocketAddr {
        self.api_addr
    }

    /// Subscribe to the bytes of this server's proxies ([`Taps::subscribe`]).
    pub fn taps(&self) -> Taps {
        self.taps.clone()
    }

    /// Close every listener and connection, and wait until the threads are gone.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(done) = self.done.take() {
            let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT * 2, done).await;
        }
    }
}

impl Drop for ProxyThread {
    fn drop(&mut self) {
        // The server's thread shuts it down (every listener and connection closed) and exits.
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// Standalone mode (`chaos proxy --listen ADDR`): serve until Ctrl-C, then shut down.
pub async fn serve_forever(listen: SocketAddr) -> Result<(), ProxyError> {
    let server = start_on_own_threads(listen, 2)?;
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

    /// Subscribe to the bytes of this server's proxies ([`Taps::subscribe`]).
    pub fn taps(&self) -> Taps {
        self.shared.taps.clone()
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
