//! The workload: the schema the mover protocol promises, and the reference mover (`mover`, run by `bin/mover.rs`); the failover system's app and reference watcher (`failover`, run by `bin/watcher.rs`).

pub mod failover;
pub mod galewatch;
pub mod ingest;
pub mod mover;
pub mod schema;
