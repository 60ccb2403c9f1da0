//! `chaos bench`: figures, not timed tests: cluster start and stop, proxy overhead and latency precision, checker throughput, what the shard audit triggers cost the ingest, how soon a lock grant is observed (`bench_lock.rs`), how late each fault kind lands (`bench_faults.rs`). Medians and ratios from one run.

use crate::backend::{process::ProcessCluster, ClusterSpec};
use chaos_history::{HistoryWriter, ScenarioClock};
use chaos_workloads::galewatch::Farm;
use chaos_workloads::ingest::{self, IngestConfig, IngestShard};
use chaos_workloads::schema::{SHARD_AUDIT_SQL, SHARD_SQL};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// What to measure: cluster, proxy, checker, audit (the shard audit triggers' cost to the ingest), lock (a grant's commit to the observer's report, etcd and advisory), faults (how late each fault kind lands in a real run), check (`chaos check DIR` on a synthetic run written to disk; not in all) or all.
    #[arg(long, default_value = "all", value_parser = ["cluster", "proxy", "checker", "audit", "lock", "faults", "check", "all"])]
    what: String,
    /// Repetitions (the median is reported) [default: 5; check: 1; lock: 200 grants per service]; for audit, rounds, each measuring with and without the triggers [default: 12].
    #[arg(long, alias = "rounds", value_parser = crate::values::count_usize, allow_hyphen_values = true)]
    repeat: Option<usize>,
    /// History events for the checker benchmark [default: 10 M]; for check, one size [default: 1 M then 10 M, each against its target].
    #[arg(long, value_parser = crate::values::count, allow_hyphen_values = true)]
    events: Option<u64>,
    /// check: write the synthetic runs here (DIR/<events>) and keep them (default: a temp dir, removed).
    #[arg(long)]
    check_dir: Option<std::path::PathBuf>,
    /// Rows per audit measurement (each path, each round).
    #[arg(long, default_value_t = 50_000, value_parser = crate::values::count, allow_hyphen_values = true)]
    rows: u64,
    /// cluster: which backend's start to measure (docker: routing + 3 shards + the proxy
    /// container, each answering); faults: which backend's runs.
    #[arg(long, value_enum, default_value = "process")]
    backend: crate::backend::BackendKind,
    /// proxy: also run the Postgres round trips through the Toxiproxy server at HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    toxiproxy: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Measure what `--what` names and print it; exit 1 when a figure missed its target (it said
/// "MISSED" and exited 0 before issue 33), 0 when every target was met.
pub async fn bench(a: BenchArgs) -> anyhow::Result<u8> {
    let mut printed = Vec::new();
    let mut say = |text: String| {
        println!("{text}");
        printed.push(text);
    };
    measure(a, &mut say).await?;
    let missed = printed.iter().map(|t| missed_targets(t)).sum::<usize>();
    if missed > 0 {
        println!("chaos bench: {missed} target(s) MISSED (exit 1)");
        return Ok(1);
    }
    Ok(0)
}

/// How many figures of a bench's text missed their target.
fn missed_targets(text: &str) -> usize {
    text.matches("MISSED").count()
}

