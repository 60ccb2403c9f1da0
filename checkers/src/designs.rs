//! Judging the seed's other designs (systems `payout` and `ten-objects`): the lock's own
//! promise from the claim audit, the writes the resources refused, and each design's classes,
//! which `judge.rs` hands in (`payout.rs`, `objects.rs`).

use crate::claims::Claims;
use crate::fold::HistoryFold;
use crate::grants::lock_promise;
use crate::reached::{self, Found};
use crate::stats::Stats;
use crate::{fencing, Anomaly, Verdict};
use chaos_history::{Audit, RunMeta};

/// The verdict of a run of one of the designs; `reasons` are the inputs' (a missing audit or
/// final state, a history cut short), `design` the design's own classes.
pub(crate) fn judge(
    fold: &HistoryFold,
    meta: &RunMeta,
    audit: Option<&Audit>,
    reasons: Vec<String>,
    design: impl FnOnce(&mut Stats) -> Vec<Anomaly>,
) -> Verdict {
    let mut stats = Stats {
        events: fold.events,
        refused_writes: fold.refusals.len() as u64,
        ..Stats::default()
    };
    let mut anomalies = Vec::new();
    anomalies.extend(fencing::refused_anomaly(&fold.refusals, meta));
    let mut found = Found::default();
    let claims = audit.map_or_else(Claims::default, |a| {
        Claims::from_audit(&meta.job, &a.claim_changes)
    });
    if let Some(audit) = audit {
        stats.claim_changes = audit.claim_changes.len() as u64;
        let promise = lock_promise(meta, &claims, &mut stats);
        reached::promise(promise.as_ref(), &mut found);
        anomalies.extend(promise);
    }
    reached::scene(meta, reached::seen(fold), &claims).find(&mut found);
    anomalies.extend(design(&mut stats));
    let verdict = Verdict::new(anomalies, reasons, stats);
    reached::settle(verdict, found.into_list(), &meta.expect_reach)
}
