//! The failover system in containers (issue 19): `failover-github` without and with the fence on the docker backend, the replica made by a base backup inside its own container over the run's private network, held to the same claims as on the process backend (`support/failover.rs`), and every container and network removed after.
//!
//! Needs a Docker engine; where none answers, each test prints one SKIP line and returns (as
//! `docker.rs` does: the only skip). Images are built first when missing (scripts/build-images).

use crate::support::failover;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
const CHAOS: &str = env!("CARGO_BIN_EXE_chaos");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Run a command with a time limit; (exit code, stdout and stderr). Killed on timeout.
fn run_limited(cmd: &mut Command, limit: Duration) -> (Option<i32>, String) {
    let out_path = std::env::temp_dir().join(format!(
        "chaos-failover-docker-{}-{}.out",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let out = std::fs::File::create(&out_path).expect("temp output file");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup"))
        .stderr(out)
        .spawn()
        .expect("spawn");
    let began = Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if began.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    (code, text)
}

/// Whether a Docker engine answers; prints the one allowed SKIP line when not.
fn engine_or_skip() -> bool {
    let (code, _) = run_limited(Command::new("docker").arg("info"), Duration::from_secs(30));
    if code == Some(0) {
        return true;
    }
    println!("SKIP: no Docker engine answers (docker info failed): failover docker tests not run");
    false
}

fn labelled(kind: &[&str]) -> Vec<String> {
    let mut args: Vec<&str> = kind.to_vec();
    args.extend(["--filter", "label=chaos.harness", "-q"]);
    let (code, text) = run_limited(Command::new("docker").args(&args), Duration::from_secs(30));
    assert_eq!(code, Some(0), "docker {args:?}: {text}");
    text.split_whitespace().map(str::to_string).collect()
}

/// `chaos run SCENARIO --backend docker --expect EXPECT EXTRA...`, read back.
fn on_docker(scenario: &str, extra: &[&str], expect: &str) -> Option<failover::Run> {
    if !engine_or_skip() {
        return None;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (code, text) = run_limited(
        Command::new(repo().join("scripts/build-images")).current_dir(repo()),
        Duration::from_secs(1800),
    );
    assert_eq!(code, Some(0), "scripts/build-images failed:\n{text}");
    let results = std::env::temp_dir().join(format!(
        "chaos-failover-docker-{scenario}{}-{}",
        extra.join(""),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&results);
    let mut args = vec!["run", scenario, "--backend", "docker", "--expect", expect];
    args.extend_from_slice(extra);
    let (code, text) = run_limited(
        Command::new(CHAOS)
            .args(&args)
            .arg("--results")
            .arg(&results)
            .current_dir(repo()),
        Duration::from_secs(600),
    );
    println!("{text}");
    let mut runs: Vec<PathBuf> = std::fs::read_dir(results.join(scenario))
        .unwrap_or_else(|e| panic!("no run directory ({e}):\n{text}"))
        .flatten()
        .map(|e| e.path())
        .collect();
    runs.sort();
    let run = failover::Run::read(code, &runs.pop().expect("a run directory"));
    let config = std::fs::read_to_string(run.dir.join("config.json")).unwrap();
    assert!(
        config.contains("\"backend\": \"docker\""),
        "not a docker run: {config}"
    );
    assert!(labelled(&["ps", "-a"]).is_empty(), "containers left behind");
    assert!(
        labelled(&["network", "ls"]).is_empty(),
        "networks left behind"
    );
    Some(run)
}

#[test]
fn github_in_containers_without_a_fence_loses_orders() {
    if let Some(r) = on_docker("failover-github", &[], "invalid") {
        failover::unfenced(&r, "22:52:00", 30);
    }
}

#[test]
fn github_in_containers_with_the_fence_loses_nothing() {
    if let Some(r) = on_docker("failover-github", &["--fence", "on"], "valid") {
        failover::fenced(&r);
    }
}
