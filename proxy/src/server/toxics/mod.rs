//! The toxic interface, the registry of the toxic types the server serves, and what the pump hands a toxic.
//!
//! As in Toxiproxy (`toxics/toxic.go`), a toxic holds only its attributes; what it keeps per
//! connection is its [`Toxic::State`], made when it starts on a connection and made again on
//! every update (Toxiproxy re-runs the toxic's stub then). The pump (`server::pipe`) offers the
//! chunk at the head of a link's queue to each toxic of the chain in order and does what the
//! toxic answers ([`Flow`]); toxicity rolls, queueing and timers stay in the pump.
//!
//! A new toxic type is one file here implementing [`Toxic`] and one line in [`REGISTRY`].

mod bandwidth;
mod latency;
mod limit_data;
mod noop;
mod reset_peer;
mod slicer;
mod slow_close;
mod timeout;

use std::any::Any;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Every toxic type the server serves, as Toxiproxy's `toxics.Register` calls.
const REGISTRY: &[fn() -> Box<dyn DynToxic>] = &[
    new::<noop::Noop>,
    new::<latency::Latency>,
    new::<bandwidth::Bandwidth>,
    new::<slow_close::SlowClose>,
    new::<timeout::Timeout>,
    new::<reset_peer::ResetPeer>,
    new::<limit_data::LimitData>,
    new::<slicer::Slicer>,
];

/// A toxic of the named type with Go's zero attributes (Toxiproxy's `reflect.New`), if served.
pub(crate) fn by_type(type_name: &str) -> Option<Box<dyn DynToxic>> {
    REGISTRY
        .iter()
        .map(|new| new())
        .find(|t| t.type_name() == type_name)
}

fn new<T: Toxic>() -> Box<dyn DynToxic> {
    Box::new(T::default())
}

/// One toxic type: its attributes, and what it does to a connection's data and close.
///
/// `Default` gives the attributes a toxic is created with before its JSON is decoded onto
/// them (Go's zero values). Attributes are integers on the wire; their names are fixed by
/// Toxiproxy, so each field's unit is said in its doc comment instead.
pub(crate) trait Toxic: Clone + Default + fmt::Debug + Send + Sync + 'static {
    /// The `type` on the wire.
    const TYPE: &'static str;
    /// Toxiproxy's Go struct, named in JSON decode errors as Go's encoding/json names it.
    const GO_STRUCT: &'static str;
    /// Whether removing the toxic closes the connections it is on (Toxiproxy's `CleanupToxic`).
    const CLOSES_ON_REMOVAL: bool = false;
    /// What one connection keeps for this toxic (Toxiproxy keeps it on the `ToxicStub`).
    type State: Send + 'static;

    /// The attributes as `(json name, value)`, in Go struct field order (the JSON's order).
    fn attributes(&self) -> Vec<(&'static str, i64)>;

    /// Set one attribute named by [`Toxic::attributes`].
    fn set_attribute(&mut self, name: &str, value: i64);

    /// The state for a connection the toxic starts on at `now`; `before` is its state under the
    /// toxic's previous attributes when this start is an update.
    fn start(&self, now: Instant, before: Option<Self::State>) -> Self::State;

    /// What the toxic does to the chunk at the head of the queue.
    fn pipe(&self, state: &mut Self::State, head: &mut Head<'_>) -> Flow;

    /// An instant at which the toxic ends the connection with no data needed, and how.
    fn deadline(&self, _state: &Self::State) -> Option<(Instant, End)> {
        None
    }

    /// What the toxic does to the close once the source has ended and the queue drained.
    fn on_eof(&self, _close: &mut Close) {}
}

/// How a connection ends, in escalating order: a harder end overrides a softer one, never the reverse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum End {
    /// A source ended and its queue drained: the other direction drains, then all closes.
    Graceful,
    /// Stop now (a toxic, a write error, the data limit).
    Close,
    /// As `Close`, with SO_LINGER 0 so both peers see a TCP RST.
    Reset,
}

/// A toxic's answer for the chunk it was offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// On to the next toxic (written if this was the last).
    Pass,
    /// Offer it again at this instant; the chunk stays at the head and the rest queue behind it.
    Wait(Instant),
    /// Swallowed: the chunk is not written.
    Drop,
    /// The connection ends now; the chunk is not written.
    End(End),
}

/// When and how a link ends once its source has ended and its queue drained. Toxiproxy passes
/// the close down the chain, so each toxic in order may hold it back or harden it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Close {
    pub at: Instant,
    pub end: End,
}

/// Bytes read in one go from a link's source, on their way through the chain.
pub(crate) struct Chunk {
    pub data: Vec<u8>,
    /// Arrival time, moved forward by each latency toxic it passes (Toxiproxy's
    /// `StreamChunk.Timestamp`).
    pub ts: Instant,
    /// Close the connection once this chunk is written (limit_data reached).
    pub close_after: bool,
    /// The pump's bookkeeping: ids of the toxics the chunk has been through.
    pub(super) applied: Vec<u64>,
    /// The pump's bookkeeping: the wait toxic (id, version) answered for it, kept so offering it
    /// again does not draw a new jitter or charge the bandwidth twice.
    pub(super) pending: Option<(u64, u64, Instant)>,
}

impl Chunk {
    pub(crate) fn arrived(data: Vec<u8>, ts: Instant) -> Chunk {
        Chunk {
            data,
            ts,
            close_after: false,
            applied: Vec::new(),
            pending: None,
        }
    }
}

