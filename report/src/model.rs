//! What the timeline draws, extracted from the history, the audit and the verdict in one pass.
//!
//! Everything here is in scenario ms. Marks keep the index of the history
//! event (or audit row) they came from, so a hover title is only built for
//! the marks actually drawn one by one: a 1 M-event history must not cost
//! 1 M formatted strings.

use crate::latency::for_each_pair;
use chaos_checkers::{AnomalyClass, Severity, Verdict};
use chaos_history::{Audit, Op, OpType, RunMeta, WriteOp};
use std::collections::{BTreeSet, HashMap};

/// A moment: its scenario ms and where it came from (a history index, or an
/// audit row for the shard lanes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Point {
    pub t: i64,
    pub src: usize,
    /// The other half of an invoke->completion pair (the invoke, for a completion).
    pub other: Option<usize>,
}

/// How an invoke->completion interval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Fail,
    /// A fail with `reason: "fenced"`: the shard refused a stale token.
    Refused,
    Info,
    /// No completion before the process's last event.
    Open,
}

/// An operation with a duration (a copy).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub start: i64,
    pub end: i64,
    pub invoke: Option<usize>,
    pub completion: Option<usize>,
    pub outcome: Outcome,
}

/// A stretch of time a box believed it held the claim.
#[derive(Debug, Clone)]
pub(crate) struct Belief {
    pub start: i64,
    pub end: i64,
    pub token: Option<i64>,
    pub ended_by: &'static str,
}

/// A stretch of a box's belief the routing db did not back: its claim had
/// expired or belonged to another box. This is the "writes after lease
/// expiry" window of the incident.
#[derive(Debug, Clone)]
pub(crate) struct Stale {
    pub start: i64,
    pub end: i64,
    pub token: Option<i64>,
}

/// Consecutive `skip`s of one box (walking turbines somebody else moved).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipRun {
    pub start: i64,
    pub end: i64,
    pub n: u64,
    pub first: usize,
    pub last: usize,
}

#[derive(Debug, Default)]
pub(crate) struct BoxLane<'a> {
    pub name: &'a str,
    pub beliefs: Vec<Belief>,
    pub stale: Vec<Stale>,
    pub copies: Vec<Span>,
    pub source_deletes: Vec<Point>,
    pub tidy_deletes: Vec<Point>,
    pub refused: Vec<Point>,
    pub failed: Vec<Point>,
    pub skips: Vec<SkipRun>,
    pub renew_ok: Vec<Point>,
    pub renew_fail: Vec<Point>,
    /// Acquire attempts that did not win: a non-holder polling.
    pub polls: Vec<Point>,
    pub acquired: Vec<Point>,
    pub events: u64,
    pub last_t: i64,
    /// The latest skip run is still growing: nothing else happened since.
    pub skip_open: bool,
}

/// A fault from its landing to its healing, on one target.
#[derive(Debug, Clone)]
pub(crate) struct FaultWindow {
    pub start: i64,
    pub end: i64,
    pub verb: String,
    /// Never healed before the run ended.
    pub open: bool,
    pub begin_op: usize,
    pub end_op: Option<usize>,
}

#[derive(Debug, Default)]
pub(crate) struct FaultLane {
    pub target: String,
    pub windows: Vec<FaultWindow>,
    /// Faults with no duration (`clock`, unknown verbs) and nemesis ops that failed.
    pub instants: Vec<Point>,
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

impl ClaimLane {
    /// Vacancies with a holder before and after: before the first grant the
    /// boxes are still racing, after the last one the job is over.
    pub fn vacancies_between_grants(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        let first = self.segs.first().map(|s| s.start).unwrap_or(i64::MAX);
        let last = self.segs.last().map(|s| s.end).unwrap_or(i64::MIN);
        self.vacancies
            .iter()
            .copied()
            .filter(move |(a, b)| *a >= first && *b <= last)
    }
}

/// Events of a process that is neither a box nor the nemesis (the ingest).
#[derive(Debug, Default)]
pub(crate) struct EventLane<'a> {
    pub name: &'a str,
    pub ok: Vec<Point>,
    pub fail: Vec<Point>,
    pub info: Vec<Point>,
}

