//! Nothing a run started outlives it (issue 33): April interrupted by SIGINT, SIGTERM, and SIGKILL followed by the next `chaos` command, at four points (before the cluster, its servers or containers half made, the seeding, mid-run), on the process backend and in containers; after each, no process, container, network, socket, data directory or ledger of the run is left.
//!
//! Each run gets its own data root (`CHAOS_DATA_DIR`), ledger folder (`CHAOS_LEDGER_DIR`) and
//! temporary folder (`TMPDIR`, where the docker API shim's socket goes), so what is looked for
//! is this run's alone; containers and networks are told apart by their `chaos.run` label,
//! which ends with the harness's pid. The docker half needs an engine; without one it prints
//! the one SKIP line.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where an interrupt lands: this long (ms, process backend, docker) after the first line
/// stderr shows that contains the text. The cluster's start takes about 0.2 s on the process
/// backend and 1.5 s in containers: the second point lands inside it, servers or containers
/// half made.
const POINTS: [(&str, &str, u64, u64); 4] = [
    ("before the cluster", " -> ", 0, 0),
    ("the cluster starting", " -> ", 60, 700),
    ("the seeding", "databases up in", 0, 0),
    ("mid-run", "moved", 0, 0),
];
/// April's history cut from 15,768 readings a turbine to 2,000: the seeding is the same
/// statement (0.45 s instead of 2.8 s on the process backend, still under way when the signal
/// follows "databases up"), and the docker half's twelve runs took 47 s instead of 58.
const ROWS_PER_TURBINE: &str = "2000";
const SIGNALS: [(i32, &str); 3] = [
    (libc::SIGINT, "SIGINT"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGKILL, "SIGKILL"),
];

/// One interrupted run's private folders.
struct Place {
    dir: PathBuf,
    data: PathBuf,
    ledger: PathBuf,
    tmp: PathBuf,
}

impl Place {
    fn new(name: &str) -> Place {
        let dir = temp_dir(name);
        let place = Place {
            data: dir.join("data"),
            ledger: dir.join("ledger"),
            tmp: dir.join("tmp"),
            dir,
        };
        std::fs::create_dir_all(&place.tmp).unwrap();
        place
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(chaos());
        c.args(args)
            .current_dir(repo())
            .env("CHAOS_DATA_DIR", &self.data)
            .env("CHAOS_LEDGER_DIR", &self.ledger)
            .env("TMPDIR", &self.tmp);
        c
    }
}

/// stderr's lines as they come, read on a thread of their own.
fn follow(child: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let stderr = child.stderr.take().unwrap();
    let into = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            into.lock().unwrap().push(line);
        }
    });
    lines
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Containers and networks whose `chaos.run` label ends with `-<pid>`.
fn docker_left(pid: u32) -> Vec<String> {
    let mut left = Vec::new();
    for kind in [&["ps", "-a"][..], &["network", "ls"][..]] {
        let out = Command::new("docker")
            .args(kind)
            .args([
                "--filter",
                "label=chaos.run",
                "--format",
                "{{.Names}} {{.Label \"chaos.run\"}}",
            ])
            .output()
            .expect("docker");
        assert!(out.status.success(), "docker {kind:?} failed");
        let suffix = format!("-{pid}");
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.trim_end().ends_with(&suffix))
                .map(str::to_string),
        );
    }
    left
}

