//! The observer: the harness watching the resources from outside while the run goes, so the verdict never depends on what a watcher chose to print. Each server's role (`pg_is_in_recovery()` through its unproxied admin URL) and every proxy's state (enabled, upstream) through the Toxiproxy API, sampled every few real ms, recorded in the history on change only.

use chaos_history::failover_names as names;
use chaos_history::{HistoryWriter, OpType};
use chaos_proxy::ToxiproxyClient;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// What the observer watches.
pub struct Watched {
    /// (node, its admin URL).
    pub servers: Vec<(String, String)>,
    /// The Toxiproxy API (`host:port`), asked through a client of the observer's own.
    pub api: String,
    /// Proxy name -> link name (`app_to_primary` -> `app->primary`, `service` -> `service`).
    pub proxies: BTreeMap<String, String>,
    /// Upstream address -> the server it names.
    pub upstreams: BTreeMap<String, String>,
    pub every: Duration,
}

/// The running observer; `stop` ends it.
pub struct Observer {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Observer {
    /// One task per server and one for the proxies, so a slow answer holds up nothing else.
    pub fn start(w: Watched, history: &HistoryWriter) -> Observer {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (node, url) in w.servers.clone() {
            tasks.push(tokio::spawn(roles(
                node,
                url,
                w.every,
                history.clone(),
                stop.clone(),
            )));
        }
        tasks.push(tokio::spawn(proxies(w, history.clone(), stop.clone())));
        Observer { stop, tasks }
    }

    /// Stop sampling; nothing is recorded after this returns.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

async fn roles(
    node: String,
    url: String,
    every: Duration,
    history: HistoryWriter,
    stop: Arc<AtomicBool>,
) {
    let limit = Duration::from_millis(500);
    let mut client: Option<tokio_postgres::Client> = None;
    let mut last: Option<&'static str> = None;
    while !stop.load(Ordering::SeqCst) {
        if client.as_ref().is_none_or(|c| c.is_closed()) {
            client = crate::db::connect(&url, "observer", limit).await.ok();
        }
        let role = match &client {
            Some(c) => {
                match tokio::time::timeout(limit, c.query_one("select pg_is_in_recovery()", &[]))
                    .await
                {
                    Ok(Ok(row)) if row.get::<_, bool>(0) => "standby",
                    Ok(Ok(_)) => "primary",
                    _ => {
                        client = None;
                        "down"
                    }
                }
            }
            None => "down",
        };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if last != Some(role) {
            history.record(
                names::OBSERVER,
                OpType::Ok,
                names::ROLE,
                json!({ "node": node, "role": role }),
            );
            last = Some(role);
        }
        tokio::time::sleep(every).await;
    }
}

async fn proxies(w: Watched, history: HistoryWriter, stop: Arc<AtomicBool>) {
    let client = ToxiproxyClient::new(&w.api);
    let mut last: BTreeMap<String, (bool, String)> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        if let Ok(Ok(all)) = tokio::time::timeout(Duration::from_secs(2), client.list()).await {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            for (name, link) in &w.proxies {
                let Some(p) = all.get(name) else { continue };
                let now = (p.enabled, p.upstream.clone());
                if last.get(name) != Some(&now) {
                    let node = w.upstreams.get(&p.upstream);
                    history.record(
                        names::OBSERVER,
                        OpType::Ok,
                        names::PROXY,
                        json!({ "proxy": name, "link": link, "enabled": p.enabled, "upstream": p.upstream, "node": node }),
                    );
                    last.insert(name.clone(), now);
                }
            }
        }
        tokio::time::sleep(w.every).await;
    }
}
