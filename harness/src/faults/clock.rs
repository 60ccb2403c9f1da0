//! The clock family: a box's or a database node's wall clock moved by an offset, run fast or slow, or strobed (libfaketime reads the offset from a file per target, which this file writes) and set back; never a monotonic clock, never another target's.
//!
//! libfaketime's own rate (`x1.05`) is not used: it counts from the process's start, and it
//! scales every sleep and timeout as well, the monotonic ones included. A rate or a strobe is
//! instead a ticker here that rewrites the offset every [`TICK`] (replaced whole, by rename, so
//! a reader never sees half a file): a clock 5% slow steps back 0.25 ms every 5 ms.

use super::{at_instant, Applied, Invoke, Nemesis};
use crate::faketime::{env_for, faketime_file, LIBFAKETIME};
use crate::scenario::Scenario;
use chaos_nemesis::{FaultKind, NemesisOp};
use serde_json::json;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a running or strobing clock's offset is rewritten, real time.
pub const TICK: Duration = Duration::from_millis(5);

/// The boxes and nodes a clock fault targets (every box for a role): only they run under
/// libfaketime.
pub fn clocked(scenario: &Scenario) -> BTreeSet<String> {
    let boxes = scenario.topology().boxes;
    scenario
        .faults
        .iter()
        .flat_map(|f| match &f.kind {
            // A role (`holder`) is a box known when its trigger fires: every box may be it.
            k @ FaultKind::Clock { .. } if k.role().is_some() => boxes.clone(),
            FaultKind::Clock { target, .. } => vec![target.clone()],
            _ => vec![],
        })
        .collect()
}

/// Refuses a scenario that moves a clock on a machine without libfaketime.
pub fn check_installed(scenario: &Scenario) -> anyhow::Result<()> {
    if !clocked(scenario).is_empty() && !Path::new(LIBFAKETIME).is_file() {
        anyhow::bail!(
            "the scenario moves a clock, which needs libfaketime: apt-get install -y faketime"
        );
    }
    Ok(())
}

/// Writes the offset file at +0 for every clocked database node, before the cluster starts:
/// the backends start a node under libfaketime when its file is there.
pub fn prepare_nodes(scenario: &Scenario, log_dir: &Path) -> anyhow::Result<()> {
    let nodes = scenario.topology().nodes;
    for n in clocked(scenario).iter().filter(|c| nodes.contains(c)) {
        write_offset(&faketime_file(log_dir, n), 0.0).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// A box under libfaketime at offset +0.
pub fn mover_env(log_dir: &Path, box_name: &str) -> anyhow::Result<Vec<(String, String)>> {
    let file = faketime_file(log_dir, box_name);
    write_offset(&file, 0.0).map_err(anyhow::Error::msg)?;
    Ok(env_for(&file))
}

/// The offset file replaced whole: written beside it, then renamed over it.
fn write_offset(path: &Path, offset_s: f64) -> Result<(), String> {
    let tmp = path.with_extension("faketime.next");
    std::fs::write(&tmp, format!("{offset_s:+.6}\n"))
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| format!("write {}: {e}", path.display()))
}

/// Writing a file is instant; the thread that writes it is woken ahead, to write at the
/// instant (tokio's timer alone wakes up to a millisecond late).
pub(super) fn lead() -> Duration {
    Duration::from_millis(10)
}

/// How a clock moves, in real seconds: a fixed offset, plus a rate's drift since the fault
/// began, the offset switched on and off by a strobe while it lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Motion {
    pub offset_s: f64,
    pub rate: f64,
    /// The strobe's half-period (the offset on for one, off for the next) and how long it lasts.
    pub strobe: Option<(f64, f64)>,
}

impl Motion {
    /// The offset `since_s` real seconds after the fault began.
    pub fn offset_at(&self, since_s: f64) -> f64 {
        let drift = (self.rate - 1.0) * since_s;
        let fixed = match self.strobe {
            Some((period, lasts)) if since_s < lasts => {
                if ((since_s / period) as u64).is_multiple_of(2) {
                    self.offset_s
                } else {
                    0.0
                }
            }
            // A strobe over: the clock stays where it was set back to.
            Some(_) => 0.0,
            None => self.offset_s,
        };
        fixed + drift
    }

    /// Whether it changes with time (a ticker rewrites it).
    pub fn moves(&self) -> bool {
        self.rate != 1.0 || self.strobe.is_some()
    }

