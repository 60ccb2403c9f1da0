//! Whether a mover is too slow for its scenario's time scale: its copies, at p50, against the copy time the scenario allows (`copy_s`), with the `--time-scale-ms` that would fit it. A sh+psql mover spends real milliseconds starting processes whatever the scale; at 10 or 20 real ms per scenario second those are scenario seconds, and a run cut short by its time limit then says nothing about the lease.

use crate::latency::LatencyRow;
use chaos_history::verb;
use chaos_history::{RealMs, RunMeta, ScenarioMs};

/// Scales suggested, real ms per scenario second.
const NICE_SCALES_MS: [f64; 8] = [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0];

/// A mover slower than its scenario allows.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    /// What was timed: the boxes' copies, or (when no copy was even begun) their claim calls.
    pub what: Timed,
    /// Their p50, scenario ms.
    pub p50_ms: ScenarioMs<f64>,
    /// What the scenario allows them, scenario ms: a copy `[lease] copy_s`; a claim call half
    /// the lease (a holder must renew well inside it).
    pub allowed_ms: ScenarioMs,
    /// The run's scale and the one suggested, real ms per scenario second.
    pub scale_ms: RealMs<f64>,
    pub suggest_scale_ms: RealMs<f64>,
}

/// What a pace was measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timed {
    Copies,
    ClaimCalls,
}

impl Pace {
    /// One line for a person: what was measured, what was allowed, what to type.
    pub fn line(&self) -> String {
        let (what, allows) = match self.what {
            Timed::Copies => ("copies", "the scenario allows"),
            Timed::ClaimCalls => ("claim calls (no copy completed)", "half the lease is"),
        };
        format!(
            "{what} took {:.1} s at p50 where {allows} {:.0} s (at {} real ms per scenario second): the mover is too slow for this scale; try --time-scale-ms {}",
            self.p50_ms / 1000.0,
            self.allowed_ms as f64 / 1000.0,
            self.scale_ms,
            self.suggest_scale_ms
        )
    }
}

/// The boxes' copies against the scenario's copy time (or, in a run where no copy completed,
/// their claim calls against half the lease): `Some` when they took more than half as
/// long again at p50, or longer at all in a run its time limit cut short.
pub fn pace(meta: &RunMeta, latency: &[LatencyRow]) -> Option<Pace> {
    let boxes = |f: &str| {
        latency
            .iter()
            .find(|r| r.class == "box" && r.f == f && r.count > 0)
    };
    let (what, p50_ms, allowed_ms) = match boxes(verb::COPY) {
        Some(copies) => (Timed::Copies, copies.p50_ms, meta.copy_ms),
        // No copy completed (none begun, or each cut short): the claim calls are timed.
        None => {
            let slowest = [verb::ACQUIRE, verb::RENEW]
                .iter()
                .filter_map(|f| boxes(f))
                .map(|r| r.p50_ms)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))?;
            (Timed::ClaimCalls, slowest, meta.lease_ms / 2)
        }
    };
    if allowed_ms <= 0 {
        return None;
    }
    let cut_short = !meta.completed;
    let slow = p50_ms > 1.5 * allowed_ms as f64 || (cut_short && p50_ms > allowed_ms as f64);
    if !slow {
        return None;
    }
    let scale_ms = meta.clock.real_ns_per_scenario_s as f64 / 1e6;
    // A call costs the same real time at any scale: the scale that makes it half the
    // allowed time in scenario time.
    let needed = scale_ms * p50_ms / allowed_ms as f64 * 2.0;
    let suggest_scale_ms = NICE_SCALES_MS
        .iter()
        .copied()
        .find(|s| *s >= needed && *s > scale_ms)
        .unwrap_or(needed.ceil());
    Some(Pace {
        what,
        p50_ms,
        allowed_ms,
        scale_ms,
        suggest_scale_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(p50_ms: f64) -> LatencyRow {
        named("copy", p50_ms)
    }

    fn named(f: &str, p50_ms: f64) -> LatencyRow {
        LatencyRow {
            f: f.into(),
            class: "box".into(),
            count: 40,
            ok: 40,
            fail: 0,
            info: 0,
            open: 0,
            p50_ms,
            p90_ms: p50_ms,
            p99_ms: p50_ms,
            p999_ms: p50_ms,
            max_ms: p50_ms,
        }
    }

    /// Issue 33: the sh+psql mover on gc-pause at 20 real ms per scenario second copied in
    /// 9 s where the scenario allows 5 s, and the run was cut short: `unknown`, and nothing
    /// said why.
    #[test]
    fn a_slow_mover_is_told_the_scale_that_fits_it() {
        let mut meta = crate::demo::demo_input().meta;
        meta.copy_ms = 5_000;
        meta.clock.real_ns_per_scenario_s = 20_000_000;
        let p = pace(&meta, &[row(9_000.0)]).expect("too slow");
        assert_eq!(p.suggest_scale_ms, 100.0);
        assert_eq!(
            p.line(),
            "copies took 9.0 s at p50 where the scenario allows 5 s (at 20 real ms per scenario second): the mover is too slow for this scale; try --time-scale-ms 100"
        );
        assert_eq!(pace(&meta, &[row(5_200.0)]), None, "on pace");
        meta.completed = false;
        assert!(
            pace(&meta, &[row(5_200.0)]).is_some(),
            "cut short and slower than allowed"
        );
    }

    /// Issue 33, again: at 2 real ms per scenario second a psql mover on a loaded machine
    /// completed no copy (its claim calls alone took longer than the lease), and the run said
    /// nothing of its pace.
    #[test]
    fn a_mover_that_completed_no_copy_is_timed_on_its_claim_calls() {
        let mut meta = crate::demo::demo_input().meta;
        meta.lease_ms = 10_000;
        meta.completed = false;
        meta.clock.real_ns_per_scenario_s = 2_000_000;
        let p = pace(
            &meta,
            &[named("acquire", 15_000.0), named("renew", 9_000.0)],
        )
        .expect("too slow");
        assert_eq!(p.what, Timed::ClaimCalls);
        assert_eq!(
            p.line(),
            "claim calls (no copy completed) took 15.0 s at p50 where half the lease is 5 s (at 2 real ms per scenario second): the mover is too slow for this scale; try --time-scale-ms 20"
        );
        let mut open_copy = named("copy", 0.0);
        (open_copy.count, open_copy.open) = (0, 1);
        assert_eq!(
            pace(&meta, &[named("acquire", 15_000.0), open_copy]).map(|p| p.what),
            Some(Timed::ClaimCalls),
            "a copy begun and cut short: the claim calls are timed (a sweep's run did this)"
        );
        assert_eq!(
            pace(&meta, &[named("acquire", 2_000.0)]),
            None,
            "claim calls well inside the lease"
        );
    }
}
