//! The streaming half of the checker: folds history events one at a time into the little it must remember.

use crate::readings::ReadingSet;
use chaos_history::verb;
use chaos_history::{Op, OpType, ReadingMs, RunMeta};
use serde::Deserialize;
use std::collections::HashMap;

/// A write the resource refused: the history's mover `fail` with `reason: "fenced"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub process: String,
    pub f: String,
    pub token: Option<i64>,
    pub shard_token: Option<i64>,
    pub shard: Option<String>,
    pub time_ns: i64,
}

/// One distinct turbine list an ingest batch named, with the readings
/// acknowledged (`ok`) and uncertain (`info`) for all of them at once: a
/// batch costs one push, not one per turbine.
#[derive(Debug, Default)]
pub(crate) struct IngestGroup {
    pub turbines: Vec<u32>,
    pub acknowledged: ReadingSet,
    pub uncertain: ReadingSet,
}

/// Folds a history, event by event, in constant memory per distinct
/// ingest batch shape: `observe` each event, then `finish` with the
/// audit and the final state. `check` is this over an in-memory history.
#[derive(Debug)]
pub struct HistoryFold {
    pub(crate) turbines: Vec<String>,
    turbine_index: HashMap<String, u32>,
    pub(crate) groups: Vec<IngestGroup>,
    group_index: HashMap<Vec<u32>, u32>,
    /// The group each shard's last batch used: batches repeat their list.
    last_group_by_shard: Vec<(String, u32)>,
    /// The group of each list a caller numbered ([`TurbineList`]): a batch
    /// whose list is known costs no comparison of names at all.
    group_of_list: HashMap<u64, u32>,
    pub(crate) refusals: Vec<Refusal>,
    /// The nemesis's lines and each box's view of its lease (`notes.rs`), for the moments reached.
    pub(crate) notes: Vec<crate::notes::Note>,
    /// Ingest batches, by shard (its number in `shards`) and `ts_ms`, of which one line
    /// was seen and not yet the other: an invoke still waiting for its answer, or (lines
    /// out of order) an answer whose invoke comes later. Forgotten once both are seen;
    /// invokes never answered count as uncertain (`info`) at the end, whatever the lines' order.
    in_flight: HashMap<(u32, i64), Flight>,
    /// Answers seen before their invoke, now in `in_flight` (at most `MAX_EARLY_ANSWERS`).
    early_answers: usize,
    shards: Vec<String>,
    pub(crate) events: u64,
    /// Ingest readings (turbine x batch) by completion.
    pub(crate) readings_acknowledged: u64,
    pub(crate) readings_uncertain: u64,
    pub(crate) readings_failed: u64,
    /// Ingest completions whose value did not say which readings.
    pub(crate) unreadable_ingest: u64,
    pub(crate) torn_tail: bool,
}

