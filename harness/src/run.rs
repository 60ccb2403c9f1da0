//! One run, start to finish: resolve the scenario, start the cluster and links, seed, start movers, ingest and nemesis, wait, heal, read the audit and final state, check, write the results.

use crate::audit;
use crate::backend::{BackendKind, MoverProgram, MoverSpec};
use crate::faults::{faketime_file, Nemesis, LIBFAKETIME};
use crate::movers::{Movers, Supervisor};
use crate::progress::Progress;
use crate::results::{self, RunDir};
use crate::scenario::{self, Scenario};
use crate::testbed::{farm, BedOptions, Testbed};
use crate::triggers::{self, Triggers};
use chaos_checkers::{Validity, Verdict};
use chaos_history::{HistoryWriter, RunMeta, RunRecord, ScenarioClock};
use chaos_workloads::ingest::{self, IngestConfig, IngestShard};
use chaos_workloads::mover::switch_name;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A history larger than this is cut (and the run marked incomplete): a limit on everything.
const HISTORY_LIMIT: u64 = 50_000_000;
/// How far ahead the scenario clock is set when the movers are ready (see `run`).
const START_LEAD: Duration = Duration::from_millis(40);

/// What `chaos run` was asked, after parsing; overrides win over the scenario file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub scenario: String,
    pub fencing: Option<scenario::Fencing>,
    pub on_renew_failure: Option<scenario::OnRenewFailure>,
    pub on_lost: Option<scenario::OnLost>,
    pub check_expiry_before_write: bool,
    pub renew_on_thread: bool,
    pub election: Option<scenario::Election>,
    pub lease_s: Option<f64>,
    pub seed: Option<u64>,
    pub mover_cmd: Option<String>,
    pub time_scale_ms: Option<f64>,
    pub rows_per_turbine: Option<u32>,
    pub strict_duplicates: bool,
    pub toxiproxy: Option<String>,
    pub results: PathBuf,
    pub quiet: bool,
    /// Faults added on top of the scenario's (the sweep's latency profile).
    pub extra_faults: Vec<chaos_nemesis::Fault>,
    /// Name for the results folder (default: the scenario's name).
    pub label: Option<String>,
    pub backend: Option<BackendKind>,
    /// How a `--mover-cmd` says it is ready (overrides `[mover] ready`).
    pub mover_ready: Option<scenario::Ready>,
    /// The supervisor's restart policy (overrides `[mover] restart`).
    pub restart: Option<scenario::Restart>,
}

/// What a finished run hands back.
pub struct RunOutcome {
    pub dir: PathBuf,
    pub verdict: Verdict,
    pub figures: serde_json::Value,
}

/// Load the scenario and apply the overrides; every error names the file and field.
pub fn resolve(opts: &RunOptions) -> anyhow::Result<Scenario> {
    let path = scenario::resolve(&opts.scenario)?;
    let text =
        std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let mut file: scenario::ScenarioFile = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}",
            path.display(),
            e.to_string()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        )
    })?;
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
    if let Some(v) = &opts.mover_cmd {
        m.command = Some(v.clone());
    }
    if let Some(v) = opts.mover_ready {
        m.ready = v;
    }
    if let Some(v) = opts.restart {
        m.restart = v;
    }
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
    Ok(scenario::validate(file, &path, &opts.extra_faults)?)
}

/// The reference mover: beside this binary.
pub fn reference_mover() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no folder for {}", exe.display()))?;
    for candidate in [dir.join("mover"), dir.join("../mover")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!("the reference mover is not built beside {}: run `cargo build --release -p chaos-workloads` (or give --mover-cmd)", exe.display())
}

fn say(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("{line}");
    }
}

