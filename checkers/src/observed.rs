//! What a history can and cannot say, the same for every system: its events in the order their own lines give, and why a history torn or empty leaves a run `unknown`.
//!
//! A line carries its `time_ns` and `index`; where it stands in the file says nothing
//! (per-process files merged, a writer that flushes out of order, an `ok` written before its
//! `invoke`). A checker that reads the history in memory takes it through [`in_order`]; the
//! streaming fold is built to give the same result in any order. A line written twice is
//! the same event: every class is judged on sets (orders by id, readings by timestamp), so a
//! repeat changes no verdict.

use chaos_history::Op;

/// The events in the order their lines say they happened: by `time_ns`, then `index`.
pub fn in_order(ops: &[Op]) -> Vec<&Op> {
    let mut ordered: Vec<&Op> = ops.iter().collect();
    ordered.sort_by_key(|op| (op.time_ns, op.index));
    ordered
}

/// Why what was read of the history leaves the run `unknown`: its last line torn off (the
/// harness stopped mid-write), or no event at all. Nothing observed explains nothing and
/// accuses nothing: the classes that rest on what the history says (phantom rows) are then
/// information, not errors.
pub(crate) fn history_reasons(events: u64, torn_tail: bool) -> Vec<String> {
    let mut reasons = Vec::new();
    if torn_tail {
        reasons.push("history ends in a torn line: the harness stopped mid-write".to_string());
    }
    if events == 0 {
        reasons.push("empty history: no operation was observed".to_string());
    }
    reasons
}

/// Whether a class that counts what a store holds can prove an absence: only when the store
/// was read whole. Else the finding is information and the caveat says why (the verdict's
/// reasons already say the store is incomplete, so the run is `unknown`, never a loss).
pub(crate) fn absence_proven(
    store_complete: bool,
    caveat: &'static str,
) -> (crate::Severity, &'static str) {
    if store_complete {
        (crate::Severity::Error, "")
    } else {
        (crate::Severity::Info, caveat)
    }
}
