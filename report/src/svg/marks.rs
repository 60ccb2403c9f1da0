//! The marks on the canvas: point marks (a shape each, or bars of a density) and
//! intervals (a bar each, or coverage), binned per display or fine bin when there
//! are more in view than [`MAX_MARKS`].

use super::{Canvas, View, BIN_PX, LABEL_W, MAX_MARKS};
use crate::digest::{Coverage, Point, Points, Spans, FINE_BINS};
use crate::html::{esc, time};
use std::fmt::Write;

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
pub(super) struct SpanSrc<'s, T> {
    exact: &'s [T],
    /// Every interval in view is in `exact`.
    exact_in: bool,
    fine: Option<&'s Coverage>,
    fine_class: &'s str,
}

impl<'s, T: crate::digest::Bounded> SpanSrc<'s, T> {
    pub(super) fn of(spans: &'s Spans<T>, v: &View, fine_class: &'s str) -> Self {
        SpanSrc {
            exact: &spans.exact,
            exact_in: spans.exact_in(v.grid(), v.t0, v.t1),
            fine: spans.fine.as_ref(),
            fine_class,
        }
    }
}

impl<'s, T> SpanSrc<'s, T> {
    pub(super) fn slice(items: &'s [T]) -> Self {
        SpanSrc {
            exact: items,
            exact_in: true,
            fine: None,
            fine_class: "",
        }
    }
}

#[derive(Clone, Copy)]
pub(super) enum Shape {
    /// A downward triangle (deletes).
    Tri,
    /// A bigger downward triangle with a bar (tidy-up deletes).
    BigTri,
    Diamond,
    Cross,
    Tick,
    Dot,
}

impl Canvas<'_, '_> {
    /// The fine bins' width when it is wider than a display bin's (a close-up of a long run).
    fn wide_bins(&self) -> Option<i64> {
        let grid = self.v.grid();
        let fine_w = (grid.start(1) - grid.start(0)).max(1);
        let display_w = (self.v.t1 - self.v.t0) as f64 / self.v.bins() as f64;
        (fine_w as f64 > display_w).then_some(fine_w)
    }

    /// Point marks in the row `[y, y + h]`: one by one, or binned into a density.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn points(
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

    pub(super) fn shape(&mut self, shape: Shape, x: f64, y: f64, h: f64, class: &str, title: &str) {
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
    pub(super) fn spans<T>(
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
        // (cells, spans in view, class)
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
                        self.span_bar(bounds(item), y, h, &class(item), &title(item), label(item));
                    }
                    return;
                }
                let cells = self.exact_coverage(in_view.iter().map(|i| bounds(i)));
                (cells, in_view.len() as u64, class(in_view[0]))
            }
        };
        if in_view == 0 {
            return;
        }
        let drawn = self.coverage(&cells, y, h, what, &group_class);
        self.note(what, in_view as usize, drawn, wide);
    }

    /// One interval `(s, e)` as a bar in the row `[y, y + h]`, labelled if the label fits.
    fn span_bar(
        &mut self,
        (s, e): (i64, i64),
        y: f64,
        h: f64,
        class: &str,
        title: &str,
        label: Option<String>,
    ) {
        let (x0, x1) = (self.v.x(s), self.v.x(e));
        let w = (x1 - x0).max(1.5);
        let _ = write!(
            self.out,
            "<g class=\"sp {}\"><title>{}</title><rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\"/>",
            class,
            esc(title)
        );
        self.out.push_str("</g>");
        if let Some(text) = label {
            // About 6 px a character at 10 px: only label what the label fits in. Labels go
            // on a layer above every mark (a failed renewal's x was drawn over "71.2 s").
            if w > 6.0 * text.chars().count() as f64 + 6.0 {
                let _ = write!(
                    self.labels,
                    "<g class=\"sp {class}\"><text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
                    x0 + 3.0,
                    y + h / 2.0 + 3.5,
                    esc(&text)
                );
            }
        }
    }

    /// Coverage cells, one per display bin, of intervals in view: how many are in
    /// progress in each bin and how many start there.
    fn exact_coverage(&self, bounds: impl Iterator<Item = (i64, i64)>) -> Vec<Cell> {
        let n = self.v.bins();
        let mut diff = vec![0i64; n + 1];
        let mut starts = vec![0u64; n];
        for (s, e) in bounds {
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
        cells
    }

    /// Coverage cells drawn in the row `[y, y + h]`, neighbours that say the same
    /// merged, as a group of `class`; returns how many cells were drawn.
    fn coverage(&mut self, cells: &[Cell], y: f64, h: f64, what: &str, class: &str) -> usize {
        let max = cells.iter().map(|c| c.active).max().unwrap_or(1).max(1) as f64;
        let _ = write!(self.out, "<g class=\"bin {class}\">");
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
        drawn
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
