//! Writes no grant can be named for (`unattributed-write`) and writes judged by a token their writer was not granted (`borrowed-token-write`).
//!
//! An unattributed write is its own class, never skipped: the checks that
//! need a grant (stale token, write after expiry, concurrent holders) cannot
//! judge it, so the verdict is at least `unknown`, with a reason per shard
//! that tells the mover's author what to set. It is an error when the record
//! proves harm anyway: a delete that took readings now lost, or a write whose
//! token (the one it carried, or the released grant's of its box) is older
//! than one a newer grant had already used on that shard.

use crate::claims::Claims;
use crate::lease::destroyed;
use crate::rows::RowsOutcome;
use crate::times::{format_ms, scenario_ms};
use crate::writes::{Attributed, Unattributed};
use crate::{Anomaly, AnomalyClass, Severity};
use chaos_history::{RunMeta, ShardWrite, WriteOp};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

/// Evidence lists stop here; counts and reasons cover the rest.
const EVIDENCE_LIMIT: usize = 100;

/// What the record proves an unattributed write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Harm {
    /// A delete that took readings which are now on no shard.
    Destroyed,
    /// Its token was older than the newest grant's that had written on the shard before it.
    OlderThanServed {
        token: i64,
        newer_token: i64,
        newer_holder: String,
    },
}

#[derive(Debug, Clone)]
pub struct UnattributedWrite<'a> {
    pub write: &'a ShardWrite,
    /// The token it carried (its own or its transaction's fence update's).
    pub token: Option<i64>,
    pub why: Unattributed,
    pub harm: Option<Harm>,
}

/// Per shard, in commit order: the newest grant (by hand-out order) and the
/// highest token that had written there up to each attributed write.
struct Served {
    by_shard: HashMap<String, Vec<(i64, usize, usize)>>,
}

impl Served {
    fn new(writes: &[Attributed], claims: &Claims) -> Served {
        let mut by_shard: HashMap<String, Vec<(i64, usize, usize)>> = HashMap::new();
        for a in writes {
            let Some(g) = a.grant else { continue };
            let list = by_shard.entry(a.write.shard.clone()).or_default();
            let (newest, highest) = list.last().map_or((g, g), |&(_, n, h)| {
                let h = if claims.grants[g].token > claims.grants[h].token {
                    g
                } else {
                    h
                };
                (n.max(g), h)
            });
            list.push((a.write.commit_unix_ns, newest, highest));
        }
        Served { by_shard }
    }

    /// The newest grant and the highest-token grant that wrote on `shard` strictly before `at`.
    fn before(&self, shard: &str, at: i64) -> Option<(usize, usize)> {
        let list = self.by_shard.get(shard)?;
        let seen = list.partition_point(|&(c, _, _)| c < at);
        list[..seen].last().map(|&(_, n, h)| (n, h))
    }
}

/// Judge every unattributed write: which harm, if any, the record proves.
/// `rows` only when the final state saw every shard (else no loss is provable).
pub fn unattributed<'a>(
    writes: &[Attributed<'a>],
    claims: &Claims,
    rows: Option<&RowsOutcome>,
) -> Vec<UnattributedWrite<'a>> {
    let served = Served::new(writes, claims);
    writes
        .iter()
        .filter_map(|a| {
            let why = a.unattributed?;
            let w = a.write;
            let data = matches!(w.op, WriteOp::Insert | WriteOp::Delete);
            let mut harm = None;
            if w.op == WriteOp::Delete && destroyed(w, rows) {
                harm = Some(Harm::Destroyed);
            } else if let (true, Some((newest, highest))) =
                (data, served.before(&w.shard, w.commit_unix_ns))
            {
                harm = match why {
                    Unattributed::UnknownToken { token }
                        if claims.grants[highest].token > token =>
                    {
                        Some(Harm::OlderThanServed {
                            token,
                            newer_token: claims.grants[highest].token,
                            newer_holder: claims.grants[highest].holder.clone(),
                        })
                    }
                    Unattributed::AfterRelease { grant } if newest > grant => {
                        Some(Harm::OlderThanServed {
                            token: claims.grants[grant].token,
                            newer_token: claims.grants[newest].token,
                            newer_holder: claims.grants[newest].holder.clone(),
                        })
                    }
                    _ => None,
                };
            }
            Some(UnattributedWrite {
                write: w,
                token: a.token,
                why,
                harm,
            })
        })
        .collect()
}

