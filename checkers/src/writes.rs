//! Shard writes from the audit: which grant each write acted under (or why none can be named), and an index by turbine for dating anomalies.
//!
//! The attribution rules, in order:
//! 1. A write that carries a token (its own `chaos.token`, or the token of
//!    the fence update in the same transaction on the same shard) is judged
//!    by that token, whoever wrote it: it belongs to the grant with that
//!    token (the writer's own grant of it when there are several). When that
//!    grant's holder is not the writer's `application_name` the write is
//!    `borrowed`: attributed all the same, and reported.
//! 2. A write without a token belongs to its box's (`application_name`'s)
//!    most recent grant handed out at or before the write.
//! 3. Otherwise it is unattributed: no `application_name`, no grant yet, its
//!    grant released before it (and no new one), a token no grant ever had,
//!    or a token used before the lock handed it out.
//!
//! Token 0 names no grant: it is the fence's starting value and the `unique`
//! election's placeholder (every winner's), so a write saying it is judged
//! by its box, as one without a token (a `unique` loser writing with token 0
//! borrowed nobody's grant: it had none). A statement that changed no row
//! (a zero-row delete) is no write: it is neither attributed nor judged.
//!
//! The ingest (`ingest*`) and the harness write without a lease by design:
//! their writes are governed only when they carry a token some grant had.
//! Neither ever deletes a reading, so a delete under either name is a mover's
//! (one that named itself so) and governed like any other.

use crate::claims::Claims;
use chaos_history::{Audit, ShardWrite, WriteOp};
use std::collections::HashMap;

/// Why a governed write has no grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Unattributed {
    /// No `application_name` and no token: no box can be named.
    NoAppName,
    /// Its box held no grant yet (or never did).
    NoGrant,
    /// Its box's latest grant (index) was released before the write, and no new grant followed.
    AfterRelease { grant: usize },
    /// It carries a token the routing db never handed out.
    UnknownToken { token: i64 },
    /// It carries the token of a grant (index) the routing db handed out only after the write committed.
    TokenBeforeGrant { grant: usize },
}

/// A governed write and the grant it acted under.
#[derive(Debug, Clone, Copy)]
pub struct Attributed<'a> {
    pub write: &'a ShardWrite,
    pub grant: Option<usize>,
    /// The token it carried: its own, or its transaction's fence update's.
    pub token: Option<i64>,
    /// Attributed by a token granted to another holder than its `application_name`.
    pub borrowed: bool,
    /// Why `grant` is `None`.
    pub unattributed: Option<Unattributed>,
}

/// Writers the lease and the fence do not govern: the ingest writes new
/// readings without asking anybody, by design, and the harness seeds and
/// sets up. Every other writer, an empty `application_name` included, is a mover.
pub fn is_unfenced(app: &str) -> bool {
    app.starts_with("ingest") || app == "harness"
}

/// Whether a writer is a mover, the writers the lease and the fence govern.
pub fn is_mover(app: &str) -> bool {
    !is_unfenced(app)
}

/// Whether the lease and the fence govern a write: a mover's, or a delete by
/// anybody (the ingest and the harness never delete readings).
pub fn is_governed(w: &ShardWrite) -> bool {
    is_mover(&w.app) || w.op == WriteOp::Delete
}

/// Whether a recorded write changed anything: a statement that matched no
/// row (a zero-row delete, a fence update refused) destroyed, placed and
/// fenced nothing, whoever sent it with whichever token.
pub fn changed_rows(w: &ShardWrite) -> bool {
    w.rows > 0
}

