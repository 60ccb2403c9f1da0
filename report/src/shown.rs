//! JSON values a person reads (checker stats, anomaly evidence, harness figures) rendered as HTML: times as scenario times, durations with their unit, lists as lists, records as tables; never raw JSON.
//!
//! A value's unit comes from its key (`_scenario_ms` a scenario time, `_s` and `seconds`
//! scenario seconds, `_real_ms` real milliseconds, `_us` microseconds), or from the key of
//! the object holding it (`writes_after_expiry_s: {box-2: 71.0}`). A key with a `_time`
//! sibling (`plan_finished_time` beside `plan_finished_scenario_ms`) shows that text only.
//! Everything is bounded: long lists say how many more there are and that `verdict.json`
//! holds them all.

use crate::html::{count, esc, time};
use serde_json::{Map, Value};
use std::fmt::Write;

/// Scalars of a list shown before "… and N more".
const LIST_MAX: usize = 24;
/// Records of a list shown as table rows before "… and N more".
const ROWS_MAX: usize = 30;

/// The unit a key gives its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Scenario ms since midnight: shown as `HH:MM:SS.s`.
    ScenarioTime,
    /// Scenario seconds.
    Seconds,
    /// Real milliseconds (the harness's own measurements).
    RealMs,
    /// Real microseconds.
    Micros,
    /// Parts per million.
    Ppm,
    /// A count or an identifier: as it is.
    Plain,
}

/// The unit of `key` (`None`: it says none, the holder's may apply).
pub(crate) fn unit_of(key: &str) -> Option<Unit> {
    let k = key.to_ascii_lowercase();
    if k == "scenario_ms" || k.ends_with("_scenario_ms") || k == "scheduled_ms" {
        Some(Unit::ScenarioTime)
    } else if k.ends_with("_us") {
        Some(Unit::Micros)
    } else if k.ends_with("real_ms") || k.ends_with("_ms_real") {
        Some(Unit::RealMs)
    } else if k.ends_with("_ppm") {
        Some(Unit::Ppm)
    } else if k.ends_with("_s") || k == "seconds" || k.starts_with("seconds_") || k == "s" {
        Some(Unit::Seconds)
    } else if k.ends_with("_ms") || k.ends_with("_count") || k.ends_with("_ts_ms") {
        Some(Unit::Plain)
    } else {
        None
    }
}

/// A key as a label: `vacancy_total_s` reads "vacancy total", `plan_finished_scenario_ms`
/// "plan finished".
pub(crate) fn label(key: &str) -> String {
    let mut k = key;
    for suffix in ["_scenario_ms", "_real_ms", "_us", "_ppm", "_s"] {
        if let Some(stem) = k.strip_suffix(suffix) {
            k = stem;
            break;
        }
    }
    k.replace('_', " ")
}

/// Keys not shown because a sibling says the same thing for a person: `X_scenario_ms` and
/// `X_ts_ms` beside `X_time`, `scenario_ms` beside `time`.
fn shadowed(key: &str, siblings: &Map<String, Value>) -> bool {
    let stem = key
        .strip_suffix("_scenario_ms")
        .or_else(|| key.strip_suffix("_ts_ms"))
        .map(|s| format!("{s}_time"))
        .or_else(|| (key == "scenario_ms").then(|| "time".to_string()));
    stem.is_some_and(|t| siblings.get(&t).is_some_and(Value::is_string))
}

/// A number in its unit.
fn number(v: &serde_json::Number, unit: Unit) -> String {
    let f = v.as_f64().unwrap_or(0.0);
    match unit {
        Unit::ScenarioTime => time(f as i64),
        Unit::Seconds => format!("{} s", trim(f, if f.abs() >= 100.0 { 1 } else { 3 })),
        Unit::RealMs => format!("{} real ms", trim(f, 2)),
        Unit::Micros => format!("{} µs", trim(f, 1)),
        Unit::Ppm => format!("{} ppm", trim(f, 1)),
        Unit::Plain => match v.as_u64() {
            Some(n) => count(n),
            None => trim(f, 3),
        },
    }
}

