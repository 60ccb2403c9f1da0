//! The sweep's plot: false expiries (left axis) and vacancy per run (right axis) against lease duration on a log axis, with the measured renewal p99.9 marked and what each cell did to the data (rows lost, stale writes accepted, refused) written over its lease; a panel per lock service; one self-contained SVG.

use super::table::Row;
use std::fmt::Write;

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 80.0;
const PLOT_H: f64 = H - TOP - BOTTOM;
/// The plot's corners: left, right, top and bottom of the plotting area.
const X0: f64 = LEFT;
const X1: f64 = W - RIGHT;
const Y0: f64 = TOP;
const Y1: f64 = H - BOTTOM;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" axis top at or above `v` (1, 2, 5 x 10^n).
fn nice_top(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * e >= v {
            return m * e;
        }
    }
    10.0 * e
}

fn label_s(s: f64) -> String {
    if s >= 1.0 && s == s.trunc() {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// Where a lease and a figure land on the plot: a log lease axis and a linear axis per figure.
struct Scale {
    /// The leases plotted, ascending, each once.
    leases: Vec<f64>,
    /// The log lease axis's ends.
    lo_l: f64,
    hi_l: f64,
    /// The false-expiry axis's top (left) and the vacancy axis's (right).
    fe_top: f64,
    vac_top: f64,
}

impl Scale {
    fn of(rows: &[Row], p999_s: f64) -> Scale {
        let mut leases: Vec<f64> = rows.iter().map(|r| r.lease_s).collect();
        leases.sort_by(|a, b| a.total_cmp(b));
        leases.dedup();
        let lo = leases.first().copied().unwrap_or(1.0).min(if p999_s > 0.0 {
            p999_s
        } else {
            f64::MAX
        }) / 1.4;
        let hi = leases.last().copied().unwrap_or(10.0) * 1.4;
        let (lo_l, hi_l) = (lo.max(1e-3).ln(), hi.max(lo * 2.0).ln());
        let fe_top = nice_top(
            rows.iter()
                .map(|r| r.false_expiries as f64)
                .fold(1.0, f64::max),
        );
        let vac_top = nice_top(rows.iter().map(|r| r.vacancy_total_s).fold(1.0, f64::max));
        Scale {
            leases,
            lo_l,
            hi_l,
            fe_top,
            vac_top,
        }
    }

    fn x(&self, s: f64) -> f64 {
        LEFT + (s.max(1e-3).ln() - self.lo_l) / (self.hi_l - self.lo_l) * (W - LEFT - RIGHT)
    }

    fn y_fe(&self, v: f64) -> f64 {
        TOP + PLOT_H * (1.0 - v / self.fe_top)
    }

    fn y_vac(&self, v: f64) -> f64 {
        TOP + PLOT_H * (1.0 - v / self.vac_top)
    }
}

/// The plot for `rows` (any order), titled with the scenario: one panel per lock service, each
/// against that service's measured renewal p99.9 (`p999_ms`, by lock name; a lock not in it has
/// none marked).
pub fn plot(rows: &[Row], scenario: &str, p999_ms: &[(String, f64)]) -> String {
    let mut locks: Vec<&str> = Vec::new();
    for r in rows {
        if !locks.contains(&r.lock.as_str()) {
            locks.push(&r.lock);
        }
    }
    let height = H * locks.len().max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12">
<title>chaos sweep {}: false expiries and vacancy against lease duration</title>
<rect width="{W}" height="{height}" fill="white"/>
"##,
        esc(scenario),
    );
    for (i, lock) in locks.iter().enumerate() {
        let mine: Vec<Row> = rows.iter().filter(|r| r.lock == *lock).cloned().collect();
        let title = match locks.len() {
            1 => esc(scenario),
            _ => format!("{}, lock {}", esc(scenario), esc(lock)),
        };
        let p999 = (p999_ms.iter())
            .find(|(l, _)| l == lock)
            .map_or(0.0, |(_, p)| *p);
        let _ = writeln!(
            s,
            r##"<g transform="translate(0 {})"><text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{title}: false expiries and vacancy by lease duration</text>"##,
            H * i as f64,
            W / 2.0,
        );
        panel(&mut s, &mine, p999);
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    s
}

/// One lock service's panel: its axes, its p99.9 and a series per fencing setting.
fn panel(s: &mut String, rows: &[Row], p999_ms: f64) {
    let scale = Scale::of(rows, p999_ms / 1000.0);
    axes(s, &scale);
    p999_line(s, &scale, p999_ms);
    let mut fencings: Vec<String> = rows.iter().map(|r| r.fencing.clone()).collect();
    fencings.sort();
    fencings.dedup();
    for (fi, fencing) in fencings.iter().enumerate() {
        series(s, &scale, rows, fi, fencing);
        outcomes(s, &scale, rows, fi, fencing);
    }
}

/// What each of a fencing setting's leases did to the data, written above its point: rows lost
/// or stale writes accepted in red, a fence's refusals with nothing lost in green.
fn outcomes(s: &mut String, scale: &Scale, rows: &[Row], fi: usize, fencing: &str) {
    let y = Y0 + 30.0 + 15.0 * fi as f64;
    for r in rows.iter().filter(|r| r.fencing == fencing) {
        let (color, what) = if r.rows_lost > 0 || r.stale_writes_accepted > 0 {
            let mut what = format!("{} rows lost", r.rows_lost);
            if r.stale_writes_accepted > 0 {
                what.push_str(&format!(", {} stale accepted", r.stale_writes_accepted));
            }
            ("#c0392b", what)
        } else if r.refused_writes > 0 {
            (
                "#1e8449",
                format!("{} refused, none lost", r.refused_writes),
            )
        } else {
            continue;
        };
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{y}" text-anchor="middle" fill="{color}">fencing {}: {}</text>"##,
            scale.x(r.lease_s),
            esc(fencing),
            esc(&what)
        );
    }
}

/// The axes, the grid with both figures' labels, a tick per lease, and the axis titles.
fn axes(s: &mut String, scale: &Scale) {
    let (x0, x1, y0, y1) = (X0, X1, Y0, Y1);
    let _ = writeln!(
        s,
        r##"<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="black"/>"##
    );
    let _ = writeln!(
        s,
        r##"<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#c0392b"/>"##
    );
    let _ = writeln!(
        s,
        r##"<line x1="{x1}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="#2471a3"/>"##
    );
    for k in 0..=4 {
        let f = k as f64 / 4.0;
        let y = y1 - f * PLOT_H;
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end" fill="#c0392b">{}</text><text x="{}" y="{}" fill="#2471a3">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            format_num(scale.fe_top * f),
            x1 + 6.0,
            y + 4.0,
            format_num(scale.vac_top * f)
        );
    }
    for &l in &scale.leases {
        let xl = scale.x(l);
        let _ = writeln!(
            s,
            r##"<line x1="{xl}" y1="{y1}" x2="{xl}" y2="{}" stroke="black"/><text x="{xl}" y="{}" text-anchor="middle">{}</text>"##,
            y1 + 5.0,
            y1 + 18.0,
            label_s(l)
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle">lease duration (scenario time, log scale)</text>"##,
        (x0 + x1) / 2.0,
        y1 + 34.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle" fill="#c0392b">false expiries (all runs)</text>"##,
        (y0 + y1) / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate({} {}) rotate(90)" text-anchor="middle" fill="#2471a3">vacancy per run (s)</text>"##,
        W - 18.0,
        (y0 + y1) / 2.0
    );
}

/// The measured renewal p99.9 as a dashed line, when there is one.
fn p999_line(s: &mut String, scale: &Scale, p999_ms: f64) {
    let p999_s = p999_ms / 1000.0;
    if p999_s > 0.0 {
        let xp = scale.x(p999_s);
        let _ = writeln!(
            s,
            r##"<line x1="{xp}" y1="{Y0}" x2="{xp}" y2="{Y1}" stroke="#555" stroke-dasharray="4 4"/><text x="{}" y="{}" fill="#555">measured renewal p99.9 {:.0} ms</text>"##,
            xp + 4.0,
            Y0 + 12.0,
            p999_ms
        );
    }
}

/// The `fi`th fencing setting's two series (false expiries and vacancy): a line, a
/// point per lease with its figure, and their legend row under the axis title.
fn series(s: &mut String, scale: &Scale, rows: &[Row], fi: usize, fencing: &str) {
    let legend_y = Y1 + 54.0 + 16.0 * fi as f64;
    let mut legend_x = LEFT;
    let mut mine: Vec<&Row> = rows.iter().filter(|r| r.fencing == fencing).collect();
    mine.sort_by(|a, b| a.lease_s.total_cmp(&b.lease_s));
    let dash = if fi == 0 {
        ""
    } else {
        r#" stroke-dasharray="6 3""#
    };
    for (name, color, y, value) in [
        (
            "false expiries",
            "#c0392b",
            Scale::y_fe as fn(&Scale, f64) -> f64,
            (|r: &Row| r.false_expiries as f64) as fn(&Row) -> f64,
        ),
        ("vacancy s/run", "#2471a3", Scale::y_vac, |r: &Row| {
            r.vacancy_total_s
        }),
    ] {
        let pts: Vec<String> = mine
            .iter()
            .map(|r| format!("{:.1},{:.1}", scale.x(r.lease_s), y(scale, value(r))))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"##,
            pts.join(" ")
        );
        for r in &mine {
            let _ = writeln!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{color}"><title>{} fencing {fencing}: {name} {}</title></circle>"##,
                scale.x(r.lease_s),
                y(scale, value(r)),
                label_s(r.lease_s),
                format_num(value(r))
            );
        }
        let _ = writeln!(
            s,
            r##"<line x1="{legend_x}" y1="{}" x2="{}" y2="{}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{legend_y}">{name} (fencing {fencing})</text>"##,
            legend_y - 4.0,
            legend_x + 24.0,
            legend_y - 4.0,
            legend_x + 30.0
        );
        legend_x += 220.0;
    }
}

