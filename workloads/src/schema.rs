//! The SQL the harness installs: the lock service and the plans on the routing db; readings, fence and audit on every shard; the payout ledger and the ten objects for their systems.

/// Routing db: `claims`, `claim_tokens`, `move_plan`, `claim_acquire/renew/release`, `job_runs`, claim audit.
pub const ROUTING_SQL: &str = include_str!("../sql/routing.sql");
/// Shard: `readings`, `mover_fence`, the audit table and trigger functions.
pub const SHARD_SQL: &str = include_str!("../sql/shard.sql");
/// Shard: the audit triggers, installed after seeding.
pub const SHARD_AUDIT_SQL: &str = include_str!("../sql/shard-audit.sql");
/// The payout's card processor (system `payout`): the ledger that takes every payment.
pub const PROCESSOR_SQL: &str = include_str!("../sql/processor.sql");
/// Ten objects (system `ten-objects`): objects, side versions, pointer, audit functions.
pub const OBJECTS_SQL: &str = include_str!("../sql/objects.sql");
/// Ten objects: the audit triggers, installed after the initial version.
pub const OBJECTS_AUDIT_SQL: &str = include_str!("../sql/objects-audit.sql");
