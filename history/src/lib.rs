//! The history, audit and final-state types: the only interface between running a test and judging it.
//!
//! Invariant: this crate knows nothing about Postgres, tokio or processes. It
//! holds plain data, the scenario clock, a thread-safe JSONL writer and a reader.

mod clock;
mod designs;
mod failover;
mod moments;
mod op;
mod operation;
mod reader;
mod record;
mod runs;
mod view;
mod writer;

pub use clock::{ReadingMs, RealMs, ScenarioClock, ScenarioMs};
pub use designs::{
    ConfigObject, ConfigPointer, ConfigState, ObjectWrite, ObjectWriteKind, ObjectsMeta, Payee,
    Payment, PayoutMeta, System,
};
pub use failover::{
    names as failover_names, FailoverFinal, FailoverMeta, OrderRow, ServerOrders, FAILOVER_SYSTEM,
};
pub use moments::Moment;
pub use op::{Op, OpType};
pub use operation::{verb, Operation, Refusal};
pub use reader::{read_history, History, HistoryReader};
pub use record::{
    Audit, ClaimChange, FinalState, PlanEntry, RunMeta, RunRecord, SeededTurbine, ShardTurbineRuns,
    ShardWrite, ValueCheck, WriteOp, AUDIT_FILE, FINAL_STATE_FILE, HISTORY_FILE, RUN_META_FILE,
};
pub use runs::{Run, RunBuilder};
pub use view::{OpView, Scalar, ValueFields};
pub use writer::HistoryWriter;

/// Errors reading or writing a stored run. Each says its cause in its own
/// message and does not chain it as a `source` too, so a chain printed on
/// one line says it once.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}:{line}: not a history event: {error}")]
    Parse {
        path: String,
        line: u64,
        error: serde_json::Error,
    },
    #[error("{path}: {error}")]
    Json {
        path: String,
        error: serde_json::Error,
    },
}
