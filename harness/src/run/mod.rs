//! One run, start to finish: resolve the scenario, start the testbed, start the movers, the ingest and the nemesis on the scenario clock, wait, heal, read the audit and final state, judge, write the results.
//!
//! `boxes.rs` renders each mover's program and environment; `live.rs` is the run while it
//! runs; `judge.rs` writes the record and judges it; `sentinel.rs` promotes Redis's replica
//! on its primary's silence.

pub mod boxes;
pub(crate) mod frame;
mod judge;
pub(crate) mod live;
pub mod options;
pub mod seek;
mod sentinel;
mod sut;

pub use options::{RunOptions, RunOutcome, Timings};
pub use sut::SutArgs;

use crate::backend::BackendKind;
use crate::faults::clock;
use crate::progress::say;
use crate::results::{self, RunDir};
use crate::scenario::{self, Scenario, System};
use crate::testbed::{farm, Testbed};
use chaos_checkers::Validity;
use live::Live;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// Load the scenario and apply the overrides; every error names the file and field.
pub fn resolve(opts: &RunOptions) -> anyhow::Result<Scenario> {
    if let Some(s) = &opts.prepared {
        return Ok((**s).clone());
    }
    let path = scenario::resolve(&opts.scenario)?;
    let mut file = scenario::load::parse(&path)?;
    crate::failover::apply_overrides(&mut file, &opts.failover, opts.restart, opts.mover_flag())?;
    refuse_other_designs_flags(opts, &file)?;
    let m = &mut file.mover;
    if let Some(v) = opts.fencing {
        m.fencing = v;
    }
    if let Some(v) = opts.on_renew_failure {
        m.on_renew_failure = v;
    }
    if let Some(v) = opts.on_lost {
        m.on_lost = v;
    }
    if opts.check_expiry_before_write {
        m.check_expiry_before_write = true;
    }
    if opts.renew_on_thread {
        m.renew_on_thread = true;
    }
    if let Some(v) = opts.election {
        m.election = v;
    }
    if opts.idempotent {
        file.payout.idempotent = true;
    }
    if let Some(v) = opts.objects_fence {
        file.objects.fence = v;
    }
    m.override_program(opts.mover_cmd.as_ref(), opts.mover_ready, opts.restart);
    if let Some(v) = opts.lease_s {
        file.lease.lease_s = v;
    }
    if let Some(v) = opts.seed {
        file.seed = v;
    }
    if let Some(v) = opts.time_scale_ms {
        file.time_scale_ms = v;
    }
    if let Some(v) = opts.rows_per_turbine {
        file.data.rows_per_turbine = v;
    }
    if let Some(v) = opts.lock {
        file.lock.service = v;
    }
    if let Some(v) = opts.lock_members {
        file.lock.members = v;
    }
    if opts.lock_replica {
        file.lock.replica = true;
    }
    if let Some(p) = file
        .nemesis
        .random
        .as_mut()
        .filter(|_| !opts.seek.is_empty())
    {
        let changed = seek::adjust(p, &opts.seek);
        if !changed.is_empty() {
            say(
                opts.quiet,
                &format!(
                    "chaos: seeking what the campaign has not reached: {}",
                    changed.join(", ")
                ),
            );
        }
    }
    // etcd's leases are whole seconds: the scale grows until the lease is one.
    let scale = file
        .lock
        .time_scale_ms(file.time_scale_ms, file.lease.lease_s);
    if scale != file.time_scale_ms && opts.time_scale_ms.is_none() {
        say(
            opts.quiet,
            &format!(
                "chaos: {} leases are whole seconds: {} real ms per scenario second (was {}), so the {} s lease is {} real ms",
                file.lock.service.name(),
                (scale * 1000.0).round() / 1000.0,
                file.time_scale_ms,
                file.lease.lease_s,
                (file.lease.lease_s * scale).round()
            ),
        );
        file.time_scale_ms = scale;
    }
    Ok(scenario::load::validate(file, &path, &opts.extra_faults)?)
}

