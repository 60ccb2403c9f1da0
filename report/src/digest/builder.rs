//! [`DigestBuilder`]: one pass over the history, each event routed to its lane (boxes,
//! other processes, faults) and kept within the digest's limits; nemesis actions are
//! paired into fault windows in sorted batches.

use super::*;
use chaos_history::verb;
use operation::{Done, Operation, Pending, Why};

mod operation;

/// Names told apart by a small id, up to a limit; past it one id stands for the rest.
#[derive(Debug, Default)]
struct Names {
    ids: HashMap<String, u32>,
    names: Vec<String>,
    /// The last name looked up: histories repeat the same process line after line.
    last: Option<u32>,
}

impl Names {
    const OTHER: &'static str = "(other)";

    fn id(&mut self, name: &str) -> u32 {
        if let Some(last) = self.last {
            if self.names[last as usize] == name {
                return last;
            }
        }
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None if self.names.len() < MAX_NAMES => self.add(name),
            None => match self.ids.get(Self::OTHER) {
                Some(&id) => id,
                None => self.add(Self::OTHER),
            },
        };
        self.last = Some(id);
        id
    }

    fn add(&mut self, name: &str) -> u32 {
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.ids.insert(name.to_string(), id);
        id
    }

    fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// Where a process's events go.
#[derive(Debug, Clone, Copy)]
enum Route {
    Nemesis,
    Box(usize),
    Other(usize),
}

/// One nemesis action, before it is paired into a window.
#[derive(Debug, Clone, Copy)]
struct FaultAction {
    t: i64,
    src: u64,
    verb: u32,
    target: u32,
    failed: bool,
}

impl HistoryDigest {
    /// The digest of a history held in memory; `src` is each event's position.
    pub fn of(meta: &RunMeta, history: &[Op]) -> HistoryDigest {
        let mut b = DigestBuilder::new(meta);
        for (i, op) in history.iter().enumerate() {
            b.observe(&OpView::of(op), i as u64);
        }
        b.finish()
    }
}

/// Builds a [`HistoryDigest`] one event at a time.
pub struct DigestBuilder {
    clock: ScenarioClock,
    grid: Grid,
    keep: Keep,
    run_start: i64,
    run_end: i64,
    events: u64,
    outside_before: u64,
    outside_after: u64,
    outside_range: Option<(i64, i64)>,
    seen: Option<(i64, i64)>,
    processes: Names,
    fs: Names,
    targets: Names,
    classes: Names,
    routes: Vec<Option<Route>>,
    class_of: Vec<u32>,
    pending: Vec<VecDeque<Pending>>,
    boxes: Vec<BoxLane>,
    others: Vec<EventLane>,
    lanes_merged: u64,
    latency: HashMap<(u32, u32), LatencyAcc>,
    last_delete: HashMap<String, i64>,
    faults: FaultBuilder,
}

impl DigestBuilder {
    pub fn new(meta: &RunMeta) -> DigestBuilder {
        let (a0, a1) = accepted_span(meta);
        DigestBuilder {
            clock: meta.clock,
            grid: Grid { a0, a1 },
            keep: Keep::new(Grid { a0, a1 }),
            run_start: meta.clock.start_scenario_ms,
            run_end: meta.end_scenario_ms.max(meta.clock.start_scenario_ms),
            events: 0,
            outside_before: 0,
            outside_after: 0,
            outside_range: None,
            seen: None,
            processes: Names::default(),
            fs: Names::default(),
            targets: Names::default(),
            classes: Names::default(),
            routes: Vec::new(),
            class_of: Vec::new(),
            pending: Vec::new(),
            boxes: Vec::new(),
            others: Vec::new(),
            lanes_merged: 0,
            latency: HashMap::new(),
            last_delete: HashMap::new(),
            faults: FaultBuilder::default(),
        }
    }