/// Committed writes on one shard, from its own audit trigger.
#[derive(Debug, Default)]
pub(crate) struct ShardLane<'a> {
    pub name: &'a str,
    /// Inserts by movers (ingest inserts are only counted: they are the background).
    pub mover_inserts: Vec<Point>,
    pub deletes: Vec<Point>,
    pub fences: Vec<Point>,
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
    pub history: &'a [Op],
    pub audit: Option<&'a Audit>,
    pub verdict: &'a Verdict,
    pub meta: &'a RunMeta,
    /// Scenario ms of every history event.
    pub times: Vec<i64>,
    pub t0: i64,
    pub t1: i64,
    pub boxes: Vec<BoxLane<'a>>,
    pub faults: Vec<FaultLane>,
    pub claim: Option<ClaimLane>,
    pub others: Vec<EventLane<'a>>,
    pub shards: Vec<ShardLane<'a>>,
    pub lost: Vec<LostMark>,
    pub lost_turbines: BTreeSet<String>,
    pub anomalies: Vec<AnomalyMark>,
}

/// Box names sort by their number so that `box-10` follows `box-9`.
fn box_order(name: &str) -> (u64, &str) {
    let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
    (digits.parse().unwrap_or(u64::MAX), name)
}

pub(crate) fn str_field<'v>(value: &'v serde_json::Value, key: &str) -> Option<&'v str> {
    value.get(key)?.as_str()
}

fn int_field(value: &serde_json::Value, key: &str) -> Option<i64> {
    value.get(key)?.as_i64()
}

/// Verbs that open a fault window, and the verb that closes each.
fn closing_verb(verb: &str) -> Option<&'static str> {
    Some(match verb {
        "pause" => "resume",
        "kill" => "start-mover",
        "stop" | "crash" => "start",
        "latency" | "bandwidth" | "down" | "timeout" | "reset_peer" | "slicer" | "limit_data"
        | "slow_close" => "heal",
        _ => return None,
    })
}

fn is_closing_verb(verb: &str) -> bool {
    matches!(verb, "resume" | "start-mover" | "start" | "heal")
}

impl<'a> Model<'a> {
    pub fn build(
        meta: &'a RunMeta,
        history: &'a [Op],
        audit: Option<&'a Audit>,
        verdict: &'a Verdict,
    ) -> Model<'a> {
        let clock = meta.clock;
        let times: Vec<i64> = history
            .iter()
            .map(|op| clock.scenario_ms_at_run_ns(op.time_ns))
            .collect();
        let (mut t0, mut t1) = (
            clock.start_scenario_ms,
            meta.end_scenario_ms.max(clock.start_scenario_ms),
        );
        if let (Some(lo), Some(hi)) = (times.iter().min(), times.iter().max()) {
            t0 = t0.min(*lo);
            t1 = t1.max(*hi);
        }
        if t1 <= t0 {
            t1 = t0 + 1000;
        }

        let mut boxes: HashMap<&'a str, BoxLane<'a>> = HashMap::new();
        let mut others: HashMap<&'a str, EventLane<'a>> = HashMap::new();
        // (time, history index of the op that acted, verb, target, failed)
        let mut nemesis: Vec<(i64, usize, &'a str, &'a str, bool)> = Vec::new();
        // A belief in progress per box: (start, token).
        let mut believing: HashMap<&'a str, (i64, Option<i64>)> = HashMap::new();

