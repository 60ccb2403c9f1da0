//! Installing a run's databases: the lock service and move plan on the routing db, readings, fence and audit on every shard, and the seeded history.

use crate::db;
use chaos_history::PlanEntry;
use chaos_workloads::galewatch::{Farm, SEED_SQL};
use chaos_workloads::schema::{ROUTING_SQL, SHARD_AUDIT_SQL, SHARD_SQL};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Routing db: schema, the claim row, the token sequence and the plan.
pub async fn routing(
    url: &str,
    job: &str,
    first_token: i64,
    plan: &[PlanEntry],
) -> Result<(), String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    c.batch_execute(ROUTING_SQL)
        .await
        .map_err(|e| format!("routing: installing the schema: {e}"))?;
    // The sequence's next value is the first grant's token (April: 17).
    c.execute(
        "select setval('claim_tokens', $1, false)",
        &[&first_token.max(1)],
    )
    .await
    .map_err(|e| format!("routing: token sequence: {e}"))?;
    c.execute("insert into claims (job, holder, token, expires_at) values ($1, null, 0, '-infinity') on conflict (job) do nothing", &[&job])
        .await
        .map_err(|e| format!("routing: claim row: {e}"))?;
    for p in plan {
        c.execute("insert into move_plan (position, turbine_id, from_shard, to_shard) values ($1, $2, $3, $4)", &[&p.position, &p.turbine, &p.from, &p.to])
            .await
            .map_err(|e| format!("routing: move plan: {e}"))?;
    }
    Ok(())
}

/// A node on asynchronous commit: what the install wrote is written out before the run (a
/// checkpoint), so a crash in the run loses the run's commits, never the install's.
pub async fn written_out(name: &str, url: &str) -> Result<(), String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    c.batch_execute("checkpoint")
        .await
        .map_err(|e| format!("{name}: checkpoint: {e}"))
}

/// A shard: schema, seeded history (server-side, no rows over the wire),
/// then the audit triggers, so the bulk load is not audited. Returns the seeding time.
pub async fn shard(
    name: &str,
    url: &str,
    farm: &Farm,
    seed_first_ms: i64,
) -> Result<Duration, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    c.batch_execute(SHARD_SQL)
        .await
        .map_err(|e| format!("{name}: installing the schema: {e}"))?;
    let began = Instant::now();
    let turbines = farm.seeded_on(name);
    if !turbines.is_empty() {
        // The index is dropped during the load and rebuilt once: cheaper than maintaining it row by row.
        c.batch_execute("drop index if exists readings_turbine_ts")
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        let step = farm.seed_step_ms();
        let rows = farm.rows_per_turbine as i64;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&turbines, &seed_first_ms, &step, &rows];
        tokio::time::timeout(Duration::from_secs(600), c.execute(SEED_SQL, &params))
            .await
            .map_err(|_| format!("{name}: seeding took over 600 s"))?
            .map_err(|e| format!("{name}: seeding: {e}"))?;
        c.batch_execute(
            "create index readings_turbine_ts on readings (turbine_id, ts); analyze readings",
        )
        .await
        .map_err(|e| format!("{name}: index: {e}"))?;
        // Set the visibility map now, so the run's autovacuums visit only the pages the run changed.
        c.batch_execute("vacuum readings")
            .await
            .map_err(|e| format!("{name}: vacuum: {e}"))?;
    }
    c.batch_execute(SHARD_AUDIT_SQL)
        .await
        .map_err(|e| format!("{name}: installing the audit: {e}"))?;
    Ok(began.elapsed())
}
