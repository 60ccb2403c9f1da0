//! A minimal client for the Toxiproxy HTTP API, as a team's watcher would use curl: read a proxy, update one (`POST /proxies/{name}`), each call bounded by a timeout.
//!
//! HTTP/1.0 and `Connection: close`, so an answer is never chunked and ends with the
//! connection: a dozen lines instead of an HTTP library in the watcher.

use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where the API is and how long a call may take.
#[derive(Debug, Clone)]
pub struct Api {
    /// `host:port`.
    pub addr: String,
    pub timeout: Duration,
}

/// Answers larger than this are refused (a proxy's JSON is a few hundred bytes).
const ANSWER_LIMIT: u64 = 1 << 20;

impl Api {
    /// `http://host:port` or `host:port`.
    pub fn new(url: &str, timeout: Duration) -> Result<Api, String> {
        let addr = url
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        if addr.is_empty() || !addr.contains(':') || addr.contains('/') {
            return Err(format!("'{url}' is not http://host:port"));
        }
        Ok(Api { addr, timeout })
    }

    /// One request; the status and the body.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), String> {
        let call = async {
            let mut s = tokio::net::TcpStream::connect(&self.addr)
                .await
                .map_err(|e| format!("{}: {e}", self.addr))?;
            let body = body.unwrap_or("");
            let head = format!(
                "{method} {path} HTTP/1.0\r\nHost: {}\r\nUser-Agent: chaos-watcher\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                self.addr,
                body.len()
            );
            s.write_all(head.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            s.write_all(body.as_bytes())
                .await
                .map_err(|e| e.to_string())?;
            let mut answer = Vec::new();
            s.take(ANSWER_LIMIT)
                .read_to_end(&mut answer)
                .await
                .map_err(|e| e.to_string())?;
            let text = String::from_utf8_lossy(&answer);
            let (head, body) = text
                .split_once("\r\n\r\n")
                .ok_or_else(|| "no HTTP answer".to_string())?;
            let status = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse::<u16>().ok())
                .ok_or_else(|| format!("no status in '{}'", head.lines().next().unwrap_or("")))?;
            Ok((status, body.to_string()))
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "{method} {path}: no answer from {} in {} ms",
                self.addr,
                self.timeout.as_millis()
            )),
        }
    }

    /// `GET /proxies/{name}`: the proxy's JSON (`name`, `listen`, `upstream`, `enabled`).
    pub async fn proxy(&self, name: &str) -> Result<Value, String> {
        let (status, body) = self
            .request("GET", &format!("/proxies/{name}"), None)
            .await?;
        json_answer(status, &body, 200, name)
    }

    /// `POST /proxies/{name}` with `change` (`{"enabled": false}`, `{"upstream": "h:p"}`):
    /// the proxy's JSON after the change.
    pub async fn update(&self, name: &str, change: &Value) -> Result<Value, String> {
        let (status, body) = self
            .request(
                "POST",
                &format!("/proxies/{name}"),
                Some(&change.to_string()),
            )
            .await?;
        json_answer(status, &body, 200, name)
    }
}

fn json_answer(status: u16, body: &str, want: u16, name: &str) -> Result<Value, String> {
    if status != want {
        return Err(format!(
            "proxy {name}: HTTP {status}: {}",
            body.trim().lines().next().unwrap_or("")
        ));
    }
    serde_json::from_str(body.trim()).map_err(|e| format!("proxy {name}: not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        let t = Duration::from_secs(1);
        assert_eq!(
            Api::new("http://127.0.0.1:8474/", t).unwrap().addr,
            "127.0.0.1:8474"
        );
        assert_eq!(Api::new("proxy:8474", t).unwrap().addr, "proxy:8474");
        assert!(Api::new("http://x/y:1", t).is_err());
        assert!(Api::new("", t).is_err());
    }
}
