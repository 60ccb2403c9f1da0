//! The timeline: an inline SVG with scenario time across and one lane per fault target, the claim, each box, the other processes, each shard and the verdict.
//!
//! Nothing is ever dropped to keep the page small: a kind of mark with more
//! events in view than [`MAX_MARKS`] is binned per [`BIN_PX`] pixel columns
//! and drawn as a density, and the lane and the legend say so.

use crate::digest::{Coverage, Grid, Outcome, Point, Points, Spans, FINE_BINS};
use crate::html::{duration, esc, json_line, time, time_whole, truncate_chars};
use crate::model::{str_field, Model};
use chaos_checkers::Severity;
use std::fmt::Write;

mod lanes;

/// Width of the lane labels on the left, in SVG user units (px at 100 %).
const LABEL_W: f64 = 190.0;
/// Width of the time axis.
pub(crate) const PLOT_W: f64 = 1200.0;
const RIGHT_W: f64 = 24.0;
const WIDTH: f64 = LABEL_W + PLOT_W + RIGHT_W;
const AXIS_H: f64 = 24.0;
/// Above this many marks of one kind in view in one lane, marks are binned:
/// past it they stop being separable by eye at [`PLOT_W`] and only add bytes.
pub(crate) const MAX_MARKS: usize = 300;
/// Bin width when aggregating, in px: 400 bins over the plot.
pub(crate) const BIN_PX: f64 = 3.0;
/// Box colours (CSS classes `b0`..`b7`): none of them red, orange or purple,
/// which are kept for tidy-up deletes, vacancy and refused writes.
const BOX_COLOURS: usize = 8;

/// One kind of mark that was binned instead of drawn one by one.
#[derive(Debug, Clone)]
pub(crate) struct AggNote {
    pub lane: String,
    pub what: String,
    pub events: usize,
    pub bins: usize,
}

/// A bar's width: a display bin's as `3`, another (a fine bin's) to a tenth.
fn width(w: f64) -> String {
    if w == BIN_PX {
        format!("{BIN_PX}")
    } else {
        format!("{w:.1}")
    }
}

/// One bar of a binned kind of point mark.
struct Bar {
    x0: f64,
    w: f64,
    n: u64,
    ta: i64,
    tb: i64,
}

/// One cell of binned intervals: how many in progress, how many started.
struct Cell {
    x0: f64,
    w: f64,
    active: i64,
    started: u64,
    ta: i64,
    tb: i64,
}

/// Intervals to draw: kept one by one, or as fine-bin coverage (then drawn
/// with `fine_class`).
struct SpanSrc<'s, T> {
    exact: &'s [T],
    /// Every interval in view is in `exact`.
    exact_in: bool,
    fine: Option<&'s Coverage>,
    fine_class: &'s str,
}

impl<'s, T: crate::digest::Bounded> SpanSrc<'s, T> {
    fn of(spans: &'s Spans<T>, v: &View, fine_class: &'s str) -> Self {
        SpanSrc {
            exact: &spans.exact,
            exact_in: spans.exact_in(v.grid(), v.t0, v.t1),
            fine: spans.fine.as_ref(),
            fine_class,
        }
    }
}

impl<'s, T> SpanSrc<'s, T> {
    fn slice(items: &'s [T]) -> Self {
        SpanSrc {
            exact: items,
            exact_in: true,
            fine: None,
            fine_class: "",
        }
    }
}

#[derive(Clone, Copy)]
enum Shape {
    /// A downward triangle (deletes).
    Tri,
    /// A bigger downward triangle with a bar (tidy-up deletes).
    BigTri,
    Diamond,
    Cross,
    Tick,
    Dot,
}

/// What is drawn and over which time range: copied into title closures.
#[derive(Clone, Copy)]
struct View<'m, 'a> {
    model: &'m Model<'a>,
    t0: i64,
    t1: i64,
}

struct Canvas<'m, 'a> {
    v: View<'m, 'a>,
    /// Lane backgrounds, drawn under the fault shading.
    bg: String,
    out: String,
    notes: Vec<AggNote>,
    /// Name of the lane being drawn, for the aggregation notes.
    lane: String,
    lane_notes: Vec<String>,
}

