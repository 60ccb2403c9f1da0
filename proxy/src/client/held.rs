//! Held changes: a change sent at a given instant, its request connected and written but for its last byte ahead of time.

use super::answer::{api_answer, HTTP_TIMEOUT};
use crate::error::ClientError;
use reqwest::Url;
use serde_json::Value;
use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Run once, right before the first change of a held call is sent.
pub(super) type OnRelease = Box<dyn FnOnce() + Send>;

/// When a change is made: by default at once; for a clone made by
/// [`crate::ToxiproxyClient::held_until`], the call does its reads first, waits on its
/// blocking thread until the instant, then sends the change, so a fault lands on
/// time however long the reads took. It remembers when the change was answered.
#[derive(Clone, Default)]
pub(super) struct Hold {
    pub(super) until: Option<Instant>,
    /// Run once, right before the first change is sent (a caller records the fault's start).
    on_release: Arc<Mutex<Option<OnRelease>>>,
    /// Set by the caller to call the change off while it waits.
    cancel: Option<Arc<AtomicBool>>,
    /// When the last change of the call took effect: the proxy's stamp (`crate::applied`),
    /// else when it was answered (the server applies it before answering).
    landed: Arc<Mutex<Option<Instant>>>,
}

impl Hold {
    /// Changes held until `at` (see [`crate::ToxiproxyClient::held_until`]).
    pub(super) fn until(
        at: Instant,
        on_release: Option<OnRelease>,
        cancel: Option<Arc<AtomicBool>>,
    ) -> Hold {
        Hold {
            until: Some(at),
            on_release: Arc::new(Mutex::new(on_release)),
            cancel,
            landed: Arc::new(Mutex::new(None)),
        }
    }

    /// When the last change was answered by the server (None before any change).
    pub(super) fn landed(&self) -> Option<Instant> {
        *self.landed.lock().unwrap()
    }

    /// Wait for the instant, then make the change `f` and note when it was answered.
    pub(super) fn change<T>(
        &self,
        f: impl FnOnce() -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        self.change_stamped(|| f().map(|t| (t, None)))
    }

    /// [`Hold::change`] for a change that may say when it took effect (the proxy's stamp,
    /// [`crate::applied`]): noted as landed then rather than when it was answered.
    pub(super) fn change_stamped<T>(
        &self,
        f: impl FnOnce() -> Result<(T, Option<Instant>), ClientError>,
    ) -> Result<T, ClientError> {
        // A held change's thread wakes and sends at real-time priority (see crate::realtime),
        // then goes back to normal: it is a pool thread.
        let realtime = self.until.is_some() && crate::realtime::raise_current_thread();
        let out = self.change_now(f);
        if realtime {
            crate::realtime::lower_current_thread();
        }
        out
    }

    fn change_now<T>(
        &self,
        f: impl FnOnce() -> Result<(T, Option<Instant>), ClientError>,
    ) -> Result<T, ClientError> {
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
        let (out, applied) = f()?;
        let now = applied.unwrap_or_else(Instant::now);
        let mut landed = self.landed.lock().unwrap();
        *landed = Some(landed.map_or(now, |l| l.max(now)));
        Ok(out)
    }
}

/// A request written but for its last byte (see [`prepare`]).
struct Prepared {
    stream: std::net::TcpStream,
    last: u8,
}

impl Prepared {
    /// Read the whole answer (the request said `Connection: close`); its body and the
    /// proxy's stamp of when the change took effect (none from a real Toxiproxy), or the error.
    fn answer(mut self) -> Result<(String, Option<u64>), ClientError> {
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
        let stamp = head.lines().find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case(crate::applied::HEADER)
                .then(|| value.trim().parse().ok())?
        });
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        Ok((api_answer(status, body)?, stamp))
    }
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

/// One raw request: method, path, JSON body.
pub(super) type RawRequest = (&'static str, String, Option<Value>);

/// A raw request made ready to land at an instant: connected to the API at `base`, and
/// written up to its last byte, so at the instant only that byte is sent (see [`send_held`]).
fn prepare(
    base: &Url,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<Prepared, ClientError> {
    use std::io::Write;
    let addr = format!(
        "{}:{}",
        base.host_str().unwrap_or("127.0.0.1"),
        base.port_or_known_default().unwrap_or(8474)
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

/// Held changes over raw HTTP to the API at `base`: each request connected and written but
/// for its last byte before the instant, then at the instant the last bytes all go out and
/// the answers are read. Sending whole requests at the instant through the pooled client took
/// up to 4.5 ms under load (connects, its one runtime thread); a byte is a single write.
/// Non-2xx answers become [`ClientError::Api`].
pub(super) fn send_held(
    base: &Url,
    requests: &[RawRequest],
    hold: &Hold,
) -> Result<Vec<String>, ClientError> {
    let mut ready = Vec::with_capacity(requests.len());
    for (method, path, body) in requests {
        ready.push(prepare(base, method, path, body.as_ref())?);
    }
    hold.change_stamped(|| {
        use std::io::Write;
        let released = Instant::now();
        for r in ready.iter_mut() {
            r.stream
                .write_all(&[r.last])
                .map_err(|e| ClientError::Transport(e.to_string()))?;
        }
        let answers = ready
            .into_iter()
            .map(Prepared::answer)
            .collect::<Result<Vec<_>, _>>()?;
        // Landed when the last change took effect, if every answer says when, believably.
        let answered = Instant::now();
        let applied = answers
            .iter()
            .map(|(_, ns)| crate::applied::instant_of((*ns)?, released, answered))
            .collect::<Option<Vec<_>>>()
            .and_then(|at| at.into_iter().max());
        Ok((answers.into_iter().map(|(body, _)| body).collect(), applied))
    })
}
