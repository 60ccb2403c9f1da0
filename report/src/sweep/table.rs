//! The sweep's table: runs folded into one row per lock service, fencing setting and lease, the conclusion in words, and the text and CSV renderings.

use super::RunFigures;
use chaos_history::ScenarioMs;
use hdrhistogram::Histogram;
use serde::Serialize;

/// The CSV header, one column per figure; text, CSV and JSON share these names.
pub const COLUMNS: &[&str] = &[
    "lock",
    "lease_s",
    "fencing",
    "runs",
    "failed_runs",
    "renewals",
    "renew_p50_ms",
    "renew_p99_ms",
    "renew_p999_ms",
    "renew_max_ms",
    "margin_over_p999_ms",
    "false_expiries",
    "runs_with_false_expiry",
    "takeovers",
    "vacancy_total_s",
    "vacancy_max_s",
    "recover_s",
    "holder_kills",
    "writes_after_expiry",
    "writes_after_expiry_max_s",
    "rows_lost",
    "lost_turbines",
    "stale_writes_accepted",
    "refused_writes",
    "stalled_holders",
    "stalled_holder_max_s",
    "finish_s",
    "unfinished_runs",
    "stall_p999_ms",
    "stall_max_ms",
    "stall_p999_real_us",
    "stall_max_real_us",
    "verdicts",
    "reached",
];

/// p99.9 needs this many samples before it is more than the maximum.
pub const P999_SAMPLES: u64 = 1000;

/// Latency percentiles of a set of samples, scenario ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ms: ScenarioMs<f64>,
    pub p99_ms: ScenarioMs<f64>,
    pub p999_ms: ScenarioMs<f64>,
    pub max_ms: ScenarioMs<f64>,
}

/// Percentiles of scenario-µs samples through an hdrhistogram (3 significant figures).
pub fn percentiles(samples_us: &[u64]) -> Percentiles {
    let mut h: Histogram<u64> = Histogram::new(3).expect("3 significant figures is valid");
    for &v in samples_us {
        // `record` grows the histogram; `saturating_record` alone would clamp at its
        // starting range (about 2 ms) and every percentile with it.
        if h.record(v).is_err() {
            h.saturating_record(v);
        }
    }
    if h.is_empty() {
        return Percentiles::default();
    }
    // hdrhistogram reports a bucket's top; the true max bounds every percentile.
    let max = samples_us.iter().copied().max().unwrap_or(0);
    let q = |x: f64| h.value_at_quantile(x).min(max) as f64 / 1000.0;
    Percentiles {
        count: h.len(),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: max as f64 / 1000.0,
    }
}

/// One run of a cell: its figures or the harness error that stopped it.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// The lock service that held the lease (`claims`, `advisory`, `etcd`, ...).
    pub lock: String,
    pub lease_s: f64,
    pub fencing: String,
    pub seed: u64,
    pub dir: Option<String>,
    pub verdict: Option<String>,
    pub wall_s: f64,
    pub error: Option<String>,
    pub figures: Option<RunFigures>,
    /// The mover too slow for the scenario's scale, when it was ([`crate::Pace::line`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace: Option<String>,
}

/// One row: a lock service, a fencing setting and a lease over its runs. Counts are sums over
/// the runs; `vacancy_total_s` and `finish_s` are means per run; maxima are
/// the worst run's.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub lock: String,
    pub lease_s: f64,
    pub fencing: String,
    pub runs: u64,
    pub failed_runs: u64,
    pub renewals: u64,
    pub renew_p50_ms: ScenarioMs<f64>,
    pub renew_p99_ms: ScenarioMs<f64>,
    pub renew_p999_ms: ScenarioMs<f64>,
    pub renew_max_ms: ScenarioMs<f64>,
    /// The lease minus the renewal p99.9 measured over all of its lock service's runs.
    pub margin_over_p999_ms: ScenarioMs<f64>,
    pub false_expiries: u64,
    pub runs_with_false_expiry: u64,
    pub takeovers: u64,
    pub vacancy_total_s: f64,
    pub vacancy_max_s: f64,
    /// Worst time from killing the holder to the next grant; None when no holder was killed (or none recovered).
    pub recover_s: Option<f64>,
    pub holder_kills: u64,
    pub unrecovered_kills: u64,
    pub writes_after_expiry: u64,
    pub writes_after_expiry_max_s: f64,
    pub rows_lost: u64,
    pub lost_turbines: u64,
    /// Writes of an older grant a shard accepted after a newer grant's (`stale-write`), and
    /// those its fence refused.
    pub stale_writes_accepted: u64,
    pub refused_writes: u64,
    /// Claims renewed for over two leases with nothing written (`stalled-holder`), and the
    /// longest, scenario seconds.
    pub stalled_holders: u64,
    pub stalled_holder_max_s: f64,
    pub finish_s: Option<f64>,
    pub unfinished_runs: u64,
    /// The movers' timer lateness, scenario ms and real µs (worst mover life).
    pub stall_p999_ms: ScenarioMs<f64>,
    pub stall_max_ms: ScenarioMs<f64>,
    pub stall_p999_real_us: u64,
    pub stall_max_real_us: u64,
    pub verdicts: String,
    /// The runs that reached each dangerous moment, `moment:n` (none: `-`).
    pub reached: String,
}