    /// The motion from `at` to `end` (real Unix ns) as lines (start, end, base, c, b): the
    /// offset c + b * (t - base) seconds, a strobe's half-periods each a line of its own.
    fn lines(&self, at: i64, end: i64) -> Vec<Line> {
        let b = self.rate - 1.0;
        let Some((period, lasts)) = self.strobe else {
            return vec![(at, end, at, self.offset_s, b)];
        };
        let ns = |s: f64| (s * 1e9).min(i64::MAX as f64 / 2.0) as i64;
        let (p, stop) = (ns(period).max(1), at.saturating_add(ns(lasts)).min(end));
        let mut out = Vec::new();
        let mut k = 0i64;
        while at + k * p < stop && k < 1_000_000 {
            let c = if k % 2 == 0 { self.offset_s } else { 0.0 };
            out.push((at + k * p, (at + (k + 1) * p).min(stop), at, c, b));
            k += 1;
        }
        if stop < end {
            out.push((stop, end, at, 0.0, b));
        }
        out
    }
}

/// A clock fault's motion in real time (its offsets and periods are scenario ms).
fn motion(kind: &FaultKind, scale_ms: f64, fault_real_s: Option<f64>) -> Option<Motion> {
    let FaultKind::Clock {
        offset_ms,
        rate,
        strobe_ms,
        strobe_for_s,
        ..
    } = kind
    else {
        return None;
    };
    let real_s = |scenario_ms: f64| scenario_ms / 1000.0 * scale_ms / 1000.0;
    let strobe = strobe_ms.map(|p| {
        let lasts = strobe_for_s
            .map(|s| real_s(s * 1000.0))
            .or(fault_real_s)
            .unwrap_or(f64::INFINITY);
        (real_s(p as f64), lasts)
    });
    Some(Motion {
        offset_s: real_s(*offset_ms as f64),
        rate: rate.unwrap_or(1.0),
        strobe,
    })
}

/// The offset written at the instant; a rate or strobe then rewritten every tick until the
/// heal, which writes 0.
pub(super) async fn apply(
    n: &Nemesis,
    op: &NemesisOp,
    at: Instant,
    invoke: &Invoke,
) -> Result<Applied, String> {
    let target = op.kind.target();
    let scale = n.scenario.file.time_scale_ms;
    let fault_s = n
        .scenario
        .faults
        .get(op.fault)
        .and_then(|f| f.duration_ms)
        .map(|d| d as f64 / 1000.0 * scale / 1000.0);
    let m = motion(&op.kind, scale, fault_s)
        .ok_or_else(|| format!("{} is not a clock fault", op.kind.verb()))?;
    let path = faketime_file(&n.movers.log_dir(), target);
    // The ticker stopped for good before the new offset is written: an abort takes effect at
    // its next await, so a tick already writing would land after this write (once in 21 runs
    // a set-back clock was left fast); awaiting it waits that write out.
    let ticker = n.clocks.lock().unwrap().remove(&op.fault);
    if let Some(ticker) = ticker {
        ticker.abort();
        let _ = ticker.await;
    }
    let first = if op.heal { 0.0 } else { m.offset_at(0.0) };
    let file = path.clone();
    let (written, unix_ns, began) = at_instant(at, invoke, move || {
        let w = write_offset(&file, first);
        let unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        (w, unix_ns, Instant::now())
    })
    .await;
    written?;
    let mut log = n.clock_log.lock().unwrap();
    if op.heal {
        log.record(target, unix_ns, None);
        return Ok(Applied {
            extra: json!({ "offset_real_s": 0.0 }),
            landed: Some(began),
        });
    }
    log.record(target, unix_ns, Some(m));
    drop(log);
    if m.moves() {
        let file = path.clone();
        let ticker = tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let _ = write_offset(&file, m.offset_at(began.elapsed().as_secs_f64()));
            }
        });
        n.clocks.lock().unwrap().insert(op.fault, ticker);
    }
    let mut said = json!({ "offset_real_s": m.offset_s });
    if m.rate != 1.0 {
        said["rate"] = json!(m.rate);
    }
    if let Some((period, lasts)) = m.strobe {
        said["strobe_real_s"] = json!(period);
        if lasts.is_finite() {
            said["strobe_for_real_s"] = json!(lasts);
        }
    }
    Ok(Applied {
        extra: said,
        landed: Some(began),
    })
}

