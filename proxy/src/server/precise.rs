//! Sub-millisecond sleeps: one timer thread waking futures at their deadline.
//!
//! tokio's timer wheel rounds every deadline up to the next whole millisecond (and epoll_wait
//! takes milliseconds), so a 50 ms latency toxic would land 1-2 ms late. A condvar wait takes
//! nanoseconds, so this thread wakes within the kernel's timer slack (~50 us).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// The timer thread never sleeps longer than this, so a lost notification cannot stall it.
const MAX_PARK: Duration = Duration::from_secs(1);

struct Timer {
    entries: Mutex<BTreeMap<(Instant, u64), Waker>>,
    cv: Condvar,
    seq: AtomicU64,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            entries: Mutex::new(BTreeMap::new()),
            cv: Condvar::new(),
            seq: AtomicU64::new(0),
        }));
        // Holds no sockets or ports; one per process, parked when there is nothing to wake.
        std::thread::Builder::new()
            .name("chaos-proxy-timer".into())
            .spawn(move || run(t))
            .expect("spawn timer thread");
        t
    })
}

fn run(t: &'static Timer) {
    let mut entries = t.entries.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let now = Instant::now();
        while let Some(entry) = entries.first_entry() {
            if entry.key().0 > now {
                break;
            }
            entry.remove().wake();
        }
        let park = entries
            .first_key_value()
            .map(|(k, _)| k.0.saturating_duration_since(now))
            .unwrap_or(MAX_PARK)
            .min(MAX_PARK);
        entries =
            t.cv.wait_timeout(entries, park)
                .unwrap_or_else(|p| p.into_inner())
                .0;
    }
}

/// Completes at `deadline` (within timer slack), never before.
pub(crate) struct PreciseSleep {
    deadline: Instant,
    key: Option<(Instant, u64)>,
}

pub(crate) fn sleep_until(deadline: Instant) -> PreciseSleep {
    PreciseSleep {
        deadline,
        key: None,
    }
}

impl Future for PreciseSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let t = timer();
        let key = match self.key {
            Some(k) => k,
            None => {
                let k = (self.deadline, t.seq.fetch_add(1, Ordering::Relaxed));
                self.key = Some(k);
                k
            }
        };
        let mut entries = t.entries.lock().unwrap_or_else(|p| p.into_inner());
        let earliest = entries.first_key_value().map(|(k, _)| *k);
        entries.insert(key, cx.waker().clone());
        drop(entries);
        if !matches!(earliest, Some(e) if e <= key) {
            t.cv.notify_one();
        }
        Poll::Pending
    }
}

impl Drop for PreciseSleep {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            timer()
                .entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&k);
        }
    }
}
