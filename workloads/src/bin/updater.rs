//! The reference updater: one box publishing a ten-object configuration under one lease (see `chaos_workloads::designs::objects`).

use chaos_workloads::designs::objects::{run, UpdaterArgs};
use chaos_workloads::mover::{Env, Exit};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = UpdaterArgs::parse();
    let env = match Env::from_vars(|name| std::env::var(name).ok()) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("updater: {e}");
            return ExitCode::from(Exit::BadInput as u8);
        }
    };
    chaos_workloads::designs::block_on("updater", run(args, env))
}
