//! The sweep's page (`sweep.html`): the decision table (one row per lock service and fencing setting: what went wrong, what was reached, the measured p99.9 and the lease it recommends), every cell, the plot and a link to each run's report; self-contained, opened from disk.

use super::table::{self, Conclusion, Row};
use crate::html::esc;
use std::fmt::Write;

/// One run as the page lists it.
pub struct RunLink {
    /// `lock etcd, lease 5s, fencing off, seed 7`.
    pub label: String,
    /// Its report, relative to the sweep's folder (None: the harness failed it).
    pub report: Option<String>,
    /// `valid`, `invalid`, `unknown`, or the harness error.
    pub outcome: String,
}

/// Everything the page shows.
pub struct Page<'a> {
    pub scenario: &'a str,
    pub command: &'a str,
    /// The sweep's text above the table: seed, weather, measured latency and stalls.
    pub head: &'a str,
    pub rows: &'a [Row],
    pub conclusions: &'a [Conclusion],
    /// What the sweep says beside its conclusions (a mover too slow for the scale, its stalls).
    pub notes: &'a str,
    /// Each lock service's measured renewal p99.9, scenario ms.
    pub p999_ms: &'a [(String, f64)],
    pub svg: &'a str,
    pub runs: &'a [RunLink],
}

const CSS: &str = "body{font-family:sans-serif;margin:2em;max-width:110em}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}\
th{background:#f4f4f4}td.l{text-align:left}.bad{background:#f8d7da}.good{background:#d4edda}\
pre{background:#f8f8f8;padding:.6em;white-space:pre-wrap}table.cells td{white-space:nowrap}";

