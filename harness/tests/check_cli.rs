//! `chaos check DIR` on stored runs that are not whole, through the real binary: each case's exit code and its one line; `--strict-duplicates`; a signal mid-check of a big run; an absurd timestamp and the report's size.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A planted run of `checkers/tests/data`, copied to a fresh folder.
fn planted(case: &str, name: &str) -> PathBuf {
    let from = repo().join("checkers/tests/data").join(case);
    let dir = temp_dir(name).join(case);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(&from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    dir
}

fn check(dir: &Path, args: &[&str]) -> Output {
    Command::new(chaos())
        .arg("check")
        .arg(dir)
        .args(args)
        .output()
        .expect("run chaos check")
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("chaos exited, not killed")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The error line of a refused check: exit 3 and exactly one line on stderr.
fn refused(out: &Output) -> String {
    let err = text(&out.stderr);
    assert_eq!(code(out), 3, "stdout: {}\nstderr: {err}", text(&out.stdout));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("chaos: error: "), "{err}");
    lines[0].to_string()
}

fn append(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// The history's lines, one replaced or inserted.
fn edit_history(dir: &Path, edit: impl FnOnce(&mut Vec<Vec<u8>>)) -> PathBuf {
    let path = dir.join("history.jsonl");
    let bytes = std::fs::read(&path).unwrap();
    let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    edit(&mut lines);
    let mut out = lines.join(&b'\n');
    out.push(b'\n');
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn a_torn_last_line_is_unknown_and_says_why() {
    let dir = planted("clean-takeover", "check-torn");
    assert_eq!(code(&check(&dir, &["-q"])), 0, "the planted run is valid");
    append(
        &dir.join("history.jsonl"),
        br#"{"index":999,"time_ns":1200000000,"scenario_time":"22:0"#,
    );
    let out = check(&dir, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(&out), 2, "{stdout}{stderr}");
    assert!(stdout.contains("Unknown (exit 2)"), "{stdout}");
    assert!(
        stdout.contains("torn line"),
        "the reason on the verdict line: {stdout}"
    );
    assert!(
        stderr.contains("unknown because: history ends in a torn line"),
        "{stderr}"
    );
}

#[test]
fn garbage_or_a_torn_line_in_the_middle_is_refused_naming_file_and_line() {
    let dir = planted("clean-takeover", "check-garbage");
    let path = edit_history(&dir, |lines| {
        lines.insert(5, b"{\"index\": 5, oops}".to_vec())
    });
    let line = refused(&check(&dir, &[]));
    assert!(
        line.starts_with(&format!(
            "chaos: error: {}:6: not a history event",
            path.display()
        )),
        "{line}"
    );
    let dir = planted("clean-takeover", "check-torn-middle");
    let path = edit_history(&dir, |lines| lines[9].truncate(30));
    let line = refused(&check(&dir, &[]));
    assert!(
        line.starts_with(&format!("chaos: error: {}:10: cut short", path.display())),
        "{line}"
    );
}

#[test]
fn invalid_utf8_mid_file_is_refused_naming_file_and_line() {
    let dir = planted("clean-takeover", "check-utf8");
    let path = edit_history(&dir, |lines| {
        let at = lines[11].len() / 2;
        lines[11].insert(at, 0xff);
    });
    let line = refused(&check(&dir, &[]));
    assert!(
        line.starts_with(&format!(
            "chaos: error: {}:12: not UTF-8 text",
            path.display()
        )),
        "{line}"
    );
}

#[test]
fn a_corrupt_audit_or_final_state_is_refused_naming_the_file() {
    for file in ["audit.json", "final-state.json"] {
        let dir = planted("clean-takeover", &format!("check-corrupt-{file}"));
        let path = dir.join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::write(&path, bytes).unwrap();
        let line = refused(&check(&dir, &[]));
        assert!(
            line.starts_with(&format!("chaos: error: {}: corrupt: ", path.display())),
            "{line}"
        );
        assert!(
            line.contains("EOF while parsing"),
            "the parse error: {line}"
        );
        assert!(!line.contains("missing"), "{line}");
    }
}

#[test]
fn a_missing_audit_is_unknown_and_said_missing() {
    let dir = planted("clean-takeover", "check-no-audit");
    std::fs::remove_file(dir.join("audit.json")).unwrap();
    let out = check(&dir, &[]);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 2, "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("audit missing"), "{stdout}");
}

#[test]
fn a_run_without_run_json_is_unknown_and_a_folder_without_a_history_is_refused() {
    // A harness killed with SIGKILL: its history, no run.json, no final reads; in
    // results/<scenario>/<start>-<seed>/.
    let planted = planted("clean-takeover", "check-killed");
    let dir = planted.join("clean-takeover").join("20260413T220000Z-7");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(planted.join("history.jsonl"), dir.join("history.jsonl")).unwrap();
    let out = check(&dir, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(&out), 2, "{stdout}{stderr}");
    assert!(stdout.contains("Unknown (exit 2)"), "{stdout}");
    assert!(
        stdout.contains("run.json is missing: the harness did not finish"),
        "{stdout}"
    );
    assert!(dir.join("report.html").is_file());
    // Its scenario and seed are named from the path, its clock from its first line.
    assert!(
        stderr.contains("clean-takeover in scenario time (seed 7)"),
        "{stderr}"
    );
    assert!(stderr.contains("audit missing"), "{stderr}");
    let report = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        report.contains("<h3>Whole run: 22:00:00.0 – "),
        "the clock from the history"
    );

    let empty = temp_dir("check-empty");
    let line = refused(&check(&empty, &[]));
    assert!(line.contains("not a run directory"), "{line}");

    // A path that is not there is named as such, not as "not a run directory" (issue 33).
    let line = refused(&check(&empty.join("nonexistent"), &[]));
    assert!(
        line.contains("nonexistent: no such directory;") && !line.contains("not a run directory"),
        "{line}"
    );
    let file = empty.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let line = refused(&check(&file, &[]));
    assert!(line.contains("a-file: not a directory;"), "{line}");
    // A run that stopped before its clock started (a config and nothing else).
    let early = temp_dir("check-early");
    std::fs::write(early.join("config.json"), "{}").unwrap();
    let line = refused(&check(&early, &[]));
    assert!(
        line.contains("this run has no verdict: it stopped before its scenario clock started"),
        "{line}"
    );
}

#[test]
fn each_cause_is_said_once() {
    let dir = planted("clean-takeover", "check-no-history");
    std::fs::remove_file(dir.join("history.jsonl")).unwrap();
    let line = refused(&check(&dir, &[]));
    assert_eq!(
        line.matches("No such file or directory").count(),
        1,
        "{line}"
    );
    assert!(line.contains("history.jsonl"), "{line}");
}

#[test]
fn strict_duplicates_changes_the_verdict_either_way() {
    let dir = planted("duplicated-rows-alone", "check-strict");
    assert_eq!(code(&check(&dir, &["-q"])), 0, "cleanup work: valid");
    let out = check(&dir, &["-q", "--strict-duplicates"]);
    assert_eq!(code(&out), 1, "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("Invalid (exit 1)"));
    assert_eq!(
        code(&check(
            &dir,
            &["-q", "--strict-duplicates", "--expect", "invalid"]
        )),
        0
    );
    let strict = planted("duplicated-rows-strict", "check-strict-off");
    assert_eq!(
        code(&check(&strict, &["-q"])),
        1,
        "the run asked to be strict"
    );
    assert_eq!(
        code(&check(&strict, &["-q", "--strict-duplicates", "false"])),
        0
    );
}

#[test]
fn an_absurd_timestamp_keeps_the_report_small_and_says_so() {
    let dir = planted("april-lease-only", "check-absurd");
    let before = code(&check(&dir, &["-q"]));
    edit_history(&dir, |lines| {
        let far = br#"{"index":5000,"time_ns":9223372036854775000,"scenario_time":"00:00:00.0","process":"box-2","type":"ok","f":"copy","value":{"turbine":"AP-0001"}}"#;
        let past = br#"{"index":5001,"time_ns":-9223372036854775000,"scenario_time":"00:00:00.0","process":"nemesis","type":"ok","f":"pause","value":{"target":"box-1"}}"#;
        lines.insert(100, far.to_vec());
        lines.insert(3, past.to_vec());
    });
    let out = check(&dir, &["-q"]);
    assert_eq!(
        code(&out),
        before,
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let report = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(
        report.len() < 20_000_000,
        "report.html is {} bytes",
        report.len()
    );
    assert!(
        report.len() < 2_000_000,
        "report.html is {} bytes",
        report.len()
    );
    assert!(
        report.contains("2 history events outside the run's span"),
        "the banner"
    );
    assert!(report.contains("1 before it, 1 after it"));
    // The axis stays the run's (22:23:00 to 22:27:01), not centuries.
    assert!(
        report.contains("<h3>Whole run: 22:23:00.0 – 22:27:"),
        "the axis"
    );
}

/// A synthetic April-shaped run big enough that its check takes a while.
fn big_run() -> PathBuf {
    let dir = temp_dir("check-signal").join("big");
    chaos_harness::bench::write_synthetic_run(&dir, 2_000_000).unwrap();
    dir
}

#[test]
fn sigterm_or_ctrl_c_stops_a_big_check_within_a_second() {
    let dir = big_run();
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let mut child = Command::new(chaos())
            .arg("check")
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the check ended before the {name}: make the run bigger"
        );
        let sent = Instant::now();
        // SAFETY: a signal to our own child, by its pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                sent.elapsed() < Duration::from_secs(10),
                "still running 10 s after {name}"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = sent.elapsed();
        eprintln!(
            "{name}: chaos check exited {:.0} ms after the signal",
            took.as_secs_f64() * 1000.0
        );
        let out = child.wait_with_output().unwrap();
        assert_eq!(status.code(), Some(3), "{name}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        let what = if signal == libc::SIGTERM {
            "terminated"
        } else {
            "interrupted"
        };
        assert!(
            err.contains(&format!(
                "chaos: error: {what}: stopped checking {}",
                dir.display()
            )),
            "{err}"
        );
        assert!(
            took < Duration::from_secs(1),
            "{name}: exited {took:?} after the signal"
        );
        assert!(
            !dir.join("report.tmp").exists(),
            "no half-written report left"
        );
    }
    std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
}

/// The verdict `chaos check` wrote: its validity and each finding's class, severity and count.
fn findings(dir: &Path) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("verdict.json")).unwrap()).unwrap();
    let anomalies: Vec<serde_json::Value> = v["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            serde_json::json!([
                a["class"],
                a["severity"],
                a["count"],
                a["first_scenario_time"]
            ])
        })
        .collect();
    serde_json::json!({ "valid": v["valid"], "reasons": v["reasons"], "anomalies": anomalies })
}

