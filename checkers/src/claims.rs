//! The claim timeline from the routing db's audit: grants identified by their token, every renewal and release attributed to the grant whose token it carries, who held what when, when nobody did, and when two grants were valid at once.
//!
//! A grant is a `(token, holder)` pair. The lock hands out a new token with
//! every acquire, so a token names one grant; a renewal or a release carries
//! its grant's token and is attributed to that grant whatever committed in
//! between (box 2's renewal with token 17 committed after box 3's grant 18
//! renews grant 17: it neither becomes a new grant nor extends 18).
//!
//! The `unique` election (lesson 007's insert into `job_runs`) has no token:
//! its audit rows all say token 0 and expire at `infinity`. Keying on the
//! holder as well keeps those apart: each box that won a `job_runs` row is its
//! own grant, and the same box seen twice is the same grant (never an overlap
//! with itself). Two different boxes holding a token-0 grant are both holding
//! a claim that never expires, which `overlaps` reports for what it is. A
//! change that names no holder (the claim row's creation, token 0) is no grant.
//!
//! A change that is expired at its own commit is a release and hands nothing
//! out: when it names no grant (a lock that resets the row to nobody and
//! token 0, or empties the holder) it ends the grant the row held, the one
//! of the row's previous change.

use chaos_history::ClaimChange;
use std::collections::HashMap;

/// One committed change of a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub commit_unix_ns: i64,
    /// The expiry it set, effective: a release (an expiry before the commit,
    /// `-infinity`) ends the grant at the commit.
    pub expiry_unix_ns: i64,
    pub release: bool,
}

/// One grant of the claim: one token handed to one holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub holder: String,
    pub token: i64,
    /// The grant's first change: when the lock handed it out.
    pub commit_unix_ns: i64,
    /// The earliest the lock can have handed it out: `commit_unix_ns`, or before it when the
    /// stamp is only when an observer saw the grant (a ZooKeeper deletion has no time).
    pub earliest_unix_ns: i64,
    /// Every change of this grant in commit order (the grant itself,
    /// renewals, releases), whenever it committed.
    pub changes: Vec<Change>,
    /// When the holder last gave the claim up, if it did.
    pub released_unix_ns: Option<i64>,
}

impl Grant {
    /// The grant's expiry as the audit showed it at `at_unix_ns`: the most
    /// recent change committed at or before then (a release ends it at its commit).
    pub fn expiry_at(&self, at_unix_ns: i64) -> i64 {
        let seen = self
            .changes
            .partition_point(|c| c.commit_unix_ns <= at_unix_ns);
        self.changes[seen.saturating_sub(1)].expiry_unix_ns
    }

    /// The last expiry the audit ever showed for this grant.
    pub fn last_expiry(&self) -> i64 {
        self.changes
            .last()
            .map_or(self.commit_unix_ns, |c| c.expiry_unix_ns)
    }

    /// Whether the grant's latest change committed strictly before `at_unix_ns`
    /// is a release: a write then comes after its holder gave the claim up. A
    /// write in the very instant of the release cannot be ordered against it
    /// and is not judged after it.
    pub fn released_before(&self, at_unix_ns: i64) -> Option<i64> {
        let seen = self
            .changes
            .partition_point(|c| c.commit_unix_ns < at_unix_ns);
        let last = self.changes[..seen].last()?;
        last.release.then_some(last.commit_unix_ns)
    }

    /// The stretches `[from, to]` (Unix ns) in which the grant was valid,
    /// disjoint and in order. After each change the grant is valid from its
    /// commit to its expiry, or to the next change if that comes first; a
    /// renewal after the expiry (the lock's renew does not look at it)
    /// starts a new stretch at its commit. A release is a stretch of one instant.
    pub fn valid_stretches(&self) -> Vec<(i64, i64)> {
        let mut out: Vec<(i64, i64)> = Vec::with_capacity(self.changes.len());
        for (i, c) in self.changes.iter().enumerate() {
            let mut to = c.expiry_unix_ns;
            if let Some(next) = self.changes.get(i + 1) {
                to = to.min(next.commit_unix_ns);
            }
            let from = c.commit_unix_ns;
            match out.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => out.push((from, to)),
            }
        }
        out
    }
}

