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

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> std::io::Result<u16> {
    // The kernel may hand the same ephemeral port to two binds in a row once the first
    // listener is closed; two nodes of one cluster then raced for one port (seen once: a
    // shard's schema went to another shard). Never hand out a port twice in a process.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..64 {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if !given.contains(&port) {
            if given.len() >= 4096 {
                given.remove(0);
            }
            given.push(port);
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "64 binds in a row gave ports already handed out",
    ))
}

/// The process listening on TCP `port` (any address), as `(pid, command name)`, read from
/// `/proc/net/tcp{,6}` and each process's open descriptors; `None` when it cannot be told
/// (another user's process without root, or no such listener).
pub fn listener_of(port: u16) -> Option<(i32, String)> {
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .find_map(|table| {
            let text = std::fs::read_to_string(table).ok()?;
            text.lines().skip(1).find_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                let local_port = cols.get(1)?.rsplit(':').next()?;
                // State 0A is LISTEN.
                (u16::from_str_radix(local_port, 16).ok()? == port && *cols.get(3)? == "0A")
                    .then(|| cols.get(9).map(|s| s.to_string()))
                    .flatten()
            })
        })?;
    let wanted = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == wanted.as_str())
        });
        if holds {
            let name = std::fs::read_to_string(entry.path().join("comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            return Some((pid, name));
        }
    }
    None
}