/// Issue 31: a stored run of every system re-judged after its lines were shuffled (each keeps
/// its index and time_ns), or each answer moved before its invoke, gets the verdict of the
/// file as written, through the one `chaos check`.
#[test]
fn every_system_judges_shuffled_lines_and_answers_before_invokes_as_written() {
    let cases = [
        "april-fenced",
        "payout-lines-shuffled",
        "objects-lines-shuffled",
        "failover-unfenced-lost",
    ];
    for case in cases {
        let dir = planted(case, &format!("check-order-{case}"));
        let want_code = code(&check(&dir, &["-q"]));
        let want = findings(&dir);
        assert_ne!(want_code, 3, "{case}");
        // Reversed: every line out of place; and each answer swapped with its invoke.
        edit_history(&dir, |lines| lines.reverse());
        assert_eq!(code(&check(&dir, &["-q"])), want_code, "{case} reversed");
        assert_eq!(findings(&dir), want, "{case} reversed");
        edit_history(&dir, |lines| {
            lines.reverse();
            let field = |l: &[u8], k: &str| {
                serde_json::from_slice::<serde_json::Value>(l).unwrap()[k]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            };
            for i in 0..lines.len() {
                if field(&lines[i], "type") != "invoke" {
                    continue;
                }
                let process = field(&lines[i], "process");
                let answer = (i + 1..lines.len()).find(|&j| {
                    field(&lines[j], "process") == process && field(&lines[j], "type") != "invoke"
                });
                if let Some(j) = answer {
                    lines.swap(i, j);
                }
            }
        });
        assert_eq!(
            code(&check(&dir, &["-q"])),
            want_code,
            "{case} answers first"
        );
        assert_eq!(findings(&dir), want, "{case} answers first");
    }
}