async fn measure(a: BenchArgs, say: &mut impl FnMut(String)) -> anyhow::Result<()> {
    let repeat = a.repeat.unwrap_or(5).max(1);
    if a.what == "cluster" || a.what == "all" {
        let log_dir = std::env::temp_dir().join(format!("chaos-bench-{}", std::process::id()));
        std::fs::create_dir_all(&log_dir)?;
        // The template (process) or the images (docker) are made once, outside the measurement.
        if a.backend == crate::backend::BackendKind::Process {
            crate::pg::PgInstall::find()?.template().await?;
        }
        let (mut starts, mut stops) = (vec![], vec![]);
        for i in 0..repeat {
            // April's databases: the routing db and 3 shards, named as a run names them.
            let nodes = chaos_nemesis::Topology::new(4, 3).nodes;
            let run_id = format!("bench-{}-{i}", std::process::id());
            let spec = ClusterSpec::nodes_only(nodes, log_dir.clone(), run_id);
            let t = Instant::now();
            let mut c = crate::backend::Cluster::start(a.backend, &spec).await?;
            starts.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            c.stop_all().await;
            stops.push(t.elapsed().as_secs_f64());
        }
        let _ = std::fs::remove_dir_all(&log_dir);
        let what = match a.backend {
            crate::backend::BackendKind::Process => {
                "process backend, routing + 3 shards, template copy + start in parallel"
            }
            crate::backend::BackendKind::Docker => {
                "docker backend, routing + 3 shards + proxy containers, each answering"
            }
        };
        say(format!(
            "cluster ({what}): start median {:.3} s (min {:.3}, max {:.3}); stop median {:.3} s; {repeat} runs",
            median(starts.clone()),
            starts.iter().cloned().fold(f64::MAX, f64::min),
            starts.iter().cloned().fold(0.0, f64::max),
            median(stops)
        ));
    }
    if a.what == "proxy" || a.what == "all" {
        let report = chaos_proxy::bench(chaos_proxy::BenchOptions::default()).await?;
        say(report.to_string());
        let opts = crate::bench_proxy::PgBenchOptions {
            rounds: a.repeat.unwrap_or(5).max(1),
            toxiproxy: a.toxiproxy.clone(),
            ..Default::default()
        };
        say(crate::bench_proxy::pg_proxy_bench(opts).await?.to_string());
    }
    if a.what == "checker" || a.what == "all" {
        let events = a.events.unwrap_or(10_000_000);
        let text =
            tokio::task::spawn_blocking(move || chaos_bench::bench_synthetic(events)).await?;
        say(text.to_string());
    }
    if a.what == "check" {
        // Both targets unless told one size.
        let sizes: Vec<u64> = match a.events {
            Some(n) => vec![n],
            None => CHECK_TARGETS.iter().map(|t| t.0).collect(),
        };
        let repeat = a.repeat.unwrap_or(1);
        let text =
            tokio::task::spawn_blocking(move || check_bench(&sizes, repeat, a.check_dir)).await??;
        say(text);
    }
    if a.what == "lock" || a.what == "all" {
        let lines = crate::bench_lock::lock_bench(a.repeat.unwrap_or(200).max(1)).await?;
        lines.into_iter().for_each(&mut *say);
    }
    crate::bench_faults::when_asked(&a.what, a.repeat, a.backend, say).await?;
    if a.what == "audit" || a.what == "all" {
        let rounds = a.repeat.unwrap_or(12).max(1);
        let figures = audit_bench(a.rows.max(1), rounds).await?;
        say(figures.to_string());
    }
    Ok(())
}

/// The April farm (`scenarios/april.toml`, `[data]` and `[lease] batches`):
/// a run's shard gets 100 of the 300 turbines in every ingest statement; a
/// mover copies a turbine's 15,768 readings in 10 COPYs.
fn april_farm() -> Farm {
    Farm::ardnave_point()
}
const APRIL_COPY_BATCHES: u64 = 10;
/// The April night's calendar day (2026-04-13), Unix ms: readings carry it.
const APRIL_DAY_UNIX_MS: i64 = 1_776_038_400_000;

/// The two servers of the audit bench.
const WITH: usize = 0;
const WITHOUT: usize = 1;
const AUDIT_NODES: [&str; 2] = ["shard-with-audit", "shard-without-audit"];

/// What the shard audit triggers cost the writers, measured on real servers.
#[derive(Debug, Clone)]
pub struct AuditFigures {
    pub postgres: String,
    pub rounds: usize,
    /// Rows asked for per measurement (the ingest stops within a batch or two of it).
    pub rows: u64,
    /// Turbines (rows) per ingest statement.
    pub ingest_batch: usize,
    /// Rows per COPY statement.
    pub copy_batch: u64,
    /// Rows/s per round, `[with, without]` the triggers.
    pub ingest: [Vec<f64>; 2],
    pub copy: [Vec<f64>; 2],
    /// The server's CPU (every process of it) per row written, µs, per round:
    /// what the triggers cost, unmoved by other load on the machine.
    pub ingest_cpu_us: [Vec<f64>; 2],
    pub copy_cpu_us: [Vec<f64>; 2],
    /// Rows the writers wrote on each server, all rounds.
    pub rows_written: [u64; 2],
    /// Statements on each server: ingest INSERTs and COPYs.
    pub ingest_statements: [u64; 2],
    pub copy_statements: [u64; 2],
    /// Triggers on `readings` after loading each server's schema.
    pub triggers: [i64; 2],
    /// Rows `chaos_write_audit` gained on each server, all rounds.
    pub audit_rows: [i64; 2],
    pub wall_s: f64,
}

