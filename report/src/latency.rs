//! Invoke->completion pairing and per-operation latency percentiles, in scenario ms.

use chaos_history::{Op, OpType, ScenarioClock, ScenarioMs};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// One operation of one history, as the report and the sweep see it: an
/// invoke with its completion, a completion nobody invoked (`lost`, `done`),
/// or an invoke that never completed (the run ended or the process died).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pair {
    pub invoke: Option<usize>,
    pub completion: Option<usize>,
}

/// Walks the history once and calls `each` for every pair, in completion
/// order, then for every invoke left open, in invoke order.
///
/// A completion matches the oldest pending invoke of the same process and
/// the same `f`: a mover does one thing at a time, but the ingest may have
/// several writes in flight under one process name, and matching on `f`
/// keeps a stray completion from stealing an unrelated invoke.
pub(crate) fn for_each_pair(history: &[Op], mut each: impl FnMut(Pair)) {
    let mut pending: HashMap<&str, VecDeque<usize>> = HashMap::new();
    for (i, op) in history.iter().enumerate() {
        if op.kind == OpType::Invoke {
            pending.entry(op.process.as_str()).or_default().push_back(i);
            continue;
        }
        let invoke = pending.get_mut(op.process.as_str()).and_then(|queue| {
            let at = queue.iter().position(|&j| history[j].f == op.f)?;
            queue.remove(at)
        });
        each(Pair {
            invoke,
            completion: Some(i),
        });
    }
    let mut open: Vec<usize> = pending.into_values().flatten().collect();
    open.sort_unstable();
    for i in open {
        each(Pair {
            invoke: Some(i),
            completion: None,
        });
    }
}

/// Latency of one operation for one class of process, in scenario ms.
///
/// Percentiles come from completed invoke->completion pairs (ok, fail and
/// info alike: a timeout's latency is exactly what a lease must outlast).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyRow {
    /// The operation's `f`.
    pub f: String,
    /// `box` for `box-1`..`box-4`, `ingest`, `nemesis`, ...
    pub class: String,
    /// Completed pairs measured.
    pub count: u64,
    pub ok: u64,
    pub fail: u64,
    pub info: u64,
    /// Invokes that never completed: not in the percentiles.
    pub open: u64,
    pub p50_ms: ScenarioMs<f64>,
    pub p90_ms: ScenarioMs<f64>,
    pub p99_ms: ScenarioMs<f64>,
    pub p999_ms: ScenarioMs<f64>,
    pub max_ms: ScenarioMs<f64>,
}

/// The class a process belongs to: its name without a trailing number
/// (`box-3` -> `box`, `ingest-2` -> `ingest`, `nemesis` -> `nemesis`).
pub fn process_class(process: &str) -> &str {
    let trimmed = process.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.len() == process.len() || trimmed.is_empty() {
        return process;
    }
    trimmed.strip_suffix(['-', '_']).unwrap_or(trimmed)
}

/// One latency row being gathered: completed pairs in an hdrhistogram, the rest counted.
#[derive(Debug, Clone)]
pub(crate) struct LatencyAcc {
    /// Scenario microseconds: sub-millisecond scenario latencies are common at
    /// scale (1 real ms is 100 scenario ms at the default scale, but a local
    /// statement takes well under a real ms).
    hist: Histogram<u64>,
    max_us: u64,
    ok: u64,
    fail: u64,
    info: u64,
    pub open: u64,
}

impl Default for LatencyAcc {
    fn default() -> Self {
        LatencyAcc {
            hist: Histogram::new(3).expect("3 significant figures is a valid histogram"),
            max_us: 0,
            ok: 0,
            fail: 0,
            info: 0,
            open: 0,
        }
    }
}

impl LatencyAcc {
    /// A completed pair: `real_ns` from its invoke to its completion of `kind`.
    pub fn record(&mut self, real_ns: i64, kind: OpType, clock: &ScenarioClock) {
        let ns_per_s = clock.real_ns_per_scenario_s.max(1) as i128;
        let scenario_us =
            (real_ns.max(0) as i128 * 1_000_000 / ns_per_s).min(u64::MAX as i128) as u64;
        // `new(3)` auto-resizes, so `record` only fails past u64 range; clamp then.
        if self.hist.record(scenario_us).is_err() {
            self.hist.saturating_record(scenario_us);
        }
        self.max_us = self.max_us.max(scenario_us);
        match kind {
            OpType::Ok => self.ok += 1,
            OpType::Fail => self.fail += 1,
            _ => self.info += 1,
        }
    }

    pub fn row(&self, class: &str, f: &str) -> LatencyRow {
        let q = |quantile: f64| {
            if self.hist.is_empty() {
                0.0
            } else {
                // hdrhistogram reports the top of the bucket; never above the true max.
                self.hist.value_at_quantile(quantile).min(self.max_us) as f64 / 1000.0
            }
        };
        LatencyRow {
            count: self.hist.len(),
            ok: self.ok,
            fail: self.fail,
            info: self.info,
            open: self.open,
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: self.max_us as f64 / 1000.0,
            f: f.to_string(),
            class: class.to_string(),
        }
    }
}

