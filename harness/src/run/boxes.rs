//! The boxes of a run: each mover's program, argv and protocol environment (real milliseconds, already scaled), rendered once from the typed scenario.

use crate::backend::{MoverProgram, MoverSpec};
use crate::faults::clock;
use crate::scenario::{self, Scenario, ScenarioFile, System};
use crate::testbed::LinkUrls;
use chaos_workloads::mover::{env, switch_name};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The system's reference program (`mover`, `payer`, `updater`): beside this binary.
pub fn reference_program(system: System) -> anyhow::Result<PathBuf> {
    let name = match system {
        System::Payout => "payer",
        System::TenObjects => "updater",
        System::Mover | System::Failover => "mover",
    };
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no folder for {}", exe.display()))?;
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!("the reference {name} is not built beside {}: run `cargo build --release -p chaos-workloads` (or give --mover-cmd)", exe.display())
}

/// The reference program's argv for the scenario's switches.
pub fn reference_args(s: &ScenarioFile) -> Vec<String> {
    let m = &s.mover;
    match s.system {
        System::Payout => {
            let mut args = vec!["--election".to_string(), switch_name(m.election)];
            if s.payout.idempotent {
                args.push("--idempotent".into());
            }
            args.extend(m.args.iter().cloned());
            return args;
        }
        System::TenObjects => {
            let mut args = vec!["--fence".to_string(), switch_name(s.objects.fence)];
            args.extend(m.args.iter().cloned());
            return args;
        }
        System::Mover | System::Failover => {}
    }
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
    args.extend(m.args.iter().cloned());
    args
}

/// The mover's settings as the run's record keeps them (for the report and the story).
pub fn settings(s: &Scenario) -> BTreeMap<String, String> {
    let m = &s.file.mover;
    let l = &s.file.lease;
    let command = m
        .command
        .clone()
        .unwrap_or_else(|| "reference mover".into());
    match s.file.system {
        System::Payout => {
            return BTreeMap::from([
                ("system".into(), "payout".into()),
                ("election".into(), switch_name(m.election)),
                ("idempotent".into(), s.file.payout.idempotent.to_string()),
                ("command".into(), command),
                ("lease_s".into(), l.lease_s.to_string()),
                ("poll_s".into(), l.poll_s.to_string()),
                ("payment_s".into(), l.copy_s.to_string()),
                ("time_scale_ms".into(), s.file.time_scale_ms.to_string()),
            ])
        }
        System::TenObjects => {
            return BTreeMap::from([
                ("system".into(), "ten-objects".into()),
                ("objects_fence".into(), switch_name(s.file.objects.fence)),
                ("command".into(), command),
                ("lease_s".into(), l.lease_s.to_string()),
                ("poll_s".into(), l.poll_s.to_string()),
                ("object_s".into(), l.copy_s.to_string()),
                ("time_scale_ms".into(), s.file.time_scale_ms.to_string()),
            ])
        }
        System::Mover | System::Failover => {}
    }
    let mut settings = BTreeMap::from([
        ("fencing".into(), switch_name(m.fencing)),
        ("on_renew_failure".into(), switch_name(m.on_renew_failure)),
        ("on_lost".into(), switch_name(m.on_lost)),
        (
            "check_expiry_before_write".into(),
            m.check_expiry_before_write.to_string(),
        ),
        ("election".into(), switch_name(m.election)),
        ("renew_on_thread".into(), m.renew_on_thread.to_string()),
        ("command".into(), command),
        ("lease_s".into(), l.lease_s.to_string()),
        ("poll_s".into(), l.poll_s.to_string()),
        ("copy_s".into(), l.copy_s.to_string()),
        ("time_scale_ms".into(), s.file.time_scale_ms.to_string()),
    ]);
    // Only a service other than the claim row is said (stored runs keep their settings).
    if s.file.lock.service != crate::lock::LockKind::Claims {
        settings.insert("lock".into(), s.file.lock.service.name().to_string());
    }
    if s.file.lock.members != 1 {
        settings.insert("lock_members".into(), s.file.lock.members.to_string());
    }
    settings
}

/// One spec per box: the program (a `--mover-cmd` or the reference mover with its switches),
/// the mover protocol's environment through the box's links, and libfaketime for the boxes a
/// clock fault targets.
pub fn specs(
    scenario: &Scenario,
    urls: &LinkUrls,
    shards: &[String],
    log_dir: &Path,
) -> anyhow::Result<Vec<MoverSpec>> {
    let s = &scenario.file;
    let program = match &s.mover.command {
        Some(cmd) => MoverProgram::Shell(cmd.clone()),
        None => MoverProgram::Exec {
            program: reference_program(s.system)?,
            args: reference_args(s),
        },
    };
    let clocked = clock::clocked(scenario);
    let real = |scenario_s: f64| scenario.real_ms(scenario_s * 1000.0).to_string();
    let mut out = Vec::new();
    for b in &scenario.topology().boxes {
        let shard_urls = shards
            .iter()
            .map(|n| format!("{n}={}", urls.mover(&chaos_nemesis::Link::name(b, n))))
            .collect::<Vec<_>>()
            .join(",");
        let mut env = vec![
            (env::BOX.to_string(), b.clone()),
            (env::JOB.into(), s.lease.job.clone()),
            (
                env::ROUTING_URL.into(),
                urls.mover(&format!("{b}->routing")),
            ),
            (env::SHARD_URLS.into(), shard_urls),
            (env::LEASE_MS.into(), real(s.lease.lease_s)),
            (env::POLL_MS.into(), real(s.lease.poll_s)),
            (env::COPY_MS.into(), real(s.lease.copy_s)),
            (env::BATCHES.into(), s.lease.batches.to_string()),
        ];
        // Every member's client endpoint, each through the box's own link to it.
        let lock_addrs: Vec<String> = s
            .lock
            .member_names()
            .iter()
            .map(|m| urls.mover_addr(&chaos_nemesis::Link::name(b, m)))
            .collect();
        env.extend(crate::lock::box_env(
            &s.lock,
            &s.lease.job,
            scenario.real_ms(s.lease.lease_s * 1000.0),
            &urls.mover(&format!("{b}->routing")),
            &lock_addrs,
        ));
        if clocked.contains(b) {
            env.extend(clock::mover_env(log_dir, b)?);
        }
        out.push(MoverSpec {
            box_name: b.clone(),
            program: program.clone(),
            env,
            log_path: log_dir.join(format!("{b}.log")),
            reads_gate: s.mover.ready == scenario::Ready::Gate,
            ready_timeout: Duration::from_secs_f64(s.mover.ready_timeout_real_s),
        });
    }
    Ok(out)
}
