//! `slicer`: each chunk cut into slices of about `average_size` bytes, `delay` microseconds apart.

use super::{Flow, Head, Toxic};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct Slicer {
    /// Bytes per slice, on average.
    average_size: i64,
    /// Bytes either side of `average_size`, drawn per slice.
    size_variation: i64,
    /// Microseconds between slices.
    delay: i64,
}

impl Toxic for Slicer {
    const TYPE: &'static str = "slicer";
    const GO_STRUCT: &'static str = "SlicerToxic";
    type State = ();

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![
            ("average_size", self.average_size),
            ("size_variation", self.size_variation),
            ("delay", self.delay),
        ]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        match name {
            "average_size" => self.average_size = value,
            "size_variation" => self.size_variation = value,
            "delay" => self.delay = value,
            _ => {}
        }
    }

    fn start(&self, _now: Instant, _before: Option<()>) {}

    fn pipe(&self, _state: &mut (), head: &mut Head<'_>) -> Flow {
        if let Some(at) = head.waited() {
            if head.now < at {
                return Flow::Wait(at);
            }
        }
        let len = head.chunk.data.len() as i64;
        // Same stop rule as Toxiproxy's SlicerToxic.chunk; average_size <= 0 would recurse for
        // ever there, so it passes data unsliced here.
        if self.average_size > 0 && len - self.average_size > self.size_variation {
            let size = head.rng.vary(self.average_size, self.size_variation);
            let at = head.now + Duration::from_micros(self.delay.max(0) as u64);
            head.split_off(size.clamp(1, len - 1) as usize, Some(at));
        }
        Flow::Pass
    }
}
