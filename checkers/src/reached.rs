//! The dangerous moments a run reached (`Verdict::reached`): a valid verdict says nothing was
//! lost; this says whether the run ever got near losing anything. Each moment is read from the
//! history (the nemesis's faults, each box's view of its lease, refused writes) and the audit
//! (grants, writes, vacancies), with when and who; a scenario that names the moments it exists
//! to reach (`[expect] reach`) and reached none of them is `unknown`, not valid.

use crate::claims::Claims;
use crate::fencing::StaleWrite;
use crate::fold::{HistoryFold, Refusal};

/// What the fold kept for the moments: its notes and the refused writes.
pub(crate) type Seen<'a> = (&'a [Note], &'a [Refusal]);
use crate::lease::{LateWrites, Overlap};
use crate::notes::{Kind, Note};
use crate::times::{format_ms, scenario_ms};
use crate::writes::Attributed;
use crate::{Anomaly, AnomalyClass, Validity, Verdict};
use chaos_history::verb;
use chaos_history::{Moment, RunMeta, ScenarioClock};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One moment a run reached: how often, the first time, who was in it, in a line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reached {
    pub moment: Moment,
    pub count: u64,
    pub first_scenario_ms: i64,
    pub first_scenario_time: String,
    /// The boxes (or servers) of the first occurrence.
    pub who: Vec<String>,
    /// The first occurrence, for a person.
    pub summary: String,
}

/// The moments found so far, the first occurrence of each kept.
#[derive(Debug, Default)]
pub(crate) struct Found {
    by: BTreeMap<Moment, Reached>,
}

impl Found {
    /// One occurrence of `moment` at `at_ms` (scenario ms).
    pub fn add(&mut self, moment: Moment, at_ms: i64, who: &[&str], summary: String) {
        let first = Reached {
            moment,
            count: 0,
            first_scenario_ms: at_ms,
            first_scenario_time: format_ms(at_ms),
            who: who.iter().map(|w| w.to_string()).collect(),
            summary,
        };
        let r = self.by.entry(moment).or_insert_with(|| first.clone());
        if (at_ms, &first.who, &first.summary) < (r.first_scenario_ms, &r.who, &r.summary) {
            let count = r.count;
            *r = Reached { count, ..first };
        }
        r.count += 1;
    }

    pub fn into_list(self) -> Vec<Reached> {
        self.by.into_values().collect()
    }
}

/// What a lease-holding system's run shows of the lock, the boxes and the faults.
pub(crate) struct Scene<'a> {
    pub clock: &'a ScenarioClock,
    /// The history's notes and refused writes, their times made Unix ns as the audit's are.
    pub notes: Vec<Note>,
    pub claims: &'a Claims,
    pub refusals: Vec<Refusal>,
    /// The nodes that hold the lease (`routing` for the claim row and advisory locks).
    pub lock_nodes: Vec<String>,
    pub end_unix_ns: i64,
}

/// The scene of a run of a lease-holding system (the mover, the seed's other designs).
pub(crate) fn scene<'a>(meta: &'a RunMeta, seen: Seen<'a>, claims: &'a Claims) -> Scene<'a> {
    let unix = |run_ns: i64| meta.clock.start_unix_ns.saturating_add(run_ns);
    let lock_nodes = lock_nodes(&meta.mover);
    // Scenarios name the lock `lock` whatever holds it: the routing db, for its claim row.
    let named = |t: &String| match lock_nodes[0] == "routing" {
        true => match t.strip_suffix("->lock") {
            Some(from) => format!("{from}->routing"),
            None if t == "lock" => "routing".to_string(),
            None => t.clone(),
        },
        false => t.clone(),
    };
    Scene {
        clock: &meta.clock,
        notes: (seen.0.iter())
            .map(|n| Note {
                time_ns: unix(n.time_ns),
                target: n.target.as_ref().map(named),
                links: n.links.iter().map(named).collect(),
                ..n.clone()
            })
            .collect(),
        claims,
        refusals: (seen.1.iter())
            .map(|r| Refusal {
                time_ns: unix(r.time_ns),
                ..r.clone()
            })
            .collect(),
        lock_nodes,
        end_unix_ns: meta.clock.unix_ns_at_scenario_ms(meta.end_scenario_ms),
    }
}

