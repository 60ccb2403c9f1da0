//! Grants the lock answered and its own record later lacks (`forgotten-grants`): a box was told
//! it holds token T (its `acquire` line), and the routing db's claim audit, read at the end, has
//! no token T; or two boxes were told the same token. A lock store that acknowledges a commit
//! before writing it (asynchronous commit) and then crashes (`lose_unsynced`) does it.
//!
//! Judged only where the record is the lock's own and complete: the routing db's claim row
//! (`lock` unset or `claims`), whose audit rows commit in the grant's own transaction. A lock
//! service's grants are what an observer saw (a watch or a poll): a grant it missed is no proof
//! that the service forgot it. The `unique` election's token 0 names no grant.
//!
//! A forgotten grant is put back into the claims as the client was told it (from its `acquire`
//! line, for one lease), so its holder's writes are judged under it like any grant's: the
//! overlapping grants, the two holders and the late writes it led to are found as usual.

use crate::claims::Claims;
use crate::notes::{Kind, Note};
use crate::times::{format_ms, scenario_ms};
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::verb;
use chaos_history::{Audit, ClaimChange, RunMeta, ScenarioClock};
use serde_json::json;
use std::collections::BTreeMap;

/// A grant a box was told of: its `acquire` answered with a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Told {
    pub holder: String,
    pub token: i64,
    pub time_ns: i64,
}

/// How the lock broke the grant it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Broken {
    /// The record has no grant with the token.
    NotInRecord(Told),
    /// Another box was told the same token (the later of the two).
    ToldTwice { first: Told, second: Told },
}

/// Whether the run's record of grants is the lock's own (the routing db's claim audit).
fn judged(meta: &RunMeta) -> bool {
    matches!(
        meta.mover.get("lock").map(String::as_str),
        None | Some("claims")
    )
}

/// Each box's first word of each token it was told, in the order the lines say (stamped in
/// Unix ns, as the record's commits are: a line's time is since the run's start).
fn told(notes: &[Note], clock: &ScenarioClock) -> Vec<Told> {
    let mut first: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    for n in notes {
        let Some(token) = n.token.filter(|&t| t > 0) else {
            continue;
        };
        if n.f == verb::ACQUIRE && n.kind == Kind::Ok && n.process.starts_with("box-") {
            first.entry((&n.process, token)).or_insert(n.time_ns);
        }
    }
    let mut out: Vec<Told> = first
        .into_iter()
        .map(|((holder, token), time_ns)| Told {
            holder: holder.to_string(),
            token,
            time_ns: clock.start_unix_ns.saturating_add(time_ns),
        })
        .collect();
    out.sort_by_key(|t| (t.time_ns, t.token));
    out
}

/// The told grants the record denies: a token it never handed out, or one told to two boxes.
fn broken(told: &[Told], claims: &Claims) -> Vec<Broken> {
    let mut out = Vec::new();
    let mut first_of: BTreeMap<i64, &Told> = BTreeMap::new();
    for t in told {
        match first_of.get(&t.token) {
            Some(first) if first.holder != t.holder => out.push(Broken::ToldTwice {
                first: (*first).clone(),
                second: t.clone(),
            }),
            Some(_) => {}
            None => {
                first_of.insert(t.token, t);
            }
        }
        if claims.with_token(t.token).is_empty() {
            out.push(Broken::NotInRecord(t.clone()));
        }
    }
    out
}

/// The run's claims from the record, with the grants it forgot put back as their holders were
/// told them, and what the lock broke (nothing when the record is not the lock's own, or was
/// not read whole: then absence proves nothing).
pub(crate) fn claims(meta: &RunMeta, audit: &Audit, notes: &[Note]) -> (Claims, Vec<Broken>) {
    let claims = Claims::from_audit(&meta.job, &audit.claim_changes);
    if !judged(meta) || !audit.complete {
        return (claims, Vec::new());
    }
    let broken = broken(&told(notes, &meta.clock), &claims);
    if broken.is_empty() {
        return (claims, broken);
    }
    let mut changes = audit.claim_changes.clone();
    changes.extend(as_told(&broken, &claims, meta));
    (Claims::from_audit(&meta.job, &changes), broken)
}

/// The record's changes for the grants it forgot, as their holders were told them (granted when
/// the box said so, for one lease): a token it lacks, and a box told a token the record gives
/// only to another.
fn as_told(broken: &[Broken], claims: &Claims, meta: &RunMeta) -> Vec<ClaimChange> {
    let lease_ns = meta.clock.real_ns_for_scenario_ms(meta.lease_ms);
    let recorded = |t: &Told| {
        claims
            .with_token(t.token)
            .iter()
            .any(|&g| claims.grants[g].holder == t.holder)
    };
    let mut out: Vec<ClaimChange> = Vec::new();
    for b in broken {
        let told = match b {
            Broken::NotInRecord(t) => vec![t],
            Broken::ToldTwice { first, second } => vec![first, second],
        };
        for t in told {
            let known = recorded(t)
                || out
                    .iter()
                    .any(|c| c.token == t.token && c.holder.as_deref() == Some(&t.holder));
            if !known {
                out.push(ClaimChange {
                    job: meta.job.clone(),
                    holder: Some(t.holder.clone()),
                    token: t.token,
                    expires_unix_ns: t.time_ns + lease_ns,
                    commit_unix_ns: t.time_ns,
                    app: t.holder.clone(),
                    xid: 0,
                    not_before_unix_ns: None,
                });
            }
        }
    }
    out
}

