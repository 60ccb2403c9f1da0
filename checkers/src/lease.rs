//! The lease checks: writes after a grant expired, two boxes writing at once, and windows with nobody holding the claim.

use crate::claims::Claims;
use crate::rows::RowsOutcome;
use crate::times::{format_ms, round_s, scenario_ms, scenario_s_between};
use crate::writes::{changed_rows, Attributed};
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::{RunMeta, ShardWrite, WriteOp};
use serde_json::json;
use std::collections::BTreeMap;

/// One grant's writes committed after its expiry.
#[derive(Debug, Clone)]
pub struct LateWrites<'a> {
    pub grant: usize,
    pub writes: u64,
    pub first_unix_ns: i64,
    pub last_unix_ns: i64,
    /// The expiry that applied to the first and to the last such write.
    pub expiry_at_first_unix_ns: i64,
    pub expiry_at_last_unix_ns: i64,
    /// Deletes after expiry that took readings which are now lost.
    pub destroying: Vec<&'a ShardWrite>,
    /// Of `writes`, those sent by another box (or none named) with this grant's token.
    pub borrowed: u64,
}

/// Writes committed after the latest expiry the claim audit showed for
/// their grant at that moment (a write in the expiry instant is in time).
pub fn late_writes<'a>(
    writes: &[Attributed<'a>],
    claims: &Claims,
    rows: Option<&RowsOutcome>,
) -> Vec<LateWrites<'a>> {
    let mut by_grant: BTreeMap<usize, LateWrites<'a>> = BTreeMap::new();
    for a in writes {
        let Some(g) = a.grant else { continue };
        let at = a.write.commit_unix_ns;
        let expiry = claims.grants[g].expiry_at(at);
        if at <= expiry {
            continue;
        }
        let late = by_grant.entry(g).or_insert(LateWrites {
            grant: g,
            writes: 0,
            first_unix_ns: at,
            last_unix_ns: at,
            expiry_at_first_unix_ns: expiry,
            expiry_at_last_unix_ns: expiry,
            destroying: Vec::new(),
            borrowed: 0,
        });
        late.writes += 1;
        late.borrowed += u64::from(a.borrowed);
        late.last_unix_ns = at;
        late.expiry_at_last_unix_ns = expiry;
        if a.write.op == WriteOp::Delete && destroyed(a.write, rows) {
            late.destroying.push(a.write);
        }
    }
    by_grant.into_values().collect()
}

/// A delete destroyed data when it took rows and its turbine ended with lost
/// readings in the range it touched (any range, when the audit did not say).
pub(crate) fn destroyed(w: &ShardWrite, rows: Option<&RowsOutcome>) -> bool {
    if !changed_rows(w) {
        return false;
    }
    let Some((lo, hi)) = w.turbine.as_deref().and_then(|t| rows?.lost_range(t)) else {
        return false;
    };
    !matches!(w.min_ts_ms, Some(m) if m > hi) && !matches!(w.max_ts_ms, Some(m) if m < lo)
}

/// Per box: seconds from the expiry to the last write after it, the longest over its grants.
pub fn late_seconds_by_box(
    late: &[LateWrites],
    claims: &Claims,
    meta: &RunMeta,
) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for l in late {
        let s = round_s(scenario_s_between(
            &meta.clock,
            l.expiry_at_last_unix_ns,
            l.last_unix_ns,
        ));
        let e = out
            .entry(claims.grants[l.grant].holder.clone())
            .or_insert(0.0);
        *e = e.max(s);
    }
    out
}

