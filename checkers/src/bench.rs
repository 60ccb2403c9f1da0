//! The checker's own figures for `chaos bench`: a synthetic run of N events over 300 turbines with a year each, checked and timed.
//!
//! This is the one module that reads a clock and `/proc`: it measures the
//! checker, it is not one.

use crate::{HistoryFold, Validity};
use chaos_history::{
    Audit, ClaimChange, FinalState, Op, OpType, PlanEntry, Run, RunMeta, ScenarioClock,
    SeededTurbine, ShardTurbineRuns, ShardWrite, WriteOp,
};
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

const TURBINES: usize = 300;
const SHARDS: usize = 3;
const STEP_MS: i64 = 2_000;
const YEAR_MS: i64 = 365 * 86_400_000;
/// Real ns per scenario second: the default scale, 1 s = 10 ms.
const SCALE_NS: i64 = 10_000_000;
/// Lines decoded to estimate the `chaos check DIR` path (JSON per line).
const DECODE_SAMPLE: usize = 200_000;

/// What one synthetic check measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchFigures {
    pub events: u64,
    pub turbines: u64,
    /// Readings the seeded years and the ingest stand for (held as runs).
    pub readings: u64,
    /// Wall time to fold every event and finish the verdict.
    pub check_s: f64,
    pub events_per_s: f64,
    /// Decoding history lines into `Op` (`HistoryReader`), events per second.
    pub json_decode_events_per_s: f64,
    /// Folding history lines straight from text (`HistoryFold::observe_line`), events per second.
    pub line_fold_events_per_s: f64,
    /// The process's peak resident memory (`VmHWM`), MiB; `None` off Linux.
    pub peak_rss_mib: Option<f64>,
    /// The synthetic run plants one lost turbine: this must say invalid.
    pub valid: Validity,
    pub anomalies: usize,
}

impl fmt::Display for BenchFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checker bench: {} events, {} turbines, {:.2} G readings as runs",
            self.events,
            self.turbines,
            self.readings as f64 / 1e9
        )?;
        writeln!(
            f,
            "  check:       {:.2} s wall, {:.2} M events/s",
            self.check_s,
            self.events_per_s / 1e6
        )?;
        writeln!(
            f,
            "  from text:   Op decode {:.2} M lines/s (~{:.0} s for these events); observe_line {:.2} M lines/s (~{:.1} s)",
            self.json_decode_events_per_s / 1e6,
            self.events as f64 / self.json_decode_events_per_s,
            self.line_fold_events_per_s / 1e6,
            self.events as f64 / self.line_fold_events_per_s,
        )?;
        match self.peak_rss_mib {
            Some(m) => writeln!(f, "  peak memory: {m:.1} MiB (VmHWM)")?,
            None => writeln!(f, "  peak memory: unknown (no /proc/self/status)")?,
        }
        write!(
            f,
            "  verdict:     {:?} with {} anomalies (one lost turbine planted)",
            self.valid, self.anomalies
        )
    }
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn shard(i: usize) -> String {
    format!("shard{}", i + 1)
}

/// The synthetic run: April's routing change (`% 2` -> `% 3`) over 300
/// turbines, each seeded with a year of 2 s readings; box 2 moves the
/// planned turbines under token 17 until its lease lapses, box 3 takes
/// over with token 18, and box 2's late tidy-up deletes one turbine.
///
/// Its history is shaped like April's: every 2 s an ingest batch of 100
/// turbines per shard (invoke and ok); while the plan runs, the holder's
/// copies, source deletes and renewals (a turbine every 25 s); the routing
/// db stopped across the handover, box 2 carrying on and tidying up; the
/// boxes that do not hold the claim polling for it every 10 s, all run long
/// (after the plan, every box); and a pause and a link latency every 30
/// minutes. Ingest lines are about 80 % of the events and most of the bytes.
///
/// `chaos bench --what check` writes it out as a run directory.
pub struct Synthetic {
    pub meta: RunMeta,
    pub audit: Audit,
    pub final_state: FinalState,
    ticks: u64,
    /// Per shard, the ingest batch every tick writes (its `ts_ms` is rewritten per tick).
    batches: Vec<Op>,
    /// The plan's box and nemesis events, in time order (scenario ms).
    scripted: Vec<(i64, Op)>,
    /// When box 3 takes the claim, when box 2 tidies up and starts polling,
    /// and when box 3 finds the plan done (and polls too).
    takeover_ms: i64,
    tidy_ms: i64,
    done_ms: i64,
}