    /// Observe the next event of the history; `src` finds it again for a
    /// hover title (see [`EventLookup`]).
    pub fn observe(&mut self, op: &OpView, src: u64) {
        self.events += 1;
        let t = scenario_ms(&self.clock, op.time_ns);
        if t < self.grid.a0 || t > self.grid.a1 {
            if t < self.grid.a0 {
                self.outside_before += 1;
            } else {
                self.outside_after += 1;
            }
            let (lo, hi) = self.outside_range.unwrap_or((t, t));
            self.outside_range = Some((lo.min(t), hi.max(t)));
            return;
        }
        let (lo, hi) = self.seen.unwrap_or((t, t));
        self.seen = Some((lo.min(t), hi.max(t)));
        let p = self.process(&op.process);
        let f = self.fs.id(&op.f);
        if op.kind == OpType::Invoke {
            let route = self.routes[p as usize];
            let target = match route {
                Some(Route::Nemesis) => op.value.str("target").map(|s| self.targets.id(s)),
                _ => None,
            };
            let turbine = match route {
                Some(Route::Box(_)) if op.f == verb::DELETE => {
                    op.value.str("turbine").map(|s| s.into())
                }
                _ => None,
            };
            let queue = &mut self.pending[p as usize];
            queue.push_back(Pending {
                src,
                t,
                time_ns: op.time_ns,
                f,
                why: Why::of(op),
                token: op.value.int("token"),
                target,
                turbine,
            });
            if queue.len() > MAX_PENDING {
                let oldest = queue.pop_front().expect("a full queue");
                self.pair(p, Some(oldest), None);
            }
            return;
        }
        let queue = &mut self.pending[p as usize];
        let invoke = queue
            .iter()
            .position(|i| i.f == f)
            .and_then(|at| queue.remove(at));
        self.pair(
            p,
            invoke,
            Some(Done {
                src,
                t,
                time_ns: op.time_ns,
                kind: op.kind,
                view: op,
            }),
        );
    }

    /// The process's id, giving it a lane on first sight.
    fn process(&mut self, name: &str) -> u32 {
        let p = self.processes.id(name);
        if self.routes.len() <= p as usize {
            self.routes.resize(p as usize + 1, None);
            self.class_of.resize(p as usize + 1, 0);
            self.pending.resize_with(p as usize + 1, VecDeque::new);
        }
        if self.routes[p as usize].is_none() {
            let name = self.processes.name(p).to_string();
            self.class_of[p as usize] = self.classes.id(process_class(&name));
            let route = if name == "nemesis" {
                Route::Nemesis
            } else if name.starts_with("box-") && self.boxes.len() < MAX_BOX_LANES {
                self.boxes.push(BoxLane {
                    name,
                    ..Default::default()
                });
                Route::Box(self.boxes.len() - 1)
            } else if self.others.len() < MAX_EVENT_LANES {
                self.others.push(EventLane {
                    name,
                    ..Default::default()
                });
                Route::Other(self.others.len() - 1)
            } else {
                self.lanes_merged += 1;
                let last = self.others.len() - 1;
                Route::Other(last)
            };
            self.routes[p as usize] = Some(route);
        }
        p
    }

    /// One operation: an invoke with its completion, a completion nobody
    /// invoked, or (at the end) an invoke that never completed.
    fn pair(&mut self, p: u32, invoke: Option<Pending>, done: Option<Done>) {
        let f_id = invoke.as_ref().map(|i| i.f).unwrap_or_else(|| {
            self.fs
                .id(&done.as_ref().expect("a pair has an event").view.f)
        });
        if let Some(inv) = &invoke {
            self.latency_of(p, f_id, inv, done.as_ref());
        }
        let op = Operation::of(invoke.as_ref(), done.as_ref());
        match self.routes[p as usize].expect("routed on first sight") {
            Route::Nemesis => self.fault_action(f_id, &op),
            Route::Other(l) => {
                let (lane, grid) = (&mut self.others[l], &self.keep);
                match op.kind {
                    Some(OpType::Ok) => lane.ok.push(op.at, grid),
                    Some(OpType::Fail) => lane.fail.push(op.at, grid),
                    // An invoke that never completed is as unknown as an info.
                    _ => lane.info.push(op.at, grid),
                }
            }
            Route::Box(l) => self.box_op(l, f_id, &op),
        }
    }

    /// An invoked operation's latency, in its process class's and `f`'s row (while
    /// there is room for the row): the time to its completion, or one more open.
    fn latency_of(&mut self, p: u32, f_id: u32, inv: &Pending, done: Option<&Done>) {
        let key = (self.class_of[p as usize], f_id);
        let n = self.latency.len();
        let acc = match self.latency.get_mut(&key) {
            Some(acc) => Some(acc),
            None if n < MAX_LATENCY_ROWS => Some(self.latency.entry(key).or_default()),
            None => None,
        };
        if let Some(acc) = acc {
            match done {
                Some(d) => acc.record(d.time_ns.saturating_sub(inv.time_ns), d.kind, &self.clock),
                None => acc.open += 1,
            }
        }
    }

