//! The SQL the harness installs: the lock service and move plan on the routing db, readings, fence and audit on every shard.

/// Routing db: `claims`, `claim_tokens`, `move_plan`, `claim_acquire/renew/release`, `job_runs`, claim audit.
pub const ROUTING_SQL: &str = include_str!("../sql/routing.sql");
/// Shard: `readings`, `mover_fence`, the audit table and trigger functions.
pub const SHARD_SQL: &str = include_str!("../sql/shard.sql");
/// Shard: the audit triggers, installed after seeding.
pub const SHARD_AUDIT_SQL: &str = include_str!("../sql/shard-audit.sql");
