//! `ToxiproxyClient`: the project's one async client of a Toxiproxy API, over the blocking `toxiproxy_rust` 0.1.6 (its quirks are handled in `blocking.rs`).

mod answer;
mod blocking;
mod held;

use crate::error::ClientError;
use crate::model::{ProxyInfo, ProxySpec, ToxicInfo, ToxicSpec};
use blocking::{Ctx, CtxCell};
use held::Hold;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// Async client for a Toxiproxy API (a real Toxiproxy or [`crate::server`]). Every change is
/// read back and fails as [`ClientError::NotApplied`] if it did not take. Clones share one
/// underlying toxiproxy_rust/reqwest client.
#[derive(Clone)]
pub struct ToxiproxyClient {
    addr: String,
    ctx: Arc<CtxCell>,
    /// A clone made by [`ToxiproxyClient::held_until`] makes its changes at a given instant.
    hold: Hold,
}

impl std::fmt::Debug for ToxiproxyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToxiproxyClient")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ToxiproxyClient {
    /// `api_addr` is `host:port` of the API (e.g. `127.0.0.1:8474` or [`crate::ProxyServer::api_addr`]).
    pub fn new(api_addr: impl ToString) -> Self {
        ToxiproxyClient {
            addr: api_addr.to_string(),
            ctx: Arc::new(CtxCell::empty()),
            hold: Hold::default(),
        }
    }

    /// A clone (sharing the connection) whose changing calls do their reads at once but send
    /// the change at `at`: a fault scheduled for `at` lands on time however long the reads
    /// take. `on_release` runs once, just before the first change is sent; with `cancel` set
    /// by then, the change is called off ([`ClientError::NotApplied`]).
    /// [`ToxiproxyClient::landed`] says when the change was answered.
    pub fn held_until(
        &self,
        at: Instant,
        on_release: Option<Box<dyn FnOnce() + Send>>,
        cancel: Option<Arc<AtomicBool>>,
    ) -> ToxiproxyClient {
        ToxiproxyClient {
            addr: self.addr.clone(),
            ctx: self.ctx.clone(),
            hold: Hold::until(at, on_release, cancel),
        }
    }

    /// When this clone's last change was answered by the server (None before any change).
    pub fn landed(&self) -> Option<Instant> {
        self.hold.landed()
    }

    /// Run `f` with this client's held-change settings on a blocking thread.
    async fn call<T, F>(&self, f: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(&Ctx, &Hold) -> Result<T, ClientError> + Send + 'static,
    {
        let hold = self.hold.clone();
        blocking::run(&self.addr, &self.ctx, move |c| f(c, &hold)).await
    }

    /// Create one proxy; 409 ([`ClientError::Api`]) if the name exists.
    pub async fn create_proxy(
        &self,
        name: &str,
        listen: &str,
        upstream: &str,
    ) -> Result<ProxyInfo, ClientError> {
        let spec = ProxySpec::new(name, listen, upstream);
        self.call(move |c, _| c.create_proxy(&spec)).await
    }

    /// Create or replace proxies, each made to match its spec (enabled flag included).
    pub async fn populate(&self, specs: &[ProxySpec]) -> Result<Vec<ProxyInfo>, ClientError> {
        let specs = specs.to_vec();
        self.call(move |c, _| c.populate(&specs)).await
    }

    /// Add the toxic `<type>_<stream>` (see [`ToxicSpec::name`]), or update the one already
    /// there in place, so a fault is never lifted while it changes.
    pub async fn add_toxic(&self, proxy: &str, toxic: ToxicSpec) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        self.call(move |c, hold| c.set_toxic(&proxy, &toxic, hold))
            .await
    }

    /// Remove one toxic by name.
    pub async fn remove_toxic(&self, proxy: &str, toxic: &str) -> Result<(), ClientError> {
        let (proxy, toxic) = (proxy.to_string(), toxic.to_string());
        self.call(move |c, _| c.remove_toxic(&proxy, &toxic)).await
    }

    /// Disable the proxy: the listener closes and open connections are cut.
    pub async fn down(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        Ok(self.down_all(&[proxy.to_string()]).await?.remove(0))
    }

    /// Enable the proxy again (same listen address).
    pub async fn up(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        Ok(self.up_all(&[proxy.to_string()]).await?.remove(0))
    }

    /// Disable several proxies at once: held, their changes are sent together at the instant.
    pub async fn down_all(&self, proxies: &[String]) -> Result<Vec<ProxyInfo>, ClientError> {
        let proxies = proxies.to_vec();
        self.call(move |c, hold| c.set_enabled(&proxies, false, hold))
            .await
    }

    /// Enable several proxies at once (see [`ToxiproxyClient::down_all`]).
    pub async fn up_all(&self, proxies: &[String]) -> Result<Vec<ProxyInfo>, ClientError> {
        let proxies = proxies.to_vec();
        self.call(move |c, hold| c.set_enabled(&proxies, true, hold))
            .await
    }

    /// Forward the proxy to `upstream` from now on (a floating address moved).
    pub async fn set_upstream(
        &self,
        proxy: &str,
        upstream: &str,
    ) -> Result<ProxyInfo, ClientError> {
        let (proxy, upstream) = (proxy.to_string(), upstream.to_string());
        self.call(move |c, hold| c.set_upstream(&proxy, &upstream, hold))
            .await
    }

    /// Remove every toxic of the proxy and enable it.
    pub async fn heal(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        let proxy = proxy.to_string();
        self.call(move |c, hold| c.heal(&proxy, hold)).await
    }

    /// `POST /reset`: every proxy enabled, every toxic removed.
    pub async fn reset(&self) -> Result<(), ClientError> {
        self.call(|c, hold| c.reset(hold)).await
    }

    /// All proxies with their toxics.
    pub async fn list(&self) -> Result<HashMap<String, ProxyInfo>, ClientError> {
        self.call(|c, _| c.list()).await
    }

    /// One proxy, 404 as [`ClientError::Api`].
    pub async fn get(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        let proxy = proxy.to_string();
        self.call(move |c, _| c.proxy(&proxy)).await
    }

    /// Delete a proxy, verified gone.
    pub async fn delete_proxy(&self, proxy: &str) -> Result<(), ClientError> {
        let proxy = proxy.to_string();
        self.call(move |c, _| c.delete_proxy(&proxy)).await
    }

    /// The server's version string.
    pub async fn version(&self) -> Result<String, ClientError> {
        self.call(|c, _| c.version()).await
    }
}
