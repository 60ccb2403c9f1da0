//! The April night and the GC pause, end to end on the process backend: real Postgres, real movers, real signals; each variant's figures asserted from its verdict.json.

mod common;

use common::*;
use serde_json::Value;
use std::sync::Mutex;

/// One scenario at a time: they are paced in real time on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

/// Scenario ms since midnight for "HH:MM:SS".
fn at(hms: &str) -> i64 {
    let p: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    (p[0] * 3600 + p[1] * 60 + p[2]) * 1000
}

struct Outcome {
    code: Option<i32>,
    verdict: Value,
    stats: Value,
    history: String,
}

fn run(scenario: &str, extra: &[&str], expect: &str) -> Outcome {
    require_mover();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir(&format!("{scenario}{}", extra.join("")));
    let mut args = vec!["run", scenario, "--expect", expect];
    args.extend_from_slice(extra);
    let out = run_chaos(&args, &dir.join("data"), &dir.join("results"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stderr}");
    let run = latest_run(&dir.join("results"), scenario);
    let verdict = read_json(&run.join("verdict.json"));
    let stats = verdict["stats"].clone();
    let history = std::fs::read_to_string(run.join("history.jsonl")).unwrap();
    assert_none_left(&dir.join("data").display().to_string(), 10);
    Outcome { code: out.status.code(), verdict, stats, history }
}

fn grant(stats: &Value, i: usize) -> (String, i64, i64) {
    let g = &stats["grants"][i];
    (g["holder"].as_str().unwrap_or("").to_string(), g["token"].as_i64().unwrap_or(-1), g["scenario_ms"].as_i64().unwrap_or(-1))
}

fn within(what: &str, value: f64, lo: f64, hi: f64) {
    assert!(value >= lo && value <= hi, "{what} = {value}, expected {lo}..={hi}");
}

fn classes(v: &Value) -> Vec<String> {
    v["anomalies"].as_array().unwrap().iter().map(|a| a["class"].as_str().unwrap().to_string()).collect()
}

#[test]
fn april_lease_only_loses_one_turbine_the_way_it_happened() {
    let o = run("april", &[], "invalid");
    assert_eq!(o.code, Some(0), "--expect invalid turns the expected finding into exit 0");
    assert_eq!(o.verdict["valid"], "invalid");
    let s = &o.stats;
    let (holder, token, t) = grant(s, 0);
    assert_eq!((holder.as_str(), token), ("box-2", 17), "box 2 wins the race with token 17");
    assert!(t < at("21:40:30"), "box 2 wins at 21:40 (got {t})");
    let moved = s["turbines_moved_before_first_vacancy"].as_f64().unwrap_or(-1.0);
    within("turbines moved before the outage", moved, 105.0, 108.0);
    let takeover = (1..s["grants"].as_array().unwrap().len()).map(|i| grant(s, i)).find(|g| g.0 != "box-2").expect("a second box takes over");
    assert_eq!((takeover.0.as_str(), takeover.1), ("box-3", 18), "box 3 takes over with token 18");
    within("takeover time", takeover.2 as f64, at("22:25:40") as f64, at("22:25:52") as f64);
    within("vacancy (longest window, s)", s["vacancy_max_s"].as_f64().unwrap(), 28.0, 42.0);
    within("box 2's writes after its lease expired (s)", s["writes_after_expiry_s"]["box-2"].as_f64().unwrap_or(0.0), 60.0, 85.0);
    let lost = s["lost_turbines"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "exactly one turbine lost whole: {lost:?}");
    assert!(classes(&o.verdict).contains(&"lost-rows".to_string()));
    assert!(o.history.contains("\"why\":\"tidy-up\""), "box 2's tidy-up delete is in the history");
}

#[test]
fn april_with_fencing_loses_nothing_and_names_the_refusal() {
    let o = run("april", &["--fencing", "on"], "valid");
    assert_eq!(o.code, Some(0), "verdict: {}", o.verdict);
    assert_eq!(o.verdict["valid"], "valid");
    let s = &o.stats;
    assert_eq!(grant(s, 0).0, "box-2");
    assert_eq!(s["rows_lost"].as_u64(), Some(0), "nothing lost");
    assert!(s["lost_turbines"].as_array().unwrap().is_empty());
    assert!(s["refused_writes"].as_u64().unwrap_or(0) >= 1, "box 2's stale write is refused");
    assert!(o.history.contains("\"reason\":\"fenced\"") && o.history.contains("\"token\":17"), "the refusal names token 17");
    assert!(s["duplicated_readings"].as_u64().unwrap_or(0) > 0, "the half-copied duplicate is reported as cleanup");
    assert!(classes(&o.verdict).contains(&"duplicated-rows".to_string()));
    assert_eq!(s["stale_writes_accepted"].as_u64(), Some(0));
}

#[test]
fn gc_pause_lease_only_loses_data() {
    let o = run("gc-pause", &[], "invalid");
    assert_eq!(o.code, Some(0));
    assert_eq!(o.verdict["valid"], "invalid");
    let s = &o.stats;
    assert_eq!(grant(s, 0), (grant(s, 0).0.clone(), 7, grant(s, 0).2), "the first grant is epoch 7");
    assert!(s["rows_lost"].as_u64().unwrap_or(0) > 0, "the paused holder's tidy-up destroys the new holder's copy");
    assert!(o.history.contains("\"f\":\"pause\""), "the pause is in the history");
}

#[test]
fn gc_pause_with_fencing_refuses_epoch_7_after_8() {
    let o = run("gc-pause", &["--fencing", "on"], "valid");
    assert_eq!(o.code, Some(0), "verdict: {}", o.verdict);
    let s = &o.stats;
    assert_eq!(s["rows_lost"].as_u64(), Some(0));
    let refused = o.history.lines().find(|l| l.contains("\"reason\":\"fenced\"")).expect("a refused write");
    assert!(refused.contains("\"token\":7") && refused.contains("\"shard_token\":8"), "epoch 7 refused after 8: {refused}");
}
