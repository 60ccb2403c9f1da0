//! The Toxiproxy 2.x HTTP API: routing, request bodies decoded as Go decodes them, and the handlers.

use super::gojson::{bool_field, decode_toxicity, get_field, go_kind, str_field};
use super::state::{dir_index, ApiErr, ProxyEntry, Shared};
use super::toxic::{decode_attributes, ToxicEntry};
use super::toxics;
use crate::model::Stream;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, LOCATION, USER_AGENT};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

/// Request bodies are small JSON documents; anything bigger is refused.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Toxiproxy's http.Server ReadTimeout.
const READ_TIMEOUT: Duration = Duration::from_secs(15);
/// Toxiproxy's timeoutMiddleware answers 503 after this.
const HANDLER_TIMEOUT: Duration = Duration::from_secs(25);
/// Concurrent API connections; more are closed on accept.
const MAX_API_CONNS: usize = 256;
/// No API connection lives longer than this, so a stuck client cannot pin a task.
const API_CONN_LIFETIME: Duration = Duration::from_secs(600);

/// The version string `/version` reports. Toxiproxy answers JSON `{"version": "..."}`
/// (plain text before 2.7.0); the value says which API this mirrors and that it is not Toxiproxy.
pub const VERSION: &str = concat!("2.12.0+chaos-proxy.", env!("CARGO_PKG_VERSION"));

type Resp = Response<Full<Bytes>>;

pub(crate) async fn serve_api(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    if conns.len() >= MAX_API_CONNS {
                        continue;
                    }
                    // Answers go out at once: with Nagle a second small write (hyper's body
                    // after its head) waits for the client's ACK.
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(handle(req, shared).await) }
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(READ_TIMEOUT)
                            .serve_connection(TokioIo::new(stream), svc);
                        let _ = tokio::time::timeout(API_CONN_LIFETIME, conn).await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    conns.shutdown().await;
}

enum Route {
    Reset,
    Proxies,
    Populate,
    Proxy(String),
    Toxics(String),
    Toxic(String, String),
    Version,
}

impl Route {
    fn allows(&self, m: &Method) -> bool {
        match self {
            Route::Reset | Route::Populate => m == Method::POST,
            Route::Proxies | Route::Toxics(_) => m == Method::GET || m == Method::POST,
            Route::Proxy(_) | Route::Toxic(..) => {
                m == Method::GET || m == Method::POST || m == Method::PATCH || m == Method::DELETE
            }
            Route::Version => m == Method::GET,
        }
    }
}

/// Go's net/url decodes the path before gorilla/mux matches it.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// gorilla/mux cleanPath: path.Clean, keeping a trailing slash.
fn clean_path(p: &str) -> String {
    if p.is_empty() {
        return "/".into();
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    let mut np = format!("/{}", parts.join("/"));
    if p.ends_with('/') && np != "/" {
        np.push('/');
    }
    np
}

fn route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let ok = |s: &str| !s.is_empty();
    Some(match segs.as_slice() {
        ["reset"] => Route::Reset,
        ["proxies"] => Route::Proxies,
        ["populate"] => Route::Populate,
        ["version"] => Route::Version,
        ["proxies", p] if ok(p) => Route::Proxy(p.to_string()),
        ["proxies", p, "toxics"] if ok(p) => Route::Toxics(p.to_string()),
        ["proxies", p, "toxics", t] if ok(p) && ok(t) => Route::Toxic(p.to_string(), t.to_string()),
        _ => return None,
    })
}

