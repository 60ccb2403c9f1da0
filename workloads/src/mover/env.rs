//! The mover protocol's environment variables (DESIGN section 5), one text for the harness
//! that sets them and the reference mover that reads them. Durations are real ms, already
//! scaled from the scenario's seconds.

pub use crate::lock::{LOCK_KEY_VAR as LOCK_KEY, LOCK_URLS_VAR as LOCK_URLS, LOCK_VAR as LOCK};

/// This box's name (`box-2`): its history lines and `application_name`.
pub const BOX: &str = "CHAOS_BOX";
/// The job's name: the key of its claim row.
pub const JOB: &str = "CHAOS_JOB";
/// The routing db (the plan, and the claim row), through this box's link to it.
pub const ROUTING_URL: &str = "CHAOS_ROUTING_URL";
/// `name=URL` pairs, comma-separated: every shard through this box's link to it.
pub const SHARD_URLS: &str = "CHAOS_SHARD_URLS";
/// The lease, how often a box without it looks, one turbine's copy.
pub const LEASE_MS: &str = "CHAOS_LEASE_MS";
pub const POLL_MS: &str = "CHAOS_POLL_MS";
pub const COPY_MS: &str = "CHAOS_COPY_MS";
/// How many batches a turbine's copy is cut into.
pub const BATCHES: &str = "CHAOS_BATCHES";
/// With `--mover-ready gate` (and always for the reference mover): a fifo to read one line
/// from once connected, the run's clock starting when every box has.
pub const GATE: &str = "CHAOS_GATE";
