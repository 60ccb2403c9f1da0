//! `chaos nightly`, `chaos run --replay` and `chaos shrink` on real Postgres servers and real mover processes: a campaign's exit code and its junit.xml as CI reads it (xmllint against `tests/data/junit.xsd`, and junitparser), a failing run replayed, slices merged into the whole, an 8-fault run shrunk to the fault that matters.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `chaos ARGS` with its own data dir; (exit code, stdout + stderr).
fn chaos_cmd(name: &str, args: &[&str]) -> (Option<i32>, String) {
    require_mover();
    let data = temp_dir(&format!("{name}-data"));
    let out = Command::new(chaos())
        .args(args)
        .current_dir(repo())
        .env("CHAOS_DATA_DIR", &data)
        .output()
        .expect("run chaos");
    let _ = std::fs::remove_dir_all(&data);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// The one campaign directory under `results/nightly/` whose name starts with `prefix`.
fn campaign(results: &Path) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(results.join("nightly"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.pop().expect("a campaign directory")
}

/// junit.xml as CI reads it: valid against the schema (xmllint) and parsed by junitparser, a
/// reader CI tools use; returns junitparser's (tests, failures, errors, skipped).
fn read_as_ci(junit: &Path) -> (u64, u64, u64, u64) {
    let xsd = repo().join("harness/tests/data/junit.xsd");
    let lint = Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(&xsd)
        .arg(junit)
        .output()
        .expect("xmllint is missing: apt-get install -y libxml2-utils (scripts/setup installs it)");
    assert!(
        lint.status.success(),
        "{} is not valid JUnit XML: {}",
        junit.display(),
        String::from_utf8_lossy(&lint.stderr)
    );
    let py = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg("import sys, junitparser\nx = junitparser.JUnitXml.fromfile(sys.argv[1])\nt = f = e = s = 0\nfor suite in x:\n    t += suite.tests; f += suite.failures; e += suite.errors; s += suite.skipped\nprint(t, f, e, s)")
        .arg(junit)
        .output()
        .expect("/usr/bin/python3 runs");
    assert!(
        py.status.success(),
        "junitparser cannot read {} (apt-get install -y python3-junitparser; scripts/setup installs it): {}",
        junit.display(),
        String::from_utf8_lossy(&py.stderr)
    );
    let n: Vec<u64> = String::from_utf8_lossy(&py.stdout)
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (n[0], n[1], n[2], n[3])
}

fn runs_of(summary: &Value) -> Vec<(u64, String, Value)> {
    summary["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["name"].as_str().unwrap().to_string(),
                r["verdict"].clone(),
            )
        })
        .collect()
}

