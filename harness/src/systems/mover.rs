//! The mover (the April night, the default system): its switches as the reference mover's
//! argv, and its settings. It installs nothing beyond the testbed's claim row, turbines and
//! audits, and its final reads are the testbed's own (`audit.rs`).

use super::interface::{common_settings, Settings, SystemUnderTest};
use crate::scenario::{Scenario, ScenarioError, ScenarioFile, Validator};
use chaos_workloads::mover::switch_name;

/// System `mover`.
pub struct Mover;

impl SystemUnderTest for Mover {
    fn program(&self) -> &'static str {
        "mover"
    }

    fn moves_turbines(&self) -> bool {
        true
    }

    fn check_file(&self, v: &Validator, file: &ScenarioFile) -> Result<(), ScenarioError> {
        v.lease_settings(file)?;
        if let Some(r) = file.mover.renew_retry_s {
            v.within(
                "mover.renew_retry_s",
                r.is_finite() && r > 0.0,
                "above 0 scenario seconds",
                r,
            )?;
        }
        v.data(&file.data, file.cluster.shards)
    }

    fn reference_args(&self, s: &ScenarioFile) -> Vec<String> {
        let m = &s.mover;
        let mut args = vec![
            "--fencing".to_string(),
            switch_name(m.fencing),
            "--on-renew-failure".into(),
            switch_name(m.on_renew_failure),
            "--on-lost".into(),
            switch_name(m.on_lost),
            "--election".into(),
            switch_name(m.election),
        ];
        if m.check_expiry_before_write {
            args.push("--check-expiry-before-write".into());
        }
        if m.renew_on_thread {
            args.push("--renew-on-thread".into());
        }
        if let Some(r) = m.renew_retry_s {
            let real_ms = (r * s.time_scale_ms).round() as u64;
            args.extend(["--renew-retry-ms".to_string(), real_ms.to_string()]);
        }
        args.extend(m.args.iter().cloned());
        args
    }

    fn settings(&self, s: &Scenario) -> Settings {
        let m = &s.file.mover;
        let mut settings = common_settings(s, "copy_s");
        settings.extend([
            ("fencing".into(), switch_name(m.fencing)),
            ("on_renew_failure".into(), switch_name(m.on_renew_failure)),
            ("on_lost".into(), switch_name(m.on_lost)),
            (
                "check_expiry_before_write".into(),
                m.check_expiry_before_write.to_string(),
            ),
            ("election".into(), switch_name(m.election)),
            ("renew_on_thread".into(), m.renew_on_thread.to_string()),
        ]);
        if let Some(r) = m.renew_retry_s {
            settings.insert("renew_retry_s".into(), r.to_string());
        }
        // Only a service other than the claim row is said (stored runs keep their settings).
        if s.file.lock.service != crate::lock::LockKind::Claims {
            settings.insert("lock".into(), s.file.lock.service.name().to_string());
        }
        if s.file.lock.members != 1 {
            settings.insert("lock_members".into(), s.file.lock.members.to_string());
        }
        settings
    }
}
