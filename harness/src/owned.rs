//! What this `chaos` process created that must not outlive it (a docker run's containers and network, a data directory, a socket), written down in a ledger file per process, so that what a harness killed with SIGKILL left is found by the next `chaos` command (`reap`).
//!
//! A thing is held (`hold`) before it is created and let go (`let_go`) once its owner removed
//! it; the ledger, `<ledger dir>/<pid>.json`, always lists what is held, with the process's
//! start time so a reused pid is not taken for the owner. This file does no removal itself.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Something a run creates that must not outlive the process.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Thing {
    /// Every container and network labelled `chaos.run=<id>`.
    DockerRun(String),
    /// A run's database data directories (servers still running on them are stopped first).
    DataDir(PathBuf),
    /// A file: the docker API shim's socket.
    File(PathBuf),
}

/// One process's ledger file.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Ledger {
    pub pid: u32,
    /// The process's start time (clock ticks since boot, /proc/PID/stat field 22).
    pub started: u64,
    pub things: Vec<Thing>,
}

static HELD: Mutex<Vec<Thing>> = Mutex::new(Vec::new());
static WARNED: std::sync::Once = std::sync::Once::new();

/// Where ledgers live: `CHAOS_LEDGER_DIR`, else `<temp dir>/chaos-ledger`.
pub fn ledger_dir() -> PathBuf {
    std::env::var_os("CHAOS_LEDGER_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("chaos-ledger"))
}

fn ledger_path(pid: u32) -> PathBuf {
    ledger_dir().join(format!("{pid}.json"))
}

/// Write `thing` down before creating it.
pub fn hold(thing: Thing) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    if !held.contains(&thing) {
        held.push(thing);
    }
    write(&held);
}

/// Strike `thing` off once it is removed (or kept on purpose).
pub fn let_go(thing: &Thing) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let before = held.len();
    held.retain(|t| t != thing);
    if held.len() != before {
        write(&held);
    }
}

/// What this process holds now.
pub fn held() -> Vec<Thing> {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn write(things: &[Thing]) {
    let pid = std::process::id();
    let path = ledger_path(pid);
    if things.is_empty() {
        let _ = std::fs::remove_file(&path);
        return;
    }
    let ledger = Ledger {
        pid,
        started: process_start(pid).unwrap_or(0),
        things: things.to_vec(),
    };
    let tmp = path.with_extension("json.tmp");
    let result = std::fs::create_dir_all(ledger_dir())
        .and_then(|()| std::fs::write(&tmp, serde_json::to_vec(&ledger).unwrap_or_default()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = result {
        WARNED.call_once(|| {
            eprintln!(
                "chaos: warning: cannot write {} ({e}): if this harness is killed, `chaos down --all` and removing its data by hand clean up",
                path.display()
            )
        });
    }
}

/// A process's start time in clock ticks since boot, or None when it does not exist.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that wrote `ledger` still runs (the same pid, started at the same time).
pub fn owner_alive(ledger: &Ledger) -> bool {
    match process_start(ledger.pid) {
        None => false,
        Some(started) => ledger.started == 0 || started == ledger.started,
    }
}

/// The ledgers in `dir` of processes that are gone, each claimed (renamed) so that two commands started
/// together do not both remove the same things. The caller removes the things, then `forget`s.
pub fn claim_dead(dir: &Path) -> Vec<(PathBuf, Ledger)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let me = std::process::id();
    let mut dead = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if path.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Some(ledger) = read(&path) else { continue };
        if ledger.pid == me || owner_alive(&ledger) {
            continue;
        }
        let claimed = path.with_extension(format!("reaping-{me}"));
        if std::fs::rename(&path, &claimed).is_ok() {
            dead.push((claimed, ledger));
        }
    }
    // A claim whose reaper died too is taken over.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            let Some(reaper) = path
                .extension()
                .and_then(|x| x.to_str())
                .and_then(|x| x.strip_prefix("reaping-"))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if reaper == me || process_start(reaper).is_some() {
                continue;
            }
            let claimed = path.with_extension(format!("reaping-{me}"));
            if let (Some(l), Ok(())) = (read(&path), std::fs::rename(&path, &claimed)) {
                dead.push((claimed, l));
            }
        }
    }
    dead
}

fn read(path: &Path) -> Option<Ledger> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Remove a claimed ledger once its things are removed.
pub fn forget(claimed: &Path) {
    let _ = std::fs::remove_file(claimed);
}

/// Write a claimed ledger back under its owner's name with only `kept` (what could not be
/// removed), for the next command to try again.
pub fn put_back(claimed: &Path, ledger: &Ledger, kept: Vec<Thing>) {
    let back = Ledger {
        things: kept,
        ..ledger.clone()
    };
    let path = claimed.with_extension("json");
    if std::fs::write(claimed, serde_json::to_vec(&back).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(claimed, path);
    }
}
