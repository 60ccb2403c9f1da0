//! The history as the report needs it, aggregated in one pass: [`builder::DigestBuilder`] observes each event once (and [`HistoryDigest::of`] a history in memory) and keeps only what the page draws.
//!
//! Memory does not grow with the history: a kind of mark in a lane (a box's
//! renewals, the ingest's ok completions) is kept one by one up to [`KEEP`]
//! marks, then counted in [`FINE_BINS`] bins over the run's span, which the
//! timeline resamples to its pixels. Invoke->completion pairs are matched as
//! they arrive (only the invokes still open are held), latency goes into an
//! hdrhistogram per process class and operation, and a mark keeps the
//! position of its event (`src`), not its text: the few hover titles the page
//! draws one by one are built at the end from an [`EventLookup`].
//!
//! Events outside the run's span (its start and end, with a margin) are
//! counted, never drawn or paired: one absurd timestamp cannot stretch the
//! axis to centuries.

use crate::latency::{process_class, LatencyAcc, LatencyRow};
use chaos_history::{Op, OpType, OpView, RunMeta, ScenarioClock};
use std::collections::{HashMap, VecDeque};

pub(crate) mod builder;

/// The run's span is cut into this many segments; in each, a kind of mark in
/// a lane is kept one by one up to [`PER_SEGMENT`] marks. A view that only
/// covers segments kept whole draws exact marks (a close-up of the crux);
/// one that covers a segment with more marks draws the fine bins.
pub(crate) const SEGMENTS: usize = 64;
pub(crate) const PER_SEGMENT: u32 = 1024;
/// Bins over the run's span, for a kind of mark with a segment past [`PER_SEGMENT`].
pub(crate) const FINE_BINS: usize = 32_768;
/// Marks kept one by one in the whole digest, all lanes and kinds together.
const KEEP_BUDGET: u64 = 2 << 20;
/// Lanes for boxes, other processes and fault targets: past these, one more
/// lane gathers the rest (its label says how many it holds).
const MAX_BOX_LANES: usize = 64;
const MAX_EVENT_LANES: usize = 24;
const MAX_FAULT_LANES: usize = 48;
/// Distinct process names, operation names and targets told apart.
const MAX_NAMES: usize = 4096;
/// Latency rows (process class x operation).
const MAX_LATENCY_ROWS: usize = 256;
/// Invokes one process may have open; past this the oldest is counted open.
const MAX_PENDING: usize = 4096;
/// Turbines whose last delete is remembered (for the lost-turbine marks).
const MAX_TURBINES: usize = 1 << 20;
/// Nemesis actions sorted together before they are paired into windows.
const FAULT_BATCH: usize = 4096;

/// Where the page finds the whole text of an event it draws one by one (its
/// hover title): `src` is what the builder was given with the event, an index
/// into a slice or a byte offset into `history.jsonl`.
pub trait EventLookup {
    fn event(&self, src: u64) -> Option<Op>;
}

impl EventLookup for [Op] {
    fn event(&self, src: u64) -> Option<Op> {
        self.get(usize::try_from(src).ok()?).cloned()
    }
}

impl EventLookup for Vec<Op> {
    fn event(&self, src: u64) -> Option<Op> {
        self.as_slice().event(src)
    }
}

/// A scenario time, saturating rather than wrapping for absurd `time_ns`.
pub(crate) fn scenario_ms(clock: &ScenarioClock, run_ns: i64) -> i64 {
    let scale = clock.real_ns_per_scenario_s.max(1) as i128;
    let ms = clock.start_scenario_ms as i128 + run_ns as i128 * 1000 / scale;
    ms.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// The scenario time of a wall-clock instant (an audit row), saturating.
pub(crate) fn scenario_ms_at_unix(clock: &ScenarioClock, unix_ns: i64) -> i64 {
    scenario_ms(clock, clock.run_ns_at_unix_ns(unix_ns))
}

/// The run's span as the timeline accepts it: scenario start to end, with a
/// margin each side of a quarter of the run or two real minutes, whichever is
/// longer (the harness records its last heals and mover exits after the end).
pub(crate) fn accepted_span(meta: &RunMeta) -> (i64, i64) {
    let start = meta.clock.start_scenario_ms;
    let end = meta.end_scenario_ms.max(start);
    let scale = meta.clock.real_ns_per_scenario_s.max(1) as i128;
    let two_real_minutes = (120_000_000_000i128 * 1000 / scale).min(i64::MAX as i128) as i64;
    let margin = (end.saturating_sub(start) / 4)
        .max(two_real_minutes)
        .max(60_000);
    (start.saturating_sub(margin), end.saturating_add(margin))
}

/// `FINE_BINS` bins over `[a0, a1]` (scenario ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grid {
    pub a0: i64,
    pub a1: i64,
}

