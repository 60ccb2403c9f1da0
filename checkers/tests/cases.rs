//! Planted runs as data: every folder under `tests/data/` is a stored run with the verdict it must get (`expect.json`).
//!
//! `expect.json`: `valid`; `anomalies`, the exact set of classes with their
//! `count`, `severity` and (optionally) `first` scenario time; `reasons`,
//! substrings the unknown reasons must contain; `stats`, a subset of
//! `Verdict::stats` that must match. A new anomaly class is a new folder.

mod reorder;

use chaos_checkers::{check, AnomalyClass, HistoryFold, Verdict};
use chaos_history::{Audit, FinalState, RunMeta, RunRecord};
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

/// The case's history as text (none: empty).
fn history_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("history.jsonl")).unwrap_or_default()
}

fn record(dir: &Path) -> RunRecord {
    record_with(dir, &history_text(dir))
}

/// The case's run with `text` as its history (a torn last line kept as a flag).
fn record_with(dir: &Path, text: &str) -> RunRecord {
    let meta: RunMeta = load(&dir.join("run.json")).expect("every case has a run.json");
    let (history, torn_tail) = reorder::ops(text);
    RunRecord {
        meta,
        history,
        torn_tail,
        audit: load::<Audit>(&dir.join("audit.json")),
        final_state: load::<FinalState>(&dir.join("final-state.json")),
    }
}

/// The same run checked by streaming the history's text line by line, in the order the
/// lines stand, as `chaos check DIR` does (a torn last line is the reader's to cut off).
fn check_streamed(text: &str, rec: &RunRecord) -> Verdict {
    let mut fold = HistoryFold::new(&rec.meta);
    let (lines, torn) = reorder::split(text);
    for line in &lines {
        fold.observe_line(line).expect("a history line folds");
    }
    if torn.is_some() {
        fold.note_torn_tail();
    }
    fold.finish(&rec.meta, rec.audit.as_ref(), rec.final_state.as_ref())
}

fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            (x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-6
        }
        _ => a == b,
    }
}

