//! The proxy collection: each proxy's config, its toxic chains, and its listener task's lifecycle.
//!
//! State owns the proxies and their chains; it hands each accepted connection to the pump
//! (`pipe::run_connection`) with a receiver per chain, and the pump knows nothing of it.

use super::pipe::run_connection;
use super::priority::{Tuning, Workers};
use super::sockets::{Registered, Sockets};
use super::tap::{TapPoint, Taps};
use super::toxic::{Chain, ToxicEntry};
use crate::model::Stream;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::{AbortHandle, JoinHandle, JoinSet};

/// Open connections per proxy; past this, new clients are closed at once rather than exhausting fds.
const MAX_CONNS_PER_PROXY: usize = 4096;
/// How long stopping a listener may take before its task is aborted outright.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed accept (e.g. EMFILE) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// An error the API reports as `{"error": message, "status": status}`.
#[derive(Debug, Clone)]
pub(crate) struct ApiErr {
    pub message: String,
    pub status: u16,
}

impl ApiErr {
    pub(crate) fn new(message: impl Into<String>, status: u16) -> Self {
        ApiErr {
            message: message.into(),
            status,
        }
    }
    pub(crate) fn proxy_not_found() -> Self {
        ApiErr::new("proxy not found", 404)
    }
    pub(crate) fn proxy_exists() -> Self {
        ApiErr::new("proxy already exists", 409)
    }
    pub(crate) fn toxic_not_found() -> Self {
        ApiErr::new("toxic not found", 404)
    }
    pub(crate) fn bad_body(detail: impl std::fmt::Display) -> Self {
        ApiErr::new(format!("bad request body: {detail}"), 400)
    }
    pub(crate) fn missing_field(detail: impl std::fmt::Display) -> Self {
        ApiErr::new(format!("missing required field: {detail}"), 400)
    }
    /// Go errors without a status code become 500s in Toxiproxy's apiError.
    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        ApiErr::new(detail.to_string(), 500)
    }
}

/// State shared by the API and all proxies of one server.
pub(crate) struct Shared {
    pub proxies: tokio::sync::Mutex<BTreeMap<String, ProxyEntry>>,
    next_toxic_id: AtomicU64,
    next_runner_id: AtomicU64,
    /// Every running listener task, so dropping the server can abort them synchronously.
    runners: std::sync::Mutex<HashMap<u64, AbortHandle>>,
    /// In-process listeners to proxies' bytes, by proxy name.
    pub taps: Taps,
    /// What is timed, which the forwarding threads' priority follows.
    pub tuning: Arc<Tuning>,
    /// The runtime the listeners and connections run on (None: the caller's).
    forwarding: Option<tokio::runtime::Handle>,
}

/// A server's forwarding runtime and its threads, when they are its own.
pub(crate) struct Forwarding {
    pub handle: tokio::runtime::Handle,
    pub workers: Arc<Workers>,
}

impl Shared {
    pub(crate) fn new(forwarding: Option<Forwarding>) -> Self {
        let (handle, workers) = match forwarding {
            Some(f) => (Some(f.handle), Some(f.workers)),
            None => (None, None),
        };
        let tuning = Arc::new(Tuning::with_workers(workers));
        Shared {
            proxies: tokio::sync::Mutex::new(BTreeMap::new()),
            next_toxic_id: AtomicU64::new(1),
            next_runner_id: AtomicU64::new(1),
            runners: std::sync::Mutex::new(HashMap::new()),
            taps: Taps::with_tuning(tuning.clone()),
            tuning,
            forwarding: handle,
        }
    }

    /// Run a listener on the forwarding runtime.
    fn spawn_forwarding<F>(&self, task: F) -> JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match &self.forwarding {
            Some(h) => h.spawn(task),
            None => tokio::spawn(task),
        }
    }

    pub(crate) fn toxic_id(&self) -> u64 {
        self.next_toxic_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Abort every listener (and with it every proxied connection) without awaiting.
    pub(crate) fn abort_all(&self) {
        let mut runners = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        for (_, h) in runners.drain() {
            h.abort();
        }
    }
}

struct Runner {
    id: u64,
    stop: oneshot::Sender<()>,
    handle: JoinHandle<()>,
    sockets: Arc<Sockets>,
}

/// A proxy's listener and connections on their way out.
pub(crate) struct Closing(JoinHandle<()>);

