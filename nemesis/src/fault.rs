//! One fault: what, on which target, from when and for how long (scenario ms).

use crate::link::Link;
use crate::ScenarioMs;
use serde::{Deserialize, Serialize};

/// Which direction of a link a toxic applies to (Toxiproxy's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Client to server.
    Upstream,
    /// Server to client.
    #[default]
    Downstream,
    /// Both directions (two toxics).
    Both,
}

impl Stream {
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Stream::Upstream => &["upstream"],
            Stream::Downstream => &["downstream"],
            Stream::Both => &["upstream", "downstream"],
        }
    }
}

/// What a fault does. Durations and latencies are scenario ms: the harness
/// scales them to real time (a 2,100 ms scenario latency is 21 real ms at
/// the default scale).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultKind {
    /// SIGSTOP a mover, SIGCONT at the end. `freezer` asks the docker backend for the cgroup freezer.
    Pause {
        target: String,
        #[serde(default)]
        freezer: bool,
    },
    /// SIGKILL a mover; start it again at the end (when a duration is given).
    Kill { target: String },
    /// Stop a database (fast shutdown), start it again at the end with its data.
    Stop { target: String },
    /// Immediate-mode stop (no checkpoint; recovery on start). With `lose_unsynced`, on a node
    /// that runs asynchronous commit (`[cluster] asynchronous_commit`): the crash drops the
    /// commits it acknowledged and had not yet written (the WAL buffers die with the server).
    Crash {
        target: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        lose_unsynced: bool,
    },
    /// A box's or node's CPU starved to `share` of one CPU (0.05: five ms in every hundred),
    /// as under a noisy neighbour: the process runs, slowly. Restored at the end.
    Cpu { target: String, share: f64 },
    /// A Postgres node's commits held: it accepts work, but no commit returns until the end,
    /// as under a saturated disk (reads answer).
    Stall { target: String },
    Latency {
        link: String,
        latency_ms: ScenarioMs,
        #[serde(default)]
        jitter_ms: ScenarioMs,
        #[serde(default)]
        stream: Stream,
    },
    Bandwidth {
        link: String,
        rate_kb: i64,
        #[serde(default)]
        stream: Stream,
    },
    /// Refuse new connections and cut open ones.
    Down { link: String },
    /// Black-hole: data is dropped, connections held open.
    Timeout {
        link: String,
        #[serde(default)]
        timeout_ms: ScenarioMs,
        #[serde(default)]
        stream: Stream,
    },
    /// Reset connections (TCP RST) after `timeout_ms`.
    ResetPeer {
        link: String,
        #[serde(default)]
        timeout_ms: ScenarioMs,
        #[serde(default)]
        stream: Stream,
    },
    /// A box's or a node's wall clock (libfaketime; never its monotonic clock): moved by
    /// `offset_ms`; with `rate`, running that many times as fast from the fault's start (0.95:
    /// 5% slow); with `strobe_ms`, jumping between the offset and none every `strobe_ms` (for
    /// `strobe_for_s`, else the whole fault). Scenario ms, like every duration.
    Clock {
        target: String,
        #[serde(default)]
        offset_ms: ScenarioMs,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strobe_ms: Option<ScenarioMs>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strobe_for_s: Option<f64>,
    },
}

/// The six fault families: each is applied in one place by the harness (`faults/`), with
/// the same small interface (how early its work begins, apply, heal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Signals to a mover: pause/resume (SIGSTOP/SIGCONT), kill/start-mover.
    Signal,
    /// A database server: stop/start, crash/start.
    Database,
    /// A toxic or a cut on a link, through the proxy: latency, bandwidth, down, timeout,
    /// reset_peer, each healed by `heal`.
    Link,
    /// A box's or node's wall clock (libfaketime): clock/clock-reset.
    Clock,
    /// A box's or node's CPU share (cgroups; docker: the container's quota): cpu/cpu-restore.
    Cpu,
    /// A Postgres node's commits held: stall/unstall.
    Stall,
}

