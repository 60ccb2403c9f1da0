//! Test helpers: a loopback echo upstream, a hand-rolled HTTP client, and timing helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// Nothing in these tests should take longer than this on loopback.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// An echo server on 127.0.0.1; aborted (and its connections closed) on drop.
pub struct Echo {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn echo() -> Echo {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.set_nodelay(true);
            conns.spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    Echo { addr, task }
}

pub struct HttpResp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResp {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request with `Connection: close`, read to EOF.
pub async fn http(api: SocketAddr, method: &str, path: &str, body: Option<&str>) -> HttpResp {
    let fut = async {
        let mut s = TcpStream::connect(api).await.unwrap();
        let body = body.unwrap_or("");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {api}\r\nUser-Agent: chaos-test\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).await.unwrap();
        let text = String::from_utf8(raw).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").expect("header end");
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        HttpResp {
            status,
            headers,
            body: body.to_string(),
        }
    };
    tokio::time::timeout(IO_TIMEOUT, fut)
        .await
        .expect("HTTP timeout")
}

/// One request/response through `s`; returns the round-trip time.
pub async fn round_trip(s: &mut TcpStream, payload: &[u8]) -> Duration {
    let t0 = Instant::now();
    s.write_all(payload).await.unwrap();
    let mut got = vec![0u8; payload.len()];
    tokio::time::timeout(IO_TIMEOUT, s.read_exact(&mut got))
        .await
        .expect("echo timeout")
        .unwrap();
    assert_eq!(got, payload);
    t0.elapsed()
}

pub async fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Read until EOF/error or `limit`; returns what ended the read.
pub async fn read_outcome(s: &mut TcpStream, limit: Duration) -> ReadOutcome {
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(limit, s.read(&mut buf)).await {
        Err(_) => ReadOutcome::Nothing,
        Ok(Ok(0)) => ReadOutcome::Eof,
        Ok(Ok(n)) => ReadOutcome::Data(n),
        Ok(Err(e)) => ReadOutcome::Error(e.kind()),
    }
}

#[derive(Debug, PartialEq)]
pub enum ReadOutcome {
    Nothing,
    Eof,
    Data(usize),
    Error(std::io::ErrorKind),
}

pub fn localhost0() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