impl Closing {
    /// Wait until they are gone (aborted after `STOP_TIMEOUT`).
    pub(crate) async fn wait(self) {
        let abort = self.0.abort_handle();
        if tokio::time::timeout(STOP_TIMEOUT, self.0).await.is_err() {
            abort.abort();
        }
    }
}

/// One proxy.
pub(crate) struct ProxyEntry {
    pub name: String,
    /// The configured address, replaced by the bound address once listening (as Toxiproxy does).
    pub listen: String,
    pub upstream: String,
    pub enabled: bool,
    /// Index 0 upstream, 1 downstream (Toxiproxy's Direction values).
    pub chains: [Vec<ToxicEntry>; 2],
    senders: [watch::Sender<Chain>; 2],
    runner: Option<Runner>,
    /// The last disable's tasks, still winding down after its sockets were cut: a start
    /// waits for them, so the old listener has let go of the port before binding again.
    closing: Option<Closing>,
    tuning: Arc<Tuning>,
    /// Which chains `tuning` counts as having toxics.
    counted: [std::sync::atomic::AtomicBool; 2],
}

impl Drop for ProxyEntry {
    fn drop(&mut self) {
        for c in &self.counted {
            if c.swap(false, Ordering::AcqRel) {
                self.tuning.toxic_chain(false);
            }
        }
    }
}

pub(crate) fn dir_index(d: Stream) -> usize {
    match d {
        Stream::Upstream => 0,
        Stream::Downstream => 1,
    }
}

/// Empty listen means "any port" in Toxiproxy (Go binds all interfaces); this crate stays on loopback.
fn listen_or_default(listen: &str) -> &str {
    if listen.is_empty() {
        "127.0.0.1:0"
    } else {
        listen
    }
}

/// Resolve an address the way Go's net.ResolveTCPAddr does for `Differs`.
pub(crate) async fn resolve(listen: &str) -> Result<String, ApiErr> {
    let listen = listen_or_default(listen);
    let mut addrs = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| ApiErr::internal(format!("address {listen}: {e}")))?;
    addrs
        .next()
        .map(|a| a.to_string())
        .ok_or_else(|| ApiErr::internal(format!("address {listen}: no addresses")))
}

#[derive(Serialize)]
pub(crate) struct ProxyJson<'a> {
    name: &'a str,
    listen: &'a str,
    upstream: &'a str,
    enabled: bool,
    toxics: Vec<&'a ToxicEntry>,
}

impl ProxyEntry {
    pub(crate) fn new(shared: &Shared, name: String, listen: String, upstream: String) -> Self {
        ProxyEntry {
            name,
            listen,
            upstream,
            enabled: false,
            chains: [Vec::new(), Vec::new()],
            senders: [
                watch::Sender::new(Arc::new(Vec::new())),
                watch::Sender::new(Arc::new(Vec::new())),
            ],
            runner: None,
            closing: None,
            tuning: shared.tuning.clone(),
            counted: Default::default(),
        }
    }

