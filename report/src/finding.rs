//! The top of `report.html`, in the order a reader wants it: the verdict and its anomalies (errors first) in one glance, then the key figures, each fact computed once (the checkers' figure where the verdict states one) and named apart from a neighbour that measures something else; the checker stats folded below, every value rendered.

use crate::html::{count, duration, esc, time};
use crate::model::Model;
use crate::{digest, severity_word, shown, validity_word, ReportInput};
use chaos_checkers::{AnomalyClass, Severity, Verdict};
use std::fmt::Write;

/// The verdict, why it is unknown when it is, and every anomaly: class, count, first time,
/// summary, and its evidence folded (rendered, not raw JSON).
pub(crate) fn verdict(page: &mut String, verdict: &Verdict) {
    let errors = verdict
        .anomalies
        .iter()
        .filter(|a| a.severity == Severity::Error)
        .count();
    let others = verdict.anomalies.len() - errors;
    let counts = match (errors, others) {
        (0, 0) => "no anomalies".to_string(),
        (e, o) => format!(
            "{e} error{}, {o} other{}",
            if e == 1 { "" } else { "s" },
            if o == 1 { "" } else { "s" }
        ),
    };
    let _ = write!(
        page,
        "<section id=\"verdict\"><h2>Verdict: <span class=\"vt-{w}\">{w}</span> <span class=\"count\">{counts}</span></h2>",
        w = validity_word(verdict.valid)
    );
    if !verdict.reasons.is_empty() {
        page.push_str("<div class=\"banner\"><b>Why unknown:</b><ul>");
        for r in &verdict.reasons {
            let _ = write!(page, "<li>{}</li>", esc(r));
        }
        page.push_str("</ul></div>");
    }
    if verdict.anomalies.is_empty() {
        page.push_str("<p>No anomalies.</p>");
        reached(page, verdict);
        page.push_str("</section>\n");
        return;
    }
    let mut order: Vec<usize> = (0..verdict.anomalies.len()).collect();
    order.sort_by_key(|&i| {
        let a = &verdict.anomalies[i];
        (
            std::cmp::Reverse(a.severity),
            a.first_scenario_ms.unwrap_or(i64::MAX),
        )
    });
    page.push_str(
        "<table class=\"anomalies\"><thead><tr><th>class</th><th>severity</th><th>count</th><th>first</th><th>summary</th></tr></thead><tbody>",
    );
    for i in order {
        let a = &verdict.anomalies[i];
        let class = serde_json::to_value(a.class)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        let first = a
            .first_scenario_time
            .clone()
            .or_else(|| a.first_scenario_ms.map(time))
            .unwrap_or_else(|| "–".into());
        let _ = write!(
            page,
            "<tr class=\"sev-{s}\"><td class=\"cls\">{}</td><td><span class=\"pill p-{s}\">{s}</span></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}\
             <details class=\"evidence\"><summary>evidence</summary>{}</details></td></tr>",
            esc(&class),
            count(a.count),
            esc(&first),
            esc(&a.summary),
            shown::block(&a.evidence),
            s = severity_word(a.severity),
        );
    }
    page.push_str("</tbody></table>");
    reached(page, verdict);
    page.push_str("</section>\n");
}

/// The dangerous moments the run reached, first time and who, or that it reached none (a
/// valid verdict then proves nothing).
fn reached(page: &mut String, verdict: &Verdict) {
    if verdict.reached.is_empty() {
        page.push_str("<p class=\"reached-none\"><b>Reached no dangerous moment</b>: no holder was stopped past its lease, no stale write was tried, nobody held it twice.</p>");
        return;
    }
    page.push_str(
        "<h3>Dangerous moments reached</h3><table class=\"anomalies reached\"><thead><tr><th>moment</th><th>count</th><th>first</th><th>who</th><th>first occurrence</th></tr></thead><tbody>",
    );
    for r in &verdict.reached {
        let _ = write!(
            page,
            "<tr><td class=\"cls\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(r.moment.name()),
            count(r.count),
            esc(&r.first_scenario_time),
            esc(&r.who.join(", ")),
            esc(&r.summary),
        );
    }
    page.push_str("</tbody></table>");
}

/// Scenario seconds as the checkers print them (`77.545 s`): the same figure in the key
/// figures as in the verdict's summary.
pub(crate) fn secs(s: f64) -> String {
    let t = format!("{:.3}", s + 0.0);
    let t = t.trim_end_matches('0').trim_end_matches('.');
    format!("{t} s")
}