/// The median of the rounds' ratios with/without: each round measures both
/// servers back to back, so a slow spell of the machine cancels out.
fn paired_ratio(figures: &[Vec<f64>; 2]) -> f64 {
    median(
        figures[WITH]
            .iter()
            .zip(&figures[WITHOUT])
            .map(|(w, wo)| w / wo)
            .collect(),
    )
}

impl AuditFigures {
    pub fn ingest_ratio(&self) -> f64 {
        paired_ratio(&self.ingest)
    }

    pub fn copy_ratio(&self) -> f64 {
        paired_ratio(&self.copy)
    }
}

impl std::fmt::Display for AuditFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rounds = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        writeln!(
            f,
            "audit bench (process backend, Postgres {}, a run's server settings; one server with the shard schema and its audit triggers, one without; {} rounds of {} rows per path, alternating which server goes first):",
            self.postgres, self.rounds, self.rows
        )?;
        for (name, what, figures, ratio, cpu) in [
            (
                "ingest",
                format!(
                    "workloads::ingest::run_shard, app 'ingest', {} rows a statement",
                    self.ingest_batch
                ),
                &self.ingest,
                self.ingest_ratio(),
                &self.ingest_cpu_us,
            ),
            (
                "copy",
                format!(
                    "the mover's binary COPY, app 'box-1', {} rows a statement",
                    self.copy_batch
                ),
                &self.copy,
                self.copy_ratio(),
                &self.copy_cpu_us,
            ),
        ] {
            let (with, without) = (
                median(figures[WITH].clone()),
                median(figures[WITHOUT].clone()),
            );
            writeln!(
                f,
                "  {name}: with triggers median {with:.0} rows/s, without median {without:.0} rows/s, ratio with/without {ratio:.3} (the rounds' ratios' median; the medians' ratio {:.3}) ({what})",
                with / without
            )?;
            writeln!(
                f,
                "    rounds with: {}; without: {}",
                rounds(&figures[WITH]),
                rounds(&figures[WITHOUT])
            )?;
            writeln!(
                f,
                "    server CPU per row: with median {:.2} us, without median {:.2} us, ratio with/without {:.3} (the rounds' ratios' median)",
                median(cpu[WITH].clone()),
                median(cpu[WITHOUT].clone()),
                paired_ratio(cpu),
            )?;
        }
        writeln!(
            f,
            "  triggers on readings: with {}, without {}",
            self.triggers[WITH], self.triggers[WITHOUT]
        )?;
        writeln!(
            f,
            "  audit rows: with {} ({} ingest statements, {} COPYs, {} rows written), without {} ({} ingest statements, {} COPYs, {} rows written)",
            self.audit_rows[WITH],
            self.ingest_statements[WITH],
            self.copy_statements[WITH],
            self.rows_written[WITH],
            self.audit_rows[WITHOUT],
            self.ingest_statements[WITHOUT],
            self.copy_statements[WITHOUT],
            self.rows_written[WITHOUT],
        )?;
        write!(f, "  wall {:.1} s", self.wall_s)
    }
}

/// Sets the flag when dropped: the ingest task ends on every path out of a measurement.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

async fn count(c: &tokio_postgres::Client, sql: &str) -> anyhow::Result<i64> {
    Ok(c.query_one(sql, &[]).await?.get(0))
}

