//! `reset_peer`: a TCP RST `timeout` ms after the next data (or after the close), which it swallows.

use super::{ms, Close, End, Flow, Head, Toxic};
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct ResetPeer {
    /// Milliseconds from the first data (or the close) to the RST.
    timeout: i64,
}

/// When the RST fires, once data has arrived.
#[derive(Default)]
pub(crate) struct Armed {
    at: Option<Instant>,
}

impl Toxic for ResetPeer {
    const TYPE: &'static str = "reset_peer";
    const GO_STRUCT: &'static str = "ResetToxic";
    type State = Armed;

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![("timeout", self.timeout)]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        if name == "timeout" {
            self.timeout = value;
        }
    }

    fn start(&self, _now: Instant, _before: Option<Armed>) -> Armed {
        Armed::default()
    }

    fn pipe(&self, armed: &mut Armed, head: &mut Head<'_>) -> Flow {
        if armed.at.is_none() {
            armed.at = Some(head.now + ms(self.timeout));
        }
        Flow::Drop
    }

    fn deadline(&self, armed: &Armed) -> Option<(Instant, End)> {
        armed.at.map(|at| (at, End::Reset))
    }

    fn on_eof(&self, close: &mut Close) {
        close.at += ms(self.timeout);
        close.end = End::Reset;
    }
}
