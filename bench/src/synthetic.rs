//! The synthetic run `chaos bench` checks: April's night over 300 turbines with a year each, its history generated as it is folded.

use chaos_history::{
    Audit, ClaimChange, FinalState, Op, OpType, PlanEntry, Run, RunMeta, ScenarioClock,
    SeededTurbine, ShardTurbineRuns, ShardWrite, WriteOp,
};
use serde_json::json;
use std::collections::BTreeMap;

pub(super) const TURBINES: usize = 300;
const SHARDS: usize = 3;
const STEP_MS: i64 = 2_000;
const YEAR_MS: i64 = 365 * 86_400_000;
/// Real ns per scenario second: the default scale, 1 s = 10 ms.
const SCALE_NS: i64 = 10_000_000;

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
    pub(super) ticks: u64,
    /// Per shard, the ingest batch every tick writes (its `ts_ms` is rewritten per tick).
    pub(super) batches: Vec<Op>,
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

/// A script of box and nemesis events at scenario times.
#[derive(Default)]
struct Script {
    events: Vec<(i64, Op)>,
}

impl Script {
    fn push(&mut self, t: i64, b: &str, kind: OpType, f: &str, v: serde_json::Value) {
        self.events.push((t, event(b, kind, f, v)))
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
    let mut out = Script::default();
    out.push(
        start_ms,
        "box-2",
        OpType::Invoke,
        "acquire",
        json!({"job": "move"}),
    );
    out.push(
        start_ms + 40,
        "box-2",
        OpType::Ok,
        "acquire",
        json!({"token": 17}),
    );
    plan_events(&mut out, plan, start_ms, handover, takeover_ms, rows);
    handover_events(
        &mut out,
        plan,
        start_ms,
        handover,
        expiry_ms,
        takeover_ms,
        tidy_ms,
        rows,
    );
    let mut out = out.events;
    out.sort_by_key(|(t, _)| *t);
    out
}

/// Every planned turbine's copy, source delete and renewal, by box 2 under
/// token 17 before the handover and by box 3 under token 18 after it.
fn plan_events(
    out: &mut Script,
    plan: &[PlanEntry],
    start_ms: i64,
    handover: usize,
    takeover_ms: i64,
    rows: i64,
) {
    for (k, p) in plan.iter().enumerate() {
        let (b, token, t) = if k < handover {
            ("box-2", 17, start_ms + k as i64 * COPY_MS)
        } else {
            ("box-3", 18, takeover_ms + (k - handover) as i64 * COPY_MS)
        };
        out.push(
            t + 100,
            b,
            OpType::Invoke,
            "copy",
            json!({"turbine": p.turbine, "from": p.from, "to": p.to, "token": token}),
        );
        out.push(
            t + 20_000,
            b,
            OpType::Ok,
            "copy",
            json!({"turbine": p.turbine, "rows_read": rows, "rows_written": rows}),
        );
        out.push(
            t + 20_010,
            b,
            OpType::Invoke,
            "delete",
            json!({"turbine": p.turbine, "shard": p.from, "token": token, "why": "source"}),
        );
        out.push(
            t + 24_000,
            b,
            OpType::Ok,
            "delete",
            json!({"turbine": p.turbine, "rows": rows}),
        );
        out.push(
            t + 24_900,
            b,
            OpType::Invoke,
            "renew",
            json!({"token": token}),
        );
        out.push(t + COPY_MS, b, OpType::Ok, "renew", json!({"token": token}));
        if k + 1 == plan.len() {
            out.push(t + COPY_MS + 100, b, OpType::Ok, "done", json!({}));
        }
    }
}

/// The handover: box 2 starts on the victim, the routing db stops, box 2's
/// renewal fails and it carries on, box 3 takes the claim, box 2 learns it
/// lost and tidies the victim up from the destination.
#[allow(clippy::too_many_arguments)]
fn handover_events(
    out: &mut Script,
    plan: &[PlanEntry],
    start_ms: i64,
    handover: usize,
    expiry_ms: i64,
    takeover_ms: i64,
    tidy_ms: i64,
    rows: i64,
) {
    // Box 2 starts on the victim; its next renewal reaches nobody: the routing db is stopped.
    let victim = &plan[handover];
    let lapse = start_ms + handover as i64 * COPY_MS;
    out.push(
        lapse + 100,
        "box-2",
        OpType::Invoke,
        "copy",
        json!({"turbine": victim.turbine, "from": victim.from, "to": victim.to, "token": 17}),
    );
    out.push(
        lapse + 5_000,
        "nemesis",
        OpType::Invoke,
        "stop",
        json!({"target": "routing"}),
    );
    out.push(
        lapse + 5_010,
        "nemesis",
        OpType::Ok,
        "stop",
        json!({"target": "routing"}),
    );
    out.push(
        lapse + 24_900,
        "box-2",
        OpType::Invoke,
        "renew",
        json!({"token": 17}),
    );
    out.push(
        expiry_ms,
        "box-2",
        OpType::Fail,
        "renew",
        json!({"token": 17, "reason": "unreachable"}),
    );
    out.push(
        expiry_ms + 10,
        "box-2",
        OpType::Info,
        "renew",
        json!({"token": 17, "reason": "carry-on"}),
    );
    out.push(
        takeover_ms - 4_000,
        "nemesis",
        OpType::Invoke,
        "start",
        json!({"target": "routing"}),
    );
    out.push(
        takeover_ms - 3_000,
        "nemesis",
        OpType::Ok,
        "start",
        json!({"target": "routing"}),
    );
    out.push(
        takeover_ms - 60,
        "box-3",
        OpType::Invoke,
        "acquire",
        json!({"job": "move"}),
    );
    out.push(
        takeover_ms,
        "box-3",
        OpType::Ok,
        "acquire",
        json!({"token": 18}),
    );
    out.push(
        tidy_ms - 3_000,
        "box-2",
        OpType::Ok,
        "copy",
        json!({"turbine": victim.turbine, "rows_read": rows, "rows_written": rows}),
    );
    out.push(
        tidy_ms - 2_900,
        "box-2",
        OpType::Invoke,
        "renew",
        json!({"token": 17}),
    );
    out.push(
        tidy_ms - 2_000,
        "box-2",
        OpType::Fail,
        "renew",
        json!({"token": 17, "reason": "lost", "holder": "box-3"}),
    );
    out.push(
        tidy_ms - 1_000,
        "box-2",
        OpType::Invoke,
        "delete",
        json!({"turbine": victim.turbine, "shard": victim.to, "token": 17, "why": "tidy-up"}),
    );
    out.push(
        tidy_ms,
        "box-2",
        OpType::Ok,
        "delete",
        json!({"turbine": victim.turbine, "rows": rows}),
    );
}

pub(super) fn synthesize(events: u64) -> Synthetic {
    let start_scenario_ms = 78_000_000;
    let clock = ScenarioClock {
        start_unix_ns: 1_776_116_400_000_000_000,
        start_scenario_ms,
        real_ns_per_scenario_s: SCALE_NS,
        scenario_day_unix_ms: 1_776_038_400_000,
        wall_check_run_ns: 0,
        wall_check_unix_ns: 0,
    };
    // Six ingest events (invoke + ok, per shard) per 2 s tick, and about 1.6
    // of the boxes' and the nemesis's (polls, the plan, faults).
    let ticks = ((events as f64 / 7.6).round() as u64).max(1);
    let start_ts = clock.reading_ts_ms(start_scenario_ms);
    let last_ts = start_ts + (ticks as i64 - 1) * STEP_MS;
    let end_scenario_ms = start_scenario_ms + ticks as i64 * STEP_MS;
    let seeded_run = Run {
        first_ms: start_ts - YEAR_MS,
        last_ms: start_ts - STEP_MS,
        step_ms: STEP_MS,
        copies: 1,
    };
    let Layout {
        names,
        owners,
        plan,
        seeded,
    } = layout(seeded_run);
    let lease_ms = 60_000;
    let movers = movers_audit(&clock, &plan, seeded_run, lease_ms);
    let final_shards = final_runs(&clock, &names, &owners, &movers, seeded_run, last_ts);
    let batches = ingest_batches(&names, &owners, start_ts);

    let takeover_ms = movers.expiry_ms + 34_000;
    let last_step_ms = takeover_ms + (plan.len() - movers.handover - 1) as i64 * COPY_MS;
    let scripted = script(
        &plan,
        start_scenario_ms,
        movers.handover,
        movers.expiry_ms,
        takeover_ms,
        movers.tidy_ms,
        seeded_run.len() as i64,
    );
    let meta = RunMeta {
        system: Default::default(),
        payout: None,
        objects: None,
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
        expect_reach: Vec::new(),
    };
    Synthetic {
        meta,
        audit: Audit {
            object_writes: Vec::new(),
            shard_writes: movers.shard_writes,
            claim_changes: movers.claim_changes,
            complete: true,
            missing: Vec::new(),
        },
        final_state: FinalState {
            payments: Vec::new(),
            config: None,
            shards: final_shards,
            complete: true,
            missing: Vec::new(),
        },
        ticks,
        batches,
        scripted,
        takeover_ms,
        tidy_ms: movers.tidy_ms,
        done_ms: last_step_ms + COPY_MS + 100,
    }
}

/// Every turbine's name, its owner, the plan and the seeded years.
struct Layout {
    names: Vec<String>,
    owners: BTreeMap<String, String>,
    plan: Vec<PlanEntry>,
    seeded: Vec<SeededTurbine>,
}

/// April's routing change (`% 2` -> `% 3`): every turbine's name, its owner
/// under the new divisor, the plan of those that move and their seeded year.
fn layout(seeded_run: Run) -> Layout {
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
    Layout {
        names,
        owners,
        plan,
        seeded,
    }
}

/// The movers' side of the audit and the handover's instants.
struct Movers {
    claim_changes: Vec<ClaimChange>,
    shard_writes: Vec<ShardWrite>,
    /// Plan position of the victim, the first turbine box 3 moves.
    handover: usize,
    /// When box 2's lease lapses and when it tidies the victim up.
    expiry_ms: i64,
    tidy_ms: i64,
    victim: String,
}

/// The movers: one turbine every 25 s; box 2's lease (60 s) lapses after
/// two thirds of the plan, box 3 takes over 34 s later.
fn movers_audit(
    clock: &ScenarioClock,
    plan: &[PlanEntry],
    seeded_run: Run,
    lease_ms: i64,
) -> Movers {
    let start_scenario_ms = clock.start_scenario_ms;
    let at_ns = |scenario_ms: i64| clock.unix_ns_at_scenario_ms(scenario_ms);
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
                not_before_unix_ns: None,
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
    Movers {
        claim_changes,
        shard_writes,
        handover,
        expiry_ms,
        tidy_ms,
        victim,
    }
}

/// What every owner holds at the end: the seeded year and the night's
/// ingest, except the victim, whose history begins after the tidy-up.
fn final_runs(
    clock: &ScenarioClock,
    names: &[String],
    owners: &BTreeMap<String, String>,
    movers: &Movers,
    seeded_run: Run,
    last_ts: i64,
) -> Vec<ShardTurbineRuns> {
    let start_ts = clock.reading_ts_ms(clock.start_scenario_ms);
    let mut final_shards = Vec::new();
    for name in names {
        let owner = owners[name].clone();
        let runs = if *name == movers.victim {
            let first = clock.reading_ts_ms(movers.tidy_ms + 1_000).max(start_ts);
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
    final_shards
}

/// Per shard, the ingest batch every tick writes: every turbine it owns.
fn ingest_batches(names: &[String], owners: &BTreeMap<String, String>, start_ts: i64) -> Vec<Op> {
    (0..SHARDS)
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
        .collect()
}
