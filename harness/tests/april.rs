//! The April night and the GC pause, end to end on the process backend: real Postgres, real
//! movers, real signals; each variant's figures (DESIGN section 6) asserted from its
//! verdict.json by `support/figures.rs`, the same checks the docker backend's tests use.

mod common;
#[path = "support/figures.rs"]
mod figures;

use common::*;
use figures::Outcome;
use std::sync::Mutex;

/// One scenario at a time: they are paced in real time on a 2-core machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn run(scenario: &str, extra: &[&str], expect: &str) -> Outcome {
    require_mover();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir(&format!("{scenario}{}", extra.join("")));
    let mut args = vec!["run", scenario, "--expect", expect];
    args.extend_from_slice(extra);
    // The data where `chaos run` puts it by default (a tmpfs when there is one): the figures
    // are the CLI's. Its own folder, so no process of this run can be mistaken for another's.
    let data = chaos_harness::backend::process::data_root().join(format!(
        "test-{}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("april")
    ));
    let began = std::time::Instant::now();
    let out = run_chaos(&args, &data, &dir.join("results"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("{stderr}");
    println!(
        "chaos {} took {:.1} s",
        args.join(" "),
        began.elapsed().as_secs_f64()
    );
    let outcome = Outcome::read(
        out.status.code(),
        &latest_run(&dir.join("results"), scenario),
    );
    assert_none_left(&data.display().to_string(), 10);
    // The results stay (a few MB) for a look after a failure; the data folder is gone.
    let _ = std::fs::remove_dir_all(&data);
    outcome
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