/// The longest vacancy window the checker counted: (from, to) scenario ms.
fn longest_vacancy(verdict: &Verdict) -> Option<(i64, i64)> {
    let a = verdict
        .anomalies
        .iter()
        .find(|a| a.class == AnomalyClass::VacancyWindow)?;
    a.evidence["windows"]
        .as_array()?
        .iter()
        .filter_map(|w| {
            Some((
                w["from_scenario_ms"].as_i64()?,
                w["to_scenario_ms"].as_i64()?,
            ))
        })
        .max_by_key(|(a, b)| b - a)
}

fn fig(page: &mut String, value: &str, label: &str) {
    let _ = write!(
        page,
        "<div class=\"fig\"><div class=\"val\">{}</div><div class=\"lab\">{}</div></div>",
        esc(value),
        esc(label)
    );
}

/// Headline figures. Vacancy and writes after expiry are the checkers' own (the verdict's
/// summary says the same figure); a box's unbacked belief is the timeline's, and named so.
pub(crate) fn figures(page: &mut String, input: &ReportInput, model: &Model) {
    page.push_str("<section><h2>Key figures</h2><div class=\"figs\">");
    let stats = &input.verdict.stats;
    if model.claim.is_some() {
        fig(page, &stats.grants.len().to_string(), "grants of the claim");
        let n = stats.vacancy_windows;
        fig(
            page,
            &secs(stats.vacancy_total_s),
            &format!(
                "vacancy while the plan ran ({n} window{})",
                if n == 1 { "" } else { "s" }
            ),
        );
        if let Some((a, b)) = longest_vacancy(input.verdict).filter(|_| n > 1) {
            fig(
                page,
                &secs(stats.vacancy_max_s),
                &format!("longest vacancy, {} – {}", time(a), time(b)),
            );
        }
    }
    for (b, s) in &stats.writes_after_expiry_s {
        fig(
            page,
            &secs(*s),
            &format!("{b} wrote after its lease expired (to its last write's commit)"),
        );
    }
    for (lane, stale) in model.boxes.iter().zip(&model.stale) {
        let stale_ms: i64 = stale.iter().map(|s| s.end - s.start).sum();
        if stale_ms > 0 {
            let first = stale.first().map(|s| s.start).unwrap_or_default();
            let last = stale.last().map(|s| s.end).unwrap_or_default();
            fig(
                page,
                &duration(stale_ms),
                &format!(
                    "{} believed it held the claim while the routing db did not back it, {} – {}",
                    lane.name,
                    time(first),
                    time(last)
                ),
            );
        }
    }
    let sum = |f: &dyn Fn(&digest::BoxLane) -> u64| model.boxes.iter().map(f).sum::<u64>();
    fig(page, &sum(&|b| b.ok_copies).to_string(), "copies ok");
    fig(
        page,
        &sum(&|b| b.source_deletes.len()).to_string(),
        "source deletes",
    );
    fig(
        page,
        &sum(&|b| b.tidy_deletes.len()).to_string(),
        "tidy-up deletes",
    );
    fig(
        page,
        &sum(&|b| b.refused.len()).to_string(),
        "writes refused by fencing",
    );
    let windows: u64 = model.faults.iter().map(|f| f.windows.len()).sum();
    fig(page, &windows.to_string(), "fault windows");
    if !model.lost_turbines.is_empty() {
        let mut names: Vec<&str> = model
            .lost_turbines
            .iter()
            .map(String::as_str)
            .take(5)
            .collect();
        if model.lost_turbines.len() > 5 {
            names.push("…");
        }
        fig(
            page,
            &model.lost_turbines.len().to_string(),
            &format!("turbines with lost rows: {}", names.join(", ")),
        );
    }
    page.push_str("</div></section>\n");
}

/// Every figure the checkers computed, folded, each value rendered; zeros on one line.
pub(crate) fn stats(page: &mut String, verdict: &Verdict) {
    let stats = serde_json::to_value(&verdict.stats).unwrap_or_default();
    let Some(map) = stats.as_object().filter(|m| !m.is_empty()) else {
        return;
    };
    let _ = write!(
        page,
        "<section><details class=\"stats\"><summary>Checker stats ({} figures; every one is in verdict.json)</summary>{}</details></section>\n",
        map.len(),
        // `ungranted_writes` is `unattributed_writes` under its older name.
        shown::kv_table(map, &["ungranted_writes"])
    );
}