/// What the nemesis did to each target's clock, from which real instant (Unix ns): a motion,
/// or set back (`None`). A node's own timestamps (a claim's commit and expiry on the routing
/// db) are read back to real time through it: the lease's authority is the lock's clock, and
/// the checker judges in real time.
#[derive(Debug, Default)]
pub struct ClockLog {
    by_target: std::collections::HashMap<String, Vec<(i64, Option<Motion>)>>,
}

impl ClockLog {
    pub fn record(&mut self, target: &str, at_unix_ns: i64, motion: Option<Motion>) {
        let log = self.by_target.entry(target.to_string()).or_default();
        log.push((at_unix_ns, motion));
        log.sort_by_key(|(t, _)| *t);
    }

    pub fn moved(&self, target: &str) -> bool {
        self.by_target.contains_key(target)
    }

    /// The stretches `target`'s offset is a line in: (start, end, base, c, b), the offset
    /// c + b * (t - base) / 1e9 seconds from start to end (real Unix ns).
    fn pieces(&self, target: &str) -> Option<Vec<Line>> {
        let log = self.by_target.get(target)?;
        let mut pieces = vec![(i64::MIN, log[0].0, 0, 0.0, 0.0)];
        for (i, (at, m)) in log.iter().enumerate() {
            let end = log.get(i + 1).map_or(i64::MAX, |(t, _)| *t);
            match m {
                None => pieces.push((*at, end, *at, 0.0, 0.0)),
                Some(m) => pieces.extend(m.lines(*at, end)),
            }
        }
        Some(pieces)
    }

    /// The real instant `target` stamped `stamp_ns`: the first at or after `from_ns` (the
    /// stamp before it in commit order, less [`ORDER_SLACK_NS`]) at which its clock read that.
    /// A clock set back reads some stamps twice: commit order says which time it was.
    pub fn real_ns(&self, target: &str, from_ns: i64, stamp_ns: i64) -> i64 {
        let Some(pieces) = self.pieces(target) else {
            return stamp_ns;
        };
        let from = from_ns.saturating_sub(ORDER_SLACK_NS);
        for (start, end, base, c, b) in pieces {
            // stamp = r + (c + b (r - base) / 1e9) * 1e9, solved for r.
            let r = ((stamp_ns - base) as f64 - c * 1e9) / (1.0 + b) + base as f64;
            if r >= start.max(from) as f64 && r < end as f64 {
                return r.round() as i64;
            }
        }
        // A stamp the motion never read (a ticker behind under load): the first at or after.
        self.reached_ns(target, from_ns, stamp_ns)
    }

    /// The first real instant at or after `from_ns` at which `target`'s clock read `stamp_ns`
    /// or later: when a lease stamped to end then ended (unmoved, the stamp is the instant).
    pub fn reached_ns(&self, target: &str, from_ns: i64, stamp_ns: i64) -> i64 {
        let Some(pieces) = self.pieces(target) else {
            return stamp_ns;
        };
        let at_least = |r: i64, base: i64, c: f64, b: f64| {
            r as f64 + (c + b * (r - base) as f64 / 1e9) * 1e9 >= stamp_ns as f64
        };
        for (start, end, base, c, b) in pieces {
            let lo = start.max(from_ns);
            if lo >= end {
                continue;
            }
            if at_least(lo, base, c, b) {
                return lo;
            }
            let r = ((stamp_ns - base) as f64 - c * 1e9) / (1.0 + b) + base as f64;
            if r < end as f64 {
                return (r.ceil() as i64).max(lo);
            }
        }
        stamp_ns.max(from_ns)
    }
}

/// A stretch of real time (start, end, Unix ns) where a clock's offset is a line: c + b * (t -
/// base) / 1e9 seconds, as (start, end, base, c, b).
type Line = (i64, i64, i64, f64, f64);

/// How far a commit may come before the one listed ahead of it (rows are listed by id, taken
/// before commit): 50 ms.
const ORDER_SLACK_NS: i64 = 50_000_000;

