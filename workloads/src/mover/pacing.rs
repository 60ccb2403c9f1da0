//! The copy's clock, as pure arithmetic on offsets from the mover's start, so 133 turbines do not drift.
//!
//! A job-level cursor says where the next turbine's copy would ideally
//! begin, and batch `i` of a copy may not end before `start + (i+1) x slot`.
//! Lateness is caught up by sleeping less, up to one copy time: the work
//! between two copies (renew, source delete, the next existence check; a
//! source delete racing the ingest on a 2-core machine was measured at up to
//! 10 scenario s), batches that stalled while the machine was busy (a copy
//! overran by 14 scenario s while a vacuum ran). A link slowed for the
//! whole copy (a latency or bandwidth fault) makes every batch longer than
//! its slot, so nothing is slept and the copy takes as long as its work: a
//! slow link makes a slow copy. The next turbine catches up what it overran
//! by if that is under one copy time, and starts fresh after it otherwise.

use std::time::Duration;

/// The pacing of one turbine's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// How long one turbine's copy should take (real time, already scaled).
    pub copy: Duration,
    /// How many batches the copy is cut into.
    pub batches: u32,
}

impl Pace {
    /// One batch's share of the copy time.
    pub fn slot(&self) -> Duration {
        self.copy / self.batches.max(1)
    }

    /// How late after the cursor a turbine may begin and still follow on from it:
    /// one copy time. A longer gap (a minute of renewal retries) is not caught
    /// up: the next copy starts then and takes its full time.
    pub fn follow_on(&self) -> Duration {
        self.copy
    }

    /// When a turbine's copy starts: at the cursor when the turbine follows
    /// on from the last copy (the renew and delete in between took less than
    /// `follow_on`), else now (after a skip the cursor is None: a skip walk,
    /// a retry, a new grant).
    pub fn turbine_start(&self, cursor: Option<Duration>, now: Duration) -> Duration {
        match cursor {
            Some(c) if now < c => c,
            Some(c) if now - c < self.follow_on() => c,
            _ => now,
        }
    }

    /// The earliest batch `i` (0-based) may end: `start + (i+1) x copy / batches`.
    /// Batches past the planned count (a keyset split made more) end with the copy.
    /// Computed from the start each time so integer division never accumulates.
    pub fn batch_deadline(&self, start: Duration, i: u32) -> Duration {
        let batches = self.batches.max(1);
        let k = (i + 1).min(batches);
        start + mul_div(self.copy, k, batches)
    }

    /// The cursor after a copy that started at `start`: its ideal end, however late it really ended.
    pub fn cursor_after(&self, start: Duration) -> Duration {
        start + self.copy
    }
}

/// `d * k / n` without overflow or drift.
fn mul_div(d: Duration, k: u32, n: u32) -> Duration {
    let ns = d.as_nanos() * k as u128 / n as u128;
    Duration::from_nanos(ns.min(u64::MAX as u128) as u64)
}

/// Batch size for `count` rows in `batches` batches (at least 1).
pub fn batch_rows(count: u64, batches: u32) -> u64 {
    count.div_ceil(batches.max(1) as u64).max(1)
}

/// What to keep of a keyset page fetched with `limit n + 1`, ordered by ts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    /// Keep the first `keep` rows; the next page starts after the last kept ts.
    /// `exhausted`: the source had no more rows than these.
    Take { keep: usize, exhausted: bool },
    /// Every fetched row has one ts: read all rows with that ts as this batch,
    /// so rows sharing a ts (duplicates: no unique constraint) never straddle a page.
    AllOneTs,
}

/// Decide a page: `ts` are the fetched rows' timestamps (ordered), `n` the batch size.
pub fn split_page<T: PartialEq>(ts: &[T], n: usize) -> Page {
    let n = n.max(1);
    if ts.len() <= n {
        return Page::Take {
            keep: ts.len(),
            exhausted: true,
        };
    }
    // ts has n + 1 rows: rows sharing the n-th row's ts may go on past the limit.
    let last = &ts[n - 1];
    if ts[n] != *last {
        return Page::Take {
            keep: n,
            exhausted: false,
        };
    }
    let keep = ts[..n].iter().position(|t| t == last).unwrap_or(n);
    if keep == 0 {
        Page::AllOneTs
    } else {
        Page::Take {
            keep,
            exhausted: false,
        }
    }
}
