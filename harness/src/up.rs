//! `chaos up` / `chaos down`: a cluster for manual poking (the run's own testbed: routing + shards + a proxy per link, schema and seeded data), held by a foreground process that `down` stops.

use crate::backend::BackendKind;
use crate::run::{resolve, RunOptions};
use crate::testbed::{farm, BedOptions, Testbed};
use std::collections::BTreeMap;
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
    /// Where the databases and the proxy run.
    #[arg(long, value_enum, default_value = "process")]
    backend: BackendKind,
    /// The lock service to start beside the databases: claims (the routing db's claim row),
    /// advisory (a Postgres advisory lock in the routing db) or etcd (a real etcd 3.4 member)
    /// [default: the scenario's].
    #[arg(long, value_enum)]
    lock: Option<crate::lock::LockKind>,
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
        lock: a.lock,
        ..Default::default()
    })?;
    let began = Instant::now();
    let dir = crate::results::RunDir::create(&a.results, "up", scenario.file.seed)?;
    let bed = Testbed::start(
        &scenario,
        &BedOptions {
            backend: a.backend,
            toxiproxy: None,
            log_dir: dir.logs.clone(),
            run_id: dir.run_id.clone(),
        },
    )
    .await?;
    let mut farm = farm(&scenario);
    if a.no_seed {
        farm.seeded_turbines = 0;
    }
    bed.install(&scenario, &farm).await?;
    println!(
        "cluster up in {:.2} s (scenario {}, {}); logs in {}",
        began.elapsed().as_secs_f64(),
        scenario.file.name,
        bed.describe(),
        dir.logs.display()
    );
    let admin: BTreeMap<String, String> = bed
        .nodes
        .iter()
        .map(|n| (n.clone(), bed.cluster.admin_url(n)))
        .collect();
    for (n, url) in &admin {
        println!("{n:<8} direct   {url}");
    }
    let service = scenario.file.lock.service;
    let lock_direct = lock_line(&scenario, &bed);
    println!("{}", lock_direct.0);
    // `->` cannot be in a URL path: the API names link `a->b` proxy `a_to_b` (issue 33: the
    // two names stood side by side without a word).
    println!(
        "toxiproxy api  http://{} (link box-2->routing is proxy box-2_to_routing there)",
        bed.links.api
    );
    for (link, url) in bed.urls.for_harness() {
        let proxy = crate::links::proxy_name(link);
        // A lock service that is not Postgres is dialled at its address, as a box's
        // CHAOS_LOCK_URLS names it.
        let url = if crate::links::link_target(link) == crate::lock::LOCK_NODE {
            scheme(service, url_addr(url))
        } else {
            url.clone()
        };
        println!("{link:<18} proxy {proxy:<20} {url}");
    }
    let state = serde_json::json!({
        "pid": std::process::id(),
        "api": bed.links.api,
        "nodes": admin,
        "lock": { "service": service.name(), "direct": lock_direct.1, "key": service.key(&scenario.file.lease.job) },
    });
    std::fs::write(state_file(), serde_json::to_string_pretty(&state)?)?;
    println!("running until Ctrl-C or `chaos down`");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    let stopping = Instant::now();
    let Testbed {
        mut cluster,
        links,
        mut lock,
        ..
    } = bed;
    lock.stop().await;
    cluster.stop_all().await;
    links.shutdown().await;
    let _ = std::fs::remove_file(state_file());
    println!(
        "cluster stopped in {:.2} s",
        stopping.elapsed().as_secs_f64()
    );
    Ok(0)
}

/// An address as the service's clients dial it: etcd's URL, ZooKeeper's bare `host:port`.
fn scheme(service: crate::lock::LockKind, addr: &str) -> String {
    match service {
        crate::lock::LockKind::Zookeeper => addr.to_string(),
        _ => format!("http://{addr}"),
    }
}

/// The lock service's line (`lock  etcd  direct http://127.0.0.1:P  key /locks/job`) and its
/// direct address, if it has a server of its own.
fn lock_line(scenario: &crate::scenario::Scenario, bed: &Testbed) -> (String, Option<String>) {
    let service = scenario.file.lock.service;
    let key = service.key(&scenario.file.lease.job);
    match bed.lock.endpoints() {
        Some(addrs) => {
            let url = addrs
                .split(',')
                .map(|a| scheme(service, a))
                .collect::<Vec<_>>()
                .join(",");
            (
                format!(
                    "{:<8} direct   {url} ({}; key {key}; a box dials it through box-K->lock)",
                    crate::lock::LOCK_NODE,
                    bed.lock.describe().unwrap_or_default()
                ),
                Some(url),
            )
        }
        None => (
            format!(
                "{:<8} {} in the routing db (key {key}; a box dials it through box-K->routing)",
                crate::lock::LOCK_NODE,
                service.name()
            ),
            None,
        ),
    }
}

/// `host:port` of `postgres://user@host:port/db`.
fn url_addr(url: &str) -> &str {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or_default()
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
            // A zombie has stopped: the program that started `chaos up` may not have reaped it yet.
            while crate::procs::running(pid) && began.elapsed() < Duration::from_secs(30) {
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
