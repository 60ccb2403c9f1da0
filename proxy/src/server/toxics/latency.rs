//! `latency`: every chunk delayed `latency` ± `jitter` ms from its arrival, so delays never add up behind one another.

use super::{ms, Flow, Head, Toxic};
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct Latency {
    /// Milliseconds.
    latency: i64,
    /// Milliseconds either side of `latency`, drawn per chunk.
    jitter: i64,
}

impl Toxic for Latency {
    const TYPE: &'static str = "latency";
    const GO_STRUCT: &'static str = "LatencyToxic";
    type State = ();

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![("latency", self.latency), ("jitter", self.jitter)]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        match name {
            "latency" => self.latency = value,
            "jitter" => self.jitter = value,
            _ => {}
        }
    }

    fn start(&self, _now: Instant, _before: Option<()>) {}

    fn pipe(&self, _state: &mut (), head: &mut Head<'_>) -> Flow {
        // Drawn once per chunk: offered again after its wait, it keeps its instant.
        let at = match head.waited() {
            Some(at) => at,
            None => head.chunk.ts + ms(head.rng.vary(self.latency, self.jitter)),
        };
        if head.now < at {
            return Flow::Wait(at);
        }
        // A later latency toxic counts from here, as Toxiproxy moves the chunk's timestamp.
        head.chunk.ts = at;
        Flow::Pass
    }
}