impl HistoryFold {
    /// Events observed so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn new(meta: &RunMeta) -> HistoryFold {
        let mut fold = HistoryFold {
            turbines: Vec::new(),
            turbine_index: HashMap::new(),
            groups: Vec::new(),
            group_index: HashMap::new(),
            last_group_by_shard: Vec::new(),
            group_of_list: HashMap::new(),
            refusals: Vec::new(),
            notes: Vec::new(),
            in_flight: HashMap::new(),
            early_answers: 0,
            shards: Vec::new(),
            events: 0,
            readings_acknowledged: 0,
            readings_uncertain: 0,
            readings_failed: 0,
            unreadable_ingest: 0,
            torn_tail: false,
        };
        for t in meta.owners.keys() {
            fold.turbine(t);
        }
        for s in &meta.seeded {
            fold.turbine(&s.turbine);
        }
        for p in &meta.plan {
            fold.turbine(&p.turbine);
        }
        fold
    }

    /// The turbine's index, adding it when first named.
    pub(crate) fn turbine(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.turbine_index.get(name) {
            return i;
        }
        let i = self.turbines.len() as u32;
        self.turbines.push(name.to_string());
        self.turbine_index.insert(name.to_string(), i);
        i
    }

    /// Whether the fold keeps this line whole (a fault, a box's view of its lease): such a
    /// line must come through `observe` or `observe_line`, not `observe_fields`.
    pub fn keeps_whole(process: &str, f: &str, kind: OpType) -> bool {
        crate::notes::wanted(process, f, kind)
    }

    /// The history file ended in a torn line: the run was cut short.
    pub fn note_torn_tail(&mut self) {
        self.torn_tail = true;
    }

    /// Fold one event.
    pub fn observe(&mut self, op: &Op) {
        self.notes.extend(crate::notes::Note::of(op));
        let ingest = op.f == verb::INGEST && op.process.starts_with("ingest");
        if op.kind == OpType::Invoke && !ingest {
            // Invocations promise nothing: only completions are judged (an
            // ingest invoke is remembered until it completes).
            self.events += 1;
            return;
        }
        let v = &op.value;
        let str_of = |k: &str| v.get(k).and_then(|x| x.as_str());
        let int_of = |k: &str| v.get(k).and_then(|x| x.as_i64());
        let ingest = op.f == verb::INGEST;
        self.observe_event(Event {
            kind: op.kind,
            process: &op.process,
            f: &op.f,
            time_ns: op.time_ns,
            // Read whatever `f` says, as `observe_line` does: a refusal is a
            // `fail` with `reason: "fenced"` from any process but the ingest.
            reason: str_of("reason"),
            token: int_of("token"),
            shard_token: int_of("shard_token"),
            shard: str_of("shard"),
            ts_ms: int_of("ts_ms"),
            turbines: if ingest {
                v.get("turbines")
                    .and_then(|t| t.as_array())
                    .map(|a| Names::Json(a.as_slice()))
            } else {
                None
            },
        });
    }

    /// Fold one line of `history.jsonl` without building a `serde_json::Value`
    /// (ingest lines carry every turbine's name: decoding them borrowed is
    /// what keeps `chaos check DIR` on a 10 M-event history in seconds).
    /// Same result as decoding the line into an `Op` and calling `observe`.
    pub fn observe_line(&mut self, line: &str) -> Result<(), serde_json::Error> {
        match serde_json::from_str::<LineView>(line) {
            // A fault or a box's view of its lease: kept whole, by the general road (a few per run).
            Ok(l) if crate::notes::wanted(l.process, l.f, l.kind) => {
                let op: Op = serde_json::from_str(line)?;
                self.observe(&op);
                Ok(())
            }
            Ok(l) => {
                let v = l.value.unwrap_or_default();
                self.observe_event(Event {
                    kind: l.kind,
                    process: l.process,
                    f: l.f,
                    time_ns: l.time_ns,
                    reason: v.reason,
                    token: v.token,
                    shard_token: v.shard_token,
                    shard: v.shard,
                    ts_ms: v.ts_ms,
                    turbines: v.turbines.as_deref().map(Names::Text),
                });
                Ok(())
            }
            // A value shaped unlike the ingest's (a field of another type): take the slow, general road.
            Err(_) => {
                let op: Op = serde_json::from_str(line)?;
                self.observe(&op);
                Ok(())
            }
        }
    }

    /// Fold one event from the fields the fold reads, decoded by the caller
    /// (`chaos check` decodes each line once for every reader). Same result
    /// as `observe` of the `Op` when each field is what `Value::as_str` or
    /// `Value::as_i64` gives of the op's `value` (`None` when absent or of
    /// another type), and `turbines` is the `value.turbines` of an `ingest`
    /// event when it is an array of strings (`None` when absent or not an
    /// array; an array holding anything but strings must go to `observe`). A line
    /// [`HistoryFold::keeps_whole`] names must go to `observe` or `observe_line`.
    pub fn observe_fields(&mut self, e: &FoldEvent) {
        let ingest = e.f == verb::INGEST && e.process.starts_with("ingest");
        if e.kind == OpType::Invoke && !ingest {
            self.events += 1;
            return;
        }
        self.observe_event(Event {
            kind: e.kind,
            process: e.process,
            f: e.f,
            time_ns: e.time_ns,
            reason: e.reason,
            token: e.token,
            shard_token: e.shard_token,
            shard: e.shard,
            ts_ms: e.ts_ms,
            turbines: match e.f {
                verb::INGEST => e.turbines.map(Names::Listed),
                _ => None,
            },
        });
    }

    fn observe_event(&mut self, e: Event) {
        self.events += 1;
        match e.kind {
            kind if e.f == verb::INGEST && e.process.starts_with("ingest") => {
                self.observe_ingest(&e, kind)
            }
            OpType::Invoke => {}
            OpType::Fail if e.reason == Some(verb::FENCED) => {
                self.refusals.push(Refusal {
                    process: e.process.to_string(),
                    f: e.f.to_string(),
                    token: e.token,
                    shard_token: e.shard_token,
                    shard: e.shard.map(str::to_string),
                    time_ns: e.time_ns,
                });
            }
            _ => {}
        }
    }

    fn observe_ingest(&mut self, e: &Event, kind: OpType) {
        let (Some(shard), Some(ts_ms), Some(turbines)) = (e.shard, e.ts_ms, e.turbines) else {
            if kind != OpType::Fail && kind != OpType::Invoke {
                self.unreadable_ingest += 1;
            }
            return;
        };
        let key = (self.shard_no(shard), ts_ms);
        if kind == OpType::Invoke {
            let g = self.group(shard, turbines);
            let flight = self.in_flight.entry(key).or_default();
            if flight.answered {
                self.in_flight.remove(&key);
                self.early_answers -= 1;
            } else {
                (flight.invoked, flight.group) = (true, g);
            }
            return;
        }
        match self.in_flight.get(&key) {
            Some(f) if f.invoked => {
                self.in_flight.remove(&key);
            }
            Some(_) => {}
            // Its invoke may follow: remembered, up to a limit (past it the invoke stays
            // open and its readings uncertain, which accuses nobody).
            None if self.early_answers < MAX_EARLY_ANSWERS => {
                self.early_answers += 1;
                let answered = Flight {
                    answered: true,
                    ..Flight::default()
                };
                self.in_flight.insert(key, answered);
            }
            None => {}
        }
        let n = turbines.len() as u64;
        match kind {
            OpType::Fail => {
                self.readings_failed += n;
                return;
            }
            OpType::Ok => self.readings_acknowledged += n,
            _ => self.readings_uncertain += n,
        }
        let g = self.group(shard, turbines);
        let group = &mut self.groups[g as usize];
        if kind == OpType::Ok {
            group.acknowledged.push(ts_ms);
        } else {
            group.uncertain.push(ts_ms);
        }
    }

    /// The group for a batch's turbine list; the shard's previous list is
    /// compared first (string equality), hashing only when the list changed.
    fn group(&mut self, shard: &str, names: Names) -> u32 {
        if let Names::Listed(list) = names {
            if let Some(&g) = self.group_of_list.get(&list.key) {
                return g;
            }
            let g = self.group_by_names(shard, names);
            // A caller that numbers lists without end must not make this grow without end.
            if self.group_of_list.len() >= MAX_LISTS_KEPT {
                self.group_of_list.clear();
            }
            self.group_of_list.insert(list.key, g);
            return g;
        }
        self.group_by_names(shard, names)
    }

    fn group_by_names(&mut self, shard: &str, names: Names) -> u32 {
        if let Some(&(_, g)) = self.last_group_by_shard.iter().find(|(s, _)| s == shard) {
            let members = &self.groups[g as usize].turbines;
            let same = members.len() == names.len()
                && members
                    .iter()
                    .enumerate()
                    .all(|(i, &t)| names.get(i) == Some(self.turbines[t as usize].as_str()));
            if same {
                return g;
            }
        }
        let members: Vec<u32> = (0..names.len())
            .filter_map(|i| names.get(i))
            .map(|n| self.turbine(n))
            .collect();
        let g = match self.group_index.get(&members) {
            Some(&g) => g,
            None => {
                let g = self.groups.len() as u32;
                self.group_index.insert(members.clone(), g);
                self.groups.push(IngestGroup {
                    turbines: members,
                    ..IngestGroup::default()
                });
                g
            }
        };
        match self
            .last_group_by_shard
            .iter_mut()
            .find(|(s, _)| s == shard)
        {
            Some(slot) => slot.1 = g,
            None => self.last_group_by_shard.push((shard.to_string(), g)),
        }
        g
    }

    /// The refusals in the order their lines say (time, then the rest), each once: a line
    /// written twice is one refusal.
    pub(crate) fn settle_refusals(&mut self) {
        let key = |r: &Refusal| {
            (
                r.time_ns,
                r.process.clone(),
                r.f.clone(),
                r.token,
                r.shard_token,
                r.shard.clone(),
            )
        };
        self.refusals.sort_by_cached_key(key);
        self.refusals.dedup();
        crate::notes::settle(&mut self.notes);
    }

    /// The shard's number in `shards`, adding it when first named.
    fn shard_no(&mut self, shard: &str) -> u32 {
        match self.shards.iter().position(|s| s == shard) {
            Some(i) => i as u32,
            None => {
                self.shards.push(shard.to_string());
                (self.shards.len() - 1) as u32
            }
        }
    }

    /// Ingest batches invoked that never completed: they may or may not have
    /// been written, like an `info`. Returns how many readings that is.
    pub(crate) fn settle_in_flight(&mut self) -> u64 {
        let mut open: Vec<((u32, i64), u32)> = std::mem::take(&mut self.in_flight)
            .into_iter()
            .filter(|(_, f)| f.invoked && !f.answered)
            .map(|(key, f)| (key, f.group))
            .collect();
        // Taken in the order the readings say, not the order a map holds them.
        open.sort_unstable();
        let mut readings = 0;
        for ((_, ts_ms), g) in open {
            let group = &mut self.groups[g as usize];
            group.uncertain.push(ts_ms);
            readings += group.turbines.len() as u64;
        }
        readings
    }
}

