//! The clock family: a box's wall clock moved by an offset (libfaketime reads it from a file per box) and set back; never a monotonic clock, never another box's.

use super::{Applied, Invoke, Nemesis};
use crate::scenario::Scenario;
use chaos_nemesis::{FaultKind, NemesisOp};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where libfaketime lives on Debian.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The file libfaketime reads a box's clock offset from (a clock fault writes it).
pub fn faketime_file(log_dir: &Path, box_name: &str) -> PathBuf {
    log_dir.join(format!("{box_name}.faketime"))
}

/// The boxes a clock fault targets: only they run under libfaketime.
pub fn clocked_boxes(scenario: &Scenario) -> BTreeSet<String> {
    scenario
        .faults
        .iter()
        .filter_map(|f| match &f.kind {
            FaultKind::Clock { target, .. } => Some(target.clone()),
            _ => None,
        })
        .collect()
}

/// Refuses a scenario that offsets a clock on a machine without libfaketime.
pub fn check_installed(scenario: &Scenario) -> anyhow::Result<()> {
    if !clocked_boxes(scenario).is_empty() && !Path::new(LIBFAKETIME).is_file() {
        anyhow::bail!(
            "the scenario offsets a clock, which needs libfaketime: apt-get install -y faketime"
        );
    }
    Ok(())
}

/// The environment that puts a box under libfaketime at offset +0, with only its real-time
/// clock faked: a clock offset in production moves the wall clock, never CLOCK_MONOTONIC (and
/// a faked monotonic clock hangs timed waits, e.g. Python's).
pub fn mover_env(log_dir: &Path, box_name: &str) -> anyhow::Result<Vec<(String, String)>> {
    let file = faketime_file(log_dir, box_name);
    std::fs::write(&file, "+0\n").map_err(|e| anyhow::anyhow!("write {}: {e}", file.display()))?;
    Ok(vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ])
}

/// Writing a file is instant.
pub(super) fn lead() -> Duration {
    Duration::ZERO
}

/// The offset (scenario ms, scaled to real time) written at the instant; the heal writes 0.
pub(super) async fn apply(
    n: &Nemesis,
    op: &NemesisOp,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let FaultKind::Clock { offset_ms, target } = &op.kind else {
        return Err(format!("{} is not a clock fault", op.kind.verb()));
    };
    tokio::time::sleep_until(at.into()).await;
    invoke.fire();
    let offset_s = if op.heal {
        0.0
    } else {
        *offset_ms as f64 / 1000.0 * n.scenario.file.time_scale_ms / 1000.0
    };
    let path = faketime_file(&n.movers.log_dir(), target);
    std::fs::write(&path, format!("{offset_s:+.3}\n"))
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(Applied::now(json!({ "offset_real_s": offset_s })))
}