/// The chunk at the head of a link's queue, offered to one toxic.
pub(crate) struct Head<'a> {
    pub chunk: &'a mut Chunk,
    pub now: Instant,
    pub rng: &'a mut Rng,
    /// The toxic's (id, version), to recognise its own wait on the chunk.
    toxic: (u64, u64),
    rest: Option<Chunk>,
}

impl<'a> Head<'a> {
    pub(super) fn new(
        chunk: &'a mut Chunk,
        now: Instant,
        rng: &'a mut Rng,
        toxic: (u64, u64),
    ) -> Self {
        Head {
            chunk,
            now,
            rng,
            toxic,
            rest: None,
        }
    }

    /// The instant this toxic answered ([`Flow::Wait`]) when last offered this chunk, if any.
    pub fn waited(&self) -> Option<Instant> {
        match self.chunk.pending {
            Some((id, version, at)) if (id, version) == self.toxic => Some(at),
            _ => None,
        }
    }

    /// Cut the chunk after `len` bytes. The rest goes back to the head of the queue, where it is
    /// offered to this toxic again (answered by [`Head::waited`] = `wait`) and then to the ones
    /// after it; a close due after the chunk moves to the rest.
    pub fn split_off(&mut self, len: usize, wait: Option<Instant>) {
        debug_assert!(self.rest.is_none(), "one split per offer");
        let data = self.chunk.data.split_off(len);
        self.rest = Some(Chunk {
            data,
            ts: self.chunk.ts,
            close_after: self.chunk.close_after,
            applied: self.chunk.applied.clone(),
            pending: wait.map(|at| (self.toxic.0, self.toxic.1, at)),
        });
        self.chunk.close_after = false;
    }

    /// The rest of a split, for the pump to put back at the head of the queue.
    pub(super) fn into_rest(self) -> Option<Chunk> {
        self.rest
    }
}

/// A non-negative millisecond attribute as a duration (negative counts as 0).
pub(crate) fn ms(value: i64) -> Duration {
    Duration::from_millis(value.max(0) as u64)
}

/// xorshift64*: toxicity rolls, jitter and slice sizes need no cryptographic quality.
pub(crate) struct Rng(u64);

static RNG_SEQ: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

impl Rng {
    /// Seeded from the clock and a process-wide sequence, so two pumps never share a stream.
    pub(crate) fn seeded() -> Rng {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let seed = nanos ^ RNG_SEQ.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        Rng(seed | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub(crate) fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// `base` moved by a uniform amount in [-spread, spread); `base` itself when spread <= 0.
    pub(crate) fn vary(&mut self, base: i64, spread: i64) -> i64 {
        if spread <= 0 {
            return base;
        }
        base + (self.next_u64() % (spread as u64 * 2)) as i64 - spread
    }
}

/// A toxic's per-connection state with its type erased; always the `State` of the toxic that made it.
pub(crate) type AnyState = Box<dyn Any + Send>;

/// [`Toxic`] with its type erased, so one chain holds toxics of every type. Implemented for
/// every [`Toxic`]; nothing else implements it.
pub(crate) trait DynToxic: fmt::Debug + Send + Sync {
    fn type_name(&self) -> &'static str;
    fn go_struct(&self) -> &'static str;
    fn closes_on_removal(&self) -> bool;
    fn attributes(&self) -> Vec<(&'static str, i64)>;
    fn set_attribute(&mut self, name: &str, value: i64);
    fn boxed_clone(&self) -> Box<dyn DynToxic>;
    fn start(&self, now: Instant, before: Option<AnyState>) -> AnyState;
    fn pipe(&self, state: &mut AnyState, head: &mut Head<'_>) -> Flow;
    fn deadline(&self, state: &AnyState) -> Option<(Instant, End)>;
    fn on_eof(&self, close: &mut Close);
}

const FOREIGN_STATE: &str = "a toxic is only handed the state it made";

impl<T: Toxic> DynToxic for T {
    fn type_name(&self) -> &'static str {
        T::TYPE
    }

    fn go_struct(&self) -> &'static str {
        T::GO_STRUCT
    }

    fn closes_on_removal(&self) -> bool {
        T::CLOSES_ON_REMOVAL
    }

    fn attributes(&self) -> Vec<(&'static str, i64)> {
        Toxic::attributes(self)
    }

    fn set_attribute(&mut self, name: &str, value: i64) {
        Toxic::set_attribute(self, name, value)
    }

    fn boxed_clone(&self) -> Box<dyn DynToxic> {
        Box::new(self.clone())
    }

    fn start(&self, now: Instant, before: Option<AnyState>) -> AnyState {
        let before = before.map(|b| *b.downcast::<T::State>().expect(FOREIGN_STATE));
        Box::new(Toxic::start(self, now, before))
    }

    fn pipe(&self, state: &mut AnyState, head: &mut Head<'_>) -> Flow {
        let state = state.downcast_mut::<T::State>().expect(FOREIGN_STATE);
        Toxic::pipe(self, state, head)
    }

    fn deadline(&self, state: &AnyState) -> Option<(Instant, End)> {
        let state = state.downcast_ref::<T::State>().expect(FOREIGN_STATE);
        Toxic::deadline(self, state)
    }

    fn on_eof(&self, close: &mut Close) {
        Toxic::on_eof(self, close)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_serves_each_toxiproxy_type_once() {
        let mut names: Vec<_> = REGISTRY.iter().map(|new| new().type_name()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "bandwidth",
                "latency",
                "limit_data",
                "noop",
                "reset_peer",
                "slicer",
                "slow_close",
                "timeout"
            ]
        );
        assert!(by_type("latency").is_some_and(|t| t.go_struct() == "LatencyToxic"));
        assert!(
            by_type("Latency").is_none(),
            "type names are case-sensitive"
        );
    }
}