/// The timeline over `[t0, t1]` (scenario ms) and the notes of what it binned.
pub(crate) fn timeline(model: &Model, t0: i64, t1: i64, id: &str) -> (String, Vec<AggNote>) {
    let mut c = Canvas {
        v: View {
            model,
            t0,
            t1: t1.max(t0.saturating_add(1)),
        },
        bg: String::new(),
        out: String::new(),
        notes: Vec::new(),
        lane: String::new(),
        lane_notes: Vec::new(),
    };
    let mut y = AXIS_H + 4.0;
    let mut lane_i = 0;
    for fault in model.faults.iter() {
        y += c.fault_lane(fault, y, lane_i);
        lane_i += 1;
    }
    y += c.claim_lane(y, lane_i);
    lane_i += 1;
    for (i, lane) in model.boxes.iter().enumerate() {
        y += c.box_lane(i, lane, y, lane_i);
        lane_i += 1;
    }
    for lane in model.others.iter() {
        y += c.event_lane(lane, y, lane_i);
        lane_i += 1;
    }
    for lane in &model.shards {
        y += c.shard_lane(lane, y, lane_i);
        lane_i += 1;
    }
    y += c.verdict_lane(y, lane_i);
    let height = y + AXIS_H + 4.0;

    let mut svg = String::with_capacity(c.out.len() + c.bg.len() + 8192);
    let _ = write!(
        svg,
        "<svg class=\"timeline\" id=\"{id}\" viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"100%\" \
         xmlns=\"http://www.w3.org/2000/svg\" font-family=\"system-ui, sans-serif\" font-size=\"11\">\
"
    );
    svg.push_str(&c.bg);
    c.fault_shading(&mut svg, AXIS_H, y);
    c.grid(&mut svg, AXIS_H, y);
    svg.push_str(&c.out);
    c.lost_lines(&mut svg, AXIS_H, y);
    c.axis(&mut svg, AXIS_H - 6.0, true);
    c.axis(&mut svg, y + 14.0, false);
    svg.push_str("</svg>");
    (svg, c.notes)
}

/// A tick step giving at most about a dozen labels, for any span.
fn tick_step_ms(span_ms: i64) -> i64 {
    const STEPS: [i64; 20] = [
        100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
    ];
    if let Some(step) = STEPS.into_iter().find(|s| span_ms / s <= 12) {
        return step;
    }
    // Whole days, 1-2-5 times a power of ten.
    let mut day_steps = 1i64;
    loop {
        for m in [1, 2, 5] {
            let step = (86_400_000i64).saturating_mul(day_steps).saturating_mul(m);
            if span_ms / step <= 12 || step == i64::MAX {
                return step;
            }
        }
        day_steps = day_steps.saturating_mul(10);
    }
}

impl View<'_, '_> {
    fn x(&self, t: i64) -> f64 {
        let t = t.clamp(self.t0, self.t1);
        LABEL_W + (t as f64 - self.t0 as f64) / (self.t1 as f64 - self.t0 as f64) * PLOT_W
    }

    fn overlaps(&self, start: i64, end: i64) -> bool {
        end >= self.t0 && start <= self.t1
    }

    fn bins(&self) -> usize {
        (PLOT_W / BIN_PX).ceil() as usize
    }

    fn bin_of(&self, t: i64) -> usize {
        (((self.x(t) - LABEL_W) / BIN_PX) as usize).min(self.bins() - 1)
    }

    fn bin_time(&self, bin: usize) -> i64 {
        let d = (bin as f64 * BIN_PX / PLOT_W) * (self.t1 as f64 - self.t0 as f64);
        self.t0.saturating_add(d as i64)
    }

    fn grid(&self) -> &Grid {
        &self.model.digest.grid
    }

    fn box_class(&self, name: &str) -> String {
        match self.model.boxes.iter().position(|b| b.name == name) {
            Some(i) => format!("b{}", i % BOX_COLOURS),
            None => "bx".into(),
        }
    }

