//! A node made a streaming standby of another server, on either backend: its database stopped, its data replaced by `pg_basebackup` from the primary through a link, `standby.signal` and `primary_conninfo` written, the server started again.
//!
//! The failover system's replica is made this way after both servers are up and their links
//! exist: replication goes through the `replica->primary` proxy, so a fault on that link cuts
//! it, as a rack's switch would.

use super::{Cluster, StopMode, START_TIMEOUT};
use std::time::Duration;

/// Where the standby streams from (as the standby reaches it) and what it calls itself there.
#[derive(Debug, Clone)]
pub struct Upstream {
    pub host: String,
    pub port: u16,
    /// The standby's `application_name` on the primary (`synchronous_standby_names` names it).
    pub application_name: String,
}

impl Upstream {
    /// The `primary_conninfo` line for `postgresql.auto.conf`.
    pub fn conninfo_line(&self) -> String {
        format!(
            "primary_conninfo = 'host={} port={} user=postgres application_name={}'",
            self.host, self.port, self.application_name
        )
    }
}

impl Cluster {
    /// Replace `node`'s data with a base backup of the server at `from` and start it as a
    /// streaming standby of it.
    pub async fn make_standby(&mut self, node: &str, from: &Upstream) -> anyhow::Result<()> {
        match self {
            Cluster::Process(c) => process_standby(c, node, from).await,
            Cluster::Docker(c) => c.make_standby(node, from).await,
        }
    }
}

async fn process_standby(
    c: &mut super::process::ProcessCluster,
    node: &str,
    from: &Upstream,
) -> anyhow::Result<()> {
    c.stop_node(node, StopMode::Fast).await?;
    let dir = c
        .nodes
        .get(node)
        .map(|n| n.data_dir.clone())
        .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
    std::fs::remove_dir_all(&dir).map_err(|e| anyhow::anyhow!("remove {}: {e}", dir.display()))?;
    let mut cmd = c.install.command("pg_basebackup");
    cmd.args([
        "-h",
        &from.host,
        "-p",
        &from.port.to_string(),
        "-U",
        "postgres",
        "-D",
    ])
    .arg(&dir)
    .args(["-X", "stream", "-c", "fast", "--no-sync"]);
    let out = tokio::time::timeout(START_TIMEOUT, cmd.output())
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "{node}: pg_basebackup took over {} s",
                START_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| anyhow::anyhow!("{node}: run pg_basebackup: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{node}: pg_basebackup from {}:{} failed ({}): {}",
            from.host,
            from.port,
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let auto = dir.join("postgresql.auto.conf");
    let mut conf = std::fs::read_to_string(&auto).unwrap_or_default();
    conf.push_str(&format!("\n{}\n", from.conninfo_line()));
    std::fs::write(&auto, conf).map_err(|e| anyhow::anyhow!("write {}: {e}", auto.display()))?;
    let signal = dir.join("standby.signal");
    std::fs::write(&signal, "").map_err(|e| anyhow::anyhow!("write {}: {e}", signal.display()))?;
    c.install.give(&auto)?;
    c.install.give(&signal)?;
    c.start_node(node).await?;
    Ok(())
}

/// Wait until the standby at `url` streams from its primary (its WAL receiver says so).
pub async fn wait_streaming(node: &str, url: &str, limit: Duration) -> anyhow::Result<()> {
    let began = std::time::Instant::now();
    let mut last = String::from("no answer");
    while began.elapsed() < limit {
        if let Ok(client) = crate::db::connect(url, "harness", Duration::from_secs(5)).await {
            match client
                .query_opt("select status from pg_stat_wal_receiver", &[])
                .await
            {
                Ok(Some(row)) => {
                    let status: String = row.get(0);
                    if status == "streaming" {
                        return Ok(());
                    }
                    last = status;
                }
                Ok(None) => last = "no WAL receiver".into(),
                Err(e) => last = e.to_string(),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!(
        "{node} did not stream from the primary within {} s (last: {last}); see its log",
        limit.as_secs()
    )
}
