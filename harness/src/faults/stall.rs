//! The stall family: a Postgres node whose commits do not return, as under a saturated disk, and its commits let go. The node is told to wait for a synchronous standby that does not exist (`synchronous_standby_names`, reloaded): every transaction that wrote waits at its commit, its work done and flushed locally, until the name is reset; reads answer throughout. The server's own mechanism, on both backends alike.

use super::{at_instant, Applied, Invoke, Nemesis};
use serde_json::json;
use std::time::{Duration, Instant};

/// The standby every commit waits for while the node is stalled; none ever connects by it.
pub const NOBODY: &str = "chaos_stall_nobody";

/// The `alter system` is sent a little ahead, so only the reload lands at the instant.
pub(super) fn lead() -> Duration {
    Duration::from_millis(15)
}

pub(super) async fn apply(
    n: &Nemesis,
    op: &chaos_nemesis::NemesisOp,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let node = op.kind.target();
    let kept = n.stall_sessions.lock().await.remove(node);
    let client = match kept {
        Some(c) if !c.is_closed() => c,
        _ => connect(n, node).await?,
    };
    let set = match op.heal {
        false => format!("alter system set synchronous_standby_names = '{NOBODY}'"),
        true => "alter system reset synchronous_standby_names".to_string(),
    };
    client
        .batch_execute(&set)
        .await
        .map_err(|e| format!("{set} on {node}: {e}"))?;
    // The reload at the instant: SIGHUP to a postmaster of this host, else through the session.
    let postmaster = n.cluster.lock().await.server_pid(node);
    let rt = tokio::runtime::Handle::current();
    let (client, reloaded) = at_instant(at, invoke, move || {
        let sent = match postmaster {
            // SAFETY: kill(2) on the pid of a postmaster this harness started and still holds.
            Some(pid) => match unsafe { libc::kill(pid, libc::SIGHUP) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error().to_string()),
            },
            None => rt
                .block_on(client.batch_execute("select pg_reload_conf()"))
                .map_err(|e| e.to_string()),
        };
        (client, sent.map(|_| Instant::now()))
    })
    .await;
    let landed = reloaded.map_err(|e| format!("reload {node}'s settings: {e}"))?;
    n.stall_sessions
        .lock()
        .await
        .insert(node.to_string(), client);
    let how = match op.heal {
        false => "synchronous_standby_names: a standby that never answers",
        true => "synchronous_standby_names reset",
    };
    Ok(Applied {
        landed: Some(landed),
        extra: json!({ "how": how }),
    })
}

/// The node's admin session (not through the proxy: a stall is the disk, not the link).
async fn connect(n: &Nemesis, node: &str) -> Result<tokio_postgres::Client, String> {
    let url = n.cluster.lock().await.admin_url(node);
    crate::db::connect(&url, "chaos-nemesis", Duration::from_secs(5))
        .await
        .map_err(|e| format!("connect to {node}: {e}"))
}

/// As the clock starts: a session open to every node a stall names, so a triggered stall
/// lands by two statements, not a connection.
pub(super) async fn open_ahead(n: &Nemesis) {
    let nodes: std::collections::BTreeSet<&str> = n
        .scenario
        .faults
        .iter()
        .filter(|f| matches!(f.kind, chaos_nemesis::FaultKind::Stall { .. }))
        .map(|f| f.kind.target())
        .collect();
    for node in nodes {
        match connect(n, node).await {
            Ok(c) => {
                n.stall_sessions.lock().await.insert(node.to_string(), c);
            }
            Err(e) => eprintln!("chaos: {node}: no session ahead of its stall: {e}"),
        }
    }
}