/// Real µs to scenario ms at `real_ms_per_s` real ms per scenario second.
pub fn scenario_ms_of_real_us(us: u64, real_ms_per_s: f64) -> f64 {
    us as f64 / real_ms_per_s
}

/// Fold a cell's runs into its row; `lock_p999_ms` is the renewal p99.9 over all the lock
/// service's runs.
pub fn row(
    lock: &str,
    lease_s: f64,
    fencing: &str,
    runs: &[&RunResult],
    lock_p999_ms: f64,
    real_ms_per_s: f64,
) -> Row {
    let ok: Vec<&RunFigures> = runs.iter().filter_map(|r| r.figures.as_ref()).collect();
    let all_us: Vec<u64> = ok.iter().flat_map(|f| f.renew_us.iter().copied()).collect();
    let p = percentiles(&all_us);
    let n = ok.len().max(1) as f64;
    let kills: Vec<Option<f64>> = ok.iter().flat_map(|f| f.holder_kills.clone()).collect();
    let finished: Vec<f64> = ok.iter().filter_map(|f| f.finish_s).collect();
    let mut verdicts = std::collections::BTreeMap::<String, u64>::new();
    for r in runs {
        *verdicts
            .entry(r.verdict.clone().unwrap_or_else(|| "failed".into()))
            .or_default() += 1;
    }
    let stall_p999 = ok.iter().map(|f| f.stall.p999_us).max().unwrap_or(0);
    let stall_max = ok.iter().map(|f| f.stall.max_us).max().unwrap_or(0);
    Row {
        lock: lock.to_string(),
        lease_s,
        fencing: fencing.to_string(),
        runs: runs.len() as u64,
        failed_runs: (runs.len() - ok.len()) as u64,
        renewals: p.count,
        renew_p50_ms: p.p50_ms,
        renew_p99_ms: p.p99_ms,
        renew_p999_ms: p.p999_ms,
        renew_max_ms: p.max_ms,
        margin_over_p999_ms: lease_s * 1000.0 - lock_p999_ms,
        false_expiries: ok.iter().map(|f| f.false_expiries.len() as u64).sum(),
        runs_with_false_expiry: ok.iter().filter(|f| !f.false_expiries.is_empty()).count() as u64,
        takeovers: ok.iter().map(|f| f.takeovers).sum(),
        vacancy_total_s: (ok.iter().map(|f| f.vacancy_total_s).sum::<f64>() / n).max(0.0),
        vacancy_max_s: ok
            .iter()
            .map(|f| f.vacancy_max_s)
            .fold(0.0, f64::max)
            .max(0.0),
        recover_s: kills.iter().flatten().cloned().reduce(f64::max),
        holder_kills: kills.len() as u64,
        unrecovered_kills: kills.iter().filter(|k| k.is_none()).count() as u64,
        writes_after_expiry: ok.iter().map(|f| f.writes_after_expiry).sum(),
        writes_after_expiry_max_s: ok
            .iter()
            .map(|f| f.writes_after_expiry_max_s)
            .fold(0.0, f64::max),
        rows_lost: ok.iter().map(|f| f.rows_lost).sum(),
        lost_turbines: ok.iter().map(|f| f.lost_turbines).sum(),
        stale_writes_accepted: ok.iter().map(|f| f.stale_writes_accepted).sum(),
        refused_writes: ok.iter().map(|f| f.refused_writes).sum(),
        stalled_holders: ok.iter().map(|f| f.stalled_holders).sum(),
        stalled_holder_max_s: ok
            .iter()
            .map(|f| f.stalled_holder_max_s)
            .fold(0.0, f64::max),
        finish_s: (!finished.is_empty())
            .then(|| finished.iter().sum::<f64>() / finished.len() as f64),
        unfinished_runs: (ok.len() - finished.len()) as u64,
        stall_p999_ms: scenario_ms_of_real_us(stall_p999, real_ms_per_s),
        stall_max_ms: scenario_ms_of_real_us(stall_max, real_ms_per_s),
        stall_p999_real_us: stall_p999,
        stall_max_real_us: stall_max,
        verdicts: verdicts
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(" "),
        reached: reached_cell(&ok),
    }
}

