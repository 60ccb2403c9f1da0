//! What the timeline draws: the history's digest (lanes per box, fault target and process), with what the audit and the verdict add at the end: the claim as the routing db saw it, each shard's writes, stale beliefs, anomalies and lost turbines.
//!
//! Everything here is in scenario ms. Marks keep where their event is (a
//! history position, or an audit row for the shard lanes), so a hover title
//! is only built for the marks actually drawn one by one.

use crate::digest::{
    BoxLane, EventLane, EventLookup, FaultLane, Grid, HistoryDigest, Keep, Point, Points,
};
use chaos_checkers::{AnomalyClass, Severity, Verdict};
use chaos_history::{Audit, Op, RunMeta, WriteOp};
use std::collections::BTreeSet;

/// A stretch of a box's belief the routing db did not back: its claim had
/// expired or belonged to another box. This is the "writes after lease
/// expiry" window of the incident.
#[derive(Debug, Clone)]
pub(crate) struct Stale {
    pub start: i64,
    pub end: i64,
    pub token: Option<i64>,
}

/// The claim as the routing db saw it: a valid holder from a grant until its
/// expiry or the next change.
#[derive(Debug, Clone)]
pub(crate) struct ClaimSeg {
    pub start: i64,
    pub end: i64,
    pub holder: String,
    pub token: i64,
    /// Grant plus renewals merged into this segment.
    pub changes: u64,
    /// The claim expired at `end` (rather than being replaced or the run ending).
    pub lapsed: bool,
}

#[derive(Debug, Default)]
pub(crate) struct ClaimLane {
    pub segs: Vec<ClaimSeg>,
    /// No valid claim: before the first grant, after an expiry, after a release.
    pub vacancies: Vec<(i64, i64)>,
    pub changes: usize,
}

/// Committed writes on one shard, from its own audit trigger.
#[derive(Debug, Default)]
pub(crate) struct ShardLane<'a> {
    pub name: &'a str,
    /// Inserts by movers (ingest inserts are only counted: they are the background).
    pub mover_inserts: Points,
    pub deletes: Points,
    pub fences: Points,
    pub ingest_writes: u64,
}

/// Where a lost turbine's history ended, from the lost-rows anomalies.
#[derive(Debug, Clone)]
pub(crate) struct LostMark {
    pub t: Option<i64>,
    pub turbines: Vec<String>,
    pub summary: String,
}

#[derive(Debug, Clone)]
pub(crate) struct AnomalyMark {
    pub t: i64,
    pub index: usize,
    pub severity: Severity,
}

pub(crate) struct Model<'a> {
    pub digest: &'a HistoryDigest,
    pub lookup: &'a dyn EventLookup,
    pub audit: Option<&'a Audit>,
    pub verdict: &'a Verdict,
    pub meta: &'a RunMeta,
    pub t0: i64,
    pub t1: i64,
    pub boxes: &'a [BoxLane],
    /// Per box (same order), the stretches its belief was not backed.
    pub stale: Vec<Vec<Stale>>,
    pub faults: &'a [FaultLane],
    pub claim: Option<ClaimLane>,
    pub others: &'a [EventLane],
    pub shards: Vec<ShardLane<'a>>,
    /// Audit rows outside the run's span (not drawn).
    pub audit_outside: u64,
    pub lost: Vec<LostMark>,
    pub lost_turbines: BTreeSet<String>,
    pub anomalies: Vec<AnomalyMark>,
}

pub(crate) fn str_field<'v>(value: &'v serde_json::Value, key: &str) -> Option<&'v str> {
    value.get(key)?.as_str()
}