/// Lists a fold remembers by their caller's number ([`TurbineList::key`]).
const MAX_LISTS_KEPT: usize = 4096;

/// Ingest answers a fold remembers while their invoke has not been read (lines out of order).
const MAX_EARLY_ANSWERS: usize = 1 << 20;

/// One ingest batch of which one line was read and not yet the other.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Flight {
    /// Its turbine list (set by the invoke).
    group: u32,
    invoked: bool,
    answered: bool,
}

/// The fields of one event that the fold reads, for [`HistoryFold::observe_fields`].
#[derive(Debug, Clone, Copy)]
pub struct FoldEvent<'a> {
    pub kind: OpType,
    pub process: &'a str,
    pub f: &'a str,
    pub time_ns: i64,
    pub reason: Option<&'a str>,
    pub token: Option<i64>,
    pub shard_token: Option<i64>,
    pub shard: Option<&'a str>,
    pub ts_ms: Option<ReadingMs>,
    /// An ingest batch's turbine names (read only when `f` is `ingest`).
    pub turbines: Option<TurbineList<'a>>,
}

/// An ingest batch's turbine list, decoded once by the caller and numbered:
/// the fold finds the group of a list it has seen by its number alone.
#[derive(Debug, Clone, Copy)]
pub struct TurbineList<'a> {
    /// The caller's number for this list: the same number must always come
    /// with the same names (two numbers may name the same list).
    pub key: u64,
    pub names: &'a [String],
}

