//! When the forwarding threads ask for real-time priority: while a tap listens to some proxy
//! (a trigger's moment is the product's claim), and not otherwise.
//!
//! A SCHED_FIFO thread runs the moment it is runnable, so a delayed chunk leaves at its
//! instant and a listener sees bytes at once on a loaded machine; but it is also woken for
//! every single chunk (a normal thread is often woken for several) and preempts the client
//! and the server it forwards for: with no toxic, the real-time workers cost twice the CPU
//! per Postgres round trip with eight clients (33 against 14 us). So the workers run as
//! normal threads while nobody listens, and are raised before the API answers the change
//! that brings the first listener. A toxic does not raise them: a delayed chunk leaves on
//! its own timer, and raised threads made a latency toxic's tail worse, not better (see
//! `Tuning::timed`). The API's own thread is real-time throughout: a fault's request is read
//! the moment it lands. Chains with toxics are still counted, for the day a toxic needs it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The forwarding threads of a server on threads of its own, as they start.
#[derive(Default)]
pub(crate) struct Workers {
    inner: Mutex<WorkersInner>,
}

#[derive(Default)]
struct WorkersInner {
    tids: Vec<libc::pid_t>,
    raised: bool,
}

impl Workers {
    /// Called on each forwarding thread as it starts: it follows the current state.
    pub(crate) fn register_current_thread(&self) {
        // SAFETY: plain syscall, no arguments.
        let tid = unsafe { libc::gettid() };
        let mut w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        w.tids.push(tid);
        if w.raised {
            crate::realtime::raise_thread(tid);
        }
    }

    /// Called on each forwarding thread as it ends (the runtime's blocking threads come and
    /// go): its id may be another process's next.
    pub(crate) fn unregister_current_thread(&self) {
        // SAFETY: plain syscall, no arguments.
        let tid = unsafe { libc::gettid() };
        let mut w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        w.tids.retain(|&t| t != tid);
    }

    /// Raise or lower every worker to what `timed` says, read under the lock: of two changes
    /// at once, the later one's count decides.
    fn follow(&self, timed: impl Fn() -> bool) {
        let mut w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let raised = timed();
        if w.raised == raised {
            return;
        }
        w.raised = raised;
        for &tid in &w.tids {
            if raised {
                crate::realtime::raise_thread(tid);
            } else {
                crate::realtime::lower_thread(tid);
            }
        }
    }
}

/// What the server has that is timed, and the workers that follow it (none for a server on
/// its caller's runtime, whose threads are the caller's business).
#[derive(Default)]
pub(crate) struct Tuning {
    /// Chains (a proxy's direction) with at least one toxic.
    toxic_chains: AtomicUsize,
    /// Tap listeners, over every proxy.
    listeners: AtomicUsize,
    workers: OnceLock<Arc<Workers>>,
}

impl Tuning {
    pub(crate) fn with_workers(workers: Option<Arc<Workers>>) -> Tuning {
        let t = Tuning::default();
        if let Some(w) = workers {
            let _ = t.workers.set(w);
        }
        t
    }

    /// A chain gained its first toxic (`true`) or lost its last.
    pub(crate) fn toxic_chain(&self, has_toxics: bool) {
        Self::count(&self.toxic_chains, has_toxics);
        self.apply();
    }

    /// A tap listener subscribed (`true`) or went.
    pub(crate) fn listener(&self, added: bool) {
        Self::count(&self.listeners, added);
        self.apply();
    }

    fn count(n: &AtomicUsize, up: bool) {
        if up {
            n.fetch_add(1, Ordering::AcqRel);
        } else {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Whether the forwarding threads should be real-time now: while a tap listens (a
    /// trigger must see the bytes the moment they pass). Not for a toxic: measured with a
    /// 50 ms latency toxic on Postgres round trips, forwarding threads raised when the first
    /// toxic arrived were late by p99 4.0 ms (stdev 0.48 ms), normal ones by p99 0.8 ms
    /// (stdev 0.24 ms) in the same run (`chaos bench --what proxy`, docs/figures.md). The
    /// toxic's own timer wakes the pump either way; a fault's change is the API thread's,
    /// which stays real-time.
    pub(crate) fn timed(&self) -> bool {
        self.listeners.load(Ordering::Acquire) > 0
    }

    fn apply(&self) {
        if let Some(w) = self.workers.get() {
            w.follow(|| self.timed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_while_a_tap_listens_not_for_a_toxic() {
        let t = Tuning::with_workers(None);
        assert!(!t.timed());
        t.toxic_chain(true);
        assert!(!t.timed(), "a toxic alone leaves the threads normal");
        t.listener(true);
        t.toxic_chain(false);
        assert!(t.timed(), "a listener is left");
        t.listener(false);
        assert!(!t.timed());
    }

    #[test]
    fn workers_follow_and_forget_ended_threads() {
        let w = Arc::new(Workers::default());
        let t = Tuning::with_workers(Some(w.clone()));
        let registry = w.clone();
        std::thread::spawn(move || {
            registry.register_current_thread();
            registry.unregister_current_thread();
        })
        .join()
        .unwrap();
        assert!(w.inner.lock().unwrap().tids.is_empty());
        t.listener(true);
        assert!(w.inner.lock().unwrap().raised);
        t.listener(false);
        assert!(!w.inner.lock().unwrap().raised);
    }
}
