//! The verdict: valid, invalid or unknown, with every anomaly's count, first scenario time and evidence.

use chaos_history::ScenarioClock;
use serde::{Deserialize, Serialize};

/// Combined: invalid beats unknown beats valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Validity {
    Valid,
    Unknown,
    Invalid,
}

impl Validity {
    pub fn combine(self, other: Validity) -> Validity {
        self.max(other)
    }

    /// The process exit code DESIGN section 7 gives it.
    pub fn exit_code(self) -> i32 {
        match self {
            Validity::Valid => 0,
            Validity::Invalid => 1,
            Validity::Unknown => 2,
        }
    }
}

/// The anomaly classes of DESIGN section 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyClass {
    LostRows,
    DuplicatedRows,
    /// Readings on a shard that is neither their owner nor the plan's source,
    /// whether or not the owner holds them too.
    MisplacedRows,
    /// Readings present that nothing explains: not seeded, not ingested `ok`
    /// or `info` (an ingest `fail` that appears anyway is one), no turbine anybody knew.
    PhantomRows,
    /// Rows whose value is not their reading's value (the shard's own value check).
    CorruptRows,
    StaleTokenWrite,
    /// The lock's own promise broken: two grants valid at once by the routing db's record.
    OverlappingGrants,
    /// The lock's own promise broken: a grant it answered that its own record later lacks, or
    /// a token it told two boxes (asynchronous commit and a crash).
    ForgottenGrants,
    /// A governed shard write no grant can be named for (the verdict says why).
    UnattributedWrite,
    WriteAfterLeaseExpiry,
    ConcurrentHolders,
    /// A write carrying a token granted to another box (or with no
    /// `application_name`): judged by that token, reported.
    BorrowedTokenWrite,
    VacancyWindow,
    /// A claim renewed for more than two leases with no write by its holder.
    StalledHolder,
    JobNotFinished,
    /// A write the resource refused (fencing worked): evidence, not a fault.
    StaleWriteRefused,
    /// A publisher paid more than once for one month (the payout: a retaken job re-sent a
    /// payment the processor could not refuse).
    DoublePayout,
    /// A publisher never paid for the month (the payout's liveness: at-most-once left the job
    /// half done).
    MissedPayout,
    /// The objects a reader sees at the end are not one leader's complete version.
    TornUpdate,
    /// An older leader's object write accepted after a newer leader had written an object:
    /// two leaders' updates interleaved on the objects.
    InterleavedUpdate,
    /// The failover system: acknowledged orders absent from the surviving primary.
    LostOrders,
    /// The failover system: both servers could accept the app's writes at once.
    TwoPrimaries,
    /// The failover system: no primary accepted the app's writes for a while.
    Unavailability,
    /// The failover system: the replica promoted while its primary was up.
    FalsePromotion,
}

/// What an anomaly does to the verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Shown, never changes the verdict.
    Info,
    /// Work somebody clears up on Tuesday (duplicates); invalid only with `--strict-duplicates`.
    Cleanup,
    /// Makes the run invalid.
    Error,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    pub class: AnomalyClass,
    pub severity: Severity,
    /// Rows, writes, windows or turbines, as the class counts them.
    pub count: u64,
    /// Scenario ms of the first occurrence, and the same as `HH:MM:SS.s`.
    pub first_scenario_ms: Option<i64>,
    pub first_scenario_time: Option<String>,
    /// One line a person reads.
    pub summary: String,
    /// Evidence: which rows, which box, which token, which scenario times.
    pub evidence: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub valid: Validity,
    /// Why, when `unknown`.
    #[serde(default)]
    pub reasons: Vec<String>,
    pub anomalies: Vec<Anomaly>,
    /// Figures the report and the sweep read (vacancy total/max, seconds of
    /// writes after expiry per box, turbines moved, grants, ...).
    #[serde(default)]
    pub stats: crate::Stats,
    /// The dangerous moments the run reached, in `Moment` order (`reached.rs`).
    #[serde(default)]
    pub reached: Vec<crate::Reached>,
}

