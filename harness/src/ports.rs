//! TCP ports on 127.0.0.1 for the servers a run starts: reserved across every harness process on the machine (two runs at once, a sweep's, a nightly's slices), and a check that what answers on a port is the server this run started, not another run's.
//!
//! A port was once "bind 0, read it, close": two harnesses started at once could be handed the
//! same one, and the second's Postgres, failing to bind, left its port answered by the first's.
//! The second run then seeded, copied and judged on the first run's shard (seen in the suite:
//! two gc-pause runs each wrote the other's turbine). Now a port comes from below the kernel's
//! ephemeral range (no outgoing connection is given it), with a lock file that the process
//! holds for as long as it may use the port, and readiness asks whether the listener is ours.

use std::fs::File;
use std::sync::Mutex;

/// Where each harness process holds a lock per port it handed out (released when the process
/// ends, however it ends).
const LOCK_DIR: &str = "/tmp/chaos-ports";
/// The lowest port handed out.
const LOWEST: u16 = 10_000;
/// How many ports one process holds at most; the oldest is let go first.
const HELD_MAX: usize = 4096;

/// Ports handed out by this process, each with its lock.
static HELD: Mutex<Vec<(u16, Option<File>)>> = Mutex::new(Vec::new());

/// The first port of the kernel's ephemeral range (outgoing connections take theirs there).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

/// A lock on `port` held by no other process on the machine; `Ok(None)` when locks cannot be
/// taken here (no writable /tmp): the bind check alone then decides.
fn lock(port: u16) -> Result<Option<File>, ()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = std::path::Path::new(LOCK_DIR);
    if !dir.is_dir() {
        if std::fs::create_dir_all(dir).is_err() {
            return Ok(None);
        }
        // Every user's harness shares it (root's servers run as another user).
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o666)
        .open(dir.join(port.to_string()))
        .or_else(|_| File::open(dir.join(port.to_string())))
    else {
        return Ok(None);
    };
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor we own.
    match unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } {
        0 => Ok(Some(file)),
        _ => Err(()),
    }
}

/// A free TCP port on 127.0.0.1: below the ephemeral range, bound and released once to see
/// it is free, and reserved from every other harness on the machine while this process lives
/// (or until it has handed out `HELD_MAX` more).
pub fn free_port() -> std::io::Result<u16> {
    let top = ephemeral_start().max(LOWEST + 1_000);
    let span = u64::from(top - LOWEST);
    let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        ^ (u64::from(std::process::id()) << 32);
    for _ in 0..256 {
        // xorshift: spread over the range, a different walk per process and call.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let port = LOWEST + (seed % span) as u16;
        if held.iter().any(|(p, _)| *p == port) {
            continue;
        }
        let Ok(file) = lock(port) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        if held.len() >= HELD_MAX {
            held.remove(0);
        }
        held.push((port, file));
        return Ok(port);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("256 ports in a row between {LOWEST} and {top} were taken"),
    ))
}

/// The inodes of the sockets listening on TCP `port` (any address).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local = cols.get(1).and_then(|c| c.rsplit(':').next());
            let port_here = local.and_then(|p| u16::from_str_radix(p, 16).ok());
            // State 0A is LISTEN.
            if port_here == Some(port) && cols.get(3) == Some(&"0A") {
                if let Some(inode) = cols.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    inodes
}

/// `pid` and every process below it.
fn tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for task in tasks.flatten() {
                let kids =
                    std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
                all.extend(
                    kids.split_whitespace()
                        .filter_map(|k| k.parse::<i32>().ok()),
                );
            }
        }
        i += 1;
    }
    all
}

/// Whether the server listening on `port` is `pid` (or a process it started): `Some(false)`
/// when another process listens there, or nobody yet; `None` when it cannot be told (the
/// processes' descriptors are not ours to read).
pub fn held_by(pid: i32, port: u16) -> Option<bool> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return Some(false);
    }
    let mut readable = false;
    for p in tree(pid) {
        match holds(p, &inodes) {
            Some(true) => return Some(true),
            Some(false) => readable = true,
            None => {}
        }
    }
    readable.then_some(false)
}

/// Whether process `pid` has one of the sockets `inodes` open; `None` when its descriptors
/// cannot be read.
fn holds(pid: i32, inodes: &[String]) -> Option<bool> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|l| inodes.iter().any(|i| l.as_os_str() == i.as_str()))
    }))
}

/// Whether the child `pid` (None: not running) serves `port`: what readiness asks besides an
/// answer, so that another run's server on the same port is never taken for ours.
pub fn ours(pid: Option<u32>, port: u16) -> bool {
    pid.is_some_and(|pid| held_by(pid as i32, port) != Some(false))
}

/// The process listening on TCP `port` (any address), as `(pid, command name)`, read from
/// `/proc/net/tcp{,6}` and each process's open descriptors; `None` when it cannot be told
/// (another user's process without root, or no such listener).
pub fn listener_of(port: u16) -> Option<(i32, String)> {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return None;
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if holds(pid, &inodes) == Some(true) {
            let name = std::fs::read_to_string(entry.path().join("comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_default();
            return Some((pid, name));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_below_the_ephemeral_range_and_never_handed_out_twice() {
        let top = ephemeral_start().max(LOWEST + 1_000);
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ports.len());
        assert!(ports.iter().all(|p| (LOWEST..top).contains(p)), "{ports:?}");
    }

    #[test]
    fn a_port_another_process_holds_is_not_handed_out() {
        // Another harness opens the port's lock file on its own: its lock is refused while
        // this process holds the port (flock locks belong to an open file, so a second open
        // here stands for another process).
        let port = free_port().unwrap();
        let path = format!("{LOCK_DIR}/{port}");
        assert!(std::path::Path::new(&path).is_file());
        let f = File::open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; refused: this process's own lock holds it.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        assert_ne!(r, 0, "the lock of a handed-out port is held");
    }

    #[test]
    fn a_listener_is_told_from_another_process_s() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let me = std::process::id() as i32;
        assert_eq!(held_by(me, port), Some(true));
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(
            held_by(other.id() as i32, port),
            Some(false),
            "not the sleep's"
        );
        let _ = other.kill();
        let _ = other.wait();
        drop(l);
        assert_eq!(held_by(me, port), Some(false), "nobody listens");
    }
}