/// What a fold kept for the moments.
pub(crate) fn seen(fold: &HistoryFold) -> Seen<'_> {
    (&fold.notes, &fold.refusals)
}

/// The lock's own broken promise (`overlapping-grants`, `forgotten-grants`), as the moment it
/// forgot a grant.
pub(crate) fn promise(anomaly: Option<&Anomaly>, found: &mut Found) {
    let broken = |a: &&Anomaly| {
        matches!(
            a.class,
            AnomalyClass::OverlappingGrants | AnomalyClass::ForgottenGrants
        )
    };
    if let Some(a) = anomaly.filter(broken) {
        let at = a.first_scenario_ms.unwrap_or_default();
        found.add(Moment::LockForgotGrant, at, &[], a.summary.clone());
    }
}

/// The lock's nodes by the run's `lock` and `lock_members` mover settings.
pub(crate) fn lock_nodes(mover: &BTreeMap<String, String>) -> Vec<String> {
    match mover.get("lock").map(String::as_str) {
        None | Some("claims") | Some("advisory") => vec!["routing".into()],
        Some(_) => {
            let n: usize = mover
                .get("lock_members")
                .and_then(|m| m.parse().ok())
                .unwrap_or(1);
            (1..=n.max(1))
                .map(|i| match i {
                    1 => "lock".to_string(),
                    i => format!("lock-{i}"),
                })
                .collect()
        }
    }
}

/// A fault acting on one target (a box, a node, a link) from its start to its heal.
#[derive(Debug, Clone)]
struct Window {
    target: String,
    verb: String,
    from: i64,
    to: i64,
}

/// The faults that keep a box (or a lock's server) from acting: stopped, or starved of its
/// CPU, or its commits held.
const SIGNALS: [&str; 6] = ["pause", "stop", "crash", "kill", "cpu", "stall"];
const CUTS: [&str; 3] = ["down", "timeout", "reset_peer"];
const HEALS: [&str; 6] = [
    "resume",
    "start",
    "start-mover",
    "heal",
    "cpu-restore",
    "unstall",
];

/// The faults that took (an `ok`, or an `info` that names no error), each target's window from
/// its start to its heal (the run's end when never healed).
fn windows(notes: &[Note], end_ns: i64) -> Vec<Window> {
    let mut open: Vec<(Option<i64>, Window)> = Vec::new();
    let mut out = Vec::new();
    let took = |n: &&Note| match n.kind {
        Kind::Ok => true,
        Kind::Info => n.reason.is_none(),
        Kind::Fail => false,
    };
    for n in notes.iter().filter(|n| n.process == "nemesis").filter(took) {
        let targets: Vec<&String> = match n.links.is_empty() {
            true => n.target.iter().collect(),
            false => n.links.iter().collect(),
        };
        if HEALS.contains(&n.f.as_str()) {
            let mut k = 0;
            while k < open.len() {
                let (fault, w) = &open[k];
                let same = match (fault, n.fault) {
                    (Some(a), Some(b)) => *a == b,
                    _ => true,
                };
                if same && targets.contains(&&w.target) {
                    let (_, mut w) = open.remove(k);
                    w.to = n.time_ns;
                    out.push(w);
                } else {
                    k += 1;
                }
            }
        } else if SIGNALS.contains(&n.f.as_str()) || CUTS.contains(&n.f.as_str()) {
            for t in targets {
                let w = Window {
                    target: t.clone(),
                    verb: n.f.clone(),
                    from: n.time_ns,
                    to: end_ns,
                };
                open.push((n.fault, w));
            }
        }
    }
    out.extend(open.into_iter().map(|(_, w)| w));
    out.sort_by_key(|w| (w.from, w.to));
    out
}