/// How many of a row's runs had `verdict` (`verdicts` reads `invalid:2 valid:1`).
fn runs_with(rows: &[&Row], verdict: &str) -> u64 {
    let tag = format!("{verdict}:");
    (rows.iter().flat_map(|r| r.verdicts.split(' ')))
        .filter_map(|v| v.strip_prefix(&tag))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

/// The moments any of the rows reached, each once, in order.
fn moments(rows: &[&Row]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for m in rows.iter().flat_map(|r| r.reached.split(' ')) {
        let name = m.split(':').next().unwrap_or("");
        if !name.is_empty() && name != "-" && !seen.contains(&name) {
            seen.push(name);
        }
    }
    match seen.is_empty() {
        true => "none".into(),
        false => seen.join(", "),
    }
}

fn secs(s: f64) -> String {
    if s == s.trunc() {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

/// The decision table: a row per lock service and fencing setting, in the sweep's order.
fn decision(s: &mut String, p: &Page) {
    s.push_str("<h2>Decision table</h2>\n<table><tr><th>lock</th><th>fencing</th><th>runs</th><th>invalid</th><th>rows lost</th><th>stale writes accepted</th><th>stale writes refused</th><th>false expiries</th><th>vacancy max (s)</th><th>renewal p99.9 (ms)</th><th>lease recommended</th><th>moments reached</th></tr>\n");
    for c in p.conclusions {
        let mine: Vec<&Row> = (p.rows.iter())
            .filter(|r| r.lock == c.lock && r.fencing == c.fencing)
            .collect();
        let sum = |f: fn(&Row) -> u64| mine.iter().map(|r| f(r)).sum::<u64>();
        let (lost, accepted, refused) = (
            sum(|r| r.rows_lost),
            sum(|r| r.stale_writes_accepted),
            sum(|r| r.refused_writes),
        );
        let invalid = runs_with(&mine, "invalid");
        let class = if lost > 0 || accepted > 0 || invalid > 0 {
            " class=\"bad\""
        } else if refused > 0 {
            " class=\"good\""
        } else {
            ""
        };
        let p999 = (p.p999_ms.iter())
            .find(|(l, _)| *l == c.lock)
            .map_or(0.0, |(_, v)| *v);
        let lease = match (c.smallest_clean_lease_s, c.ratio_to_p999) {
            (Some(l), Some(x)) => format!(
                "{} ({x:.1}x p99.9){}",
                secs(l),
                if c.too_few {
                    ", too few runs to tell"
                } else {
                    ""
                }
            ),
            (Some(l), None) => secs(l),
            (None, _) => "none in the sweep".into(),
        };
        let _ = writeln!(
            s,
            "<tr{class}><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{invalid}</td><td>{lost}</td><td>{accepted}</td><td>{refused}</td><td>{}</td><td>{:.1}</td><td>{p999:.0}</td><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
            esc(&c.lock),
            esc(&c.fencing),
            sum(|r| r.runs),
            sum(|r| r.false_expiries),
            mine.iter().map(|r| r.vacancy_max_s).fold(0.0, f64::max),
            esc(&lease),
            esc(&moments(&mine)),
        );
    }
    s.push_str("</table>\n");
}

/// The page, whole.
pub fn page(p: &Page) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>chaos sweep {}</title><style>{CSS}</style></head><body>\n<h1>chaos sweep: {}</h1>\n<p><code>{}</code></p>\n<pre>{}</pre>\n",
        esc(p.scenario),
        esc(p.scenario),
        esc(p.command),
        esc(p.head.trim_end()),
    );
    decision(&mut s, p);
    s.push_str("<h2>Conclusions</h2>\n<pre>");
    for c in p.conclusions {
        s.push_str(&esc(&c.text));
        s.push('\n');
    }
    s.push_str(&esc(p.notes));
    s.push_str("</pre>\n<h2>Every cell</h2>\n<table class=\"cells\"><tr>");
    for (h, unit) in table::TEXT_COLUMNS {
        let _ = write!(s, "<th>{h}<br>{unit}</th>");
    }
    s.push_str("</tr>\n");
    for r in p.rows {
        let bad = r.rows_lost > 0 || r.stale_writes_accepted > 0;
        s.push_str(if bad { "<tr class=\"bad\">" } else { "<tr>" });
        let cells = table::text_cells(r);
        for (i, cell) in cells.iter().enumerate() {
            let class = if i <= 2 { " class=\"l\"" } else { "" };
            // The moments reached, one per line.
            let shown = match i + 1 == cells.len() {
                true => esc(cell).replace(' ', "<br>"),
                false => esc(cell).into_owned(),
            };
            let _ = write!(s, "<td{class}>{shown}</td>");
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n<h2>Plot</h2>\n");
    s.push_str(p.svg);
    s.push_str("<h2>Runs</h2>\n<ul>\n");
    for r in p.runs {
        match &r.report {
            Some(link) => {
                let _ = writeln!(
                    s,
                    "<li><a href=\"{}\">{}</a>: {}</li>",
                    esc(link),
                    esc(&r.label),
                    esc(&r.outcome)
                );
            }
            None => {
                let _ = writeln!(s, "<li>{}: {}</li>", esc(&r.label), esc(&r.outcome));
            }
        }
    }
    s.push_str("</ul>\n</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::{conclude, row, Percentiles, RunResult};
    use crate::sweep::RunFigures;

    fn result(lock: &str, fencing: &str, lost: u64, refused: u64) -> RunResult {
        RunResult {
            lock: lock.into(),
            lease_s: 5.0,
            fencing: fencing.into(),
            seed: 1,
            dir: None,
            verdict: Some(if lost > 0 { "invalid" } else { "valid" }.into()),
            wall_s: 1.0,
            error: None,
            pace: None,
            figures: Some(RunFigures {
                renew_us: vec![30_000; 10],
                renewals: 10,
                rows_lost: lost,
                refused_writes: refused,
                reached: vec![chaos_history::Moment::StaleWrite],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn the_page_has_a_decision_row_per_lock_and_fencing_and_links_every_run() {
        let cells = [
            result("claims", "off", 40, 0),
            result("claims", "on", 0, 3),
            result("advisory", "off", 12, 0),
        ];
        let rows: Vec<Row> = (cells.iter())
            .map(|c| row(&c.lock, c.lease_s, &c.fencing, &[c], 900.0, 10.0))
            .collect();
        let sweep = Percentiles {
            count: 10,
            p999_ms: 900.0,
            ..Default::default()
        };
        let conclusions: Vec<Conclusion> = (rows.iter())
            .map(|r| conclude(&[r], &sweep, 1, false))
            .collect();
        let runs = [
            RunLink {
                label: "lock claims, lease 5s, fencing off, seed 1".into(),
                report: Some("runs/claims-lease-5s-fencing-off/x/report.html".into()),
                outcome: "invalid".into(),
            },
            RunLink {
                label: "lock advisory <b>".into(),
                report: None,
                outcome: "failed: no server".into(),
            },
        ];
        let html = page(&Page {
            scenario: "sweep",
            command: "chaos sweep --lock claims,advisory",
            head: "seed 1",
            rows: &rows,
            conclusions: &conclusions,
            notes: "the movers' own stalls reached 900 ms",
            p999_ms: &[("claims".into(), 900.0), ("advisory".into(), 950.0)],
            svg: "<svg></svg>",
            runs: &runs,
        });
        assert!(html.starts_with("<!DOCTYPE html>"));
        let decision =
            &html[html.find("Decision table").unwrap()..html.find("Conclusions").unwrap()];
        assert_eq!(decision.matches("<tr").count(), 4, "{decision}");
        assert_eq!(decision.matches("class=\"bad\"").count(), 2, "{decision}");
        assert_eq!(decision.matches("class=\"good\"").count(), 1, "{decision}");
        assert!(
            decision.contains("<td>950</td>"),
            "advisory's own p99.9: {decision}"
        );
        assert!(decision.contains("stale-write"), "{decision}");
        assert!(html.contains("href=\"runs/claims-lease-5s-fencing-off/x/report.html\""));
        assert!(html.contains("lock advisory &lt;b&gt;: failed: no server"));
        assert!(html.contains("<svg></svg>"));
        assert!(html.contains("stalls reached 900 ms"));
    }
}
