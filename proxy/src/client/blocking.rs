//! Everything that runs on the blocking thread: the calls through `toxiproxy_rust` 0.1.6 and the quirks of it this wrapper works around, in one place.
//!
//! Facts about toxiproxy_rust 0.1.6 handled here (read from its source):
//! - It is blocking (reqwest::blocking); building, using or dropping its client on an async
//!   worker thread panics, so every call runs inside `tokio::task::spawn_blocking` ([`run`]).
//! - `Client::new` takes `ToSocketAddrs` and unwraps the resolution (panics on a bad address),
//!   so the address is resolved here first and a bad one is an error, not a panic.
//! - It ignores HTTP status codes, so after each change the state is read back over the API
//!   and the call fails with [`ClientError::NotApplied`] if the change did not take.
//! - It names every toxic `<type>_<stream>`; a second toxic of a type on a stream would be a
//!   409 it does not report, so an existing toxic of that name is updated in place instead.
//! - Its `with_*` toxic creators panic on transport errors; the panic is caught as an error.
//! - It has no `noop` or `reset_peer` creator, no single-proxy create, no single-toxic delete:
//!   those go over raw HTTP (reqwest::blocking, same version toxiproxy_rust pulls in).
//! - It serializes every call on one mutex, so changes due together through it would land one
//!   after another: a held change goes over raw HTTP (`held.rs`).

use super::answer::{api_answer, HTTP_TIMEOUT};
use super::held::{self, Hold, RawRequest};
use crate::error::ClientError;
use crate::model::{ProxyInfo, ProxySpec, ToxicInfo, ToxicKind, ToxicSpec};
use reqwest::blocking::Client as HttpClient;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toxiproxy_rust::client::Client as TpClient;
use toxiproxy_rust::proxy::{Proxy as TpProxy, ProxyPack};

/// Upper bound on one wrapper call, including toxiproxy_rust's several requests.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The lazily built clients. Building a reqwest client loads TLS roots (~100 ms), so it is
/// built once, on a blocking thread, and reused.
pub(super) struct CtxCell(Mutex<Option<Arc<Ctx>>>);

impl CtxCell {
    pub(super) fn empty() -> CtxCell {
        CtxCell(Mutex::new(None))
    }
}

impl Drop for CtxCell {
    fn drop(&mut self) {
        let ctx = self.0.get_mut().ok().and_then(|c| c.take());
        if let Some(ctx) = ctx {
            if tokio::runtime::Handle::try_current().is_ok() {
                // reqwest::blocking joins its runtime thread on drop; keep that off async workers.
                let _ = std::thread::Builder::new()
                    .name("toxiproxy-client-drop".into())
                    .spawn(move || drop(ctx));
            }
        }
    }
}

/// Run `f` on a blocking thread with the clients for `addr` (built there on first use),
/// within [`CALL_TIMEOUT`]; a panic in toxiproxy_rust comes back as [`ClientError::Panicked`].
pub(super) async fn run<T, F>(addr: &str, cell: &Arc<CtxCell>, f: F) -> Result<T, ClientError>
where
    T: Send + 'static,
    F: FnOnce(&Ctx) -> Result<T, ClientError> + Send + 'static,
{
    let owned_addr = addr.to_string();
    let cell = cell.clone();
    let task = tokio::task::spawn_blocking(move || {
        let ctx = {
            let mut slot = cell.0.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = Arc::new(Ctx::new(&owned_addr)?);
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        f(&ctx)
    });
    match tokio::time::timeout(CALL_TIMEOUT, task).await {
        Err(_) => Err(ClientError::Transport(format!(
            "no answer from {addr} within {CALL_TIMEOUT:?}"
        ))),
        Ok(Ok(r)) => r,
        Ok(Err(e)) if e.is_panic() => {
            let p = e.into_panic();
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "non-string panic".into());
            Err(ClientError::Panicked(msg))
        }
        Ok(Err(e)) => Err(ClientError::Join(e.to_string())),
    }
}

/// Everything one blocking call needs; built and dropped on the blocking thread.
pub(super) struct Ctx {
    tp: TpClient,
    http: HttpClient,
    base: Url,
}

