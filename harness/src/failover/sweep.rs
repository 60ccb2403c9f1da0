//! `chaos sweep` of a failover scenario: the watcher's silence constant (5 s, 10 s, 30 s, 60 s) under the same seeded latency weather on its link to the primary, false promotions and unavailability side by side against the measured p99.9 check latency, as the lease sweep does for the mover.
//!
//! Every figure is measured: promotions and false promotions (the replica promoted while the
//! observer saw the primary up) and unavailability from each run's verdict, check latency from
//! the watcher's `check` lines (a failed check at its own timeout), in scenario ms. Output:
//! `results/sweep-<scenario>/<stamp>-<seed>/` with sweep.txt, sweep.csv, sweep.json and runs/.

use super::settings::{Fence, Overrides};
use crate::results;
use crate::run::{self, RunOptions};
use crate::scenario::System;
use crate::sweep::plan::{self, SweepArgs};
use crate::sweep::profile;
use chaos_history::failover_names as names;
use chaos_report::failover::sweep::{self as table, RunFigures};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whether `scenario` names a failover scenario (it loads and says `system = "failover"`).
pub fn is_failover(scenario: &str) -> bool {
    crate::scenario::resolve(scenario)
        .ok()
        .and_then(|p| crate::scenario::load::file(&p).ok())
        .is_some_and(|s| s.file.system == System::Failover)
}

/// The failover sweep's input, checked before anything runs.
struct Plan {
    common: plan::Plan,
    silences_s: Vec<f64>,
    fences: Vec<Fence>,
}

fn checked(a: &SweepArgs) -> anyhow::Result<Plan> {
    if a.fencing.is_some() || a.mover_cmd.is_some() || a.lock.is_some() {
        anyhow::bail!("--fencing, --mover-cmd and --lock are the mover's; a failover sweep takes --fence and --silence");
    }
    let mut silences_s = Vec::new();
    for part in a.silence.as_deref().unwrap_or("5s,10s,30s,60s").split(',') {
        if part.trim().is_empty() {
            continue;
        }
        let s =
            crate::values::silence_s(part.trim()).map_err(|e| anyhow::anyhow!("--silence: {e}"))?;
        silences_s.push(s);
    }
    if silences_s.is_empty() {
        anyhow::bail!("--silence: give at least one duration, e.g. --silence 5s,10s,30s,60s");
    }
    silences_s.sort_by(|x, y| x.total_cmp(y));
    silences_s.dedup();
    let mut fences = Vec::new();
    for f in a
        .fence
        .as_deref()
        .unwrap_or("off")
        .split(',')
        .map(str::trim)
    {
        let fence = match f {
            "off" => Fence::Off,
            "on" => Fence::On,
            other => anyhow::bail!("--fence: '{other}' is not off or on (give off, on or off,on)"),
        };
        if !fences.contains(&fence) {
            fences.push(fence);
        }
    }
    let mut common_args = a.clone();
    common_args.silence = None;
    common_args.fence = None;
    let common = plan::plan(&common_args)?;
    Ok(Plan {
        common,
        silences_s,
        fences,
    })
}

fn word(f: Fence) -> &'static str {
    match f {
        Fence::Off => "off",
        Fence::On => "on",
    }
}

