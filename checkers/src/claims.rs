//! The claim timeline from the routing db's audit: grants, renewals, releases, who held what when, and when nobody did.

use chaos_history::ClaimChange;
use std::collections::HashMap;

/// One grant of the claim: a change of the row that handed out a new token
/// (or, with the `unique` election's token 0, a new holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub holder: String,
    pub token: i64,
    pub commit_unix_ns: i64,
    /// Every change of this grant in commit order (the grant itself, renewals,
    /// a release): `(commit_unix_ns, effective expiry unix ns)`.
    pub changes: Vec<(i64, i64)>,
    /// When the holder gave the claim up, if it did.
    pub released_unix_ns: Option<i64>,
}

impl Grant {
    /// The grant's expiry as the audit showed it at `at_unix_ns`: the most
    /// recent change committed at or before then (a release ends it at its commit).
    pub fn expiry_at(&self, at_unix_ns: i64) -> i64 {
        let seen = self
            .changes
            .partition_point(|&(commit, _)| commit <= at_unix_ns);
        self.changes[seen.saturating_sub(1)].1
    }

    /// The last expiry the audit ever showed for this grant.
    pub fn last_expiry(&self) -> i64 {
        self.changes.last().map_or(self.commit_unix_ns, |c| c.1)
    }
}

/// The job's claim, as the routing db recorded it.
#[derive(Debug, Default)]
pub struct Claims {
    pub grants: Vec<Grant>,
    /// Each holder's grants (indices into `grants`), in commit order.
    by_holder: HashMap<String, Vec<usize>>,
    /// Every change of the row (commit, effective expiry), for vacancies.
    timeline: Vec<(i64, i64)>,
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
        mine.sort_by_key(|c| (c.commit_unix_ns, c.xid));
        let mut claims = Claims::default();
        for c in mine {
            // The row's creation (`insert ... on conflict do nothing`) names nobody.
            let Some(holder) = c.holder.as_deref() else {
                continue;
            };
            let eff = effective_expiry(c);
            claims.timeline.push((c.commit_unix_ns, eff));
            let same = claims
                .grants
                .last()
                .is_some_and(|g| g.holder == holder && g.token == c.token);
            if same {
                let g = claims.grants.last_mut().expect("checked above");
                g.changes.push((c.commit_unix_ns, eff));
                if c.expires_unix_ns < c.commit_unix_ns {
                    g.released_unix_ns = Some(c.commit_unix_ns);
                }
                continue;
            }
            claims
                .by_holder
                .entry(holder.to_string())
                .or_default()
                .push(claims.grants.len());
            claims.grants.push(Grant {
                holder: holder.to_string(),
                token: c.token,
                commit_unix_ns: c.commit_unix_ns,
                changes: vec![(c.commit_unix_ns, eff)],
                released_unix_ns: None,
            });
        }
        claims
    }

    /// The grant a write by `app` committed at `at_unix_ns` acted under: the
    /// grant whose token the write named, when it named one of `app`'s, else
    /// `app`'s most recent grant committed at or before the write (a write in
    /// the same instant as its grant belongs to it). Works for a black-box mover that sends no token.
    pub fn grant_for(&self, app: &str, at_unix_ns: i64, token: Option<i64>) -> Option<usize> {
        let mine = self.by_holder.get(app)?;
        let seen = mine.partition_point(|&g| self.grants[g].commit_unix_ns <= at_unix_ns);
        if let Some(t) = token {
            if let Some(&g) = mine[..seen]
                .iter()
                .rev()
                .find(|&&g| self.grants[g].token == t)
            {
                return Some(g);
            }
        }
        seen.checked_sub(1).map(|i| mine[i])
    }

    /// Intervals `(from, to)` in Unix ns with no valid claim, between the
    /// first grant and `until_unix_ns`. A claim is valid at its expiry
    /// instant (acquire needs `expires_at < now()`), so a grant committed
    /// exactly at the previous expiry leaves no window. A lapsed lease renewed
    /// late by its holder (the April lock's renew does not look at the expiry)
    /// closes the window at the renewal.
    pub fn vacancies(&self, until_unix_ns: i64) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let mut expiry: Option<i64> = None;
        for &(commit, eff) in &self.timeline {
            if let Some(e) = expiry {
                if e < commit && e < until_unix_ns {
                    out.push((e, commit.min(until_unix_ns)));
                }
            }
            expiry = Some(eff);
        }
        if let Some(e) = expiry {
            if e < until_unix_ns {
                out.push((e, until_unix_ns));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

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
        }
    }

    #[test]
    fn renewals_extend_and_a_new_token_is_a_grant() {
        let claims = Claims::from_audit(
            "move",
            &[
                change(None, 0, 0, i64::MIN),
                change(Some("box-2"), 17, 1, 61 * S),
                change(Some("box-2"), 17, 26, 86 * S),
                change(Some("box-3"), 18, 120, 180 * S),
                change(Some("box-3"), 18, 150, i64::MIN),
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
        assert_eq!(claims.grant_for("box-1", 30 * S, None), Some(1));
        assert_eq!(claims.grant_for("box-1", 30 * S - 1, None), Some(0));
        assert_eq!(claims.grant_for("box-1", 35 * S, Some(5)), Some(0));
        assert_eq!(claims.grant_for("box-1", 5 * S, None), None);
        assert_eq!(claims.grant_for("box-9", 35 * S, None), None);
    }
}
