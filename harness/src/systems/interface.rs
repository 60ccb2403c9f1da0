//! The interface every system under test keeps (`SystemUnderTest`), and what its
//! implementations share: the settings every record keeps, a commit's stamp, a failed
//! statement's line.

use crate::scenario::{Scenario, ScenarioError, ScenarioFile, Validator};
use chaos_history::{Audit, FinalState, ObjectsMeta, PayoutMeta};
use chaos_nemesis::Topology;
use futures_util::future::BoxFuture;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a system's installation and final reads wait for a database.
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);

/// The settings the run's record keeps of a system (for the report and the story).
pub type Settings = BTreeMap<String, String>;

/// A shard by name and its admin URL.
pub type ShardUrl = (String, String);

/// What the harness needs of a system under test beyond the mover's testbed.
pub trait SystemUnderTest: Sync {
    /// The reference program's name (`mover`, `payer`, `updater`), built beside the harness.
    fn program(&self) -> &'static str;

    /// The flag that runs a team's own program in the reference program's place.
    fn own_program_flag(&self) -> &'static str {
        "--mover-cmd"
    }

    /// The reference program's argv for the scenario's switches.
    fn reference_args(&self, s: &ScenarioFile) -> Vec<String>;

    /// Its checks of a scenario file, beyond what every scenario has (times, faults,
    /// `[expect]`): its own sections, each refusal naming the field.
    fn check_file(&self, v: &Validator, file: &ScenarioFile) -> Result<(), ScenarioError>;

    /// The boxes, nodes and links its scenario's faults can name.
    fn topology(&self, file: &ScenarioFile) -> Topology {
        lease_topology(file)
    }

    /// Whether its boxes hold a lease (and so can reach a lease's dangerous moments, and run
    /// on nodes of the scenario's own, some perhaps with asynchronous commit).
    fn holds_lease(&self) -> bool {
        true
    }

    /// Whether the run has a farm of turbines to move (and readings to ingest meanwhile).
    fn moves_turbines(&self) -> bool {
        false
    }

    /// The settings the run's record keeps.
    fn settings(&self, s: &Scenario) -> Settings {
        common_settings(s, "copy_s")
    }

    /// What the run's record keeps of the design: the payout owed, or the objects' layout.
    fn meta(&self, _s: &Scenario) -> (Option<PayoutMeta>, Option<ObjectsMeta>) {
        (None, None)
    }

    /// Install the design's tables and starting rows, after the mover's own.
    fn install<'a>(
        &'a self,
        _s: &'a Scenario,
        _routing_url: &'a str,
        _shards: &'a [ShardUrl],
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    /// Read the design's final state and audit back into the run's record; a shard that
    /// cannot be read makes them incomplete, naming it.
    fn read_back<'a>(
        &'a self,
        _s: &'a Scenario,
        _shards: &'a [ShardUrl],
        _audit: &'a mut Audit,
        _fin: &'a mut FinalState,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// The mover's cluster (routing db, shards, boxes), with the lock service's nodes when it
/// runs a server of its own (the node `lock`, or `lock-1` .. `lock-3`, linked from every box).
fn lease_topology(file: &ScenarioFile) -> Topology {
    if !file.lock.has_node() {
        return Topology::new(file.cluster.boxes, file.cluster.shards);
    }
    let t = Topology::with_lock(
        file.cluster.boxes,
        file.cluster.shards,
        &file.lock.member_names(),
        &[crate::lock::LOCK_LEADER],
    );
    match file.lock.replica_name() {
        Some(replica) => t.with_replica(crate::lock::LOCK_NODE, replica),
        None => t,
    }
}

/// The settings every system's record keeps: its program, its pace and its time scale.
pub(super) fn common_settings(s: &Scenario, pace: &str) -> Settings {
    let l = &s.file.lease;
    let command = s
        .file
        .mover
        .command
        .clone()
        .unwrap_or_else(|| "reference mover".into());
    BTreeMap::from([
        ("command".into(), command),
        ("lease_s".into(), l.lease_s.to_string()),
        ("poll_s".into(), l.poll_s.to_string()),
        (pace.into(), l.copy_s.to_string()),
        ("time_scale_ms".into(), s.file.time_scale_ms.to_string()),
    ])
}

/// `timestamptz` of the row's commit as Unix ns (0 when the server did not keep it).
pub(super) const COMMIT_NS: &str =
    "coalesce((extract(epoch from pg_xact_commit_timestamp(xmin)) * 1000000)::bigint * 1000, 0)";

/// A failed statement as one line naming what it did.
pub(super) fn failed(what: &str) -> impl Fn(tokio_postgres::Error) -> String {
    let what = what.to_string();
    move |e| format!("{what}: {e}")
}