/// Two grants valid at once by the routing db's own record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantOverlap {
    /// Grant indices: the one handed out first, then the other.
    pub earlier: usize,
    pub later: usize,
    /// The stretches (Unix ns) in which both were valid, each longer than an instant.
    pub shared: Vec<(i64, i64)>,
    /// Which grant's change began the first shared stretch: `later` when it
    /// was handed out while `earlier` was unexpired; otherwise a renewal
    /// (of either) that revived it while the other was valid.
    pub began_by: usize,
    /// The other grant's expiry as the audit showed it at that moment.
    pub other_expiry_unix_ns: i64,
}

impl GrantOverlap {
    pub fn began_unix_ns(&self) -> i64 {
        self.shared[0].0
    }
}

/// The job's claim, as the routing db recorded it.
#[derive(Debug, Default)]
pub struct Claims {
    /// In the order they were handed out (commit, then xid).
    pub grants: Vec<Grant>,
    /// Each holder's grants (indices into `grants`), in the order handed out.
    by_holder: HashMap<String, Vec<usize>>,
    /// The grants of each token (one, unless the lock handed a token out twice
    /// or the `unique` election's token 0 went to several boxes).
    by_token: HashMap<i64, Vec<usize>>,
    /// How much later than the lock's own commit a grant may be stamped (Unix ns): 0 for the
    /// routing db's claim row (its commit timestamp), `SEEN_LATE_NS` for a lock service whose
    /// grants the harness stamps as its watch (or poll) brings them. A write carrying a token
    /// the service minted cannot precede the grant, so one within this before the stamp acted
    /// under it.
    pub seen_late_ns: i64,
}

/// The lag allowed between a lock service's commit of a grant and the harness's stamp of it:
/// the observers see a grant within 2 ms on a quiet machine (`chaos bench --what lock`), and a
/// fenced mover's first write, sent on the service's own reply, committed 0.4 ms (etcd) to 4 ms
/// (Redis) before the stamp with two runs sharing two cores.
pub const SEEN_LATE_NS: i64 = 25_000_000;

/// The lag `Claims::seen_late_ns` allows for the run's lock (its `lock` mover setting).
pub fn seen_late_ns(meta: &chaos_history::RunMeta) -> i64 {
    match meta.mover.get("lock").map(String::as_str) {
        None | Some("claims") => 0,
        Some(_) => SEEN_LATE_NS,
    }
}

/// A renewal sets the expiry in the future of its commit; a release sets
/// `-infinity` (or a very old time). Either way, after such a change the claim
/// is free from the commit on.
fn effective_expiry(c: &ClaimChange) -> i64 {
    if c.expires_unix_ns < c.commit_unix_ns {
        c.commit_unix_ns
    } else {
        c.expires_unix_ns
    }
}