/// Start two servers as a run starts its shards, load the shard schema on
/// both and the audit triggers on one, then write `rows` rows through the
/// harness's own ingest and through the mover's COPY, `rounds` times on each,
/// alternating. Every server is stopped on every path: explicitly at the end,
/// by `ProcessCluster`'s `Drop` on an error or an interrupt.
pub async fn audit_bench(rows: u64, rounds: usize) -> anyhow::Result<AuditFigures> {
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("chaos-bench-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let nodes = AUDIT_NODES.iter().map(|n| n.to_string()).collect();
    let run_id = format!("bench-audit-{}", std::process::id());
    let spec = ClusterSpec::nodes_only(nodes, dir.clone(), run_id);
    let mut cluster = ProcessCluster::start(&spec).await?;
    let result = audit_rounds(&cluster, &dir, rows, rounds).await;
    cluster.stop_all().await;
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut figures = result?;
    figures.wall_s = began.elapsed().as_secs_f64();
    Ok(figures)
}

async fn audit_rounds(
    cluster: &ProcessCluster,
    dir: &Path,
    rows: u64,
    rounds: usize,
) -> anyhow::Result<AuditFigures> {
    let urls = AUDIT_NODES.map(|n| cluster.admin_url(n));
    let pids = AUDIT_NODES.map(|n| cluster.nodes[n].pid().unwrap_or(0) as i32);
    let mut admin = Vec::new();
    let mut triggers = [0; 2];
    for (i, url) in urls.iter().enumerate() {
        let c = crate::db::connect(url, "harness", Duration::from_secs(30))
            .await
            .map_err(anyhow::Error::msg)?;
        c.batch_execute(SHARD_SQL).await?;
        if i == WITH {
            c.batch_execute(SHARD_AUDIT_SQL).await?;
        }
        triggers[i] = count(
            &c,
            "select count(*) from pg_trigger where tgrelid = 'readings'::regclass and not tgisinternal",
        )
        .await?;
        admin.push(c);
    }
    if triggers[WITH] == 0 || triggers[WITHOUT] != 0 {
        anyhow::bail!(
            "audit bench: {} triggers on readings with the audit, {} without: the schema did not load as intended",
            triggers[WITH],
            triggers[WITHOUT]
        );
    }
    let farm = april_farm();
    let turbines = farm.ingested_on("shard1");
    let copy_batch = (farm.rows_per_turbine as u64).div_ceil(APRIL_COPY_BATCHES);
    let batches = rows.div_ceil(turbines.len() as u64);
    let audit_sql = "select count(*) from chaos_write_audit";
    let mut audit_before = [0; 2];
    for i in [WITH, WITHOUT] {
        audit_before[i] = count(&admin[i], audit_sql).await?;
    }
    let mut figures = AuditFigures {
        postgres: cluster.install.version.clone(),
        rounds,
        rows,
        ingest_batch: turbines.len(),
        copy_batch,
        ingest: [vec![], vec![]],
        copy: [vec![], vec![]],
        ingest_cpu_us: [vec![], vec![]],
        copy_cpu_us: [vec![], vec![]],
        rows_written: [0; 2],
        ingest_statements: [0; 2],
        copy_statements: [0; 2],
        triggers,
        audit_rows: [0; 2],
        wall_s: 0.0,
    };
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [WITH, WITHOUT]
        } else {
            [WITHOUT, WITH]
        };
        for i in order {
            admin[i].batch_execute("truncate readings").await?;
            let cpu = server_cpu_s(pids[i]);
            let (written, statements, secs) = ingest_once(
                &urls[i],
                &turbines,
                batches,
                &dir.join(format!("{}-{round}.jsonl", AUDIT_NODES[i])),
            )
            .await?;
            figures.ingest[i].push(written as f64 / secs);
            figures.ingest_cpu_us[i].push(cpu_since(pids[i], cpu).await / written as f64 * 1e6);
            figures.rows_written[i] += written;
            figures.ingest_statements[i] += statements;
        }
        for i in order {
            admin[i].batch_execute("truncate readings").await?;
            let cpu = server_cpu_s(pids[i]);
            let (written, statements, secs) = copy_once(&urls[i], rows, copy_batch).await?;
            figures.copy[i].push(written as f64 / secs);
            figures.copy_cpu_us[i].push(cpu_since(pids[i], cpu).await / written as f64 * 1e6);
            figures.rows_written[i] += written;
            figures.copy_statements[i] += statements;
        }
    }
    for i in [WITH, WITHOUT] {
        figures.audit_rows[i] = count(&admin[i], audit_sql).await? - audit_before[i];
    }
    if figures.audit_rows[WITH] == 0 || figures.audit_rows[WITHOUT] != 0 {
        anyhow::bail!(
            "audit bench: the audit recorded {} rows with the triggers and {} without: the measurement is not what it claims\n{figures}",
            figures.audit_rows[WITH],
            figures.audit_rows[WITHOUT]
        );
    }
    Ok(figures)
}

