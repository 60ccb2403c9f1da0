//! `chaos sweep`: one scenario, several lease durations, measured renewal latency, false expiries, vacancy and loss, in a table.
//!
//! Each lease duration (and fencing setting) is run `--runs` times with the
//! same seeded latency weather on the movers' links to the routing db (see
//! `profile`), and every figure is measured from the run's history and its
//! verdict, never taken from the configuration. Definitions, as `--help`
//! prints them (`DEFINITIONS`):
//!
//! - renewal latency: a box's `renew` invoke to its completion (ok, fail or
//!   info: a timed-out renewal's latency is what a lease must outlast), in
//!   scenario ms through an hdrhistogram; p99.9 needs >= 1,000 renewals.
//! - false expiry: a holder lost its claim (another box was granted it after
//!   its grant expired, which is also when its renewal answers "lost") while
//!   the nemesis had neither paused nor killed it and it had not stopped by
//!   its own choice (released, done, exited). A holder that gave up because
//!   its renewal could not get through in time counts: it was live and working.
//! - takeover: a grant to a different box than the previous grant's.
//! - time to recover from a killed holder: from the nemesis killing the box
//!   that held the latest grant to the next grant (any box).
//! - vacancy, writes after expiry: the verdict's stats (`vacancy_total_s`,
//!   `vacancy_max_s`, `writes_after_expiry`, `writes_after_expiry_s`).
//! - data lost: `rows_lost` and `lost_turbines`; stale writes refused:
//!   `refused_writes`; job finish time: `plan_finished_time`, as scenario
//!   seconds since the start.
//! - mover stalls: how late a 1 ms timer fires inside each mover process
//!   (its `info stalls` lines), worst mover life per run, p99.9 and max.

mod measure;
mod profile;

use crate::results;
use crate::run::{self, RunOptions};
use chaos_checkers::Stats;
use chaos_history::RunMeta;
use chaos_report::sweep::{svg, table};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use table::{Row, RunResult};

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
Latency profile: a heavy tail on every box-N->routing link from seeded, non-overlapping latency
windows: 0.9 % of link time between --latency-p99 and --latency-p999, 0.1 % between
--latency-p999 and --latency-max; --latency-p50 is applied as a base level when the proxy can
express it (>= 1 real ms), else the link's own round trip stands for it. Every lease sees the
same weather for the same seed; run k of a cell uses seed S+k.
Output: results/sweep-<scenario>/<stamp>-<seed>/ with sweep.txt, sweep.csv, sweep.json,
sweep.svg and runs/. Exit 0 when every run completed (verdicts are data here), 3 when the
harness failed, the input was bad, or the budget ran out (the partial table is written).";

#[derive(clap::Args, Debug)]
#[command(after_help = DEFINITIONS)]
pub struct SweepArgs {
    /// Scenario to sweep: a name in scenarios/ (try `sweep`) or a path to a TOML file.
    #[arg(long)]
    scenario: String,
    /// Lease durations in scenario time, comma-separated (e.g. 2s,5s,10s,30s,60s or 500ms,1m).
    #[arg(long, default_value = "2s,5s,10s,30s,60s", allow_hyphen_values = true)]
    lease: String,
    /// Fencing settings to run every lease with: off, on, or off,on (the reference mover's;
    /// a --mover-cmd fences as it does, and its rows say "own").
    #[arg(long)]
    fencing: Option<String>,
    /// Sweep this program (docs/mover-protocol.md) instead of the reference mover: it is given
    /// each lease as CHAOS_LEASE_MS.
    #[arg(long)]
    mover_cmd: Option<String>,
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
    results: PathBuf,
    /// Print each run's own progress and story.
    #[arg(long)]
    verbose: bool,
}

/// The fencing column of a team's mover: whatever its own code does.
pub const OWN_FENCING: &str = "own";

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
    pub runs: u32,
    pub seed: u64,
    pub profile: Option<profile::Profile>,
    pub budget: Duration,
    pub time_scale_ms: Option<f64>,
}

/// `60s`, `5s`, `1m`, `500ms`, `2` (seconds) -> seconds; above zero.
pub fn parse_duration_s(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a duration like 60s, 500ms or 1m"))?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(format!("'{text}' must be above zero"));
    }
    Ok(v * mult)
}