    pub(crate) fn json(&self) -> ProxyJson<'_> {
        ProxyJson {
            name: &self.name,
            listen: &self.listen,
            upstream: &self.upstream,
            enabled: self.enabled,
            toxics: self.toxics(),
        }
    }

    /// Upstream chain then downstream chain, as GetToxicArray.
    pub(crate) fn toxics(&self) -> Vec<&ToxicEntry> {
        self.chains.iter().flatten().collect()
    }

    pub(crate) fn find_toxic(&self, name: &str) -> Option<(usize, usize)> {
        for (d, chain) in self.chains.iter().enumerate() {
            if let Some(i) = chain.iter().position(|t| t.name == name) {
                return Some((d, i));
            }
        }
        None
    }

    /// Hand the current chain of one direction to every open connection; a chain's first
    /// toxic raises the forwarding threads before it is handed on (see `priority`).
    pub(crate) fn publish(&self, dir: usize) {
        let has_toxics = !self.chains[dir].is_empty();
        if self.counted[dir].swap(has_toxics, Ordering::AcqRel) != has_toxics {
            self.tuning.toxic_chain(has_toxics);
        }
        self.senders[dir].send_replace(Arc::new(self.chains[dir].clone()));
    }

    pub(crate) fn clear_toxics(&mut self) {
        for d in 0..2 {
            if !self.chains[d].is_empty() {
                self.chains[d].clear();
                self.publish(d);
            }
        }
    }

    /// Bind and start accepting. Errors leave the proxy disabled, as Toxiproxy's start().
    pub(crate) async fn start(&mut self, shared: &Shared) -> Result<(), ApiErr> {
        if self.enabled {
            return Ok(());
        }
        if let Some(c) = self.closing.take() {
            c.wait().await;
        }
        let want = listen_or_default(&self.listen).to_string();
        let listener = TcpListener::bind(&want)
            .await
            .map_err(|e| ApiErr::internal(format!("listen tcp {want}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| ApiErr::internal(format!("listen tcp {want}: {e}")))?;
        self.listen = bound.to_string();
        let (stop_tx, stop_rx) = oneshot::channel();
        let sockets = Arc::new(Sockets::default());
        let listening = {
            use std::os::fd::AsFd;
            sockets.register(&[listener.as_fd()])
        };
        // Bound here, accepted on the forwarding runtime (whose reactor it joins there).
        let listener = listener
            .into_std()
            .map_err(|e| ApiErr::internal(format!("listen tcp {want}: {e}")))?;
        let handle = shared.spawn_forwarding(accept_loop(
            listener,
            listening,
            sockets.clone(),
            Arc::from(self.name.as_str()),
            shared.taps.point(&self.name),
            self.upstream.clone(),
            self.senders[0].subscribe(),
            self.senders[1].subscribe(),
            stop_rx,
        ));
        let id = shared.next_runner_id.fetch_add(1, Ordering::Relaxed);
        shared
            .runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, handle.abort_handle());
        self.runner = Some(Runner {
            id,
            stop: stop_tx,
            handle,
            sockets,
        });
        self.enabled = true;
        Ok(())
    }

    /// Close the listener and every open connection, and wait until they are gone.
    pub(crate) async fn stop(&mut self, shared: &Shared) {
        if let Some(closing) = self.begin_stop(shared) {
            closing.wait().await;
        }
        if let Some(c) = self.closing.take() {
            c.wait().await;
        }
    }

    /// Disable: cut the listener and every connection now (see [`Sockets`]); the tasks wind
    /// down in the background and a later start waits for them.
    pub(crate) fn disable(&mut self, shared: &Shared) {
        if let Some(closing) = self.begin_stop(shared) {
            self.closing = Some(closing);
        }
    }

    /// Mark the proxy disabled and tell its listener and connections to close; the caller
    /// waits on the returned [`Closing`] (after releasing the proxy collection's lock, so
    /// proxies disabled together close together, as Toxiproxy's per-proxy locks allow).
    pub(crate) fn begin_stop(&mut self, shared: &Shared) -> Option<Closing> {
        self.enabled = false;
        let runner = self.runner.take()?;
        shared
            .runners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&runner.id);
        runner.sockets.cut_all();
        let _ = runner.stop.send(());
        Some(Closing(runner.handle))
    }

    /// Toxiproxy's Differs: listen compared after resolving, upstream compared as text.
    pub(crate) async fn differs(&self, listen: &str, upstream: &str) -> Result<bool, ApiErr> {
        let resolved = resolve(listen).await?;
        Ok(self.listen != resolved || self.upstream != upstream)
    }

    /// Toxiproxy's Proxy.Update: restart on address change, then apply `enabled`.
    pub(crate) async fn update(
        &mut self,
        shared: &Shared,
        listen: String,
        upstream: String,
        enabled: bool,
    ) -> Result<(), ApiErr> {
        if self.differs(&listen, &upstream).await? {
            self.stop(shared).await;
            self.listen = listen;
            self.upstream = upstream;
        }
        if enabled != self.enabled {
            if enabled {
                return self.start(shared).await;
            }
            self.stop(shared).await;
        }
        Ok(())
    }
}

#[allow(clippy::too_many_arguments)]
async fn accept_loop(
    listener: std::net::TcpListener,
    listening: Registered,
    sockets: Arc<Sockets>,
    name: Arc<str>,
    tap: Arc<TapPoint>,
    upstream: String,
    up_chain: watch::Receiver<Chain>,
    down_chain: watch::Receiver<Chain>,
    mut stop: oneshot::Receiver<()>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    // Owning the connections here means aborting or stopping this task ends all of them.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            r = listener.accept() => match r {
                Ok((client, _)) => {
                    if conns.len() >= MAX_CONNS_PER_PROXY {
                        continue;
                    }
                    conns.spawn(run_connection(
                        client,
                        sockets.clone(),
                        name.clone(),
                        tap.clone(),
                        upstream.clone(),
                        up_chain.clone(),
                        down_chain.clone(),
                    ));
                }
                Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listening);
    drop(listener);
    conns.shutdown().await;
}
