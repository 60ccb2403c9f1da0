//! Child processes that cannot outlive the harness: parent-death signals, process groups, and a stop that waits.

use std::time::{Duration, Instant};

/// Ask the kernel to SIGKILL the child when the harness dies, even by SIGKILL.
/// The uid change (when root) happens before this hook runs in std, and a
/// credential change would clear the setting, so it is set last.
pub fn die_with_parent(cmd: &mut tokio::process::Command) {
    // SAFETY: prctl and getppid are async-signal-safe; nothing allocates.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() == 1 {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Put the child in its own process group, so a signal reaches its children too.
pub fn own_group(cmd: &mut tokio::process::Command) {
    cmd.process_group(0);
}

/// Send `sig`, then SIGKILL if the process is still there after 3 s. Blocking;
/// for Drop and exit paths. Reaps nothing: the owner's Child does that.
pub fn stop_now(pid: i32, sig: i32) {
    unsafe { libc::kill(pid, sig) };
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(3) {
        let mut status = 0;
        // WNOHANG reaps it if it is our child and has exited.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid || (r < 0 && !running(pid)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Whether `pid` still runs (a zombie its supervisor has yet to reap has exited).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `PID (comm) STATE ...`: the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}
