//! The April night and the GC pause, end to end on the process backend: real Postgres, real
//! movers, real signals; each variant's figures (DESIGN section 6) asserted from its
//! verdict.json by `support/figures.rs`, the same checks the docker backend's tests use.

mod common;
#[path = "support/figures.rs"]
mod figures;

use common::*;
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