/// The grant a write acted under, by the rules of the module doc.
pub fn attribute_one<'a>(
    w: &'a ShardWrite,
    token: Option<i64>,
    claims: &Claims,
) -> Option<Attributed<'a>> {
    let at = w.commit_unix_ns;
    // The latest instant a grant's stamp may carry and the write still act under it.
    let stamped_by = at.saturating_add(claims.seen_late_ns);
    let found = |grant: usize, borrowed: bool| Attributed {
        write: w,
        grant: Some(grant),
        token,
        borrowed,
        unattributed: None,
    };
    let none = |why: Unattributed| Attributed {
        write: w,
        grant: None,
        token,
        borrowed: false,
        unattributed: Some(why),
    };
    if let Some(t) = token.filter(|&t| t != 0) {
        let with = claims.with_token(t);
        let issued = |g: &usize| claims.grants[*g].earliest_unix_ns <= stamped_by;
        // The writer's own grant of the token, else the one handed out (to
        // anybody) by then, else the first: it was not handed out yet.
        let own = with
            .iter()
            .rev()
            .find(|&&g| issued(&g) && claims.grants[g].holder == w.app);
        let by_then = with.iter().rev().find(|&&g| issued(&g));
        return match own.or(by_then).or(with.first()) {
            // Nobody can know a token before the lock hands it out (the shard's
            // and the routing db's commit times come from one machine's clock).
            Some(&g) if !issued(&g) && is_governed(w) => {
                Some(none(Unattributed::TokenBeforeGrant { grant: g }))
            }
            Some(&g) if !issued(&g) => None,
            Some(&g) => Some(found(g, claims.grants[g].holder != w.app)),
            None if !is_governed(w) => None,
            None => Some(none(Unattributed::UnknownToken { token: t })),
        };
    }
    if !is_governed(w) {
        return None;
    }
    if w.app.is_empty() {
        return Some(none(Unattributed::NoAppName));
    }
    Some(match claims.latest_of(&w.app, stamped_by) {
        None => none(Unattributed::NoGrant),
        Some(g) if claims.grants[g].released_before(at).is_some() => {
            none(Unattributed::AfterRelease { grant: g })
        }
        Some(g) => found(g, false),
    })
}

/// Every governed write that changed rows, in commit order, with its grant or why it has none.
pub fn attribute<'a>(audit: &'a Audit, claims: &Claims) -> Vec<Attributed<'a>> {
    // A transaction that updated a shard's fence said its token there.
    let mut fence_token: HashMap<(&str, i64), i64> = HashMap::new();
    for w in &audit.shard_writes {
        if let (WriteOp::Fence, Some(t)) = (w.op, w.token) {
            let e = fence_token.entry((w.shard.as_str(), w.xid)).or_insert(t);
            *e = (*e).max(t);
        }
    }
    let mut out: Vec<Attributed<'a>> = audit
        .shard_writes
        .iter()
        .filter(|w| changed_rows(w))
        .filter_map(|w| {
            let token = w
                .token
                .or_else(|| fence_token.get(&(w.shard.as_str(), w.xid)).copied());
            attribute_one(w, token, claims)
        })
        .collect();
    out.sort_by_key(|a| (a.write.commit_unix_ns, a.write.xid));
    out
}

/// Whether a write touched the reading at `ts_ms` (a write that did not say
/// which timestamps it touched may have touched any).
fn covers(w: &ShardWrite, ts_ms: i64) -> bool {
    !matches!(w.min_ts_ms, Some(lo) if lo > ts_ms) && !matches!(w.max_ts_ms, Some(hi) if hi < ts_ms)
}

/// Every insert and delete of each turbine (any writer) that changed rows, in commit order.
pub struct TurbineWrites<'a> {
    by_turbine: HashMap<&'a str, Vec<&'a ShardWrite>>,
}

impl<'a> TurbineWrites<'a> {
    pub fn new(audit: &'a Audit) -> TurbineWrites<'a> {
        let mut by_turbine: HashMap<&'a str, Vec<&'a ShardWrite>> = HashMap::new();
        for w in audit.shard_writes.iter().filter(|w| changed_rows(w)) {
            if let (Some(t), WriteOp::Insert | WriteOp::Delete) = (w.turbine.as_deref(), w.op) {
                by_turbine.entry(t).or_default().push(w);
            }
        }
        for ws in by_turbine.values_mut() {
            ws.sort_by_key(|w| (w.commit_unix_ns, w.xid));
        }
        TurbineWrites { by_turbine }
    }

    fn of(&self, turbine: &str) -> &[&'a ShardWrite] {
        self.by_turbine.get(turbine).map_or(&[], Vec::as_slice)
    }

    /// When the reading at `ts_ms` was lost: the last delete that touched it.
    pub fn lost_at(&self, turbine: &str, ts_ms: i64) -> Option<&'a ShardWrite> {
        self.of(turbine)
            .iter()
            .rev()
            .find(|w| w.op == WriteOp::Delete && covers(w, ts_ms))
            .copied()
    }

