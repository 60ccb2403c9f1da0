//! The flags that choose the system under test and how it runs, shared by `chaos run` and `chaos nightly`: the reference mover's switches or a team's `--mover-cmd`, the backend, the proxy, the scale.

use super::options::RunOptions;
use crate::backend::BackendKind;
use crate::scenario;
use crate::values;

/// What `chaos run` and `chaos nightly` take for the system under test.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SutArgs {
    /// Fencing tokens checked by the shards: off (April) or on.
    #[arg(long, value_enum)]
    pub fencing: Option<scenario::Fencing>,
    /// What the holder does when a renewal cannot reach the routing db.
    #[arg(long, value_enum)]
    pub on_renew_failure: Option<scenario::OnRenewFailure>,
    /// What the holder does when a renewal shows it lost the claim.
    #[arg(long, value_enum)]
    pub on_lost: Option<scenario::OnLost>,
    /// The "local check" variant: check the lease's expiry on the mover's own clock before each write.
    #[arg(long)]
    pub check_expiry_before_write: bool,
    /// The reference mover renews the claim from a task of its own, every third of a lease, whatever its work is doing.
    #[arg(long)]
    pub renew_on_thread: bool,
    /// lease (claim with expiry) or unique (lesson 007's at-most-once insert).
    #[arg(long, value_enum)]
    pub election: Option<scenario::Election>,
    /// The payout (system payout): send each payment with an idempotency key the processor refuses to see twice.
    #[arg(long)]
    pub idempotent: bool,
    /// The ten objects (system ten-objects): off, write (each object write guarded by its token), grant (and all ten fenced when the claim is taken) or pointer (a version written beside the live one, then one pointer flipped by compare-and-set).
    #[arg(long, value_enum)]
    pub objects_fence: Option<scenario::ObjectsFence>,
    /// Lease length in scenario time, e.g. 60s, 5s, 1m.
    #[arg(long, value_parser = values::lease_s, allow_hyphen_values = true)]
    pub lease: Option<f64>,
    /// The lock service that holds the lease: claims (the routing db's claim row), advisory
    /// (a Postgres advisory lock) or etcd (a real etcd 3.4 member).
    #[arg(long, value_enum)]
    pub lock: Option<crate::lock::LockKind>,
    /// How many members the lock service runs: 1, or 3 (etcd: lock-1, lock-2, lock-3, their
    /// peer traffic through the proxy; faults may name a member or lock-leader).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub lock_members: Option<u8>,
    /// Redis: a primary and an asynchronous replica (lock-2, replicating through the link
    /// lock-2->lock), promoted by the harness's sentinel on the primary's silence.
    #[arg(long)]
    pub lock_replica: bool,
    /// Run this program (following the mover protocol, docs/mover-protocol.md) instead of the reference mover.
    #[arg(long)]
    pub mover_cmd: Option<String>,
    /// How the --mover-cmd says it is ready: exec (a shell holds it before it starts) or gate (it reads CHAOS_GATE itself once connected).
    #[arg(long, value_enum)]
    pub mover_ready: Option<scenario::Ready>,
    /// Restart a mover that exits non-zero, as a supervisor would (on-failure), or never.
    #[arg(long, value_enum)]
    pub restart: Option<scenario::Restart>,
    /// Where the databases and movers run [default: process].
    #[arg(long, value_enum)]
    pub backend: Option<BackendKind>,
    /// Real milliseconds per scenario second (default: the scenario's, 10).
    #[arg(long, value_parser = values::time_scale_ms, allow_hyphen_values = true)]
    pub time_scale_ms: Option<f64>,
    /// Seeded readings per turbine (default: the scenario's; 15768 is 1/1000 of a year at 2 s).
    #[arg(long, value_parser = values::count_u32, allow_hyphen_values = true)]
    pub rows_per_turbine: Option<u32>,
    /// Duplicated rows make the run invalid (default: reported as cleanup work).
    #[arg(long)]
    pub strict_duplicates: bool,
    /// Use the Toxiproxy server at HOST:PORT instead of the embedded one.
    #[arg(long)]
    pub toxiproxy: Option<String>,
    /// Failover scenarios: the reference watcher fences the old primary before it promotes (on) or does not (off).
    #[arg(long, value_enum)]
    pub fence: Option<crate::failover::settings::Fence>,
    /// Failover scenarios: run this program (following docs/watcher-protocol.md) instead of the reference watcher.
    #[arg(long)]
    pub watcher_cmd: Option<String>,
    /// Failover scenarios: how the --watcher-cmd says it is ready: exec or gate (as --mover-ready).
    #[arg(long, value_enum)]
    pub watcher_ready: Option<scenario::Ready>,
    /// Failover scenarios: the watcher's silence constant in scenario time, e.g. 30s, 5s.
    #[arg(long, value_parser = values::silence_s, allow_hyphen_values = true)]
    pub silence: Option<f64>,
}

impl SutArgs {
    /// The run options for `scenario` with these flags (overrides win over the scenario file).
    pub fn options(&self, scenario: &str, seed: Option<u64>) -> RunOptions {
        RunOptions {
            scenario: scenario.to_string(),
            fencing: self.fencing,
            on_renew_failure: self.on_renew_failure,
            on_lost: self.on_lost,
            check_expiry_before_write: self.check_expiry_before_write,
            renew_on_thread: self.renew_on_thread,
            election: self.election,
            idempotent: self.idempotent,
            objects_fence: self.objects_fence,
            lease_s: self.lease,
            lock: self.lock,
            lock_members: self.lock_members,
            lock_replica: self.lock_replica,
            seed,
            mover_cmd: self.mover_cmd.clone(),
            time_scale_ms: self.time_scale_ms,
            rows_per_turbine: self.rows_per_turbine,
            strict_duplicates: self.strict_duplicates,
            toxiproxy: self.toxiproxy.clone(),
            backend: self.backend,
            mover_ready: self.mover_ready,
            restart: self.restart,
            failover: crate::failover::settings::Overrides {
                fence: self.fence,
                watcher_cmd: self.watcher_cmd.clone(),
                watcher_ready: self.watcher_ready,
                silence_s: self.silence,
            },
            ..Default::default()
        }
    }

    /// True when any flag changes the scenario as stored (a replay runs it as it was).
    pub fn changes_the_scenario(&self) -> bool {
        self.fencing.is_some()
            || self.on_renew_failure.is_some()
            || self.on_lost.is_some()
            || self.check_expiry_before_write
            || self.renew_on_thread
            || self.election.is_some()
            || self.idempotent
            || self.objects_fence.is_some()
            || self.lease.is_some()
            || self.lock.is_some()
            || self.lock_members.is_some()
            || self.lock_replica
            || self.mover_cmd.is_some()
            || self.mover_ready.is_some()
            || self.restart.is_some()
            || self.time_scale_ms.is_some()
            || self.rows_per_turbine.is_some()
            || self.fence.is_some()
            || self.watcher_cmd.is_some()
            || self.watcher_ready.is_some()
            || self.silence.is_some()
    }
}
