//! A mover that is not ours (issue #15): `workloads/examples/psql-mover.sh`, POSIX sh and psql,
//! written only from docs/mover-protocol.md, with its own pace and retry habits. It runs the
//! shipped scenarios from a ready start (`--mover-ready gate`), is restarted by the supervisor
//! after it exits non-zero, and a mover that never says it is ready is refused in one line.
//! Real Postgres servers and real processes (the process backend).

use crate::common::*;
use serde_json::Value;

const PSQL_MOVER: &str = "workloads/examples/psql-mover.sh";

/// Fenced, the foreign mover loses nothing in the GC-pause scenario, whatever its pace (that
/// is the design's guarantee; where the pause lands in its work is not), and it starts with the
/// clock: its first claim attempt is in the run's first scenario seconds.
#[test]
fn the_psql_mover_runs_gc_pause_fenced_from_a_ready_start() {
    let _one = one_at_a_time();
    let dir = temp_dir("psql-gc");
    let data = dir.join("data");
    let results = dir.join("results");
    let cmd = format!("PSQL_MOVER_FENCING=on {PSQL_MOVER}");
    // One psql process per statement is slow beside our mover (tens of ms each, hundreds on a
    // loaded 2-core machine): at 100 real ms per scenario second a turbine's statements fit
    // the 10 s lease (1 real s). At 10 ms it cannot keep the lease at all: a finding about
    // this mover, not a flaw of the harness.
    let out = run_chaos(
        &[
            "run",
            "gc-pause",
            "--mover-cmd",
            &cmd,
            "--mover-ready",
            "gate",
            "--time-scale-ms",
            "100",
        ],
        &data,
        &results,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Valid, or cut short by the night's time limit on a slow machine (unknown): a fenced
    // mover is never invalid, whatever its pace.
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "never invalid: {stderr}"
    );
    let run = latest_run(&results, "gc-pause");
    let verdict = read_json(&run.join("verdict.json"));
    assert_ne!(verdict["valid"], "invalid", "{stderr}");
    assert_eq!(verdict["stats"]["rows_lost"], 0);
    assert!(
        verdict["stats"]["turbines_moved"].as_u64().unwrap() > 0,
        "{stderr}"
    );
    // The wall clock was checked against the monotonic one at the run's end, and the drift
    // stored (its size is the machine's, not asserted).
    let meta = read_json(&run.join("run.json"));
    assert!(meta["clock"]["wall_check_run_ns"].as_i64().unwrap() > 0);
    let figures = read_json(&run.join("figures.json"));
    assert!(figures["wall_clock_drift_ppm"].is_i64(), "{figures}");
    let ops = history_ops(&run);
    let first_acquire_ns = ops
        .iter()
        .filter(|o| o["f"] == "acquire" && o["type"] == "invoke")
        .map(|o| o["time_ns"].as_i64().unwrap())
        .min()
        .expect("the movers tried the claim");
    // Connected and waiting at the gate before the clock: no claim attempt before it, and the
    // first within 5 scenario s of it (500 real ms: no psql start-up in between).
    assert!(
        (0..500_000_000).contains(&first_acquire_ns),
        "a ready start: the first claim attempt {first_acquire_ns} ns after the clock"
    );
    assert_none_left(&data.display().to_string(), 10);
}

/// The April night with the foreign mover, fenced, until 22:40 (the outage at 22:24:35 and a
/// quarter of an hour after it; the night's last half hour, 18 real s, adds nothing this test
/// holds). Its pace is its own (five times ours, plus a psql process per statement), so it
/// meets the outage wherever it meets it, and the time limit cuts it short; what a fenced mover
/// guarantees is that nothing is lost and no stale write is accepted: never invalid.
#[test]
fn the_psql_mover_runs_april_fenced_and_loses_nothing() {
    let _one = one_at_a_time();
    let dir = temp_dir("psql-april");
    let data = dir.join("data");
    let results = dir.join("results");
    let cmd = format!("PSQL_MOVER_FENCING=on PSQL_MOVER_PACE=0.2 {PSQL_MOVER}");
    let night = std::fs::read_to_string(repo().join("scenarios/april.toml")).unwrap();
    assert!(
        night.contains("end = \"23:10:00\""),
        "april.toml's end moved"
    );
    let scenario = dir.join("april.toml");
    std::fs::write(
        &scenario,
        night.replace("end = \"23:10:00\"", "end = \"22:40:00\""),
    )
    .unwrap();
    let out = run_chaos(
        &[
            "run",
            scenario.to_str().unwrap(),
            "--mover-cmd",
            &cmd,
            "--mover-ready",
            "gate",
            "--rows-per-turbine",
            "2000",
            // 10 real ms per scenario second (the 60 scenario minutes in 36 s): at its pace the
            // psql mover moves a fraction of the plan and the run may be cut short (unknown),
            // never invalid, which is the claim.
            "--time-scale-ms",
            "10",
        ],
        &data,
        &results,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "never invalid: {stderr}"
    );
    let verdict = read_json(&latest_run(&results, "april").join("verdict.json"));
    println!(
        "psql mover, April fenced: {} ({} of 133 moved)",
        verdict["valid"], verdict["stats"]["turbines_moved"]
    );
    assert_eq!(verdict["stats"]["rows_lost"], 0);
    assert_eq!(verdict["stats"]["stale_writes_accepted"], 0);
    let errors: Vec<&Value> = verdict["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["severity"] == "error")
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        verdict["stats"]["turbines_moved"].as_u64().unwrap() > 0,
        "it moved turbines: {stderr}"
    );
    assert_none_left(&data.display().to_string(), 10);
}