impl<'a> Model<'a> {
    pub fn build(
        meta: &'a RunMeta,
        digest: &'a HistoryDigest,
        lookup: &'a dyn EventLookup,
        audit: Option<&'a Audit>,
        verdict: &'a Verdict,
    ) -> Model<'a> {
        let (t0, t1) = (digest.t0, digest.t1);
        let claim = audit.map(|a| claim_lane(a, meta, t0, t1));
        let stale = digest
            .boxes
            .iter()
            .map(|lane| match &claim {
                Some(claim) => stale_beliefs(lane, claim),
                None => Vec::new(),
            })
            .collect();
        let (shards, audit_outside) = audit
            .map(|a| shard_lanes(a, meta, &digest.grid))
            .unwrap_or_default();
        let mut model = Model {
            digest,
            lookup,
            audit,
            verdict,
            meta,
            t0,
            t1,
            boxes: &digest.boxes,
            stale,
            faults: &digest.faults,
            claim,
            others: &digest.others,
            shards,
            audit_outside,
            lost: Vec::new(),
            lost_turbines: BTreeSet::new(),
            anomalies: Vec::new(),
        };
        model.mark_anomalies();
        model
    }

    /// Scenario ms of a wall-clock instant from the audit.
    pub fn at_unix(&self, unix_ns: i64) -> i64 {
        crate::digest::scenario_ms_at_unix(&self.meta.clock, unix_ns)
    }

    /// Scenario ms of a history event.
    pub fn at_run(&self, run_ns: i64) -> i64 {
        crate::digest::scenario_ms(&self.meta.clock, run_ns)
    }

    fn in_run(&self, t: i64) -> bool {
        (self.t0..=self.t1).contains(&t)
    }

    fn mark_anomalies(&mut self) {
        for (index, anomaly) in self.verdict.anomalies.iter().enumerate() {
            if let Some(t) = anomaly.first_scenario_ms.filter(|&t| self.in_run(t)) {
                self.anomalies.push(AnomalyMark {
                    t,
                    index,
                    severity: anomaly.severity,
                });
            }
            if anomaly.class != AnomalyClass::LostRows {
                continue;
            }
            let mut turbines = Vec::new();
            collect_turbines(&anomaly.evidence, &mut turbines, 0);
            turbines.sort();
            turbines.dedup();
            self.lost_turbines.extend(turbines.iter().cloned());
            match anomaly.first_scenario_ms.filter(|&t| self.in_run(t)) {
                Some(t) => self.lost.push(LostMark {
                    t: Some(t),
                    turbines,
                    summary: anomaly.summary.clone(),
                }),
                None => {
                    // The first time may be a reading's time (a year back): mark each
                    // turbine where its history last saw a delete instead.
                    for turbine in turbines {
                        let t = self.digest.last_delete.get(&turbine).copied();
                        self.lost.push(LostMark {
                            t,
                            turbines: vec![turbine],
                            summary: anomaly.summary.clone(),
                        });
                    }
                }
            }
        }
    }

    /// The history event at `src`, when it can still be read.
    pub fn event(&self, src: u64) -> Option<Op> {
        self.lookup.event(src)
    }

    /// The turbine a box operation names, in its completion or its invoke.
    pub fn turbine_of(&self, point: &Point) -> Option<String> {
        let named = |src: u64| {
            self.event(src)
                .and_then(|op| str_field(&op.value, "turbine").map(str::to_string))
        };
        named(point.src).or_else(|| named(point.other?))
    }
}

/// Turbine names anywhere in an evidence blob, under `turbine`, `turbine_id` or `turbines`.
fn collect_turbines(value: &serde_json::Value, out: &mut Vec<String>, depth: usize) {
    if depth > 6 || out.len() >= 1000 {
        return;
    }
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("turbine" | "turbine_id", serde_json::Value::String(s)) => out.push(s.clone()),
                    ("turbines", serde_json::Value::Array(items)) => {
                        for item in items {
                            match item {
                                serde_json::Value::String(s) => out.push(s.clone()),
                                other => collect_turbines(other, out, depth + 1),
                            }
                        }
                    }
                    _ => collect_turbines(v, out, depth + 1),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                collect_turbines(item, out, depth + 1);
            }
        }
        _ => {}
    }
}

