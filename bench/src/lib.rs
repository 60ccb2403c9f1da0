//! The checker's own figures for `chaos bench`: a synthetic run of N events over 300 turbines with a year each, checked and timed.
//!
//! It reads a clock and `/proc`: it measures the checker, it is not one, so it lives beside
//! `chaos-checkers` (whose invariant is no IO, no clock) rather than in it.

mod synthetic;

pub use synthetic::Synthetic;

use chaos_checkers::{HistoryFold, Validity};
use chaos_history::{Op, OpType};
use std::fmt;
use std::time::Instant;
use synthetic::{synthesize, TURBINES};

/// Lines decoded to estimate the `chaos check DIR` path (JSON per line).
const DECODE_SAMPLE: usize = 200_000;

/// What one synthetic check measured.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchFigures {
    pub events: u64,
    pub turbines: u64,
    /// Readings the seeded years and the ingest stand for (held as runs).
    pub readings: u64,
    /// Wall time to fold every event and finish the verdict.
    pub check_s: f64,
    pub events_per_s: f64,
    /// Decoding history lines into `Op` (`HistoryReader`), events per second.
    pub json_decode_events_per_s: f64,
    /// Folding history lines straight from text (`HistoryFold::observe_line`), events per second.
    pub line_fold_events_per_s: f64,
    /// The process's peak resident memory (`VmHWM`), MiB; `None` off Linux.
    pub peak_rss_mib: Option<f64>,
    /// The synthetic run plants one lost turbine: this must say invalid.
    pub valid: Validity,
    pub anomalies: usize,
}

impl fmt::Display for BenchFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "checker bench: {} events, {} turbines, {:.2} G readings as runs",
            self.events,
            self.turbines,
            self.readings as f64 / 1e9
        )?;
        writeln!(
            f,
            "  check:       {:.2} s wall, {:.2} M events/s",
            self.check_s,
            self.events_per_s / 1e6
        )?;
        writeln!(
            f,
            "  from text:   Op decode {:.2} M lines/s (~{:.0} s for these events); observe_line {:.2} M lines/s (~{:.1} s)",
            self.json_decode_events_per_s / 1e6,
            self.events as f64 / self.json_decode_events_per_s,
            self.line_fold_events_per_s / 1e6,
            self.events as f64 / self.line_fold_events_per_s,
        )?;
        match self.peak_rss_mib {
            Some(m) => writeln!(f, "  peak memory: {m:.1} MiB (VmHWM)")?,
            None => writeln!(f, "  peak memory: unknown (no /proc/self/status)")?,
        }
        write!(
            f,
            "  verdict:     {:?} with {} anomalies (one lost turbine planted)",
            self.valid, self.anomalies
        )
    }
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Synthesize a run of about `events` history events (ingest batches every
/// 2 scenario seconds) over 300 turbines with a year of 2 s readings each,
/// check it through `HistoryFold`, and report wall time, events per second
/// and peak memory. The events are generated as they are folded, never held.
pub fn bench_synthetic(events: u64) -> BenchFigures {
    let mut syn = synthesize(events);

    // The `chaos check DIR` path decodes each line first: measure that on a sample.
    let mut sample_op = syn.batches[0].clone();
    sample_op.kind = OpType::Ok;
    let line = serde_json::to_string(&sample_op).expect("an op serializes");
    let started = Instant::now();
    let mut decoded = 0u64;
    let sample = DECODE_SAMPLE.min(events as usize).max(1);
    for _ in 0..sample {
        let op: Op = serde_json::from_str(&line).expect("an op decodes");
        decoded += op.index + 1;
    }
    let decode_s = started.elapsed().as_secs_f64();
    assert_eq!(decoded, sample as u64);
    let mut lines = HistoryFold::new(&syn.meta);
    let started = Instant::now();
    for _ in 0..sample {
        lines
            .observe_line(&line)
            .expect("an op folds from its line");
    }
    let line_s = started.elapsed().as_secs_f64();
    assert_eq!(lines.events(), sample as u64);

    let started = Instant::now();
    let mut fold = HistoryFold::new(&syn.meta);
    let index = syn.for_each_op(|op| fold.observe(op));
    let verdict = fold.finish(&syn.meta, Some(&syn.audit), Some(&syn.final_state));
    let check_s = started.elapsed().as_secs_f64();

    let ingest_readings = syn.ticks * TURBINES as u64;
    let seeded_readings: u64 = syn.meta.seeded.iter().map(|s| s.run.len()).sum();
    BenchFigures {
        events: index,
        turbines: TURBINES as u64,
        readings: seeded_readings + ingest_readings,
        check_s,
        events_per_s: index as f64 / check_s,
        json_decode_events_per_s: sample as f64 / decode_s,
        line_fold_events_per_s: sample as f64 / line_s,
        peak_rss_mib: peak_rss_mib(),
        valid: verdict.valid,
        anomalies: verdict.anomalies.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_synthetic_run_finds_its_planted_lost_turbine() {
        let figures = bench_synthetic(60_000);
        assert_eq!(figures.valid, Validity::Invalid);
        assert!((59_000..61_000).contains(&figures.events));
        let syn = synthesize(60_000);
        let mut fold = HistoryFold::new(&syn.meta);
        fold.observe(&syn.batches[0]);
        let v = fold.finish(&syn.meta, Some(&syn.audit), Some(&syn.final_state));
        let stats = v.stats;
        // April's shape: ingest most of it, the boxes and the nemesis the rest, in time order.
        let mut syn = synthesize(60_000);
        let (mut last_ns, mut by_process) = (0, std::collections::BTreeMap::<String, u64>::new());
        let n = syn.for_each_op(|op| {
            assert!(op.time_ns >= last_ns, "in time order");
            last_ns = op.time_ns;
            *by_process.entry(op.process.clone()).or_default() += 1;
        });
        assert!((59_000..61_000).contains(&n), "{n} events");
        assert!(by_process["ingest"] * 100 / n >= 75, "{by_process:?}");
        for p in ["box-1", "box-2", "box-3", "box-4", "nemesis"] {
            assert!(
                by_process.get(p).copied().unwrap_or(0) > 10,
                "{p}: {by_process:?}"
            );
        }
        assert_eq!(stats.lost_turbines.len(), 1);
        assert_eq!(stats.rows_lost, 15_768_000);
        assert_eq!(stats.vacancy_max_s, 34.0);
    }
}
