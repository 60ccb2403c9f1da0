//! Each anomaly class of the failover system, from the timeline and both servers' final orders: lost orders, two primaries, unavailability, a false promotion; and the moments and tallies the story and the sweep read.

use super::timeline::{commit_ms, Outcome, Role, Timeline};
use super::{survivor, FailoverStats};
use crate::times::format_ms;
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::failover_names as names;
use chaos_history::{FailoverFinal, FailoverMeta, OpType, OrderRow};
use serde_json::json;
use std::collections::BTreeMap;

/// How many ids an anomaly's evidence lists (the count says how many there are).
const EVIDENCE_IDS: usize = 20;

fn s(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// Orders acknowledged, uncertain and failed.
pub fn tally(t: &Timeline, stats: &mut FailoverStats) {
    for o in t.orders.values() {
        match o.outcome {
            Outcome::Ok { .. } => stats.orders_acknowledged += 1,
            Outcome::Info | Outcome::Pending => stats.orders_uncertain += 1,
            Outcome::Fail => stats.orders_failed += 1,
        }
    }
}

/// The promotion, the fence, the repoint, the first write on the new primary and the last on
/// the old one, as the resources recorded them.
pub fn moments(
    meta: &FailoverMeta,
    t: &Timeline,
    final_state: Option<&FailoverFinal>,
    stats: &mut FailoverStats,
) {
    let promotion = t.promotion_ms();
    stats.promotion_scenario_ms = promotion;
    stats.promotion_time = promotion.map(format_ms);
    let from = t.faults.first().map(|f| f.0).unwrap_or(i64::MIN);
    let fence = t
        .first_disabled(&format!("{}->{}", names::APP, names::PRIMARY), from)
        .or_else(|| t.watcher_line(names::FENCE, OpType::Ok).map(|(ms, _)| ms));
    stats.fence_scenario_ms = fence;
    stats.fence_time = fence.map(format_ms);
    let repoint = t
        .repointed_to(names::REPLICA, i64::MIN)
        .or_else(|| t.watcher_line(names::REPOINT, OpType::Ok).map(|(ms, _)| ms));
    stats.repoint_scenario_ms = repoint;
    stats.repoint_time = repoint.map(format_ms);
    let Some(f) = final_state else {
        return;
    };
    let own = |node: &str| -> Vec<i64> {
        f.server(node)
            .map(|s| {
                s.orders
                    .iter()
                    .filter(|o| o.accepted_by == node)
                    .filter_map(|o| o.commit_unix_ns.map(|ns| commit_ms(meta, ns)))
                    .collect()
            })
            .unwrap_or_default()
    };
    stats.first_write_new_primary_time = own(names::REPLICA).into_iter().min().map(format_ms);
    let old = own(names::PRIMARY);
    stats.last_write_old_primary_time = old.iter().max().copied().map(format_ms);
    if let Some(p) = promotion {
        stats.old_primary_writes_after_promotion = old.iter().filter(|ms| **ms >= p).count() as u64;
    }
}

/// Why an acknowledged order is missing from the survivor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Why {
    NotReplicated,
    AfterPromotion,
    OnNeither,
}

impl Why {
    fn text(self) -> &'static str {
        match self {
            Why::NotReplicated => "not yet replicated at the promotion",
            Why::AfterPromotion => "accepted by the old primary after the promotion",
            Why::OnNeither => "on neither server",
        }
    }
}

