//! One fault: what, on which target, from when and for how long (scenario ms).

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
    /// Immediate-mode stop (no checkpoint; recovery on start).
    Crash { target: String },
    Latency {
        link: String,
        latency_ms: i64,
        #[serde(default)]
        jitter_ms: i64,
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
        timeout_ms: i64,
        #[serde(default)]
        stream: Stream,
    },
    /// Reset connections (TCP RST) after `timeout_ms`.
    ResetPeer {
        link: String,
        #[serde(default)]
        timeout_ms: i64,
        #[serde(default)]
        stream: Stream,
    },
    /// Offset a mover's clock (libfaketime) by `offset_ms`.
    Clock { target: String, offset_ms: i64 },
}

impl FaultKind {
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
        }
    }

    /// The verb that undoes it.
    pub fn heal_verb(&self) -> &'static str {
        match self {
            FaultKind::Pause { .. } => "resume",
            FaultKind::Kill { .. } => "start-mover",
            FaultKind::Stop { .. } | FaultKind::Crash { .. } => "start",
            FaultKind::Clock { .. } => "clock-reset",
            _ => "heal",
        }
    }

    /// The node, box or link pattern it names.
    pub fn target(&self) -> &str {
        match self {
            FaultKind::Pause { target, .. }
            | FaultKind::Kill { target }
            | FaultKind::Stop { target }
            | FaultKind::Crash { target }
            | FaultKind::Clock { target, .. } => target,
            FaultKind::Latency { link, .. }
            | FaultKind::Bandwidth { link, .. }
            | FaultKind::Down { link }
            | FaultKind::Timeout { link, .. }
            | FaultKind::ResetPeer { link, .. } => link,
        }
    }

    pub fn is_link_fault(&self) -> bool {
        matches!(
            self,
            FaultKind::Latency { .. }
                | FaultKind::Bandwidth { .. }
                | FaultKind::Down { .. }
                | FaultKind::Timeout { .. }
                | FaultKind::ResetPeer { .. }
        )
    }
}

/// A fault at a scenario time, healed after `duration_ms` (None: healed
/// before the final reads, like every fault).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub at_ms: i64,
    pub duration_ms: Option<i64>,
    #[serde(flatten)]
    pub kind: FaultKind,
    /// Why it is in the scenario, for the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}