fn op_name(op: WriteOp) -> &'static str {
    match op {
        WriteOp::Insert => "insert",
        WriteOp::Delete => "delete",
        WriteOp::Fence => "fence",
    }
}

fn why_name(why: Unattributed) -> &'static str {
    match why {
        Unattributed::NoAppName => "no-application-name",
        Unattributed::NoGrant => "no-grant-yet",
        Unattributed::AfterRelease { .. } => "after-release",
        Unattributed::UnknownToken { .. } => "unknown-token",
        Unattributed::TokenBeforeGrant { .. } => "token-before-grant",
    }
}

/// What the mover's author reads: one reason per cause and shard (and box or token).
/// Who hands out grants and tokens in the run, in the reasons' words: the routing db's claim row
/// and `claim_acquire`, or the lock service the run used (`meta.mover["lock"]`).
struct Issuer {
    /// "the routing db", "etcd", ...
    who: &'static str,
    /// What a mover holds: "the claim", "the lock".
    held: &'static str,
    /// Where a mover's token comes from: "claim_acquire", "its lock".
    token_from: &'static str,
}

impl Issuer {
    fn of(meta: &RunMeta) -> Issuer {
        let (who, held, token_from) = match meta.mover.get("lock").map(String::as_str) {
            None | Some("claims") => ("the routing db", "the claim", "claim_acquire"),
            Some("advisory") => (
                "the advisory lock",
                "the lock",
                "the sequence drawn under the lock",
            ),
            Some("etcd") => ("etcd", "the lock", "its lock (the owner key's revision)"),
            Some("redis") => ("Redis", "the lock", "its lock (the INCR beside SET NX)"),
            Some("zookeeper") => ("ZooKeeper", "the lock", "its lock (the owner node's czxid)"),
            Some(_) => ("the lock service", "the lock", "its lock"),
        };
        Issuer {
            who,
            held,
            token_from,
        }
    }
}

