//! Reading the resources' own record at the end of a run: the shards' write audit, the routing db's claim audit, and every shard's final state as runs.

use crate::db;
use chaos_history::{
    Audit, ClaimChange, FinalState, Run, RunBuilder, ShardTurbineRuns, ShardWrite, WriteOp,
};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// `timestamptz` to Unix ns in SQL, with ±infinity mapped to i64 bounds.
fn ns(col: &str) -> String {
    format!("case when {col} = '-infinity' then -9223372036854775807 when {col} = 'infinity' then 9223372036854775807 else (extract(epoch from {col}) * 1000000)::bigint * 1000 end")
}

fn ms(col: &str) -> String {
    format!("(extract(epoch from {col}) * 1000)::bigint")
}

/// Every committed write on one shard.
pub async fn shard_writes(shard: &str, url: &str) -> Result<Vec<ShardWrite>, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let sql = format!(
        "select op, turbine_id, n_rows, {}, {}, token, app, xid, {} from chaos_write_audit order by id",
        ms("min_ts"),
        ms("max_ts"),
        ns("pg_xact_commit_timestamp(xmin)")
    );
    let rows = c
        .query(&sql, &[])
        .await
        .map_err(|e| format!("{shard}: reading the write audit: {e}"))?;
    Ok(rows
        .iter()
        .map(|r| ShardWrite {
            shard: shard.to_string(),
            op: match r.get::<_, &str>(0) {
                "insert" => WriteOp::Insert,
                "delete" => WriteOp::Delete,
                _ => WriteOp::Fence,
            },
            turbine: r.get(1),
            rows: r.get(2),
            min_ts_ms: r.get(3),
            max_ts_ms: r.get(4),
            token: r.get(5),
            app: r.get(6),
            xid: r.get(7),
            commit_unix_ns: r.get::<_, Option<i64>>(8).unwrap_or(0),
        })
        .collect())
}

/// Every committed claim change on the routing db.
pub async fn claim_changes(url: &str) -> Result<Vec<ClaimChange>, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let sql = format!(
        "select job, holder, token, {}, app, xid, {} from chaos_claim_audit order by id",
        ns("expires_at"),
        ns("pg_xact_commit_timestamp(xmin)")
    );
    let rows = c
        .query(&sql, &[])
        .await
        .map_err(|e| format!("routing: reading the claim audit: {e}"))?;
    Ok(rows
        .iter()
        .map(|r| ClaimChange {
            job: r.get(0),
            holder: r.get(1),
            token: r.get(2),
            expires_unix_ns: r.get(3),
            app: r.get(4),
            xid: r.get(5),
            commit_unix_ns: r.get::<_, Option<i64>>(6).unwrap_or(0),
        })
        .collect())
}

/// One shard's readings as runs per turbine. Postgres finds the islands
/// (a new island where the gap or the copy count changes); `RunBuilder`
/// joins what the SQL split, so the result is canonical.
pub async fn final_runs(shard: &str, url: &str) -> Result<Vec<ShardTurbineRuns>, String> {
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let sql = "with c as (select turbine_id, (extract(epoch from ts) * 1000)::bigint as t, count(*)::int as copies from readings group by 1, 2),
        g as (select turbine_id, t, copies, t - lag(t) over w as gap, lag(copies) over w as pc from c window w as (partition by turbine_id order by t)),
        b as (select *, case when gap is distinct from lag(gap) over w or copies is distinct from pc then 1 else 0 end as brk from g window w as (partition by turbine_id order by t)),
        r as (select *, sum(brk) over (partition by turbine_id order by t) as run_id from b)
        select turbine_id, min(t), max(t), count(*), min(copies) from r group by turbine_id, run_id order by turbine_id, min(t)";
    let rows = tokio::time::timeout(Duration::from_secs(120), c.query(sql, &[]))
        .await
        .map_err(|_| format!("{shard}: reading the final state took over 120 s"))?
        .map_err(|e| format!("{shard}: reading the final state: {e}"))?;
    let mut out: Vec<ShardTurbineRuns> = Vec::new();
    let mut current: Option<(String, RunBuilder)> = None;
    for r in rows {
        let turbine: String = r.get(0);
        let (first, last, count, copies): (i64, i64, i64, i32) =
            (r.get(1), r.get(2), r.get(3), r.get(4));
        if current.as_ref().map(|(t, _)| t != &turbine).unwrap_or(true) {
            if let Some((t, b)) = current.take() {
                out.push(ShardTurbineRuns {
                    shard: shard.into(),
                    turbine: t,
                    runs: b.finish(),
                });
            }
            current = Some((turbine.clone(), RunBuilder::new()));
        }
        let step = if count > 1 {
            (last - first) / (count - 1)
        } else {
            0
        };
        current.as_mut().expect("set above").1.push_run(Run {
            first_ms: first,
            last_ms: last,
            step_ms: step,
            copies: copies as u32,
        });
    }
    if let Some((t, b)) = current.take() {
        out.push(ShardTurbineRuns {
            shard: shard.into(),
            turbine: t,
            runs: b.finish(),
        });
    }
    Ok(out)
}

/// The whole audit and final state; a node that cannot be read is named in `missing`.
pub async fn collect(routing_url: &str, shards: &[(String, String)]) -> (Audit, FinalState) {
    let mut audit = Audit {
        complete: true,
        ..Default::default()
    };
    let mut fin = FinalState {
        complete: true,
        ..Default::default()
    };
    match claim_changes(routing_url).await {
        Ok(c) => audit.claim_changes = c,
        Err(e) => {
            audit.complete = false;
            audit.missing.push(e);
        }
    }
    let reads = shards.iter().map(|(name, url)| async move {
        (
            name.clone(),
            shard_writes(name, url).await,
            final_runs(name, url).await,
        )
    });
    for (_, writes, runs) in futures_util::future::join_all(reads).await {
        match writes {
            Ok(w) => audit.shard_writes.extend(w),
            Err(e) => {
                audit.complete = false;
                audit.missing.push(e);
            }
        }
        match runs {
            Ok(r) => fin.shards.extend(r),
            Err(e) => {
                fin.complete = false;
                fin.missing.push(e);
            }
        }
    }
    audit
        .shard_writes
        .sort_by_key(|w| (w.commit_unix_ns, w.xid));
    (audit, fin)
}
