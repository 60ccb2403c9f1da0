//! A database container made a streaming standby: postgres stopped inside its running container (the supervisor keeps it up), its data replaced by `pg_basebackup` run in the container as `postgres`, then started again.
//!
//! Needs an image whose main process stops and starts postgres by signals (ours,
//! `SIGNALS_LABEL`): with any other, stopping postgres stops the container, and there is
//! nowhere left to run the base backup.

use super::cluster::DockerCluster;
use super::containers::*;
use crate::backend::standby::Upstream;
use testcontainers::bollard::exec::StartExecResults;
use testcontainers::bollard::models::ExecConfig;

impl DockerCluster {
    /// Replace `node`'s data with a base backup of `from` and start it as its standby.
    pub async fn make_standby(&mut self, node: &str, from: &Upstream) -> anyhow::Result<()> {
        if !self.db_signals {
            anyhow::bail!(
                "{node}: a standby is made inside its running container, which needs a postgres image that stops and starts by signals (label {SIGNALS_LABEL}, as {DEFAULT_POSTGRES_IMAGE}); {} restarts as a container",
                self.images.postgres
            );
        }
        self.stop_node(node, StopMode::Fast).await?;
        let id = self
            .nodes
            .get(node)
            .map(|n| n.id.clone())
            .ok_or_else(|| anyhow::anyhow!("unknown node {node}"))?;
        let script = format!(
            "set -e; cd /; find {dir} -mindepth 1 -delete; \
             pg_basebackup -h {host} -p {port} -U postgres -D {dir} -X stream -c fast --no-sync; \
             printf '%s\\n' \"{line}\" >> {dir}/postgresql.auto.conf; touch {dir}/standby.signal",
            dir = PG_DATA_DIR,
            host = from.host,
            port = from.port,
            line = from.conninfo_line(),
        );
        let (code, output) = exec(&self.engine.docker, &id, "postgres", &script).await?;
        if code != 0 {
            anyhow::bail!(
                "{node}: the base backup from {}:{} failed in its container (exit {code}): {}",
                from.host,
                from.port,
                output.lines().last().unwrap_or("")
            );
        }
        self.start_node(node).await?;
        Ok(())
    }
}

/// Run `sh -c script` in a running container as `user`; its exit code and its output.
pub(super) async fn exec(
    docker: &Docker,
    id: &str,
    user: &str,
    script: &str,
) -> anyhow::Result<(i64, String)> {
    use futures_util::StreamExt;
    let config = ExecConfig {
        cmd: Some(vec!["/bin/sh".into(), "-c".into(), script.into()]),
        user: Some(user.into()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let created = bounded("create an exec", docker.create_exec(id, config)).await?;
    let started = bounded("start an exec", docker.start_exec(&created.id, None)).await?;
    let mut text = String::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        let read = async {
            while let Some(Ok(chunk)) = output.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
                if text.len() > LOG_COPY_LIMIT_BYTES {
                    break;
                }
            }
        };
        if tokio::time::timeout(START_TIMEOUT, read).await.is_err() {
            anyhow::bail!(
                "the exec in {id} did not end within {} s",
                START_TIMEOUT.as_secs()
            );
        }
    }
    let began = Instant::now();
    loop {
        let info = bounded("inspect an exec", docker.inspect_exec(&created.id)).await?;
        if info.running != Some(true) {
            return Ok((info.exit_code.unwrap_or(-1), text));
        }
        if began.elapsed() > STOP_TIMEOUT {
            anyhow::bail!("the exec in {id} is still running after its output ended");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