/// The audit's stamps of clocked nodes read back to real time: the routing db's claim changes
/// (each commit, in commit order, and its expiry from its commit on), a shard's writes.
pub fn real_audit(log: &ClockLog, audit: &mut chaos_history::Audit) {
    if log.moved("routing") {
        let mut from = 0;
        for c in &mut audit.claim_changes {
            c.commit_unix_ns = log.real_ns("routing", from, c.commit_unix_ns);
            from = c.commit_unix_ns;
            c.expires_unix_ns = log.reached_ns("routing", from, c.expires_unix_ns);
        }
    }
    let mut from: std::collections::HashMap<String, i64> = Default::default();
    for w in &mut audit.shard_writes {
        if log.moved(&w.shard) {
            let f = from.entry(w.shard.clone()).or_default();
            w.commit_unix_ns = log.real_ns(&w.shard, *f, w.commit_unix_ns);
            *f = w.commit_unix_ns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_drifts_from_the_fault_s_start_and_a_strobe_flips_then_ends() {
        let slow = Motion {
            offset_s: 0.0,
            rate: 0.95,
            strobe: None,
        };
        assert!((slow.offset_at(10.0) + 0.5).abs() < 1e-9);
        assert!(slow.moves());
        let strobe = Motion {
            offset_s: 2.0,
            rate: 1.0,
            strobe: Some((0.1, 1.0)),
        };
        assert_eq!(strobe.offset_at(0.05), 2.0);
        assert_eq!(strobe.offset_at(0.15), 0.0);
        assert_eq!(strobe.offset_at(0.25), 2.0);
        assert_eq!(strobe.offset_at(1.5), 0.0);
        let fixed = Motion {
            offset_s: -3.0,
            rate: 1.0,
            strobe: None,
        };
        assert_eq!(fixed.offset_at(100.0), -3.0);
        assert!(!fixed.moves());
    }

    #[test]
    fn scenario_ms_become_real_seconds_at_the_scale() {
        let kind = FaultKind::Clock {
            target: "routing".into(),
            offset_ms: 5_000,
            rate: Some(2.0),
            strobe_ms: Some(1_000),
            strobe_for_s: None,
        };
        // 20 real ms a scenario second; the fault lasts 10 scenario s = 0.2 real s.
        let m = motion(&kind, 20.0, Some(0.2)).unwrap();
        assert!((m.offset_s - 0.1).abs() < 1e-9);
        assert_eq!(m.rate, 2.0);
        let (period, lasts) = m.strobe.unwrap();
        assert!((period - 0.02).abs() < 1e-9 && (lasts - 0.2).abs() < 1e-9);
    }

    #[test]
    fn a_fast_lock_s_stamps_read_back_to_the_real_instants() {
        let mut log = ClockLog::default();
        let s = 1_000_000_000i64;
        // From 100 s the lock's clock runs twice as fast; set back at 110 s.
        let fast = Motion {
            offset_s: 0.0,
            rate: 2.0,
            strobe: None,
        };
        log.record("routing", 100 * s, Some(fast));
        log.record("routing", 110 * s, None);
        assert_eq!(log.real_ns("routing", 0, 50 * s), 50 * s);
        // At real 104 s it read 108 s.
        assert_eq!(log.real_ns("routing", 0, 108 * s), 104 * s);
        // A lease to 118 (lock time) granted at real 104 ended at real 109 s.
        assert_eq!(log.reached_ns("routing", 104 * s, 118 * s), 109 * s);
        // Set back at 110 s (it read 120 s): a stamp of 115 s, read at real 107.5 s, is read
        // again at real 115 s; a commit after one of real 109.9 s was the second.
        assert_eq!(log.real_ns("routing", 0, 115 * s), 107 * s + s / 2);
        assert_eq!(
            log.real_ns("routing", 109 * s + 9 * s / 10, 115 * s),
            115 * s
        );
        // An expiry of 119 s granted at real 109 s: reached at 109.5 s (set back after).
        assert_eq!(log.reached_ns("routing", 109 * s, 119 * s), 109 * s + s / 2);
        assert_eq!(log.real_ns("shard1", 0, 7), 7);
    }

    #[test]
    fn a_strobed_clock_reads_back_by_its_half_periods() {
        let mut log = ClockLog::default();
        let s = 1_000_000_000i64;
        // +10 s for the first 2 s, none for the next 2, ... for 8 s.
        let strobe = Motion {
            offset_s: 10.0,
            rate: 1.0,
            strobe: Some((2.0, 8.0)),
        };
        log.record("box-1", 100 * s, Some(strobe));
        assert_eq!(log.real_ns("box-1", 0, 111 * s), 101 * s);
        // After its first half-period it reads real time until 104 s, then 10 s ahead again.
        assert_eq!(log.real_ns("box-1", 102 * s, 103 * s), 103 * s);
        assert_eq!(
            log.real_ns("box-1", 102 * s, 114 * s + s / 2),
            104 * s + s / 2
        );
        assert_eq!(log.real_ns("box-1", 108 * s, 109 * s), 109 * s);
    }
}