    /// A nemesis action, on its target (the invoke's, else the completion's), to be
    /// paired into a fault window.
    fn fault_action(&mut self, f_id: u32, op: &Operation) {
        let target = op
            .invoke
            .and_then(|i| i.target)
            .or_else(|| {
                let d = op.done?;
                d.view.value.str("target").map(|s| self.targets.id(s))
            })
            .unwrap_or_else(|| self.targets.id(""));
        // A window runs from the nemesis beginning the fault to its beginning the heal: the
        // fault as scheduled (April's 80 s stop read 76.3 s from the stop's completion, which
        // waits for the server to shut down, to the start's).
        self.faults.push(
            FaultAction {
                t: op.start,
                src: op.head_src,
                verb: f_id,
                target,
                failed: op.kind == Some(OpType::Fail),
            },
            &self.fs,
            &self.targets,
            &self.keep,
        );
    }

    /// A box's operation, into its lane: a skip grows the run of skips; anything
    /// else ends it and goes to its kind's marks.
    fn box_op(&mut self, l: usize, f_id: u32, op: &Operation) {
        let grid = &self.keep;
        let f = self.fs.name(f_id);
        let lane = &mut self.boxes[l];
        lane.events += 1 + u64::from(op.invoke.is_some() && op.done.is_some());
        lane.last_t = lane.last_t.max(op.end).max(op.start);
        // A run of skips ends at the box's next operation of any other kind.
        if f == verb::SKIP {
            lane.skip(op);
            return;
        }
        lane.close_skips(grid);
        if op.fenced() && op.kind == Some(OpType::Fail) {
            lane.refused.push(op.at, grid);
        }
        match f {
            verb::COPY => lane.copy(op, grid),
            verb::DELETE => lane.delete(op, grid, &mut self.last_delete),
            verb::ACQUIRE => lane.acquire(op, grid),
            verb::RENEW => lane.renew(op, grid),
            verb::LOST => lane.end_belief(op.end, "learned it had lost", grid),
            verb::RELEASE if op.kind.is_some() => lane.end_belief(op.end, "released", grid),
            verb::DONE if op.kind.is_some() => lane.end_belief(op.end, "done", grid),
            _ => {
                if op.kind == Some(OpType::Fail) && !op.fenced() {
                    lane.failed.push(op.at, grid);
                }
            }
        }
    }

    /// The digest: invokes still open become open operations, growing runs
    /// and beliefs end at each box's last event, and the axis is fixed.
    pub fn finish(mut self) -> HistoryDigest {
        let mut open: Vec<(u32, Pending)> = Vec::new();
        for (p, queue) in std::mem::take(&mut self.pending).into_iter().enumerate() {
            open.extend(queue.into_iter().map(|i| (p as u32, i)));
        }
        open.sort_by_key(|(_, i)| i.src);
        for (p, invoke) in open {
            self.pair(p, Some(invoke), None);
        }
        let grid = &self.keep;
        for lane in &mut self.boxes {
            lane.close_skips(grid);
            if let Some((start, token)) = lane.believing.take() {
                let end = lane.last_t.max(start);
                lane.beliefs.push(
                    Belief {
                        start,
                        end,
                        token,
                        ended_by: "its last event",
                    },
                    grid,
                );
            }
            // Copies still open run until the box's last sign of life.
            for mut span in std::mem::take(&mut lane.open_copies) {
                span.end = lane.last_t.max(span.start);
                lane.copies.push(span, grid);
            }
            for points in [
                &mut lane.source_deletes,
                &mut lane.tidy_deletes,
                &mut lane.refused,
                &mut lane.failed,
                &mut lane.renew_ok,
                &mut lane.renew_fail,
                &mut lane.polls,
                &mut lane.acquired,
            ] {
                points.finish();
            }
            lane.copies.finish();
            lane.beliefs.finish();
            lane.skips.finish();
        }
        self.boxes
            .sort_by(|a, b| box_order(&a.name).cmp(&box_order(&b.name)));
        if self.lanes_merged > 0 {
            if let Some(last) = self.others.last_mut() {
                last.name = format!("{} and {} more processes", last.name, self.lanes_merged);
            }
        }
        // The overflow lane keeps its place at the end.
        let merged = if self.lanes_merged > 0 {
            self.others.pop()
        } else {
            None
        };
        self.others.sort_by(|a, b| a.name.cmp(&b.name));
        self.others.extend(merged);
        for lane in &mut self.others {
            for points in [&mut lane.ok, &mut lane.fail, &mut lane.info] {
                points.finish();
            }
        }

        let (mut t0, mut t1) = (self.run_start, self.run_end);
        if let Some((lo, hi)) = self.seen {
            t0 = t0.min(lo);
            t1 = t1.max(hi);
        }
        if t1 <= t0 {
            t1 = t0.saturating_add(1000);
        }
        let faults = self.faults.finish(&self.fs, &self.targets, grid, t1);
        let grid = self.grid;

        let mut latency: Vec<LatencyRow> = self
            .latency
            .into_iter()
            .map(|((class, f), acc)| acc.row(self.classes.name(class), self.fs.name(f)))
            .collect();
        latency.sort_by(|a, b| (&a.class, &a.f).cmp(&(&b.class, &b.f)));
        HistoryDigest {
            grid,
            events: self.events,
            outside_before: self.outside_before,
            outside_after: self.outside_after,
            outside_range: self.outside_range,
            t0,
            t1,
            boxes: self.boxes,
            faults,
            others: self.others,
            latency,
            last_delete: self.last_delete,
        }
    }
}