fn plain(status: u16, body: &str) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn empty(status: StatusCode) -> Resp {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

fn json_resp(status: StatusCode, body: Vec<u8>) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn to_json<T: serde::Serialize>(status: StatusCode, v: &T) -> Resp {
    match serde_json::to_vec(v) {
        Ok(b) => json_resp(status, b),
        Err(e) => error_resp(&ApiErr::internal(e)),
    }
}

/// Toxiproxy writes errors with http.Error: JSON text, a newline, and a text/plain content type.
fn error_resp(e: &ApiErr) -> Resp {
    let body = serde_json::json!({"error": e.message, "status": e.status});
    plain(e.status, &format!("{body}\n"))
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Resp {
    let raw_path = req.uri().path().to_string();
    let path = percent_decode(&raw_path);
    let cleaned = clean_path(&path);
    if cleaned != path {
        let mut r = empty(StatusCode::MOVED_PERMANENTLY);
        let loc = match req.uri().query() {
            Some(q) => format!("{cleaned}?{q}"),
            None => cleaned,
        };
        if let Ok(v) = HeaderValue::from_str(&loc) {
            r.headers_mut().insert(LOCATION, v);
        }
        return r;
    }
    let Some(route) = route(&path) else {
        return plain(404, "404 page not found\n");
    };
    let method = req.method().clone();
    if !route.allows(&method) {
        // gorilla/mux answers a known path with the wrong method by a bare 405.
        return empty(StatusCode::METHOD_NOT_ALLOWED);
    }
    let is_browser = req
        .headers()
        .get(USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ua| ua.starts_with("Mozilla/"));
    if is_browser {
        return plain(403, "User agent not allowed\n");
    }
    let body = match tokio::time::timeout(
        READ_TIMEOUT,
        Limited::new(req.into_body(), MAX_BODY_BYTES).collect(),
    )
    .await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => return error_resp(&ApiErr::bad_body(e)),
        Err(_) => return error_resp(&ApiErr::bad_body("read timeout")),
    };
    let changes = method != Method::GET;
    match tokio::time::timeout(HANDLER_TIMEOUT, dispatch(route, method, body, &shared)).await {
        Ok(mut r) => {
            if changes {
                // When the change took effect, for a held client (crate::applied).
                let ns = crate::applied::now_ns().to_string();
                if let Ok(v) = HeaderValue::from_str(&ns) {
                    r.headers_mut().insert(crate::applied::HEADER, v);
                }
            }
            r
        }
        Err(_) => empty(StatusCode::SERVICE_UNAVAILABLE),
    }
}

async fn dispatch(route: Route, method: Method, body: Bytes, shared: &Shared) -> Resp {
    let r = match (route, method) {
        (Route::Version, _) => Ok(version_resp()),
        (Route::Reset, _) => reset(shared).await,
        (Route::Proxies, Method::GET) => proxy_index(shared).await,
        (Route::Proxies, _) => proxy_create(shared, &body).await,
        (Route::Populate, _) => return populate(shared, &body).await,
        (Route::Proxy(p), Method::GET) => proxy_show(shared, &p).await,
        (Route::Proxy(p), Method::DELETE) => proxy_delete(shared, &p).await,
        (Route::Proxy(p), _) => proxy_update(shared, &p, &body).await,
        (Route::Toxics(p), Method::GET) => toxic_index(shared, &p).await,
        (Route::Toxics(p), _) => toxic_create(shared, &p, &body).await,
        (Route::Toxic(p, t), Method::GET) => toxic_show(shared, &p, &t).await,
        (Route::Toxic(p, t), Method::DELETE) => toxic_delete(shared, &p, &t).await,
        (Route::Toxic(p, t), _) => toxic_update(shared, &p, &t, &body).await,
    };
    r.unwrap_or_else(|e| error_resp(&e))
}

fn version_resp() -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(format!(
        "{{\"version\": \"{VERSION}\"}}\n"
    ))));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json;charset=utf-8"),
    );
    r
}

/// Decode the first JSON value of a body as Go's json.Decoder.Decode does (trailing data ignored).
fn first_json(body: &[u8]) -> Result<Value, ApiErr> {
    let mut it = serde_json::Deserializer::from_slice(body).into_iter::<Value>();
    match it.next() {
        None => Err(ApiErr::bad_body("EOF")),
        Some(Err(e)) if e.is_eof() => Err(ApiErr::bad_body("unexpected EOF")),
        Some(Err(e)) => Err(ApiErr::bad_body(e)),
        Some(Ok(v)) => Ok(v),
    }
}

/// A proxy body decoded onto defaults, as Toxiproxy decodes into a pre-filled Proxy.
struct ProxyInput {
    name: String,
    listen: String,
    upstream: String,
    enabled: Option<bool>,
}

