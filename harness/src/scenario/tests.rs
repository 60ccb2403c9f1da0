//! The scenario file's dates and its per-service faults.

use super::*;

#[test]
fn dates_are_utc_midnights() {
    assert_eq!(parse_date("1970-01-01"), Some(0));
    assert_eq!(parse_date("2026-04-13"), Some(1_776_038_400_000));
    assert_eq!(parse_date("2026-13-01"), None);
}

/// April's etcd-only hold of box 2 lands on etcd alone, the claim row's on every other service.
#[test]
fn a_fault_lands_only_on_the_lock_services_it_names() {
    let path = scenarios_dir().join("april.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let held = |service: LockKind| -> Vec<i64> {
        let mut file: ScenarioFile = toml::from_str(&text).unwrap();
        file.lock.service = service;
        file.time_scale_ms = file
            .lock
            .time_scale_ms(file.time_scale_ms, file.lease.lease_s);
        let s = load::validate(file, &path, &[]).unwrap();
        s.faults
            .iter()
            .filter(|f| matches!(&f.kind, FaultKind::Down { link } if link.starts_with("box-2->")))
            .filter_map(|f| f.duration_ms)
            .collect()
    };
    assert_eq!(held(LockKind::Claims), [30_000]);
    assert_eq!(held(LockKind::Zookeeper), [30_000]);
    assert_eq!(held(LockKind::Etcd), [135_000]);
    let bad = text.replace(r#"lock = ["etcd"]"#, r#"lock = ["etc"]"#);
    let e = toml::from_str::<ScenarioFile>(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("etc") && e.contains("zookeeper"), "{e}");
}
