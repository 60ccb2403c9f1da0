//! The run told in scenario time: the events an engineer compares with the incident (grants, failed renewals, carry-on, takeovers, refusals, tidy-ups, faults), from the history alone.

use chaos_checkers::{AnomalyClass, Verdict};
use chaos_history::{OpType, RunRecord, ScenarioClock};
use std::collections::{BTreeMap, BTreeSet};

/// At most this many lines; the rest is in history.jsonl and report.html.
const MAX_LINES: usize = 40;

pub fn story(record: &RunRecord, verdict: &Verdict) -> String {
    let clock = &record.meta.clock;
    let lost: BTreeSet<String> = verdict
        .anomalies
        .iter()
        .filter(|a| a.class == AnomalyClass::LostRows)
        .flat_map(|a| turbines_in(&a.evidence))
        .collect();
    let mut lines: Vec<(i64, String)> = Vec::new();
    let mut copies: BTreeMap<String, u32> = BTreeMap::new();
    let mut unreachable: BTreeSet<String> = BTreeSet::new();
    let mut last_renew: BTreeMap<String, i64> = BTreeMap::new();
    // When each box sent its latest renewal: a renewal that retries for a minute
    // fails once, at the end, but the box began retrying when it sent it.
    let mut renew_sent: BTreeMap<String, i64> = BTreeMap::new();
    // When each box took the claim, until its grant-time fences answer.
    let mut acquired: BTreeMap<String, i64> = BTreeMap::new();
    for op in &record.history {
        let t = clock.scenario_ms_at_run_ns(op.time_ns);
        let v = &op.value;
        let s = |k: &str| {
            v.get(k)
                .map(|x| {
                    x.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| x.to_string())
                })
                .unwrap_or_default()
        };
        let p = op.process.as_str();
        match (op.kind, op.f.as_str()) {
            (OpType::Ok, "acquire") => {
                acquired.insert(p.into(), t);
                lines.push((t, format!("{p} takes the claim (token {})", s("token"))))
            }
            // A grant-time fence (a successor's has `why`) that took a quarter of the lease:
            // an update of the fence row waits for every write transaction still open on
            // the shard, such as a paused holder's, and the lease runs meanwhile.
            (OpType::Ok, "fence") if s("why").is_empty() => {
                if let Some(a) = acquired.remove(p) {
                    let lease = record.meta.lease_ms.max(1);
                    if (t - a) * 4 >= lease {
                        lines.push((
                            t,
                            format!(
                                "{p} fences its shards {:.1} s after taking the claim ({}% of its {} s lease): a fence waits for any write still open on its shard",
                                (t - a) as f64 / 1000.0,
                                (t - a) * 100 / lease,
                                lease as f64 / 1000.0
                            ),
                        ));
                    }
                }
            }
            (OpType::Ok, "copy") => {
                *copies.entry(p.into()).or_default() += 1;
                if lost.contains(&s("turbine")) {
                    lines.push((t, format!("{p} has copied {}", s("turbine"))));
                }
            }
            (OpType::Invoke, "renew") => {
                renew_sent.insert(p.into(), t);
            }
            (OpType::Ok, "renew") => {
                last_renew.insert(p.into(), t);
                unreachable.remove(p);
            }
            (OpType::Fail, "renew") if s("reason") == "unreachable" => {
                if unreachable.insert(p.into()) {
                    if let Some(r) = last_renew.get(p) {
                        lines.push((*r, format!("{p}: last renewal that got an answer")));
                    }
                    let began = renew_sent.get(p).copied().unwrap_or(t).min(t);
                    lines.push((began, format!("{p} finishes turbine {} and cannot reach the routing db to renew; retrying", copies.get(p).copied().unwrap_or(0))));
                }
            }
            (OpType::Fail, "renew") if s("reason") == "lost" => lines.push((
                t,
                format!(
                    "{p}: renewal shows the claim is lost (holder {})",
                    or_unknown(&s("holder"))
                ),
            )),
            (OpType::Info, "renew") if s("reason") == "carry-on" => {
                lines.push((t, format!("{p} gives up renewing and carries on")))
            }
            (OpType::Info, "lost") => lines.push((
                t,
                format!("{p} learns it lost the claim (token {})", s("token")),
            )),
            (OpType::Invoke, "delete") if s("why") == "tidy-up" => lines.push((
                t,
                format!(
                    "{p} tidies up: deletes {} from {}",
                    s("turbine"),
                    s("shard")
                ),
            )),
            (OpType::Invoke, "copy") if lost.contains(&s("turbine")) => lines.push((
                t,
                format!(
                    "{p} starts copying {} ({} -> {})",
                    s("turbine"),
                    s("from"),
                    s("to")
                ),
            )),
            (OpType::Invoke, "delete") if lost.contains(&s("turbine")) => lines.push((
                t,
                format!(
                    "{p} deletes {} from {} ({})",
                    s("turbine"),
                    s("shard"),
                    s("why")
                ),
            )),
            (OpType::Fail, _) if s("reason") == "fenced" => lines.push((
                t,
                format!(
                    "{} refuses {p}'s {} with token {} (shard has {})",
                    s("shard"),
                    op.f,
                    s("token"),
                    s("shard_token")
                ),
            )),
            (OpType::Ok, "done") => lines.push((t, format!("{p} finds the plan done and exits"))),
            // A fault's effect begins when it is invoked (a stopping server refuses at once).
            // A start counts from when the node accepts connections (it is issued early).
            (OpType::Invoke, verb) | (OpType::Ok, verb @ "start")
                if p == "nemesis" && (verb == "start") == (op.kind == OpType::Ok) =>
            {
                lines.push((t, format!("nemesis: {verb} {}", s("target"))));
            }
            (OpType::Info, verb) if p == "nemesis" => lines.push((
                t,
                format!(
                    "nemesis: {verb} {} did NOT take: {}",
                    s("target"),
                    s("error")
                ),
            )),
            _ => {}
        }
    }
    lines.sort_by_key(|(t, _)| *t);
    let total = lines.len();
    let mut out = format!(
        "{} in scenario time (seed {})\n",
        record.meta.scenario, record.meta.seed
    );
    for (t, l) in lines.iter().take(MAX_LINES) {
        out.push_str(&format!("  {}  {l}\n", ScenarioClock::format(*t)));
    }
    if total > MAX_LINES {
        out.push_str(&format!(
            "  ... {} more events in history.jsonl and report.html\n",
            total - MAX_LINES
        ));
    }
    out
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() || s == "null" {
        "unknown"
    } else {
        s
    }
}