impl Claims {
    /// Build from the audit's claim changes of `job` (all jobs when `job` is empty).
    pub fn from_audit(job: &str, changes: &[ClaimChange]) -> Claims {
        let mut mine: Vec<&ClaimChange> = changes
            .iter()
            .filter(|c| job.is_empty() || c.job == job)
            .collect();
        // In the order the records say, whatever order they came in: changes of one
        // transaction (one commit, one xid) by what they set; a record twice is one change.
        mine.sort_by(|a, b| {
            let key = |c: &ClaimChange| (c.commit_unix_ns, c.xid, c.expires_unix_ns, c.token);
            key(a)
                .cmp(&key(b))
                .then_with(|| a.holder.cmp(&b.holder))
                .then_with(|| a.app.cmp(&b.app))
        });
        mine.dedup_by(|a, b| a == b);
        let mut claims = Claims::default();
        let mut index: HashMap<(i64, &str), usize> = HashMap::new();
        // The grant each job's claim row held after its latest change.
        let mut current: HashMap<&str, usize> = HashMap::new();
        for c in mine {
            let change = Change {
                commit_unix_ns: c.commit_unix_ns,
                expiry_unix_ns: effective_expiry(c),
                release: c.expires_unix_ns < c.commit_unix_ns,
            };
            // An emptied holder is no holder.
            let holder = c.holder.as_deref().filter(|h| !h.is_empty());
            let known = match holder {
                Some(h) => index.get(&(c.token, h)).copied(),
                // A lock that clears the holder on release still names the token.
                None if c.token != 0 => claims
                    .by_token
                    .get(&c.token)
                    .and_then(|v| v.last())
                    .copied(),
                None => None,
            };
            let g = match (known, holder) {
                (Some(g), _) => g,
                // A change expired at its own commit hands nothing out: a lock
                // that resets the row on release (nobody, token 0) ends the
                // row's current grant, its previous change's. The row's
                // creation (nobody, token 0, before any grant) is no grant.
                (None, h) if change.release && (h.is_none() || c.token == 0) => {
                    match current.get(c.job.as_str()) {
                        Some(&g) => g,
                        None => continue,
                    }
                }
                (None, Some(holder)) => {
                    let g = claims.grants.len();
                    index.insert((c.token, holder), g);
                    claims
                        .by_holder
                        .entry(holder.to_string())
                        .or_default()
                        .push(g);
                    claims.by_token.entry(c.token).or_default().push(g);
                    claims.grants.push(Grant {
                        holder: holder.to_string(),
                        token: c.token,
                        commit_unix_ns: c.commit_unix_ns,
                        earliest_unix_ns: c
                            .not_before_unix_ns
                            .map_or(c.commit_unix_ns, |b| b.min(c.commit_unix_ns)),
                        changes: Vec::new(),
                        released_unix_ns: None,
                    });
                    g
                }
                (None, None) => continue,
            };
            current.insert(c.job.as_str(), g);
            let grant = &mut claims.grants[g];
            grant.changes.push(change);
            if change.release {
                grant.released_unix_ns = Some(c.commit_unix_ns);
            }
        }
        claims
    }

    /// The grants that carried `token`, in the order handed out.
    pub fn with_token(&self, token: i64) -> &[usize] {
        self.by_token.get(&token).map_or(&[], Vec::as_slice)
    }

    /// The grants `holder` was handed, in order.
    pub fn of_holder(&self, holder: &str) -> &[usize] {
        self.by_holder.get(holder).map_or(&[], Vec::as_slice)
    }

    /// `holder`'s most recent grant handed out at or before `at_unix_ns` (a
    /// write in the same instant as its grant belongs to it).
    pub fn latest_of(&self, holder: &str, at_unix_ns: i64) -> Option<usize> {
        let mine = self.of_holder(holder);
        let seen = mine.partition_point(|&g| self.grants[g].earliest_unix_ns <= at_unix_ns);
        seen.checked_sub(1).map(|i| mine[i])
    }

    /// Intervals `(from, to)` in Unix ns with no valid grant, between the
    /// first grant and `until_unix_ns`. A claim is valid at its expiry
    /// instant (acquire needs `expires_at < now()`), so a grant committed
    /// exactly at the previous expiry leaves no window. A lapsed lease renewed
    /// late by its holder (the April lock's renew does not look at the expiry)
    /// closes the window at the renewal. Each grant is judged by its own
    /// changes, so a release of an old token committed after a newer grant
    /// opens no window while the newer grant is valid.
    pub fn vacancies(&self, until_unix_ns: i64) -> Vec<(i64, i64)> {
        let mut stretches: Vec<(i64, i64)> = self
            .grants
            .iter()
            .flat_map(|g| g.valid_stretches())
            .collect();
        stretches.sort_unstable();
        let mut out = Vec::new();
        let mut covered: Option<i64> = None;
        for (from, to) in stretches {
            if let Some(c) = covered {
                if c < from && c < until_unix_ns {
                    out.push((c, from.min(until_unix_ns)));
                }
            }
            covered = Some(covered.map_or(to, |c| c.max(to)));
        }
        if let Some(c) = covered {
            if c < until_unix_ns {
                out.push((c, until_unix_ns));
            }
        }
        out
    }

