//! The timeline: an inline SVG with scenario time across and one lane per fault target, the claim, each box, the other processes, each shard and the verdict.
//!
//! Nothing is ever dropped to keep the page small: a kind of mark with more
//! events in view than [`MAX_MARKS`] is binned per [`BIN_PX`] pixel columns
//! and drawn as a density, and the lane and the legend say so.

use crate::digest::{Grid, Outcome, Point};
use crate::html::{duration, esc, json_line, time, time_whole, truncate_chars};
use crate::model::{str_field, Model};
use chaos_checkers::Severity;
use std::fmt::Write;

mod lanes;
mod marks;

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
    /// Span labels, drawn above every mark.
    labels: String,
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
        labels: String::new(),
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
    svg.push_str(&c.labels);
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
            // A label centred on a tick near the right edge was cut: anchored at its end there.
            let anchor = if x + 3.5 * label.len() as f64 > WIDTH {
                "end"
            } else {
                "middle"
            };
            let _ = write!(
                svg,
                "<line x1=\"{x:.1}\" y1=\"{tick:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{anchor}\">{label}</text>",
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
