//! The failover system end to end on the process backend (issue 19): a real primary and streaming replica, the reference watcher as a real process, real link faults through the proxy. `failover-github` and `failover-shop`, each without and with the fence, judged by their verdict.json (`support/failover.rs`, shared with the docker tests), re-judged by `chaos check`, and nothing left running.

use crate::common::*;
use crate::support::failover;

fn run(scenario: &str, extra: &[&str], expect: &str) -> failover::Run {
    let _one = one_at_a_time();
    let watcher = chaos().parent().unwrap().join("watcher");
    assert!(
        watcher.is_file(),
        "the reference watcher is not built at {}: cargo build --release -p chaos-workloads",
        watcher.display()
    );
    let dir = temp_dir(&format!("{scenario}{}", extra.join("")));
    let data = dir.join("data");
    let mut args = vec!["run", scenario, "--expect", expect];
    args.extend_from_slice(extra);
    let out = run_chaos(&args, &data, &dir.join("results"));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let run_dir = latest_run(&dir.join("results"), scenario);
    let r = failover::Run::read(out.status.code(), &run_dir);
    assert_none_left(&data.display().to_string(), 10);
    // The stored run is judged again, with no database, the same way.
    let again = std::process::Command::new(chaos())
        .args(["check", "-q", "--expect", expect])
        .arg(&run_dir)
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(0),
        "chaos check disagrees: {}",
        String::from_utf8_lossy(&again.stdout)
    );
    for file in [
        "report.html",
        "final-state.json",
        "run.json",
        "history.jsonl",
        "logs/watcher.log",
    ] {
        assert!(
            run_dir.join(file).is_file(),
            "{file} missing in {}",
            run_dir.display()
        );
    }
    let report = std::fs::read_to_string(run_dir.join("report.html")).unwrap();
    assert!(
        report.contains(">primary</text>") && report.contains(">replica</text>"),
        "the report has no lane for each primary"
    );
    r
}

#[test]
fn github_without_a_fence_loses_orders_to_two_primaries() {
    let r = run("failover-github", &[], "invalid");
    failover::unfenced(&r, "22:52:00", 30);
}

#[test]
fn github_with_the_fence_loses_nothing_and_pays_in_unavailability() {
    failover::fenced(&run("failover-github", &["--fence", "on"], "valid"));
}

#[test]
fn shop_without_a_fence_loses_orders_to_two_primaries() {
    let r = run("failover-shop", &[], "invalid");
    failover::unfenced(&r, "14:00:15", 30);
}

#[test]
fn shop_with_the_fence_loses_nothing_and_pays_in_unavailability() {
    failover::fenced(&run("failover-shop", &["--fence", "on"], "valid"));
}

/// Bad input is one line, exit 3, nothing started: a mover flag on a failover scenario, a
/// failover flag on a mover scenario, a bad `[failover]` value.
#[test]
fn failover_setup_mistakes_are_one_line_exit_3() {
    let dir = temp_dir("failover-mistakes");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["run", "failover-github", "--fencing", "on"],
            "--fencing is the mover's",
        ),
        (
            vec!["run", "gc-pause", "--fence", "on"],
            "are for a failover scenario",
        ),
        (vec!["run", "failover-shop", "--silence", "0s"], "silence"),
    ];
    for (args, says) in cases {
        let out = run_chaos(&args, &dir.join("data"), &dir.join("results"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let bad = dir.join("bad.toml");
    let text = std::fs::read_to_string(repo().join("scenarios/failover-github.toml"))
        .unwrap()
        .replace("app_connections = 2", "app_connections = 0");
    std::fs::write(&bad, text).unwrap();
    let out = run_chaos(
        &["run", bad.to_str().unwrap()],
        &dir.join("data"),
        &dir.join("results"),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("failover.app_connections"), "{err}");
    assert!(
        !dir.join("data").exists(),
        "a server was started for bad input"
    );
}