    /// Every pair of grants valid at once for longer than an instant, by the
    /// routing db's commit times and the expiries its audit showed at each
    /// moment: a grant handed out while another was unexpired, or a renewal
    /// (of an old token, after a newer grant) that made an old grant valid
    /// again while the newer one was. A grant committed exactly at the
    /// previous expiry, or in the instant of its release, shares only that
    /// instant and is no overlap. In the order the overlaps began.
    pub fn overlaps(&self) -> Vec<GrantOverlap> {
        let stretches: Vec<Vec<(i64, i64)>> =
            self.grants.iter().map(Grant::valid_stretches).collect();
        let mut out = Vec::new();
        for a in 0..self.grants.len() {
            for b in a + 1..self.grants.len() {
                let shared = intersect(&stretches[a], &stretches[b]);
                let Some(&(from, _)) = shared.first() else {
                    continue;
                };
                // The change that began it: the later grant's issue, else a
                // change of whichever grant committed at that instant.
                let (ga, gb) = (&self.grants[a], &self.grants[b]);
                let began_by = if gb.commit_unix_ns == from {
                    b
                } else if ga.changes.iter().any(|c| c.commit_unix_ns == from) {
                    a
                } else {
                    b
                };
                let other = if began_by == a { gb } else { ga };
                out.push(GrantOverlap {
                    earlier: a,
                    later: b,
                    shared,
                    began_by,
                    other_expiry_unix_ns: other.expiry_at(from),
                });
            }
        }
        out.sort_by_key(|o| (o.began_unix_ns(), o.earlier, o.later));
        out
    }
}

