//! One history event: an invoke or a completion of an operation by a process (a box, the ingest, the nemesis).

use serde::{Deserialize, Serialize};

/// What a completion says happened. `Info` is "may or may not have":
/// a timeout or a dropped connection. Checkers treat it as unknown, never as `Fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One line of `history.jsonl`.
///
/// `f` names the operation (`acquire`, `renew`, `copy`, `delete`, `ingest`,
/// `pause`, `resume`, `stop`, `start`, `latency`, `heal`, ...); `value` holds
/// its arguments and results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    pub index: u64,
    /// Monotonic ns since the run started.
    pub time_ns: i64,
    /// Scenario time of day, `HH:MM:SS.s`, for a human reading the file.
    pub scenario_time: String,
    pub process: String,
    #[serde(rename = "type")]
    pub kind: OpType,
    pub f: String,
    #[serde(default)]
    pub value: serde_json::Value,
}
