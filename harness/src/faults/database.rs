//! The database family: a server stopped (fast shutdown) or crashed (immediate), and started again with its data; it is signalled and its links cut at the instant, and opened at the start's.

use super::{at_instant, Applied, Invoke, Nemesis, PREPARE};
use crate::pg::StopMode;
use chaos_nemesis::{FaultKind, NemesisOp};
use chaos_proxy::ToxiproxyClient;
use serde_json::json;
use std::time::{Duration, Instant};

/// A stop is signalled from a thread woken at its instant, its links cut through a held proxy
/// change (both begun `PREPARE` ahead); a start is begun
/// earlier by twice the node's last start, so one that runs long still opens its links on
/// time and one that is quick waits, unreachable, for the instant.
pub(super) async fn lead(n: &Nemesis, op: &NemesisOp) -> Duration {
    if !op.heal {
        return PREPARE;
    }
    if let Some(lock) = n.lock_server(op.kind.target()) {
        let last = lock.lock().await.last_start(op.kind.target());
        return PREPARE + (2 * last).max(Duration::from_millis(50));
    }
    let c = n.cluster.lock().await;
    PREPARE + (2 * c.last_start(op.kind.target())).max(c.start_lead_floor())
}

pub(super) async fn apply(
    n: &Nemesis,
    op: &NemesisOp,
    at: Instant,
    held: &ToxiproxyClient,
    invoke: &Invoke,
) -> Result<Applied, String> {
    if op.heal {
        start(n, op.kind.target(), at, held).await
    } else {
        stop(n, &op.kind, at, held, invoke).await
    }
}

/// The server is signalled at the instant from this host where it can be (a database node:
/// its postmaster, see [`crate::backend::StopSignal`]), its links cut meanwhile; it lands
/// with the signal. Else (a lock service's member, an engine elsewhere) its clients lose it at
/// the instant through a held proxy change, then the server stops: fast (a clean shutdown) or
/// immediate (a crash); a crash whose instant is already here is signalled first.
async fn stop(
    n: &Nemesis,
    kind: &FaultKind,
    at: Instant,
    held: &ToxiproxyClient,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let target = kind.target();
    let mode = match kind {
        FaultKind::Crash { .. } => StopMode::Immediate,
        _ => StopMode::Fast,
    };
    let signal = match n.lock_server(target) {
        Some(_) => None,
        None => n.cluster.lock().await.stop_signal(target, mode),
    };
    if let Some(signal) = signal {
        let sent = at_instant(at, invoke, move || signal.send().map(|()| Instant::now())).await;
        let signalled = sent.map_err(|e| format!("stopping {target}: {e}"))?;
        return signalled_first(n, target, mode, held, signalled).await;
    }
    if matches!(mode, StopMode::Immediate) && at <= Instant::now() {
        invoke.fire();
        return signalled_first(n, target, mode, held, Instant::now()).await;
    }
    let links = cut(n, held, target).await?;
    if links == 0 {
        // Nothing was held until the instant: wait for it here.
        tokio::time::sleep_until(at.into()).await;
    }
    let landed = held.landed();
    invoke.fire();
    let began = Instant::now();
    stop_server(n, target, mode).await?;
    Ok(Applied {
        extra: json!({ "links_cut": links, "stopped_real_ms": began.elapsed().as_millis() as u64 }),
        landed,
    })
}

/// The stop's death is the fault: it lands with the signal (`signalled`, sent already or by
/// `stop_server` now), not with the last of the proxy's answers (five links' cuts took 2-8 ms
/// after a trigger). The links are cut meanwhile; the server is waited for until it is gone.
async fn signalled_first(
    n: &Nemesis,
    target: &str,
    mode: StopMode,
    held: &ToxiproxyClient,
    signalled: Instant,
) -> Result<Applied, String> {
    let (links, stopped) = tokio::join!(cut(n, held, target), stop_server(n, target, mode));
    let (links, ()) = (links?, stopped?);
    Ok(Applied {
        extra: json!({
            "links_cut": links,
            "stopped_real_ms": signalled.elapsed().as_millis() as u64,
            "signalled_first": true,
        }),
        landed: Some(signalled),
    })
}

/// Every link to `target` cut (through `held`): how many.
async fn cut(n: &Nemesis, held: &ToxiproxyClient, target: &str) -> Result<usize, String> {
    n.links
        .cut_node(held, target)
        .await
        .map_err(|e| format!("cutting the links to {target}: {e}"))
}

/// The server of `target` stopped: a lock service's member, else a database node.
async fn stop_server(n: &Nemesis, target: &str, mode: StopMode) -> Result<(), String> {
    match n.lock_server(target) {
        Some(lock) => lock.lock().await.stop_member(target, mode).await,
        None => n.cluster.lock().await.stop_node(target, mode).await,
    }
    .map_err(|e| e.to_string())
}

/// Started early by its measured start time; its clients get it back at the instant. Which
/// links open is decided just before it (a `down` landing meanwhile keeps its link shut).
async fn start(
    n: &Nemesis,
    target: &str,
    at: Instant,
    held: &ToxiproxyClient,
) -> Result<Applied, String> {
    let took = match n.lock_server(target) {
        Some(lock) => lock.lock().await.start_member(target).await,
        None => n.cluster.lock().await.start_node(target).await,
    }
    .map_err(|e| e.to_string())?;
    let ready = Instant::now();
    tokio::time::sleep_until(at.checked_sub(PREPARE).unwrap_or(at).into()).await;
    let links = n
        .links
        .restore_node(held, target)
        .await
        .map_err(|e| format!("opening the links to {target}: {e}"))?;
    Ok(Applied {
        extra: json!({ "start_real_ms": took.as_millis() as u64, "links_opened": links }),
        landed: Some(held.landed().unwrap_or(ready)),
    })
}
