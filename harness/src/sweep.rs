//! `chaos sweep`: one scenario, several lock services, fencing settings and lease durations, measured renewal latency, false expiries, vacancy and loss, in a decision table.
//!
//! Each cell (lock service, fencing setting, lease duration) is run `--runs`
//! times with the same seeded latency weather on the movers' links to the lock
//! (the routing db, or the service's own server; see `profile`), and every figure is measured from the run's history and its
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
pub(crate) mod plan;
pub(crate) mod profile;

pub use crate::values::parse_duration_s;
pub use plan::{plan, LockPlan, Plan, SweepArgs, DEFINITIONS, OWN_FENCING};

use crate::results;
use crate::run::{self, RunOptions};
use crate::scenario::Scenario;
use chaos_history::RunMeta;
use chaos_report::sweep::{html, svg, table};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use table::{Row, RunResult};

/// The latency weather for one seed, as faults added to the scenario's.
fn weather(plan: &Plan, scenario: &Scenario, seed: u64) -> profile::Generated {
    let Some(p) = &plan.profile else {
        return profile::Generated {
            note: "no latency profile (--no-latency)".into(),
            ..Default::default()
        };
    };
    let busy = profile::busy_links(scenario);
    // The renewals' links: the routing db's, or the lock service's own when it has a server.
    let target = if scenario.file.lock.has_node() {
        crate::lock::LOCK_NODE
    } else {
        "routing"
    };
    let links: Vec<String> = scenario
        .topology()
        .boxes
        .iter()
        .map(|b| chaos_nemesis::Link::name(b, target))
        .collect();
    // Room at both ends: the first second is the movers starting, the last the run ending.
    profile::generate(
        p,
        seed,
        &links,
        scenario.start_ms + 1_000,
        scenario.end_ms - 1_000,
        &busy,
        scenario.file.time_scale_ms,
    )
}

/// A cell's weather: which lock service (its index in the plan) and which seed.
type WeatherKey = (usize, u64);

/// Every cell's weather, each checked against the scenario before the first run: (lock, seed)
/// -> weather. Every lock service gets the same seeds, on its own renewals' links.
fn weathers(plan: &Plan) -> anyhow::Result<BTreeMap<WeatherKey, profile::Generated>> {
    let mut out = BTreeMap::new();
    for (li, lock) in plan.locks.iter().enumerate() {
        let scenario = &lock.scenario;
        for k in 0..plan.runs {
            let seed = plan.seed.wrapping_add(k as u64);
            let w = weather(plan, scenario, seed);
            crate::scenario::load::validate(scenario.file.clone(), &scenario.path, &w.faults)
                .map_err(|e| {
                    anyhow::anyhow!("the latency profile does not fit the scenario: {e:#}")
                })?;
            out.insert((li, seed), w);
        }
    }
    Ok(out)
}

fn secs_label(s: f64) -> String {
    if s >= 1.0 && s == s.trunc() {
        format!("{s:.0}s")
    } else {
        format!("{}ms", (s * 1000.0).round())
    }
}

/// One run of one cell: its lock service, lease, fencing setting and seed.
struct Cell<'a> {
    lock: &'a LockPlan,
    lease_s: f64,
    fencing: &'a str,
    seed: u64,
}

