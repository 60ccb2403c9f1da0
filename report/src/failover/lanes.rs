//! The failover timeline as inline SVG: faults, a lane for each primary (its role, whether the app could reach it, the orders it committed, the lost ones), the watcher's checks and steps, the app's acknowledgements and the stretches with no primary; the two-primaries window across both server lanes.

use super::Input;
use crate::html::{esc, time, time_whole};
use chaos_checkers::failover::Role;
use chaos_checkers::failover::Timeline;
use chaos_history::failover_names as names;
use chaos_history::OpType;
use std::collections::BTreeSet;
use std::fmt::Write;

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 90.0;
const LANE: f64 = 34.0;

/// Scenario ms to x.
struct Axis {
    t0: i64,
    t1: i64,
}

impl Axis {
    fn x(&self, ms: i64) -> f64 {
        let span = (self.t1 - self.t0).max(1) as f64;
        LEFT + (ms.clamp(self.t0, self.t1) - self.t0) as f64 / span * (WIDTH - LEFT - 10.0)
    }
}

/// The whole SVG.
pub fn svg(input: &Input, timeline: &Timeline) -> String {
    let m = input.meta;
    let axis = Axis {
        t0: m.clock.start_scenario_ms,
        t1: m.end_scenario_ms.max(m.clock.start_scenario_ms + 1),
    };
    let lanes = [
        "faults",
        names::PRIMARY,
        names::REPLICA,
        names::WATCHER,
        names::APP,
    ];
    let height = 30.0 + LANE * lanes.len() as f64 + 20.0;
    let mut s = format!(
        "<svg class=\"fo\" viewBox=\"0 0 {WIDTH} {height}\" width=\"100%\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    for (i, name) in lanes.iter().enumerate() {
        let y = 20.0 + LANE * i as f64;
        let _ = write!(s, "<text x=\"4\" y=\"{:.0}\">{name}</text><line x1=\"{LEFT}\" x2=\"{WIDTH}\" y1=\"{y:.0}\" y2=\"{y:.0}\" stroke=\"#ddd\"/>", y + LANE / 2.0 + 4.0);
    }
    axis_ticks(&mut s, &axis, height - 6.0);
    faults(&mut s, input, &axis, 20.0);
    for (i, node) in [names::PRIMARY, names::REPLICA].iter().enumerate() {
        server_lane(
            &mut s,
            input,
            timeline,
            &axis,
            node,
            20.0 + LANE * (i + 1) as f64,
        );
    }
    two_primaries(&mut s, input, &axis, 20.0 + LANE, 2.0 * LANE);
    watcher_lane(&mut s, input, &axis, 20.0 + LANE * 3.0);
    app_lane(&mut s, input, timeline, &axis, 20.0 + LANE * 4.0);
    s.push_str("</svg>");
    s
}

fn axis_ticks(s: &mut String, a: &Axis, y: f64) {
    let span = a.t1 - a.t0;
    let step = [
        1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000,
    ]
    .into_iter()
    .find(|st| span / st <= 12)
    .unwrap_or(3_600_000);
    let mut t = (a.t0 / step + 1) * step;
    while t < a.t1 {
        let x = a.x(t);
        // The last label, centred on its tick, was cut at the right edge.
        let anchor = if x + 26.0 > WIDTH { "end" } else { "middle" };
        let _ = write!(s, "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"16\" y2=\"{:.0}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{y:.0}\" text-anchor=\"{anchor}\" fill=\"#666\">{}</text>", y - 10.0, time_whole(t));
        t += step;
    }
}

/// A band of a lane: from, to (scenario ms), its top and its height.
type Band = (i64, i64, f64, f64);

fn rect(s: &mut String, a: &Axis, (from, to, y, h): Band, fill: &str, title: &str) {
    let (x0, x1) = (a.x(from), a.x(to));
    let _ = write!(
        s,
        "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{fill}\"><title>{}</title></rect>",
        (x1 - x0).max(1.0),
        esc(title)
    );
}

fn mark(s: &mut String, a: &Axis, ms: i64, y: f64, h: f64, color: &str, title: &str) {
    let x = a.x(ms);
    let _ = write!(
        s,
        "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"1.5\"><title>{}</title></line>",
        y + h,
        esc(title)
    );
}

