//! The harness's sentinel for Redis with a replica (`[lock] replica = true`), as Redis Sentinel does it with one sentinel and one replica: it PINGs the primary on its own address every 5 ms and, once the primary has not answered for `promote_after_s` scenario seconds, promotes the replica (`REPLICAOF NO ONE`), moves the floating address (every `box-K->lock` link forwards to the promoted member from then on: a VIP, or Sentinel-aware clients, in one place) and records the promotion in the history (`sentinel` `promote`, with what the promoted member held of the lock key and its token counter at that moment). One promotion a run, as one failover; it asks no quorum and waits for no replication offset, as a Sentinel configured for availability does not.

use crate::links::Links;
use crate::lock::{LockServer, LOCK_NODE};
use chaos_history::{HistoryWriter, OpType};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the primary is asked.
const EVERY: Duration = Duration::from_millis(5);
/// How long one PING may take before it counts as silence.
const PING_TIMEOUT: Duration = Duration::from_millis(100);

/// The sentinel at work; stopped when dropped.
pub struct Sentinel {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the sentinel needs: the service, the links it re-points, where it records.
pub struct Watching {
    pub lock: Arc<tokio::sync::Mutex<LockServer>>,
    pub links: Arc<Links>,
    pub history: HistoryWriter,
    /// The primary's silence that makes a promotion, real time.
    pub after: Duration,
    /// The same in scenario seconds, for the record.
    pub after_s: f64,
    /// Every box: its `box-K->lock` link follows the primary.
    pub boxes: Vec<String>,
    /// The lock key (its `:token` counter beside it).
    pub key: String,
}

impl Sentinel {
    /// Watch the primary of a Redis service with a replica (None for any other service).
    pub async fn start(w: Watching) -> Option<Sentinel> {
        let has_replica = {
            let mut lock = w.lock.lock().await;
            lock.replicated().is_some_and(|r| r.roles().1.is_some())
        };
        has_replica.then(|| Sentinel {
            task: tokio::spawn(watch(w)),
        })
    }
}

/// PING on a connection kept open (a new one after any failure).
async fn pong(conn: &mut Option<redis::aio::MultiplexedConnection>, addr: &str) -> bool {
    let ask = async {
        if conn.is_none() {
            let client = redis::Client::open(format!("redis://{addr}")).ok()?;
            *conn = Some(client.get_multiplexed_async_connection().await.ok()?);
        }
        let c = conn.as_mut()?;
        redis::cmd("PING").query_async::<String>(c).await.ok()
    };
    let ok = tokio::time::timeout(PING_TIMEOUT, ask)
        .await
        .ok()
        .flatten()
        .is_some_and(|p| p == "PONG");
    if !ok {
        *conn = None;
    }
    ok
}

async fn watch(w: Watching) {
    let primary = {
        let mut lock = w.lock.lock().await;
        match lock.replicated() {
            Some(r) => r.primary_addr(),
            None => return,
        }
    };
    let mut conn = None;
    let mut last_pong = Instant::now();
    loop {
        tokio::time::sleep(EVERY).await;
        if pong(&mut conn, &primary).await {
            last_pong = Instant::now();
            continue;
        }
        if last_pong.elapsed() < w.after {
            continue;
        }
        promote(&w, last_pong.elapsed()).await;
        return;
    }
}

/// Promote the replica, re-point the boxes' links, and record it (or why it failed).
async fn promote(w: &Watching, silent: Duration) {
    let promoted = {
        let mut lock = w.lock.lock().await;
        let Some(mut r) = lock.replicated() else {
            return;
        };
        let old = r.roles().0;
        r.promote()
            .await
            .map(|(node, addr, upstream)| (old, node, addr, upstream))
    };
    let base = json!({
        "silent_real_ms": silent.as_millis() as u64,
        "promote_after_s": w.after_s,
    });
    let (old, node, addr, upstream) = match promoted {
        Ok(p) => p,
        Err(e) => {
            let mut v = base;
            v["error"] = json!(e.to_string());
            w.history.record("sentinel", OpType::Info, "promote", v);
            return;
        }
    };
    // What the promoted member holds at its promotion, before any box can reach it.
    let (holder, counter) = held(&addr, &w.key).await;
    let mut moved = Vec::new();
    let mut failed = Vec::new();
    for b in &w.boxes {
        let link = chaos_nemesis::Link::name(b, LOCK_NODE);
        match w.links.repoint(&link, &node, &upstream).await {
            Ok(()) => moved.push(link),
            Err(e) => failed.push(e.to_string()),
        }
    }
    let mut v = base;
    v["target"] = json!(node);
    v["from"] = json!(old);
    v["holder"] = json!(holder);
    v["counter"] = json!(counter);
    // `token` and `why` are fields the story reads (the history's view keeps known keys).
    v["token"] = json!(counter);
    v["why"] = json!(format!("{old} silent for {} s", w.after_s));
    v["links"] = json!(moved);
    if !failed.is_empty() {
        v["error"] = json!(failed.join("; "));
    }
    w.history.record("sentinel", OpType::Ok, "promote", v);
}

/// The lock key's value and the token counter on the server at `addr`.
async fn held(addr: &str, key: &str) -> (Option<String>, Option<i64>) {
    let counter = chaos_workloads::lock::redis_token_key(key);
    let ask = async {
        let client = redis::Client::open(format!("redis://{addr}")).ok()?;
        let mut c = client.get_multiplexed_async_connection().await.ok()?;
        redis::pipe()
            .get(key)
            .get(counter)
            .query_async::<(Option<String>, Option<i64>)>(&mut c)
            .await
            .ok()
    };
    tokio::time::timeout(Duration::from_secs(1), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or((None, None))
}