        for_each_pair(history, |pair| {
            let head_i = pair
                .invoke
                .or(pair.completion)
                .expect("a pair has an event");
            let head = &history[head_i];
            let process = head.process.as_str();
            let start = times[head_i];
            let (end, done) = match pair.completion {
                Some(c) => (times[c], Some(&history[c])),
                None => (start, None),
            };
            let kind = done.map(|d| d.kind);
            let args = &head.value;
            let result = done.map(|d| &d.value).unwrap_or(&serde_json::Value::Null);
            let reason = str_field(result, "reason");

            if process == "nemesis" {
                let target = str_field(args, "target")
                    .or_else(|| str_field(result, "target"))
                    .unwrap_or("");
                // The invoke carries the fault's arguments, the completion says when it landed.
                nemesis.push((
                    end,
                    head_i,
                    head.f.as_str(),
                    target,
                    kind == Some(OpType::Fail),
                ));
                return;
            }
            if !process.starts_with("box-") {
                let lane = others.entry(process).or_insert_with(|| EventLane {
                    name: process,
                    ..Default::default()
                });
                let point = Point {
                    t: end,
                    src: pair.completion.unwrap_or(head_i),
                    other: pair.completion.and(pair.invoke),
                };
                match kind {
                    Some(OpType::Ok) => lane.ok.push(point),
                    Some(OpType::Fail) => lane.fail.push(point),
                    // An invoke that never completed is as unknown as an info.
                    _ => lane.info.push(point),
                }
                return;
            }

            let lane = boxes.entry(process).or_insert_with(|| BoxLane {
                name: process,
                ..Default::default()
            });
            lane.events += 1 + u64::from(pair.invoke.is_some() && pair.completion.is_some());
            lane.last_t = lane.last_t.max(end).max(start);
            let at = Point {
                t: end,
                src: pair.completion.unwrap_or(head_i),
                other: pair.completion.and(pair.invoke),
            };
            let f = head.f.as_str();

            // A run of skips ends at the box's next operation of any other kind.
            if f == "skip" {
                match lane.skips.last_mut() {
                    Some(run) if lane.skip_open => {
                        run.end = run.end.max(end);
                        run.n += 1;
                        run.last = head_i;
                    }
                    _ => lane.skips.push(SkipRun {
                        start,
                        end,
                        n: 1,
                        first: head_i,
                        last: head_i,
                    }),
                }
                lane.skip_open = true;
                return;
            }
            lane.skip_open = false;

            if reason == Some("fenced") && kind == Some(OpType::Fail) {
                lane.refused.push(at);
            }
            match f {
                "copy" => {
                    let outcome = match kind {
                        Some(OpType::Ok) => Outcome::Ok,
                        Some(OpType::Fail) if reason == Some("fenced") => Outcome::Refused,
                        Some(OpType::Fail) => Outcome::Fail,
                        Some(_) => Outcome::Info,
                        None => Outcome::Open,
                    };
                    lane.copies.push(Span {
                        start,
                        end,
                        invoke: pair.invoke,
                        completion: pair.completion,
                        outcome,
                    });
                    if outcome == Outcome::Fail {
                        lane.failed.push(at);
                    }
                }
                "delete" => match kind {
                    Some(OpType::Fail) if reason == Some("fenced") => {}
                    Some(OpType::Fail) => lane.failed.push(at),
                    _ => {
                        let why = str_field(args, "why").or_else(|| str_field(result, "why"));
                        if why == Some("tidy-up") {
                            lane.tidy_deletes.push(at);
                        } else {
                            lane.source_deletes.push(at);
                        }
                    }
                },
                "acquire" => match kind {
                    Some(OpType::Ok) => {
                        let token = int_field(result, "token").or_else(|| int_field(args, "token"));
                        if let Some((began, old)) = believing.insert(process, (end, token)) {
                            lane.beliefs.push(Belief {
                                start: began,
                                end,
                                token: old,
                                ended_by: "a new acquire",
                            });
                        }
                        lane.acquired.push(at);
                    }
                    _ => lane.polls.push(at),
                },
                "renew" => match kind {
                    Some(OpType::Ok) => lane.renew_ok.push(at),
                    _ => {
                        lane.renew_fail.push(at);
                        if reason == Some("lost") {
                            end_belief(&mut believing, lane, end, "renewal answered: lost");
                        }
                    }
                },
                "lost" => end_belief(&mut believing, lane, end, "learned it had lost"),
                "release" if kind.is_some() => end_belief(&mut believing, lane, end, "released"),
                "done" if kind.is_some() => end_belief(&mut believing, lane, end, "done"),
                _ => {
                    if kind == Some(OpType::Fail) && reason != Some("fenced") {
                        lane.failed.push(at);
                    }
                }
            }
        });

