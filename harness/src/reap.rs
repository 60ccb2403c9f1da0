//! Removing what runs leave: this process's own things on its way out, on every exit path (`own`), and what a `chaos` killed with SIGKILL left, found by its ledger (`owned`) and its dead pid, when the next `chaos` command starts (`dead`).

use crate::backend::docker::{engine, RUN_LABEL};
use crate::owned::{self, Thing};
use std::path::Path;
use std::time::{Duration, Instant};

/// What a removal removed, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub containers: usize,
    pub networks: usize,
    pub data_dirs: usize,
    pub servers: usize,
    pub files: usize,
}

impl Removed {
    fn add(&mut self, o: Removed) {
        self.containers += o.containers;
        self.networks += o.networks;
        self.data_dirs += o.data_dirs;
        self.servers += o.servers;
        self.files += o.files;
    }

    pub fn is_empty(&self) -> bool {
        *self == Removed::default()
    }

    /// "3 containers, 1 network, 1 data directory".
    pub fn describe(&self) -> String {
        let part = |n: usize, one: &str, many: &str| match n {
            0 => None,
            1 => Some(format!("1 {one}")),
            n => Some(format!("{n} {many}")),
        };
        [
            part(self.containers, "container", "containers"),
            part(self.networks, "network", "networks"),
            part(self.servers, "database server", "database servers"),
            part(self.data_dirs, "data directory", "data directories"),
            part(self.files, "socket", "sockets"),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// Remove everything this process still holds (blocking; call with no run going: after the
/// runtime is shut down, or from a panic's unwinding).
/// A thing that could not be removed stays in the ledger, for the next command to try again.
pub fn own() -> Removed {
    let mut removed = Removed::default();
    for thing in in_order(owned::held()) {
        match remove(&thing) {
            Ok(r) => {
                removed.add(r);
                owned::let_go(&thing);
            }
            Err(e) => eprintln!("chaos: {e}"),
        }
    }
    removed
}

/// Containers first (the engine's socket, not the shim's, is used, but a run's socket goes
/// last all the same), then data, then files.
fn in_order(mut things: Vec<Thing>) -> Vec<Thing> {
    things.sort_by_key(|t| match t {
        Thing::DockerRun(_) => 0,
        Thing::DataDir(_) => 1,
        Thing::File(_) => 2,
    });
    things
}

/// Remove what every dead `chaos` left (by its ledger); one line saying what, if anything.
pub fn dead() -> Option<String> {
    dead_in(&owned::ledger_dir())
}

fn dead_in(ledgers: &Path) -> Option<String> {
    let claimed = owned::claim_dead(ledgers);
    if claimed.is_empty() {
        return None;
    }
    let mut removed = Removed::default();
    let mut pids = Vec::new();
    for (path, ledger) in &claimed {
        let mut kept = Vec::new();
        for thing in in_order(ledger.things.clone()) {
            match remove(&thing) {
                Ok(r) => removed.add(r),
                Err(e) => {
                    eprintln!("chaos: {e}");
                    kept.push(thing);
                }
            }
        }
        if kept.is_empty() {
            owned::forget(path);
        } else {
            // Put back under the dead owner's name: the next command tries again.
            owned::put_back(path, ledger, kept);
        }
        pids.push(ledger.pid.to_string());
    }
    let what = if removed.is_empty() {
        "nothing was left".to_string()
    } else {
        removed.describe()
    };
    Some(format!(
        "chaos: removed what a killed chaos (pid {}) left: {what}",
        pids.join(", ")
    ))
}

/// Remove one thing, blocking and bounded; an error says what could not be removed and how to.
pub fn remove(thing: &Thing) -> anyhow::Result<Removed> {
    Ok(match thing {
        Thing::DockerRun(id) => docker_run(id).map_err(|e| {
            anyhow::anyhow!(
                "cannot remove the containers of docker run {id}: {e}; `docker ps -a --filter label={RUN_LABEL}={id}` lists them"
            )
        })?,
        Thing::DataDir(dir) => data_dir(dir),
        Thing::File(path) => Removed {
            files: std::fs::remove_file(path).is_ok() as usize,
            ..Default::default()
        },
    })
}

/// Every container and network of a docker run, by its label. A container whose creation the
/// engine was still doing when the harness stopped appears a moment later: the removal goes
/// on until a round finds nothing (at most 5 rounds).
fn docker_run(id: &str) -> anyhow::Result<Removed> {
    let mut removed = Removed::default();
    for round in 0..5 {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        let (c, n) = engine::remove_labelled_blocking(RUN_LABEL, Some(id))?;
        removed.containers += c;
        removed.networks += n;
        if c == 0 && n == 0 {
            break;
        }
    }
    Ok(removed)
}

/// Stop every process still working on a data directory (a server, `postgres -D DIR/node`; a
/// template copy, `cp -a TEMPLATE DIR/node`: both name it on their command line), then remove
/// the directory.
fn data_dir(dir: &Path) -> Removed {
    let mut removed = Removed::default();
    let needle = format!("{}/", dir.display());
    let me = std::process::id();
    let mut killed = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cmdline.contains(&needle) {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            killed.push((pid, cmdline.starts_with("cp ")));
        }
    }
    let began = Instant::now();
    for (pid, copy) in &killed {
        while owned::process_start(*pid).is_some_and(|_| !zombie(*pid))
            && began.elapsed() < Duration::from_secs(5)
        {
            let mut status = 0;
            unsafe { libc::waitpid(*pid as i32, &mut status, libc::WNOHANG) };
            std::thread::sleep(Duration::from_millis(10));
        }
        if !copy {
            removed.servers += 1;
        }
    }
    if std::fs::remove_dir_all(dir).is_ok() {
        removed.data_dirs += 1;
    }
    removed
}

/// Whether a process has exited and waits only to be reaped.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next().map(|st| st == "Z"))
        })
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_only_what_was_removed() {
        let r = Removed {
            containers: 5,
            networks: 1,
            files: 1,
            ..Default::default()
        };
        assert_eq!(r.describe(), "5 containers, 1 network, 1 socket");
        assert!(Removed::default().is_empty());
    }

    #[test]
    fn a_dead_process_ledger_is_reaped_and_a_live_one_kept() {
        let dir = std::env::temp_dir().join(format!("chaos-reap-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("data");
        std::fs::create_dir_all(data.join("routing")).unwrap();
        let sock = dir.join("chaos-docker-1.sock");
        std::fs::write(&sock, b"").unwrap();
        // A child that has exited: its pid is dead.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let ledgers = dir.join("ledger");
        std::fs::create_dir_all(&ledgers).unwrap();
        let dead = owned::Ledger {
            pid: dead_pid,
            started: 1,
            things: vec![Thing::DataDir(data.clone()), Thing::File(sock.clone())],
        };
        std::fs::write(
            ledgers.join(format!("{dead_pid}.json")),
            serde_json::to_vec(&dead).unwrap(),
        )
        .unwrap();
        // pid 1 is alive, with a start time of its own.
        let live = owned::Ledger {
            pid: 1,
            started: owned::process_start(1).unwrap(),
            things: vec![Thing::File(dir.join("keep"))],
        };
        std::fs::write(ledgers.join("1.json"), serde_json::to_vec(&live).unwrap()).unwrap();
        let line = dead_in(&ledgers).expect("a dead ledger is found");
        assert!(line.contains(&format!("pid {dead_pid}")), "{line}");
        assert!(line.contains("1 data directory, 1 socket"), "{line}");
        assert!(!data.exists() && !sock.exists());
        assert!(
            ledgers.join("1.json").exists(),
            "a live owner's ledger stays"
        );
        assert!(!ledgers.join(format!("{dead_pid}.json")).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