/// Run the sweep; 0 when every run completed, an error (exit 3) otherwise.
pub async fn sweep(a: &SweepArgs) -> anyhow::Result<u8> {
    let wall = Instant::now();
    let p = checked(a)?;
    let c = &p.common;
    let scenario = run::resolve(&RunOptions {
        scenario: c.scenario.clone(),
        time_scale_ms: c.time_scale_ms,
        ..Default::default()
    })?;
    let scale = scenario.file.time_scale_ms;
    let weather = match &c.profile {
        Some(profile) => profile::generate(
            profile,
            c.seed,
            &[chaos_nemesis::Link::name(names::WATCHER, names::PRIMARY)],
            scenario.start_ms + 1_000,
            scenario.end_ms - 1_000,
            &profile::busy_links(&scenario),
            scale,
        ),
        None => profile::Generated::default(),
    };
    crate::scenario::load::validate(scenario.file.clone(), &scenario.path, &weather.faults)
        .map_err(|e| anyhow::anyhow!("the latency profile does not fit the scenario: {e:#}"))?;
    let stamp = results::utc_stamp(std::time::SystemTime::now());
    let dir = a
        .results
        .join(format!("sweep-{}", c.name))
        .join(format!("{stamp}-{}", c.seed));
    let runs_root = dir.join("runs");
    std::fs::create_dir_all(&runs_root)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", runs_root.display()))?;
    let total = p.silences_s.len() * p.fences.len() * c.runs as usize;
    eprintln!(
        "chaos sweep: {} x {} silence(s) x fence {} x {} run(s) = {total} runs -> {}",
        c.name,
        p.silences_s.len(),
        p.fences
            .iter()
            .map(|f| word(*f))
            .collect::<Vec<_>>()
            .join(","),
        c.runs,
        dir.display()
    );
    let (done, failures) = run_cells(&p, a, &weather.faults, &runs_root, scale, wall).await;
    let text = write_out(&p, &dir, &weather, &done, &failures, scale, wall)?;
    print!("{text}");
    eprintln!("chaos sweep: {}", dir.display());
    if let Some(first) = failures.first() {
        anyhow::bail!(
            "{} run(s) did not complete (first: {first}); the table of the rest is in {}",
            failures.len(),
            dir.display()
        );
    }
    Ok(0)
}

