//! The run told in scenario time: the events an engineer compares with the incident (grants, failed renewals, carry-on, takeovers, refusals, tidy-ups, faults), from the history alone.

use chaos_checkers::{AnomalyClass, Verdict};
use chaos_history::verb;
use chaos_history::{OpType, OpView, RunMeta, RunRecord, ScenarioClock};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

/// At most this many lines; the rest is in history.jsonl and report.html.
const MAX_LINES: usize = 40;
/// Turbines whose possibly-lost lines are held until the verdict names the lost ones.
const MAX_TURBINES: usize = 100_000;

/// The story of a run held in memory.
pub fn story(record: &RunRecord, verdict: &Verdict) -> String {
    let mut fold = StoryFold::new(&record.meta);
    for op in &record.history {
        fold.observe(&OpView::of(op));
    }
    fold.finish(&record.meta, verdict)
}

/// One line of the story: when, in what order it was told, and its text.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Line {
    t: i64,
    seq: u64,
    text: String,
}

/// The earliest lines seen, at most `MAX_LINES`, and how many there were.
#[derive(Debug, Default)]
struct Earliest {
    /// A max-heap: the latest of the kept lines is the one to drop.
    kept: BinaryHeap<Line>,
    total: usize,
}

impl Earliest {
    fn push(&mut self, line: Line) {
        self.total += 1;
        self.kept.push(line);
        if self.kept.len() > MAX_LINES {
            self.kept.pop();
        }
    }
}

/// One event as the story reads it: its scenario time, its process, and the operation.
struct Event<'e, 'a> {
    t: i64,
    p: &'e str,
    op: &'e OpView<'a>,
}

impl Event<'_, '_> {
    /// A field of the value as text (empty when absent).
    fn s(&self, k: &str) -> String {
        self.op
            .value
            .get(k)
            .map(|x| x.text().into_owned())
            .unwrap_or_default()
    }
}

/// The story told while the history streams: the state it needs per box
/// (copies, renewals, grants), the earliest lines, and, per turbine, the
/// lines that are told only if the verdict finds the turbine lost.
#[derive(Debug)]
pub struct StoryFold {
    clock: ScenarioClock,
    lease_ms: i64,
    seq: u64,
    lines: Earliest,
    /// Lines about a turbine, told when the verdict finds its rows lost.
    if_lost: HashMap<String, Earliest>,
    copies: BTreeMap<String, u32>,
    unreachable: BTreeSet<String>,
    last_renew: BTreeMap<String, i64>,
    // When each box sent its latest renewal: a renewal that retries for a minute
    // fails once, at the end, but the box began retrying when it sent it.
    renew_sent: BTreeMap<String, i64>,
    // When each box took the claim, until its grant-time fences answer.
    acquired: BTreeMap<String, i64>,
    /// The designs' work (payments, object versions), told by `designs_work`.
    designs: DesignsWork,
    /// What `done` finished: the mover's plan of turbines, or a design's job (which has none).
    job_word: &'static str,
    /// What a box holds (`the claim`, or `the lock` of a lock service) and what it renews
    /// through (`the routing db`, `etcd`).
    held: &'static str,
    renews_at: &'static str,
}

/// What the story remembers of the designs' work: who sent each payment first, and the
/// newest version any box has written, with the box that wrote it.
#[derive(Debug, Default)]
struct DesignsWork {
    first_payment: HashMap<String, (String, i64)>,
    newest_version: Option<(i64, String)>,
    begun: BTreeSet<(String, i64)>,
}