impl Grid {
    fn width(&self) -> i128 {
        (self.a1 as i128 - self.a0 as i128).max(0) + 1
    }

    pub fn bin(&self, t: i64) -> usize {
        let t = t.clamp(self.a0, self.a1) as i128 - self.a0 as i128;
        ((t * FINE_BINS as i128 / self.width()) as usize).min(FINE_BINS - 1)
    }

    /// Where bin `b` starts (`b == FINE_BINS` gives the end).
    pub fn start(&self, b: usize) -> i64 {
        (self.a0 as i128 + b as i128 * self.width() / FINE_BINS as i128) as i64
    }

    pub fn segment(&self, t: i64) -> usize {
        self.bin(t) * SEGMENTS / FINE_BINS
    }

    /// The segments `[t0, t1]` covers, as a bit mask.
    pub fn segments(&self, t0: i64, t1: i64) -> u64 {
        let (a, b) = (self.segment(t0), self.segment(t1.max(t0)));
        let upto = |s: usize| {
            if s >= 63 {
                u64::MAX
            } else {
                (1u64 << (s + 1)) - 1
            }
        };
        upto(b) & !(upto(a) >> 1)
    }
}

/// The grid, and how many more marks the digest may keep one by one.
#[derive(Debug)]
pub(crate) struct Keep {
    pub grid: Grid,
    budget: std::cell::Cell<u64>,
}

impl Keep {
    pub fn new(grid: Grid) -> Keep {
        Keep {
            grid,
            budget: std::cell::Cell::new(KEEP_BUDGET),
        }
    }

    fn take_one(&self) -> bool {
        let left = self.budget.get();
        self.budget.set(left.saturating_sub(1));
        left > 0
    }
}

/// Which segments keep their marks one by one, and how many each holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Segments {
    kept: Vec<u32>,
    /// Segments with more marks than kept, as a bit mask.
    pub full: u64,
}

impl Segments {
    /// Whether a mark at segment `seg` is kept one by one.
    fn keep(&mut self, seg: usize, keep: &Keep) -> bool {
        if self.full & (1 << seg) != 0 {
            return false;
        }
        if self.kept.is_empty() {
            self.kept = vec![0; SEGMENTS];
        }
        if self.kept[seg] >= PER_SEGMENT || !keep.take_one() {
            self.full |= 1 << seg;
            return false;
        }
        self.kept[seg] += 1;
        true
    }
}

/// A moment: its scenario ms and where its event is (`src`, for a hover
/// title), with the other half of its invoke->completion pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Point {
    pub t: i64,
    pub src: u64,
    pub other: Option<u64>,
}

/// Marks of one kind in one lane: one by one in the segments that hold few,
/// and, once a segment holds more, all of them counted per fine bin.
#[derive(Debug, Clone, Default)]
pub(crate) struct Points {
    /// Every mark of the segments kept whole, sorted by time once the digest is finished.
    pub exact: Vec<Point>,
    pub segments: Segments,
    /// Every mark, once a segment is full.
    pub fine: Option<Vec<u32>>,
    pub total: u64,
}