impl Scene<'_> {
    fn ms(&self, ns: i64) -> i64 {
        scenario_ms(self.clock, ns)
    }

    fn majority(&self) -> usize {
        self.lock_nodes.len() / 2 + 1
    }

    /// Why `who` could not act on or renew its lease at `t`, if it could not: stopped by a
    /// signal, cut off from the lock's members, or the lock without a majority.
    fn stopped(&self, w: &[Window], who: &str, t: i64) -> Option<String> {
        let at = |x: &Window| x.from <= t && t <= x.to;
        if let Some(x) = w
            .iter()
            .find(|x| at(x) && x.target == who && SIGNALS.contains(&x.verb.as_str()))
        {
            return Some(past(&x.verb).to_string());
        }
        let cut = self.lock_nodes.iter().all(|node| {
            let link = format!("{who}->{node}");
            w.iter()
                .any(|x| at(x) && x.target == link && CUTS.contains(&x.verb.as_str()))
        });
        if cut {
            return Some("cut off from the lock".into());
        }
        self.lock_down(w, t)
            .map(|why| format!("without its lock ({why})"))
    }

    /// Whether the lock's majority was stopped at `t`, and how.
    fn lock_down(&self, w: &[Window], t: i64) -> Option<String> {
        let down: Vec<String> = self
            .lock_nodes
            .iter()
            .filter_map(|node| {
                w.iter()
                    .find(|x| {
                        x.from <= t
                            && t <= x.to
                            && &x.target == node
                            && SIGNALS.contains(&x.verb.as_str())
                    })
                    .map(|x| format!("{node} {}", past(&x.verb)))
            })
            .collect();
        (down.len() >= self.majority()).then(|| down.join(", "))
    }

    /// The moments the faults, the boxes' own lines and the lock's grants show.
    pub fn find(&self, found: &mut Found) {
        let w = windows(&self.notes, self.end_unix_ns);
        self.stopped_past_lease(&w, found);
        self.lock_unavailable(&w, found);
        self.renewals(found);
        self.beliefs(&w, found);
        self.refused_late(found);
    }

    fn stopped_past_lease(&self, w: &[Window], found: &mut Found) {
        for g in &self.claims.grants {
            let Some(&(_, end)) = g.valid_stretches().last() else {
                continue;
            };
            if end > self.end_unix_ns {
                continue;
            }
            if let Some(how) = self.stopped(w, &g.holder, end) {
                let at = self.ms(end);
                let line = format!(
                    "{} (token {}) was {how} when its lease ended at {}",
                    g.holder,
                    g.token,
                    format_ms(at)
                );
                found.add(Moment::HolderStoppedPastLease, at, &[&g.holder], line);
            }
        }
    }

    /// A fault that left the lock without its majority, or a holder without its way to the
    /// lock, while a grant was valid.
    fn lock_unavailable(&self, w: &[Window], found: &mut Found) {
        for g in &self.claims.grants {
            for (from, to) in g.valid_stretches() {
                let starts = w.iter().map(|x| x.from.max(from)).filter(|&t| t <= to);
                let Some((t, why)) = starts
                    .filter_map(|t| {
                        let why = self.lock_down(w, t).or_else(|| {
                            self.stopped(w, &g.holder, t)
                                .filter(|s| s.starts_with("cut off"))
                        })?;
                        Some((t, why))
                    })
                    .min_by_key(|p| p.0)
                else {
                    continue;
                };
                let line = format!(
                    "the lock could not answer {} (token {}) from {} ({why})",
                    g.holder,
                    g.token,
                    format_ms(self.ms(t))
                );
                found.add(Moment::LockUnavailable, self.ms(t), &[&g.holder], line);
            }
        }
    }

    fn renewals(&self, found: &mut Found) {
        let failed = self
            .notes
            .iter()
            .filter(|n| n.f == verb::RENEW && n.kind != Kind::Ok && n.process != "nemesis");
        for n in failed {
            let how = match (n.kind, n.reason.as_deref()) {
                (Kind::Fail, Some("lost")) => "refused",
                _ => "unanswered",
            };
            let token = n.token.map_or(String::new(), |t| format!(" (token {t})"));
            let at = self.ms(n.time_ns);
            let line = format!("{}'s renewal{token} {how} at {}", n.process, format_ms(at));
            found.add(Moment::RenewalFailed, at, &[&n.process], line);
        }
    }

    /// Each box believes it holds the lease from its `acquire` until it says it lost it, its
    /// renewal is refused, it is done, or it is killed (an unanswered renewal leaves it
    /// believing); two boxes believing at once is the moment.
    fn beliefs(&self, w: &[Window], found: &mut Found) {
        let mut held: BTreeMap<&str, (i64, Option<i64>)> = BTreeMap::new();
        let mut spans: Vec<(&str, Option<i64>, i64, i64)> = Vec::new();
        let ends = w
            .iter()
            .filter(|x| matches!(x.verb.as_str(), "kill" | "crash") && x.target.starts_with("box-"))
            .map(|x| (x.from, x.target.as_str()));
        let mut events: Vec<(i64, &str, bool, Option<i64>)> = self
            .notes
            .iter()
            .filter(|n| n.process.starts_with("box-"))
            .filter_map(|n| {
                let begins = n.f == verb::ACQUIRE && n.kind == Kind::Ok;
                let refused = n.f == verb::RENEW
                    && n.kind == Kind::Fail
                    && n.reason.as_deref() == Some("lost");
                let ends = n.f == verb::LOST || n.f == verb::DONE || refused;
                (begins || ends).then_some((n.time_ns, n.process.as_str(), begins, n.token))
            })
            .collect();
        events.extend(ends.map(|(t, b)| (t, b, false, None)));
        events.sort();
        for (t, b, begins, token) in events {
            match (begins, held.get(b).copied()) {
                (true, None) => {
                    held.insert(b, (t, token));
                }
                (true, Some(_)) => {}
                (false, Some((from, tok))) => {
                    held.remove(b);
                    spans.push((b, tok, from, t));
                }
                (false, None) => {}
            }
        }
        spans.extend(
            held.into_iter()
                .map(|(b, (from, tok))| (b, tok, from, self.end_unix_ns)),
        );
        spans.sort_by_key(|s| s.2);
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if a.0 == b.0 || b.2 >= a.3 {
                    continue;
                }
                let at = self.ms(b.2);
                let tok = |t: Option<i64>| t.map_or(String::new(), |t| format!(" (token {t})"));
                let line = format!(
                    "{}{} acquired at {} while {}{} still believed it held the lease (until {})",
                    b.0,
                    tok(b.1),
                    format_ms(at),
                    a.0,
                    tok(a.1),
                    format_ms(self.ms(a.3.min(self.end_unix_ns)))
                );
                found.add(Moment::TwoHolders, at, &[a.0, b.0], line);
            }
        }
    }

    /// Writes the shards refused: each is a stale write, and a write after its grant's expiry
    /// when the grant its token names had ended by then.
    fn refused_late(&self, found: &mut Found) {
        for r in &self.refusals {
            let at = self.ms(r.time_ns);
            let token = r.token.map_or(String::new(), |t| format!(" (token {t})"));
            let line = format!(
                "{}'s {}{token} refused at {}{}",
                r.process,
                r.f,
                format_ms(at),
                r.shard
                    .as_ref()
                    .map_or(String::new(), |s| format!(" by {s}"))
            );
            found.add(Moment::StaleWrite, at, &[&r.process], line.clone());
            let ended = r
                .token
                .into_iter()
                .flat_map(|t| self.claims.with_token(t))
                .any(|&g| {
                    let g = &self.claims.grants[g];
                    g.valid_stretches().last().is_some_and(|s| s.1 < r.time_ns)
                });
            if ended {
                found.add(Moment::WriteAfterExpiry, at, &[&r.process], line);
            }
        }
    }
}

