//! The seed's other designs as reference programs, each one box of a system the harness runs and judges: the payer (lesson 007's payout lock, `payer`) and the updater (ten objects under one lease, `updater`), on a small lock client they share.
//!
//! Like the mover, each knows only its protocol (the CHAOS_* environment and its tables) and
//! never knows it is being tested.

pub mod lock;
pub mod objects;
pub mod payout;

/// Run a program's future on one thread (the programs are sequential by design) and turn its
/// exit into the process's.
pub fn block_on(
    program: &str,
    run: impl std::future::Future<Output = crate::mover::Exit>,
) -> std::process::ExitCode {
    use crate::mover::Exit;
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => std::process::ExitCode::from(rt.block_on(run) as u8),
        Err(e) => {
            eprintln!("{program}: cannot start the async runtime: {e}");
            std::process::ExitCode::from(Exit::Failure as u8)
        }
    }
}