impl Points {
    pub fn push(&mut self, p: Point, keep: &Keep) {
        let grid = &keep.grid;
        self.total += 1;
        if let Some(fine) = &mut self.fine {
            fine[grid.bin(p.t)] += 1;
        }
        if self.segments.keep(grid.segment(p.t), keep) {
            self.exact.push(p);
        } else if self.fine.is_none() {
            // The first mark not kept: every mark so far was.
            let mut fine = vec![0u32; FINE_BINS];
            for q in self.exact.iter().chain(std::iter::once(&p)) {
                fine[grid.bin(q.t)] += 1;
            }
            self.fine = Some(fine);
        }
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether every mark in `[t0, t1]` is kept one by one.
    pub fn exact_in(&self, grid: &Grid, t0: i64, t1: i64) -> bool {
        self.segments.full & grid.segments(t0, t1) == 0
    }

    fn finish(&mut self) {
        self.exact.sort_by_key(|p| p.t);
    }
}

/// Something with a duration on the timeline.
pub(crate) trait Bounded {
    fn bounds(&self) -> (i64, i64);
}

/// How many intervals cover each fine bin, and how many start in it.
#[derive(Debug, Clone)]
pub(crate) struct Coverage {
    /// Differences: the running sum is the count covering a bin.
    pub diff: Vec<i32>,
    pub starts: Vec<u32>,
}

impl Coverage {
    fn new() -> Coverage {
        Coverage {
            diff: vec![0; FINE_BINS + 1],
            starts: vec![0; FINE_BINS],
        }
    }

    fn add(&mut self, (s, e): (i64, i64), grid: &Grid) {
        let (b0, b1) = (grid.bin(s), grid.bin(e.max(s)));
        self.diff[b0] += 1;
        self.diff[b1 + 1] -= 1;
        if s >= grid.a0 {
            self.starts[b0] += 1;
        }
    }

    /// The count covering each fine bin.
    pub fn active(&self) -> Vec<i64> {
        let mut running = 0i64;
        self.diff[..FINE_BINS]
            .iter()
            .map(|d| {
                running += *d as i64;
                running
            })
            .collect()
    }
}

/// Intervals of one kind in one lane: one by one in the segments (of their
/// start) that hold few, and, once a segment holds more, all of them as
/// fine-bin coverage.
#[derive(Debug, Clone)]
pub(crate) struct Spans<T> {
    /// Every interval starting in a segment kept whole, sorted by start once the digest is finished.
    pub exact: Vec<T>,
    pub segments: Segments,
    /// The longest interval: a view must also see the segments it may reach back to.
    pub longest: i64,
    pub fine: Option<Coverage>,
    pub total: u64,
}

impl<T> Default for Spans<T> {
    fn default() -> Self {
        Spans {
            exact: Vec::new(),
            segments: Segments::default(),
            longest: 0,
            fine: None,
            total: 0,
        }
    }
}

impl<T: Bounded> Spans<T> {
    pub fn push(&mut self, item: T, keep: &Keep) {
        let grid = &keep.grid;
        let (s, e) = item.bounds();
        self.total += 1;
        self.longest = self.longest.max(e.saturating_sub(s));
        if let Some(fine) = &mut self.fine {
            fine.add((s, e), grid);
        }
        if self.segments.keep(grid.segment(s), keep) {
            self.exact.push(item);
        } else if self.fine.is_none() {
            let mut fine = Coverage::new();
            for i in &self.exact {
                fine.add(i.bounds(), grid);
            }
            fine.add((s, e), grid);
            self.fine = Some(fine);
        }
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether every interval overlapping `[t0, t1]` is kept one by one.
    pub fn exact_in(&self, grid: &Grid, t0: i64, t1: i64) -> bool {
        self.segments.full & grid.segments(t0.saturating_sub(self.longest), t1) == 0
    }

    fn finish(&mut self) {
        self.exact.sort_by_key(|s| s.bounds().0);
    }
}

/// How an invoke->completion interval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Fail,
    /// A fail with `reason: "fenced"`: the shard refused a stale token.
    Refused,
    Info,
    /// No completion before the process's last event.
    Open,
}

/// An operation with a duration (a copy).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub start: i64,
    pub end: i64,
    pub invoke: Option<u64>,
    pub completion: Option<u64>,
    pub outcome: Outcome,
}

impl Bounded for Span {
    fn bounds(&self) -> (i64, i64) {
        (self.start, self.end)
    }
}

