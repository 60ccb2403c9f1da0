//! One run, start to finish: resolve the scenario, start the cluster and links, seed, start movers, ingest and nemesis, wait, heal, read the audit and final state, check, write the results.

use crate::audit;
use crate::backend::{BackendKind, Cluster, ClusterSpec, MoverProgram, MoverSpec};
use crate::faults::{Nemesis, LIBFAKETIME};
use crate::links::Links;
use crate::movers::Movers;
use crate::progress::Progress;
use crate::results::{self, RunDir};
use crate::scenario::{self, Scenario};
use crate::setup;
use chaos_checkers::{Validity, Verdict};
use chaos_history::{HistoryWriter, RunMeta, RunRecord, ScenarioClock};
use chaos_workloads::galewatch::Farm;
use chaos_workloads::ingest::{self, IngestConfig, IngestShard};
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
    pub fencing: Option<String>,
    pub on_renew_failure: Option<String>,
    pub on_lost: Option<String>,
    pub check_expiry_before_write: bool,
    pub election: Option<String>,
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
    pub extra_faults: Vec<scenario::FaultEntry>,
    /// Name for the results folder (default: the scenario's name).
    pub label: Option<String>,
    pub backend: Option<BackendKind>,
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
    if let Some(v) = &opts.fencing {
        m.fencing = v.clone();
    }
    if let Some(v) = &opts.on_renew_failure {
        m.on_renew_failure = v.clone();
    }
    if let Some(v) = &opts.on_lost {
        m.on_lost = v.clone();
    }
    if opts.check_expiry_before_write {
        m.check_expiry_before_write = true;
    }
    if let Some(v) = &opts.election {
        m.election = v.clone();
    }
    if let Some(v) = &opts.mover_cmd {
        m.command = Some(v.clone());
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
    file.faults.extend(opts.extra_faults.iter().cloned());
    Ok(scenario::validate(file, &path)?)
}