/// Issue 31: a failover run's torn last line is `unknown` with the reason, as the mover's is
/// (the failover path's reader kept the flag it used to drop).
#[test]
fn a_failover_run_with_a_torn_last_line_is_unknown_and_says_why() {
    let dir = planted("failover-fenced-clean", "check-failover-torn");
    assert_eq!(code(&check(&dir, &["-q"])), 0, "the planted run is valid");
    append(
        &dir.join("history.jsonl"),
        br#"{"index":999,"time_ns":1200000000,"scenario_time":"14:0"#,
    );
    let out = check(&dir, &[]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(code(&out), 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("unknown because: history ends in a torn line"),
        "{stderr}"
    );
    // Torn in the middle is no torn tail: refused, naming the line.
    let dir = planted("failover-fenced-clean", "check-failover-torn-middle");
    let path = edit_history(&dir, |lines| lines[9].truncate(30));
    let line = refused(&check(&dir, &[]));
    assert!(
        line.starts_with(&format!("chaos: error: {}:10: ", path.display())),
        "{line}"
    );
}

/// Issue 31: what could not be read is `unknown`, never a loss, for every system; and an
/// empty history accuses nothing.
#[test]
fn an_unreadable_store_or_an_empty_history_is_unknown_for_every_system() {
    for case in [
        "final-state-incomplete",
        "payout-ledger-unreadable",
        "objects-store-unreadable",
        "failover-survivor-unread",
        "mover-empty-history-ingested-rows",
        "payout-empty-history",
        "objects-empty-history",
        "failover-empty-history",
    ] {
        let dir = planted(case, &format!("check-unknown-{case}"));
        let out = check(&dir, &[]);
        assert_eq!(
            code(&out),
            2,
            "{case}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("unknown because: "),
            "{case}: {}",
            text(&out.stderr)
        );
    }
    // A corrupt failover final state is refused naming the file, as the mover's is.
    let dir = planted("failover-fenced-clean", "check-failover-corrupt");
    let path = dir.join("final-state.json");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&path, bytes).unwrap();
    let line = refused(&check(&dir, &[]));
    assert!(
        line.starts_with(&format!("chaos: error: {}: corrupt: ", path.display())),
        "{line}"
    );
}