pub fn late_anomaly(late: &[LateWrites], claims: &Claims, meta: &RunMeta) -> Option<Anomaly> {
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let first = late.iter().min_by_key(|l| l.first_unix_ns)?;
    let destroyed = late.iter().any(|l| !l.destroying.is_empty());
    let mut lines = Vec::new();
    let evidence: Vec<_> = late
        .iter()
        .map(|l| {
            let g = &claims.grants[l.grant];
            let seconds = round_s(scenario_s_between(clock, l.expiry_at_last_unix_ns, l.last_unix_ns));
            lines.push(format!(
                "{} wrote for {seconds} s after its lease (token {}) expired at {} ({} writes, {} -> {}{}){}",
                g.holder,
                g.token,
                format_ms(at(l.expiry_at_last_unix_ns)),
                l.writes,
                format_ms(at(l.first_unix_ns)),
                format_ms(at(l.last_unix_ns)),
                if l.borrowed == 0 { String::new() } else { format!("; {} of them by another box with its token", l.borrowed) },
                if l.destroying.is_empty() { "" } else { ", and its delete destroyed data" },
            ));
            json!({
                "box": g.holder, "token": g.token, "writes": l.writes, "borrowed_writes": l.borrowed,
                "expired_at_scenario_ms": at(l.expiry_at_first_unix_ns), "expired_at_time": format_ms(at(l.expiry_at_first_unix_ns)),
                "first_write_scenario_ms": at(l.first_unix_ns), "first_write_time": format_ms(at(l.first_unix_ns)),
                "last_write_scenario_ms": at(l.last_unix_ns), "last_write_time": format_ms(at(l.last_unix_ns)),
                "seconds_after_expiry": seconds,
                "destroying_deletes": l.destroying.iter().map(|w| json!({
                    "shard": w.shard, "turbine": w.turbine, "rows": w.rows, "time": format_ms(at(w.commit_unix_ns)),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let count: u64 = late.iter().map(|l| l.writes).sum();
    let severity = if destroyed {
        Severity::Error
    } else {
        Severity::Info
    };
    Some(Anomaly::new(
        AnomalyClass::WriteAfterLeaseExpiry,
        severity,
        count,
        Some(at(first.first_unix_ns)),
        lines.join("; "),
        json!({ "boxes": evidence }),
    ))
}

/// Two grants of different boxes whose writes (first to last) overlapped.
#[derive(Debug, Clone)]
pub struct Overlap {
    pub grants: (usize, usize),
    pub from_unix_ns: i64,
    pub to_unix_ns: i64,
}

pub fn overlaps(writes: &[Attributed], claims: &Claims) -> Vec<Overlap> {
    let mut spans: BTreeMap<usize, (i64, i64)> = BTreeMap::new();
    for a in writes {
        if let Some(g) = a.grant {
            let t = a.write.commit_unix_ns;
            let s = spans.entry(g).or_insert((t, t));
            s.0 = s.0.min(t);
            s.1 = s.1.max(t);
        }
    }
    let spans: Vec<(usize, (i64, i64))> = spans.into_iter().collect();
    let mut out = Vec::new();
    for (i, &(a, (a0, a1))) in spans.iter().enumerate() {
        for &(b, (b0, b1)) in &spans[i + 1..] {
            if claims.grants[a].holder == claims.grants[b].holder {
                continue;
            }
            let (from, to) = (a0.max(b0), a1.min(b1));
            if from < to {
                out.push(Overlap {
                    grants: (a, b),
                    from_unix_ns: from,
                    to_unix_ns: to,
                });
            }
        }
    }
    out.sort_by_key(|o| o.from_unix_ns);
    out
}

pub fn overlap_anomaly(overlaps: &[Overlap], claims: &Claims, meta: &RunMeta) -> Option<Anomaly> {
    let first = overlaps.first()?;
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let describe = |o: &Overlap| {
        let (a, b) = (&claims.grants[o.grants.0], &claims.grants[o.grants.1]);
        let seconds = round_s(scenario_s_between(clock, o.from_unix_ns, o.to_unix_ns));
        let line = format!(
            "{} (token {}) and {} (token {}) both wrote between {} and {} ({seconds} s)",
            a.holder,
            a.token,
            b.holder,
            b.token,
            format_ms(at(o.from_unix_ns)),
            format_ms(at(o.to_unix_ns))
        );
        let ev = json!({
            "boxes": [a.holder, b.holder], "tokens": [a.token, b.token],
            "from_scenario_ms": at(o.from_unix_ns), "from_time": format_ms(at(o.from_unix_ns)),
            "to_scenario_ms": at(o.to_unix_ns), "to_time": format_ms(at(o.to_unix_ns)), "seconds": seconds,
        });
        (line, ev)
    };
    let (line, _) = describe(first);
    let more = if overlaps.len() > 1 {
        format!(" (and {} more pairs)", overlaps.len() - 1)
    } else {
        String::new()
    };
    let evidence: Vec<_> = overlaps.iter().map(|o| describe(o).1).collect();
    Some(Anomaly::new(
        AnomalyClass::ConcurrentHolders,
        Severity::Info,
        overlaps.len() as u64,
        Some(at(first.from_unix_ns)),
        format!("{line}{more}"),
        json!({ "overlaps": evidence }),
    ))
}

pub fn total_overlap_s(overlaps: &[Overlap], meta: &RunMeta) -> f64 {
    round_s(
        overlaps
            .iter()
            .map(|o| scenario_s_between(&meta.clock, o.from_unix_ns, o.to_unix_ns))
            .sum(),
    )
}

/// Vacancy figures in scenario seconds: (count, total, min, max).
pub fn vacancy_figures(windows: &[(i64, i64)], meta: &RunMeta) -> (u64, f64, f64, f64) {
    let secs: Vec<f64> = windows
        .iter()
        .map(|&(a, b)| scenario_s_between(&meta.clock, a, b))
        .collect();
    let total = secs.iter().sum::<f64>();
    let min = secs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = secs.iter().copied().fold(0.0, f64::max);
    (
        secs.len() as u64,
        round_s(total),
        if secs.is_empty() { 0.0 } else { round_s(min) },
        round_s(max),
    )
}

pub fn vacancy_anomaly(windows: &[(i64, i64)], meta: &RunMeta) -> Option<Anomaly> {
    let &(f0, f1) = windows.first()?;
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let (count, total, min, max) = vacancy_figures(windows, meta);
    let summary = format!(
        "{count} window(s) with no valid claim while the plan ran: {total} s in all (shortest {min} s, longest {max} s); first {} -> {}",
        format_ms(at(f0)),
        format_ms(at(f1)),
    );
    let evidence = json!({
        "total_s": total, "min_s": min, "max_s": max,
        "windows": windows.iter().map(|&(a, b)| json!({
            "from_scenario_ms": at(a), "from_time": format_ms(at(a)),
            "to_scenario_ms": at(b), "to_time": format_ms(at(b)),
            "seconds": round_s(scenario_s_between(clock, a, b)),
        })).collect::<Vec<_>>(),
    });
    Some(Anomaly::new(
        AnomalyClass::VacancyWindow,
        Severity::Info,
        count,
        Some(at(f0)),
        summary,
        evidence,
    ))
}
