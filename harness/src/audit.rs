//! Reading the resources' own record at the end of a run: the shards' write audit, the routing db's claim audit, and every shard's final state as runs.

use crate::db;
use chaos_history::{
    Audit, ClaimChange, FinalState, RunBuilder, ShardTurbineRuns, ShardWrite, ValueCheck, WriteOp,
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
            not_before_unix_ns: None,
            commit_unix_ns: r.get::<_, Option<i64>>(6).unwrap_or(0),
        })
        .collect())
}

/// One shard's readings as runs per turbine. Streamed unordered with COPY
/// (a sequential scan, far cheaper than an index-ordered read of millions of
/// rows), grouped per turbine, sorted here and folded by `RunBuilder` (equal
/// timestamps add copies). Memory: 8 bytes a reading while it is read. Each row's value is
/// also compared here with its reading's value (`galewatch::reading_value`): `values`
/// counts the rows whose value was changed. (Compared on the shard in SQL, numeric
/// arithmetic per row, the check took 2.3 s of a 1.58 M-row shard's 2.9 s read.)
pub async fn final_runs(shard: &str, url: &str) -> Result<Vec<ShardTurbineRuns>, String> {
    use chaos_workloads::galewatch::{numbered_reading_value, serial_number};
    use futures_util::StreamExt;
    /// One turbine's timestamps and value check, and its number (None: not a serial).
    struct Turbine {
        ts: Vec<i64>,
        values: ValueCheck,
        number: Option<i64>,
    }
    let c = db::connect(url, "harness", TIMEOUT).await?;
    let sql = "copy (select turbine_id, (extract(epoch from ts) * 1000)::bigint, value from readings) to stdout";
    let read = async {
        let stream = c
            .copy_out(sql)
            .await
            .map_err(|e| format!("{shard}: reading the final state: {e}"))?;
        futures_util::pin_mut!(stream);
        let mut by_turbine: std::collections::HashMap<String, Turbine> =
            std::collections::HashMap::new();
        let mut partial: Vec<u8> = Vec::new();
        let float = |b: &[u8]| -> Option<f64> { std::str::from_utf8(b).ok()?.parse().ok() };
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("{shard}: reading the final state: {e}"))?;
            partial.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(nl) = partial[start..].iter().position(|&b| b == b'\n') {
                let line = &partial[start..start + nl];
                start += nl + 1;
                let mut cols = line.split(|&b| b == b'\t');
                let (Some(turbine), Some(ts), Some(value), None) =
                    (cols.next(), cols.next(), cols.next(), cols.next())
                else {
                    return Err(format!("{shard}: unexpected COPY line"));
                };
                let turbine = std::str::from_utf8(turbine).map_err(|e| format!("{shard}: {e}"))?;
                let ts: i64 = std::str::from_utf8(ts)
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| format!("{shard}: unexpected timestamp in COPY"))?;
                let value =
                    float(value).ok_or_else(|| format!("{shard}: unexpected value in COPY"))?;
                if !by_turbine.contains_key(turbine) {
                    let fresh = Turbine {
                        ts: Vec::new(),
                        values: ValueCheck {
                            rows: 0,
                            wrong: 0,
                            first_wrong_ts_ms: None,
                        },
                        number: serial_number(turbine),
                    };
                    by_turbine.insert(turbine.to_string(), fresh);
                }
                let t = by_turbine.get_mut(turbine).expect("inserted above");
                t.ts.push(ts);
                // A turbine name that is no serial: its values cannot be compared.
                if let Some(n) = t.number {
                    t.values.rows += 1;
                    if value != numbered_reading_value(n, ts) {
                        t.values.wrong += 1;
                        t.values.first_wrong_ts_ms =
                            Some(t.values.first_wrong_ts_ms.map_or(ts, |f| f.min(ts)));
                    }
                }
            }
            partial.drain(..start);
        }
        let mut out: Vec<ShardTurbineRuns> = by_turbine
            .into_iter()
            .map(|(turbine, Turbine { mut ts, values, .. })| {
                ts.sort_unstable();
                let mut b = RunBuilder::new();
                for t in ts {
                    b.push(t);
                }
                ShardTurbineRuns {
                    shard: shard.into(),
                    turbine,
                    runs: b.finish(),
                    values: Some(values),
                }
            })
            .collect();
        out.sort_by(|a, b| a.turbine.cmp(&b.turbine));
        Ok::<_, String>(out)
    };
    tokio::time::timeout(Duration::from_secs(300), read)
        .await
        .map_err(|_| format!("{shard}: reading the final state took over 300 s"))?
}

/// The whole audit and final state; a node that cannot be read is named in `missing`.
pub async fn collect(routing_url: &str, shards: &[(String, String)]) -> (Audit, FinalState) {
    let mut audit = Audit {
        object_writes: Vec::new(),
        complete: true,
        ..Default::default()
    };
    let mut fin = FinalState {
        payments: Vec::new(),
        config: None,
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
