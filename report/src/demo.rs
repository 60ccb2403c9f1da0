//! A miniature of the April night, built in memory, to look at the report without running anything.
//!
//! Four boxes; box 2 holds from 21:40 with token 17 and renews every 25 s;
//! the routing db is stopped 22:24:20-22:25:40; the claim lapses at
//! 22:25:10; box 3 takes it at 22:25:44 with token 18 and walks 107 moved
//! turbines in 9 s; both copy AP-0161; box 3 deletes it from shard1 at
//! 22:26:19; box 2 finishes its slowed copy at 22:26:21, learns it lost and
//! tidies up on shard3. One turbine lost. (The seed calls the turbine
//! AP-0163; the brief for this crate names it AP-0161, which is used here.)

use crate::{HistoryDigest, ReportInput};
use chaos_checkers::{Anomaly, AnomalyClass, Severity, Validity, Verdict};
use chaos_history::{
    Audit, ClaimChange, Op, OpType, PlanEntry, RunMeta, ScenarioClock, ShardWrite, WriteOp,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Everything one report needs, owned.
#[derive(Debug, Clone)]
pub struct DemoRun {
    pub meta: RunMeta,
    pub history: Vec<Op>,
    /// The history's digest, as the report draws it.
    pub digest: HistoryDigest,
    pub audit: Audit,
    pub verdict: Verdict,
    pub extra: Value,
}

impl DemoRun {
    pub fn input(&self) -> ReportInput<'_> {
        ReportInput {
            meta: &self.meta,
            history: &self.digest,
            events: &self.history,
            audit: Some(&self.audit),
            verdict: &self.verdict,
            extra: Some(&self.extra),
        }
    }
}

/// Scenario ms since midnight.
fn hms(h: i64, m: i64, s: f64) -> i64 {
    h * 3_600_000 + m * 60_000 + (s * 1000.0).round() as i64
}

const ROWS_A_YEAR: i64 = 15_768_000;
const LEASE_MS: i64 = 60_000;

/// Turbine `k` (1-based) of the move plan; the 108th is AP-0161.
fn turbine(k: i64) -> String {
    format!("AP-{:04}", (3 * k + 1) / 2 - 1)
}

fn plan_entry(k: i64) -> (String, &'static str, &'static str) {
    if k == 108 {
        return (turbine(k), "shard1", "shard3");
    }
    let from = if k % 2 == 0 { "shard2" } else { "shard1" };
    let to = if k % 3 == 0 {
        if from == "shard1" {
            "shard2"
        } else {
            "shard1"
        }
    } else {
        "shard3"
    };
    (turbine(k), from, to)
}

struct Builder {
    clock: ScenarioClock,
    ops: Vec<Op>,
    audit: Audit,
}

impl Builder {
    fn op(&mut self, t_ms: i64, process: &str, kind: OpType, f: &str, value: Value) {
        self.ops.push(Op {
            index: 0,
            time_ns: self
                .clock
                .real_ns_for_scenario_ms(t_ms - self.clock.start_scenario_ms),
            scenario_time: ScenarioClock::format(t_ms),
            process: process.into(),
            kind,
            f: f.into(),
            value,
        });
    }

    /// An invoke at `t0` and its completion at `t1`.
    #[allow(clippy::too_many_arguments)]
    fn pair(
        &mut self,
        t0: i64,
        t1: i64,
        process: &str,
        f: &str,
        args: Value,
        kind: OpType,
        result: Value,
    ) {
        self.op(t0, process, OpType::Invoke, f, args);
        self.op(t1, process, kind, f, result);
    }