impl StoryFold {
    pub fn new(meta: &RunMeta) -> StoryFold {
        StoryFold {
            clock: meta.clock,
            lease_ms: meta.lease_ms,
            seq: 0,
            lines: Earliest::default(),
            if_lost: HashMap::new(),
            copies: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            last_renew: BTreeMap::new(),
            renew_sent: BTreeMap::new(),
            acquired: BTreeMap::new(),
            designs: DesignsWork::default(),
            job_word: if meta.plan.is_empty() { "job" } else { "plan" },
            held: match meta.mover.get("lock").map(String::as_str) {
                None | Some("claims") => "the claim",
                Some(_) => "the lock",
            },
            renews_at: match meta.mover.get("lock").map(String::as_str) {
                Some("etcd") => "etcd",
                Some("redis") => "Redis",
                Some("zookeeper") => "ZooKeeper",
                _ => "the routing db",
            },
        }
    }

    fn tell(&mut self, t: i64, text: String) {
        self.seq += 1;
        self.lines.push(Line {
            t,
            seq: self.seq,
            text,
        });
    }

    /// A line told only if `turbine` turns out lost.
    fn tell_if_lost(&mut self, turbine: &str, t: i64, text: String) {
        self.seq += 1;
        let line = Line {
            t,
            seq: self.seq,
            text,
        };
        if let Some(lines) = self.if_lost.get_mut(turbine) {
            lines.push(line);
        } else if self.if_lost.len() < MAX_TURBINES {
            let mut lines = Earliest::default();
            lines.push(line);
            self.if_lost.insert(turbine.to_string(), lines);
        }
    }

    /// Observe the next event of the history.
    pub fn observe(&mut self, op: &OpView) {
        let e = Event {
            t: scenario_ms(&self.clock, op.time_ns),
            p: &op.process,
            op,
        };
        // Each teller says whether the event was one of its kinds; a refused write
        // or a nemesis operation can be of any `f`.
        let claimed = match &*op.f {
            verb::ACQUIRE | verb::FENCE | verb::LOST | verb::DONE => self.claim(&e),
            verb::RENEW => self.renewal(&e),
            verb::COPY | verb::DELETE => self.shard_work(&e),
            verb::EXIT | verb::RESTART => self.supervision(&e),
            verb::TRIGGER | verb::TRIGGER_UNFIRED => self.trigger(&e),
            "promote" => self.promotion(&e),
            "pay" | "write-object" | "flip" => self.designs_work(&e),
            _ => false,
        };
        if !claimed && !self.refusal(&e) {
            self.fault(&e);
        }
    }

    /// The claim: taken, fenced at grant time, learnt lost; the plan done.
    fn claim(&mut self, e: &Event) -> bool {
        let (t, p) = (e.t, e.p);
        match (e.op.kind, &*e.op.f) {
            (OpType::Ok, verb::ACQUIRE) => {
                self.acquired.insert(p.into(), t);
                self.tell(
                    t,
                    format!("{p} takes {} (token {})", self.held, e.s("token")),
                )
            }
            (OpType::Ok, verb::FENCE) if e.s("why").is_empty() => self.grant_time_fence(e),
            (OpType::Info, verb::LOST) => self.tell(
                t,
                format!("{p} learns it lost {} (token {})", self.held, e.s("token")),
            ),
            (OpType::Ok, verb::DONE) => {
                let job = self.job_word;
                self.tell(t, format!("{p} finds the {job} done and exits"))
            }
            _ => return false,
        }
        true
    }

    /// A grant-time fence (a successor's has `why`) that took a quarter of the lease:
    /// an update of the fence row waits for every write transaction still open on
    /// the shard, such as a paused holder's, and the lease runs meanwhile.
    fn grant_time_fence(&mut self, e: &Event) {
        let (t, p) = (e.t, e.p);
        let Some(a) = self.acquired.remove(p) else {
            return;
        };
        let lease = self.lease_ms.max(1);
        let took = t.saturating_sub(a);
        if took.saturating_mul(4) >= lease {
            self.tell(
                t,
                format!(
                    "{p} fences its shards {:.1} s after taking {} ({}% of its {} s lease): a fence waits for any write still open on its shard",
                    took as f64 / 1000.0,
                    self.held,
                    took.saturating_mul(100) / lease,
                    lease as f64 / 1000.0
                ),
            );
        }
    }