    /// The first insert of the turbine on `shard`, any readings.
    pub fn first_insert_on(&self, turbine: &str, shard: &str) -> Option<&'a ShardWrite> {
        self.of(turbine)
            .iter()
            .find(|w| w.op == WriteOp::Insert && w.shard == shard)
            .copied()
    }

    /// Inserts of the reading at `ts_ms` on shards `shard_ok` accepts, in commit order.
    pub fn inserts_of(
        &self,
        turbine: &str,
        ts_ms: i64,
        shard_ok: impl Fn(&str) -> bool,
    ) -> Vec<&'a ShardWrite> {
        self.of(turbine)
            .iter()
            .filter(|w| w.op == WriteOp::Insert && shard_ok(&w.shard) && covers(w, ts_ms))
            .copied()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_history::ClaimChange;

    const S: i64 = 1_000_000_000;

    fn grant(holder: &str, token: i64, commit_s: i64, expires_s: Option<i64>) -> ClaimChange {
        ClaimChange {
            job: "move".into(),
            holder: Some(holder.into()),
            token,
            expires_unix_ns: expires_s.map_or(i64::MIN, |e| e * S),
            commit_unix_ns: commit_s * S,
            app: holder.into(),
            xid: commit_s,
            not_before_unix_ns: None,
        }
    }

    fn write(app: &str, op: WriteOp, at_s: i64, xid: i64, token: Option<i64>) -> ShardWrite {
        ShardWrite {
            shard: "shard2".into(),
            xid,
            commit_unix_ns: at_s * S,
            app: app.into(),
            op,
            turbine: (op != WriteOp::Fence).then(|| "T1".to_string()),
            rows: 1,
            min_ts_ms: None,
            max_ts_ms: None,
            token,
        }
    }

    fn claims() -> Claims {
        Claims::from_audit(
            "move",
            &[
                grant("box-1", 5, 10, Some(40)),
                grant("box-1", 5, 30, None),
                grant("box-2", 9, 50, Some(80)),
            ],
        )
    }

    fn one(w: &ShardWrite, claims: &Claims) -> Option<(Option<usize>, bool, Option<Unattributed>)> {
        attribute_one(w, w.token, claims).map(|a| (a.grant, a.borrowed, a.unattributed))
    }

    #[test]
    fn a_write_without_a_token_belongs_to_its_boxs_latest_grant_unless_released() {
        let c = claims();
        assert_eq!(
            one(&write("box-1", WriteOp::Insert, 20, 1, None), &c),
            Some((Some(0), false, None))
        );
        // In the instant of the release: cannot be ordered against it, in time.
        assert_eq!(
            one(&write("box-1", WriteOp::Insert, 30, 1, None), &c),
            Some((Some(0), false, None))
        );
        assert_eq!(
            one(&write("box-1", WriteOp::Delete, 31, 1, None), &c),
            Some((None, false, Some(Unattributed::AfterRelease { grant: 0 })))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 49, 1, None), &c),
            Some((None, false, Some(Unattributed::NoGrant)))
        );
        assert_eq!(
            one(&write("box-7", WriteOp::Insert, 60, 1, None), &c),
            Some((None, false, Some(Unattributed::NoGrant)))
        );
        assert_eq!(
            one(&write("", WriteOp::Insert, 60, 1, None), &c),
            Some((None, false, Some(Unattributed::NoAppName)))
        );
        assert_eq!(
            one(&write("ingest", WriteOp::Insert, 60, 1, None), &c),
            None
        );
        assert_eq!(
            one(&write("harness", WriteOp::Insert, 60, 1, None), &c),
            None
        );
    }

    /// A lock service's grant is stamped as the harness sees it, after the service committed
    /// it: a write within `seen_late_ns` before the stamp acted under it, one earlier did not.
    #[test]
    fn a_grant_seen_late_owns_the_writes_just_before_its_stamp() {
        let mut c = claims();
        c.seen_late_ns = 10 * S;
        assert_eq!(
            one(&write("box-2", WriteOp::Fence, 45, 1, Some(9)), &c),
            Some((Some(1), false, None))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 41, 1, None), &c),
            Some((Some(1), false, None))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 39, 1, Some(9)), &c),
            Some((
                None,
                false,
                Some(Unattributed::TokenBeforeGrant { grant: 1 })
            ))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 39, 1, None), &c),
            Some((None, false, Some(Unattributed::NoGrant)))
        );
    }

    #[test]
    fn a_token_names_the_grant_whoever_wrote_it() {
        let c = claims();
        // Box 2 writing with box 1's token 5: judged as grant 5, and borrowed.
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 60, 1, Some(5)), &c),
            Some((Some(0), true, None))
        );
        // No application_name but a token: attributed, borrowed.
        assert_eq!(
            one(&write("", WriteOp::Insert, 60, 1, Some(9)), &c),
            Some((Some(1), true, None))
        );
        // A token before the lock handed it out names no grant.
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 45, 1, Some(9)), &c),
            Some((
                None,
                false,
                Some(Unattributed::TokenBeforeGrant { grant: 1 })
            ))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Fence, 50, 1, Some(9)), &c),
            Some((Some(1), false, None))
        );
        // Box 1 after its release, with its token: its grant (a late write), not unattributed.
        assert_eq!(
            one(&write("box-1", WriteOp::Insert, 60, 1, Some(5)), &c),
            Some((Some(0), false, None))
        );
        assert_eq!(
            one(&write("box-1", WriteOp::Insert, 60, 1, Some(7)), &c),
            Some((None, false, Some(Unattributed::UnknownToken { token: 7 })))
        );
        // The unfenced writers with a token no grant had stay unfenced.
        assert_eq!(
            one(&write("harness", WriteOp::Fence, 0, 1, Some(0)), &c),
            None
        );
        assert_eq!(
            one(&write("ingest", WriteOp::Insert, 60, 1, Some(9)), &c),
            Some((Some(1), true, None))
        );
    }

    /// A grant stamped when an observer saw it, no earlier than its previous stamp (a ZooKeeper
    /// deletion has no time): a write after that bound acted under it, with its token or not.
    #[test]
    fn a_grant_seen_late_covers_writes_after_its_earliest() {
        let c = Claims::from_audit(
            "move",
            &[
                grant("box-1", 5, 10, Some(40)),
                ClaimChange {
                    not_before_unix_ns: Some(42 * S),
                    ..grant("box-2", 9, 50, None)
                },
            ],
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 45, 1, Some(9)), &c),
            Some((Some(1), false, None))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 45, 1, None), &c),
            Some((Some(1), false, None))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 41, 1, Some(9)), &c),
            Some((
                None,
                false,
                Some(Unattributed::TokenBeforeGrant { grant: 1 })
            ))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 41, 1, None), &c),
            Some((None, false, Some(Unattributed::NoGrant)))
        );
    }

    /// Token 0 names no grant (the fence's start, every `unique` winner's):
    /// a write saying it is judged by its box.
    #[test]
    fn token_zero_is_judged_by_the_box() {
        let c = Claims::from_audit(
            "move",
            &[ClaimChange {
                expires_unix_ns: i64::MAX,
                ..grant("box-1", 0, 10, None)
            }],
        );
        assert_eq!(
            one(&write("box-1", WriteOp::Insert, 20, 1, Some(0)), &c),
            Some((Some(0), false, None))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 20, 1, Some(0)), &c),
            Some((None, false, Some(Unattributed::NoGrant)))
        );
    }

    /// A token handed to two holders: the writer's own grant once it has it,
    /// else the one handed out by then (borrowed).
    #[test]
    fn a_token_twice_handed_names_the_grant_issued_by_then() {
        let c = Claims::from_audit(
            "move",
            &[
                grant("box-1", 5, 10, Some(40)),
                grant("box-2", 5, 50, Some(80)),
            ],
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 30, 1, Some(5)), &c),
            Some((Some(0), true, None))
        );
        assert_eq!(
            one(&write("box-2", WriteOp::Insert, 60, 1, Some(5)), &c),
            Some((Some(1), false, None))
        );
    }

    /// A statement that changed no row is neither attributed nor dated by.
    #[test]
    fn a_zero_row_write_is_no_write() {
        let c = claims();
        let mut empty = write("", WriteOp::Delete, 60, 7, None);
        empty.rows = 0;
        let audit = Audit {
            object_writes: Vec::new(),
            shard_writes: vec![empty, write("box-1", WriteOp::Delete, 20, 8, None)],
            claim_changes: Vec::new(),
            complete: true,
            missing: Vec::new(),
        };
        let a = attribute(&audit, &c);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].write.xid, 8);
        let by = TurbineWrites::new(&audit);
        assert_eq!(by.lost_at("T1", 0).map(|w| w.xid), Some(8));
    }

    #[test]
    fn a_data_write_carries_its_transactions_fence_token() {
        let c = claims();
        let audit = Audit {
            object_writes: Vec::new(),
            shard_writes: vec![
                write("", WriteOp::Fence, 60, 7, Some(9)),
                write("", WriteOp::Insert, 60, 7, None),
                write("", WriteOp::Insert, 61, 8, None),
            ],
            claim_changes: Vec::new(),
            complete: true,
            missing: Vec::new(),
        };
        let a = attribute(&audit, &c);
        assert_eq!(a.len(), 3);
        assert_eq!((a[1].grant, a[1].token), (Some(1), Some(9)));
        assert_eq!(a[2].unattributed, Some(Unattributed::NoAppName));
    }
}