/// One run of a cell, measured. A harness error is recorded, not raised: the sweep goes on.
async fn one_run(
    plan: &Plan,
    cell: Cell<'_>,
    runs_root: &Path,
    extra: &[chaos_nemesis::Fault],
    verbose: bool,
    limit: Duration,
) -> RunResult {
    let Cell {
        lock,
        lease_s,
        fencing,
        seed,
    } = cell;
    let started = Instant::now();
    let opts = RunOptions {
        scenario: plan.scenario.clone(),
        // "own" (a team's mover) switches nothing; "off" and "on" were checked by `plan`.
        fencing: <crate::scenario::Fencing as clap::ValueEnum>::from_str(fencing, false).ok(),
        mover_cmd: plan.mover_cmd.clone(),
        mover_ready: plan.mover_ready,
        restart: plan.restart,
        lock: lock.flag,
        lease_s: Some(lease_s),
        seed: Some(seed),
        time_scale_ms: plan.time_scale_ms,
        results: runs_root.to_path_buf(),
        quiet: !verbose,
        extra_faults: extra.to_vec(),
        label: Some(format!(
            "{}-lease-{}-fencing-{fencing}",
            lock.used.name(),
            secs_label(lease_s)
        )),
        ..Default::default()
    };
    let mut result = RunResult {
        lock: lock.used.name().to_string(),
        lease_s,
        fencing: fencing.to_string(),
        seed,
        dir: None,
        verdict: None,
        wall_s: 0.0,
        error: None,
        figures: None,
        pace: None,
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
        // A mover too slow for the scale is cut short whatever its lease: said, not blamed
        // on the lease.
        let latency = chaos_report::latency_table(&history, &meta.clock);
        result.pace = chaos_report::pace(&meta, &latency).map(|p| p.line());
        let mut figures = measure::measure(&history, &outcome.verdict.stats, &meta.clock);
        figures.reached = outcome.verdict.reached.iter().map(|r| r.moment).collect();
        Ok(figures)
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
    if crate::failover::sweep::is_failover(&a.scenario) {
        return crate::failover::sweep::sweep(&a).await;
    }
    let wall = Instant::now();
    let plan = plan(&a)?;
    let weathers = weathers(&plan)?;
    let dir = sweep_dir(&a.results, &plan)?;
    let runs_root = dir.join("runs");
    std::fs::create_dir_all(&runs_root)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", runs_root.display()))?;
    eprintln!(
        "chaos sweep: {} x lock {} x {} lease(s) x fencing {} x {} run(s) = {} runs, budget {:.0} s -> {}",
        plan.name,
        lock_names(&plan).join(","),
        plan.leases_s.len(),
        plan.fencings.join(","),
        plan.runs,
        total(&plan),
        plan.budget.as_secs_f64(),
        dir.display()
    );
    let (done, budget_note) = run_cells(&plan, &weathers, &runs_root, a.verbose, wall).await;
    let summary = Summary::of(&plan, &done);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let head = summary.head(&plan, &weathers, &command, done.len(), wall);
    let mut text = format!("{head}\n{}", summary.text());
    for r in summary.failed(&done) {
        text.push_str(&format!(
            "run lock {} lease {} fencing {} seed {} failed: {}\n",
            r.lock,
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
    let failed = summary.failed(&done);
    Outputs {
        dir: &dir,
        plan: &plan,
        weathers: &weathers,
        summary: &summary,
        done: &done,
        command: &command,
        head: &head,
        text: &text,
        budget_note: budget_note.as_deref(),
    }
    .write(wall)?;
    print!("{text}");
    eprintln!("chaos sweep: {}", dir.display());
    if let Some(note) = budget_note {
        anyhow::bail!("{note}; the partial table is in {}", dir.display());
    }
    if let Some(first) = failed.first() {
        anyhow::bail!(
            "{} of {} runs failed in the harness (first: {}); the table of the rest is in {}",
            failed.len(),
            done.len(),
            first.error.as_deref().unwrap_or(""),
            dir.display()
        );
    }
    Ok(0)
}

/// Everything a sweep writes, in its folder: sweep.txt, .csv, .svg, .html and .json.
struct Outputs<'a> {
    dir: &'a Path,
    plan: &'a Plan,
    weathers: &'a BTreeMap<WeatherKey, profile::Generated>,
    summary: &'a Summary,
    done: &'a [RunResult],
    command: &'a str,
    head: &'a str,
    text: &'a str,
    budget_note: Option<&'a str>,
}

impl Outputs<'_> {
    fn write(&self, wall: Instant) -> anyhow::Result<()> {
        let write = |name: &str, body: &str| -> anyhow::Result<()> {
            std::fs::write(self.dir.join(name), body)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", self.dir.join(name).display()))
        };
        let p999: Vec<(String, f64)> = (self.summary.by_lock.iter())
            .map(|(l, p)| (l.clone(), p.p999_ms))
            .collect();
        let plot = svg::plot(&self.summary.rows, &self.plan.name, &p999);
        write("sweep.txt", self.text)?;
        write("sweep.csv", &table::csv(&self.summary.rows))?;
        write("sweep.svg", &plot)?;
        write(
            "sweep.html",
            &html::page(&html::Page {
                scenario: &self.plan.name,
                command: self.command,
                head: self.head,
                rows: &self.summary.rows,
                conclusions: &self.summary.conclusions,
                notes: &format!(
                    "{}{}",
                    self.summary
                        .pace
                        .as_deref()
                        .map_or(String::new(), |p| format!("{p}\n")),
                    self.summary.notes()
                ),
                p999_ms: &p999,
                svg: &plot,
                runs: &run_links(self.dir, self.done),
            }),
        )?;
        let weather: Vec<serde_json::Value> = (self.weathers.iter())
            .map(|((li, _), w)| {
                let mut v = json!(w);
                v["lock"] = json!(self.plan.locks[*li].used.name());
                v
            })
            .collect();
        results::write_json(
            &self.dir.join("sweep.json"),
            &json!({
                "scenario": self.plan.name,
                "command": self.command,
                "seed": self.plan.seed,
                "runs_per_cell": self.plan.runs,
                "locks": lock_names(self.plan),
                "leases_s": self.plan.leases_s,
                "fencing": self.plan.fencings,
                "mover_cmd": self.plan.mover_cmd,
                "time_scale_ms": self.plan.locks.iter().map(|l| (l.used.name(), l.time_scale_ms)).collect::<BTreeMap<_, _>>(),
                "profile": self.plan.profile,
                "weather": weather,
                "columns": table::COLUMNS,
                "rows": self.summary.rows,
                "renewal_latency": self.summary.overall,
                "renewal_latency_by_lock": self.summary.by_lock.iter().cloned().collect::<BTreeMap<_, _>>(),
                "stalls": { "p999_real_us": self.summary.stall_p999_us, "max_real_us": self.summary.stall_max_us },
                "conclusions": self.summary.conclusions,
                "runs": self.done,
                "wall_s": wall.elapsed().as_secs_f64(),
                "budget_s": self.plan.budget.as_secs_f64(),
                "budget_exceeded": self.budget_note,
                "complete": self.budget_note.is_none() && self.summary.failed(self.done).is_empty(),
            }),
        )?;
        Ok(())
    }
}

fn lock_names(plan: &Plan) -> Vec<&'static str> {
    plan.locks.iter().map(|l| l.used.name()).collect()
}

/// Runs in the whole sweep: one per run, lock service, lease and fencing setting.
fn total(plan: &Plan) -> usize {
    plan.runs as usize * plan.locks.len() * plan.leases_s.len() * plan.fencings.len()
}

/// Each run as the page links it: its report relative to the sweep's folder.
fn run_links(dir: &Path, done: &[RunResult]) -> Vec<html::RunLink> {
    (done.iter())
        .map(|r| html::RunLink {
            label: format!(
                "lock {}, lease {}, fencing {}, seed {}",
                r.lock,
                secs_label(r.lease_s),
                r.fencing,
                r.seed
            ),
            report: (r.dir.as_deref())
                .map(|d| Path::new(d).join("report.html"))
                .filter(|p| p.is_file())
                .map(|p| p.strip_prefix(dir).unwrap_or(&p).display().to_string()),
            outcome: match (&r.verdict, &r.error) {
                (_, Some(e)) => format!("failed: {e}"),
                (Some(v), None) => v.clone(),
                (None, None) => "no verdict".into(),
            },
        })
        .collect()
}

/// `results/sweep-<scenario>/<stamp>-<seed>[-n]`, new.
fn sweep_dir(root: &Path, plan: &Plan) -> anyhow::Result<PathBuf> {
    let stamp = results::utc_stamp(std::time::SystemTime::now());
    let base = root.join(format!("sweep-{}", plan.name));
    let mut dir = base.join(format!("{stamp}-{}", plan.seed));
    let mut n = 1;
    while dir.exists() {
        n += 1;
        dir = base.join(format!("{stamp}-{}-{n}", plan.seed));
    }
    Ok(dir)
}

/// Run k of every cell before run k+1 of any: a budget that runs out leaves every lock service
/// and lease measured. Returns the runs done and, when the budget ran out, why the rest were not.
async fn run_cells(
    plan: &Plan,
    weathers: &BTreeMap<WeatherKey, profile::Generated>,
    runs_root: &Path,
    verbose: bool,
    wall: Instant,
) -> (Vec<RunResult>, Option<String>) {
    let total = total(plan);
    let mut cells = Vec::with_capacity(total);
    for k in 0..plan.runs {
        let seed = plan.seed.wrapping_add(k as u64);
        for li in 0..plan.locks.len() {
            for &lease_s in &plan.leases_s {
                for fencing in &plan.fencings {
                    cells.push((li, seed, lease_s, fencing));
                }
            }
        }
    }
    let mut done: Vec<RunResult> = Vec::new();
    for (li, seed, lease_s, fencing) in cells {
        let elapsed = wall.elapsed();
        let mean = match done.is_empty() {
            true => Duration::ZERO,
            false => Duration::from_secs_f64(
                done.iter().map(|r| r.wall_s).sum::<f64>() / done.len() as f64,
            ),
        };
        if elapsed + mean > plan.budget {
            let note = format!(
                "the sweep's budget of {:.0} s was exceeded: {} of {total} runs done in {:.0} s (a run takes about {:.0} s)",
                plan.budget.as_secs_f64(),
                done.len(),
                elapsed.as_secs_f64(),
                mean.as_secs_f64()
            );
            return (done, Some(note));
        }
        let limit = (plan.budget.saturating_sub(elapsed)).max(Duration::from_secs(1));
        let faults = &weathers[&(li, seed)].faults;
        let lock = &plan.locks[li];
        let cell = Cell {
            lock,
            lease_s,
            fencing,
            seed,
        };
        let r = one_run(plan, cell, runs_root, faults, verbose, limit).await;
        eprintln!("{}", run_line(done.len() + 1, total, &r));
        done.push(r);
    }
    (done, None)
}

/// The sweep's tables: a row per cell, the renewal distribution (sweep-wide and per lock
/// service), a conclusion per lock service and fencing setting, the movers' worst stalls.
struct Summary {
    rows: Vec<Row>,
    overall: table::Percentiles,
    by_lock: Vec<(String, table::Percentiles)>,
    conclusions: Vec<table::Conclusion>,
    stall_p999_us: u64,
    stall_max_us: u64,
    /// The scale stalls are read at (the first lock service's).
    scale: f64,
    /// The mover too slow for the scenario's scale, in how many runs, and the first run's line.
    pace: Option<String>,
}

/// Every renewal latency of `runs`, scenario µs, as percentiles.
fn renewals<'a>(runs: impl Iterator<Item = &'a RunResult>) -> table::Percentiles {
    let us: Vec<u64> = runs
        .filter_map(|r| r.figures.as_ref())
        .flat_map(|f| f.renew_us.iter().copied())
        .collect();
    table::percentiles(&us)
}

