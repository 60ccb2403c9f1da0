//! `timeout`: data swallowed, and the connection closed `timeout` ms after the last of it (0 = a black hole for ever).

use super::{ms, End, Flow, Head, Toxic};
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct Timeout {
    /// Milliseconds of quiet before the close; 0 = never close.
    timeout: i64,
}

/// When the toxic started on the connection, or the last data it swallowed.
pub(crate) struct Quiet {
    since: Instant,
}

impl Toxic for Timeout {
    const TYPE: &'static str = "timeout";
    const GO_STRUCT: &'static str = "TimeoutToxic";
    // Toxiproxy's TimeoutToxic.Cleanup closes the link when the toxic is removed.
    const CLOSES_ON_REMOVAL: bool = true;
    type State = Quiet;

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![("timeout", self.timeout)]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        if name == "timeout" {
            self.timeout = value;
        }
    }

    fn start(&self, now: Instant, _before: Option<Quiet>) -> Quiet {
        Quiet { since: now }
    }

    fn pipe(&self, quiet: &mut Quiet, head: &mut Head<'_>) -> Flow {
        // Toxiproxy restarts its close timer on every chunk.
        quiet.since = head.now;
        Flow::Drop
    }

    fn deadline(&self, quiet: &Quiet) -> Option<(Instant, End)> {
        (self.timeout > 0).then(|| (quiet.since + ms(self.timeout), End::Close))
    }
}
