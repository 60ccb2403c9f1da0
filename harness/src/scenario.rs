//! Scenarios: TOML files parsed once into a validated `Scenario`; nothing downstream re-validates.

use crate::program::{program_defaults, program_section};
pub use crate::program::{Ready, Restart};
use chaos_history::ScenarioClock;
pub use chaos_history::System;
use chaos_nemesis::{Fault, FaultKind, RandomProfile, Topology};
use chaos_workloads::lock::LockKind;
pub use chaos_workloads::mover::{Election, Fencing, OnLost, OnRenewFailure};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

mod cluster;
mod designs;
mod expect;
pub mod load;
pub use cluster::ClusterSection;
pub use designs::{ObjectsFence, ObjectsSection, PayoutSection};
pub use expect::ExpectSection;

/// The least real time a generated database stop or crash, or mover kill, lasts (see
/// `chaos_nemesis::RandomProfile::restart_min_ms`): Postgres restarted in 50-110 ms after a
/// crash here and a start begins ahead of its instant by twice the last start; a killed mover
/// is started again (connected, held at its gate) ahead of its restart.
pub const RESTART_FLOOR_REAL_MS: f64 = 300.0;

/// A scenario file that cannot be used, said in one line naming the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("no scenario '{0}': not a file, and not in scenarios/ (try `chaos list`)")]
    NotFound(String),
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {field}: {message}")]
    Field {
        path: String,
        field: String,
        message: String,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Scenario start, `HH:MM:SS`.
    pub start: String,
    /// Time limit: the run is stopped at this scenario time.
    pub end: String,
    /// The scenario's calendar day (`YYYY-MM-DD`), the date readings carry.
    #[serde(default = "default_date")]
    pub date: String,
    /// Real ms per scenario second.
    #[serde(default = "default_scale")]
    pub time_scale_ms: f64,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The system under test: the mover (the default), or another of the seed's designs.
    #[serde(default)]
    pub system: System,
    #[serde(default)]
    pub cluster: ClusterSection,
    #[serde(default)]
    pub data: DataSection,
    /// The mover's lease (required for the mover; absent, all zeros, for another system).
    #[serde(default)]
    pub lease: LeaseSection,
    #[serde(default)]
    pub mover: MoverSection,
    /// System `payout`: the month's publishers and how they are paid.
    #[serde(default)]
    pub payout: PayoutSection,
    /// System `ten-objects`: the objects and how they are fenced.
    #[serde(default)]
    pub objects: ObjectsSection,
    /// The lock service that holds the lease (`claims`, the routing db's row, by default).
    #[serde(default, skip_serializing_if = "is_default_lock")]
    pub lock: crate::lock::LockSection,
    /// The failover system's settings (`system = "failover"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<crate::failover::settings::FailoverSection>,
    #[serde(default, rename = "fault")]
    pub faults: Vec<FaultEntry>,
    #[serde(default)]
    pub nemesis: NemesisSection,
    #[serde(default)]
    pub expect: ExpectSection,
}

fn is_default_lock(l: &crate::lock::LockSection) -> bool {
    *l == crate::lock::LockSection::default()
}

fn default_date() -> String {
    "2026-04-13".into()
}
fn default_scale() -> f64 {
    10.0
}
fn default_seed() -> u64 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataSection {
    pub turbines: u32,
    pub seeded_turbines: u32,
    /// Seeded readings per turbine: a year at 2 s is 15,768,000; the default is 1/1000 of that.
    pub rows_per_turbine: u32,
    pub old_divisor: u32,
    pub new_divisor: u32,
    /// Ingest cadence, scenario seconds (0: no ingest).
    pub ingest_every_s: f64,
}

