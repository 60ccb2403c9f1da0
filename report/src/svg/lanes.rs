//! The report's lanes, one method each: faults, the claim, every box, events, shards and
//! the verdict, drawn on the canvas `svg.rs` sets up.

use super::marks::{Shape, SpanSrc};
use super::*;

impl Canvas<'_, '_> {
    pub(super) fn fault_lane(
        &mut self,
        lane: &crate::digest::FaultLane,
        y: f64,
        lane_i: usize,
    ) -> f64 {
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
        let model = self.v.model;
        self.spans(
            SpanSrc::of(&lane.windows, &self.v, "fault"),
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
                let args = model
                    .event(w.begin_op)
                    .map(|op| json_line(&op.value, 240))
                    .unwrap_or_default();
                let until = match w.end_op.and_then(|e| model.event(e)) {
                    Some(e) => format!(
                        "{} at {}",
                        truncate_chars(e.f.clone(), 80),
                        time(model.at_run(e.time_ns))
                    ),
                    None if w.end_op.is_some() => "healed (event not readable)".into(),
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

    pub(super) fn claim_lane(&mut self, y: f64, lane_i: usize) -> f64 {
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
        // The vacancy the verdict counts (while the plan ran), not the lane's every gap.
        let stats = &model.verdict.stats;
        let sub = format!(
            "{grants} grant{}; vacancy {}",
            if grants == 1 { "" } else { "s" },
            crate::finding::secs(stats.vacancy_total_s)
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
            SpanSrc::slice(&claim.vacancies),
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
            SpanSrc::slice(&segs),
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

    pub(super) fn box_lane(
        &mut self,
        index: usize,
        lane: &crate::digest::BoxLane,
        y: f64,
        lane_i: usize,
    ) -> f64 {
        let h = 66.0;
        let ok_copies = lane.ok_copies;
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
        self.frame(y, h, lane_i, &lane.name, &sub);
        let colour = format!("b{}", index % BOX_COLOURS);
        self.belief_row(index, lane, y + 5.0, &colour);
        self.copy_row(lane, y + 22.0, &colour);
        self.shard_row(lane, y + 46.0);
        self.finish_lane(y);
        h
    }

    /// A box's row 1 at `by`: what it believed it held, with what the routing db
    /// thought of it (stale beliefs), its polls, renewals and acquires.
    fn belief_row(&mut self, index: usize, lane: &crate::digest::BoxLane, by: f64, colour: &str) {
        let v = self.v;
        let model = self.v.model;
        let bh = 13.0;
        let name = truncate_chars(lane.name.clone(), 60);
        let name = name.as_str();
        let belief_class = format!("belief {colour}");
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
            SpanSrc::of(&lane.beliefs, &self.v, &belief_class),
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
            SpanSrc::slice(&model.stale[index]),
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
            |s| Some(format!("unbacked {}", duration(s.end - s.start))),
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
    }

    /// A box's row 2 at `cy`: its copies, one bar per turbine, a lost turbine's marked.
    fn copy_row(&mut self, lane: &crate::digest::BoxLane, cy: f64, colour: &str) {
        let v = self.v;
        let model = self.v.model;
        let ch = 20.0;
        let lost = &model.lost_turbines;
        let turbine = |s: &crate::digest::Span| -> Option<String> {
            let op = model.event(s.invoke?)?;
            str_field(&op.value, "turbine").map(str::to_string)
        };
        let copy_class = format!("copy {colour}");
        self.spans(
            SpanSrc::of(&lane.copies, &self.v, &copy_class),
            |s| (s.start, s.end),
            cy,
            ch,
            "copies",
            |s| {
                let outcome = match s.outcome {
                    Outcome::Ok => colour,
                    Outcome::Fail => "fail",
                    Outcome::Refused => "refusedcopy",
                    Outcome::Info => "info",
                    Outcome::Open => "open",
                };
                let lost = if turbine(s).is_some_and(|t| lost.contains(&t)) {
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
                if turbine(s).is_some_and(|t| lost.contains(&t)) {
                    text.push_str("\nthis turbine's rows were lost");
                }
                text
            },
            |s| turbine(s),
        );
    }

    /// A box's row 3 at `my`: what it did to the shards (skips, deletes, tidy-ups,
    /// refused and failed writes).
    fn shard_row(&mut self, lane: &crate::digest::BoxLane, my: f64) {
        let v = self.v;
        let model = self.v.model;
        let mh = 16.0;
        self.spans(
            SpanSrc::of(&lane.skips, &self.v, "skip"),
            |s| (s.start, s.end),
            my + 5.0,
            6.0,
            "skip runs",
            |_| "skip".into(),
            |s| {
                let first = turbine_name(model, s.first);
                let last = turbine_name(model, s.last);
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
        self.skip_labels(lane, my);
        let title = |p: &Point| v.op_title(p.src, p.other);
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
        self.tidy_labels(lane, my + mh - 3.0);
    }

    /// A run of skips is usually too short to hold its label: write it beside the bar
    /// (for at most 20 runs of five or more in view).
    fn skip_labels(&mut self, lane: &crate::digest::BoxLane, my: f64) {
        let v = self.v;
        let skips_in_view: Vec<_> = lane
            .skips
            .exact
            .iter()
            .filter(|s| v.overlaps(s.start, s.end) && s.n >= 5)
            .collect();
        if skips_in_view.len() > 20 {
            return;
        }
        // Runs close together wrote their labels over each other ("8 23 skipped"): a label
        // starts only where the last one ended.
        let mut free_x = f64::MIN;
        for s in skips_in_view {
            let (x0, x1) = (v.x(s.start), v.x(s.end));
            let text = format!("{} skipped", s.n);
            if x1 - x0 < 6.0 * 12.0 && x1 + 3.0 >= free_x {
                let _ = write!(
                    self.out,
                    "<text class=\"skiplabel\" x=\"{:.1}\" y=\"{:.1}\">{text}</text>",
                    x1 + 3.0,
                    my + 11.0,
                );
                free_x = x1 + 3.0 + 6.0 * text.chars().count() as f64 + 4.0;
            }
        }
    }

    /// Name the few tidy-ups (at most five), on the baseline `y`: they are the events
    /// the whole report is about.
    fn tidy_labels(&mut self, lane: &crate::digest::BoxLane, y: f64) {
        if lane.tidy_deletes.len() > 5 {
            return;
        }
        let model = self.v.model;
        for p in lane
            .tidy_deletes
            .exact
            .iter()
            .filter(|p| p.t >= self.v.t0 && p.t <= self.v.t1)
        {
            let what = model.turbine_of(p).unwrap_or_else(|| "?".into());
            let what = truncate_chars(what, 60);
            let _ = write!(
                self.out,
                "<text class=\"tidylabel\" x=\"{:.1}\" y=\"{y:.1}\">tidy-up {}</text>",
                self.v.x(p.t) + 9.0,
                esc(&what)
            );
        }
    }

    pub(super) fn event_lane(
        &mut self,
        lane: &crate::digest::EventLane,
        y: f64,
        lane_i: usize,
    ) -> f64 {
        let v = self.v;
        let h = 30.0;
        let sub = format!(
            "{} ok, {} fail, {} unknown",
            lane.ok.len(),
            lane.fail.len(),
            lane.info.len()
        );
        self.frame(y, h, lane_i, &lane.name, &sub);
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

    pub(super) fn shard_lane(
        &mut self,
        lane: &crate::model::ShardLane,
        y: f64,
        lane_i: usize,
    ) -> f64 {
        let h = 30.0;
        let sub = format!("audit; {} ingest writes not drawn", lane.ingest_writes);
        self.frame(y, h, lane_i, lane.name, &sub);
        let Some(audit) = self.v.model.audit else {
            return h;
        };
        let title = |p: &Point| {
            let w = &audit.shard_writes[p.src as usize];
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

    pub(super) fn verdict_lane(&mut self, y: f64, lane_i: usize) -> f64 {
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

fn turbine_name(model: &Model, src: u64) -> String {
    let name = model
        .event(src)
        .and_then(|op| str_field(&op.value, "turbine").map(str::to_string))
        .unwrap_or_else(|| "?".into());
    truncate_chars(name, 60)
}
