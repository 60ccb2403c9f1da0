//! The failover system, the harness's second system under test (GitHub, 21 October 2018; the shop's fifty lines): a real primary and streaming replica, the app writing orders to "the primary", a watcher that promotes on silence and repoints the service record, with or without a fence. One run start to finish, and `chaos check` of a stored one.
//!
//! `settings.rs` its `[failover]` section, overrides and topology; `testbed.rs` the servers,
//! links and the replica's base backup; `live.rs` the run while it runs (`observe.rs` the
//! harness's own view of roles and proxies); `finals.rs` both servers' orders at the end;
//! `check.rs` the stored run judged (`chaos_checkers::failover`), its story and report;
//! `sweep.rs` `chaos sweep` of a failover scenario over the watcher's silence constant.

pub mod check;
mod finals;
mod live;
mod observe;
pub mod settings;
pub mod sweep;
mod testbed;

use settings::{describe, FailoverSection, Overrides, LINKS};

use crate::backend::{BackendKind, MoverProgram, MoverSpec};
use crate::links::proxy_name;
use crate::program::{Ready, Restart};
use crate::progress::say;
use crate::results::{self, RunDir};
use crate::run::options::{RunOptions, RunOutcome};
use crate::scenario::{Scenario, ScenarioFile, System};
use crate::systems::failover::fence_word;
use chaos_history::failover_names as names;
use chaos_history::{FailoverMeta, FAILOVER_SYSTEM};
use chaos_workloads::failover::env;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testbed::FailoverBed;

/// Apply the failover overrides (and `--restart`) to a failover scenario; refuse them for
/// another system, and the mover's own flags for a failover scenario, in one line each.
pub fn apply_overrides(
    file: &mut ScenarioFile,
    o: &Overrides,
    restart: Option<Restart>,
    mover_flag: Option<&str>,
) -> anyhow::Result<()> {
    if file.system != System::Failover {
        if o.any() {
            anyhow::bail!(
                "--fence, --watcher-cmd, --watcher-ready and --silence are for a failover scenario; {} runs the {:?} system",
                file.name,
                file.system
            );
        }
        return Ok(());
    }
    if let Some(flag) = mover_flag {
        anyhow::bail!(
            "{flag} is the mover's; {} runs the failover system (its flags: --fence, --watcher-cmd, --watcher-ready, --silence, --restart)",
            file.name
        );
    }
    let f = file.failover.get_or_insert_with(Default::default);
    if let Some(v) = o.fence {
        f.fence = v;
    }
    if let Some(v) = o.silence_s {
        f.silence_s = v;
    }
    f.override_program(o.watcher_cmd.as_ref(), o.watcher_ready, restart);
    Ok(())
}

/// Run a failover scenario end to end. Errors are the harness's own failures (exit 3).
pub async fn run(opts: &RunOptions, scenario: Arc<Scenario>) -> anyhow::Result<RunOutcome> {
    let wall = Instant::now();
    let f = scenario.file.failover.clone().unwrap_or_default();
    if f.command.is_none() {
        crate::systems::reference_program(System::Failover)?;
    }
    let backend = opts.backend.unwrap_or(BackendKind::Process);
    if let (Some(cmd), BackendKind::Process) = (&f.command, backend) {
        let from = match &opts.failover.watcher_cmd {
            Some(_) => "--watcher-cmd".to_string(),
            None => format!("{}: [failover] command", scenario.path.display()),
        };
        crate::program::check_on_path(&from, cmd)?;
    }
    let s = &scenario.file;
    let label = opts.label.clone().unwrap_or_else(|| s.name.clone());
    let dir = RunDir::create(&opts.results, &label, s.seed)?;
    let outcome = run_in(opts, &scenario, &f, backend, &dir, wall).await;
    dir.settle(outcome)
}

