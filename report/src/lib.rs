//! What a person reads of a run, computed from its record alone: the self-contained `report.html` (verdict, timeline of who held the claim and what each box did, faults, vacancy, latency percentiles, settings), the story in scenario time ([`story()`], [`StoryFold`]) and the sweep's table and plot ([`sweep`]).
//!
//! Invariant: everything here is pure; [`render`] is a function of its
//! input. No IO, no clock, no network: the page carries its CSS and SVG
//! inline and opens from disk. The harness writes the files and prints the
//! story.
//!
//! Times are scenario times (the incident's clock), so an engineer reads the
//! report next to the April write-up.

/// A synthetic April run for the tests (not part of the library).
#[cfg(test)]
mod demo;
mod digest;
pub mod failover;
mod finding;
mod html;
mod latency;
mod model;
mod pace;
mod shown;
mod story;
mod svg;
pub mod sweep;

pub use digest::{builder::DigestBuilder, EventLookup, HistoryDigest};
pub use latency::{latency_table, process_class, LatencyRow};
pub use pace::{pace, Pace};
pub use story::{story, StoryFold};

use chaos_checkers::{Severity, Validity, Verdict};
use chaos_history::{Audit, RunMeta};
use html::{count, duration, esc, time};
use model::Model;
use std::fmt::Write;

/// What one report is made of. Everything is borrowed, and the history comes
/// as its digest ([`DigestBuilder`] aggregates it while it streams): a
/// nightly run may hold ten million events.
#[derive(Clone, Copy)]
pub struct ReportInput<'a> {
    pub meta: &'a RunMeta,
    pub history: &'a HistoryDigest,
    /// The events themselves, for the hover titles of the marks drawn one by
    /// one (a slice of `Op`s, or the harness reading `history.jsonl` back).
    pub events: &'a dyn EventLookup,
    pub audit: Option<&'a Audit>,
    pub verdict: &'a Verdict,
    /// Figures the harness adds (fault landing lag, wall time breakdown), shown as they are.
    pub extra: Option<&'a serde_json::Value>,
}

/// The whole `report.html`.
pub fn render(input: &ReportInput) -> String {
    let model = Model::build(
        input.meta,
        input.history,
        input.events,
        input.audit,
        input.verdict,
    );
    let mut page = String::with_capacity(256 * 1024);
    let title = format!(
        "{} seed {} — {}",
        input.meta.scenario,
        input.meta.seed,
        validity_word(input.verdict.valid)
    );
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{}</style></head><body>\n",
        esc(&title),
        CSS
    );
    page.push_str(PATTERNS);
    // The order a reader wants: the verdict and its errors in one glance, the key figures,
    // the timeline; then the tables, and the stats folded.
    header(&mut page, input, &model);
    finding::verdict(&mut page, input.verdict);
    if let Some(p) = pace(input.meta, input.history.latency()) {
        let _ = writeln!(
            page,
            "<div class=\"banner\"><b>Too slow for this scale:</b> {}</div>",
            esc(&p.line())
        );
    }
    if let Some(note) = story::lock_note(input.meta) {
        let _ = writeln!(
            page,
            "<div class=\"banner\"><b>No token:</b> {}</div>",
            esc(note)
        );
    }
    if let Some(line) = promotion(&model, input.events) {
        let _ = writeln!(
            page,
            "<div class=\"banner\"><b>Failover:</b> {}</div>",
            esc(&line)
        );
    }
    finding::figures(&mut page, input, &model);
    timelines(&mut page, &model);
    latencies(&mut page, input);
    settings(&mut page, input);
    finding::stats(&mut page, input.verdict);
    extra(&mut page, input.extra);
    let _ = write!(
        page,
        "<footer>chaos-report · {} history events · all times are scenario times (HH:MM:SS.s); hover a mark for details</footer>\n</body></html>\n",
        count(input.history.events())
    );
    page
}