fn farm(s: &Scenario) -> Farm {
    let d = &s.file.data;
    Farm {
        turbines: d.turbines,
        seeded_turbines: d.seeded_turbines,
        rows_per_turbine: d.rows_per_turbine,
        old_divisor: d.old_divisor,
        new_divisor: d.new_divisor,
    }
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

/// The file libfaketime reads a box's clock offset from.
pub fn faketime_file(log_dir: &Path, box_name: &str) -> PathBuf {
    log_dir.join(format!("{box_name}.faketime"))
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
    let uses_clock = scenario
        .faults
        .iter()
        .any(|f| matches!(f.kind, chaos_nemesis::FaultKind::Clock { .. }));
    if uses_clock && !Path::new(LIBFAKETIME).is_file() {
        anyhow::bail!(
            "the scenario offsets a clock, which needs libfaketime: apt-get install -y faketime"
        );
    }
    let backend = opts.backend.unwrap_or(BackendKind::Process);
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

    // The cluster: routing + shards, and a proxy per link.
    let mut nodes = vec!["routing".to_string()];
    nodes.extend((1..=s.cluster.shards).map(|i| format!("shard{i}")));
    let topology = scenario.topology();
    let spec = ClusterSpec {
        nodes: nodes.clone(),
        links: topology.links(),
        log_dir: dir.logs.clone(),
        run_id: dir.run_id.clone(),
    };
    let t_cluster = Instant::now();
    let cluster = Cluster::start(backend, &spec).await?;
    let cluster_s = t_cluster.elapsed().as_secs_f64();
    say(
        quiet,
        &format!(
            "chaos: {} databases up in {:.2} s ({})",
            nodes.len(),
            cluster_s,
            cluster.describe()
        ),
    );
    // Tests plant a panic here to prove no server outlives the harness.
    if std::env::var("CHAOS_TEST_PANIC").as_deref() == Ok("after-cluster") {
        panic!("planted panic (CHAOS_TEST_PANIC) after the cluster started");
    }
    let proxy_api = opts.toxiproxy.clone().or_else(|| cluster.proxy_api());
    let links = Arc::new(Links::start(proxy_api.as_deref()).await?);
    for (i, link) in topology.links().iter().enumerate() {
        let node = crate::links::link_target(link);
        links
            .add(link, &cluster.link_listen(link, i), &cluster.upstream(node))
            .await?;
    }
    // Every link's URL, for a mover and for the harness (the ingest).
    let urls: BTreeMap<String, (String, String)> = topology
        .links()
        .into_iter()
        .map(|link| {
            let reported = links.addr(&link).unwrap_or_default();
            let url = |h| {
                format!(
                    "postgres://postgres@{}/postgres",
                    cluster.client_addr(&link, &reported, h)
                )
            };
            let pair = (url(false), url(true));
            (link, pair)
        })
        .collect();
    let link_url = |link: &str| urls.get(link).map(|u| u.0.clone()).unwrap_or_default();
    let link_addr =
        |link: &str, _for_harness: bool| urls.get(link).map(|u| u.1.clone()).unwrap_or_default();

    // Schema, plan and seeded history. Readings carry scenario-calendar timestamps.
    let t_seed = Instant::now();
    let start_ts_ms = scenario.day_unix_ms + scenario.start_ms;
    let seeded = farm.seeded(start_ts_ms);
    let seed_first_ms = seeded
        .first()
        .map(|t| t.run.first_ms)
        .unwrap_or(start_ts_ms);
    setup::routing(
        &cluster.admin_url("routing"),
        &s.lease.job,
        s.lease.first_token,
        &plan,
    )
    .await
    .map_err(anyhow::Error::msg)?;
    let shard_names: Vec<String> = nodes[1..].to_vec();
    let shard_admin: Vec<(String, String)> = shard_names
        .iter()
        .map(|n| (n.clone(), cluster.admin_url(n)))
        .collect();
    let loads = shard_admin
        .iter()
        .map(|(n, url)| setup::shard(n, url, &farm, seed_first_ms));
    for r in futures_util::future::join_all(loads).await {
        r.map_err(anyhow::Error::msg)?;
    }
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

    // The mover specs (real milliseconds, already scaled).
    let real = |scenario_s: f64| scenario.real_ms(scenario_s * 1000.0);
    let mut mover_args = vec![
        "--fencing".to_string(),
        s.mover.fencing.clone(),
        "--on-renew-failure".into(),
        s.mover.on_renew_failure.clone(),
        "--on-lost".into(),
        s.mover.on_lost.clone(),
        "--election".into(),
        s.mover.election.clone(),
    ];
    if s.mover.check_expiry_before_write {
        mover_args.push("--check-expiry-before-write".into());
    }
    mover_args.extend(s.mover.args.iter().cloned());
    let specs: Vec<MoverSpec> = topology
        .boxes
        .iter()
        .map(|b| {
            let shard_urls = shard_names
                .iter()
                .map(|n| format!("{n}={}", link_url(&format!("{b}->{n}"))))
                .collect::<Vec<_>>()
                .join(",");
            let mut env = vec![
                ("CHAOS_BOX".to_string(), b.clone()),
                ("CHAOS_JOB".into(), s.lease.job.clone()),
                (
                    "CHAOS_ROUTING_URL".into(),
                    link_url(&format!("{b}->routing")),
                ),
                ("CHAOS_SHARD_URLS".into(), shard_urls),
                ("CHAOS_LEASE_MS".into(), real(s.lease.lease_s).to_string()),
                ("CHAOS_POLL_MS".into(), real(s.lease.poll_s).to_string()),
                ("CHAOS_COPY_MS".into(), real(s.lease.copy_s).to_string()),
                ("CHAOS_BATCHES".into(), s.lease.batches.to_string()),
            ];
            if uses_clock {
                let file = faketime_file(&dir.logs, b);
                let _ = std::fs::write(&file, "+0\n");
                env.push(("LD_PRELOAD".into(), LIBFAKETIME.into()));
                env.push(("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()));
                env.push(("FAKETIME_NO_CACHE".into(), "1".into()));
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
            }
        })
        .collect();

    // Movers start before the clock and wait at their gates, connected (a container takes
    // about 1 s to start, a process tens of ms to connect to four databases); then the
    // scenario clock starts and the gates open.
    cluster.prepare_movers(&specs).await?;
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
    let progress = Arc::new(Progress::new(plan.len()));
    let movers = Movers::new(
        specs,
        cluster.lock().await.launcher(),
        history.clone(),
        progress.clone(),
        dir.logs.clone(),
    );
    let schedule = chaos_nemesis::expand(
        &scenario.faults,
        &topology,
        scenario.start_ms,
        scenario.end_ms,
        ScenarioClock::format,
    )?;
    let nemesis = Nemesis::new(
        cluster.clone(),
        links.clone(),
        movers.clone(),
        history.clone(),
        progress.clone(),
        scenario.clone(),
        t0,
    );
    let initial = nemesis.apply_initial(&schedule).await;
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
                url: link_addr(&format!("ingest->{n}"), true),
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
    loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now_ms = history.now_scenario_ms();
        if movers.running() == 0 && movers.pending_restarts.load(Ordering::SeqCst) == 0 {
            end_reason = "every mover exited".to_string();
            break;
        }
        if now_ms >= scenario.end_ms {
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
    movers.stop_all().await;
    stop_ingest.store(true, Ordering::Relaxed);
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
        completed: dropped == 0,
        incomplete_reason: (dropped > 0).then(|| {
            format!("the history hit its limit of {HISTORY_LIMIT} events; {dropped} were dropped")
        }),
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
    let verdict = crate::check::check_dir(&dir.path, Some(&figures), quiet)?;
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
    out.insert("fencing".into(), m.fencing.clone());
    out.insert("on_renew_failure".into(), m.on_renew_failure.clone());
    out.insert("on_lost".into(), m.on_lost.clone());
    out.insert(
        "check_expiry_before_write".into(),
        m.check_expiry_before_write.to_string(),
    );
    out.insert("election".into(), m.election.clone());
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
