//! The app: a small pool of connections, each writing one order every `every` to "the primary", each order recorded invoke/ok/fail/info, as the ingest records its batches.
//!
//! The service address is a record, as DNS or Consul is: when a connection is opened the app
//! asks where the record points (the `service` proxy's upstream, read through the Toxiproxy
//! API) and dials that server's own link; an open connection stays where it was made until it
//! breaks or reaches its lifetime. That is what lets an old primary keep taking writes after
//! a repoint: Toxiproxy closes every connection through a proxy whose upstream changes
//! (proxy.go's `Update` stops the proxy), so an app connected *through* the record would be
//! fenced by every repoint, which no DNS record or pooler reload does.

use super::api::Api;
use super::INSERT_ORDER_SQL;
use chaos_history::failover_names as names;
use chaos_history::{HistoryWriter, OpType};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

/// How the app writes, in real time.
#[derive(Debug, Clone)]
pub struct AppConfig {
    pub connections: u32,
    /// Between two orders of one connection.
    pub every: Duration,
    /// An open connection is closed and opened again (the record resolved anew) after this.
    pub lifetime: Option<Duration>,
    /// A connect or a write that takes longer is abandoned (a write then is `info`).
    pub timeout: Duration,
    pub api: Api,
    /// The service record's proxy name.
    pub service: String,
    /// Upstream (as the record names it) -> (node, the URL the app dials for that node).
    pub routes: BTreeMap<String, (String, String)>,
}

/// What the app did, for the run's figures.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct AppStats {
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    pub connects: u64,
}

/// An open connection and where it goes.
struct Open {
    client: Client,
    node: String,
    opened: Instant,
}

/// One connection of the pool, writing until `stop`. Order ids come from `ids`, shared by the
/// pool, so every order has its own (`o-000017`).
pub async fn run_connection(
    config: Arc<AppConfig>,
    conn: u32,
    ids: Arc<AtomicU64>,
    history: HistoryWriter,
    stop: Arc<AtomicBool>,
) -> AppStats {
    let mut stats = AppStats::default();
    let mut open: Option<Open> = None;
    // The pool's connections write in turn, not all at once.
    let offset = config.every / config.connections.max(1) * conn;
    let start = Instant::now() + offset;
    let mut tick: u32 = 0;
    let mut connects: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = start + config.every * tick;
        let now = Instant::now();
        if now < due {
            tokio::time::sleep(due - now).await;
        } else if now - due > config.every {
            // Behind by more than a period (a write hung): go on from now.
            tick += ((now - due).as_nanos() / config.every.as_nanos().max(1)) as u32;
            continue;
        }
        tick += 1;
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // A pool does not recycle every connection at once: connection k's first lifetime is
        // (k+1)/n of the setting, every later one the whole of it.
        let lifetime = config.lifetime.map(|l| match connects {
            0 | 1 => l.mul_f64((conn + 1) as f64 / config.connections.max(1) as f64),
            _ => l,
        });
        let expired = open.as_ref().is_some_and(|o| {
            o.client.is_closed() || lifetime.is_some_and(|l| o.opened.elapsed() >= l)
        });
        if expired {
            open = None;
        }
        let n = ids.fetch_add(1, Ordering::Relaxed);
        let id = format!("o-{n:06}");
        let value = json!({ "id": id, "conn": conn });
        if open.is_none() {
            match connect(&config, conn, &history).await {
                Ok(o) => {
                    stats.connects += 1;
                    connects += 1;
                    open = Some(o);
                }
                Err(e) => {
                    // Nothing was sent: the order certainly was not written.
                    history.record(names::APP, OpType::Invoke, names::ORDER, value.clone());
                    history.record(
                        names::APP,
                        OpType::Fail,
                        names::ORDER,
                        with(value, "error", e),
                    );
                    stats.fail += 1;
                    continue;
                }
            }
        }
        let o = open.as_ref().expect("opened above");
        history.record(names::APP, OpType::Invoke, names::ORDER, value.clone());
        let amount = (n as i64 % 9_000) + 1_000;
        let outcome = tokio::time::timeout(
            config.timeout,
            o.client.query_one(INSERT_ORDER_SQL, &[&id, &amount]),
        )
        .await;
        match outcome {
            Ok(Ok(row)) => {
                let node: String = row.get(0);
                history.record(
                    names::APP,
                    OpType::Ok,
                    names::ORDER,
                    with(value, "node", node),
                );
                stats.ok += 1;
            }
            Ok(Err(e)) if e.as_db_error().is_some() => {
                // The server answered with an error (a standby refuses writes): not written.
                let mut v = with(value, "error", e.to_string());
                v["node"] = json!(o.node);
                history.record(names::APP, OpType::Fail, names::ORDER, v);
                stats.fail += 1;
                open = None;
            }
            Ok(Err(e)) => {
                // The connection broke mid-statement: it may or may not have committed.
                history.record(
                    names::APP,
                    OpType::Info,
                    names::ORDER,
                    with(value, "error", e.to_string()),
                );
                stats.info += 1;
                open = None;
            }
            Err(_) => {
                history.record(
                    names::APP,
                    OpType::Info,
                    names::ORDER,
                    with(value, "error", "timed out".into()),
                );
                stats.info += 1;
                open = None;
            }
        }
    }
    stats
}

fn with(mut value: Value, key: &str, v: String) -> Value {
    value[key] = json!(v);
    value
}

/// Resolve the service record, then dial the server it names through the app's own link.
async fn connect(config: &AppConfig, conn: u32, history: &HistoryWriter) -> Result<Open, String> {
    let record = config.api.proxy(&config.service).await?;
    let upstream = record["upstream"].as_str().unwrap_or_default().to_string();
    let (node, url) =
        config.routes.get(&upstream).cloned().ok_or_else(|| {
            format!("the service record points at {upstream}, which is no server")
        })?;
    let mut pg: tokio_postgres::Config = url.parse().map_err(|e| format!("{url}: {e}"))?;
    pg.application_name(names::APP)
        .connect_timeout(config.timeout);
    let (client, connection) = tokio::time::timeout(config.timeout, pg.connect(NoTls))
        .await
        .map_err(|_| format!("connect to {node}: timed out"))?
        .map_err(|e| format!("connect to {node}: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    history.record(
        names::APP,
        OpType::Ok,
        names::RESOLVE,
        json!({ "conn": conn, "node": node, "upstream": upstream }),
    );
    Ok(Open {
        client,
        node,
        opened: Instant::now(),
    })
}
