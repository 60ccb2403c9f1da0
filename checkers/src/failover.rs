//! The failover system's checker: (meta, history, both servers' final orders) -> verdict. Acknowledged orders absent from the surviving primary (lost, split by why), a window with two writable primaries and the writes each took, the time no primary accepted the app's writes, a promotion of a replica whose primary was alive.
//!
//! Pure, like every checker. `timeline.rs` reads the history once (orders, the observer's
//! roles and link states, the watcher's lines); `findings.rs` makes each anomaly class.

mod findings;
mod timeline;

use crate::{Anomaly, Stats, Verdict};
use chaos_history::failover_names as names;
use chaos_history::{FailoverFinal, FailoverMeta, History, RealMs};
use serde::{Deserialize, Serialize};
pub use timeline::{Outcome, Role, Timeline};

/// The failover figures a verdict carries (`Stats::failover`): scenario times as
/// `*_scenario_ms` with their `*_time` twin, durations in scenario seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FailoverStats {
    pub orders_acknowledged: u64,
    pub orders_uncertain: u64,
    pub orders_failed: u64,
    /// Acknowledged orders absent from the surviving primary, and why.
    pub lost_orders: u64,
    pub lost_not_replicated: u64,
    pub lost_after_promotion: u64,
    pub lost_on_neither: u64,
    /// The server judged as the surviving primary.
    pub survivor: String,
    pub promotion_scenario_ms: Option<i64>,
    pub promotion_time: Option<String>,
    /// The app's way to the old primary first cut (the fence in place), the service record
    /// first naming the replica (the repoint).
    pub fence_scenario_ms: Option<i64>,
    pub fence_time: Option<String>,
    pub repoint_scenario_ms: Option<i64>,
    pub repoint_time: Option<String>,
    /// The first order the new primary committed itself; the last the old one committed.
    pub first_write_new_primary_time: Option<String>,
    pub last_write_old_primary_time: Option<String>,
    /// Orders the old primary committed after the promotion.
    pub old_primary_writes_after_promotion: u64,
    /// Two writable primaries: in all, and the writes each took meanwhile.
    pub two_primaries_s: f64,
    pub two_primaries_writes_primary: u64,
    pub two_primaries_writes_replica: u64,
    /// No primary accepted the app's writes: in all, the longest stretch.
    pub unavailability_s: f64,
    pub unavailability_max_s: f64,
    pub false_promotions: u64,
    /// The watcher's check latencies (real ms, from its `check` lines).
    pub checks: u64,
    /// The watcher's check latencies as it reported them, real ms.
    pub check_latency_p50_ms: Option<RealMs<f64>>,
    pub check_latency_p999_ms: Option<RealMs<f64>>,
    pub check_latency_max_ms: Option<RealMs<f64>>,
}

/// Judge a failover run: its history as read back (a torn last line or no event at all
/// leaves it `unknown`, as for every system), and both servers' final orders.
pub fn check(
    meta: &FailoverMeta,
    history: &History,
    final_state: Option<&FailoverFinal>,
) -> Verdict {
    let timeline = Timeline::of(meta, &history.ops);
    let end = meta.end_scenario_ms.max(timeline.last_ms);
    let mut stats = FailoverStats::default();
    let mut anomalies: Vec<Anomaly> = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    if !meta.completed {
        reasons.push(format!(
            "the run did not complete: {}",
            meta.incomplete_reason
                .as_deref()
                .unwrap_or("no reason recorded")
        ));
    }
    let events = history.ops.len() as u64;
    reasons.extend(crate::observed::history_reasons(events, history.torn_tail));
    findings::tally(&timeline, &mut stats);
    findings::moments(meta, &timeline, final_state, &mut stats);
    match final_state {
        None => {
            reasons.push("no final state (final-state.json): lost orders cannot be judged".into())
        }
        Some(f) => {
            match findings::lost(meta, &timeline, f, &mut stats) {
                Ok(a) => anomalies.extend(a),
                Err(why) => reasons.push(why),
            }
            anomalies.extend(findings::two_primaries(meta, &timeline, f, end, &mut stats));
        }
    }
    anomalies.extend(findings::unavailability(meta, &timeline, end, &mut stats));
    anomalies.extend(findings::false_promotion(
        &timeline,
        final_state,
        &mut stats,
    ));
    findings::check_latency(&timeline, &mut stats);
    let found = findings::reached(&stats);
    let mut all = Stats {
        events,
        ..Stats::default()
    };
    all.failover = Some(stats);
    let verdict = Verdict::new(anomalies, reasons, all);
    crate::reached::settle(verdict, found.into_list(), &meta.expect_reach)
}

/// The server that survives as the primary: the replica once it was promoted, else the primary.
pub fn survivor(timeline: &Timeline, final_state: Option<&FailoverFinal>) -> &'static str {
    let promoted_at_end = final_state
        .and_then(|f| f.server(names::REPLICA))
        .and_then(|s| s.in_recovery)
        == Some(false);
    if promoted_at_end || timeline.promotion_ms().is_some() {
        names::REPLICA
    } else {
        names::PRIMARY
    }
}
