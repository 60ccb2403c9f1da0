//! What a failover run must show, read from its verdict.json: shared by the process backend's tests (`failover.rs`) and the docker backend's (`failover_docker.rs`), so both backends are held to the same claims.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A finished failover run: its exit code, directory, verdict and failover figures.
pub struct Run {
    pub code: Option<i32>,
    pub dir: PathBuf,
    pub verdict: Value,
    pub stats: Value,
}

impl Run {
    pub fn read(code: Option<i32>, dir: &Path) -> Run {
        let text = std::fs::read_to_string(dir.join("verdict.json"))
            .unwrap_or_else(|e| panic!("{}: no verdict.json: {e}", dir.display()));
        let verdict: Value = serde_json::from_str(&text).unwrap();
        let stats = verdict["stats"]["failover"].clone();
        Run {
            code,
            dir: dir.to_path_buf(),
            verdict,
            stats,
        }
    }

    pub fn anomaly(&self, class: &str) -> Option<&Value> {
        self.verdict["anomalies"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["class"] == class))
    }

    fn ms(&self, key: &str) -> i64 {
        self.stats[key]
            .as_i64()
            .unwrap_or_else(|| panic!("{key} missing in {}", self.stats))
    }

    fn describe(&self) -> String {
        format!("{} in {}", self.verdict, self.dir.display())
    }
}

/// Scenario ms of `HH:MM:SS`.
fn at(hms: &str) -> i64 {
    let p: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    ((p[0] * 60 + p[1]) * 60 + p[2]) * 1000
}

/// Without a fence: invalid; acknowledged orders the old primary took after the promotion are
/// not on the new one; both servers could take writes and both did; the promotion came one
/// silence after the fault began, while the primary was up.
pub fn unfenced(r: &Run, fault_at: &str, silence_s: i64) {
    assert_eq!(
        r.code,
        Some(0),
        "--expect invalid did not hold: {}",
        r.describe()
    );
    assert_eq!(r.verdict["valid"], "invalid", "{}", r.describe());
    let lost = r
        .anomaly("lost-orders")
        .unwrap_or_else(|| panic!("no lost-orders: {}", r.describe()));
    assert_eq!(lost["severity"], "error");
    assert!(
        r.stats["lost_orders"].as_u64().unwrap() >= 1,
        "{}",
        r.describe()
    );
    assert!(
        r.stats["lost_after_promotion"].as_u64().unwrap() >= 1,
        "{}",
        r.describe()
    );
    assert_eq!(r.stats["survivor"], "replica");
    let two = r
        .anomaly("two-primaries")
        .unwrap_or_else(|| panic!("no two-primaries: {}", r.describe()));
    assert_eq!(two["severity"], "error");
    assert!(
        r.stats["two_primaries_s"].as_f64().unwrap() >= 10.0,
        "{}",
        r.describe()
    );
    assert!(r.stats["two_primaries_writes_primary"].as_u64().unwrap() >= 1);
    assert!(r.anomaly("false-promotion").is_some(), "{}", r.describe());
    let promotion = r.ms("promotion_scenario_ms");
    let begins = at(fault_at) + silence_s * 1000;
    assert!(
        promotion >= begins - 2_000 && promotion <= begins + 15_000,
        "promotion at {} is not one silence ({silence_s} s) after {fault_at}: {}",
        r.stats["promotion_time"],
        r.describe()
    );
    assert!(
        r.stats["old_primary_writes_after_promotion"]
            .as_u64()
            .unwrap()
            >= 1
    );
}

/// With the fence: valid; nothing lost; no moment with two writable primaries; the fence came
/// before the promotion; the price is a stretch with no primary, measured.
pub fn fenced(r: &Run) {
    assert_eq!(
        r.code,
        Some(0),
        "--expect valid did not hold: {}",
        r.describe()
    );
    assert_eq!(r.verdict["valid"], "valid", "{}", r.describe());
    assert!(r.anomaly("lost-orders").is_none(), "{}", r.describe());
    assert!(r.anomaly("two-primaries").is_none(), "{}", r.describe());
    assert_eq!(r.stats["lost_orders"], 0);
    assert!(
        r.stats["orders_acknowledged"].as_u64().unwrap() >= 100,
        "{}",
        r.describe()
    );
    assert!(
        r.ms("fence_scenario_ms") < r.ms("promotion_scenario_ms"),
        "{}",
        r.describe()
    );
    let gap = r
        .anomaly("unavailability")
        .unwrap_or_else(|| panic!("no unavailability: {}", r.describe()));
    assert_eq!(gap["severity"], "info");
    let s = r.stats["unavailability_s"].as_f64().unwrap();
    assert!(
        (2.0..=60.0).contains(&s),
        "unavailability {s} s: {}",
        r.describe()
    );
    assert_eq!(
        r.stats["old_primary_writes_after_promotion"],
        0,
        "{}",
        r.describe()
    );
}
