//! A watcher that is not ours (`workloads/examples/sh-watcher.sh`: POSIX sh, psql and curl, written from docs/watcher-protocol.md alone) run by `--watcher-cmd` on `failover-github`: without its fence it loses orders to two primaries, with `FENCE=on` it loses nothing; judged by the same claims as the reference watcher (`support/failover.rs`).

use crate::common::*;
use crate::support::failover;

fn run(cmd: &str, expect: &str) -> failover::Run {
    let _one = one_at_a_time();
    for tool in ["psql", "curl", "timeout", "awk"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        assert!(
            found.status.success(),
            "{tool} is not installed: the sh watcher needs it (scripts/setup installs it)"
        );
    }
    let dir = temp_dir(&format!("foreign-watcher-{}", cmd.len()));
    let data = dir.join("data");
    let args = [
        "run",
        "failover-github",
        "--watcher-cmd",
        cmd,
        "--expect",
        expect,
    ];
    let out = run_chaos(&args, &data, &dir.join("results"));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let run_dir = latest_run(&dir.join("results"), "failover-github");
    let r = failover::Run::read(out.status.code(), &run_dir);
    assert_none_left(&data.display().to_string(), 10);
    let meta = read_json(&run_dir.join("run.json"));
    assert_eq!(meta["fence"], "own", "a team's watcher's fence is its own");
    assert_eq!(meta["watcher"], cmd);
    // The run checked its wall clock against its monotonic clock and said how far it drifted.
    let figures = read_json(&run_dir.join("figures.json"));
    assert!(figures["wall_clock_drift_ppm"].is_i64(), "{figures}");
    // Its history lines went to the history, stamped as the watcher's. How many is its own
    // pace (a psql and a curl process a check: 19 in one fresh-clone run, over 20 in others),
    // so only that they arrive is asserted.
    let checks = history_ops(&run_dir)
        .iter()
        .filter(|o| o["process"] == "watcher" && o["f"] == "check")
        .count();
    assert!(checks >= 3, "only {checks} check lines from the sh watcher");
    r
}

#[test]
fn a_sh_watcher_without_a_fence_loses_orders() {
    let r = run("sh workloads/examples/sh-watcher.sh", "invalid");
    failover::unfenced(&r, "22:52:00", 30);
}

#[test]
fn a_sh_watcher_with_its_fence_loses_nothing() {
    failover::fenced(&run(
        "FENCE=on sh workloads/examples/sh-watcher.sh",
        "valid",
    ));
}