        let mut boxes: Vec<BoxLane<'a>> = boxes.into_values().collect();
        boxes.sort_by(|a, b| box_order(a.name).cmp(&box_order(b.name)));
        for lane in &mut boxes {
            if let Some((start, token)) = believing.remove(lane.name) {
                lane.beliefs.push(Belief {
                    start,
                    end: lane.last_t.max(start),
                    token,
                    ended_by: "its last event",
                });
            }
            // Copies still open run until the box's last sign of life.
            for span in lane
                .copies
                .iter_mut()
                .filter(|s| s.outcome == Outcome::Open)
            {
                span.end = lane.last_t.max(span.start);
            }
            for points in [
                &mut lane.source_deletes,
                &mut lane.tidy_deletes,
                &mut lane.refused,
                &mut lane.failed,
                &mut lane.renew_ok,
                &mut lane.renew_fail,
                &mut lane.polls,
                &mut lane.acquired,
            ] {
                points.sort_by_key(|p| p.t);
            }
            lane.copies.sort_by_key(|s| s.start);
        }
        let mut others: Vec<EventLane<'a>> = others.into_values().collect();
        others.sort_by_key(|l| l.name);
        for lane in &mut others {
            for points in [&mut lane.ok, &mut lane.fail, &mut lane.info] {
                points.sort_by_key(|p| p.t);
            }
        }

        let faults = fault_lanes(nemesis, t1);
        let claim = audit.map(|a| claim_lane(a, meta, t0, t1));
        if let Some(claim) = &claim {
            for lane in &mut boxes {
                lane.stale = stale_beliefs(lane, claim);
            }
        }
        let shards = audit.map(|a| shard_lanes(a, meta)).unwrap_or_default();

        let mut model = Model {
            history,
            audit,
            verdict,
            meta,
            times,
            t0,
            t1,
            boxes,
            faults,
            claim,
            others,
            shards,
            lost: Vec::new(),
            lost_turbines: BTreeSet::new(),
            anomalies: Vec::new(),
        };
        model.mark_anomalies();
        model
    }

    /// Scenario ms of a wall-clock instant from the audit.
    pub fn at_unix(&self, unix_ns: i64) -> i64 {
        self.meta.clock.scenario_ms_at_unix_ns(unix_ns)
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
                        let t = self.last_delete_of(&turbine);
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

    fn last_delete_of(&self, turbine: &str) -> Option<i64> {
        self.boxes
            .iter()
            .flat_map(|lane| lane.source_deletes.iter().chain(&lane.tidy_deletes))
            .filter(|p| self.turbine_of(p) == Some(turbine))
            .map(|p| p.t)
            .max()
    }

    /// The turbine a box operation names, in its completion or its invoke.
    pub fn turbine_of(&self, point: &Point) -> Option<&'a str> {
        let history: &'a [Op] = self.history;
        str_field(&history[point.src].value, "turbine")
            .or_else(|| str_field(&history[point.other?].value, "turbine"))
    }
}

