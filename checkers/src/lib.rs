//! Checkers: pure functions `(history, audit, final state, meta) -> Verdict`.
//!
//! Invariant: no IO, no clock, no randomness, no tokio, no Postgres. Reading
//! files and writing `verdict.json` is the harness's job; timing a check is
//! `chaos-bench`'s.
//!
//! `failover::check` judges a run of the failover system (a primary, a replica and a watcher).
//!
//! `check` judges a loaded mover run; `HistoryFold` is the same check streamed,
//! for a history too big to hold (`observe` every event, then `finish`).

mod attribution;
mod claims;
mod designs;
pub mod failover;
mod fencing;
mod fold;
mod forgotten;
mod grants;
mod judge;
mod lease;
mod liveness;
mod notes;
mod objects;
mod observed;
mod payout;
mod reached;
mod readings;
mod rows;
mod stall;
mod stats;
mod times;
mod verdict;
mod writes;

pub use fold::{FoldEvent, HistoryFold, Refusal, TurbineList};
pub use observed::in_order;
pub use reached::Reached;
pub use stats::{GrantStat, Stats};
pub use verdict::{Anomaly, AnomalyClass, Severity, Validity, Verdict};

use chaos_history::RunRecord;

/// Judge a stored run (its events in the order their lines say, `observed::in_order`).
pub fn check(record: &RunRecord) -> Verdict {
    let mut fold = HistoryFold::new(&record.meta);
    for op in in_order(&record.history) {
        fold.observe(op);
    }
    if record.torn_tail {
        fold.note_torn_tail();
    }
    fold.finish(
        &record.meta,
        record.audit.as_ref(),
        record.final_state.as_ref(),
    )
}