fn decode_proxy(v: &Value, mut input: ProxyInput) -> Result<ProxyInput, String> {
    let obj = match v {
        Value::Object(o) => o,
        Value::Null => return Ok(input),
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type toxiproxy.Proxy",
                go_kind(other)
            ))
        }
    };
    str_field(obj, "name", "Proxy", &mut input.name)?;
    str_field(obj, "listen", "Proxy", &mut input.listen)?;
    str_field(obj, "upstream", "Proxy", &mut input.upstream)?;
    if let Some(b) = bool_field(obj, "enabled", "Proxy")? {
        input.enabled = Some(b);
    }
    Ok(input)
}

async fn proxy_index(shared: &Shared) -> Result<Resp, ApiErr> {
    let proxies = shared.proxies.lock().await;
    let map: BTreeMap<&str, _> = proxies
        .iter()
        .map(|(k, p)| (k.as_str(), p.json()))
        .collect();
    Ok(to_json(StatusCode::OK, &map))
}

async fn proxy_create(shared: &Shared, body: &[u8]) -> Result<Resp, ApiErr> {
    let v = first_json(body)?;
    let input = decode_proxy(
        &v,
        ProxyInput {
            name: String::new(),
            listen: String::new(),
            upstream: String::new(),
            enabled: Some(true),
        },
    )
    .map_err(ApiErr::bad_body)?;
    if input.name.is_empty() {
        return Err(ApiErr::missing_field("name"));
    }
    if input.upstream.is_empty() {
        return Err(ApiErr::missing_field("upstream"));
    }
    let mut proxies = shared.proxies.lock().await;
    if proxies.contains_key(&input.name) {
        return Err(ApiErr::proxy_exists());
    }
    let mut entry = ProxyEntry::new(shared, input.name.clone(), input.listen, input.upstream);
    if input.enabled.unwrap_or(true) {
        entry.start(shared).await?;
    }
    let resp = to_json(StatusCode::CREATED, &entry.json());
    proxies.insert(input.name, entry);
    Ok(resp)
}

async fn populate(shared: &Shared, body: &[u8]) -> Resp {
    let (created, err) = populate_inner(shared, body).await;
    let proxies = shared.proxies.lock().await;
    let list: Vec<_> = created
        .iter()
        .filter_map(|n| proxies.get(n).map(|p| p.json()))
        .collect();
    // Go marshals an empty result slice as null.
    let list_json = if list.is_empty() {
        Value::Null
    } else {
        serde_json::to_value(&list).unwrap_or(Value::Null)
    };
    match err {
        None => to_json(
            StatusCode::CREATED,
            &serde_json::json!({ "proxies": list_json }),
        ),
        Some(e) => to_json(
            StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &serde_json::json!({"error": e.message, "status": e.status, "proxies": list_json}),
        ),
    }
}

