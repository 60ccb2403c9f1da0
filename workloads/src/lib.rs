//! The workload: the schema the mover protocol promises, and (in `bin/mover.rs`) the reference mover.

pub mod schema;
