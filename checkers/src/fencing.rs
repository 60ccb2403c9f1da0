//! The fencing check: did a shard accept a write of an older grant after a newer grant had written there, and which writes did a fence refuse.

use crate::claims::Claims;
use crate::fold::Refusal;
use crate::times::{format_ms, scenario_ms};
use crate::writes::Attributed;
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::{RunMeta, WriteOp};
use serde_json::json;
use std::collections::BTreeMap;

/// A write a shard should have refused.
#[derive(Debug, Clone)]
pub struct StaleWrite {
    pub shard: String,
    pub app: String,
    /// The holder of the grant the write's token names (its writer, unless the token was borrowed).
    pub holder: String,
    pub token: i64,
    pub newer_token: i64,
    pub newer_holder: String,
    pub op: WriteOp,
    pub turbine: Option<String>,
    pub rows: i64,
    pub commit_unix_ns: i64,
}

/// Per shard, in commit order: the newest grant that has written there
/// (a fence row or any write attributed to it); an insert or delete of an
/// older grant after that is stale. Writes committed in the same instant
/// cannot be ordered, so they never judge each other.
pub fn stale_writes(writes: &[Attributed], claims: &Claims) -> Vec<StaleWrite> {
    let mut by_shard: BTreeMap<&str, Vec<&Attributed>> = BTreeMap::new();
    for a in writes.iter().filter(|a| a.grant.is_some()) {
        by_shard.entry(a.write.shard.as_str()).or_default().push(a);
    }
    let mut out = Vec::new();
    for (shard, list) in by_shard {
        let mut newest: Option<usize> = None;
        let mut k = 0;
        while k < list.len() {
            let at = list[k].write.commit_unix_ns;
            let end = k + list[k..]
                .iter()
                .take_while(|a| a.write.commit_unix_ns == at)
                .count();
            for a in &list[k..end] {
                let g = a.grant.expect("filtered above");
                let data = matches!(a.write.op, WriteOp::Insert | WriteOp::Delete);
                if let (true, Some(n)) = (data, newest) {
                    if n > g {
                        out.push(StaleWrite {
                            shard: shard.to_string(),
                            app: a.write.app.clone(),
                            holder: claims.grants[g].holder.clone(),
                            token: claims.grants[g].token,
                            newer_token: claims.grants[n].token,
                            newer_holder: claims.grants[n].holder.clone(),
                            op: a.write.op,
                            turbine: a.write.turbine.clone(),
                            rows: a.write.rows,
                            commit_unix_ns: at,
                        });
                    }
                }
            }
            for a in &list[k..end] {
                newest = newest.max(a.grant);
            }
            k = end;
        }
    }
    out.sort_by_key(|s| s.commit_unix_ns);
    out
}

fn op_name(op: WriteOp) -> &'static str {
    match op {
        WriteOp::Insert => "insert",
        WriteOp::Delete => "delete",
        WriteOp::Fence => "fence",
    }
}

pub fn stale_anomaly(stale: &[StaleWrite], meta: &RunMeta) -> Option<Anomaly> {
    let first = stale.first()?;
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let evidence: Vec<_> = stale
        .iter()
        .map(|s| {
            json!({
                "shard": s.shard, "box": s.app, "token": s.token, "token_holder": s.holder,
                "newer_token": s.newer_token, "newer_holder": s.newer_holder,
                "op": op_name(s.op), "turbine": s.turbine, "rows": s.rows,
                "scenario_ms": at(s.commit_unix_ns), "time": format_ms(at(s.commit_unix_ns)),
            })
        })
        .collect();
    let whose = if first.holder == first.app {
        String::new()
    } else {
        format!("{}'s ", first.holder)
    };
    let summary = format!(
        "{} writes of an older grant accepted after a newer grant wrote there; first: {} ({whose}token {}) {} {} on {} at {}, after token {} ({})",
        stale.len(),
        if first.app.is_empty() { "(no application_name)" } else { first.app.as_str() },
        first.token,
        op_name(first.op),
        first.turbine.as_deref().unwrap_or("-"),
        first.shard,
        format_ms(at(first.commit_unix_ns)),
        first.newer_token,
        first.newer_holder,
    );
    Some(Anomaly::new(
        AnomalyClass::StaleTokenWrite,
        Severity::Error,
        stale.len() as u64,
        Some(at(first.commit_unix_ns)),
        summary,
        json!({ "writes": evidence }),
    ))
}

/// `StaleWriteRefused`: the fence worked; information, never a fault.
pub fn refused_anomaly(refusals: &[Refusal], meta: &RunMeta) -> Option<Anomaly> {
    let clock = &meta.clock;
    let first = refusals.iter().min_by_key(|r| r.time_ns)?;
    let at = |ns: i64| clock.scenario_ms_at_run_ns(ns);
    let evidence: Vec<_> = refusals
        .iter()
        .map(|r| {
            json!({
                "box": r.process, "f": r.f, "token": r.token, "shard_token": r.shard_token, "shard": r.shard,
                "scenario_ms": at(r.time_ns), "time": format_ms(at(r.time_ns)),
            })
        })
        .collect();
    let opt = |v: Option<i64>| v.map_or("?".to_string(), |t| t.to_string());
    let summary = format!(
        "{} writes refused by a fence; first: {} {} with token {} on {} (shard token {}) at {}",
        refusals.len(),
        first.process,
        first.f,
        opt(first.token),
        first.shard.as_deref().unwrap_or("?"),
        opt(first.shard_token),
        format_ms(at(first.time_ns)),
    );
    Some(Anomaly::new(
        AnomalyClass::StaleWriteRefused,
        Severity::Info,
        refusals.len() as u64,
        Some(at(first.time_ns)),
        summary,
        json!({ "refusals": evidence }),
    ))
}