/// The harness's ingest (`workloads::ingest::run_shard`, its statement, its
/// connection as app `ingest`, its history lines) against one server,
/// without pacing: ticks every microsecond, so each batch goes as soon as
/// the last one is answered. Stops after about `batches` statements; returns
/// (rows written, statements, seconds).
async fn ingest_once(
    url: &str,
    turbines: &[String],
    batches: u64,
    history_path: &Path,
) -> anyhow::Result<(u64, u64, f64)> {
    let now_ns = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos() as i64;
    let clock = ScenarioClock {
        start_unix_ns: now_ns,
        start_scenario_ms: 78_000_000,
        real_ns_per_scenario_s: 10_000_000,
        scenario_day_unix_ms: APRIL_DAY_UNIX_MS,
        wall_check_run_ns: 0,
        wall_check_unix_ns: 0,
    };
    let started = Instant::now();
    let history = HistoryWriter::create(history_path, started, clock, u64::MAX)?;
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_on_drop = StopOnDrop(stop.clone());
    let shard = IngestShard {
        shard: "shard1".into(),
        url: url.to_string(),
        turbines: turbines.to_vec(),
    };
    let config = IngestConfig {
        every: Duration::from_micros(1),
        every_scenario_ms: 2_000,
        timeout: Duration::from_secs(30),
    };
    let task = tokio::spawn(ingest::run_shard(
        shard,
        config,
        history.clone(),
        stop.clone(),
    ));
    // Two events a batch (invoke, then its completion): stop once the last batch is invoked.
    loop {
        let (events, _) = history.finish()?;
        if events + 1 >= 2 * batches || task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let stats = task.await?;
    let secs = started.elapsed().as_secs_f64();
    if stats.fail + stats.info > 0 || stats.ok == 0 {
        anyhow::bail!(
            "audit bench: the ingest against {url} had {} ok, {} failed and {} uncertain batches (history: {})",
            stats.ok,
            stats.fail,
            stats.info,
            history_path.display()
        );
    }
    let _ = std::fs::remove_file(history_path);
    Ok((stats.ok * turbines.len() as u64, stats.ok, secs))
}

/// The mover's copy (`workloads::mover::db::Db::copy_readings`: binary COPY
/// as app `box-1`, which the audit records per turbine) against one server:
/// `rows` rows in COPYs of `per` rows, a turbine each. The rows are built
/// before the clock starts. Returns (rows written, statements, seconds).
async fn copy_once(url: &str, rows: u64, per: u64) -> anyhow::Result<(u64, u64, f64)> {
    use chaos_workloads::galewatch::reading_value;
    use chaos_workloads::mover::db::Db;
    let config: tokio_postgres::Config = url.parse()?;
    let mut db = Db::new("bench", url, config, "box-1", Duration::from_secs(60));
    db.connect().await?;
    let first_ts_ms = APRIL_DAY_UNIX_MS - chaos_workloads::galewatch::YEAR_MS;
    let mut batches = Vec::new();
    let mut left = rows;
    let mut n = 0u32;
    while left > 0 {
        n += 1;
        let turbine = Farm::serial(n);
        let k = left.min(per);
        let ts_ms: Vec<i64> = (0..k as i64).map(|i| first_ts_ms + i * 2_000_000).collect();
        let ts: Vec<SystemTime> = ts_ms
            .iter()
            .map(|&t| UNIX_EPOCH + Duration::from_millis(t as u64))
            .collect();
        let values: Vec<f64> = ts_ms.iter().map(|&t| reading_value(&turbine, t)).collect();
        batches.push((turbine, ts, values));
        left -= k;
    }
    let started = Instant::now();
    let mut written = 0;
    for (turbine, ts, values) in &batches {
        written += db.copy_readings(turbine, ts, values).await?;
    }
    Ok((
        written,
        batches.len() as u64,
        started.elapsed().as_secs_f64(),
    ))
}

/// The targets of `chaos check DIR` on a synthetic April-shaped run: (events, wall s, peak RSS MiB).
const CHECK_TARGETS: [(u64, f64, f64); 2] = [(1_000_000, 1.5, 256.0), (10_000_000, 10.0, 1024.0)];

/// `chaos check DIR` as the user runs it (this binary, a process of its own,
/// the report written, `-q`) on a synthetic April-shaped run of about
/// `events` lines (`Synthetic`: ingest batches of 100 turbines per shard
/// every 2 s, the boxes' copies, deletes, renewals and polls, faults),
/// written to `dir/<events>` (kept) or a temp dir (removed). Wall time and
/// the process's peak RSS (its `ru_maxrss`, what `VmHWM` says at its exit),
/// each next to its target: one line per size.
fn check_bench(
    sizes: &[u64],
    repeat: usize,
    dir: Option<std::path::PathBuf>,
) -> anyhow::Result<String> {
    let mut out = Vec::new();
    for &events in sizes {
        let keep = dir.is_some();
        let run = match &dir {
            Some(d) => d.join(events.to_string()),
            None => std::env::temp_dir()
                .join(format!("chaos-bench-check-{}-{events}", std::process::id())),
        };
        let written = write_synthetic_run(&run, events);
        let measured = written.and_then(|(lines, bytes)| {
            let mut runs = Vec::new();
            for _ in 0..repeat.max(1) {
                runs.push(measure_check(&run)?);
            }
            runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
            let m = runs.swap_remove(runs.len() / 2);
            Ok((lines, bytes, m))
        });
        if !keep {
            let _ = std::fs::remove_dir_all(&run);
        }
        let (lines, bytes, m) = measured?;
        let target = CHECK_TARGETS.iter().find(|(n, _, _)| events <= *n);
        let vs = against;
        out.push(format!(
            "check bench: chaos check -q on a synthetic April-shaped run of {} lines ({:.0} MB, report.html {:.0} kB): wall {}, peak RSS {}; verdict {} (exit {}){}",
            thousands(lines),
            bytes as f64 / 1e6,
            m.report_bytes as f64 / 1e3,
            vs(m.wall_s, "s", target.map(|t| t.1)),
            vs(m.peak_mib, "MiB", target.map(|t| t.2)),
            m.verdict,
            m.exit,
            if keep { format!("; kept in {}", run.display()) } else { String::new() }
        ));
    }
    Ok(out.join("\n"))
}

/// A figure next to its target: `met` or `MISSED` (which makes `chaos bench` exit 1).
fn against(value: f64, unit: &str, limit: Option<f64>) -> String {
    match limit {
        Some(limit) => format!(
            "{value:.2} {unit} (target < {limit} {unit}: {})",
            if value < limit { "met" } else { "MISSED" }
        ),
        None => format!("{value:.2} {unit} (no target above 10 M events)"),
    }
}

/// 10000000 as 10 000 000.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Write the synthetic April-shaped run of about `events` lines to `dir` as a
/// run directory (run.json, history.jsonl, audit.json, final-state.json):
/// (lines, history bytes).
pub fn write_synthetic_run(dir: &Path, events: u64) -> anyhow::Result<(u64, u64)> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let mut syn = chaos_bench::Synthetic::new(events);
    let clock = syn.meta.clock;
    crate::results::write_json(&dir.join(chaos_history::RUN_META_FILE), &syn.meta)?;
    crate::results::write_json(&dir.join(chaos_history::AUDIT_FILE), &syn.audit)?;
    crate::results::write_json(&dir.join(chaos_history::FINAL_STATE_FILE), &syn.final_state)?;
    let path = dir.join(chaos_history::HISTORY_FILE);
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
    let mut failed = None;
    let lines = syn.for_each_op(|op| {
        op.scenario_time = ScenarioClock::format(clock.scenario_ms_at_run_ns(op.time_ns));
        if failed.is_none() {
            if let Err(e) = serde_json::to_writer(&mut out, &*op)
                .map_err(std::io::Error::from)
                .and_then(|_| out.write_all(b"\n"))
            {
                failed = Some(e);
            }
        }
    });
    if let Some(e) = failed {
        anyhow::bail!("writing {}: {e}", path.display());
    }
    out.flush()?;
    drop(out);
    Ok((lines, std::fs::metadata(&path)?.len()))
}

