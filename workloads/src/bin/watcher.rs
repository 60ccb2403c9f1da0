//! The reference watcher of the failover system: promotes the replica on silence, with or without a fence (see `chaos_workloads::failover::watcher`).

use chaos_workloads::failover::watcher::{run, Args, Env};
use chaos_workloads::failover::Exit;
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Args::parse();
    let env = match Env::from_vars(|name| std::env::var(name).ok()) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("watcher: {e}");
            return ExitCode::from(Exit::BadInput as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("watcher: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Failure as u8);
        }
    };
    ExitCode::from(runtime.block_on(run(args, env)) as u8)
}
