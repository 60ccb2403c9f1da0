//! What `chaos run` is asked (`RunOptions`) and what a run hands back.

use crate::backend::BackendKind;
use crate::scenario::{self, Scenario};
use chaos_checkers::Verdict;
use std::path::PathBuf;
use std::sync::Arc;

/// What `chaos run` was asked, after parsing; overrides win over the scenario file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub scenario: String,
    pub fencing: Option<scenario::Fencing>,
    pub on_renew_failure: Option<scenario::OnRenewFailure>,
    pub on_lost: Option<scenario::OnLost>,
    pub check_expiry_before_write: bool,
    pub renew_on_thread: bool,
    pub election: Option<scenario::Election>,
    /// System payout: payments carry an idempotency key (overrides `[payout] idempotent`).
    pub idempotent: bool,
    /// System ten-objects: the updater's design (overrides `[objects] fence`).
    pub objects_fence: Option<scenario::ObjectsFence>,
    pub lease_s: Option<f64>,
    /// The lock service that holds the lease (overrides `[lock] service`).
    pub lock: Option<crate::lock::LockKind>,
    /// How many members the lock service runs (overrides `[lock] members`).
    pub lock_members: Option<u8>,
    /// Redis with a replica (sets `[lock] replica`).
    pub lock_replica: bool,
    pub seed: Option<u64>,
    pub mover_cmd: Option<String>,
    pub time_scale_ms: Option<f64>,
    pub rows_per_turbine: Option<u32>,
    pub strict_duplicates: bool,
    pub toxiproxy: Option<String>,
    pub results: PathBuf,
    pub quiet: bool,
    /// Faults added on top of the scenario's (the sweep's latency profile).
    pub extra_faults: Vec<chaos_nemesis::Fault>,
    /// Name for the results folder (default: the scenario's name).
    pub label: Option<String>,
    pub backend: Option<BackendKind>,
    /// How a `--mover-cmd` says it is ready (overrides `[mover] ready`).
    pub mover_ready: Option<scenario::Ready>,
    /// The supervisor's restart policy (overrides `[mover] restart`).
    pub restart: Option<scenario::Restart>,
    /// A scenario already made (a replay, a shrink's candidate): run as it is, no overrides.
    pub prepared: Option<Arc<Scenario>>,
    /// The failover system's overrides (`--fence`, `--watcher-cmd`, ...).
    pub failover: crate::failover::settings::Overrides,
    /// Dangerous moments a generated schedule should seek (a nightly campaign's, `run/seek.rs`).
    pub seek: Vec<chaos_history::Moment>,
}

impl RunOptions {
    /// The first of the mover's own flags given, to refuse it for another system.
    pub fn mover_flag(&self) -> Option<&'static str> {
        [
            (self.fencing.is_some(), "--fencing"),
            (self.on_renew_failure.is_some(), "--on-renew-failure"),
            (self.on_lost.is_some(), "--on-lost"),
            (
                self.check_expiry_before_write,
                "--check-expiry-before-write",
            ),
            (self.renew_on_thread, "--renew-on-thread"),
            (self.election.is_some(), "--election"),
            (self.lease_s.is_some(), "--lease"),
            (self.lock.is_some(), "--lock"),
            (self.lock_members.is_some(), "--lock-members"),
            (self.lock_replica, "--lock-replica"),
            (self.mover_cmd.is_some(), "--mover-cmd"),
            (self.mover_ready.is_some(), "--mover-ready"),
            (self.rows_per_turbine.is_some(), "--rows-per-turbine"),
        ]
        .into_iter()
        .find(|(given, _)| *given)
        .map(|(_, flag)| flag)
    }
}

/// What a finished run hands back.
pub struct RunOutcome {
    pub dir: PathBuf,
    pub verdict: Verdict,
    pub figures: serde_json::Value,
}

/// Real seconds spent in each phase outside the scenario itself.
pub struct Timings {
    pub cluster_s: f64,
    /// The lock service's own server, from its first member's spawn to every member answering
    /// with a leader (part of `cluster_s`; 0 when the lock lives in the routing db).
    pub lock_s: f64,
    pub seed_s: f64,
    pub final_s: f64,
}

/// The frame every system's run opens with: the line naming the run and its directory, and
/// `config.json` (the resolved scenario, seed, git commit, backend), then the testbed's
/// options for that directory.
pub(crate) fn open_run(
    opts: &RunOptions,
    scenario: &Scenario,
    backend: BackendKind,
    dir: &crate::results::RunDir,
) -> anyhow::Result<crate::testbed::BedOptions> {
    let s = &scenario.file;
    crate::progress::say(
        opts.quiet,
        &format!(
            "chaos: {} (seed {}) -> {}",
            s.name,
            s.seed,
            dir.path.display()
        ),
    );
    crate::results::write_json(
        &dir.file("config.json"),
        &serde_json::json!({ "scenario": scenario, "seed": s.seed, "git_commit": crate::results::git_commit(), "backend": backend, "toxiproxy": opts.toxiproxy }),
    )?;
    Ok(crate::testbed::BedOptions {
        backend,
        toxiproxy: opts.toxiproxy.clone(),
        log_dir: dir.logs.clone(),
        run_id: dir.run_id.clone(),
    })
}
