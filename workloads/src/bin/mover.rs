//! The reference mover: one "box" of the mover protocol, moving turbines between shards under a lease (see `chaos_workloads::mover`).

use chaos_workloads::mover::{Args, Env, Exit, Mover, Settings};
use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // clap exits 2 on a bad flag, which is the protocol's "bad input" too.
    let args = Args::parse();
    let env = match Env::from_vars(|name| std::env::var(name).ok()) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("mover: {e}");
            return ExitCode::from(Exit::BadInput as u8);
        }
    };
    let settings = Settings::new(&args, env);
    // One thread: the mover is sequential by design, and the connection tasks run while it waits.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mover: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Failure as u8);
        }
    };
    let exit = runtime.block_on(Mover::new(settings).run());
    ExitCode::from(exit as u8)
}
