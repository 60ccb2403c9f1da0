//! `chaos sweep`'s input: its flags checked once into a `Plan` (lock services, leases, fencing settings, runs, seed, latency profile, budget); nothing runs before it exists.

use super::profile;
use crate::run::{self, RunOptions};
use crate::values::parse_duration_s;
use std::path::PathBuf;
use std::time::Duration;

/// The definitions, printed under `chaos sweep --help`.
pub const DEFINITIONS: &str = "\
Definitions (every figure is measured from the runs' histories and verdicts):
  renewal latency   a box's renew invoke to its completion (ok, fail or info), scenario ms,
                    hdrhistogram; a p99.9 needs at least 1,000 renewals (with fewer it is the max)
  false expiry      a holder lost its claim (another box was granted it after it expired; its
                    renewal then answers 'lost') while the nemesis had neither paused nor killed
                    it and it had not stopped by its own choice (released, done, exited)
  takeover          a grant to a different box than the previous grant's
  recover           time from the nemesis killing the current holder to the next grant
  vacancy           time with no valid claim while the plan was unfinished (total per run, max)
  writes after exp  mover writes committed after their grant's last expiry (count, longest s)
  data lost         acknowledged rows on no shard (fencing off shows it); refused = writes a
                    shard's fence refused (fencing on)
  finish            scenario seconds from the start until the last planned turbine left its source
  mover stalls      how late a 1 ms timer fires inside each mover process (p99.9, max), worst
                    mover life; 1 real ms is 100 scenario ms at the default scale
  reached           per dangerous moment (docs/verdict.md), the cell's runs that reached it: a
                    lease whose runs reached nothing was not tested by them
  recommended       per lock service and fencing setting, the smallest lease with no false
                    expiry at it or any longer lease, against that service's own p99.9
Latency profile: a heavy tail on every box-N->routing link (box-N->lock for a lock service with
a server of its own) from seeded, non-overlapping latency windows: 0.9 % of link time between
--latency-p99 and --latency-p999, 0.1 % between --latency-p999 and --latency-max; --latency-p50
is applied as a base level when the proxy can express it (>= 1 real ms), else the link's own
round trip stands for it. Every lock service and lease sees the same weather for the same seed;
run k of a cell uses seed S+k.
Output: results/sweep-<scenario>/<stamp>-<seed>/ with sweep.txt, sweep.csv, sweep.json,
sweep.svg, sweep.html (the decision table, every cell, the plot, a link to each run's report)
and runs/. Exit 0 when every run completed (verdicts are data here), 3 when the
harness failed, the input was bad, or the budget ran out (the partial table is written).";

#[derive(clap::Args, Debug, Clone)]
#[command(after_help = DEFINITIONS)]
pub struct SweepArgs {
    /// Scenario to sweep: a name in scenarios/ (try `sweep`) or a path to a TOML file.
    #[arg(long)]
    pub(crate) scenario: String,
    /// Lease durations in scenario time, comma-separated (e.g. 2s,5s,10s,30s,60s or 500ms,1m).
    #[arg(long, default_value = "2s,5s,10s,30s,60s", allow_hyphen_values = true)]
    lease: String,
    /// Fencing settings to run every lease with: off, on, or off,on (the reference mover's;
    /// a --mover-cmd fences as it does, and its rows say "own").
    #[arg(long)]
    pub(crate) fencing: Option<String>,
    /// Sweep this program (docs/mover-protocol.md) instead of the reference mover: it is given
    /// each lease as CHAOS_LEASE_MS.
    #[arg(long)]
    pub(crate) mover_cmd: Option<String>,
    /// A failover scenario: the watcher's silence constants to sweep, comma-separated
    /// [default: 5s,10s,30s,60s].
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) silence: Option<String>,
    /// A failover scenario: the reference watcher's fence, off, on or off,on [default: off].
    #[arg(long)]
    pub(crate) fence: Option<String>,
    /// The lock services to run every cell with, comma-separated: claims, advisory, etcd,
    /// redis, zookeeper [default: the scenario's]. Each service gets the same seeded weather,
    /// on its renewals' links (box-N->routing, or box-N->lock for a service with a server);
    /// with etcd each lease's runs take the time scale that makes it whole real seconds.
    #[arg(long)]
    pub(crate) lock: Option<String>,
    /// How the --mover-cmd says it is ready: exec or gate.
    #[arg(long, value_enum)]
    mover_ready: Option<crate::scenario::Ready>,
    /// Restart a mover that exits non-zero (on-failure) or never.
    #[arg(long, value_enum)]
    restart: Option<crate::scenario::Restart>,
    /// Runs per lease and fencing setting (seeds S, S+1, ...).
    #[arg(long, default_value = "1", allow_hyphen_values = true)]
    runs: String,
    /// Seed for the latency weather and the runs (default: the scenario's).
    #[arg(long, allow_hyphen_values = true)]
    seed: Option<String>,
    /// Target median renewal latency on box-*->routing (scenario time).
    #[arg(long, default_value = "30ms", allow_hyphen_values = true)]
    latency_p50: String,
    /// Target p99 of the latency profile.
    #[arg(long, default_value = "300ms", allow_hyphen_values = true)]
    latency_p99: String,
    /// Target p99.9 of the latency profile (lesson 002 measured 2,100 ms).
    #[arg(long, default_value = "2100ms", allow_hyphen_values = true)]
    latency_p999: String,
    /// Largest spike [default: twice --latency-p999].
    #[arg(long, allow_hyphen_values = true)]
    latency_max: Option<String>,
    /// No latency profile: only the scenario's own faults.
    #[arg(long)]
    no_latency: bool,
    /// Wall-time budget for the whole sweep (e.g. 10m); runs that would not fit are not started.
    #[arg(long, default_value = "20m", allow_hyphen_values = true)]
    budget: String,
    /// Real milliseconds per scenario second (default: the scenario's).
    #[arg(long, allow_hyphen_values = true)]
    time_scale_ms: Option<String>,
    /// Where the sweep folder goes.
    #[arg(long, default_value = "results")]
    pub(crate) results: PathBuf,
    /// Print each run's own progress and story.
    #[arg(long)]
    pub(crate) verbose: bool,
}