/// The fields of one event the fold reads, whichever way it was decoded.
struct Event<'a> {
    kind: OpType,
    process: &'a str,
    f: &'a str,
    time_ns: i64,
    reason: Option<&'a str>,
    token: Option<i64>,
    shard_token: Option<i64>,
    shard: Option<&'a str>,
    ts_ms: Option<i64>,
    turbines: Option<Names<'a>>,
}

/// An ingest batch's turbine names, from a `Value`, borrowed from the line,
/// or a list the caller decoded.
#[derive(Clone, Copy)]
enum Names<'a> {
    Json(&'a [serde_json::Value]),
    Text(&'a [&'a str]),
    Listed(TurbineList<'a>),
}

impl<'a> Names<'a> {
    fn len(&self) -> usize {
        match self {
            Names::Json(a) => a.len(),
            Names::Text(a) => a.len(),
            Names::Listed(l) => l.names.len(),
        }
    }

    fn get(&self, i: usize) -> Option<&'a str> {
        match *self {
            Names::Json(a) => a[i].as_str(),
            Names::Text(a) => Some(a[i]),
            Names::Listed(l) => Some(&l.names[i]),
        }
    }
}

/// One history line, borrowed: a string with an escape in it fails to
/// borrow and the line takes the general road instead.
#[derive(Deserialize)]
struct LineView<'a> {
    time_ns: i64,
    process: &'a str,
    #[serde(rename = "type")]
    kind: OpType,
    f: &'a str,
    #[serde(default, borrow)]
    value: Option<ValueView<'a>>,
}

