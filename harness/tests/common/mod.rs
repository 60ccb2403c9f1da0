//! Shared helpers for the harness's integration tests: the built binaries, unique temp folders, and a scan for processes a test left behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Under plain `cargo test`, tests of one binary that each start a whole run take turns. The
/// suite (scripts/test) runs under cargo-nextest, a process per test, where this lock holds
/// nothing: there `.config/nextest.toml` says which runs may share the machine (two light ones)
/// and which run alone.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `chaos` binary cargo built for this test run.
pub fn chaos() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_chaos"))
}

/// The repository root (scenarios live there).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh folder under the system temp dir, unique to this test.
pub fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("chaos-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Fail loudly (not skip) when the reference mover was not built beside `chaos`.
pub fn require_mover() {
    let mover = chaos().parent().unwrap().join("mover");
    assert!(mover.is_file(), "the reference mover is not built at {}: run `cargo build --release -p chaos-workloads` (scripts/test does)", mover.display());
}

/// `chaos ARGS` from the repo root with its own data dir; the output.
pub fn run_chaos(args: &[&str], data_dir: &Path, results: &Path) -> Output {
    Command::new(chaos())
        .args(args)
        .arg("--results")
        .arg(results)
        .current_dir(repo())
        .env("CHAOS_DATA_DIR", data_dir)
        .output()
        .expect("run chaos")
}

/// PIDs of live processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        // Movers inherit the harness's environment (CHAOS_DATA_DIR), servers name their data dir.
        let env = std::fs::read(e.path().join("environ"))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if cmd.contains(needle) || env.contains(needle) {
            // A zombie has an empty cmdline; a live one names itself.
            out.push((pid, cmd));
        }
    }
    out
}

/// Wait up to `secs` for no process to mention `needle`.
pub fn assert_none_left(needle: &str, secs: u64) {
    let began = std::time::Instant::now();
    loop {
        let left = processes_mentioning(needle);
        if left.is_empty() {
            return;
        }
        if began.elapsed().as_secs() >= secs {
            panic!("processes left behind mentioning {needle}: {left:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The newest run directory under `results/<scenario>/`.
pub fn latest_run(results: &Path, scenario: &str) -> PathBuf {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(results.join(scenario))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    runs.sort();
    runs.pop().expect("a run directory")
}

pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// A stored run's history, one JSON value per line.
pub fn history_ops(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("history.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `chaos run SCENARIO --expect EXPECT EXTRA...` from the repo root, one run at a time, with
/// the data where `chaos run` puts it by default (a tmpfs when there is one) in a folder of
/// its own, so no process of this run can be mistaken for another's; asserts nothing the run
/// started outlives it. Its exit code and its run directory (the results stay for a look). A
/// run the machine's pace cut short is run once more, slower ([`slower_scale`]).
pub fn run_scenario(
    name: &str,
    scenario: &str,
    extra: &[&str],
    expect: &str,
) -> (Option<i32>, PathBuf) {
    let _one = one_at_a_time();
    let dir = temp_dir(name);
    let args: Vec<String> = ["run", scenario, "--expect", expect]
        .iter()
        .chain(extra)
        .map(|a| a.to_string())
        .collect();
    let data = chaos_harness::backend::process::data_root().join(format!(
        "test-{}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("run")
    ));
    // A scenario file is named as its file is (`x/gc-pause-missed.toml`: gc-pause-missed).
    let named = Path::new(scenario)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or(scenario);
    let (code, run_dir, ()) = once_more_if_cut_short(args, expect, |args| {
        let began = std::time::Instant::now();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_chaos(&argv, &data, &dir.join("results"));
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        println!(
            "chaos {} took {:.1} s",
            args.join(" "),
            began.elapsed().as_secs_f64()
        );
        let run_dir = latest_run(&dir.join("results"), named);
        assert_none_left(&data.display().to_string(), 10);
        let _ = std::fs::remove_dir_all(&data);
        (out.status.code(), run_dir, ())
    });
    (code, run_dir)
}

/// `once(args)`, and once more with [`slower_scale`]'s arguments when the machine's pace cut
/// that run short: the last run's exit code, run directory and whatever else `once` returns.
pub fn once_more_if_cut_short<T>(
    args: Vec<String>,
    expect: &str,
    mut once: impl FnMut(&[String]) -> (Option<i32>, PathBuf, T),
) -> (Option<i32>, PathBuf, T) {
    let (code, run_dir, more) = once(&args);
    match slower_scale(&args, expect, code, &run_dir) {
        Some(slower) => once(&slower),
        None => (code, run_dir, more),
    }
}

/// A run the machine did not keep pace for, to be run once more at a slower scale: the
/// arguments for that run, when a run that was to end `expect` ended `unknown` because the
/// scenario's time limit came before its plan was done (run.json's `incomplete_reason`). That
/// is DESIGN's verdict for a run the machine could not judge, not a finding; an `invalid` or a
/// run cut short for any other reason is never run again. The scale is the one the run's
/// report suggests ("try --time-scale-ms N") or twice the run's own, whichever is slower. The
/// run goes once more, never twice ([`once_more_if_cut_short`]). Says so on the test's output,
/// with the first run's directory left for a look.
pub fn slower_scale(
    args: &[String],
    expect: &str,
    code: Option<i32>,
    run_dir: &Path,
) -> Option<Vec<String>> {
    let verdict = std::fs::read_to_string(run_dir.join("verdict.json")).ok()?;
    let verdict: serde_json::Value = serde_json::from_str(&verdict).ok()?;
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("run.json")).ok()?).ok()?;
    let reason = meta["incomplete_reason"].as_str().unwrap_or_default();
    let cut_by_time = verdict["valid"] == "unknown" && reason.contains("time limit");
    if code == Some(0) || expect == "unknown" || !cut_by_time {
        return None;
    }
    let ran_ms = meta["clock"]["real_ns_per_scenario_s"].as_u64()? / 1_000_000;
    let report = std::fs::read_to_string(run_dir.join("report.html")).unwrap_or_default();
    let suggested = report
        .split("try --time-scale-ms ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok());
    let scale = suggested.unwrap_or(0).max(2 * ran_ms);
    println!(
        "the run at {ran_ms} real ms a scenario second ended unknown ({reason}): the machine did not keep the scenario's pace, so it runs once more at --time-scale-ms {scale} (the first run: {})",
        run_dir.display()
    );
    let mut slower = Vec::with_capacity(args.len() + 3);
    let mut given = args.iter();
    while let Some(a) = given.next() {
        if a == "--time-scale-ms" {
            given.next();
        } else {
            slower.push(a.clone());
        }
    }
    slower.extend(["--time-scale-ms".to_string(), scale.to_string()]);
    Some(slower)
}
