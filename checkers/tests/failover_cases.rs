//! Planted runs of the failover system as data: every folder under `tests/data/` whose `run.json` says `"system": "failover"` is a stored run (run.json, history.jsonl, final-state.json) with the verdict it must get (`expect.json`, as `cases.rs` reads it; its `stats` a subset of `Verdict::stats.failover`).

mod reorder;

use chaos_checkers::{failover, Verdict};
use chaos_history::{FailoverFinal, FailoverMeta, History};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("data")
}

fn load<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn judge(dir: &Path) -> Verdict {
    let meta: FailoverMeta = load(&dir.join("run.json")).expect("a run.json");
    let history = History::read(&dir.join("history.jsonl")).expect("history parses");
    let final_state: Option<FailoverFinal> = load(&dir.join("final-state.json"));
    let verdict = failover::check(&meta, &history, final_state.as_ref());
    assert_eq!(
        verdict,
        judge_text(dir, &history_text(dir)),
        "read whole or from its text"
    );
    verdict
}

fn history_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("history.jsonl")).unwrap_or_default()
}

/// The case judged with `text` as its history.
fn judge_text(dir: &Path, text: &str) -> Verdict {
    let meta: FailoverMeta = load(&dir.join("run.json")).expect("a run.json");
    let (ops, torn_tail) = reorder::ops(text);
    let final_state: Option<FailoverFinal> = load(&dir.join("final-state.json"));
    failover::check(&meta, &History { ops, torn_tail }, final_state.as_ref())
}

fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() < 1e-6,
        _ => a == b,
    }
}

/// Every way the verdict differs from `expect.json`, one line each.
fn mismatches(v: &Verdict, expect: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let valid = serde_json::to_value(v.valid).unwrap();
    if valid != expect["valid"] {
        out.push(format!(
            "valid: got {valid}, want {} (reasons {:?})",
            expect["valid"], v.reasons
        ));
    }
    let want = expect["anomalies"].as_object().cloned().unwrap_or_default();
    for a in &v.anomalies {
        let name = a.class.name();
        let Some(w) = want.get(name) else {
            out.push(format!("unexpected {name} x{} ({})", a.count, a.summary));
            continue;
        };
        if w["count"].as_u64() != Some(a.count) {
            out.push(format!(
                "{name}: count {}, want {} ({})",
                a.count, w["count"], a.summary
            ));
        }
        if serde_json::to_value(a.severity).unwrap() != w["severity"] {
            out.push(format!(
                "{name}: severity {:?}, want {}",
                a.severity, w["severity"]
            ));
        }
        if let Some(first) = w.get("first") {
            if a.first_scenario_time.as_deref() != first.as_str() {
                out.push(format!(
                    "{name}: first {:?}, want {first}",
                    a.first_scenario_time
                ));
            }
        }
    }
    for name in want.keys() {
        if !v.anomalies.iter().any(|a| a.class.name() == name) {
            out.push(format!("missing {name}"));
        }
    }
    for r in expect["reasons"].as_array().into_iter().flatten() {
        let r = r.as_str().unwrap();
        if !v.reasons.iter().any(|have| have.contains(r)) {
            out.push(format!(
                "no reason mentions {r:?} (reasons: {:?})",
                v.reasons
            ));
        }
    }
    out.extend(reorder::reached_mismatches(v, expect));
    let stats = serde_json::to_value(v.stats.failover.as_ref().expect("failover stats")).unwrap();
    for (k, w) in expect["stats"].as_object().into_iter().flatten() {
        if !same(&stats[k], w) {
            out.push(format!("stats.failover.{k}: got {}, want {w}", stats[k]));
        }
    }
    out
}

fn failover_cases() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| load::<Value>(&p.join("run.json")).is_some_and(|m| m["system"] == "failover"))
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_failover_case_gets_its_expected_verdict() {
    let dirs = failover_cases();
    assert!(dirs.len() >= 6, "the planted failover runs are missing");
    let mut failures = Vec::new();
    for dir in &dirs {
        let expect: Value = load(&dir.join("expect.json")).expect("an expect.json");
        let mut problems = mismatches(&judge(dir), &expect);
        // Line order and repeats say nothing.
        problems.extend(reorder::differences(&history_text(dir), &|t| {
            judge_text(dir, t)
        }));
        if !problems.is_empty() {
            failures.push(format!(
                "{}:\n    {}",
                dir.file_name().unwrap().to_string_lossy(),
                problems.join("\n    ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n")
    );
}

/// GitHub's shape, planted: the lost orders are split by why, with their ids as evidence.
#[test]
fn unfenced_lost_orders_say_why_and_which() {
    let v = judge(&data_dir().join("failover-unfenced-lost"));
    let lost = v.anomaly(chaos_checkers::AnomalyClass::LostOrders).unwrap();
    let split = lost.evidence["split"].as_array().unwrap();
    assert_eq!(split[0]["why"], "not yet replicated at the promotion");
    assert_eq!(split[0]["ids"][0], "o-000040");
    assert_eq!(
        split[1]["why"],
        "accepted by the old primary after the promotion"
    );
    assert_eq!(split[1]["count"], 5);
    assert!(lost.summary.contains("1 not yet replicated at the promotion, 5 accepted by the old primary after the promotion"), "{}", lost.summary);
    let two = v
        .anomaly(chaos_checkers::AnomalyClass::TwoPrimaries)
        .unwrap();
    assert_eq!(two.evidence["windows"][0]["until_the_end"], true);
}

/// Issue 31: the shop's history shuffled (and each ok before its invoke) lost the finding
/// or changed its count; ordered by what the lines say, the same six orders, split the same.
#[test]
fn failover_lines_shuffled() {
    let want = judge(&data_dir().join("failover-unfenced-lost"));
    for name in ["failover-lines-shuffled", "failover-answers-before-invokes"] {
        let v = judge(&data_dir().join(name));
        let (got, original) = (
            v.anomaly(chaos_checkers::AnomalyClass::LostOrders).unwrap(),
            want.anomaly(chaos_checkers::AnomalyClass::LostOrders)
                .unwrap(),
        );
        assert_eq!(got.evidence, original.evidence, "{name}");
        assert_eq!(v.stats, want.stats, "{name}");
    }
}

/// Issue 31: the failover path's torn last line is `unknown`, with the reason.
#[test]
fn failover_torn_tail() {
    let v = judge(&data_dir().join("failover-torn-tail"));
    assert_eq!(v.valid, chaos_checkers::Validity::Unknown);
    assert!(
        v.reasons
            .iter()
            .any(|r| r.contains("history ends in a torn line")),
        "{:?}",
        v.reasons
    );
}
