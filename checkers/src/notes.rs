//! The few history lines that say what happened to the lease rather than to the rows: the
//! nemesis's faults and each box's own view of its lease (`acquire`, `renew`, `lost`, `done`).
//! The fold keeps them (a handful per run) for the moments a run reached (`reached.rs`).

use chaos_history::verb;
use chaos_history::{Op, OpType};

/// One such line, as the fold keeps it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Note {
    pub time_ns: i64,
    pub process: String,
    pub f: String,
    pub kind: Kind,
    /// The fault's target (a box, a node, a link pattern) and its number in the scenario.
    pub target: Option<String>,
    pub fault: Option<i64>,
    /// The links a link fault acted on (`box-1->routing`).
    pub links: Vec<String>,
    pub token: Option<i64>,
    /// The `reason` a box gave (`lost`, `unreachable`), or the nemesis's `error`.
    pub reason: Option<String>,
}

/// `OpType`, ordered (the fold sorts its notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Ok,
    Fail,
    Info,
}

/// Whether the fold keeps a line of this process, `f` and type: the nemesis's completions, and
/// of a box's lines those that change its view of the lease (an `acquire` that won, a renewal
/// that did not, `lost`, `done`). A box's polls and its renewals that worked, most of its lines
/// in a long run, are not kept: a fold holds a few lines per fault and per grant.
pub(crate) fn wanted(process: &str, f: &str, kind: OpType) -> bool {
    match kind {
        OpType::Invoke => false,
        _ if process == "nemesis" => true,
        _ if !process.starts_with("box-") => false,
        OpType::Ok => f == verb::ACQUIRE || f == verb::DONE,
        _ => f == verb::RENEW || f == verb::LOST,
    }
}

impl Note {
    pub(crate) fn of(op: &Op) -> Option<Note> {
        if !wanted(&op.process, &op.f, op.kind) {
            return None;
        }
        let v = &op.value;
        let str_of = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
        Some(Note {
            time_ns: op.time_ns,
            process: op.process.clone(),
            f: op.f.clone(),
            kind: match op.kind {
                OpType::Ok => Kind::Ok,
                OpType::Fail => Kind::Fail,
                _ => Kind::Info,
            },
            target: str_of("target"),
            fault: v.get("fault").and_then(|x| x.as_i64()),
            links: v
                .get("links")
                .and_then(|l| l.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            token: v.get("token").and_then(|x| x.as_i64()),
            reason: str_of("reason").or_else(|| str_of("error")),
        })
    }
}

/// The notes in the order their lines say, each once (a line written twice is one note).
pub(crate) fn settle(notes: &mut Vec<Note>) {
    notes.sort();
    notes.dedup();
}