/// The past tense of a signal fault.
fn past(verb: &str) -> &str {
    match verb {
        "pause" => "paused",
        "stop" => "stopped",
        "crash" => "crashed",
        "kill" => "killed",
        "cpu" => "starved of CPU",
        "stall" => "stalled (its commits held)",
        other => other,
    }
}

/// What the audit's checks found, as moments: writes after expiry, two grants' writes at
/// once, stale writes accepted, three grants while the first still wrote, vacancies.
pub(crate) struct Audited<'a> {
    pub writes: &'a [Attributed<'a>],
    pub late: &'a [LateWrites<'a>],
    pub overlaps: &'a [Overlap],
    pub stale: &'a [StaleWrite],
    pub vacancies: &'a [(i64, i64)],
}

impl Audited<'_> {
    pub fn find(&self, scene: &Scene, found: &mut Found) {
        let claims = scene.claims;
        let at = |ns: i64| scene.ms(ns);
        for l in self.late {
            let g = &claims.grants[l.grant];
            let line = format!(
                "{} (token {}) wrote at {}, after its lease ended at {}",
                g.holder,
                g.token,
                format_ms(at(l.first_unix_ns)),
                format_ms(at(l.expiry_at_first_unix_ns))
            );
            found.add(
                Moment::WriteAfterExpiry,
                at(l.first_unix_ns),
                &[&g.holder],
                line,
            );
        }
        for o in self.overlaps {
            let (a, b) = (&claims.grants[o.grants.0], &claims.grants[o.grants.1]);
            let line = format!(
                "{} (token {}) and {} (token {}) both wrote from {}",
                a.holder,
                a.token,
                b.holder,
                b.token,
                format_ms(at(o.from_unix_ns))
            );
            found.add(
                Moment::TwoHolders,
                at(o.from_unix_ns),
                &[&a.holder, &b.holder],
                line,
            );
        }
        for s in self.stale {
            let line = format!(
                "{}'s write with token {} accepted by {} at {}, after token {}'s",
                s.holder,
                s.token,
                s.shard,
                format_ms(at(s.commit_unix_ns)),
                s.newer_token
            );
            found.add(
                Moment::StaleWrite,
                at(s.commit_unix_ns),
                &[&s.holder, &s.newer_holder],
                line,
            );
        }
        for &(from, _) in self.vacancies {
            let line = format!("nobody held the lease from {}", format_ms(at(from)));
            found.add(Moment::Vacancy, at(from), &[], line);
        }
        self.three_grants(scene, found);
    }

    /// A grant's holder still writing (or trying to) after the second grant after it.
    fn three_grants(&self, scene: &Scene, found: &mut Found) {
        let claims = scene.claims;
        for (i, g) in claims.grants.iter().enumerate() {
            let Some(third) = claims.grants.get(i + 2) else {
                break;
            };
            let after = third.commit_unix_ns;
            let wrote = self
                .writes
                .iter()
                .filter(|a| a.grant == Some(i) && a.write.commit_unix_ns > after)
                .map(|a| a.write.commit_unix_ns);
            let tried = scene
                .refusals
                .iter()
                .filter(|r| r.token == Some(g.token) && r.time_ns > after)
                .map(|r| r.time_ns);
            if let Some(t) = wrote.chain(tried).min() {
                let line = format!(
                    "{} (token {}) still wrote at {}, after tokens {} and {} were granted",
                    g.holder,
                    g.token,
                    format_ms(scene.ms(t)),
                    claims.grants[i + 1].token,
                    third.token
                );
                found.add(Moment::ThreeGrants, scene.ms(t), &[&g.holder], line);
            }
        }
    }
}

/// The verdict with what it reached; a valid run that reached none of the moments its scenario
/// exists to reach is `unknown`: it proves nothing about them.
pub(crate) fn settle(mut verdict: Verdict, reached: Vec<Reached>, expected: &[Moment]) -> Verdict {
    let met = expected
        .iter()
        .any(|m| reached.iter().any(|r| r.moment == *m));
    if !expected.is_empty() && !met && verdict.valid == Validity::Valid {
        let names: Vec<&str> = expected.iter().map(|m| m.name()).collect();
        verdict.reasons.push(format!(
            "the run never reached {}: valid proves nothing about it",
            names.join(" or ")
        ));
        verdict.valid = Validity::Unknown;
    }
    verdict.reached = reached;
    verdict
}
