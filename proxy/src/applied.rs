//! When a change took effect in the proxy: its API stamps every changing answer with the
//! server's monotonic clock, read as the handler returns (`x-chaos-applied-mono-ns`), and a
//! held client reads it back as an instant of its own. The proxy and the harness share a
//! kernel (in-process, or a container on this host's engine) and so one monotonic clock; a
//! stamp that does not fall between the change's release and its answer (another host's
//! clock, or no stamp: a real Toxiproxy) is not believed, and the answer's arrival stands.

use std::time::{Duration, Instant};

/// The answer header: the server's CLOCK_MONOTONIC in ns when the change was applied.
pub const HEADER: &str = "x-chaos-applied-mono-ns";

/// This host's CLOCK_MONOTONIC in ns (the clock `Instant` reads on Linux).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The stamp `ns` as an instant of this process, if it lies between `released` (the change
/// sent) and `answered` (its answer read); else None.
///
/// `Instant` is CLOCK_MONOTONIC too, but opaque: the clock is read between two of its
/// readings, and the stamp placed in the bracket they give. Read once beside one `Instant`,
/// a preemption between the two reads moved the stamp by its length, out of a window of
/// microseconds (a unit test on a loaded fresh clone, 2026-12-07); now it widens the bracket,
/// and the instant is its middle, kept within the window.
pub fn instant_of(ns: u64, released: Instant, answered: Instant) -> Option<Instant> {
    let before = Instant::now();
    let mono = now_ns();
    let after = Instant::now();
    let ago = Duration::from_nanos(mono.checked_sub(ns)?);
    let (lo, hi) = (before.checked_sub(ago)?, after.checked_sub(ago)?);
    if hi < released || lo > answered {
        return None;
    }
    Some((lo + (hi - lo) / 2).clamp(released, answered))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_taken_here_between_release_and_answer_is_believed() {
        let released = Instant::now();
        let ns = now_ns();
        let answered = Instant::now();
        let at = instant_of(ns, released, answered).expect("believed");
        assert!(at >= released && at <= answered);
    }

    #[test]
    fn a_stamp_outside_the_window_is_not() {
        let released = Instant::now();
        let answered = Instant::now();
        // Another host's clock: an hour ahead, or a minute behind.
        assert_eq!(
            instant_of(now_ns() + 3_600_000_000_000, released, answered),
            None
        );
        let before = now_ns() - 60_000_000_000;
        assert_eq!(instant_of(before, released, answered), None);
    }
}