/// Start April, interrupt it with `sig` at the first stderr line containing `at`, then check
/// that nothing is left (after the next command, for SIGKILL). Returns a line for the log.
fn interrupt(backend: &str, point: (&str, &str, u64, u64), sig: (i32, &str)) -> String {
    let name = format!("left-{backend}-{}-{}", sig.1, point.0.replace(' ', "-"));
    let place = Place::new(&name);
    let mut child = place
        .command(&[
            "run",
            "april",
            "--backend",
            backend,
            "--rows-per-turbine",
            ROWS_PER_TURBINE,
            "--results",
        ])
        .arg(place.dir.join("results"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let lines = follow(&mut child);
    let began = Instant::now();
    loop {
        if lines.lock().unwrap().iter().any(|l| l.contains(point.1)) {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{name}: chaos ended ({status}) before {}: {:?}",
                point.0,
                lines.lock().unwrap()
            );
        }
        assert!(
            began.elapsed() < Duration::from_secs(300),
            "{name}: no line with {:?} in 300 s: {:?}",
            point.1,
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = if backend == "docker" {
        point.3
    } else {
        point.2
    };
    std::thread::sleep(Duration::from_millis(after));
    let signalled = Instant::now();
    unsafe { libc::kill(pid as i32, sig.0) };
    let status = child.wait().unwrap();
    let exited_s = signalled.elapsed().as_secs_f64();
    // Let the stderr thread see the last lines.
    std::thread::sleep(Duration::from_millis(200));
    let said = lines.lock().unwrap().join("\n");
    let mut next = String::new();
    if sig.0 == libc::SIGKILL {
        let ledgers = entries(&place.ledger);
        if point.0 == "mid-run" {
            assert!(
                !ledgers.is_empty(),
                "{name}: a harness killed mid-run leaves a ledger (else this proves nothing)"
            );
        }
        let out = place.command(&["list"]).output().unwrap();
        assert!(out.status.success(), "{name}: chaos list failed");
        next = String::from_utf8_lossy(&out.stderr).into_owned();
        let reaped: Vec<&str> = next
            .lines()
            .filter(|l| l.contains("removed what a killed chaos"))
            .collect();
        if !ledgers.is_empty() {
            assert_eq!(
                reaped.len(),
                1,
                "{name}: one line from the next command: {next}"
            );
            assert!(reaped[0].contains(&format!("pid {pid}")), "{next}");
        }
    } else {
        assert_eq!(status.code(), Some(3), "{name}: exit 3: {said}");
        let word = if sig.0 == libc::SIGINT {
            "interrupted"
        } else {
            "terminated"
        };
        assert!(said.contains(word), "{name}: says {word}: {said}");
    }
    // Nothing of the run is left: no process, data, socket, ledger, container or network.
    assert_none_left(&place.data.display().to_string(), 15);
    assert_eq!(entries(&place.data), Vec::<String>::new(), "{name}: data");
    let sockets: Vec<String> = entries(&place.tmp)
        .into_iter()
        .filter(|f| f.starts_with("chaos-docker-"))
        .collect();
    assert_eq!(sockets, Vec::<String>::new(), "{name}: sockets");
    assert_eq!(
        entries(&place.ledger),
        Vec::<String>::new(),
        "{name}: ledger"
    );
    if backend == "docker" {
        assert_eq!(docker_left(pid), Vec::<String>::new(), "{name}: docker");
    }
    let _ = std::fs::remove_dir_all(&place.dir);
    format!(
        "{name}: exit {:?} {exited_s:.1} s after the signal; nothing left{}",
        status.code(),
        next.lines()
            .find(|l| l.contains("removed what"))
            .map(|l| format!(" ({l})"))
            .unwrap_or_default()
    )
}

fn every_signal_at_every_point(backend: &str) {
    let mut log = Vec::new();
    for point in POINTS {
        for sig in SIGNALS {
            let line = interrupt(backend, point, sig);
            println!("{line}");
            log.push(line);
        }
    }
    assert_eq!(log.len(), 12);
}

#[test]
fn process_runs_interrupted_anywhere_leave_nothing() {
    require_mover();
    let _one = one_at_a_time();
    every_signal_at_every_point("process");
}

#[test]
fn docker_runs_interrupted_anywhere_leave_nothing() {
    require_mover();
    let _one = one_at_a_time();
    let engine = Command::new("docker")
        .arg("info")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !engine.is_ok_and(|s| s.success()) {
        println!(
            "SKIP: no Docker engine answers (docker info failed): docker backend tests not run"
        );
        return;
    }
    for image in ["chaos-postgres:15", "chaos-runtime:bookworm"] {
        let ok = Command::new("docker")
            .args(["image", "inspect", image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "image {image} is missing: run scripts/build-images");
    }
    every_signal_at_every_point("docker");
}