    fn claim(&mut self, t_ms: i64, holder: &str, token: i64) {
        let xid = 1000 + self.audit.claim_changes.len() as i64;
        self.audit.claim_changes.push(ClaimChange {
            job: "move-ardnave".into(),
            holder: Some(holder.into()),
            token,
            expires_unix_ns: self.clock.unix_ns_at_scenario_ms(t_ms + LEASE_MS),
            commit_unix_ns: self.clock.unix_ns_at_scenario_ms(t_ms),
            app: holder.into(),
            xid,
            not_before_unix_ns: None,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        t_ms: i64,
        shard: &str,
        app: &str,
        op: WriteOp,
        turbine: &str,
        rows: i64,
        token: Option<i64>,
    ) {
        let xid = 50_000 + self.audit.shard_writes.len() as i64;
        self.audit.shard_writes.push(ShardWrite {
            shard: shard.into(),
            xid,
            commit_unix_ns: self.clock.unix_ns_at_scenario_ms(t_ms),
            app: app.into(),
            op,
            turbine: (!turbine.is_empty()).then(|| turbine.to_string()),
            rows,
            min_ts_ms: None,
            max_ts_ms: None,
            token,
        });
    }

    /// One turbine moved by a holder: copy, renew, delete from the source.
    fn move_turbine(&mut self, who: &str, token: i64, k: i64, start: i64, copy_ms: i64) -> i64 {
        let (name, from, to) = plan_entry(k);
        let copied = start + copy_ms;
        self.pair(
            start,
            copied,
            who,
            "copy",
            json!({"turbine": name, "from": from, "to": to, "token": token}),
            OpType::Ok,
            json!({"rows_read": ROWS_A_YEAR, "rows_written": ROWS_A_YEAR}),
        );
        self.write(
            copied - 50,
            to,
            who,
            WriteOp::Insert,
            &name,
            ROWS_A_YEAR,
            Some(token),
        );
        self.pair(
            copied,
            copied + 550,
            who,
            "renew",
            json!({"token": token}),
            OpType::Ok,
            json!({"token": token}),
        );
        self.claim(copied + 500, who, token);
        self.pair(
            copied + 550,
            copied + 900,
            who,
            "delete",
            json!({"turbine": name, "shard": from, "token": token, "why": "source"}),
            OpType::Ok,
            json!({"rows": ROWS_A_YEAR}),
        );
        self.write(
            copied + 880,
            from,
            who,
            WriteOp::Delete,
            &name,
            ROWS_A_YEAR,
            Some(token),
        );
        copied + 900
    }

    /// A non-holder polling the claim every 5 s over `[from, to)`.
    fn polls(&mut self, who: &str, offset_ms: i64, from: i64, to: i64, outage: (i64, i64)) {
        let mut t = from + offset_ms;
        while t < to {
            let (kind_reason, holder) = if (outage.0..outage.1).contains(&t) {
                ("unreachable", None)
            } else if t < hms(22, 25, 10.0) {
                ("held", Some("box-2"))
            } else {
                ("held", Some("box-3"))
            };
            self.pair(
                t,
                t + 40,
                who,
                "acquire",
                json!({}),
                OpType::Fail,
                json!({"reason": kind_reason, "holder": holder}),
            );
            t += 5_000;
        }
    }
}

/// The April miniature as data: meta, history, audit, verdict and harness figures.
pub fn demo_input() -> DemoRun {
    let start = hms(21, 40, 0.0);
    let end = hms(22, 36, 50.0);
    let clock = ScenarioClock {
        start_unix_ns: 1_776_116_400_000_000_000,
        start_scenario_ms: start,
        real_ns_per_scenario_s: 10_000_000,
        scenario_day_unix_ms: 1_776_038_400_000,
        wall_check_run_ns: 0,
        wall_check_unix_ns: 0,
    };
    let mut b = Builder {
        clock,
        ops: Vec::new(),
        audit: Audit {
            object_writes: Vec::new(),
            complete: true,
            ..Default::default()
        },
    };
    let outage = (hms(22, 24, 20.0), hms(22, 25, 40.0));

    // 21:40: four boxes race; box 2 wins with token 17.
    for who in ["box-1", "box-2", "box-3", "box-4"] {
        if who == "box-2" {
            b.pair(
                start,
                start + 50,
                who,
                "acquire",
                json!({}),
                OpType::Ok,
                json!({"token": 17}),
            );
            b.claim(start + 40, who, 17);
        } else {
            b.pair(
                start,
                start + 60,
                who,
                "acquire",
                json!({}),
                OpType::Fail,
                json!({"reason": "held", "holder": "box-2"}),
            );
        }
    }

    // Box 2: 106 turbines at 25 s, renewing after each; the last answered renewal at 22:24:10.
    let mut t = start + 500;
    for k in 1..=106 {
        let slot = start + (k - 1) * 25_000;
        t = b.move_turbine("box-2", 17, k, t.max(slot + 500), 24_000);
    }
    // Turbine 107: done at 22:24:35, renewal refused, a minute of retries, then carry on.
    let (name107, from107, to107) = plan_entry(107);
    let copy_start = hms(22, 24, 10.9);
    b.pair(
        copy_start,
        hms(22, 24, 34.5),
        "box-2",
        "copy",
        json!({"turbine": name107, "from": from107, "to": to107, "token": 17}),
        OpType::Ok,
        json!({"rows_read": ROWS_A_YEAR, "rows_written": ROWS_A_YEAR}),
    );
    b.write(
        hms(22, 24, 34.4),
        to107,
        "box-2",
        WriteOp::Insert,
        &name107,
        ROWS_A_YEAR,
        Some(17),
    );
    let mut retry = hms(22, 24, 34.5);
    while retry < hms(22, 25, 30.0) {
        b.pair(
            retry,
            retry + 500,
            "box-2",
            "renew",
            json!({"token": 17}),
            OpType::Fail,
            json!({"token": 17, "reason": "unreachable"}),
        );
        retry += 10_000;
    }
    b.pair(
        hms(22, 25, 34.6),
        hms(22, 25, 35.0),
        "box-2",
        "delete",
        json!({"turbine": name107, "shard": from107, "token": 17, "why": "source"}),
        OpType::Ok,
        json!({"rows": ROWS_A_YEAR}),
    );
    b.write(
        hms(22, 25, 34.9),
        from107,
        "box-2",
        WriteOp::Delete,
        &name107,
        ROWS_A_YEAR,
        Some(17),
    );
    // Turbine 108, AP-0161: 46 s through a slowed link, then lost, then tidy-up.
    let ap = turbine(108);
    b.pair(
        hms(22, 25, 35.0),
        hms(22, 26, 21.0),
        "box-2",
        "copy",
        json!({"turbine": ap, "from": "shard1", "to": "shard3", "token": 17}),
        OpType::Ok,
        json!({"rows_read": ROWS_A_YEAR, "rows_written": ROWS_A_YEAR}),
    );
    b.write(
        hms(22, 26, 20.9),
        "shard3",
        "box-2",
        WriteOp::Insert,
        &ap,
        ROWS_A_YEAR,
        Some(17),
    );
    b.pair(
        hms(22, 26, 21.0),
        hms(22, 26, 21.1),
        "box-2",
        "renew",
        json!({"token": 17}),
        OpType::Fail,
        json!({"token": 17, "reason": "lost"}),
    );
    b.op(
        hms(22, 26, 21.1),
        "box-2",
        OpType::Info,
        "lost",
        json!({"token": 17, "holder": "box-3"}),
    );
    b.pair(
        hms(22, 26, 21.1),
        hms(22, 26, 21.5),
        "box-2",
        "delete",
        json!({"turbine": ap, "shard": "shard3", "token": 17, "why": "tidy-up"}),
        OpType::Ok,
        json!({"rows": 2 * ROWS_A_YEAR}),
    );
    b.write(
        hms(22, 26, 21.4),
        "shard3",
        "box-2",
        WriteOp::Delete,
        &ap,
        2 * ROWS_A_YEAR,
        Some(17),
    );

    // Box 3: polls until the claim is free, takes it at 22:25:44 with token 18.
    let take = hms(22, 25, 44.0);
    b.polls("box-3", 1_300, start, take, outage);
    b.pair(
        take,
        take + 100,
        "box-3",
        "acquire",
        json!({}),
        OpType::Ok,
        json!({"token": 18}),
    );
    b.claim(take + 50, "box-3", 18);
    // 107 turbines already gone from their source: 9 s of skips.
    for k in 1..=107 {
        let at = take + 200 + (k - 1) * 82;
        b.pair(
            at,
            at + 60,
            "box-3",
            "skip",
            json!({"turbine": turbine(k)}),
            OpType::Ok,
            json!({}),
        );
    }
    // AP-0161 copied by box 3 first; deleted from shard1 at 22:26:19.
    let mut t3 = b.move_turbine("box-3", 18, 108, hms(22, 25, 53.1), 24_850);
    for k in 109..=133 {
        t3 = b.move_turbine("box-3", 18, k, t3 + 100, 24_000);
    }
    b.op(t3 + 200, "box-3", OpType::Ok, "done", json!({"moved": 26}));

    // Boxes 1 and 4 poll all night and stop once box 3 has finished the plan.
    for (who, offset) in [("box-1", 2_100), ("box-4", 3_700)] {
        b.polls(who, offset, start, t3 + 1_000, outage);
        b.op(
            t3 + 1_500,
            who,
            OpType::Ok,
            "done",
            json!({"reason": "finished by another box"}),
        );
    }

    // The ingest writes every shard every 10 s, all night.
    let mut ti = start + 1_000;
    while ti < end - 1_000 {
        for (i, shard) in ["shard1", "shard2", "shard3"].into_iter().enumerate() {
            let at = ti + i as i64 * 200;
            b.pair(
                at,
                at + 30,
                "ingest",
                "ingest",
                json!({"shard": shard, "ts_ms": clock.reading_ts_ms(at), "turbines": ["AP-0002", "AP-0161", "AP-0299"]}),
                OpType::Ok,
                json!({}),
            );
            b.write(at + 25, shard, "ingest", WriteOp::Insert, "", 100, None);
        }
        ti += 10_000;
    }

    // The nemesis: the routing db's 80 s maintenance, and box 2's slowed link to shard1.
    let lag = json!({"scheduled_ms": 0, "lag_real_us": 310});
    let stop_args = json!({"target": "routing", "scheduled_ms": outage.0, "lag_real_us": 310});
    b.pair(
        outage.0,
        outage.0 + 20,
        "nemesis",
        "stop",
        stop_args,
        OpType::Ok,
        lag.clone(),
    );
    b.pair(
        outage.1,
        outage.1 + 20,
        "nemesis",
        "start",
        json!({"target": "routing"}),
        OpType::Ok,
        lag.clone(),
    );
    let link = "box-2->shard1";
    let slow = hms(22, 25, 30.0);
    b.pair(
        slow,
        slow + 20,
        "nemesis",
        "latency",
        json!({"target": link, "latency_ms": 900, "jitter_ms": 100}),
        OpType::Ok,
        lag.clone(),
    );
    let healed = hms(22, 26, 25.0);
    b.pair(
        healed,
        healed + 20,
        "nemesis",
        "heal",
        json!({"target": link}),
        OpType::Ok,
        lag,
    );

    // History order is time order; each process's own order is kept by the stable sort.
    b.ops.sort_by_key(|op| op.time_ns);
    for (i, op) in b.ops.iter_mut().enumerate() {
        op.index = i as u64;
    }

    let plan: Vec<PlanEntry> = (1..=133)
        .map(|k| {
            let (turbine, from, to) = plan_entry(k);
            PlanEntry {
                position: k as i32,
                turbine,
                from: from.into(),
                to: to.into(),
            }
        })
        .collect();
    let owners: BTreeMap<String, String> = plan
        .iter()
        .map(|p| (p.turbine.clone(), p.to.clone()))
        .collect();
    let mover: BTreeMap<String, String> = [
        ("fencing", "off"),
        ("on-renew-failure", "carry-on"),
        ("on-lost", "tidy-up"),
        ("check-expiry-before-write", "false"),
        ("election", "lease"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let meta = RunMeta {
        system: Default::default(),
        payout: None,
        objects: None,
        scenario: "april".into(),
        seed: 20260413,
        clock,
        job: "move-ardnave".into(),
        shards: vec!["shard1".into(), "shard2".into(), "shard3".into()],
        owners,
        plan,
        seeded: Vec::new(),
        lease_ms: LEASE_MS,
        copy_ms: 25_000,
        strict_duplicates: false,
        mover,
        end_scenario_ms: end,
        completed: true,
        incomplete_reason: None,
        expect_reach: Vec::new(),
    };

    let anomaly = |class, severity, count, at: i64, summary: &str, evidence: Value| Anomaly {
        class,
        severity,
        count,
        first_scenario_ms: Some(at),
        first_scenario_time: Some(ScenarioClock::format(at)),
        summary: summary.into(),
        evidence,
    };
    let verdict = Verdict {
        valid: Validity::Invalid,
        reasons: Vec::new(),
        anomalies: vec![
            anomaly(
                AnomalyClass::LostRows,
                Severity::Error,
                ROWS_A_YEAR as u64,
                hms(22, 26, 21.5),
                "AP-0161: 15 768 000 acknowledged readings absent from every shard; its surviving history starts at 22:26:22",
                json!({
                    "turbine": ap,
                    "rows": ROWS_A_YEAR,
                    "missing": {"first_ts": "2025-04-13T22:26:21Z", "last_ts": "2026-04-13T22:26:20Z", "step_ms": 2000},
                    "deletes": [
                        {"box": "box-3", "shard": "shard1", "token": 18, "why": "source", "at": "22:26:19.0"},
                        {"box": "box-2", "shard": "shard3", "token": 17, "why": "tidy-up", "at": "22:26:21.5"}
                    ]
                }),
            ),
            anomaly(
                AnomalyClass::WriteAfterLeaseExpiry,
                Severity::Error,
                3,
                hms(22, 25, 10.0),
                "box-2 kept writing for 71.5 s after its lease (token 17) expired at 22:25:10.0; its tidy-up delete destroyed data",
                json!({"box": "box-2", "token": 17, "expired_at": "22:25:10.0", "last_write_at": "22:26:21.5",
                       "writes": ["delete AP-0160 shard1 22:25:35.0", "insert AP-0161 shard3 22:26:20.9", "delete AP-0161 shard3 22:26:21.4"]}),
            ),
            anomaly(
                AnomalyClass::ConcurrentHolders,
                Severity::Info,
                1,
                hms(22, 25, 44.1),
                "box-2 (token 17) and box-3 (token 18) both acted between 22:25:44.1 and 22:26:21.5",
                json!({"boxes": ["box-2", "box-3"], "from": "22:25:44.1", "to": "22:26:21.5"}),
            ),
            anomaly(
                AnomalyClass::VacancyWindow,
                Severity::Info,
                1,
                hms(22, 25, 10.0),
                "no valid claim for 34.0 s (22:25:10.0 - 22:25:44.0)",
                json!({"windows": [{"from": "22:25:10.0", "to": "22:25:44.0", "seconds": 34.0}]}),
            ),
        ],
        stats: chaos_checkers::Stats {
            turbines_planned: 133,
            turbines_moved: 132,
            vacancy_total_s: 34.0,
            vacancy_max_s: 34.0,
            writes_after_expiry_s: BTreeMap::from([("box-2".to_string(), 71.5)]),
            rows_lost: ROWS_A_YEAR as u64,
            ..Default::default()
        },
        reached: Vec::new(),
    };
    let extra = json!({
        "fault_landing_lag_real_us": {"p50": 310, "p99": 1240, "max": 1530},
        "wall_time_s": {"setup": 4.2, "seed": 11.8, "run": 34.3, "collect": 1.1, "check": 0.2}
    });
    let digest = HistoryDigest::of(&meta, &b.ops);
    DemoRun {
        meta,
        digest,
        history: b.ops,
        audit: b.audit,
        verdict,
        extra,
    }
}