/// Every way the verdict differs from `expect.json`, one line each.
fn mismatches(verdict: &Verdict, expect: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let valid = serde_json::to_value(verdict.valid).unwrap();
    if valid != expect["valid"] {
        out.push(format!("valid: got {valid}, want {}", expect["valid"]));
    }
    let want = expect["anomalies"].as_object().cloned().unwrap_or_default();
    for a in &verdict.anomalies {
        let name = a.class.name();
        let Some(w) = want.get(name) else {
            out.push(format!("unexpected {name} x{} ({})", a.count, a.summary));
            continue;
        };
        if w["count"].as_u64() != Some(a.count) {
            out.push(format!("{name}: count {}, want {}", a.count, w["count"]));
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
        if !verdict.anomalies.iter().any(|a| a.class.name() == name) {
            out.push(format!("missing {name}"));
        }
    }
    for r in expect["reasons"].as_array().into_iter().flatten() {
        let r = r.as_str().unwrap();
        if !verdict.reasons.iter().any(|have| have.contains(r)) {
            out.push(format!(
                "no reason mentions {r:?} (reasons: {:?})",
                verdict.reasons
            ));
        }
    }
    if expect["valid"] != "unknown"
        && !verdict.reasons.is_empty()
        && verdict.valid != chaos_checkers::Validity::Invalid
    {
        out.push(format!("unexpected reasons {:?}", verdict.reasons));
    }
    out.extend(reorder::reached_mismatches(verdict, expect));
    let stats = serde_json::to_value(&verdict.stats).unwrap();
    for (k, w) in expect["stats"].as_object().into_iter().flatten() {
        let got = &stats[k];
        if !same_json(got, w) {
            out.push(format!("stats.{k}: got {got}, want {w}"));
        }
    }
    out
}

/// A planted run of the failover system (its `run.json` says so): `failover_cases.rs` judges it.
fn is_failover_case(dir: &Path) -> bool {
    load::<Value>(&dir.join("run.json")).is_some_and(|m| m["system"] == "failover")
}

fn run_case(dir: &Path) -> Vec<String> {
    let rec = record(dir);
    let expect: Value = load(&dir.join("expect.json")).expect("every case has an expect.json");
    let verdict = check(&rec);
    let mut out = mismatches(&verdict, &expect);
    if check_streamed(&history_text(dir), &rec) != verdict {
        out.push(
            "streaming history.jsonl through observe_line gave a different verdict".to_string(),
        );
    }
    // Line order and repeats say nothing: in memory and streamed, the same verdict.
    let in_memory = |text: &str| check(&record_with(dir, text));
    let streamed = |text: &str| check_streamed(text, &record_with(dir, text));
    for (how, judge) in [
        ("in memory", &in_memory as &dyn Fn(&str) -> Verdict),
        ("streamed", &streamed),
    ] {
        for d in reorder::differences(&history_text(dir), judge) {
            out.push(format!("{how}, {d}"));
        }
    }
    out
}

fn case(name: &str) -> Verdict {
    let dir = data_dir().join(name);
    let problems = run_case(&dir);
    assert!(problems.is_empty(), "{name}:\n  {}", problems.join("\n  "));
    check(&record(&dir))
}

#[test]
fn every_case_folder_gets_its_expected_verdict() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !is_failover_case(p))
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20, "the planted runs are missing");
    let mut failures = Vec::new();
    for dir in &dirs {
        let problems = run_case(dir);
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

/// Lesson 032's figures: 71 s of writes after expiry, 34 s of vacancy, a turbine whose history begins at 22:26:2x.
#[test]
fn april_lease_only() {
    let v = case("april-lease-only");
    let lost = v.anomaly(AnomalyClass::LostRows).unwrap();
    let t = &lost.evidence["turbines"][0];
    assert_eq!(t["turbine"], "AP-0163");
    assert_eq!(t["surviving_from_time"], "22:26:25.0");
    assert_eq!(t["first_lost_time"], "-365d 22:23:00.0");
    assert_eq!(t["lost_by"]["app"], "box-2");
    let late = v.anomaly(AnomalyClass::WriteAfterLeaseExpiry).unwrap();
    assert_eq!(late.evidence["boxes"][0]["expired_at_time"], "22:25:10.0");
    assert_eq!(late.evidence["boxes"][0]["last_write_time"], "22:26:21.0");
    assert_eq!(late.evidence["boxes"][0]["seconds_after_expiry"], 71.0);
    let stale = v.anomaly(AnomalyClass::StaleTokenWrite).unwrap();
    assert_eq!(stale.evidence["writes"][0]["newer_token"], 18);
    assert_eq!(stale.evidence["writes"][0]["newer_holder"], "box-3");
    let vacancy = v.anomaly(AnomalyClass::VacancyWindow).unwrap();
    assert_eq!(vacancy.evidence["windows"][0]["to_time"], "22:25:44.0");
    let summary = v.summary(&record(&data_dir().join("april-lease-only")).meta.clock);
    assert!(summary.starts_with("INVALID"), "{summary}");
    assert!(
        summary.contains("box-2 wrote for 71 s after its lease (token 17) expired at 22:25:10.0"),
        "{summary}"
    );
    assert_eq!(v.stats.grants[1].time, "22:25:44.0");
}

/// The fenced twin: the same night is valid; the refusal and the Tuesday cleanup are reported.
#[test]
fn april_fenced() {
    let v = case("april-fenced");
    let refused = v.anomaly(AnomalyClass::StaleWriteRefused).unwrap();
    assert_eq!(refused.evidence["refusals"][0]["box"], "box-2");
    assert_eq!(refused.evidence["refusals"][0]["token"], 17);
    assert_eq!(refused.evidence["refusals"][0]["shard_token"], 18);
    let dup = v.anomaly(AnomalyClass::DuplicatedRows).unwrap();
    assert_eq!(dup.evidence["turbines"][0]["turbine"], "AP-0163");
    assert!(v
        .summary(&record(&data_dir().join("april-fenced")).meta.clock)
        .starts_with("VALID"));
}

#[test]
fn stale_token_write_alone() {
    let v = case("stale-token-write-alone");
    let w = &v.anomaly(AnomalyClass::StaleTokenWrite).unwrap().evidence["writes"][0];
    assert_eq!(
        (
            w["box"].as_str(),
            w["token"].as_i64(),
            w["newer_token"].as_i64(),
            w["shard"].as_str()
        ),
        (Some("box-1"), Some(5), Some(6), Some("shard2"))
    );
}

#[test]
fn equal_commit_timestamps() {
    case("equal-commit-timestamps");
}

#[test]
fn write_at_expiry_instant() {
    case("write-at-expiry-instant");
}

#[test]
fn history_cut_short() {
    case("history-cut-short");
}

/// Issue #14's example: box 2's renewal with token 17, committed after box 3's
/// grant 18, renews grant 17 (not a third grant, not 18) and overlaps 18.
#[test]
fn overlapping_grants_late_renewal() {
    let v = case("overlapping-grants-late-renewal");
    let a = v.anomaly(AnomalyClass::OverlappingGrants).unwrap();
    let o = &a.evidence["overlaps"][0];
    assert_eq!(
        (
            o["earlier"]["holder"].as_str(),
            o["earlier"]["token"].as_i64()
        ),
        (Some("box-2"), Some(17))
    );
    assert_eq!(
        (o["later"]["holder"].as_str(), o["later"]["token"].as_i64()),
        (Some("box-3"), Some(18))
    );
    assert_eq!(o["how"], "renewed-after-newer-grant");
    assert_eq!(o["from_time"], "22:00:30.0");
    assert_eq!(o["other_expiry_time"], "22:00:45.0");
    assert_eq!(o["overlap_s"], 10.0);
    assert_eq!(v.stats.grants.len(), 2);
}

#[test]
fn overlapping_grants_early_grant() {
    let v = case("overlapping-grants-early-grant");
    let a = v.anomaly(AnomalyClass::OverlappingGrants).unwrap();
    let o = &a.evidence["overlaps"][0];
    assert_eq!(o["how"], "granted-while-unexpired");
    assert_eq!(o["later"]["granted_time"], "22:00:15.0");
    assert_eq!(o["other_expiry_time"], "22:00:20.0");
    assert_eq!(o["overlap_s"], 5.0);
    assert!(a.summary.contains("box-2 was granted token 6 at 22:00:15.0 while box-1's token 5 was valid until 22:00:20.0"), "{}", a.summary);
}

/// An unattributed write is a class with evidence, and the verdict says what to set.
#[test]
fn unattributed_writes_say_what_to_set() {
    let v = case("unattributed-no-application-name");
    let a = v.anomaly(AnomalyClass::UnattributedWrite).unwrap();
    assert_eq!(a.evidence["writes"][0]["why"], "no-application-name");
    assert_eq!(a.evidence["harmful"], 0);
    assert!(v
        .reasons
        .iter()
        .all(|r| r.contains("set CHAOS_BOX as application_name")));
    let v = case("unattributed-unknown-token");
    let a = v.anomaly(AnomalyClass::UnattributedWrite).unwrap();
    let w = &a.evidence["writes"][0];
    assert_eq!(
        (w["token"].as_i64(), w["harm"]["newer_token"].as_i64()),
        (Some(4), Some(6))
    );
    assert!(
        v.reasons
            .iter()
            .any(|r| r.contains("which the routing db never handed out")
                && r.contains("the token claim_acquire returned")),
        "{:?}",
        v.reasons
    );
    // The same writes in a run whose lock was etcd: the reason names etcd and its token, not
    // the routing db's claim_acquire.
    let dir = data_dir().join("unattributed-unknown-token");
    let mut rec = record(&dir);
    rec.meta.mover.insert("lock".into(), "etcd".into());
    let v = check_streamed(&history_text(&dir), &rec);
    assert!(
        v.reasons
            .iter()
            .any(|r| r.contains("which etcd never handed out")
                && r.contains("the owner key's revision"))
            && v.reasons
                .iter()
                .all(|r| !r.contains("routing db") && !r.contains("claim_acquire")),
        "{:?}",
        v.reasons
    );
}

#[test]
fn phantom_rows_name_shard_turbine_and_range() {
    let v = case("phantom-rows-planted");
    let t = &v.anomaly(AnomalyClass::PhantomRows).unwrap().evidence["turbines"];
    let t1 = t
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["turbine"] == "T1")
        .unwrap();
    assert_eq!(
        (t1["shard"].as_str(), t1["readings"].as_u64()),
        (Some("shard1"), Some(1))
    );
    assert_eq!(t1["first_time"], "22:00:20.0");
    let t9 = t
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["turbine"] == "T9")
        .unwrap();
    assert_eq!(
        (t9["shard"].as_str(), t9["readings"].as_u64()),
        (Some("shard2"), Some(3))
    );
    assert_eq!(
        (t9["first_time"].as_str(), t9["last_time"].as_str()),
        (Some("22:00:40.0"), Some("22:00:44.0"))
    );
    assert_eq!(t9["known_turbine"], false);
}

