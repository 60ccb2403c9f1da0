//! One run's sweep figures, from its history and its verdict's stats: renewal latencies, false expiries, takeovers, recovery from a killed holder, the movers' stalls. Pure: no IO.

use chaos_checkers::Stats;
use chaos_history::verb;
use chaos_history::{Op, OpType, ScenarioClock};
pub use chaos_report::sweep::{FalseExpiry, RunFigures, Stall};
use std::collections::BTreeMap;

/// Intervals (scenario ms) in which a box was paused, killed, or had exited.
fn disabled(history: &[Op], clock: &ScenarioClock) -> BTreeMap<String, Vec<(i64, i64)>> {
    let mut open: BTreeMap<String, i64> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for op in history {
        let t = clock.scenario_ms_at_run_ns(op.time_ns);
        let target = op.value.get("target").and_then(|v| v.as_str());
        let (who, begins) = match (op.process.as_str(), op.f.as_str(), op.kind, target) {
            ("nemesis", "pause" | "kill", OpType::Ok, Some(b)) => (b.to_string(), true),
            ("nemesis", "resume" | "start-mover", OpType::Ok, Some(b)) => (b.to_string(), false),
            // A mover that exited on its own stopped working too (until a restart).
            (p, verb::EXIT, OpType::Info, _) if p.starts_with("box-") => (p.to_string(), true),
            _ => continue,
        };
        if begins {
            open.entry(who).or_insert(t);
        } else if let Some(from) = open.remove(&who) {
            out.entry(who).or_default().push((from, t));
        }
    }
    for (who, from) in open {
        out.entry(who).or_default().push((from, i64::MAX));
    }
    out
}

fn was_disabled(d: &BTreeMap<String, Vec<(i64, i64)>>, who: &str, from: i64, to: i64) -> bool {
    d.get(who)
        .map(|v| v.iter().any(|&(a, b)| a <= to && b >= from))
        .unwrap_or(false)
}

/// Scenario µs of each renewal: a box's `renew` invoke to its next `renew` completion.
pub fn renewal_latencies_us(history: &[Op], clock: &ScenarioClock) -> Vec<u64> {
    let ns_per_s = clock.real_ns_per_scenario_s.max(1) as i128;
    let mut pending: BTreeMap<&str, i64> = BTreeMap::new();
    let mut out = Vec::new();
    for op in history {
        if !op.process.starts_with("box-") {
            continue;
        }
        match (op.f.as_str(), op.kind) {
            (verb::RENEW, OpType::Invoke) => {
                pending.insert(op.process.as_str(), op.time_ns);
            }
            (verb::RENEW, _) => {
                if let Some(t) = pending.remove(op.process.as_str()) {
                    let real_ns = (op.time_ns - t).max(0) as i128;
                    out.push((real_ns * 1_000_000 / ns_per_s) as u64);
                }
            }
            // A process that died mid-renewal completed nothing.
            (verb::EXIT, _) => {
                pending.remove(op.process.as_str());
            }
            _ => {}
        }
    }
    out
}

fn stall_of(v: &serde_json::Value) -> Stall {
    let g = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    Stall {
        p50_us: g("p50_us"),
        p99_us: g("p99_us"),
        p999_us: g("p999_us"),
        max_us: g("max_us"),
        samples: g("samples"),
    }
}

/// The last stall line of every mover life (a life ends at its `exit`).
pub fn stall_lives(history: &[Op]) -> Vec<(String, Stall)> {
    let mut last: BTreeMap<&str, Stall> = BTreeMap::new();
    let mut out = Vec::new();
    for op in history {
        if !op.process.starts_with("box-") {
            continue;
        }
        match (op.f.as_str(), op.kind) {
            (verb::STALLS, OpType::Info) => {
                last.insert(op.process.as_str(), stall_of(&op.value));
            }
            (verb::EXIT, OpType::Info) => {
                if let Some(s) = last.remove(op.process.as_str()) {
                    out.push((op.process.clone(), s));
                }
            }
            _ => {}
        }
    }
    out.extend(last.into_iter().map(|(b, s)| (b.to_string(), s)));
    out
}