/// Scenario ms between two polls of a box that does not hold the claim.
const POLL_MS: i64 = 10_000;
/// A mover's renewal and copy period.
const COPY_MS: i64 = 25_000;
/// A periodic fault every this often.
const FAULT_EVERY_MS: i64 = 30 * 60_000;

/// One event of a box or the nemesis.
fn event(process: &str, kind: OpType, f: &str, value: serde_json::Value) -> Op {
    Op {
        index: 0,
        time_ns: 0,
        scenario_time: String::new(),
        process: process.into(),
        kind,
        f: f.into(),
        value,
    }
}

impl Synthetic {
    /// The run, its history about `events` events long.
    pub fn new(events: u64) -> Synthetic {
        synthesize(events)
    }

    /// Every history event in order (per tick and shard an ingest invoke and
    /// its ok, then the boxes' and the nemesis's events of that tick), built
    /// one at a time, never all held; returns the count.
    pub fn for_each_op(&mut self, mut each: impl FnMut(&mut Op)) -> u64 {
        let clock = self.meta.clock;
        let start_ms = clock.start_scenario_ms;
        let start_ts = clock.reading_ts_ms(start_ms);
        let mut index = 0u64;
        let mut scripted = 0;
        let mut tick_events: Vec<(i64, Op)> = Vec::new();
        for tick in 0..self.ticks {
            let t0 = start_ms + tick as i64 * STEP_MS;
            let ts_ms = start_ts + tick as i64 * STEP_MS;
            let time_ns = tick as i64 * STEP_MS / 1000 * SCALE_NS;
            for op in self.batches.iter_mut() {
                op.value["ts_ms"] = json!(ts_ms);
                op.time_ns = time_ns;
                for kind in [OpType::Invoke, OpType::Ok] {
                    op.kind = kind;
                    op.index = index;
                    index += 1;
                    each(op);
                }
            }
            let t1 = t0 + STEP_MS;
            while scripted < self.scripted.len() && self.scripted[scripted].0 < t1 {
                let (t, op) = &self.scripted[scripted];
                tick_events.push((*t, op.clone()));
                scripted += 1;
            }
            self.periodic(t0, t1, &mut tick_events);
            // Events due later (a fault's heal) wait for their tick.
            tick_events.sort_by_key(|(t, _)| *t);
            let due = tick_events.partition_point(|(t, _)| *t < t1);
            for (t, mut op) in tick_events.drain(..due) {
                op.time_ns = clock.real_ns_for_scenario_ms(t - start_ms);
                op.index = index;
                index += 1;
                each(&mut op);
            }
        }
        index
    }

    /// The events that repeat all run long, starting in `[t0, t1)`: polls by
    /// the boxes that do not hold the claim, a pause and a latency every 30
    /// minutes.
    fn periodic(&self, t0: i64, t1: i64, out: &mut Vec<(i64, Op)>) {
        let start = self.meta.clock.start_scenario_ms;
        // The first time at or after t0 of `phase + k * period`.
        let next = |phase: i64, period: i64| {
            let k = (t0 - phase).max(0).div_euclid(period)
                + i64::from((t0 - phase).max(0) % period != 0);
            phase + k * period
        };
        for (i, b) in ["box-1", "box-2", "box-3", "box-4"].into_iter().enumerate() {
            let t = next(start + 700 + i as i64 * 1_300, POLL_MS);
            let polling = match b {
                "box-2" => t > self.tidy_ms,
                "box-3" => t + 50 < self.takeover_ms || t > self.done_ms,
                _ => true,
            };
            if polling && t < t1 {
                let why = if t > self.done_ms { "job done" } else { "held" };
                out.push((
                    t,
                    event(b, OpType::Invoke, "acquire", json!({"job": "move"})),
                ));
                out.push((
                    t + 50,
                    event(b, OpType::Fail, "acquire", json!({"reason": why})),
                ));
            }
        }
        let t = next(start + FAULT_EVERY_MS, FAULT_EVERY_MS);
        if t < t1 {
            for (dt, kind, f) in [
                (0, OpType::Invoke, "pause"),
                (5, OpType::Ok, "pause"),
                (20_000, OpType::Invoke, "resume"),
                (20_005, OpType::Ok, "resume"),
            ] {
                out.push((
                    t + dt,
                    event(
                        "nemesis",
                        kind,
                        f,
                        json!({"target": "box-1", "scheduled_ms": t, "lag_real_us": 310}),
                    ),
                ));
            }
        }
        let t = next(start + FAULT_EVERY_MS / 2, FAULT_EVERY_MS);
        if t < t1 {
            out.push((
                t,
                event(
                    "nemesis",
                    OpType::Invoke,
                    "latency",
                    json!({"target": "box-4->shard2", "latency_ms": 800}),
                ),
            ));
            out.push((
                t + 5,
                event(
                    "nemesis",
                    OpType::Ok,
                    "latency",
                    json!({"target": "box-4->shard2"}),
                ),
            ));
            out.push((
                t + 60_000,
                event(
                    "nemesis",
                    OpType::Invoke,
                    "heal",
                    json!({"target": "box-4->shard2"}),
                ),
            ));
            out.push((
                t + 60_005,
                event(
                    "nemesis",
                    OpType::Ok,
                    "heal",
                    json!({"target": "box-4->shard2"}),
                ),
            ));
        }
    }
}

