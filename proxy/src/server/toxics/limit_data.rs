//! `limit_data`: the connection closed once `bytes` have passed, the last chunk cut to fit.

use super::{End, Flow, Head, Toxic};
use tokio::time::Instant;

#[derive(Debug, Clone, Default)]
pub(crate) struct LimitData {
    /// Bytes passed before the close.
    bytes: i64,
}

/// Bytes passed so far on the connection.
#[derive(Default)]
pub(crate) struct Sent {
    bytes: i64,
}

impl Toxic for LimitData {
    const TYPE: &'static str = "limit_data";
    const GO_STRUCT: &'static str = "LimitDataToxic";
    type State = Sent;

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        vec![("bytes", self.bytes)]
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        if name == "bytes" {
            self.bytes = value;
        }
    }

    /// The count survives an update, as Toxiproxy keeps a stateful toxic's state on its stub.
    fn start(&self, _now: Instant, before: Option<Sent>) -> Sent {
        before.unwrap_or_default()
    }

    fn pipe(&self, sent: &mut Sent, head: &mut Head<'_>) -> Flow {
        let remaining = self.bytes - sent.bytes;
        if remaining <= 0 {
            return Flow::End(End::Close);
        }
        if (head.chunk.data.len() as i64) > remaining {
            head.chunk.data.truncate(remaining as usize);
        }
        sent.bytes += head.chunk.data.len() as i64;
        if sent.bytes >= self.bytes {
            head.chunk.close_after = true;
        }
        Flow::Pass
    }
}
