//! Runs: a regular series of readings `(first, last, step)` held as one value, so a year costs one comparison.

use crate::ReadingMs;
use serde::{Deserialize, Serialize};

/// `count` readings at `first_ms`, `first_ms + step_ms`, ... `last_ms`,
/// each present `copies` times (2 or more is a duplicate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Run {
    pub first_ms: ReadingMs,
    pub last_ms: ReadingMs,
    /// 0 for a run of one reading.
    pub step_ms: ReadingMs,
    #[serde(default = "one")]
    pub copies: u32,
}

fn one() -> u32 {
    1
}

impl Run {
    pub fn single(ts_ms: i64, copies: u32) -> Run {
        Run {
            first_ms: ts_ms,
            last_ms: ts_ms,
            step_ms: 0,
            copies,
        }
    }

    /// How many distinct timestamps the run holds.
    pub fn len(&self) -> u64 {
        if self.step_ms == 0 {
            1
        } else {
            ((self.last_ms - self.first_ms) / self.step_ms) as u64 + 1
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Rows on disk: distinct timestamps times copies.
    pub fn rows(&self) -> u64 {
        self.len() * self.copies as u64
    }

    /// Whether `ts_ms` is one of the run's timestamps.
    pub fn contains(&self, ts_ms: i64) -> bool {
        if ts_ms < self.first_ms || ts_ms > self.last_ms {
            return false;
        }
        self.step_ms == 0 || (ts_ms - self.first_ms) % self.step_ms == 0
    }
}

/// Builds runs from timestamps given in ascending order (equal timestamps
/// add copies). Feeding 15.77 M regular readings yields one run.
#[derive(Debug, Default)]
pub struct RunBuilder {
    runs: Vec<Run>,
    /// The last timestamp and how many times it was seen, not yet placed.
    pending: Option<(i64, u32)>,
}

impl RunBuilder {
    pub fn new() -> RunBuilder {
        RunBuilder::default()
    }

    /// Add one timestamp; must not be lower than the previous one.
    pub fn push(&mut self, ts_ms: i64) {
        self.push_copies(ts_ms, 1);
    }

    /// Add a timestamp seen `copies` times.
    pub fn push_copies(&mut self, ts_ms: i64, copies: u32) {
        match self.pending {
            Some((t, c)) if t == ts_ms => self.pending = Some((t, c + copies)),
            Some((t, c)) => {
                debug_assert!(ts_ms > t, "timestamps must ascend");
                self.place(t, c);
                self.pending = Some((ts_ms, copies));
            }
            None => self.pending = Some((ts_ms, copies)),
        }
    }

    /// Add a whole run (its timestamps must come after everything pushed).
    pub fn push_run(&mut self, run: Run) {
        if run.len() <= 2 {
            self.push_copies(run.first_ms, run.copies);
            if run.last_ms != run.first_ms {
                self.push_copies(run.last_ms, run.copies);
            }
            return;
        }
        if let Some((t, c)) = self.pending.take() {
            self.place(t, c);
        }
        match self.runs.last_mut() {
            Some(last)
                if last.copies == run.copies
                    && (last.step_ms == run.step_ms || last.step_ms == 0)
                    && run.first_ms - last.last_ms == run.step_ms =>
            {
                last.step_ms = run.step_ms;
                last.last_ms = run.last_ms;
            }
            _ => self.runs.push(run),
        }
    }

    fn place(&mut self, ts: i64, copies: u32) {
        if let Some(last) = self.runs.last_mut() {
            if last.copies == copies {
                let gap = ts - last.last_ms;
                if last.step_ms == 0 && gap > 0 {
                    last.step_ms = gap;
                    last.last_ms = ts;
                    return;
                }
                if gap == last.step_ms {
                    last.last_ms = ts;
                    return;
                }
            }
        }
        self.runs.push(Run::single(ts, copies));
    }

    pub fn finish(mut self) -> Vec<Run> {
        if let Some((t, c)) = self.pending.take() {
            self.place(t, c);
        }
        self.runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_series_is_one_run() {
        let mut b = RunBuilder::new();
        for i in 0..15_768 {
            b.push(1_000 + i * 2_000);
        }
        let runs = b.finish();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].len(), 15_768);
        assert_eq!(runs[0].step_ms, 2_000);
    }

    #[test]
    fn a_gap_and_a_duplicate_split_runs() {
        let mut b = RunBuilder::new();
        for ts in [0, 2, 4, 8, 10, 10, 12] {
            b.push(ts);
        }
        let runs = b.finish();
        let rows: u64 = runs.iter().map(Run::rows).sum();
        assert_eq!(rows, 7);
        assert!(runs.iter().any(|r| r.copies == 2 && r.first_ms == 10));
    }

    #[test]
    fn whole_runs_join_when_they_continue() {
        let mut b = RunBuilder::new();
        b.push_run(Run {
            first_ms: 0,
            last_ms: 100,
            step_ms: 2,
            copies: 1,
        });
        b.push_run(Run {
            first_ms: 102,
            last_ms: 200,
            step_ms: 2,
            copies: 1,
        });
        assert_eq!(
            b.finish(),
            vec![Run {
                first_ms: 0,
                last_ms: 200,
                step_ms: 2,
                copies: 1
            }]
        );
    }
}