    /// A hover title for a history event or pair: who, what, when, with what, and the answer.
    fn op_title(&self, src: u64, other: Option<u64>) -> String {
        let (first, second) = match other {
            Some(o) if o < src => (o, Some(src)),
            Some(o) => (src, Some(o)),
            None => (src, None),
        };
        let Some(a) = self.model.event(first) else {
            return "(this event could not be read back from the history)".into();
        };
        let ta = self.model.at_run(a.time_ns);
        let mut text = format!(
            "{} {} {}",
            truncate_chars(a.process.clone(), 80),
            truncate_chars(a.f.clone(), 80),
            json_line(&a.value, 240)
        );
        match second.and_then(|b| self.model.event(b)) {
            Some(ev) => {
                let tb = self.model.at_run(ev.time_ns);
                let _ = write!(
                    text,
                    "\n{} → {} ({})\n{:?}: {}",
                    time(ta),
                    time(tb),
                    duration(tb - ta),
                    ev.kind,
                    json_line(&ev.value, 240)
                );
            }
            None => {
                let _ = write!(text, "\n{:?} at {}", a.kind, time(ta));
            }
        }
        text
    }
}

impl Canvas<'_, '_> {
    fn axis(&self, svg: &mut String, y: f64, top: bool) {
        let step = tick_step_ms(self.v.t1.saturating_sub(self.v.t0));
        let first = self.v.t0.div_euclid(step) * step
            + if self.v.t0.rem_euclid(step) == 0 {
                0
            } else {
                step
            };
        let mut t = first;
        let _ = write!(svg, "<g class=\"axis\">");
        while t <= self.v.t1 {
            let x = self.v.x(t);
            let label = if step >= 1000 { time_whole(t) } else { time(t) };
            let tick = if top { y + 2.0 } else { y - 12.0 };
            let _ = write!(
                svg,
                "<line x1=\"{x:.1}\" y1=\"{tick:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\">{label}</text>",
                tick + 4.0
            );
            match t.checked_add(step) {
                Some(next) => t = next,
                None => break,
            }
        }
        svg.push_str("</g>");
    }

    fn grid(&self, svg: &mut String, top: f64, bottom: f64) {
        let step = tick_step_ms(self.v.t1.saturating_sub(self.v.t0));
        let mut t = self.v.t0.div_euclid(step) * step;
        let _ = write!(svg, "<g class=\"grid\">");
        while t <= self.v.t1 {
            if t >= self.v.t0 {
                let x = self.v.x(t);
                let _ = write!(
                    svg,
                    "<line x1=\"{x:.1}\" y1=\"{top:.0}\" x2=\"{x:.1}\" y2=\"{bottom:.0}\"/>"
                );
            }
            match t.checked_add(step) {
                Some(next) => t = next,
                None => break,
            }
        }
        svg.push_str("</g>");
    }

    /// Fault windows as a faint band across every lane, so a box's behaviour
    /// lines up with the fault that caused it. Skipped when the windows are so
    /// many that they would paint the whole run (the fault lanes still show them).
    fn fault_shading(&self, svg: &mut String, top: f64, bottom: f64) {
        let windows: Vec<_> = self
            .v
            .model
            .faults
            .iter()
            .flat_map(|l| &l.windows.exact)
            .filter(|w| self.v.overlaps(w.start, w.end))
            .collect();
        let binned = self
            .v
            .model
            .faults
            .iter()
            .any(|l| !l.windows.exact_in(self.v.grid(), self.v.t0, self.v.t1));
        if windows.len() > 40 || binned {
            return;
        }
        for w in windows {
            let (x0, x1) = (self.v.x(w.start), self.v.x(w.end));
            let _ = write!(
                svg,
                "<rect class=\"faultbg\" x=\"{x0:.1}\" y=\"{top:.0}\" width=\"{:.1}\" height=\"{:.0}\"/>",
                (x1 - x0).max(1.0),
                bottom - top
            );
        }
    }

