//! The reference watcher: checks the primary every `CHAOS_CHECK_MS`; after `CHAOS_SILENCE_MS` without an answer it promotes the replica (`pg_promote()`) and repoints the service record (a Toxiproxy API call setting its upstream), as the shop's fifty lines did. With `--fence on` it first takes the old primary's ability to accept writes away: the clients' proxies disabled (the fence is in place), the replica left to replay what it already received, then every other proxy to the primary disabled.
//!
//! It knows only the watcher protocol (docs/watcher-protocol.md): its environment, the
//! servers and the proxy API. It exits 0 once it has failed over (its one job), 1 when it
//! could not, 2 on bad input.

use super::api::Api;
use super::{env, Exit, Fence};
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, NoTls};

/// The reference watcher's switches.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "watcher",
    about = "The reference watcher of the failover system (docs/watcher-protocol.md)."
)]
pub struct Args {
    /// off: promote on silence and repoint (the shop's fifty lines); on: fence the old primary through the proxy first.
    #[arg(long, value_enum, default_value = "off")]
    pub fence: Fence,
}

/// The watcher protocol's environment, read once.
#[derive(Debug, Clone)]
pub struct Env {
    pub box_name: String,
    pub primary_url: String,
    pub replica_url: String,
    pub check: Duration,
    pub check_timeout: Duration,
    pub silence: Duration,
    pub api: Api,
    pub service_proxy: String,
    pub replica_upstream: String,
    pub client_proxies: Vec<String>,
    pub primary_proxies: Vec<String>,
    pub gate: Option<PathBuf>,
}

impl Env {
    /// Read the protocol's variables through `get`; a missing or bad one is named.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Env, String> {
        let need = |k: &str| {
            get(k)
                .filter(|v| !v.is_empty())
                .ok_or(format!("{k} is not set"))
        };
        let ms = |k: &str| -> Result<Duration, String> {
            let v = need(k)?;
            v.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(Duration::from_millis)
                .ok_or(format!("{k}={v}: not a positive number of ms"))
        };
        let list = |k: &str| -> Result<Vec<String>, String> {
            Ok(need(k)?
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect())
        };
        let check = ms(env::CHECK_MS)?;
        Ok(Env {
            box_name: get(env::BOX).unwrap_or_else(|| "watcher".into()),
            primary_url: need(env::PRIMARY_URL)?,
            replica_url: need(env::REPLICA_URL)?,
            check,
            check_timeout: ms(env::CHECK_TIMEOUT_MS).unwrap_or(check),
            silence: ms(env::SILENCE_MS)?,
            api: Api::new(&need(env::PROXY_API)?, Duration::from_secs(10))?,
            service_proxy: need(env::SERVICE_PROXY)?,
            replica_upstream: need(env::REPLICA_UPSTREAM)?,
            client_proxies: list(env::PRIMARY_CLIENT_PROXIES)?,
            primary_proxies: list(env::PRIMARY_PROXIES)?,
            gate: get(env::GATE).filter(|g| !g.is_empty()).map(PathBuf::from),
        })
    }
}