/// One `chaos check -q DIR` in a child process.
struct CheckRun {
    wall_s: f64,
    peak_mib: f64,
    exit: i32,
    verdict: String,
    report_bytes: u64,
}

fn measure_check(dir: &Path) -> anyhow::Result<CheckRun> {
    use std::io::Read;
    let _ = std::fs::remove_file(dir.join("report.html"));
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut child = std::process::Command::new(&exe)
        .arg("check")
        .arg("-q")
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", exe.display()))?;
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let err = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = e.read_to_string(&mut s);
            s
        })
    });
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(t) = err {
        stderr = t.join().unwrap_or_default();
    }
    let (status, usage) = wait_with_usage(child.id() as libc::pid_t)?;
    let wall_s = started.elapsed().as_secs_f64();
    let exit = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    if exit != 1 {
        anyhow::bail!(
            "chaos check {} exited {exit}, not 1 (the synthetic run plants a lost turbine): {}{}",
            dir.display(),
            stdout.trim(),
            stderr.trim()
        );
    }
    Ok(CheckRun {
        wall_s,
        // Linux gives ru_maxrss in KiB.
        peak_mib: usage.ru_maxrss as f64 / 1024.0,
        exit,
        // `DIR: Invalid (exit 1)[: reasons]`
        verdict: stdout
            .trim()
            .strip_prefix(&format!("{}: ", dir.display()))
            .and_then(|rest| rest.split(" (exit").next())
            .unwrap_or("?")
            .to_string(),
        report_bytes: std::fs::metadata(dir.join("report.html"))
            .map(|m| m.len())
            .unwrap_or(0),
    })
}

