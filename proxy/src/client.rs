//! The project's one wrapper around the blocking `toxiproxy_rust` 0.1.6 client: async, status-checked.
//!
//! Facts about toxiproxy_rust 0.1.6 this wrapper works around (read from its source):
//! - It is blocking (reqwest::blocking); building, using or dropping its client on an async
//!   worker thread panics, so every call runs inside `tokio::task::spawn_blocking`.
//! - `Client::new` takes `ToSocketAddrs` and unwraps the resolution (panics on a bad address),
//!   so the address is resolved here first and a bad one is an error, not a panic.
//! - It ignores HTTP status codes, so after each change the wrapper reads the state back over
//!   the API and fails with [`ClientError::NotApplied`] if the change did not take.
//! - It names every toxic `<type>_<stream>`; a second toxic of a type on a stream would be a
//!   409 it does not report, so an existing toxic of that name is updated in place instead.
//! - Its `with_*` toxic creators panic on transport errors; the panic is caught as an error.
//! - It has no `reset_peer`, no single-proxy create, no single-toxic delete: those go over
//!   raw HTTP (reqwest::blocking, same version toxiproxy_rust pulls in).

use crate::error::ClientError;
use crate::model::{ProxyInfo, ProxySpec, Stream, ToxicInfo};
use reqwest::blocking::Client as HttpClient;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toxiproxy_rust::client::Client as TpClient;
use toxiproxy_rust::proxy::ProxyPack;

/// Per-request timeout for the raw HTTP calls (toxiproxy_rust's own reqwest default is 30 s).
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound on one wrapper call, including toxiproxy_rust's several requests.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Async client for a Toxiproxy API (a real Toxiproxy or [`crate::server`]). Clones share
/// one underlying toxiproxy_rust/reqwest client.
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

/// When a change is made: by default at once; for a clone made by
/// [`ToxiproxyClient::held_until`], the call does its reads first, waits on its
/// blocking thread until the instant, then sends the change, so a fault lands on
/// time however long the reads took. It remembers when the change was answered.
#[derive(Clone, Default)]
struct Hold {
    until: Option<Instant>,
    /// Run once, right before the first change is sent (a caller records the fault's start).
    on_release: Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>,
    /// Set by the caller to call the change off while it waits.
    cancel: Option<Arc<AtomicBool>>,
    /// When the last change of the call was answered (the server applies it before answering).
    landed: Arc<Mutex<Option<Instant>>>,
}

impl Hold {
    /// Wait for the instant, then make the change `f` and note when it was answered.
    fn change<T>(&self, f: impl FnOnce() -> Result<T, ClientError>) -> Result<T, ClientError> {
        // A held change's thread wakes and sends at real-time priority (see crate::realtime),
        // then goes back to normal: it is a pool thread.
        let realtime = self.until.is_some() && crate::realtime::raise_current_thread();
        let out = self.change_now(f);
        if realtime {
            crate::realtime::lower_current_thread();
        }
        out
    }

    fn change_now<T>(&self, f: impl FnOnce() -> Result<T, ClientError>) -> Result<T, ClientError> {
        if let Some(at) = self.until {
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
        }
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst))
        {
            return Err(ClientError::NotApplied("called off before its time".into()));
        }
        if let Some(release) = self.on_release.lock().unwrap().take() {
            release();
        }
        let out = f();
        let now = Instant::now();
        let mut landed = self.landed.lock().unwrap();
        *landed = Some(landed.map_or(now, |l| l.max(now)));
        out
    }
}

/// The lazily built clients. Building a reqwest client loads TLS roots (~100 ms), so it is
/// built once, on a blocking thread, and reused.
struct CtxCell(Mutex<Option<Arc<Ctx>>>);

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

/// A request written but for its last byte (see [`Ctx::prepare`]).
struct Prepared {
    stream: std::net::TcpStream,
    last: u8,
}