async fn populate_inner(shared: &Shared, body: &[u8]) -> (Vec<String>, Option<ApiErr>) {
    let v = match first_json(body) {
        Ok(v) => v,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let items = match v {
        Value::Array(a) => a,
        Value::Null => Vec::new(),
        other => {
            let msg = format!(
                "json: cannot unmarshal {} into Go value of type []struct {{ toxiproxy.Proxy; Enabled *bool \"json:\\\"enabled\\\"\" }}",
                go_kind(&other)
            );
            return (Vec::new(), Some(ApiErr::bad_body(msg)));
        }
    };
    let mut inputs = Vec::with_capacity(items.len());
    for item in &items {
        let blank = ProxyInput {
            name: String::new(),
            listen: String::new(),
            upstream: String::new(),
            enabled: None,
        };
        match decode_proxy(item, blank) {
            Ok(i) => inputs.push(i),
            Err(e) => return (Vec::new(), Some(ApiErr::bad_body(e))),
        }
    }
    // Validate everything before creating anything, as PopulateJson.
    for (i, input) in inputs.iter().enumerate() {
        if input.name.is_empty() {
            return (
                Vec::new(),
                Some(ApiErr::missing_field(format!("name at proxy {}", i + 1))),
            );
        }
        if input.upstream.is_empty() {
            return (
                Vec::new(),
                Some(ApiErr::missing_field(format!(
                    "upstream at proxy {}",
                    i + 1
                ))),
            );
        }
    }
    let mut created = Vec::new();
    let mut proxies = shared.proxies.lock().await;
    for input in inputs {
        // AddOrReplace: an identical proxy is kept as is (toxics and enabled untouched).
        if let Some(existing) = proxies.get_mut(&input.name) {
            match existing.differs(&input.listen, &input.upstream).await {
                Err(e) => return (created, Some(e)),
                Ok(false) => {
                    created.push(input.name);
                    continue;
                }
                Ok(true) => existing.stop(shared).await,
            }
        }
        let mut entry = ProxyEntry::new(shared, input.name.clone(), input.listen, input.upstream);
        if input.enabled.unwrap_or(true) {
            if let Err(e) = entry.start(shared).await {
                return (created, Some(e));
            }
        }
        proxies.insert(input.name.clone(), entry);
        created.push(input.name);
    }
    (created, None)
}

async fn proxy_show(shared: &Shared, name: &str) -> Result<Resp, ApiErr> {
    let proxies = shared.proxies.lock().await;
    let p = proxies.get(name).ok_or_else(ApiErr::proxy_not_found)?;
    Ok(to_json(StatusCode::OK, &p.json()))
}

async fn proxy_update(shared: &Shared, name: &str, body: &[u8]) -> Result<Resp, ApiErr> {
    let mut proxies = shared.proxies.lock().await;
    let p = proxies.get_mut(name).ok_or_else(ApiErr::proxy_not_found)?;
    let v = first_json(body)?;
    let input = decode_proxy(
        &v,
        ProxyInput {
            name: p.name.clone(),
            listen: p.listen.clone(),
            upstream: p.upstream.clone(),
            enabled: Some(p.enabled),
        },
    )
    .map_err(ApiErr::bad_body)?;
    let enabled = input.enabled.unwrap_or(p.enabled);
    let same = input.listen == p.listen && input.upstream == p.upstream;
    if p.enabled && !enabled && (same || !p.differs(&input.listen, &input.upstream).await?) {
        // A plain disable: the listener and every connection are cut in this call, before it
        // answers (as Toxiproxy closes them); the tasks wind down after.
        p.disable(shared);
        return Ok(to_json(StatusCode::OK, &p.json()));
    }
    p.update(shared, input.listen, input.upstream, enabled)
        .await?;
    Ok(to_json(StatusCode::OK, &p.json()))
}

async fn proxy_delete(shared: &Shared, name: &str) -> Result<Resp, ApiErr> {
    let mut proxies = shared.proxies.lock().await;
    let mut p = proxies.remove(name).ok_or_else(ApiErr::proxy_not_found)?;
    p.stop(shared).await;
    Ok(empty(StatusCode::NO_CONTENT))
}

async fn reset(shared: &Shared) -> Result<Resp, ApiErr> {
    let mut proxies = shared.proxies.lock().await;
    for p in proxies.values_mut() {
        p.start(shared).await?;
        p.clear_toxics();
    }
    Ok(empty(StatusCode::NO_CONTENT))
}

async fn toxic_index(shared: &Shared, proxy: &str) -> Result<Resp, ApiErr> {
    let proxies = shared.proxies.lock().await;
    let p = proxies.get(proxy).ok_or_else(ApiErr::proxy_not_found)?;
    Ok(to_json(StatusCode::OK, &p.toxics()))
}

async fn toxic_create(shared: &Shared, proxy: &str, body: &[u8]) -> Result<Resp, ApiErr> {
    let mut proxies = shared.proxies.lock().await;
    let p = proxies.get_mut(proxy).ok_or_else(ApiErr::proxy_not_found)?;
    let v = first_json(body)?;
    let obj = match &v {
        Value::Object(o) => o.clone(),
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(ApiErr::bad_body(format!(
                "json: cannot unmarshal {} into Go value of type toxics.ToxicWrapper",
                go_kind(other)
            )))
        }
    };
    // Defaults as AddToxicJson: downstream, toxicity 1.
    let mut name = String::new();
    let mut type_name = String::new();
    let mut stream_raw = "downstream".to_string();
    str_field(&obj, "name", "ToxicWrapper", &mut name).map_err(ApiErr::bad_body)?;
    str_field(&obj, "type", "ToxicWrapper", &mut type_name).map_err(ApiErr::bad_body)?;
    str_field(&obj, "stream", "ToxicWrapper", &mut stream_raw).map_err(ApiErr::bad_body)?;
    let toxicity = match get_field(&obj, "toxicity") {
        Some(t) => decode_toxicity(t, "ToxicWrapper")
            .map_err(ApiErr::bad_body)?
            .unwrap_or(1.0),
        None => 1.0,
    };
    let direction = Stream::parse(&stream_raw).ok_or_else(|| {
        ApiErr::new(
            "stream was invalid, can be either upstream or downstream",
            400,
        )
    })?;
    if name.is_empty() {
        name = format!("{type_name}_{stream_raw}");
    }
    let mut toxic =
        toxics::by_type(&type_name).ok_or_else(|| ApiErr::new("invalid toxic type", 400))?;
    if p.find_toxic(&name).is_some() {
        return Err(ApiErr::new("toxic already exists", 409));
    }
    if let Some(attrs) = get_field(&obj, "attributes") {
        decode_attributes(toxic.as_mut(), attrs).map_err(ApiErr::bad_body)?;
    }
    let toxic = ToxicEntry {
        id: shared.toxic_id(),
        version: 0,
        name,
        stream_raw,
        toxicity,
        toxic,
    };
    let d = dir_index(direction);
    let resp = to_json(StatusCode::OK, &toxic);
    p.chains[d].push(toxic);
    p.publish(d);
    Ok(resp)
}