    fn lost_lines(&self, svg: &mut String, top: f64, bottom: f64) {
        for mark in &self.v.model.lost {
            let Some(t) = mark.t.filter(|&t| t >= self.v.t0 && t <= self.v.t1) else {
                continue;
            };
            let x = self.v.x(t);
            let mut names = mark
                .turbines
                .iter()
                .take(3)
                .map(|s| esc(s).into_owned())
                .collect::<Vec<_>>()
                .join(", ");
            if mark.turbines.len() > 3 {
                let _ = write!(names, " +{} more", mark.turbines.len() - 3);
            }
            if names.is_empty() {
                names = "rows".into();
            }
            let anchor = if x > LABEL_W + PLOT_W * 0.8 {
                "end"
            } else {
                "start"
            };
            let dx = if anchor == "end" { -4.0 } else { 4.0 };
            let _ = write!(
                svg,
                "<g class=\"lost\"><title>lost at {}: {}</title><line x1=\"{x:.1}\" y1=\"{top:.0}\" x2=\"{x:.1}\" y2=\"{bottom:.0}\"/>\
                 <text x=\"{:.1}\" y=\"{:.0}\" text-anchor=\"{anchor}\">✖ {names} lost</text></g>",
                time(t),
                esc(&mark.summary),
                x + dx,
                top + 12.0
            );
        }
    }

    fn frame(&mut self, y: f64, h: f64, lane_i: usize, label: &str, sub: &str) {
        // A mover under test names itself: a name is cut, never allowed to swamp the page.
        let label = truncate_chars(label.to_string(), 60);
        let label = label.as_str();
        let class = if lane_i % 2 == 0 {
            "lane even"
        } else {
            "lane odd"
        };
        let _ = write!(
            self.bg,
            "<rect class=\"{class}\" x=\"0\" y=\"{y:.1}\" width=\"{WIDTH}\" height=\"{h:.1}\"/>"
        );
        let _ = write!(
            self.out,
            "<text class=\"lanelabel\" x=\"8\" y=\"{:.1}\">{}</text>",
            y + h / 2.0 - if sub.is_empty() { -4.0 } else { 2.0 },
            esc(label)
        );
        if !sub.is_empty() {
            let _ = write!(
                self.out,
                "<text class=\"lanesub\" x=\"8\" y=\"{:.1}\">{}</text>",
                y + h / 2.0 + 11.0,
                esc(sub)
            );
        }
        self.lane = label.to_string();
        self.lane_notes.clear();
    }

    /// Writes the lane's aggregation notes at its right end, over the plot.
    fn finish_lane(&mut self, y: f64) {
        if self.lane_notes.is_empty() {
            return;
        }
        let text = format!("aggregated: {}", self.lane_notes.join("; "));
        let _ = write!(
            self.out,
            "<text class=\"aggnote\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LABEL_W + PLOT_W - 2.0,
            y + 9.0,
            esc(&text)
        );
    }

    fn note(&mut self, what: &str, events: usize, bins: usize, wide: Option<i64>) {
        let what = match wide {
            Some(ms) => format!(
                "{what} (bins of {}: the run's finest for this lane)",
                duration(ms)
            ),
            None => what.to_string(),
        };
        self.lane_notes
            .push(format!("{events} {what} in {bins} bins"));
        self.notes.push(AggNote {
            lane: self.lane.clone(),
            what,
            events,
            bins,
        });
    }

    /// The fine bins' width when it is wider than a display bin's (a close-up of a long run).
    fn wide_bins(&self) -> Option<i64> {
        let grid = self.v.grid();
        let fine_w = (grid.start(1) - grid.start(0)).max(1);
        let display_w = (self.v.t1 - self.v.t0) as f64 / self.v.bins() as f64;
        (fine_w as f64 > display_w).then_some(fine_w)
    }