/// A design's own switch given for a scenario of another system was silently ignored
/// (`--objects-fence` on april, issue 33): refused in one line naming the scenarios it is for.
fn refuse_other_designs_flags(
    opts: &RunOptions,
    file: &scenario::ScenarioFile,
) -> anyhow::Result<()> {
    let own = [
        (
            opts.objects_fence.is_some(),
            "--objects-fence",
            System::TenObjects,
            "ten-objects, ten-objects-interleaved",
        ),
        (opts.idempotent, "--idempotent", System::Payout, "payout"),
    ];
    for (given, flag, system, scenarios) in own {
        if given && file.system != system {
            anyhow::bail!(
                "{flag} is for a {} scenario ({scenarios}); {} runs the {} system, so it would change nothing",
                system.name(),
                file.name,
                file.system.name()
            );
        }
    }
    Ok(())
}

/// Run a scenario end to end. Errors are the harness's own failures (exit 3).
pub async fn run(opts: &RunOptions) -> anyhow::Result<RunOutcome> {
    let wall = Instant::now();
    let scenario = Arc::new(resolve(opts)?);
    if scenario.file.system == scenario::System::Failover {
        return crate::failover::run(opts, scenario).await;
    }
    let backend = preflight(&scenario, opts)?;
    let label = opts
        .label
        .clone()
        .unwrap_or_else(|| scenario.file.name.clone());
    let dir = RunDir::create(&opts.results, &label, scenario.file.seed)?;
    let outcome = run_in(opts, &scenario, backend, &dir, wall).await;
    dir.settle(outcome)
}

/// The run in its directory, from the config to the verdict.
async fn run_in(
    opts: &RunOptions,
    scenario: &Arc<Scenario>,
    backend: BackendKind,
    dir: &RunDir,
    wall: Instant,
) -> anyhow::Result<RunOutcome> {
    let farm = farm(scenario);
    let quiet = opts.quiet;
    let bed_opts = crate::run::options::open_run(opts, scenario, backend, dir)?;
    // The testbed: routing + shards, a proxy per link, the schema, the plan, the readings.
    let bed = Testbed::start(scenario, &bed_opts).await?;
    let cluster_s = bed.cluster_s;
    let lock_s = bed.lock.started_in().as_secs_f64();
    let (n, where_) = (bed.nodes.len(), bed.describe());
    say(
        quiet,
        &format!("chaos: {n} databases up in {cluster_s:.2} s ({where_})"),
    );
    let t_seed = Instant::now();
    let seeded = bed.install(scenario, &farm).await?;
    let seed_s = t_seed.elapsed().as_secs_f64();
    say(
        quiet,
        &format!(
            "chaos: seeded {} turbines x {} readings in {seed_s:.2} s; plan moves {}",
            farm.seeded_turbines,
            farm.rows_per_turbine,
            farm.plan().len()
        ),
    );
    let shards = bed.shards().to_vec();
    let specs = boxes::specs(scenario, &bed.urls, &shards, &dir.logs)?;
    let bed = live::Bed {
        cluster: bed.cluster,
        links: bed.links,
        lock: bed.lock,
        urls: bed.urls,
        shards,
    };
    let history_path = dir.file(chaos_history::HISTORY_FILE);
    let live = Live::start(
        scenario.clone(),
        bed,
        specs,
        &farm,
        &history_path,
        &dir.logs,
    )
    .await?;
    let end = live.wait(quiet).await;

    // Heal, stop, read. Every fault is healed before the final reads.
    let t_final = Instant::now();
    let clock = live.frame.clock_now(quiet);
    let (lags, exits) = (live.frame.nemesis.lags_us(), live.frame.movers.exits());
    let finals = live.wind_down(end.setup_failure.is_none()).await?;
    let Some(finals) = finals else {
        // Nothing to judge: the mover could not run. Say why, once.
        anyhow::bail!("{}", end.setup_failure.unwrap_or_default());
    };
    let t = Timings {
        cluster_s,
        lock_s,
        seed_s,
        final_s: t_final.elapsed().as_secs_f64(),
    };
    let meta = judge::meta(
        scenario,
        &farm,
        clock,
        seeded,
        &end,
        &finals,
        opts.strict_duplicates,
    );
    let figures = judge::figures(&t, &end, &finals, &lags, json!(exits));
    let (verdict, mut figures) = judge::judge(dir, &meta, &finals, figures, quiet).await?;
    figures["wall_s"]["total"] = json!(wall.elapsed().as_secs_f64());
    results::write_json(&dir.file("figures.json"), &figures)?;
    say(
        quiet,
        &format!(
            "chaos: wall time {:.1} s (cluster {cluster_s:.1}, seed {seed_s:.1}, scenario {:.1}, final reads {:.1}); faults landed within {} µs (max); results in {}",
            wall.elapsed().as_secs_f64(),
            end.scenario_s,
            t.final_s,
            lags.iter().max().copied().unwrap_or(0),
            dir.path.display()
        ),
    );
    Ok(RunOutcome {
        dir: dir.path.clone(),
        verdict,
        figures,
    })
}