/// The run in its directory, from the config to the verdict.
async fn run_in(
    opts: &RunOptions,
    scenario: &Arc<Scenario>,
    f: &FailoverSection,
    backend: BackendKind,
    dir: &RunDir,
    wall: Instant,
) -> anyhow::Result<RunOutcome> {
    let s = &scenario.file;
    let quiet = opts.quiet;
    let bed_opts = crate::run::options::open_run(opts, scenario, backend, dir)?;
    let bed = FailoverBed::start(scenario, &bed_opts).await?;
    let cluster_s = bed.cluster_s;
    say(
        quiet,
        &format!(
            "chaos: primary and replica up and streaming in {cluster_s:.2} s ({}); {}",
            bed.cluster.describe(),
            describe(f)
        ),
    );
    let spec = watcher_spec(scenario, &bed, &dir.logs)?;
    let history_path = dir.file(chaos_history::HISTORY_FILE);
    let live = live::Live::start(scenario.clone(), bed, spec, &history_path, &dir.logs).await?;
    let end = live.wait(quiet).await;
    let t_final = Instant::now();
    let clock = live.frame.clock_now(quiet);
    let (lags, exits) = (live.frame.nemesis.lags_us(), live.frame.movers.exits());
    let Some(finals) = live.wind_down(end.setup_failure.is_none()).await? else {
        anyhow::bail!("{}", end.setup_failure.unwrap_or_default());
    };
    let final_s = t_final.elapsed().as_secs_f64();
    let incomplete_reason = (finals.dropped > 0).then(|| {
        format!(
            "the history hit its limit of {} events; {} were dropped",
            live::HISTORY_LIMIT,
            finals.dropped
        )
    });
    let meta = FailoverMeta {
        system: FAILOVER_SYSTEM.to_string(),
        scenario: s.name.clone(),
        seed: s.seed,
        clock,
        silence_ms: (f.silence_s * 1000.0).round() as i64,
        check_ms: (f.check_s * 1000.0).round() as i64,
        write_every_ms: (f.write_every_s * 1000.0).round() as i64,
        fence: fence_word(f).into(),
        synchronous: f.synchronous,
        watcher: f
            .command
            .clone()
            .unwrap_or_else(|| "reference watcher".into()),
        end_scenario_ms: end.scenario_ms,
        completed: incomplete_reason.is_none(),
        incomplete_reason,
        expect_reach: scenario.expected_moments(),
    };
    results::write_json(&dir.file(chaos_history::RUN_META_FILE), &meta)?;
    results::write_json(&dir.file(chaos_history::FINAL_STATE_FILE), &finals.state)?;
    let mut lags_sorted = lags.clone();
    lags_sorted.sort_unstable();
    let mut figures = json!({
        "wall_s": { "cluster": cluster_s, "scenario": end.scenario_s, "final_reads": final_s },
        "history_events": finals.events,
        "fault_lag_real_us": { "count": lags.len(), "max": lags_sorted.last() },
        "app": finals.app,
        "watcher_exits": exits,
        "end_reason": end.reason,
        "wall_clock_drift_ppm": meta.clock.wall_drift_ppm(),
    });
    let t_check = Instant::now();
    let verdict = {
        let path = dir.path.clone();
        tokio::task::spawn_blocking(move || check::check_dir(&path, quiet)).await??
    };
    figures["wall_s"]["check_and_report"] = json!(t_check.elapsed().as_secs_f64());
    figures["wall_s"]["total"] = json!(wall.elapsed().as_secs_f64());
    results::write_json(&dir.file("figures.json"), &figures)?;
    say(
        quiet,
        &format!(
            "chaos: wall time {:.1} s (servers {cluster_s:.1}, scenario {:.1}, final reads {final_s:.1}); app orders ok {}, failed {}, uncertain {}; results in {}",
            wall.elapsed().as_secs_f64(),
            end.scenario_s,
            finals.app.ok,
            finals.app.fail,
            finals.app.info,
            dir.path.display()
        ),
    );
    Ok(RunOutcome {
        dir: dir.path.clone(),
        verdict,
        figures,
    })
}

/// The watcher's program and its protocol environment (docs/watcher-protocol.md), real ms.
fn watcher_spec(
    scenario: &Scenario,
    bed: &FailoverBed,
    log_dir: &Path,
) -> anyhow::Result<MoverSpec> {
    let f = scenario.file.failover.clone().unwrap_or_default();
    let program = match &f.command {
        Some(cmd) => MoverProgram::Shell(cmd.clone()),
        None => MoverProgram::Exec {
            program: crate::systems::reference_program(System::Failover)?,
            args: crate::systems::of(System::Failover).reference_args(&scenario.file),
        },
    };
    let real = |scenario_s: f64| scenario.real_ms(scenario_s * 1000.0).to_string();
    let api = bed
        .cluster
        .proxy_api_for_movers()
        .unwrap_or_else(|| bed.links.api.clone());
    let link = |to: &str| {
        bed.urls
            .mover(&chaos_nemesis::Link::name(names::WATCHER, to))
    };
    let client = [
        names::SERVICE.to_string(),
        proxy_name(&chaos_nemesis::Link::name(names::APP, names::PRIMARY)),
    ];
    let all: Vec<String> = LINKS
        .iter()
        .filter(|l| crate::links::link_target(l) == names::PRIMARY)
        .map(|l| proxy_name(l))
        .collect();
    let mut every = client.to_vec();
    every.extend(all.into_iter().filter(|p| !client.contains(p)));
    let env = vec![
        (env::BOX.to_string(), names::WATCHER.to_string()),
        (env::PRIMARY_URL.into(), link(names::PRIMARY)),
        (env::REPLICA_URL.into(), link(names::REPLICA)),
        (env::CHECK_MS.into(), real(f.check_s)),
        (env::CHECK_TIMEOUT_MS.into(), real(f.check_timeout_s)),
        (env::SILENCE_MS.into(), real(f.silence_s)),
        (env::PROXY_API.into(), format!("http://{api}")),
        (env::SERVICE_PROXY.into(), names::SERVICE.to_string()),
        (
            env::REPLICA_UPSTREAM.into(),
            bed.upstreams[names::REPLICA].clone(),
        ),
        (env::PRIMARY_CLIENT_PROXIES.into(), client.join(",")),
        (env::PRIMARY_PROXIES.into(), every.join(",")),
    ];
    Ok(MoverSpec {
        box_name: names::WATCHER.to_string(),
        program,
        env,
        log_path: log_dir.join(format!("{}.log", names::WATCHER)),
        reads_gate: f.ready == Ready::Gate,
        ready_timeout: Duration::from_secs_f64(f.ready_timeout_real_s),
    })
}