fn claim_lane(audit: &Audit, meta: &RunMeta, t0: i64, t1: i64) -> ClaimLane {
    let clock = meta.clock;
    let mut changes: Vec<_> = audit
        .claim_changes
        .iter()
        .filter(|c| meta.job.is_empty() || c.job == meta.job)
        .collect();
    changes.sort_by_key(|c| (c.commit_unix_ns, c.xid));
    let mut lane = ClaimLane {
        changes: changes.len(),
        ..Default::default()
    };
    for (i, change) in changes.iter().enumerate() {
        let start = crate::digest::scenario_ms_at_unix(&clock, change.commit_unix_ns);
        let next = changes
            .get(i + 1)
            .map(|c| crate::digest::scenario_ms_at_unix(&clock, c.commit_unix_ns));
        let Some(holder) = &change.holder else {
            continue;
        };
        let expires = crate::digest::scenario_ms_at_unix(&clock, change.expires_unix_ns);
        let until = next.unwrap_or(t1.max(start));
        let end = expires.min(until);
        if end <= start {
            continue;
        }
        let lapsed = expires < until;
        match lane.segs.last_mut() {
            Some(prev)
                if prev.holder == *holder && prev.token == change.token && prev.end >= start =>
            {
                prev.end = end;
                prev.changes += 1;
                prev.lapsed = lapsed;
            }
            _ => lane.segs.push(ClaimSeg {
                start,
                end,
                holder: holder.clone(),
                token: change.token,
                changes: 1,
                lapsed,
            }),
        }
    }
    if lane.changes > 0 {
        let mut cursor = t0;
        for seg in &lane.segs {
            if seg.start > cursor {
                lane.vacancies.push((cursor, seg.start));
            }
            cursor = cursor.max(seg.end);
        }
        if cursor < t1 {
            lane.vacancies.push((cursor, t1));
        }
    }
    lane
}

/// The parts of each belief that no claim segment of the same box and token covers.
fn stale_beliefs(lane: &BoxLane, claim: &ClaimLane) -> Vec<Stale> {
    let mut out = Vec::new();
    for belief in &lane.beliefs.exact {
        let mut cursor = belief.start;
        let first = claim.segs.partition_point(|s| s.end <= belief.start);
        for seg in &claim.segs[first..] {
            if seg.start >= belief.end {
                break;
            }
            let backs = seg.holder == lane.name && belief.token.map_or(true, |t| t == seg.token);
            if !backs {
                continue;
            }
            if seg.start > cursor {
                out.push(Stale {
                    start: cursor,
                    end: seg.start,
                    token: belief.token,
                });
            }
            cursor = cursor.max(seg.end);
        }
        if cursor < belief.end {
            out.push(Stale {
                start: cursor,
                end: belief.end,
                token: belief.token,
            });
        }
    }
    // A grant commits a moment before the box hears "ok": ignore slivers under
    // a scenario second, they are the round trip, not a stale holder.
    out.retain(|s| s.end - s.start >= 1000);
    out
}

/// The shard lanes from the audit, and how many of its rows fall outside the run's span.
fn shard_lanes<'a>(audit: &'a Audit, meta: &'a RunMeta, grid: &Grid) -> (Vec<ShardLane<'a>>, u64) {
    /// Shards beyond this many share the last lane.
    const MAX_SHARD_LANES: usize = 64;
    let mut lanes: Vec<ShardLane<'a>> = meta
        .shards
        .iter()
        .take(MAX_SHARD_LANES)
        .map(|s| ShardLane {
            name: s,
            ..Default::default()
        })
        .collect();
    let mut outside = 0;
    let keep = Keep::new(*grid);
    for (i, write) in audit.shard_writes.iter().enumerate() {
        let lane_i = match lanes.iter().position(|l| l.name == write.shard) {
            Some(i) => i,
            None if lanes.len() < MAX_SHARD_LANES => {
                lanes.push(ShardLane {
                    name: &write.shard,
                    ..Default::default()
                });
                lanes.len() - 1
            }
            None => lanes.len() - 1,
        };
        let lane = &mut lanes[lane_i];
        let t = crate::digest::scenario_ms_at_unix(&meta.clock, write.commit_unix_ns);
        if t < grid.a0 || t > grid.a1 {
            outside += 1;
            continue;
        }
        let point = Point {
            t,
            src: i as u64,
            other: None,
        };
        match write.op {
            WriteOp::Insert if write.app == "ingest" => lane.ingest_writes += 1,
            WriteOp::Insert => lane.mover_inserts.push(point, &keep),
            WriteOp::Delete => lane.deletes.push(point, &keep),
            WriteOp::Fence => lane.fences.push(point, &keep),
        }
    }
    for lane in &mut lanes {
        for points in [&mut lane.mover_inserts, &mut lane.deletes, &mut lane.fences] {
            points.exact.sort_by_key(|p| p.t);
        }
    }
    (lanes, outside)
}
