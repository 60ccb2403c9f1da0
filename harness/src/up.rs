//! `chaos up` / `chaos down`: a cluster for manual poking (routing + shards + a proxy per link, schema and seeded data), held by a foreground process that `down` stops.

use crate::backend::{BackendKind, Cluster, ClusterSpec};
use crate::links::Links;
use crate::run::{resolve, RunOptions};
use chaos_workloads::galewatch::Farm;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Scenario whose schema, plan and seeded data to install.
    #[arg(long, default_value = "april")]
    scenario: String,
    /// Install the schema and plan but load no readings.
    #[arg(long)]
    no_seed: bool,
    /// Where logs go.
    #[arg(long, default_value = "results")]
    results: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct DownArgs {
    /// Also remove every container and network left by crashed docker runs (by label).
    #[arg(long)]
    all: bool,
}

/// The file that tells `chaos down` which process holds the cluster.
fn state_file() -> PathBuf {
    std::env::var_os("CHAOS_STATE_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("chaos-up.json"))
}

pub async fn up(a: UpArgs) -> anyhow::Result<u8> {
    if let Ok(text) = std::fs::read_to_string(state_file()) {
        if let Some(pid) = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["pid"].as_i64())
        {
            if unsafe { libc::kill(pid as i32, 0) } == 0 {
                anyhow::bail!("a cluster is already up (pid {pid}); stop it with `chaos down`");
            }
        }
    }
    let scenario = resolve(&RunOptions {
        scenario: a.scenario.clone(),
        ..Default::default()
    })?;
    let began = Instant::now();
    let dir = crate::results::RunDir::create(&a.results, "up", scenario.file.seed)?;
    let mut nodes = vec!["routing".to_string()];
    nodes.extend((1..=scenario.file.cluster.shards).map(|i| format!("shard{i}")));
    let cluster = Cluster::start(
        BackendKind::Process,
        &ClusterSpec {
            links: scenario.topology().links(),
            nodes: nodes.clone(),
            log_dir: dir.logs.clone(),
            run_id: dir.run_id.clone(),
        },
    )
    .await?;
    let links = Links::start(None).await?;
    for link in scenario.topology().links() {
        let node = crate::links::link_target(&link);
        links
            .add(&link, "127.0.0.1:0", &cluster.upstream(node))
            .await?;
    }
    let d = &scenario.file.data;
    let mut farm = Farm {
        turbines: d.turbines,
        seeded_turbines: d.seeded_turbines,
        rows_per_turbine: d.rows_per_turbine,
        old_divisor: d.old_divisor,
        new_divisor: d.new_divisor,
    };
    if a.no_seed {
        farm.seeded_turbines = 0;
    }
    let start_ts = scenario.day_unix_ms + scenario.start_ms;
    let seeded = farm.seeded(start_ts);
    let first = seeded.first().map(|s| s.run.first_ms).unwrap_or(start_ts);
    crate::setup::routing(
        &cluster.admin_url("routing"),
        &scenario.file.lease.job,
        scenario.file.lease.first_token,
        &farm.plan(),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    for n in &nodes[1..] {
        crate::setup::shard(n, &cluster.admin_url(n), &farm, first)
            .await
            .map_err(anyhow::Error::msg)?;
    }
    println!(
        "cluster up in {:.2} s (scenario {}); logs in {}",
        began.elapsed().as_secs_f64(),
        scenario.file.name,
        dir.logs.display()
    );
    for n in &nodes {
        println!("{n:<8} direct   {}", cluster.admin_url(n));
    }
    println!("toxiproxy api  http://{}", links.api);
    for link in scenario.topology().links() {
        println!(
            "{link:<18} postgres://postgres@{}/postgres",
            links.addr(&link).unwrap_or_default()
        );
    }
    let state = serde_json::json!({ "pid": std::process::id(), "api": links.api, "nodes": nodes.iter().map(|n| (n.clone(), cluster.admin_url(n))).collect::<std::collections::BTreeMap<_, _>>() });
    std::fs::write(state_file(), serde_json::to_string_pretty(&state)?)?;
    println!("running until Ctrl-C or `chaos down`");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let stopping = Instant::now();
    let mut cluster = cluster;
    cluster.stop_all().await;
    links.shutdown().await;
    let _ = std::fs::remove_file(state_file());
    println!(
        "cluster stopped in {:.2} s",
        stopping.elapsed().as_secs_f64()
    );
    Ok(0)
}

pub async fn down(a: DownArgs) -> anyhow::Result<u8> {
    let mut stopped = false;
    if let Ok(text) = std::fs::read_to_string(state_file()) {
        let pid = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["pid"].as_i64())
            .unwrap_or(0) as i32;
        if pid > 0 && unsafe { libc::kill(pid, libc::SIGTERM) } == 0 {
            let began = Instant::now();
            while unsafe { libc::kill(pid, 0) } == 0 && began.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            println!(
                "stopped the cluster held by pid {pid} in {:.2} s",
                began.elapsed().as_secs_f64()
            );
            stopped = true;
        }
        let _ = std::fs::remove_file(state_file());
    }
    if a.all {
        let removed = crate::backend::docker_cleanup_all().await?;
        println!(
            "removed {} container(s) and {} network(s) left by earlier docker runs",
            removed.0, removed.1
        );
        stopped = true;
    }
    if !stopped {
        println!("no cluster is up (nothing in {})", state_file().display());
    }
    Ok(0)
}