impl Default for DataSection {
    fn default() -> Self {
        DataSection {
            turbines: 300,
            seeded_turbines: 200,
            rows_per_turbine: 15_768,
            old_divisor: 2,
            new_divisor: 3,
            ingest_every_s: 2.0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSection {
    #[serde(default = "default_job")]
    pub job: String,
    pub lease_s: f64,
    pub poll_s: f64,
    pub copy_s: f64,
    #[serde(default = "one")]
    pub first_token: i64,
    /// Batches per turbine copy.
    #[serde(default = "ten")]
    pub batches: u32,
}

/// No `[lease]` section: zeros, which the mover's checks refuse with a line naming the section.
impl Default for LeaseSection {
    fn default() -> Self {
        LeaseSection {
            job: default_job(),
            lease_s: 0.0,
            poll_s: 0.0,
            copy_s: 0.0,
            first_token: one(),
            batches: ten(),
        }
    }
}

fn default_job() -> String {
    "rebalance".into()
}
fn one() -> i64 {
    1
}
fn ten() -> u32 {
    10
}

program_section! {
    /// `[mover]`: the reference mover's design switches, then the program and its supervision.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    pub struct MoverSection {
        pub fencing: Fencing,
        pub on_renew_failure: OnRenewFailure,
        pub on_lost: OnLost,
        pub check_expiry_before_write: bool,
        pub election: Election,
        /// The reference mover renews from a task of its own (the seed's short-lease design).
        pub renew_on_thread: bool,
        /// With `on_renew_failure = "carry-on"`: how long, in scenario seconds, the reference
        /// mover retries an unreachable renewal before going on (default: the lease). Given
        /// to it in real ms at the run's scale, so the story keeps its shape at any
        /// `--time-scale-ms`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub renew_retry_s: Option<f64>,
    }
}

impl Default for MoverSection {
    fn default() -> Self {
        program_defaults!(MoverSection {
            fencing: Fencing::Off,
            on_renew_failure: OnRenewFailure::Stop,
            on_lost: OnLost::Stop,
            check_expiry_before_write: false,
            election: Election::Lease,
            renew_on_thread: false,
            renew_retry_s: None,
        })
    }
}

/// A scripted fault: `at`, then `for_s` or `until`, then the fault's own fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultEntry {
    /// A clock instant; with `when`, the moment the trigger is armed (default: the start).
    #[serde(default)]
    pub at: Option<String>,
    /// A moment of the system instead of (or after) `at` (DESIGN section 10).
    #[serde(default)]
    pub when: Option<chaos_nemesis::Trigger>,
    /// A trigger that never fires is told, not a reason for `unknown`.
    #[serde(default)]
    pub optional: bool,
    #[serde(default)]
    pub until: Option<String>,
    #[serde(default)]
    pub for_s: Option<f64>,
    #[serde(default)]
    pub note: Option<String>,
    /// The fault lands only when the lock service is one of these (default: any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lock: Vec<LockKind>,
    /// The fault lands unless the lock service is one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unless_lock: Vec<LockKind>,
    #[serde(flatten)]
    pub kind: FaultKind,
}

impl FaultEntry {
    /// Whether the fault lands when `service` holds the lease (its `lock`, `unless_lock`).
    pub fn lands_on(&self, service: LockKind) -> bool {
        (self.lock.is_empty() || self.lock.contains(&service))
            && !self.unless_lock.contains(&service)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NemesisSection {
    #[serde(default)]
    pub random: Option<RandomProfile>,
}

/// A validated scenario, with times in scenario ms.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub file: ScenarioFile,
    pub path: PathBuf,
    pub start_ms: i64,
    pub end_ms: i64,
    pub day_unix_ms: i64,
    /// The scenario's faults and the generated ones, as listed.
    pub faults: Vec<Fault>,
    /// The same faults expanded once into paired start and heal operations in time order: what
    /// the nemesis applies and what a sweep keeps clear of.
    pub schedule: chaos_nemesis::Schedule,
    /// What its faults can name: its system's boxes, nodes and links (a lock service with a
    /// server of its own is the node `lock`, linked from every box), with the nodes that run
    /// asynchronous commit.
    #[serde(skip)]
    topology: Topology,
}

impl Scenario {
    pub fn topology(&self) -> Topology {
        self.topology.clone()
    }

    /// The clock for a run that starts now.
    pub fn clock(&self, start_unix_ns: i64) -> ScenarioClock {
        ScenarioClock {
            start_unix_ns,
            start_scenario_ms: self.start_ms,
            real_ns_per_scenario_s: (self.file.time_scale_ms * 1_000_000.0).round() as i64,
            scenario_day_unix_ms: self.day_unix_ms,
            wall_check_run_ns: 0,
            wall_check_unix_ns: 0,
        }
    }