impl Summary {
    fn of(plan: &Plan, done: &[RunResult]) -> Summary {
        let slow: Vec<&str> = done.iter().filter_map(|r| r.pace.as_deref()).collect();
        // Every run cut short by the mover's pace: no lease was tried, so none is advised.
        let all_slow = !slow.is_empty() && slow.len() == done.len();
        let mut rows: Vec<Row> = Vec::new();
        let mut by_lock = Vec::new();
        let mut conclusions = Vec::new();
        for lock in &plan.locks {
            let name = lock.used.name();
            let mine: Vec<&RunResult> = done.iter().filter(|r| r.lock == name).collect();
            let p = renewals(mine.iter().copied());
            for fencing in &plan.fencings {
                let first = rows.len();
                for &lease_s in &plan.leases_s {
                    let cell: Vec<&RunResult> = (mine.iter().copied())
                        .filter(|r| r.lease_s == lease_s && &r.fencing == fencing)
                        .collect();
                    if !cell.is_empty() {
                        let scale = lock.time_scale_ms;
                        rows.push(table::row(name, lease_s, fencing, &cell, p.p999_ms, scale));
                    }
                }
                let refs: Vec<&Row> = rows[first..].iter().collect();
                if !refs.is_empty() {
                    conclusions.push(table::conclude(&refs, &p, plan.runs, all_slow));
                }
            }
            by_lock.push((name.to_string(), p));
        }
        let pace = slow.first().map(|line| {
            format!(
                "the mover is too slow for the scenario's scale in {} of {} runs ({line}): those runs were cut short by the time limit, whatever their lease; fix the scale before choosing a lease.",
                slow.len(),
                done.len()
            )
        });
        Summary {
            pace,
            stall_p999_us: rows.iter().map(|r| r.stall_p999_real_us).max().unwrap_or(0),
            stall_max_us: rows.iter().map(|r| r.stall_max_real_us).max().unwrap_or(0),
            scale: plan.locks[0].time_scale_ms,
            rows,
            overall: renewals(done.iter()),
            by_lock,
            conclusions,
        }
    }

