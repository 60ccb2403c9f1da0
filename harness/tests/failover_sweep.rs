//! `chaos sweep` of a failover scenario: the watcher's silence constant against the measured check latency. On `failover-sweep` (an 8 s slow stretch on the watcher's link while the primary is fine, then the primary really dies), a 5 s silence promotes a live primary and a 30 s one does not but pays about 30 s with no primary; and the sweep's bad input is one line, exit 3.

use crate::common::*;

#[test]
fn a_short_silence_promotes_a_live_primary_a_long_one_pays_in_unavailability() {
    let _one = one_at_a_time();
    let dir = temp_dir("failover-sweep");
    let out = run_chaos(
        &[
            "sweep",
            "--scenario",
            "failover-sweep",
            "--silence",
            "30s,5s",
        ],
        &dir.join("data"),
        &dir.join("results"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    let sweeps = latest_run(&dir.join("results"), "sweep-failover-sweep");
    let json = read_json(&sweeps.join("sweep.json"));
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{json}");
    let (short, long) = (&rows[0], &rows[1]);
    assert_eq!(short["silence_s"], 5.0, "rows sorted by silence");
    assert!(short["false_promotions"].as_u64().unwrap() >= 1, "{short}");
    assert!(
        short["lost_orders"].as_u64().unwrap() >= 1,
        "unfenced: the false promotion loses orders: {short}"
    );
    assert_eq!(long["false_promotions"], 0, "{long}");
    let unavailable = long["unavailability_max_s"].as_f64().unwrap();
    assert!(
        (28.0..60.0).contains(&unavailable),
        "a 30 s silence after a real death: {long}"
    );
    // Every check in; the slow stretch shows in the tail.
    assert!(
        json["check_latency_ms"]["p999"].as_f64().unwrap() >= 1_000.0,
        "{json}"
    );
    for file in ["sweep.txt", "sweep.csv"] {
        assert!(sweeps.join(file).is_file(), "{file} missing");
    }
    assert!(
        stdout.contains("silences under 30 s promoted a live primary"),
        "{stdout}"
    );
    assert_none_left(&dir.join("data").display().to_string(), 10);
}

#[test]
fn sweep_flags_of_the_other_system_are_one_line_exit_3() {
    let dir = temp_dir("failover-sweep-mistakes");
    for (args, says) in [
        (
            vec!["sweep", "--scenario", "failover-github", "--fencing", "on"],
            "are the mover's",
        ),
        (
            vec!["sweep", "--scenario", "gc-pause", "--silence", "5s"],
            "sweep a failover scenario",
        ),
        (
            vec!["sweep", "--scenario", "failover-github", "--fence", "maybe"],
            "--fence: 'maybe'",
        ),
    ] {
        let out = run_chaos(&args, &dir.join("data"), &dir.join("results"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