/// What can be refused before anything starts: the reference mover not built, a `--mover-cmd`
/// whose program is not there, a clock fault without libfaketime, a link trigger where the
/// harness cannot read the links.
fn preflight(scenario: &Scenario, opts: &RunOptions) -> anyhow::Result<BackendKind> {
    if scenario.file.mover.command.is_none() {
        crate::systems::reference_program(scenario.file.system)?;
    }
    clock::check_installed(scenario)?;
    let backend = opts.backend.unwrap_or(BackendKind::Process);
    if let (Some(cmd), BackendKind::Process) = (&scenario.file.mover.command, backend) {
        let from = match &opts.mover_cmd {
            Some(_) => "--mover-cmd".to_string(),
            None => format!("{}: [mover] command", scenario.path.display()),
        };
        crate::program::check_on_path(&from, cmd)?;
    }
    // A link trigger reads the bytes our own proxy forwards (in-process, or in the docker
    // backend's proxy container): not those of an external Toxiproxy.
    let link_trigger = scenario
        .faults
        .iter()
        .filter_map(|f| f.when.as_ref())
        .find(|w| w.on.on_link());
    if let Some(w) = link_trigger {
        if opts.toxiproxy.is_some() {
            anyhow::bail!(
                "a trigger on a link event ({}) reads the links through the harness's own proxy: drop --toxiproxy",
                w.describe()
            );
        }
        let images = crate::backend::docker::Images::from_env();
        if backend == BackendKind::Docker && !images.proxy_is_ours() {
            anyhow::bail!(
                "a trigger on a link event ({}) reads the links through our proxy image, and CHAOS_PROXY_IMAGE is {}: unset it",
                w.describe(),
                images.proxy
            );
        }
    }
    Ok(backend)
}

/// The options that run the stored run in `dir` again: its scenario as it ran (every override
/// and generated fault), its backend and proxy unless given, its judging settings.
pub fn replay(
    dir: &std::path::Path,
    backend: Option<BackendKind>,
    toxiproxy: Option<String>,
) -> anyhow::Result<RunOptions> {
    let scenario = Scenario::from_run(dir)?;
    let config: serde_json::Value = results::read_json(&dir.join("config.json"))?;
    let stored_backend = serde_json::from_value(config["backend"].clone()).ok();
    let meta: Option<chaos_history::RunMeta> =
        results::read_json(&dir.join(chaos_history::RUN_META_FILE)).ok();
    Ok(RunOptions {
        scenario: scenario.file.name.clone(),
        backend: backend.or(stored_backend),
        toxiproxy: toxiproxy.or_else(|| config["toxiproxy"].as_str().map(String::from)),
        strict_duplicates: meta.is_some_and(|m| m.strict_duplicates),
        prepared: Some(Arc::new(scenario)),
        ..Default::default()
    })
}

/// Exit code for a verdict, with `--expect`: 0 when it matched, 1 when not.
pub fn exit_code(verdict: Validity, expect: Option<Validity>) -> u8 {
    match expect {
        Some(e) if e == verdict => 0,
        Some(_) => 1,
        None => verdict.exit_code() as u8,
    }
}