    fn failed<'a>(&self, done: &'a [RunResult]) -> Vec<&'a RunResult> {
        done.iter().filter(|r| r.error.is_some()).collect()
    }

    /// `sweep.txt`'s head: the command, the weather, the measured latency and stalls.
    fn head(
        &self,
        plan: &Plan,
        weathers: &BTreeMap<WeatherKey, profile::Generated>,
        command: &str,
        runs_done: usize,
        wall: Instant,
    ) -> String {
        let (o, scale) = (&self.overall, self.scale);
        let mut text = format!(
            "chaos sweep: scenario {} seed {} lock {} ({} run(s) per cell, {} in all, {:.0} s wall)\ncommand: {command}\n",
            plan.name,
            plan.seed,
            lock_names(plan).join(","),
            plan.runs,
            runs_done,
            wall.elapsed().as_secs_f64()
        );
        match &plan.profile {
            Some(p) => {
                let w = &weathers[&(0, plan.seed)];
                let mut nodes: Vec<&str> = plan.locks.iter().map(|l| l.renew_node).collect();
                nodes.dedup();
                text.push_str(&format!(
                    "latency profile on box-*->{} (targets): p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms, max {:.0} ms; seed {}: {} spikes p99..p99.9, {} at p99.9 or above, {} dropped; {}\n",
                    nodes.join(" and box-*->"), p.p50_ms, p.p99_ms, p.p999_ms, p.max_ms, plan.seed, w.spikes_p99, w.spikes_p999, w.dropped, w.note
                ));
            }
            None => text.push_str("latency profile: none (--no-latency)\n"),
        }
        let line = |p: &table::Percentiles| {
            format!(
                "{} renewals, p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms, max {:.0} ms",
                p.count, p.p50_ms, p.p99_ms, p.p999_ms, p.max_ms
            )
        };
        text.push_str(&format!(
            "measured renewal latency, all runs: {} (scenario time, {scale} real ms per scenario s)\n",
            line(o)
        ));
        if self.by_lock.len() > 1 {
            for (lock, p) in &self.by_lock {
                text.push_str(&format!("  lock {lock}: {}\n", line(p)));
            }
        }
        let stall = |us| table::scenario_ms_of_real_us(us, scale);
        text.push_str(&format!(
            "measured mover stalls (timer lateness in the mover process), worst life: p99.9 {:.0} ms, max {:.0} ms scenario ({} / {} real µs)\n",
            stall(self.stall_p999_us),
            stall(self.stall_max_us),
            self.stall_p999_us,
            self.stall_max_us
        ));
        text
    }

    /// `sweep.txt` after the head, up to the failures: the table, the conclusions and notes.
    fn text(&self) -> String {
        let mut text = table::text(&self.rows);
        text.push('\n');
        if let Some(pace) = &self.pace {
            text.push_str(pace);
            text.push('\n');
        }
        for c in &self.conclusions {
            text.push_str(&c.text);
            text.push('\n');
        }
        text.push_str(&self.notes());
        text
    }

    /// The movers' own stalls, when they had any: a note beside the conclusions.
    fn notes(&self) -> String {
        let mut text = String::new();
        if self.stall_max_us > 0 {
            text.push_str(&format!(
                "the movers' own stalls reached {:.0} ms (scenario): a renewal that waits on a stalled timer is as late as one on a slow link, and no lease shorter than copy time + stall + renewal latency survives it.\n",
                table::scenario_ms_of_real_us(self.stall_max_us, self.scale)
            ));
        }
        text
    }
}