/// The plan's events as April had them: the holder copies a turbine, deletes
/// it from its source and renews, every 25 s; the routing db stops, box 2's
/// lease lapses while it copies the victim, box 3 takes the claim 34 s after
/// the expiry and moves on; box 2 finishes, learns it lost and tidies up.
#[allow(clippy::too_many_arguments)]
fn script(
    plan: &[PlanEntry],
    start_ms: i64,
    handover: usize,
    expiry_ms: i64,
    takeover_ms: i64,
    tidy_ms: i64,
    rows: i64,
) -> Vec<(i64, Op)> {
    let mut out = Vec::new();
    let mut push = |t: i64, b: &str, kind: OpType, f: &str, v: serde_json::Value| {
        out.push((t, event(b, kind, f, v)))
    };
    push(
        start_ms,
        "box-2",
        OpType::Invoke,
        "acquire",
        json!({"job": "move"}),
    );
    push(
        start_ms + 40,
        "box-2",
        OpType::Ok,
        "acquire",
        json!({"token": 17}),
    );
    for (k, p) in plan.iter().enumerate() {
        let (b, token, t) = if k < handover {
            ("box-2", 17, start_ms + k as i64 * COPY_MS)
        } else {
            ("box-3", 18, takeover_ms + (k - handover) as i64 * COPY_MS)
        };
        push(
            t + 100,
            b,
            OpType::Invoke,
            "copy",
            json!({"turbine": p.turbine, "from": p.from, "to": p.to, "token": token}),
        );
        push(
            t + 20_000,
            b,
            OpType::Ok,
            "copy",
            json!({"turbine": p.turbine, "rows_read": rows, "rows_written": rows}),
        );
        push(
            t + 20_010,
            b,
            OpType::Invoke,
            "delete",
            json!({"turbine": p.turbine, "shard": p.from, "token": token, "why": "source"}),
        );
        push(
            t + 24_000,
            b,
            OpType::Ok,
            "delete",
            json!({"turbine": p.turbine, "rows": rows}),
        );
        push(
            t + 24_900,
            b,
            OpType::Invoke,
            "renew",
            json!({"token": token}),
        );
        push(t + COPY_MS, b, OpType::Ok, "renew", json!({"token": token}));
        if k + 1 == plan.len() {
            push(t + COPY_MS + 100, b, OpType::Ok, "done", json!({}));
        }
    }
    // Box 2 starts on the victim; its next renewal reaches nobody: the routing db is stopped.
    let victim = &plan[handover];
    let lapse = start_ms + handover as i64 * COPY_MS;
    push(
        lapse + 100,
        "box-2",
        OpType::Invoke,
        "copy",
        json!({"turbine": victim.turbine, "from": victim.from, "to": victim.to, "token": 17}),
    );
    push(
        lapse + 5_000,
        "nemesis",
        OpType::Invoke,
        "stop",
        json!({"target": "routing"}),
    );
    push(
        lapse + 5_010,
        "nemesis",
        OpType::Ok,
        "stop",
        json!({"target": "routing"}),
    );
    push(
        lapse + 24_900,
        "box-2",
        OpType::Invoke,
        "renew",
        json!({"token": 17}),
    );
    push(
        expiry_ms,
        "box-2",
        OpType::Fail,
        "renew",
        json!({"token": 17, "reason": "unreachable"}),
    );
    push(
        expiry_ms + 10,
        "box-2",
        OpType::Info,
        "renew",
        json!({"token": 17, "reason": "carry-on"}),
    );
    push(
        takeover_ms - 4_000,
        "nemesis",
        OpType::Invoke,
        "start",
        json!({"target": "routing"}),
    );
    push(
        takeover_ms - 3_000,
        "nemesis",
        OpType::Ok,
        "start",
        json!({"target": "routing"}),
    );
    push(
        takeover_ms - 60,
        "box-3",
        OpType::Invoke,
        "acquire",
        json!({"job": "move"}),
    );
    push(
        takeover_ms,
        "box-3",
        OpType::Ok,
        "acquire",
        json!({"token": 18}),
    );
    push(
        tidy_ms - 3_000,
        "box-2",
        OpType::Ok,
        "copy",
        json!({"turbine": victim.turbine, "rows_read": rows, "rows_written": rows}),
    );
    push(
        tidy_ms - 2_900,
        "box-2",
        OpType::Invoke,
        "renew",
        json!({"token": 17}),
    );
    push(
        tidy_ms - 2_000,
        "box-2",
        OpType::Fail,
        "renew",
        json!({"token": 17, "reason": "lost", "holder": "box-3"}),
    );
    push(
        tidy_ms - 1_000,
        "box-2",
        OpType::Invoke,
        "delete",
        json!({"turbine": victim.turbine, "shard": victim.to, "token": 17, "why": "tidy-up"}),
    );
    push(
        tidy_ms,
        "box-2",
        OpType::Ok,
        "delete",
        json!({"turbine": victim.turbine, "rows": rows}),
    );
    out.sort_by_key(|(t, _)| *t);
    out
}