/// Each fault from its opening verb to the operation that closes it (the same `fault`).
fn faults(s: &mut String, input: &Input, a: &Axis, y: f64) {
    let clock = &input.meta.clock;
    let mut open: std::collections::BTreeMap<i64, (i64, String)> = Default::default();
    for op in input
        .history
        .iter()
        .filter(|o| o.process == "nemesis" && o.kind == OpType::Ok)
    {
        let ms = clock.scenario_ms_at_run_ns(op.time_ns);
        let fault = op.value["fault"].as_i64().unwrap_or(-1);
        let what = format!("{} {}", op.f, op.value["target"].as_str().unwrap_or(""));
        match open.remove(&fault) {
            Some((from, label)) => rect(
                s,
                a,
                (from, ms, y + 8.0, LANE - 16.0),
                "#f0a050",
                &format!("{label} {} – {}", time(from), time(ms)),
            ),
            None => {
                open.insert(fault, (ms, what));
            }
        }
    }
    for (from, label) in open.into_values() {
        rect(
            s,
            a,
            (from, a.t1, y + 8.0, LANE - 16.0),
            "#f0a050",
            &format!("{label} from {} (not healed in the run)", time(from)),
        );
    }
}

/// A server's role (primary blue, standby grey, down black), a green strip while the app could
/// reach it as a primary, a tick per order it committed itself (red: lost).
fn server_lane(s: &mut String, input: &Input, t: &Timeline, a: &Axis, node: &str, y: f64) {
    if let Some(changes) = t.roles.get(node) {
        for (i, (from, role)) in changes.iter().enumerate() {
            let to = changes.get(i + 1).map_or(a.t1, |c| c.0);
            let (fill, word) = match role {
                Role::Primary => ("#9cc3e6", "primary"),
                Role::Standby => ("#d5d5d5", "standby"),
                Role::Down => ("#444", "down"),
            };
            rect(
                s,
                a,
                (*from, to, y + 4.0, LANE - 14.0),
                fill,
                &format!("{node}: {word} {} – {}", time(*from), time(to)),
            );
        }
    }
    for (from, to) in t.writable(node, a.t1) {
        rect(
            s,
            a,
            (from, to, y + LANE - 10.0, 4.0),
            "#3a3",
            &format!(
                "{node} could accept the app's writes {} – {}",
                time(from),
                time(to)
            ),
        );
    }
    let Some(f) = input.final_state else { return };
    let lost = lost_ids(input, t);
    let Some(server) = f.server(node) else { return };
    let clock = &input.meta.clock;
    let mut columns: std::collections::BTreeMap<i64, (u32, bool, String)> = Default::default();
    for o in server.orders.iter().filter(|o| o.accepted_by == node) {
        let Some(ns) = o.commit_unix_ns else { continue };
        let ms = clock.scenario_ms_at_unix_ns(ns);
        let col = a.x(ms) as i64;
        let e = columns.entry(col).or_insert((0, false, o.id.clone()));
        e.0 += 1;
        e.1 |= lost.contains(&o.id);
        let _ = ms;
    }
    for (col, (n, any_lost, id)) in columns {
        let color = if any_lost { "#d22" } else { "#246" };
        let _ = write!(
            s,
            "<line x1=\"{col}\" x2=\"{col}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\"><title>{n} order(s) committed by {node}, e.g. {}{}</title></line>",
            y + 6.0,
            y + 18.0,
            esc(&id),
            if any_lost { " (lost)" } else { "" }
        );
    }
}

/// Acknowledged orders the surviving primary does not hold (as the checker counts them).
fn lost_ids(input: &Input, t: &Timeline) -> BTreeSet<String> {
    let Some(f) = input.final_state else {
        return BTreeSet::new();
    };
    let survivor = chaos_checkers::failover::survivor(t, Some(f));
    let held: BTreeSet<&str> = f
        .server(survivor)
        .map(|s| s.orders.iter().map(|o| o.id.as_str()).collect())
        .unwrap_or_default();
    t.orders
        .iter()
        .filter(|(id, o)| {
            matches!(o.outcome, chaos_checkers::failover::Outcome::Ok { .. })
                && !held.contains(id.as_str())
        })
        .map(|(id, _)| id.clone())
        .collect()
}