/// The harness's sentinel promoting Redis's replica (its `promote` in the `sentinel` lane), in
/// the story's words.
fn promotion(model: &Model, events: &dyn EventLookup) -> Option<String> {
    let lane = model.others.iter().find(|l| l.name == "sentinel")?;
    let op = events.event(lane.ok.exact.first()?.src)?;
    if op.f != "promote" {
        return None;
    }
    let given = |k: &str| match op.value.get(k) {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    Some(story::promotion_line(
        given("why"),
        &given("target")?,
        given("holder"),
        given("counter"),
    ))
}

pub(crate) fn validity_word(v: Validity) -> &'static str {
    match v {
        Validity::Valid => "valid",
        Validity::Invalid => "invalid",
        Validity::Unknown => "unknown",
    }
}

pub(crate) fn severity_word(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Cleanup => "cleanup",
        Severity::Info => "info",
    }
}

fn header(page: &mut String, input: &ReportInput, model: &Model) {
    let meta = input.meta;
    let v = input.verdict.valid;
    // The run's end is when its movers stopped (or its time limit); the heals and the last
    // exits that follow are the wind-down, named apart rather than flagged as "outside".
    let wind_down = if model.t1 > meta.end_scenario_ms + 500 {
        format!(" · wind-down to <b>{}</b>", time(model.t1))
    } else {
        String::new()
    };
    let _ = writeln!(
        page,
        "<header><div class=\"title\"><h1>{}</h1><div class=\"sub\">seed <b>{}</b> · job <b>{}</b> · \
         scenario start <b>{}</b> · run ended <b>{}</b> ({} of scenario time){wind_down}</div></div>\
         <div class=\"verdict v-{w}\">{w}</div></header>",
        esc(&meta.scenario),
        meta.seed,
        esc(&meta.job),
        time(meta.clock.start_scenario_ms),
        time(meta.end_scenario_ms),
        duration(meta.end_scenario_ms - meta.clock.start_scenario_ms),
        w = validity_word(v),
    );
    if !meta.completed {
        let _ = writeln!(
            page,
            "<div class=\"banner\"><b>The run did not complete</b>: {}. The history may be cut short.</div>",
            esc(meta.incomplete_reason.as_deref().unwrap_or("no reason recorded"))
        );
    }
    match input.audit {
        None => page.push_str("<div class=\"banner\">No audit: the claim lane and the shard lanes are missing; only the clients' view is shown.</div>\n"),
        Some(a) if !a.complete => {
            let _ = writeln!(page, "<div class=\"banner\">The audit is incomplete: {} could not be read.</div>", esc(&a.missing.join(", ")));
        }
        _ => {}
    }
    if model.t0 < meta.clock.start_scenario_ms {
        let _ = writeln!(
            page,
            "<div class=\"note\">Events come before the run's start; the timeline spans {} – {}.</div>",
            time(model.t0),
            time(model.t1)
        );
    }
    let digest = input.history;
    if digest.outside() > 0 || model.audit_outside > 0 {
        let (a0, a1) = (digest.grid.a0, digest.grid.a1);
        let mut what = Vec::new();
        if digest.outside_before > 0 {
            what.push(format!("{} before it", count(digest.outside_before)));
        }
        if digest.outside_after > 0 {
            what.push(format!("{} after it", count(digest.outside_after)));
        }
        let range = digest
            .outside_range
            .map(|(lo, hi)| {
                format!(
                    "; their times run from {} to {} after the run's start",
                    duration_or_far(lo.saturating_sub(meta.clock.start_scenario_ms)),
                    duration_or_far(hi.saturating_sub(meta.clock.start_scenario_ms))
                )
            })
            .unwrap_or_default();
        let audit_rows = if model.audit_outside > 0 {
            format!(
                " {} audit row{} also fall{} outside it.",
                count(model.audit_outside),
                if model.audit_outside == 1 { "" } else { "s" },
                if model.audit_outside == 1 { "s" } else { "" }
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            page,
            "<div class=\"banner\"><b>{} history event{} outside the run's span</b> ({} – {}, the run with a margin): {}{range}. \
             They are counted here, not drawn, paired or timed.{audit_rows}</div>",
            count(digest.outside()),
            if digest.outside() == 1 { "" } else { "s" },
            time(a0),
            time(a1),
            what.join(", "),
        );
    }
}

/// A duration, or "far" words when it is beyond any run (an absurd timestamp).
fn duration_or_far(ms: i64) -> String {
    const YEAR_MS: i64 = 365 * 86_400_000;
    if ms.abs() >= 10 * YEAR_MS {
        format!("{:.3e} years", ms as f64 / YEAR_MS as f64)
    } else {
        duration(ms)
    }
}

/// A close-up of the moments that decide the verdict, when they are a small
/// part of the run: a 55-minute run is 2.75 s a pixel, and the April night's
/// crux is two minutes.
fn focus_window(model: &Model) -> Option<(i64, i64)> {
    let span = model.t1 - model.t0;
    let mut times: Vec<i64> = model
        .anomalies
        .iter()
        .filter(|a| a.severity == Severity::Error)
        .map(|a| a.t)
        .collect();
    times.extend(model.lost.iter().filter_map(|l| l.t));
    if times.is_empty() {
        times = model.anomalies.iter().map(|a| a.t).collect();
    }
    if times.is_empty() {
        // Refusals and tidy-ups, when they are few enough to be kept one by one.
        times = model
            .boxes
            .iter()
            .flat_map(|b| {
                b.refused
                    .exact
                    .iter()
                    .chain(&b.tidy_deletes.exact)
                    .map(|p| p.t)
            })
            .collect();
    }
    let lo = *times.iter().min()?;
    let mut hi = *times.iter().max()?;
    if hi - lo > 10 * 60_000 {
        hi = lo;
    }
    let (mut a, mut b) = (lo - 120_000, hi + 45_000);
    // Take in the faults and vacancies that led there, when they are short.
    let windows = model
        .faults
        .iter()
        .flat_map(|f| f.windows.exact.iter().map(|w| (w.start, w.end)));
    let vacancies = model.claim.iter().flat_map(|c| c.vacancies.iter().copied());
    for (s, e) in windows.chain(vacancies) {
        if e >= a && s <= b && e - s < 10 * 60_000 {
            a = a.min(s - 10_000);
            b = b.max(e + 10_000);
        }
    }
    let (a, b) = (a.max(model.t0), b.min(model.t1));
    (b > a && ((b - a) as f64) < 0.6 * span as f64).then_some((a, b))
}

fn timelines(page: &mut String, model: &Model) {
    let mut notes = Vec::new();
    page.push_str("<section><h2>Timeline</h2>");
    if let Some((a, b)) = focus_window(model) {
        let (svg, n) = svg::timeline(model, a, b, "tl-focus");
        let _ = write!(
            page,
            "<h3>Close-up: {} – {} ({}, {:.2} s a pixel)</h3><div class=\"tlwrap\">{svg}</div>",
            time(a),
            time(b),
            duration(b - a),
            (b - a) as f64 / 1000.0 / svg::PLOT_W
        );
        notes.extend(n.into_iter().map(|n| ("close-up", n)));
    }
    let (svg, n) = svg::timeline(model, model.t0, model.t1, "tl-full");
    let _ = write!(
        page,
        "<h3>Whole run: {} – {} ({}, {:.2} s a pixel)</h3><div class=\"tlwrap\">{svg}</div>",
        time(model.t0),
        time(model.t1),
        duration(model.t1 - model.t0),
        (model.t1 - model.t0) as f64 / 1000.0 / svg::PLOT_W
    );
    notes.extend(n.into_iter().map(|n| ("whole run", n)));
    page.push_str(LEGEND);
    if !notes.is_empty() {
        let _ = write!(
            page,
            "<div class=\"aggs\"><b>Aggregated</b> (more marks than the plot can separate; bars are densities per {} px, nothing is dropped, hover a bin for its count):<ul>",
            svg::BIN_PX
        );
        for (view, n) in notes {
            let _ = write!(
                page,
                "<li>{view}, {}: aggregated: {} {} in {} bins</li>",
                esc(&n.lane),
                count(n.events as u64),
                esc(&n.what),
                n.bins
            );
        }
        page.push_str("</ul></div>");
    }
    page.push_str("</section>\n");
}

fn latencies(page: &mut String, input: &ReportInput) {
    let rows = input.history.latency();
    page.push_str("<section><h2>Latency (scenario ms, invoke → completion)</h2>");
    let _ = write!(
        page,
        "<p class=\"note\">Lease {}: a renewal slower than the lease minus the renewal interval lets the claim lapse. \
         Scale: 1 scenario s = {} real ms. <i>open</i> = invoked, never completed (not in the percentiles).</p>",
        duration(input.meta.lease_ms),
        input.meta.clock.real_ns_per_scenario_s as f64 / 1e6
    );
    if rows.is_empty() {
        page.push_str("<p>No completed operations.</p></section>\n");
        return;
    }
    page.push_str(
        "<table class=\"lat\"><thead><tr><th>process</th><th>f</th><th>count</th><th>ok</th><th>fail</th><th>info</th><th>open</th>\
         <th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr></thead><tbody>",
    );
    for r in rows {
        let hot = if r.f == "renew" || r.f == "acquire" {
            " class=\"hot\""
        } else {
            ""
        };
        let _ = write!(
            page,
            "<tr{hot}><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&r.class),
            esc(&r.f),
            count(r.count),
            count(r.ok),
            count(r.fail),
            count(r.info),
            count(r.open),
            html::ms(r.p50_ms),
            html::ms(r.p90_ms),
            html::ms(r.p99_ms),
            html::ms(r.p999_ms),
            html::ms(r.max_ms)
        );
    }
    page.push_str("</tbody></table></section>\n");
}

fn settings(page: &mut String, input: &ReportInput) {
    let meta = input.meta;
    page.push_str("<section><h2>Settings</h2><div class=\"cols\"><div><h3>Mover switches</h3><table class=\"kv\">");
    if meta.mover.is_empty() {
        page.push_str("<tr><td>none recorded</td></tr>");
    }
    for (k, v) in &meta.mover {
        let _ = write!(
            page,
            "<tr><th>{}</th><td><code>{}</code></td></tr>",
            esc(k),
            esc(v)
        );
    }
    page.push_str("</table></div><div><h3>Lease, copy and clock</h3><table class=\"kv\">");
    let clock = meta.clock;
    let rows = [
        (
            "lease",
            format!(
                "{} scenario ({} real ms)",
                duration(meta.lease_ms),
                clock.real_ms_for_scenario_ms(meta.lease_ms)
            ),
        ),
        (
            "copy time per turbine",
            format!(
                "{} scenario ({} real ms)",
                duration(meta.copy_ms),
                clock.real_ms_for_scenario_ms(meta.copy_ms)
            ),
        ),
        (
            "time scale",
            format!(
                "1 scenario s = {} real ms",
                clock.real_ns_per_scenario_s as f64 / 1e6
            ),
        ),
        ("scenario start", time(clock.start_scenario_ms)),
        ("scenario end", time(meta.end_scenario_ms)),
        (
            "completed",
            if meta.completed {
                "yes".into()
            } else {
                format!("no: {}", meta.incomplete_reason.as_deref().unwrap_or("?"))
            },
        ),
        ("shards", meta.shards.join(", ")),
        ("turbines routed", meta.owners.len().to_string()),
        ("move plan", format!("{} turbines", meta.plan.len())),
        ("seeded histories", meta.seeded.len().to_string()),
        (
            "duplicates",
            if meta.strict_duplicates {
                "invalid (--strict-duplicates)".into()
            } else {
                "cleanup work".into()
            },
        ),
    ];
    for (k, v) in rows {
        let _ = write!(page, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    page.push_str("</table></div></div></section>\n");
}

/// The harness's own figures (wall time, fault landing, drift), folded, every value rendered.
fn extra(page: &mut String, extra: Option<&serde_json::Value>) {
    let Some(extra) = extra.filter(|e| !e.is_null()) else {
        return;
    };
    let _ = writeln!(
        page,
        "<section><details class=\"harness\"><summary>Harness figures (wall time in real seconds, fault landing, clock drift)</summary>{}</details></section>",
        shown::block(extra)
    );
}

/// Fill patterns shared by every SVG on the page (CSS refers to them by id).
const PATTERNS: &str = "<svg width=\"0\" height=\"0\" style=\"position:absolute\" aria-hidden=\"true\"><defs>\
<pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
<rect width=\"6\" height=\"6\" fill=\"#fde0dc\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d73027\" stroke-width=\"2.5\"/></pattern>\
<pattern id=\"stale\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(-45)\">\
<rect width=\"5\" height=\"5\" fill=\"#ffe0b2\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"5\" stroke=\"#d84315\" stroke-width=\"2\"/></pattern>\
</defs></svg>\n";

const LEGEND: &str = "<div class=\"legend\">\
<span><svg width=\"34\" height=\"14\"><g class=\"belief b1\"><rect x=\"1\" y=\"2\" width=\"32\" height=\"10\"/></g></svg>box believes it holds the claim (acquire ok → lost / release / done / last event)</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"stale\"><rect x=\"1\" y=\"2\" width=\"32\" height=\"10\"/></g></svg>…while the routing db did not back it (expired or another holder)</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"claim b2\"><rect x=\"1\" y=\"1\" width=\"32\" height=\"12\"/></g></svg>claim as the routing db saw it (holder #token)</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"vac\"><rect x=\"1\" y=\"1\" width=\"32\" height=\"12\"/></g></svg>vacancy: no valid claim</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"fault\"><rect x=\"1\" y=\"1\" width=\"32\" height=\"12\"/></g></svg>fault window (nemesis), faintly across all lanes</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"copy b1\"><rect x=\"1\" y=\"1\" width=\"32\" height=\"12\"/></g></svg>copy of one turbine (invoke → ok)</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"copy fail\"><rect x=\"1\" y=\"1\" width=\"15\" height=\"12\"/></g><g class=\"copy refusedcopy\"><rect x=\"18\" y=\"1\" width=\"15\" height=\"12\"/></g></svg>copy failed / refused by fencing</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"copy b1 lostcopy\"><rect x=\"2\" y=\"2\" width=\"30\" height=\"10\"/></g></svg>copy of a turbine whose rows were lost</span>\
<span><svg width=\"20\" height=\"14\"><path class=\"del\" d=\"M5 2h10l-5 10z\"/></svg>source delete</span>\
<span><svg width=\"20\" height=\"16\"><path class=\"tidy\" d=\"M3 1h14l-7 14z\"/></svg>tidy-up delete</span>\
<span><svg width=\"20\" height=\"14\"><path class=\"refused\" d=\"M10 1l6 6l-6 6l-6 -6z\"/></svg>write refused (fenced)</span>\
<span><svg width=\"20\" height=\"14\"><path class=\"failed\" d=\"M6 3l8 8m0 -8l-8 8\"/></svg>failed operation / renewal</span>\
<span><svg width=\"34\" height=\"14\"><g class=\"skip\"><rect x=\"1\" y=\"4\" width=\"32\" height=\"6\"/></g></svg>skips (turbines already moved), one bar per run</span>\
<span><svg width=\"20\" height=\"14\"><line class=\"renew\" x1=\"10\" y1=\"6\" x2=\"10\" y2=\"13\"/><line class=\"poll\" x1=\"15\" y1=\"2\" x2=\"15\" y2=\"12\"/></svg>renewal ok / poll (acquire lost)</span>\
<span><svg width=\"20\" height=\"14\"><circle class=\"acq\" cx=\"10\" cy=\"7\" r=\"4\"/></svg>acquire won</span>\
<span><svg width=\"20\" height=\"14\"><line class=\"lostl\" x1=\"10\" y1=\"0\" x2=\"10\" y2=\"14\"/></svg>turbine lost (from the verdict)</span>\
<span><svg width=\"20\" height=\"14\"><path class=\"sev-error\" d=\"M10 1l6 6l-6 6l-6 -6z\"/></svg>anomaly's first time (error / <span style=\"color:#e08a00\">cleanup</span> / <span style=\"color:#5b8db8\">info</span>)</span>\
</div>";

const CSS: &str = r#"
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2329;margin:0 auto;padding:18px 24px 40px;max-width:1560px;background:#fff}
header{display:flex;justify-content:space-between;align-items:center;gap:24px;border-bottom:2px solid #e3e6ea;padding-bottom:12px}
h1{font-size:26px;margin:0 0 4px} h2{font-size:19px;margin:26px 0 10px;border-bottom:1px solid #e3e6ea;padding-bottom:4px} h3{font-size:14px;margin:14px 0 6px;color:#444}
.sub{color:#555}
.verdict{font-size:46px;font-weight:800;letter-spacing:2px;text-transform:uppercase;padding:6px 26px;border-radius:10px;color:#fff}
.v-valid{background:#2e7d32}.v-invalid{background:#c62828}.v-unknown{background:#ef8f00}
.vt-valid{color:#2e7d32}.vt-invalid{color:#c62828}.vt-unknown{color:#ef8f00}
.banner{background:#fff4e5;border-left:4px solid #ef8f00;padding:8px 12px;margin:10px 0}
.banner ul{margin:4px 0}
.note{color:#555;font-size:13px}
.figs{display:flex;flex-wrap:wrap;gap:10px}
.fig{border:1px solid #e3e6ea;border-radius:8px;padding:8px 14px;min-width:150px;max-width:340px}
.fig .val{font-size:22px;font-weight:700}.fig .lab{font-size:12px;color:#555}
details summary{cursor:pointer;color:#2a5db0}
table{border-collapse:collapse;font-size:13px}
th,td{padding:4px 10px;border-bottom:1px solid #eceff2;text-align:left;vertical-align:top}
thead th{background:#f4f6f8;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.kv th{font-weight:600;color:#333;white-space:nowrap}
table.kv pre{margin:0}
pre{font-size:12px;background:#f6f8fa;padding:8px;border-radius:6px;max-height:420px;overflow:auto;white-space:pre-wrap;word-break:break-word}
.anomalies td.cls{font-family:ui-monospace,monospace;white-space:nowrap}
h2 .count{font-size:14px;font-weight:400;color:#555;margin-left:8px}
#verdict h2{margin-top:14px}
details.evidence{margin-top:2px}details.evidence>summary{font-size:12px}
table.rec{margin:4px 0;font-size:12px}table.rec th{background:#f4f6f8;position:static}
details.stats>summary,details.harness>summary{font-size:16px;font-weight:600;margin:18px 0 6px}
.anomalies tr.sev-error td:first-child{border-left:4px solid #d7191c}
.anomalies tr.sev-cleanup td:first-child{border-left:4px solid #fdae61}
.anomalies tr.sev-info td:first-child{border-left:4px solid #7fa7c9}
.pill{padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.p-error{background:#d7191c}.p-cleanup{background:#e08a00}.p-info{background:#5b8db8}
table.lat tr.hot td{background:#fffbe6}
.cols{display:flex;gap:40px;flex-wrap:wrap}
.tlwrap{border:1px solid #e3e6ea;border-radius:6px;overflow-x:auto}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;font-size:12px;color:#333;margin:10px 0}
.legend span{display:inline-flex;align-items:center;gap:5px}
.aggs{font-size:12px;color:#6b3d00;background:#fff8ef;padding:6px 12px;border-radius:6px}
.aggs ul{margin:2px 0;columns:2}
footer{margin-top:30px;color:#888;font-size:12px}
svg text{pointer-events:none}
.lane.even{fill:#fbfcfd}.lane.odd{fill:#f0f2f5}
.faultbg{fill:#ffb74d;fill-opacity:.14}
.grid line{stroke:#cfd4da;stroke-width:.6}
.axis text{fill:#3a3f45;font-size:11px}.axis line{stroke:#777}
.lanelabel{font-weight:650;font-size:12.5px;fill:#1d2329}.lanesub{font-size:10px;fill:#69707a}
.aggnote{font-size:9.5px;fill:#8a4b00;font-style:italic;paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
.timeline g.sp>text{fill:#fff;font-size:10px;font-weight:600}
.b0{fill:#4e79a7}.b1{fill:#59a14f}.b2{fill:#c9a227}.b3{fill:#9c755f}.b4{fill:#5f7f8f}.b5{fill:#8c8c3c}.b6{fill:#2c3e70}.b7{fill:#888}.bx{fill:#aaa}
.belief rect{fill-opacity:.9}
.claim rect{stroke:#fff;stroke-width:.6}
.stale rect{fill:url(#stale)}.timeline g.sp.stale>text{fill:#b71c1c}
.vac rect{fill:url(#hatch)}.timeline g.sp.vac>text{fill:#b71c1c}
.copy rect{stroke:#fff;stroke-width:.6}
.copy.fail{fill:#e15759}.copy.refusedcopy{fill:#7b3294}.copy.info{fill:#aab}.copy.open{fill:#d5d8dc}
.copy.open rect{stroke:#666;stroke-dasharray:3 2}.timeline g.sp.open>text,.timeline g.sp.info>text{fill:#333}
.lostcopy rect{stroke:#d7191c;stroke-width:2.5}
.fault{fill:#ffb74d}.fault rect{stroke:#d98200;stroke-width:.8}.fault.open rect{stroke-dasharray:4 2}.timeline g.sp.fault>text{fill:#4a2c00}
.finst{fill:#d98200}
.poll{stroke:#9aa3ad;stroke-width:.8}.bin.poll{fill:#b8c0c8}
.renew{stroke:#222;stroke-width:1}.bin.renew{fill:#444}
.renewfail{stroke:#e65100;stroke-width:2;fill:none}.bin.renewfail{fill:#e65100}
.acq{fill:#fff;stroke:#111;stroke-width:1.5}.bin.acq{fill:#111}
.skip{fill:#8f99a3}.skiplabel{fill:#4a525a;font-size:10px}
.del{fill:#37474f}
.tidy{fill:#ff6d00;stroke:#7f2704;stroke-width:1}.bin.tidy{fill:#ff6d00}
.tidylabel{fill:#bf360c;font-weight:700;font-size:10.5px}
.refused{fill:#7b3294;stroke:#fff;stroke-width:.8}
.failed{stroke:#d7191c;stroke-width:2;fill:none}.bin.failed{fill:#d7191c}
.evok{stroke:#59a14f}.bin.evok{fill:#59a14f}.info{fill:#999}
.ins{stroke:#4e79a7}.bin.ins{fill:#4e79a7}.fence{fill:#7b3294}
.sev-error{fill:#d7191c}.sev-cleanup{fill:#e08a00}.sev-info{fill:#5b8db8}
.anomalies tr.sev-error,.anomalies tr.sev-cleanup,.anomalies tr.sev-info{fill:none}
.lost line,.lostl{stroke:#d7191c;stroke-width:2;stroke-dasharray:6 3}.lost text{fill:#d7191c;font-weight:700;font-size:12px;paint-order:stroke;stroke:#fff;stroke-width:3px}
.timeline rect:hover,.timeline path:hover{stroke:#000;stroke-width:1}
"#;

#[cfg(test)]
mod tests;
