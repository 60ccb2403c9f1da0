//! `bandwidth`: data let through at `rate` KB/s, in pieces of at most 100 ms worth.

use super::{Flow, Head, Toxic};
use std::time::Duration;
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct Bandwidth {
    /// KB/s (1 KB = 1000 bytes in Toxiproxy's arithmetic); 0 = unlimited.
    rate: i64,
}

/// When the connection is free to send again.
#[derive(Default)]
pub(crate) struct Busy {
    until: Option<Instant>,
}

impl Toxic for Bandwidth {
    const TYPE: &'static str = "bandwidth";
    const GO_STRUCT: &'static str = "BandwidthToxic";
    type State = Busy;

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![("rate", self.rate)]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        if name == "rate" {
            self.rate = value;
        }
    }

    fn start(&self, _now: Instant, _before: Option<Busy>) -> Busy {
        Busy::default()
    }

    fn pipe(&self, busy: &mut Busy, head: &mut Head<'_>) -> Flow {
        if self.rate <= 0 {
            return Flow::Pass;
        }
        let at = match head.waited() {
            Some(at) => at,
            None => {
                // Toxiproxy sends at most rate*100 bytes (100 ms worth) at a time.
                let max_piece = (self.rate as usize).saturating_mul(100).max(1);
                if head.chunk.data.len() > max_piece {
                    head.split_off(max_piece, None);
                }
                let start = busy.until.map_or(head.now, |b| b.max(head.now));
                let cost = Duration::from_nanos(
                    (head.chunk.data.len() as u64).saturating_mul(1_000_000) / self.rate as u64,
                );
                busy.until = Some(start + cost);
                start + cost
            }
        };
        if head.now < at {
            Flow::Wait(at)
        } else {
            Flow::Pass
        }
    }
}
