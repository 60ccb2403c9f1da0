//! The mover's own stalls: a short timer loop on the mover's runtime records how late each wakeup fires, reported as a history `info stalls` line every period and at exit.
//!
//! A lease is kept by the holder's own timers; a process that is paused,
//! starved of CPU or blocked in its own work fires them late. Nobody in the
//! seed had that distribution; this measures it where the mover's timers
//! live (its tokio runtime), so a blocked runtime counts as well as an
//! OS-level stall. Tokio's timer wheel has 1 ms ticks, so lateness under
//! about 1,000 µs is the timer's resolution, not a stall.

use super::history::History;
use chaos_history::verb;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long each probe sleeps (real time).
pub const TICK: Duration = Duration::from_millis(1);

/// Largest lateness recorded exactly: an hour, in µs (anything above is clamped).
const MAX_US: u64 = 3_600_000_000;

/// The running probe; `finish` prints the last line.
pub struct Stalls {
    hist: Arc<Mutex<Histogram<u64>>>,
    task: tokio::task::JoinHandle<()>,
    h: History,
}

/// A fresh histogram of lateness in µs, 3 significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("1 µs to an hour at 3 figures is valid")
}

/// The history value for a histogram: `{p50_us, p99_us, p999_us, max_us, samples}` (+ `final`).
pub fn stall_value(hist: &Histogram<u64>, last: bool) -> Value {
    let q = |quantile: f64| {
        if hist.is_empty() {
            0
        } else {
            // hdrhistogram reports a bucket's top; never claim more than the true max.
            hist.value_at_quantile(quantile).min(hist.max())
        }
    };
    json!({
        "p50_us": q(0.5),
        "p99_us": q(0.99),
        "p999_us": q(0.999),
        "max_us": hist.max(),
        "samples": hist.len(),
        "final": last,
    })
}

impl Stalls {
    /// Start the probe on the current runtime; a line every `period` (real time).
    pub fn start(h: History, period: Duration) -> Stalls {
        let hist = Arc::new(Mutex::new(new_histogram()));
        let shared = hist.clone();
        let task = tokio::spawn(async move {
            let mut next = Instant::now() + TICK;
            let mut last_line = Instant::now();
            loop {
                tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
                let now = Instant::now();
                let late_us = now.saturating_duration_since(next).as_micros() as u64;
                let mut hist = shared.lock().unwrap();
                hist.saturating_record(late_us.min(MAX_US));
                // Measured from when it woke, so a long stall is one sample, not a burst of catch-ups.
                next = now + TICK;
                if now.duration_since(last_line) >= period {
                    h.info(verb::STALLS, stall_value(&hist, false));
                    last_line = now;
                }
            }
        });
        Stalls { hist, task, h }
    }

    /// Stop the probe and print the process's whole distribution.
    pub fn finish(self) {
        self.task.abort();
        let hist = self.hist.lock().unwrap();
        self.h.info(verb::STALLS, stall_value(&hist, true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_names_the_percentiles_in_microseconds() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v).unwrap();
        }
        h.record(250_000).unwrap(); // one 250 ms stall
        let v = stall_value(&h, true);
        assert_eq!(v["samples"], 1001);
        let p50 = v["p50_us"].as_u64().unwrap();
        assert!((495..=505).contains(&p50), "p50 {p50}");
        let p999 = v["p999_us"].as_u64().unwrap();
        assert!((995..=1001).contains(&p999), "p99.9 {p999}");
        let max = v["max_us"].as_u64().unwrap();
        assert!((249_000..=250_200).contains(&max), "max {max}");
        assert_eq!(v["final"], true);
    }

    #[test]
    fn empty_histogram_reports_zeros() {
        let v = stall_value(&new_histogram(), false);
        assert_eq!(
            (v["samples"].as_u64(), v["max_us"].as_u64()),
            (Some(0), Some(0))
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_blocked_runtime_shows_as_a_stall() {
        let s = Stalls::start(History, Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Block the only runtime thread for 30 ms: the probe cannot fire meanwhile.
        std::thread::sleep(Duration::from_millis(30));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let max = s.hist.lock().unwrap().max();
        s.finish();
        assert!(
            max >= 25_000,
            "a 30 ms block must show as a stall of about 30,000 µs, got {max}"
        );
    }
}
