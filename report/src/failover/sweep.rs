//! The failover sweep's half that needs no run: what one run contributes (`RunFigures`), a row per fence setting and silence constant, the table as text and CSV, and the conclusion: false promotions and unavailability side by side against the measured check latency.

use chaos_history::ScenarioMs;
use serde::Serialize;

/// What one run contributes, measured from its history and verdict.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunFigures {
    pub verdict: String,
    pub promotions: u64,
    pub false_promotions: u64,
    pub unavailability_s: f64,
    pub unavailability_max_s: f64,
    pub lost_orders: u64,
    pub two_primaries_s: f64,
    /// Every check latency the watcher reported, scenario ms (a failed check at its timeout).
    #[serde(skip)]
    pub checks_ms: Vec<ScenarioMs<f64>>,
}

/// One cell: a fence setting and a silence constant over its runs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub fence: String,
    pub silence_s: f64,
    pub runs: usize,
    pub invalid: usize,
    pub promotions: u64,
    pub false_promotions: u64,
    /// Mean over the runs of each run's total unavailability, and the longest stretch seen.
    pub unavailability_mean_s: f64,
    pub unavailability_max_s: f64,
    pub lost_orders: u64,
    pub two_primaries_mean_s: f64,
    pub checks: usize,
    pub check_p999_ms: ScenarioMs<f64>,
    pub check_max_ms: ScenarioMs<f64>,
}

/// The CSV's and the JSON's columns, in order.
pub const COLUMNS: [&str; 13] = [
    "fence",
    "silence_s",
    "runs",
    "invalid",
    "promotions",
    "false_promotions",
    "unavailability_mean_s",
    "unavailability_max_s",
    "lost_orders",
    "two_primaries_mean_s",
    "checks",
    "check_p999_ms",
    "check_max_ms",
];

/// The q-quantile of sorted samples (nearest rank).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A cell's row from its runs.
pub fn row(fence: &str, silence_s: f64, runs: &[&RunFigures]) -> Row {
    let n = runs.len().max(1) as f64;
    let mut checks: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.checks_ms.iter().copied())
        .collect();
    checks.sort_by(|a, b| a.total_cmp(b));
    Row {
        fence: fence.to_string(),
        silence_s,
        runs: runs.len(),
        invalid: runs.iter().filter(|r| r.verdict == "invalid").count(),
        promotions: runs.iter().map(|r| r.promotions).sum(),
        false_promotions: runs.iter().map(|r| r.false_promotions).sum(),
        unavailability_mean_s: runs.iter().map(|r| r.unavailability_s).sum::<f64>() / n,
        unavailability_max_s: runs
            .iter()
            .map(|r| r.unavailability_max_s)
            .fold(0.0, f64::max),
        lost_orders: runs.iter().map(|r| r.lost_orders).sum(),
        two_primaries_mean_s: runs.iter().map(|r| r.two_primaries_s).sum::<f64>() / n,
        checks: checks.len(),
        check_p999_ms: quantile(&checks, 0.999),
        check_max_ms: checks.last().copied().unwrap_or(0.0),
    }
}

/// The table a person reads.
pub fn text(rows: &[Row]) -> String {
    let mut out = format!(
        "{:<6} {:>8} {:>5} {:>8} {:>10} {:>6} {:>14} {:>13} {:>6} {:>14} {:>13}\n",
        "fence",
        "silence",
        "runs",
        "invalid",
        "promotions",
        "false",
        "unavail mean s",
        "unavail max s",
        "lost",
        "two primaries",
        "check p99.9"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<6} {:>7}s {:>5} {:>8} {:>10} {:>6} {:>14.1} {:>13.1} {:>6} {:>13.1}s {:>10.0} ms\n",
            r.fence,
            r.silence_s,
            r.runs,
            r.invalid,
            r.promotions,
            r.false_promotions,
            r.unavailability_mean_s,
            r.unavailability_max_s,
            r.lost_orders,
            r.two_primaries_mean_s,
            r.check_p999_ms
        ));
    }
    out
}

/// The table as CSV, `COLUMNS` first.
pub fn csv(rows: &[Row]) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    for r in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{},{:.3},{:.3},{},{:.3},{},{:.1},{:.1}\n",
            r.fence,
            r.silence_s,
            r.runs,
            r.invalid,
            r.promotions,
            r.false_promotions,
            r.unavailability_mean_s,
            r.unavailability_max_s,
            r.lost_orders,
            r.two_primaries_mean_s,
            r.checks,
            r.check_p999_ms,
            r.check_max_ms
        ));
    }
    out
}

/// What the rows of one fence setting say, in a sentence or two: the shortest silence with no
/// false promotion against the measured check latency, and what each silence cost.
pub fn conclude(rows: &[&Row], p999_ms: f64, max_ms: f64) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let safe = rows.iter().find(|r| r.false_promotions == 0);
    let costs: Vec<String> = rows
        .iter()
        .map(|r| format!("{} s: {:.1} s", r.silence_s, r.unavailability_mean_s))
        .collect();
    let verdict = match safe {
        Some(r) if r.silence_s == first.silence_s => format!(
            "no silence swept promoted a live primary (the shortest, {} s, is already above what the checks saw)",
            r.silence_s
        ),
        Some(r) => format!(
            "silences under {} s promoted a live primary; {} s was the shortest with no false promotion",
            r.silence_s, r.silence_s
        ),
        None => "every silence swept promoted a live primary at least once".to_string(),
    };
    format!(
        "fence {}: measured check latency p99.9 {p999_ms:.0} ms, max {max_ms:.0} ms (scenario); {verdict}. Unavailability per run by silence: {}.",
        first.fence,
        costs.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_conclusions_come_from_the_runs() {
        let fast = RunFigures {
            verdict: "invalid".into(),
            promotions: 2,
            false_promotions: 1,
            unavailability_s: 6.0,
            checks_ms: vec![1.0, 2.0, 2000.0],
            ..Default::default()
        };
        let slow = RunFigures {
            verdict: "valid".into(),
            promotions: 1,
            unavailability_s: 64.0,
            checks_ms: vec![1.0, 3.0],
            ..Default::default()
        };
        let rows = [row("off", 5.0, &[&fast]), row("off", 60.0, &[&slow])];
        assert_eq!(rows[0].false_promotions, 1);
        assert_eq!(rows[0].check_p999_ms, 2000.0);
        let c = conclude(&rows.iter().collect::<Vec<_>>(), 2000.0, 2000.0);
        assert!(
            c.contains("silences under 60 s promoted a live primary"),
            "{c}"
        );
        assert!(c.contains("5 s: 6.0 s, 60 s: 64.0 s"), "{c}");
        assert!(csv(&rows).starts_with("fence,silence_s"));
        assert!(text(&rows).contains("off"));
    }
}
