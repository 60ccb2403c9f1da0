//! The harness as a library: scenarios, backends, runs, the nemesis at work, results. The `chaos` binary is its command line; integration tests use it directly.

pub mod audit;
pub mod backend;
pub mod bench;
pub mod bench_faults;
pub mod bench_lock;
pub mod bench_proxy;
pub mod check;
pub mod db;
pub mod failover;
pub mod faketime;
pub mod faults;
pub mod install;
pub mod link_events;
pub mod links;
pub mod lock;
pub mod movers;
pub mod nightly;
pub mod owned;
pub mod pg;
pub mod ports;
pub mod procs;
pub mod program;
pub mod progress;
pub mod reap;
pub mod results;
pub mod run;
pub mod scenario;
pub mod setup;
pub mod shrink;
pub mod sweep;
pub mod systems;
pub mod testbed;
pub mod triggers;
pub mod up;
pub mod values;
pub mod wire;

/// An error and its causes on one line, each cause once. Each level should say only what
/// it adds (an error that prints its cause does not also chain it); where one still quotes
/// its cause, the cause is not printed again.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if line.contains(cause.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line.replace('\n', " ")
}