/// Reap a child and its resource usage (`wait4`).
fn wait_with_usage(pid: libc::pid_t) -> anyhow::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: a valid pid of our own child, pointers to locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            return Ok((status, usage));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            anyhow::bail!("wait4 {pid}: {e}");
        }
    }
}

/// CPU seconds (user + system) of a Postgres server so far: the postmaster,
/// the backends it has reaped, and every live child (backends, the writer,
/// autovacuum). Linux `/proc`; 0 elsewhere.
fn server_cpu_s(postmaster: i32) -> f64 {
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // Fields after the command name: state is 3, ppid 4, utime 14, stime 15, cutime 16, cstime 17.
    let stat = |pid: &str| -> Option<Vec<i64>> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &text[text.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some(
            [1, 11, 12, 13, 14]
                .iter()
                .map(|&i| fields.get(i).and_then(|f| f.parse().ok()).unwrap_or(0))
                .collect(),
        )
    };
    let Some(own) = stat(&postmaster.to_string()) else {
        return 0.0;
    };
    let mut total = own[1] + own[2] + own[3] + own[4];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if let Some(child) = stat(pid).filter(|f| f[0] == postmaster as i64) {
            total += child[1] + child[2];
        }
    }
    total as f64 / ticks
}

/// The server's CPU seconds since `before`, once the measurement's backend
/// has exited and been reaped (its time moves into the postmaster's).
async fn cpu_since(postmaster: i32, before: f64) -> f64 {
    tokio::time::sleep(Duration::from_millis(100)).await;
    (server_cpu_s(postmaster) - before).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::{against, missed_targets};

    /// `chaos bench` printed "MISSED" and exited 0 (issue 33): every missed figure counts.
    #[test]
    fn a_missed_target_is_counted_for_the_exit_code() {
        let line = format!(
            "wall {}, peak RSS {}",
            against(2.0, "s", Some(1.5)),
            against(51.0, "MiB", Some(256.0))
        );
        assert_eq!(
            line,
            "wall 2.00 s (target < 1.5 s: MISSED), peak RSS 51.00 MiB (target < 256 MiB: met)"
        );
        assert_eq!(missed_targets(&line), 1);
        assert_eq!(missed_targets(&against(0.4, "s", Some(1.5))), 0);
    }
}