impl Prepared {
    /// Read the whole answer (the request said `Connection: close`); its body, or the error.
    fn answer(mut self) -> Result<String, ClientError> {
        use std::io::Read;
        let mut raw = Vec::new();
        self.stream
            .read_to_end(&mut raw)
            .map_err(|e| ClientError::Transport(format!("reading the answer: {e}")))?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| ClientError::Transport(format!("not an HTTP answer: {text:?}")))?;
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ClientError::Transport(format!("no status in {head:?}")))?;
        let chunked = head.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("transfer-encoding:") && l.contains("chunked")
        });
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        api_answer(status, body)
    }
}

/// A 2xx answer's body, or the API's error (Toxiproxy's `{"error": ...}` when it sent one).
fn api_answer(status: u16, body: String) -> Result<String, ClientError> {
    if !(200..300).contains(&status) {
        let message = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_else(|| body.trim().to_string());
        return Err(ClientError::Api { status, message });
    }
    Ok(body)
}

/// The body of a chunked HTTP/1.1 answer.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// Everything one blocking call needs; built and dropped on the blocking thread.
struct Ctx {
    tp: TpClient,
    http: HttpClient,
    base: Url,
}

impl Ctx {
    fn new(addr: &str) -> Result<Ctx, ClientError> {
        let sock: SocketAddr = addr
            .to_socket_addrs()
            .map_err(|e| ClientError::BadAddress {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?
            .next()
            .ok_or_else(|| ClientError::BadAddress {
                addr: addr.to_string(),
                reason: "resolves to no address".into(),
            })?;
        let http = HttpClient::builder()
            .timeout(HTTP_TIMEOUT)
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?;
        let base = Url::parse(&format!("http://{sock}/")).map_err(|e| ClientError::BadAddress {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Ctx {
            tp: TpClient::new(sock),
            http,
            base,
        })
    }

    /// A raw request made ready to land at an instant: connected, and written up to its
    /// last byte, so at the instant only that byte is sent (see [`Ctx::send_held`]).
    fn prepare(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Prepared, ClientError> {
        use std::io::Write;
        let addr = format!(
            "{}:{}",
            self.base.host_str().unwrap_or("127.0.0.1"),
            self.base.port_or_known_default().unwrap_or(8474)
        );
        let t = |e: std::io::Error| ClientError::Transport(format!("{addr}: {e}"));
        let sock = addr
            .to_socket_addrs()
            .map_err(t)?
            .next()
            .ok_or_else(|| ClientError::Transport(format!("{addr}: no address")))?;
        let mut stream = std::net::TcpStream::connect_timeout(&sock, HTTP_TIMEOUT).map_err(t)?;
        stream.set_nodelay(true).map_err(t)?;
        stream.set_read_timeout(Some(HTTP_TIMEOUT)).map_err(t)?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if !body.is_empty() {
            req.push_str("Content-Type: application/json\r\n");
        }
        req.push_str("\r\n");
        req.push_str(&body);
        let bytes = req.into_bytes();
        let (head, last) = bytes.split_at(bytes.len() - 1);
        stream.write_all(head).map_err(t)?;
        Ok(Prepared {
            stream,
            last: last[0],
        })
    }

    /// Held changes over raw HTTP: each request connected and written but for its last byte
    /// before the instant, then at the instant the last bytes all go out and the answers are
    /// read. Sending whole requests at the instant through the pooled client took up to 4.5 ms
    /// under load (connects, its one runtime thread); a byte is a single write. Non-2xx
    /// answers become [`ClientError::Api`].
    fn send_held(
        &self,
        requests: &[(&str, String, Option<Value>)],
        hold: &Hold,
    ) -> Result<Vec<String>, ClientError> {
        let mut ready = Vec::with_capacity(requests.len());
        for (method, path, body) in requests {
            ready.push(self.prepare(method, path, body.as_ref())?);
        }
        hold.change(|| {
            use std::io::Write;
            for r in ready.iter_mut() {
                r.stream
                    .write_all(&[r.last])
                    .map_err(|e| ClientError::Transport(e.to_string()))?;
            }
            ready.into_iter().map(Prepared::answer).collect()
        })
    }

    /// One POST as a change: held until its instant as raw HTTP (see [`Ctx::send_held`]),
    /// or sent now.
    fn post_change(&self, path: &str, body: Value, hold: &Hold) -> Result<(), ClientError> {
        if hold.until.is_some() {
            self.send_held(&[("POST", path.to_string(), Some(body))], hold)?;
        } else {
            hold.change(|| self.send(Method::POST, path, Some(&body)))?;
        }
        Ok(())
    }

    /// Raw request; non-2xx answers become [`ClientError::Api`].
    fn send(
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

    fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let text = self.send(Method::GET, path, None)?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadBody(format!("{e}: {text}")))
    }

    fn proxy(&self, name: &str) -> Result<ProxyInfo, ClientError> {
        self.get_json(&format!("/proxies/{name}"))
    }

    fn tp_proxy(&self, name: &str) -> Result<toxiproxy_rust::proxy::Proxy, ClientError> {
        // Checked over raw HTTP first: toxiproxy_rust reports a 404 as a JSON parse failure.
        self.proxy(name)?;
        self.tp.find_proxy(name).map_err(ClientError::Transport)
    }

    /// Create or replace the toxic `<kind>_<stream>` and verify it took.
    fn set_toxic(
        &self,
        proxy: &str,
        kind: &str,
        stream: Stream,
        attrs: &[(&str, u32)],
        create: Option<&dyn Fn(&toxiproxy_rust::proxy::Proxy)>,
        hold: &Hold,
    ) -> Result<ToxicInfo, ClientError> {
        let name = format!("{kind}_{}", stream.as_str());
        let current = self.proxy(proxy)?;
        let attr_json: serde_json::Map<String, Value> = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let toxic_path = format!("/proxies/{proxy}/toxics/{name}");
        let existing = current.toxics.iter().find(|t| t.name == name);
        if existing.is_some_and(|t| t.kind == kind) {
            // Update in place rather than delete+create: no window where the fault is lifted.
            let body = json!({"attributes": attr_json, "toxicity": 1.0});
            self.post_change(&toxic_path, body, hold)?;
        } else {
            if existing.is_some() {
                // A hand-made toxic squatting on the name: remove it so ours can be created.
                self.send(Method::DELETE, &toxic_path, None)?;
            }
            match create {
                // A held change goes over raw HTTP: toxiproxy_rust serializes every call on one
                // mutex, so changes due together through it would land one after another.
                Some(create) if hold.until.is_none() => {
                    let p = self.tp.find_proxy(proxy).map_err(ClientError::Transport)?;
                    hold.change(|| {
                        create(&p);
                        Ok(())
                    })?;
                }
                _ => {
                    let body = json!({"name": name, "type": kind, "stream": stream.as_str(),
                                      "toxicity": 1.0, "attributes": attr_json});
                    let path = format!("/proxies/{proxy}/toxics");
                    self.post_change(&path, body, hold)?;
                }
            }
        }
        let got: ToxicInfo = self.get_json(&toxic_path)?;
        let attrs_ok = attrs
            .iter()
            .all(|(k, v)| got.attr_i64(k) == Some(i64::from(*v)));
        if got.kind != kind
            || !got.stream.eq_ignore_ascii_case(stream.as_str())
            || !attrs_ok
            || got.toxicity != 1.0
        {
            return Err(ClientError::NotApplied(format!(
                "toxic {name} on {proxy} reads back as {got:?}"
            )));
        }
        Ok(got)
    }

    fn set_enabled(
        &self,
        proxy: &str,
        enabled: bool,
        hold: &Hold,
    ) -> Result<ProxyInfo, ClientError> {
        if hold.until.is_some() {
            // Raw HTTP for a held change (see set_toxic).
            self.proxy(proxy)?;
            let body = json!({ "enabled": enabled });
            let path = format!("/proxies/{proxy}");
            self.send_held(&[("POST", path, Some(body))], hold)?;
        } else {
            let p = self.tp_proxy(proxy)?;
            hold.change(|| {
                if enabled { p.enable() } else { p.disable() }.map_err(ClientError::Transport)
            })?;
        }
        let got = self.proxy(proxy)?;
        if got.enabled != enabled {
            return Err(ClientError::NotApplied(format!(
                "proxy {proxy} still has enabled={}",
                got.enabled
            )));
        }
        Ok(got)
    }
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

impl ToxiproxyClient {
    /// `api_addr` is `host:port` of the API (e.g. `127.0.0.1:8474` or [`crate::ProxyServer::api_addr`]).
    pub fn new(api_addr: impl ToString) -> Self {
        ToxiproxyClient {
            addr: api_addr.to_string(),
            ctx: Arc::new(CtxCell(Mutex::new(None))),
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
            hold: Hold {
                until: Some(at),
                on_release: Arc::new(Mutex::new(on_release)),
                cancel,
                landed: Arc::new(Mutex::new(None)),
            },
        }
    }

    /// When this clone's last change was answered by the server (None before any change).
    pub fn landed(&self) -> Option<Instant> {
        *self.hold.landed.lock().unwrap()
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn call<T, F>(&self, f: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(&Ctx) -> Result<T, ClientError> + Send + 'static,
    {
        let addr = self.addr.clone();
        let cell = self.ctx.clone();
        let task = tokio::task::spawn_blocking(move || {
            let ctx = {
                let mut slot = cell.0.lock().unwrap_or_else(|p| p.into_inner());
                match slot.as_ref() {
                    Some(c) => c.clone(),
                    None => {
                        let c = Arc::new(Ctx::new(&addr)?);
                        *slot = Some(c.clone());
                        c
                    }
                }
            };
            f(&ctx)
        });
        match tokio::time::timeout(CALL_TIMEOUT, task).await {
            Err(_) => Err(ClientError::Transport(format!(
                "no answer from {} within {CALL_TIMEOUT:?}",
                self.addr
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

    /// Create one proxy; 409 if the name exists. Raw HTTP: toxiproxy_rust can only `populate`,
    /// which silently replaces.
    pub async fn create_proxy(
        &self,
        name: &str,
        listen: &str,
        upstream: &str,
    ) -> Result<ProxyInfo, ClientError> {
        let body = json!({"name": name, "listen": listen, "upstream": upstream, "enabled": true});
        self.call(move |c| {
            let text = c.send(Method::POST, "/proxies", Some(&body))?;
            serde_json::from_str(&text).map_err(|e| ClientError::BadBody(format!("{e}: {text}")))
        })
        .await
    }

    /// Create or replace proxies (toxiproxy_rust `populate`), then make each match its spec.
    pub async fn populate(&self, specs: &[ProxySpec]) -> Result<Vec<ProxyInfo>, ClientError> {
        let specs = specs.to_vec();
        self.call(move |c| {
            if specs.is_empty() {
                // Toxiproxy answers `{"proxies": null}` here, which toxiproxy_rust cannot parse.
                return Ok(Vec::new());
            }
            let packs = specs
                .iter()
                .map(|s| {
                    let mut p =
                        ProxyPack::new(s.name.clone(), s.listen.clone(), s.upstream.clone());
                    p.enabled = s.enabled;
                    p
                })
                .collect();
            c.tp.populate(packs).map_err(ClientError::Transport)?;
            let mut out = Vec::with_capacity(specs.len());
            for s in &specs {
                let mut got = c.proxy(&s.name)?;
                if got.upstream != s.upstream {
                    return Err(ClientError::NotApplied(format!(
                        "proxy {} has upstream {}",
                        s.name, got.upstream
                    )));
                }
                if got.enabled != s.enabled {
                    // Toxiproxy keeps an identical existing proxy as it was, enabled flag included.
                    got = c.set_enabled(&s.name, s.enabled, &Hold::default())?;
                }
                out.push(got);
            }
            Ok(out)
        })
        .await
    }

    /// Add (or replace) `latency_<stream>`: every chunk delayed `latency_ms` ± `jitter_ms`.
    pub async fn latency(
        &self,
        proxy: &str,
        stream: Stream,
        latency_ms: u32,
        jitter_ms: u32,
    ) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            c.set_toxic(
                &proxy,
                "latency",
                stream,
                &[("latency", latency_ms), ("jitter", jitter_ms)],
                Some(&|p| {
                    p.with_latency(stream.as_str().into(), latency_ms, jitter_ms, 1.0);
                }),
                &hold,
            )
        })
        .await
    }

    /// Add (or replace) `bandwidth_<stream>` limited to `rate_kb` KB/s.
    pub async fn bandwidth(
        &self,
        proxy: &str,
        stream: Stream,
        rate_kb: u32,
    ) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            c.set_toxic(
                &proxy,
                "bandwidth",
                stream,
                &[("rate", rate_kb)],
                Some(&|p| {
                    p.with_bandwidth(stream.as_str().into(), rate_kb, 1.0);
                }),
                &hold,
            )
        })
        .await
    }

    /// Add (or replace) `timeout_<stream>`: data dropped; closed after `timeout_ms` (0 = never).
    pub async fn timeout(
        &self,
        proxy: &str,
        stream: Stream,
        timeout_ms: u32,
    ) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            c.set_toxic(
                &proxy,
                "timeout",
                stream,
                &[("timeout", timeout_ms)],
                Some(&|p| {
                    p.with_timeout(stream.as_str().into(), timeout_ms, 1.0);
                }),
                &hold,
            )
        })
        .await
    }

    /// Add (or replace) `slow_close_<stream>`: a close is passed on after `delay_ms`.
    pub async fn slow_close(
        &self,
        proxy: &str,
        stream: Stream,
        delay_ms: u32,
    ) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            c.set_toxic(
                &proxy,
                "slow_close",
                stream,
                &[("delay", delay_ms)],
                Some(&|p| {
                    p.with_slow_close(stream.as_str().into(), delay_ms, 1.0);
                }),
                &hold,
            )
        })
        .await
    }

    /// Add (or replace) `limit_data_<stream>`: close once `bytes` have passed.
    pub async fn limit_data(
        &self,
        proxy: &str,
        stream: Stream,
        bytes: u32,
    ) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            c.set_toxic(
                &proxy,
                "limit_data",
                stream,
                &[("bytes", bytes)],
                Some(&|p| {
                    p.with_limit_data(stream.as_str().into(), bytes, 1.0);
                }),
                &hold,
            )
        })
        .await
    }

    /// Add (or replace) `reset_peer_<stream>`: TCP RST `timeout_ms` after the next data.
    /// Raw HTTP: toxiproxy_rust 0.1.6 has no reset_peer.
    pub async fn reset_peer(
        &self,
        proxy: &str,
        stream: Stream,
        timeout_ms: u32,
    ) -> Result<ToxicInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            c.set_toxic(
                &proxy,
                "reset_peer",
                stream,
                &[("timeout", timeout_ms)],
                None,
                &hold,
            )
        })
        .await
    }

    /// Remove one toxic by name. Raw HTTP: toxiproxy_rust can only delete all toxics.
    pub async fn remove_toxic(&self, proxy: &str, toxic: &str) -> Result<(), ClientError> {
        let path = format!("/proxies/{proxy}/toxics/{toxic}");
        self.call(move |c| c.send(Method::DELETE, &path, None).map(|_| ()))
            .await
    }

    /// Disable the proxy: the listener closes and open connections are cut.
    pub async fn down(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| c.set_enabled(&proxy, false, &hold))
            .await
    }

    /// Enable the proxy again (same listen address).
    pub async fn up(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| c.set_enabled(&proxy, true, &hold)).await
    }

    /// Remove every toxic of the proxy and enable it (toxiproxy_rust `find_and_reset_proxy`).
    pub async fn heal(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        let proxy = proxy.to_string();
        let hold = self.hold.clone();
        self.call(move |c| {
            let before = c.proxy(&proxy)?;
            if hold.until.is_some() {
                // Raw HTTP for a held change (see set_toxic): every toxic removed, then enabled.
                let mut requests: Vec<(&str, String, Option<Value>)> = before
                    .toxics
                    .iter()
                    .map(|t| {
                        (
                            "DELETE",
                            format!("/proxies/{proxy}/toxics/{}", t.name),
                            None,
                        )
                    })
                    .collect();
                if !before.enabled {
                    requests.push((
                        "POST",
                        format!("/proxies/{proxy}"),
                        Some(json!({ "enabled": true })),
                    ));
                }
                if requests.is_empty() {
                    hold.change(|| Ok(()))?;
                } else {
                    c.send_held(&requests, &hold)?;
                }
            } else {
                hold.change(|| {
                    c.tp.find_and_reset_proxy(&proxy)
                        .map_err(ClientError::Transport)
                })?;
            }
            let got = c.proxy(&proxy)?;
            if !got.enabled || !got.toxics.is_empty() {
                return Err(ClientError::NotApplied(format!(
                    "proxy {proxy} after heal: {got:?}"
                )));
            }
            Ok(got)
        })
        .await
    }

    /// `POST /reset`: every proxy enabled, every toxic removed.
    pub async fn reset(&self) -> Result<(), ClientError> {
        let hold = self.hold.clone();
        self.call(move |c| {
            hold.change(|| c.tp.reset().map_err(ClientError::Transport))?;
            let all: HashMap<String, ProxyInfo> = c.get_json("/proxies")?;
            for p in all.values() {
                if !p.enabled || !p.toxics.is_empty() {
                    return Err(ClientError::NotApplied(format!("after reset: {p:?}")));
                }
            }
            Ok(())
        })
        .await
    }

    /// All proxies with their toxics (toxiproxy_rust `all`).
    pub async fn list(&self) -> Result<HashMap<String, ProxyInfo>, ClientError> {
        self.call(|c| match c.tp.all() {
            Ok(m) => Ok(m
                .into_iter()
                .map(|(k, p)| (k, from_pack(p.proxy_pack)))
                .collect()),
            // toxiproxy_rust wants u32 attributes and hides error statuses behind a parse
            // failure; the raw read gives the real status or parses what it could not.
            Err(_) => c.get_json("/proxies"),
        })
        .await
    }

    /// One proxy, 404 as [`ClientError::Api`].
    pub async fn get(&self, proxy: &str) -> Result<ProxyInfo, ClientError> {
        let proxy = proxy.to_string();
        self.call(move |c| c.proxy(&proxy)).await
    }

    /// Delete a proxy (toxiproxy_rust `Proxy::delete`), verified gone.
    pub async fn delete_proxy(&self, proxy: &str) -> Result<(), ClientError> {
        let proxy = proxy.to_string();
        self.call(move |c| {
            c.tp_proxy(&proxy)?
                .delete()
                .map_err(ClientError::Transport)?;
            match c.proxy(&proxy) {
                Err(ClientError::Api { status: 404, .. }) => Ok(()),
                Err(e) => Err(e),
                Ok(p) => Err(ClientError::NotApplied(format!(
                    "proxy still exists: {p:?}"
                ))),
            }
        })
        .await
    }

    /// The server's version string (JSON `{"version"}` since Toxiproxy 2.7.0, plain text before).
    pub async fn version(&self) -> Result<String, ClientError> {
        self.call(|c| {
            let body = c.tp.version().map_err(ClientError::Transport)?;
            Ok(serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| {
                    v.get("version")
                        .and_then(|s| s.as_str())
                        .map(str::to_string)
                })
                .unwrap_or_else(|| body.trim().to_string()))
        })
        .await
    }
}