/// The stretches both lists cover for longer than an instant.
fn intersect(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        let from = a[i].0.max(b[j].0);
        let to = a[i].1.min(b[j].1);
        if from < to {
            out.push((from, to));
        }
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    const NEVER: i64 = i64::MIN;
    const FOREVER: i64 = i64::MAX;

    fn change(
        holder: Option<&str>,
        token: i64,
        commit_s: i64,
        expires_unix_ns: i64,
    ) -> ClaimChange {
        ClaimChange {
            job: "move".into(),
            holder: holder.map(str::to_string),
            token,
            expires_unix_ns,
            commit_unix_ns: commit_s * S,
            app: holder.unwrap_or("").into(),
            xid: commit_s,
            not_before_unix_ns: None,
        }
    }

    #[test]
    fn renewals_extend_and_a_new_token_is_a_grant() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(None, 0, 0, NEVER),
                change(Some("box-2"), 17, 1, 61 * S),
                change(Some("box-2"), 17, 26, 86 * S),
                change(Some("box-3"), 18, 120, 180 * S),
                change(Some("box-3"), 18, 150, NEVER),
            ],
        );
        assert_eq!(claims.grants.len(), 2);
        assert_eq!(claims.grants[0].expiry_at(25 * S), 61 * S);
        assert_eq!(claims.grants[0].expiry_at(26 * S), 86 * S);
        assert_eq!(claims.grants[1].released_unix_ns, Some(150 * S));
        assert_eq!(claims.vacancies(140 * S), vec![(86 * S, 120 * S)]);
        assert_eq!(
            claims.vacancies(200 * S),
            vec![(86 * S, 120 * S), (150 * S, 200 * S)]
        );
        assert!(claims.overlaps().is_empty());
    }

    /// Issue 31: the grants are the same whatever order the lock's records come in, and a
    /// record written twice is one change.
    #[test]
    fn grants_do_not_depend_on_the_records_order_or_repeats() {
        let records = [
            change(None, 0, 0, NEVER),
            change(Some("box-2"), 17, 1, 61 * S),
            change(Some("box-2"), 17, 26, 86 * S),
            change(Some("box-3"), 18, 70, 130 * S),
            change(Some("box-2"), 17, 80, 140 * S),
            change(Some("box-3"), 18, 150, NEVER),
        ];
        let want = Claims::from_audit("move", &records);
        let mut reversed = records.to_vec();
        reversed.reverse();
        let doubled: Vec<ClaimChange> = records
            .iter()
            .flat_map(|c| [c.clone(), c.clone()])
            .collect();
        for other in [reversed, doubled] {
            let got = Claims::from_audit("move", &other);
            assert_eq!(got.grants, want.grants);
            assert_eq!(got.overlaps(), want.overlaps());
            assert_eq!(got.vacancies(200 * S), want.vacancies(200 * S));
        }
        assert_eq!(want.grants[0].changes.len(), 3);
    }

    #[test]
    fn a_write_in_the_instant_of_its_grant_belongs_to_it() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(Some("box-1"), 5, 10, 20 * S),
                change(Some("box-1"), 7, 30, 40 * S),
            ],
        );
        assert_eq!(claims.latest_of("box-1", 30 * S), Some(1));
        assert_eq!(claims.latest_of("box-1", 30 * S - 1), Some(0));
        assert_eq!(claims.with_token(5), &[0]);
        assert_eq!(claims.latest_of("box-1", 5 * S), None);
        assert_eq!(claims.latest_of("box-9", 35 * S), None);
    }

    /// Box 2's renewal carrying token 17 commits after box 3's grant 18: it
    /// renews grant 17 (not a new grant, not an extension of 18), and since 18
    /// is unexpired then, the two are valid at once from the renewal on.
    #[test]
    fn a_late_renewal_of_an_old_token_renews_its_own_grant_and_overlaps_the_newer() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(Some("box-2"), 17, 0, 60 * S),
                change(Some("box-3"), 18, 70, 130 * S),
                change(Some("box-2"), 17, 80, 140 * S),
            ],
        );
        assert_eq!(claims.grants.len(), 2);
        assert_eq!(claims.grants[0].changes.len(), 2);
        assert_eq!(claims.grants[1].last_expiry(), 130 * S);
        assert_eq!(claims.grants[0].expiry_at(85 * S), 140 * S);
        assert_eq!(
            claims.vacancies(200 * S),
            vec![(60 * S, 70 * S), (140 * S, 200 * S)]
        );
        let o = claims.overlaps();
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].earlier, o[0].later, o[0].began_by), (0, 1, 0));
        assert_eq!(o[0].shared, vec![(80 * S, 130 * S)]);
        assert_eq!(o[0].other_expiry_unix_ns, 130 * S);
    }

    /// The same late change as a release: attributed to grant 17, it ends
    /// nothing of grant 18's and opens no vacancy.
    #[test]
    fn a_release_of_an_old_token_after_a_newer_grant_is_no_overlap_and_no_vacancy() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(Some("box-2"), 17, 0, 60 * S),
                change(Some("box-3"), 18, 70, 130 * S),
                change(Some("box-2"), 17, 80, NEVER),
            ],
        );
        assert_eq!(claims.grants.len(), 2);
        assert_eq!(claims.grants[0].released_unix_ns, Some(80 * S));
        assert_eq!(claims.grants[1].released_unix_ns, None);
        assert!(claims.overlaps().is_empty());
        assert_eq!(claims.vacancies(130 * S), vec![(60 * S, 70 * S)]);
    }

    #[test]
    fn a_grant_before_the_previous_expiry_overlaps_and_one_at_it_does_not() {
        let at = Claims::from_audit(
            "move",
            &[
                change(Some("box-1"), 5, 0, 20 * S),
                change(Some("box-2"), 9, 20, 40 * S),
            ],
        );
        assert!(at.overlaps().is_empty());
        assert!(at.vacancies(40 * S).is_empty());
        let before = Claims::from_audit(
            "move",
            &[
                change(Some("box-1"), 5, 0, 20 * S),
                change(Some("box-2"), 9, 15, 35 * S),
            ],
        );
        let o = before.overlaps();
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].began_by, o[0].other_expiry_unix_ns), (1, 20 * S));
        assert_eq!(o[0].shared, vec![(15 * S, 20 * S)]);
    }

    /// Equal commit timestamps: a release and the next grant in one instant,
    /// in either xid order, share only that instant.
    #[test]
    fn a_grant_in_the_instant_of_a_release_is_no_overlap_in_either_order() {
        for (release_xid, grant_xid) in [(1, 2), (2, 1)] {
            let mut release = change(Some("box-1"), 5, 7, NEVER);
            release.xid = release_xid;
            let mut grant = change(Some("box-2"), 6, 7, 27 * S);
            grant.xid = grant_xid;
            let claims = Claims::from_audit(
                "move",
                &[change(Some("box-1"), 5, 0, 20 * S), release, grant],
            );
            assert!(claims.overlaps().is_empty());
            assert!(claims.vacancies(27 * S).is_empty());
        }
    }

    /// Lesson 007's election: token 0 for every winner, no expiry. The same
    /// box seen twice is one grant; token 0 is never merged across boxes.
    #[test]
    fn the_unique_elections_token_zero_is_told_apart_by_holder() {
        let one = Claims::from_audit(
            "move",
            &[
                change(None, 0, 0, NEVER),
                change(Some("box-1"), 0, 1, FOREVER),
                change(Some("box-1"), 0, 50, FOREVER),
            ],
        );
        assert_eq!(one.grants.len(), 1);
        assert!(one.overlaps().is_empty());
        assert!(one.vacancies(100 * S).is_empty());
        let two = Claims::from_audit(
            "move",
            &[
                change(Some("box-1"), 0, 1, FOREVER),
                change(Some("box-2"), 0, 50, FOREVER),
            ],
        );
        assert_eq!(two.grants.len(), 2);
        assert_eq!(two.with_token(0), &[0, 1]);
        let o = two.overlaps();
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].began_unix_ns(), 50 * S);
    }

    /// A token handed to a second holder is a second grant, valid at once with the first.
    #[test]
    fn one_token_for_two_holders_is_two_grants() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(Some("box-1"), 5, 0, 20 * S),
                change(Some("box-2"), 5, 10, 30 * S),
                change(Some("box-1"), 5, 12, 32 * S),
            ],
        );
        assert_eq!(claims.grants.len(), 2);
        assert_eq!(claims.grants[0].changes.len(), 2);
        assert_eq!(claims.overlaps()[0].shared, vec![(10 * S, 30 * S)]);
    }

    /// A lock that resets the row on release (nobody, token 0) or empties the
    /// holder: the release ends the row's grant; it is no grant of its own,
    /// and the next grant after it overlaps nothing.
    #[test]
    fn a_release_that_resets_the_row_ends_the_rows_grant() {
        for reset in [
            change(None, 0, 10, NEVER),
            change(Some(""), 5, 10, NEVER),
            change(Some("box-1"), 0, 10, NEVER),
        ] {
            let claims = Claims::from_audit(
                "move",
                &[
                    change(None, 0, 0, NEVER),
                    change(Some("box-1"), 5, 1, 20 * S),
                    reset,
                    change(Some("box-2"), 6, 12, 32 * S),
                ],
            );
            assert_eq!(claims.grants.len(), 2);
            assert_eq!(claims.grants[0].released_unix_ns, Some(10 * S));
            assert!(claims.overlaps().is_empty());
            assert_eq!(claims.vacancies(32 * S), vec![(10 * S, 12 * S)]);
        }
    }

    #[test]
    fn a_holderless_release_ends_the_grant_of_its_token() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(Some("box-1"), 5, 0, 20 * S),
                change(None, 5, 10, NEVER),
            ],
        );
        assert_eq!(claims.grants[0].released_unix_ns, Some(10 * S));
        assert_eq!(claims.grants[0].released_before(11 * S), Some(10 * S));
        assert_eq!(claims.grants[0].released_before(10 * S), None);
        assert_eq!(claims.vacancies(20 * S), vec![(10 * S, 20 * S)]);
    }
}