/// Check every flag; the first bad one is the error, in one line.
pub fn plan(a: &SweepArgs) -> anyhow::Result<Plan> {
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
    // The scenario (and every override) must load before anything starts.
    let base = RunOptions {
        scenario: a.scenario.clone(),
        time_scale_ms,
        mover_cmd: a.mover_cmd.clone(),
        mover_ready: a.mover_ready,
        restart: a.restart,
        ..Default::default()
    };
    let scenario = run::resolve(&base)?;
    let seed = match &a.seed {
        Some(s) => s
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("--seed: '{s}' is not a whole number"))?,
        None => scenario.file.seed,
    };
    let profile = if a.no_latency {
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
    };
    Ok(Plan {
        scenario: a.scenario.clone(),
        name: scenario.file.name.clone(),
        leases_s,
        fencings,
        mover_cmd: a.mover_cmd.clone(),
        mover_ready: a.mover_ready,
        restart: a.restart,
        runs,
        seed,
        profile,
        budget: Duration::from_secs_f64(budget_s),
        time_scale_ms,
    })
}

/// The latency weather for one seed, as faults added to the scenario's.
fn weather(plan: &Plan, seed: u64) -> anyhow::Result<profile::Generated> {
    let Some(p) = &plan.profile else {
        return Ok(profile::Generated {
            note: "no latency profile (--no-latency)".into(),
            ..Default::default()
        });
    };
    let scenario = run::resolve(&RunOptions {
        scenario: plan.scenario.clone(),
        time_scale_ms: plan.time_scale_ms,
        ..Default::default()
    })?;
    let topology = scenario.topology();
    // The scenario's own link faults keep their links: a second latency toxic on
    // a link would collide, and a heal removes every toxic on it.
    let schedule = &scenario.schedule;
    let mut open: BTreeMap<(usize, String), i64> = BTreeMap::new();
    let mut busy: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for op in schedule.ops.iter().filter(|o| o.kind.is_link_fault()) {
        for link in &op.links {
            if op.heal {
                if let Some(a) = open.remove(&(op.fault, link.clone())) {
                    busy.entry(link.clone()).or_default().push((a, op.at_ms));
                }
            } else {
                open.insert((op.fault, link.clone()), op.at_ms);
            }
        }
    }
    for ((_, link), a) in open {
        busy.entry(link).or_default().push((a, scenario.end_ms));
    }
    let links: Vec<String> = topology
        .boxes
        .iter()
        .map(|b| format!("{b}->routing"))
        .collect();
    // Room at both ends: the first second is the movers starting, the last the run ending.
    Ok(profile::generate(
        p,
        seed,
        &links,
        scenario.start_ms + 1_000,
        scenario.end_ms - 1_000,
        &busy,
        scenario.file.time_scale_ms,
    ))
}

fn secs_label(s: f64) -> String {
    if s >= 1.0 && s == s.trunc() {
        format!("{s:.0}s")
    } else {
        format!("{}ms", (s * 1000.0).round())
    }
}

/// One run of a cell, measured. A harness error is recorded, not raised: the sweep goes on.
async fn one_run(
    plan: &Plan,
    runs_root: &Path,
    lease_s: f64,
    fencing: &str,
    seed: u64,
    extra: &[chaos_nemesis::Fault],
    verbose: bool,
    limit: Duration,
) -> RunResult {
    let started = Instant::now();
    let opts = RunOptions {
        scenario: plan.scenario.clone(),
        // "own" (a team's mover) switches nothing; "off" and "on" were checked by `plan`.
        fencing: <crate::scenario::Fencing as clap::ValueEnum>::from_str(fencing, false).ok(),
        mover_cmd: plan.mover_cmd.clone(),
        mover_ready: plan.mover_ready,
        restart: plan.restart,
        lease_s: Some(lease_s),
        seed: Some(seed),
        time_scale_ms: plan.time_scale_ms,
        results: runs_root.to_path_buf(),
        quiet: !verbose,
        extra_faults: extra.to_vec(),
        label: Some(format!("lease-{}-fencing-{fencing}", secs_label(lease_s))),
        ..Default::default()
    };
    let mut result = RunResult {
        lease_s,
        fencing: fencing.to_string(),
        seed,
        dir: None,
        verdict: None,
        wall_s: 0.0,
        error: None,
        figures: None,
    };
    // Dropping a run on its time limit stops its servers and movers (their owners' Drop).
    let outcome = match tokio::time::timeout(limit, run::run(&opts)).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => {
            result.error = Some(format!("{e:#}").replace('\n', " "));
            result.wall_s = started.elapsed().as_secs_f64();
            return result;
        }
        Err(_) => {
            result.error = Some(format!(
                "stopped at the sweep's remaining budget of {:.0} s",
                limit.as_secs_f64()
            ));
            result.wall_s = started.elapsed().as_secs_f64();
            return result;
        }
    };
    result.dir = Some(outcome.dir.display().to_string());
    result.verdict = Some(format!("{:?}", outcome.verdict.valid).to_lowercase());
    let measured = (|| -> anyhow::Result<measure::RunFigures> {
        let meta: RunMeta = results::read_json(&outcome.dir.join(chaos_history::RUN_META_FILE))?;
        let history = chaos_history::read_history(&outcome.dir.join(chaos_history::HISTORY_FILE))?;
        let stats: Stats = serde_json::from_value(outcome.verdict.stats.clone())
            .map_err(|e| anyhow::anyhow!("{}: verdict stats: {e}", outcome.dir.display()))?;
        Ok(measure::measure(&history, &stats, &meta.clock))
    })();
    match measured {
        Ok(f) => result.figures = Some(f),
        Err(e) => result.error = Some(format!("{e:#}").replace('\n', " ")),
    }
    result.wall_s = started.elapsed().as_secs_f64();
    result
}