    /// Renewals: sent, answered, unreachable, lost, given up.
    fn renewal(&mut self, e: &Event) -> bool {
        let (t, p) = (e.t, e.p);
        match (e.op.kind, e.s("reason").as_str()) {
            (OpType::Invoke, _) => {
                self.renew_sent.insert(p.into(), t);
            }
            (OpType::Ok, _) => {
                self.last_renew.insert(p.into(), t);
                self.unreachable.remove(p);
            }
            (OpType::Fail, "unreachable") => {
                if self.unreachable.insert(p.into()) {
                    if let Some(&r) = self.last_renew.get(p) {
                        self.tell(r, format!("{p}: last renewal that got an answer"));
                    }
                    let began = self.renew_sent.get(p).copied().unwrap_or(t).min(t);
                    let copied = self.copies.get(p).copied().unwrap_or(0);
                    let at = self.renews_at;
                    self.tell(began, format!("{p} finishes turbine {copied} and cannot reach {at} to renew; retrying"));
                }
            }
            (OpType::Fail, "lost") => self.tell(
                t,
                format!(
                    "{p}: renewal shows {} is lost (holder {})",
                    self.held,
                    or_unknown(&e.s("holder"))
                ),
            ),
            (OpType::Info, "carry-on") => {
                self.tell(t, format!("{p} gives up renewing and carries on"))
            }
            _ => return false,
        }
        true
    }

    /// Copies and deletes: counted per box, and told of a turbine if it turns out lost
    /// (a tidy-up always).
    fn shard_work(&mut self, e: &Event) -> bool {
        let (t, p) = (e.t, e.p);
        let turbine = e.s("turbine");
        match (e.op.kind, &*e.op.f) {
            (OpType::Ok, verb::COPY) => {
                *self.copies.entry(p.into()).or_default() += 1;
                self.tell_if_lost(&turbine, t, format!("{p} has copied {turbine}"));
            }
            (OpType::Invoke, verb::DELETE) if e.s("why") == "tidy-up" => self.tell(
                t,
                format!("{p} tidies up: deletes {turbine} from {}", e.s("shard")),
            ),
            (OpType::Invoke, verb::COPY) => {
                let line = format!(
                    "{p} starts copying {turbine} ({} -> {})",
                    e.s("from"),
                    e.s("to")
                );
                self.tell_if_lost(&turbine, t, line);
            }
            (OpType::Invoke, verb::DELETE) => {
                let why = wrapped(" (", e.s("why"), ")");
                let line = format!("{p} deletes {turbine} from {}{why}", e.s("shard"));
                self.tell_if_lost(&turbine, t, line);
            }
            _ => return false,
        }
        true
    }

    /// The designs' work: a payment sent again, one the processor refused by its key, a
    /// leader's version begun, an older version written after a newer one began, a flip.
    fn designs_work(&mut self, e: &Event) -> bool {
        let (t, p) = (e.t, e.p);
        let at = |ms: i64| ScenarioClock::format(ms);
        match (e.op.kind, &*e.op.f) {
            (OpType::Invoke, "pay") => {
                let publisher = e.s("publisher");
                match self.designs.first_payment.get(&publisher).cloned() {
                    Some((by, when)) => self.tell(
                        t,
                        format!(
                            "{p} pays {publisher} again (token {}; {by} sent it at {})",
                            e.s("token"),
                            at(when)
                        ),
                    ),
                    None => {
                        self.designs
                            .first_payment
                            .insert(publisher, (p.to_string(), t));
                    }
                }
            }
            (OpType::Ok, "pay") if e.s("repeated_key") == "true" => self.tell(
                t,
                format!(
                    "the processor refuses {p}'s repeated payment to {} (its idempotency key)",
                    e.s("publisher")
                ),
            ),
            (OpType::Invoke, "write-object") => {
                let version: i64 = e.s("version").parse().unwrap_or(0);
                if self.designs.begun.insert((p.to_string(), version)) {
                    self.tell(
                        t,
                        format!(
                            "{p} begins writing version {version} (object {} on {})",
                            e.s("object"),
                            e.s("shard")
                        ),
                    );
                }
                match self.designs.newest_version.clone() {
                    Some((newest, by)) if version < newest => self.tell(t, format!("{p} sends object {} of version {version} after {by}'s version {newest} began", e.s("object"))),
                    Some((newest, _)) if version <= newest => {}
                    _ => self.designs.newest_version = Some((version, p.to_string())),
                }
            }
            (OpType::Ok, "flip") => self.tell(
                t,
                format!("{p} flips the pointer to version {}", e.s("version")),
            ),
            _ => return false,
        }
        true
    }