/// Run a scenario end to end. Errors are the harness's own failures (exit 3).
pub async fn run(opts: &RunOptions) -> anyhow::Result<RunOutcome> {
    let wall = Instant::now();
    let scenario = Arc::new(resolve(opts)?);
    let s = &scenario.file;
    let farm = farm(&scenario);
    let plan = farm.plan();
    let mover_bin = if s.mover.command.is_none() {
        Some(reference_mover()?)
    } else {
        None
    };
    // Only the boxes a clock fault targets run under libfaketime, and only their real-time
    // clock is faked: a clock offset in production moves the wall clock, never
    // CLOCK_MONOTONIC (and a faked monotonic clock hangs timed waits, e.g. Python's).
    let clocked: std::collections::BTreeSet<String> = scenario
        .faults
        .iter()
        .filter_map(|f| match &f.kind {
            chaos_nemesis::FaultKind::Clock { target, .. } => Some(target.clone()),
            _ => None,
        })
        .collect();
    let uses_clock = !clocked.is_empty();
    if uses_clock && !Path::new(LIBFAKETIME).is_file() {
        anyhow::bail!(
            "the scenario offsets a clock, which needs libfaketime: apt-get install -y faketime"
        );
    }
    let backend = opts.backend.unwrap_or(BackendKind::Process);
    // A link trigger reads the bytes our own proxy forwards: not those of a proxy in a
    // container or of an external Toxiproxy.
    if let Some(w) = scenario
        .faults
        .iter()
        .filter_map(|f| f.when.as_ref())
        .find(|w| w.on.on_link())
    {
        if backend != BackendKind::Process || opts.toxiproxy.is_some() {
            anyhow::bail!(
                "a trigger on a link event ({}) reads the links through the harness's own proxy: run it on the process backend without --toxiproxy",
                w.describe()
            );
        }
    }
    let label = opts.label.clone().unwrap_or_else(|| s.name.clone());
    let dir = RunDir::create(&opts.results, &label, s.seed)?;
    let quiet = opts.quiet;
    say(
        quiet,
        &format!(
            "chaos: {} (seed {}) -> {}",
            s.name,
            s.seed,
            dir.path.display()
        ),
    );
    results::write_json(
        &dir.file("config.json"),
        &json!({ "scenario": &*scenario, "seed": s.seed, "git_commit": results::git_commit(), "backend": backend, "toxiproxy": opts.toxiproxy }),
    )?;

    // The testbed: routing + shards, a proxy per link, the schema, the plan, the readings.
    let topology = scenario.topology();
    let bed = Testbed::start(
        &scenario,
        &BedOptions {
            backend,
            toxiproxy: opts.toxiproxy.clone(),
            log_dir: dir.logs.clone(),
            run_id: dir.run_id.clone(),
        },
    )
    .await?;
    let cluster_s = bed.cluster_s;
    say(
        quiet,
        &format!(
            "chaos: {} databases up in {:.2} s ({})",
            bed.nodes.len(),
            cluster_s,
            bed.cluster.describe()
        ),
    );
    let t_seed = Instant::now();
    let seeded = bed.install(&scenario, &farm).await?;
    let seed_s = t_seed.elapsed().as_secs_f64();
    say(
        quiet,
        &format!(
            "chaos: seeded {} turbines x {} readings in {:.2} s; plan moves {}",
            farm.seeded_turbines,
            farm.rows_per_turbine,
            seed_s,
            plan.len()
        ),
    );
    let shard_names: Vec<String> = bed.shards().to_vec();
    let Testbed {
        cluster,
        links,
        urls,
        ..
    } = bed;

    // The mover specs (real milliseconds, already scaled).
    let real = |scenario_s: f64| scenario.real_ms(scenario_s * 1000.0);
    let mut mover_args = vec![
        "--fencing".to_string(),
        switch_name(s.mover.fencing),
        "--on-renew-failure".into(),
        switch_name(s.mover.on_renew_failure),
        "--on-lost".into(),
        switch_name(s.mover.on_lost),
        "--election".into(),
        switch_name(s.mover.election),
    ];
    if s.mover.check_expiry_before_write {
        mover_args.push("--check-expiry-before-write".into());
    }
    if s.mover.renew_on_thread {
        mover_args.push("--renew-on-thread".into());
    }
    mover_args.extend(s.mover.args.iter().cloned());
    let specs: Vec<MoverSpec> = topology
        .boxes
        .iter()
        .map(|b| {
            let shard_urls = shard_names
                .iter()
                .map(|n| format!("{n}={}", urls.mover(&format!("{b}->{n}"))))
                .collect::<Vec<_>>()
                .join(",");
            let mut env = vec![
                ("CHAOS_BOX".to_string(), b.clone()),
                ("CHAOS_JOB".into(), s.lease.job.clone()),
                (
                    "CHAOS_ROUTING_URL".into(),
                    urls.mover(&format!("{b}->routing")),
                ),
                ("CHAOS_SHARD_URLS".into(), shard_urls),
                ("CHAOS_LEASE_MS".into(), real(s.lease.lease_s).to_string()),
                ("CHAOS_POLL_MS".into(), real(s.lease.poll_s).to_string()),
                ("CHAOS_COPY_MS".into(), real(s.lease.copy_s).to_string()),
                ("CHAOS_BATCHES".into(), s.lease.batches.to_string()),
            ];
            if clocked.contains(b) {
                let file = faketime_file(&dir.logs, b);
                let _ = std::fs::write(&file, "+0\n");
                env.push(("LD_PRELOAD".into(), LIBFAKETIME.into()));
                env.push(("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()));
                env.push(("FAKETIME_NO_CACHE".into(), "1".into()));
                env.push(("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()));
            }
            let program = match (&s.mover.command, &mover_bin) {
                (Some(cmd), _) => MoverProgram::Shell(cmd.clone()),
                (None, Some(bin)) => MoverProgram::Exec {
                    program: bin.clone(),
                    args: mover_args.clone(),
                },
                (None, None) => unreachable!("checked above"),
            };
            MoverSpec {
                box_name: b.clone(),
                program,
                env,
                log_path: dir.logs.join(format!("{b}.log")),
                reads_gate: s.mover.ready == scenario::Ready::Gate,
                ready_timeout: Duration::from_secs_f64(s.mover.ready_timeout_real_s),
            }
        })
        .collect();

    // Movers start before the clock and wait at their gates, connected (a container takes
    // about 1 s to start, a process tens of ms to connect to four databases); then the
    // scenario clock starts and the gates open.
    // Triggered faults watch the links from before the movers connect (a stream is read from
    // its first byte) and the routing db's claim changes from before the clock starts.
    let triggers = Arc::new(std::sync::Mutex::new(Triggers::new(&scenario)));
    let clock_for_taps: Arc<std::sync::OnceLock<HistoryWriter>> = Default::default();
    let (fired_tx, fired_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut link_taps = Vec::new();
    if triggers.lock().unwrap().waits_for(|e| e.on_link()) {
        let taps = links
            .taps()
            .ok_or_else(|| anyhow::anyhow!("link triggers need the harness's own proxy"))?;
        let box_shard: Vec<String> = topology
            .links()
            .into_iter()
            .filter(|l| l.starts_with("box-") && !l.ends_with("->routing"))
            .collect();
        link_taps = triggers::tap_links(
            &taps,
            &box_shard,
            triggers.clone(),
            clock_for_taps.clone(),
            fired_tx.clone(),
        );
    }
    cluster.prepare_movers(&specs).await?;
    let routing_admin = cluster.admin_url("routing");
    let claims = if triggers.lock().unwrap().is_empty() {
        None
    } else {
        Some(triggers::listen(&routing_admin).await?)
    };
    links.warm_up().await;
    let cluster = Arc::new(tokio::sync::Mutex::new(cluster));
    // The clock starts a moment from now, so the faults due at the start (their proxy reads
    // done in the meantime) land at it, and the movers are let go right after.
    let t0 = Instant::now() + START_LEAD;
    let start_unix_ns = (SystemTime::now() + START_LEAD)
        .duration_since(UNIX_EPOCH)?
        .as_nanos() as i64;
    let clock = scenario.clock(start_unix_ns);
    let history = HistoryWriter::create(
        &dir.file(chaos_history::HISTORY_FILE),
        t0,
        clock,
        HISTORY_LIMIT,
    )?;
    let _ = clock_for_taps.set(history.clone());
    let progress = Arc::new(Progress::new(plan.len()));
    let movers = Movers::new(
        specs,
        cluster.lock().await.launcher(),
        history.clone(),
        progress.clone(),
        dir.logs.clone(),
        // A mover that exits non-zero within one lease of its start, printing nothing, did
        // not run: with every box so (or one box 5 times in a row) the run is a setup failure.
        Duration::from_millis(real(s.lease.lease_s).max(1000)),
        Supervisor {
            restart: s.mover.restart,
            delay: Duration::from_millis(real(s.mover.restart_delay_s)),
        },
    );
    let schedule = &scenario.schedule;
    let nemesis = Nemesis::new(
        cluster.clone(),
        links.clone(),
        movers.clone(),
        history.clone(),
        progress.clone(),
        scenario.clone(),
        t0,
    );
    let landing = tokio::spawn(triggers::land_fired(fired_rx, nemesis.clone()));
    let watch = claims.map(|first| {
        tokio::spawn(triggers::watch_claims(
            routing_admin.clone(),
            first,
            triggers.clone(),
            history.clone(),
            fired_tx.clone(),
        ))
    });
    drop(fired_tx);
    let initial = nemesis.apply_initial(schedule).await;
    // The movers go at the scenario's start, not before: a fast mover's first writes would
    // otherwise happen before the clock's zero (and be stamped 0).
    tokio::time::sleep_until(t0.into()).await;
    // Every gate at once: one after another put the last box milliseconds (scenario seconds)
    // behind the first.
    let boxes = movers.boxes();
    for r in futures_util::future::join_all(boxes.iter().map(|b| movers.spawn(b))).await {
        r?;
    }
    let nemesis_task = tokio::spawn(nemesis.clone().run(schedule.clone(), initial));
    let stop_ingest = Arc::new(AtomicBool::new(false));
    let mut ingest_tasks = Vec::new();
    if s.data.ingest_every_s > 0.0 {
        let config = IngestConfig {
            every: Duration::from_micros((s.data.ingest_every_s * s.time_scale_ms * 1000.0) as u64),
            every_scenario_ms: (s.data.ingest_every_s * 1000.0) as i64,
            timeout: Duration::from_millis(real(s.lease.lease_s).max(1000)),
        };
        for n in &shard_names {
            let shard = IngestShard {
                shard: n.clone(),
                url: urls.harness(&format!("ingest->{n}")),
                turbines: farm.ingested_on(n),
            };
            ingest_tasks.push(tokio::spawn(ingest::run_shard(
                shard,
                config.clone(),
                history.clone(),
                stop_ingest.clone(),
            )));
        }
    }

    // Wait for the movers (or the time limit), printing progress.
    let mut last_print = Instant::now();
    let end_reason;
    let mut setup_failure = None;
    let mut time_limited = false;
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now_ms = history.now_scenario_ms();
        if let Some(failure) = movers.setup_failure() {
            setup_failure = Some(failure);
            end_reason = "the mover could not run".to_string();
            break;
        }
        if movers.running() == 0 && movers.pending_restarts.load(Ordering::SeqCst) == 0 {
            end_reason = "every mover exited".to_string();
            break;
        }
        if now_ms >= scenario.end_ms {
            time_limited = true;
            end_reason = format!(
                "the scenario's time limit {} was reached",
                ScenarioClock::format(scenario.end_ms)
            );
            break;
        }
        if last_print.elapsed() >= Duration::from_secs(2) {
            say(quiet, &progress.line(now_ms));
            last_print = Instant::now();
        }
    }
    let end_scenario_ms = history.now_scenario_ms();
    let scenario_s = t0.elapsed().as_secs_f64();
    say(
        quiet,
        &format!(
            "{}\nchaos: the run ends at {}: {end_reason}",
            progress.line(end_scenario_ms),
            ScenarioClock::format(end_scenario_ms)
        ),
    );

    // Heal, stop, read. Every fault is healed before the final reads.
    let t_final = Instant::now();
    nemesis_task.abort();
    let _ = nemesis_task.await;
    if let Some(w) = watch {
        w.abort();
        let _ = w.await;
    }
    drop(link_taps);
    landing.abort();
    let _ = landing.await;
    // A trigger that never fired asked its question of nobody: the run cannot say.
    let unfired = triggers.lock().unwrap().unfired();
    for (index, when, optional) in &unfired {
        history.record(
            "nemesis",
            chaos_history::OpType::Info,
            "trigger-unfired",
            json!({ "fault": index, "when": when, "optional": optional }),
        );
    }
    let unfired_reason = unfired
        .iter()
        .filter(|u| !u.2)
        .map(|(i, when, _)| format!("fault {i}'s trigger ({when}) never fired"))
        .collect::<Vec<_>>();
    movers.stop_all().await;
    stop_ingest.store(true, Ordering::Relaxed);
    if let Some(failure) = setup_failure {
        // Nothing to judge: stop what the run started and say why, once.
        for t in ingest_tasks {
            let _ = t.await;
        }
        nemesis.heal_all().await;
        let _ = history.finish();
        cluster.lock().await.stop_all().await;
        links.shutdown().await;
        anyhow::bail!("{failure}");
    }
    let mut ingest_stats = Vec::new();
    for t in ingest_tasks {
        if let Ok(st) = t.await {
            ingest_stats.push(st);
        }
    }
    nemesis.heal_all().await;
    let (audit, final_state) = {
        let c = cluster.lock().await;
        let shard_urls: Vec<(String, String)> = shard_names
            .iter()
            .map(|n| (n.clone(), c.admin_url(n)))
            .collect();
        audit::collect(&c.admin_url("routing"), &shard_urls).await
    };
    let (events, dropped) = history.finish()?;
    cluster.lock().await.stop_all().await;
    links.shutdown().await;
    let final_s = t_final.elapsed().as_secs_f64();

    let meta = RunMeta {
        scenario: s.name.clone(),
        seed: s.seed,
        clock,
        job: s.lease.job.clone(),
        shards: shard_names.clone(),
        owners: farm.owners(),
        plan: plan.clone(),
        seeded,
        lease_ms: (s.lease.lease_s * 1000.0) as i64,
        copy_ms: (s.lease.copy_s * 1000.0) as i64,
        strict_duplicates: opts.strict_duplicates,
        mover: mover_settings(&scenario),
        end_scenario_ms,
        // A run cut by its time limit did not complete: what was still under way is unknown,
        // not a finding (a mover still copying has not failed to finish).
        completed: dropped == 0 && !time_limited && unfired_reason.is_empty(),
        incomplete_reason: if !unfired_reason.is_empty() {
            Some(unfired_reason.join("; "))
        } else if dropped > 0 {
            Some(format!(
                "the history hit its limit of {HISTORY_LIMIT} events; {dropped} were dropped"
            ))
        } else if time_limited {
            Some(end_reason.clone())
        } else {
            None
        },
    };
    results::write_json(&dir.file(chaos_history::RUN_META_FILE), &meta)?;
    results::write_json(&dir.file(chaos_history::AUDIT_FILE), &audit)?;
    results::write_json(&dir.file(chaos_history::FINAL_STATE_FILE), &final_state)?;

    let lags = nemesis.lags_us();
    let figures = json!({
        "wall_s": { "cluster": cluster_s, "seed": seed_s, "scenario": scenario_s, "final_reads": final_s },
        "history_events": events,
        "fault_lag_real_us": lag_figures(&lags),
        "ingest": ingest_stats.iter().fold(json!({"ok":0,"fail":0,"info":0,"skipped_ticks":0}), |acc, st| json!({
            "ok": acc["ok"].as_u64().unwrap_or(0) + st.ok,
            "fail": acc["fail"].as_u64().unwrap_or(0) + st.fail,
            "info": acc["info"].as_u64().unwrap_or(0) + st.info,
            "skipped_ticks": acc["skipped_ticks"].as_u64().unwrap_or(0) + st.skipped_ticks,
        })),
        "mover_exits": movers.exits(),
        "end_reason": end_reason,
    });
    let t_check = Instant::now();
    // On a blocking thread: judging a long history is CPU-bound, and a signal must still be seen.
    let verdict = {
        let (path, figures) = (dir.path.clone(), figures.clone());
        tokio::task::spawn_blocking(move || {
            crate::check::check_dir(
                &path,
                &crate::check::CheckOptions {
                    extra: Some(&figures),
                    quiet,
                    strict_duplicates: None,
                },
            )
        })
        .await??
    };
    let mut figures = figures;
    figures["wall_s"]["check_and_report"] = json!(t_check.elapsed().as_secs_f64());
    figures["wall_s"]["total"] = json!(wall.elapsed().as_secs_f64());
    results::write_json(&dir.file("figures.json"), &figures)?;
    say(
        quiet,
        &format!(
            "chaos: wall time {:.1} s (cluster {:.1}, seed {:.1}, scenario {:.1}, final reads {:.1}); faults landed within {} µs (max); results in {}",
            wall.elapsed().as_secs_f64(),
            cluster_s,
            seed_s,
            scenario_s,
            final_s,
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

fn mover_settings(s: &Scenario) -> BTreeMap<String, String> {
    let m = &s.file.mover;
    let l = &s.file.lease;
    let mut out = BTreeMap::new();
    out.insert("fencing".into(), switch_name(m.fencing));
    out.insert("on_renew_failure".into(), switch_name(m.on_renew_failure));
    out.insert("on_lost".into(), switch_name(m.on_lost));
    out.insert(
        "check_expiry_before_write".into(),
        m.check_expiry_before_write.to_string(),
    );
    out.insert("election".into(), switch_name(m.election));
    out.insert("renew_on_thread".into(), m.renew_on_thread.to_string());
    out.insert(
        "command".into(),
        m.command
            .clone()
            .unwrap_or_else(|| "reference mover".into()),
    );
    out.insert("lease_s".into(), l.lease_s.to_string());
    out.insert("poll_s".into(), l.poll_s.to_string());
    out.insert("copy_s".into(), l.copy_s.to_string());
    out.insert("time_scale_ms".into(), s.file.time_scale_ms.to_string());
    out
}

fn lag_figures(lags: &[i64]) -> serde_json::Value {
    if lags.is_empty() {
        return json!({ "count": 0 });
    }
    let mut v = lags.to_vec();
    v.sort();
    json!({ "count": v.len(), "median": v[v.len() / 2], "max": v[v.len() - 1], "within_5ms": v.iter().filter(|l| l.abs() <= 5_000).count() })
}

/// Exit code for a verdict, with `--expect`: 0 when it matched, 1 when not.
pub fn exit_code(verdict: Validity, expect: Option<Validity>) -> u8 {
    match expect {
        Some(e) if e == verdict => 0,
        Some(_) => 1,
        None => verdict.exit_code() as u8,
    }
}

/// Load a stored run for checking (the history streamed separately by the checker).
pub fn load_record(dir: &Path) -> anyhow::Result<RunRecord> {
    let meta: RunMeta = results::read_json(&dir.join(chaos_history::RUN_META_FILE))?;
    let audit = results::read_json(&dir.join(chaos_history::AUDIT_FILE)).ok();
    let final_state = results::read_json(&dir.join(chaos_history::FINAL_STATE_FILE)).ok();
    let history = chaos_history::read_history(&dir.join(chaos_history::HISTORY_FILE))?;
    Ok(RunRecord {
        meta,
        history,
        audit,
        final_state,
    })
}
