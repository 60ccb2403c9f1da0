//! The workload: the schema the protocols promise, the reference mover (`mover`, run by `bin/mover.rs`) and the seed's other designs (`designs`: `bin/payer.rs`, `bin/updater.rs`).

pub mod designs;
pub mod galewatch;
pub mod ingest;
pub mod lock_sql;
pub mod mover;
pub mod schema;
