//! The figures a verdict carries for the report and the sweep (`Verdict::stats`), one documented field each.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `Verdict::stats`, serialized. Times are scenario ms since the scenario's
/// midnight (`*_scenario_ms`) with their `HH:MM:SS.s` twin (`*_time`);
/// durations are scenario seconds (`*_s`). Fields that need the audit or the
/// final state are zero/empty when that input was missing (the verdict says
/// `unknown` then). A field a stored verdict lacks reads as its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Stats {
    /// History events folded (every line, invokes included).
    pub events: u64,
    /// Ingest readings (turbine x batch) completed `ok`: must be present exactly once.
    pub readings_acknowledged: u64,
    /// Ingest readings completed `info`: may or may not be present.
    pub readings_uncertain: u64,
    /// Ingest readings completed `fail`: certainly not written.
    pub readings_failed: u64,
    /// Ingest readings whose batch was invoked and never completed (the
    /// history was cut short mid-batch): uncertain, like `info`.
    #[serde(default)]
    pub readings_unanswered: u64,
    /// Every grant of the job's claim, in commit order, from the routing db's audit.
    pub grants: Vec<GrantStat>,
    /// Windows with no valid claim while the plan was unfinished.
    pub vacancy_windows: u64,
    pub vacancy_total_s: f64,
    pub vacancy_min_s: f64,
    pub vacancy_max_s: f64,
    /// Per box that wrote after its lease expired: scenario seconds from the
    /// expiry to its last such write (April: `box-2` 71.0).
    pub writes_after_expiry_s: BTreeMap<String, f64>,
    /// Mover writes committed after their grant's last known expiry.
    pub writes_after_expiry: u64,
    /// Pairs of grants of different boxes whose writes overlapped, and the overlap in all.
    pub concurrent_holder_pairs: u64,
    pub concurrent_holders_s: f64,
    /// Turbines in the move plan.
    pub turbines_planned: u64,
    /// Planned turbines whose source shard holds no rows at the end.
    pub turbines_moved: u64,
    /// Of those, moved (last source delete committed) before the first vacancy
    /// began; `None` when there was no vacancy (April: 107).
    pub turbines_moved_before_first_vacancy: Option<u64>,
    /// Planned turbines still on their source shard (the job did not finish).
    pub turbines_not_moved: Vec<String>,
    /// When the last planned turbine left its source; `None` when the plan did not finish.
    pub plan_finished_scenario_ms: Option<i64>,
    pub plan_finished_time: Option<String>,
    /// Turbines with acknowledged readings on no shard, and how many readings that is.
    pub lost_turbines: Vec<String>,
    pub rows_lost: u64,
    /// Readings present more than once, and the rows beyond their first copy.
    pub duplicated_readings: u64,
    pub duplicate_rows_extra: u64,
    /// Readings present only off their owner shard.
    pub misplaced_readings: u64,
    /// Readings present that were neither seeded nor acknowledged nor uncertain.
    pub unexpected_readings: u64,
    /// The same readings, as the `phantom-rows` anomaly counts them.
    #[serde(default)]
    pub phantom_readings: u64,
    /// Rows whose value is not their reading's, by the shards' value check
    /// (`corrupt-rows`), and how many rows that check covered (0: not checked).
    #[serde(default)]
    pub corrupt_rows: u64,
    #[serde(default)]
    pub values_checked_rows: u64,
    /// Pairs of grants valid at once by the routing db's record
    /// (`overlapping-grants`), and the scenario seconds they shared in all.
    #[serde(default)]
    pub overlapping_grants: u64,
    #[serde(default)]
    pub overlapping_grants_s: f64,
    /// Grants a box was told of that the lock's own record lacks, or tokens told to two boxes
    /// (`forgotten-grants`).
    #[serde(default)]
    pub forgotten_grants: u64,
    /// Stretches of a claim renewed for more than two leases with no write by its holder
    /// (`stalled-holder`), and the longest in scenario seconds.
    #[serde(default)]
    pub stalled_holders: u64,
    #[serde(default)]
    pub stalled_holder_max_s: f64,
    /// Mover writes a shard accepted from an older grant after a newer one had written there.
    pub stale_writes_accepted: u64,
    /// Writes a shard's fence refused (history `fail` with reason `fenced`).
    pub refused_writes: u64,
    /// Governed shard writes no grant can be named for (`unattributed-write`).
    #[serde(default)]
    pub unattributed_writes: u64,
    /// The same count, under its older name.
    pub ungranted_writes: u64,
    /// Inserts and deletes judged by a token granted to another box than
    /// their writer's `application_name` (`borrowed-token-write`).
    #[serde(default)]
    pub borrowed_token_writes: u64,
    /// Audit sizes: shard writes and claim changes read.
    pub shard_writes: u64,
    pub claim_changes: u64,
    /// The payout: publishers owed this month, payments the processor took, publishers paid
    /// twice or more (`double-payout`) and never (`missed-payout`).
    #[serde(default)]
    pub payouts_owed: u64,
    #[serde(default)]
    pub payments: u64,
    #[serde(default)]
    pub double_payouts: u64,
    #[serde(default)]
    pub missed_payouts: u64,
    /// The ten objects: the version a reader sees at the end (when it is one whole version),
    /// objects not of the version most of them carry (`torn-update`), and stale object
    /// writes accepted after a newer leader's (`interleaved-update`).
    #[serde(default)]
    pub live_version: Option<i64>,
    #[serde(default)]
    pub torn_objects: u64,
    #[serde(default)]
    pub interleaved_writes: u64,
    /// The failover system's figures (absent for a mover run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<crate::failover::FailoverStats>,
}

/// One grant of the claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GrantStat {
    pub holder: String,
    pub token: i64,
    pub scenario_ms: i64,
    pub time: String,
    /// The last expiry the audit showed for it (a release counts as expiring at its commit).
    pub last_expiry_scenario_ms: i64,
    pub released: bool,
}