/// The `value` fields the fold reads; every other field is skipped unparsed.
#[derive(Deserialize, Default)]
struct ValueView<'a> {
    #[serde(default)]
    reason: Option<&'a str>,
    #[serde(default)]
    token: Option<i64>,
    #[serde(default)]
    shard_token: Option<i64>,
    #[serde(default)]
    shard: Option<&'a str>,
    #[serde(default)]
    ts_ms: Option<i64>,
    #[serde(default, borrow)]
    turbines: Option<Vec<&'a str>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `observe` and `observe_line` fold the same line the same way, even a
    /// process other than the ingest that names its operation `ingest`.
    #[test]
    fn observe_and_observe_line_agree_on_a_fenced_fail_named_ingest() {
        let meta: RunMeta = serde_json::from_value(serde_json::json!({
            "scenario": "t", "seed": 0,
            "clock": {"start_unix_ns": 0, "start_scenario_ms": 0, "real_ns_per_scenario_s": 10_000_000, "scenario_day_unix_ms": 0},
            "job": "j", "shards": ["shard1"], "owners": {}, "plan": [], "seeded": [],
            "lease_ms": 1000, "copy_ms": 1000, "strict_duplicates": false, "mover": {},
            "end_scenario_ms": 0, "completed": true, "incomplete_reason": null
        }))
        .expect("a minimal run");
        let line = r#"{"index":0,"time_ns":5,"scenario_time":"00:00:00.0","process":"box-1","type":"fail","f":"ingest","value":{"reason":"fenced","token":3,"shard_token":4,"shard":"shard1"}}"#;
        let op: Op = serde_json::from_str(line).unwrap();
        let mut by_op = HistoryFold::new(&meta);
        by_op.observe(&op);
        let mut by_line = HistoryFold::new(&meta);
        by_line.observe_line(line).unwrap();
        assert_eq!(by_op.refusals, by_line.refusals);
        assert_eq!(by_op.refusals.len(), 1);
    }

    /// An ingest batch invoked and never answered is uncertain at the end,
    /// folded the same way from an `Op` and from its line; one answered is not.
    #[test]
    fn an_unanswered_ingest_invoke_is_uncertain_either_way() {
        let meta: RunMeta = serde_json::from_value(serde_json::json!({
            "scenario": "t", "seed": 0,
            "clock": {"start_unix_ns": 0, "start_scenario_ms": 0, "real_ns_per_scenario_s": 10_000_000, "scenario_day_unix_ms": 0},
            "job": "j", "shards": ["shard1"], "owners": {}, "plan": [], "seeded": [],
            "lease_ms": 1000, "copy_ms": 1000, "strict_duplicates": false, "mover": {},
            "end_scenario_ms": 0, "completed": true, "incomplete_reason": null
        }))
        .expect("a minimal run");
        let lines = [
            r#"{"index":0,"time_ns":0,"scenario_time":"00:00:00.0","process":"ingest","type":"invoke","f":"ingest","value":{"shard":"shard1","ts_ms":0,"turbines":["T1","T2"]}}"#,
            r#"{"index":1,"time_ns":1,"scenario_time":"00:00:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard1","ts_ms":0,"turbines":["T1","T2"]}}"#,
            r#"{"index":2,"time_ns":2,"scenario_time":"00:00:02.0","process":"ingest","type":"invoke","f":"ingest","value":{"shard":"shard1","ts_ms":2000,"turbines":["T1","T2"]}}"#,
        ];
        let mut by_op = HistoryFold::new(&meta);
        let mut by_line = HistoryFold::new(&meta);
        for line in lines {
            by_op.observe(&serde_json::from_str::<Op>(line).unwrap());
            by_line.observe_line(line).unwrap();
        }
        assert_eq!(by_op.in_flight, by_line.in_flight);
        assert_eq!((by_op.events, by_line.events), (3, 3));
        assert_eq!(by_op.settle_in_flight(), 2);
        assert_eq!(by_line.settle_in_flight(), 2);
        let uncertain = by_op.groups[0].uncertain.clone().into_runs();
        assert_eq!(uncertain, by_line.groups[0].uncertain.clone().into_runs());
        assert_eq!(uncertain.len(), 1);
        assert_eq!((uncertain[0].first_ms, uncertain[0].last_ms), (2000, 2000));
    }

    /// `observe_fields` with numbered lists folds as `observe` does: lists
    /// that repeat, change, come back under another number, and events of
    /// every kind from the ingest and from others.
    #[test]
    fn observe_fields_with_numbered_lists_agrees_with_observe() {
        let meta: RunMeta = serde_json::from_value(serde_json::json!({
            "scenario": "t", "seed": 0,
            "clock": {"start_unix_ns": 0, "start_scenario_ms": 0, "real_ns_per_scenario_s": 10_000_000, "scenario_day_unix_ms": 0},
            "job": "j", "shards": ["shard1"], "owners": {"T9": "box-1"}, "plan": [], "seeded": [],
            "lease_ms": 1000, "copy_ms": 1000, "strict_duplicates": false, "mover": {},
            "end_scenario_ms": 0, "completed": true, "incomplete_reason": null
        }))
        .expect("a minimal run");
        let a: Vec<String> = vec!["T1".into(), "T2".into()];
        let b: Vec<String> = vec!["T2".into(), "T9".into(), "T3".into()];
        /// process, kind, f, value, and the list's number and names.
        type Event<'a> = (
            &'a str,
            OpType,
            &'a str,
            serde_json::Value,
            Option<(u64, &'a Vec<String>)>,
        );
        let events: Vec<Event> = vec![
            (
                "ingest",
                OpType::Invoke,
                "ingest",
                serde_json::json!({"shard": "shard1", "ts_ms": 0, "turbines": a}),
                Some((1, &a)),
            ),
            (
                "ingest",
                OpType::Ok,
                "ingest",
                serde_json::json!({"shard": "shard1", "ts_ms": 0, "turbines": a}),
                Some((1, &a)),
            ),
            (
                "ingest",
                OpType::Invoke,
                "ingest",
                serde_json::json!({"shard": "shard2", "ts_ms": 2, "turbines": b}),
                Some((2, &b)),
            ),
            (
                "ingest",
                OpType::Info,
                "ingest",
                serde_json::json!({"shard": "shard2", "ts_ms": 2, "turbines": b}),
                Some((2, &b)),
            ),
            (
                "ingest",
                OpType::Fail,
                "ingest",
                serde_json::json!({"shard": "shard1", "ts_ms": 4, "turbines": a}),
                Some((7, &a)),
            ),
            (
                "ingest",
                OpType::Ok,
                "ingest",
                serde_json::json!({"shard": "shard1", "ts_ms": 6, "turbines": a}),
                Some((7, &a)),
            ),
            (
                "ingest",
                OpType::Invoke,
                "ingest",
                serde_json::json!({"shard": "shard1", "ts_ms": 8, "turbines": b}),
                Some((3, &b)),
            ),
            (
                "ingest",
                OpType::Ok,
                "ingest",
                serde_json::json!({"shard": "shard1", "ts_ms": 10}),
                None,
            ),
            (
                "box-1",
                OpType::Invoke,
                "copy",
                serde_json::json!({"turbine": "T1"}),
                None,
            ),
            (
                "box-1",
                OpType::Fail,
                "copy",
                serde_json::json!({"reason": "fenced", "token": 3, "shard_token": 4, "shard": "shard1"}),
                None,
            ),
            (
                "box-2",
                OpType::Fail,
                "ingest",
                serde_json::json!({"reason": "fenced", "token": 5, "turbines": a}),
                Some((1, &a)),
            ),
        ];
        let mut by_op = HistoryFold::new(&meta);
        let mut by_fields = HistoryFold::new(&meta);
        for (i, (process, kind, f, value, list)) in events.into_iter().enumerate() {
            let op = Op {
                index: i as u64,
                time_ns: i as i64,
                scenario_time: String::new(),
                process: process.into(),
                kind,
                f: f.into(),
                value,
            };
            by_op.observe(&op);
            let v = &op.value;
            by_fields.observe_fields(&FoldEvent {
                kind,
                process,
                f,
                time_ns: op.time_ns,
                reason: v.get("reason").and_then(|x| x.as_str()),
                token: v.get("token").and_then(|x| x.as_i64()),
                shard_token: v.get("shard_token").and_then(|x| x.as_i64()),
                shard: v.get("shard").and_then(|x| x.as_str()),
                ts_ms: v.get("ts_ms").and_then(|x| x.as_i64()),
                turbines: list.map(|(key, names)| TurbineList { key, names }),
            });
        }
        assert_eq!(by_op.turbines, by_fields.turbines);
        assert_eq!(by_op.refusals, by_fields.refusals);
        assert_eq!(by_op.in_flight, by_fields.in_flight);
        assert_eq!(
            (
                by_op.events,
                by_op.readings_acknowledged,
                by_op.readings_uncertain,
                by_op.readings_failed,
                by_op.unreadable_ingest
            ),
            (
                by_fields.events,
                by_fields.readings_acknowledged,
                by_fields.readings_uncertain,
                by_fields.readings_failed,
                by_fields.unreadable_ingest
            )
        );
        assert_eq!(by_op.groups.len(), by_fields.groups.len());
        for (x, y) in by_op.groups.iter().zip(&by_fields.groups) {
            assert_eq!(x.turbines, y.turbines);
            assert_eq!(
                x.acknowledged.clone().into_runs(),
                y.acknowledged.clone().into_runs()
            );
            assert_eq!(
                x.uncertain.clone().into_runs(),
                y.uncertain.clone().into_runs()
            );
        }
    }

    #[test]
    fn ingest_lines_decode_borrowed_without_the_general_road() {
        let line = r#"{"index":7,"time_ns":5,"scenario_time":"21:40:00.0","process":"ingest","type":"ok","f":"ingest","value":{"shard":"shard3","ts_ms":1776116400000,"turbines":["AP-0107","AP-0163"]}}"#;
        let view: LineView =
            serde_json::from_str(line).expect("the borrowed view decodes an ingest line");
        assert_eq!(
            view.value.unwrap().turbines.unwrap(),
            vec!["AP-0107", "AP-0163"]
        );
    }
}