impl Ctx {
    fn new(addr: &str) -> Result<Ctx, ClientError> {
        let bad = |reason: String| ClientError::BadAddress {
            addr: addr.to_string(),
            reason,
        };
        let sock: SocketAddr = addr
            .to_socket_addrs()
            .map_err(|e| bad(e.to_string()))?
            .next()
            .ok_or_else(|| bad("resolves to no address".into()))?;
        let http = HttpClient::builder()
            .timeout(HTTP_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let base = Url::parse(&format!("http://{sock}/")).map_err(|e| bad(e.to_string()))?;
        Ok(Ctx {
            tp: TpClient::new(sock),
            http,
            base,
        })
    }

    /// Raw request; non-2xx answers become [`ClientError::Api`].
    pub(super) fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<String, ClientError> {
        let mut url = self.base.clone();
        url.set_path(path);
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let resp = req
            .send()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let text = resp
            .text()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        api_answer(status, text)
    }

    /// Held changes over raw HTTP ([`held::send_held`]).
    fn send_held(&self, requests: &[RawRequest], hold: &Hold) -> Result<Vec<String>, ClientError> {
        held::send_held(&self.base, requests, hold)
    }

    /// One POST as a change: held until its instant as raw HTTP (see [`held::send_held`]),
    /// or sent now. Returns the answer's body: the object as this change left it.
    fn post_change(&self, path: &str, body: Value, hold: &Hold) -> Result<String, ClientError> {
        if hold.until.is_some() {
            let mut answers = self.send_held(&[("POST", path.to_string(), Some(body))], hold)?;
            Ok(answers.pop().unwrap_or_default())
        } else {
            hold.change(|| self.send(Method::POST, path, Some(&body)))
        }
    }

    fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let text = self.send(Method::GET, path, None)?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadBody(format!("{e}: {text}")))
    }

    /// One proxy, read over raw HTTP (a 404 as [`ClientError::Api`]).
    pub(super) fn proxy(&self, name: &str) -> Result<ProxyInfo, ClientError> {
        self.get_json(&format!("/proxies/{name}"))
    }

    fn tp_proxy(&self, name: &str) -> Result<TpProxy, ClientError> {
        // Checked over raw HTTP first: toxiproxy_rust reports a 404 as a JSON parse failure.
        self.proxy(name)?;
        self.tp.find_proxy(name).map_err(ClientError::Transport)
    }

    /// Create one proxy; 409 if the name exists. Raw HTTP: toxiproxy_rust can only
    /// `populate`, which silently replaces.
    pub(super) fn create_proxy(&self, spec: &ProxySpec) -> Result<ProxyInfo, ClientError> {
        let body = json!({"name": spec.name, "listen": spec.listen, "upstream": spec.upstream,
                          "enabled": spec.enabled});
        let text = self.send(Method::POST, "/proxies", Some(&body))?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadBody(format!("{e}: {text}")))
    }

    /// Create or replace proxies (toxiproxy_rust `populate`), then make each match its spec.
    pub(super) fn populate(&self, specs: &[ProxySpec]) -> Result<Vec<ProxyInfo>, ClientError> {
        if specs.is_empty() {
            // Toxiproxy answers `{"proxies": null}` here, which toxiproxy_rust cannot parse.
            return Ok(Vec::new());
        }
        let packs = specs
            .iter()
            .map(|s| {
                let mut p = ProxyPack::new(s.name.clone(), s.listen.clone(), s.upstream.clone());
                p.enabled = s.enabled;
                p
            })
            .collect();
        self.tp.populate(packs).map_err(ClientError::Transport)?;
        let mut out = Vec::with_capacity(specs.len());
        for s in specs {
            let mut got = self.proxy(&s.name)?;
            if got.upstream != s.upstream {
                return Err(ClientError::NotApplied(format!(
                    "proxy {} has upstream {}",
                    s.name, got.upstream
                )));
            }
            if got.enabled != s.enabled {
                // Toxiproxy keeps an identical existing proxy as it was, enabled flag included.
                got = self
                    .set_enabled(std::slice::from_ref(&s.name), s.enabled, &Hold::default())?
                    .remove(0);
            }
            out.push(got);
        }
        Ok(out)
    }

    /// Create or replace the toxic `<type>_<stream>` and read it back.
    pub(super) fn set_toxic(
        &self,
        proxy: &str,
        toxic: &ToxicSpec,
        hold: &Hold,
    ) -> Result<ToxicInfo, ClientError> {
        let kind = toxic.kind.type_name();
        let name = toxic.name();
        let attrs = toxic.kind.attributes();
        let current = self.proxy(proxy)?;
        let attr_json: serde_json::Map<String, Value> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let toxic_path = format!("/proxies/{proxy}/toxics/{name}");
        let existing = current.toxics.iter().find(|t| t.name == name);
        let update = json!({"attributes": attr_json, "toxicity": toxic.toxicity});
        // The answer to our own change is the read-back: a later change landing at the same
        // instant (two faults of a kind on one link) may replace it before a GET would look.
        let answer = if existing.is_some_and(|t| t.kind == kind) {
            // Update in place rather than delete+create: no window where the fault is lifted.
            Some(self.post_change(&toxic_path, update, hold)?)
        } else {
            if existing.is_some() {
                // A hand-made toxic squatting on the name: remove it so ours can be created.
                self.send(Method::DELETE, &toxic_path, None)?;
            }
            match crate_creator(toxic) {
                Some(create) if hold.until.is_none() => {
                    let p = self.tp.find_proxy(proxy).map_err(ClientError::Transport)?;
                    hold.change(|| {
                        create(&p);
                        Ok(())
                    })?;
                    None
                }
                _ => {
                    let body = json!({"name": name, "type": kind, "stream": toxic.stream.as_str(),
                                      "toxicity": toxic.toxicity, "attributes": attr_json});
                    let path = format!("/proxies/{proxy}/toxics");
                    match self.post_change(&path, body, hold) {
                        // Another change made the same toxic since we looked (two faults of a
                        // kind landing on one link at once): update it in place instead.
                        Err(ClientError::Api { status: 409, .. }) => {
                            Some(self.post_change(&toxic_path, update, hold)?)
                        }
                        r => Some(r?),
                    }
                }
            }
        };
        let got: ToxicInfo = match answer {
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| ClientError::BadBody(format!("{e}: {text}")))?,
            None => self.get_json(&toxic_path)?,
        };
        let attrs_ok = attrs
            .iter()
            .all(|(k, v)| got.attr_i64(k) == Some(i64::from(*v)));
        if got.kind != kind
            || !got.stream.eq_ignore_ascii_case(toxic.stream.as_str())
            || !attrs_ok
            || got.toxicity != toxic.toxicity
        {
            return Err(ClientError::NotApplied(format!(
                "toxic {name} on {proxy} reads back as {got:?}"
            )));
        }
        Ok(got)
    }

    /// Remove one toxic by name. Raw HTTP: toxiproxy_rust can only delete all toxics.
    pub(super) fn remove_toxic(&self, proxy: &str, toxic: &str) -> Result<(), ClientError> {
        let path = format!("/proxies/{proxy}/toxics/{toxic}");
        self.send(Method::DELETE, &path, None).map(|_| ())
    }

    /// Enable or disable proxies and read each back. Held, every change goes at the instant in
    /// one burst (their last bytes written back to back from this thread), not one thread's
    /// wake-up each: a node's five links cut together land in one round trip.
    pub(super) fn set_enabled(
        &self,
        proxies: &[String],
        enabled: bool,
        hold: &Hold,
    ) -> Result<Vec<ProxyInfo>, ClientError> {
        if hold.until.is_some() {
            let mut requests = Vec::with_capacity(proxies.len());
            for proxy in proxies {
                self.proxy(proxy)?;
                let body = json!({ "enabled": enabled });
                requests.push(("POST", format!("/proxies/{proxy}"), Some(body)));
            }
            self.send_held(&requests, hold)?;
        } else {
            for proxy in proxies {
                let p = self.tp_proxy(proxy)?;
                hold.change(|| {
                    if enabled { p.enable() } else { p.disable() }.map_err(ClientError::Transport)
                })?;
            }
        }
        let mut out = Vec::with_capacity(proxies.len());
        for proxy in proxies {
            let got = self.proxy(proxy)?;
            if got.enabled != enabled {
                return Err(ClientError::NotApplied(format!(
                    "proxy {proxy} still has enabled={}",
                    got.enabled
                )));
            }
            out.push(got);
        }
        Ok(out)
    }

    /// Forward the proxy to another upstream (its listen address, toxics and enabled flag
    /// kept; its open connections cut, as Toxiproxy's update does), and read it back.
    pub(super) fn set_upstream(
        &self,
        proxy: &str,
        upstream: &str,
        hold: &Hold,
    ) -> Result<ProxyInfo, ClientError> {
        self.proxy(proxy)?;
        let body = json!({ "upstream": upstream });
        self.post_change(&format!("/proxies/{proxy}"), body, hold)?;
        let got = self.proxy(proxy)?;
        if got.upstream != upstream {
            return Err(ClientError::NotApplied(format!(
                "proxy {proxy} still forwards to {}",
                got.upstream
            )));
        }
        Ok(got)
    }

    /// Remove every toxic of the proxy and enable it (toxiproxy_rust `find_and_reset_proxy`),
    /// and read it back.
    pub(super) fn heal(&self, proxy: &str, hold: &Hold) -> Result<ProxyInfo, ClientError> {
        let before = self.proxy(proxy)?;
        if hold.until.is_some() {
            // Every toxic removed, then enabled, each request sent at the instant.
            let mut requests: Vec<RawRequest> = before
                .toxics
                .iter()
                .map(|t| {
                    let path = format!("/proxies/{proxy}/toxics/{}", t.name);
                    ("DELETE", path, None)
                })
                .collect();
            if !before.enabled {
                let enable = Some(json!({ "enabled": true }));
                requests.push(("POST", format!("/proxies/{proxy}"), enable));
            }
            if requests.is_empty() {
                hold.change(|| Ok(()))?;
            } else {
                self.send_held(&requests, hold)?;
            }
        } else {
            hold.change(|| {
                self.tp
                    .find_and_reset_proxy(proxy)
                    .map_err(ClientError::Transport)
            })?;
        }
        let got = self.proxy(proxy)?;
        if !got.enabled || !got.toxics.is_empty() {
            return Err(ClientError::NotApplied(format!(
                "proxy {proxy} after heal: {got:?}"
            )));
        }
        Ok(got)
    }

    /// `POST /reset` (every proxy enabled, every toxic removed), read back.
    pub(super) fn reset(&self, hold: &Hold) -> Result<(), ClientError> {
        hold.change(|| self.tp.reset().map_err(ClientError::Transport))?;
        let all: HashMap<String, ProxyInfo> = self.get_json("/proxies")?;
        for p in all.values() {
            if !p.enabled || !p.toxics.is_empty() {
                return Err(ClientError::NotApplied(format!("after reset: {p:?}")));
            }
        }
        Ok(())
    }

    /// All proxies with their toxics (toxiproxy_rust `all`).
    pub(super) fn list(&self) -> Result<HashMap<String, ProxyInfo>, ClientError> {
        match self.tp.all() {
            Ok(m) => Ok(m
                .into_iter()
                .map(|(k, p)| (k, from_pack(p.proxy_pack)))
                .collect()),
            // toxiproxy_rust wants u32 attributes and hides error statuses behind a parse
            // failure; the raw read gives the real status or parses what it could not.
            Err(_) => self.get_json("/proxies"),
        }
    }

    /// Delete a proxy (toxiproxy_rust `Proxy::delete`), verified gone.
    pub(super) fn delete_proxy(&self, proxy: &str) -> Result<(), ClientError> {
        self.tp_proxy(proxy)?
            .delete()
            .map_err(ClientError::Transport)?;
        match self.proxy(proxy) {
            Err(ClientError::Api { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
            Ok(p) => Err(ClientError::NotApplied(format!(
                "proxy still exists: {p:?}"
            ))),
        }
    }

    /// The server's version string (JSON `{"version"}` since Toxiproxy 2.7.0, plain text before).
    pub(super) fn version(&self) -> Result<String, ClientError> {
        let body = self.tp.version().map_err(ClientError::Transport)?;
        Ok(serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| {
                v.get("version")
                    .and_then(|s| s.as_str())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| body.trim().to_string()))
    }
}

/// A toxic created through toxiproxy_rust's `with_*` for it.
type Creator<'a> = Box<dyn Fn(&TpProxy) + 'a>;

/// toxiproxy_rust's creator for the toxic; None for the types it has none for.
fn crate_creator(toxic: &ToxicSpec) -> Option<Creator<'_>> {
    let stream = || toxic.stream.as_str().to_string();
    let t = toxic.toxicity;
    Some(match toxic.kind {
        ToxicKind::Latency {
            latency_ms,
            jitter_ms,
        } => Box::new(move |p| {
            p.with_latency(stream(), latency_ms, jitter_ms, t);
        }),
        ToxicKind::Bandwidth { rate_kb } => Box::new(move |p| {
            p.with_bandwidth(stream(), rate_kb, t);
        }),
        ToxicKind::SlowClose { delay_ms } => Box::new(move |p| {
            p.with_slow_close(stream(), delay_ms, t);
        }),
        ToxicKind::Timeout { timeout_ms } => Box::new(move |p| {
            p.with_timeout(stream(), timeout_ms, t);
        }),
        ToxicKind::LimitData { bytes } => Box::new(move |p| {
            p.with_limit_data(stream(), bytes, t);
        }),
        ToxicKind::Slicer {
            average_size_bytes,
            size_variation_bytes,
            delay_us,
        } => Box::new(move |p| {
            p.with_slicer(
                stream(),
                average_size_bytes,
                size_variation_bytes,
                delay_us,
                t,
            );
        }),
        ToxicKind::Noop | ToxicKind::ResetPeer { .. } => return None,
    })
}

fn from_pack(p: ProxyPack) -> ProxyInfo {
    ProxyInfo {
        name: p.name,
        listen: p.listen,
        upstream: p.upstream,
        enabled: p.enabled,
        toxics: p
            .toxics
            .into_iter()
            .map(|t| ToxicInfo {
                attributes: t
                    .attributes
                    .into_iter()
                    .map(|(k, v)| (k, json!(v)))
                    .collect(),
                name: t.name,
                kind: t.r#type,
                stream: t.stream,
                toxicity: t.toxicity,
            })
            .collect(),
    }
}