/// A mover that exits non-zero (as a team's mover exits on a database error and counts on
/// systemd to restart it) is restarted by the supervisor and finishes the job. Here each box's
/// first life prints a history line and exits; its next 6 lives exit at once, printing nothing
/// (as the sh+psql mover does while the routing db is down at its restart): a mover that has
/// run once is restarted each time, never taken for a crash loop (a setup mistake, exit 3).
#[test]
fn a_mover_that_exits_is_restarted_and_finishes() {
    let _one = one_at_a_time();
    let dir = temp_dir("psql-restart");
    let data = dir.join("data");
    let results = dir.join("results");
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let cmd = format!(
        "sh -c 'm={}/$CHAOS_BOX; n=$(cat $m 2>/dev/null || echo 0); echo $((n + 1)) >$m; \
         if [ $n -eq 0 ]; then echo \"{{\\\"type\\\":\\\"invoke\\\",\\\"f\\\":\\\"acquire\\\",\\\"value\\\":{{}}}}\"; fi; \
         if [ $n -le 6 ]; then echo \"lost my connection\" >&2; exit 1; fi; \
         PSQL_MOVER_FENCING=on exec {PSQL_MOVER}'",
        marks.display()
    );
    let out = run_chaos(
        &[
            "run",
            "gc-pause",
            "--mover-cmd",
            &cmd,
            "--time-scale-ms",
            "100",
        ],
        &data,
        &results,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 2)),
        "never invalid: {stderr}"
    );
    let run = latest_run(&results, "gc-pause");
    let ops = history_ops(&run);
    let restarts = ops
        .iter()
        .filter(|o| o["f"] == "restart" && o["type"] == "ok")
        .count();
    assert!(restarts >= 28, "every box restarted 7 times: {restarts}");
    // The restarted movers did the work (all of it on a quiet machine; a slow one may be cut
    // short by the time limit, which is unknown, never a finding).
    let verdict = read_json(&run.join("verdict.json"));
    assert_eq!(verdict["stats"]["rows_lost"], 0);
    assert!(
        verdict["stats"]["turbines_moved"].as_u64().unwrap() > 0,
        "{stderr}"
    );
    assert_none_left(&data.display().to_string(), 10);
}