fn synthesize(events: u64) -> Synthetic {
    let start_scenario_ms = 78_000_000;
    let clock = ScenarioClock {
        start_unix_ns: 1_776_116_400_000_000_000,
        start_scenario_ms,
        real_ns_per_scenario_s: SCALE_NS,
        scenario_day_unix_ms: 1_776_038_400_000,
    };
    // Six ingest events (invoke + ok, per shard) per 2 s tick, and about 1.6
    // of the boxes' and the nemesis's (polls, the plan, faults).
    let ticks = ((events as f64 / 7.6).round() as u64).max(1);
    let start_ts = clock.reading_ts_ms(start_scenario_ms);
    let last_ts = start_ts + (ticks as i64 - 1) * STEP_MS;
    let end_scenario_ms = start_scenario_ms + ticks as i64 * STEP_MS;
    let at_ns = |scenario_ms: i64| clock.unix_ns_at_scenario_ms(scenario_ms);
    let seeded_run = Run {
        first_ms: start_ts - YEAR_MS,
        last_ms: start_ts - STEP_MS,
        step_ms: STEP_MS,
        copies: 1,
    };

    let names: Vec<String> = (0..TURBINES).map(|i| format!("AP-{:04}", i + 1)).collect();
    let mut owners = BTreeMap::new();
    let mut plan = Vec::new();
    let mut seeded = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (old, new) = (shard(i % 2), shard(i % SHARDS));
        owners.insert(name.clone(), new.clone());
        seeded.push(SeededTurbine {
            turbine: name.clone(),
            shard: old.clone(),
            run: seeded_run,
        });
        if old != new {
            plan.push(PlanEntry {
                position: plan.len() as i32 + 1,
                turbine: name.clone(),
                from: old,
                to: new,
            });
        }
    }

    // The movers: one turbine every 25 s; box 2's lease (60 s) lapses after
    // two thirds of the plan, box 3 takes over 34 s later.
    let lease_ms = 60_000;
    let mut claim_changes = Vec::new();
    let mut shard_writes = Vec::new();
    let mut xid = 1;
    let claim =
        |holder: &str, token: i64, at_ms: i64, expires_ms: i64, out: &mut Vec<ClaimChange>| {
            out.push(ClaimChange {
                job: "move".into(),
                holder: Some(holder.into()),
                token,
                expires_unix_ns: at_ns(expires_ms),
                commit_unix_ns: at_ns(at_ms),
                app: holder.into(),
                xid: 0,
            });
        };
    let handover = plan.len() * 2 / 3;
    let victim = plan[handover].turbine.clone();
    let mut t_ms = start_scenario_ms;
    claim("box-2", 17, t_ms, t_ms + lease_ms, &mut claim_changes);
    let expiry_ms = start_scenario_ms + handover as i64 * 25_000 + lease_ms;
    for (k, p) in plan.iter().enumerate() {
        let (holder, token) = if k < handover {
            ("box-2", 17)
        } else {
            ("box-3", 18)
        };
        if k == handover {
            t_ms = expiry_ms + 34_000;
            claim("box-3", 18, t_ms, t_ms + lease_ms, &mut claim_changes);
        }
        let mut write = |shard: &str, op: WriteOp, rows: i64, at_ms: i64| {
            xid += 1;
            shard_writes.push(ShardWrite {
                shard: shard.into(),
                xid,
                commit_unix_ns: at_ns(at_ms),
                app: holder.into(),
                op,
                turbine: Some(p.turbine.clone()),
                rows,
                min_ts_ms: Some(seeded_run.first_ms),
                max_ts_ms: Some(seeded_run.last_ms),
                token: None,
            });
        };
        write(
            &p.to,
            WriteOp::Insert,
            seeded_run.len() as i64,
            t_ms + 20_000,
        );
        write(
            &p.from,
            WriteOp::Delete,
            seeded_run.len() as i64,
            t_ms + 24_000,
        );
        t_ms += 25_000;
        claim(holder, token, t_ms, t_ms + lease_ms, &mut claim_changes);
    }
    // Box 2 carried on with the victim and tidied it up from the destination, after box 3 had moved it.
    let victim_entry = plan[handover].clone();
    let tidy_ms = expiry_ms + 34_000 + 26_000;
    xid += 1;
    shard_writes.push(ShardWrite {
        shard: victim_entry.to.clone(),
        xid,
        commit_unix_ns: at_ns(tidy_ms),
        app: "box-2".into(),
        op: WriteOp::Delete,
        turbine: Some(victim.clone()),
        rows: seeded_run.len() as i64,
        min_ts_ms: Some(seeded_run.first_ms),
        max_ts_ms: Some(clock.reading_ts_ms(tidy_ms)),
        token: None,
    });
    for (i, c) in claim_changes.iter_mut().enumerate() {
        c.xid = i as i64;
    }

    let mut final_shards = Vec::new();
    for name in &names {
        let owner = owners[name].clone();
        let runs = if *name == victim {
            let first = clock.reading_ts_ms(tidy_ms + 1_000).max(start_ts);
            let first = first + (STEP_MS - (first - start_ts) % STEP_MS) % STEP_MS;
            vec![Run {
                first_ms: first,
                last_ms: last_ts,
                step_ms: STEP_MS,
                copies: 1,
            }]
        } else {
            vec![Run {
                first_ms: seeded_run.first_ms,
                last_ms: last_ts,
                step_ms: STEP_MS,
                copies: 1,
            }]
        };
        final_shards.push(ShardTurbineRuns {
            shard: owner,
            turbine: name.clone(),
            runs,
            values: None,
        });
    }

    let batches = (0..SHARDS)
        .map(|s| {
            let mine: Vec<&String> = names.iter().filter(|n| owners[*n] == shard(s)).collect();
            Op {
                index: 0,
                time_ns: 0,
                scenario_time: String::new(),
                process: "ingest".into(),
                kind: OpType::Invoke,
                f: "ingest".into(),
                value: json!({ "shard": shard(s), "ts_ms": start_ts, "turbines": mine }),
            }
        })
        .collect();

    let takeover_ms = expiry_ms + 34_000;
    let last_step_ms = takeover_ms + (plan.len() - handover - 1) as i64 * COPY_MS;
    let scripted = script(
        &plan,
        start_scenario_ms,
        handover,
        expiry_ms,
        takeover_ms,
        tidy_ms,
        seeded_run.len() as i64,
    );
    let meta = RunMeta {
        scenario: "bench".into(),
        seed: 0,
        clock,
        job: "move".into(),
        shards: (0..SHARDS).map(shard).collect(),
        owners,
        plan,
        seeded,
        lease_ms,
        copy_ms: 25_000,
        strict_duplicates: false,
        mover: BTreeMap::new(),
        end_scenario_ms,
        completed: true,
        incomplete_reason: None,
    };
    Synthetic {
        meta,
        audit: Audit {
            shard_writes,
            claim_changes,
            complete: true,
            missing: Vec::new(),
        },
        final_state: FinalState {
            shards: final_shards,
            complete: true,
            missing: Vec::new(),
        },
        ticks,
        batches,
        scripted,
        takeover_ms,
        tidy_ms,
        done_ms: last_step_ms + COPY_MS + 100,
    }
}