/// Where each kind keeps what it names (one list for `target` and `target_mut`).
macro_rules! target_of {
    ($kind:expr) => {
        match $kind {
            FaultKind::Pause { target, .. }
            | FaultKind::Kill { target }
            | FaultKind::Stop { target }
            | FaultKind::Crash { target, .. }
            | FaultKind::Cpu { target, .. }
            | FaultKind::Stall { target }
            | FaultKind::Clock { target, .. } => target,
            FaultKind::Latency { link, .. }
            | FaultKind::Bandwidth { link, .. }
            | FaultKind::Down { link }
            | FaultKind::Timeout { link, .. }
            | FaultKind::ResetPeer { link, .. } => link,
        }
    };
}

impl FaultKind {
    /// The family that applies it.
    pub fn family(&self) -> Family {
        match self {
            FaultKind::Pause { .. } | FaultKind::Kill { .. } => Family::Signal,
            FaultKind::Stop { .. } | FaultKind::Crash { .. } => Family::Database,
            FaultKind::Clock { .. } => Family::Clock,
            FaultKind::Cpu { .. } => Family::Cpu,
            FaultKind::Stall { .. } => Family::Stall,
            FaultKind::Latency { .. }
            | FaultKind::Bandwidth { .. }
            | FaultKind::Down { .. }
            | FaultKind::Timeout { .. }
            | FaultKind::ResetPeer { .. } => Family::Link,
        }
    }

    /// The verb that starts it, as the history records it.
    pub fn verb(&self) -> &'static str {
        match self {
            FaultKind::Pause { .. } => "pause",
            FaultKind::Kill { .. } => "kill",
            FaultKind::Stop { .. } => "stop",
            FaultKind::Crash { .. } => "crash",
            FaultKind::Latency { .. } => "latency",
            FaultKind::Bandwidth { .. } => "bandwidth",
            FaultKind::Down { .. } => "down",
            FaultKind::Timeout { .. } => "timeout",
            FaultKind::ResetPeer { .. } => "reset_peer",
            FaultKind::Clock { .. } => "clock",
            FaultKind::Cpu { .. } => "cpu",
            FaultKind::Stall { .. } => "stall",
        }
    }

    /// The verb that undoes it.
    pub fn heal_verb(&self) -> &'static str {
        match self {
            FaultKind::Pause { .. } => "resume",
            FaultKind::Kill { .. } => "start-mover",
            FaultKind::Stop { .. } | FaultKind::Crash { .. } => "start",
            FaultKind::Clock { .. } => "clock-reset",
            FaultKind::Cpu { .. } => "cpu-restore",
            FaultKind::Stall { .. } => "unstall",
            _ => "heal",
        }
    }

    /// The node, box or link pattern it names.
    pub fn target(&self) -> &str {
        target_of!(self)
    }

    /// The node, box or link pattern it names, to change (a role resolved, an alias named).
    pub fn target_mut(&mut self) -> &mut String {
        target_of!(self)
    }

    /// The role it targets, resolved when its trigger fires: a box fault on `holder` or
    /// `previous-holder`, or a link fault from one (`holder->routing`, `previous-holder->shard*`).
    pub fn role(&self) -> Option<&'static str> {
        let who = match self {
            FaultKind::Pause { target, .. }
            | FaultKind::Kill { target }
            | FaultKind::Cpu { target, .. }
            | FaultKind::Clock { target, .. } => target.as_str(),
            k if k.is_link_fault() => Link::parse(k.target()).map_or("", |l| l.client),
            _ => return None,
        };
        ROLES.iter().copied().find(|r| *r == who)
    }

    /// The same fault with its role made the box `b` (a link fault keeps its node part).
    pub fn for_box(&self, b: &str) -> FaultKind {
        let mut kind = self.clone();
        match &mut kind {
            FaultKind::Pause { target, .. }
            | FaultKind::Kill { target }
            | FaultKind::Cpu { target, .. }
            | FaultKind::Clock { target, .. } => *target = b.to_string(),
            FaultKind::Latency { link, .. }
            | FaultKind::Bandwidth { link, .. }
            | FaultKind::Down { link }
            | FaultKind::Timeout { link, .. }
            | FaultKind::ResetPeer { link, .. } => {
                if let Some(l) = Link::parse(link) {
                    *link = Link::name(b, l.node);
                }
            }
            FaultKind::Stop { .. } | FaultKind::Crash { .. } | FaultKind::Stall { .. } => {}
        }
        kind
    }

    pub fn is_link_fault(&self) -> bool {
        self.family() == Family::Link
    }
}

