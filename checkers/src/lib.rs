//! Checkers: pure functions `(history, audit, final state, meta) -> Verdict`.
//!
//! Invariant: no IO, no clock, no randomness, no tokio, no Postgres. Reading
//! files and writing `verdict.json` is the harness's job.

mod verdict;

pub use verdict::{Anomaly, AnomalyClass, Severity, Validity, Verdict};