/// Turbine names an anomaly's evidence mentions (`turbine` fields, at any depth).
fn turbines_in(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "turbine" {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_string());
                    }
                } else {
                    out.extend(turbines_in(x));
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| out.extend(turbines_in(x))),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_history::{Op, RunMeta};
    use serde_json::json;
    use std::path::Path;

    fn meta(lease_ms: i64) -> RunMeta {
        let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("../checkers/tests/data");
        let dir = std::fs::read_dir(&case)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("run.json").is_file())
            .expect("a planted case");
        let text = std::fs::read_to_string(dir.join("run.json")).unwrap();
        let mut m: RunMeta = serde_json::from_str(&text).unwrap();
        m.lease_ms = lease_ms;
        m
    }

    fn op(
        index: u64,
        scenario_s: f64,
        meta: &RunMeta,
        process: &str,
        kind: OpType,
        f: &str,
        value: serde_json::Value,
    ) -> Op {
        let ns = (scenario_s * meta.clock.real_ns_per_scenario_s as f64) as i64;
        Op {
            index,
            time_ns: ns,
            scenario_time: String::new(),
            process: process.into(),
            kind,
            f: f.into(),
            value,
        }
    }

    fn told(fence_after_s: f64) -> String {
        let meta = meta(10_000);
        let history = vec![
            op(
                0,
                44.0,
                &meta,
                "box-4",
                OpType::Ok,
                "acquire",
                json!({"token": 8}),
            ),
            op(
                1,
                44.0 + fence_after_s,
                &meta,
                "box-4",
                OpType::Ok,
                "fence",
                json!({"shard": "shard2", "token": 8}),
            ),
        ];
        let record = RunRecord {
            meta,
            history,
            audit: None,
            final_state: None,
        };
        story(&record, &chaos_checkers::check(&record))
    }

    #[test]
    fn a_grant_time_fence_that_waits_a_quarter_of_the_lease_is_told() {
        let slow = told(9.7);
        assert!(
            slow.contains(
                "box-4 fences its shards 9.7 s after taking the claim (97% of its 10 s lease)"
            ),
            "{slow}"
        );
        let quick = told(0.3);
        assert!(!quick.contains("fences its shards"), "{quick}");
    }
}
