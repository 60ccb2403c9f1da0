//! The signal family: a mover paused (SIGSTOP, or the docker cgroup freezer) and resumed, or killed (SIGKILL) and started again; a lock service's member the same (its server's own process).

use super::{at_instant, Applied, Invoke, Nemesis, PREPARE};
use chaos_nemesis::{FaultKind, NemesisOp};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A signal is sent from a thread woken at its instant (begun `PREPARE` ahead: tokio's timer
/// wakes to the millisecond); a restarted mover is started ahead and held at its gate
/// (connected).
pub(super) fn lead(n: &Nemesis, op: &NemesisOp) -> Duration {
    match (&op.kind, op.heal) {
        (FaultKind::Kill { .. }, true) => PREPARE + n.movers.prepare_lead(),
        _ => PREPARE,
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
    let (sig, freezer) = match (&op.kind, op.heal) {
        (FaultKind::Pause { freezer, .. }, false) => (libc::SIGSTOP, *freezer),
        (FaultKind::Pause { freezer, .. }, true) => (libc::SIGCONT, *freezer),
        (FaultKind::Kill { .. }, _) => (libc::SIGKILL, false),
        (other, _) => return Err(format!("{} is not a signal fault", other.verb())),
    };
    let landed = send(n, target, sig, freezer, at, invoke).await?;
    let extra = match (&op.kind, op.heal) {
        (FaultKind::Pause { .. }, false) => {
            json!({ "how": if freezer { "freezer" } else { "SIGSTOP" } })
        }
        (FaultKind::Kill { .. }, _) => {
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
            Value::Null
        }
        _ => Value::Null,
    };
    Ok(Applied { extra, landed })
}

/// `sig` to `target`'s mover at the instant: kill(2) from a thread woken at real-time priority
/// where the process is reachable (as a held proxy change lands), else through the engine's
/// API (a freezer, an engine elsewhere) once tokio's timer wakes. When it landed, if known.
async fn send(
    n: &Nemesis,
    target: &str,
    sig: i32,
    freezer: bool,
    at: Instant,
    invoke: &Invoke,
) -> Result<Option<Instant>, String> {
    // The mover is looked up at the instant (a restart meanwhile gives it a new process).
    let (movers, name) = (n.movers.clone(), target.to_string());
    let sent = at_instant(at, invoke, move || {
        let s = movers.signaller_for(&name, sig)?;
        let sent = match freezer {
            true => None,
            false => s.signal_now(sig).map(|r| r.map(|()| Instant::now())),
        };
        anyhow::Ok((s, sent))
    })
    .await;
    let (s, sent) = sent.map_err(|e| e.to_string())?;
    let landed = match sent {
        Some(r) => Some(r.map_err(|e| format!("{target}: {e}"))?),
        None => {
            s.signal(sig, freezer)
                .await
                .map_err(|e| format!("{target}: {e}"))?;
            None
        }
    };
    if sig == libc::SIGKILL {
        s.after_kill().await;
    }
    Ok(landed)
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
    // Woken at the instant by a thread of its own (tokio's timer wakes to the millisecond).
    at_instant(at, invoke, || ()).await;
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
