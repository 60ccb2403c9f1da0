//! The harness as a library: scenarios, backends, runs, the nemesis at work, results. The `chaos` binary is its command line; integration tests use it directly.

pub mod audit;
pub mod backend;
pub mod bench;
pub mod bench_proxy;
pub mod check;
pub mod db;
pub mod faults;
pub mod links;
pub mod movers;
pub mod pg;
pub mod procs;
pub mod progress;
pub mod results;
pub mod run;
pub mod scenario;
pub mod setup;
pub mod sweep;
pub mod testbed;
pub mod triggers;
pub mod up;
pub mod values;
pub mod wire;