/// Lease only, the reference mover loses data in every gc-pause run: the campaign exits 1,
/// junit.xml names each failing run with its first finding and its replay command, and that
/// command makes the same run again (same schedule, same finding).
#[test]
fn a_campaign_against_an_unsafe_mover_exits_1_naming_the_failing_runs() {
    let _one = one_at_a_time();
    let results = temp_dir("nightly-unsafe");
    let r = results.to_str().unwrap();
    let (code, text) = chaos_cmd(
        "nightly-unsafe",
        &[
            "nightly",
            "--scenarios",
            "gc-pause,gc-pause-in-txn",
            "--generated",
            "1",
            "--seed",
            "7",
            "--budget",
            "10m",
            "--results",
            r,
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    let dir = campaign(&results);
    assert_eq!(read_as_ci(&dir.join("junit.xml")), (3, 3, 0, 0), "{text}");
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    for name in ["gc-pause[7]", "gc-pause-in-txn[8]", "generated[9]"] {
        assert!(
            junit.contains(&format!("name=\"{name}\"")),
            "{name} in {junit}"
        );
    }
    assert!(junit.contains("<failure message=\"lost-rows: "), "{junit}");
    let summary = read_json(&dir.join("summary.json"));
    let first = &summary["runs"][0];
    let replay = first["replay"].as_str().unwrap();
    assert!(
        junit.contains(replay),
        "the replay command is in system-out"
    );
    assert!(
        text.contains(&format!("replay: {replay}")),
        "and printed: {text}"
    );
    // A failing run keeps everything: its history, audit and logs.
    let run = PathBuf::from(first["dir"].as_str().unwrap());
    for f in ["history.jsonl", "audit.json", "final-state.json", "logs"] {
        assert!(run.join(f).exists(), "{f} kept in {}", run.display());
    }
    assert!(std::fs::read_to_string(dir.join("index.html"))
        .unwrap()
        .contains("report.html"));

    // The replay: the stored scenario, seed and schedule, judged the same.
    let replayed = temp_dir("nightly-replayed");
    let (code, text) = chaos_cmd(
        "nightly-replay",
        &[
            "run",
            "--replay",
            run.to_str().unwrap(),
            "--results",
            replayed.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    let again = latest_run(&replayed, "gc-pause");
    let faults = |d: &Path| read_json(&d.join("config.json"))["scenario"]["faults"].clone();
    assert_eq!(faults(&again), faults(&run));
    let seed = |d: &Path| read_json(&d.join("config.json"))["seed"].clone();
    assert_eq!(seed(&again), seed(&run));
    assert_eq!(
        read_json(&again.join("verdict.json"))["anomalies"][0]["class"],
        "lost-rows"
    );
}

/// Fenced, the same campaign passes: exit 0, every testcase passes, and a passing run keeps
/// only its verdict, report and config (enough to replay it).
///
/// At 40 real ms a scenario second, not the scenarios' 20: green is a claim about fencing, not
/// about pace. At 20 the 10 s lease is 200 real ms, and twice in earlier fresh clones a fenced
/// gc-pause run came out `unknown`: after the pause the boxes displaced one another (a slow
/// fenced copy outran 200 ms, its successor was refused a token, exited and was restarted)
/// until the scenario ended with the plan unfinished.
#[test]
fn the_fenced_reference_mover_passes_and_passing_runs_are_pruned() {
    let _one = one_at_a_time();
    let results = temp_dir("nightly-fenced");
    let (code, text) = chaos_cmd(
        "nightly-fenced",
        &[
            "nightly",
            "--scenarios",
            "gc-pause,gc-pause-in-txn",
            "--generated",
            "1",
            "--seed",
            "7",
            "--budget",
            "10m",
            "--fencing",
            "on",
            "--time-scale-ms",
            "40",
            "--results",
            results.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("runs per hour here: "), "{text}");
    let dir = campaign(&results);
    assert_eq!(read_as_ci(&dir.join("junit.xml")), (3, 0, 0, 0));
    let summary = read_json(&dir.join("summary.json"));
    // Issue 36: green for the right reason. Both gc-pause runs met the danger they exist for
    // (a 20 s pause under a 10 s lease) and survived it: each says so, and the campaign counts.
    for r in &summary["runs"].as_array().unwrap()[..2] {
        let reached = r["reached"].to_string();
        assert!(reached.contains("holder-stopped-past-lease"), "{r}");
    }
    let junit = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
    let count = junit
        .split("<property name=\"reached.holder-stopped-past-lease\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse::<u32>().ok());
    assert!(count.is_some_and(|n| n >= 2), "{junit}");
    assert!(
        junit.contains("reached: holder-stopped-past-lease"),
        "{junit}"
    );
    assert!(
        text.contains("chaos nightly: reached: holder-stopped-past-lease "),
        "{text}"
    );
    for r in summary["runs"].as_array().unwrap() {
        let run = PathBuf::from(r["dir"].as_str().unwrap());
        assert_eq!(r["pruned"], true, "{r}");
        assert!(!run.join("history.jsonl").exists() && !run.join("logs").exists());
        for f in ["verdict.json", "report.html", "config.json"] {
            assert!(run.join(f).exists(), "{f} kept in {}", run.display());
        }
    }
}

/// A campaign cut into 3 slices (`--shard i/3`) and merged is the campaign run whole: the
/// same runs, the same seeds, the same verdicts, in the same order.
#[test]
fn a_campaign_split_in_three_and_merged_equals_the_whole() {
    let _one = one_at_a_time();
    let results = temp_dir("nightly-shards");
    let r = results.to_str().unwrap();
    let base = [
        "nightly",
        "--scenarios",
        "gc-pause,gc-pause-in-txn",
        "--generated",
        "2",
        "--seed",
        "11",
        "--budget",
        "10m",
        "--results",
        r,
    ];
    let (code, text) = chaos_cmd("nightly-whole", &base);
    assert_eq!(code, Some(1), "lease only, data lost: {text}");
    let whole = campaign(&results);
    let whole_summary = read_json(&whole.join("summary.json"));
    let mut slices = vec![];
    for i in 1..=3 {
        let shard = format!("{i}/3");
        let mut args = base.to_vec();
        args.extend(["--shard", &shard]);
        let (code, text) = chaos_cmd(&format!("nightly-shard-{i}"), &args);
        assert!(matches!(code, Some(0 | 1)), "{text}");
        slices.push(campaign(&results));
    }
    let merged = results.join("merged");
    let mut args = vec!["nightly", "merge"];
    let names: Vec<String> = slices.iter().map(|d| d.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    args.extend(["--out", merged.to_str().unwrap()]);
    let (code, text) = chaos_cmd("nightly-merge", &args);
    assert_eq!(code, Some(1), "{text}");
    let merged_summary = read_json(&merged.join("summary.json"));
    assert_eq!(runs_of(&merged_summary), runs_of(&whole_summary));
    assert_eq!(runs_of(&whole_summary).len(), 4);
    assert_eq!(
        read_as_ci(&merged.join("junit.xml")),
        read_as_ci(&whole.join("junit.xml"))
    );
}

/// gc-pause with seven faults that do not matter beside the pause that does: `chaos shrink`
/// finds the pause alone (or with one other), each kept step failing in 2 of 2 runs, and
/// writes a scenario file that fails when run.
#[test]
fn shrink_cuts_an_eight_fault_run_to_the_fault_that_matters() {
    let _one = one_at_a_time();
    let results = temp_dir("shrink");
    let r = results.to_str().unwrap();
    let mut toml = std::fs::read_to_string(repo().join("scenarios/gc-pause.toml"))
        .unwrap()
        .replace("name = \"gc-pause\"", "name = \"gc-pause-8\"");
    for (at, for_s, rest) in [
        (
            "12:00:30",
            10,
            "kind = \"latency\"\nlink = \"ingest->shard1\"\nlatency_ms = 2000",
        ),
        (
            "12:01:00",
            20,
            "kind = \"latency\"\nlink = \"box-4->routing\"\nlatency_ms = 500",
        ),
        (
            "12:00:05",
            30,
            "kind = \"bandwidth\"\nlink = \"box-1->shard3\"\nrate_kb = 100000",
        ),
        (
            "12:02:00",
            10,
            "kind = \"clock\"\ntarget = \"box-4\"\noffset_ms = 500",
        ),
        (
            "12:00:50",
            30,
            "kind = \"latency\"\nlink = \"ingest->shard2\"\nlatency_ms = 1000",
        ),
        ("12:01:40", 2, "kind = \"pause\"\ntarget = \"box-4\""),
        (
            "12:00:40",
            5,
            "kind = \"latency\"\nlink = \"box-3->shard1\"\nlatency_ms = 500",
        ),
    ] {
        toml.push_str(&format!(
            "\n[[fault]]\nat = \"{at}\"\nfor_s = {for_s}\n{rest}\n"
        ));
    }
    let path = results.join("gc-pause-8.toml");
    std::fs::write(&path, toml).unwrap();
    let (code, text) = chaos_cmd(
        "shrink-run",
        &["run", path.to_str().unwrap(), "--results", r, "-q"],
    );
    assert_eq!(code, Some(1), "{text}");
    let failing = latest_run(&results, "gc-pause-8");
    assert_eq!(
        read_json(&failing.join("config.json"))["scenario"]["faults"]
            .as_array()
            .unwrap()
            .len(),
        8
    );
    let (code, text) = chaos_cmd(
        "shrink",
        &[
            "shrink",
            failing.to_str().unwrap(),
            "--repeat",
            "2",
            "--budget",
            "15m",
            "--results",
            r,
        ],
    );
    assert_eq!(code, Some(0), "{text}");
    println!("{text}");
    let out: PathBuf = std::fs::read_dir(results.join("shrink"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let found = read_json(&out.join("shrink.json"));
    assert_eq!(found["faults_before"], 8);
    let after = found["faults_after"].as_u64().unwrap();
    assert!((1..=2).contains(&after), "{found}");
    assert!(
        found["faults"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "pause" && f["target"] == "holder"),
        "the holder's pause is what matters: {found}"
    );
    assert_eq!(found["reproduced"]["failed"], found["reproduced"]["runs"]);
    // The shrinker keeps a step that failed in 2 of 2 runs, so its last kept step can sit at
    // the edge (a 5 s pause under a 10 s lease loses data only when the copy's remainder
    // outlasts the lease): a third run of it may pass. What it guarantees is a schedule that
    // fails when run, so one of three runs must fail.
    let mut codes = Vec::new();
    for _ in 0..3 {
        let (code, text) = chaos_cmd(
            "shrink-minimal",
            &[
                "run",
                out.join("minimal.toml").to_str().unwrap(),
                "--results",
                r,
                "-q",
            ],
        );
        codes.push(code);
        if code == Some(1) {
            break;
        }
        println!("the minimal schedule passed one run: {text}");
    }
    assert_eq!(
        codes.last(),
        Some(&Some(1)),
        "the minimal schedule fails when run: exits {codes:?}"
    );
}

/// Bad input is one line and exit 3, before anything runs; a run that cannot be shrunk says why.
#[test]
fn nightly_and_shrink_refuse_bad_input_in_one_line() {
    let results = temp_dir("nightly-bad");
    let r = results.to_str().unwrap();
    for (args, needle) in [
        (vec!["nightly", "--shard", "4/3"], "is not a slice like 1/3"),
        (
            vec!["nightly", "--budget", "-1m"],
            "a budget must be a positive duration",
        ),
        (
            vec!["nightly", "--scenarios", "nosuch"],
            "no scenario 'nosuch'",
        ),
        (
            vec!["nightly", "--disk-budget", "lots"],
            "a size must be positive",
        ),
        (
            vec!["shrink", "/nonexistent/run"],
            "/nonexistent/run/verdict.json",
        ),
        (
            vec!["run", "--replay", "/nonexistent/run"],
            "/nonexistent/run/config.json",
        ),
    ] {
        let mut a = args.clone();
        if a[0] == "nightly" {
            a.extend(["--results", r]);
        }
        let (code, text) = chaos_cmd("nightly-bad", &a);
        assert_eq!(code, Some(3), "{args:?}: {text}");
        assert!(text.contains(needle), "{args:?}: {text}");
        assert_eq!(text.trim().lines().count(), 1, "{args:?}: {text}");
    }
    assert!(!results.join("nightly").exists(), "nothing was started");
}

/// A disk budget stops the campaign cleanly after the run that reached it, saying so.
#[test]
fn a_disk_budget_stops_the_campaign_cleanly() {
    let _one = one_at_a_time();
    let results = temp_dir("nightly-disk");
    let (code, text) = chaos_cmd(
        "nightly-disk",
        &[
            "nightly",
            "--scenarios",
            "gc-pause",
            "--generated",
            "3",
            "--seed",
            "7",
            "--disk-budget",
            "1K",
            "--results",
            results.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(1), "one lease-only run, data lost: {text}");
    let summary = read_json(&campaign(&results).join("summary.json"));
    assert_eq!(summary["runs"].as_array().unwrap().len(), 1, "{summary}");
    assert!(
        summary["stopped"][0]
            .as_str()
            .unwrap()
            .contains("the disk budget of 1.0 KiB is reached"),
        "{summary}"
    );
}

/// A team's mover under a campaign: the sh+psql mover (not ours; its own pace and habits) is
/// run by `--mover-cmd` with its ready gate, lease only, paused inside its write transaction
/// (its stale write lands after the new holder's), and the campaign says so the way CI reads
/// it; the replay command runs that same mover again.
#[test]
fn a_campaign_runs_a_team_mover_given_by_mover_cmd() {
    let _one = one_at_a_time();
    let results = temp_dir("nightly-team");
    let (code, text) = chaos_cmd(
        "nightly-team",
        &[
            "nightly",
            "--mover-cmd",
            "workloads/examples/psql-mover.sh",
            "--mover-ready",
            "gate",
            "--time-scale-ms",
            "100",
            "--scenarios",
            "gc-pause-in-txn",
            "--generated",
            "0",
            "--seed",
            "7",
            "--budget",
            "10m",
            "--results",
            results.to_str().unwrap(),
        ],
    );
    // Lease only, the seed's question is asked of it inside its 7th write whatever its pace:
    // invalid; on a machine too slow for it, the night's time limit makes it unknown.
    assert!(matches!(code, Some(1 | 2)), "{text}");
    let dir = campaign(&results);
    let (tests, failures, errors, skipped) = read_as_ci(&dir.join("junit.xml"));
    assert_eq!((tests, errors), (1, 0), "{text}");
    assert_eq!(failures + skipped, 1, "{text}");
    let summary = read_json(&dir.join("summary.json"));
    assert_eq!(
        summary["campaigns"][0]["mover"],
        "workloads/examples/psql-mover.sh"
    );
    let run = PathBuf::from(summary["runs"][0]["dir"].as_str().unwrap());
    let config = read_json(&run.join("config.json"));
    assert_eq!(
        config["scenario"]["file"]["mover"]["command"],
        "workloads/examples/psql-mover.sh"
    );
    assert_eq!(config["scenario"]["file"]["mover"]["ready"], "gate");
}

/// Issue 36: a campaign seeks what it has not reached. A team's profile that only slows links
/// (no fault on the holder) runs twice: the second run's scenario, as stored, has its profile
/// turned toward the moments the first did not reach (more holder pauses, kills, cuts), and
/// says so; with `--no-seek` it runs the profile as written.
#[test]
fn a_campaign_turns_a_drawn_schedule_toward_what_it_has_not_reached() {
    let _one = one_at_a_time();
    let results = temp_dir("nightly-seek");
    let weak = std::fs::read_to_string(repo().join("scenarios/generated.toml"))
        .unwrap()
        .replace("name = \"generated\"", "name = \"weak\"")
        .replace(
            "faults = [\"pause\", \"latency\", \"down\"]",
            "faults = [\"latency\"]",
        )
        .replace("holder_faults = 4", "holder_faults = 0")
        .replace("role_faults = 2", "role_faults = 0");
    let path = results.join("weak.toml");
    std::fs::write(&path, weak).unwrap();
    let p = path.to_str().unwrap();
    for (name, extra) in [("seek", None), ("no-seek", Some("--no-seek"))] {
        let out = results.join(name);
        let list = format!("{p},{p}");
        let mut args = vec![
            "nightly",
            "--scenarios",
            &list,
            "--generated",
            "0",
            "--seed",
            "11",
        ];
        args.extend([
            "--budget",
            "10m",
            "--keep",
            "all",
            "--results",
            out.to_str().unwrap(),
        ]);
        args.extend(extra);
        let (code, text) = chaos_cmd(&format!("nightly-{name}"), &args);
        assert!(matches!(code, Some(0..=2)), "{text}");
        let summary = read_json(&campaign(&out).join("summary.json"));
        let runs = summary["runs"].as_array().unwrap();
        let profile = |r: &Value| {
            let dir = PathBuf::from(r["dir"].as_str().unwrap());
            read_json(&dir.join("config.json"))["scenario"]["file"]["nemesis"]["random"].clone()
        };
        assert_eq!(
            profile(&runs[0])["holder_faults"],
            0,
            "run 0 knows nothing yet: {name}"
        );
        let first: Vec<String> = serde_json::from_value(runs[0]["reached"].clone()).unwrap();
        let seekable = [
            "holder-stopped-past-lease",
            "stale-write",
            "three-grants",
            "vacancy",
        ];
        let missing = seekable.iter().any(|m| !first.iter().any(|r| r == m));
        let turned = profile(&runs[1])["holder_faults"].as_u64().unwrap_or(0) > 0;
        match extra {
            None => {
                assert_eq!(
                    turned, missing,
                    "run 1 seeks what run 0 missed ({first:?}): {text}"
                );
                assert_eq!(text.contains("nightly: run 1 seeks "), missing, "{text}");
            }
            Some(_) => assert!(!turned && !text.contains(" seeks "), "{text}"),
        }
    }
}