    /// A write a shard's fence refused, whatever its `f`.
    fn refusal(&mut self, e: &Event) -> bool {
        if e.op.kind != OpType::Fail || e.s("reason") != verb::FENCED {
            return false;
        }
        let has = wrapped(" (shard has ", e.s("shard_token"), ")");
        let token = wrapped(" with token ", e.s("token"), "");
        let shard = e.s("shard");
        let shard = if shard.is_empty() {
            "a shard".to_string()
        } else {
            shard
        };
        let p = e.p;
        self.tell(e.t, format!("{shard} refuses {p}'s {}{token}{has}", e.op.f));
        true
    }

    /// A mover that exits on its own with a failure, and the supervisor's restart.
    fn supervision(&mut self, e: &Event) -> bool {
        let (t, p) = (e.t, e.p);
        match (e.op.kind, &*e.op.f) {
            (OpType::Info, verb::EXIT) if !matches!(e.s("code").as_str(), "0" | "" | "null") => {
                self.tell(t, format!("{p} exits with code {}", e.s("code")))
            }
            // `after_exit` is the exit code, or null for a signal the nemesis did not send.
            (OpType::Ok, verb::RESTART) if p == "harness" => {
                let why = match e.s("after_exit").as_str() {
                    "" | "null" => "it had died of a signal".to_string(),
                    code => format!("it had exited with code {code}"),
                };
                self.tell(t, format!("harness restarts {} ({why})", e.s("target")))
            }
            _ => return false,
        }
        true
    }

    /// A triggered fault: the moment it was waiting for came (or never did).
    fn trigger(&mut self, e: &Event) -> bool {
        if e.op.kind != OpType::Info || e.p != "nemesis" {
            return false;
        }
        let when = e.s("when");
        if e.op.f == verb::TRIGGER_UNFIRED {
            let what = if when.is_empty() {
                "a trigger".to_string()
            } else {
                format!("the trigger on {when}")
            };
            self.tell(e.t, format!("{what} never fired"));
            return true;
        }
        let by = e.s("by");
        let moment = match (when.is_empty(), by.is_empty()) {
            (false, false) => format!("{when} ({by})"),
            (false, true) => when,
            _ => "its moment".to_string(),
        };
        let target = e.s("target");
        // Still a role (`holder`, `previous-holder->shard1`): nobody held it then.
        let role = chaos_nemesis::Link::parse(&target).map_or(target.trim(), |l| l.client);
        let to = if chaos_nemesis::ROLES.contains(&role) {
            format!("but no box is the {role}: nothing lands on {target}")
        } else {
            format!("it sets off the fault on {target}")
        };
        self.tell(e.t, format!("trigger: {moment} comes; {to}"));
        true
    }