async fn toxic_show(shared: &Shared, proxy: &str, toxic: &str) -> Result<Resp, ApiErr> {
    let proxies = shared.proxies.lock().await;
    let p = proxies.get(proxy).ok_or_else(ApiErr::proxy_not_found)?;
    let (d, i) = p.find_toxic(toxic).ok_or_else(ApiErr::toxic_not_found)?;
    Ok(to_json(StatusCode::OK, &p.chains[d][i]))
}

async fn toxic_update(
    shared: &Shared,
    proxy: &str,
    toxic: &str,
    body: &[u8],
) -> Result<Resp, ApiErr> {
    let mut proxies = shared.proxies.lock().await;
    let p = proxies.get_mut(proxy).ok_or_else(ApiErr::proxy_not_found)?;
    let (d, i) = p.find_toxic(toxic).ok_or_else(ApiErr::toxic_not_found)?;
    let v = first_json(body)?;
    let mut updated = p.chains[d][i].clone();
    match &v {
        Value::Object(obj) => {
            if let Some(attrs) = get_field(obj, "attributes") {
                decode_attributes(updated.toxic.as_mut(), attrs).map_err(ApiErr::bad_body)?;
            }
            if let Some(t) = get_field(obj, "toxicity") {
                if let Some(t) = decode_toxicity(t, "").map_err(ApiErr::bad_body)? {
                    updated.toxicity = t;
                }
            }
        }
        Value::Null => {}
        other => {
            return Err(ApiErr::bad_body(format!(
                "json: cannot unmarshal {} into Go value of type struct {{ Attributes interface {{}} \"json:\\\"attributes\\\"\"; Toxicity float32 \"json:\\\"toxicity\\\"\" }}",
                go_kind(other)
            )))
        }
    }
    updated.version += 1;
    let resp = to_json(StatusCode::OK, &updated);
    p.chains[d][i] = updated;
    p.publish(d);
    Ok(resp)
}

async fn toxic_delete(shared: &Shared, proxy: &str, toxic: &str) -> Result<Resp, ApiErr> {
    let mut proxies = shared.proxies.lock().await;
    let p = proxies.get_mut(proxy).ok_or_else(ApiErr::proxy_not_found)?;
    let (d, i) = p.find_toxic(toxic).ok_or_else(ApiErr::toxic_not_found)?;
    p.chains[d].remove(i);
    p.publish(d);
    Ok(empty(StatusCode::NO_CONTENT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_path_matches_gorilla() {
        assert_eq!(clean_path("/proxies"), "/proxies");
        assert_eq!(clean_path("/proxies/"), "/proxies/");
        assert_eq!(clean_path("//proxies"), "/proxies");
        assert_eq!(clean_path("/a/../version"), "/version");
    }

    #[test]
    fn routes_and_decoding() {
        assert!(matches!(route("/proxies/a%2Fb"), Some(Route::Proxy(_))));
        assert!(route(&percent_decode("/proxies/a%2Fb")).is_none());
        assert!(route("/proxies/").is_none());
        assert!(matches!(
            route("/proxies/x/toxics/y"),
            Some(Route::Toxic(..))
        ));
        assert_eq!(percent_decode("/a%20b%"), "/a b%");
    }
}