/// A float with at most `places` decimals and no trailing zeros (`-0` is `0`).
fn trim(f: f64, places: usize) -> String {
    let s = format!("{:.*}", places, f + 0.0);
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// One value as HTML, under `key` (its unit, or `inherited` when the key says none).
pub(crate) fn value(key: &str, v: &Value, inherited: Unit) -> String {
    let unit = unit_of(key).unwrap_or(inherited);
    match v {
        Value::Null => "–".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Number(n) => number(n, unit),
        Value::String(s) => esc(s).into_owned(),
        Value::Array(items) => list(items, unit),
        Value::Object(map) => record_inline(map, unit),
    }
}

/// A list: scalars comma-separated, records as a table; bounded either way.
fn list(items: &[Value], unit: Unit) -> String {
    if items.is_empty() {
        return "none".into();
    }
    if items.iter().all(Value::is_object) {
        return table(items, unit);
    }
    let mut shown: Vec<String> = items
        .iter()
        .take(LIST_MAX)
        .map(|v| value("", v, unit))
        .collect();
    if items.len() > LIST_MAX {
        shown.push(format!(
            "… and {} more (all in verdict.json)",
            count((items.len() - LIST_MAX) as u64)
        ));
    }
    shown.join(", ")
}

/// A record inside a line: `app box-2 · rows 31 536 041 · shard shard3`.
fn record_inline(map: &Map<String, Value>, unit: Unit) -> String {
    if map.is_empty() {
        return "–".into();
    }
    map.iter()
        .filter(|(k, _)| !shadowed(k, map))
        .map(|(k, v)| format!("{} {}", esc(&label(k)), value(k, v, unit)))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// Records as a table: a column per key (in first-seen order), a row per record.
fn table(rows: &[Value], unit: Unit) -> String {
    let mut keys: Vec<&str> = Vec::new();
    for r in rows.iter().take(ROWS_MAX) {
        if let Some(m) = r.as_object() {
            for k in m.keys() {
                if !keys.contains(&k.as_str()) && !shadowed(k, m) {
                    keys.push(k);
                }
            }
        }
    }
    let mut out = String::from("<table class=\"rec\"><thead><tr>");
    for k in &keys {
        let _ = write!(out, "<th>{}</th>", esc(&label(k)));
    }
    out.push_str("</tr></thead><tbody>");
    for r in rows.iter().take(ROWS_MAX) {
        out.push_str("<tr>");
        for k in &keys {
            let cell = r.get(*k).map_or_else(String::new, |v| value(k, v, unit));
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    if rows.len() > ROWS_MAX {
        let _ = write!(
            out,
            "<div class=\"note\">… and {} more (all in verdict.json)</div>",
            count((rows.len() - ROWS_MAX) as u64)
        );
    }
    out
}

/// Whether a value says nothing happened (0, none, no): folded into one line.
fn is_nothing(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::String(s) => s.is_empty(),
    }
}

/// An object as a two-column table, every value rendered; `skip` keys left out, and the keys
/// whose value is nothing (0, none) named on one last line instead of a row each.
pub(crate) fn kv_table(map: &Map<String, Value>, skip: &[&str]) -> String {
    let mut out = String::from("<table class=\"kv\">");
    let mut nothing = Vec::new();
    for (k, v) in map {
        if skip.contains(&k.as_str()) || shadowed(k, map) {
            continue;
        }
        if is_nothing(v) {
            nothing.push(label(k));
            continue;
        }
        let _ = write!(
            out,
            "<tr><th title=\"{}\">{}</th><td>{}</td></tr>",
            esc(k),
            esc(&label(k)),
            value(k, v, Unit::Plain)
        );
    }
    if !nothing.is_empty() {
        let _ = write!(
            out,
            "<tr><th>zero or none</th><td class=\"note\">{}</td></tr>",
            esc(&nothing.join(", "))
        );
    }
    out.push_str("</table>");
    out
}

/// Any value as a block: an object as [`kv_table`], anything else as one rendered line.
pub(crate) fn block(v: &Value) -> String {
    match v {
        Value::Object(map) => kv_table(map, &[]),
        other => format!("<div>{}</div>", value("", other, Unit::Plain)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_durations_and_lists_are_rendered_never_raw_json() {
        let grants = json!([
            {"holder": "box-2", "token": 17, "scenario_ms": 78_000_727, "time": "21:40:00.7",
             "last_expiry_scenario_ms": 80_711_169, "released": false}
        ]);
        let t = value("grants", &grants, Unit::Plain);
        assert!(t.contains("<th>holder</th><th>last expiry</th>"), "{t}");
        assert!(t.contains("<td>21:40:00.7</td>"), "{t}");
        assert!(
            t.contains("<td>22:25:11.1</td>"),
            "last expiry as a time: {t}"
        );
        assert!(!t.contains("80711169") && !t.contains('{'), "{t}");
        assert!(!t.contains("<th>scenario ms</th>"), "shadowed by time: {t}");
        assert_eq!(
            value(
                "writes_after_expiry_s",
                &json!({"box-2": 77.545}),
                Unit::Plain
            ),
            "box-2 77.545 s"
        );
        assert_eq!(
            value("lost_turbines", &json!(["AP-0161", "AP-0162"]), Unit::Plain),
            "AP-0161, AP-0162"
        );
        assert_eq!(
            value("overlapping_grants_s", &json!(-0.0), Unit::Plain),
            "0 s"
        );
        assert_eq!(
            value("fault_lag_real_us", &json!(5570), Unit::Plain),
            "5570 µs"
        );
        let many: Vec<String> = (0..100).map(|i| format!("o-{i:06}")).collect();
        let l = value("orders", &json!(many), Unit::Plain);
        assert!(l.ends_with("… and 76 more (all in verdict.json)"), "{l}");
    }

    #[test]
    fn a_stats_table_folds_its_zeros_and_shadowed_keys() {
        let stats = json!({"events": 11845, "corrupt_rows": 0, "payments": 0,
            "plan_finished_scenario_ms": 81_406_000, "plan_finished_time": "22:36:46.0",
            "ungranted_writes": 0, "vacancy_total_s": 36.917});
        let t = kv_table(stats.as_object().unwrap(), &["ungranted_writes"]);
        assert!(t.contains(">vacancy total</th><td>36.917 s<"), "{t}");
        assert!(t.contains(">plan finished time</th><td>22:36:46.0<"), "{t}");
        assert!(!t.contains("81406000") && !t.contains("ungranted"), "{t}");
        assert!(
            t.contains("zero or none</th><td class=\"note\">corrupt rows, payments<"),
            "{t}"
        );
        assert!(t.contains("11\u{2009}845"), "{t}");
    }
}