/// Box names sort by their number so that `box-10` follows `box-9`.
fn box_order(name: &str) -> (u64, &str) {
    let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
    (digits.parse().unwrap_or(u64::MAX), name)
}

// Verbs that open a fault window and the verb that closes each: the nemesis's one list.
use chaos_nemesis::{closing_verb, is_closing_verb};

/// A window still waiting for its closing verb.
#[derive(Debug)]
struct OpenWindow {
    lane: usize,
    window: FaultWindow,
    closer: &'static str,
}

/// Pairs nemesis actions into windows per target, a sorted batch at a time.
#[derive(Debug, Default)]
struct FaultBuilder {
    batch: Vec<FaultAction>,
    lanes: Vec<FaultLane>,
    lane_of: HashMap<u32, usize>,
    open: Vec<OpenWindow>,
    merged: u64,
}

impl FaultBuilder {
    fn push(&mut self, action: FaultAction, fs: &Names, targets: &Names, grid: &Keep) {
        self.batch.push(action);
        if self.batch.len() >= FAULT_BATCH {
            self.flush(fs, targets, grid);
        }
    }

    fn flush(&mut self, fs: &Names, targets: &Names, grid: &Keep) {
        let mut batch = std::mem::take(&mut self.batch);
        batch.sort_by_key(|a| (a.t, a.src));
        for a in batch {
            let target = targets.name(a.target);
            let verb = fs.name(a.verb);
            let lane_i = match self.lane_of.get(&a.target) {
                Some(&l) => l,
                None => {
                    let l = if self.lanes.len() < MAX_FAULT_LANES {
                        self.lanes.push(FaultLane {
                            target: target.to_string(),
                            ..Default::default()
                        });
                        self.lanes.len() - 1
                    } else {
                        self.merged += 1;
                        self.lanes.len() - 1
                    };
                    self.lane_of.insert(a.target, l);
                    l
                }
            };
            let instant = Point {
                t: a.t,
                src: a.src,
                other: None,
            };
            if a.failed {
                self.lanes[lane_i].instants.push(instant, grid);
                continue;
            }
            if let Some(closer) = closing_verb(verb) {
                // A second latency on a target already slowed is a change, not a new window.
                let already = self
                    .open
                    .iter()
                    .any(|o| o.lane == lane_i && o.window.verb == verb);
                if !already {
                    self.open.push(OpenWindow {
                        lane: lane_i,
                        window: FaultWindow {
                            start: a.t,
                            end: a.t,
                            verb: verb.to_string(),
                            open: true,
                            begin_op: a.src,
                            end_op: None,
                        },
                        closer,
                    });
                }
            } else if is_closing_verb(verb) {
                let before = self.open.len();
                let mut i = 0;
                while i < self.open.len() {
                    let o = &self.open[i];
                    // A heal with no target heals every link.
                    let hit = o.closer == verb
                        && (o.lane == lane_i || (target.is_empty() && verb == "heal"));
                    if hit {
                        let mut o = self.open.remove(i);
                        o.window.end = a.t;
                        o.window.open = false;
                        o.window.end_op = Some(a.src);
                        self.lanes[o.lane].windows.push(o.window, grid);
                    } else {
                        i += 1;
                    }
                }
                if self.open.len() == before {
                    // Healing nothing we saw start is still worth a mark.
                    self.lanes[lane_i].instants.push(instant, grid);
                }
            } else {
                self.lanes[lane_i].instants.push(instant, grid);
            }
        }
    }

    fn finish(mut self, fs: &Names, targets: &Names, grid: &Keep, t1: i64) -> Vec<FaultLane> {
        self.flush(fs, targets, grid);
        for mut o in std::mem::take(&mut self.open) {
            o.window.end = t1.max(o.window.start);
            self.lanes[o.lane].windows.push(o.window, grid);
        }
        if self.merged > 0 {
            if let Some(last) = self.lanes.last_mut() {
                last.target = format!("{} and {} more targets", last.target, self.merged);
            }
        }
        for lane in &mut self.lanes {
            lane.windows.finish();
            lane.instants.finish();
        }
        self.lanes
    }
}