    /// Point marks in the row `[y, y + h]`: one by one, or binned into a density.
    #[allow(clippy::too_many_arguments)]
    fn points(
        &mut self,
        pts: &Points,
        y: f64,
        h: f64,
        shape: Shape,
        class: &str,
        what: &str,
        title: &dyn Fn(&Point) -> String,
    ) {
        let exact = pts.exact_in(self.v.grid(), self.v.t0, self.v.t1);
        let wide = if exact { None } else { self.wide_bins() };
        let bars = match (&pts.fine, exact) {
            (Some(fine), false) => self.fine_bars(fine),
            _ => {
                let exact = &pts.exact;
                let lo = exact.partition_point(|p| p.t < self.v.t0);
                let hi = exact.partition_point(|p| p.t <= self.v.t1);
                let exact = &exact[lo..hi.max(lo)];
                if exact.is_empty() {
                    return;
                }
                if exact.len() <= MAX_MARKS {
                    for p in exact {
                        let x = self.v.x(p.t);
                        self.shape(shape, x, y, h, class, &title(p));
                    }
                    return;
                }
                let mut counts = vec![0u64; self.v.bins()];
                for p in exact {
                    counts[self.v.bin_of(p.t)] += 1;
                }
                self.display_bars(&counts)
            }
        };
        let events: u64 = bars.iter().map(|b| b.n).sum();
        if events == 0 {
            return;
        }
        let max = bars.iter().map(|b| b.n).max().unwrap_or(1) as f64;
        let _ = write!(self.out, "<g class=\"bin {class}\">");
        for bar in &bars {
            // Square root: one event in a bin stays visible next to thousands.
            let height = (h * (bar.n as f64 / max).sqrt()).max(2.0);
            let _ = write!(
                self.out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{}\" height=\"{height:.1}\"><title>{} {what}, {}–{}</title></rect>",
                bar.x0,
                y + h - height,
                width(bar.w),
                bar.n,
                time(bar.ta),
                time(bar.tb)
            );
        }
        self.out.push_str("</g>");
        self.note(what, events as usize, bars.len(), wide);
    }

