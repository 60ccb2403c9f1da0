//! The damage a crash, a copy or a foreign program does to a history's lines, as transforms of its text: shuffled (each line keeps its `index` and `time_ns`), each answer written before its invoke, every line written twice. A checker must give the same verdict after each (`cases.rs`, `failover_cases.rs`). Also what both read of an `expect.json`'s `reached`.

use chaos_checkers::Verdict;
use serde_json::Value;

/// A history's non-blank lines, and its torn last line apart (a torn line stays last).
pub fn split(text: &str) -> (Vec<String>, Option<String>) {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let torn = match lines.last() {
        Some(l) if serde_json::from_str::<Value>(l).is_err() => lines.pop(),
        _ => None,
    };
    (lines, torn)
}

/// splitmix64, so a shuffle is the same on every machine.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The lines in a seeded random order (Fisher-Yates).
pub fn shuffled(lines: &[String], seed: u64) -> Vec<String> {
    let mut out = lines.to_vec();
    let mut state = seed;
    for i in (1..out.len()).rev() {
        let j = (next(&mut state) % (i as u64 + 1)) as usize;
        out.swap(i, j);
    }
    out
}

/// Each invoke's line swapped with its process's next answer: every `ok` (or `fail`,
/// `info`) written before its `invoke`.
pub fn answers_first(lines: &[String]) -> Vec<String> {
    let mut out = lines.to_vec();
    let field = |l: &str, k: &str| -> String {
        serde_json::from_str::<Value>(l).unwrap()[k]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let mut i = 0;
    while i < out.len() {
        if field(&out[i], "type") == "invoke" {
            let process = field(&out[i], "process");
            let answer = (i + 1..out.len()).find(|&j| {
                field(&out[j], "process") == process && field(&out[j], "type") != "invoke"
            });
            if let Some(j) = answer {
                out.swap(i, j);
            }
        }
        i += 1;
    }
    out
}

/// Every line written twice in a row.
pub fn doubled(lines: &[String]) -> Vec<String> {
    lines.iter().flat_map(|l| [l.clone(), l.clone()]).collect()
}

/// The lines as a history file's text, the torn line last.
pub fn join(lines: &[String], torn: &Option<String>) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    if let Some(t) = torn {
        text.push_str(t);
    }
    text
}

/// What a verdict says, without the figures that count lines: its validity, reasons and
/// every anomaly's class, severity, count and first time (a line written twice may count
/// twice in `events`, never in a finding).
pub fn findings(v: &Verdict) -> Value {
    serde_json::json!({
        "valid": v.valid,
        "reasons": v.reasons,
        "anomalies": v.anomalies.iter().map(|a| serde_json::json!({
            "class": a.class, "severity": a.severity, "count": a.count,
            "first": a.first_scenario_time,
        })).collect::<Vec<_>>(),
        "reached": v.reached.iter().map(|r| serde_json::json!({
            "moment": r.moment, "count": r.count, "first": r.first_scenario_time,
        })).collect::<Vec<_>>(),
    })
}

/// Every way the transformed histories' verdicts differ from the original's: `judge` takes
/// a history's text. Shuffled and answers-first must give the very same verdict; doubled
/// the same findings.
pub fn differences(text: &str, judge: &dyn Fn(&str) -> Verdict) -> Vec<String> {
    let (lines, torn) = split(text);
    let original = judge(text);
    // A history that already repeats lines: a repeat torn from its twin may count twice in
    // the figures, never in a finding.
    let repeats = lines.len() > lines.iter().collect::<std::collections::HashSet<_>>().len();
    let mut out = Vec::new();
    let mut same = |name: &str, lines: Vec<String>, whole: bool| {
        let got = judge(&join(&lines, &torn));
        let differs = match whole && !repeats {
            true => got != original,
            false => findings(&got) != findings(&original),
        };
        if differs {
            out.push(format!(
                "{name}: {} (original {})",
                findings(&got),
                findings(&original)
            ));
        }
    };
    for seed in [1, 2, 3] {
        same(
            &format!("shuffled (seed {seed})"),
            shuffled(&lines, seed),
            true,
        );
    }
    same("answers before invokes", answers_first(&lines), true);
    same("every line twice", doubled(&lines), false);
    out
}

/// A history's text as events, and whether its last line is torn (as `History::read` says).
pub fn ops(text: &str) -> (Vec<chaos_history::Op>, bool) {
    let (lines, torn) = split(text);
    let ops = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (ops, torn.is_some())
}

/// `reached` in `expect.json`: every moment the run must reach with its first scenario time,
/// and no other (absent: not checked).
pub fn reached_mismatches(verdict: &Verdict, expect: &Value) -> Vec<String> {
    let Some(want) = expect.get("reached").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for r in &verdict.reached {
        match want.get(r.moment.name()) {
            None => out.push(format!("unexpected reached {} ({})", r.moment, r.summary)),
            Some(first) if first != &r.first_scenario_time => out.push(format!(
                "reached {}: first {}, want {first}",
                r.moment, r.first_scenario_time
            )),
            Some(_) => {}
        }
    }
    for name in want.keys() {
        if !verdict.reached.iter().any(|r| r.moment.name() == name) {
            out.push(format!("never reached {name}"));
        }
    }
    out
}