/// Synthesize a run of about `events` history events (ingest batches every
/// 2 scenario seconds) over 300 turbines with a year of 2 s readings each,
/// check it through `HistoryFold`, and report wall time, events per second
/// and peak memory. The events are generated as they are folded, never held.
pub fn bench_synthetic(events: u64) -> BenchFigures {
    let mut syn = synthesize(events);

    // The `chaos check DIR` path decodes each line first: measure that on a sample.
    let mut sample_op = syn.batches[0].clone();
    sample_op.kind = OpType::Ok;
    let line = serde_json::to_string(&sample_op).expect("an op serializes");
    let started = Instant::now();
    let mut decoded = 0u64;
    let sample = DECODE_SAMPLE.min(events as usize).max(1);
    for _ in 0..sample {
        let op: Op = serde_json::from_str(&line).expect("an op decodes");
        decoded += op.index + 1;
    }
    let decode_s = started.elapsed().as_secs_f64();
    assert_eq!(decoded, sample as u64);
    let mut lines = HistoryFold::new(&syn.meta);
    let started = Instant::now();
    for _ in 0..sample {
        lines
            .observe_line(&line)
            .expect("an op folds from its line");
    }
    let line_s = started.elapsed().as_secs_f64();
    assert_eq!(lines.events, sample as u64);

    let started = Instant::now();
    let mut fold = HistoryFold::new(&syn.meta);
    let index = syn.for_each_op(|op| fold.observe(op));
    let verdict = fold.finish(&syn.meta, Some(&syn.audit), Some(&syn.final_state));
    let check_s = started.elapsed().as_secs_f64();

    let ingest_readings = syn.ticks * TURBINES as u64;
    let seeded_readings: u64 = syn.meta.seeded.iter().map(|s| s.run.len()).sum();
    BenchFigures {
        events: index,
        turbines: TURBINES as u64,
        readings: seeded_readings + ingest_readings,
        check_s,
        events_per_s: index as f64 / check_s,
        json_decode_events_per_s: sample as f64 / decode_s,
        line_fold_events_per_s: sample as f64 / line_s,
        peak_rss_mib: peak_rss_mib(),
        valid: verdict.valid,
        anomalies: verdict.anomalies.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_synthetic_run_finds_its_planted_lost_turbine() {
        let figures = bench_synthetic(60_000);
        assert_eq!(figures.valid, Validity::Invalid);
        assert!((59_000..61_000).contains(&figures.events));
        let syn = synthesize(60_000);
        let mut fold = HistoryFold::new(&syn.meta);
        fold.observe(&syn.batches[0]);
        let v = fold.finish(&syn.meta, Some(&syn.audit), Some(&syn.final_state));
        let stats: crate::Stats = serde_json::from_value(v.stats).unwrap();
        // April's shape: ingest most of it, the boxes and the nemesis the rest, in time order.
        let mut syn = synthesize(60_000);
        let (mut last_ns, mut by_process) = (0, std::collections::BTreeMap::<String, u64>::new());
        let n = syn.for_each_op(|op| {
            assert!(op.time_ns >= last_ns, "in time order");
            last_ns = op.time_ns;
            *by_process.entry(op.process.clone()).or_default() += 1;
        });
        assert!((59_000..61_000).contains(&n), "{n} events");
        assert!(by_process["ingest"] * 100 / n >= 75, "{by_process:?}");
        for p in ["box-1", "box-2", "box-3", "box-4", "nemesis"] {
            assert!(
                by_process.get(p).copied().unwrap_or(0) > 10,
                "{p}: {by_process:?}"
            );
        }
        assert_eq!(stats.lost_turbines.len(), 1);
        assert_eq!(stats.rows_lost, 15_768_000);
        assert_eq!(stats.vacancy_max_s, 34.0);
    }
}