/// A stretch of time a box believed it held the claim.
#[derive(Debug, Clone)]
pub(crate) struct Belief {
    pub start: i64,
    pub end: i64,
    pub token: Option<i64>,
    pub ended_by: &'static str,
}

impl Bounded for Belief {
    fn bounds(&self) -> (i64, i64) {
        (self.start, self.end)
    }
}

/// Consecutive `skip`s of one box (walking turbines somebody else moved).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SkipRun {
    pub start: i64,
    pub end: i64,
    pub n: u64,
    pub first: u64,
    pub last: u64,
}

impl Bounded for SkipRun {
    fn bounds(&self) -> (i64, i64) {
        (self.start, self.end)
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct BoxLane {
    pub name: String,
    pub beliefs: Spans<Belief>,
    pub copies: Spans<Span>,
    pub ok_copies: u64,
    pub source_deletes: Points,
    pub tidy_deletes: Points,
    pub refused: Points,
    pub failed: Points,
    pub skips: Spans<SkipRun>,
    pub renew_ok: Points,
    pub renew_fail: Points,
    /// Acquire attempts that did not win: a non-holder polling.
    pub polls: Points,
    pub acquired: Points,
    pub events: u64,
    pub last_t: i64,
    /// The skip run still growing: nothing else happened since.
    skip_open: Option<SkipRun>,
    /// A belief in progress: (start, token).
    believing: Option<(i64, Option<i64>)>,
    /// Copies still open when the history ended: they run to the box's last event.
    open_copies: Vec<Span>,
}

impl BoxLane {
    fn end_belief(&mut self, at: i64, why: &'static str, grid: &Keep) {
        if let Some((start, token)) = self.believing.take() {
            self.beliefs.push(
                Belief {
                    start,
                    end: at,
                    token,
                    ended_by: why,
                },
                grid,
            );
        }
    }

    fn close_skips(&mut self, grid: &Keep) {
        if let Some(run) = self.skip_open.take() {
            self.skips.push(run, grid);
        }
    }
}

/// A fault from its landing to its healing, on one target.
#[derive(Debug, Clone)]
pub(crate) struct FaultWindow {
    pub start: i64,
    pub end: i64,
    pub verb: String,
    /// Never healed before the run ended.
    pub open: bool,
    pub begin_op: u64,
    pub end_op: Option<u64>,
}

impl Bounded for FaultWindow {
    fn bounds(&self) -> (i64, i64) {
        (self.start, self.end)
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct FaultLane {
    pub target: String,
    pub windows: Spans<FaultWindow>,
    /// Faults with no duration (`clock`, unknown verbs) and nemesis ops that failed.
    pub instants: Points,
}

/// Events of a process that is neither a box nor the nemesis (the ingest).
#[derive(Debug, Clone, Default)]
pub(crate) struct EventLane {
    pub name: String,
    pub ok: Points,
    pub fail: Points,
    pub info: Points,
}

/// The history, aggregated for the page: lanes, latency, the run's extent.
#[derive(Debug, Clone)]
pub struct HistoryDigest {
    pub(crate) grid: Grid,
    /// Every event observed, inside the run's span or not.
    pub(crate) events: u64,
    /// Events outside the run's span: before it, after it, and the earliest and latest of them.
    pub(crate) outside_before: u64,
    pub(crate) outside_after: u64,
    pub(crate) outside_range: Option<(i64, i64)>,
    /// The timeline's axis: the run's start and end, widened to the events inside its span.
    pub(crate) t0: i64,
    pub(crate) t1: i64,
    pub(crate) boxes: Vec<BoxLane>,
    pub(crate) faults: Vec<FaultLane>,
    pub(crate) others: Vec<EventLane>,
    pub(crate) latency: Vec<LatencyRow>,
    /// Where each box delete of a turbine last landed.
    pub(crate) last_delete: HashMap<String, i64>,
}

impl HistoryDigest {
    /// Events observed.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Events outside the run's span (counted, not drawn).
    pub fn outside(&self) -> u64 {
        self.outside_before + self.outside_after
    }

    /// The latency table: per process class and operation, sorted.
    pub fn latency(&self) -> &[LatencyRow] {
        &self.latency
    }
}