    /// Bars of [`BIN_PX`] for the non-empty display bins.
    fn display_bars(&self, counts: &[u64]) -> Vec<Bar> {
        counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(bin, &n)| Bar {
                x0: LABEL_W + bin as f64 * BIN_PX,
                w: BIN_PX,
                n,
                ta: self.v.bin_time(bin),
                tb: self.v.bin_time(bin + 1),
            })
            .collect()
    }

    /// The fine bins (over the run's span) that fall in view, as display
    /// bins; when a fine bin is wider than a display bin (a close-up of a long
    /// run), each is drawn at its own width.
    fn fine_bars(&self, fine: &[u32]) -> Vec<Bar> {
        let grid = *self.v.grid();
        let (f_lo, f_hi) = (grid.bin(self.v.t0), grid.bin(self.v.t1));
        let fine_w = (grid.start(1) - grid.start(0)).max(1);
        let display_w = (self.v.t1 - self.v.t0) as f64 / self.v.bins() as f64;
        if fine_w as f64 <= display_w {
            let mut counts = vec![0u64; self.v.bins()];
            // Each fine bin in view goes to the display bin of its middle (one cut
            // by the view's edge, to the edge's bin): none is lost at an edge.
            for f in f_lo..=f_hi {
                if fine[f] > 0 {
                    let mid = (grid.start(f) + fine_w / 2).clamp(self.v.t0, self.v.t1);
                    counts[self.v.bin_of(mid)] += fine[f] as u64;
                }
            }
            return self.display_bars(&counts);
        }
        (f_lo..=f_hi)
            .filter(|&f| fine[f] > 0)
            .map(|f| {
                let (ta, tb) = (
                    grid.start(f).max(self.v.t0),
                    grid.start(f + 1).min(self.v.t1),
                );
                let (x0, x1) = (self.v.x(ta), self.v.x(tb));
                Bar {
                    x0,
                    w: (x1 - x0).max(1.0),
                    n: fine[f] as u64,
                    ta,
                    tb,
                }
            })
            .collect()
    }

    fn shape(&mut self, shape: Shape, x: f64, y: f64, h: f64, class: &str, title: &str) {
        let title = esc(title);
        let mid = y + h / 2.0;
        let _ = match shape {
            Shape::Tri => {
                let s = (h * 0.45).min(6.0);
                write!(
                    self.out,
                    "<path class=\"{class}\" d=\"M{:.1} {:.1}h{:.1}l{:.1} {:.1}z\"><title>{title}</title></path>",
                    x - s,
                    mid - s,
                    2.0 * s,
                    -s,
                    2.0 * s
                )
            }
            Shape::BigTri => {
                let s = (h * 0.6).min(8.0);
                write!(
                    self.out,
                    "<path class=\"{class}\" d=\"M{:.1} {:.1}h{:.1}l{:.1} {:.1}z\"><title>{title}</title></path>",
                    x - s,
                    y,
                    2.0 * s,
                    -s,
                    h
                )
            }
            Shape::Diamond => {
                let s = (h * 0.5).min(6.0);
                write!(
                    self.out,
                    "<path class=\"{class}\" d=\"M{x:.1} {:.1}l{s:.1} {s:.1}l{:.1} {s:.1}l{:.1} {:.1}z\"><title>{title}</title></path>",
                    mid - s,
                    -s,
                    -s,
                    -s
                )
            }
            Shape::Cross => {
                let s = (h * 0.35).min(4.0);
                write!(
                    self.out,
                    "<path class=\"{class}\" d=\"M{:.1} {:.1}l{:.1} {:.1}m0 {:.1}l{:.1} {:.1}\"><title>{title}</title></path>",
                    x - s,
                    mid - s,
                    2.0 * s,
                    2.0 * s,
                    -2.0 * s,
                    -2.0 * s,
                    2.0 * s
                )
            }
            Shape::Tick => write!(
                self.out,
                "<line class=\"{class}\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"><title>{title}</title></line>",
                y + h
            ),
            Shape::Dot => write!(
                self.out,
                "<circle class=\"{class}\" cx=\"{x:.1}\" cy=\"{mid:.1}\" r=\"{:.1}\"><title>{title}</title></circle>",
                (h * 0.3).min(4.0)
            ),
        };
    }

    /// Intervals in the row `[y, y + h]`: one bar each, or binned into
    /// coverage (how many were in progress) when there are too many.
    #[allow(clippy::too_many_arguments)]
    fn spans<T>(
        &mut self,
        items: SpanSrc<'_, T>,
        bounds: impl Fn(&T) -> (i64, i64),
        y: f64,
        h: f64,
        what: &str,
        class: impl Fn(&T) -> String,
        title: impl Fn(&T) -> String,
        label: impl Fn(&T) -> Option<String>,
    ) {
        // (bars as (first bin, bins, in progress, started), spans in view, class)
        let fine = items.fine.filter(|_| !items.exact_in);
        let wide = fine.and_then(|_| self.wide_bins());
        let (cells, in_view, group_class) = match fine {
            Some(fine) => {
                let (cells, n) = self.fine_coverage(fine);
                (cells, n, items.fine_class.to_string())
            }
            None => {
                let in_view: Vec<&T> = items
                    .exact
                    .iter()
                    .filter(|i| {
                        let (s, e) = bounds(i);
                        self.v.overlaps(s, e)
                    })
                    .collect();
                if in_view.is_empty() {
                    return;
                }
                if in_view.len() <= MAX_MARKS {
                    for item in in_view {
                        let (s, e) = bounds(item);
                        let (x0, x1) = (self.v.x(s), self.v.x(e));
                        let w = (x1 - x0).max(1.5);
                        let _ = write!(
                            self.out,
                            "<g class=\"sp {}\"><title>{}</title><rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\"/>",
                            class(item),
                            esc(&title(item))
                        );
                        if let Some(text) = label(item) {
                            // About 6 px a character at 10 px: only label what the label fits in.
                            if w > 6.0 * text.chars().count() as f64 + 6.0 {
                                let _ = write!(
                                    self.out,
                                    "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                                    x0 + 3.0,
                                    y + h / 2.0 + 3.5,
                                    esc(&text)
                                );
                            }
                        }
                        self.out.push_str("</g>");
                    }
                    return;
                }
                let n = self.v.bins();
                let mut diff = vec![0i64; n + 1];
                let mut starts = vec![0u64; n];
                for item in &in_view {
                    let (s, e) = bounds(item);
                    let (b0, b1) = (self.v.bin_of(s), self.v.bin_of(e));
                    diff[b0] += 1;
                    diff[b1 + 1] -= 1;
                    if s >= self.v.t0 {
                        starts[b0] += 1;
                    }
                }
                let mut cells = Vec::new();
                let mut running = 0i64;
                for (bin, d) in diff[..n].iter().enumerate() {
                    running += d;
                    cells.push(Cell {
                        x0: LABEL_W + bin as f64 * BIN_PX,
                        w: BIN_PX,
                        active: running,
                        started: starts[bin],
                        ta: self.v.bin_time(bin),
                        tb: self.v.bin_time(bin + 1),
                    });
                }
                (cells, in_view.len() as u64, class(in_view[0]))
            }
        };
        if in_view == 0 {
            return;
        }
        let max = cells.iter().map(|c| c.active).max().unwrap_or(1).max(1) as f64;
        let _ = write!(self.out, "<g class=\"bin {group_class}\">");
        let mut drawn = 0;
        let mut i = 0;
        while i < cells.len() {
            let c = &cells[i];
            if c.active == 0 && c.started == 0 {
                i += 1;
                continue;
            }
            // Merge neighbouring cells that say the same thing, to save bytes.
            let mut end = i + 1;
            while end < cells.len()
                && cells[end].active == c.active
                && cells[end].started == c.started
                && (cells[end].x0 - (cells[end - 1].x0 + cells[end - 1].w)).abs() < 0.01
            {
                end += 1;
            }
            let opacity = 0.25 + 0.75 * (c.active as f64 / max);
            let started: u64 = cells[i..end].iter().map(|c| c.started).sum();
            let last = &cells[end - 1];
            let _ = write!(
                self.out,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill-opacity=\"{opacity:.2}\"><title>{} {what} in progress, {started} started, {}–{}</title></rect>",
                c.x0,
                last.x0 + last.w - c.x0,
                c.active,
                time(c.ta),
                time(last.tb)
            );
            drawn += end - i;
            i = end;
        }
        self.out.push_str("</g>");
        self.note(what, in_view as usize, drawn, wide);
    }

    /// Coverage cells from fine bins in view (display bins, or fine bins
    /// when those are wider), and how many intervals overlap the view.
    fn fine_coverage(&self, cov: &Coverage) -> (Vec<Cell>, u64) {
        let grid = *self.v.grid();
        let active = cov.active();
        let (f_lo, f_hi) = (grid.bin(self.v.t0), grid.bin(self.v.t1));
        let in_view = active[f_lo].max(0) as u64
            + cov.starts[f_lo + 1..=f_hi]
                .iter()
                .map(|&s| s as u64)
                .sum::<u64>();
        let fine_w = (grid.start(1) - grid.start(0)).max(1);
        let display_w = (self.v.t1 - self.v.t0) as f64 / self.v.bins() as f64;
        let mut cells = Vec::new();
        if fine_w as f64 <= display_w {
            // Per display bin: what covers its first fine bin, plus what starts later in it.
            let mut bin_first: Vec<Option<usize>> = vec![None; self.v.bins()];
            let mut bin_started = vec![0u64; self.v.bins()];
            let mut bin_later = vec![0i64; self.v.bins()];
            for f in f_lo..=f_hi.min(FINE_BINS - 1) {
                let mid = (grid.start(f) + fine_w / 2).clamp(self.v.t0, self.v.t1);
                let d = self.v.bin_of(mid);
                bin_started[d] += cov.starts[f] as u64;
                match bin_first[d] {
                    None => bin_first[d] = Some(f),
                    Some(_) => bin_later[d] += cov.starts[f] as i64,
                }
            }
            for d in 0..self.v.bins() {
                let Some(f) = bin_first[d] else { continue };
                cells.push(Cell {
                    x0: LABEL_W + d as f64 * BIN_PX,
                    w: BIN_PX,
                    active: active[f] + bin_later[d],
                    started: bin_started[d],
                    ta: self.v.bin_time(d),
                    tb: self.v.bin_time(d + 1),
                });
            }
        } else {
            for f in f_lo..=f_hi {
                let (ta, tb) = (
                    grid.start(f).max(self.v.t0),
                    grid.start(f + 1).min(self.v.t1),
                );
                let (x0, x1) = (self.v.x(ta), self.v.x(tb));
                cells.push(Cell {
                    x0,
                    w: (x1 - x0).max(1.0),
                    active: active[f],
                    started: cov.starts[f] as u64,
                    ta,
                    tb,
                });
            }
        }
        (cells, in_view)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_stay_about_a_dozen() {
        assert_eq!(tick_step_ms(57 * 60_000), 300_000);
        assert_eq!(tick_step_ms(4 * 60_000), 30_000);
        assert_eq!(tick_step_ms(1000), 100);
        assert_eq!(tick_step_ms(38 * 86_400_000), 5 * 86_400_000);
        assert!(i64::MAX / tick_step_ms(i64::MAX) <= 12);
    }
}
