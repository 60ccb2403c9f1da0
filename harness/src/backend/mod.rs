//! Backends: where the databases and movers run. `process` (local binaries, the default) and `docker` (containers); both do everything.

pub mod process;

use std::path::PathBuf;
use std::time::Duration;

pub use crate::pg::StopMode;

/// What a cluster is asked to be.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Database nodes: `routing`, `shard1` ...
    pub nodes: Vec<String>,
    /// Where node logs go (the run directory's `logs/`).
    pub log_dir: PathBuf,
    /// A run id unique on this machine, for data directories and labels.
    pub run_id: String,
}

/// How to start one mover.
#[derive(Debug, Clone)]
pub struct MoverSpec {
    pub box_name: String,
    /// The program and its arguments (reference mover), or a shell command line.
    pub program: MoverProgram,
    pub env: Vec<(String, String)>,
    pub log_path: PathBuf,
}

#[derive(Debug, Clone)]
pub enum MoverProgram {
    Exec { program: PathBuf, args: Vec<String> },
    Shell(String),
}

/// Timeouts that bound every backend action.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Label on every container and network the docker backend creates.
pub const DOCKER_LABEL: &str = "chaos.harness";

/// Remove every container and network carrying our label (leftovers of crashed runs).
/// Returns (containers, networks) removed. No engine: (0, 0) and a line on stderr.
pub async fn docker_cleanup_all() -> anyhow::Result<(usize, usize)> {
    use tokio::process::Command;
    let list = |args: &[&str]| {
        let mut c = Command::new("docker");
        c.args(args);
        c
    };
    let out = match list(&["ps", "-aq", "--filter", &format!("label={DOCKER_LABEL}")])
        .output()
        .await
    {
        Ok(o) if o.status.success() => o,
        _ => {
            eprintln!("chaos: no Docker engine answers; nothing to remove");
            return Ok((0, 0));
        }
    };
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !ids.is_empty() {
        let mut args = vec!["rm".to_string(), "-f".into(), "-v".into()];
        args.extend(ids.iter().cloned());
        list(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .output()
            .await?;
    }
    let nets = list(&[
        "network",
        "ls",
        "-q",
        "--filter",
        &format!("label={DOCKER_LABEL}"),
    ])
    .output()
    .await?;
    let net_ids: Vec<String> = String::from_utf8_lossy(&nets.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for n in &net_ids {
        list(&["network", "rm", n]).output().await?;
    }
    Ok((ids.len(), net_ids.len()))
}
