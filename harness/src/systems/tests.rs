//! Each system's own checks of a scenario file, reached through the one dispatch when a file
//! loads: a refusal names the field of the system's own section, and what another system would
//! refuse passes.

use crate::scenario::{load, ScenarioError, ScenarioFile};
use std::path::Path;

const HEAD: &str = r#"
name = "t"
start = "12:00:00"
end = "12:10:00"
[lease]
lease_s = 10
poll_s = 2
copy_s = 5
"#;

/// The field the file is refused on, or `None` when it loads.
fn refused_on(system: &str, extra: &str) -> Option<String> {
    let text = format!("system = \"{system}\"\n{HEAD}\n{extra}");
    let file: ScenarioFile = toml::from_str(&text).unwrap();
    match load::validate(file, Path::new("t.toml"), &[]) {
        Ok(_) => None,
        Err(ScenarioError::Field { field, .. }) => Some(field),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn each_system_checks_its_own_sections() {
    let cases = [
        ("payout", "[payout]\nmonth = \"2026-13\"", "payout.month"),
        (
            "payout",
            "[payout]\nprocessor = \"shard9\"",
            "payout.processor",
        ),
        ("ten-objects", "[objects]\ncount = 0", "objects.count"),
        ("mover", "[data]\nold_divisor = 9", "data"),
        ("mover", "[mover]\nrenew_retry_s = 0", "mover.renew_retry_s"),
        (
            "failover",
            "[failover]\nsilence_s = 0",
            "failover.silence_s",
        ),
        ("mover", "[failover]\nsilence_s = 30", "failover"),
        (
            "payout",
            "[mover]\nready_timeout_real_s = 0",
            "mover.ready_timeout_real_s",
        ),
    ];
    for (system, extra, field) in cases {
        let got = refused_on(system, extra);
        assert_eq!(got.as_deref(), Some(field), "{system} with {extra}");
    }
    for system in ["mover", "payout", "ten-objects", "failover"] {
        assert_eq!(refused_on(system, ""), None, "{system} with its defaults");
    }
}

#[test]
fn a_section_of_another_system_is_not_checked() {
    // The mover has no [payout] or [objects] of its own: their values are not its to refuse.
    assert_eq!(refused_on("mover", "[payout]\nmonth = \"2026-13\""), None);
    assert_eq!(refused_on("mover", "[objects]\ncount = 0"), None);
    // The payout has no farm to move.
    assert_eq!(refused_on("payout", "[data]\nold_divisor = 9"), None);
}

#[test]
fn the_failover_holds_no_lease_and_names_its_own_nodes() {
    let async_commit = "[cluster]\nasynchronous_commit = [\"primary\"]";
    assert_eq!(
        refused_on("failover", async_commit).as_deref(),
        Some("cluster.asynchronous_commit")
    );
    let reach = "[expect]\nreach = [\"stale-write\"]";
    assert_eq!(
        refused_on("failover", reach).as_deref(),
        Some("expect.reach")
    );
    assert_eq!(refused_on("mover", reach), None);
    let down =
        "[[fault]]\nat = \"12:01:00\"\nfor_s = 10\nkind = \"down\"\nlink = \"watcher->primary\"";
    assert_eq!(refused_on("failover", down), None);
    assert_eq!(refused_on("mover", down).as_deref(), Some("fault"));
}

#[test]
fn a_renewal_retry_in_scenario_seconds_reaches_the_mover_at_the_run_s_scale() {
    use crate::systems::interface::SystemUnderTest;
    let text = format!("{HEAD}\n[mover]\non_renew_failure = \"carry-on\"\nrenew_retry_s = 55");
    let mut file: ScenarioFile = toml::from_str(&text).unwrap();
    let retry = |file: &ScenarioFile| {
        let args = crate::systems::mover::Mover.reference_args(file);
        let at = args
            .iter()
            .position(|a| a == "--renew-retry-ms")
            .expect("passed");
        args[at + 1].clone()
    };
    file.time_scale_ms = 10.0;
    assert_eq!(retry(&file), "550");
    file.time_scale_ms = 20.0;
    assert_eq!(retry(&file), "1100", "55 scenario s at 20 real ms each");
    file.mover.renew_retry_s = None;
    let args = crate::systems::mover::Mover.reference_args(&file);
    assert!(
        !args.contains(&"--renew-retry-ms".to_string()),
        "the mover's default: {args:?}"
    );
}
