//! The failover run's `report.html`: the verdict, the figures that answer the brief (lost orders and why, the two-primaries window, the unavailability paid), the timeline with a lane per primary, the story, every anomaly with its evidence, the settings.

use super::{lanes, moments, Input};
use crate::html::{esc, time};
use chaos_checkers::failover::{FailoverStats, Timeline};
use chaos_checkers::{Severity, Validity};
use std::fmt::Write;

const CSS: &str = "body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1200px}\
header{display:flex;justify-content:space-between;align-items:center}\
.verdict{font-size:1.6em;font-weight:bold;padding:.2em .6em;border-radius:.3em}\
.v-valid{background:#cfc}.v-invalid{background:#fcc}.v-unknown{background:#ffc}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}\
pre{background:#f6f6f6;padding:.5em;overflow:auto;max-height:24em}table.rec{font-size:.9em}.note{color:#555}.error{color:#b00}.info{color:#555}";

/// The whole page.
pub fn render(input: &Input) -> String {
    let m = input.meta;
    let timeline = Timeline::of(m, input.history);
    let word = match input.verdict.valid {
        Validity::Valid => "valid",
        Validity::Invalid => "invalid",
        Validity::Unknown => "unknown",
    };
    let mut p = String::with_capacity(64 * 1024);
    let _ = write!(
        p,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} seed {} — {word}</title><style>{CSS}</style></head><body>\n\
         <header><div><h1>{}</h1><div>seed <b>{}</b> · {} · fence <b>{}</b> · silence <b>{} s</b> · check every {} s · {} replication · {} – {}</div></div>\
         <div class=\"verdict v-{word}\">{word}</div></header>\n",
        esc(&m.scenario),
        m.seed,
        esc(&m.scenario),
        m.seed,
        esc(&m.watcher),
        esc(&m.fence),
        m.silence_ms as f64 / 1000.0,
        m.check_ms as f64 / 1000.0,
        if m.synchronous { "synchronous" } else { "asynchronous" },
        time(m.clock.start_scenario_ms),
        time(m.end_scenario_ms),
    );
    for r in &input.verdict.reasons {
        let _ = writeln!(p, "<p><b>Why unknown:</b> {}</p>", esc(r));
    }
    if let Some(st) = &input.verdict.stats.failover {
        figures(&mut p, st);
    }
    p.push_str("<h2>Timeline</h2>\n");
    p.push_str(&lanes::svg(input, &timeline));
    p.push_str("<p class=\"info\">Server lanes: blue a primary, grey a standby, black down; the green strip while the app could reach it as a primary; a tick per order it committed itself (red: lost). Red shading: both could accept writes. App lane: green acknowledged, red failed, orange uncertain; grey shading: no primary accepted its writes.</p>\n");
    p.push_str("<h2>Story</h2>\n<table>");
    for moment in moments(input) {
        let _ = write!(
            p,
            "<tr><td>{}</td><td>{}</td></tr>",
            time(moment.ms),
            esc(&moment.text)
        );
    }
    p.push_str("</table>\n<h2>Anomalies</h2>\n");
    if input.verdict.anomalies.is_empty() {
        p.push_str("<p>None.</p>\n");
    }
    for a in &input.verdict.anomalies {
        let class = if a.severity == Severity::Error {
            "error"
        } else {
            "info"
        };
        let _ = write!(
            p,
            "<h3 class=\"{class}\">{} ×{} ({:?}) at {}</h3><p>{}</p><details open><summary>evidence</summary>{}</details>",
            a.class.name(),
            a.count,
            a.severity,
            a.first_scenario_time.as_deref().unwrap_or("-"),
            esc(&a.summary),
            crate::shown::block(&a.evidence)
        );
    }
    if !input.figures.is_null() {
        let _ = write!(
            p,
            "<h2>Run figures</h2>{}",
            crate::shown::block(input.figures)
        );
    }
    p.push_str("<footer>chaos-report · all times are scenario times (HH:MM:SS.s); hover a mark for details</footer></body></html>\n");
    p
}

fn figures(p: &mut String, st: &FailoverStats) {
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
    let rows = [
        ("orders acknowledged / uncertain / failed", format!("{} / {} / {}", st.orders_acknowledged, st.orders_uncertain, st.orders_failed)),
        ("lost (acknowledged, not on the surviving primary)", format!("{} ({} not yet replicated at the promotion, {} accepted by the old primary after it, {} on neither)", st.lost_orders, st.lost_not_replicated, st.lost_after_promotion, st.lost_on_neither)),
        ("surviving primary", st.survivor.clone()),
        ("fence (app's way to the old primary cut)", or(&st.fence_time)),
        ("promotion", or(&st.promotion_time)),
        ("repoint (service record names the replica)", or(&st.repoint_time)),
        ("first write on the new primary", or(&st.first_write_new_primary_time)),
        ("last write the old primary accepted", format!("{} ({} after the promotion)", or(&st.last_write_old_primary_time), st.old_primary_writes_after_promotion)),
        ("two writable primaries", format!("{:.1} s; writes: old {}, new {}", st.two_primaries_s, st.two_primaries_writes_primary, st.two_primaries_writes_replica)),
        ("unavailability (no primary took the app's writes)", format!("{:.1} s in all, longest {:.1} s", st.unavailability_s, st.unavailability_max_s)),
        ("watcher check latency (real ms)", format!("{} checks; p50 {}, p99.9 {}, max {}", st.checks, ms(st.check_latency_p50_ms), ms(st.check_latency_p999_ms), ms(st.check_latency_max_ms))),
    ];
    p.push_str("<h2>Figures</h2><table>");
    for (k, v) in rows {
        let _ = write!(p, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    p.push_str("</table>\n");
}

fn ms(v: Option<f64>) -> String {
    v.map_or("—".into(), |x| format!("{x:.1}"))
}
