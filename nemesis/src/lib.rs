//! The nemesis: faults as paired verbs (pause/resume, stop/start, latency/heal ...), scripted or generated from one seed.
//!
//! Invariant: pure data and arithmetic. No processes, sockets, clocks or
//! tokio: the harness applies a `Schedule` to a cluster; this crate only
//! says what to do and when, and refuses a schedule that names what does
//! not exist.

/// Scenario milliseconds, every time and duration of this crate (the same as
/// `chaos_history::ScenarioMs`; the nemesis depends on no other crate of the house).
pub type ScenarioMs<T = i64> = T;

mod fault;
mod link;
mod random;
mod schedule;
mod topology;
mod trigger;

pub use fault::{
    closing_verb, is_closing_verb, Family, Fault, FaultKind, Stream, ROLES, VERB_PAIRS,
};
pub use link::{Link, ARROW};
pub use random::{generate, RandomProfile, Rng, TargetSpread};
pub use schedule::{expand, NemesisOp, Schedule};
pub use topology::{LinkPattern, Topology};
pub use trigger::{Event, Inside, Trigger, Who};

/// A schedule or fault that cannot be applied, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NemesisError {
    #[error("fault {index} ({kind}): unknown {what} '{name}' (known: {known})")]
    UnknownTarget {
        index: usize,
        kind: String,
        what: &'static str,
        name: String,
        known: String,
    },
    #[error("fault {index} ({kind}): {field} must not be negative (got {value})")]
    Negative {
        index: usize,
        kind: String,
        field: &'static str,
        value: i64,
    },
    #[error(
        "fault {index} (latency): jitter_ms {jitter_ms} is larger than latency_ms {latency_ms}"
    )]
    JitterOverLatency {
        index: usize,
        latency_ms: ScenarioMs,
        jitter_ms: ScenarioMs,
    },
    #[error("fault {index} ({kind}): {detail}")]
    Invalid {
        index: usize,
        kind: String,
        detail: String,
    },
    #[error(
        "fault {index} ({kind}) at {at} ends at {end}, after the scenario ends at {scenario_end}"
    )]
    OutsideScenario {
        index: usize,
        kind: String,
        at: String,
        end: String,
        scenario_end: String,
    },
}