fn run_line(i: usize, total: usize, r: &RunResult) -> String {
    let head = format!(
        "sweep: run {i}/{total}: lock {} lease {} fencing {} seed {}",
        r.lock,
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
            f.vacancy_total_s.max(0.0),
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
            (
                vec!["--lock", "claims,consul"],
                "--lock: 'consul' is not a lock service (claims, advisory, etcd, redis, zookeeper)",
            ),
            (vec!["--lock", ","], "--lock: give one or more of"),
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
        let scenario = run::resolve(&RunOptions {
            scenario: "gc-pause".into(),
            ..Default::default()
        })
        .unwrap();
        let w = weather(&p, &scenario, 7);
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

    #[test]
    fn each_lock_service_is_planned_once_in_order_with_its_own_weather() {
        let p = plan(&args(&[
            "--lock",
            "etcd, claims,advisory,etcd",
            "--lease",
            "10s",
        ]))
        .unwrap();
        let used: Vec<&str> = p.locks.iter().map(|l| l.used.name()).collect();
        assert_eq!(used, vec!["etcd", "claims", "advisory"]);
        let nodes: Vec<&str> = p.locks.iter().map(|l| l.renew_node).collect();
        assert_eq!(nodes, vec!["lock", "routing", "routing"]);
        assert_eq!(total(&p), 3);
        let w = weathers(&p).unwrap();
        assert_eq!(w.len(), 3);
        let links = |li: usize| -> Vec<String> {
            (w[&(li, p.seed)].faults.iter())
                .map(|f| match &f.kind {
                    chaos_nemesis::FaultKind::Latency { link, .. } => link.clone(),
                    other => panic!("the weather is latency only: {other:?}"),
                })
                .collect()
        };
        assert!(
            links(0).iter().all(|l| l.ends_with("->lock")),
            "{:?}",
            links(0)
        );
        assert!(
            links(1).iter().all(|l| l.ends_with("->routing")),
            "{:?}",
            links(1)
        );
        // The same seed draws the same windows for every service, only on its own links.
        let at =
            |li: usize| -> Vec<i64> { w[&(li, p.seed)].faults.iter().map(|f| f.at_ms).collect() };
        assert_eq!(at(1), at(2));
        // Without --lock: the scenario's own service, given to no run by name.
        let own = plan(&args(&[])).unwrap();
        assert_eq!(own.locks.len(), 1);
        assert!(own.locks[0].flag.is_none());
    }
}
