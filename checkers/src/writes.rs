//! Shard writes from the audit: which grant each mover write acted under, and an index by turbine for dating anomalies.

use crate::claims::Claims;
use chaos_history::{Audit, ShardWrite, WriteOp};
use std::collections::HashMap;

/// A mover's committed write and the grant it acted under (`None`: its
/// writer never held the claim before it).
#[derive(Debug, Clone, Copy)]
pub struct Attributed<'a> {
    pub write: &'a ShardWrite,
    pub grant: Option<usize>,
}

/// Whether a writer is a mover, the only writers the lease and the fence
/// govern: the ingest writes without asking anybody, by design, and the
/// harness seeds before the audit starts.
pub fn is_mover(app: &str) -> bool {
    !(app.is_empty() || app.starts_with("ingest") || app == "harness")
}

/// Every mover write, in commit order, with its grant.
pub fn attribute<'a>(audit: &'a Audit, claims: &Claims) -> Vec<Attributed<'a>> {
    let mut out: Vec<Attributed<'a>> = audit
        .shard_writes
        .iter()
        .filter(|w| is_mover(&w.app))
        .map(|w| Attributed {
            write: w,
            grant: claims.grant_for(&w.app, w.commit_unix_ns, w.token),
        })
        .collect();
    out.sort_by_key(|a| (a.write.commit_unix_ns, a.write.xid));
    out
}

/// Whether a write touched the reading at `ts_ms` (a write that did not say
/// which timestamps it touched may have touched any).
fn covers(w: &ShardWrite, ts_ms: i64) -> bool {
    !matches!(w.min_ts_ms, Some(lo) if lo > ts_ms) && !matches!(w.max_ts_ms, Some(hi) if hi < ts_ms)
}

/// Every insert and delete of each turbine (any writer), in commit order.
pub struct TurbineWrites<'a> {
    by_turbine: HashMap<&'a str, Vec<&'a ShardWrite>>,
}

impl<'a> TurbineWrites<'a> {
    pub fn new(audit: &'a Audit) -> TurbineWrites<'a> {
        let mut by_turbine: HashMap<&'a str, Vec<&'a ShardWrite>> = HashMap::new();
        for w in &audit.shard_writes {
            if let (Some(t), WriteOp::Insert | WriteOp::Delete) = (w.turbine.as_deref(), w.op) {
                by_turbine.entry(t).or_default().push(w);
            }
        }
        for ws in by_turbine.values_mut() {
            ws.sort_by_key(|w| (w.commit_unix_ns, w.xid));
        }
        TurbineWrites { by_turbine }
    }

    fn of(&self, turbine: &str) -> &[&'a ShardWrite] {
        self.by_turbine.get(turbine).map_or(&[], Vec::as_slice)
    }

    /// When the reading at `ts_ms` was lost: the last delete that touched it.
    pub fn lost_at(&self, turbine: &str, ts_ms: i64) -> Option<&'a ShardWrite> {
        self.of(turbine)
            .iter()
            .rev()
            .find(|w| w.op == WriteOp::Delete && covers(w, ts_ms))
            .copied()
    }

    /// Inserts of the reading at `ts_ms` on shards `shard_ok` accepts, in commit order.
    pub fn inserts_of(
        &self,
        turbine: &str,
        ts_ms: i64,
        shard_ok: impl Fn(&str) -> bool,
    ) -> Vec<&'a ShardWrite> {
        self.of(turbine)
            .iter()
            .filter(|w| w.op == WriteOp::Insert && shard_ok(&w.shard) && covers(w, ts_ms))
            .copied()
            .collect()
    }
}