#[test]
fn corrupt_rows_are_dated_by_the_copy_that_wrote_them() {
    let v = case("corrupt-rows-changed-values");
    let r = &v.anomaly(AnomalyClass::CorruptRows).unwrap().evidence["rows"][0];
    assert_eq!(
        (
            r["shard"].as_str(),
            r["turbine"].as_str(),
            r["wrong"].as_i64()
        ),
        (Some("shard2"), Some("T1"), Some(600))
    );
    assert_eq!(r["first_wrong_time"], "21:50:00.0");
    assert_eq!(r["inserted_by"]["time"], "22:00:06.0");
}

#[test]
fn misplaced_beside_owner() {
    let v = case("misplaced-beside-owner");
    let t = &v.anomaly(AnomalyClass::MisplacedRows).unwrap().evidence["turbines"][0];
    assert_eq!(t["stray_shards"], serde_json::json!(["shard3"]));
    assert_eq!(t["owner_holds_some"], true);
}

/// Prints the April summaries (`cargo test -p chaos-checkers --test cases -- --nocapture april_summaries`).
#[test]
fn april_summaries() {
    for name in ["april-lease-only", "april-fenced"] {
        let rec = record(&data_dir().join(name));
        let summary = check(&rec).summary(&rec.meta.clock);
        println!("{name}:\n{summary}");
        let v = check(&rec);
        let lines = 1 + v.anomalies.len() + v.reached.len().max(1);
        assert_eq!(summary.lines().count(), lines);
    }
}

