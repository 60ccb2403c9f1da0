//! The signal family: a mover paused (SIGSTOP, or the docker cgroup freezer) and resumed, or killed (SIGKILL) and started again; a lock service's member the same (its server's own process).

use super::{Applied, Invoke, Nemesis, PREPARE};
use chaos_nemesis::{FaultKind, NemesisOp};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A signal is instant; a restarted mover is started ahead and held at its gate (connected).
pub(super) fn lead(n: &Nemesis, op: &NemesisOp) -> Duration {
    match (&op.kind, op.heal) {
        (FaultKind::Kill { .. }, true) => PREPARE + n.movers.prepare_lead(),
        _ => Duration::ZERO,
    }
}

/// A kill leaves nothing to undo at the end of a run (its restart is owed only when it landed).
pub(super) fn needs_heal(kind: &FaultKind) -> bool {
    !matches!(kind, FaultKind::Kill { .. })
}

pub(super) async fn apply(
    n: &Nemesis,
    op: &NemesisOp,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let target = op.kind.target();
    if let Some(lock) = n.lock_server(target) {
        return lock_member(lock, op, at, invoke).await;
    }
    if let (FaultKind::Kill { .. }, true) = (&op.kind, op.heal) {
        return restart(n, target, at, invoke).await;
    }
    tokio::time::sleep_until(at.into()).await;
    invoke.fire();
    let signal = |sig, freezer| async move {
        n.movers
            .signal(target, sig, freezer)
            .await
            .map_err(|e| e.to_string())
    };
    match (&op.kind, op.heal) {
        (FaultKind::Pause { freezer, .. }, false) => {
            signal(libc::SIGSTOP, *freezer).await?;
            let how = if *freezer { "freezer" } else { "SIGSTOP" };
            Ok(Applied::now(json!({ "how": how })))
        }
        (FaultKind::Pause { freezer, .. }, true) => {
            signal(libc::SIGCONT, *freezer).await?;
            Ok(Applied::now(Value::Null))
        }
        (FaultKind::Kill { .. }, _) => {
            signal(libc::SIGKILL, false).await?;
            let restarts = n
                .scenario
                .faults
                .get(op.fault)
                .and_then(|f| f.duration_ms)
                .is_some();
            if restarts {
                // Only a kill that landed owes a restart: the run is not over until it
                // happens (a mover that had already exited is not started again).
                n.movers.owe_restart(target);
            }
            Ok(Applied::now(Value::Null))
        }
        (other, _) => Err(format!("{} is not a signal fault", other.verb())),
    }
}

/// A killed mover started again: started now and held at its gate, let go at the instant. A
/// mover that cannot be prepared is started at the instant instead (spawn starts one).
async fn restart(
    n: &Nemesis,
    target: &str,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    if !n.movers.restart_owed(target) {
        return Ok(Applied::now(
            json!({ "restarted": false, "why": "the kill did not land (the mover had exited): nothing to restart" }),
        ));
    }
    // The killed process may still be being reaped.
    for _ in 0..200 {
        if !n.movers.is_running(target) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if let Err(e) = n.movers.prepare(target).await {
        eprintln!("chaos: {target}: could not start ahead of its restart: {e}");
    }
    tokio::time::sleep_until(at.into()).await;
    invoke.fire();
    let began = Instant::now();
    // The owed restart is paid once the mover runs (or cannot be started), not when its task
    // wakes ahead of the instant: until then the run is not over.
    let spawned = n.movers.spawn(target).await;
    n.movers.restart_paid(target);
    spawned.map_err(|e| e.to_string())?;
    Ok(Applied {
        extra: json!({ "spawn_real_us": began.elapsed().as_micros() as u64 }),
        landed: Some(Instant::now()),
    })
}

/// A lock service's member paused (SIGSTOP) and resumed, or killed (SIGKILL, its data kept)
/// and started again, at the instant.
async fn lock_member(
    lock: &tokio::sync::Mutex<crate::lock::LockServer>,
    op: &NemesisOp,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let target = op.kind.target();
    tokio::time::sleep_until(at.into()).await;
    invoke.fire();
    let mut lock = lock.lock().await;
    match (&op.kind, op.heal) {
        (FaultKind::Pause { .. }, heal) => {
            let how = lock
                .pause_member(target, !heal)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Applied::now(match heal {
                false => json!({ "how": how }),
                true => Value::Null,
            }))
        }
        (FaultKind::Kill { .. }, false) => {
            lock.stop_member(target, crate::pg::StopMode::Immediate)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Applied::now(Value::Null))
        }
        (FaultKind::Kill { .. }, true) => {
            let took = lock.start_member(target).await.map_err(|e| e.to_string())?;
            Ok(Applied::now(
                json!({ "start_real_ms": took.as_millis() as u64 }),
            ))
        }
        (other, _) => Err(format!("{} is not a signal fault", other.verb())),
    }
}
