//! The reference payer: one box of lesson 007's monthly payout (see `chaos_workloads::designs::payout`).

use chaos_workloads::designs::payout::{run, PayerArgs};
use chaos_workloads::mover::{Env, Exit};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = PayerArgs::parse();
    let env = match Env::from_vars(|name| std::env::var(name).ok()) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("payer: {e}");
            return ExitCode::from(Exit::BadInput as u8);
        }
    };
    chaos_workloads::designs::block_on("payer", run(args, env))
}
