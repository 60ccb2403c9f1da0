//! The lock service's own promise: no grant while another is unexpired, by the routing db's commit times and the expiries its audit showed at that moment (`overlapping-grants`).

use crate::claims::{Claims, GrantOverlap};
use crate::stats::{GrantStat, Stats};
use crate::times::{format_ms, round_s, scenario_ms, scenario_s_between};
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::RunMeta;
use serde_json::json;

/// Expiries this far out are `infinity` (the `unique` election never expires).
const NEVER_EXPIRES_NS: i64 = i64::MAX / 2;

/// Scenario seconds two grants were valid at once, counted up to the run's
/// end (a claim that never expires overlaps until then).
pub fn overlap_s(o: &GrantOverlap, meta: &RunMeta) -> f64 {
    let end = meta.clock.unix_ns_at_scenario_ms(meta.end_scenario_ms);
    round_s(
        o.shared
            .iter()
            .map(|&(from, to)| {
                let to = to.min(end);
                if to > from {
                    scenario_s_between(&meta.clock, from, to)
                } else {
                    0.0
                }
            })
            .sum(),
    )
}

/// `OverlappingGrants`: an error whether or not anybody wrote, since the
/// lock failing its one job is what fencing exists to survive.
pub fn overlap_anomaly(
    overlaps: &[GrantOverlap],
    claims: &Claims,
    meta: &RunMeta,
) -> Option<Anomaly> {
    let first = overlaps.first()?;
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let expiry_time = |ns: i64| {
        if ns >= NEVER_EXPIRES_NS {
            "never".to_string()
        } else {
            format_ms(at(ns))
        }
    };
    let valid_until = |ns: i64| {
        if ns >= NEVER_EXPIRES_NS {
            "valid with no expiry".to_string()
        } else {
            format!("valid until {}", format_ms(at(ns)))
        }
    };
    let grant_json = |g: usize| {
        let g = &claims.grants[g];
        json!({
            "holder": g.holder, "token": g.token,
            "granted_scenario_ms": at(g.commit_unix_ns), "granted_time": format_ms(at(g.commit_unix_ns)),
        })
    };
    let describe = |o: &GrantOverlap| {
        let (e, l) = (&claims.grants[o.earlier], &claims.grants[o.later]);
        let from = o.began_unix_ns();
        let seconds = overlap_s(o, meta);
        let how = if o.began_by == o.later && l.commit_unix_ns == from {
            "granted-while-unexpired"
        } else if o.began_by == o.earlier {
            "renewed-after-newer-grant"
        } else {
            "renewed-while-other-unexpired"
        };
        let line = match how {
            "granted-while-unexpired" => format!(
                "{} was granted token {} at {} while {}'s token {} was {} ({seconds} s at once)",
                l.holder,
                l.token,
                format_ms(at(from)),
                e.holder,
                e.token,
                valid_until(o.other_expiry_unix_ns),
            ),
            _ => {
                let (renewed, other) = if o.began_by == o.earlier {
                    (e, l)
                } else {
                    (l, e)
                };
                format!(
                    "{}'s token {} was renewed at {} while {}'s token {} was {} ({seconds} s at once)",
                    renewed.holder,
                    renewed.token,
                    format_ms(at(from)),
                    other.holder,
                    other.token,
                    valid_until(o.other_expiry_unix_ns),
                )
            }
        };
        let ev = json!({
            "earlier": grant_json(o.earlier),
            "later": grant_json(o.later),
            "how": how,
            "from_scenario_ms": at(from), "from_time": format_ms(at(from)),
            "other_expiry_scenario_ms": (o.other_expiry_unix_ns < NEVER_EXPIRES_NS).then(|| at(o.other_expiry_unix_ns)),
            "other_expiry_time": expiry_time(o.other_expiry_unix_ns),
            "overlap_s": seconds,
            "stretches": o.shared.iter().map(|&(a, b)| json!({
                "from_time": format_ms(at(a)), "to_time": expiry_time(b),
            })).collect::<Vec<_>>(),
        });
        (line, ev)
    };
    let (line, _) = describe(first);
    let more = if overlaps.len() > 1 {
        format!(" (and {} more pairs)", overlaps.len() - 1)
    } else {
        String::new()
    };
    Some(Anomaly::new(
        AnomalyClass::OverlappingGrants,
        Severity::Error,
        overlaps.len() as u64,
        Some(at(first.began_unix_ns())),
        format!("the lock handed out overlapping grants: {line}{more}"),
        json!({ "overlaps": overlaps.iter().map(|o| describe(o).1).collect::<Vec<_>>() }),
    ))
}

/// The lock service's own promise, whatever the system: every grant in the stats, and the
/// grants valid at once (`overlapping-grants`).
pub(crate) fn lock_promise(meta: &RunMeta, claims: &Claims, stats: &mut Stats) -> Option<Anomaly> {
    let clock = &meta.clock;
    stats.grants = claims
        .grants
        .iter()
        .map(|g| {
            let ms = scenario_ms(clock, g.commit_unix_ns);
            GrantStat {
                holder: g.holder.clone(),
                token: g.token,
                scenario_ms: ms,
                time: format_ms(ms),
                last_expiry_scenario_ms: scenario_ms(clock, g.last_expiry()),
                released: g.released_unix_ns.is_some(),
            }
        })
        .collect();
    let overlapping = claims.overlaps();
    stats.overlapping_grants = overlapping.len() as u64;
    stats.overlapping_grants_s = round_s(overlapping.iter().map(|o| overlap_s(o, meta)).sum());
    overlap_anomaly(&overlapping, claims, meta)
}
