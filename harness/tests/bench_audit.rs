//! `chaos bench --what audit` on real Postgres at a tiny size: both figures and the ratio are printed, the "with" server's audit recorded every statement and the "without" server's nothing, and no server is left running.

use crate::common::*;
use std::process::Command;

/// The number after `key` in `text` (digits and a decimal point).
fn number_after(text: &str, key: &str) -> f64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key:?} in the output:\n{text}"));
    let rest = &text[at + key.len()..];
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("{key:?} is not followed by a number ({e}):\n{text}"))
}

/// The output line that starts (after indentation) with `prefix`.
fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in the output:\n{text}"))
}

#[test]
fn the_audit_bench_reports_with_without_and_the_ratio_and_the_triggers_fired() {
    let dir = temp_dir("bench-audit");
    let data = dir.join("data");
    let out = Command::new(chaos())
        .args([
            "bench", "--what", "audit", "--rows", "3000", "--rounds", "2",
        ])
        .env("CHAOS_DATA_DIR", &data)
        .output()
        .expect("run chaos bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "chaos bench --what audit failed ({}):\n{stdout}\n{stderr}",
        out.status
    );

    for path in ["ingest:", "copy:"] {
        let l = line(&stdout, path);
        let with = number_after(l, "with triggers median ");
        let without = number_after(l, "without median ");
        let ratio = number_after(l, "ratio with/without ");
        let of_medians = number_after(l, "the medians' ratio ");
        assert!(
            with > 0.0 && without > 0.0 && ratio > 0.0,
            "{path} rows/s: {l}"
        );
        assert!(
            (of_medians - with / without).abs() < 0.002,
            "{path}: the medians' ratio {of_medians} is not with/without = {with}/{without}"
        );
    }

    let triggers = line(&stdout, "triggers on readings:");
    assert!(number_after(triggers, "with ") >= 2.0, "{triggers}");
    assert_eq!(number_after(triggers, "without "), 0.0, "{triggers}");

    // The audit: one row per ingest statement (app 'ingest' is audited per
    // statement) and one per COPY (one turbine each) with the triggers, none without.
    let audit = line(&stdout, "audit rows:");
    let (with_part, without_part) = audit
        .split_once("), without ")
        .unwrap_or_else(|| panic!("{audit}"));
    let with_rows = number_after(with_part, "audit rows: with ");
    let statements = number_after(with_part, "(") + number_after(with_part, "statements, ");
    assert!(with_rows > 0.0, "the triggers did not fire: {audit}");
    assert_eq!(
        with_rows, statements,
        "one audit row per statement with the triggers: {audit}"
    );
    assert_eq!(
        number_after(without_part, ""),
        0.0,
        "the audit recorded writes without the triggers: {audit}"
    );
    assert!(
        number_after(without_part, "(") > 0.0,
        "the server without triggers got no ingest: {audit}"
    );

    // Every server stopped, every data directory removed.
    assert_none_left(&data.display().to_string(), 10);
    let left: Vec<_> = std::fs::read_dir(&data)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "data directories left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