fn two_primaries(s: &mut String, input: &Input, a: &Axis, y: f64, h: f64) {
    let Some(an) = input
        .verdict
        .anomaly(chaos_checkers::AnomalyClass::TwoPrimaries)
    else {
        return;
    };
    for w in an.evidence["windows"].as_array().into_iter().flatten() {
        if let (Some(from), Some(to)) =
            (w["from_scenario_ms"].as_i64(), w["to_scenario_ms"].as_i64())
        {
            rect(
                s,
                a,
                (from, to.max(from), y, h),
                "rgba(220,30,30,0.15)",
                &an.summary,
            );
        }
    }
}

/// Failed checks (red), the silence, fence, drain, promote and repoint (labelled marks).
fn watcher_lane(s: &mut String, input: &Input, a: &Axis, y: f64) {
    let clock = &input.meta.clock;
    let mut steps: Vec<(f64, &str)> = Vec::new();
    for op in input.history.iter().filter(|o| o.process == names::WATCHER) {
        let ms = clock.scenario_ms_at_run_ns(op.time_ns);
        match (op.f.as_str(), op.kind) {
            (names::CHECK, OpType::Fail) => mark(
                s,
                a,
                ms,
                y + 10.0,
                10.0,
                "#d44",
                &format!("check failed at {}", time(ms)),
            ),
            (names::CHECK, OpType::Ok) => mark(
                s,
                a,
                ms,
                y + 14.0,
                4.0,
                "#9c9",
                &format!("check ok at {}", time(ms)),
            ),
            (
                f @ (names::FENCE | names::DRAIN | names::PROMOTE | names::REPOINT | "silence"),
                kind,
            ) if kind != OpType::Invoke => {
                mark(
                    s,
                    a,
                    ms,
                    y + 2.0,
                    LANE - 6.0,
                    "#000",
                    &format!("{f} at {}", time(ms)),
                );
                steps.push((a.x(ms), f));
            }
            _ => {}
        }
    }
    // Steps a moment apart printed over each other, then stacked three high: one line
    // ("silence · promote · repoint") for the steps whose labels would touch.
    let mut groups: Vec<(f64, f64, Vec<&str>)> = Vec::new();
    for (x, f) in steps {
        match groups.last_mut() {
            Some((_, end, names)) if x < *end => {
                names.push(f);
                *end += 5.0 * (f.len() + 3) as f64;
            }
            _ => groups.push((x, x + 2.0 + 5.0 * (f.len() + 1) as f64, vec![f])),
        }
    }
    for (x, _, names) in groups {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\">{}</text>",
            x + 2.0,
            y + 9.0,
            names.join(" · ")
        );
    }
}

/// The app: acknowledged orders (green), failed and uncertain ones (red, orange), and the
/// stretches in which no primary accepted its writes.
fn app_lane(s: &mut String, input: &Input, t: &Timeline, a: &Axis, y: f64) {
    if let Some(an) = input
        .verdict
        .anomaly(chaos_checkers::AnomalyClass::Unavailability)
    {
        for w in an.evidence["windows"].as_array().into_iter().flatten() {
            if let (Some(from), Some(to)) =
                (w["from_scenario_ms"].as_i64(), w["to_scenario_ms"].as_i64())
            {
                rect(
                    s,
                    a,
                    (from, to.max(from), y + 2.0, LANE - 4.0),
                    "rgba(120,120,120,0.25)",
                    &format!(
                        "no primary accepted the app's writes {} – {}",
                        time(from),
                        time(to)
                    ),
                );
            }
        }
    }
    let mut columns: std::collections::BTreeMap<(i64, u8), u32> = Default::default();
    for o in t.orders.values() {
        let (ms, kind) = match &o.outcome {
            chaos_checkers::failover::Outcome::Ok { ms, .. } => (*ms, 0u8),
            chaos_checkers::failover::Outcome::Fail => (o.invoked_ms, 1),
            _ => (o.invoked_ms, 2),
        };
        *columns.entry((a.x(ms) as i64, kind)).or_default() += 1;
    }
    for ((col, kind), n) in columns {
        let (color, y0, word) = match kind {
            0 => ("#3a3", y + 6.0, "acknowledged"),
            1 => ("#d22", y + 18.0, "failed"),
            _ => ("#e90", y + 18.0, "uncertain"),
        };
        let _ = write!(s, "<line x1=\"{col}\" x2=\"{col}\" y1=\"{y0:.1}\" y2=\"{:.1}\" stroke=\"{color}\"><title>{n} order(s) {word}</title></line>", y0 + 10.0);
    }
}
