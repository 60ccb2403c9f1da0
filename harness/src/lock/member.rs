//! A lock service's member as a local process (etcd, Redis, ZooKeeper alike): the nemesis's stop (SIGTERM or SIGKILL, after a SIGCONT so a paused member acts on it) and its pause (SIGSTOP, SIGCONT).

use crate::procs;
use tokio::process::Child;

/// `sig`, and SIGCONT so a paused member acts on it; SIGKILL after 3 s.
pub(super) fn stop_now(pid: i32, sig: i32) {
    unsafe { libc::kill(pid, libc::SIGCONT) };
    procs::stop_now(pid, sig);
}

/// The nemesis's stop of `node`: SIGTERM (`Fast`) or SIGKILL (`Immediate`: a crash, and a
/// `kill`); waits for it to exit. Its data stays where it was.
pub(super) async fn stop(
    node: &str,
    child: &mut Option<Child>,
    mode: crate::pg::StopMode,
) -> anyhow::Result<()> {
    let Some(mut child) = child.take() else {
        anyhow::bail!("{node} is not running");
    };
    let sig = match mode {
        crate::pg::StopMode::Fast => libc::SIGTERM,
        crate::pg::StopMode::Immediate => libc::SIGKILL,
    };
    if let Some(pid) = child.id() {
        let pid = pid as i32;
        tokio::task::spawn_blocking(move || stop_now(pid, sig)).await?;
    }
    let _ = child.wait().await;
    Ok(())
}

/// The nemesis's pause (SIGSTOP) or resume (SIGCONT) of `node`.
pub(super) fn pause(node: &str, child: &Option<Child>, pause: bool) -> anyhow::Result<()> {
    let Some(pid) = child.as_ref().and_then(|c| c.id()) else {
        anyhow::bail!("{node} is not running");
    };
    let sig = if pause { libc::SIGSTOP } else { libc::SIGCONT };
    if unsafe { libc::kill(pid as i32, sig) } != 0 {
        anyhow::bail!("signal {node}: {}", std::io::Error::last_os_error());
    }
    Ok(())
}
