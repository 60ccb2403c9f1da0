//! The verdict: valid, invalid or unknown, with every anomaly's count, first scenario time and evidence.

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
    MisplacedRows,
    StaleTokenWrite,
    WriteAfterLeaseExpiry,
    ConcurrentHolders,
    VacancyWindow,
    JobNotFinished,
    /// A write the resource refused (fencing worked): evidence, not a fault.
    StaleWriteRefused,
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
    pub stats: serde_json::Value,
}