/// Run k of every cell before run k+1 of any, within the budget; the runs done, measured, and
/// the ones that did not complete, each said in a line.
async fn run_cells(
    p: &Plan,
    a: &SweepArgs,
    weather: &[chaos_nemesis::Fault],
    runs_root: &Path,
    scale: f64,
    wall: Instant,
) -> (Vec<(Fence, f64, RunFigures)>, Vec<String>) {
    let c = &p.common;
    let mut done: Vec<(Fence, f64, RunFigures)> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    'cells: for k in 0..c.runs {
        let seed = c.seed.wrapping_add(k as u64);
        for &fence in &p.fences {
            for &silence_s in &p.silences_s {
                let left = c.budget.saturating_sub(wall.elapsed());
                if left.is_zero() {
                    failures.push(format!(
                        "the sweep's budget of {:.0} s ran out",
                        c.budget.as_secs_f64()
                    ));
                    break 'cells;
                }
                let label = format!("silence-{silence_s}s-fence-{}", word(fence));
                let opts = RunOptions {
                    scenario: c.scenario.clone(),
                    seed: Some(seed),
                    time_scale_ms: c.time_scale_ms,
                    results: runs_root.to_path_buf(),
                    quiet: !a.verbose,
                    extra_faults: weather.to_vec(),
                    label: Some(label.clone()),
                    failover: Overrides {
                        fence: Some(fence),
                        silence_s: Some(silence_s),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let began = Instant::now();
                match tokio::time::timeout(left.max(Duration::from_secs(1)), run::run(&opts)).await
                {
                    Ok(Ok(outcome)) => {
                        let f = match measure(&outcome.dir, &outcome.verdict, scale) {
                            Ok(f) => f,
                            Err(e) => {
                                failures
                                    .push(format!("{label} seed {seed}: {}", crate::one_line(&e)));
                                continue;
                            }
                        };
                        eprintln!("sweep: {label} seed {seed}: {} in {:.1} s; {} promotions ({} false), unavailability {:.1} s, {} orders lost", f.verdict, began.elapsed().as_secs_f64(), f.promotions, f.false_promotions, f.unavailability_s, f.lost_orders);
                        done.push((fence, silence_s, f));
                    }
                    Ok(Err(e)) => {
                        failures.push(format!("{label} seed {seed}: {}", crate::one_line(&e)))
                    }
                    Err(_) => failures.push(format!(
                        "{label} seed {seed}: stopped at the sweep's budget"
                    )),
                }
            }
        }
    }
    (done, failures)
}

/// `sweep.txt`, `sweep.csv` and `sweep.json` in `dir`; the text.
fn write_out(
    p: &Plan,
    dir: &Path,
    weather: &profile::Generated,
    done: &[(Fence, f64, RunFigures)],
    failures: &[String],
    scale: f64,
    wall: Instant,
) -> anyhow::Result<String> {
    let c = &p.common;
    let rows: Vec<table::Row> = p
        .fences
        .iter()
        .flat_map(|&fence| {
            p.silences_s
                .iter()
                .filter_map(|&s| {
                    let cell: Vec<&RunFigures> = done
                        .iter()
                        .filter(|d| d.0 == fence && d.1 == s)
                        .map(|d| &d.2)
                        .collect();
                    (!cell.is_empty()).then(|| table::row(word(fence), s, &cell))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut all: Vec<f64> = done
        .iter()
        .flat_map(|d| d.2.checks_ms.iter().copied())
        .collect();
    all.sort_by(|x, y| x.total_cmp(y));
    let (p50, p999, max) = (
        table::quantile(&all, 0.5),
        table::quantile(&all, 0.999),
        all.last().copied().unwrap_or(0.0),
    );
    let conclusions: Vec<String> = p
        .fences
        .iter()
        .map(|&f| {
            let mine: Vec<&table::Row> = rows.iter().filter(|r| r.fence == word(f)).collect();
            table::conclude(&mine, p999, max)
        })
        .collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut text = format!("chaos sweep: failover scenario {} seed {} ({} run(s) per cell, {:.0} s wall)\ncommand: {command}\n", c.name, c.seed, c.runs, wall.elapsed().as_secs_f64());
    text.push_str(&format!(
        "latency weather on watcher->primary: {} spikes p99..p99.9, {} at p99.9 or above ({})\n",
        weather.spikes_p99,
        weather.spikes_p999,
        if c.profile.is_some() {
            "seeded"
        } else {
            "none: --no-latency"
        }
    ));
    text.push_str(&format!("measured check latency, all runs: {} checks, p50 {p50:.0} ms, p99.9 {p999:.0} ms, max {max:.0} ms (scenario time; a failed check counts at its timeout)\n\n", all.len()));
    text.push_str(&table::text(&rows));
    text.push('\n');
    for line in &conclusions {
        text.push_str(line);
        text.push('\n');
    }
    for f in failures {
        text.push_str(&format!("run failed: {f}\n"));
    }
    std::fs::write(dir.join("sweep.txt"), &text)?;
    std::fs::write(dir.join("sweep.csv"), table::csv(&rows))?;
    results::write_json(
        &dir.join("sweep.json"),
        &json!({
            "scenario": c.name, "system": "failover", "command": command, "seed": c.seed,
            "runs_per_cell": c.runs, "silences_s": p.silences_s,
            "fences": p.fences.iter().map(|f| word(*f)).collect::<Vec<_>>(),
            "time_scale_ms": scale, "profile": c.profile, "weather": weather,
            "columns": table::COLUMNS, "rows": rows,
            "check_latency_ms": { "count": all.len(), "p50": p50, "p999": p999, "max": max },
            "conclusions": conclusions, "failures": failures,
            "wall_s": wall.elapsed().as_secs_f64(), "complete": failures.is_empty(),
        }),
    )?;
    Ok(text)
}

/// One run's figures from its verdict and history (check latencies in scenario ms).
fn measure(
    dir: &Path,
    verdict: &chaos_checkers::Verdict,
    scale: f64,
) -> anyhow::Result<RunFigures> {
    let st = verdict.stats.failover.clone().unwrap_or_default();
    let history = chaos_history::read_history(&dir.join(chaos_history::HISTORY_FILE))?;
    let checks_ms = history
        .iter()
        .filter(|o| o.process == names::WATCHER && o.f == names::CHECK)
        .filter_map(|o| o.value["latency_ms"].as_f64())
        .map(|real_ms| real_ms * 1000.0 / scale)
        .collect();
    Ok(RunFigures {
        verdict: format!("{:?}", verdict.valid).to_lowercase(),
        promotions: st.promotion_scenario_ms.is_some() as u64,
        false_promotions: st.false_promotions,
        unavailability_s: st.unavailability_s,
        unavailability_max_s: st.unavailability_max_s,
        lost_orders: st.lost_orders,
        two_primaries_s: st.two_primaries_s,
        checks_ms,
    })
}
