//! The holder's side of liveness: a claim renewed on and on while its holder wrote nothing.
//! The seed's short-lease design renews from a thread of its own, and "a renewal on its own
//! thread keeps the lease alive while the work it is vouching for is wedged on a socket":
//! nobody else may take the job over, and nothing moves.

use crate::claims::Claims;
use crate::times::{format_ms, round_s, scenario_ms, scenario_s_between};
use crate::writes::Attributed;
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::RunMeta;
use serde_json::json;

/// How many leases of renewals without a write make a stalled holder.
pub const STALL_LEASES: i64 = 2;

/// One stretch of a grant renewed without a write by it.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    pub grant: usize,
    /// Its last sign of work: the grant, or its last write before the renewals.
    pub from_unix_ns: i64,
    /// The last renewal before its next write (or its end).
    pub to_unix_ns: i64,
    pub renewals: u64,
}

/// Per grant, each stretch from a sign of work (the grant, a write attributed to it) to the
/// last renewal before the next one, longer than `STALL_LEASES` leases of scenario time.
pub fn stalls(writes: &[Attributed], claims: &Claims, meta: &RunMeta) -> Vec<Stall> {
    let mut work: Vec<Vec<i64>> = vec![Vec::new(); claims.grants.len()];
    for a in writes {
        if let (Some(g), false) = (a.grant, a.borrowed) {
            work[g].push(a.write.commit_unix_ns);
        }
    }
    let limit_s = (STALL_LEASES * meta.lease_ms) as f64 / 1000.0;
    let mut out = Vec::new();
    for (g, grant) in claims.grants.iter().enumerate() {
        let w = &mut work[g];
        w.push(grant.commit_unix_ns);
        w.sort_unstable();
        let mut open: Option<Stall> = None;
        let close = |s: Option<Stall>, out: &mut Vec<Stall>| {
            if let Some(s) = s {
                if scenario_s_between(&meta.clock, s.from_unix_ns, s.to_unix_ns) > limit_s {
                    out.push(s);
                }
            }
        };
        for c in grant.changes.iter().skip(1).filter(|c| !c.release) {
            let since = w[w.partition_point(|&t| t <= c.commit_unix_ns) - 1];
            match &mut open {
                Some(s) if s.from_unix_ns == since => {
                    s.to_unix_ns = c.commit_unix_ns;
                    s.renewals += 1;
                }
                _ => {
                    close(open.take(), &mut out);
                    open = Some(Stall {
                        grant: g,
                        from_unix_ns: since,
                        to_unix_ns: c.commit_unix_ns,
                        renewals: 1,
                    });
                }
            }
        }
        close(open, &mut out);
    }
    out.sort_by_key(|s| s.from_unix_ns);
    out
}

/// The longest stall in scenario seconds (0 without one).
pub fn longest_s(stalls: &[Stall], meta: &RunMeta) -> f64 {
    round_s(
        stalls
            .iter()
            .map(|s| scenario_s_between(&meta.clock, s.from_unix_ns, s.to_unix_ns))
            .fold(0.0, f64::max),
    )
}

/// `stalled-holder`: information (nothing is lost; nothing moves either).
pub fn stall_anomaly(stalls: &[Stall], claims: &Claims, meta: &RunMeta) -> Option<Anomaly> {
    let first = stalls.first()?;
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let line = |s: &Stall| {
        let g = &claims.grants[s.grant];
        format!(
            "{} (token {}) kept the claim renewed for {} s with no shard write ({} -> {}, {} renewals)",
            g.holder,
            g.token,
            round_s(scenario_s_between(clock, s.from_unix_ns, s.to_unix_ns)),
            format_ms(at(s.from_unix_ns)),
            format_ms(at(s.to_unix_ns)),
            s.renewals
        )
    };
    let more = if stalls.len() > 1 {
        format!(" (and {} more)", stalls.len() - 1)
    } else {
        String::new()
    };
    let summary = format!(
        "{}{more}: renewals vouched for work that was not happening (more than {STALL_LEASES} leases), and nobody else could take the job over",
        line(first)
    );
    let evidence = json!({
        "threshold_s": round_s((STALL_LEASES * meta.lease_ms) as f64 / 1000.0),
        "longest_s": longest_s(stalls, meta),
        "stalls": stalls.iter().map(|s| {
            let g = &claims.grants[s.grant];
            json!({
                "holder": g.holder, "token": g.token,
                "from_time": format_ms(at(s.from_unix_ns)), "to_time": format_ms(at(s.to_unix_ns)),
                "seconds": round_s(scenario_s_between(clock, s.from_unix_ns, s.to_unix_ns)),
                "renewals": s.renewals,
            })
        }).collect::<Vec<_>>(),
    });
    Some(Anomaly::new(
        AnomalyClass::StalledHolder,
        Severity::Info,
        stalls.len() as u64,
        Some(at(first.from_unix_ns)),
        summary,
        evidence,
    ))
}