impl AnomalyClass {
    /// The class's name as JSON spells it (`lost-rows`).
    pub fn name(self) -> &'static str {
        match self {
            AnomalyClass::LostRows => "lost-rows",
            AnomalyClass::DuplicatedRows => "duplicated-rows",
            AnomalyClass::MisplacedRows => "misplaced-rows",
            AnomalyClass::PhantomRows => "phantom-rows",
            AnomalyClass::CorruptRows => "corrupt-rows",
            AnomalyClass::StaleTokenWrite => "stale-token-write",
            AnomalyClass::OverlappingGrants => "overlapping-grants",
            AnomalyClass::ForgottenGrants => "forgotten-grants",
            AnomalyClass::UnattributedWrite => "unattributed-write",
            AnomalyClass::WriteAfterLeaseExpiry => "write-after-lease-expiry",
            AnomalyClass::ConcurrentHolders => "concurrent-holders",
            AnomalyClass::BorrowedTokenWrite => "borrowed-token-write",
            AnomalyClass::VacancyWindow => "vacancy-window",
            AnomalyClass::StalledHolder => "stalled-holder",
            AnomalyClass::JobNotFinished => "job-not-finished",
            AnomalyClass::StaleWriteRefused => "stale-write-refused",
            AnomalyClass::DoublePayout => "double-payout",
            AnomalyClass::MissedPayout => "missed-payout",
            AnomalyClass::TornUpdate => "torn-update",
            AnomalyClass::InterleavedUpdate => "interleaved-update",
            AnomalyClass::LostOrders => "lost-orders",
            AnomalyClass::TwoPrimaries => "two-primaries",
            AnomalyClass::Unavailability => "unavailability",
            AnomalyClass::FalsePromotion => "false-promotion",
        }
    }
}

impl Anomaly {
    /// An anomaly first seen at `first_scenario_ms` (scenario ms since midnight).
    pub fn new(
        class: AnomalyClass,
        severity: Severity,
        count: u64,
        first_scenario_ms: Option<i64>,
        summary: String,
        evidence: serde_json::Value,
    ) -> Anomaly {
        Anomaly {
            class,
            severity,
            count,
            first_scenario_ms,
            first_scenario_time: first_scenario_ms.map(ScenarioClock::format),
            summary,
            evidence,
        }
    }
}

impl Verdict {
    /// Invalid when any anomaly is an error, else unknown when there is a
    /// reason, else valid. Anomalies are listed in class order.
    pub fn new(mut anomalies: Vec<Anomaly>, reasons: Vec<String>, stats: crate::Stats) -> Verdict {
        anomalies.sort_by_key(|a| a.class);
        let mut valid = if reasons.is_empty() {
            Validity::Valid
        } else {
            Validity::Unknown
        };
        if anomalies.iter().any(|a| a.severity == Severity::Error) {
            valid = valid.combine(Validity::Invalid);
        }
        Verdict {
            valid,
            reasons,
            anomalies,
            stats,
            reached: Vec::new(),
        }
    }

    /// Whether the run reached a moment.
    pub fn reached(&self, moment: chaos_history::Moment) -> bool {
        self.reached.iter().any(|r| r.moment == moment)
    }

    /// The anomaly of a class, if the run has one.
    pub fn anomaly(&self, class: AnomalyClass) -> Option<&Anomaly> {
        self.anomalies.iter().find(|a| a.class == class)
    }

    /// A few lines for a person: the verdict, why when unknown, then one line
    /// per anomaly with its severity, count, first scenario time and summary.
    /// Times in a verdict are already scenario times; the clock is taken so
    /// callers hand over the run's clock and never care what is printed.
    pub fn summary(&self, _clock: &ScenarioClock) -> String {
        let word = match self.valid {
            Validity::Valid => "VALID",
            Validity::Invalid => "INVALID",
            Validity::Unknown => "UNKNOWN",
        };
        let errors = self
            .anomalies
            .iter()
            .filter(|a| a.severity == Severity::Error)
            .count();
        let mut out = format!(
            "{word}: {} anomalies, {errors} errors\n",
            self.anomalies.len()
        );
        for r in &self.reasons {
            out.push_str(&format!("  unknown because: {r}\n"));
        }
        for a in &self.anomalies {
            let sev = match a.severity {
                Severity::Error => "error",
                Severity::Cleanup => "cleanup",
                Severity::Info => "info",
            };
            let at = a.first_scenario_time.as_deref().unwrap_or("-");
            out.push_str(&format!(
                "  {sev:<7} {:<24} x{:<9} {at:<10}  {}\n",
                a.class.name(),
                a.count,
                a.summary
            ));
        }
        for r in &self.reached {
            out.push_str(&format!(
                "  reached {:<26} x{:<9} {:<10}  {}\n",
                r.moment.name(),
                r.count,
                r.first_scenario_time,
                r.summary
            ));
        }
        if self.reached.is_empty() {
            out.push_str("  reached no dangerous moment\n");
        }
        out
    }
}
