//! The harness's integration tests as one binary (one link, not one per file): each file beside this one is a module, run as `suite::<file>::<test>` (`cargo nextest run -p chaos-harness -E 'test(/^april::/)'`, or `cargo test -p chaos-harness --test suite april::`). `.config/nextest.toml` says which of them run alone.

mod common;
/// What several files check the same way: a failover run's figures, April's and gc-pause's.
mod support {
    pub mod failover;
    pub mod figures;
}

mod april;
mod bench_audit;
mod check_cli;
mod compose;
mod designs;
mod docker;
mod failover;
mod failover_docker;
mod failover_sweep;
mod faults;
mod foreign_mover;
mod foreign_watcher;
mod leftovers;
mod lock_redis;
mod lock_services;
mod lock_zookeeper;
mod nightly;
mod process_backend;
mod production_faults;
mod report_browser;
mod run_ends;
mod setup_mistakes;
mod sweep;
mod triggers;