/// Everything a sweep row needs from one run.
pub fn measure(history: &[Op], stats: &Stats, clock: &ScenarioClock) -> RunFigures {
    let d = disabled(history, clock);
    let mut grants = stats.grants.clone();
    grants.sort_by_key(|g| (g.scenario_ms, g.token));
    let mut f = RunFigures {
        grants: grants.len() as u64,
        ..Default::default()
    };
    // Done and release mean the holder stopped by its own choice.
    let mut finished: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for op in history {
        if op.process.starts_with("box-") && op.kind == OpType::Ok && op.f == verb::DONE {
            finished
                .entry(op.process.as_str())
                .or_default()
                .push(clock.scenario_ms_at_run_ns(op.time_ns));
        }
    }
    for pair in grants.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if prev.holder == next.holder {
            continue;
        }
        f.takeovers += 1;
        let chose_to_stop = prev.released
            || finished
                .get(prev.holder.as_str())
                .map(|v| {
                    v.iter()
                        .any(|&t| t >= prev.scenario_ms && t <= next.scenario_ms)
                })
                .unwrap_or(false);
        if !chose_to_stop && !was_disabled(&d, &prev.holder, prev.scenario_ms, next.scenario_ms) {
            f.false_expiries.push(FalseExpiry {
                holder: prev.holder.clone(),
                token: prev.token,
                by: next.holder.clone(),
                at: next.time.clone(),
            });
        }
    }
    for op in history {
        if !(op.process == "nemesis" && op.f == "kill" && op.kind == OpType::Ok) {
            continue;
        }
        let t = clock.scenario_ms_at_run_ns(op.time_ns);
        let target = op
            .value
            .get("target")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let holder = grants.iter().rev().find(|g| g.scenario_ms <= t);
        let holding = holder
            .map(|g| g.holder == target && !(g.released && g.last_expiry_scenario_ms <= t))
            .unwrap_or(false);
        if holding {
            let next = grants.iter().find(|g| g.scenario_ms > t);
            f.holder_kills
                .push(next.map(|g| (g.scenario_ms - t) as f64 / 1000.0));
        } else {
            f.other_kills += 1;
        }
    }
    f.renew_us = renewal_latencies_us(history, clock);
    f.renewals = f.renew_us.len() as u64;
    f.vacancy_total_s = stats.vacancy_total_s;
    f.vacancy_max_s = stats.vacancy_max_s;
    f.writes_after_expiry = stats.writes_after_expiry;
    f.writes_after_expiry_max_s = stats
        .writes_after_expiry_s
        .values()
        .cloned()
        .fold(0.0, f64::max);
    f.rows_lost = stats.rows_lost;
    f.lost_turbines = stats.lost_turbines.len() as u64;
    f.refused_writes = stats.refused_writes;
    f.stale_writes_accepted = stats.stale_writes_accepted;
    f.stalled_holders = stats.stalled_holders;
    f.stalled_holder_max_s = stats.stalled_holder_max_s;
    f.finish_s = stats
        .plan_finished_scenario_ms
        .map(|t| (t - clock.start_scenario_ms) as f64 / 1000.0);
    let lives = stall_lives(history);
    f.stall_lives = lives.len() as u64;
    for (_, s) in &lives {
        f.stall.p50_us = f.stall.p50_us.max(s.p50_us);
        f.stall.p99_us = f.stall.p99_us.max(s.p99_us);
        f.stall.p999_us = f.stall.p999_us.max(s.p999_us);
        f.stall.max_us = f.stall.max_us.max(s.max_us);
        f.stall.samples += s.samples;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_checkers::GrantStat;
    use serde_json::json;

    const START: i64 = 43_200_000; // 12:00:00

    fn clock() -> ScenarioClock {
        ScenarioClock {
            start_unix_ns: 0,
            start_scenario_ms: START,
            real_ns_per_scenario_s: 10_000_000,
            scenario_day_unix_ms: 0,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        }
    }

    /// An event at scenario second `s` after the start.
    fn op(s: f64, process: &str, kind: OpType, f: &str, value: serde_json::Value) -> Op {
        Op {
            index: 0,
            time_ns: (s * 10_000_000.0) as i64,
            scenario_time: String::new(),
            process: process.into(),
            kind,
            f: f.into(),
            value,
        }
    }

    fn grant(holder: &str, token: i64, s: i64, released: bool) -> GrantStat {
        GrantStat {
            holder: holder.into(),
            token,
            scenario_ms: START + s * 1000,
            time: chaos_history::ScenarioClock::format(START + s * 1000),
            last_expiry_scenario_ms: START + s * 1000 + 5000,
            released,
        }
    }

    #[test]
    fn a_live_holder_losing_is_false_a_paused_or_killed_one_is_not() {
        let history = vec![
            // box-2 renews once (1.5 s), then loses to box-3 at 20 s while live.
            op(10.0, "box-2", OpType::Invoke, "renew", json!({"token": 7})),
            op(11.5, "box-2", OpType::Ok, "renew", json!({"token": 7})),
            // box-3 is paused 30..60 and loses to box-4 at 45: not false.
            op(
                30.0,
                "nemesis",
                OpType::Ok,
                "pause",
                json!({"target": "box-3"}),
            ),
            op(
                60.0,
                "nemesis",
                OpType::Ok,
                "resume",
                json!({"target": "box-3"}),
            ),
            // box-4 holds when it is killed at 100; box-1 takes over at 112.
            op(
                100.0,
                "nemesis",
                OpType::Ok,
                "kill",
                json!({"target": "box-4"}),
            ),
            op(100.0, "box-4", OpType::Info, "exit", json!({"code": null})),
            op(
                110.0,
                "nemesis",
                OpType::Ok,
                "start-mover",
                json!({"target": "box-4"}),
            ),
            // box-2 is killed at 150 while box-1 holds: no recovery to measure.
            op(
                150.0,
                "nemesis",
                OpType::Ok,
                "kill",
                json!({"target": "box-2"}),
            ),
            // box-1 finishes and releases; box-4 takes the released claim: not false.
            op(200.0, "box-1", OpType::Ok, "done", json!({})),
        ];
        let stats = Stats {
            grants: vec![
                grant("box-2", 7, 0, false),
                grant("box-3", 8, 20, false),
                grant("box-4", 9, 45, false),
                grant("box-1", 10, 112, true),
                grant("box-4", 11, 205, false),
            ],
            vacancy_total_s: 12.5,
            vacancy_max_s: 12.0,
            writes_after_expiry_s: [("box-2".to_string(), 3.5), ("box-3".to_string(), 7.25)]
                .into_iter()
                .collect(),
            writes_after_expiry: 4,
            rows_lost: 100,
            lost_turbines: vec!["AP-0001".into()],
            refused_writes: 2,
            plan_finished_scenario_ms: Some(START + 300_000),
            ..Default::default()
        };
        let f = measure(&history, &stats, &clock());
        assert_eq!(f.takeovers, 4);
        assert_eq!(
            f.false_expiries,
            vec![FalseExpiry {
                holder: "box-2".into(),
                token: 7,
                by: "box-3".into(),
                at: "12:00:20.0".into()
            }]
        );
        assert_eq!(f.holder_kills, vec![Some(12.0)]);
        assert_eq!(f.other_kills, 1);
        assert_eq!(f.renew_us, vec![1_500_000]);
        assert_eq!(f.writes_after_expiry_max_s, 7.25);
        assert_eq!(
            (f.rows_lost, f.lost_turbines, f.refused_writes),
            (100, 1, 2)
        );
        assert_eq!(f.finish_s, Some(300.0));
    }

    #[test]
    fn stalls_take_each_lifes_last_line_and_the_worst_of_them() {
        let line = |p999: u64, max: u64, n: u64| json!({"p50_us": 500, "p99_us": 900, "p999_us": p999, "max_us": max, "samples": n});
        let history = vec![
            op(
                1.0,
                "box-1",
                OpType::Info,
                "stalls",
                line(1_000, 2_000, 100),
            ),
            op(
                2.0,
                "box-1",
                OpType::Info,
                "stalls",
                line(1_500, 9_000, 200),
            ),
            op(3.0, "box-1", OpType::Info, "exit", json!({"code": null})),
            op(4.0, "box-1", OpType::Info, "stalls", line(1_100, 1_200, 50)),
            op(5.0, "box-2", OpType::Info, "stalls", line(3_000, 4_000, 70)),
        ];
        let lives = stall_lives(&history);
        assert_eq!(lives.len(), 3);
        let f = measure(&history, &Stats::default(), &clock());
        assert_eq!(f.stall.p999_us, 3_000);
        assert_eq!(f.stall.max_us, 9_000);
        assert_eq!(f.stall.samples, 320);
    }

    #[test]
    fn a_renewal_cut_by_an_exit_is_not_a_latency() {
        let history = vec![
            op(1.0, "box-1", OpType::Invoke, "renew", json!({})),
            op(2.0, "box-1", OpType::Info, "exit", json!({"code": null})),
            op(
                3.0,
                "box-1",
                OpType::Fail,
                "renew",
                json!({"reason": "lost"}),
            ),
            op(4.0, "box-1", OpType::Invoke, "renew", json!({})),
            op(
                4.25,
                "box-1",
                OpType::Fail,
                "renew",
                json!({"reason": "unreachable"}),
            ),
            op(
                4.3,
                "box-1",
                OpType::Info,
                "renew",
                json!({"reason": "carry-on"}),
            ),
        ];
        assert_eq!(renewal_latencies_us(&history, &clock()), vec![250_000]);
    }
}