/// Latency percentiles per operation `f` and process class, from
/// invoke->completion pairs matched per process in order; sorted by class
/// then `f`. (The report takes the same table from its [`crate::HistoryDigest`],
/// gathered while the history streams.)
pub fn latency_table(history: &[Op], clock: &ScenarioClock) -> Vec<LatencyRow> {
    // Keyed by borrowed names: a 1 M-event history must not allocate per event.
    let mut by_ref: HashMap<(&str, &str), LatencyAcc> = HashMap::new();
    for_each_pair(history, |pair| {
        let head = &history[pair
            .invoke
            .or(pair.completion)
            .expect("a pair has an event")];
        let Some(inv) = pair.invoke else { return };
        let acc = by_ref
            .entry((process_class(&head.process), head.f.as_str()))
            .or_default();
        let Some(done) = pair.completion else {
            acc.open += 1;
            return;
        };
        acc.record(
            history[done].time_ns.saturating_sub(history[inv].time_ns),
            history[done].kind,
            clock,
        );
    });
    let accs: BTreeMap<(&str, &str), LatencyAcc> = by_ref.into_iter().collect();
    accs.into_iter()
        .map(|((class, f), acc)| acc.row(class, f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock() -> ScenarioClock {
        ScenarioClock {
            start_unix_ns: 0,
            start_scenario_ms: 78_000_000,
            real_ns_per_scenario_s: 10_000_000,
            scenario_day_unix_ms: 0,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        }
    }

    fn op(index: u64, time_ns: i64, process: &str, kind: OpType, f: &str) -> Op {
        Op {
            index,
            time_ns,
            scenario_time: String::new(),
            process: process.into(),
            kind,
            f: f.into(),
            value: serde_json::Value::Null,
        }
    }

    #[test]
    fn classes_strip_trailing_numbers() {
        assert_eq!(process_class("box-3"), "box");
        assert_eq!(process_class("box-12"), "box");
        assert_eq!(process_class("ingest"), "ingest");
        assert_eq!(process_class("nemesis"), "nemesis");
        assert_eq!(process_class("42"), "42");
    }

    #[test]
    fn percentiles_follow_the_pairs() {
        // 1000 renewals by two boxes taking 1..=1000 real µs, i.e. 0.1..100 scenario ms.
        let mut history = Vec::new();
        let mut t = 0;
        for k in 1..=1000i64 {
            let who = if k % 2 == 0 { "box-1" } else { "box-2" };
            history.push(op(0, t, who, OpType::Invoke, "renew"));
            history.push(op(
                0,
                t + k * 1000,
                who,
                if k == 7 { OpType::Fail } else { OpType::Ok },
                "renew",
            ));
            t += 2_000_000;
        }
        // An invoke that never completes, and a completion nobody invoked.
        history.push(op(0, t, "box-3", OpType::Invoke, "copy"));
        history.push(op(0, t, "box-3", OpType::Info, "lost"));
        let rows = latency_table(&history, &clock());
        let renew = rows.iter().find(|r| r.f == "renew").unwrap();
        assert_eq!(
            (renew.class.as_str(), renew.count, renew.ok, renew.fail),
            ("box", 1000, 999, 1)
        );
        assert!((renew.p50_ms - 50.0).abs() < 0.1, "p50 {}", renew.p50_ms);
        assert!((renew.p99_ms - 99.0).abs() < 0.1, "p99 {}", renew.p99_ms);
        assert!(
            (renew.p999_ms - 99.9).abs() < 0.1,
            "p99.9 {}",
            renew.p999_ms
        );
        assert_eq!(renew.max_ms, 100.0);
        let copy = rows.iter().find(|r| r.f == "copy").unwrap();
        assert_eq!((copy.count, copy.open), (0, 1));
        assert!(
            rows.iter().all(|r| r.f != "lost"),
            "a lone completion has no latency"
        );
    }

    #[test]
    fn completion_matches_same_f_in_order() {
        let history = vec![
            op(0, 0, "ingest", OpType::Invoke, "ingest"),
            op(1, 10, "ingest", OpType::Invoke, "ingest"),
            op(2, 1_000_000, "ingest", OpType::Ok, "ingest"),
            op(3, 5_000_000, "ingest", OpType::Ok, "ingest"),
        ];
        let mut pairs = Vec::new();
        for_each_pair(&history, |p| pairs.push(p));
        assert_eq!(
            pairs,
            vec![
                Pair {
                    invoke: Some(0),
                    completion: Some(2)
                },
                Pair {
                    invoke: Some(1),
                    completion: Some(3)
                }
            ]
        );
    }
}
