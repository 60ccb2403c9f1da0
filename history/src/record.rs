//! A stored run: what the harness knew before (meta), what clients saw (history), what the resources recorded (audit) and what was left (final state).
//!
//! History conventions, the contract between the mover, the ingest, the
//! nemesis and the checkers (`f`, then the `value` fields):
//! - `ingest` (process `ingest`): `{shard, ts_ms, turbines: [..]}`; `ok` means
//!   every listed reading was acknowledged.
//! - mover (process `box-N`, from its stdout): `acquire` ok `{token}`;
//!   `renew` `{token}`, fail `{token, reason: "lost"|"unreachable"}`;
//!   `copy` `{turbine, from, to, token}` ok `{rows_read, rows_written}`;
//!   `delete` `{turbine, shard, token, why: "source"|"tidy-up"}` ok `{rows}`;
//!   `fence` `{shard, token}`; a refused write is a `fail` with
//!   `{reason: "fenced", token, shard_token, shard}`; `skip` `{turbine}`;
//!   `lost` info `{token, holder}`; `done` ok.
//! - nemesis (process `nemesis`): paired verbs `pause`/`resume`,
//!   `kill`/`start-mover`, `stop`/`start`, `crash`/`start`,
//!   `latency`|`bandwidth`|`down`|`timeout`|`reset_peer`/`heal`, `clock`,
//!   value `{target, ..., scheduled_ms, lag_real_us}`.

use crate::designs::{ConfigState, ObjectWrite, ObjectsMeta, Payment, PayoutMeta, System};
use crate::{Op, ReadingMs, Run, ScenarioClock, ScenarioMs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const RUN_META_FILE: &str = "run.json";
pub const HISTORY_FILE: &str = "history.jsonl";
pub const AUDIT_FILE: &str = "audit.json";
pub const FINAL_STATE_FILE: &str = "final-state.json";

/// One row of the move plan (the routing db's `move_plan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    pub position: i32,
    pub turbine: String,
    pub from: String,
    pub to: String,
}

/// A turbine's seeded history: where it was put and which readings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeededTurbine {
    pub turbine: String,
    pub shard: String,
    pub run: Run,
}

/// What the harness knew about the run before it started: enough for a
/// checker to judge it with no database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    pub scenario: String,
    pub seed: u64,
    /// The system the run tested (runs stored before there was a choice tested the mover).
    #[serde(default)]
    pub system: System,
    /// What a payout run owed (system `payout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payout: Option<PayoutMeta>,
    /// How the objects were laid out (system `ten-objects`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<ObjectsMeta>,
    pub clock: ScenarioClock,
    /// The job's name, the key of its claim row.
    pub job: String,
    pub shards: Vec<String>,
    /// Every turbine and the shard its final routing names.
    pub owners: BTreeMap<String, String>,
    pub plan: Vec<PlanEntry>,
    pub seeded: Vec<SeededTurbine>,
    /// Lease length and copy time, scenario ms.
    pub lease_ms: ScenarioMs,
    pub copy_ms: ScenarioMs,
    /// Duplicated rows make the run invalid (default: cleanup work only).
    #[serde(default)]
    pub strict_duplicates: bool,
    /// The mover's switches, as configured, for the report.
    #[serde(default)]
    pub mover: BTreeMap<String, String>,
    /// Scenario time the run ended (movers done or time limit), ms.
    pub end_scenario_ms: i64,
    /// False when the harness stopped the run before its end (time limit,
    /// Ctrl-C): the history may be cut short.
    pub completed: bool,
    /// Why the run did not complete, when it did not.
    #[serde(default)]
    pub incomplete_reason: Option<String>,
    /// The moments the scenario exists to reach (`[expect] reach`): a valid run that reached
    /// none of them is `unknown`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect_reach: Vec<crate::Moment>,
}

/// What a committed shard write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WriteOp {
    Insert,
    Delete,
    /// An update of `mover_fence` (the grant reached this shard).
    Fence,
}

/// One committed write on a shard, per statement and turbine, recorded by the shard's own trigger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardWrite {
    pub shard: String,
    pub xid: i64,
    /// `pg_xact_commit_timestamp`, Unix ns.
    pub commit_unix_ns: i64,
    /// The writer's `application_name` (`box-2`, `ingest`, `harness`).
    pub app: String,
    pub op: WriteOp,
    #[serde(default)]
    pub turbine: Option<String>,
    pub rows: i64,
    /// Reading timestamps touched, Unix ms (scenario calendar).
    #[serde(default)]
    pub min_ts_ms: Option<ReadingMs>,
    #[serde(default)]
    pub max_ts_ms: Option<ReadingMs>,
    /// The writer's token when it said one (fence update or `chaos.token`).
    #[serde(default)]
    pub token: Option<i64>,
}

/// One committed change of a claim row on the routing db.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimChange {
    pub job: String,
    #[serde(default)]
    pub holder: Option<String>,
    pub token: i64,
    /// The claim's expiry as the routing db set it, Unix ns.
    pub expires_unix_ns: i64,
    pub commit_unix_ns: i64,
    pub app: String,
    pub xid: i64,
    /// The earliest the change can have committed when its stamp is only when an observer saw
    /// it (a ZooKeeper deletion carries no server time): the observer's previous stamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_unix_ns: Option<i64>,
}

/// The resources' own record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Audit {
    pub shard_writes: Vec<ShardWrite>,
    pub claim_changes: Vec<ClaimChange>,
    /// Every committed write to an object or the pointer (system `ten-objects`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_writes: Vec<ObjectWrite>,
    /// False when some database could not be read at the end.
    pub complete: bool,
    #[serde(default)]
    pub missing: Vec<String>,
}

/// What one shard holds of one turbine at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardTurbineRuns {
    pub shard: String,
    pub turbine: String,
    pub runs: Vec<Run>,
    /// Rows whose value is not the reading's value for their (turbine, ts), counted on the shard (None: an older run that did not check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<ValueCheck>,
}

/// The value check of one (shard, turbine), computed on the shard by the
/// harness: a reading's value is a function of (turbine, ts)
/// (`workloads::galewatch::reading_value`), so a row whose value differs was
/// changed (a copy that altered values, or moved a row to another timestamp
/// of the grid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueCheck {
    /// Rows checked (every row of the turbine on the shard).
    pub rows: i64,
    /// Rows whose value is not the reading's value for their (turbine, ts).
    pub wrong: i64,
    /// The earliest reading timestamp (Unix ms) among the wrong rows.
    pub first_wrong_ts_ms: Option<ReadingMs>,
}

/// The final state of every shard, as runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalState {
    pub shards: Vec<ShardTurbineRuns>,
    /// The processor's ledger (system `payout`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub payments: Vec<Payment>,
    /// The objects, the pointer and the versions beside them (system `ten-objects`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigState>,
    pub complete: bool,
    #[serde(default)]
    pub missing: Vec<String>,
}

/// A whole stored run, as `chaos check` loads it.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub meta: RunMeta,
    pub history: Vec<Op>,
    /// The history file's last line was torn (the harness stopped mid-write).
    pub torn_tail: bool,
    pub audit: Option<Audit>,
    pub final_state: Option<FinalState>,
}
