//! `noop`: data passes through unchanged, as with Toxiproxy's registered `noop`.

use super::{Flow, Head, Toxic};
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct Noop;

impl Toxic for Noop {
    const TYPE: &'static str = "noop";
    const GO_STRUCT: &'static str = "NoopToxic";
    type State = ();

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        Vec::new()
    }

    fn set_attribute(&mut self, _name: &str, _value: i64) {}

    fn start(&self, _now: Instant, _before: Option<()>) {}

    fn pipe(&self, _state: &mut (), _head: &mut Head<'_>) -> Flow {
        Flow::Pass
    }
}