/// Run the sweep; 0 when every run completed, an error (exit 3) otherwise.
pub async fn sweep(a: SweepArgs) -> anyhow::Result<u8> {
    let wall = Instant::now();
    let plan = plan(&a)?;
    // Every cell's scenario, with its weather, must validate before the first run.
    let mut weathers = BTreeMap::new();
    for k in 0..plan.runs {
        let seed = plan.seed.wrapping_add(k as u64);
        let w = weather(&plan, seed)?;
        run::resolve(&RunOptions {
            scenario: plan.scenario.clone(),
            time_scale_ms: plan.time_scale_ms,
            extra_faults: w.faults.clone(),
            ..Default::default()
        })
        .map_err(|e| anyhow::anyhow!("the latency profile does not fit the scenario: {e:#}"))?;
        weathers.insert(seed, w);
    }
    let scale = run::resolve(&RunOptions {
        scenario: plan.scenario.clone(),
        time_scale_ms: plan.time_scale_ms,
        ..Default::default()
    })?
    .file
    .time_scale_ms;
    let stamp = results::utc_stamp(std::time::SystemTime::now());
    let mut dir = a
        .results
        .join(format!("sweep-{}", plan.name))
        .join(format!("{stamp}-{}", plan.seed));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = a
            .results
            .join(format!("sweep-{}", plan.name))
            .join(format!("{stamp}-{}-{n}", plan.seed));
    }
    let runs_root = dir.join("runs");
    std::fs::create_dir_all(&runs_root)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", runs_root.display()))?;
    let total = plan.runs as usize * plan.leases_s.len() * plan.fencings.len();
    eprintln!(
        "chaos sweep: {} x {} lease(s) x fencing {} x {} run(s) = {total} runs, budget {:.0} s -> {}",
        plan.name,
        plan.leases_s.len(),
        plan.fencings.join(","),
        plan.runs,
        plan.budget.as_secs_f64(),
        dir.display()
    );

    // Run k of every cell before run k+1 of any: a budget that runs out leaves every lease measured.
    let mut done: Vec<RunResult> = Vec::new();
    let mut budget_note: Option<String> = None;
    'outer: for k in 0..plan.runs {
        let seed = plan.seed.wrapping_add(k as u64);
        let w = &weathers[&seed];
        for &lease_s in &plan.leases_s {
            for fencing in &plan.fencings {
                let elapsed = wall.elapsed();
                let mean = if done.is_empty() {
                    Duration::ZERO
                } else {
                    Duration::from_secs_f64(
                        done.iter().map(|r| r.wall_s).sum::<f64>() / done.len() as f64,
                    )
                };
                if elapsed + mean > plan.budget {
                    budget_note = Some(format!(
                        "the sweep's budget of {:.0} s was exceeded: {} of {total} runs done in {:.0} s (a run takes about {:.0} s)",
                        plan.budget.as_secs_f64(),
                        done.len(),
                        elapsed.as_secs_f64(),
                        mean.as_secs_f64()
                    ));
                    break 'outer;
                }
                let limit = plan
                    .budget
                    .saturating_sub(elapsed)
                    .max(Duration::from_secs(1));
                let r = one_run(
                    &plan, &runs_root, lease_s, fencing, seed, &w.faults, a.verbose, limit,
                )
                .await;
                eprintln!("{}", run_line(done.len() + 1, total, &r));
                done.push(r);
            }
        }
    }

    // Rows, the sweep-wide renewal distribution, conclusions, files.
    let all_us: Vec<u64> = done
        .iter()
        .filter_map(|r| r.figures.as_ref())
        .flat_map(|f| f.renew_us.iter().copied())
        .collect();
    let overall = table::percentiles(&all_us);
    let mut rows: Vec<Row> = Vec::new();
    for fencing in &plan.fencings {
        for &lease_s in &plan.leases_s {
            let cell: Vec<&RunResult> = done
                .iter()
                .filter(|r| r.lease_s == lease_s && &r.fencing == fencing)
                .collect();
            if !cell.is_empty() {
                rows.push(table::row(lease_s, fencing, &cell, overall.p999_ms, scale));
            }
        }
    }
    let conclusions: Vec<table::Conclusion> = plan
        .fencings
        .iter()
        .map(|f| {
            let mine: Vec<&Row> = rows.iter().filter(|r| &r.fencing == f).collect();
            table::conclude(&mine, &overall, plan.runs)
        })
        .collect();
    let stall_p999_us = rows.iter().map(|r| r.stall_p999_real_us).max().unwrap_or(0);
    let stall_max_us = rows.iter().map(|r| r.stall_max_real_us).max().unwrap_or(0);
    let failed: Vec<&RunResult> = done.iter().filter(|r| r.error.is_some()).collect();

    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut text = String::new();
    text.push_str(&format!(
        "chaos sweep: scenario {} seed {} ({} run(s) per cell, {} in all, {:.0} s wall)\ncommand: {command}\n",
        plan.name,
        plan.seed,
        plan.runs,
        done.len(),
        wall.elapsed().as_secs_f64()
    ));
    match &plan.profile {
        Some(p) => {
            let w = &weathers[&plan.seed];
            text.push_str(&format!(
                "latency profile on box-*->routing (targets): p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms, max {:.0} ms; seed {}: {} spikes p99..p99.9, {} at p99.9 or above, {} dropped; {}\n",
                p.p50_ms, p.p99_ms, p.p999_ms, p.max_ms, plan.seed, w.spikes_p99, w.spikes_p999, w.dropped, w.note
            ));
        }
        None => text.push_str("latency profile: none (--no-latency)\n"),
    }
    text.push_str(&format!(
        "measured renewal latency, all runs: {} renewals, p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms, max {:.0} ms (scenario time, {scale} real ms per scenario s)\n",
        overall.count, overall.p50_ms, overall.p99_ms, overall.p999_ms, overall.max_ms
    ));
    text.push_str(&format!(
        "measured mover stalls (timer lateness in the mover process), worst life: p99.9 {:.0} ms, max {:.0} ms scenario ({} / {} real µs)\n\n",
        table::scenario_ms_of_real_us(stall_p999_us, scale),
        table::scenario_ms_of_real_us(stall_max_us, scale),
        stall_p999_us,
        stall_max_us
    ));
    text.push_str(&table::text(&rows));
    text.push('\n');
    for c in &conclusions {
        text.push_str(&c.text);
        text.push('\n');
    }
    if stall_max_us > 0 {
        text.push_str(&format!(
            "the movers' own stalls reached {:.0} ms (scenario): a renewal that waits on a stalled timer is as late as one on a slow link, and no lease shorter than copy time + stall + renewal latency survives it.\n",
            table::scenario_ms_of_real_us(stall_max_us, scale)
        ));
    }
    for r in &failed {
        text.push_str(&format!(
            "run lease {} fencing {} seed {} failed: {}\n",
            secs_label(r.lease_s),
            r.fencing,
            r.seed,
            r.error.as_deref().unwrap_or("")
        ));
    }
    if let Some(note) = &budget_note {
        text.push_str(&format!("{note}\n"));
    }
    text.push_str(&format!("runs: {}\n", runs_root.display()));

    let write = |name: &str, body: &str| -> anyhow::Result<()> {
        std::fs::write(dir.join(name), body)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join(name).display()))
    };
    write("sweep.txt", &text)?;
    write("sweep.csv", &table::csv(&rows))?;
    write("sweep.svg", &svg::plot(&rows, &plan.name, overall.p999_ms))?;
    results::write_json(
        &dir.join("sweep.json"),
        &json!({
            "scenario": plan.name,
            "command": command,
            "seed": plan.seed,
            "runs_per_cell": plan.runs,
            "leases_s": plan.leases_s,
            "fencing": plan.fencings,
            "mover_cmd": plan.mover_cmd,
            "time_scale_ms": scale,
            "profile": plan.profile,
            "weather": weathers.values().collect::<Vec<_>>(),
            "columns": table::COLUMNS,
            "rows": rows,
            "renewal_latency": overall,
            "stalls": { "p999_real_us": stall_p999_us, "max_real_us": stall_max_us },
            "conclusions": conclusions,
            "runs": done,
            "wall_s": wall.elapsed().as_secs_f64(),
            "budget_s": plan.budget.as_secs_f64(),
            "budget_exceeded": budget_note,
            "complete": budget_note.is_none() && failed.is_empty(),
        }),
    )?;
    print!("{text}");
    eprintln!("chaos sweep: {}", dir.display());
    if let Some(note) = budget_note {
        anyhow::bail!("{note}; the partial table is in {}", dir.display());
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{} of {} runs failed in the harness (first: {}); the table of the rest is in {}",
            failed.len(),
            done.len(),
            failed[0].error.as_deref().unwrap_or(""),
            dir.display()
        );
    }
    Ok(0)
}