/// One history line on stdout, flushed, for the harness to stamp.
fn emit(kind: &str, f: &str, value: Value) {
    let line = format!("{}\n", json!({ "type": kind, "f": f, "value": value }));
    let out = std::io::stdout();
    let mut out = out.lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

/// The watcher: connect, wait at the gate, check until a silence, fail over once.
pub async fn run(args: Args, env: Env) -> Exit {
    let mut primary = connect(&env, &env.primary_url).await.ok();
    let mut replica = None;
    // The replica must be reachable to be promoted: wait for it (bounded) before the gate.
    let began = Instant::now();
    while replica.is_none() && began.elapsed() < Duration::from_secs(30) {
        replica = connect(&env, &env.replica_url).await.ok();
        if replica.is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let Some(mut replica) = replica else {
        eprintln!(
            "{}: cannot reach the replica at {}",
            env.box_name, env.replica_url
        );
        return Exit::Failure;
    };
    if let Some(gate) = &env.gate {
        if let Err(e) = wait_at_gate(gate).await {
            eprintln!("{}: {e}", env.box_name);
            return Exit::BadInput;
        }
    }
    let mut last_answer = Instant::now();
    let mut ticks = tokio::time::interval(env.check);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if check_primary(&env, &mut primary).await {
            last_answer = Instant::now();
            continue;
        }
        let silent = last_answer.elapsed();
        if silent < env.silence {
            continue;
        }
        // The silence is long enough. The replica must answer, or there is nobody to promote.
        if !alive(&env, &mut replica).await {
            emit(
                "fail",
                "check",
                json!({ "node": "replica", "reason": "no answer: cannot promote" }),
            );
            continue;
        }
        emit(
            "info",
            "silence",
            json!({ "node": "primary", "silent_ms": silent.as_millis() as u64 }),
        );
        eprintln!(
            "{}: no answer from the primary for {} ms: failing over",
            env.box_name,
            silent.as_millis()
        );
        return fail_over(&args, &env, &replica).await;
    }
}

/// Fence (when asked), promote, repoint.
async fn fail_over(args: &Args, env: &Env, replica: &Client) -> Exit {
    if args.fence == Fence::On {
        if let Err(e) = fence(env, replica).await {
            eprintln!("{}: fence: {e}", env.box_name);
            return Exit::Failure;
        }
    }
    emit("invoke", "promote", json!({ "node": "replica" }));
    let promoted = tokio::time::timeout(
        Duration::from_secs(90),
        replica.query_one("select pg_promote(true, 60)", &[]),
    )
    .await;
    match promoted {
        Ok(Ok(row)) if row.get::<_, bool>(0) => emit("ok", "promote", json!({ "node": "replica" })),
        other => {
            let why = match other {
                Ok(Ok(_)) => "pg_promote answered false".to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => "no answer in 90 s".to_string(),
            };
            emit(
                "fail",
                "promote",
                json!({ "node": "replica", "reason": why }),
            );
            eprintln!("{}: promote: {why}", env.box_name);
            return Exit::Failure;
        }
    }
    let change = json!({ "upstream": env.replica_upstream, "enabled": true });
    match env.api.update(&env.service_proxy, &change).await {
        Ok(p) => emit(
            "ok",
            "repoint",
            json!({ "proxy": env.service_proxy, "upstream": p["upstream"], "node": "replica" }),
        ),
        Err(e) => {
            emit(
                "fail",
                "repoint",
                json!({ "proxy": env.service_proxy, "reason": e }),
            );
            eprintln!("{}: repoint: {e}", env.box_name);
            return Exit::Failure;
        }
    }
    Exit::Done
}

/// Cut the clients' way to the primary (from then on it accepts no write: the fence is in
/// place), let the replica replay what it already received, then cut everything else.
async fn fence(env: &Env, replica: &Client) -> Result<(), String> {
    disable(env, &env.client_proxies).await?;
    emit(
        "ok",
        "fence",
        json!({ "node": "primary", "proxies": env.client_proxies, "stage": "clients" }),
    );
    let lsn = drain(env, replica).await;
    emit("ok", "drain", json!({ "node": "replica", "lsn": lsn }));
    let rest: Vec<String> = env
        .primary_proxies
        .iter()
        .filter(|p| !env.client_proxies.contains(p))
        .cloned()
        .collect();
    disable(env, &rest).await?;
    emit(
        "ok",
        "fence",
        json!({ "node": "primary", "proxies": rest, "stage": "all" }),
    );
    Ok(())
}

async fn disable(env: &Env, proxies: &[String]) -> Result<(), String> {
    for p in proxies {
        let answer = env.api.update(p, &json!({ "enabled": false })).await?;
        if answer["enabled"] != json!(false) {
            return Err(format!("proxy {p} is still enabled after its disable"));
        }
    }
    Ok(())
}

/// Wait until the replica has replayed all it received and received nothing new for two
/// checks in a row (bounded by the silence constant): a write the old primary acknowledged
/// just before the fence is on its way, not lost.
async fn drain(env: &Env, replica: &Client) -> Option<String> {
    let sql = "select coalesce(pg_last_wal_receive_lsn()::text, ''), coalesce(pg_last_wal_replay_lsn()::text, '')";
    let began = Instant::now();
    let (mut last, mut steady) = (String::new(), 0);
    while began.elapsed() < env.silence {
        if let Ok(Ok(row)) =
            tokio::time::timeout(env.check_timeout, replica.query_one(sql, &[])).await
        {
            let (received, replayed): (String, String) = (row.get(0), row.get(1));
            steady = if received == replayed && received == last {
                steady + 1
            } else {
                0
            };
            last = received;
            if steady >= 2 {
                return Some(last);
            }
        }
        tokio::time::sleep(env.check).await;
    }
    None
}

/// One check of the primary; reconnects when there is no connection.
async fn check_primary(env: &Env, primary: &mut Option<Client>) -> bool {
    let began = Instant::now();
    if primary.as_ref().is_none_or(|c| c.is_closed()) {
        *primary = connect(env, &env.primary_url).await.ok();
    }
    let answered = match primary.as_ref() {
        Some(c) => matches!(
            tokio::time::timeout(env.check_timeout, c.simple_query("select 1")).await,
            Ok(Ok(_))
        ),
        None => false,
    };
    let ms = began.elapsed().as_secs_f64() * 1000.0;
    if answered {
        emit(
            "ok",
            "check",
            json!({ "node": "primary", "latency_ms": ms }),
        );
    } else {
        emit(
            "fail",
            "check",
            json!({ "node": "primary", "reason": "no answer", "latency_ms": ms }),
        );
        *primary = None;
    }
    answered
}

async fn alive(env: &Env, replica: &mut Client) -> bool {
    if !replica.is_closed() {
        if let Ok(Ok(_)) =
            tokio::time::timeout(env.check_timeout, replica.simple_query("select 1")).await
        {
            return true;
        }
    }
    match connect(env, &env.replica_url).await {
        Ok(c) => {
            *replica = c;
            true
        }
        Err(_) => false,
    }
}

async fn connect(env: &Env, url: &str) -> Result<Client, String> {
    let mut pg: tokio_postgres::Config = url.parse().map_err(|e| format!("{url}: {e}"))?;
    pg.application_name(&env.box_name)
        .connect_timeout(env.check_timeout);
    let (client, connection) = tokio::time::timeout(env.check_timeout, pg.connect(NoTls))
        .await
        .map_err(|_| "connect: timed out".to_string())?
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Block until the harness writes a line into the gate fifo (or closes it).
async fn wait_at_gate(gate: &std::path::Path) -> Result<(), String> {
    let path = gate.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let f = std::fs::File::open(&path)
            .map_err(|e| format!("{} {}: {e}", env::GATE, path.display()))?;
        let mut line = String::new();
        std::io::BufReader::new(f)
            .read_line(&mut line)
            .map(drop)
            .map_err(|e| format!("{} {}: {e}", env::GATE, path.display()))
    })
    .await
    .map_err(|e| format!("{}: {e}", env::GATE))?
}