fn reasons(list: &[UnattributedWrite], claims: &Claims, by: &Issuer) -> Vec<String> {
    let mut groups: BTreeMap<(&'static str, &str, String), u64> = BTreeMap::new();
    for u in list {
        let detail = match u.why {
            Unattributed::NoAppName => String::new(),
            Unattributed::NoGrant => u.write.app.clone(),
            Unattributed::AfterRelease { grant } => {
                format!("{} (token {})", u.write.app, claims.grants[grant].token)
            }
            Unattributed::UnknownToken { token } => token.to_string(),
            Unattributed::TokenBeforeGrant { grant } => {
                let g = &claims.grants[grant];
                format!("{} (handed to {})", g.token, g.holder)
            }
        };
        // A name the lock never handed a grant to is most likely no box's
        // name at all (a client's default, or a box claiming under another).
        let key = match u.why {
            Unattributed::NoGrant if claims.of_holder(&u.write.app).is_empty() => "never-granted",
            why => why_name(why),
        };
        *groups
            .entry((key, u.write.shard.as_str(), detail))
            .or_default() += 1;
    }
    let mut holders: Vec<&str> = claims.grants.iter().map(|g| g.holder.as_str()).collect();
    holders.sort_unstable();
    holders.dedup();
    let holders = if holders.is_empty() {
        format!("{} handed out no grant at all", by.who)
    } else {
        format!("the grants went to {}", holders.join(", "))
    };
    groups
        .into_iter()
        .map(|((why, shard, detail), n)| match why {
            "no-application-name" => format!(
                "{n} writes on {shard} carry no application_name (and no token): set CHAOS_BOX as application_name on every connection (docs: mover protocol)"
            ),
            "never-granted" => format!(
                "{n} writes by {detail} on {shard} while it held no grant: {who} never handed {detail} a grant ({holders}); a mover writes only once it holds {held}, with its CHAOS_BOX as application_name on every connection and as {held}'s holder (docs: mover protocol)",
                who = by.who,
                held = by.held
            ),
            "no-grant-yet" => format!(
                "{n} writes by {detail} on {shard} while it held no grant (before its first, or it never had one): a mover writes only after {from} handed it a token, and says it with set_config('chaos.token', token, true) (docs: mover protocol)",
                from = by.token_from
            ),
            "after-release" => format!(
                "{n} writes by {detail} on {shard} after it released that grant and before any new one: a mover stops writing when it releases {held}, or says the token it writes under with set_config('chaos.token', token, true) (docs: mover protocol)",
                held = by.held
            ),
            "token-before-grant" => format!(
                "{n} writes on {shard} carry token {detail} before {who} handed it out: a mover says only the token {from} returned to it (docs: mover protocol)",
                who = by.who,
                from = by.token_from
            ),
            _ => format!(
                "{n} writes on {shard} carry token {detail}, which {who} never handed out: set chaos.token to the token {from} returned (docs: mover protocol)",
                who = by.who,
                from = by.token_from
            ),
        })
        .collect()
}

/// `UnattributedWrite` (an error when harm is proven, else information with
/// the reasons that make the verdict `unknown`) and those reasons.
pub fn unattributed_anomaly(
    list: &[UnattributedWrite],
    claims: &Claims,
    meta: &RunMeta,
) -> (Option<Anomaly>, Vec<String>) {
    let Some(first) = list.first() else {
        return (None, Vec::new());
    };
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let harmful: Vec<&UnattributedWrite> = list.iter().filter(|u| u.harm.is_some()).collect();
    let evidence: Vec<_> = list
        .iter()
        .take(EVIDENCE_LIMIT)
        .map(|u| {
            let w = u.write;
            json!({
                "shard": w.shard, "app": w.app, "op": op_name(w.op), "turbine": w.turbine, "rows": w.rows,
                "token": u.token, "why": why_name(u.why),
                "released_token": match u.why { Unattributed::AfterRelease { grant } => Some(claims.grants[grant].token), _ => None },
                "harm": u.harm.as_ref().map(|h| match h {
                    Harm::Destroyed => json!({"kind": "destroyed-data"}),
                    Harm::OlderThanServed { token, newer_token, newer_holder } => json!({
                        "kind": "older-token-than-served", "token": token,
                        "newer_token": newer_token, "newer_holder": newer_holder,
                    }),
                }),
                "scenario_ms": at(w.commit_unix_ns), "time": format_ms(at(w.commit_unix_ns)),
            })
        })
        .collect();
    let describe = |u: &UnattributedWrite| {
        let w = u.write;
        let who = if w.app.is_empty() {
            "(no application_name)".to_string()
        } else {
            w.app.clone()
        };
        let why = match u.why {
            Unattributed::NoAppName => "no box named".to_string(),
            Unattributed::NoGrant if claims.of_holder(&w.app).is_empty() => {
                format!("no grant was ever handed to {who}")
            }
            Unattributed::NoGrant => format!("{who} held no grant"),
            Unattributed::AfterRelease { grant } => {
                format!("{who} had released token {}", claims.grants[grant].token)
            }
            Unattributed::UnknownToken { token } => format!("token {token} was never granted"),
            Unattributed::TokenBeforeGrant { grant } => {
                format!("token {} was not granted yet", claims.grants[grant].token)
            }
        };
        format!(
            "{who} {} {} on {} at {} ({why})",
            op_name(w.op),
            w.turbine.as_deref().unwrap_or("-"),
            w.shard,
            format_ms(at(w.commit_unix_ns)),
        )
    };
    let (severity, summary) = match harmful.first() {
        Some(h) => {
            let what = match &h.harm {
                Some(Harm::Destroyed) => "its delete took readings now lost".to_string(),
                Some(Harm::OlderThanServed {
                    token,
                    newer_token,
                    newer_holder,
                }) => format!(
                    "its token {token} is older than token {newer_token} ({newer_holder}) already served there"
                ),
                None => unreachable!("filtered on harm"),
            };
            (
                Severity::Error,
                format!(
                    "{} shard writes name no grant, {} of them proven harmful; first harmful: {}: {what}",
                    list.len(),
                    harmful.len(),
                    describe(h),
                ),
            )
        }
        None => (
            Severity::Info,
            format!(
                "{} shard writes name no grant, so the lease and fencing checks cannot judge them; first: {}",
                list.len(),
                describe(first),
            ),
        ),
    };
    let anomaly = Anomaly::new(
        AnomalyClass::UnattributedWrite,
        severity,
        list.len() as u64,
        Some(at(first.write.commit_unix_ns)),
        summary,
        json!({ "harmful": harmful.len(), "writes": evidence, "more": list.len().saturating_sub(EVIDENCE_LIMIT) }),
    );
    (Some(anomaly), reasons(list, claims, &Issuer::of(meta)))
}

/// `BorrowedTokenWrite`: data writes attributed by a token their writer was
/// not granted. Information: the stale-token and expiry checks judge them by
/// that token; what it tells is that the writer's identity and its token disagree.
pub fn borrowed_anomaly(writes: &[Attributed], claims: &Claims, meta: &RunMeta) -> Option<Anomaly> {
    let borrowed: Vec<&Attributed> = writes
        .iter()
        .filter(|a| a.borrowed && matches!(a.write.op, WriteOp::Insert | WriteOp::Delete))
        .collect();
    let first = borrowed.first()?;
    let clock = &meta.clock;
    let at = |ns: i64| scenario_ms(clock, ns);
    let who = |app: &str| {
        if app.is_empty() {
            "(no application_name)".to_string()
        } else {
            app.to_string()
        }
    };
    let g = &claims.grants[first.grant.expect("borrowed writes are attributed")];
    let hint = if first.write.app.is_empty() {
        ": set CHAOS_BOX as application_name on every connection (docs: mover protocol)"
    } else {
        ""
    };
    let summary = format!(
        "{} writes carry a token granted to another box and are judged by it; first: {} {} {} on {} at {} with token {} of {}{hint}",
        borrowed.len(),
        who(&first.write.app),
        op_name(first.write.op),
        first.write.turbine.as_deref().unwrap_or("-"),
        first.write.shard,
        format_ms(at(first.write.commit_unix_ns)),
        g.token,
        g.holder,
    );
    let evidence: Vec<_> = borrowed
        .iter()
        .take(EVIDENCE_LIMIT)
        .map(|a| {
            let g = &claims.grants[a.grant.expect("borrowed writes are attributed")];
            let w = a.write;
            json!({
                "shard": w.shard, "app": w.app, "op": op_name(w.op), "turbine": w.turbine, "rows": w.rows,
                "token": g.token, "token_holder": g.holder,
                "scenario_ms": at(w.commit_unix_ns), "time": format_ms(at(w.commit_unix_ns)),
            })
        })
        .collect();
    Some(Anomaly::new(
        AnomalyClass::BorrowedTokenWrite,
        Severity::Info,
        borrowed.len() as u64,
        Some(at(first.write.commit_unix_ns)),
        summary,
        json!({ "writes": evidence, "more": borrowed.len().saturating_sub(EVIDENCE_LIMIT) }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writes::attribute;
    use chaos_history::{Audit, ClaimChange};

    const S: i64 = 1_000_000_000;

    fn claim(holder: &str, token: i64, commit_s: i64, expires: i64) -> ClaimChange {
        ClaimChange {
            job: "move".into(),
            holder: Some(holder.into()),
            token,
            expires_unix_ns: expires,
            commit_unix_ns: commit_s * S,
            app: holder.into(),
            xid: commit_s,
            not_before_unix_ns: None,
        }
    }

    fn write(shard: &str, app: &str, op: WriteOp, at_s: i64, token: Option<i64>) -> ShardWrite {
        ShardWrite {
            shard: shard.into(),
            xid: at_s,
            commit_unix_ns: at_s * S,
            app: app.into(),
            op,
            turbine: Some("T1".into()),
            rows: 1,
            min_ts_ms: None,
            max_ts_ms: None,
            token,
        }
    }

    /// Harm is judged by the token a write carried, or by its box's released
    /// grant; only against grants that wrote on the same shard strictly before.
    #[test]
    fn an_unattributed_write_is_harmful_only_when_a_newer_grant_wrote_there_before() {
        let claims = Claims::from_audit(
            "move",
            &[
                claim("box-1", 5, 0, 20 * S),
                claim("box-1", 5, 10, i64::MIN),
                claim("box-2", 6, 20, 40 * S),
            ],
        );
        let audit = Audit {
            object_writes: Vec::new(),
            shard_writes: vec![
                write("shard2", "box-2", WriteOp::Insert, 22, Some(6)),
                // After box 2 wrote on shard2: box 1 (released 5) and an unknown older token.
                write("shard2", "box-1", WriteOp::Insert, 25, None),
                write("shard2", "box-3", WriteOp::Insert, 26, Some(4)),
                // In the same instant as box 2's write: cannot be ordered against it.
                write("shard2", "box-3", WriteOp::Insert, 22, Some(3)),
                // On a shard no newer grant wrote on, and a newer unknown token.
                write("shard3", "box-1", WriteOp::Insert, 27, None),
                write("shard2", "box-3", WriteOp::Insert, 28, Some(99)),
                write("shard2", "", WriteOp::Delete, 29, None),
            ],
            claim_changes: Vec::new(),
            complete: true,
            missing: Vec::new(),
        };
        let writes = attribute(&audit, &claims);
        let judged = unattributed(&writes, &claims, None);
        let harm: Vec<(i64, bool)> = judged
            .iter()
            .map(|u| (u.write.commit_unix_ns / S, u.harm.is_some()))
            .collect();
        assert_eq!(
            harm,
            vec![
                (22, false),
                (25, true),
                (26, true),
                (27, false),
                (28, false),
                (29, false)
            ]
        );
        assert_eq!(
            judged[1].harm,
            Some(Harm::OlderThanServed {
                token: 5,
                newer_token: 6,
                newer_holder: "box-2".into()
            })
        );
        let (anomaly, reasons) = unattributed_anomaly(&judged, &claims, &meta());
        let anomaly = anomaly.unwrap();
        assert_eq!((anomaly.count, anomaly.severity), (6, Severity::Error));
        assert!(reasons
            .iter()
            .any(|r| r.starts_with("1 writes on shard2 carry no application_name")));
    }

    fn meta() -> RunMeta {
        serde_json::from_value(serde_json::json!({
            "scenario": "t", "seed": 0,
            "clock": {"start_unix_ns": 0, "start_scenario_ms": 0, "real_ns_per_scenario_s": 10_000_000, "scenario_day_unix_ms": 0},
            "job": "move", "shards": ["shard2", "shard3"], "owners": {}, "plan": [], "seeded": [],
            "lease_ms": 20000, "copy_ms": 1000, "strict_duplicates": false, "mover": {},
            "end_scenario_ms": 0, "completed": true, "incomplete_reason": null
        }))
        .expect("a minimal run")
    }
}
