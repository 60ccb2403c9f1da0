//! Each system under test in one home, behind one interface ([`SystemUnderTest`]): its
//! reference program and argv, the settings the run's record keeps, the design's part of the
//! record, what it installs before the run and what it reads back at the end. [`of`] is the
//! one dispatch on the system; the run frame (`run/`) asks the system it was handed.
//!
//! The mover (`mover.rs`), the payout lock (`payout.rs`) and the ten objects
//! (`ten_objects.rs`) share the mover's testbed: routing db, shards, boxes, a proxy on every
//! link. The failover watcher (`failover.rs`) has its own frame and testbed (`failover/`).

mod interface;

pub mod failover;
pub mod mover;
pub mod payout;
pub mod ten_objects;

pub use interface::{Settings, ShardUrl, SystemUnderTest};

use crate::scenario::System;
use std::path::PathBuf;

/// The system under test a scenario names: the one dispatch on [`System`] in the harness.
pub fn of(system: System) -> &'static dyn SystemUnderTest {
    match system {
        System::Mover => &mover::Mover,
        System::Payout => &payout::Payout,
        System::TenObjects => &ten_objects::TenObjects,
        System::Failover => &failover::Failover,
    }
}

/// The system's reference program, built beside this binary.
pub fn reference_program(system: System) -> anyhow::Result<PathBuf> {
    let system = of(system);
    let name = system.program();
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no folder for {}", exe.display()))?;
    for candidate in [dir.join(name), dir.join("..").join(name)] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    anyhow::bail!(
        "the reference {name} is not built beside {}: run `cargo build --release -p chaos-workloads` (or give {})",
        exe.display(),
        system.own_program_flag()
    )
}

#[cfg(test)]
mod tests;