/// Acknowledged orders absent from the surviving primary. Uncertain ones never count (they
/// may or may not have been written). Err: the survivor could not be read.
pub fn lost(
    meta: &FailoverMeta,
    t: &Timeline,
    f: &FailoverFinal,
    stats: &mut FailoverStats,
) -> Result<Option<Anomaly>, String> {
    let survivor = survivor(t, Some(f));
    stats.survivor = survivor.to_string();
    let held = f.server(survivor).filter(|s| s.read).ok_or_else(|| {
        format!("the surviving primary ({survivor}) could not be read at the end: lost orders cannot be judged")
    })?;
    let on_survivor: std::collections::BTreeSet<&str> =
        held.orders.iter().map(|o| o.id.as_str()).collect();
    let old: BTreeMap<&str, &OrderRow> = f
        .server(names::PRIMARY)
        .filter(|_| survivor != names::PRIMARY)
        .map(|s| s.orders.iter().map(|o| (o.id.as_str(), o)).collect())
        .unwrap_or_default();
    let promotion = t.promotion_ms();
    let mut lost: BTreeMap<Why, Vec<(String, i64)>> = BTreeMap::new();
    for (id, o) in &t.orders {
        let Outcome::Ok { ms: acked, .. } = o.outcome else {
            continue;
        };
        if on_survivor.contains(id.as_str()) {
            continue;
        }
        let committed = old
            .get(id.as_str())
            .and_then(|r| r.commit_unix_ns)
            .map(|ns| commit_ms(meta, ns));
        let why = match (committed, promotion) {
            (Some(c), Some(p)) if c >= p => Why::AfterPromotion,
            (Some(_), _) => Why::NotReplicated,
            (None, _) => Why::OnNeither,
        };
        lost.entry(why)
            .or_default()
            .push((id.clone(), committed.unwrap_or(acked)));
    }
    let n = |w: Why| lost.get(&w).map_or(0, |v| v.len() as u64);
    stats.lost_not_replicated = n(Why::NotReplicated);
    stats.lost_after_promotion = n(Why::AfterPromotion);
    stats.lost_on_neither = n(Why::OnNeither);
    stats.lost_orders =
        stats.lost_not_replicated + stats.lost_after_promotion + stats.lost_on_neither;
    if stats.lost_orders == 0 {
        return Ok(None);
    }
    let first = lost.values().flatten().map(|(_, ms)| *ms).min();
    let parts: Vec<String> = lost
        .iter()
        .map(|(w, v)| format!("{} {}", v.len(), w.text()))
        .collect();
    let split: Vec<serde_json::Value> = lost
        .iter()
        .map(|(w, v)| {
            let first = v.iter().map(|x| x.1).min().unwrap_or(0);
            let last = v.iter().map(|x| x.1).max().unwrap_or(0);
            json!({
                "why": w.text(), "count": v.len(),
                "first_time": format_ms(first), "last_time": format_ms(last),
                "ids": v.iter().take(EVIDENCE_IDS).map(|x| x.0.clone()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let summary = format!(
        "{} acknowledged orders are not on the surviving primary ({survivor}): {}",
        stats.lost_orders,
        parts.join(", ")
    );
    Ok(Some(Anomaly::new(
        AnomalyClass::LostOrders,
        Severity::Error,
        stats.lost_orders,
        first,
        summary,
        json!({ "survivor": survivor, "promotion_time": promotion.map(format_ms), "split": split }),
    )))
}

/// The stretches in which both servers could accept the app's writes, and the writes each
/// committed meanwhile. An error when either took one (which one holds an order then depends
/// on which address a client happened to dial); info when neither did.
pub fn two_primaries(
    meta: &FailoverMeta,
    t: &Timeline,
    f: &FailoverFinal,
    end: i64,
    stats: &mut FailoverStats,
) -> Option<Anomaly> {
    let a = t.writable(names::PRIMARY, end);
    let b = t.writable(names::REPLICA, end);
    let mut windows = Vec::new();
    for &(a0, a1) in &a {
        for &(b0, b1) in &b {
            let (from, to) = (a0.max(b0), a1.min(b1));
            if from < to {
                windows.push((from, to));
            }
        }
    }
    if windows.is_empty() {
        return None;
    }
    let writes = |node: &str, from: i64, to: i64| -> u64 {
        f.server(node).map_or(0, |s| {
            s.orders
                .iter()
                .filter(|o| o.accepted_by == node)
                .filter_map(|o| o.commit_unix_ns.map(|ns| commit_ms(meta, ns)))
                .filter(|ms| *ms >= from && *ms <= to)
                .count() as u64
        })
    };
    let mut evidence = Vec::new();
    for &(from, to) in &windows {
        let (p, r) = (
            writes(names::PRIMARY, from, to),
            writes(names::REPLICA, from, to),
        );
        stats.two_primaries_s += s(to - from);
        stats.two_primaries_writes_primary += p;
        stats.two_primaries_writes_replica += r;
        evidence.push(json!({
            "from_time": format_ms(from), "to_time": format_ms(to), "length_s": s(to - from),
            "from_scenario_ms": from, "to_scenario_ms": to,
            "until_the_end": to >= end, "writes": { "primary": p, "replica": r },
        }));
    }
    let took = stats.two_primaries_writes_primary + stats.two_primaries_writes_replica;
    let (from, to) = (windows[0].0, windows[windows.len() - 1].1);
    let until = if to >= end {
        "the run's end".to_string()
    } else {
        format_ms(to)
    };
    let summary = format!(
        "primary and replica could both accept writes for {:.1} s ({} to {until}): the old primary took {} orders, the new one {}",
        stats.two_primaries_s,
        format_ms(from),
        stats.two_primaries_writes_primary,
        stats.two_primaries_writes_replica
    );
    let severity = if took > 0 {
        Severity::Error
    } else {
        Severity::Info
    };
    Some(Anomaly::new(
        AnomalyClass::TwoPrimaries,
        severity,
        windows.len() as u64,
        Some(from),
        summary,
        json!({ "windows": evidence }),
    ))
}

/// Stretches in which no primary accepted the app's writes: gaps between acknowledgements
/// longer than the pool's pace allows (twice an order interval, at least 2 s), and a last
/// stretch to the end when the app kept trying.
pub fn unavailability(
    meta: &FailoverMeta,
    t: &Timeline,
    end: i64,
    stats: &mut FailoverStats,
) -> Option<Anomaly> {
    let mut acks: Vec<i64> = t
        .orders
        .values()
        .filter_map(|o| match o.outcome {
            Outcome::Ok { ms, .. } => Some(ms),
            _ => None,
        })
        .collect();
    acks.sort_unstable();
    let last_try = t.orders.values().map(|o| o.invoked_ms).max();
    let threshold = (2 * meta.write_every_ms).max(2000);
    let mut gaps: Vec<(i64, i64)> = acks
        .windows(2)
        .filter(|w| w[1] - w[0] > threshold)
        .map(|w| (w[0], w[1]))
        .collect();
    if let (Some(&last), Some(tried)) = (acks.last(), last_try) {
        if tried - last > threshold {
            gaps.push((last, tried.min(end)));
        }
    }
    if gaps.is_empty() {
        return None;
    }
    stats.unavailability_s = gaps.iter().map(|(a, b)| s(b - a)).sum();
    stats.unavailability_max_s = gaps.iter().map(|(a, b)| s(b - a)).fold(0.0, f64::max);
    let longest = gaps.iter().max_by_key(|(a, b)| b - a).expect("not empty");
    let summary = format!(
        "no primary accepted the app's writes for {:.1} s in all; the longest stretch {:.1} s, {} to {}",
        stats.unavailability_s,
        stats.unavailability_max_s,
        format_ms(longest.0),
        format_ms(longest.1)
    );
    let windows: Vec<_> = gaps
        .iter()
        .map(|(a, b)| {
            json!({
                "from_time": format_ms(*a), "to_time": format_ms(*b), "length_s": s(b - a),
                "from_scenario_ms": a, "to_scenario_ms": b,
            })
        })
        .collect();
    Some(Anomaly::new(
        AnomalyClass::Unavailability,
        Severity::Info,
        gaps.len() as u64,
        Some(gaps[0].0),
        summary,
        json!({ "windows": windows, "threshold_s": s(threshold) }),
    ))
}

/// The replica promoted while its primary was up (the observer reached it as a primary at that
/// moment): the silence was the watcher's view, not the primary's death.
pub fn false_promotion(
    t: &Timeline,
    final_state: Option<&FailoverFinal>,
    stats: &mut FailoverStats,
) -> Option<Anomaly> {
    let _ = final_state;
    let p = t.promotion_ms()?;
    if t.role_at(names::PRIMARY, p) != Some(Role::Primary) {
        return None;
    }
    stats.false_promotions = 1;
    Some(Anomaly::new(
        AnomalyClass::FalsePromotion,
        Severity::Info,
        1,
        Some(p),
        format!(
            "the replica was promoted at {} while the primary was up and a primary: the silence was the watcher's, not the primary's death",
            format_ms(p)
        ),
        json!({ "promotion_time": format_ms(p) }),
    ))
}

/// The watcher's check latencies (real ms): p50, p99.9 and the largest.
pub fn check_latency(t: &Timeline, stats: &mut FailoverStats) {
    let mut v = t.check_latencies_ms();
    if v.is_empty() {
        return;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    stats.checks = v.len() as u64;
    stats.check_latency_p50_ms = Some(at(0.5));
    stats.check_latency_p999_ms = Some(at(0.999));
    stats.check_latency_max_ms = v.last().copied();
}

/// The moment the failover exists for: the replica promoted while the old primary still took
/// the app's writes (two writable primaries, or orders the old one committed after the promotion).
pub fn reached(stats: &FailoverStats) -> crate::reached::Found {
    let mut found = crate::reached::Found::default();
    let (Some(at), true) = (
        stats.promotion_scenario_ms,
        stats.two_primaries_s > 0.0 || stats.old_primary_writes_after_promotion > 0,
    ) else {
        return found;
    };
    let line = format!(
        "the replica was promoted at {} while the old primary still took writes ({} after the promotion, {} s with two primaries)",
        format_ms(at),
        stats.old_primary_writes_after_promotion,
        stats.two_primaries_s
    );
    let who = [names::PRIMARY, names::REPLICA];
    found.add(
        chaos_history::Moment::PromotionWhileWritable,
        at,
        &who,
        line,
    );
    found
}