/// Per moment, how many of the runs reached it (`holder-stopped-past-lease:3 stale-write:1`).
fn reached_cell(runs: &[&RunFigures]) -> String {
    let mut counts = std::collections::BTreeMap::<chaos_history::Moment, u64>::new();
    for m in runs.iter().flat_map(|f| &f.reached) {
        *counts.entry(*m).or_default() += 1;
    }
    match counts.is_empty() {
        true => "-".to_string(),
        false => (counts.iter())
            .map(|(m, n)| format!("{m}:{n}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn secs(s: f64) -> String {
    if s == s.trunc() {
        format!("{s:.0}s")
    } else {
        format!("{s}s")
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

/// The CSV: the header, then one line per row (no field holds a comma).
pub fn csv(rows: &[Row]) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        let fields: Vec<String> = vec![
            r.lock.clone(),
            format!("{}", r.lease_s),
            r.fencing.clone(),
            r.runs.to_string(),
            r.failed_runs.to_string(),
            r.renewals.to_string(),
            format!("{:.1}", r.renew_p50_ms),
            format!("{:.1}", r.renew_p99_ms),
            format!("{:.1}", r.renew_p999_ms),
            format!("{:.1}", r.renew_max_ms),
            format!("{:.0}", r.margin_over_p999_ms),
            r.false_expiries.to_string(),
            r.runs_with_false_expiry.to_string(),
            r.takeovers.to_string(),
            format!("{:.1}", r.vacancy_total_s),
            format!("{:.1}", r.vacancy_max_s),
            r.recover_s.map(|x| format!("{x:.1}")).unwrap_or_default(),
            r.holder_kills.to_string(),
            r.writes_after_expiry.to_string(),
            format!("{:.1}", r.writes_after_expiry_max_s),
            r.rows_lost.to_string(),
            r.lost_turbines.to_string(),
            r.stale_writes_accepted.to_string(),
            r.refused_writes.to_string(),
            r.stalled_holders.to_string(),
            format!("{:.1}", r.stalled_holder_max_s),
            r.finish_s.map(|x| format!("{x:.1}")).unwrap_or_default(),
            r.unfinished_runs.to_string(),
            format!("{:.1}", r.stall_p999_ms),
            format!("{:.1}", r.stall_max_ms),
            r.stall_p999_real_us.to_string(),
            r.stall_max_real_us.to_string(),
            r.verdicts.clone(),
            r.reached.clone(),
        ];
        debug_assert_eq!(fields.len(), COLUMNS.len());
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// The person's table's columns: each heading and the unit under it.
pub(crate) const TEXT_COLUMNS: [(&str, &str); 24] = [
    ("lock", ""),
    ("lease", ""),
    ("fencing", ""),
    ("runs", ""),
    ("renewals", ""),
    ("renew p50", "ms"),
    ("p99", "ms"),
    ("p99.9", "ms"),
    ("max", "ms"),
    ("false exp", ""),
    ("takeovers", ""),
    ("vacancy tot", "s/run"),
    ("vac max", "s"),
    ("recover", "s"),
    ("wr after exp", "n (max s)"),
    ("rows lost", ""),
    ("stale acc", ""),
    ("refused", ""),
    ("stalled", "n (max s)"),
    ("finish", "s"),
    ("stall p99.9", "ms"),
    ("stall max", "ms"),
    ("verdicts", ""),
    ("reached", "runs"),
];

/// The table for a person: scenario times, one row per lock service, fencing setting and lease.
pub fn text(rows: &[Row]) -> String {
    let mut lines: Vec<Vec<String>> = vec![
        TEXT_COLUMNS.iter().map(|(h, _)| h.to_string()).collect(),
        TEXT_COLUMNS.iter().map(|(_, u)| u.to_string()).collect(),
    ];
    lines.extend(rows.iter().map(text_cells));
    aligned(&lines)
}

/// One row's cells in the person's table, in `TEXT_COLUMNS` order.
pub(crate) fn text_cells(r: &Row) -> Vec<String> {
    let cells = vec![
        r.lock.clone(),
        secs(r.lease_s),
        r.fencing.clone(),
        if r.failed_runs > 0 {
            format!("{} ({} failed)", r.runs, r.failed_runs)
        } else {
            r.runs.to_string()
        },
        r.renewals.to_string(),
        format!("{:.0}", r.renew_p50_ms),
        format!("{:.0}", r.renew_p99_ms),
        format!("{:.0}", r.renew_p999_ms),
        format!("{:.0}", r.renew_max_ms),
        r.false_expiries.to_string(),
        r.takeovers.to_string(),
        format!("{:.1}", r.vacancy_total_s),
        format!("{:.1}", r.vacancy_max_s),
        match (r.recover_s, r.holder_kills, r.unrecovered_kills) {
            (_, 0, _) => "-".into(),
            (v, _, 0) => opt(v, 1),
            (v, _, u) => format!("{} ({u} never)", opt(v, 1)),
        },
        format!(
            "{} ({:.1})",
            r.writes_after_expiry, r.writes_after_expiry_max_s
        ),
        if r.lost_turbines > 0 {
            format!("{} ({} turb.)", r.rows_lost, r.lost_turbines)
        } else {
            r.rows_lost.to_string()
        },
        r.stale_writes_accepted.to_string(),
        r.refused_writes.to_string(),
        if r.stalled_holders > 0 {
            format!("{} ({:.0})", r.stalled_holders, r.stalled_holder_max_s)
        } else {
            "0".into()
        },
        match (r.finish_s, r.unfinished_runs) {
            (v, 0) => opt(v, 0),
            (None, u) => format!("unfinished x{u}"),
            (v, u) => format!("{} ({u} unfinished)", opt(v, 0)),
        },
        format!("{:.0}", r.stall_p999_ms),
        format!("{:.0}", r.stall_max_ms),
        r.verdicts.clone(),
        r.reached.clone(),
    ];
    debug_assert_eq!(cells.len(), TEXT_COLUMNS.len());
    cells
}

/// Lines of cells in columns two spaces apart: the first three (lock, lease, fencing) left-aligned, the figures right-aligned.
fn aligned(lines: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..TEXT_COLUMNS.len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for l in lines {
        let cells: Vec<String> = l
            .iter()
            .enumerate()
            .map(|(c, s)| {
                if c <= 2 {
                    format!("{s:<w$}", w = widths[c])
                } else {
                    format!("{s:>w$}", w = widths[c])
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// What the sweep concludes, per lock service and fencing setting, in words and in figures.
#[derive(Debug, Clone, Serialize)]
pub struct Conclusion {
    pub lock: String,
    pub fencing: String,
    /// The smallest lease from which on no run showed a false expiry, lost or stale-written
    /// data or an invalid verdict (None: every lease did).
    pub smallest_clean_lease_s: Option<f64>,
    pub margin_over_p999_ms: Option<f64>,
    pub ratio_to_p999: Option<f64>,
    /// Renewals measured at that lease, and the 95 % upper bound of the per-renewal false-expiry rate zero events allow (3/n).
    pub renewals_at_clean_lease: u64,
    pub too_few: bool,
    pub text: String,
}

/// What a row's runs did to the data, for the conclusion (`, 997 rows lost, 1 invalid`).
fn harm(r: &Row) -> String {
    let mut out = String::new();
    if r.rows_lost > 0 {
        out.push_str(&format!(", {} rows lost", r.rows_lost));
    }
    if r.stale_writes_accepted > 0 {
        out.push_str(&format!(
            ", {} stale writes accepted",
            r.stale_writes_accepted
        ));
    }
    if let Some(n) = (r.verdicts.split(' ')).find_map(|v| v.strip_prefix("invalid:")) {
        out.push_str(&format!(", {n} invalid"));
    }
    out
}

/// The conclusion for one lock service's and fencing setting's rows (sorted by lease), against
/// that service's measured renewal distribution `sweep`; `too_slow`: every run was
/// cut short by the mover's pace, so no lease was really tried.
pub fn conclude(
    rows: &[&Row],
    sweep: &Percentiles,
    runs_per_cell: u32,
    too_slow: bool,
) -> Conclusion {
    let fencing = rows.first().map(|r| r.fencing.clone()).unwrap_or_default();
    let lock = rows.first().map(|r| r.lock.clone()).unwrap_or_default();
    let who = format!("lock {lock}, fencing {fencing}");
    // A lease that kept its holders live but let the data come to harm is not one to choose.
    let clean = |r: &Row| {
        r.false_expiries == 0
            && r.failed_runs == 0
            && r.renewals > 0
            && r.rows_lost == 0
            && r.stale_writes_accepted == 0
            && !r.verdicts.contains("invalid")
    };
    // From the longest lease down, while clean: the shortest lease above which nothing failed.
    let mut smallest: Option<&Row> = None;
    for r in rows.iter().rev() {
        if clean(r) {
            smallest = Some(r);
        } else {
            break;
        }
    }
    let mut lines = Vec::new();
    let mut too_few = false;
    let p999 = sweep.p999_ms;
    match smallest {
        Some(r) => {
            let margin = r.lease_s * 1000.0 - p999;
            let ratio = if p999 > 0.0 { r.lease_s * 1000.0 / p999 } else { f64::INFINITY };
            lines.push(format!(
                "{who}: the smallest lease with no false expiry and no invalid run (and neither at any longer lease) is {}: {:+.0} ms over the measured renewal p99.9 of {:.0} ms ({ratio:.1}x).",
                secs(r.lease_s), margin, p999
            ));
            let shorter: Vec<String> = rows
                .iter()
                .filter(|x| x.lease_s < r.lease_s)
                .map(|x| format!("{} had {} in {} run(s){}", secs(x.lease_s), x.false_expiries, x.runs, harm(x)))
                .collect();
            if !shorter.is_empty() {
                lines.push(format!("  shorter leases: {}.", shorter.join(", ")));
            }
            let also_clean: Vec<String> = rows
                .iter()
                .filter(|x| x.lease_s < r.lease_s && clean(x))
                .map(|x| secs(x.lease_s))
                .collect();
            if !also_clean.is_empty() {
                too_few = true;
                lines.push(format!(
                    "  {} also showed none, but a longer lease did: the runs are too few to tell these apart.",
                    also_clean.join(", ")
                ));
            }
            lines.push(format!(
                "  no false expiry in {} renewals at {} bounds the rate only to below 3 in {} renewals (95 %).",
                r.renewals,
                secs(r.lease_s),
                r.renewals
            ));
        }
        None if too_slow => lines.push(format!(
            "{who}: no lease can be judged: every run was cut short by the mover's pace (above), not by its lease."
        )),
        None => lines.push(format!(
            "{who}: every lease in the sweep showed a false expiry (or an invalid or failed run); try longer leases{}.",
            if rows.iter().any(|r| r.rows_lost > 0 || r.stale_writes_accepted > 0) { ", or fencing" } else { "" }
        )),
    }
    if sweep.count < P999_SAMPLES {
        too_few = true;
        lines.push(format!(
            "  too few runs to tell: {} renewals measured in all; a p99.9 needs at least {P999_SAMPLES} (with fewer it is the maximum), so run more (--runs).",
            sweep.count
        ));
    }
    if runs_per_cell < 3 {
        too_few = true;
        lines.push(format!(
            "  too few runs to tell how often: {runs_per_cell} run(s) per lease show what can happen, not its rate; use --runs 3 or more before choosing."
        ));
    }
    Conclusion {
        lock,
        fencing,
        smallest_clean_lease_s: smallest.map(|r| r.lease_s),
        margin_over_p999_ms: smallest.map(|r| r.lease_s * 1000.0 - p999),
        ratio_to_p999: smallest
            .filter(|_| p999 > 0.0)
            .map(|r| r.lease_s * 1000.0 / p999),
        renewals_at_clean_lease: smallest.map(|r| r.renewals).unwrap_or(0),
        too_few,
        text: lines.join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::{FalseExpiry, RunFigures};

    fn run(lease_s: f64, false_expiries: usize, renew_ms: &[u64]) -> RunResult {
        RunResult {
            lock: "claims".into(),
            lease_s,
            fencing: "off".into(),
            seed: 1,
            dir: Some("x".into()),
            verdict: Some(
                if false_expiries > 0 {
                    "invalid"
                } else {
                    "valid"
                }
                .into(),
            ),
            wall_s: 1.0,
            error: None,
            pace: None,
            figures: Some(RunFigures {
                renew_us: renew_ms.iter().map(|m| m * 1000).collect(),
                renewals: renew_ms.len() as u64,
                false_expiries: (0..false_expiries)
                    .map(|_| FalseExpiry {
                        holder: "box-2".into(),
                        token: 7,
                        by: "box-3".into(),
                        at: "12:00:00.0".into(),
                    })
                    .collect(),
                takeovers: false_expiries as u64 + 1,
                vacancy_total_s: 4.0,
                vacancy_max_s: 3.0,
                holder_kills: vec![Some(12.5)],
                finish_s: Some(1000.0),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn percentiles_come_from_the_samples() {
        // 1..2,000 scenario ms: far past a fresh histogram's starting range.
        let us: Vec<u64> = (1..=2000).map(|i| i * 1000).collect();
        let p = percentiles(&us);
        assert_eq!(p.count, 2000);
        assert!((p.p50_ms - 1000.0).abs() < 2.0, "{p:?}");
        assert!((p.p999_ms - 1998.0).abs() < 3.0, "{p:?}");
        assert_eq!(p.max_ms, 2000.0);
    }

    #[test]
    fn rows_sum_counts_and_keep_worst_maxima() {
        let (a, b) = (run(2.0, 2, &[30, 40, 2500]), run(2.0, 0, &[30, 35]));
        let r = row("claims", 2.0, "off", &[&a, &b], 2100.0, 10.0);
        assert_eq!(
            (
                r.runs,
                r.renewals,
                r.false_expiries,
                r.runs_with_false_expiry
            ),
            (2, 5, 2, 1)
        );
        assert_eq!(r.takeovers, 4);
        assert_eq!(r.margin_over_p999_ms, -100.0);
        assert_eq!(r.recover_s, Some(12.5));
        assert_eq!(r.vacancy_total_s, 4.0);
        assert_eq!(r.renew_max_ms, 2500.0);
        let csv = csv(&[r.clone()]);
        let mut lines = csv.lines();
        assert_eq!(lines.next().unwrap(), COLUMNS.join(","));
        let fields: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(fields.len(), COLUMNS.len());
        assert_eq!((fields[0], fields[1]), ("claims", "2"));
        assert_eq!(
            fields[COLUMNS.iter().position(|c| *c == "false_expiries").unwrap()],
            "2"
        );
        let t = text(&[r]);
        assert!(
            t.lines().next().unwrap().starts_with("lock    lease"),
            "{t}"
        );
        assert!(t.lines().nth(2).unwrap().starts_with("claims  2s"), "{t}");
        assert!(t.contains("2s"), "{t}");
    }

    #[test]
    fn the_conclusion_names_the_smallest_clean_lease_and_says_when_runs_are_few() {
        let many: Vec<u64> = std::iter::repeat(30).take(600).collect();
        let cells = [
            run(2.0, 3, &many),
            run(5.0, 0, &many),
            run(10.0, 1, &many),
            run(30.0, 0, &many),
            run(60.0, 0, &many),
        ];
        let rows: Vec<Row> = cells
            .iter()
            .map(|c| row("claims", c.lease_s, "off", &[c], 2100.0, 10.0))
            .collect();
        let refs: Vec<&Row> = rows.iter().collect();
        let sweep = Percentiles {
            count: 3000,
            p999_ms: 2100.0,
            ..Default::default()
        };
        let c = conclude(&refs, &sweep, 1, false);
        assert_eq!(c.smallest_clean_lease_s, Some(30.0));
        assert!(
            c.text.starts_with("lock claims, fencing off: "),
            "{}",
            c.text
        );
        assert_eq!(c.margin_over_p999_ms, Some(27_900.0));
        assert!(c.too_few);
        assert!(c.text.contains("5s also showed none"), "{}", c.text);
        assert!(c.text.contains("too few runs to tell"), "{}", c.text);
        // Enough renewals and runs, a clean monotone sweep: no hedging.
        let sweep = Percentiles {
            count: 5000,
            p999_ms: 2100.0,
            ..Default::default()
        };
        let c = conclude(&refs[3..], &sweep, 3, false);
        assert!(!c.too_few, "{}", c.text);
        let few = Percentiles {
            count: 400,
            p999_ms: 2100.0,
            ..Default::default()
        };
        let c = conclude(&refs[3..], &few, 3, false);
        assert!(c.text.contains("400 renewals measured"), "{}", c.text);
        // A lease whose runs lost data is not chosen, though its holders stayed live.
        let mut lossy = rows.clone();
        lossy[3].rows_lost = 997;
        lossy[3].verdicts = "invalid:1".into();
        let refs: Vec<&Row> = lossy.iter().collect();
        let c = conclude(&refs, &sweep, 3, false);
        assert_eq!(c.smallest_clean_lease_s, Some(60.0), "{}", c.text);
        assert!(
            c.text
                .contains("30s had 0 in 1 run(s), 997 rows lost, 1 invalid"),
            "{}",
            c.text
        );
    }
}
