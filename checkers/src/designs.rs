//! Judging the seed's other designs (systems `payout` and `ten-objects`): the lock's own promise from the claim audit, the writes the resources refused, and each design's classes (`payout.rs`, `objects.rs`).

use crate::claims::Claims;
use crate::fold::HistoryFold;
use crate::grants::lock_promise;
use crate::reached::{self, Found};
use crate::stats::Stats;
use crate::{fencing, objects, payout, Verdict};
use chaos_history::{Audit, FinalState, RunMeta, System};

/// The verdict of a run of one of the designs; `reasons` are the inputs' (a missing audit or
/// final state, a history cut short).
pub(crate) fn judge(
    fold: &HistoryFold,
    meta: &RunMeta,
    audit: Option<&Audit>,
    final_state: Option<&FinalState>,
    reasons: Vec<String>,
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
    match meta.system {
        System::Payout => {
            if let Some(f) = final_state {
                anomalies.extend(payout::check(meta, f, &mut stats));
            }
        }
        System::TenObjects => {
            let writes = audit.map_or(&[][..], |a| a.object_writes.as_slice());
            let config = final_state.and_then(|f| f.config.as_ref());
            let whole = final_state.is_some_and(|f| f.complete);
            anomalies.extend(objects::check(meta, writes, config, whole, &mut stats));
        }
        System::Mover | System::Failover => {}
    }
    let verdict = Verdict::new(anomalies, reasons, stats);
    reached::settle(verdict, found.into_list(), &meta.expect_reach)
}