/// `--mover-ready gate` and a mover that never reads its gate: refused before the clock, in
/// one line, and the waiting movers are stopped.
#[test]
fn a_mover_that_never_says_it_is_ready_is_refused() {
    let _one = one_at_a_time();
    let dir = temp_dir("never-ready");
    let data = dir.join("data");
    let results = dir.join("results");
    let text = std::fs::read_to_string(repo().join("scenarios/gc-pause.toml"))
        .unwrap()
        .replace("[mover]\n", "[mover]\nready_timeout_real_s = 2\n");
    let path = dir.join("gc-pause-impatient.toml");
    std::fs::write(&path, text).unwrap();
    let out = run_chaos(
        &[
            "run",
            path.to_str().unwrap(),
            "--rows-per-turbine",
            "10",
            "--mover-cmd",
            "sleep 600",
            "--mover-ready",
            "gate",
        ],
        &data,
        &results,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("chaos: error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("the mover never said it was ready") && errors[0].contains("within 2 s"),
        "{stderr}"
    );
    assert_none_left(&data.display().to_string(), 10);
    assert!(
        processes_mentioning(&results.display().to_string()).is_empty(),
        "no mover left waiting"
    );
}

/// A team chooses its lease with its own mover: `chaos sweep --mover-cmd` runs the foreign
/// mover under the sweep's latency weather, gives it the lease as CHAOS_LEASE_MS, and writes
/// the table from its own history lines; the fencing column says the fencing is its own.
#[test]
fn the_sweep_measures_a_team_mover() {
    let _one = one_at_a_time();
    let dir = temp_dir("psql-sweep");
    let data = dir.join("data");
    let results = dir.join("results");
    let cmd = format!("PSQL_MOVER_FENCING=on {PSQL_MOVER}");
    let out = run_chaos(
        &[
            "sweep",
            "--scenario",
            "sweep",
            "--mover-cmd",
            &cmd,
            "--mover-ready",
            "gate",
            "--lease",
            "30s",
            "--budget",
            "10m",
        ],
        &data,
        &results,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the sweep completes: {stderr}");
    let sweep = latest_run(&results, "sweep-sweep");
    let table = read_json(&sweep.join("sweep.json"));
    assert_eq!(table["mover_cmd"], cmd.as_str());
    let row = &table["rows"][0];
    assert_eq!(row["fencing"], "own", "{row}");
    assert_eq!(row["lease_s"], 30.0);
    assert_eq!(row["failed_runs"], 0, "{stderr}");
    assert!(
        row["renewals"].as_u64().unwrap() > 0,
        "its renew lines are measured: {row}"
    );
    // The lease reached the mover: its run's environment said 30 scenario s.
    let run = table["runs"][0]["dir"].as_str().expect("the run's folder");
    let config = std::path::Path::new(run).join("config.json");
    let config = read_json(&config);
    assert_eq!(config["scenario"]["file"]["mover"]["command"], cmd.as_str());
    assert_eq!(config["scenario"]["file"]["lease"]["lease_s"], 30.0);
    assert_none_left(&data.display().to_string(), 10);
}

/// Issue 33: at the default scale the sh+psql mover's copies (a psql process a statement) took
/// twice the copy time gc-pause allows, and the run was cut short by its time limit: `unknown`
/// with nothing saying why. Now the run says so, with the scale that fits, on stderr and in
/// the report. At 2 real ms per scenario second a copy has 10 real ms, less than one psql
/// process takes to start, so the mover is too slow whatever the machine's load (at the
/// default scale it was, on some runs only).
#[test]
fn a_mover_too_slow_for_the_scale_is_told_the_scale_that_fits() {
    let _one = one_at_a_time();
    let dir = temp_dir("psql-slow");
    let data = dir.join("data");
    let results = dir.join("results");
    let out = run_chaos(
        &[
            "run",
            "gc-pause",
            "--mover-cmd",
            PSQL_MOVER,
            "--time-scale-ms",
            "2",
        ],
        &data,
        &results,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1) | Some(2)),
        "a verdict, not a harness failure: {stderr}"
    );
    // Its copies are timed; on a loaded machine it may complete none, and its claim calls are.
    let line = stderr
        .lines()
        .find(|l| l.contains("the mover is too slow for this scale; try --time-scale-ms "))
        .unwrap_or_else(|| panic!("no word on the mover's pace: {stderr}"));
    assert!(
        (line.starts_with("chaos: copies took ")
            && line.contains("at p50 where the scenario allows 5 s"))
            || (line.starts_with("chaos: claim calls (no copy completed) took ")
                && line.contains("at p50 where half the lease is 5 s")),
        "{line}"
    );
    let report = std::fs::read_to_string(latest_run(&results, "gc-pause").join("report.html"))
        .expect("report.html");
    assert!(
        report.contains("Too slow for this scale:"),
        "the report says it too"
    );
    assert_none_left(&data.display().to_string(), 10);
}

/// Issue 33: the sweep said "try longer leases" of a mover whose runs its pace cut short. Now
/// it names the pace and the scale that fits, and advises no lease.
#[test]
fn a_sweep_of_a_mover_too_slow_for_the_scale_says_so_instead_of_blaming_the_lease() {
    let _one = one_at_a_time();
    let dir = temp_dir("psql-sweep");
    let data = dir.join("data");
    let results = dir.join("results");
    let out = run_chaos(
        &[
            "sweep",
            "--scenario",
            "gc-pause",
            "--mover-cmd",
            PSQL_MOVER,
            "--time-scale-ms",
            "2",
            "--lease",
            "10s",
            "--runs",
            "1",
            "--no-latency",
        ],
        &data,
        &results,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("the mover is too slow for the scenario's scale in 1 of 1 runs")
            && text.contains("try --time-scale-ms "),
        "the pace and the scale that fits: {text}"
    );
    assert!(
        !text.contains("try longer leases")
            && text.contains("no lease can be judged: every run was cut short by the mover's pace"),
        "no lease advised: {text}"
    );
    assert_none_left(&data.display().to_string(), 10);
}
