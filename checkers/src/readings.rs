//! Reading arithmetic on runs: which readings are expected, present, lost, duplicated or misplaced, at a cost that follows the number of runs, not rows.

use chaos_history::{ReadingMs, Run, RunBuilder};

/// Timestamps arriving mostly in ascending order (ingest acknowledgements),
/// held as runs. Completions of concurrent batches can arrive out of order:
/// those are kept aside and folded in at the end, so order never loses a reading.
#[derive(Debug, Default, Clone)]
pub struct ReadingSet {
    runs: Vec<Run>,
    late_ms: Vec<i64>,
}

impl ReadingSet {
    pub fn push(&mut self, ts_ms: i64) {
        let Some(last) = self.runs.last_mut() else {
            self.runs.push(Run::single(ts_ms, 1));
            return;
        };
        if ts_ms > last.last_ms {
            let gap_ms = ts_ms - last.last_ms;
            if last.step_ms == 0 {
                last.step_ms = gap_ms;
                last.last_ms = ts_ms;
            } else if gap_ms == last.step_ms {
                last.last_ms = ts_ms;
            } else {
                self.runs.push(Run::single(ts_ms, 1));
            }
        } else if !last.contains(ts_ms) {
            // Equal or already held readings are a set: nothing to add.
            self.late_ms.push(ts_ms);
        }
    }

    /// The runs, possibly overlapping (the checker reads them as a union).
    pub fn into_runs(self) -> Vec<Run> {
        let mut runs = self.runs;
        if !self.late_ms.is_empty() {
            let mut late = self.late_ms;
            late.sort_unstable();
            late.dedup();
            let mut b = RunBuilder::new();
            for ts in late {
                b.push(ts);
            }
            runs.extend(b.finish());
        }
        runs
    }
}

/// Where a run of one turbine's readings comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Must be present exactly once on the owner (seeded, or ingest `ok`).
    Expected,
    /// May or may not be present (ingest `info`).
    Maybe,
    /// Present on a shard at the end, `copies` times.
    Present { shard: u32, copies: u32 },
}

/// How many readings satisfy one predicate, and the first and last of them (ts ms).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub count: u64,
    pub first_ms: Option<ReadingMs>,
    pub last_ms: Option<ReadingMs>,
}

impl Tally {
    fn hit(&mut self, ts_ms: i64) {
        self.count += 1;
        self.first_ms.get_or_insert(ts_ms);
        self.last_ms = Some(ts_ms);
    }

    /// A segment made of `periods` whole windows (`all`) plus a head of the
    /// window (`head`), the window being `period_ms` long.
    fn periodic(all: Tally, head: Tally, periods: i64, period_ms: i64) -> Tally {
        let last_ms = match (head.last_ms, all.last_ms) {
            (Some(h), _) => Some(h + periods * period_ms),
            (None, Some(a)) => Some(a + (periods - 1) * period_ms),
            (None, None) => None,
        };
        Tally {
            count: all.count * periods as u64 + head.count,
            first_ms: all.first_ms,
            last_ms,
        }
    }