/// The roles a triggered fault may target: whoever holds the claim when it fires, and whoever
/// held it before.
pub const ROLES: &[&str] = &["holder", "previous-holder"];

/// Every verb that opens a fault window in a history, with the verb that closes it: the one
/// list the history's readers (the report's lanes, the sweep's measures) take their pairs from.
/// `FaultKind::verb` and `FaultKind::heal_verb` are in it (a test holds them to it).
pub const VERB_PAIRS: &[(&str, &str)] = &[
    ("pause", "resume"),
    ("kill", "start-mover"),
    ("stop", "start"),
    ("crash", "start"),
    ("latency", "heal"),
    ("bandwidth", "heal"),
    ("down", "heal"),
    ("timeout", "heal"),
    ("reset_peer", "heal"),
    ("clock", "clock-reset"),
    ("cpu", "cpu-restore"),
    ("stall", "unstall"),
];

/// The verb that closes a window `verb` opens (None: `verb` opens none).
pub fn closing_verb(verb: &str) -> Option<&'static str> {
    VERB_PAIRS.iter().find(|(o, _)| *o == verb).map(|(_, c)| *c)
}

/// Whether `verb` closes a fault window.
pub fn is_closing_verb(verb: &str) -> bool {
    VERB_PAIRS.iter().any(|(_, c)| *c == verb)
}

/// A fault at a scenario time, healed after `duration_ms` (None: healed
/// before the final reads, like every fault).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub at_ms: ScenarioMs,
    pub duration_ms: Option<ScenarioMs>,
    #[serde(flatten)]
    pub kind: FaultKind,
    /// Why it is in the scenario, for the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Land at a moment of the system instead: the trigger is armed at `at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<crate::Trigger>,
    /// A trigger that never fires is then said, not a reason for an `unknown` verdict.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

impl Fault {
    /// A fault at a clock instant.
    pub fn at(at_ms: i64, duration_ms: Option<i64>, kind: FaultKind) -> Fault {
        Fault {
            at_ms,
            duration_ms,
            kind,
            note: None,
            when: None,
            optional: false,
        }
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Fault {
        self.note = Some(note.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_opens_and_closes_with_a_listed_pair() {
        let kinds = [
            FaultKind::Pause {
                target: "b".into(),
                freezer: false,
            },
            FaultKind::Kill { target: "b".into() },
            FaultKind::Stop { target: "n".into() },
            FaultKind::Crash {
                target: "n".into(),
                lose_unsynced: false,
            },
            FaultKind::Latency {
                link: "l".into(),
                latency_ms: 1,
                jitter_ms: 0,
                stream: Stream::Both,
            },
            FaultKind::Bandwidth {
                link: "l".into(),
                rate_kb: 1,
                stream: Stream::Both,
            },
            FaultKind::Down { link: "l".into() },
            FaultKind::Timeout {
                link: "l".into(),
                timeout_ms: 0,
                stream: Stream::Both,
            },
            FaultKind::ResetPeer {
                link: "l".into(),
                timeout_ms: 0,
                stream: Stream::Both,
            },
            FaultKind::Clock {
                target: "b".into(),
                offset_ms: 1,
                rate: None,
                strobe_ms: None,
                strobe_for_s: None,
            },
            FaultKind::Cpu {
                target: "b".into(),
                share: 0.05,
            },
            FaultKind::Stall { target: "n".into() },
        ];
        for k in &kinds {
            assert_eq!(closing_verb(k.verb()), Some(k.heal_verb()), "{k:?}");
            assert!(is_closing_verb(k.heal_verb()));
            assert!(!is_closing_verb(k.verb()));
        }
        assert_eq!(kinds.len(), VERB_PAIRS.len());
        assert_eq!(closing_verb("copy"), None);
    }
}
