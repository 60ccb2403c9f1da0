//! The ingest: new readings for every turbine every 2 scenario seconds, to the owner under the new divisor, each batch recorded invoke/ok/fail/info.

use crate::galewatch::reading_value;
use chaos_history::verb;
use chaos_history::{HistoryWriter, OpType};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{Client, NoTls};

/// One shard's ingest: its turbines, its link, its cadence.
pub struct IngestShard {
    pub shard: String,
    /// Connection URL through the `ingest->shardN` proxy.
    pub url: String,
    pub turbines: Vec<String>,
}

/// How the ingest runs.
#[derive(Clone)]
pub struct IngestConfig {
    /// Real time between ticks.
    pub every: Duration,
    /// Scenario ms between ticks (the readings' spacing).
    pub every_scenario_ms: i64,
    /// A statement that takes longer is abandoned and recorded `info`.
    pub timeout: Duration,
}

/// Counters the harness prints at the end.
#[derive(Debug, Default, Clone, Copy)]
pub struct IngestStats {
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    pub skipped_ticks: u64,
}

const INSERT_SQL: &str = "insert into readings (turbine_id, ts, value) \
    select t, timestamptz 'epoch' + $2::bigint * interval '1 millisecond', v from unnest($1::text[], $3::float8[]) as u(t, v)";

/// Run one shard's ingest until `stop` is set. Ticks are on a fixed grid
/// (reading ts = scenario time of the tick); a tick that could not be sent
/// in its own period is skipped, not sent late under a stale timestamp.
pub async fn run_shard(
    shard: IngestShard,
    config: IngestConfig,
    history: HistoryWriter,
    stop: Arc<AtomicBool>,
) -> IngestStats {
    let mut stats = IngestStats::default();
    let mut client: Option<Client> = None;
    let clock = history.clock();
    let start_ns = history.now_ns();
    let mut tick: i64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let due_ns = start_ns + tick * config.every.as_nanos() as i64;
        let now_ns = history.now_ns();
        if now_ns < due_ns {
            tokio::time::sleep(Duration::from_nanos((due_ns - now_ns) as u64)).await;
        } else if now_ns - due_ns > config.every.as_nanos() as i64 {
            // Behind by more than a period: skip to the current tick.
            let behind = (now_ns - due_ns) / config.every.as_nanos() as i64;
            stats.skipped_ticks += behind as u64;
            tick += behind;
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let scenario_ms = clock.scenario_ms_at_run_ns(due_ns);
        let ts_ms = clock.reading_ts_ms(scenario_ms);
        tick += 1;
        let value = json!({ "shard": shard.shard, "ts_ms": ts_ms, "turbines": shard.turbines });
        if client.as_ref().map(|c| c.is_closed()).unwrap_or(true) {
            client = connect(&shard.url, config.timeout).await;
        }
        let Some(c) = client.as_ref() else {
            // No connection: nothing was sent, so the readings certainly were not written.
            history.record("ingest", OpType::Invoke, verb::INGEST, value.clone());
            history.record("ingest", OpType::Fail, verb::INGEST, json!({ "shard": shard.shard, "ts_ms": ts_ms, "turbines": shard.turbines, "error": "no connection" }));
            stats.fail += 1;
            continue;
        };
        let values: Vec<f64> = shard
            .turbines
            .iter()
            .map(|t| reading_value(t, ts_ms))
            .collect();
        history.record("ingest", OpType::Invoke, verb::INGEST, value.clone());
        let outcome = tokio::time::timeout(
            config.timeout,
            c.execute(INSERT_SQL, &[&shard.turbines, &ts_ms, &values]),
        )
        .await;
        match outcome {
            Ok(Ok(_)) => {
                history.record("ingest", OpType::Ok, verb::INGEST, value);
                stats.ok += 1;
            }
            Ok(Err(e))
                if e.as_db_error().is_some()
                    || !e.is_closed() && e.to_string().starts_with("error serializing") =>
            {
                // The server answered with an error, or the statement was never
                // sent (a parameter did not serialize): it did not commit.
                history.record(
                    "ingest",
                    OpType::Fail,
                    verb::INGEST,
                    with_error(value, &e.to_string()),
                );
                stats.fail += 1;
            }
            Ok(Err(e)) => {
                // The connection broke mid-flight: it may or may not have committed.
                history.record(
                    "ingest",
                    OpType::Info,
                    verb::INGEST,
                    with_error(value, &e.to_string()),
                );
                stats.info += 1;
                client = None;
            }
            Err(_) => {
                history.record(
                    "ingest",
                    OpType::Info,
                    verb::INGEST,
                    with_error(value, "timed out"),
                );
                stats.info += 1;
                client = None;
            }
        }
    }
    stats
}

fn with_error(mut value: serde_json::Value, error: &str) -> serde_json::Value {
    value["error"] = json!(error);
    value
}

async fn connect(url: &str, timeout: Duration) -> Option<Client> {
    let mut config: tokio_postgres::Config = url.parse().ok()?;
    config.application_name("ingest").connect_timeout(timeout);
    let (client, conn) = tokio::time::timeout(timeout, config.connect(NoTls))
        .await
        .ok()?
        .ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Some(client)
}