fn format_num(v: f64) -> String {
    if v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::table::{row, RunResult};

    #[test]
    fn the_plot_is_a_labelled_self_contained_svg() {
        let runs: Vec<RunResult> = [2.0, 5.0, 10.0]
            .iter()
            .map(|&l| RunResult {
                lock: "claims".into(),
                lease_s: l,
                fencing: "off".into(),
                seed: 1,
                dir: None,
                verdict: Some("valid".into()),
                wall_s: 1.0,
                error: None,
                figures: Some(Default::default()),
                pace: None,
            })
            .collect();
        let rows: Vec<Row> = runs
            .iter()
            .map(|r| row("claims", r.lease_s, "off", &[r], 2100.0, 10.0))
            .collect();
        let svg = plot(&rows, "sweep <test>", &[("claims".into(), 2100.0)]);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        for needle in [
            "lease duration",
            "false expiries",
            "vacancy per run",
            "p99.9 2100 ms",
            "10 s",
            "sweep &lt;test&gt;",
        ] {
            assert!(svg.contains(needle), "missing {needle}");
        }
        assert!(
            !svg.contains("http://") || svg.matches("http://").count() == 1,
            "no external references"
        );
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(!svg.contains("lock claims"), "one lock: no panel names it");
        // Two lock services: a panel each, each with its own p99.9.
        let etcd: Vec<Row> = (rows.iter().cloned())
            .map(|r| Row {
                lock: "etcd".into(),
                ..r
            })
            .collect();
        let both: Vec<Row> = rows.iter().cloned().chain(etcd).collect();
        let svg = plot(
            &both,
            "sweep",
            &[("claims".into(), 2100.0), ("etcd".into(), 900.0)],
        );
        assert_eq!(svg.matches("<polyline").count(), 4);
        for needle in ["sweep, lock claims", "sweep, lock etcd", "p99.9 900 ms"] {
            assert!(svg.contains(needle), "missing {needle}");
        }
        assert!(!svg.contains("rows lost"), "nothing lost, nothing said");
        // A cell that lost data says so on its lease; a fence that refused, in green.
        let mut lossy = both.clone();
        lossy[0].rows_lost = 998;
        lossy[1].refused_writes = 2;
        let svg = plot(&lossy, "sweep", &[]);
        assert!(svg.contains(">fencing off: 998 rows lost</text>"), "{svg}");
        assert!(
            svg.contains(">fencing off: 2 refused, none lost</text>"),
            "{svg}"
        );
    }
}