fn end_belief(
    believing: &mut HashMap<&str, (i64, Option<i64>)>,
    lane: &mut BoxLane,
    at: i64,
    why: &'static str,
) {
    if let Some((start, token)) = believing.remove(lane.name) {
        lane.beliefs.push(Belief {
            start,
            end: at,
            token,
            ended_by: why,
        });
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

fn fault_lanes(mut actions: Vec<(i64, usize, &str, &str, bool)>, t1: i64) -> Vec<FaultLane> {
    actions.sort_by_key(|a| (a.0, a.1));
    let mut lanes: Vec<FaultLane> = Vec::new();
    let mut lane_of: HashMap<&str, usize> = HashMap::new();
    // Open windows: (lane, index in its windows, closing verb).
    let mut open: Vec<(usize, usize, &'static str)> = Vec::new();
    for (t, op, verb, target, failed) in actions {
        let lane_i = *lane_of.entry(target).or_insert_with(|| {
            lanes.push(FaultLane {
                target: target.to_string(),
                ..Default::default()
            });
            lanes.len() - 1
        });
        if failed {
            lanes[lane_i].instants.push(Point {
                t,
                src: op,
                other: None,
            });
            continue;
        }
        if let Some(closer) = closing_verb(verb) {
            // A second latency on a target already slowed is a change, not a new window.
            let already = open
                .iter()
                .any(|&(l, w, _)| l == lane_i && lanes[l].windows[w].verb == verb);
            if !already {
                let lane = &mut lanes[lane_i];
                lane.windows.push(FaultWindow {
                    start: t,
                    end: t1,
                    verb: verb.to_string(),
                    open: true,
                    begin_op: op,
                    end_op: None,
                });
                open.push((lane_i, lane.windows.len() - 1, closer));
            }
        } else if is_closing_verb(verb) {
            let before = open.len();
            open.retain(|&(l, w, closer)| {
                // A heal with no target heals every link.
                let hit = closer == verb && (l == lane_i || (target.is_empty() && verb == "heal"));
                if hit {
                    let window = &mut lanes[l].windows[w];
                    window.end = t;
                    window.open = false;
                    window.end_op = Some(op);
                }
                !hit
            });
            if open.len() == before {
                // Healing nothing we saw start is still worth a mark.
                lanes[lane_i].instants.push(Point {
                    t,
                    src: op,
                    other: None,
                });
            }
        } else {
            lanes[lane_i].instants.push(Point {
                t,
                src: op,
                other: None,
            });
        }
    }
    lanes
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
        let start = clock.scenario_ms_at_unix_ns(change.commit_unix_ns);
        let next = changes
            .get(i + 1)
            .map(|c| clock.scenario_ms_at_unix_ns(c.commit_unix_ns));
        let Some(holder) = &change.holder else {
            continue;
        };
        let expires = clock.scenario_ms_at_unix_ns(change.expires_unix_ns);
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
    for belief in &lane.beliefs {
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

fn shard_lanes<'a>(audit: &'a Audit, meta: &'a RunMeta) -> Vec<ShardLane<'a>> {
    let mut lanes: Vec<ShardLane<'a>> = meta
        .shards
        .iter()
        .map(|s| ShardLane {
            name: s,
            ..Default::default()
        })
        .collect();
    for (i, write) in audit.shard_writes.iter().enumerate() {
        let lane_i = match lanes.iter().position(|l| l.name == write.shard) {
            Some(i) => i,
            None => {
                lanes.push(ShardLane {
                    name: &write.shard,
                    ..Default::default()
                });
                lanes.len() - 1
            }
        };
        let lane = &mut lanes[lane_i];
        let point = Point {
            t: meta.clock.scenario_ms_at_unix_ns(write.commit_unix_ns),
            src: i,
            other: None,
        };
        match write.op {
            WriteOp::Insert if write.app == "ingest" => lane.ingest_writes += 1,
            WriteOp::Insert => lane.mover_inserts.push(point),
            WriteOp::Delete => lane.deletes.push(point),
            WriteOp::Fence => lane.fences.push(point),
        }
    }
    for lane in &mut lanes {
        for points in [&mut lane.mover_inserts, &mut lane.deletes, &mut lane.fences] {
            points.sort_by_key(|p| p.t);
        }
    }
    lanes
}