    /// The harness's sentinel promoting Redis's replica: who is the primary now, and what it
    /// held of the lock (a replica that never received the key hands the lock out again).
    fn promotion(&mut self, e: &Event) -> bool {
        if e.p != "sentinel" {
            return false;
        }
        let given = |k: &str| Some(e.s(k)).filter(|v| !v.is_empty() && v != "null");
        let text = match (e.op.kind, given("target")) {
            // The promoted member's counter is `token`: a field the history's view keeps.
            (OpType::Ok, Some(target)) => {
                promotion_line(given("why"), &target, given("holder"), given("token"))
            }
            _ => format!("sentinel: the promotion did NOT take: {}", e.s("error")),
        };
        self.tell(e.t, text);
        true
    }

    /// A fault: its effect begins when it is invoked (a stopping server refuses at
    /// once); a start counts from when the node accepts connections (it is issued
    /// early); an `info` is a fault that did not take.
    fn fault(&mut self, e: &Event) {
        if e.p != "nemesis" {
            return;
        }
        let verb: &str = &e.op.f;
        match e.op.kind {
            OpType::Invoke if verb != "start" => {
                self.tell(e.t, format!("nemesis: {verb} {}{}", e.s("target"), role(e)))
            }
            OpType::Ok if verb == "start" => {
                self.tell(e.t, format!("nemesis: {verb} {}{}", e.s("target"), role(e)))
            }
            OpType::Info => self.tell(
                e.t,
                format!(
                    "nemesis: {verb} {} did NOT take: {}",
                    e.s("target"),
                    e.s("error")
                ),
            ),
            _ => {}
        }
    }

    /// The story: the earliest lines, with those about the turbines the verdict found lost.
    pub fn finish(self, meta: &RunMeta, verdict: &Verdict) -> String {
        let lost: BTreeSet<String> = verdict
            .anomalies
            .iter()
            .filter(|a| a.class == AnomalyClass::LostRows)
            .flat_map(|a| turbines_in(&a.evidence))
            .collect();
        let mut total = self.lines.total;
        let mut lines: Vec<Line> = self.lines.kept.into_vec();
        let mut if_lost = self.if_lost;
        for turbine in &lost {
            if let Some(more) = if_lost.remove(turbine) {
                total += more.total;
                lines.extend(more.kept.into_vec());
            }
        }
        lines.sort();
        let mut out = format!("{} in scenario time (seed {})\n", meta.scenario, meta.seed);
        if let Some(note) = lock_note(meta) {
            out.push_str(&format!("  {note}\n"));
        }
        for l in lines.iter().take(MAX_LINES) {
            out.push_str(&format!("  {}  {}\n", ScenarioClock::format(l.t), l.text));
        }
        if total > MAX_LINES {
            out.push_str(&format!(
                "  ... {} more events in history.jsonl and report.html\n",
                total - MAX_LINES
            ));
        }
        out
    }
}

/// What a fault on a role a member plays says of it: ` (lock-leader; lock-2 leads of lock-1,
/// lock-2, lock-3)`, or nothing.
fn role(e: &Event) -> String {
    let role = e.s("role");
    if role.is_empty() {
        return role;
    }
    let leader = match e.s("leader").as_str() {
        "" | "null" => "no member leads".to_string(),
        l => format!("{l} leads"),
    };
    let members = e.s("members");
    let of = if members.is_empty() {
        String::new()
    } else {
        format!(" of {members}")
    };
    format!(" ({role}; {leader}{of})")
}

/// What the lock service itself cannot give a lease-only run: an advisory lock and a Redis
/// key have no token, so a mover that carries none to the shards has nothing a shard could
/// refuse (the reference mover with `--fencing on` draws one under the lock, or by `INCR` in
/// the script that sets the Redis key; a team's mover does as it does).
pub fn lock_note(meta: &RunMeta) -> Option<&'static str> {
    let get = |k: &str| meta.mover.get(k).map(String::as_str);
    let reference = get("command") == Some("reference mover");
    if reference && get("fencing") == Some("on") {
        return None;
    }
    match get("lock") {
        Some("advisory") => Some(
            "advisory locks carry no fencing token: the fenced design draws one from a sequence under the lock (--fencing on)",
        ),
        Some("redis") => Some(
            "Redis mints no fencing token: the fenced design draws one by INCR in the same script as its SET NX PX (--fencing on)",
        ),
        _ => None,
    }
}

