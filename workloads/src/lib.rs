//! The workload: the schema the protocols promise, the reference mover (`mover`, run by `bin/mover.rs`), the seed's other designs (`designs`: `bin/payer.rs`, `bin/updater.rs`) and the failover system's app and reference watcher (`failover`, run by `bin/watcher.rs`).

pub mod designs;
pub mod failover;
pub mod galewatch;
pub mod ingest;
pub mod lock;
pub mod lock_sql;
pub mod mover;
pub mod schema;
