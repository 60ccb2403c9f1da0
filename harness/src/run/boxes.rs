//! The boxes of a run: each mover's program and argv (its system's, `systems/`) and protocol environment (real milliseconds, already scaled), rendered once from the typed scenario.

use crate::backend::{MoverProgram, MoverSpec};
use crate::faults::clock;
use crate::scenario::{self, Scenario};
use crate::testbed::LinkUrls;
use chaos_workloads::mover::env;
use std::path::Path;
use std::time::Duration;

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
            program: crate::systems::reference_program(s.system)?,
            args: crate::systems::of(s.system).reference_args(s),
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
