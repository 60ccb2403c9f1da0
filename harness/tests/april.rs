//! The April night and the GC pause, end to end on the process backend: real Postgres, real
//! movers, real signals; each variant's figures (DESIGN section 6) asserted from its
//! verdict.json by `support/figures.rs`, the same checks the docker backend's tests use.

use crate::common::*;
use crate::support::figures;
use figures::Outcome;

fn run(scenario: &str, extra: &[&str], expect: &str) -> Outcome {
    require_mover();
    let name = format!("{scenario}{}", extra.join(""));
    let (code, dir) = run_scenario(&name, scenario, extra, expect);
    Outcome::read(code, &dir)
}

#[test]
fn april_lease_only_loses_one_turbine_the_way_it_happened() {
    figures::april_lease_only(&run("april", &[], "invalid"));
}

#[test]
fn april_with_fencing_loses_nothing_and_names_the_refusal() {
    figures::april_fenced(&run("april", &["--fencing", "on"], "valid"));
}

#[test]
fn gc_pause_lease_only_loses_data() {
    figures::gc_pause_lease_only(&run("gc-pause", &[], "invalid"));
}

#[test]
fn gc_pause_with_fencing_refuses_epoch_7_after_8() {
    figures::gc_pause_fenced(&run("gc-pause", &["--fencing", "on"], "valid"));
}

/// Issue 36: gc-pause whose pause lands before anybody holds the lease (box 1 paused for 3 s
/// while every box's way to the lock is 5 s slow, under a 30 s lease) reaches nothing the
/// scenario exists to reach: nothing is lost, and the run is `unknown` for it, not valid.
#[test]
fn gc_pause_whose_pause_lands_before_the_first_grant_is_unknown_not_valid() {
    require_mover();
    let dir = temp_dir("gc-pause-missed-scenario");
    let base = std::fs::read_to_string(repo().join("scenarios/gc-pause.toml")).unwrap();
    let head = &base[..base.find("[[fault]]").expect("gc-pause has a fault")];
    let mut text = head
        .replace("name = \"gc-pause\"", "name = \"gc-pause-missed\"")
        .replace("lease_s = 10", "lease_s = 30");
    for b in 1..=4 {
        text.push_str(&format!(
            "[[fault]]\nat = \"12:00:00\"\nfor_s = 5\nkind = \"latency\"\nlink = \"box-{b}->lock\"\nlatency_ms = 5000\nstream = \"upstream\"\n\n"
        ));
    }
    text.push_str(
        "[[fault]]\nat = \"12:00:00\"\nfor_s = 3\nkind = \"pause\"\ntarget = \"box-1\"\n",
    );
    let path = dir.join("gc-pause-missed.toml");
    std::fs::write(&path, text).unwrap();
    let (code, run) = run_scenario("gc-pause-missed", path.to_str().unwrap(), &[], "unknown");
    let o = Outcome::read(code, &run);
    println!("gc-pause, pause before the first grant: {}", o.summary());
    assert_eq!(o.code, Some(0), "--expect unknown: {}", o.verdict);
    assert_eq!(o.stats["rows_lost"].as_u64(), Some(0), "{}", o.verdict);
    let reasons = o.verdict["reasons"].to_string();
    assert!(
        reasons.contains("never reached holder-stopped-past-lease"),
        "{reasons}"
    );
    let first_grant = o.grant(0).2;
    assert!(
        first_grant >= figures::at("12:00:03"),
        "the pause was over before the first grant ({first_grant} ms)"
    );
}