fn run_line(i: usize, total: usize, r: &RunResult) -> String {
    let head = format!(
        "sweep: run {i}/{total}: lease {} fencing {} seed {}",
        secs_label(r.lease_s),
        r.fencing,
        r.seed
    );
    match (&r.figures, &r.error) {
        (_, Some(e)) => format!("{head}: FAILED after {:.1} s: {e}", r.wall_s),
        (Some(f), None) => format!(
            "{head}: {} in {:.1} s; {} renewals, {} false expiries, {} takeovers, vacancy {:.1} s, {} rows lost, {} refused",
            r.verdict.as_deref().unwrap_or("?"),
            r.wall_s,
            f.renewals,
            f.false_expiries.len(),
            f.takeovers,
            f.vacancy_total_s,
            f.rows_lost,
            f.refused_writes
        ),
        (None, None) => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> SweepArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            a: SweepArgs,
        }
        let mut argv = vec!["sweep", "--scenario", "gc-pause"];
        argv.extend_from_slice(extra);
        Wrap::parse_from(argv).a
    }

    #[test]
    fn durations_parse_and_refuse_nonsense() {
        assert_eq!(parse_duration_s("2s"), Ok(2.0));
        assert_eq!(parse_duration_s("500ms"), Ok(0.5));
        assert_eq!(parse_duration_s("1m"), Ok(60.0));
        assert!(parse_duration_s("0s").unwrap_err().contains("above zero"));
        assert!(parse_duration_s("abc")
            .unwrap_err()
            .contains("not a duration"));
    }

    #[test]
    fn bad_input_is_one_line_before_anything_runs() {
        for (flags, needle) in [
            (vec!["--lease", "0s"], "--lease: '0s' must be above zero"),
            (vec!["--lease", "abc"], "--lease: 'abc' is not a duration"),
            (vec!["--runs", "0"], "--runs: 0 is not 1 to 1000"),
            (vec!["--fencing", "maybe"], "--fencing: 'maybe'"),
            (
                vec!["--mover-cmd", "my-mover", "--fencing", "on"],
                "a --mover-cmd fences as it does",
            ),
            (vec!["--restart", "never"], "are about a --mover-cmd"),
            (
                vec!["--latency-p999", "10ms"],
                "need p50 <= p99 <= p99.9 <= max",
            ),
        ] {
            let e = plan(&args(&flags)).unwrap_err().to_string();
            assert!(e.contains(needle), "{flags:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let mut a = args(&[]);
        a.scenario = "no-such-scenario".into();
        assert!(plan(&a)
            .unwrap_err()
            .to_string()
            .contains("no scenario 'no-such-scenario'"));
    }

    #[test]
    fn leases_are_sorted_and_the_weather_fits_the_scenario() {
        let p = plan(&args(&["--lease", "10s,2s,5s,2s", "--fencing", "off,on"])).unwrap();
        assert_eq!(p.leases_s, vec![2.0, 5.0, 10.0]);
        assert_eq!(p.fencings, vec!["off", "on"]);
        let own = plan(&args(&["--mover-cmd", "my-mover --fast"])).unwrap();
        assert_eq!(own.fencings, vec![OWN_FENCING]);
        assert_eq!(own.mover_cmd.as_deref(), Some("my-mover --fast"));
        let w = weather(&p, 7).unwrap();
        assert!(!w.faults.is_empty());
        // gc-pause's own race faults hold box-1/3/4->routing for its first 5 s.
        for f in &w.faults {
            let chaos_nemesis::FaultKind::Latency { link, .. } = &f.kind else {
                panic!("the weather is latency only: {f:?}")
            };
            if link != "box-2->routing" {
                assert!(f.at_ms >= 12 * 3_600_000 + 5_000, "{link} at {}", f.at_ms);
            }
        }
        run::resolve(&RunOptions {
            scenario: "gc-pause".into(),
            extra_faults: w.faults,
            ..Default::default()
        })
        .unwrap();
    }
}