/// `ForgottenGrants`: an error whatever anybody wrote, as overlapping grants are: the lock
/// broke the promise fencing stands on.
pub(crate) fn anomaly(broken: &[Broken], meta: &RunMeta) -> Option<Anomaly> {
    let first = broken.first()?;
    let at = |ns: i64| scenario_ms(&meta.clock, ns);
    let line = |b: &Broken| {
        match b {
        Broken::NotInRecord(t) => format!(
            "{} was told it holds token {} at {}, and the routing db's own record has no token {} (a grant acknowledged, then lost)",
            t.holder,
            t.token,
            format_ms(at(t.time_ns)),
            t.token
        ),
        Broken::ToldTwice { first, second } => format!(
            "token {} was handed to {} at {} and again to {} at {}",
            second.token,
            first.holder,
            format_ms(at(first.time_ns)),
            second.holder,
            format_ms(at(second.time_ns))
        ),
    }
    };
    let evidence = |b: &Broken| match b {
        Broken::NotInRecord(t) => json!({
            "how": "not-in-record", "holder": t.holder, "token": t.token,
            "told_scenario_ms": at(t.time_ns), "told_time": format_ms(at(t.time_ns)),
        }),
        Broken::ToldTwice { first, second } => json!({
            "how": "told-twice", "token": second.token,
            "holders": [first.holder, second.holder],
            "told_time": [format_ms(at(first.time_ns)), format_ms(at(second.time_ns))],
        }),
    };
    let more = match broken.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    let first_ns = match first {
        Broken::NotInRecord(t) => t.time_ns,
        Broken::ToldTwice { second, .. } => second.time_ns,
    };
    Some(Anomaly::new(
        AnomalyClass::ForgottenGrants,
        Severity::Error,
        broken.len() as u64,
        Some(at(first_ns)),
        format!(
            "the lock denied a grant it had answered: {}{more}",
            line(first)
        ),
        json!({ "grants": broken.iter().map(evidence).collect::<Vec<_>>() }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(process: &str, f: &str, kind: Kind, token: Option<i64>, time_ns: i64) -> Note {
        Note {
            time_ns,
            process: process.into(),
            f: f.into(),
            kind,
            target: None,
            fault: None,
            links: vec![],
            token,
            reason: None,
        }
    }

    fn meta() -> RunMeta {
        serde_json::from_value(json!({
            "scenario": "t", "seed": 0,
            "clock": {"start_unix_ns": 1_000, "start_scenario_ms": 0, "real_ns_per_scenario_s": 1_000, "scenario_day_unix_ms": 0},
            "job": "move", "shards": [], "owners": {}, "plan": [], "seeded": [],
            "lease_ms": 10_000, "copy_ms": 1000, "strict_duplicates": false, "mover": {},
            "end_scenario_ms": 10_000, "completed": true, "incomplete_reason": null
        }))
        .unwrap()
    }

    fn change(holder: &str, token: i64, commit: i64) -> ClaimChange {
        ClaimChange {
            job: "move".into(),
            holder: Some(holder.into()),
            token,
            expires_unix_ns: commit + 100,
            commit_unix_ns: commit,
            app: holder.into(),
            xid: 1,
            not_before_unix_ns: None,
        }
    }

    /// A token the record has is kept; one it lacks is forgotten; one told to two boxes is told
    /// twice; renewals, failures and token 0 (the `unique` election) are no grants.
    #[test]
    fn a_told_grant_the_record_lacks_is_forgotten() {
        let notes = vec![
            note("box-1", "acquire", Kind::Ok, Some(8), 10),
            note("box-1", "acquire", Kind::Ok, Some(8), 11),
            note("box-2", "acquire", Kind::Ok, Some(9), 20),
            note("box-3", "acquire", Kind::Ok, Some(9), 30),
            note("box-4", "acquire", Kind::Ok, Some(0), 40),
            note("box-1", "renew", Kind::Fail, Some(12), 50),
            note("nemesis", "acquire", Kind::Ok, Some(13), 60),
        ];
        let meta = meta();
        let told = told(&notes, &meta.clock);
        assert_eq!(
            told.iter()
                .map(|t| (t.holder.as_str(), t.token))
                .collect::<Vec<_>>(),
            vec![("box-1", 8), ("box-2", 9), ("box-3", 9)]
        );
        let claims = Claims::from_audit("move", &[change("box-1", 8, 5), change("box-3", 9, 25)]);
        let broken = broken(&told, &claims);
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert!(matches!(&broken[0], Broken::ToldTwice { first, second }
            if first.holder == "box-2" && second.holder == "box-3"));
        let claims = Claims::from_audit("move", &[change("box-1", 8, 5)]);
        let broken = super::broken(&told, &claims);
        assert_eq!(broken.len(), 3, "{broken:?}");
        assert!(matches!(&broken[0], Broken::NotInRecord(t) if t.holder == "box-2"));
        // Put back as told: box-2's and box-3's token 9, once each, for one lease.
        let back = as_told(&broken, &claims, &meta);
        let pairs: Vec<_> = back
            .iter()
            .map(|c| {
                (
                    c.holder.as_deref().unwrap(),
                    c.token,
                    c.commit_unix_ns,
                    c.expires_unix_ns,
                )
            })
            .collect();
        assert_eq!(
            pairs,
            vec![("box-2", 9, 1_020, 11_020), ("box-3", 9, 1_030, 11_030)]
        );
    }
}