    /// Scenario ms to real ms at this scenario's scale (at least 1 when positive).
    pub fn real_ms(&self, scenario_ms: f64) -> u64 {
        let ms = scenario_ms * self.file.time_scale_ms / 1000.0;
        if scenario_ms > 0.0 {
            (ms.round() as u64).max(1)
        } else {
            0
        }
    }
}

impl Scenario {
    /// A scenario file a person can read and run: the file with every fault written out as a
    /// `[[fault]]` (times to the millisecond), no generator.
    pub fn to_toml(&self) -> String {
        let mut file = self.file.clone();
        file.nemesis.random = None;
        file.faults = self.faults.iter().map(fault_entry).collect();
        toml::to_string(&file).unwrap_or_else(|e| format!("# cannot be written as TOML: {e}\n"))
    }
}

/// A fault as a scenario file writes it.
fn fault_entry(f: &Fault) -> FaultEntry {
    let at = f.at_ms.rem_euclid(86_400_000);
    let (h, m, ms) = (at / 3_600_000, at / 60_000 % 60, at % 60_000);
    FaultEntry {
        at: Some(format!("{h:02}:{m:02}:{:02}.{:03}", ms / 1000, ms % 1000)),
        when: f.when.clone(),
        optional: f.optional,
        until: None,
        for_s: f.duration_ms.map(|d| d as f64 / 1000.0),
        note: f.note.clone(),
        lock: vec![],
        unless_lock: vec![],
        kind: f.kind.clone(),
    }
}

/// The scenarios folder: `$CHAOS_SCENARIOS`, else `scenarios/` here or beside the binary's workspace.
pub fn scenarios_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CHAOS_SCENARIOS") {
        return d.into();
    }
    let here = PathBuf::from("scenarios");
    if here.is_dir() {
        return here;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios")
}

/// `april` finds scenarios/april.toml; a path to any TOML file works too.
pub fn resolve(name_or_path: &str) -> Result<PathBuf, ScenarioError> {
    let p = Path::new(name_or_path);
    if p.is_file() {
        return Ok(p.to_path_buf());
    }
    let in_dir = scenarios_dir().join(format!("{name_or_path}.toml"));
    if in_dir.is_file() {
        return Ok(in_dir);
    }
    Err(ScenarioError::NotFound(name_or_path.into()))
}

/// The checks of one file, each refusal naming the file and the field: the sections every
/// scenario has here, a system's own in its home (`systems/`).
pub struct Validator {
    pub(crate) path: String,
}

impl Validator {
    pub fn field(&self, field: &str, message: String) -> ScenarioError {
        ScenarioError::Field {
            path: self.path.clone(),
            field: field.into(),
            message,
        }
    }

    pub(crate) fn time(&self, name: &str, text: &str) -> Result<i64, ScenarioError> {
        ScenarioClock::parse_time_of_day(text)
            .ok_or_else(|| self.field(name, format!("'{text}' is not a time of day HH:MM:SS")))
    }

    /// A number that must lie in a range: `what` says the range the way a person reads it.
    pub fn within(
        &self,
        name: &str,
        ok: bool,
        what: &str,
        got: impl std::fmt::Display,
    ) -> Result<(), ScenarioError> {
        if ok {
            Ok(())
        } else {
            Err(self.field(name, format!("must be {what} (got {got})")))
        }
    }

    /// The settings every scenario has outside its sections (the time scale).
    pub(crate) fn settings(&self, file: &ScenarioFile) -> Result<(), ScenarioError> {
        let scale = file.time_scale_ms;
        self.within(
            "time_scale_ms",
            scale > 0.0 && scale <= 1000.0,
            "in (0, 1000] real ms per scenario second",
            scale,
        )
    }

    /// The sections of a system whose boxes hold a lease (all but the failover): `[lease]`,
    /// `[cluster]`'s sizes, `[lock]` and `[mover]`; no `[failover]`.
    pub fn lease_settings(&self, file: &ScenarioFile) -> Result<(), ScenarioError> {
        if file.failover.is_some() {
            return Err(self.field(
                "failover",
                format!("is the failover system's section; this scenario runs the {} (system = \"failover\" to run it)", file.system.name()),
            ));
        }
        if file.lease.lease_s == 0.0 && file.lease.poll_s == 0.0 && file.lease.copy_s == 0.0 {
            return Err(self.field(
                "lease",
                "the mover needs a [lease] section (lease_s, poll_s, copy_s)".into(),
            ));
        }
        let c = &file.cluster;
        if !(1..=16).contains(&c.shards) || !(1..=16).contains(&c.boxes) {
            return Err(self.field(
                "cluster",
                format!(
                    "shards and boxes must be 1 to 16 (got {} and {})",
                    c.shards, c.boxes
                ),
            ));
        }
        let l = &file.lease;
        for (name, v) in [
            ("lease.lease_s", l.lease_s),
            ("lease.poll_s", l.poll_s),
            ("lease.copy_s", l.copy_s),
        ] {
            self.within(name, v > 0.0, "above 0", v)?;
        }
        self.within(
            "lease.batches",
            (1..=1000).contains(&l.batches),
            "1 to 1000",
            l.batches,
        )?;
        let lease_real_ms = (l.lease_s * file.time_scale_ms).round() as u64;
        file.lock
            .check(
                lease_real_ms,
                file.mover.election == chaos_workloads::mover::Election::Unique,
            )
            .map_err(|(f, m)| self.field(&f, m))?;
        let m = &file.mover;
        let ready = m.ready_timeout_real_s;
        self.within(
            "mover.ready_timeout_real_s",
            ready > 0.0 && ready <= 3600.0,
            "above 0 and at most 3600 real seconds",
            ready,
        )?;
        let delay = m.restart_delay_s;
        self.within(
            "mover.restart_delay_s",
            (0.0..=86_400.0).contains(&delay),
            "0 to 86400 scenario seconds",
            delay,
        )?;
        Ok(())
    }