/// The fencing column of a team's mover: whatever its own code does.
pub const OWN_FENCING: &str = "own";

/// One lock service the sweep runs every cell with.
#[derive(Debug, Clone)]
pub struct LockPlan {
    /// As each run is given it (None: the scenario's own, unnamed).
    pub flag: Option<crate::lock::LockKind>,
    /// The service the runs use (the flag's or the scenario's), and the node its renewals go
    /// to (`routing`, or `lock` when it has a server of its own).
    pub used: crate::lock::LockKind,
    pub renew_node: &'static str,
    /// Real ms per scenario second of its runs (the scenario's, or `--time-scale-ms`).
    pub time_scale_ms: f64,
    /// The scenario as its runs resolve it (the weather is drawn on it).
    pub scenario: crate::scenario::Scenario,
}

/// The sweep's input after checking; nothing runs before this exists.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: String,
    pub name: String,
    pub leases_s: Vec<f64>,
    pub fencings: Vec<String>,
    /// A team's mover and how it starts and restarts (None: the reference mover).
    pub mover_cmd: Option<String>,
    pub mover_ready: Option<crate::scenario::Ready>,
    pub restart: Option<crate::scenario::Restart>,
    /// The lock services, in the order `--lock` gave them (one: the scenario's).
    pub locks: Vec<LockPlan>,
    pub runs: u32,
    pub seed: u64,
    pub profile: Option<profile::Profile>,
    pub budget: Duration,
    pub time_scale_ms: Option<f64>,
}

/// `--silence` and `--fence` are the failover sweep's (`failover/sweep.rs`).
fn refuse_failover_flags(a: &SweepArgs) -> anyhow::Result<()> {
    if a.silence.is_some() || a.fence.is_some() {
        anyhow::bail!(
            "--silence and --fence sweep a failover scenario (failover-github, failover-sweep); {} runs the mover (its flags: --lease, --fencing)",
            a.scenario
        );
    }
    Ok(())
}