    fn merge(&mut self, later: Tally) {
        if later.count == 0 {
            return;
        }
        self.count += later.count;
        self.first_ms = match (self.first_ms, later.first_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ms = match (self.last_ms, later.last_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

/// One turbine's readings judged against the expectation.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TurbineTally {
    /// Distinct readings that must be present.
    pub expected: Tally,
    /// Expected and present on no shard.
    pub lost: Tally,
    /// Present more than once (on one shard or several).
    pub duplicated: Tally,
    /// Rows beyond the first copy of each duplicated reading.
    pub duplicate_rows_extra: u64,
    /// Present on a shard that is neither the owner nor the plan's source,
    /// whether or not the owner holds them too (a stray copy is misplaced;
    /// readings left on the source are the move's pending work: `unmoved`,
    /// or a duplicate once the owner has them too).
    pub misplaced: Tally,
    /// Present on the plan's source shard and on no other: not moved (yet).
    pub unmoved: Tally,
    /// Present but neither expected nor uncertain (an ingest `fail` that
    /// landed, a mover inventing rows, a turbine nobody knew): phantom rows.
    pub unexpected: Tally,
    /// Distinct readings present anywhere: `first_ms` is where the surviving history starts.
    pub present: Tally,
}

impl TurbineTally {
    fn merge(&mut self, later: &TurbineTally) {
        self.expected.merge(later.expected);
        self.lost.merge(later.lost);
        self.duplicated.merge(later.duplicated);
        self.duplicate_rows_extra += later.duplicate_rows_extra;
        self.misplaced.merge(later.misplaced);
        self.unmoved.merge(later.unmoved);
        self.unexpected.merge(later.unexpected);
        self.present.merge(later.present);
    }
}

/// The runs overlap in a way that would take more than the point budget to enumerate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooIrregular {
    pub points: u128,
}

/// Points one segment may enumerate before the checker gives up with `unknown`:
/// regular data costs one point per run per segment, this is for adversarial steps.
pub const POINT_LIMIT: u128 = 50_000_000;

/// Judge one turbine. `owner` is the shard index its readings belong on
/// (`None` when the routing names none: placement is then not judged);
/// `source` is the plan's source shard for it, if it is to move.
///
/// The time axis is cut at every run's start and end; inside a segment every
/// covering run is an arithmetic progression, so membership repeats with the
/// lcm of their steps. One period is enumerated and multiplied out.
pub fn tally(
    runs: &[(Run, Source)],
    owner: Option<u32>,
    source: Option<u32>,
) -> Result<TurbineTally, TooIrregular> {
    let mut bounds: Vec<(i64, bool, usize)> = Vec::with_capacity(runs.len() * 2);
    for (i, (run, _)) in runs.iter().enumerate() {
        if run.last_ms < run.first_ms || run.step_ms < 0 {
            continue;
        }
        bounds.push((run.first_ms, true, i));
        bounds.push((run.last_ms + 1, false, i));
    }
    bounds.sort_unstable();
    let mut total = TurbineTally::default();
    let mut active: Vec<usize> = Vec::new();
    let mut k = 0;
    while k < bounds.len() {
        let at_ms = bounds[k].0;
        while k < bounds.len() && bounds[k].0 == at_ms {
            let (_, start, i) = bounds[k];
            if start {
                active.push(i);
            } else if let Some(p) = active.iter().position(|&a| a == i) {
                active.swap_remove(p);
            }
            k += 1;
        }
        if active.is_empty() || k == bounds.len() {
            continue;
        }
        let segment = segment_tally(runs, &active, at_ms, bounds[k].0, owner, source)?;
        total.merge(&segment);
    }
    Ok(total)
}

/// A covering run inside one segment: its next reading and its step.
struct Cursor {
    next_ms: i64,
    step_ms: i64,
    source: Source,
}

/// What one reading's timestamp holds across every covering run.
#[derive(Default)]
struct Point {
    t: i64,
    expected: bool,
    maybe: bool,
    copies: u64,
    on_owner: bool,
    on_other: bool,
}

impl Point {
    /// Count the reading into `acc`; `owned` when the routing names an owner.
    fn judge(&self, acc: &mut TurbineTally, owned: bool) {
        let t = self.t;
        if self.expected {
            acc.expected.hit(t);
        }
        if self.copies == 0 {
            if self.expected {
                acc.lost.hit(t);
            }
            return;
        }
        acc.present.hit(t);
        if self.copies >= 2 {
            acc.duplicated.hit(t);
            acc.duplicate_rows_extra += self.copies - 1;
        }
        if self.on_other {
            acc.misplaced.hit(t);
        } else if owned && !self.on_owner {
            acc.unmoved.hit(t);
        }
        if !self.expected && !self.maybe {
            acc.unexpected.hit(t);
        }
    }
}

fn segment_tally(
    runs: &[(Run, Source)],
    active: &[usize],
    from_ms: i64,
    to_ms: i64,
    owner: Option<u32>,
    source: Option<u32>,
) -> Result<TurbineTally, TooIrregular> {
    let len_ms = to_ms - from_ms;
    let mut cursors: Vec<Cursor> = Vec::with_capacity(active.len());
    let mut period_ms: i128 = 1;
    for &i in active {
        let (run, source) = runs[i];
        let next_ms = if run.step_ms == 0 {
            run.first_ms
        } else {
            run.first_ms + (from_ms - run.first_ms + run.step_ms - 1) / run.step_ms * run.step_ms
        };
        if run.step_ms > 0 && period_ms <= len_ms as i128 {
            period_ms = lcm(period_ms, run.step_ms as i128);
        }
        cursors.push(Cursor {
            next_ms,
            step_ms: run.step_ms,
            source,
        });
    }
    // One window when the pattern does not repeat inside the segment.
    let (window_ms, periods, head_ms) = if period_ms >= len_ms as i128 {
        (len_ms, 1, 0)
    } else {
        (
            period_ms as i64,
            len_ms / period_ms as i64,
            len_ms % period_ms as i64,
        )
    };
    let points: u128 = cursors
        .iter()
        .map(|c| {
            if c.step_ms == 0 {
                1
            } else {
                window_ms as u128 / c.step_ms as u128 + 1
            }
        })
        .sum();
    if points > POINT_LIMIT {
        return Err(TooIrregular { points });
    }
    let window_end_ms = from_ms + window_ms;
    let head_end_ms = from_ms + head_ms;
    let mut all = TurbineTally::default();
    let mut head = TurbineTally::default();
    // The next reading of any covering run, in time order.
    while let Some(t) = cursors
        .iter()
        .map(|c| c.next_ms)
        .filter(|&t| t < window_end_ms)
        .min()
    {
        let mut point = Point {
            t,
            ..Point::default()
        };
        for c in cursors.iter_mut().filter(|c| c.next_ms == t) {
            match c.source {
                Source::Expected => point.expected = true,
                Source::Maybe => point.maybe = true,
                Source::Present { shard, copies: n } => {
                    point.copies += n as u64;
                    point.on_owner |= owner == Some(shard) && n > 0;
                    point.on_other |=
                        owner.is_some() && owner != Some(shard) && source != Some(shard) && n > 0;
                }
            }
            c.next_ms = if c.step_ms == 0 {
                i64::MAX
            } else {
                t + c.step_ms
            };
        }
        let judge = |acc: &mut TurbineTally| point.judge(acc, owner.is_some());
        judge(&mut all);
        if t < head_end_ms {
            judge(&mut head);
        }
    }
    let p = |a: Tally, h: Tally| Tally::periodic(a, h, periods, window_ms);
    Ok(TurbineTally {
        expected: p(all.expected, head.expected),
        lost: p(all.lost, head.lost),
        duplicated: p(all.duplicated, head.duplicated),
        duplicate_rows_extra: all.duplicate_rows_extra * periods as u64 + head.duplicate_rows_extra,
        misplaced: p(all.misplaced, head.misplaced),
        unmoved: p(all.unmoved, head.unmoved),
        unexpected: p(all.unexpected, head.unexpected),
        present: p(all.present, head.present),
    })
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i128, b: i128) -> i128 {
    a / gcd(a, b) * b
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1000;
    const YEAR_MS: i64 = 365 * 86_400_000;

    fn run(first_ms: i64, last_ms: i64, step_ms: i64) -> Run {
        Run {
            first_ms,
            last_ms,
            step_ms,
            copies: 1,
        }
    }

    fn on(shard: u32, copies: u32) -> Source {
        Source::Present { shard, copies }
    }

    /// Brute force over every millisecond, the reference for the run arithmetic.
    fn brute(runs: &[(Run, Source)], owner: Option<u32>) -> TurbineTally {
        brute_with(runs, owner, Some(2))
    }

    fn brute_with(runs: &[(Run, Source)], owner: Option<u32>, source: Option<u32>) -> TurbineTally {
        let lo = runs.iter().map(|r| r.0.first_ms).min().unwrap();
        let hi = runs.iter().map(|r| r.0.last_ms).max().unwrap();
        let mut acc = TurbineTally::default();
        for t in lo..=hi {
            let covering: Vec<(Run, Source)> = runs
                .iter()
                .copied()
                .filter(|(r, _)| r.contains(t))
                .collect();
            if covering.is_empty() {
                continue;
            }
            let single: Vec<(Run, Source)> = covering
                .iter()
                .map(|(_, s)| (Run::single(t, 1), *s))
                .collect();
            acc.merge(&tally(&single, owner, source).unwrap());
        }
        acc
    }

    #[test]
    fn a_year_moved_whole_is_neither_lost_nor_duplicated() {
        let year = run(0, YEAR_MS - 2 * S, 2 * S);
        let t = tally(&[(year, Source::Expected), (year, on(2, 1))], Some(2), None).unwrap();
        assert_eq!(t.expected.count, 15_768_000);
        assert_eq!(
            (t.lost.count, t.duplicated.count, t.misplaced.count),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_deleted_year_is_lost_and_survivors_start_after_it() {
        let year = run(0, YEAR_MS - 2 * S, 2 * S);
        let ingest = run(YEAR_MS, YEAR_MS + 100 * S, 5 * S);
        let survivors = run(YEAR_MS + 50 * S, YEAR_MS + 100 * S, 5 * S);
        let t = tally(
            &[
                (year, Source::Expected),
                (ingest, Source::Expected),
                (survivors, on(0, 1)),
            ],
            Some(0),
            None,
        )
        .unwrap();
        assert_eq!(t.lost.count, 15_768_000 + 10);
        assert_eq!(t.lost.first_ms, Some(0));
        assert_eq!(t.lost.last_ms, Some(YEAR_MS + 45 * S));
        assert_eq!(t.present.first_ms, Some(YEAR_MS + 50 * S));
    }

    #[test]
    fn different_steps_overlap_without_enumerating_rows() {
        // Seeded every 2000 s, ingest every 2 s over the same stretch, one copy of the union present.
        let seeded = run(0, 200_000 * S, 2000 * S);
        let ingest = run(1000 * S, 9_000 * S, 2 * S);
        let present_sparse = run(0, 200_000 * S, 2000 * S);
        let present_dense = run(1000 * S, 9_000 * S, 2 * S);
        let runs = [
            (seeded, Source::Expected),
            (ingest, Source::Expected),
            (present_sparse, on(1, 1)),
            (present_dense, on(1, 1)),
        ];
        let t = tally(&runs, Some(1), None).unwrap();
        // The dense run holds 2000 s and 4000 s..8000 s of the sparse lattice too: those readings are on the shard twice.
        assert_eq!(t.duplicated.count, 4);
        assert_eq!(t.expected.count, 101 + 4001 - 4);
        assert_eq!(t.lost.count, 0);
    }

    #[test]
    fn the_run_arithmetic_agrees_with_brute_force() {
        let cases: Vec<Vec<(Run, Source)>> = vec![
            vec![
                (run(0, 60, 6), Source::Expected),
                (run(3, 57, 9), on(0, 1)),
                (run(0, 60, 4), on(1, 2)),
            ],
            vec![
                (run(5, 5, 0), Source::Expected),
                (run(0, 40, 5), Source::Maybe),
                (run(0, 40, 10), on(0, 1)),
                (run(20, 40, 5), on(0, 1)),
            ],
            vec![
                (run(0, 997, 7), Source::Expected),
                (run(1, 990, 11), Source::Expected),
                (run(0, 997, 7), on(0, 1)),
                (run(12, 500, 11), on(2, 1)),
            ],
            vec![
                (run(0, 100, 2), Source::Expected),
                (run(50, 150, 3), on(0, 1)),
                (run(0, 48, 2), on(0, 1)),
                (run(49, 49, 0), on(1, 3)),
            ],
        ];
        for runs in cases {
            assert_eq!(
                tally(&runs, Some(0), Some(2)).unwrap(),
                brute(&runs, Some(0)),
                "{runs:?}"
            );
        }
    }

    /// Random small runs (any steps, single readings, copies 0-3, every
    /// source) against brute force, from a fixed seed.
    #[test]
    fn random_runs_agree_with_brute_force() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for _ in 0..3_000 {
            let k = 1 + next(6) as usize;
            let runs: Vec<(Run, Source)> = (0..k)
                .map(|_| {
                    let first = next(100) as i64;
                    let step = next(13) as i64;
                    let last = if step == 0 {
                        first
                    } else {
                        first + next(600) as i64
                    };
                    let source = match next(4) {
                        0 => Source::Expected,
                        1 => Source::Maybe,
                        _ => on(next(3) as u32, next(4) as u32),
                    };
                    (
                        Run {
                            first_ms: first,
                            last_ms: last,
                            step_ms: step,
                            copies: 1,
                        },
                        source,
                    )
                })
                .collect();
            let (owner, source) = (Some(next(3) as u32), Some(2));
            let got = tally(&runs, owner, source).unwrap();
            assert_eq!(
                got,
                brute_with(&runs, owner, source),
                "{runs:?} owner {owner:?}"
            );
        }
    }

    #[test]
    fn rows_left_on_the_source_are_unmoved_not_misplaced() {
        let year = run(0, YEAR_MS - 2 * S, 2 * S);
        let t = tally(
            &[
                (year, Source::Expected),
                (year, on(0, 1)),
                (run(0, 10 * S, 2 * S), on(1, 1)),
            ],
            Some(2),
            Some(0),
        )
        .unwrap();
        assert_eq!(t.unmoved.count, 15_768_000 - 6);
        assert_eq!(t.misplaced.count, 6);
    }

    /// A stray copy is misplaced even when the owner holds the readings too
    /// (and they are duplicated); a copy left on the source is not.
    #[test]
    fn a_stray_copy_beside_the_owners_is_misplaced_the_sources_is_not() {
        let day = run(0, 86_400 * S - 2 * S, 2 * S);
        let t = tally(
            &[
                (day, Source::Expected),
                (day, on(2, 1)),
                (run(0, 10 * S, 2 * S), on(1, 1)),
            ],
            Some(2),
            Some(0),
        )
        .unwrap();
        assert_eq!(
            (t.misplaced.count, t.duplicated.count, t.unmoved.count),
            (6, 6, 0)
        );
        let t = tally(
            &[(day, Source::Expected), (day, on(2, 1)), (day, on(0, 1))],
            Some(2),
            Some(0),
        )
        .unwrap();
        assert_eq!(
            (t.misplaced.count, t.duplicated.count, t.unmoved.count),
            (0, 43_200, 0)
        );
        // Placement is not judged where the routing names no owner.
        let t = tally(&[(day, on(1, 1))], None, None).unwrap();
        assert_eq!((t.misplaced.count, t.unexpected.count), (0, 43_200));
    }

    #[test]
    fn late_acknowledgements_are_not_lost() {
        let mut set = ReadingSet::default();
        for ts in [0, 2, 4, 8, 6, 10, 4] {
            set.push(ts);
        }
        let runs: Vec<(Run, Source)> = set
            .into_runs()
            .into_iter()
            .map(|r| (r, Source::Expected))
            .collect();
        let t = tally(&runs, None, None).unwrap();
        assert_eq!(t.expected.count, 6);
    }

    #[test]
    fn adversarial_steps_give_up_instead_of_spinning() {
        let runs = [
            (run(0, 10 * YEAR_MS, 1), Source::Expected),
            (run(0, 10 * YEAR_MS, 999_999_937), on(0, 1)),
        ];
        assert!(tally(&runs, Some(0), None).is_err());
    }
}
