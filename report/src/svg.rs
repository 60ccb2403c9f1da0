//! The timeline: an inline SVG with scenario time across and one lane per fault target, the claim, each box, the other processes, each shard and the verdict.
//!
//! Nothing is ever dropped to keep the page small: a kind of mark with more
//! events in view than [`MAX_MARKS`] is binned per [`BIN_PX`] pixel columns
//! and drawn as a density, and the lane and the legend say so.

use crate::html::{duration, esc, json_line, time, time_whole};
use crate::model::{str_field, Model, Outcome, Point};
use chaos_checkers::Severity;
use std::fmt::Write;

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
            t1: t1.max(t0 + 1),
        },
        bg: String::new(),
        out: String::new(),
        notes: Vec::new(),
        lane: String::new(),
        lane_notes: Vec::new(),
    };
    let mut y = AXIS_H + 4.0;
    let mut lane_i = 0;
    for fault in &model.faults {
        y += c.fault_lane(fault, y, lane_i);
        lane_i += 1;
    }
    y += c.claim_lane(y, lane_i);
    lane_i += 1;
    for (i, lane) in model.boxes.iter().enumerate() {
        y += c.box_lane(i, lane, y, lane_i);
        lane_i += 1;
    }
    for lane in &model.others {
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

/// A tick step giving at most about a dozen labels.
fn tick_step_ms(span_ms: i64) -> i64 {
    const STEPS: [i64; 20] = [
        100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
        600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
    ];
    STEPS
        .into_iter()
        .find(|s| span_ms / s <= 12)
        .unwrap_or(86_400_000)
}

impl View<'_, '_> {
    fn x(&self, t: i64) -> f64 {
        let t = t.clamp(self.t0, self.t1);
        LABEL_W + (t - self.t0) as f64 / (self.t1 - self.t0) as f64 * PLOT_W
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
        self.t0 + ((bin as f64 * BIN_PX / PLOT_W) * (self.t1 - self.t0) as f64) as i64
    }

    fn box_class(&self, name: &str) -> String {
        match self.model.boxes.iter().position(|b| b.name == name) {
            Some(i) => format!("b{}", i % BOX_COLOURS),
            None => "bx".into(),
        }
    }

    /// A hover title for a history event or pair: who, what, when, with what, and the answer.
    fn op_title(&self, src: usize, other: Option<usize>) -> String {
        let h = self.model.history;
        let (first, second) = match other {
            Some(o) if o < src => (o, Some(src)),
            Some(o) => (src, Some(o)),
            None => (src, None),
        };
        let a = &h[first];
        let ta = self.model.times[first];
        let mut text = format!("{} {} {}", a.process, a.f, json_line(&a.value, 240));
        match second {
            Some(b) => {
                let tb = self.model.times[b];
                let ev = &h[b];
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
        let step = tick_step_ms(self.v.t1 - self.v.t0);
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
            t += step;
        }
        svg.push_str("</g>");
    }

    fn grid(&self, svg: &mut String, top: f64, bottom: f64) {
        let step = tick_step_ms(self.v.t1 - self.v.t0);
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
            t += step;
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
            .flat_map(|l| &l.windows)
            .filter(|w| self.v.overlaps(w.start, w.end))
            .collect();
        if windows.len() > 40 {
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

    fn note(&mut self, what: &str, events: usize, bins: usize) {
        self.lane_notes
            .push(format!("{events} {what} in {bins} bins"));
        self.notes.push(AggNote {
            lane: self.lane.clone(),
            what: what.to_string(),
            events,
            bins,
        });
    }

    /// Point marks in the row `[y, y + h]`: one by one, or binned into a density.
    #[allow(clippy::too_many_arguments)]
    fn points(
        &mut self,
        pts: &[Point],
        y: f64,
        h: f64,
        shape: Shape,
        class: &str,
        what: &str,
        title: &dyn Fn(&Point) -> String,
    ) {
        let lo = pts.partition_point(|p| p.t < self.v.t0);
        let hi = pts.partition_point(|p| p.t <= self.v.t1);
        let pts = &pts[lo..hi.max(lo)];
        if pts.is_empty() {
            return;
        }
        if pts.len() <= MAX_MARKS {
            for p in pts {
                let x = self.v.x(p.t);
                self.shape(shape, x, y, h, class, &title(p));
            }
            return;
        }
        let mut counts = vec![0u32; self.v.bins()];
        for p in pts {
            counts[self.v.bin_of(p.t)] += 1;
        }
        let max = *counts.iter().max().unwrap_or(&1) as f64;
        let mut drawn = 0;
        let _ = write!(self.out, "<g class=\"bin {class}\">");
        for (bin, &n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
            drawn += 1;
            // Square root: one event in a bin stays visible next to thousands.
            let bar = (h * (n as f64 / max).sqrt()).max(2.0);
            let _ = write!(
                self.out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{BIN_PX}\" height=\"{bar:.1}\"><title>{n} {what}, {}–{}</title></rect>",
                LABEL_W + bin as f64 * BIN_PX,
                y + h - bar,
                time(self.v.bin_time(bin)),
                time(self.v.bin_time(bin + 1))
            );
        }
        self.out.push_str("</g>");
        self.note(what, pts.len(), drawn);
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
        items: &[T],
        bounds: impl Fn(&T) -> (i64, i64),
        y: f64,
        h: f64,
        what: &str,
        class: impl Fn(&T) -> String,
        title: impl Fn(&T) -> String,
        label: impl Fn(&T) -> Option<String>,
    ) {
        let in_view: Vec<&T> = items
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
        let mut starts = vec![0u32; n];
        for item in &in_view {
            let (s, e) = bounds(item);
            let (b0, b1) = (self.v.bin_of(s), self.v.bin_of(e));
            diff[b0] += 1;
            diff[b1 + 1] -= 1;
            if s >= self.v.t0 {
                starts[b0] += 1;
            }
        }
        let mut active = Vec::with_capacity(n);
        let mut running = 0i64;
        for d in &diff[..n] {
            running += d;
            active.push(running);
        }
        let max = *active.iter().max().unwrap_or(&1) as f64;
        let first_class = class(in_view[0]);
        let _ = write!(self.out, "<g class=\"bin {first_class}\">");
        let mut drawn = 0;
        let mut bin = 0;
        while bin < n {
            if active[bin] == 0 && starts[bin] == 0 {
                bin += 1;
                continue;
            }
            // Merge neighbouring bins that say the same thing, to save bytes.
            let mut end = bin + 1;
            while end < n && active[end] == active[bin] && starts[end] == starts[bin] {
                end += 1;
            }
            let opacity = 0.25 + 0.75 * (active[bin] as f64 / max);
            let started: u32 = starts[bin..end].iter().sum();
            let _ = write!(
                self.out,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill-opacity=\"{opacity:.2}\"><title>{} {what} in progress, {started} started, {}–{}</title></rect>",
                LABEL_W + bin as f64 * BIN_PX,
                (end - bin) as f64 * BIN_PX,
                active[bin],
                time(self.v.bin_time(bin)),
                time(self.v.bin_time(end))
            );
            drawn += end - bin;
            bin = end;
        }
        self.out.push_str("</g>");
        self.note(what, in_view.len(), drawn);
    }

    fn fault_lane(&mut self, lane: &crate::model::FaultLane, y: f64, lane_i: usize) -> f64 {
        let v = self.v;
        let h = 26.0;
        let sub = format!(
            "{} fault window{}",
            lane.windows.len(),
            if lane.windows.len() == 1 { "" } else { "s" }
        );
        let target = if lane.target.is_empty() {
            "(no target)"
        } else {
            &lane.target
        };
        self.frame(y, h, lane_i, &format!("fault: {target}"), &sub);
        let history = self.v.model.history;
        let times = &self.v.model.times;
        self.spans(
            &lane.windows,
            |w| (w.start, w.end),
            y + 4.0,
            h - 8.0,
            "fault windows",
            |w| {
                if w.open {
                    "fault open".into()
                } else {
                    "fault".into()
                }
            },
            |w| {
                let args = json_line(&history[w.begin_op].value, 240);
                let until = match w.end_op {
                    Some(e) => format!("{} at {}", history[e].f, time(times[e])),
                    None => "never healed before the run ended".into(),
                };
                format!(
                    "{} on {}: {}\nlanded {}, {until}\nlasted {}",
                    w.verb,
                    target,
                    args,
                    time(w.start),
                    duration(w.end - w.start)
                )
            },
            |w| Some(format!("{} {}", w.verb, duration(w.end - w.start))),
        );
        let title = |p: &Point| v.op_title(p.src, p.other);
        self.points(
            &lane.instants,
            y + 4.0,
            h - 8.0,
            Shape::Diamond,
            "finst",
            "nemesis events",
            &title,
        );
        self.finish_lane(y);
        h
    }

    fn claim_lane(&mut self, y: f64, lane_i: usize) -> f64 {
        let h = 34.0;
        let model = self.v.model;
        let Some(claim) = &model.claim else {
            self.frame(y, h, lane_i, "claim (routing db)", "no audit: not known");
            return h;
        };
        let grants = claim
            .segs
            .iter()
            .map(|s| s.token)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let vacant: i64 = claim.vacancies_between_grants().map(|(a, b)| b - a).sum();
        let sub = format!(
            "{grants} grant{}, vacant {} between",
            if grants == 1 { "" } else { "s" },
            duration(vacant)
        );
        self.frame(y, h, lane_i, "claim (routing db)", &sub);
        if claim.changes == 0 {
            let _ = write!(
                self.out,
                "<text class=\"lanesub\" x=\"{:.1}\" y=\"{:.1}\">no claim changes recorded for this job</text>",
                LABEL_W + 6.0,
                y + h / 2.0 + 4.0
            );
            return h;
        }
        let (ry, rh) = (y + 6.0, h - 12.0);
        self.spans(
            &claim.vacancies,
            |v| (v.0, v.1),
            ry,
            rh,
            "vacancies",
            |_| "vac".into(),
            |v| {
                format!(
                    "vacancy: no valid claim\n{} → {} ({})",
                    time(v.0),
                    time(v.1),
                    duration(v.1 - v.0)
                )
            },
            |v| Some(format!("vacant {}", duration(v.1 - v.0))),
        );
        let classes: Vec<String> = claim
            .segs
            .iter()
            .map(|s| format!("claim {}", self.v.box_class(&s.holder)))
            .collect();
        let segs: Vec<(usize, &crate::model::ClaimSeg)> = claim.segs.iter().enumerate().collect();
        self.spans(
            &segs,
            |(_, s)| (s.start, s.end),
            ry,
            rh,
            "claim segments",
            |(i, _)| classes[*i].clone(),
            |(_, s)| {
                let how = if s.lapsed { format!("expired at {} (not renewed)", time(s.end)) } else { format!("valid until {}", time(s.end)) };
                format!(
                    "routing db: {} holds token {}\nfrom {} ({} change{}: grant and renewals)\n{how}",
                    s.holder,
                    s.token,
                    time(s.start),
                    s.changes,
                    if s.changes == 1 { "" } else { "s" }
                )
            },
            |(_, s)| Some(format!("{} #{}", s.holder, s.token)),
        );
        self.finish_lane(y);
        h
    }

    fn box_lane(
        &mut self,
        index: usize,
        lane: &crate::model::BoxLane,
        y: f64,
        lane_i: usize,
    ) -> f64 {
        let v = self.v;
        let h = 66.0;
        let model = self.v.model;
        let ok_copies = lane
            .copies
            .iter()
            .filter(|c| c.outcome == Outcome::Ok)
            .count();
        let sub = format!(
            "{} cop{} ok, {} delete{}",
            ok_copies,
            if ok_copies == 1 { "y" } else { "ies" },
            lane.source_deletes.len() + lane.tidy_deletes.len(),
            if lane.source_deletes.len() + lane.tidy_deletes.len() == 1 {
                ""
            } else {
                "s"
            }
        );
        self.frame(y, h, lane_i, lane.name, &sub);
        let colour = format!("b{}", index % BOX_COLOURS);
        let name = lane.name;

        // Row 1: belief, with what the routing db thought of it.
        let (by, bh) = (y + 5.0, 13.0);
        self.points(
            &lane.polls,
            by + 3.0,
            bh - 6.0,
            Shape::Tick,
            "poll",
            "polls (acquire not won)",
            &|p| v.op_title(p.src, p.other),
        );
        self.spans(
            &lane.beliefs,
            |b| (b.start, b.end),
            by,
            bh,
            "beliefs",
            |_| format!("belief {colour}"),
            |b| {
                format!(
                    "{name} believed it held the claim{}\n{} → {} ({})\nended: {}",
                    b.token.map(|t| format!(" (token {t})")).unwrap_or_default(),
                    time(b.start),
                    time(b.end),
                    duration(b.end - b.start),
                    b.ended_by
                )
            },
            |b| {
                Some(
                    b.token
                        .map(|t| format!("holds #{t}"))
                        .unwrap_or_else(|| "holds".into()),
                )
            },
        );
        self.spans(
            &lane.stale,
            |s| (s.start, s.end),
            by,
            bh,
            "stale beliefs",
            |_| "stale".into(),
            |s| {
                format!(
                    "{name} still believed it held the claim{} but the routing db did not back it\n{} → {} ({})",
                    s.token.map(|t| format!(" (token {t})")).unwrap_or_default(),
                    time(s.start),
                    time(s.end),
                    duration(s.end - s.start)
                )
            },
            |s| Some(format!("no valid lease {}", duration(s.end - s.start))),
        );
        let title = |p: &Point| v.op_title(p.src, p.other);
        self.points(
            &lane.renew_ok,
            by + bh - 5.0,
            5.0,
            Shape::Tick,
            "renew",
            "renewals",
            &title,
        );
        self.points(
            &lane.renew_fail,
            by,
            bh,
            Shape::Cross,
            "renewfail",
            "failed renewals",
            &title,
        );
        self.points(
            &lane.acquired,
            by,
            bh,
            Shape::Dot,
            "acq",
            "acquires",
            &title,
        );

        // Row 2: copies, one bar per turbine.
        let (cy, ch) = (y + 22.0, 20.0);
        let lost = &model.lost_turbines;
        let history = model.history;
        let turbine = |s: &crate::model::Span| -> Option<&str> {
            s.invoke
                .and_then(|i| str_field(&history[i].value, "turbine"))
        };
        self.spans(
            &lane.copies,
            |s| (s.start, s.end),
            cy,
            ch,
            "copies",
            |s| {
                let outcome = match s.outcome {
                    Outcome::Ok => colour.as_str(),
                    Outcome::Fail => "fail",
                    Outcome::Refused => "refusedcopy",
                    Outcome::Info => "info",
                    Outcome::Open => "open",
                };
                let lost = if turbine(s).is_some_and(|t| lost.contains(t)) {
                    " lostcopy"
                } else {
                    ""
                };
                format!("copy {outcome}{lost}")
            },
            |s| {
                let mut text = v.op_title(
                    s.invoke.or(s.completion).unwrap_or(0),
                    s.invoke.and(s.completion),
                );
                if s.outcome == Outcome::Open {
                    text.push_str("\nno completion before the box's last event");
                }
                if turbine(s).is_some_and(|t| lost.contains(t)) {
                    text.push_str("\nthis turbine's rows were lost");
                }
                text
            },
            |s| turbine(s).map(str::to_string),
        );

        // Row 3: what the box did to the shards.
        let (my, mh) = (y + 46.0, 16.0);
        self.spans(
            &lane.skips,
            |s| (s.start, s.end),
            my + 5.0,
            6.0,
            "skip runs",
            |_| "skip".into(),
            |s| {
                let first = turbine_name(history, s.first);
                let last = turbine_name(history, s.last);
                format!(
                    "{} skip{} (source already empty): {first} … {last}\n{} → {} ({})",
                    s.n,
                    if s.n == 1 { "" } else { "s" },
                    time(s.start),
                    time(s.end),
                    duration(s.end - s.start)
                )
            },
            |s| Some(format!("{} skipped", s.n)),
        );
        // A run of skips is usually too short to hold its label: write it beside the bar.
        let skips_in_view: Vec<_> = lane
            .skips
            .iter()
            .filter(|s| v.overlaps(s.start, s.end) && s.n >= 5)
            .collect();
        if skips_in_view.len() <= 20 {
            for s in skips_in_view {
                let (x0, x1) = (v.x(s.start), v.x(s.end));
                if x1 - x0 < 6.0 * 12.0 {
                    let _ = write!(
                        self.out,
                        "<text class=\"skiplabel\" x=\"{:.1}\" y=\"{:.1}\">{} skipped</text>",
                        x1 + 3.0,
                        my + 11.0,
                        s.n
                    );
                }
            }
        }
        self.points(
            &lane.source_deletes,
            my,
            mh,
            Shape::Tri,
            "del",
            "source deletes",
            &title,
        );
        self.points(
            &lane.tidy_deletes,
            my,
            mh,
            Shape::BigTri,
            "tidy",
            "tidy-up deletes",
            &|p| format!("TIDY-UP DELETE\n{}", v.op_title(p.src, p.other)),
        );
        self.points(
            &lane.refused,
            my,
            mh,
            Shape::Diamond,
            "refused",
            "refused writes",
            &|p| format!("REFUSED by fencing\n{}", v.op_title(p.src, p.other)),
        );
        self.points(
            &lane.failed,
            my,
            mh,
            Shape::Cross,
            "failed",
            "failed operations",
            &title,
        );
        // Name the few tidy-ups: they are the events the whole report is about.
        if lane.tidy_deletes.len() <= 5 {
            for p in lane
                .tidy_deletes
                .iter()
                .filter(|p| p.t >= self.v.t0 && p.t <= self.v.t1)
            {
                let what = model.turbine_of(p).unwrap_or("?");
                let _ = write!(
                    self.out,
                    "<text class=\"tidylabel\" x=\"{:.1}\" y=\"{:.1}\">tidy-up {}</text>",
                    self.v.x(p.t) + 9.0,
                    my + mh - 3.0,
                    esc(what)
                );
            }
        }
        self.finish_lane(y);
        h
    }

    fn event_lane(&mut self, lane: &crate::model::EventLane, y: f64, lane_i: usize) -> f64 {
        let v = self.v;
        let h = 30.0;
        let sub = format!(
            "{} ok, {} fail, {} unknown",
            lane.ok.len(),
            lane.fail.len(),
            lane.info.len()
        );
        self.frame(y, h, lane_i, lane.name, &sub);
        let title = |p: &Point| v.op_title(p.src, p.other);
        self.points(&lane.ok, y + 4.0, 10.0, Shape::Tick, "evok", "ok", &title);
        self.points(
            &lane.fail,
            y + 16.0,
            10.0,
            Shape::Cross,
            "failed",
            "fails",
            &title,
        );
        self.points(
            &lane.info,
            y + 16.0,
            10.0,
            Shape::Dot,
            "info",
            "unknown (info)",
            &title,
        );
        self.finish_lane(y);
        h
    }

    fn shard_lane(&mut self, lane: &crate::model::ShardLane, y: f64, lane_i: usize) -> f64 {
        let h = 30.0;
        let sub = format!("audit; {} ingest writes not drawn", lane.ingest_writes);
        self.frame(y, h, lane_i, lane.name, &sub);
        let Some(audit) = self.v.model.audit else {
            return h;
        };
        let title = |p: &Point| {
            let w = &audit.shard_writes[p.src];
            format!(
                "{} {:?} by {}{}: {} rows of {}\ncommitted {} (xid {})",
                w.shard,
                w.op,
                w.app,
                w.token.map(|t| format!(" token {t}")).unwrap_or_default(),
                w.rows,
                w.turbine.as_deref().unwrap_or("-"),
                time(self.v.model.at_unix(w.commit_unix_ns)),
                w.xid
            )
        };
        self.points(
            &lane.mover_inserts,
            y + 4.0,
            h - 8.0,
            Shape::Tick,
            "ins",
            "mover inserts",
            &title,
        );
        self.points(
            &lane.fences,
            y + 4.0,
            h - 8.0,
            Shape::Diamond,
            "fence",
            "fence updates",
            &title,
        );
        self.points(
            &lane.deletes,
            y + 4.0,
            h - 8.0,
            Shape::Tri,
            "del",
            "deletes",
            &title,
        );
        self.finish_lane(y);
        h
    }

    fn verdict_lane(&mut self, y: f64, lane_i: usize) -> f64 {
        let h = 26.0;
        let n = self.v.model.verdict.anomalies.len();
        self.frame(
            y,
            h,
            lane_i,
            "verdict",
            &format!("{n} anomal{}", if n == 1 { "y" } else { "ies" }),
        );
        let verdict = self.v.model.verdict;
        let v = self.v;
        for mark in v
            .model
            .anomalies
            .iter()
            .filter(|m| m.t >= v.t0 && m.t <= v.t1)
        {
            let a = &verdict.anomalies[mark.index];
            let class = match mark.severity {
                Severity::Error => "sev-error",
                Severity::Cleanup => "sev-cleanup",
                Severity::Info => "sev-info",
            };
            let title = format!(
                "{} ({:?}) × {} first at {}\n{}",
                serde_json::to_value(a.class)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default(),
                a.severity,
                a.count,
                time(mark.t),
                a.summary
            );
            let x = self.v.x(mark.t);
            self.shape(Shape::Diamond, x, y + 4.0, h - 8.0, class, &title);
        }
        h
    }
}

fn turbine_name(history: &[chaos_history::Op], i: usize) -> String {
    str_field(&history[i].value, "turbine")
        .unwrap_or("?")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_stay_about_a_dozen() {
        assert_eq!(tick_step_ms(57 * 60_000), 300_000);
        assert_eq!(tick_step_ms(4 * 60_000), 30_000);
        assert_eq!(tick_step_ms(1000), 100);
    }
}