/// Issue 31: the processor's ledger not read at the end proves no payout missed: the
/// finding is information, says why, and the run is unknown.
#[test]
fn payout_ledger_unreadable() {
    let v = case("payout-ledger-unreadable");
    let missed = v.anomaly(AnomalyClass::MissedPayout).unwrap();
    assert!(
        missed
            .summary
            .contains("the processor's ledger may hold these payments"),
        "{}",
        missed.summary
    );
    assert!(v
        .reasons
        .iter()
        .any(|r| r.contains("final state incomplete")));
}

/// Issue 31: with no event in the history every reading on the shards was reported
/// phantom (error); nothing observed accuses nothing.
#[test]
fn mover_empty_history_ingested_rows() {
    let v = case("mover-empty-history-ingested-rows");
    let phantom = v.anomaly(AnomalyClass::PhantomRows).unwrap();
    assert!(
        phantom.summary.contains("an empty history"),
        "{}",
        phantom.summary
    );
    assert_eq!(v.valid, chaos_checkers::Validity::Unknown);
}

/// Issue 31: a refusal written twice is one refusal, shuffled or not.
#[test]
fn objects_lines_doubled() {
    for name in ["objects-lines-doubled", "objects-lines-shuffled"] {
        let v = case(name);
        let refused = v.anomaly(AnomalyClass::StaleWriteRefused).unwrap();
        let shards: Vec<&str> = refused.evidence["refusals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["shard"].as_str().unwrap())
            .collect();
        assert_eq!(
            shards,
            ["shard1", "shard2"],
            "{name}: in time order, once each"
        );
    }
}