/// Check every flag; the first bad one is the error, in one line.
pub fn plan(a: &SweepArgs) -> anyhow::Result<Plan> {
    refuse_failover_flags(a)?;
    let mut leases_s = Vec::new();
    for part in a.lease.split(',').filter(|p| !p.trim().is_empty()) {
        let s = parse_duration_s(part).map_err(|e| anyhow::anyhow!("--lease: {e}"))?;
        if s > 86_400.0 {
            anyhow::bail!("--lease: '{part}' is longer than a day");
        }
        leases_s.push(s);
    }
    if leases_s.is_empty() {
        anyhow::bail!("--lease: give at least one duration, e.g. --lease 2s,5s,10s,30s,60s");
    }
    leases_s.sort_by(|x, y| x.total_cmp(y));
    leases_s.dedup();
    // A team's mover fences (or not) by its own code: the harness cannot switch it, so its
    // one column is labelled for what it is.
    if a.mover_cmd.is_some() && a.fencing.is_some() {
        anyhow::bail!(
            "--fencing switches the reference mover; a --mover-cmd fences as it does (sweep each variant of it with its own command)"
        );
    }
    if a.mover_cmd.is_none() && (a.mover_ready.is_some() || a.restart.is_some()) {
        anyhow::bail!("--mover-ready and --restart are about a --mover-cmd; give one");
    }
    let fencing = match (&a.mover_cmd, &a.fencing) {
        (Some(_), _) => OWN_FENCING,
        (None, Some(f)) => f.as_str(),
        (None, None) => "off",
    };
    let mut fencings = Vec::new();
    for f in fencing.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        if f != "off" && f != "on" && a.mover_cmd.is_none() {
            anyhow::bail!("--fencing: '{f}' is not off or on (give off, on or off,on)");
        }
        if !fencings.iter().any(|x| x == f) {
            fencings.push(f.to_string());
        }
    }
    if fencings.is_empty() {
        anyhow::bail!("--fencing: give off, on or off,on");
    }
    let runs: u32 = a
        .runs
        .trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("--runs: '{}' is not a whole number", a.runs))?;
    if !(1..=1000).contains(&runs) {
        anyhow::bail!("--runs: {runs} is not 1 to 1000");
    }
    let budget_s = parse_duration_s(&a.budget).map_err(|e| anyhow::anyhow!("--budget: {e}"))?;
    let time_scale_ms = match &a.time_scale_ms {
        Some(t) => {
            let v: f64 = t
                .trim()
                .parse()
                .map_err(|_| anyhow::anyhow!("--time-scale-ms: '{t}' is not a number"))?;
            Some(v)
        }
        None => None,
    };
    let locks = match &a.lock {
        None => vec![None],
        Some(list) => lock_list(list)?.into_iter().map(Some).collect(),
    };
    let mut planned = Vec::new();
    let (mut scenario_seed, mut name) = (0, String::new());
    for flag in locks {
        let lock = lock_plan(a, flag, time_scale_ms, &leases_s)?;
        scenario_seed = lock.scenario.file.seed;
        name = lock.scenario.file.name.clone();
        planned.push(lock);
    }
    let seed = match &a.seed {
        Some(s) => s
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--seed: '{s}' is not a whole number"))?,
        None => scenario_seed,
    };
    let profile = profile_of(a)?;
    Ok(Plan {
        scenario: a.scenario.clone(),
        name,
        leases_s,
        fencings,
        mover_cmd: a.mover_cmd.clone(),
        mover_ready: a.mover_ready,
        restart: a.restart,
        locks: planned,
        runs,
        seed,
        profile,
        budget: Duration::from_secs_f64(budget_s),
        time_scale_ms,
    })
}

/// One lock service's part of the plan: the scenario (and every override) must load with it,
/// and every lease be one it can hold (etcd: whole seconds at the scale; the others hold any),
/// before anything starts.
fn lock_plan(
    a: &SweepArgs,
    flag: Option<crate::lock::LockKind>,
    time_scale_ms: Option<f64>,
    leases_s: &[f64],
) -> anyhow::Result<LockPlan> {
    let base = RunOptions {
        scenario: a.scenario.clone(),
        time_scale_ms,
        mover_cmd: a.mover_cmd.clone(),
        mover_ready: a.mover_ready,
        restart: a.restart,
        lock: flag,
        quiet: true,
        ..Default::default()
    };
    let scenario = run::resolve(&base)?;
    if scenario.file.lock.service == crate::lock::LockKind::Etcd {
        for lease_s in leases_s {
            run::resolve(&RunOptions {
                lease_s: Some(*lease_s),
                ..base.clone()
            })?;
        }
    }
    let lock = LockPlan {
        flag,
        used: scenario.file.lock.service,
        renew_node: if scenario.file.lock.has_node() {
            crate::lock::LOCK_NODE
        } else {
            "routing"
        },
        time_scale_ms: scenario.file.time_scale_ms,
        scenario,
    };
    Ok(lock)
}

/// `--lock claims,etcd`: each service once, in the order given.
fn lock_list(list: &str) -> anyhow::Result<Vec<crate::lock::LockKind>> {
    use clap::ValueEnum;
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let kind = crate::lock::LockKind::from_str(part, true).map_err(|_| {
            anyhow::anyhow!(
                "--lock: '{part}' is not a lock service (claims, advisory, etcd, redis, zookeeper)"
            )
        })?;
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    if out.is_empty() {
        anyhow::bail!("--lock: give one or more of claims, advisory, etcd, redis, zookeeper");
    }
    Ok(out)
}

/// The latency profile the flags ask for (None: `--no-latency`).
fn profile_of(a: &SweepArgs) -> anyhow::Result<Option<profile::Profile>> {
    Ok(if a.no_latency {
        None
    } else {
        let ms = |flag: &str, v: &str| {
            parse_duration_s(v)
                .map(|s| s * 1000.0)
                .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
        };
        let p50_ms = ms("--latency-p50", &a.latency_p50)?;
        let p99_ms = ms("--latency-p99", &a.latency_p99)?;
        let p999_ms = ms("--latency-p999", &a.latency_p999)?;
        let max_ms = match &a.latency_max {
            Some(v) => ms("--latency-max", v)?,
            None => 2.0 * p999_ms,
        };
        if !(p50_ms <= p99_ms && p99_ms <= p999_ms && p999_ms <= max_ms) {
            anyhow::bail!(
                "--latency-*: need p50 <= p99 <= p99.9 <= max (got {p50_ms} ms, {p99_ms} ms, {p999_ms} ms, {max_ms} ms)"
            );
        }
        Some(profile::Profile {
            p50_ms,
            p99_ms,
            p999_ms,
            max_ms,
        })
    })
}
