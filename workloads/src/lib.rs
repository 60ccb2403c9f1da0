//! The workload: the schema the mover protocol promises, and the reference mover (`mover`, run by `bin/mover.rs`).

pub mod galewatch;
pub mod ingest;
pub mod mover;
pub mod schema;
