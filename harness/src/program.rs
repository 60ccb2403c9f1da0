//! How a program under test (a mover, a watcher) says it is ready and what the supervisor does when it exits: settings every system's section shares (`scenario` re-exports them).

use serde::{Deserialize, Serialize};

/// How a user's program says "connected, ready" (the reference programs always read their gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Ready {
    /// A shell reads the gate, then execs the command: the clock starts before it does.
    #[default]
    Exec,
    /// The command reads one line from the fifo `CHAOS_GATE` once connected.
    Gate,
}

/// The supervisor's restart policy for programs that exit on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// Restarted after `restart_delay_s` when it exits non-zero or by a signal the nemesis did
    /// not send (systemd's `Restart=on-failure`).
    #[default]
    OnFailure,
    /// Never restarted (only a nemesis kill with a duration restarts it).
    Never,
}