/// The sentinel's promotion of Redis's replica, in the story's words (report.html says it too).
pub(crate) fn promotion_line(
    why: Option<String>,
    target: &str,
    holder: Option<String>,
    counter: Option<String>,
) -> String {
    let why = why.unwrap_or_else(|| "the primary went silent".into());
    let key = match holder {
        Some(h) => format!("holding {h}'s lock key"),
        None => "without the lock key".to_string(),
    };
    let counter = match counter {
        Some(c) => format!("its token counter at {c}"),
        None => "no token counter".to_string(),
    };
    format!("sentinel: {why}; promotes {target} (REPLICAOF NO ONE), {key}, {counter}; box-*->lock now reach {target}")
}

/// A scenario time that saturates rather than overflows for an absurd `time_ns`.
fn scenario_ms(clock: &ScenarioClock, run_ns: i64) -> i64 {
    let scale = clock.real_ns_per_scenario_s.max(1) as i128;
    let ms = clock.start_scenario_ms as i128 + run_ns as i128 * 1000 / scale;
    ms.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// `v` between `before` and `after`, or nothing when `v` is empty.
fn wrapped(before: &str, v: String, after: &str) -> String {
    if v.is_empty() {
        v
    } else {
        format!("{before}{v}{after}")
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() || s == "null" {
        "unknown"
    } else {
        s
    }
}

/// Turbine names an anomaly's evidence mentions (`turbine` fields, at any depth).
fn turbines_in(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "turbine" {
                    if let Some(s) = x.as_str() {
                        out.push(s.to_string());
                    }
                } else {
                    out.extend(turbines_in(x));
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| out.extend(turbines_in(x))),
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use chaos_history::{Op, RunMeta};
    use serde_json::json;
    use std::path::Path;

    fn meta(lease_ms: i64) -> RunMeta {
        let case = Path::new(env!("CARGO_MANIFEST_DIR")).join("../checkers/tests/data");
        let dir = std::fs::read_dir(&case)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.join("run.json").is_file())
            .expect("a planted case");
        let text = std::fs::read_to_string(dir.join("run.json")).unwrap();
        let mut m: RunMeta = serde_json::from_str(&text).unwrap();
        m.lease_ms = lease_ms;
        m
    }

    fn op(
        index: u64,
        scenario_s: f64,
        meta: &RunMeta,
        process: &str,
        kind: OpType,
        f: &str,
        value: serde_json::Value,
    ) -> Op {
        let ns = (scenario_s * meta.clock.real_ns_per_scenario_s as f64) as i64;
        Op {
            index,
            time_ns: ns,
            scenario_time: String::new(),
            process: process.into(),
            kind,
            f: f.into(),
            value,
        }
    }

    fn told(fence_after_s: f64) -> String {
        let meta = meta(10_000);
        let history = vec![
            op(
                0,
                44.0,
                &meta,
                "box-4",
                OpType::Ok,
                "acquire",
                json!({"token": 8}),
            ),
            op(
                1,
                44.0 + fence_after_s,
                &meta,
                "box-4",
                OpType::Ok,
                "fence",
                json!({"shard": "shard2", "token": 8}),
            ),
        ];
        let record = RunRecord {
            meta,
            history,
            torn_tail: false,
            audit: None,
            final_state: None,
        };
        story(&record, &chaos_checkers::check(&record))
    }

    #[test]
    fn a_grant_time_fence_that_waits_a_quarter_of_the_lease_is_told() {
        let slow = told(9.7);
        assert!(
            slow.contains(
                "box-4 fences its shards 9.7 s after taking the claim (97% of its 10 s lease)"
            ),
            "{slow}"
        );
        let quick = told(0.3);
        assert!(!quick.contains("fences its shards"), "{quick}");
    }
}