    /// The mover's farm (`[data]`).
    pub fn data(&self, d: &DataSection, shards: usize) -> Result<(), ScenarioError> {
        let divisor_ok = |x: u32| x >= 1 && x as usize <= shards;
        if !divisor_ok(d.old_divisor) || !divisor_ok(d.new_divisor) {
            return Err(self.field(
                "data",
                format!(
                    "old_divisor and new_divisor must be 1 to cluster.shards ({shards}) (got {} and {})",
                    d.old_divisor, d.new_divisor
                ),
            ));
        }
        if d.seeded_turbines > d.turbines || d.turbines > 9999 {
            return Err(self.field(
                "data.seeded_turbines",
                format!(
                    "must be at most data.turbines ({}), which is at most 9999",
                    d.turbines
                ),
            ));
        }
        let rows = d.rows_per_turbine;
        self.within(
            "data.rows_per_turbine",
            (1..=15_768_000).contains(&rows),
            "1 to 15768000 (a year at 2 s)",
            rows,
        )?;
        self.within(
            "data.ingest_every_s",
            d.ingest_every_s >= 0.0,
            "0 or more",
            d.ingest_every_s,
        )
    }

    /// One `[[fault]]`: its instant (or the moment its trigger is armed) and its duration.
    pub(crate) fn fault(
        &self,
        i: usize,
        f: &FaultEntry,
        start_ms: i64,
    ) -> Result<Fault, ScenarioError> {
        let name = format!("fault[{i}]");
        let after_start = |t: i64| if t < start_ms { t + 86_400_000 } else { t };
        let at = match (&f.at, &f.when) {
            (Some(at), _) => after_start(self.time(&format!("{name}.at"), at)?),
            (None, Some(_)) => start_ms,
            (None, None) => {
                return Err(self.field(
                    &name,
                    "give `at` (a time) or `when` (a trigger, e.g. when = { on = \"renew\", by = \"holder\" })".into(),
                ))
            }
        };
        if f.when.is_some() && f.until.is_some() {
            return Err(self.field(
                &format!("{name}.until"),
                "a triggered fault lands when its trigger fires: give `for_s`".into(),
            ));
        }
        if f.optional && f.when.is_none() {
            return Err(self.field(
                &format!("{name}.optional"),
                "is about a trigger that may not fire: give `when`".into(),
            ));
        }
        let duration_ms = match (&f.until, f.for_s) {
            (Some(_), Some(_)) => {
                return Err(self.field(&name, "give `until` or `for_s`, not both".into()))
            }
            (Some(u), None) => {
                let u = after_start(self.time(&format!("{name}.until"), u)?);
                if u < at {
                    return Err(self.field(
                        &format!("{name}.until"),
                        format!(
                            "{u_text} is before its start {at_text}",
                            u_text = u_text(f),
                            at_text = f.at.as_deref().unwrap_or("")
                        ),
                    ));
                }
                Some(u - at)
            }
            (None, Some(s)) => {
                self.within(&format!("{name}.for_s"), s >= 0.0, "0 or more", s)?;
                Some((s * 1000.0).round() as i64)
            }
            (None, None) => None,
        };
        Ok(Fault {
            at_ms: at,
            duration_ms,
            kind: f.kind.clone(),
            note: f.note.clone(),
            when: f.when.clone(),
            optional: f.optional,
        })
    }
}

fn u_text(f: &FaultEntry) -> &str {
    f.until.as_deref().unwrap_or("")
}

/// `YYYY-MM-DD` to Unix ms at midnight UTC (days-from-civil).
pub fn parse_date(text: &str) -> Option<i64> {
    let mut parts = text.trim().split('-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe - 719_468) * 86_400_000)
}

#[cfg(test)]
mod tests;
