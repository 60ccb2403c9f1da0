//! `slow_close`: the close of the connection passed on `delay` ms late.

use super::{ms, Close, Flow, Head, Toxic};
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct SlowClose {
    /// Milliseconds before the close is passed on.
    delay: i64,
}

impl Toxic for SlowClose {
    const TYPE: &'static str = "slow_close";
    const GO_STRUCT: &'static str = "SlowCloseToxic";
    type State = ();

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![("delay", self.delay)]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        if name == "delay" {
            self.delay = value;
        }
    }

    fn start(&self, _now: Instant, _before: Option<()>) {}

    fn pipe(&self, _state: &mut (), _head: &mut Head<'_>) -> Flow {
        Flow::Pass
    }

    fn on_eof(&self, close: &mut Close) {
        close.at += ms(self.delay);
    }
}
